//! The server's Deployment and PodDisruptionBudget.
//!
//! One replica: agents reach the server through one Service, so a second replica would hold
//! no agent session for the CONNECTs kube-apiserver sends it. A rollout starts the new pod
//! before the old one drains (`maxUnavailable: 0`); a restart is the agents' make-before-break
//! (tunnel/README.md). Probes are `/healthz` on the admin port, never `/readyz` (ready only
//! with an agent session: the agents reach the pod through its Service, which lists only
//! ready pods, so it would never become ready).

use super::config::{AGENTS_TLS, CONFIG_KEY, CONNECT_TLS};
use super::{selector, TunnelServers, ADMIN_PORT, AGENTS_PORT, CONNECT_PORT};
use crate::crd::{TunnelEndpoint, TunnelServerSpec};
use serde_json::{json, Value};

/// The server's `drain_timeout` (its default): open streams get this long after SIGTERM.
const DRAIN_TIMEOUT_SECS: u32 = 30;

/// The Deployment running the configuration `config`.
pub(super) fn deployment(
    meta: Value,
    server: &TunnelServerSpec,
    config: &str,
    s: &TunnelServers,
) -> Value {
    let pod_meta = json!({
        "labels": meta["labels"].clone(),
        // The server reads its file once: a new configuration rolls it (new certificates
        // under the same Secret names are reloaded in place).
        "annotations": {"checksum/config": isthmus_config::hash_bytes(config.as_bytes())},
    });
    // Slow is not dead on a busy seed (docs/probes.md): 5 s per probe; a restart drops every
    // agent session and CONNECT, so 5 misses first, as gardener-resource-manager's liveness.
    let probe = |period: u32, misses: u32| {
        json!({"httpGet": {"path": "/healthz", "port": "metrics"}, "periodSeconds": period,
               "timeoutSeconds": 5, "failureThreshold": misses})
    };
    let mut spec = json!({
        "automountServiceAccountToken": false,
        "enableServiceLinks": false,
        // Longer than the drain, which the admin endpoint outlives (tests/tunnel_probes.rs).
        "terminationGracePeriodSeconds": DRAIN_TIMEOUT_SECS + 10,
        "securityContext": {
            "runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [{
            "name": "tunnel-server",
            "image": s.image,
            "imagePullPolicy": "IfNotPresent",
            "args": ["tunnel-server", "--config", format!("/etc/isthmus/config/{CONFIG_KEY}"),
                     "--log-format", "json"],
            "ports": [
                {"name": "agents", "containerPort": AGENTS_PORT, "protocol": "TCP"},
                {"name": "connect", "containerPort": CONNECT_PORT, "protocol": "TCP"},
                {"name": "metrics", "containerPort": ADMIN_PORT, "protocol": "TCP"},
            ],
            "livenessProbe": probe(10, 5),
            "readinessProbe": probe(5, 3),
            // Requests only: a data path must not be OOM-killed at a guessed limit.
            "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
            "securityContext": {
                "allowPrivilegeEscalation": false, "privileged": false,
                "readOnlyRootFilesystem": true, "capabilities": {"drop": ["ALL"]},
            },
            "volumeMounts": [
                {"name": "config", "mountPath": "/etc/isthmus/config", "readOnly": true},
                {"name": "agents-tls", "mountPath": AGENTS_TLS, "readOnly": true},
                {"name": "connect-tls", "mountPath": CONNECT_TLS, "readOnly": true},
            ],
        }],
        "volumes": [
            {"name": "config", "configMap": {"name": meta["name"].clone()}},
            {"name": "agents-tls", "projected": tls(&server.agents)},
            {"name": "connect-tls", "projected": tls(&server.connect)},
        ],
    });
    if !s.priority_class.is_empty() {
        spec["priorityClassName"] = json!(s.priority_class);
    }
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {
            "replicas": 1,
            "revisionHistoryLimit": 2,
            "selector": {"matchLabels": selector()},
            "strategy": {"type": "RollingUpdate",
                         "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {"metadata": pod_meta, "spec": spec},
        },
    })
}

/// The endpoint's certificate and key, and its clients' CA as `ca.crt` (a projected volume:
/// the kubelet follows a rotation in place, which the server's file watch picks up).
fn tls(e: &TunnelEndpoint) -> Value {
    json!({"sources": [
        {"secret": {"name": e.tls_secret, "items": [
            {"key": "tls.crt", "path": "tls.crt"}, {"key": "tls.key", "path": "tls.key"}]}},
        {"secret": {"name": e.client_ca.secret, "items": [
            {"key": e.client_ca.key, "path": "ca.crt"}]}},
    ]})
}

/// A budget that lets a node drain evict the one replica (`minAvailable: 1` would block
/// every drain), and evicts an unhealthy pod whatever the budget.
pub(super) fn pdb(meta: Value) -> Value {
    json!({
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": meta,
        "spec": {
            "maxUnavailable": 1,
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
            "selector": {"matchLabels": selector()},
        },
    })
}
