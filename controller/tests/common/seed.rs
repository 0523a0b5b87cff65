//! One seed for the end-to-end controller tests: a real kube-apiserver with the pinned
//! upstream CRDs and `deploy/`'s manifests, the `isthmus` controller running as its
//! ServiceAccount with the grant gardenlet gives it in the shoot namespace ([`Seed::grant`]:
//! a verb neither grants fails the test), and small stand-ins for
//! the controllers that cannot run here without kubelets, each acting only through the API:
//!
//! - `DnsProviderStandIn`: a DNS extension: acknowledges every `DNSRecord` generation
//!   (`status.observedGeneration`, `lastOperation.state: Succeeded`) and takes the
//!   `gardener.cloud/operation` annotation away, as Gardener's extensions do.
//! - `KubeletAndProxyStandIn`: the proxy pods' `/config` answer: the hash of the route
//!   ConfigMap as it is in the API *after* the proxy's own loader accepted it (a real proxy
//!   refuses a file its loader rejects, and then keeps serving the old hash).
//! - etcd-druid: see `apiserver_controller.rs` (it drives the real etcd of `etcd.rs`).

use futures::future::BoxFuture;
use isthmus_controller::crd::PortScheme;
use isthmus_controller::gardener::dnsrecord_resource;
use isthmus_controller::kube_adapter::lease::{run_as_leader, LeaseLock};
use isthmus_controller::kube_adapter::probe::{HashFetcher, ProbeError};
use isthmus_controller::kube_adapter::{self, Context, Metrics, Settings};
use isthmus_controller::proxy_config::{Layout, CONFIG_KEY};
use isthmus_testkit::kube::KubeApiServer;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use prometheus_client::metrics::gauge::Gauge;
use serde_json::json;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

pub const SYSTEM: &str = "isthmus-system";

/// A seed: its API server, an admin client, and the stand-ins' tasks.
pub struct Seed {
    pub name: String,
    pub api: KubeApiServer,
    pub admin: Client,
    pub lb: String,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Seed {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// The proxy pods' `/config` as a stand-in: the hash of the ConfigMap the controller wrote,
/// once the proxy's own loader accepts it.
pub struct KubeletAndProxyStandIn {
    pub admin: Client,
}

impl std::fmt::Debug for KubeletAndProxyStandIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KubeletAndProxyStandIn")
    }
}

impl HashFetcher for KubeletAndProxyStandIn {
    fn fetch(&self, addr: SocketAddr) -> BoxFuture<'_, Result<String, ProbeError>> {
        Box::pin(async move {
            let cms: Api<ConfigMap> = Api::namespaced(self.admin.clone(), SYSTEM);
            let cm = cms
                .get("isthmus-proxy-routes")
                .await
                .map_err(|e| ProbeError::Http(addr, e.to_string()))?;
            let text = cm
                .data
                .and_then(|d| d.get(CONFIG_KEY).cloned())
                .ok_or_else(|| ProbeError::Body(addr, "no proxy.json".into()))?;
            isthmus_config::parse_proxy(CONFIG_KEY, &text)
                .map_err(|e| ProbeError::Body(addr, e.to_string()))?;
            Ok(isthmus_config::hash_bytes(text.as_bytes()))
        })
    }
}

impl Seed {
    /// A seed named `name` whose proxy load balancer has address `lb`.
    pub async fn start(name: &str, lb: &str, namespace: &str) -> Self {
        let api = KubeApiServer::start().await;
        for crd in KubeApiServer::upstream_crd_paths() {
            api.apply_yaml(&crd).await;
        }
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        api.apply_yaml(&root.join("deploy/crd-etcdmigration.yaml"))
            .await;
        api.apply_yaml(&root.join("deploy/00-namespace.yaml")).await;
        api.apply_yaml_str(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {namespace}\n"
        ))
        .await;
        // The controller's ServiceAccount, ClusterRole, Role and bindings (and its Deployment,
        // which nothing runs here).
        api.apply_yaml(&root.join("deploy/controller.yaml")).await;
        let admin = api.admin().await;
        let seed = Self {
            name: name.into(),
            api,
            admin,
            lb: lb.into(),
            tasks: Vec::new(),
        };
        seed.proxy_objects().await;
        seed
    }

    /// The proxy's LoadBalancer Service (with its address) and one running proxy pod, as the
    /// cloud provider and kubelet would report them.
    async fn proxy_objects(&self) {
        let pp = PatchParams::apply("cloud-provider").force();
        let svcs: Api<DynamicObject> = Api::namespaced_with(
            self.admin.clone(),
            SYSTEM,
            &kube::core::ApiResource::erase::<k8s_openapi::api::core::v1::Service>(&()),
        );
        let svc = json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "isthmus-proxy", "namespace": SYSTEM},
            "spec": {"type": "LoadBalancer", "ports": [{"name": "peer", "port": 2380}],
                     "selector": {"app.kubernetes.io/name": "isthmus-proxy"}},
        });
        svcs.patch("isthmus-proxy", &pp, &Patch::Apply(svc))
            .await
            .unwrap();
        let status = json!({"apiVersion": "v1", "kind": "Service",
            "status": {"loadBalancer": {"ingress": [{"ip": self.lb}]}}});
        svcs.patch_status("isthmus-proxy", &pp, &Patch::Apply(status))
            .await
            .unwrap();
        let pods: Api<DynamicObject> = Api::namespaced_with(
            self.admin.clone(),
            SYSTEM,
            &kube::core::ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&()),
        );
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "isthmus-proxy-a", "namespace": SYSTEM,
                         "labels": {"app.kubernetes.io/name": "isthmus-proxy"}},
            // No controller-manager creates a `default` ServiceAccount here.
            "spec": {"nodeName": "node-a", "serviceAccountName": "isthmus-controller",
                     "automountServiceAccountToken": false,
                     "containers": [{"name": "proxy", "image": "isthmus"}]},
        });
        pods.patch("isthmus-proxy-a", &pp, &Patch::Apply(pod))
            .await
            .unwrap();
        let status = json!({"apiVersion": "v1", "kind": "Pod",
            "status": {"phase": "Running", "podIP": "127.0.0.1", "podIPs": [{"ip": "127.0.0.1"}]}});
        pods.patch_status("isthmus-proxy-a", &pp, &Patch::Apply(status))
            .await
            .unwrap();
    }

    /// etcd's client certificate `client_secret` and the CA bundle in `namespace`, as Gardener's
    /// secrets manager keeps them (`isthmus_testkit::gardener`): what the `Etcd`'s
    /// `spec.etcd.clientUrlTls` names and the controller reads to ask etcd.
    pub async fn etcd_client_secrets(
        &self,
        namespace: &str,
        client_secret: &str,
        ca: &str,
        cert: &str,
        key: &str,
    ) {
        let secrets: Api<k8s_openapi::api::core::v1::Secret> =
            Api::namespaced(self.admin.clone(), namespace);
        let docs =
            isthmus_testkit::gardener::etcd_client_secrets(namespace, client_secret, ca, cert, key);
        for doc in docs {
            let s: k8s_openapi::api::core::v1::Secret = serde_json::from_value(doc).unwrap();
            match secrets.create(&PostParams::default(), &s).await {
                Ok(_) => {}
                // The CA bundle is shared by every client certificate.
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => panic!("creating the etcd client Secrets: {e}"),
            }
        }
    }

    /// What gardenlet does with the `EtcdMigration`: grants the controller access in the
    /// migration's namespace (`isthmus_controller::access`, `deploy/examples/access-*.yaml`),
    /// naming the etcd client Secrets of `isthmus_testkit::etcd_spec`.
    pub async fn grant(&self, spec: &isthmus_controller::crd::EtcdMigrationSpec, namespace: &str) {
        use isthmus_testkit::gardener::{ETCD_CA_BUNDLE_SECRET, ETCD_CLIENT_SECRET};
        let secrets = [
            ETCD_CA_BUNDLE_SECRET.to_string(),
            ETCD_CLIENT_SECRET.to_string(),
        ];
        self.grant_secrets(spec, namespace, &secrets).await;
    }

    /// [`Self::grant`] naming `secrets` (after a rotation: the new names).
    pub async fn grant_secrets(
        &self,
        spec: &isthmus_controller::crd::EtcdMigrationSpec,
        namespace: &str,
        secrets: &[String],
    ) {
        let subject = isthmus_controller::access::Subject::default();
        for doc in isthmus_controller::access::grant(spec, namespace, &subject, secrets) {
            self.api
                .apply_yaml_str(&serde_json::to_string(&doc).unwrap())
                .await;
        }
    }

    /// Starts the DNS provider stand-in.
    pub fn dns_provider(&mut self, namespace: &str) {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.admin.clone(), namespace, &dnsrecord_resource());
        self.tasks.push(tokio::spawn(async move {
            loop {
                if let Ok(list) = api.list(&Default::default()).await {
                    for r in list.items {
                        acknowledge_dns(&api, &r).await;
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }));
    }

    /// Starts one controller replica (`identity`) as the ServiceAccount of `deploy/`, with a
    /// short lease; returns its task and its leader gauge.
    pub async fn controller(
        &self,
        identity: &str,
        connect_to: BTreeMap<String, SocketAddr>,
    ) -> (JoinHandle<()>, Gauge) {
        let client = self.api.service_account(SYSTEM, "isthmus-controller").await;
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
            etcd_connect_to: connect_to,
        };
        let fetcher = Arc::new(KubeletAndProxyStandIn {
            admin: self.admin.clone(),
        });
        let ctx = Arc::new(Context::new(client.clone(), settings, metrics, fetcher));
        let lock = LeaseLock::new(
            Api::namespaced(client, SYSTEM),
            "isthmus-controller",
            identity,
            Duration::from_secs(3),
        );
        let g = gauge.clone();
        let task = tokio::spawn(async move {
            if let Err(e) = run_as_leader(&lock, &g, kube_adapter::run(ctx)).await {
                eprintln!("controller ended: {e}");
            }
        });
        (task, gauge)
    }
}

async fn acknowledge_dns(api: &Api<DynamicObject>, r: &DynamicObject) {
    let generation = r.metadata.generation.unwrap_or(0);
    let observed = r.data["status"]["observedGeneration"].as_i64();
    let pending = r.annotations().contains_key("gardener.cloud/operation");
    if observed == Some(generation) && !pending {
        return;
    }
    let name = r.name_any();
    let status = json!({
        "apiVersion": "extensions.gardener.cloud/v1alpha1", "kind": "DNSRecord",
        "status": {"observedGeneration": generation, "lastOperation": {
            "type": "Reconcile", "state": "Succeeded", "progress": 100,
            "description": "record written (stand-in)",
            "lastUpdateTime": "2026-01-01T00:00:00Z"}},
    });
    let pp = PatchParams::apply("dns-provider-stand-in").force();
    let _ = api.patch_status(&name, &pp, &Patch::Apply(status)).await;
    if pending {
        let drop_op = json!({"metadata": {"annotations": {"gardener.cloud/operation": null}}});
        let _ = api
            .patch(&name, &PatchParams::default(), &Patch::Merge(drop_op))
            .await;
    }
}
