//! etcd-druid's parts that cannot run here (it manages StatefulSets: it needs kubelets, pods
//! and volumes), as Gardener deploys it (`controllers.etcd.enableEtcdSpecAutoReconcile:
//! false`), acting only through the seed's API and, as its pods, through etcd's API
//! ([`pods`], on the real etcd of `crate::etcd`). Mirrors etcd-druid v0.38.1
//! `internal/controller/etcd/`:
//!
//! - it reconciles an `Etcd`'s spec only when it is created or carries
//!   `druid.gardener.cloud/operation: reconcile` or the deprecated
//!   `gardener.cloud/operation: reconcile` (`reconcile_spec.go` `shouldReconcileSpec`,
//!   `api/core/v1alpha1/helper.go` `HasReconcileOperationAnnotation`): a spec changed without
//!   a request does not reach the StatefulSet (its generation stays unobserved);
//! - reconciling a spec hands it to the StatefulSet and ends: `status.observedGeneration` is
//!   written, *then* both annotations are removed (`reconcile_complete.go`
//!   `completeReconcile`, `RemoveOperationAnnotation`); the pods roll out afterwards, one
//!   operation per pass ([`pods`]), and the status says so meanwhile (`status.rs`:
//!   `AllMembersUpdated` `False`, not `ready`);
//! - while the `Etcd` carries `druid.gardener.cloud/suspend-etcd-spec-reconcile` no spec is
//!   reconciled and the request stays (`shouldReconcileSpec`); the status flow goes on
//!   (`reconciler.go`);
//! - a request for a generation it already reconciled, put back after its removal, is
//!   recorded as a violation of the contract (isthmus must never ask twice);
//! - the members a joining `Etcd` recorded in its join record are removed once its bootstrap
//!   members were cleared: etcd-druid#1426's removal (open; DEP-08), with its bookkeeping
//!   (`scale.rs`): `ScaleOperationComplete`, and a change its CEL rules would refuse recorded
//!   as a violation.
//!
//! It notes the generations it reconciled and those whose rollout was done (the members ran
//! that spec): a test's figures of what druid did with a spec before the next one came.
//!
//! Where a node runs the real etcd-druid (issue 44), it replaces all of this: [`EtcdDruid`]
//! is the seam a test holds instead of the stand-in.

pub mod pods;
mod reconcile;
/// etcd-druid#1426's bookkeeping of a scale operation.
pub mod scale;
pub mod spec;
mod status;
mod task;

pub use spec::DruidSpec;
pub use task::{DruidTask, EtcdDruid, Generations};

use crate::error::{Error, Result};
use crate::etcd::Cluster;
use crate::journal::Journal;
use isthmus_controller::plan::{DRUID_OPERATION, OPERATION};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{json, Value};
use std::time::Instant;

/// The stand-in for one seed's `Etcd`.
#[derive(Debug)]
pub struct DruidStandIn {
    /// The `Etcd`'s name.
    etcd: String,
    /// Which seed, in what it reports (`source`, `destination`).
    label: String,
    st: State,
    violations: Vec<String>,
}

/// What the stand-in remembers between passes (etcd-druid keeps it in its StatefulSet and the
/// object's status).
#[derive(Debug, Default)]
struct State {
    /// The object whose spec was reconciled last: what the StatefulSet runs.
    sts: Option<Value>,
    /// The last generation reconciled.
    observed: Option<i64>,
    /// Every generation reconciled, in order.
    reconciled: Vec<i64>,
    /// Every generation the members ran once reconciled (its rollout done), in order.
    rolled_out: Vec<i64>,
    /// The generation whose request was answered (its annotations removed).
    answered: Option<i64>,
    /// The spec as seen last pass (what etcd-druid#1426's CEL rules compare a change with).
    seen: Option<Value>,
    /// The scale operation in progress (etcd-druid#1426), and whether one ever ran.
    scale_op: Option<&'static str>,
    scale_seen: bool,
    last_removal: Option<Instant>,
}

/// What one pass saw.
#[derive(Debug, Default)]
pub struct Pass {
    /// The `Etcd` as read at the start of the pass; `None` when there is none.
    pub etcd: Option<Value>,
    /// Breaches of the contract first seen in this pass.
    pub violations: Vec<String>,
}

impl DruidStandIn {
    /// The stand-in for the `Etcd` named `etcd` of seed `label`.
    pub fn new(etcd: &str, label: &str) -> Self {
        Self {
            etcd: etcd.into(),
            label: label.into(),
            st: State::default(),
            violations: Vec::new(),
        }
    }

    /// Every breach of the contract seen so far.
    pub fn violations(&self) -> &[String] {
        &self.violations
    }

    /// The generations reconciled (handed to the StatefulSet), in order.
    pub fn reconciled(&self) -> &[i64] {
        &self.st.reconciled
    }

    /// The generations whose rollout was done (the members ran that spec), in order.
    pub fn rolled_out(&self) -> &[i64] {
        &self.st.rolled_out
    }

    /// One pass over the `Etcd` (read through `api`), its pods acting on `c`.
    pub async fn pass(
        &mut self,
        api: &Api<DynamicObject>,
        c: &mut Cluster,
        j: &mut dyn Journal,
    ) -> Result<Pass> {
        let tag = format!("etcd-druid stand-in ({})", self.label);
        let read = api.get_opt(&self.etcd).await;
        let obj = read.map_err(|e| Error::kube(format!("{tag}: reading the Etcd"), e))?;
        let Some(obj) = obj else {
            self.gone(c, j, &tag);
            return Ok(Pass::default());
        };
        let v = serde_json::to_value(&obj).map_err(|e| Error::State(e.to_string()))?;
        let before = self.violations.len();
        let requested = [DRUID_OPERATION, OPERATION]
            .iter()
            .any(|k| v["metadata"]["annotations"][k] == "reconcile");
        self.check_cel(&v);
        self.reconcile_spec(&v, requested);
        let spec = DruidSpec::read(self.st.sts.as_ref().unwrap_or(&v));
        // No spec reconciled yet (a suspended creation): no StatefulSet, no pods.
        let rolling = match self.st.sts.is_some() {
            true => self.roll_out(c, &spec, &joined(&v), j, &tag).await?,
            false => false,
        };
        if !rolling {
            self.st.scale_op = None;
        }
        // Seen after the pass' operation: a roll done in it counts, though the status says
        // so only next pass (a newer generation may replace it first).
        let ran = self.st.sts.is_some() && pods::runs(c, &spec);
        if ran && self.st.rolled_out.last() != self.st.observed.as_ref() {
            self.st.rolled_out.extend(self.st.observed);
        }
        let facts = status::Facts {
            spec: &spec,
            etcd: &v,
            observed: self.st.observed,
            rolling,
            scale_op: self.st.scale_op,
            scale_seen: self.st.scale_seen,
        };
        status::write(api, &self.etcd, status::status(c, &facts).await?).await?;
        let generation = v["metadata"]["generation"].as_i64();
        if requested && self.st.observed.is_some() && self.st.observed == generation {
            // After `observedGeneration`, as etcd-druid's `completeReconcile` does.
            let drop =
                json!({"metadata": {"annotations": {DRUID_OPERATION: null, OPERATION: null}}});
            api.patch(&self.etcd, &PatchParams::default(), &Patch::Merge(drop))
                .await
                .map_err(|e| Error::kube(format!("{tag}: Etcd annotations"), e))?;
            self.st.answered = generation;
        }
        Ok(Pass {
            etcd: Some(v),
            violations: self.violations[before..].to_vec(),
        })
    }

    /// One operation of the pods towards `spec`, or #1426's next removal of `sources`;
    /// whether the rollout goes on.
    async fn roll_out(
        &mut self,
        c: &mut Cluster,
        spec: &DruidSpec,
        sources: &[String],
        j: &mut dyn Journal,
        tag: &str,
    ) -> Result<bool> {
        if pods::step(c, spec, j, tag).await? {
            return Ok(true);
        }
        let last = &mut self.st.last_removal;
        pods::remove_sources(c, spec, sources, last, j, tag).await
    }

    /// No `Etcd` (any more): its pods stop, their members leave the harness, and druid
    /// forgets it.
    fn gone(&mut self, c: &mut Cluster, j: &mut dyn Journal, tag: &str) {
        if let Some(sts) = self.st.sts.take() {
            for name in DruidSpec::read(&sts).pods(c) {
                if c.is_member(&name) || c.running().contains(&name) {
                    c.forget(&name);
                    j.event(format!("{tag}: Etcd deleted, {name} stopped"));
                }
            }
        }
        self.st = State {
            reconciled: std::mem::take(&mut self.st.reconciled),
            rolled_out: std::mem::take(&mut self.st.rolled_out),
            ..State::default()
        };
    }
}

/// The members an `Etcd`'s join record lists (`status.bootstrapWithExistingCluster`).
fn joined(v: &Value) -> Vec<String> {
    v["status"]["bootstrapWithExistingCluster"]["members"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["name"].as_str().map(String::from))
        .collect()
}
