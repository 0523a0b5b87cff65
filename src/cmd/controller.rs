//! `isthmus controller`: flags and wiring for the kube-rs controller in `isthmus-controller`.

use anyhow::Context as _;
use isthmus_controller::crd::PortScheme;
use isthmus_controller::kube_adapter::lease::{run_as_leader, LeaseLock};
use isthmus_controller::kube_adapter::probe::HttpFetcher;
use isthmus_controller::kube_adapter::{self, connect, serve_metrics, Context, Metrics, Settings};
use isthmus_controller::proxy_config::Layout;
use isthmus_controller::tunnel_server::TunnelServers;
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// Flags of `controller`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Kubeconfig file. Default: in-cluster config, else `$KUBECONFIG` / `~/.kube/config`.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Watch only this namespace (default: all namespaces; needs the ClusterRole).
    #[arg(long)]
    pub namespace: Option<String>,
    /// Name of the leader-election Lease.
    #[arg(long, default_value = "isthmus-controller")]
    pub lease_name: String,
    /// Namespace of the Lease (normally the controller's own, via the downward API).
    #[arg(long, env = "POD_NAMESPACE", default_value = "isthmus-system")]
    pub lease_namespace: String,
    /// This replica's identity in the Lease (the pod name).
    #[arg(long, env = "POD_NAME", default_value = "isthmus-controller")]
    pub identity: String,
    /// Lease duration; renewed every third of it.
    #[arg(long, default_value = "15", value_name = "SECONDS")]
    pub lease_seconds: u64,
    /// Address of `/metrics` and `/healthz` (port 0: any free port, logged as `metrics`).
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub metrics_address: SocketAddr,
    /// Namespace of the proxy DaemonSet and its route ConfigMap.
    #[arg(long, default_value = "isthmus-system")]
    pub proxy_namespace: String,
    /// Labels that select the proxy's namespace (`KEY=VALUE`, comma-separated or repeated):
    /// the `isthmus-etcd` Service the controller creates in each migrating shoot namespace
    /// admits that namespace's proxy pods by them. Under gardenlet its registration label
    /// (`controllerregistration.core.gardener.cloud/name=isthmus`): the `extension-…`
    /// namespace is renamed with every install. Default:
    /// `kubernetes.io/metadata.name=<--proxy-namespace>`.
    #[arg(long, value_delimiter = ',', value_name = "KEY=VALUE")]
    pub proxy_namespace_labels: Vec<String>,
    /// The wildcard every proxy listener and the admin port bind in the rendered file:
    /// `0.0.0.0`, or `::` on a seed with IPv6 (one dual-stack socket; IPv4 clients arrive as
    /// `::ffff:a.b.c.d` and match IPv4 allow-lists).
    #[arg(long, default_value = "0.0.0.0", value_name = "IP")]
    pub listen_address: IpAddr,
    /// gardener-resource-manager's alias of shoot namespaces: the `isthmus-etcd` Service the
    /// controller creates in each migrating shoot namespace carries it, and the proxy pods'
    /// egress labels name it (`to-<alias>-isthmus-etcd-tcp-2379`).
    #[arg(long, default_value = isthmus_controller::network::DEFAULT_SHOOT_ALIAS)]
    pub shoot_alias: String,
    /// Name of the proxy route ConfigMap.
    #[arg(long, default_value = "isthmus-proxy-routes")]
    pub proxy_configmap: String,
    /// Label selector of the proxy pods whose `/config` hash is checked.
    #[arg(long, default_value = "app.kubernetes.io/name=isthmus-proxy")]
    pub proxy_selector: String,
    /// Admin port of the proxy pods.
    #[arg(long, default_value = "9901")]
    pub proxy_admin_port: u16,
    /// Member indices the proxy always listens for (ports per the default scheme).
    #[arg(long, default_value = "3")]
    pub members: u8,
    /// Proxy port of the temporary VPN.
    #[arg(long, default_value = "8443")]
    pub vpn_port: u16,
    /// Addresses (CIDRs) of the load balancer when it sends PROXY protocol headers: the
    /// rendered listeners then honour a header from these peers only, so list the load
    /// balancer's own ranges (`0.0.0.0/0` and `::/0` are refused). Comma-separated or
    /// repeated. Default: none (no PROXY protocol).
    #[arg(long, value_delimiter = ',', value_name = "CIDR")]
    pub trusted_proxies: Vec<String>,
    /// The seed-wide default of a migration without `spec.allowedSources`: the sources
    /// (CIDRs) its etcd members admit through the proxy. Default: none (deny unless listed),
    /// so such a migration's members are reachable by nobody and it reports
    /// `ExposureRestricted` reason `NoSourceAllowed`. `0.0.0.0/0,::/0` opens them to anyone.
    #[arg(long, value_delimiter = ',', value_name = "CIDR")]
    pub default_allowed_sources: Vec<String>,
    /// The cluster's DNS domain: an `EtcdMigration`'s `spec.vpn.target` must be exactly
    /// `<service>.<its namespace>.svc.<domain>:<port>`.
    #[arg(long, default_value = isthmus_controller::plan::validate::DEFAULT_CLUSTER_DOMAIN)]
    pub cluster_domain: String,
    /// Domains an `EtcdMigration`'s `spec.vpn.dnsName` may be under besides its
    /// `spec.internalDomain` (the seed's). Comma-separated or repeated. Default: none.
    #[arg(long, value_delimiter = ',', value_name = "DOMAIN")]
    pub vpn_dns_parent: Vec<String>,
    /// The image of the temporary VPN's tunnel servers this controller runs for the
    /// destination migrations that ask for one (`spec.vpn.server`): its own (the chart
    /// passes it). Unset: it runs none and refuses such a migration (`SpecInvalid`, reason
    /// `TunnelServersDisabled`), as in the lab, whose tunnel servers are processes.
    #[arg(long, env = "ISTHMUS_TUNNEL_IMAGE", value_name = "IMAGE")]
    pub tunnel_image: Option<String>,
    /// The tunnel servers' `agents.trusted_proxies`: where the seed's proxies dial them from
    /// (the seed's pod network), whose PROXY v2 header names each agent. Without it a
    /// migration whose VPN route sends the header (`spec.vpn.proxyProtocol: v2`, the
    /// default) is refused. Comma-separated or repeated; a catch-all is refused.
    #[arg(long, value_delimiter = ',', value_name = "CIDR")]
    pub tunnel_trusted_proxies: Vec<String>,
    /// PriorityClass of the tunnel servers' pods (Gardener's class of per-shoot control-plane
    /// parts); empty: none.
    #[arg(long, default_value = isthmus_controller::tunnel_server::DEFAULT_PRIORITY_CLASS)]
    pub tunnel_priority_class: String,
    /// Create the shoot Prometheus' `ServiceMonitor` for each tunnel server (the
    /// prometheus-operator's CRD must exist, as in a Gardener seed).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub tunnel_service_monitor: bool,
    /// Write the NetworkPolicy `isthmus-kube-apiserver-to-tunnel-server` with each tunnel
    /// server: the shoot's kube-apiserver pods' egress to its CONNECT front. Set it only where
    /// the shoot namespaces deny egress by default (a Gardener seed; the chart sets it unless
    /// `networkPolicy.explicit`): elsewhere it would be the first egress policy selecting
    /// those pods and cut every other way out of them. When false, one written earlier is
    /// deleted.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub tunnel_kube_apiserver_egress_policy: bool,
    /// Make the proxies' LoadBalancer Service only while a migration needs it, from the
    /// template (key `service.yaml`) in this ConfigMap of `--proxy-namespace`; deleted once
    /// no migration needs it. Unset: the Service is always there (the chart's).
    #[arg(long, value_name = "CONFIGMAP")]
    pub proxy_service_template: Option<String>,
    /// Patch an annotation (`isthmus.dev/routes`) onto each proxy pod that does not serve a
    /// new route file yet, so that kubelet delivers the file within about a second instead
    /// of at its periodic sync (about a minute). Needs `patch` on pods in the proxy namespace
    /// (the chart grants it, narrowed to that annotation on the proxy pods by an admission
    /// policy). `false`: wait for kubelet's sync.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub nudge_proxy_pods: bool,
    /// Print the EtcdMigration CRD (YAML) and exit.
    #[arg(long)]
    pub print_crd: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.print_crd {
        print!("{}", isthmus_controller::crd::crd_yaml()?);
        return Ok(ExitCode::SUCCESS);
    }
    let rt = tokio::runtime::Runtime::new().context("starting the tokio runtime")?;
    rt.block_on(serve(args))?;
    Ok(ExitCode::SUCCESS)
}

async fn serve(args: Args) -> anyhow::Result<()> {
    // Rendered into every file: a bad one would fail every reconcile, so it fails the start.
    for (flag, list) in [
        ("--trusted-proxies", &args.trusted_proxies),
        ("--default-allowed-sources", &args.default_allowed_sources),
        ("--tunnel-trusted-proxies", &args.tunnel_trusted_proxies),
    ] {
        for c in list {
            isthmus_config::Cidr::parse(c).map_err(|e| anyhow::anyhow!("{flag}: {e}"))?;
        }
    }
    // A PROXY header names any client it likes: only the load balancer's own ranges may send
    // one, never every address (nor, in the chart, the seed's whole node network).
    let everything = |c: &&String| isthmus_config::Cidr::parse(c).is_ok_and(|c| c.is_everything());
    if let Some(all) = args.trusted_proxies.iter().find(everything) {
        anyhow::bail!(
            "--trusted-proxies: {all} trusts every address to name any client; list the load balancer's own address ranges"
        );
    }
    if let Some(all) = args.tunnel_trusted_proxies.iter().find(everything) {
        anyhow::bail!(
            "--tunnel-trusted-proxies: {all} trusts every address to name any agent; list where the proxies dial from (the seed's pod network)"
        );
    }
    // The controller reads each pod's /config at the pod's own IP: a wildcard only.
    if !args.listen_address.is_unspecified() {
        anyhow::bail!(
            "--listen-address: {} is not a wildcard; want 0.0.0.0 or ::",
            args.listen_address
        );
    }
    let proxy_namespace_labels = namespace_labels(&args.proxy_namespace_labels)
        .context("--proxy-namespace-labels")?
        .unwrap_or_else(|| {
            isthmus_controller::network::namespace_name_labels(&args.proxy_namespace)
        });
    let admin = SocketAddr::new(args.listen_address, args.proxy_admin_port);
    let mut layout = Layout::standard(PortScheme::default(), args.members, args.vpn_port, admin);
    layout.trusted_proxies = args.trusted_proxies;
    layout.default_allowed_sources = args.default_allowed_sources;
    // `--vpn-port` on a member listener or the admin port would fail every file.
    layout
        .check()
        .context("--members, --vpn-port and --proxy-admin-port")?;
    let client = connect(args.kubeconfig.as_deref()).await?;
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = Metrics::new(&mut registry);
    let leader = metrics.leader.clone();
    let listener = tokio::net::TcpListener::bind(args.metrics_address)
        .await
        .with_context(|| format!("binding {}", args.metrics_address))?;
    // The bound address, not the flag's: with port 0 this is how a caller finds it.
    tracing::info!(metrics = %listener.local_addr()?, "serving /metrics and /healthz");
    tokio::spawn(serve_metrics(listener, Arc::new(registry)));

    let settings = Settings {
        layout,
        cluster_domain: args.cluster_domain,
        vpn_dns_parents: args.vpn_dns_parent,
        proxy_namespace: args.proxy_namespace,
        proxy_namespace_labels,
        shoot_alias: args.shoot_alias,
        proxy_configmap: args.proxy_configmap,
        proxy_selector: args.proxy_selector,
        proxy_admin_port: args.proxy_admin_port,
        namespace: args.namespace,
        poll: Duration::from_secs(5),
        resync: Duration::from_secs(300),
        rollout_poll: Duration::from_secs(1),
        nudge_proxy_pods: args.nudge_proxy_pods,
        etcd_connect_to: Default::default(),
    };
    let fetcher = Arc::new(HttpFetcher::new(Duration::from_secs(3)));
    let mut ctx = Context::new(client.clone(), settings, metrics, fetcher);
    if let Some(image) = args.tunnel_image.filter(|i| !i.is_empty()) {
        ctx = ctx.with_tunnel_servers(TunnelServers {
            image,
            trusted_proxies: args.tunnel_trusted_proxies,
            priority_class: args.tunnel_priority_class,
            service_monitor: args.tunnel_service_monitor,
            listen: args.listen_address,
            kube_apiserver_egress: args.tunnel_kube_apiserver_egress_policy,
        });
    }
    if let Some(template) = args.proxy_service_template {
        ctx = ctx.with_on_demand_load_balancer(template);
    }
    let ctx = Arc::new(ctx);
    let leases = kube::Api::namespaced(client, &args.lease_namespace);
    let lock = LeaseLock::new(
        leases,
        &args.lease_name,
        &args.identity,
        Duration::from_secs(args.lease_seconds.max(3)),
    );
    run_as_leader(&lock, &leader, kube_adapter::run(ctx)).await?;
    Ok(())
}

/// `KEY=VALUE` pairs as labels; `None` when there are none.
fn namespace_labels(pairs: &[String]) -> anyhow::Result<Option<BTreeMap<String, String>>> {
    let mut labels = BTreeMap::new();
    for p in pairs {
        match p.split_once('=') {
            Some((k, v)) if !k.is_empty() => {
                labels.insert(k.to_string(), v.to_string());
            }
            _ => anyhow::bail!("{p:?}: want KEY=VALUE"),
        }
    }
    Ok((!labels.is_empty()).then_some(labels))
}
