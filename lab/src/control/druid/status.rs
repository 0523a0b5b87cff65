//! What etcd-druid writes into an `Etcd`'s status each pass: the health its status flow
//! reports (`ready`, `readyReplicas`, `members`, `AllMembersUpdated`), `observedGeneration`,
//! and `bootstrapWithExistingCluster` once, when the destination's members have joined; and
//! the reconcile request taken away once a generation is done.

use super::state::DruidState;
use crate::clock;
use crate::error::Result;
use crate::lab::Lab;
use crate::side::Side;
use crate::specs;
use isthmus_controller::plan::{EtcdFields, EtcdObs, DRUID_OPERATION, OPERATION};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{json, Value};

/// The status etcd-druid writes for `fields` (the spec the members run), and the join
/// time it records once.
pub(super) async fn status_to_write(
    lab: &Lab,
    side: Side,
    fields: &EtcdFields,
    previous: &Option<EtcdObs>,
    st: &DruidState,
    busy: bool,
    v: &Value,
) -> Result<(Value, Option<String>)> {
    let now = clock::now;
    let (names, ready) = lab.world.etcd_status(side).await?;
    let own: Vec<String> = names
        .into_iter()
        .filter(|n| {
            lab.world
                .etcd
                .members
                .iter()
                .any(|m| m.side == side && &m.name() == n)
        })
        .collect();
    let replicas = i64::from(fields.replicas.unwrap_or(0));
    let joined_at = previous
        .as_ref()
        .and_then(|p| p.joined_at.clone())
        .or_else(|| {
            (side == Side::Destination
                && !fields.bootstrap_members.is_empty()
                && replicas >= 2
                && i64::from(ready) >= replicas)
                .then(now)
        });
    let mut status = json!({
        "ready": !busy && i64::from(ready) >= replicas,
        "readyReplicas": ready,
        "replicas": replicas,
        "currentReplicas": ready,
        "conditions": [{"type": "AllMembersUpdated",
            "status": if busy { "False" } else { "True" },
            "reason": if busy { "UpdateInProgress" } else { "AllMembersUpdated" },
            "message": "etcd-druid stand-in", "lastTransitionTime": now(), "lastUpdateTime": now()}],
        "members": own.iter().map(|n| json!({
            "name": n, "status": "Ready", "reason": "LeaseSucceeded", "lastTransitionTime": now(),
        })).collect::<Vec<Value>>(),
    });
    if let Some(o) = st.observed {
        status["observedGeneration"] = json!(o);
    }
    if let Some(j) = &joined_at {
        let members = v
            .pointer("/spec/etcd/bootstrapWithExistingCluster/members")
            .cloned();
        status["bootstrapWithExistingCluster"] =
            json!({"joinedAt": j, "members": members.unwrap_or(json!([]))});
    }
    Ok((status, joined_at))
}

/// Writes `status` as etcd-druid's (field manager `etcd-druid`).
pub(super) async fn write_status(api: &Api<DynamicObject>, status: Value) -> kube::Result<()> {
    let body =
        json!({"apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd", "status": status});
    api.patch_status(
        specs::ETCD,
        &PatchParams::apply("etcd-druid").force(),
        &Patch::Apply(body),
    )
    .await?;
    Ok(())
}

/// Takes the reconcile request away, in both spellings (`druid.gardener.cloud/operation` and
/// the deprecated `gardener.cloud/operation`), as etcd-druid's `RemoveOperationAnnotation` does
/// (etcd-druid v0.38.1 `api/core/v1alpha1/helper.go`).
pub(super) async fn drop_request(api: &Api<DynamicObject>) -> kube::Result<()> {
    let drop_op = json!({"metadata": {"annotations": {DRUID_OPERATION: null, OPERATION: null}}});
    api.patch(specs::ETCD, &PatchParams::default(), &Patch::Merge(drop_op))
        .await?;
    Ok(())
}
