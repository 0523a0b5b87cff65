//! Issue 46 points 2 and 3 against a real kube-apiserver (v1.34.4, `deploy/`'s CRDs and RBAC,
//! the prometheus-operator's `ServiceMonitor` CRD a seed has): the controller, as `deploy/`'s
//! ServiceAccount under gardenlet's grant (`access::grant`: a verb missing fails this), runs
//! the example destination migration's tunnel server while the VPN's route is served — every
//! object accepted with strict field validation and owned by the migration — holds the step
//! until the Deployment is available, leaves a second migration of the namespace without it,
//! removes it when the route goes (`Complete`) and, with the finalizer, when the migration is
//! deleted mid-way; the kube-apiserver's egress policy only with
//! `--tunnel-kube-apiserver-egress-policy`, and an earlier one deleted without it. The
//! conventions of the bodies: `tunnel_server.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod tunnel;

use isthmus_controller::access::{grant, Subject};
use isthmus_controller::crd::{EtcdMigration, Step};
use isthmus_controller::gardener::etcd_resource;
use isthmus_controller::proxy_config::CONFIG_KEY;
use isthmus_controller::tunnel_server::{
    kinds, TunnelServers, CONNECT_EGRESS_POLICY, CONNECT_INGRESS_POLICY,
};
use isthmus_seed_world::seed::{Seed, SYSTEM};
use isthmus_seed_world::workloads::{api, deployment_available};
use isthmus_testkit::gardener::{ETCD_CA_BUNDLE_SECRET, ETCD_CLIENT_SECRET};
use isthmus_testkit::kube::minimal_etcd;
use isthmus_testkit::wait_until;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{json, Value};
use std::time::Duration;

const NS: &str = "shoot--foo--bar";
const WAIT: Duration = Duration::from_secs(90);

/// The server's objects that exist, as JSON.
async fn present(c: &Client) -> Vec<Value> {
    let mut out = Vec::new();
    for (av, kind, name) in kinds(true) {
        if let Some(o) = api(c, NS, av, kind).get_opt(name).await.unwrap() {
            out.push(serde_json::to_value(o).unwrap());
        }
    }
    out
}

async fn condition(c: &Client, name: &str, type_: &str) -> Option<(String, String)> {
    let m = Api::<EtcdMigration>::namespaced(c.clone(), NS)
        .get(name)
        .await
        .unwrap();
    m.status?
        .conditions
        .into_iter()
        .find(|x| x.type_ == type_)
        .map(|x| (x.status, x.reason))
}

async fn wait_condition(c: &Client, name: &str, status: &str, reason: &str) {
    wait_until(
        &format!("{name}: TunnelServerAvailable {status}/{reason}"),
        WAIT,
        || async {
            condition(c, name, "TunnelServerAvailable").await
                == Some((status.into(), reason.into()))
        },
    )
    .await;
}

/// The example migration named `name` for etcd `etcd`, its VPN under `vpn`.
fn migration(name: &str, etcd: &str, vpn: &str) -> EtcdMigration {
    let mut m = tunnel::example();
    m.metadata = Default::default();
    m.spec.etcd_name = etcd.into();
    m.spec.vpn.as_mut().unwrap().dns_name = vpn.into();
    EtcdMigration::new(name, m.spec)
}

/// A seed with the `ServiceMonitor` CRD and gardenlet's grant for `migrations` (one Role: all
/// their rules).
async fn seed_granting(migrations: &[&EtcdMigration]) -> Seed {
    let seed = Seed::start("seed-b", "203.0.113.8", NS).await;
    let crds = isthmus_testkit::cache::upstream_crds();
    seed.api
        .apply_yaml(&crds.join("monitoring.coreos.com_servicemonitors.yaml"))
        .await;
    let secrets = [ETCD_CA_BUNDLE_SECRET.into(), ETCD_CLIENT_SECRET.into()];
    let [mut role, binding] = grant(&migrations[0].spec, NS, &Subject::default(), &secrets);
    let mut rules = role["rules"].as_array().unwrap().clone();
    for m in &migrations[1..] {
        let [other, _] = grant(&m.spec, NS, &Subject::default(), &secrets);
        rules.extend(other["rules"].as_array().unwrap().iter().cloned());
    }
    role["rules"] = Value::Array(rules);
    for doc in [role, binding] {
        seed.api
            .apply_yaml_str(&serde_json::to_string(&doc).unwrap())
            .await;
    }
    seed
}

fn main_migration() -> EtcdMigration {
    migration("etcd-main", "etcd-main", "vpn-tmp.foo.internal.example.com")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_controller_runs_the_tunnel_server_while_the_vpn_route_is_served() {
    let main = main_migration();
    let events = migration(
        "etcd-events",
        "etcd-events",
        "vpn-tmp2.foo.internal.example.com",
    );
    let seed = seed_granting(&[&main, &events]).await;
    let c = seed.admin.clone();
    let _controller = seed
        .controller_with("c1", Default::default(), |ctx| {
            ctx.with_tunnel_servers(tunnel::settings())
        })
        .await;
    let migrations: Api<EtcdMigration> = Api::namespaced(c.clone(), NS);
    let created = migrations
        .create(&PostParams::default(), &main)
        .await
        .unwrap();
    let uid = created.uid().unwrap();

    // At Join every object is there, applied by the controller (field manager `isthmus`,
    // strict: the real schemas, the ServiceMonitor's included, took them), owned by the
    // migration, a control-plane part of the shoot.
    let want = kinds(true).len();
    wait_until("the tunnel server's objects", WAIT, || async {
        present(&c).await.len() == want
    })
    .await;
    for o in present(&c).await {
        let id = format!("{}/{}", o["kind"], o["metadata"]["name"]);
        assert_eq!(
            o["metadata"]["ownerReferences"][0]["uid"],
            uid.as_str(),
            "{id}"
        );
        assert_eq!(
            o["metadata"]["labels"]["gardener.cloud/role"], "controlplane",
            "{id}"
        );
        assert_eq!(
            o["metadata"]["managedFields"][0]["manager"], "isthmus",
            "{id}"
        );
    }
    let d = api(&c, NS, "apps/v1", "Deployment")
        .get("isthmus-tunnel-server")
        .await
        .unwrap();
    let pod = &d.data["spec"]["template"]["spec"];
    assert_eq!(pod["priorityClassName"], "gardener-system-300");
    assert_eq!(
        pod["containers"][0]["readinessProbe"]["httpGet"]["path"],
        "/healthz"
    );
    // The proxies' VPN route leads to the server's agents Service, with the PROXY v2 header
    // the server's config trusts. (The server's objects may precede the route: the pass that
    // applies them can be the one before the pass whose file carries the route.)
    let cms = Api::<ConfigMap>::namespaced(c.clone(), SYSTEM);
    let vpn_upstream = || async {
        let routes = cms.get("isthmus-proxy-routes").await.unwrap();
        let file: Value = serde_json::from_str(&routes.data.unwrap()[CONFIG_KEY]).unwrap();
        let found = file["upstreams"]
            .as_array()
            .unwrap()
            .iter()
            .find(|u| u["name"] == format!("{NS}.vpn"))
            .cloned();
        (found, file)
    };
    wait_until("the VPN's route in the proxies' file", WAIT, || async {
        vpn_upstream().await.0.is_some()
    })
    .await;
    let (upstream, file) = vpn_upstream().await;
    let upstream = upstream.unwrap();
    assert_eq!(
        upstream["endpoints"],
        json!([format!("isthmus-tunnel-server.{NS}.svc.cluster.local:9443")]),
        "{file:#}"
    );
    assert_eq!(upstream["send_proxy_protocol"], "v2");

    // Not available yet: the step is held, and says why.
    wait_condition(&c, "etcd-main", "Progressing", "RollingOut").await;
    // The Deployment controller and kubelet (stand-in) report it available.
    deployment_available(&c, NS, "isthmus-tunnel-server")
        .await
        .unwrap();
    wait_condition(&c, "etcd-main", "True", "Available").await;

    // A second migration of the namespace asking for a server does not take this one.
    migrations
        .create(&PostParams::default(), &events)
        .await
        .unwrap();
    wait_condition(&c, "etcd-events", "False", "HeldByOtherMigration").await;
    let owners = &present(&c).await[0]["metadata"]["ownerReferences"];
    assert_eq!(owners.as_array().unwrap().len(), 1);
    assert_eq!(owners[0]["uid"], uid.as_str());
    migrations
        .delete("etcd-events", &DeleteParams::default())
        .await
        .unwrap();
    wait_until("etcd-events gone", WAIT, || async {
        migrations.get_opt("etcd-events").await.unwrap().is_none()
    })
    .await;
    assert_eq!(
        present(&c).await.len(),
        want,
        "the other's finalizer took nothing"
    );

    // Complete: the VPN's route goes, and the server with it. (The destination's Etcd, 3
    // members, is what Complete releases its fields on; no etcd-druid is needed for that. Its
    // memberNamePrefix is gardenlet's, from the migration: the API refuses to add it later.)
    let etcds: Api<DynamicObject> = Api::namespaced_with(c.clone(), NS, &etcd_resource());
    let mut etcd = minimal_etcd("etcd-main", NS, 3);
    etcd["spec"]["memberNamePrefix"] = json!("dest");
    let etcd: DynamicObject = serde_json::from_value(etcd).unwrap();
    etcds.create(&PostParams::default(), &etcd).await.unwrap();
    let step = json!({"spec": {"step": "Complete"}});
    migrations
        .patch("etcd-main", &PatchParams::default(), &Patch::Merge(step))
        .await
        .unwrap();
    wait_until("the tunnel server removed at Complete", WAIT, || async {
        present(&c).await.is_empty()
    })
    .await;
    wait_condition(&c, "etcd-main", "False", "Removed").await;
    assert_eq!(
        migrations.get("etcd-main").await.unwrap().spec.step,
        Step::Complete
    );

    // Deleted mid-way (at Join): the finalizer removes the server (no garbage collector
    // runs here).
    migrations
        .delete("etcd-main", &DeleteParams::default())
        .await
        .unwrap();
    wait_until("etcd-main gone", WAIT, || async {
        migrations.get_opt("etcd-main").await.unwrap().is_none()
    })
    .await;
    // A fresh Join: no Etcd yet (one would have the controller ask etcd, with Secrets this
    // test does not make).
    etcds
        .delete("etcd-main", &DeleteParams::default())
        .await
        .unwrap();
    migrations
        .create(&PostParams::default(), &main)
        .await
        .unwrap();
    wait_until("the tunnel server again", WAIT, || async {
        present(&c).await.len() == want
    })
    .await;
    migrations
        .delete("etcd-main", &DeleteParams::default())
        .await
        .unwrap();
    wait_until(
        "the tunnel server removed by the finalizer",
        WAIT,
        || async {
            present(&c).await.is_empty() && migrations.get_opt("etcd-main").await.unwrap().is_none()
        },
    )
    .await;
}

/// Issue 46: the kube-apiserver's egress policy only where the shoot namespaces deny egress.
/// A controller with `--tunnel-kube-apiserver-egress-policy` (the chart's Gardener path)
/// writes it with the server; one without (a plain cluster, where it would be the
/// kube-apiserver pods' only egress) runs the server without it and deletes the one the
/// earlier run wrote — under the grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_egress_policy_only_with_its_flag_and_an_earlier_one_removed() {
    let main = main_migration();
    let seed = seed_granting(&[&main]).await;
    let c = seed.admin.clone();
    let (gardener, _) = seed
        .controller_with("c1", Default::default(), |ctx| {
            ctx.with_tunnel_servers(tunnel::settings())
        })
        .await;
    let migrations: Api<EtcdMigration> = Api::namespaced(c.clone(), NS);
    migrations
        .create(&PostParams::default(), &main)
        .await
        .unwrap();
    let want = kinds(true).len();
    wait_until("the tunnel server's objects", WAIT, || async {
        present(&c).await.len() == want
    })
    .await;
    let policies = api(&c, NS, "networking.k8s.io/v1", "NetworkPolicy");
    assert!(policies
        .get_opt(CONNECT_EGRESS_POLICY)
        .await
        .unwrap()
        .is_some());

    // The same seed's controller, restarted without the flag, takes the Lease.
    gardener.abort();
    let plain = TunnelServers {
        kube_apiserver_egress: false,
        ..tunnel::settings()
    };
    let _plain = seed
        .controller_with("c2", Default::default(), |ctx| {
            ctx.with_tunnel_servers(plain)
        })
        .await;
    wait_until("the earlier egress policy removed", WAIT, || async {
        policies
            .get_opt(CONNECT_EGRESS_POLICY)
            .await
            .unwrap()
            .is_none()
    })
    .await;
    // The rest stays, and the policy is not written again by the passes that follow (one
    // reported the server available).
    deployment_available(&c, NS, "isthmus-tunnel-server")
        .await
        .unwrap();
    wait_condition(&c, "etcd-main", "True", "Available").await;
    let names: Vec<String> = present(&c)
        .await
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names.len(), want - 1, "{names:?}");
    assert!(
        !names.iter().any(|n| n == CONNECT_EGRESS_POLICY),
        "{names:?}"
    );
    assert!(
        names.iter().any(|n| n == CONNECT_INGRESS_POLICY),
        "{names:?}"
    );
}
