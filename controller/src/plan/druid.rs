//! What an `Etcd` says about etcd-druid itself, beyond readiness: a suspended spec
//! reconciliation, which would make a step wait for nothing, said as the step's condition
//! with its reason.

use super::conditions::Verdict;
use super::ctx::{covers, Ctx, Outcome};
use super::{EtcdAction, EtcdFields, SUSPEND_SPEC_RECONCILE};

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
