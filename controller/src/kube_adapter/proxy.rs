//! Writing the shared proxy ConfigMap and checking that every proxy pod serves it.

use super::context::{Context, FIELD_MANAGER};
use super::nudge;
use super::Error;
use crate::crd::EtcdMigration;
use crate::plan::conditions::{Verdict, ROUTE_CONFLICT};
use crate::plan::{wanted_routes, MemberRoute};
use crate::proxy_config::{exposure, render_claims, rolled_out, Claim, CONFIG_KEY};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::ResourceExt;
use serde_json::json;
use std::net::{IpAddr, SocketAddr};

/// What a sync found: whether every running proxy pod serves the file, and conditions of the
/// migration reconciled.
#[derive(Debug)]
pub struct Synced {
    /// Every running proxy pod reports the new file's hash.
    pub rolled_out: bool,
    /// A pod behind was nudged in the last half minute: kubelet is delivering the file, and
    /// the rollout is worth checking again in a second.
    pub delivering: bool,
    /// Conditions for the migration reconciled (none for a cleanup).
    pub conditions: Vec<Verdict>,
}

/// Renders the routes of every live migration into the ConfigMap (server-side apply) and
/// returns whether every running proxy pod reports the new hash. `this` is the migration being
/// reconciled, with the routes its plan wants now; every other migration contributes the
/// routes its last status holds. Migrations being deleted contribute none.
///
/// The file is checked once, as it is built: a migration whose routes would make the proxies
/// refuse it is left out (and logged with the field path of the problem) so the others keep
/// working; if it is `this` one, the reconciliation fails with that problem.
///
/// A route two migrations want (the same VPN name) stays the older one's, whichever is
/// reconciled; `this` one then gets `RouteConflict` and does not count as rolled out while
/// the file lacks any of its routes. It also gets `ExposureRestricted`.
pub async fn sync(
    ctx: &Context,
    this: Option<(&str, &str, &[MemberRoute])>,
) -> Result<Synced, Error> {
    let s = &ctx.settings;
    let migrations: Api<EtcdMigration> = match &s.namespace {
        Some(ns) => Api::namespaced(ctx.client.clone(), ns),
        None => Api::all(ctx.client.clone()),
    };
    let this_owner = this.map(|(ns, name, _)| format!("{ns}/{name}"));
    // Claims in order of precedence: the older migration keeps a route two of them want
    // (`creationTimestamp`, then the name), whichever of them is reconciled.
    let mut claims: Vec<(Option<Time>, Claim)> = Vec::new();
    let mut conditions = Vec::new();
    let mut had_conflict = false;
    for m in migrations.list(&ListParams::default()).await?.items {
        let ns = m.namespace().unwrap_or_default();
        let owner = format!("{ns}/{}", m.name_any());
        let created = m.metadata.creation_timestamp.clone();
        if let (Some((_, _, routes)), true) = (this, Some(&owner) == this_owner.as_ref()) {
            conditions.push(exposure(&m.spec.allowed_sources, &s.layout));
            let status = m.status.unwrap_or_default();
            had_conflict = status.conditions.iter().any(|c| c.type_ == ROUTE_CONFLICT);
            let routes = routes.to_vec();
            claims.push((created, Claim { owner, routes }));
            continue;
        }
        if m.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let routes = wanted_routes(&m.spec, &ns, &m.status.clone().unwrap_or_default());
        claims.push((created, Claim { owner, routes }));
    }
    claims.sort_by(|(a, x), (b, y)| a.cmp(b).then_with(|| x.owner.cmp(&y.owner)));
    let claims: Vec<Claim> = claims.into_iter().map(|(_, c)| c).collect();
    let outcome = render_claims(&s.layout, &claims)?;
    for left in &outcome.left_out {
        if Some(&left.owner) == this_owner.as_ref() {
            return Err(Error::InvalidRoutes(left.to_string()));
        }
        tracing::error!(migration = %left.owner, path = %left.path, error = %left.message,
            "routes left out: the proxy would refuse them");
    }
    // The file holds all of this migration's routes, or its exposure is not served.
    let conflicts: Vec<_> = outcome
        .conflicts
        .iter()
        .filter(|c| Some(&c.owner) == this_owner.as_ref())
        .collect();
    if let Some(c) = conflicts.first() {
        tracing::warn!(migration = %c.owner, held_by = %c.held_by, sni = %c.sni,
            "route held by an older migration");
        let held = match &c.port_held_by {
            Some(other) => format!(
                "the port of {} is the older {}'s listener {other}",
                c.listener, c.held_by
            ),
            None => format!(
                "{} on {} is routed for the older {}",
                c.sni, c.listener, c.held_by
            ),
        };
        conditions.push(Verdict::done(
            ROUTE_CONFLICT,
            "HeldByOlderMigration",
            format!(
                "{held}; this migration's route is left out and its exposure not served until \
                 that one releases it or this spec changes"
            ),
        ));
    } else if had_conflict {
        conditions.push(Verdict::refused(
            ROUTE_CONFLICT,
            "NoConflict",
            "every route is in the file",
        ));
    }
    let rendered = outcome.rendered;
    let cm = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": s.proxy_configmap, "namespace": s.proxy_namespace},
        "data": {CONFIG_KEY: rendered.text},
    });
    let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &s.proxy_namespace);
    // The route ConfigMap is ours alone: force takes it back from a manual `kubectl apply`.
    let pp = PatchParams::apply(FIELD_MANAGER)
        .force()
        .validation_strict();
    cms.patch(&s.proxy_configmap, &pp, &Patch::Apply(cm))
        .await?;

    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &s.proxy_namespace);
    let mut reports = Vec::new();
    let now = nudge::now_ms();
    let mut fresh = false;
    for pod in pods
        .list(&ListParams::default().labels(&s.proxy_selector))
        .await?
        .items
    {
        // Pods that are not running yet will read the new file when they start.
        let status = pod.status.clone().unwrap_or_default();
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
        let behind = !matches!(&report, Ok(h) if *h == rendered.hash);
        if behind && s.nudge_proxy_pods {
            let decision = nudge::decide(&pod, &rendered.hash, now);
            fresh |= decision.fresh;
            if let Some(first) = decision.nudge_first {
                let done = nudge::nudge(&pods, &pod, &rendered.hash, first, now).await;
                ctx.metrics.nudge(done);
            }
        }
        if let Err(e) = &report {
            tracing::info!(error = %e, "proxy pod not on the new config yet");
        }
        reports.push(report);
    }
    Ok(Synced {
        rolled_out: conflicts.is_empty() && rolled_out(&rendered.hash, &reports),
        delivering: fresh,
        conditions,
    })
}
