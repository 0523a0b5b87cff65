//! Gardener's etcd client credentials as its secrets manager keeps them in a shoot's control
//! plane namespace (gardener v1.149.3 `pkg/component/etcd/etcd/tls.go`,
//! `pkg/utils/secrets/manager`): the client certificate `etcd-client-<hash>` (type
//! `kubernetes.io/tls`, `tls.crt`/`tls.key` only: `SkipPublishingCACertificate`) and the CA
//! bundle `ca-etcd-bundle-<hash>` (`bundle.crt`), both immutable, renamed on every rotation,
//! labelled by the manager. The `Etcd`'s `spec.etcd.clientUrlTls` names them
//! ([`crate::etcd_spec`]). The hashes here are fixed stand-ins for the manager's.

use serde_json::{json, Value};

/// The client certificate's Secret, as the `Etcd`'s `clientTLSSecretRef` names it.
pub const ETCD_CLIENT_SECRET: &str = "etcd-client-5a0c7e1d";
/// The CA bundle's Secret, as the `Etcd`'s `tlsCASecretRef` names it (key `bundle.crt`).
pub const ETCD_CA_BUNDLE_SECRET: &str = "ca-etcd-bundle-3b9f21c4";

/// The labels the secrets manager puts on a Secret of config `name`
/// (`pkg/utils/secrets/manager/manager.go`, `ObjectMeta`).
fn labels(name: &str, bundle_for: Option<&str>) -> Value {
    let mut l = json!({
        "name": name,
        "managed-by": "secrets-manager",
        "manager-identity": "gardenlet",
        "persist": "true",
    });
    if let Some(b) = bundle_for {
        l["bundle-for"] = json!(b);
    }
    l
}

/// The two Secrets in `namespace`: the client certificate `client_secret` (`cert`, `key`) and
/// the CA bundle [`ETCD_CA_BUNDLE_SECRET`] (`ca`), all PEM.
pub fn etcd_client_secrets(
    namespace: &str,
    client_secret: &str,
    ca: &str,
    cert: &str,
    key: &str,
) -> [Value; 2] {
    [
        json!({
            "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls", "immutable": true,
            "metadata": {"name": client_secret, "namespace": namespace,
                         "labels": labels("etcd-client", None)},
            "stringData": {"tls.crt": cert, "tls.key": key},
        }),
        json!({
            "apiVersion": "v1", "kind": "Secret", "type": "Opaque", "immutable": true,
            "metadata": {"name": ETCD_CA_BUNDLE_SECRET, "namespace": namespace,
                         "labels": labels("ca-etcd-bundle", Some("ca-etcd"))},
            "stringData": {"bundle.crt": ca},
        }),
    ]
}
