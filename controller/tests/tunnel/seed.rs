//! What the real-API-server tests of the tunnel server and the on-demand load balancer add to
//! `common::seed`: a controller replica with those turned on (as the chart's flags do), and
//! two stand-ins for what cannot run without kubelets or a cloud, each acting only through
//! the API: the Deployment controller with the kubelet (a Deployment's status, available),
//! and the cloud provider (a LoadBalancer Service's address).

#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use crate::common::seed::{KubeletAndProxyStandIn, Seed, SYSTEM};
use isthmus_controller::crd::PortScheme;
use isthmus_controller::kube_adapter::lease::{run_as_leader, LeaseLock};
use isthmus_controller::kube_adapter::{self, Context, Metrics, Settings};
use isthmus_controller::proxy_config::Layout;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

/// One replica as `deploy/`'s ServiceAccount, the grant of its namespaces given by the test,
/// with `configure` applied to its context (the chart's `--tunnel-*` and
/// `--proxy-service-template` flags).
pub async fn controller(
    seed: &Seed,
    identity: &str,
    configure: impl FnOnce(Context) -> Context,
) -> JoinHandle<()> {
    let client = seed.api.service_account(SYSTEM, "isthmus-controller").await;
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = Metrics::new(&mut registry);
    let gauge = metrics.leader.clone();
    let settings = Settings {
        proxy_namespace: SYSTEM.into(),
        proxy_namespace_labels: isthmus_controller::network::namespace_name_labels(SYSTEM),
        shoot_alias: "all-shoots".into(),
        proxy_configmap: "isthmus-proxy-routes".into(),
        proxy_selector: "app.kubernetes.io/name=isthmus-proxy".into(),
        proxy_admin_port: 9901,
        layout: Layout::standard(
            PortScheme::default(),
            3,
            8443,
            SocketAddr::from(([0, 0, 0, 0], 9901)),
        ),
        cluster_domain: "cluster.local".into(),
        vpn_dns_parents: Vec::new(),
        namespace: None,
        poll: Duration::from_millis(300),
        resync: Duration::from_secs(5),
        rollout_poll: Duration::from_millis(300),
        nudge_proxy_pods: true,
        etcd_connect_to: Default::default(),
    };
    let fetcher = Arc::new(KubeletAndProxyStandIn {
        admin: seed.admin.clone(),
    });
    let ctx = Arc::new(configure(Context::new(
        client.clone(),
        settings,
        metrics,
        fetcher,
    )));
    let lock = LeaseLock::new(
        Api::namespaced(client, SYSTEM),
        "isthmus-controller",
        identity,
        Duration::from_secs(3),
    );
    tokio::spawn(async move {
        if let Err(e) = run_as_leader(&lock, &gauge, kube_adapter::run(ctx)).await {
            eprintln!("controller ended: {e}");
        }
    })
}

/// The API of `kind` objects (`group/version`) in `ns`.
pub fn api(c: &Client, ns: &str, api_version: &str, kind: &str) -> Api<DynamicObject> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
    Api::namespaced_with(c.clone(), ns, &ar)
}

/// The Deployment controller and the kubelet, as a stand-in: the Deployment `name` of `ns`
/// has its current generation rolled out and one pod available.
pub async fn deployment_available(c: &Client, ns: &str, name: &str) {
    let deployments = api(c, ns, "apps/v1", "Deployment");
    let d = deployments.get(name).await.unwrap();
    let status = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "status": {"observedGeneration": d.metadata.generation, "replicas": 1,
                   "updatedReplicas": 1, "readyReplicas": 1, "availableReplicas": 1},
    });
    let pp = PatchParams::apply("deployment-controller-stand-in").force();
    deployments
        .patch_status(name, &pp, &Patch::Apply(status))
        .await
        .unwrap();
}

/// The cloud provider, as a stand-in: every LoadBalancer Service of the proxies' namespace
/// without an address gets `address`.
pub fn cloud_provider(c: Client, address: &str) -> JoinHandle<()> {
    let address = address.to_owned();
    tokio::spawn(async move {
        let services: Api<Service> = Api::namespaced(c, SYSTEM);
        loop {
            for s in services
                .list(&Default::default())
                .await
                .into_iter()
                .flat_map(|l| l.items)
            {
                let lb = s.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("LoadBalancer");
                let has = s
                    .status
                    .as_ref()
                    .and_then(|s| s.load_balancer.as_ref())
                    .and_then(|l| l.ingress.as_ref())
                    .is_some_and(|i| !i.is_empty());
                if lb && !has {
                    let status = json!({"apiVersion": "v1", "kind": "Service",
                        "status": {"loadBalancer": {"ingress": [{"ip": address}]}}});
                    let pp = PatchParams::apply("cloud-provider-stand-in").force();
                    let _ = services
                        .patch_status(&s.name_any(), &pp, &Patch::Apply(status))
                        .await;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}
