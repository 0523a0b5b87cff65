//! The run's report: JSON (the contract of `isthmus-lab demo --report`), its human summary
//! (`summary.rs`) and the parts the SVG timeline draws (`crate::svg`).

pub mod compare;
pub mod real;
pub mod steps;
mod summary;

pub use crate::api::report::{ApiReport, ControlPlane, Objects};
use crate::client::{Kind, Recording, Sample};
pub use crate::stats::{covered, longest_gap, phase, Event, Fault, Phase, PhaseStats};
use serde::Serialize;

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
    "etcd-druid: reads each seed's Etcd from its API server and, as Gardener deploys it, acts only on a reconcile request (druid.gardener.cloud/operation: reconcile, or the deprecated gardener.cloud/operation): member add/promote/remove, member update + rolling restart of the peer URLs and member processes (etcd-druid needs StatefulSets and kubelets); writes the status etcd-druid writes, observedGeneration before it removes the request",
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

impl Report {
    /// What the report's webhook figures are: the lab's own caller through the tunnel, or on
    /// real seeds (no lab caller) the reviews the shoot's webhook answered.
    pub fn webhook_label(&self) -> &'static str {
        if self.scenario == real::SCENARIO {
            "webhook (the shoot's reviews through the tunnels)"
        } else {
            "webhook (lab caller through the tunnel)"
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
    /// The injected fault whose failures are expected (the 6-member cut, the leader's
    /// `kill -9`), with their counts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fault: Option<Fault>,
    /// Time for the two destination members to join (3 → 5), if they did.
    pub join_ms: Option<f64>,
    /// Invariants that failed; empty when the run is good.
    pub violations: Vec<String>,
    /// The migration's steps as timed lanes with where their time went (a run on real seeds,
    /// [`real`]; the lab's own runs have its phases instead).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<steps::Step>,
    /// Each step's duration beside the lab's (a run on real seeds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comparison: Option<compare::Comparison>,
    #[serde(skip)]
    pub samples: Vec<Sample>,
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
