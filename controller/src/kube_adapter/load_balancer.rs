//! Makes the proxies' LoadBalancer Service while a migration of the seed needs it, and
//! deletes it once none does (`crate::load_balancer`), when the controller runs with
//! `--proxy-service-template`. RBAC: get of the template's ConfigMap, get/create/patch/delete
//! of that one Service (a server-side apply that creates it is authorised as `create` of its
//! name).

use super::context::Context;
use super::write::ssa;
use super::Error;
use crate::crd::EtcdMigration;
use crate::load_balancer::{needs, service, ON_DEMAND_LABEL, TEMPLATE_KEY};
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::api::{Api, DeleteParams, Patch, Preconditions};
use kube::ResourceExt;

/// Applies the Service if any migration (in the controller's scope) needs it, else deletes
/// it if the controller made it. Returns whether it is needed.
pub(super) async fn sync(ctx: &Context) -> Result<bool, Error> {
    let Some(template) = &ctx.on_demand_lb else {
        return Ok(true);
    };
    let s = &ctx.settings;
    let migrations: Api<EtcdMigration> = match &s.namespace {
        Some(ns) => Api::namespaced(ctx.client.clone(), ns),
        None => Api::all(ctx.client.clone()),
    };
    let rules = ctx.rules();
    let needed = migrations
        .list(&Default::default())
        .await?
        .items
        .iter()
        .any(|m| needs(m, &rules));
    let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &s.proxy_namespace);
    let text = cms
        .get(template)
        .await?
        .data
        .and_then(|mut d| d.remove(TEMPLATE_KEY))
        .ok_or_else(|| {
            Error::LoadBalancer(format!("ConfigMap {template} has no {TEMPLATE_KEY}"))
        })?;
    let (name, body) =
        service(&text, &s.proxy_namespace).map_err(|e| Error::LoadBalancer(e.to_string()))?;
    let services: Api<Service> = Api::namespaced(ctx.client.clone(), &s.proxy_namespace);
    if needed {
        services.patch(&name, &ssa(), &Patch::Apply(body)).await?;
        return Ok(true);
    }
    let Some(svc) = services.get_opt(&name).await? else {
        return Ok(false);
    };
    if svc.labels().get(ON_DEMAND_LABEL).map(String::as_str) != Some("true") {
        return Ok(false);
    }
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: svc.uid(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match services.delete(&name, &dp).await {
        Ok(_) => {
            tracing::info!(service = %name, "no migration needs the load balancer: deleted");
            Ok(false)
        }
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(false),
        Err(e) => Err(e.into()),
    }
}
