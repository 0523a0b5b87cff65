//! Issue 46 point 4 against a real kube-apiserver (v1.34.4, `deploy/`'s CRDs and RBAC): with
//! the chart's default `proxy.service.mode: onDemand` the proxies' LoadBalancer Service does
//! not exist while the seed migrates nothing. The controller, as `deploy/`'s ServiceAccount
//! (its Role: a verb missing fails this), makes it from `deploy/`'s template with the first
//! migration, writes no DNS record before the cloud provider (stand-in) gave it an address,
//! and deletes it when the last migration is gone.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod tunnel;

use isthmus_controller::access::{grant, Subject};
use isthmus_controller::crd::EtcdMigration;
use isthmus_controller::gardener::dnsrecord_resource;
use isthmus_controller::load_balancer::ON_DEMAND_LABEL;
use isthmus_seed_world::seed::{Seed, SYSTEM};
use isthmus_seed_world::workloads::cloud_provider;
use isthmus_testkit::gardener::{ETCD_CA_BUNDLE_SECRET, ETCD_CLIENT_SECRET};
use isthmus_testkit::wait_until;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::Client;
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

const NS: &str = "shoot--foo--bar";
const WAIT: Duration = Duration::from_secs(90);
/// The address the cloud provider (stand-in) gives the load balancer.
const ADDRESS: &str = "203.0.113.9";

/// The template ConfigMap of `deploy/proxy.yaml` (the chart rendered with its plain values).
fn template() -> Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/proxy.yaml");
    isthmus_testkit::tools::yaml_docs(&std::fs::read_to_string(p).unwrap())
        .into_iter()
        .find(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == "isthmus-proxy-service")
        .expect("deploy/proxy.yaml carries the load balancer's template")
}

async fn dns_values(c: &Client) -> Vec<Value> {
    let api: Api<DynamicObject> = Api::namespaced_with(c.clone(), NS, &dnsrecord_resource());
    let list = api.list(&Default::default()).await.unwrap().items;
    list.into_iter()
        .map(|r| r.data["spec"]["values"].clone())
        .collect()
}

/// The reasons of the migration's conditions.
async fn reasons(c: &Client) -> Vec<String> {
    let m = Api::<EtcdMigration>::namespaced(c.clone(), NS)
        .get("etcd-main")
        .await
        .unwrap();
    m.status
        .map(|s| s.conditions.into_iter().map(|x| x.reason).collect())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_load_balancer_exists_only_while_a_migration_needs_it() {
    let mut seed = Seed::start("seed-b", "203.0.113.8", NS).await;
    seed.dns_provider(NS);
    let crds = isthmus_testkit::cache::upstream_crds();
    seed.api
        .apply_yaml(&crds.join("monitoring.coreos.com_servicemonitors.yaml"))
        .await;
    let c = seed.admin.clone();
    let services: Api<Service> = Api::namespaced(c.clone(), SYSTEM);
    // The seed world gives every seed a load balancer; this one has none until it migrates.
    services
        .delete("isthmus-proxy", &DeleteParams::default())
        .await
        .unwrap();
    seed.api
        .apply_yaml_str(&serde_json::to_string(&template()).unwrap())
        .await;
    let mut m = tunnel::example();
    m.metadata = Default::default();
    let m = EtcdMigration::new("etcd-main", m.spec);
    let secrets = [ETCD_CA_BUNDLE_SECRET.into(), ETCD_CLIENT_SECRET.into()];
    for doc in grant(&m.spec, NS, &Subject::default(), &secrets) {
        seed.api
            .apply_yaml_str(&serde_json::to_string(&doc).unwrap())
            .await;
    }
    let _controller = seed
        .controller_with("c1", Default::default(), |ctx| {
            ctx.with_tunnel_servers(tunnel::settings())
                .with_on_demand_load_balancer("isthmus-proxy-service")
        })
        .await;
    assert!(services.get_opt("isthmus-proxy").await.unwrap().is_none());

    let migrations: Api<EtcdMigration> = Api::namespaced(c.clone(), NS);
    migrations.create(&PostParams::default(), &m).await.unwrap();
    // Made with the first migration, labelled as the controller's (only such a one is ever
    // deleted), the template's LoadBalancer.
    wait_until("the load balancer made", WAIT, || async {
        services.get_opt("isthmus-proxy").await.unwrap().is_some()
    })
    .await;
    let svc = services.get("isthmus-proxy").await.unwrap();
    let labels = svc.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get(ON_DEMAND_LABEL).map(String::as_str),
        Some("true")
    );
    assert_eq!(svc.spec.unwrap().type_.as_deref(), Some("LoadBalancer"));
    // No address yet: the exposure waits, and no DNS record names anything.
    wait_until("the exposure waits for the address", WAIT, || async {
        reasons(&c)
            .await
            .iter()
            .any(|r| r == "WaitingForLoadBalancer")
    })
    .await;
    assert!(
        dns_values(&c).await.is_empty(),
        "{:?}",
        dns_values(&c).await
    );
    // The cloud provider gives it an address; the records name that address.
    let _cloud = cloud_provider(c.clone(), ADDRESS);
    wait_until("a DNS record names the address", WAIT, || async {
        let values = dns_values(&c).await;
        !values.is_empty() && values.iter().all(|v| v == &serde_json::json!([ADDRESS]))
    })
    .await;

    // The last migration gone: so is the load balancer.
    migrations
        .delete("etcd-main", &DeleteParams::default())
        .await
        .unwrap();
    wait_until("the load balancer deleted", WAIT, || async {
        services.get_opt("isthmus-proxy").await.unwrap().is_none()
            && migrations.get_opt("etcd-main").await.unwrap().is_none()
    })
    .await;
}
