//! The server's own NetworkPolicies. The CONNECT front's: this namespace's kube-apiserver
//! (Gardener labels it `app: kubernetes, role: apiserver`) in to the front, and, where the
//! namespace denies egress by default (a seed's shoot namespaces deny both ways), out to it.
//! Only there: in a namespace without a default-deny egress policy it would be the first
//! egress policy selecting the kube-apiserver pods, and so their only way out. Not gardener-resource-manager's
//! `from-all-webhook-targets-allowed-ports`: its policies admit every pod labelled
//! `to-all-webhook-targets`, any webhook caller of the namespace, not only the one client
//! whose requests the front carries into the shoot's networks (issue 47 point 7; the chart
//! rendered these two policies while it listed the servers).
//!
//! And the agents' port from the proxies: the very policy gardener-resource-manager makes
//! from the agents' Service (`super::expose`), written here too because the front's ingress
//! policy selects the server's pods, and a cluster without the resource manager (the chart's
//! plain path, `networkPolicy.explicit`) would then refuse every proxy at the agents' port.

use super::{Proxies, AGENTS_PORT, CONNECT_PORT, NAME};
use serde_json::{json, Value};

/// Ingress to the front from the kube-apiserver only.
pub const INGRESS: &str = "isthmus-tunnel-server-connect";
/// The kube-apiserver's egress to the front.
pub const EGRESS: &str = "isthmus-kube-apiserver-to-tunnel-server";
/// Ingress to the agents' port from the proxy pods.
pub const AGENTS: &str = "isthmus-tunnel-server-agents";

/// The pods of this namespace's kube-apiserver.
fn kube_apiserver() -> Value {
    json!({"matchLabels": {"app": "kubernetes", "role": "apiserver"}})
}

fn tcp(port: u16) -> Value {
    json!([{"port": port, "protocol": "TCP"}])
}

/// The label the proxy pods carry for the agents' Service under the resource manager's
/// alias (`to-<alias>-<service>-tcp-<port>`, what its own ingress policy admits).
pub fn proxy_label(alias: &str) -> String {
    format!("networking.resources.gardener.cloud/to-{alias}-{NAME}-tcp-{AGENTS_PORT}")
}

/// The policies, the egress one only with `egress`; `meta(name)` gives each its metadata.
pub(super) fn policies(
    meta: impl Fn(&str) -> Value,
    server: Value,
    proxies: &Proxies<'_>,
    egress: bool,
) -> Vec<Value> {
    let server = json!({"matchLabels": server});
    let from_proxies = json!({
        "namespaceSelector": {"matchLabels": proxies.namespace_labels},
        "podSelector": {"matchLabels": {proxy_label(proxies.alias): "allowed"}},
    });
    let all = [
        json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": meta(INGRESS),
            "spec": {
                "podSelector": server, "policyTypes": ["Ingress"],
                "ingress": [{"from": [{"podSelector": kube_apiserver()}],
                             "ports": tcp(CONNECT_PORT)}],
            },
        }),
        json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": meta(EGRESS),
            "spec": {
                "podSelector": kube_apiserver(), "policyTypes": ["Egress"],
                "egress": [{"to": [{"podSelector": server}], "ports": tcp(CONNECT_PORT)}],
            },
        }),
        json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": meta(AGENTS),
            "spec": {
                "podSelector": server, "policyTypes": ["Ingress"],
                "ingress": [{"from": [from_proxies], "ports": tcp(AGENTS_PORT)}],
            },
        }),
    ];
    all.into_iter()
        .filter(|p| egress || p["metadata"]["name"] != EGRESS)
        .collect()
}
