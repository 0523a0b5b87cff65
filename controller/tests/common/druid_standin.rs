//! `DruidStandIn`: what etcd-druid does with an `Etcd` as Gardener deploys it
//! (`controllers.etcd.enableEtcdSpecAutoReconcile: false`), acting only through the seed's API
//! and the real etcd of `etcd.rs` (etcd-druid itself needs kubelets and StatefulSets):
//!
//! - it acts on an `Etcd`'s spec only when it is created or carries
//!   `druid.gardener.cloud/operation: reconcile` or the deprecated
//!   `gardener.cloud/operation: reconcile` (etcd-druid v0.38.1
//!   `internal/controller/etcd/reconcile_spec.go` `shouldReconcileSpec`,
//!   `api/core/v1alpha1/helper.go` `HasReconcileOperationAnnotation`), and then on the spec of
//!   that generation; a spec changed without the annotation is not acted on (its generation
//!   stays unobserved);
//! - once a generation is reconciled it writes `status.observedGeneration` and *then* removes
//!   both annotations, in two requests, as etcd-druid's `completeReconcile` does
//!   (`reconcile_complete.go`, `RemoveOperationAnnotation`);
//! - while the `Etcd` carries `druid.gardener.cloud/suspend-etcd-spec-reconcile` it acts on no
//!   spec and keeps the request (`reconcile_spec.go` `shouldReconcileSpec`);
//! - a reconcile request for a generation it already reconciled is recorded as a violation
//!   (the annotation put back after its removal);
//! - on the destination it adds each missing member below `replicas` as a learner and starts
//!   it, promotes it (unless told to hold), stops the members at `replicas: 0`, and once the
//!   bootstrap members were cleared removes the source members (etcd-druid's proposed removal,
//!   DEP #1355) one at a time, [`REMOVAL_INTERVAL`] apart (a removed member's pod takes time to
//!   go);
//! - every tick it writes the health status etcd-druid's status flow writes (`ready`,
//!   `readyReplicas`, `members`, `AllMembersUpdated` — `False` while a generation is being
//!   reconciled —, and `bootstrapWithExistingCluster` once, when the join is done);
//! - the member removal is etcd-druid#1426's, and so is its bookkeeping (`druid_scale.rs`):
//!   `ScaleOperationComplete`, a change its CEL rules would refuse recorded as a violation,
//!   and the join record pruned once the source members are gone.

use super::druid_scale;
use super::etcd::TestEtcd;
use isthmus_controller::gardener::etcd_resource;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::Client;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

const NOW: &str = "2026-01-01T00:00:00Z";
use isthmus_controller::plan::{DRUID_OPERATION, OPERATION, SUSPEND_SPEC_RECONCILE};
/// How long the removal of one source member takes (its pod terminating).
pub const REMOVAL_INTERVAL: Duration = Duration::from_millis(1500);

/// Which side's `Etcd` this stand-in serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Source,
    Destination,
}

pub struct DruidStandIn {
    pub promote: Arc<AtomicBool>,
    /// Contract violations seen (a request for a generation already reconciled).
    pub violations: Arc<Mutex<Vec<String>>>,
    /// Generations reconciled, in order.
    pub reconciled: Arc<Mutex<Vec<i64>>>,
    /// Generations whose reconciliation began (acted on, finished or not), in order.
    pub started: Arc<Mutex<Vec<i64>>>,
    task: JoinHandle<()>,
}

impl Drop for DruidStandIn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What the stand-in remembers between ticks (etcd-druid's own state lives in the API).
struct State {
    side: Side,
    sources: Vec<String>,
    /// The generation being reconciled and its spec.
    target: Option<(i64, Value)>,
    /// The last generation reconciled.
    observed: Option<i64>,
    /// The spec last acted on: the pods run it (a spec changed without a request does not
    /// reach them).
    acted: Option<Value>,
    done: BTreeSet<i64>,
    last_removal: Option<Instant>,
    violations: Arc<Mutex<Vec<String>>>,
    reconciled: Arc<Mutex<Vec<i64>>>,
    started: Arc<Mutex<Vec<i64>>>,
    /// The spec as seen last tick (what etcd-druid#1426's CEL rules compare a change with).
    seen: Option<Value>,
    /// The scale operation in progress (etcd-druid#1426), and whether one ever ran (druid
    /// writes the condition only from the first one on).
    scale_op: Option<&'static str>,
    scale_seen: bool,
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
        let violations = Arc::new(Mutex::new(Vec::new()));
        let reconciled = Arc::new(Mutex::new(Vec::new()));
        let started = Arc::new(Mutex::new(Vec::new()));
        let p = promote.clone();
        let mut state = State {
            side,
            sources,
            target: None,
            observed: None,
            acted: None,
            done: BTreeSet::new(),
            last_removal: None,
            violations: violations.clone(),
            reconciled: reconciled.clone(),
            started: started.clone(),
            seen: None,
            scale_op: None,
            scale_seen: false,
        };
        let api: Api<DynamicObject> = Api::namespaced_with(admin, namespace, &etcd_resource());
        let task = tokio::spawn(async move {
            loop {
                let promote = p.load(Ordering::SeqCst);
                if let Err(e) = tick(&api, &mut state, &etcd, promote).await {
                    eprintln!("druid stand-in: {e}");
                }
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
        });
        Self {
            promote,
            violations,
            reconciled,
            started,
            task,
        }
    }
}

fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

async fn tick(
    api: &Api<DynamicObject>,
    st: &mut State,
    etcd: &Mutex<TestEtcd>,
    promote: bool,
) -> Result<(), kube::Error> {
    let Some(e) = api.get_opt("etcd-main").await? else {
        if st.side == Side::Destination {
            blocking(|| stop_own(&mut etcd.lock().unwrap(), &st.sources));
        }
        *st = State {
            target: None,
            observed: None,
            acted: None,
            done: BTreeSet::new(),
            last_removal: None,
            sources: std::mem::take(&mut st.sources),
            violations: st.violations.clone(),
            reconciled: st.reconciled.clone(),
            started: st.started.clone(),
            side: st.side,
            seen: None,
            scale_op: None,
            scale_seen: false,
        };
        return Ok(());
    };
    let v = serde_json::to_value(&e).unwrap_or_default();
    let generation = v["metadata"]["generation"].as_i64().unwrap_or(0);
    let requested = [DRUID_OPERATION, OPERATION]
        .iter()
        .any(|k| v["metadata"]["annotations"][k] == "reconcile");
    let created = v["status"]["observedGeneration"].is_null() && st.observed.is_none();
    // While suspended, druid skips every spec (the creation's too) and keeps the request; its
    // status flow goes on (etcd-druid v0.38.1 `internal/controller/etcd/reconciler.go`).
    let suspended = v["metadata"]["annotations"]
        .get(SUSPEND_SPEC_RECONCILE)
        .is_some();
    if st.seen.as_ref() != Some(&v["spec"]) {
        if let Some(prev) = &st.seen {
            if let Some(why) = druid_scale::refused(prev, &v["spec"], st.scale_op) {
                st.violations
                    .lock()
                    .unwrap()
                    .push(format!("{:?}: {why}", st.side));
            }
        }
        st.seen = Some(v["spec"].clone());
    }
    if suspended {
        st.target = None;
        return write_status(api, st, etcd, &v).await;
    }
    if (requested || created) && st.target.as_ref().map(|t| t.0) != Some(generation) {
        if st.done.contains(&generation) {
            st.violations.lock().unwrap().push(format!(
                "{:?}: reconcile requested again for generation {generation}, already reconciled",
                st.side
            ));
        }
        if let Some(op) = druid_scale::on_target(st.acted.as_ref(), &v["spec"]) {
            st.scale_op = Some(op);
            st.scale_seen = true;
        }
        st.target = Some((generation, v["spec"].clone()));
        st.acted = Some(v["spec"].clone());
        st.started.lock().unwrap().push(generation);
    }
    let busy = match st.target.clone() {
        Some((_, spec)) => act(st, etcd, &spec, promote),
        None => false,
    };
    let finished = match (&st.target, busy) {
        (Some((g, _)), false) => Some(*g),
        _ => None,
    };
    if let Some(g) = finished {
        st.observed = Some(g);
        st.done.insert(g);
        st.reconciled.lock().unwrap().push(g);
        st.target = None;
        st.scale_op = None;
    }
    // The spec of the generation last acted on gives the health status.
    write_status(api, st, etcd, &v).await?;
    if finished.is_some() && requested {
        let drop_op =
            json!({"metadata": {"annotations": {DRUID_OPERATION: null, OPERATION: null}}});
        api.patch("etcd-main", &PatchParams::default(), &Patch::Merge(drop_op))
            .await?;
    }
    Ok(())
}

/// Stops every running member that is not a source member.
fn stop_own(c: &mut TestEtcd, sources: &[String]) {
    for n in c.running() {
        if !sources.contains(&n) {
            c.stop(&n);
        }
    }
}

fn own_names(spec: &Value) -> Vec<String> {
    let replicas = spec["replicas"].as_i64().unwrap_or(0);
    let prefix = spec["memberNamePrefix"].as_str();
    (0..replicas)
        .map(|i| match prefix {
            Some(p) => format!("{p}-etcd-main-{i}"),
            None => format!("etcd-main-{i}"),
        })
        .collect()
}

/// One membership step towards `spec`; whether there is more to do for it.
fn act(st: &mut State, etcd: &Mutex<TestEtcd>, spec: &Value, promote: bool) -> bool {
    if st.side == Side::Source {
        return false;
    }
    let own = own_names(spec);
    let bootstrap_cleared = spec["etcd"]["bootstrapWithExistingCluster"].is_null();
    let sources = st.sources.clone();
    let removal_due = st
        .last_removal
        .is_none_or(|t| t.elapsed() >= REMOVAL_INTERVAL);
    let (busy, removed) = blocking(|| {
        let mut c = etcd.lock().unwrap();
        if own.is_empty() {
            stop_own(&mut c, &sources);
            return (false, false);
        }
        // No list, no membership decision this tick.
        let Some(now) = c.try_members() else {
            return (true, false);
        };
        for name in &own {
            let listed = now
                .iter()
                .find(|m| &m.1 == name || m.2.contains(&c.def(name).peer_url()));
            match listed {
                None => {
                    c.add_learner(name);
                    return (true, false);
                }
                // Refused until the learner has caught up: tried again next tick.
                Some(m) if m.3 && promote && c.running().contains(name) => {
                    c.promote(name);
                    return (true, false);
                }
                // etcd 3.4 admits one learner at a time; a held promotion waits here.
                Some(m) if m.3 => return (true, false),
                _ => {}
            }
        }
        if bootstrap_cleared {
            if let Some(s) = sources.iter().find(|s| now.iter().any(|m| &m.1 == *s)) {
                if !removal_due {
                    return (true, false);
                }
                c.remove(s);
                return (true, true);
            }
        }
        (false, false)
    });
    if removed {
        st.last_removal = Some(Instant::now());
    }
    busy
}

async fn write_status(
    api: &Api<DynamicObject>,
    st: &State,
    etcd: &Mutex<TestEtcd>,
    v: &Value,
) -> Result<(), kube::Error> {
    let spec = st.acted.as_ref().unwrap_or(&v["spec"]);
    let replicas = spec["replicas"].as_i64().unwrap_or(0);
    let own = own_names(spec);
    let bootstrap = spec["etcd"]["bootstrapWithExistingCluster"].clone();
    let joined_before = v["status"]["bootstrapWithExistingCluster"].is_object();
    let (voters, names) = blocking(|| {
        let c = etcd.lock().unwrap();
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
        (voters as i64, names)
    });
    // While a generation is being reconciled the members do not all run it yet
    // (`internal/health/condition/check_all_members_updated.go`).
    let (updated, reason) = match st.target {
        Some(_) => ("False", "NotAllMembersUpdated"),
        None => ("True", "AllMembersUpdated"),
    };
    let mut conditions = vec![json!({"type": "AllMembersUpdated", "status": updated,
        "reason": reason, "message": "stand-in", "lastTransitionTime": NOW, "lastUpdateTime": NOW})];
    if st.scale_seen {
        conditions.push(druid_scale::condition(st.scale_op, NOW));
    }
    let mut status = json!({
        "ready": voters >= replicas,
        "readyReplicas": voters,
        "replicas": replicas,
        "currentReplicas": voters,
        "conditions": conditions,
        "members": names.iter().filter(|n| own.contains(n)).map(|n| json!({
            "name": n, "status": "Ready", "reason": "LeaseSucceeded", "lastTransitionTime": NOW,
        })).collect::<Vec<Value>>(),
    });
    if let Some(g) = st.observed {
        status["observedGeneration"] = json!(g);
    }
    // etcd-druid#1426 prunes the join record once the source members it lists are removed.
    let sources_listed = names.iter().any(|n| st.sources.contains(n));
    let pruned = bootstrap.is_null() && !sources_listed;
    if joined_before {
        if !pruned {
            status["bootstrapWithExistingCluster"] =
                v["status"]["bootstrapWithExistingCluster"].clone();
        }
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
