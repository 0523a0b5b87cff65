//! The migration's steps as lanes under the timeline (a run on real seeds,
//! `crate::report::real`): a bar per step from its start to its end, labelled with its
//! duration and the lab's for the same step; inside it a segment per part (what the step
//! waited on; hover for it, labelled where it fits); under the first lane of each step the
//! lab's duration as a thin grey bar from the same start.

use super::{esc, Frame, LEFT, W};
use crate::report::steps::Step;
use crate::report::Report;
use std::fmt::Write;

/// One lane's height, and the head above the lanes.
const LANE_H: f64 = 22.0;
const HEAD_H: f64 = 22.0;

/// Height of the lanes of `r`'s steps (0 without steps).
pub(super) fn height(r: &Report) -> f64 {
    if r.steps.is_empty() {
        0.0
    } else {
        HEAD_H + LANE_H * r.steps.len() as f64 + 8.0
    }
}

fn secs(ms: f64) -> String {
    format!("{:.1} s", ms / 1000.0)
}

/// The lanes, from `top` down.
pub(super) fn lanes(s: &mut String, r: &Report, f: &Frame, top: f64) {
    let note = r
        .comparison
        .as_ref()
        .map(|c| c.note.as_str())
        .unwrap_or_default();
    let _ = writeln!(
        s,
        r##"<text x="{LEFT}" y="{:.1}" font-size="12">steps (segments: where each one's time went; grey: the lab's duration of the step) — {}</text>"##,
        top + 14.0,
        esc(note)
    );
    let lab_of = |row: &str| {
        r.comparison
            .as_ref()?
            .rows
            .iter()
            .find(|c| c.step == row)?
            .lab_ms
    };
    let mut rows_drawn: Vec<&str> = Vec::new();
    for (i, step) in r.steps.iter().enumerate() {
        let yy = top + HEAD_H + LANE_H * i as f64;
        let (x0, x1) = (f.x(step.start_ms), f.x(step.end_ms));
        let name = esc(&step.name);
        let _ = writeln!(
            s,
            r##"<rect class="step" data-step="{name}" x="{x0:.1}" y="{yy:.1}" width="{:.1}" height="12" fill="#dbe7f7" stroke="#1f5fbf" stroke-width="0.6"><title>{name}: {:.1} s to {:.1} s</title></rect>"##,
            (x1 - x0).max(1.0),
            step.start_ms / 1000.0,
            step.end_ms / 1000.0
        );
        parts(s, step, f, yy);
        // The lab's duration once per step (row), under its first lane.
        let lab = lab_of(step.row());
        let first = !rows_drawn.contains(&step.row());
        rows_drawn.push(step.row());
        if let (Some(lab), true) = (lab, first) {
            let _ = writeln!(
                s,
                r##"<rect class="lab" x="{x0:.1}" y="{:.1}" width="{:.1}" height="3" fill="#999"><title>the lab: {}</title></rect>"##,
                yy + 14.0,
                (f.x(step.start_ms + lab) - x0).max(1.0),
                secs(lab)
            );
        }
        let mut label = format!("{} {}", step.name, secs(step.ms()));
        if let (Some(lab), true) = (lab, first) {
            let _ = write!(label, " (lab {})", secs(lab));
        }
        // To the right of the bar, or, past the picture's middle, ending at its start.
        let (lx, anchor) = if x1 < W / 2.0 {
            (x1 + 4.0, "start")
        } else {
            (x0 - 4.0, "end")
        };
        let _ = writeln!(
            s,
            r##"<text x="{lx:.1}" y="{:.1}" font-size="10" text-anchor="{anchor}">{}</text>"##,
            yy + 10.0,
            esc(&label)
        );
    }
}

/// The parts of `step` as segments of its bar, alternately shaded, labelled where they fit.
fn parts(s: &mut String, step: &Step, f: &Frame, yy: f64) {
    for (j, p) in step.parts.iter().enumerate() {
        let (x0, x1) = (f.x(p.start_ms), f.x(p.end_ms));
        let fill = if j % 2 == 0 { "#8fb3e0" } else { "#5b8fd1" };
        let what = esc(&p.what);
        let _ = writeln!(
            s,
            r##"<rect class="part" x="{x0:.1}" y="{:.1}" width="{:.1}" height="10" fill="{fill}"><title>{what}: {}</title></rect>"##,
            yy + 1.0,
            (x1 - x0).max(0.5),
            secs(p.end_ms - p.start_ms)
        );
        // About 5 px a character at this size.
        if x1 - x0 > 5.0 * p.what.len() as f64 + 4.0 {
            let _ = writeln!(
                s,
                r##"<text x="{:.1}" y="{:.1}" font-size="8" fill="white">{what}</text>"##,
                x0 + 2.0,
                yy + 9.0
            );
        }
    }
}
