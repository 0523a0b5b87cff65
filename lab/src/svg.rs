//! The latency timeline as a hand-written SVG: a headline of what the shoot's API clients saw,
//! one square per shoot API request and one dot per etcd request (log scale), failures in red,
//! phase boundaries as dashed lines; below it a band with one dot per webhook call
//! through the tunnel (by the tunnel server it went through) and the tunnel's handover steps;
//! the member count along the bottom.

use crate::report::Report;
use crate::webhook::Via;
use std::fmt::Write;

const W: f64 = 1000.0;
const H: f64 = 656.0;
const LEFT: f64 = 60.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 56.0;
const PLOT_H: f64 = 300.0;
/// etcd latency axis: 0.1 ms .. 10 s, log scale.
const LOG_MIN: f64 = -1.0;
const LOG_MAX: f64 = 4.0;
/// The webhook band under the etcd plot: 10 ms .. 10 s, log scale (a call through the tunnel
/// takes a few round trips).
const WEB_TOP: f64 = 401.0;
const WEB_H: f64 = 140.0;
const WEB_LOG_MIN: f64 = 1.0;
/// Shoot API requests (through kube-apiserver).
const API: &str = "#e07000";
/// Colours of webhook calls by tunnel server.
const VIA_SOURCE: &str = "#7b3fa0";
const VIA_DESTINATION: &str = "#0a8a8a";

/// A log-scale y axis from 10^`min` to 10^`max` ms over `[top, top + height]`.
fn log_y(ms: f64, min: f64, max: f64, top: f64, height: f64) -> f64 {
    let l = ms.max(0.1).log10().clamp(min, max);
    top + height * (1.0 - (l - min) / (max - min))
}

fn ms_label(ms: f64) -> String {
    if ms < 1.0 {
        format!("{ms} ms")
    } else if ms < 1000.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{:.0} s", ms / 1000.0)
    }
}

/// Renders the report's timeline.
pub fn timeline(r: &Report) -> String {
    let end = r.phases.last().map(|p| p.end).unwrap_or(1.0).max(1.0);
    let x = |t: f64| LEFT + (t / end).clamp(0.0, 1.0) * (W - LEFT - RIGHT);
    let y = |ms: f64| log_y(ms, LOG_MIN, LOG_MAX, TOP, PLOT_H);
    let wy = |ms: f64| log_y(ms, WEB_LOG_MIN, LOG_MAX, WEB_TOP, WEB_H);
    // Runs the controllers drove get two lanes under the picture: each seed's conditions and
    // the objects its controller wrote.
    let total_h = if r.control.is_some() { H + LANES_H } else { H };
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{total_h}" font-family="sans-serif" font-size="11">
<rect width="{W}" height="{total_h}" fill="white"/>
<text x="{LEFT}" y="16" font-size="13">isthmus lab: {} — RTT {} ms — kube-apiserver {}: {} API requests, {} failed, worst {:.0} ms, longest write gap {:.0} ms — {} objects written, {} lost — webhook {} calls, {} failed</text>
<text x="{LEFT}" y="31" font-size="11" fill="dimgray">etcd (lab client): {} requests, {} failed, {} writes acknowledged, {} missing — webhook (lab caller through the tunnel): {} calls, {} failed</text>
"#,
        esc(&r.scenario),
        r.rtt_ms,
        esc(&r.control_plane.kube_apiserver),
        r.api.requests,
        r.api.failed,
        r.api.worst_ms,
        r.api.longest_write_gap_ms,
        r.objects.written,
        r.objects.missing,
        r.api.webhook.calls,
        r.api.webhook.failed,
        r.etcd.requests,
        r.etcd.failed,
        r.writes.acknowledged,
        r.writes.missing,
        r.webhook.requests,
        r.webhook.failed
    );
    for e in (LOG_MIN as i32)..=(LOG_MAX as i32) {
        let ms = 10f64.powi(e);
        let yy = y(ms);
        let label = ms_label(ms);
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" x2="{}" y1="{yy:.1}" y2="{yy:.1}" stroke="#ddd"/><text x="4" y="{:.1}">{label}</text>"##,
            W - RIGHT,
            yy + 4.0
        );
    }
    let yf = y(5000.0);
    let _ = writeln!(
        s,
        r##"<line x1="{LEFT}" x2="{}" y1="{yf:.1}" y2="{yf:.1}" stroke="#c00" stroke-dasharray="2,2"/><text x="{}" y="{:.1}" fill="#c00" text-anchor="end">5 s = failed</text>"##,
        W - RIGHT,
        W - RIGHT,
        yf - 3.0
    );
    let _ = writeln!(
        s,
        r##"<text x="{LEFT}" y="{:.1}" font-size="12">webhook calls through the tunnel (kube-apiserver → tunnel server → proxy → link → agent → webhook)</text>"##,
        WEB_TOP - 8.0
    );
    for e in (WEB_LOG_MIN as i32)..=(LOG_MAX as i32) {
        let ms = 10f64.powi(e);
        let yy = wy(ms);
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" x2="{}" y1="{yy:.1}" y2="{yy:.1}" stroke="#ddd"/><text x="4" y="{:.1}">{}</text>"##,
            W - RIGHT,
            yy + 4.0,
            ms_label(ms)
        );
    }
    for (i, p) in r.phases.iter().enumerate() {
        let xx = x(p.start);
        let ty = TOP - 6.0 + if i % 2 == 0 { 0.0 } else { 12.0 };
        let _ = writeln!(
            s,
            r##"<line x1="{xx:.1}" x2="{xx:.1}" y1="{TOP}" y2="{}" stroke="#888" stroke-dasharray="4,3"/><text x="{:.1}" y="{ty:.1}">{}</text>"##,
            WEB_TOP + WEB_H,
            xx + 2.0,
            esc(&p.name)
        );
    }
    // Events as thin orange ticks (hover shows what happened); the ones that change the
    // client's path or inject a fault get a label.
    // The controllers' objects and conditions have their lanes under the picture.
    let (tunnel, others): (Vec<_>, Vec<_>) = r
        .events
        .iter()
        .filter(|e| !e.what.starts_with("condition (") && !e.what.starts_with("controller wrote "))
        .partition(|e| e.what.starts_with("tunnel:"));
    for (i, e) in others.into_iter().enumerate() {
        let xx = x(e.t_ms);
        let _ = writeln!(
            s,
            r##"<line x1="{xx:.1}" x2="{xx:.1}" y1="{TOP}" y2="{}" stroke="#e08a00" stroke-width="0.8"><title>{:.1} s: {}</title></line>"##,
            TOP + PLOT_H,
            e.t_ms / 1000.0,
            esc(&e.what)
        );
        let stand_in = e.what.contains("stand-in");
        let notable = !stand_in
            && [
                "link",
                "proxy",
                "leader",
                "client",
                "abort",
                "kill",
                "restarted",
            ]
            .iter()
            .any(|k| e.what.contains(k));
        if notable {
            let ty = TOP + 12.0 + 11.0 * (i % 4) as f64;
            let (lx, anchor) = label_at(xx);
            let _ = writeln!(
                s,
                r##"<text x="{lx:.1}" y="{ty:.1}" font-size="9" fill="#b06a00" text-anchor="{anchor}">{}</text>"##,
                esc(&e.what)
            );
        }
    }
    // The tunnel's handover steps in the webhook band, labelled.
    for (i, e) in tunnel.into_iter().enumerate() {
        let xx = x(e.t_ms);
        let what = e.what.trim_start_matches("tunnel:").trim();
        let (lx, anchor) = label_at(xx);
        let _ = writeln!(
            s,
            r##"<line x1="{xx:.1}" x2="{xx:.1}" y1="{WEB_TOP}" y2="{}" stroke="{VIA_DESTINATION}" stroke-width="1.2"><title>{:.1} s: {}</title></line><text x="{lx:.1}" y="{:.1}" font-size="9" fill="#05605f" text-anchor="{anchor}">{}</text>"##,
            WEB_TOP + WEB_H,
            e.t_ms / 1000.0,
            esc(&e.what),
            WEB_TOP + 10.0 + 11.0 * (i % 4) as f64,
            esc(what)
        );
    }
    for c in &r.webhook.calls {
        let color = match (c.ok, c.via) {
            (false, _) => "#d00",
            (true, Via::Source) => VIA_SOURCE,
            (true, Via::Destination) => VIA_DESTINATION,
        };
        let title = c.error.as_deref().map(esc).unwrap_or_default();
        let _ = writeln!(
            s,
            r#"<circle cx="{:.1}" cy="{:.1}" r="1.6" fill="{color}" fill-opacity="0.6"><title>{:.0} ms {title}</title></circle>"#,
            x(c.start_ms),
            wy(c.latency_ms),
            c.latency_ms
        );
    }
    let _ = writeln!(
        s,
        r##"<text x="{LEFT}" y="{:.1}" fill="{VIA_SOURCE}">● via the source tunnel server</text><text x="{}" y="{:.1}" fill="{VIA_DESTINATION}">● via the destination tunnel server</text><text x="{}" y="{:.1}" fill="#d00">● failed</text>"##,
        WEB_TOP + WEB_H + 16.0,
        LEFT + 190.0,
        WEB_TOP + WEB_H + 16.0,
        LEFT + 400.0,
        WEB_TOP + WEB_H + 16.0,
    );
    for smp in &r.samples {
        let color = match (smp.ok, smp.kind) {
            (false, _) => "#d00",
            (true, crate::client::Kind::Write) => "#1f5fbf",
            (true, crate::client::Kind::Read) => "#2a9d3a",
        };
        let _ = writeln!(
            s,
            r#"<circle cx="{:.1}" cy="{:.1}" r="1.6" fill="{color}" fill-opacity="0.6"/>"#,
            x(smp.start_ms),
            y(smp.latency_ms)
        );
    }
    for a in &r.api.samples {
        let color = if a.ok { API } else { "#d00" };
        let title = a.error.as_deref().map(esc).unwrap_or_default();
        let _ = writeln!(
            s,
            r#"<rect x="{:.1}" y="{:.1}" width="3" height="3" fill="{color}"><title>{:?} via {} {:.0} ms {title}</title></rect>"#,
            x(a.start_ms) - 1.5,
            y(a.latency_ms) - 1.5,
            a.op,
            a.via,
            a.latency_ms
        );
    }
    // Member count as a step line under the plot (0..6 members).
    let base = H - 25.0;
    let mut pts = String::new();
    let mut last = None;
    for m in &r.members.timeline {
        let yy = base - m.members.len() as f64 * 8.0;
        if let Some(prev) = last {
            let _ = write!(pts, "{:.1},{prev:.1} ", x(m.t_ms));
        }
        let _ = write!(pts, "{:.1},{yy:.1} ", x(m.t_ms));
        last = Some(yy);
    }
    if let Some(prev) = last {
        let _ = write!(pts, "{:.1},{prev:.1}", x(end));
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
        let xx = x(m.t_ms) + 2.0;
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
    let _ = writeln!(
        s,
        r##"<text x="{LEFT}" y="{:.1}" fill="{API}">■ shoot API request</text><text x="{}" y="{:.1}" fill="#1f5fbf">● etcd write</text><text x="{}" y="{:.1}" fill="#2a9d3a">● etcd linearizable read</text><text x="{}" y="{:.1}" fill="#d00">failed</text><text x="{}" y="{:.1}">time →  ({:.0} s)</text>"##,
        TOP + PLOT_H + 16.0,
        LEFT + 120.0,
        TOP + PLOT_H + 16.0,
        LEFT + 210.0,
        TOP + PLOT_H + 16.0,
        LEFT + 370.0,
        TOP + PLOT_H + 16.0,
        W - 140.0,
        TOP + PLOT_H + 16.0,
        end / 1000.0
    );
    if let Some(c) = &r.control {
        lanes(&mut s, c, &x);
    }
    s.push_str("</svg>\n");
    s
}

/// Height of the condition lanes.
const LANES_H: f64 = 80.0;

/// One lane per seed under the picture: a dot per condition change (green True, amber
/// Progressing, red otherwise; labelled when True) and a grey tick per object the controller
/// wrote (hover for what).
fn lanes(s: &mut String, c: &crate::report::Control, x: &dyn Fn(f64) -> f64) {
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
            let xx = x(e.t_ms);
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
            let xx = x(e.t_ms);
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

/// Where a label next to a vertical line at `xx` starts: to its right, or, in the right half of
/// the picture, ending at the line, so long labels are not cut off at the edge.
fn label_at(xx: f64) -> (f64, &'static str) {
    if xx > W / 2.0 {
        (xx - 2.0, "end")
    } else {
        (xx + 2.0, "start")
    }
}

fn esc(t: &str) -> String {
    t.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{Kind, Sample};
    use crate::report::*;

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
                    start_ms: 12.0,
                    latency_ms,
                    via: "source",
                    ok,
                    attempts: 1,
                    error: (!ok).then(|| "etcdserver: request timed out".into()),
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
            api: ApiReport::new(&api_rec, &Default::default(), 2, &[]),
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
