//! The Service gardener-resource-manager needs in a shoot namespace (issue 27 point 3): a real
//! kube-apiserver with `deploy/`'s CRDs and RBAC, the controller as its ServiceAccount under
//! gardenlet's grant (create/patch/delete of `isthmus-etcd` only). With a migration the
//! Service appears (selector = the `Etcd`'s pod labels, ports 2379/2380, the resource
//! manager's annotations, owned by the migration); two migrations of one namespace share it
//! (the labels both `Etcd`s' pods carry, both owners); it follows the migrations as they go,
//! and is gone with the last; one of that name that no migration owns (made by hand) is left
//! alone. That it goes when a migration is done is in
//! `apiserver_controller.rs` (both seeds, every step).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{spec, NS};
use isthmus_controller::access::{grant, Subject};
use isthmus_controller::crd::{EtcdMigration, EtcdMigrationSpec, Role, Step};
use isthmus_controller::gardener::etcd_resource;
use isthmus_seed_world::seed::{Seed, SYSTEM};
use isthmus_testkit::kube::minimal_etcd;
use isthmus_testkit::wait_until;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(90);

fn source(etcd: &str) -> EtcdMigrationSpec {
    let mut s = spec(Role::Source, Step::Expose);
    s.etcd_name = etcd.into();
    s
}

/// The Service's selector, owners' names and the rest of what the resource manager reads.
async fn service(c: &Client) -> Option<Value> {
    let api: Api<Service> = Api::namespaced(c.clone(), NS);
    let s = api.get_opt("isthmus-etcd").await.unwrap()?;
    Some(serde_json::to_value(s).unwrap())
}

fn owners(s: &Value) -> Vec<String> {
    let mut names: Vec<String> = s["metadata"]["ownerReferences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    names
}

async fn wait_for(c: &Client, what: &str, selector: Value, want_owners: &[&str]) -> Value {
    let want: Vec<String> = want_owners.iter().map(|s| s.to_string()).collect();
    wait_until(what, WAIT, || {
        let (selector, want) = (selector.clone(), want.clone());
        async move {
            service(c)
                .await
                .is_some_and(|s| s["spec"]["selector"] == selector && owners(&s) == want)
        }
    })
    .await;
    service(c).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_resource_managers_service_comes_and_goes_with_the_migrations() {
    let seed = Seed::start("seed-a", "203.0.113.7", NS).await;
    let c = seed.admin.clone();
    // gardenlet's Etcds (pod labels app=etcd-statefulset, name=<etcd>) and its grant for
    // both migrations (one Role per namespace: the rules of both).
    let etcds: Api<DynamicObject> = Api::namespaced_with(c.clone(), NS, &etcd_resource());
    for name in ["etcd-main", "etcd-events"] {
        let e: DynamicObject = serde_json::from_value(minimal_etcd(name, NS, 3)).unwrap();
        etcds.create(&PostParams::default(), &e).await.unwrap();
    }
    use isthmus_testkit::gardener::{ETCD_CA_BUNDLE_SECRET, ETCD_CLIENT_SECRET};
    let secrets = [
        ETCD_CA_BUNDLE_SECRET.to_string(),
        ETCD_CLIENT_SECRET.to_string(),
    ];
    let [mut role, binding] = grant(&source("etcd-main"), NS, &Subject::default(), &secrets);
    let [events_role, _] = grant(&source("etcd-events"), NS, &Subject::default(), &secrets);
    let mut rules = role["rules"].as_array().unwrap().clone();
    rules.extend(events_role["rules"].as_array().unwrap().iter().cloned());
    role["rules"] = Value::Array(rules);
    for doc in [role, binding] {
        seed.api
            .apply_yaml_str(&serde_json::to_string(&doc).unwrap())
            .await;
    }
    let (controller, _) = seed.controller("c1", BTreeMap::new()).await;
    let migrations: Api<EtcdMigration> = Api::namespaced(c.clone(), NS);

    let main = migrations
        .create(
            &PostParams::default(),
            &EtcdMigration::new("etcd-main", source("etcd-main")),
        )
        .await
        .unwrap();
    let main_selector = json!({"app": "etcd-statefulset", "name": "etcd-main"});
    let s = wait_for(
        &c,
        "the Service of etcd-main",
        main_selector,
        &["etcd-main"],
    )
    .await;
    assert_eq!(s["spec"]["clusterIP"], "None");
    let ports: Vec<(String, i64, i64, String)> = s["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap().into(),
                p["port"].as_i64().unwrap(),
                p["targetPort"].as_i64().unwrap(),
                p["protocol"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        ports,
        [
            ("client".into(), 2379, 2379, "TCP".into()),
            ("peer".into(), 2380, 2380, "TCP".into())
        ]
    );
    let annotations = &s["metadata"]["annotations"];
    let selectors: Value = serde_json::from_str(
        annotations["networking.resources.gardener.cloud/namespace-selectors"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        selectors,
        json!([{"matchLabels": {"kubernetes.io/metadata.name": SYSTEM}}])
    );
    assert_eq!(
        annotations["networking.resources.gardener.cloud/pod-label-selector-namespace-alias"],
        "all-shoots"
    );
    let owner = &s["metadata"]["ownerReferences"][0];
    assert_eq!(
        (&owner["apiVersion"], &owner["kind"], &owner["uid"]),
        (
            &json!("isthmus.dev/v1alpha1"),
            &json!("EtcdMigration"),
            &json!(main.uid().unwrap())
        )
    );
    assert_eq!(
        s["metadata"]["managedFields"][0]["manager"], "isthmus",
        "{s:#}"
    );

    // A second migration in the namespace: what both Etcds' pods share, both owners.
    migrations
        .create(
            &PostParams::default(),
            &EtcdMigration::new("etcd-events", source("etcd-events")),
        )
        .await
        .unwrap();
    wait_for(
        &c,
        "the Service of both",
        json!({"app": "etcd-statefulset"}),
        &["etcd-events", "etcd-main"],
    )
    .await;

    // The first goes (its finalizer): the Service is the other's alone.
    migrations
        .delete("etcd-main", &DeleteParams::default())
        .await
        .unwrap();
    wait_for(
        &c,
        "the Service of etcd-events",
        json!({"app": "etcd-statefulset", "name": "etcd-events"}),
        &["etcd-events"],
    )
    .await;
    // The last goes: so does the Service (no garbage collector runs here: the finalizer).
    migrations
        .delete("etcd-events", &DeleteParams::default())
        .await
        .unwrap();
    wait_until("the Service gone", WAIT, || async {
        service(&c).await.is_none()
    })
    .await;
    wait_until("both migrations gone", WAIT, || async {
        migrations
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    })
    .await;

    // A Service of that name that no migration owns is not the controller's to delete: here
    // one made by hand, and a migration that needs none (its Etcd's pods have no labels to
    // select, so it is written nowhere) passes by it.
    let services: Api<Service> = Api::namespaced(c.clone(), NS);
    let hand: Service = serde_json::from_value(json!({
        "metadata": {"name": "isthmus-etcd"},
        "spec": {"clusterIP": "None", "ports": [{"port": 2379}]},
    }))
    .unwrap();
    services
        .create(&PostParams::default(), &hand)
        .await
        .unwrap();
    let no_labels = json!([{"op": "replace", "path": "/spec/labels", "value": {}}]);
    etcds
        .patch(
            "etcd-main",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Json::<()>(serde_json::from_value(no_labels).unwrap()),
        )
        .await
        .unwrap();
    migrations
        .create(
            &PostParams::default(),
            &EtcdMigration::new("etcd-main", source("etcd-main")),
        )
        .await
        .unwrap();
    wait_until("a pass of the new migration", WAIT, || async {
        migrations
            .get("etcd-main")
            .await
            .unwrap()
            .status
            .is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == "ObjectsApplied" && c.status == "True")
            })
    })
    .await;
    let s = service(&c).await.expect("the hand-made Service stays");
    assert!(s["metadata"].get("ownerReferences").is_none(), "{s:#}");
    controller.abort();
}
