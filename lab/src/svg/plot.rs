//! The timeline's main plot: the headline, the latency axes, phase boundaries, events, the
//! webhook band, one mark per request, the legend.

use super::{
    esc, label_at, ms_label, Frame, API, LEFT, LOG_MAX, LOG_MIN, PLOT_H, RIGHT, TOP,
    VIA_DESTINATION, VIA_SOURCE, W, WEB_H, WEB_LOG_MIN, WEB_TOP,
};
use crate::report::Report;
use crate::webhook::Via;
use std::fmt::Write;

/// The `<svg>` head (`total_h` high) and the two headlines of what the clients saw.
pub(super) fn header(s: &mut String, r: &Report, total_h: f64) {
    let title = if r.scenario == crate::report::real::SCENARIO {
        "isthmus"
    } else {
        "isthmus lab"
    };
    let webhook = r.webhook_label();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{total_h}" font-family="sans-serif" font-size="11">
<rect width="{W}" height="{total_h}" fill="white"/>
<text x="{LEFT}" y="16" font-size="13">{title}: {} — RTT {} ms — kube-apiserver {}: {} API requests, {} failed, worst {:.0} ms, longest write gap {:.0} ms — {} objects written, {} lost — webhook {} calls, {} failed</text>
<text x="{LEFT}" y="31" font-size="11" fill="dimgray">etcd (lab client): {} requests, {} failed, {} writes acknowledged, {} missing — {webhook}: {} calls, {} failed</text>
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
}

/// The latency grid of the etcd/API plot and of the webhook band, and the 5 s failure line.
pub(super) fn axes(s: &mut String, f: &Frame) {
    for e in (LOG_MIN as i32)..=(LOG_MAX as i32) {
        let ms = 10f64.powi(e);
        let yy = f.y(ms);
        let label = ms_label(ms);
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" x2="{}" y1="{yy:.1}" y2="{yy:.1}" stroke="#ddd"/><text x="4" y="{:.1}">{label}</text>"##,
            W - RIGHT,
            yy + 4.0
        );
    }
    let yf = f.y(5000.0);
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
        let yy = f.wy(ms);
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" x2="{}" y1="{yy:.1}" y2="{yy:.1}" stroke="#ddd"/><text x="4" y="{:.1}">{}</text>"##,
            W - RIGHT,
            yy + 4.0,
            ms_label(ms)
        );
    }
}

/// A dashed line and a name at each phase's start.
pub(super) fn phase_lines(s: &mut String, r: &Report, f: &Frame) {
    for (i, p) in r.phases.iter().enumerate() {
        let xx = f.x(p.start);
        let ty = TOP - 6.0 + if i % 2 == 0 { 0.0 } else { 12.0 };
        let _ = writeln!(
            s,
            r##"<line x1="{xx:.1}" x2="{xx:.1}" y1="{TOP}" y2="{}" stroke="#888" stroke-dasharray="4,3"/><text x="{:.1}" y="{ty:.1}">{}</text>"##,
            WEB_TOP + WEB_H,
            xx + 2.0,
            esc(&p.name)
        );
    }
}

/// Events as ticks; the tunnel's handover steps in the webhook band.
pub(super) fn events(s: &mut String, r: &Report, f: &Frame) {
    // Events as thin orange ticks (hover shows what happened); the ones that change the
    // client's path or inject a fault get a label.
    // The controllers' objects and conditions have their lanes under the picture.
    let (tunnel, others): (Vec<_>, Vec<_>) = r
        .events
        .iter()
        .filter(|e| !e.what.starts_with("condition (") && !e.what.starts_with("controller wrote "))
        .partition(|e| e.what.starts_with("tunnel:"));
    for (i, e) in others.into_iter().enumerate() {
        let xx = f.x(e.t_ms);
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
        let xx = f.x(e.t_ms);
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
}

/// One dot per webhook call through the tunnel, by the tunnel server it went through.
pub(super) fn webhook_calls(s: &mut String, r: &Report, f: &Frame) {
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
            f.x(c.start_ms),
            f.wy(c.latency_ms),
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
}

/// One dot per etcd request and one square per shoot API request.
pub(super) fn requests(s: &mut String, r: &Report, f: &Frame) {
    for smp in &r.samples {
        let color = match (smp.ok, smp.kind) {
            (false, _) => "#d00",
            (true, crate::client::Kind::Write) => "#1f5fbf",
            (true, crate::client::Kind::Read) => "#2a9d3a",
        };
        let _ = writeln!(
            s,
            r#"<circle cx="{:.1}" cy="{:.1}" r="1.6" fill="{color}" fill-opacity="0.6"/>"#,
            f.x(smp.start_ms),
            f.y(smp.latency_ms)
        );
    }
    for a in &r.api.samples {
        let color = if a.ok { API } else { "#d00" };
        let title = a.error.as_deref().map(esc).unwrap_or_default();
        let _ = writeln!(
            s,
            r#"<rect x="{:.1}" y="{:.1}" width="3" height="3" fill="{color}"><title>{:?} via {} {:.0} ms {title}</title></rect>"#,
            f.x(a.start_ms) - 1.5,
            f.y(a.latency_ms) - 1.5,
            a.op,
            a.via,
            a.latency_ms
        );
    }
}

/// What the marks mean, and the time axis.
pub(super) fn legend(s: &mut String, f: &Frame) {
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
        f.end / 1000.0
    );
}
