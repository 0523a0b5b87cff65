//! Controller metrics, registered into a registry handed in by `main` (no globals).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Label of the failure counter.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailureLabels {
    /// [`super::Error::label`].
    pub reason: String,
}

/// Label of the reconciliation counter.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StepLabels {
    /// `source` or `destination`.
    pub role: String,
    /// Planned step.
    pub step: String,
    /// Whether the step was ready after this pass.
    pub ready: String,
}

/// Label of the nudge counter.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NudgeLabels {
    /// `patched` or `failed`.
    pub outcome: String,
}

/// Label of the overwrite counter.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OverwriteLabels {
    /// The `EtcdSpecOverwritten` reason (`Reasserted`, `ReplicasRaised`, `BootstrapRemoved`).
    pub reason: String,
}

/// The controller's metrics.
#[derive(Debug, Clone, Default)]
pub struct Metrics {
    /// Successful reconciliations by role, step and readiness.
    pub reconciliations: Family<StepLabels, Counter>,
    /// Failed reconciliations by reason.
    pub failures: Family<FailureLabels, Counter>,
    /// 1 while this replica holds the leader Lease.
    pub leader: Gauge,
    /// Proxy pods nudged to get a new route file at once, by outcome (`super::nudge`).
    pub nudges: Family<NudgeLabels, Counter>,
    /// Findings that another writer removed or changed isthmus' fields on an `Etcd`.
    pub overwritten: Family<OverwriteLabels, Counter>,
}

impl Metrics {
    /// Creates the metrics and registers them under `isthmus_controller_`.
    pub fn new(registry: &mut Registry) -> Self {
        let m = Self::default();
        let r = registry.sub_registry_with_prefix("isthmus_controller");
        r.register(
            "reconciliations",
            "Successful reconciliations",
            m.reconciliations.clone(),
        );
        r.register(
            "failures",
            "Failed reconciliations by reason",
            m.failures.clone(),
        );
        r.register(
            "etcd_overwritten",
            "Findings that another writer (gardenlet's Deploy) removed or changed isthmus' fields on an Etcd, by reason",
            m.overwritten.clone(),
        );
        r.register(
            "leader",
            "1 while this replica holds the leader Lease",
            m.leader.clone(),
        );
        r.register(
            "proxy_nudges",
            "Proxy pods nudged to get a new route file at once, by outcome",
            m.nudges.clone(),
        );
        m
    }

    /// Counts one nudge of a proxy pod.
    pub fn nudge(&self, patched: bool) {
        let outcome = if patched { "patched" } else { "failed" };
        self.nudges
            .get_or_create(&NudgeLabels {
                outcome: outcome.into(),
            })
            .inc();
    }
}
