//! The latency timeline as a hand-written SVG: a headline of what the shoot's API clients saw,
//! one square per shoot API request and one dot per etcd request (log scale), failures in red,
//! phase boundaries as dashed lines; below it a band with one dot per webhook call
//! through the tunnel (by the tunnel server it went through) and the tunnel's handover steps;
//! the member count along the bottom; under it, for a run on real seeds, a lane per step.

mod lanes;
mod members;
mod plot;
mod steps;

use crate::report::Report;

pub(super) const W: f64 = 1000.0;
pub(super) const H: f64 = 656.0;
pub(super) const LEFT: f64 = 60.0;
pub(super) const RIGHT: f64 = 20.0;
pub(super) const TOP: f64 = 56.0;
pub(super) const PLOT_H: f64 = 300.0;
/// etcd latency axis: 0.1 ms .. 10 s, log scale.
pub(super) const LOG_MIN: f64 = -1.0;
pub(super) const LOG_MAX: f64 = 4.0;
/// The webhook band under the etcd plot: 10 ms .. 10 s, log scale (a call through the tunnel
/// takes a few round trips).
pub(super) const WEB_TOP: f64 = 401.0;
pub(super) const WEB_H: f64 = 140.0;
pub(super) const WEB_LOG_MIN: f64 = 1.0;
/// Shoot API requests (through kube-apiserver).
pub(super) const API: &str = "#e07000";
/// Colours of webhook calls by tunnel server.
pub(super) const VIA_SOURCE: &str = "#7b3fa0";
pub(super) const VIA_DESTINATION: &str = "#0a8a8a";

/// The picture's scales: time across (the whole run), latency up (log) in the etcd/API plot
/// and in the webhook band.
#[derive(Debug, Clone, Copy)]
struct Frame {
    /// The run's end, ms.
    end: f64,
}

impl Frame {
    fn x(&self, t: f64) -> f64 {
        LEFT + (t / self.end).clamp(0.0, 1.0) * (W - LEFT - RIGHT)
    }
    fn y(&self, ms: f64) -> f64 {
        log_y(ms, LOG_MIN, LOG_MAX, TOP, PLOT_H)
    }
    fn wy(&self, ms: f64) -> f64 {
        log_y(ms, WEB_LOG_MIN, LOG_MAX, WEB_TOP, WEB_H)
    }
}

/// Renders the report's timeline.
pub fn timeline(r: &Report) -> String {
    let f = Frame {
        end: r.phases.last().map(|p| p.end).unwrap_or(1.0).max(1.0),
    };
    // Runs the controllers drove get two lanes under the picture: each seed's conditions and
    // the objects its controller wrote.
    let control_h = if r.control.is_some() {
        lanes::LANES_H
    } else {
        0.0
    };
    // A run on real seeds gets a lane per migration step under that.
    let total_h = H + control_h + steps::height(r);
    let mut s = String::new();
    plot::header(&mut s, r, total_h);
    plot::axes(&mut s, &f);
    plot::phase_lines(&mut s, r, &f);
    plot::events(&mut s, r, &f);
    plot::webhook_calls(&mut s, r, &f);
    plot::requests(&mut s, r, &f);
    members::count(&mut s, r, &f);
    plot::legend(&mut s, &f);
    if let Some(c) = &r.control {
        lanes::lanes(&mut s, c, &f);
    }
    if !r.steps.is_empty() {
        steps::lanes(&mut s, r, &f, H + control_h);
    }
    s.push_str("</svg>\n");
    s
}

/// A log-scale y axis from 10^`min` to 10^`max` ms over `[top, top + height]`.
fn log_y(ms: f64, min: f64, max: f64, top: f64, height: f64) -> f64 {
    let l = ms.max(0.1).log10().clamp(min, max);
    top + height * (1.0 - (l - min) / (max - min))
}

pub(super) fn ms_label(ms: f64) -> String {
    if ms < 1.0 {
        format!("{ms} ms")
    } else if ms < 1000.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{:.0} s", ms / 1000.0)
    }
}

/// Where a label next to a vertical line at `xx` starts: to its right, or, in the right half of
/// the picture, ending at the line, so long labels are not cut off at the edge.
pub(super) fn label_at(xx: f64) -> (f64, &'static str) {
    if xx > W / 2.0 {
        (xx - 2.0, "end")
    } else {
        (xx + 2.0, "start")
    }
}

pub(super) fn esc(t: &str) -> String {
    t.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{Kind, Sample};
    use crate::report::*;
    use crate::webhook::Via;

    #[test]
    fn timeline_has_a_dot_per_request_and_a_line_per_phase() {
        let phase = |name: &str, start: f64, end: f64| Phase {
            name: name.into(),
            start,
            end,
            requests: 0,
            failed: 0,
            p50_ms: 0.0,
            p99_ms: 0.0,
            max_ms: 0.0,
            longest_write_gap_ms: 0.0,
        };
        let api_rec = crate::api::load::Recording {
            samples: [(true, 180.0), (false, 5200.0)]
                .map(|(ok, latency_ms)| crate::api::load::ApiSample {
                    op: crate::api::load::Op::Create,
                    object: "obj-1".into(),
                    start_ms: 12.0,
                    latency_ms,
                    via: "source",
                    ok,
                    attempts: 1,
                    error: (!ok).then(|| "etcdserver: request timed out".into()),
                    server: Vec::new(),
                })
                .to_vec(),
            ..Default::default()
        };
        let r = Report {
            stand_ins: Vec::new(),
            control: None,
            quorum: Vec::new(),
            scenario: "a<b".into(),
            rtt_ms: 50.0,
            api: ApiReport::new(&api_rec, &Default::default(), 2, &[], &[]),
            objects: Objects::check(&api_rec, &[]),
            control_plane: ControlPlane {
                kube_apiserver: "v1.34.4".into(),
                destination_ready_ms: None,
                kube_apiservers: String::new(),
            },
            fault: None,
            etcd: Etcd {
                requests: 2,
                failed: 1,
                writes: 2,
                reads: 0,
            },
            webhook: Webhook {
                requests: 0,
                failed: 0,
                via_source: 0,
                via_destination: 0,
                phases: Vec::new(),
                note: None,
                calls: [(Via::Source, true), (Via::Destination, false)]
                    .map(|(via, ok)| crate::webhook::Call {
                        start_ms: 30.0,
                        latency_ms: 120.0,
                        via,
                        ok,
                        error: (!ok).then(|| "reset <x>".into()),
                    })
                    .to_vec(),
            },
            writes: Writes {
                acknowledged: 1,
                missing: 0,
                longest_gap_ms: 0.0,
            },
            members: Members {
                initial: vec![],
                r#final: vec![],
                timeline: vec![Membership {
                    t_ms: 0.0,
                    members: vec!["a".into()],
                }],
                final_peer_urls: Default::default(),
                rolled: vec![],
            },
            phases: vec![phase("one", 0.0, 50.0), phase("two", 50.0, 100.0)],
            events: vec![
                Event {
                    t_ms: 20.0,
                    what: "link cut for 3000 ms".into(),
                },
                Event {
                    t_ms: 25.0,
                    what: "tunnel: temporary agent joined".into(),
                },
            ],
            join_ms: None,
            violations: vec![],
            steps: Vec::new(),
            comparison: None,
            samples: [(true, 3.0), (false, 6000.0)]
                .map(|(ok, latency_ms)| Sample {
                    kind: Kind::Write,
                    start_ms: 10.0,
                    latency_ms,
                    ok,
                    attempts: 1,
                    error: None,
                })
                .to_vec(),
        };
        let svg = timeline(&r);
        // Two shoot API requests, one failed, and the headline counts them.
        assert_eq!(svg.matches("<rect x=").count(), 2);
        assert_eq!(svg.matches(r##"fill="#d00"><title>Create"##).count(), 1);
        assert!(svg.contains("kube-apiserver v1.34.4: 2 API requests, 1 failed"));
        // Two etcd requests and two webhook calls, one of each failed.
        assert_eq!(svg.matches("<circle").count(), 4);
        assert_eq!(svg.matches(r##"fill="#d00" fill-opacity"##).count(), 2);
        assert_eq!(
            svg.matches(&format!(r#"fill="{VIA_SOURCE}" fill-opacity"#))
                .count(),
            1
        );
        assert!(svg.contains(">temporary agent joined<"));
        assert!(svg.contains("reset &lt;x&gt;"));
        assert!(svg.contains(">one<") && svg.contains(">two<"));
        assert!(svg.contains(">link cut for 3000 ms<"));
        assert!(svg.contains("a&lt;b") && svg.trim_end().ends_with("</svg>"));
    }
}
