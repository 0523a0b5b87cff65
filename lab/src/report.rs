//! The run's report: JSON (the contract of `isthmus-lab demo --report`) and a hand-written SVG
//! timeline of latency with phase boundaries.

pub use crate::api::report::{ApiReport, ControlPlane, Objects};
use crate::client::{Kind, Recording, Sample};
use serde::Serialize;

/// A phase of the migration, in milliseconds since the lab started.
#[derive(Debug, Clone, Serialize)]
pub struct Phase {
    pub name: String,
    pub start: f64,
    pub end: f64,
    pub requests: usize,
    pub failed: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// Longest time between two successful writes acknowledged in this phase.
    pub longest_write_gap_ms: f64,
}

/// Something the migration did or injected.
#[derive(Debug, Clone, Serialize)]
pub struct Event {
    pub t_ms: f64,
    pub what: String,
}

/// A fault during which failed requests are expected (a quorum-losing cut): failures that
/// started inside `[start_ms - 5 s, end_ms]` are counted here instead of as violations.
#[derive(Debug, Clone, Serialize)]
pub struct Fault {
    pub what: String,
    pub start_ms: f64,
    /// The fault's end plus the recovery allowance.
    pub end_ms: f64,
    pub api_failed: usize,
    pub etcd_failed: usize,
}

impl Fault {
    /// Whether a request that started at `t_ms` ran into the fault (a request may start up to
    /// its 5 s budget before the fault and fail inside it).
    pub fn covers(&self, t_ms: f64) -> bool {
        t_ms >= self.start_ms - 5000.0 && t_ms <= self.end_ms
    }
}

/// Whether `fault` (if any) covers `t_ms`.
pub fn covered(fault: Option<&Fault>, t_ms: f64) -> bool {
    fault.is_some_and(|f| f.covers(t_ms))
}

/// Where the etcd leader was and how many voters the cluster could lose, at a phase's start.
#[derive(Debug, Clone, Serialize)]
pub struct Quorum {
    pub phase: String,
    pub t_ms: f64,
    pub leader: Option<String>,
    /// `src` or `dst`: the seed the leader ran in.
    pub leader_seed: Option<String>,
    pub voters: usize,
    pub quorum: usize,
    /// Voters that may fail (or be cut off) before writes stop: `voters - quorum`.
    pub margin: usize,
    pub voters_source: usize,
    pub voters_destination: usize,
}

/// What the lab stands in for: Gardener's controllers that cannot run without kubelets.
pub const STAND_INS: &[&str] = &[
    "etcd-druid: the lab's backend turns the planner's Etcd into member add/promote/move-leader/remove, member update + rolling restart of the peer URLs, member processes, and reports Etcd status",
    "DNS provider: DNSRecords become the seeds' hosts files (the in-cluster peer names are static entries, each seed resolving them to its own members)",
    "gardenlet: the lab advances both EtcdMigration specs through the steps and moves the shoot API's name",
];

/// What the lab stands in for when the controllers drive the run (`--controllers`).
pub const CONTROLLED_STAND_INS: &[&str] = &[
    "etcd-druid: reads each seed's Etcd from its API server and, as Gardener deploys it, acts only on a reconcile request (gardener.cloud/operation: reconcile): member add/promote/remove, member update + rolling restart of the peer URLs and member processes (etcd-druid needs StatefulSets and kubelets); writes the status etcd-druid writes, observedGeneration before it removes the request",
    "DNS provider: reads every DNSRecord and writes the seeds' hosts files (no DNS service runs here), then status.lastOperation Succeeded",
    "kubelet: delivers the controller's route ConfigMap into the proxy's volume with a ..data symlink swap (no kubelet runs here)",
    "gardenlet: creates and advances both EtcdMigrations through their API servers, copies exposedMembers, moves the shoot API's name (gardenlet needs a Garden)",
];

/// The seeds' control planes as the lab saw them (runs the controllers drive).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Control {
    /// What runs for real.
    pub real: String,
    /// Every condition change of both `EtcdMigration`s, in order (the condition timeline).
    pub conditions: Vec<Event>,
    /// Every object the controllers wrote, as the stand-ins saw it change.
    pub objects: Vec<Event>,
    /// Changes of the controllers' Lease holders.
    pub leases: Vec<Event>,
    /// The API servers' answers to invalid `EtcdMigration`s.
    pub refused: Vec<String>,
}

/// The membership at one instant.
#[derive(Debug, Clone, Serialize)]
pub struct Membership {
    pub t_ms: f64,
    pub members: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Etcd {
    pub requests: usize,
    pub failed: usize,
    pub writes: usize,
    pub reads: usize,
}

/// The shoot's webhook called through the tunnel (see [`crate::webhook`]).
#[derive(Debug, Clone, Serialize)]
pub struct Webhook {
    pub requests: usize,
    pub failed: usize,
    /// Calls through the source seed's tunnel server and through the destination's.
    pub via_source: usize,
    pub via_destination: usize,
    /// Calls by migration phase (by start time).
    pub phases: Vec<PhaseStats>,
    /// Where the tunnel runs (what the figures do and do not show).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Every call, for the picture (the JSON has them in `webhook_calls.json`).
    #[serde(skip)]
    pub calls: Vec<crate::webhook::Call>,
}

/// Requests (API requests or webhook calls) that started in one phase.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseStats {
    pub name: String,
    pub requests: usize,
    pub failed: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl PhaseStats {
    /// Statistics of the requests that started in `[start, end)`; each item is (start, latency,
    /// ok) in ms. Used for the API's requests and the webhook's calls alike.
    pub fn of(
        name: &str,
        start: f64,
        end: f64,
        items: impl Iterator<Item = (f64, f64, bool)>,
    ) -> Self {
        let inside: Vec<(f64, bool)> = items
            .filter(|(at, _, _)| *at >= start && *at < end)
            .map(|(_, latency, ok)| (latency, ok))
            .collect();
        let mut lat: Vec<f64> = inside.iter().map(|(l, _)| *l).collect();
        lat.sort_by(f64::total_cmp);
        Self {
            name: name.into(),
            requests: inside.len(),
            failed: inside.iter().filter(|(_, ok)| !ok).count(),
            p50_ms: pct(&lat, 50.0),
            p99_ms: pct(&lat, 99.0),
            max_ms: lat.last().copied().unwrap_or(0.0),
        }
    }
}

impl Webhook {
    /// Totals and per-phase statistics of `calls`; `phases` are (name, start, end) in ms.
    pub fn from_calls(
        calls: &[crate::webhook::Call],
        phases: &[(String, f64, f64)],
        note: Option<String>,
    ) -> Self {
        use crate::webhook::Via;
        let phases = phases
            .iter()
            .map(|(name, start, end)| {
                let items = calls.iter().map(|c| (c.start_ms, c.latency_ms, c.ok));
                PhaseStats::of(name, *start, *end, items)
            })
            .collect();
        Self {
            requests: calls.len(),
            failed: calls.iter().filter(|c| !c.ok).count(),
            via_source: calls.iter().filter(|c| c.via == Via::Source).count(),
            via_destination: calls.iter().filter(|c| c.via == Via::Destination).count(),
            phases,
            note,
            calls: calls.to_vec(),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Writes {
    pub acknowledged: usize,
    pub missing: usize,
    pub longest_gap_ms: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Members {
    pub initial: Vec<String>,
    pub r#final: Vec<String>,
    pub timeline: Vec<Membership>,
    /// The peer URLs each final member advertises, as etcd lists them.
    pub final_peer_urls: std::collections::BTreeMap<String, Vec<String>>,
    /// The druid stand-in's rolling updates of peer URLs, member by member.
    pub rolled: Vec<Rolled>,
}

/// One member rolled to new peer URLs (`crate::rolling`).
#[derive(Debug, Clone, Serialize)]
pub struct Rolled {
    pub t_ms: f64,
    pub member: String,
    pub peer_urls: Vec<String>,
    /// The member led, and leadership went here before it stopped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leader_moved: Option<String>,
    /// From the quorum check to the restarted member serving.
    pub took_ms: f64,
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The parts of Gardener the lab stands in for ([`STAND_INS`]).
    pub stand_ins: Vec<String>,
    /// The seeds' API servers and controllers, when they drove the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub control: Option<Control>,
    /// Leader location and quorum margin at the start of each phase.
    pub quorum: Vec<Quorum>,
    pub scenario: String,
    pub rtt_ms: f64,
    /// The shoot's API as its clients saw it (the thing that must not go down).
    pub api: ApiReport,
    pub objects: Objects,
    pub control_plane: ControlPlane,
    pub etcd: Etcd,
    pub webhook: Webhook,
    pub writes: Writes,
    pub members: Members,
    pub phases: Vec<Phase>,
    /// Injected faults and migration actions, in order.
    pub events: Vec<Event>,
    /// The injected fault whose failures are expected (the 6-member cut), with their counts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fault: Option<Fault>,
    /// Time for the two destination members to join (3 → 5), if they did.
    pub join_ms: Option<f64>,
    /// Invariants that failed; empty when the run is good.
    pub violations: Vec<String>,
    #[serde(skip)]
    pub samples: Vec<Sample>,
}

/// Percentile (nearest rank) of sorted values.
pub(crate) fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Longest gap between consecutive instants (sorted in place).
pub fn longest_gap(acks: &mut [f64]) -> f64 {
    acks.sort_by(f64::total_cmp);
    acks.windows(2).map(|w| w[1] - w[0]).fold(0.0, f64::max)
}

/// A phase's statistics over the requests that started in `[start, end)`.
pub fn phase(name: &str, start: f64, end: f64, rec: &Recording) -> Phase {
    let inside: Vec<&Sample> = rec
        .samples
        .iter()
        .filter(|s| s.start_ms >= start && s.start_ms < end)
        .collect();
    let mut lat: Vec<f64> = inside.iter().map(|s| s.latency_ms).collect();
    lat.sort_by(f64::total_cmp);
    let mut acks: Vec<f64> = rec
        .write_acks_ms
        .iter()
        .copied()
        .filter(|t| *t >= start && *t < end)
        .collect();
    Phase {
        name: name.to_string(),
        start,
        end,
        requests: inside.len(),
        failed: inside.iter().filter(|s| !s.ok).count(),
        p50_ms: pct(&lat, 50.0),
        p99_ms: pct(&lat, 99.0),
        max_ms: lat.last().copied().unwrap_or(0.0),
        longest_write_gap_ms: longest_gap(&mut acks),
    }
}

/// Request totals.
pub fn etcd_totals(rec: &Recording) -> Etcd {
    Etcd {
        requests: rec.samples.len(),
        failed: rec.samples.iter().filter(|s| !s.ok).count(),
        writes: rec.samples.iter().filter(|s| s.kind == Kind::Write).count(),
        reads: rec.samples.iter().filter(|s| s.kind == Kind::Read).count(),
    }
}

impl Report {
    /// A short human summary.
    pub fn summary(&self) -> String {
        let a = &self.api;
        let mut s = format!(
            "scenario {} (RTT {} ms), kube-apiserver {}: {} API requests, {} failed ({} retried), worst {:.0} ms, longest write gap {:.0} ms; {} objects written, {} missing; watch {} events, {} missed, {} out of order, {} reconnects, {} relists; kube-apiserver webhook calls through the tunnel {}, failed {}\n",
            self.scenario, self.rtt_ms, self.control_plane.kube_apiserver, a.requests, a.failed, a.retried,
            a.worst_ms, a.longest_write_gap_ms, self.objects.written, self.objects.missing,
            a.watch.events, a.watch.missing, a.watch.out_of_order, a.watch.reconnects, a.watch.gone,
            a.webhook.calls, a.webhook.failed
        );
        s += &format!(
            "etcd (lab client): {} requests, {} failed; {} writes acknowledged, {} missing; longest write gap {:.0} ms; webhook (lab caller) {} requests, {} failed\n",
            self.etcd.requests, self.etcd.failed, self.writes.acknowledged,
            self.writes.missing, self.writes.longest_gap_ms, self.webhook.requests, self.webhook.failed
        );
        if let Some(j) = self.join_ms {
            s += &format!("join (3 -> 5): {j:.0} ms\n");
        }
        s += &format!(
            "{:<12} {:>8} {:>8} {:>6} {:>6} {:>8} {:>8} {:>8} {:>8}   (etcd)\n",
            "phase", "start_s", "end_s", "reqs", "failed", "p50_ms", "p99_ms", "max_ms", "gap_ms"
        );
        for p in &self.phases {
            s += &format!(
                "{:<12} {:>8.1} {:>8.1} {:>6} {:>6} {:>8.1} {:>8.1} {:>8.1} {:>8.0}\n",
                p.name,
                p.start / 1000.0,
                p.end / 1000.0,
                p.requests,
                p.failed,
                p.p50_ms,
                p.p99_ms,
                p.max_ms,
                p.longest_write_gap_ms
            );
        }
        s += &format!(
            "shoot API via source {} / destination {} kube-apiserver\n",
            a.via_source, a.via_destination
        );
        for p in &a.phases {
            s += &format!(
                "  api {:<12} {:>6} {:>6} {:>8.1} {:>8.1} {:>8.1}\n",
                p.name, p.requests, p.failed, p.p50_ms, p.p99_ms, p.max_ms
            );
        }
        s += &format!(
            "webhook (lab caller) via source {} / destination {} tunnel server\n",
            self.webhook.via_source, self.webhook.via_destination
        );
        for p in &self.webhook.phases {
            s += &format!(
                "  webhook {:<12} {:>6} {:>6} {:>8.1} {:>8.1} {:>8.1}\n",
                p.name, p.requests, p.failed, p.p50_ms, p.p99_ms, p.max_ms
            );
        }
        s += "leader and quorum at each phase's start:\n";
        for q in &self.quorum {
            s += &format!(
                "  {:<18} leader {:<18} in {:<4} voters {} ({} src + {} dst), quorum {}, margin {}\n",
                q.phase,
                q.leader.as_deref().unwrap_or("?"),
                q.leader_seed.as_deref().unwrap_or("?"),
                q.voters,
                q.voters_source,
                q.voters_destination,
                q.quorum,
                q.margin
            );
        }
        for e in &self.events {
            s += &format!("  {:>7.1} s  {}\n", e.t_ms / 1000.0, e.what);
        }
        if let Some(c) = &self.control {
            s += &format!("control plane: {}\n", c.real);
            s += "condition timeline (both seeds' EtcdMigration):\n";
            for e in &c.conditions {
                s += &format!("  {:>7.1} s  {}\n", e.t_ms / 1000.0, e.what);
            }
            s += &format!(
                "{} object changes by the controllers; Leases: {}; invalid EtcdMigrations: {:?}\n",
                c.objects.len(),
                c.leases
                    .iter()
                    .map(|e| format!("{:.1} s {}", e.t_ms / 1000.0, e.what))
                    .collect::<Vec<_>>()
                    .join(", "),
                c.refused
            );
        }
        s += "stand-ins (what Gardener runs, the lab imitates through the same contracts):\n";
        for st in &self.stand_ins {
            s += &format!("  - {st}\n");
        }
        s += &format!(
            "members: {:?} -> {:?}\n",
            self.members.initial, self.members.r#final
        );
        if self.violations.is_empty() {
            s += "all invariants hold\n";
        } else {
            for v in &self.violations {
                s += &format!("VIOLATED: {v}\n");
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{Kind, Recording, Sample};

    fn sample(start_ms: f64, latency_ms: f64, ok: bool) -> Sample {
        Sample {
            kind: Kind::Write,
            start_ms,
            latency_ms,
            ok,
            attempts: 1,
            error: None,
        }
    }

    #[test]
    fn phase_statistics_cover_only_requests_started_inside() {
        let rec = Recording {
            samples: (0..100)
                .map(|i| sample(f64::from(i) * 10.0, f64::from(i + 1), i != 50))
                .chain([sample(5000.0, 9999.0, true)])
                .collect(),
            acknowledged: Default::default(),
            write_acks_ms: vec![10.0, 20.0, 400.0, 410.0, 6000.0],
        };
        let p = phase("p", 0.0, 1000.0, &rec);
        assert_eq!((p.requests, p.failed), (100, 1));
        assert_eq!((p.p50_ms, p.p99_ms, p.max_ms), (50.0, 99.0, 100.0));
        assert_eq!(p.longest_write_gap_ms, 380.0);
        assert_eq!(longest_gap(&mut [3.0, 1.0, 10.0]), 7.0);
        assert_eq!(longest_gap(&mut []), 0.0);
    }
}
