//! What a seed has before any migration, installed through its API server: the upstream CRDs
//! (etcd-druid's `Etcd` with the one addition the lab needs, Gardener's `DNSRecord`),
//! isthmus' CRD, namespace and controller RBAC from `deploy/`, the shoot's namespace with
//! etcd's client Secret, and the proxy's LoadBalancer Service and pod with the status the cloud
//! provider and kubelet would give them.

use super::apiserver::SeedApi;
use super::SYSTEM;
use crate::error::{Error, Result};
use crate::seeds::Seed;
use crate::specs::NAMESPACE;
use serde_json::{json, Value};
use std::path::Path;

/// The workspace root, for `deploy/`.
const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// What a seed has before any migration: the CRDs, the controller's namespace and RBAC
/// (`deploy/`), the shoot's namespace with etcd's client Secret, the proxy's LoadBalancer
/// Service and pod (as the cloud provider and kubelet report them). (gardenlet creates the
/// source's `Etcd`, `super::gardenlet`.)
pub(super) async fn install(api: &SeedApi, seed: &Seed, dir: &Path) -> Result<()> {
    manifests(api).await?;
    objects(api, seed, dir).await
}

/// The upstream CRDs and `deploy/`'s CRD, namespace and controller RBAC.
async fn manifests(api: &SeedApi) -> Result<()> {
    let root = Path::new(ROOT);
    let crds = isthmus_testkit::cache::upstream_crds();
    for f in [
        crds.join("druid.gardener.cloud_etcds.yaml"),
        crds.join("extensions.gardener.cloud_dnsrecords.yaml"),
        root.join("deploy/crd-etcdmigration.yaml"),
        root.join("deploy/00-namespace.yaml"),
        root.join("deploy/controller.yaml"),
    ] {
        let text = std::fs::read_to_string(&f).map_err(|e| {
            Error::io(
                format!("{} (scripts/install-deps.sh fetches the CRDs)", f.display()),
                e,
            )
        })?;
        let what = f.display().to_string();
        if what.ends_with("druid.gardener.cloud_etcds.yaml") {
            let mut crd: Value =
                serde_saphyr::from_str(&text).map_err(|e| Error::State(format!("{what}: {e}")))?;
            with_advertised_urls(&mut crd)?;
            api.apply(&crd).await?;
        } else {
            api.apply_yaml(&what, &text).await?;
        }
    }
    Ok(())
}

/// The shoot's namespace with etcd's client Secrets (from the lab's certificates in `dir`), the
/// proxy's Service and pod, and their status.
async fn objects(api: &SeedApi, seed: &Seed, dir: &Path) -> Result<()> {
    let read = |f: &str| {
        let p = dir.join(f);
        std::fs::read_to_string(&p).map_err(|e| Error::io(p.display(), e))
    };
    // etcd's client certificate and CA as Gardener's secrets manager keeps them, under the
    // names the `Etcd`s' `spec.etcd.clientUrlTls` references (`isthmus_testkit::gardener`).
    let [client, ca] = isthmus_testkit::gardener::etcd_client_secrets(
        NAMESPACE,
        isthmus_testkit::gardener::ETCD_CLIENT_SECRET,
        &read("ca.crt")?,
        &read("etcd-client.crt")?,
        &read("etcd-client.key")?,
    );
    let objects = [
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}),
        client,
        ca,
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "isthmus-proxy", "namespace": SYSTEM},
               "spec": {"type": "LoadBalancer", "ports": [{"name": "peer", "port": 2380}],
                        "selector": {"app.kubernetes.io/name": "isthmus-proxy"}}}),
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "isthmus-proxy-a", "namespace": SYSTEM,
                            "labels": {"app.kubernetes.io/name": "isthmus-proxy"}},
               "spec": {"nodeName": seed.label, "serviceAccountName": "isthmus-controller",
                        "automountServiceAccountToken": false,
                        "containers": [{"name": "proxy", "image": "isthmus"}]}}),
    ];
    for o in &objects {
        api.apply(o).await?;
    }
    // The cloud provider's and kubelet's status: the load balancer's address (how the other
    // seed reaches this proxy) and the proxy pod's IP inside the seed.
    let lb = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "isthmus-proxy", "namespace": SYSTEM},
        "status": {"loadBalancer": {"ingress": [{"ip": seed.seed_ip.to_string()}]}}});
    status(api, "services", &lb).await?;
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "isthmus-proxy-a", "namespace": SYSTEM},
        "status": {"phase": "Running", "podIP": "127.0.0.1", "podIPs": [{"ip": "127.0.0.1"}]}});
    status(api, "pods", &pod).await?;
    Ok(())
}

/// Adds etcd-druid's newer `spec.etcd.additionalAdvertisedURLs` (`peerURLs`/`clientURLs`:
/// `{overrideDefaultURL, members: [{name, urls}]}`) to the pinned v0.38.1 `Etcd` schema, the
/// one change the lab makes to an upstream CRD. Why: with v0.38's `additionalAdvertisePeerURLs`
/// a member advertises its exposed URL *beside* its in-cluster one, and both seeds' members
/// have the same in-cluster URL (both `Etcd`s are `etcd-main` in the shoot's namespace), so
/// etcd refuses to add the first destination member ("Peer URLs already exists", seen here).
/// The newer API's `overrideDefaultURL` is the way out; it is documented upstream but in no
/// published api module (v0.39+ are not served), so the lab declares its shape, exactly as
/// the controller writes it (`isthmus_controller::gardener`).
fn with_advertised_urls(crd: &mut Value) -> Result<()> {
    let members = json!({"type": "object", "properties": {
        "overrideDefaultURL": {"type": "boolean"},
        "members": {"type": "array", "items": {"type": "object", "required": ["name", "urls"],
            "properties": {"name": {"type": "string"},
                           "urls": {"type": "array", "items": {"type": "string"}}}}},
    }});
    let field = json!({"type": "object",
        "description": "etcd-druid's newer advertised-URL API, added to the pinned schema by the isthmus lab",
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

/// Applies `body`'s status (field manager `isthmus-lab`).
async fn status(api: &SeedApi, plural: &str, body: &Value) -> Result<()> {
    let ns = body["metadata"]["namespace"].as_str().unwrap_or_default();
    let name = body["metadata"]["name"].as_str().unwrap_or_default();
    let kind = body["kind"].as_str().unwrap_or_default();
    let ar = kube::core::ApiResource {
        group: String::new(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: kind.into(),
        plural: plural.into(),
    };
    let objs: kube::Api<kube::api::DynamicObject> =
        kube::Api::namespaced_with(api.admin.clone(), ns, &ar);
    let pp = kube::api::PatchParams::apply("isthmus-lab").force();
    objs.patch_status(name, &pp, &kube::api::Patch::Apply(body))
        .await
        .map_err(|e| Error::State(format!("{kind} {name} status: {e}")))?;
    Ok(())
}
