//! The lanes under the timeline of a run the controllers drove: per seed, its conditions and
//! the objects its controller wrote.

use super::{esc, label_at, Frame, H, LEFT, RIGHT, W};
use std::fmt::Write;

/// Height of the condition lanes.
pub(super) const LANES_H: f64 = 80.0;

/// One lane per seed under the picture: a dot per condition change (green True, amber
/// Progressing, red otherwise; labelled when True) and a grey tick per object the controller
/// wrote (hover for what).
pub(super) fn lanes(s: &mut String, c: &crate::report::Control, f: &Frame) {
    for (i, seed) in ["source", "destination"].iter().enumerate() {
        let yy = H + 18.0 + 32.0 * i as f64;
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" x2="{}" y1="{yy:.1}" y2="{yy:.1}" stroke="#ccc"/><text x="4" y="{:.1}">{seed} seed</text>"##,
            W - RIGHT,
            yy + 4.0
        );
        let prefix = format!("{seed}: ");
        for e in c.objects.iter().filter(|e| e.what.starts_with(&prefix)) {
            let xx = f.x(e.t_ms);
            let _ = writeln!(
                s,
                r##"<line x1="{xx:.1}" x2="{xx:.1}" y1="{:.1}" y2="{:.1}" stroke="#777"><title>{:.1} s: {}</title></line>"##,
                yy - 6.0,
                yy + 6.0,
                e.t_ms / 1000.0,
                esc(&e.what)
            );
        }
        let tag = format!("condition ({seed}): ");
        let mut row = 0;
        for e in c.conditions.iter().filter(|e| e.what.starts_with(&tag)) {
            let what = e.what.trim_start_matches(&tag);
            let color = if what.contains(" True ") {
                "#2a9d3a"
            } else if what.contains(" Progressing ") {
                "#e08a00"
            } else {
                "#d00"
            };
            let xx = f.x(e.t_ms);
            let _ = writeln!(
                s,
                r##"<circle cx="{xx:.1}" cy="{yy:.1}" r="3" fill="{color}"><title>{:.1} s: {}</title></circle>"##,
                e.t_ms / 1000.0,
                esc(what)
            );
            if what.contains(" True ") && !what.starts_with("ObjectsApplied") {
                let name = what.split(' ').next().unwrap_or(what);
                let (lx, anchor) = label_at(xx);
                let _ = writeln!(
                    s,
                    r##"<text x="{lx:.1}" y="{:.1}" font-size="9" fill="#2a7d3a" text-anchor="{anchor}">{}</text>"##,
                    yy + 14.0 + 9.0 * f64::from(row % 2),
                    esc(name)
                );
                row += 1;
            }
        }
    }
}
