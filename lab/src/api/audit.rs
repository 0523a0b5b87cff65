//! kube-apiserver's own view of each shoot API request, from its audit log (`files.rs`'s
//! policy): when the server received it, when it answered and with which code. Set beside what
//! the client measured, it says whether a slow request was slow in kube-apiserver or before it,
//! and which attempt was. (Where the time went inside is not in the log: kube-apiserver 1.34
//! adds its `apiserver.latency.k8s.io/*` annotations only when a request's stage timestamp is
//! 500 ms past its receipt, and for an ordinary request it reads that timestamp before the
//! last stage sets it: `endpoints/filters/audit.go`, `writeLatencyToAnnotation`. Its handler
//! traces log only under a parent trace, which nothing starts.) Never used to decide an
//! invariant: a missing or unreadable log only leaves the samples without it.

use super::load::{ApiSample, Op, Served};
use std::path::Path;

/// An audit event of the load's namespace.
#[derive(Debug)]
struct Event {
    verb: String,
    name: String,
    served: Served,
}

/// Reads the audit logs `paths` (absent ones are skipped); `epoch_unix_ms` is the run's start
/// on the wall clock, which the log's timestamps are.
fn read(paths: &[&Path], epoch_unix_ms: f64) -> Vec<Event> {
    let mut events = Vec::new();
    for path in paths {
        let Ok(text) = std::fs::read_to_string(path) else {
            continue;
        };
        events.extend(text.lines().filter_map(|l| event(l, epoch_unix_ms)));
    }
    events
}

fn event(line: &str, epoch_unix_ms: f64) -> Option<Event> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    // A watch also logs the start of its answer; a request is done once.
    if v["stage"] != "ResponseComplete" {
        return None;
    }
    let ms = |key: &str| -> Option<f64> {
        let t: k8s_openapi::jiff::Timestamp = v[key].as_str()?.parse().ok()?;
        // Microseconds since the Unix epoch fit an f64 exactly for the next few centuries.
        #[allow(clippy::cast_precision_loss)]
        Some(t.as_microsecond() as f64 / 1000.0 - epoch_unix_ms)
    };
    let received_ms = ms("requestReceivedTimestamp")?;
    Some(Event {
        verb: v["verb"].as_str()?.to_string(),
        name: v["objectRef"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        served: Served {
            received_ms,
            ms: ms("stageTimestamp")? - received_ms,
            code: u16::try_from(v["responseStatus"]["code"].as_u64()?).ok()?,
        },
    })
}

/// Gives each sample the attempts kube-apiserver logged for it: same verb and object,
/// received while the client waited (a few ms of slack for the two clocks' reads).
pub fn attach(samples: &mut [ApiSample], paths: &[&Path], epoch_unix_ms: f64) {
    const SLACK_MS: f64 = 5.0;
    let events = read(paths, epoch_unix_ms);
    for s in samples {
        let verb = match s.op {
            Op::Create => "create",
            Op::Patch => "patch",
            Op::Read => "get",
        };
        let (from, to) = (s.start_ms - SLACK_MS, s.start_ms + s.latency_ms + SLACK_MS);
        s.server = events
            .iter()
            .filter(|e| e.verb == verb && e.name == s.object)
            .filter(|e| (from..=to).contains(&e.served.received_ms))
            .map(|e| e.served.clone())
            .collect();
    }
}

/// `kube-apiserver 2501 ms (504), 268 ms (201)`, or what the log did not say.
pub fn describe(server: &[Served]) -> String {
    if server.is_empty() {
        return "not in kube-apiserver's audit log (never reached it)".into();
    }
    let attempts: Vec<String> = server
        .iter()
        .map(|a| format!("{:.0} ms ({})", a.ms, a.code))
        .collect();
    format!("kube-apiserver {}", attempts.join(", "))
}

/// The requests the report explains: every one of at least [`SLOW_MS`], or the slowest if none
/// is: phase, verb, kube-apiserver, latency, attempts (and the first error), what
/// kube-apiserver's log says of each attempt, and the run's events from a second before it
/// started to its end (a leader move, a member's restart, a fault...).
pub fn slow(
    samples: &[ApiSample],
    phases: &[(String, f64, f64)],
    events: &[crate::stats::Event],
) -> Vec<String> {
    let mut slow: Vec<&ApiSample> = samples.iter().filter(|s| s.latency_ms >= SLOW_MS).collect();
    if slow.is_empty() {
        slow.extend(
            samples
                .iter()
                .max_by(|a, b| a.latency_ms.total_cmp(&b.latency_ms)),
        );
    }
    slow.iter()
        .map(|s| {
            let phase = phases
                .iter()
                .find(|(_, a, b)| (*a..*b).contains(&s.start_ms))
                .map_or("-", |(name, _, _)| name.as_str());
            let retried = match (&s.error, s.attempts) {
                (Some(e), n) if n > 1 => format!(", {n} attempts (first: {e})"),
                _ => String::new(),
            };
            let tag = if s.latency_ms >= SLOW_MS {
                "slow"
            } else {
                "worst"
            };
            format!(
                "{tag} {phase}: {:?} {} via {} at {:.1} s, {:.0} ms{retried}: {}{}",
                s.op,
                s.object,
                s.via,
                s.start_ms / 1000.0,
                s.latency_ms,
                describe(&s.server),
                meanwhile(s, events)
            )
        })
        .collect()
}

/// `; meanwhile: 37.4 s what, ...`: the events from a second before `s` to its end.
fn meanwhile(s: &ApiSample, events: &[crate::stats::Event]) -> String {
    const BEFORE_MS: f64 = 1000.0;
    const SHOWN: usize = 4;
    let window = (s.start_ms - BEFORE_MS)..=(s.start_ms + s.latency_ms);
    let near: Vec<&crate::stats::Event> =
        events.iter().filter(|e| window.contains(&e.t_ms)).collect();
    // etcd's leadership moves always show (the likeliest cause), the rest up to SHOWN.
    let moves = near.iter().filter(|e| is_move(e)).count();
    let mut room = SHOWN.saturating_sub(moves);
    let shown: Vec<String> = near
        .iter()
        .filter(|e| {
            is_move(e) || {
                let fits = room > 0;
                room = room.saturating_sub(1);
                fits
            }
        })
        .map(|e| format!("{:.1} s {}", e.t_ms / 1000.0, e.what))
        .collect();
    match near.len() - shown.len() {
        _ if shown.is_empty() => String::new(),
        0 => format!("; meanwhile: {}", shown.join(", ")),
        more => format!("; meanwhile: {}, +{more} more", shown.join(", ")),
    }
}

fn is_move(e: &crate::stats::Event) -> bool {
    e.what.starts_with("etcd: leadership")
}

/// The worst request the issue allows outside a forced leader loss (issue 45 point 4).
pub const SLOW_MS: f64 = 1000.0;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const EVENT: &str = r#"{"kind":"Event","stage":"ResponseComplete","verb":"patch","objectRef":{"resource":"configmaps","namespace":"lab-load","name":"counter"},"responseStatus":{"code":200},"requestReceivedTimestamp":"2026-11-29T10:17:16.154316Z","stageTimestamp":"2026-11-29T10:17:16.754316Z","annotations":{"authorization.k8s.io/decision":"allow"}}"#;

    #[test]
    fn an_audit_event_gives_the_servers_time() {
        // 10:17:16.000 UTC as the run's start.
        let epoch = 1_795_947_436_000.0;
        let e = event(EVENT, epoch).unwrap();
        assert_eq!((e.verb.as_str(), e.name.as_str()), ("patch", "counter"));
        assert!((e.served.received_ms - 154.316).abs() < 1e-3);
        assert!((e.served.ms - 600.0).abs() < 1e-3);
        assert_eq!(e.served.code, 200);
        assert_eq!(describe(&[e.served]), "kube-apiserver 600 ms (200)");
        assert!(event("not json", epoch).is_none());
        assert!(describe(&[]).contains("never reached it"));
    }

    #[test]
    fn a_slow_request_is_named_with_its_phase_attempts_and_what_happened_meanwhile() {
        let sample = |start_ms, latency_ms, attempts| ApiSample {
            op: Op::Patch,
            object: "counter".into(),
            start_ms,
            latency_ms,
            via: "destination",
            ok: true,
            attempts,
            error: (attempts > 1).then(|| "attempt unanswered after 2.5s".into()),
            server: vec![Served {
                received_ms: start_ms,
                ms: 2504.0,
                code: 504,
            }],
        };
        let event = |t_ms: f64, what: &str| crate::stats::Event {
            t_ms,
            what: what.into(),
        };
        let phases = [("shrink".to_string(), 60_000.0, 70_000.0)];
        let events = [
            event(62_000.0, "too early"),
            event(63_500.0, "leader moved"),
            event(67_000.0, "too late"),
        ];
        let samples = [sample(61_000.0, 300.0, 1), sample(63_800.0, 2914.0, 2)];
        assert_eq!(
            slow(&samples, &phases, &events),
            [
                "slow shrink: Patch counter via destination at 63.8 s, 2914 ms, 2 attempts \
              (first: attempt unanswered after 2.5s): kube-apiserver 2504 ms (504); \
              meanwhile: 63.5 s leader moved"
            ]
        );
        // None of 1 s or more: the slowest is named.
        assert!(slow(&samples[..1], &phases, &[])[0].starts_with("worst shrink: Patch"));
        // Past four events, etcd's leadership move still shows; the rest is counted.
        let busy: Vec<_> = (0..6)
            .map(|i| event(63_000.0 + f64::from(i) * 100.0, "step"))
            .chain([event(
                64_000.0,
                "etcd: leadership a -> b (201ms, etcd's log)",
            )])
            .collect();
        let line = &slow(&samples[1..], &phases, &busy)[0];
        assert!(
            line.ends_with(
                "63.2 s step, 64.0 s etcd: leadership a -> b (201ms, etcd's log), +3 more"
            ),
            "{line}"
        );
    }
}
