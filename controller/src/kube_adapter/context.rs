//! What every reconciliation shares: the client, settings, metrics, the hash fetcher, a clock,
//! and per-object failure counts for exponential backoff.

use super::metrics::Metrics;
use super::probe::HashFetcher;
use crate::proxy_config::Layout;
use crate::tunnel_server::TunnelServers;
use kube::runtime::events::{Recorder, Reporter};
use kube::Client;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Field manager of every server-side apply.
pub const FIELD_MANAGER: &str = "isthmus";
/// Finalizer on every `EtcdMigration`: removes what the controller created.
pub const FINALIZER: &str = "isthmus.dev/cleanup";

/// Where the shared proxy lives on this seed.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Namespace of the proxy DaemonSet and its ConfigMap.
    pub proxy_namespace: String,
    /// Labels of that namespace: the shoot namespaces' `isthmus-etcd` Services admit the
    /// namespaces carrying them (`crate::network`; under gardenlet its registration label,
    /// since the namespace's name changes with every install).
    pub proxy_namespace_labels: std::collections::BTreeMap<String, String>,
    /// gardener-resource-manager's alias of shoot namespaces in the proxy pods' egress labels
    /// (`all-shoots`).
    pub shoot_alias: String,
    /// Name of the route ConfigMap.
    pub proxy_configmap: String,
    /// Label selector of the proxy pods (`app.kubernetes.io/name=isthmus-proxy`).
    pub proxy_selector: String,
    /// Admin port of the proxy pods.
    pub proxy_admin_port: u16,
    /// Fixed listeners and admin address of the rendered config.
    pub layout: Layout,
    /// The cluster's DNS domain: a `vpn.target` is `<service>.<namespace>.svc.<domain>:<port>`.
    pub cluster_domain: String,
    /// Domains a `vpn.dnsName` may be under besides the spec's `internalDomain`.
    pub vpn_dns_parents: Vec<String>,
    /// Watch only this namespace (`None`: all).
    pub namespace: Option<String>,
    /// Requeue interval while a step is not ready.
    pub poll: Duration,
    /// Requeue interval once a step is ready (drift check).
    pub resync: Duration,
    /// Requeue interval while a written route file is not served by every proxy pod yet:
    /// the pods get it within about a second when nudged, and each step that changes routes
    /// waits for it.
    pub rollout_poll: Duration,
    /// Nudge kubelet to deliver a new route file to a proxy pod at once (`nudge`), instead
    /// of at its periodic sync (about a minute).
    pub nudge_proxy_pods: bool,
    /// `host:port` → address to dial for etcd's exposed client URLs instead of resolving
    /// them (curl's `--connect-to`); empty in a cluster.
    pub etcd_connect_to: std::collections::BTreeMap<String, std::net::SocketAddr>,
}

impl Settings {
    /// What a spec is checked against beyond itself (`plan::validate`).
    pub fn rules(&self) -> crate::plan::SeedRules {
        crate::plan::SeedRules {
            cluster_domain: self.cluster_domain.clone(),
            vpn_dns_parents: self.vpn_dns_parents.clone(),
            ..self.layout.rules()
        }
    }
}

/// The clock, injected so tests get fixed timestamps.
pub type Clock = Arc<dyn Fn() -> String + Send + Sync>;

/// Shared by every reconciliation.
pub struct Context {
    /// API client.
    pub client: Client,
    /// Settings.
    pub settings: Settings,
    /// Metrics.
    pub metrics: Metrics,
    /// Reads proxy `/config` hashes.
    pub fetcher: Arc<dyn HashFetcher>,
    /// Current time as RFC 3339.
    pub now: Clock,
    /// Consecutive failures per `namespace/name`, for backoff.
    pub failures: Mutex<HashMap<String, u32>>,
    /// Publishes Kubernetes Events about the migrations (a refused spec).
    pub recorder: Recorder,
    /// The tunnel servers this controller runs for migrations that ask for one
    /// (`--tunnel-image`, `crate::tunnel_server`); `None`: it runs none.
    pub tunnel_servers: Option<TunnelServers>,
    /// The ConfigMap (in the proxies' namespace) holding the proxies' LoadBalancer Service
    /// that the controller makes on demand (`--proxy-service-template`,
    /// `crate::load_balancer`); `None`: the Service is the chart's, always there.
    pub on_demand_lb: Option<String>,
    /// What isthmus last applied to each `Etcd` (`EtcdSpecOverwritten` rests on it).
    pub etcd_applied: super::applied::AppliedEtcds,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Context {
    /// A context with the wall clock.
    pub fn new(
        client: Client,
        settings: Settings,
        metrics: Metrics,
        fetcher: Arc<dyn HashFetcher>,
    ) -> Self {
        // The instance is the host name: the pod's name in a cluster.
        let recorder = Recorder::new(client.clone(), Reporter::from("isthmus-controller"));
        Self {
            recorder,
            client,
            settings,
            metrics,
            fetcher,
            now: Arc::new(|| {
                k8s_openapi::jiff::Timestamp::now()
                    .round(k8s_openapi::jiff::Unit::Second)
                    .map(|t| t.to_string())
                    .unwrap_or_default()
            }),
            failures: Mutex::new(HashMap::new()),
            tunnel_servers: None,
            on_demand_lb: None,
            etcd_applied: Default::default(),
        }
    }

    /// This context running the tunnel servers of migrations that ask for one.
    pub fn with_tunnel_servers(mut self, servers: TunnelServers) -> Self {
        self.tunnel_servers = Some(servers);
        self
    }

    /// This context making the proxies' LoadBalancer Service from the template in the
    /// ConfigMap `configmap` of the proxies' namespace while a migration needs it.
    pub fn with_on_demand_load_balancer(mut self, configmap: impl Into<String>) -> Self {
        self.on_demand_lb = Some(configmap.into());
        self
    }

    /// What a spec is checked against: the settings' rules and the tunnel servers.
    pub fn rules(&self) -> crate::plan::SeedRules {
        crate::plan::SeedRules {
            tunnel_servers: self
                .tunnel_servers
                .as_ref()
                .map(|t| t.trusted_proxies.clone()),
            ..self.settings.rules()
        }
    }

    /// Records a failure of `key` and returns how long to wait: 1 s, doubling, at most 5 min.
    pub fn backoff(&self, key: &str) -> Duration {
        let mut map = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let n = map.entry(key.to_string()).or_insert(0);
        *n = n.saturating_add(1);
        Duration::from_secs(1u64 << (*n - 1).min(8)).min(Duration::from_secs(300))
    }

    /// Forgets the failures of `key` after a success.
    pub fn succeeded(&self, key: &str) {
        self.failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
    }
}
