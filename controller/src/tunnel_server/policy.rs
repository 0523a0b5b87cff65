//! The CONNECT front's own NetworkPolicies: this namespace's kube-apiserver (Gardener labels
//! it `app: kubernetes, role: apiserver`) in to the front, and out to it (a seed's shoot
//! namespaces deny both ways by default). Not gardener-resource-manager's
//! `from-all-webhook-targets-allowed-ports`: its policies admit every pod labelled
//! `to-all-webhook-targets`, any webhook caller of the namespace, not only the one client
//! whose requests the front carries into the shoot's networks (issue 47 point 7; the chart
//! rendered these two policies while it listed the servers).

use super::CONNECT_PORT;
use serde_json::{json, Value};

/// Ingress to the front from the kube-apiserver only.
pub const INGRESS: &str = "isthmus-tunnel-server-connect";
/// The kube-apiserver's egress to the front.
pub const EGRESS: &str = "isthmus-kube-apiserver-to-tunnel-server";

/// The pods of this namespace's kube-apiserver.
fn kube_apiserver() -> Value {
    json!({"matchLabels": {"app": "kubernetes", "role": "apiserver"}})
}

fn connect_port() -> Value {
    json!([{"port": CONNECT_PORT, "protocol": "TCP"}])
}

/// Both policies; `meta(name)` gives each its metadata.
pub(super) fn policies(meta: impl Fn(&str) -> Value, server: Value) -> [Value; 2] {
    let server = json!({"matchLabels": server});
    [
        json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": meta(INGRESS),
            "spec": {
                "podSelector": server, "policyTypes": ["Ingress"],
                "ingress": [{"from": [{"podSelector": kube_apiserver()}],
                             "ports": connect_port()}],
            },
        }),
        json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": meta(EGRESS),
            "spec": {
                "podSelector": kube_apiserver(), "policyTypes": ["Egress"],
                "egress": [{"to": [{"podSelector": server}], "ports": connect_port()}],
            },
        }),
    ]
}
