//! What a seed has before any migration, installed through its API server as an admin: the
//! upstream CRDs (etcd-druid v0.38.1's `Etcd`, Gardener's `DNSRecord`; `scripts/upstream-crds.sh`),
//! isthmus' `EtcdMigration` CRD, namespace and controller RBAC from `deploy/`, the shoot's
//! namespace, and the proxy's LoadBalancer Service and pod with the status the cloud provider
//! and kubelet would give them (the stand-ins for those two: the controller reads the load
//! balancer's address and lists the running proxy pods). Then, when gardenlet has them, the
//! etcd client Secrets ([`etcd_client_secrets`]).

use crate::error::{Error, Result};
use isthmus_testkit::apply::{try_apply, try_apply_yaml};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::ApiResource;
use kube::Client;
use serde_json::{json, Value};
use std::path::Path;

/// The controller's namespace: its Lease, the proxy and its route ConfigMap.
pub const SYSTEM: &str = "isthmus-system";
/// The field manager of what the set-up applies.
const MANAGER: &str = "isthmus-seed-world";
/// The workspace root, for `deploy/`.
const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// One seed's set-up.
#[derive(Debug, Clone)]
pub struct Setup<'a> {
    /// The shoot's namespace.
    pub namespace: &'a str,
    /// The address the cloud provider gives the proxy's load balancer.
    pub lb: &'a str,
    /// The node the proxy pod runs on.
    pub node: &'a str,
    /// Declare etcd-druid's newer `additionalAdvertisedURLs` in the pinned `Etcd` schema
    /// ([`with_advertised_urls`]): the lab needs its `overrideDefaultURL`.
    pub newer_advertised_urls: bool,
}

fn apply_error(e: isthmus_testkit::apply::ApplyError) -> Error {
    Error::State(e.to_string())
}

/// Installs `s` with `admin`.
pub async fn install(admin: &Client, s: &Setup<'_>) -> Result<()> {
    let crds = isthmus_testkit::cache::upstream_crds();
    let root = Path::new(ROOT);
    for f in [
        crds.join("druid.gardener.cloud_etcds.yaml"),
        crds.join("extensions.gardener.cloud_dnsrecords.yaml"),
        root.join("deploy/crd-etcdmigration.yaml"),
        root.join("deploy/00-namespace.yaml"),
        // The controller's ServiceAccount, ClusterRole, Role and bindings (and its Deployment,
        // which nothing runs here).
        root.join("deploy/controller.yaml"),
    ] {
        let text = std::fs::read_to_string(&f).map_err(|e| {
            let what = format!(
                "{} (scripts/upstream-crds.sh fetches the CRDs)",
                f.display()
            );
            Error::io(what, e)
        })?;
        let etcd_crd = f.ends_with("druid.gardener.cloud_etcds.yaml");
        if etcd_crd && s.newer_advertised_urls {
            let mut crd: Value = serde_saphyr::from_str(&text)
                .map_err(|e| Error::State(format!("{}: {e}", f.display())))?;
            with_advertised_urls(&mut crd)?;
            try_apply(admin, &crd, MANAGER).await.map_err(apply_error)?;
        } else {
            try_apply_yaml(admin, &text, MANAGER)
                .await
                .map_err(apply_error)?;
        }
    }
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": s.namespace}});
    try_apply(admin, &ns, MANAGER).await.map_err(apply_error)?;
    proxy_objects(admin, s).await
}

/// The proxy's LoadBalancer Service (with its address) and one running proxy pod, as the cloud
/// provider and kubelet report them.
async fn proxy_objects(admin: &Client, s: &Setup<'_>) -> Result<()> {
    let svc = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "isthmus-proxy", "namespace": SYSTEM},
        "spec": {"type": "LoadBalancer", "ports": [{"name": "peer", "port": 2380}],
                 "selector": {"app.kubernetes.io/name": "isthmus-proxy"}}});
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "isthmus-proxy-a", "namespace": SYSTEM,
                     "labels": {"app.kubernetes.io/name": "isthmus-proxy"}},
        // No controller-manager creates a `default` ServiceAccount here.
        "spec": {"nodeName": s.node, "serviceAccountName": "isthmus-controller",
                 "automountServiceAccountToken": false,
                 "containers": [{"name": "proxy", "image": "isthmus"}]}});
    for o in [&svc, &pod] {
        try_apply(admin, o, MANAGER).await.map_err(apply_error)?;
    }
    // The load balancer's address is how the other seed reaches this proxy; the pod's IP is
    // where the controller asks the proxy for its `/config/hash`.
    let lb = json!({"status": {"loadBalancer": {"ingress": [{"ip": s.lb}]}}});
    status::<k8s_openapi::api::core::v1::Service>(admin, "isthmus-proxy", "cloud-provider", lb)
        .await?;
    let running = json!({"status": {"phase": "Running", "podIP": "127.0.0.1",
                                     "podIPs": [{"ip": "127.0.0.1"}]}});
    status::<k8s_openapi::api::core::v1::Pod>(admin, "isthmus-proxy-a", "kubelet", running).await
}

/// Applies `body`'s status to object `name` of kind `K` in [`SYSTEM`] as `manager`.
async fn status<K>(admin: &Client, name: &str, manager: &str, mut body: Value) -> Result<()>
where
    K: kube::Resource<DynamicType = ()>,
{
    let ar = ApiResource::erase::<K>(&());
    body["apiVersion"] = json!(ar.api_version);
    body["kind"] = json!(ar.kind);
    let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), SYSTEM, &ar);
    let pp = PatchParams::apply(manager).force();
    api.patch_status(name, &pp, &Patch::Apply(&body))
        .await
        .map_err(|e| Error::kube(format!("{} {name} status", ar.kind), e))?;
    Ok(())
}

/// etcd's client certificate `client_secret` (`cert`, `key`) and the CA bundle (`ca`) in
/// `namespace`, as Gardener's secrets manager keeps them (`isthmus_testkit::gardener`): what
/// the `Etcd`'s `spec.etcd.clientUrlTls` names and the controller reads etcd with. Applied, so
/// the CA bundle every client certificate shares is written once.
pub async fn etcd_client_secrets(
    admin: &Client,
    namespace: &str,
    client_secret: &str,
    (ca, cert, key): (&str, &str, &str),
) -> Result<()> {
    use isthmus_testkit::gardener::etcd_client_secrets;
    for doc in etcd_client_secrets(namespace, client_secret, ca, cert, key) {
        try_apply(admin, &doc, MANAGER).await.map_err(apply_error)?;
    }
    Ok(())
}

/// Adds etcd-druid's newer `spec.etcd.additionalAdvertisedURLs` (`peerURLs`/`clientURLs`:
/// `{overrideDefaultURL, members: [{name, urls}]}`) to the pinned v0.38.1 `Etcd` schema, the
/// one change made to an upstream CRD. Why: with v0.38's `additionalAdvertisePeerURLs` a member
/// advertises its exposed URL *beside* its in-cluster one, and both of the lab's seeds' members
/// have the same in-cluster URL (both `Etcd`s are `etcd-main` in the shoot's namespace, the
/// ports alike), so etcd refuses to add the first destination member ("Peer URLs already
/// exists", seen in the lab). The newer API's `overrideDefaultURL` is the way out; it is
/// documented upstream but in no published api module (v0.39+ are not served), so its shape is
/// declared here, exactly as the controller writes it (`isthmus_controller::gardener`).
pub fn with_advertised_urls(crd: &mut Value) -> Result<()> {
    let members = json!({"type": "object", "properties": {
        "overrideDefaultURL": {"type": "boolean"},
        "members": {"type": "array", "items": {"type": "object", "required": ["name", "urls"],
            "properties": {"name": {"type": "string"},
                           "urls": {"type": "array", "items": {"type": "string"}}}}},
    }});
    let field = json!({"type": "object",
        "description": "etcd-druid's newer advertised-URL API, declared by isthmus' seed world",
        "properties": {"peerURLs": members.clone(), "clientURLs": members}});
    let versions = crd
        .pointer_mut("/spec/versions")
        .and_then(Value::as_array_mut)
        .ok_or_else(|| Error::State("the Etcd CRD has no versions".into()))?;
    for v in versions {
        let etcd = v
            .pointer_mut("/schema/openAPIV3Schema/properties/spec/properties/etcd/properties")
            .and_then(Value::as_object_mut)
            .ok_or_else(|| Error::State("the Etcd CRD has no spec.etcd".into()))?;
        etcd.insert("additionalAdvertisedURLs".into(), field.clone());
    }
    Ok(())
}
