//! The controller against etcd-druid's API as it is now, on a real kube-apiserver (v1.34.4)
//! with the pinned v0.38.1 CRD, running as `deploy/`'s ServiceAccount under the grant: it asks
//! with `druid.gardener.cloud/operation` (the deprecated `gardener.cloud/operation` is
//! gardenlet's), and an `Etcd` an operator suspended is said in the status, not waited on
//! silently. No druid runs here: what the controller leaves on the `Etcd` stays visible.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{spec, NS};
use isthmus_controller::crd::{EtcdMigration, Role, Step};
use isthmus_controller::gardener::etcd_resource;
use isthmus_controller::plan::{DRUID_OPERATION, OPERATION, SUSPEND_SPEC_RECONCILE};
use isthmus_seed_world::seed::Seed;
use isthmus_testkit::kube::minimal_etcd;
use isthmus_testkit::wait_until;
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_is_druids_and_a_suspension_is_said() {
    let mut seed = Seed::start("seed-a", "203.0.113.7", NS).await;
    seed.dns_provider(NS);
    let mut src = spec(Role::Source, Step::Expose);
    src.members = 1;
    seed.grant(&src, NS).await;
    // gardenlet's source Etcd, which an operator suspended.
    let mut e = minimal_etcd("etcd-main", NS, 1);
    e["metadata"]["annotations"] = json!({SUSPEND_SPEC_RECONCILE: "true"});
    let etcds: Api<DynamicObject> = Api::namespaced_with(seed.admin.clone(), NS, &etcd_resource());
    let obj: DynamicObject = serde_json::from_value(e).unwrap();
    etcds.create(&PostParams::default(), &obj).await.unwrap();
    let (_controller, _) = seed.controller("c", BTreeMap::new()).await;
    let migrations: Api<EtcdMigration> = Api::namespaced(seed.admin.clone(), NS);
    migrations
        .create(&PostParams::default(), &EtcdMigration::new("shoot", src))
        .await
        .unwrap();

    let prepared = || async {
        let m = migrations.get("shoot").await.ok()?;
        let s = serde_json::to_value(m.status?).ok()?;
        s["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "SourceEtcdPreparedForPeerJoin")
            .cloned()
    };
    wait_until("the suspension said in the status", TIMEOUT, || async {
        prepared()
            .await
            .is_some_and(|c| c["reason"] == "EtcdSpecReconcileSuspended")
    })
    .await;
    let c = prepared().await.unwrap();
    assert_eq!(c["status"], "Progressing");
    let msg = c["message"].as_str().unwrap_or_default();
    assert!(msg.contains(SUSPEND_SPEC_RECONCILE), "{msg}");

    // The fields are applied and the request is druid's own spelling, waiting for druid.
    let v: Value = serde_json::to_value(etcds.get("etcd-main").await.unwrap()).unwrap();
    let a = &v["metadata"]["annotations"];
    assert_eq!(a[DRUID_OPERATION], "reconcile", "{a}");
    assert!(a.get(OPERATION).is_none(), "{a}");
    assert_eq!(
        v["spec"]["etcd"]["additionalAdvertisePeerURLs"][0]["memberName"],
        "etcd-main-0"
    );
}
