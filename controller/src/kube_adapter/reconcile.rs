//! One reconciliation: validate → observe (what `plan::needs` asks too) → plan once →
//! write (routes, objects, etcd operations) → status; and the finalizer's cleanup.
//!
//! Every write is a server-side apply under field manager `isthmus` with
//! `fieldValidation=Strict` (a field the CRD does not define is an error, not a silent drop)
//! and **without force**: a field another manager (gardenlet) owns with another value is a
//! conflict that is reported in `status.conditions[ObjectsApplied]`, never overwritten.

use super::applied::Read;
use super::context::{Context, FIELD_MANAGER, FINALIZER};
use super::membership::{read_cluster, run_ops};
use super::refuse::{refuse, refuse_access};
use super::write::{confirm_and_delete, release_etcd, status_apply, write};
use super::{etcd_service, load_balancer, notice, proxy, tunnel_server, Error};
use crate::crd::{EtcdMigration, ObjectRef, Role};
use crate::gardener::{
    applied_by, dnsrecord_observe, dnsrecord_resource, etcd_observe, etcd_resource, MIGRATION_LABEL,
};
use crate::plan::conditions::{self as cond, Verdict};
use crate::plan::{self, Observed};
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, DynamicObject, ListParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{finalizer, Error as FinalizerError, Event};
use kube::ResourceExt;
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

/// One pass: validate, observe, plan once, write, report.
async fn apply(m: &EtcdMigration, ns: &str, ctx: &Context) -> Result<Action, Error> {
    let name = m.name_any();
    let spec = &m.spec;
    let problems = plan::validate(spec, ns, &ctx.rules());
    if !problems.is_empty() {
        return refuse(m, ns, ctx, plan::validate::verdict(&problems)).await;
    }
    let (dns_api, etcd_api) = apis(ctx, ns);
    // An on-demand load balancer is there before the first step that needs its address.
    if let Err(e) = load_balancer::sync(ctx).await {
        return refuse_access(m, ns, ctx, e).await;
    }
    let (mut obs, remembered) = match observe(m, ns, ctx, &dns_api, &etcd_api).await {
        Ok(obs) => obs,
        Err(e) => return refuse_access(m, ns, ctx, e).await,
    };
    let needs = plan::needs(spec, &obs);
    let etcd = match needs.etcd_endpoints.is_empty() {
        true => None,
        false => match read_cluster(ctx, ns, spec, &needs.etcd_endpoints).await {
            Ok(etcd) => etcd,
            Err(e) => return refuse_access(m, ns, ctx, e).await,
        },
    };
    obs.etcd_cluster = etcd.as_ref().map(|(_, cluster)| cluster.clone());
    // What every proxy serves of this migration now: the routes its last status holds (the
    // other migrations' passes render them from it too). Routes this plan changes are
    // served from the next pass on.
    let held = plan::wanted_routes(spec, ns, &obs.previous);
    let mut synced = match routes(ctx, m, ns, &held).await? {
        Ok(synced) => synced,
        Err(refusal) => return refuse(m, ns, ctx, refusal).await,
    };
    obs.served_routes = synced.rolled_out.then(|| held.clone());
    let mut plan = plan::plan(spec, &obs);
    if plan.routes != held {
        match routes(ctx, m, ns, &plan.routes).await? {
            Ok(now) => synced = now,
            Err(refusal) => return refuse(m, ns, ctx, refusal).await,
        }
    }

    // The resource manager's trigger for the proxies' way to the members: while this
    // migration's routes are in the file or not yet out of every proxy.
    let wants_service = !plan.routes.is_empty() || !synced.rolled_out;
    let failure = match write(ns, &name, spec, &obs, &plan, &dns_api, &etcd_api).await {
        Ok(applied) => {
            remember(ctx, ns, m, &plan, applied.as_ref(), &remembered);
            etcd_service::sync(ctx, ns, m, wants_service).await.err()
        }
        Err(e) => Some(e),
    };
    let failure = match failure {
        None => tunnel_server::pass(ctx, ns, m, &mut plan, &held, &obs.now)
            .await
            .err(),
        e => e,
    };
    if let (None, Some((client, _))) = (&failure, &etcd) {
        run_ops(client, &plan.etcd_ops, &needs.etcd_endpoints).await;
    }
    let verdict = match &failure {
        None => Verdict::done(cond::APPLIED, "Applied", "every object applied"),
        Some(e) => {
            plan.status.step_ready = false;
            Verdict::refused(cond::APPLIED, e.apply_reason(), e.to_string())
        }
    };
    plan.status.conditions = cond::merge(&plan.status.conditions, &verdict, &obs.now);
    for v in &synced.conditions {
        plan.status.conditions = cond::merge(&plan.status.conditions, v, &obs.now);
    }

    status_apply(ctx, ns, &name, &plan.status).await?;
    notice::overwritten(ctx, m, &obs.previous, &plan.status).await;
    // ...and gone after the last migration that needed it reached its end.
    load_balancer::sync(ctx).await?;
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
    Ok(Action::requeue(
        if !synced.rolled_out && synced.delivering {
            ctx.settings.rollout_poll
        } else if plan.status.step_ready {
            ctx.settings.resync
        } else {
            ctx.settings.poll
        },
    ))
}

/// What the controller remembers of its applies to the `Etcd` after `plan` was written:
/// `applied` (the object the apply returned) at the planned step, or nothing once released
/// or deleted.
fn remember(
    ctx: &Context,
    ns: &str,
    m: &EtcdMigration,
    plan: &plan::Plan,
    applied: Option<&DynamicObject>,
    read: &Read,
) {
    match (&plan.etcd, applied) {
        (plan::EtcdAction::Apply { fields }, Some(etcd)) => {
            let api = m.spec.druid_api;
            ctx.etcd_applied.record(etcd, api, plan.step, fields, read);
        }
        (plan::EtcdAction::Release | plan::EtcdAction::Delete, _) => {
            ctx.etcd_applied.forget(ns, &m.spec.etcd_name);
        }
        _ => {}
    }
}

/// Everything the planner reads from the API: the load balancer's address, our DNS records,
/// the `Etcd`, the last status; and what the controller remembers of its applies to the
/// `Etcd` (`applied`).
async fn observe(
    m: &EtcdMigration,
    ns: &str,
    ctx: &Context,
    dns_api: &Api<DynamicObject>,
    etcd_api: &Api<DynamicObject>,
) -> Result<(Observed, Read), Error> {
    let spec = &m.spec;
    let lb_address = lb_address(ctx, &spec.load_balancer).await?;
    let mut dns_records = BTreeMap::new();
    for o in dns_api.list(&by_migration(&m.name_any())).await?.items {
        dns_records.insert(o.name_any(), dnsrecord_observe(&serde_json::to_value(&o)?));
    }
    let found = etcd_api.get_opt(&spec.etcd_name).await?;
    let remembered = ctx.etcd_applied.read(ns, &spec.etcd_name, found.as_ref());
    let etcd = match found {
        Some(o) => {
            let v = serde_json::to_value(&o)?;
            let mut e = etcd_observe(&v, spec.druid_api);
            e.applied_by_isthmus = applied_by(&v, FIELD_MANAGER);
            Some(e)
        }
        None => None,
    };
    let obs = Observed {
        namespace: ns.to_string(),
        now: (ctx.now)(),
        generation: m.metadata.generation,
        lb_address,
        dns_records,
        served_routes: None,
        etcd,
        etcd_cluster: None,
        etcd_applied: remembered.applied.clone(),
        previous: m.status.clone().unwrap_or_default(),
    };
    Ok((obs, remembered))
}

/// Renders this migration's `routes` with every other one's into the proxy ConfigMap; whether
/// every proxy pod serves the result, or the refusal when the proxy's loader refuses this
/// migration's routes (a spec it cannot serve).
async fn routes(
    ctx: &Context,
    m: &EtcdMigration,
    ns: &str,
    routes: &[plan::MemberRoute],
) -> Result<Result<proxy::Synced, Verdict>, Error> {
    match proxy::sync(ctx, Some((ns, &m.name_any(), routes))).await {
        Ok(synced) => Ok(Ok(synced)),
        Err(Error::InvalidRoutes(message)) => Ok(Err(Verdict::done(
            cond::SPEC_INVALID,
            "RoutesRefused",
            message,
        ))),
        Err(e) => Err(e),
    }
}

/// Removes what this migration created: its DNS records, its proxy routes, its part of the
/// `isthmus-etcd` Service (the Service itself when no other migration needs it), and (source) the
/// fields it set on the `Etcd`, with the reconcile request so etcd-druid rolls the members
/// back. A destination `Etcd` is left alone: after a completed migration it *is* the cluster;
/// so is a source `Etcd` whose cleanup began (its members left the cluster; gardenlet deletes
/// it).
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
    match etcd_service::sync(ctx, ns, m, false).await {
        // Without gardenlet's grant (gone already, or never given) the Service, if there is
        // one, goes with its owners by garbage collection; the finalizer must not hang on it.
        Err(Error::Kube(kube::Error::Api(s))) if s.code == 403 => {
            tracing::warn!(namespace = ns, error = %s.message,
                "cannot update the isthmus-etcd Service; it goes with its owners");
        }
        r => r?,
    }
    tunnel_server::cleanup(ctx, ns, m).await?;
    // Nothing of this migration's applies is to be said any more.
    ctx.etcd_applied.forget(ns, &m.spec.etcd_name);
    load_balancer::sync(ctx).await?;
    let previous = m.status.clone().unwrap_or_default();
    if m.spec.role == Role::Source
        && !plan::source_cleanup_started(&previous)
        && etcd_api.get_opt(&m.spec.etcd_name).await?.is_some()
    {
        release_etcd(&etcd_api, &m.spec, ns).await?;
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
