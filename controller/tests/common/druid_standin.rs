//! `EtcdDruidStandIn`: what etcd-druid does with an `Etcd`, acting only through the seed's API
//! and the real etcd of `etcd.rs` (etcd-druid itself needs kubelets and StatefulSets). Per
//! tick: it takes the `gardener.cloud/operation` annotation away; on the destination it adds
//! each missing member below `replicas` as a learner and starts it, promotes it (unless told
//! to hold), stops the members at `replicas: 0`, and once the bootstrap members were cleared
//! removes the source members (etcd-druid's proposed removal, DEP #1355); then it writes the
//! status as etcd-druid does (`observedGeneration`, `ready`, `readyReplicas`, `members`,
//! `AllMembersUpdated`, and `bootstrapWithExistingCluster` once, when the join is done).

use super::etcd::TestEtcd;
use isthmus_controller::gardener::etcd_resource;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::Client;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinHandle;

const NOW: &str = "2026-01-01T00:00:00Z";

/// Which side's `Etcd` this stand-in serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Source,
    Destination,
}

pub struct DruidStandIn {
    pub promote: Arc<AtomicBool>,
    task: JoinHandle<()>,
}

impl Drop for DruidStandIn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl DruidStandIn {
    pub fn start(
        admin: Client,
        namespace: &str,
        side: Side,
        etcd: Arc<Mutex<TestEtcd>>,
        sources: Vec<String>,
    ) -> Self {
        let promote = Arc::new(AtomicBool::new(true));
        let p = promote.clone();
        let api: Api<DynamicObject> = Api::namespaced_with(admin, namespace, &etcd_resource());
        let task = tokio::spawn(async move {
            loop {
                if let Err(e) = tick(&api, side, &etcd, &sources, p.load(Ordering::SeqCst)).await {
                    eprintln!("druid stand-in: {e}");
                }
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
        });
        Self { promote, task }
    }
}

fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

async fn tick(
    api: &Api<DynamicObject>,
    side: Side,
    etcd: &Mutex<TestEtcd>,
    sources: &[String],
    promote: bool,
) -> Result<(), kube::Error> {
    let Some(e) = api.get_opt("etcd-main").await? else {
        if side == Side::Destination {
            blocking(|| {
                let mut c = etcd.lock().unwrap();
                for n in c.running() {
                    if !sources.contains(&n) {
                        c.stop(&n);
                    }
                }
            });
        }
        return Ok(());
    };
    let v = serde_json::to_value(&e).unwrap_or_default();
    if v["metadata"]["annotations"]["gardener.cloud/operation"].is_string() {
        let drop_op = json!({"metadata": {"annotations": {"gardener.cloud/operation": null}}});
        api.patch("etcd-main", &PatchParams::default(), &Patch::Merge(drop_op))
            .await?;
    }
    let replicas = v["spec"]["replicas"].as_i64().unwrap_or(0);
    let prefix = v["spec"]["memberNamePrefix"].as_str().map(String::from);
    let bootstrap = v["spec"]["etcd"]["bootstrapWithExistingCluster"].clone();
    let joined_before = v["status"]["bootstrapWithExistingCluster"].is_object();
    let own: Vec<String> = (0..replicas)
        .map(|i| match &prefix {
            Some(p) => format!("{p}-etcd-main-{i}"),
            None => format!("etcd-main-{i}"),
        })
        .collect();

    let Some((voters, names)) = blocking(|| {
        let mut c = etcd.lock().unwrap();
        if side == Side::Destination {
            if replicas == 0 {
                for n in c.running() {
                    if !sources.contains(&n) {
                        c.stop(&n);
                    }
                }
            }
            // No list, no membership decision this tick.
            let now = c.try_members()?;
            for name in &own {
                let listed = now
                    .iter()
                    .find(|m| &m.1 == name || m.2.contains(&c.def(name).peer_url()));
                match listed {
                    None => {
                        c.add_learner(name);
                        break;
                    }
                    Some(m) if m.3 && promote && c.running().contains(name) => {
                        c.promote(name);
                        break;
                    }
                    // etcd 3.4 admits one learner at a time.
                    Some(m) if m.3 => break,
                    _ => {}
                }
            }
            if bootstrap.is_null() && joined_before {
                let listed = c.members();
                if let Some(s) = sources.iter().find(|s| listed.iter().any(|m| &m.1 == *s)) {
                    c.remove(s);
                }
            }
        }
        let listed = c.members();
        let running = c.running();
        let voters = own
            .iter()
            .filter(|n| running.contains(n) && listed.iter().any(|m| &m.1 == *n && !m.3))
            .count();
        let names: Vec<String> = listed
            .into_iter()
            .map(|m| m.1)
            .filter(|n| !n.is_empty())
            .collect();
        Some((voters as i64, names))
    }) else {
        return Ok(());
    };

    let mut status = json!({
        "observedGeneration": v["metadata"]["generation"],
        "ready": voters >= replicas,
        "readyReplicas": voters,
        "replicas": replicas,
        "currentReplicas": voters,
        "conditions": [{"type": "AllMembersUpdated", "status": "True", "reason": "AllMembersUpdated",
                        "message": "stand-in", "lastTransitionTime": NOW, "lastUpdateTime": NOW}],
        "members": names.iter().filter(|n| own.contains(n)).map(|n| json!({
            "name": n, "status": "Ready", "reason": "LeaseSucceeded", "lastTransitionTime": NOW,
        })).collect::<Vec<Value>>(),
    });
    if joined_before {
        status["bootstrapWithExistingCluster"] =
            v["status"]["bootstrapWithExistingCluster"].clone();
    } else if bootstrap.is_object() && replicas >= 2 && voters >= replicas {
        let members: Vec<Value> = bootstrap["members"].as_array().cloned().unwrap_or_default();
        status["bootstrapWithExistingCluster"] = json!({"joinedAt": NOW, "members": members});
    }
    let body =
        json!({"apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd", "status": status});
    api.patch_status(
        "etcd-main",
        &PatchParams::apply("etcd-druid").force(),
        &Patch::Apply(body),
    )
    .await?;
    Ok(())
}
