//! Runs a destination migration's tunnel server (`crate::tunnel_server`) under gardenlet's
//! grant (get/create/patch/delete of those names): server-side applied while the VPN's route
//! is in the proxy file (or not yet out of every proxy), deleted after — only objects this
//! migration owns. The kube-apiserver's egress policy only where the seed's namespaces deny
//! egress (`TunnelServers::kube_apiserver_egress`); elsewhere one an earlier run wrote is
//! deleted with every pass. While it is wanted, the step is not reached before the Deployment is
//! available (`TunnelServerAvailable`): the route would lead nowhere.

use super::context::Context;
use super::write::ssa;
use super::Error;
use crate::crd::EtcdMigration;
use crate::plan::conditions::{self as cond, Verdict, TUNNEL_SERVER};
use crate::plan::{MemberRoute, Plan};
use crate::tunnel_server::{kinds, objects, Owner, Proxies, CONNECT_EGRESS_POLICY, NAME};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch};
use kube::ResourceExt;

/// One pass: applies or removes `m`'s server and, while it is wanted, holds `plan`'s step
/// until the Deployment is available. Wanted while `plan` routes the VPN, or while the last
/// status did (`routes_held`: the proxies may still route it for a moment).
pub(super) async fn pass(
    ctx: &Context,
    ns: &str,
    m: &EtcdMigration,
    plan: &mut Plan,
    routes_held: &[MemberRoute],
    now: &str,
) -> Result<(), Error> {
    let vpn = |r: &MemberRoute| r.listener.starts_with("vpn-");
    let wanted = plan.routes.iter().any(vpn) || routes_held.iter().any(vpn);
    let Some(verdict) = sync(ctx, ns, m, wanted).await? else {
        return Ok(());
    };
    if wanted && verdict.status != "True" {
        plan.status.step_ready = false;
    }
    plan.status.conditions = cond::merge(&plan.status.conditions, &verdict, now);
    Ok(())
}

/// Applies (`wanted`) or removes `me`'s server; `None` when it asks for none or this
/// controller runs none.
async fn sync(
    ctx: &Context,
    ns: &str,
    me: &EtcdMigration,
    wanted: bool,
) -> Result<Option<Verdict>, Error> {
    let Some(servers) = &ctx.tunnel_servers else {
        return Ok(None);
    };
    if me
        .spec
        .vpn
        .as_ref()
        .and_then(|v| v.server.as_ref())
        .is_none()
    {
        return Ok(None);
    }
    let owner = Owner {
        name: me.name_any(),
        uid: me.uid().unwrap_or_default(),
    };
    if !wanted {
        remove(ctx, ns, &owner.uid, servers.service_monitor).await?;
        return Ok(Some(Verdict::refused(
            TUNNEL_SERVER,
            "Removed",
            "the VPN's route is gone, and the tunnel server with it",
        )));
    }
    if let Some(other) = held_by_other(ctx, ns, &owner.uid).await? {
        return Ok(Some(Verdict::refused(
            TUNNEL_SERVER,
            "HeldByOtherMigration",
            format!("the tunnel server {NAME} of this namespace is {other}'s; one per namespace"),
        )));
    }
    let proxies = Proxies {
        namespace_labels: &ctx.settings.proxy_namespace_labels,
        alias: &ctx.settings.shoot_alias,
    };
    let bodies = objects(&me.spec, ns, &owner, &proxies, servers)
        .map_err(|e| Error::TunnelServer(e.to_string()))?;
    let mut deployment = None;
    for body in bodies {
        let (av, kind) = (body["apiVersion"].as_str(), body["kind"].as_str());
        let api = api_for(ctx, ns, av.unwrap_or_default(), kind.unwrap_or_default());
        let name = body["metadata"]["name"].as_str().unwrap_or_default();
        let after = api.patch(name, &ssa(), &Patch::Apply(&body)).await?;
        if body["kind"] == "Deployment" {
            deployment = Some(after);
        }
    }
    if !servers.kube_apiserver_egress {
        let (av, kind) = ("networking.k8s.io/v1", "NetworkPolicy");
        delete_owned(ctx, ns, &owner.uid, av, kind, CONNECT_EGRESS_POLICY).await?;
    }
    Ok(Some(available(deployment.as_ref())))
}

/// The finalizer's part: removes `m`'s server. Without the grant (gone already, or never
/// given) the objects go with their owner by garbage collection; the finalizer must not hang
/// on them.
pub(super) async fn cleanup(ctx: &Context, ns: &str, m: &EtcdMigration) -> Result<(), Error> {
    let Some(servers) = &ctx.tunnel_servers else {
        return Ok(());
    };
    if m.spec
        .vpn
        .as_ref()
        .and_then(|v| v.server.as_ref())
        .is_none()
    {
        return Ok(());
    }
    let uid = m.uid().unwrap_or_default();
    match remove(ctx, ns, &uid, servers.service_monitor).await {
        Err(Error::Kube(kube::Error::Api(s))) if s.code == 403 => {
            tracing::warn!(namespace = ns, error = %s.message,
                "cannot remove the tunnel server; it goes with its owner");
            Ok(())
        }
        r => r,
    }
}

/// Deletes what `owner` owns of the server, in reverse order of creation.
async fn remove(ctx: &Context, ns: &str, owner: &str, service_monitor: bool) -> Result<(), Error> {
    for (api_version, kind, name) in kinds(service_monitor).into_iter().rev() {
        delete_owned(ctx, ns, owner, api_version, kind, name).await?;
    }
    Ok(())
}

/// Deletes the object `name` if `owner` owns it (that very object: a uid precondition).
async fn delete_owned(
    ctx: &Context,
    ns: &str,
    owner: &str,
    api_version: &str,
    kind: &str,
    name: &str,
) -> Result<(), Error> {
    let api = api_for(ctx, ns, api_version, kind);
    let Some(o) = api.get_opt(name).await? else {
        return Ok(());
    };
    if !o.owner_references().iter().any(|r| r.uid == owner) {
        return Ok(());
    }
    let dp = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: o.uid(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(name, &dp).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The name of another live migration of `ns` that owns the Deployment, if one does.
async fn held_by_other(ctx: &Context, ns: &str, me: &str) -> Result<Option<String>, Error> {
    let api = api_for(ctx, ns, "apps/v1", "Deployment");
    let Some(d) = api.get_opt(NAME).await? else {
        return Ok(None);
    };
    let migrations: Api<EtcdMigration> = Api::namespaced(ctx.client.clone(), ns);
    for r in d.owner_references().iter().filter(|r| r.uid != me) {
        if migrations
            .get_opt(&r.name)
            .await?
            .is_some_and(|m| m.uid().as_deref() == Some(&r.uid))
        {
            return Ok(Some(r.name.clone()));
        }
    }
    Ok(None)
}

/// The API of the objects of `api_version`/`kind` in `ns`.
fn api_for(ctx: &Context, ns: &str, api_version: &str, kind: &str) -> Api<DynamicObject> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
    Api::namespaced_with(ctx.client.clone(), ns, &ar)
}

/// `True` once the Deployment's current generation has an available, updated pod.
fn available(d: Option<&DynamicObject>) -> Verdict {
    let status = d.map(|d| &d.data["status"]).cloned().unwrap_or_default();
    let generation = d.and_then(|d| d.metadata.generation).unwrap_or(0);
    let n = |k: &str| status[k].as_i64().unwrap_or(0);
    let current = n("observedGeneration") >= generation;
    if current && n("updatedReplicas") >= 1 && n("availableReplicas") >= 1 {
        Verdict::done(
            TUNNEL_SERVER,
            "Available",
            format!("Deployment {NAME} is available"),
        )
    } else {
        Verdict::waiting(
            TUNNEL_SERVER,
            "RollingOut",
            format!(
                "waiting for the Deployment {NAME}: generation {generation} observed {}, updated {}, available {}",
                n("observedGeneration"),
                n("updatedReplicas"),
                n("availableReplicas")
            ),
        )
    }
}
