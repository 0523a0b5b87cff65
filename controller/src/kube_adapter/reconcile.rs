//! One reconciliation: observe → plan → apply → write status; and the finalizer's cleanup.
//!
//! Every write is a server-side apply under field manager `isthmus` with
//! `fieldValidation=Strict` (a field the CRD does not define is an error, not a silent drop)
//! and **without force**: a field another manager (gardenlet) owns with another value is a
//! conflict that is reported in `status.conditions[ObjectsApplied]`, never overwritten.

use super::context::{Context, FIELD_MANAGER, FINALIZER};
use super::etcd::EtcdClient;
use super::{proxy, Error};
use crate::crd::{EtcdMigration, EtcdMigrationSpec, ObjectRef, Role, Step};
use crate::gardener::{
    dnsrecord_body, dnsrecord_observe, dnsrecord_resource, etcd_body, etcd_observe, etcd_resource,
    MIGRATION_LABEL,
};
use crate::plan::conditions::{self as cond, Verdict};
use crate::plan::{
    self, EtcdAction, EtcdCluster, EtcdFields, EtcdOp, Observed, Plan, CONFIRM_DELETION,
};
use k8s_openapi::api::core::v1::{Secret, Service};
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

/// Server-side apply, strict field validation, no force.
pub(super) fn ssa() -> PatchParams {
    PatchParams::apply(FIELD_MANAGER).validation_strict()
}

/// Whether this pass needs etcd's own member list (reading it costs a TLS round trip per
/// endpoint, and times out while the exposure does not work yet).
fn needs_cluster(spec: &EtcdMigrationSpec, etcd_exists: bool) -> bool {
    match (spec.role, spec.step) {
        (Role::Source, Step::Abort) => true,
        (Role::Destination, Step::Join | Step::Grow | Step::Shrink | Step::Abort) => etcd_exists,
        _ => false,
    }
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
    let mut obs = Observed {
        namespace: ns.to_string(),
        now: (ctx.now)(),
        generation: m.metadata.generation,
        lb_address,
        dns_records,
        served_routes: None,
        etcd,
        etcd_cluster: None,
        previous: m.status.clone().unwrap_or_default(),
    };
    let client = if needs_cluster(spec, obs.etcd.is_some()) {
        match etcd_client(ctx, ns, spec).await {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::warn!(migration = %name, error = %e, "etcd client");
                None
            }
        }
    } else {
        None
    };
    // The first plan gives the endpoints (member names carry the observed prefix) and routes.
    let first = plan::plan(spec, &obs);
    let endpoints = endpoints(spec, &first);
    if let Some(c) = &client {
        match c.cluster(&endpoints).await {
            Ok(cluster) => obs.etcd_cluster = Some(cluster),
            Err(e) => tracing::warn!(migration = %name, error = %e, "etcd member list"),
        }
    }
    let first = plan::plan(spec, &obs);
    let synced = proxy::sync(ctx, Some((ns, &name, &first.routes))).await?;
    obs.served_routes = synced.rolled_out.then(|| first.routes.clone());
    let mut plan = plan::plan(spec, &obs);

    let mut failure = None;
    if let Err(e) = write(ns, &name, spec, &obs, &plan, &dns_api, &etcd_api).await {
        failure = Some(e);
    }
    if failure.is_none() {
        if let (Some(c), Some(cluster)) = (&client, &obs.etcd_cluster) {
            run_ops(c, &plan.etcd_ops, cluster, &endpoints, spec, &plan).await;
        }
    }
    let verdict = match &failure {
        None => Verdict::done(cond::APPLIED, "Applied", "every object applied"),
        Some(e) => {
            plan.status.step_ready = false;
            Verdict::refused(cond::APPLIED, apply_reason(e), e.to_string())
        }
    };
    plan.status.conditions = cond::merge(&plan.status.conditions, &verdict, &obs.now);
    for v in &synced.conditions {
        plan.status.conditions = cond::merge(&plan.status.conditions, v, &obs.now);
    }

    let status = json!({
        "apiVersion": "isthmus.dev/v1alpha1",
        "kind": "EtcdMigration",
        "status": plan.status,
    });
    let api: Api<EtcdMigration> = Api::namespaced(ctx.client.clone(), ns);
    api.patch_status(&name, &ssa().force(), &Patch::Apply(status))
        .await?;
    if let Some(e) = failure {
        return Err(e);
    }

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

fn apply_reason(e: &Error) -> &'static str {
    match e {
        Error::Kube(kube::Error::Api(s)) if s.code == 409 => "FieldConflict",
        Error::Kube(kube::Error::Api(s)) if s.code == 422 => "Invalid",
        Error::Kube(kube::Error::Api(s)) if s.code == 403 => "Forbidden",
        _ => "ApplyFailed",
    }
}

/// Applies the plan's objects in order: DNS records, record deletions, the `Etcd`.
async fn write(
    ns: &str,
    name: &str,
    spec: &EtcdMigrationSpec,
    obs: &Observed,
    plan: &Plan,
    dns_api: &Api<DynamicObject>,
    etcd_api: &Api<DynamicObject>,
) -> Result<(), Error> {
    for d in &plan.dns_records {
        let body = dnsrecord_body(ns, name, d);
        dns_api
            .patch(&d.object_name, &ssa(), &Patch::Apply(body))
            .await?;
    }
    for n in &plan.dns_deletions {
        if obs.dns_records.contains_key(n) {
            confirm_and_delete(dns_api, n).await?;
        }
    }
    let none = BTreeMap::new();
    match &plan.etcd {
        EtcdAction::Keep => {}
        EtcdAction::Apply {
            fields,
            annotations,
        } => {
            let body = etcd_body(spec, ns, fields, annotations);
            etcd_api
                .patch(&spec.etcd_name, &ssa(), &Patch::Apply(body))
                .await?;
        }
        EtcdAction::Release => {
            let body = etcd_body(spec, ns, &EtcdFields::default(), &none);
            etcd_api
                .patch(&spec.etcd_name, &ssa(), &Patch::Apply(body))
                .await?;
        }
        EtcdAction::Delete => confirm_and_delete(etcd_api, &spec.etcd_name).await?,
    }
    if !plan.members_to_remove.is_empty() && plan.etcd_ops.is_empty() {
        // At Shrink etcd-druid removes the source members (after the bootstrap is cleared).
        tracing::info!(members = ?plan.members_to_remove, "waiting for etcd member removal");
    }
    Ok(())
}

/// The client URLs the controller asks etcd through: the source members' (through the other
/// seed's exposure) first, since they are voters from the start, then this seed's own.
fn endpoints(spec: &EtcdMigrationSpec, plan: &Plan) -> Vec<String> {
    let mut out: Vec<String> = spec
        .destination
        .iter()
        .flat_map(|d| d.source_members.iter())
        .flat_map(|m| m.client_urls.iter().cloned())
        .collect();
    out.extend(
        plan.status
            .exposed_members
            .iter()
            .flat_map(|m| m.client_urls.iter().cloned()),
    );
    out
}

/// Carries out the plan's etcd operations; a failure is logged and the next pass retries
/// (the plan asks again while etcd's member list still shows the need).
async fn run_ops(
    client: &EtcdClient,
    ops: &[EtcdOp],
    cluster: &EtcdCluster,
    endpoints: &[String],
    spec: &EtcdMigrationSpec,
    plan: &Plan,
) {
    for op in ops {
        let result = match op {
            EtcdOp::MoveLeader { to, name } => {
                let leader_url = cluster
                    .leader
                    .and_then(|l| cluster.members.iter().find(|m| m.id == l))
                    .and_then(|leader| {
                        let known = spec
                            .destination
                            .iter()
                            .flat_map(|d| d.source_members.iter())
                            .chain(plan.status.exposed_members.iter());
                        known
                            .filter(|k| {
                                k.name == leader.name
                                    || k.peer_urls.iter().any(|u| leader.peer_urls.contains(u))
                            })
                            .find_map(|k| k.client_urls.first().cloned())
                    });
                match leader_url {
                    Some(url) => {
                        tracing::info!(to = %name, via = %url, "moving etcd leadership");
                        client.move_leader(&url, *to).await
                    }
                    None => {
                        tracing::warn!("the etcd leader has no exposed client URL");
                        Ok(())
                    }
                }
            }
            EtcdOp::Remove { id, name } => {
                tracing::info!(member = %name, "removing etcd member (abort)");
                client.remove(endpoints, *id).await
            }
        };
        if let Err(e) = result {
            tracing::warn!(error = %e, "etcd operation failed; retried next pass");
        }
    }
}

/// The etcd client TLS material from the Secret named in the spec (`ca.crt`, `tls.crt`,
/// `tls.key`).
async fn etcd_client(
    ctx: &Context,
    ns: &str,
    spec: &EtcdMigrationSpec,
) -> Result<EtcdClient, Error> {
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    let secret = secrets.get(&spec.etcd_client.secret_name).await?;
    let data = secret.data.unwrap_or_default();
    let get = |k: &str| {
        data.get(k).map(|b| b.0.clone()).ok_or_else(|| {
            Error::EtcdTls(format!(
                "Secret {ns}/{} has no key {k}",
                spec.etcd_client.secret_name
            ))
        })
    };
    EtcdClient::new(
        &get("ca.crt")?,
        &get("tls.crt")?,
        &get("tls.key")?,
        ctx.settings.etcd_connect_to.clone(),
    )
    .map_err(|e| Error::EtcdTls(e.to_string()))
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
    proxy::sync(ctx, None).await?;
    if m.spec.role == Role::Source && etcd_api.get_opt(&m.spec.etcd_name).await?.is_some() {
        let body = etcd_body(&m.spec, ns, &EtcdFields::default(), &BTreeMap::new());
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
