//! What an `Etcd` says about etcd-druid itself, beyond readiness: a suspended spec
//! reconciliation, which would make a step wait for nothing, said as the step's condition
//! with its reason; and a scale operation in progress, which the opposite one must wait for.
//!
//! The scale operations are etcd-druid#1426's (open; DEP-08, `docs/proposals/08-scale-in.md`,
//! merged in #1369): druid writes `ScaleOperationComplete=False` with reason `ScalingOut`
//! (more `replicas`, or a `bootstrapWithExistingCluster` join), `ScalingIn` (fewer, not 0) or
//! `BootstrapMembersRemoval` (bootstrap members removed or unset) while one runs, `True` /
//! `NoScaleOperation` once done; its CRD's CEL rules refuse any other of the three while one
//! runs, transitions to or from 0 replicas excepted. isthmus never writes such a change:
//! it keeps the observed value of that field and waits. v0.38.1 writes no such condition, and
//! then nothing is held.

use super::conditions::Verdict;
use super::ctx::{covers, Ctx, Outcome};
use super::{EtcdAction, EtcdFields, SUSPEND_SPEC_RECONCILE};
use crate::crd::MemberUrls;

/// Condition reason while etcd-druid skips the `Etcd`'s specs.
pub const SUSPENDED: &str = "EtcdSpecReconcileSuspended";

/// The verdict that replaces `out`'s while the `Etcd` carries
/// `druid.gardener.cloud/suspend-etcd-spec-reconcile` and the step waits for etcd-druid: an
/// unobserved generation, a pending request, or a spec change this pass makes. etcd-druid
/// v0.38.1 skips every spec then, the creation's included, and keeps the request
/// (`internal/controller/etcd/reconcile_spec.go`, `shouldReconcileSpec`; `reconciler.go`
/// runs `completeReconcile` only for a reconciled spec). A refusal (`False`) or a reached step
/// keeps its own verdict.
pub(super) fn suspended(ctx: &Ctx<'_>, out: &Outcome) -> Option<Verdict> {
    let e = ctx.obs.etcd.as_ref().filter(|e| e.suspended)?;
    if out.ready || out.verdict.status == "False" {
        return None;
    }
    let changes = match &out.etcd {
        EtcdAction::Apply { fields, .. } => !covers(&e.fields, fields),
        EtcdAction::Release => !covers(&e.fields, &EtcdFields::default()),
        EtcdAction::Keep | EtcdAction::Delete => false,
    };
    let owed = !e.synced() || e.operation.as_deref() == Some("reconcile") || changes;
    owed.then(|| {
        Verdict::waiting(
            out.verdict.type_,
            SUSPENDED,
            format!(
                "Etcd {} carries {SUSPEND_SPEC_RECONCILE}: etcd-druid acts on none of its specs until it is removed",
                ctx.spec.etcd_name
            ),
        )
    })
}

/// Condition reason while a scale change waits for druid's opposite one.
pub const SCALE_WAIT: &str = "WaitingForScaleOperation";

/// `replicas` and bootstrap members to write this pass: what the step wants, or the observed
/// value of a field whose change would start an operation other than the one druid reports
/// running; `waiting` says why when one is held.
pub(super) struct Scale {
    pub(super) replicas: i32,
    pub(super) bootstrap: Vec<MemberUrls>,
    pub(super) waiting: Option<String>,
}

/// Serialises the step's scale changes behind the one etcd-druid reports running.
pub(super) fn serialised(ctx: &Ctx<'_>, replicas: i32, bootstrap: Vec<MemberUrls>) -> Scale {
    let mut out = Scale {
        replicas,
        bootstrap,
        waiting: None,
    };
    let Some(e) = ctx.obs.etcd.as_ref() else {
        return out;
    };
    let Some(running) = e.scale_operation.as_deref() else {
        return out;
    };
    let mut held = Vec::new();
    let old = e.fields.replicas.unwrap_or(0);
    if old > 0 && out.replicas > 0 && out.replicas != old {
        let starts = if out.replicas > old {
            "ScalingOut"
        } else {
            "ScalingIn"
        };
        if starts != running {
            held.push(format!("replicas {old} -> {}", out.replicas));
            out.replicas = old;
        }
    }
    let have = &e.fields.bootstrap_members;
    if !have.is_empty() && out.bootstrap != *have && running != "BootstrapMembersRemoval" {
        held.push("the removal of the bootstrap members".to_string());
        out.bootstrap = have.clone();
    }
    if !held.is_empty() {
        out.waiting = Some(format!(
            "etcd-druid reports ScaleOperationComplete=False/{running} on Etcd {}: {} waits until it completes",
            ctx.spec.etcd_name,
            held.join(" and ")
        ));
    }
    out
}
