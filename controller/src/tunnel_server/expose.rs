//! The server's Services — gardener-resource-manager makes the NetworkPolicies from them
//! (Gardener's docs/operations/network_policies.md; seeds are deny-all in shoot namespaces)
//! — and the shoot Prometheus' `ServiceMonitor`.
//!
//! Two Services, so that the one another namespace may reach carries one port:
//! - `isthmus-tunnel-server`: the agents' port, admitted from the proxies' namespace for the
//!   pods labelled `to-<alias>-isthmus-tunnel-server-tcp-9443` (the proxy pods), like
//!   `vpn-seed-server`'s Service admits the istio ingress gateways;
//! - `isthmus-tunnel-connect`: the CONNECT front, whose policies are the controller's own
//!   (`super::policy`: the kube-apiserver only), and the metrics port for the shoot's
//!   Prometheus (`to-all-scrape-targets`).

use super::{selector, Proxies, ADMIN_PORT, AGENTS_PORT, CONNECT_PORT};
use crate::network::{NAMESPACE_ALIAS, NAMESPACE_SELECTORS};
use serde_json::{json, Value};

/// gardener-resource-manager: the shoot namespace's Prometheus may scrape these ports.
const FROM_SCRAPERS: &str =
    "networking.resources.gardener.cloud/from-all-scrape-targets-allowed-ports";

fn port(name: &str, port: u16) -> Value {
    json!({"name": name, "port": port, "targetPort": port, "protocol": "TCP"})
}

fn allowed(port: u16) -> String {
    json!([{"port": port, "protocol": "TCP"}]).to_string()
}

/// The agents' Service: the target of the proxies' VPN route.
pub(super) fn agents_service(mut meta: Value, proxies: &Proxies<'_>) -> Value {
    let peers = json!([{"matchLabels": proxies.namespace_labels}]);
    meta["annotations"] = json!({
        NAMESPACE_SELECTORS: peers.to_string(),
        NAMESPACE_ALIAS: proxies.alias,
    });
    json!({
        "apiVersion": "v1", "kind": "Service", "metadata": meta,
        "spec": {"type": "ClusterIP", "selector": selector(),
                 "ports": [port("agents", AGENTS_PORT)]},
    })
}

/// The CONNECT front's and metrics' Service, reached from this namespace only: the shoot's
/// Prometheus through the resource manager, the kube-apiserver through `super::policy`.
pub(super) fn connect_service(mut meta: Value) -> Value {
    meta["labels"]["app.kubernetes.io/component"] = json!("connect");
    meta["annotations"] = json!({FROM_SCRAPERS: allowed(ADMIN_PORT)});
    json!({
        "apiVersion": "v1", "kind": "Service", "metadata": meta,
        "spec": {"type": "ClusterIP", "selector": selector(),
                 "ports": [port("connect", CONNECT_PORT), port("metrics", ADMIN_PORT)]},
    })
}

/// The server's series the shoot Prometheus keeps (Gardener's control-plane components
/// list theirs: `monitoringutils.StandardMetricRelabelConfig`).
const KEPT: [&str; 10] = [
    "isthmus_tunnel_sessions",
    "isthmus_tunnel_streams_in_flight",
    "isthmus_tunnel_connects_total",
    "isthmus_tunnel_handshakes_total",
    "isthmus_tunnel_bytes_total",
    "isthmus_tunnel_ping_rtt_seconds_bucket",
    "isthmus_tunnel_ping_rtt_seconds_sum",
    "isthmus_tunnel_ping_rtt_seconds_count",
    "isthmus_tunnel_refused_total",
    "isthmus_tunnel_tls_reloads_total",
];

/// Labelled `prometheus: shoot`, which the shoot Prometheus' `serviceMonitorSelector`
/// matches in its namespace (gardener v1.149.3
/// `pkg/component/observability/monitoring/prometheus/prometheus.go`), shaped like the
/// control-plane components' (`pkg/component/kubernetes/scheduler/scheduler.go`): the
/// Service's labels as target labels, only the listed series kept; job
/// `isthmus-tunnel-server`.
pub(super) fn service_monitor(mut meta: Value) -> Value {
    meta["labels"]["prometheus"] = json!("shoot");
    let mut select = selector();
    select["app.kubernetes.io/component"] = json!("connect");
    json!({
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": meta,
        "spec": {
            "selector": {"matchLabels": select},
            "endpoints": [{
                "port": "metrics",
                "path": "/metrics",
                "relabelings": [
                    {"action": "labelmap", "regex": "__meta_kubernetes_service_label_(.+)"},
                    {"action": "replace", "targetLabel": "job",
                     "replacement": "isthmus-tunnel-server"},
                ],
                "metricRelabelings": [{
                    "sourceLabels": ["__name__"],
                    "action": "keep",
                    "regex": format!("^({})$", KEPT.join("|")),
                }],
            }],
        },
    })
}
