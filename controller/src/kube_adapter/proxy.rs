//! Writing the shared proxy ConfigMap and checking that every proxy pod serves it.

use super::context::{Context, FIELD_MANAGER};
use super::Error;
use crate::crd::EtcdMigration;
use crate::plan::wanted_routes;
use crate::proxy_config::{render, rolled_out, CONFIG_KEY};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::ResourceExt;
use serde_json::json;
use std::net::{IpAddr, SocketAddr};

/// Renders the routes of every live migration into the ConfigMap (server-side apply) and
/// returns whether every running proxy pod reports the new hash. Migrations being deleted
/// contribute no routes.
pub async fn sync(ctx: &Context) -> Result<bool, Error> {
    let s = &ctx.settings;
    let migrations: Api<EtcdMigration> = match &s.namespace {
        Some(ns) => Api::namespaced(ctx.client.clone(), ns),
        None => Api::all(ctx.client.clone()),
    };
    let mut routes = Vec::new();
    for m in migrations.list(&ListParams::default()).await?.items {
        if m.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let ns = m.namespace().unwrap_or_default();
        routes.extend(wanted_routes(
            &m.spec,
            &ns,
            &m.status.clone().unwrap_or_default(),
        ));
    }
    let rendered = render(&s.layout, &routes)?;
    let cm = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": s.proxy_configmap, "namespace": s.proxy_namespace},
        "data": {CONFIG_KEY: rendered.text},
    });
    let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &s.proxy_namespace);
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    cms.patch(&s.proxy_configmap, &pp, &Patch::Apply(cm))
        .await?;

    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &s.proxy_namespace);
    let mut reports = Vec::new();
    for pod in pods
        .list(&ListParams::default().labels(&s.proxy_selector))
        .await?
        .items
    {
        // Pods that are not running yet will read the new file when they start.
        let status = pod.status.unwrap_or_default();
        if pod.metadata.deletion_timestamp.is_some() || status.phase.as_deref() != Some("Running") {
            continue;
        }
        let Some(ip) = status.pod_ip.and_then(|ip| ip.parse::<IpAddr>().ok()) else {
            continue;
        };
        let report = ctx
            .fetcher
            .fetch(SocketAddr::new(ip, s.proxy_admin_port))
            .await;
        if let Err(e) = &report {
            tracing::info!(error = %e, "proxy pod not on the new config yet");
        }
        reports.push(report);
    }
    Ok(rolled_out(&rendered.hash, &reports))
}
