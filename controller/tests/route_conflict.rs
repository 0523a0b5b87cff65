//! Two `EtcdMigration`s wanting one route (issue 25 point 7): the same `spec.vpn.dnsName` in
//! two shoots' namespaces on one seed. Against a real kube-apiserver with `deploy/`'s CRDs and
//! RBAC and the controller running as its ServiceAccount: the older keeps the route in the
//! ConfigMap, however often either is reconciled (before, the file flipped on every reconcile
//! while both reported served); the younger gets `RouteConflict` and its exposure is not
//! reported served; once the older is gone, the younger gets the route.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::spec;
use isthmus_controller::crd::{EtcdMigration, EtcdMigrationSpec, EtcdTemplate, Role, Step};
use isthmus_seed_world::seed::{Seed, SYSTEM};
use isthmus_testkit::kube::minimal_etcd;
use isthmus_testkit::wait_until;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, PostParams};
use kube::Client;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(90);
const VPN: &str = "vpn-tmp.foo.internal.example.com";

fn destination(ns: &str) -> EtcdMigrationSpec {
    let mut s = spec(Role::Destination, Step::Join);
    s.vpn.as_mut().unwrap().target = format!("vpn-seed-server.{ns}.svc.cluster.local:9443");
    s.dns.secret_ref.namespace = ns.into();
    let mut tspec = minimal_etcd("etcd-main", ns, 2)["spec"].clone();
    tspec.as_object_mut().unwrap().remove("replicas");
    s.destination.as_mut().unwrap().etcd_template = Some(EtcdTemplate {
        labels: [("app".to_string(), "etcd-statefulset".to_string())].into(),
        annotations: Default::default(),
        spec: tspec,
    });
    s
}

async fn create(c: &Client, ns: &str) {
    Api::<EtcdMigration>::namespaced(c.clone(), ns)
        .create(
            &PostParams::default(),
            &EtcdMigration::new("etcd-main", destination(ns)),
        )
        .await
        .unwrap();
}

/// `(status, reason)` of condition `t` of the migration in `ns`.
async fn condition(c: &Client, ns: &str, t: &str) -> Option<(String, String)> {
    let m = Api::<EtcdMigration>::namespaced(c.clone(), ns)
        .get_opt("etcd-main")
        .await
        .ok()??;
    let status = m.status?;
    let found = status.conditions.into_iter().find(|x| x.type_ == t)?;
    Some((found.status, found.reason))
}

/// The upstream the rendered file routes the VPN name to.
async fn vpn_upstream(c: &Client) -> Option<String> {
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), SYSTEM);
    let data = cms.get("isthmus-proxy-routes").await.ok()?.data?;
    let text = data.get("proxy.json")?;
    let config = isthmus_config::parse_proxy("proxy.json", text).ok()?;
    let vpn = config.listeners.iter().find(|l| l.name == "vpn-8443")?;
    let route = vpn
        .routes
        .iter()
        .find(|r| r.sni.as_ref().is_some_and(|s| s.as_str() == VPN))?;
    Some(route.upstream.clone())
}

fn is(want: (&'static str, &'static str)) -> impl Fn(&Option<(String, String)>) -> bool {
    move |got| {
        got.as_ref()
            .is_some_and(|(s, r)| s == want.0 && r == want.1)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_older_migration_keeps_the_route_and_the_younger_is_told() {
    let seed = Seed::start("seed-b", "198.51.100.9", "shoot--a").await;
    seed.api
        .apply_yaml_str("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: shoot--b\n")
        .await;
    let (controller, _) = seed.controller("c1", BTreeMap::new()).await;
    let c = seed.admin.clone();
    create(&c, "shoot--a").await;
    wait_until("the older's VPN route in the file", WAIT, || async {
        vpn_upstream(&c).await.as_deref() == Some("shoot--a.vpn")
    })
    .await;
    create(&c, "shoot--b").await;
    let conflict = is(("True", "HeldByOlderMigration"));
    wait_until("the younger's RouteConflict", WAIT, || async {
        conflict(&condition(&c, "shoot--b", "RouteConflict").await)
    })
    .await;
    // Both are reconciled every 300 ms meanwhile: the route stays the older's, the older has
    // no conflict, and the younger's exposure is not reported served.
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        assert_eq!(vpn_upstream(&c).await.as_deref(), Some("shoot--a.vpn"));
        assert_eq!(condition(&c, "shoot--a", "RouteConflict").await, None);
        let exposed = condition(&c, "shoot--b", "DestinationEtcdExposed").await;
        assert!(
            exposed.as_ref().is_none_or(|(s, _)| s != "True"),
            "{exposed:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The older goes (its finalizer removes its routes): the younger gets the route.
    Api::<EtcdMigration>::namespaced(c.clone(), "shoot--a")
        .delete("etcd-main", &DeleteParams::default())
        .await
        .unwrap();
    wait_until("the younger's VPN route in the file", WAIT, || async {
        vpn_upstream(&c).await.as_deref() == Some("shoot--b.vpn")
    })
    .await;
    let resolved = is(("False", "NoConflict"));
    wait_until("RouteConflict resolved", WAIT, || async {
        resolved(&condition(&c, "shoot--b", "RouteConflict").await)
    })
    .await;
    controller.abort();
}
