//! One seed for the controller's end-to-end tests: a real kube-apiserver (testkit's fixture)
//! with what a seed has before a migration (`crate::setup`), the stand-ins a test starts in it
//! (the DNS provider, `crate::dns`; etcd-druid, `crate::druid`, beside it), gardenlet's grant
//! (`crate::gardenlet`: a verb it does not grant fails the test), and the `isthmus` controller
//! in-process as `deploy/`'s ServiceAccount, asking the proxy pods' stand-in for their
//! `/config/hash` (`crate::proxy_pods`).

use crate::dns::DnsProviderTask;
use crate::proxy_pods::{KubeletAndProxyStandIn, ROUTES};
use crate::setup::{self, Setup};
use isthmus_controller::crd::{EtcdMigrationSpec, PortScheme};
use isthmus_controller::kube_adapter::lease::{run_as_leader, LeaseLock};
use isthmus_controller::kube_adapter::{self, Context, Metrics, Settings};
use isthmus_controller::proxy_config::Layout;
use isthmus_testkit::kube::KubeApiServer;
use kube::api::Api;
use kube::Client;
use prometheus_client::metrics::gauge::Gauge;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

pub use crate::setup::SYSTEM;

/// A seed: its API server, an admin client, and the stand-ins it runs.
pub struct Seed {
    pub name: String,
    pub api: KubeApiServer,
    pub admin: Client,
    pub lb: String,
    dns: Vec<DnsProviderTask>,
}

impl std::fmt::Debug for Seed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Seed")
            .field("name", &self.name)
            .field("api", &self.api)
            .finish_non_exhaustive()
    }
}

impl Seed {
    /// A seed named `name` whose proxy load balancer has address `lb`, with the shoot
    /// namespace `namespace`.
    pub async fn start(name: &str, lb: &str, namespace: &str) -> Self {
        let api = KubeApiServer::start().await;
        let admin = api.admin().await;
        let s = Setup {
            namespace,
            lb,
            node: "node-a",
            newer_advertised_urls: false,
        };
        setup::install(&admin, &s)
            .await
            .unwrap_or_else(|e| panic!("setting up seed {name}: {e}"));
        Self {
            name: name.into(),
            api,
            admin,
            lb: lb.into(),
            dns: Vec::new(),
        }
    }

    /// etcd's client certificate `client_secret` and the CA bundle in `namespace`, as Gardener's
    /// secrets manager keeps them (`setup::etcd_client_secrets`).
    pub async fn etcd_client_secrets(
        &self,
        namespace: &str,
        client_secret: &str,
        ca: &str,
        cert: &str,
        key: &str,
    ) {
        setup::etcd_client_secrets(&self.admin, namespace, client_secret, (ca, cert, key))
            .await
            .unwrap_or_else(|e| panic!("the etcd client Secrets: {e}"));
    }

    /// What gardenlet does with the `EtcdMigration`: grants the controller access in the
    /// migration's namespace, naming the etcd client Secrets of `isthmus_testkit::etcd_spec`.
    pub async fn grant(&self, spec: &EtcdMigrationSpec, namespace: &str) {
        let secrets = crate::gardenlet::client_secrets(
            &isthmus_testkit::etcd_spec(&spec.etcd_name),
            namespace,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        self.grant_secrets(spec, namespace, &secrets).await;
    }

    /// [`Self::grant`] naming `secrets` (after a rotation: the new names).
    pub async fn grant_secrets(
        &self,
        spec: &EtcdMigrationSpec,
        namespace: &str,
        secrets: &[String],
    ) {
        crate::gardenlet::grant(&self.admin, spec, namespace, secrets)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }

    /// Starts the DNS provider stand-in for `namespace`.
    pub fn dns_provider(&mut self, namespace: &str) {
        self.dns
            .push(DnsProviderTask::spawn(self.admin.clone(), namespace));
    }

    /// Starts one controller replica (`identity`) as the ServiceAccount of `deploy/`, with a
    /// short lease; returns its task and its leader gauge.
    pub async fn controller(
        &self,
        identity: &str,
        connect_to: BTreeMap<String, SocketAddr>,
    ) -> (JoinHandle<()>, Gauge) {
        self.controller_with(identity, connect_to, |ctx| ctx).await
    }

    /// [`Self::controller`] with `configure` applied to its context (the chart's flags that
    /// turn on the tunnel servers, `--tunnel-*`, and the on-demand load balancer,
    /// `--proxy-service-template`).
    pub async fn controller_with(
        &self,
        identity: &str,
        connect_to: BTreeMap<String, SocketAddr>,
        configure: impl FnOnce(Context) -> Context,
    ) -> (JoinHandle<()>, Gauge) {
        let client = self.api.service_account(SYSTEM, "isthmus-controller").await;
        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = Metrics::new(&mut registry);
        let gauge = metrics.leader.clone();
        let settings = Settings {
            proxy_namespace: SYSTEM.into(),
            proxy_namespace_labels: isthmus_controller::network::namespace_name_labels(SYSTEM),
            shoot_alias: "all-shoots".into(),
            proxy_configmap: ROUTES.into(),
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
        let g = gauge.clone();
        let task = tokio::spawn(async move {
            if let Err(e) = run_as_leader(&lock, &g, kube_adapter::run(ctx)).await {
                eprintln!("controller ended: {e}");
            }
        });
        (task, gauge)
    }
}
