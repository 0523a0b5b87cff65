//! What a run is asked to do: the scenario (the migration alone or with one fault) and the
//! options (`isthmus-lab demo`'s flags, the end-to-end tests' settings).

use std::path::PathBuf;
use std::time::Duration;

/// What to inject during the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// The migration with no fault.
    Migrate,
    /// Cut the inter-seed link for `cut` during the 5-member phase, then restore it.
    LinkCut { cut: Duration },
    /// Abort after the first destination member was added, before the join completes.
    Abort,
    /// Restart (with drain) the source seed's proxy in the middle of the 5-member phase.
    ProxyRestart,
    /// `kill -9` of the etcd leader in the 5-member phase; restarted on its data after 2 s.
    KillLeader,
    /// Cut the inter-seed link for `cut` in the 6-member phase: neither side has a quorum
    /// (3 of 6), so the API stops acknowledging writes until the link returns. Failures inside
    /// the cut (plus [`RECOVERY`]) are reported as the fault's, not as violations; nothing
    /// acknowledged may be lost.
    LinkCutSix { cut: Duration },
    /// `kill -9` of the destination controller holding the Lease while its Join runs (after
    /// the first learner was added); the other replica must take the Lease and finish the
    /// step; the killed one starts again. Needs the controllers.
    KillController,
    /// The destination seed's kube-apiserver restarts while its Join runs. Needs the
    /// controllers.
    RestartSeedApi,
}

/// How long after a quorum-losing cut ends failures still count as the cut's.
pub const RECOVERY: Duration = Duration::from_secs(15);

impl Scenario {
    /// Whether the scenario acts on the seeds' control planes (so the controllers must drive).
    pub fn needs_controllers(&self) -> bool {
        matches!(self, Self::KillController | Self::RestartSeedApi)
    }

    /// The scenario's name in the report (`--scenario`'s spelling).
    pub fn name(&self) -> &'static str {
        match self {
            Self::Migrate => "migrate",
            Self::LinkCut { .. } => "link-cut",
            Self::Abort => "abort",
            Self::ProxyRestart => "proxy-restart",
            Self::KillLeader => "kill-leader",
            Self::LinkCutSix { .. } => "link-cut-six",
            Self::KillController => "kill-controller",
            Self::RestartSeedApi => "restart-seed-api",
        }
    }
}

/// How to run the lab.
#[derive(Debug, Clone)]
pub struct Options {
    pub rtt: Duration,
    pub scenario: Scenario,
    /// The `isthmus` binary (each seed runs `isthmus proxy`).
    pub proxy_bin: PathBuf,
    /// The shoot's kube-apiserver (built by `scripts/build-kubernetes.sh`).
    pub kube_apiserver_bin: PathBuf,
    /// Scratch directory for certificates, configs, data and logs.
    pub dir: PathBuf,
    /// Time between two client requests (writes and reads alternate).
    pub interval: Duration,
    /// How long the steady phases (source, 5 members, destination) last.
    pub hold: Duration,
    /// Run etcd with `--pre-vote` (on by default; off shows the election a rejoining,
    /// partitioned member forces).
    pub pre_vote: bool,
    /// The controllers drive the migration: each seed runs its own kube-apiserver and
    /// `isthmus controller` replicas (`crate::control`), instead of the lab calling the
    /// controller's planner as a library.
    pub controllers: bool,
}
