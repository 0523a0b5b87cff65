//! One reconciliation: observe → plan → apply → write status; and the finalizer's cleanup.
//! Requests are issued one after another in a fixed order, which keeps the scripted API
//! server tests exact.

use super::context::{Context, FIELD_MANAGER, FINALIZER};
use super::{proxy, Error};
use crate::crd::{EtcdMigration, ObjectRef, Role};
use crate::gardener::{
    dnsrecord_body, dnsrecord_observe, dnsrecord_resource, etcd_body, etcd_observe, etcd_resource,
    MIGRATION_LABEL,
};
use crate::plan::{self, EtcdAction, EtcdFields, Observed, CONFIRM_DELETION};
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{finalizer, Error as FinalizerError, Event};
use kube::ResourceExt;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Reconciles one `EtcdMigration` (entry point for `Controller::run`).
pub async fn reconcile(mig: Arc<EtcdMigration>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = mig.namespace().ok_or(Error::NoNamespace)?;
    let key = format!("{ns}/{}", mig.name_any());
    let api: Api<EtcdMigration> = Api::namespaced(ctx.client.clone(), &ns);
    let result = finalizer(&api, FINALIZER, mig, |event| async {
        match event {
            Event::Apply(m) => apply(&m, &ns, &ctx).await,
            Event::Cleanup(m) => cleanup(&m, &ns, &ctx).await,
        }
    })
    .await;
    let result = match result {
        Ok(a) => Ok(a),
        Err(FinalizerError::ApplyFailed(e) | FinalizerError::CleanupFailed(e)) => Err(e),
        Err(e) => Err(Error::Finalizer(Box::new(e))),
    };
    if result.is_ok() {
        ctx.succeeded(&key);
    }
    result
}

/// Backoff after a failure: exponential per object, counted by reason.
pub fn error_policy(mig: Arc<EtcdMigration>, err: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics
        .failures
        .get_or_create(&super::metrics::FailureLabels {
            reason: err.label().to_string(),
        })
        .inc();
    let key = format!("{}/{}", mig.namespace().unwrap_or_default(), mig.name_any());
    let wait = ctx.backoff(&key);
    tracing::warn!(migration = %key, error = %err, retry_in = ?wait, "reconcile failed");
    Action::requeue(wait)
}

fn apis(ctx: &Context, ns: &str) -> (Api<DynamicObject>, Api<DynamicObject>) {
    (
        Api::namespaced_with(ctx.client.clone(), ns, &dnsrecord_resource()),
        Api::namespaced_with(ctx.client.clone(), ns, &etcd_resource()),
    )
}

fn ssa() -> PatchParams {
    PatchParams::apply(FIELD_MANAGER).force()
}

async fn apply(m: &EtcdMigration, ns: &str, ctx: &Context) -> Result<Action, Error> {
    let name = m.name_any();
    let spec = &m.spec;
    let (dns_api, etcd_api) = apis(ctx, ns);

    let lb_address = lb_address(ctx, &spec.load_balancer).await?;
    let mut dns_records = BTreeMap::new();
    for o in dns_api.list(&by_migration(&name)).await?.items {
        dns_records.insert(o.name_any(), dnsrecord_observe(&serde_json::to_value(&o)?));
    }
    let etcd = match etcd_api.get_opt(&spec.etcd_name).await? {
        Some(o) => Some(etcd_observe(&serde_json::to_value(&o)?, spec.druid_api)),
        None => None,
    };
    let proxy_rolled_out = proxy::sync(ctx).await?;
    let obs = Observed {
        namespace: ns.to_string(),
        now: (ctx.now)(),
        generation: m.metadata.generation,
        lb_address,
        dns_records,
        proxy_rolled_out,
        etcd,
        previous: m.status.clone().unwrap_or_default(),
    };
    let plan = plan::plan(spec, &obs);

    for d in &plan.dns_records {
        let body = dnsrecord_body(ns, &name, d);
        dns_api
            .patch(&d.object_name, &ssa(), &Patch::Apply(body))
            .await?;
    }
    for n in &plan.dns_deletions {
        if obs.dns_records.contains_key(n) {
            confirm_and_delete(&dns_api, n).await?;
        }
    }
    let none = BTreeMap::new();
    match &plan.etcd {
        EtcdAction::Keep => {}
        EtcdAction::Apply {
            fields,
            annotations,
        } => {
            let body = etcd_body(&spec.etcd_name, ns, spec.druid_api, fields, annotations);
            etcd_api
                .patch(&spec.etcd_name, &ssa(), &Patch::Apply(body))
                .await?;
        }
        EtcdAction::Release => {
            let body = etcd_body(
                &spec.etcd_name,
                ns,
                spec.druid_api,
                &EtcdFields::default(),
                &none,
            );
            etcd_api
                .patch(&spec.etcd_name, &ssa(), &Patch::Apply(body))
                .await?;
        }
        EtcdAction::Delete => confirm_and_delete(&etcd_api, &spec.etcd_name).await?,
    }
    if !plan.members_to_remove.is_empty() {
        // In Kubernetes etcd-druid (Shrink) or gardenlet (abort) removes members.
        tracing::info!(members = ?plan.members_to_remove, "waiting for etcd member removal");
    }

    let status = json!({
        "apiVersion": "isthmus.dev/v1alpha1",
        "kind": "EtcdMigration",
        "status": plan.status,
    });
    let api: Api<EtcdMigration> = Api::namespaced(ctx.client.clone(), ns);
    api.patch_status(&name, &ssa(), &Patch::Apply(status))
        .await?;

    let role = match spec.role {
        Role::Source => "source",
        Role::Destination => "destination",
    };
    ctx.metrics
        .reconciliations
        .get_or_create(&super::metrics::StepLabels {
            role: role.into(),
            step: format!("{:?}", plan.step),
            ready: plan.status.step_ready.to_string(),
        })
        .inc();
    Ok(Action::requeue(if plan.status.step_ready {
        ctx.settings.resync
    } else {
        ctx.settings.poll
    }))
}

/// Removes what this migration created: its DNS records, its proxy routes, and (source) the
/// fields it set on the `Etcd`. A destination `Etcd` is left alone: after a completed
/// migration it *is* the cluster.
async fn cleanup(m: &EtcdMigration, ns: &str, ctx: &Context) -> Result<Action, Error> {
    let name = m.name_any();
    let (dns_api, etcd_api) = apis(ctx, ns);
    let records = dns_api.list(&by_migration(&name)).await?.items;
    for r in &records {
        if r.metadata.deletion_timestamp.is_none() {
            confirm_and_delete(&dns_api, &r.name_any()).await?;
        }
    }
    proxy::sync(ctx).await?;
    if m.spec.role == Role::Source && etcd_api.get_opt(&m.spec.etcd_name).await?.is_some() {
        let body = etcd_body(
            &m.spec.etcd_name,
            ns,
            m.spec.druid_api,
            &EtcdFields::default(),
            &BTreeMap::new(),
        );
        etcd_api
            .patch(&m.spec.etcd_name, &ssa(), &Patch::Apply(body))
            .await?;
    }
    if !records.is_empty() {
        // Keep the finalizer until the DNS provider has removed the records.
        return Err(Error::CleanupPending(records.len()));
    }
    Ok(Action::await_change())
}

fn by_migration(name: &str) -> ListParams {
    ListParams::default().labels(&format!("{MIGRATION_LABEL}={name}"))
}

/// Gardener refuses to delete a `DNSRecord` or `Etcd` without the confirmation annotation.
async fn confirm_and_delete(api: &Api<DynamicObject>, name: &str) -> Result<(), Error> {
    let confirm = json!({"metadata": {"annotations": {CONFIRM_DELETION: "true"}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(confirm))
        .await?;
    api.delete(name, &DeleteParams::default()).await?;
    Ok(())
}

async fn lb_address(ctx: &Context, lb: &ObjectRef) -> Result<Option<String>, Error> {
    let svcs: Api<Service> = Api::namespaced(ctx.client.clone(), &lb.namespace);
    let Some(svc) = svcs.get_opt(&lb.name).await? else {
        return Ok(None);
    };
    let ingress = svc
        .status
        .and_then(|s| s.load_balancer)
        .and_then(|l| l.ingress)
        .unwrap_or_default();
    Ok(ingress.into_iter().find_map(|i| i.ip.or(i.hostname)))
}
