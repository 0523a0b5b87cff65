//! Writing a plan's objects: server-side apply (field manager `isthmus`, strict, no force but
//! the destination abort's `replicas: 0`),
//! the reconcile request after an apply that changed a spec (`plan::request`), and deletion
//! after Gardener's confirmation annotation.

use super::context::{Context, FIELD_MANAGER};
use super::Error;
use crate::crd::{EtcdMigration, EtcdMigrationSpec, EtcdMigrationStatus};
use crate::gardener::{dnsrecord_body, dnsrecord_observe, etcd_body, etcd_observe};
use crate::plan::request::{dnsrecord_needs_request, etcd_needs_request};
use crate::plan::{
    EtcdAction, EtcdFields, Observed, Plan, CONFIRM_DELETION, DRUID_OPERATION, OPERATION,
};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use serde_json::json;

/// Server-side apply, strict field validation, no force.
pub(super) fn ssa() -> PatchParams {
    PatchParams::apply(FIELD_MANAGER).validation_strict()
}

/// Applies the plan's objects in order: DNS records, record deletions, the `Etcd`; the `Etcd`
/// as the apply returned it, if the plan applies one.
pub(super) async fn write(
    ns: &str,
    name: &str,
    spec: &EtcdMigrationSpec,
    obs: &Observed,
    plan: &Plan,
    dns_api: &Api<DynamicObject>,
    etcd_api: &Api<DynamicObject>,
) -> Result<Option<DynamicObject>, Error> {
    for d in &plan.dns_records {
        let body = dnsrecord_body(ns, name, d);
        let after = dns_api
            .patch(&d.object_name, &ssa(), &Patch::Apply(body))
            .await?;
        let after = dnsrecord_observe(&serde_json::to_value(&after)?);
        if dnsrecord_needs_request(obs.dns_records.get(&d.object_name), &after) {
            request_reconcile(dns_api, &d.object_name, OPERATION).await?;
        }
    }
    for n in &plan.dns_deletions {
        if obs.dns_records.contains_key(n) {
            confirm_and_delete(dns_api, n).await?;
        }
    }
    let applied = match &plan.etcd {
        EtcdAction::Keep => None,
        EtcdAction::Apply { fields } => {
            Some(apply_etcd(etcd_api, spec, ns, fields, plan.force_etcd).await?)
        }
        EtcdAction::Release => {
            release_etcd(etcd_api, spec, ns).await?;
            None
        }
        EtcdAction::Delete => {
            confirm_and_delete(etcd_api, &spec.etcd_name).await?;
            None
        }
    };
    if !plan.members_to_remove.is_empty() && plan.etcd_ops.is_empty() {
        // At Shrink etcd-druid removes the source members (after the bootstrap is cleared).
        tracing::info!(members = ?plan.members_to_remove, "waiting for etcd member removal");
    }
    Ok(applied)
}

/// Owns exactly `fields` on the `Etcd` and asks etcd-druid to reconcile if that changed it;
/// the `Etcd` as the apply returned it. `force` only for the destination's abort
/// (`Plan::force_etcd`).
async fn apply_etcd(
    api: &Api<DynamicObject>,
    spec: &EtcdMigrationSpec,
    ns: &str,
    fields: &EtcdFields,
    force: bool,
) -> Result<DynamicObject, Error> {
    let body = etcd_body(spec, ns, fields);
    let pp = if force { ssa().force() } else { ssa() };
    let after = api.patch(&spec.etcd_name, &pp, &Patch::Apply(body)).await?;
    if etcd_needs_request(&etcd_observe(
        &serde_json::to_value(&after)?,
        spec.druid_api,
    )) {
        tracing::info!(etcd = %spec.etcd_name, "asking etcd-druid to reconcile");
        request_reconcile(api, &spec.etcd_name, DRUID_OPERATION).await?;
    }
    Ok(after)
}

/// Gives up every field isthmus owns on the `Etcd` (the release intent is empty), with the
/// reconcile request when that changed its spec.
pub(super) async fn release_etcd(
    api: &Api<DynamicObject>,
    spec: &EtcdMigrationSpec,
    ns: &str,
) -> Result<(), Error> {
    apply_etcd(api, spec, ns, &EtcdFields::default(), false)
        .await
        .map(drop)
}

/// Sets `<key>: reconcile` with a merge patch, outside our apply's intent: the owner's removal
/// is then final (a later apply neither deletes nor restores it). `key` is
/// `druid.gardener.cloud/operation` on an `Etcd` (etcd-druid's own; `gardener.cloud/operation`
/// is deprecated there), `gardener.cloud/operation` on a `DNSRecord`.
async fn request_reconcile(api: &Api<DynamicObject>, name: &str, key: &str) -> Result<(), Error> {
    let patch = json!({"metadata": {"annotations": {key: "reconcile"}}});
    let pp = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    };
    api.patch(name, &pp, &Patch::Merge(patch)).await?;
    Ok(())
}

/// Writes `status` (server-side apply, forced: the status is ours alone).
pub(super) async fn status_apply(
    ctx: &Context,
    ns: &str,
    name: &str,
    status: &EtcdMigrationStatus,
) -> Result<(), Error> {
    let body = json!({
        "apiVersion": "isthmus.dev/v1alpha1",
        "kind": "EtcdMigration",
        "status": status,
    });
    let api: Api<EtcdMigration> = Api::namespaced(ctx.client.clone(), ns);
    api.patch_status(name, &ssa().force(), &Patch::Apply(body))
        .await?;
    Ok(())
}

/// Gardener refuses to delete a `DNSRecord` or `Etcd` without the confirmation annotation.
pub(super) async fn confirm_and_delete(api: &Api<DynamicObject>, name: &str) -> Result<(), Error> {
    let confirm = json!({"metadata": {"annotations": {CONFIRM_DELETION: "true"}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(confirm))
        .await?;
    api.delete(name, &DeleteParams::default()).await?;
    Ok(())
}
