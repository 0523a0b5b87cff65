//! What etcd-druid writes into an `Etcd`'s status each pass (etcd-druid v0.38.1
//! `internal/controller/etcd/reconcile_status.go`): `observedGeneration` of the spec it
//! reconciled last; from its StatefulSet, `replicas`, `currentReplicas`, `readyReplicas` and
//! `ready` (`IsStatefulSetReady`: every replica ready and updated); `members` (its own pods'
//! members, `internal/health/status`); `AllMembersUpdated`
//! (`internal/health/condition/check_all_members_updated.go`: `False`/`NotAllMembersUpdated`
//! while the StatefulSet rolls out); `bootstrapWithExistingCluster` once, when every member of
//! a joining `Etcd` is ready (`mutateBootstrapWithExistingClusterStatus`, with the
//! `BootstrappedWithExistingCluster` check); and etcd-druid#1426's `ScaleOperationComplete`
//! and pruning of that join record once the members it lists were removed (`scale.rs`).

use super::{scale, DruidSpec};
use crate::error::{Error, Result};
use crate::etcd::Cluster;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{json, Value};

/// What the pass knows that the status says.
#[derive(Debug)]
pub(super) struct Facts<'a> {
    /// The spec the StatefulSet runs (the last one reconciled), or the object's own.
    pub spec: &'a DruidSpec,
    /// The object as read this pass.
    pub etcd: &'a Value,
    pub observed: Option<i64>,
    /// The members do not all run `spec` yet.
    pub rolling: bool,
    /// The scale operation running, and whether one ever ran (druid writes the condition from
    /// the first one on).
    pub scale_op: Option<&'static str>,
    pub scale_seen: bool,
}

/// The status for `f`, its members' health read from `c`.
pub(super) async fn status(c: &Cluster, f: &Facts<'_>) -> Result<Value> {
    let now = crate::now();
    let own = f.spec.members();
    let (listed, voters) = c.status(&own).await?;
    let replicas = i32::from(f.spec.replicas);
    let (updated, reason, message) = match f.rolling {
        true => (
            "False",
            "NotAllMembersUpdated",
            "At least one member is not yet updated",
        ),
        false => (
            "True",
            "AllMembersUpdated",
            "All members reflect latest desired spec",
        ),
    };
    let mut conditions = vec![json!({"type": "AllMembersUpdated", "status": updated,
        "reason": reason, "message": message, "lastTransitionTime": now, "lastUpdateTime": now})];
    if f.scale_seen {
        conditions.push(scale::condition(f.scale_op, &now));
    }
    let mut status = json!({
        "ready": !f.rolling && voters >= replicas,
        "readyReplicas": voters,
        "replicas": replicas,
        "currentReplicas": voters,
        "conditions": conditions,
        "members": listed.iter().filter(|n| own.contains(n)).map(|n| json!({
            "name": n, "status": "Ready", "reason": "LeaseSucceeded", "lastTransitionTime": now,
        })).collect::<Vec<Value>>(),
    });
    if let Some(g) = f.observed {
        status["observedGeneration"] = json!(g);
    }
    let record = &f.etcd["status"]["bootstrapWithExistingCluster"];
    if record.is_object() {
        // etcd-druid#1426 prunes the join record once the members it lists were removed.
        let names = record["members"].as_array().into_iter().flatten();
        let left = names
            .filter_map(|m| m["name"].as_str())
            .any(|n| listed.iter().any(|l| l == n));
        if !f.spec.bootstrap.is_empty() || left {
            status["bootstrapWithExistingCluster"] = record.clone();
        }
    } else if !f.spec.bootstrap.is_empty() && replicas > 0 && voters >= replicas {
        let members: Vec<Value> = f
            .spec
            .bootstrap
            .iter()
            .map(|m| json!({"name": m.name, "peerUrls": m.peer_urls}))
            .collect();
        status["bootstrapWithExistingCluster"] = json!({"joinedAt": now, "members": members});
    }
    Ok(status)
}

/// Writes `status` as etcd-druid's (server-side apply, field manager `etcd-druid`).
pub(super) async fn write(api: &Api<DynamicObject>, name: &str, status: Value) -> Result<()> {
    let body =
        json!({"apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd", "status": status});
    api.patch_status(
        name,
        &PatchParams::apply("etcd-druid").force(),
        &Patch::Apply(body),
    )
    .await
    .map_err(|e| Error::kube(format!("etcd-druid stand-in: Etcd {name} status"), e))?;
    Ok(())
}
