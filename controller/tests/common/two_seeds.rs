//! What the two-seed tests (`apiserver_controller.rs`, `apiserver_gardenlet.rs`) share: the
//! specs of a source with one member and a destination with three on free loopback ports (the
//! seed world's `Loopback` etcd), and gardenlet's view of the `EtcdMigration` named `shoot` in
//! each seed: the druid stand-ins, setting its step, reading its status, waiting for a step or a condition. Not in
//! `mod.rs` because only those two binaries use it (`#[path]`).

use crate::common::{spec, NS};
use isthmus_controller::crd::{EtcdMigration, EtcdMigrationSpec, PortScheme, Role, Step};
use isthmus_controller::plan;
use isthmus_seed_world::druid::DruidTask;
use isthmus_seed_world::etcd::{self, free_run, Cluster};
use isthmus_seed_world::gardenlet;
use isthmus_seed_world::seed::Seed;
use kube::api::Api;
use kube::Client;
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Mutex;

/// How long a step, a condition or a quorum may take.
pub const STEP_TIMEOUT: Duration = Duration::from_secs(90);

/// The two specs at `Expose`, ports on free loopback runs far apart (the exposure's ports are
/// the members' real ports here: no proxy in between), the source with one member, the
/// destination with no source members yet and no `etcdTemplate`.
pub fn specs() -> (EtcdMigrationSpec, EtcdMigrationSpec) {
    let pa = free_run(1);
    let pb = loop {
        let p = free_run(3);
        if p.abs_diff(pa) > 300 {
            break p;
        }
    };
    let mut src = spec(Role::Source, Step::Expose);
    src.members = 1;
    src.ports = PortScheme {
        peer_base: pa,
        client_base: pa - 100,
    };
    let mut dst = spec(Role::Destination, Step::Expose);
    dst.ports = PortScheme {
        peer_base: pb,
        client_base: pb - 100,
    };
    if let Some(d) = dst.destination.as_mut() {
        d.source_members = Vec::new();
    }
    (src, dst)
}

/// etcd-druid's stand-in in each seed (source, destination), both acting on `etcd`.
pub fn druids(a: &Seed, b: &Seed, etcd: &Arc<Mutex<Cluster>>) -> (DruidTask, DruidTask) {
    let spawn =
        |s: &Seed, side| DruidTask::spawn(s.admin.clone(), NS, "etcd-main", side, etcd.clone());
    (spawn(a, "source"), spawn(b, "destination"))
}

/// Every member either seed may have, with the planner's names and URLs.
pub fn members(src: &EtcdMigrationSpec, dst: &EtcdMigrationSpec) -> Vec<plan::Member> {
    plan::members(src, NS)
        .into_iter()
        .chain(plan::members(dst, NS))
        .collect()
}

pub fn migrations(c: &Client) -> Api<EtcdMigration> {
    Api::namespaced(c.clone(), NS)
}

/// gardenlet sets the migration's step.
pub async fn set_step(c: &Client, step: Step) {
    gardenlet::set_step(c, NS, "shoot", step).await.unwrap();
}

pub async fn status(c: &Client) -> Value {
    let m = migrations(c).get("shoot").await.unwrap();
    serde_json::to_value(m.status.unwrap_or_default()).unwrap()
}

/// Condition `t` of `status` as (status, reason).
pub fn condition(status: &Value, t: &str) -> Option<(String, String)> {
    status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == t)
        .map(|c| {
            (
                c["status"].as_str().unwrap_or_default().to_string(),
                c["reason"].as_str().unwrap_or_default().to_string(),
            )
        })
}

/// Waits until `step` is planned and reached (`what` names the wait in a failure); returns
/// the status.
pub async fn reach(c: &Client, step: Step, what: &str) -> Value {
    let want = serde_json::to_value(step).unwrap();
    let deadline = Instant::now() + STEP_TIMEOUT;
    loop {
        let s = status(c).await;
        if s["step"] == want && s["stepReady"] == true {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: {step:?} not reached after {STEP_TIMEOUT:?}: {s:#}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Sets `step` on the migration and waits until it is reached; the status then.
pub async fn go_to(c: &Client, step: Step, what: &str) -> Value {
    set_step(c, step).await;
    reach(c, step, what).await
}

/// etcd's members as [`members_of`] lists them when `names` are all voters.
pub fn voters(names: &[&str]) -> Vec<(String, bool)> {
    names.iter().map(|n| (n.to_string(), false)).collect()
}

/// Waits until condition `t` is `want` (status, reason); returns the status.
pub async fn wait_condition(c: &Client, t: &str, want: (&str, &str)) -> Value {
    let deadline = Instant::now() + STEP_TIMEOUT;
    loop {
        let s = status(c).await;
        let have = condition(&s, t);
        if have.as_ref().map(|(a, b)| (a.as_str(), b.as_str())) == Some(want) {
            return s;
        }
        assert!(Instant::now() < deadline, "{t} never {want:?}: {s:#}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// etcd's members as (name, learner), sorted.
pub async fn members_of(etcd: &Mutex<Cluster>) -> Vec<(String, bool)> {
    let c = etcd.lock().await;
    let mut m: Vec<(String, bool)> = c
        .list()
        .await
        .unwrap()
        .iter()
        .map(|l| (c.name_of(l), l.learner))
        .collect();
    m.sort();
    m
}

/// Waits until every voter serves a linearizable read (the cluster has a working quorum).
pub async fn wait_healthy(c: &Mutex<Cluster>) {
    let urls = c.lock().await.voter_urls();
    for url in urls {
        etcd::wait_serving(&url, STEP_TIMEOUT).await.unwrap();
    }
}
