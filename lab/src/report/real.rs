//! The report of a migration between two real seeds (`tests/seeds/shoot_move.rs`, issue 45
//! point 3) in the lab's shape, so that the lab's summary and picture (`crate::svg`) show it:
//! the shoot API's requests and invariants as the lab's load and watch saw them, the steps as
//! timed lanes with where their time went, and each step's duration beside the lab's.

use super::compare::Comparison;
use super::steps::{Step, Writer, DESTINATION_API};
use super::{
    ApiReport, ControlPlane, Etcd, Event, Members, Membership, Objects, Report, Webhook, Writes,
};
use crate::client::Recording;

/// What the real seeds run in place of Gardener's parts, and what is not in the run yet.
pub const STAND_INS: &[&str] = &[
    "etcd-druid v0.38.1 runs for real in both seeds (the roll at Expose, the join and growth by backup-restore); Shrink is seed-world's stand-in of etcd-druid#1426 (leadership moved, the source members removed, the source Etcd scaled to 0)",
    "DNS provider: seed-world's stand-in marks the DNSRecords Succeeded; each seed's CoreDNS answers the other seed's exposed names (a zone per seed)",
    "gardenlet: the test advances both EtcdMigrations, starts the destination kube-apiserver and moves the shoot API's name (the load's client per seed's load balancer)",
    "etcd (lab client) is an etcdctl writer through the source's client Service, then the destination's: acknowledged writes, no latencies",
    "webhook: the lab's HTTPS endpoint in seed a's outside network namespace (the shoot), reached through two `isthmus tunnel-agent`s; seed a's VPN server is a stand-in for Gardener's vpn-seed-server (an `isthmus tunnel-server` rendered by the controller's code), seed b's is the controller's temporary VPN",
];

/// The scenario's name in the report (the picture's headline says so).
pub const SCENARIO: &str = "two real seeds";

/// What a real run's webhook figures are.
const WEBHOOK_NOTE: &str = "AdmissionReviews answered by the shoot's webhook, told apart by each seed's kube-apiserver client certificate; a call's latency is the webhook's own, from its connection's accept (through the tunnel) to its answer";

/// What a run on real seeds measured.
#[derive(Debug, Clone)]
pub struct RealRun {
    pub rtt_ms: f64,
    /// What served the shoot API (e.g. the image, a pod in each seed).
    pub kube_apiserver: String,
    pub api: ApiReport,
    pub objects: Objects,
    /// The shoot API's phases (name, start, end; ms since the load's start): the picture's
    /// dashed lines, the last one's end its right edge.
    pub phases: Vec<(String, f64, f64)>,
    pub steps: Vec<Step>,
    pub members: Vec<Membership>,
    pub events: Vec<Event>,
    pub writer: Option<Writer>,
    pub comparison: Comparison,
    /// The reviews the shoot's webhook answered (`start_ms` since the load's start).
    pub webhook: Vec<crate::webhook::Call>,
    /// Failed webhook calls, however seen: connections the webhook dropped, agents' dials
    /// not connected, CONNECTs not answered 200.
    pub webhook_failed: usize,
}

impl RealRun {
    /// The lab's report of this run, with every invariant that failed as a violation.
    pub fn report(self) -> Report {
        let none = Recording::default();
        // The picture's frame ends with the last phase: no step may fall off it.
        let mut phases = self.phases.clone();
        let steps_end = self.steps.iter().map(|s| s.end_ms).fold(0.0, f64::max);
        match phases.last_mut() {
            Some(last) if last.2 < steps_end => last.2 = steps_end,
            Some(_) => {}
            None => phases.push(("migration".into(), 0.0, steps_end)),
        }
        let writer = self.writer.clone().unwrap_or_default();
        let mut violations = violations(&self.api, &self.objects, self.writer.as_ref());
        if self.webhook_failed > 0 {
            violations.push(format!("{} failed webhook calls", self.webhook_failed));
        }
        let mut webhook = Webhook::from_calls(&self.webhook, &phases, Some(WEBHOOK_NOTE.into()));
        webhook.failed += self.webhook_failed;
        let destination_ready_ms = self
            .steps
            .iter()
            .find(|s| s.row() == DESTINATION_API)
            .map(Step::ms);
        Report {
            stand_ins: STAND_INS.iter().map(|s| s.to_string()).collect(),
            control: None,
            quorum: Vec::new(),
            scenario: SCENARIO.into(),
            rtt_ms: self.rtt_ms,
            control_plane: ControlPlane {
                kube_apiserver: self.kube_apiserver,
                destination_ready_ms,
                kube_apiservers: "one per seed, each on its seed's Etcd".into(),
            },
            etcd: Etcd {
                requests: writer.acknowledged + writer.failed,
                failed: writer.failed,
                writes: writer.acknowledged + writer.failed,
                reads: 0,
            },
            webhook,
            writes: Writes {
                acknowledged: writer.acknowledged,
                missing: writer.lost,
                longest_gap_ms: 0.0,
            },
            members: Members {
                initial: self
                    .members
                    .first()
                    .map(|m| m.members.clone())
                    .unwrap_or_default(),
                r#final: self
                    .members
                    .last()
                    .map(|m| m.members.clone())
                    .unwrap_or_default(),
                timeline: self.members,
                final_peer_urls: Default::default(),
                rolled: Vec::new(),
            },
            phases: phases
                .iter()
                .map(|(n, s, e)| super::phase(n, *s, *e, &none))
                .collect(),
            events: self.events,
            fault: None,
            join_ms: None,
            violations,
            steps: self.steps,
            comparison: Some(self.comparison),
            api: self.api,
            objects: self.objects,
            samples: Vec::new(),
        }
    }
}

/// The lab's invariants over what the shoot API's clients and the etcd writer saw.
fn violations(api: &ApiReport, objects: &Objects, writer: Option<&Writer>) -> Vec<String> {
    let mut v = Vec::new();
    let mut check = |n: usize, what: &str| {
        if n > 0 {
            v.push(format!("{n} {what}"));
        }
    };
    check(api.failed, "failed shoot API requests");
    check(objects.missing, "acknowledged objects lost");
    check(api.watch.missing, "acknowledged writes the watch missed");
    check(api.watch.out_of_order, "watch events out of order");
    check(api.stale_reads, "reads behind an acknowledged write");
    if let Some(w) = writer {
        check(w.failed, "failed etcd writes");
        check(w.lost, "acknowledged etcd writes lost");
    }
    v
}

#[cfg(test)]
mod tests {
    use super::super::steps::{Part, EXPOSE, JOIN, SHRINK};
    use super::*;
    use crate::api::load::{ApiSample, Op};

    /// A synthetic run: three steps (one with two parts), 6 shoot API requests over 90 s, one
    /// of them failed.
    fn run(failed: bool) -> RealRun {
        let samples: Vec<ApiSample> = (0..6)
            .map(|i| ApiSample {
                op: Op::Create,
                object: format!("obj-{i}"),
                start_ms: 15_000.0 * f64::from(i),
                latency_ms: 40.0 + f64::from(i),
                via: if i < 3 { "source" } else { "destination" },
                ok: !(failed && i == 4),
                attempts: 1,
                error: (failed && i == 4).then(|| "etcdserver: leader changed".into()),
                server: Vec::new(),
            })
            .collect();
        let rec = crate::api::load::Recording {
            samples,
            ..Default::default()
        };
        let phases = vec![
            ("M2".to_owned(), 0.0, 60_000.0),
            ("Shrink".to_owned(), 60_000.0, 90_000.0),
        ];
        let step = |name: &str, start: f64, end: f64, parts: Vec<Part>| Step {
            name: name.into(),
            start_ms: start,
            end_ms: end,
            parts,
        };
        let part = |what: &str, start: f64, end: f64| Part {
            what: what.into(),
            start_ms: start,
            end_ms: end,
        };
        let steps = vec![
            step(
                "Expose: source",
                1000.0,
                30_000.0,
                vec![
                    part("WaitingForProxyRollout", 1000.0, 9000.0),
                    part("WaitingForEtcd (druid's roll)", 9000.0, 30_000.0),
                ],
            ),
            step(JOIN, 31_000.0, 60_000.0, Vec::new()),
            step(SHRINK, 61_000.0, 95_000.0, Vec::new()),
        ];
        let comparison = Comparison::new(&steps, None, "no lab report: sudo ./scripts/demo.sh");
        RealRun {
            rtt_ms: 50.0,
            kube_apiserver: "v1.34.4 pods".into(),
            api: ApiReport::new(&rec, &Default::default(), 0, &phases, &[]),
            objects: Objects::check(&rec, &[]),
            phases,
            steps,
            members: vec![
                Membership {
                    t_ms: 0.0,
                    members: vec!["a".into(), "b".into(), "c".into()],
                },
                Membership {
                    t_ms: 95_000.0,
                    members: vec!["x".into()],
                },
            ],
            events: Vec::new(),
            writer: Some(Writer {
                acknowledged: 100,
                failed: 0,
                lost: 0,
                slow: Vec::new(),
            }),
            comparison,
            webhook: Vec::new(),
            webhook_failed: 0,
        }
    }

    #[test]
    fn the_picture_has_a_lane_per_step_and_a_mark_per_request() {
        let r = run(false).report();
        assert!(r.violations.is_empty(), "{:?}", r.violations);
        // The last phase reaches the last step's end: Shrink's lane is inside the picture.
        assert_eq!(r.phases.last().map(|p| p.end), Some(95_000.0));
        assert_eq!(r.members.r#final, ["x"]);
        let svg = crate::svg::timeline(&r);
        for name in ["Expose: source", JOIN, SHRINK] {
            assert_eq!(
                svg.matches(&format!(r#"<rect class="step" data-step="{name}""#))
                    .count(),
                1,
                "{name}'s lane"
            );
        }
        // The two parts of Expose, each a segment of its lane with what it waited on.
        assert_eq!(svg.matches(r#"<rect class="part""#).count(), 2);
        assert!(svg.contains("WaitingForEtcd (druid's roll): 21.0 s"));
        // No lab report: the lanes say so instead of a lab duration.
        assert!(svg.contains("no lab report: sudo ./scripts/demo.sh"));
        assert!(!svg.contains(" s (lab ") && !svg.contains(r#"class="lab""#));
        // Six shoot API requests, none failed.
        assert_eq!(svg.matches("<rect x=").count(), 6);
        assert!(svg.contains("6 API requests, 0 failed"));
        assert!(svg.trim_end().ends_with("</svg>"));
        let text = r.summary();
        assert!(
            text.contains("Expose: source") && text.contains("29.0 s"),
            "{text}"
        );
        assert!(text.contains("WaitingForProxyRollout"), "{text}");
        assert!(text.contains("all invariants hold"), "{text}");
        // The JSON carries the steps and the table.
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["steps"].as_array().map(Vec::len), Some(3));
        assert_eq!(json["comparison"]["rows"][0]["step"], EXPOSE);
    }

    #[test]
    fn the_shoots_reviews_fill_the_webhook_band_and_a_failed_call_is_a_violation() {
        use crate::webhook::{Call, Via};
        let call = |start_ms: f64, via: Via| Call {
            start_ms,
            latency_ms: 60.0,
            via,
            ok: true,
            error: None,
        };
        let mut run = run(false);
        run.webhook = vec![call(1_000.0, Via::Source), call(70_000.0, Via::Destination)];
        let r = run.clone().report();
        assert!(r.violations.is_empty(), "{:?}", r.violations);
        assert_eq!(
            (
                r.webhook.requests,
                r.webhook.via_source,
                r.webhook.via_destination
            ),
            (2, 1, 1)
        );
        let svg = crate::svg::timeline(&r);
        assert_eq!(svg.matches("<circle cx=").count(), 2);
        assert!(
            svg.contains(">isthmus: two real seeds — RTT 50 ms"),
            "{svg}"
        );
        assert!(
            svg.contains("webhook (the shoot's reviews through the tunnels): 2 calls, 0 failed")
        );

        let text = r.summary();
        assert!(
            text.contains("webhook (the shoot's reviews through the tunnels) 2 requests, 0 failed"),
            "{text}"
        );

        run.webhook_failed = 1;
        let r = run.report();
        assert_eq!(r.violations, ["1 failed webhook calls"]);
        assert_eq!(r.webhook.failed, 1);
    }

    #[test]
    fn a_failed_request_is_a_violation_and_red_in_the_picture() {
        let r = run(true).report();
        assert_eq!(r.violations, ["1 failed shoot API requests"]);
        let svg = crate::svg::timeline(&r);
        assert_eq!(svg.matches(r##"fill="#d00"><title>Create"##).count(), 1);
        assert!(r
            .summary()
            .contains("VIOLATED: 1 failed shoot API requests"));
    }

    #[test]
    fn a_lab_duration_sits_beside_each_lane_of_its_row() {
        let mut run = run(false);
        let lab = serde_json::json!({
            "scenario": "migrate", "rtt_ms": 50.0,
            "phases": [{"name": "expose", "start": 0.0, "end": 12_000.0},
                       {"name": "shrink", "start": 20_000.0, "end": 31_000.0}],
        });
        run.comparison = Comparison::new(
            &run.steps,
            Some((std::path::Path::new("target/demo/report.json"), &lab)),
            "",
        );
        let svg = crate::svg::timeline(&run.report());
        assert!(svg.contains("Expose: source 29.0 s (lab 12.0 s)"), "{svg}");
        assert!(svg.contains("Shrink 34.0 s (lab 11.0 s)"));
        // Join: the lab report has no `join` phase.
        assert!(svg.contains("Join 29.0 s<"));
        assert_eq!(svg.matches(r#"<rect class="lab""#).count(), 2);
    }
}
