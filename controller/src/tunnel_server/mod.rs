//! The temporary VPN's tunnel server of one destination migration, as the objects the
//! controller applies in the shoot's namespace — what gardenlet does for `vpn-seed-server`
//! (gardener v1.149.3 `pkg/component/networking/vpn/seedserver/seedserver.go`): a
//! Deployment (priority `gardener-system-300`, `gardener.cloud/role: controlplane`), its
//! configuration, the Services from which gardener-resource-manager makes its
//! NetworkPolicies, a PodDisruptionBudget that never blocks a drain, and the `ServiceMonitor`
//! the shoot's Prometheus picks up. Every object is owned by the `EtcdMigration`.
//!
//! Pure: bodies from `(spec, namespace, owner, settings)`; the adapter applies and deletes
//! them. It must never name a Secret the spec does not name (the kubelet mounts them; the
//! controller never reads one) and never render a configuration the server's own loader
//! refuses.

mod config;
mod expose;
mod policy;
mod workload;

pub use config::{server_yaml, CONFIG_KEY};
pub use policy::{
    proxy_label, AGENTS as AGENTS_POLICY, EGRESS as CONNECT_EGRESS_POLICY,
    INGRESS as CONNECT_INGRESS_POLICY,
};

use crate::crd::EtcdMigrationSpec;
use crate::gardener::MIGRATION_LABEL;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::net::IpAddr;

/// Name of the Deployment, its ConfigMap and PDB, and of the agents' Service (the proxies'
/// VPN route leads there: `spec.vpn.target` is `isthmus-tunnel-server.<ns>.svc.<domain>:9443`).
pub const NAME: &str = "isthmus-tunnel-server";
/// The Service of the CONNECT front (kube-apiserver's egress) and the metrics port.
pub const CONNECT_SERVICE: &str = "isthmus-tunnel-connect";
/// The shoot Prometheus' `ServiceMonitor` (Gardener's `shoot-<component>` naming).
pub const SERVICE_MONITOR: &str = "shoot-isthmus-tunnel-server";
/// The agents' port (what the proxies dial).
pub const AGENTS_PORT: u16 = 9443;
/// The CONNECT front's port.
pub const CONNECT_PORT: u16 = 8132;
/// The admin port: `/metrics`, and `/healthz` for the kubelet's probes.
pub const ADMIN_PORT: u16 = 9902;
/// Gardener's priority class of per-shoot control-plane parts (at `-critical` they would
/// outrank the shoot's own etcd).
pub const DEFAULT_PRIORITY_CLASS: &str = "gardener-system-300";

/// What the seed's controller brings to every tunnel server (its flags).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TunnelServers {
    /// The container image: the controller's own (`--tunnel-image`).
    pub image: String,
    /// `agents.trusted_proxies`: where the seed's proxies dial from, whose PROXY v2 header
    /// names each agent (`--tunnel-trusted-proxies`, the seed's pod network).
    pub trusted_proxies: Vec<String>,
    /// The pods' PriorityClass; empty: none (a cluster without Gardener's classes).
    pub priority_class: String,
    /// Whether to create the shoot Prometheus' `ServiceMonitor` (its CRD is a seed's).
    pub service_monitor: bool,
    /// The wildcard every listener binds (the controller's `--listen-address`): `::` on a
    /// dual-stack or IPv6 seed, else `0.0.0.0`.
    pub listen: IpAddr,
    /// Whether to write the kube-apiserver's egress policy to the CONNECT front
    /// ([`CONNECT_EGRESS_POLICY`], `--tunnel-kube-apiserver-egress-policy`): only where the
    /// shoot namespaces deny egress by default (a Gardener seed). Elsewhere it would be the
    /// kube-apiserver pods' only egress policy, and so cut every other way out of them.
    pub kube_apiserver_egress: bool,
}

/// The `EtcdMigration` that owns the objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// Its name.
    pub name: String,
    /// Its `metadata.uid`.
    pub uid: String,
}

/// Where the proxies run: the agents' Service admits their namespace's pods that carry the
/// alias' label (`to-<alias>-isthmus-tunnel-server-tcp-9443`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proxies<'a> {
    /// The labels that select the proxies' namespace (`--proxy-namespace-labels`: under
    /// gardenlet its registration label, since `extension-<installation>` is renamed with
    /// every install; else its name, `network::namespace_name_labels`).
    pub namespace_labels: &'a BTreeMap<String, String>,
    /// gardener-resource-manager's alias of shoot namespaces (`all-shoots`).
    pub alias: &'a str,
}

/// The server's configuration was refused by its own loader (a bad name, say).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the tunnel server's configuration is refused: {0}")]
pub struct ConfigError(pub String);

/// `(apiVersion, kind, name)` of every object the controller may make, in the order they are
/// applied (a server without one of them, the egress policy or the `ServiceMonitor`, skips
/// it); deleted in reverse.
pub fn kinds(service_monitor: bool) -> Vec<(&'static str, &'static str, &'static str)> {
    let mut out = vec![
        ("v1", "ConfigMap", NAME),
        ("v1", "Service", NAME),
        ("v1", "Service", CONNECT_SERVICE),
        (
            "networking.k8s.io/v1",
            "NetworkPolicy",
            CONNECT_INGRESS_POLICY,
        ),
        (
            "networking.k8s.io/v1",
            "NetworkPolicy",
            CONNECT_EGRESS_POLICY,
        ),
        ("networking.k8s.io/v1", "NetworkPolicy", AGENTS_POLICY),
        ("policy/v1", "PodDisruptionBudget", NAME),
        ("apps/v1", "Deployment", NAME),
    ];
    if service_monitor {
        out.push((
            "monitoring.coreos.com/v1",
            "ServiceMonitor",
            SERVICE_MONITOR,
        ));
    }
    out
}

/// The server-side-apply bodies of `spec`'s tunnel server in `namespace`, in [`kinds`]'
/// order (without the egress policy unless `settings.kube_apiserver_egress`); empty when the
/// spec asks for none.
pub fn objects(
    spec: &EtcdMigrationSpec,
    namespace: &str,
    owner: &Owner,
    proxies: &Proxies<'_>,
    settings: &TunnelServers,
) -> Result<Vec<Value>, ConfigError> {
    let Some(server) = spec.vpn.as_ref().and_then(|v| v.server.as_ref()) else {
        return Ok(Vec::new());
    };
    let config = server_yaml(server, &settings.trusted_proxies, settings.listen)?;
    let meta = |name: &str| {
        json!({
            "name": name, "namespace": namespace, "labels": labels(&owner.name),
            "ownerReferences": [{
                "apiVersion": "isthmus.dev/v1alpha1", "kind": "EtcdMigration",
                "name": owner.name, "uid": owner.uid, "controller": true,
            }],
        })
    };
    let mut out = vec![
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(NAME),
               "data": {CONFIG_KEY: config}}),
        expose::agents_service(meta(NAME), proxies),
        expose::connect_service(meta(CONNECT_SERVICE)),
    ];
    out.extend(policy::policies(
        meta,
        selector(),
        proxies,
        settings.kube_apiserver_egress,
    ));
    out.extend([
        workload::pdb(meta(NAME)),
        workload::deployment(meta(NAME), server, &config, settings),
    ]);
    if settings.service_monitor {
        out.push(expose::service_monitor(meta(SERVICE_MONITOR)));
    }
    Ok(out)
}

/// The pods' selector (also the Services' and the PDB's).
pub fn selector() -> Value {
    json!({"app.kubernetes.io/name": NAME, "app.kubernetes.io/part-of": "isthmus"})
}

/// Labels of every object and pod: Gardener's `gardener.cloud/role: controlplane` (what
/// its control-plane components in a shoot namespace carry) and the owning migration.
fn labels(migration: &str) -> Value {
    let mut l = selector();
    l["gardener.cloud/role"] = json!("controlplane");
    l[MIGRATION_LABEL] = json!(migration);
    l
}
