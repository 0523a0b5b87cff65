//! The member count along the bottom of the timeline.

use super::{Frame, H};
use crate::report::Report;
use std::fmt::Write;

/// The member count as a step line under the plot (0..6 members), labelled where it changes.
pub(super) fn count(s: &mut String, r: &Report, f: &Frame) {
    let base = H - 25.0;
    let mut pts = String::new();
    let mut last = None;
    for m in &r.members.timeline {
        let yy = base - m.members.len() as f64 * 8.0;
        if let Some(prev) = last {
            let _ = write!(pts, "{:.1},{prev:.1} ", f.x(m.t_ms));
        }
        let _ = write!(pts, "{:.1},{yy:.1} ", f.x(m.t_ms));
        last = Some(yy);
    }
    if let Some(prev) = last {
        let _ = write!(pts, "{:.1},{prev:.1}", f.x(f.end));
    }
    let _ = writeln!(
        s,
        r##"<polyline points="{pts}" fill="none" stroke="#444" stroke-width="1.5"/><text x="4" y="{:.1}">members</text>"##,
        base - 20.0
    );
    // A count only where it changes: the timeline also records unchanged lists.
    // Counts closer than a label's width alternate between two lines (removals come in quick
    // succession); the picture has room for two.
    let (mut shown, mut last_x, mut row) = (None, f64::MIN, 0.0);
    for m in &r.members.timeline {
        if shown == Some(m.members.len()) {
            continue;
        }
        shown = Some(m.members.len());
        let xx = f.x(m.t_ms) + 2.0;
        row = if xx - last_x < 10.0 && row == 0.0 {
            10.0
        } else {
            0.0
        };
        last_x = xx;
        let _ = writeln!(
            s,
            r##"<text x="{xx:.1}" y="{:.1}" font-size="9" fill="#444">{}</text>"##,
            base + 12.0 + row,
            m.members.len()
        );
    }
}
