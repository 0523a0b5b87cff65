//! What the orchestrator grants the controller in one shoot namespace, for one migration: a
//! `Role` and `RoleBinding` (both named [`GRANT`]) that gardenlet creates with the
//! `EtcdMigration` and deletes once the migration object is gone (its finalizer needs them).
//! `deploy/controller.yaml` grants nothing that touches a shoot namespace's objects beyond
//! reading `EtcdMigration`s, `DNSRecord`s and `Etcd`s for the watches; every write, and the
//! etcd client Secrets' read, is granted here, in the migration's namespace, and by name wherever
//! Kubernetes allows it. It must never grant more than the controller uses: a verb missing
//! here fails the controller's tests, which run it as `deploy/`'s ServiceAccount with this
//! grant.
//!
//! Why a grant per namespace rather than credentials handed over per migration: the etcd
//! client certificate stays where Gardener keeps and rotates it (one copy, in the shoot's
//! namespace), and the controller can read it only while a migration of that shoot runs. A
//! copy handed to the controller would be one more Secret to rotate and clean up.

use crate::crd::{EtcdMigrationSpec, Role};
use crate::network::ETCD_SERVICE;
use crate::plan::{members, VPN_RECORD};
use crate::tunnel_server;
use serde_json::{json, Value};

/// Name of the `Role` and `RoleBinding` in the shoot namespace.
pub const GRANT: &str = "isthmus-controller";

/// The controller's ServiceAccount (`deploy/controller.yaml`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl Default for Subject {
    fn default() -> Self {
        Self {
            namespace: "isthmus-system".into(),
            name: "isthmus-controller".into(),
        }
    }
}

/// The `Role` and the `RoleBinding` that let `subject` carry out `spec` in `namespace`.
///
/// `etcd_secrets` are the Secrets the `Etcd`'s `spec.etcd.clientUrlTls` names (Gardener's
/// `etcd-client-<hash>` and `ca-etcd-bundle-<hash>`: [`crate::gardener::etcd_client_tls`],
/// [`crate::gardener::EtcdClientTls::secret_names`]), granted `get` by name. The secrets
/// manager renames them on every rotation, so the orchestrator grants the new names with the
/// `Etcd` that references them (both old and new while a rotation runs). RBAC cannot restrict a
/// `list` or `watch` by label (`managed-by=secrets-manager`, `name=etcd-client`): finding them
/// by label would need `list` of every Secret of the namespace (kubeconfigs, CA keys), and a
/// `get` without names would read any of them.
pub fn grant(
    spec: &EtcdMigrationSpec,
    namespace: &str,
    subject: &Subject,
    etcd_secrets: &[String],
) -> [Value; 2] {
    let mut records: Vec<String> = members(spec, namespace)
        .into_iter()
        .filter_map(|m| m.record)
        .collect();
    if spec.role == Role::Destination && spec.vpn.is_some() {
        records.push(VPN_RECORD.into());
    }
    let mut rules = vec![json!({
        "apiGroups": [""], "resources": ["secrets"],
        "resourceNames": etcd_secrets, "verbs": ["get"],
    })];
    if !records.is_empty() {
        // isthmus' own records only (never the shoot's API records next to them), `create`
        // included: every write is a server-side apply, and one that creates an object is
        // authorised as `create` of its name (unlike a POST), so RBAC can name it.
        rules.push(json!({
            "apiGroups": ["extensions.gardener.cloud"], "resources": ["dnsrecords"],
            "resourceNames": records, "verbs": ["create", "patch", "delete"],
        }));
    }
    let etcd_verbs = match spec.role {
        // The migration fields of gardenlet's `Etcd`, and their release.
        Role::Source => vec!["patch"],
        // The destination `Etcd` is created by the controller's first apply (by name, as
        // above); deleted only by an accepted abort.
        Role::Destination => vec!["create", "patch", "delete"],
    };
    rules.push(json!({
        "apiGroups": ["druid.gardener.cloud"], "resources": ["etcds"],
        "resourceNames": [spec.etcd_name], "verbs": etcd_verbs,
    }));
    // The trigger of the resource manager's policies for the proxies' way to the members
    // (`crate::network`). Only that name, `create` included: a server-side apply that
    // creates an object is authorised as `create` of its name (unlike a POST); `get` to
    // delete it only when a migration owns it.
    let server =
        spec.role == Role::Destination && spec.vpn.as_ref().is_some_and(|v| v.server.is_some());
    let mut services = vec![ETCD_SERVICE];
    if server {
        services.extend([tunnel_server::NAME, tunnel_server::CONNECT_SERVICE]);
    }
    rules.push(json!({
        "apiGroups": [""], "resources": ["services"],
        "resourceNames": services, "verbs": ["get", "create", "patch", "delete"],
    }));
    if server {
        // The temporary VPN's tunnel server (`crate::tunnel_server`), by name, as above;
        // `get` to delete only what this migration owns. No Secret: the kubelet mounts the
        // server's certificates. Creating a Deployment is running a pod in this namespace:
        // the controller's own image, which mounts only the Secrets the spec names.
        for (group, resource, name) in [
            ("", "configmaps", tunnel_server::NAME),
            ("apps", "deployments", tunnel_server::NAME),
            ("policy", "poddisruptionbudgets", tunnel_server::NAME),
            (
                "networking.k8s.io",
                "networkpolicies",
                tunnel_server::CONNECT_INGRESS_POLICY,
            ),
            (
                "networking.k8s.io",
                "networkpolicies",
                tunnel_server::CONNECT_EGRESS_POLICY,
            ),
            (
                "networking.k8s.io",
                "networkpolicies",
                tunnel_server::AGENTS_POLICY,
            ),
            (
                "monitoring.coreos.com",
                "servicemonitors",
                tunnel_server::SERVICE_MONITOR,
            ),
        ] {
            rules.push(json!({
                "apiGroups": [group], "resources": [resource],
                "resourceNames": [name], "verbs": ["get", "create", "patch", "delete"],
            }));
        }
    }
    // A refused spec is reported as an Event on its `EtcdMigration`.
    rules.push(json!({
        "apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"],
    }));
    let labels = json!({"app.kubernetes.io/part-of": "isthmus"});
    [
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": GRANT, "namespace": namespace, "labels": labels},
            "rules": rules,
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": GRANT, "namespace": namespace, "labels": labels},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": GRANT},
            "subjects": [{"kind": "ServiceAccount", "name": subject.name,
                          "namespace": subject.namespace}],
        }),
    ]
}

/// Serialising the grant failed.
#[derive(Debug, thiserror::Error)]
#[error("cannot serialise the access grant: {0}")]
pub struct GrantYamlError(String);

/// The grant as a YAML manifest (what `deploy/examples/access-*.yaml` hold), after `header`
/// (comment lines).
pub fn grant_yaml(
    spec: &EtcdMigrationSpec,
    namespace: &str,
    subject: &Subject,
    etcd_secrets: &[String],
    header: &str,
) -> Result<String, GrantYamlError> {
    let docs = grant(spec, namespace, subject, etcd_secrets)
        .iter()
        .map(serde_saphyr::to_string)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| GrantYamlError(e.to_string()))?;
    Ok(format!("{header}{}", docs.join("---\n")))
}
