//! The seed of the gardener_etcd tests: a real kube-apiserver with the CRDs Gardener's etcd
//! deploy writes, shoot namespaces, and the two other actors on an `Etcd` the tests play by
//! hand through the API: isthmus (server-side apply as field manager "isthmus", as
//! controller/src/kube_adapter/write.rs) and etcd-druid's verdict when it is done (status and
//! the removal of the reconcile request; etcd-druid itself does not run here).

use isthmus_testkit::gardener::{self, GardenerEtcd};
use isthmus_testkit::{KubeApiServer, Scratch};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use serde_json::{json, Value};
use std::process::Command;

pub const SOURCE: &str = "shoot--isthmus--h44";
pub const DESTINATION: &str = "shoot--isthmus--h44-dest";

pub struct Seed {
    pub server: KubeApiServer,
    client: kube::Client,
}

fn etcds(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("druid.gardener.cloud", "v1alpha1", "Etcd"),
        "etcds",
    );
    Api::namespaced_with(client.clone(), ns, &ar)
}

impl Seed {
    pub async fn start(namespaces: &[&str]) -> Seed {
        let server = KubeApiServer::start().await;
        for crd in gardener::crd_paths() {
            server.apply_yaml(&crd).await;
        }
        for ns in namespaces {
            server
                .apply_yaml_str(&format!(
                    "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n"
                ))
                .await;
        }
        let client = server.admin().await;
        Seed { server, client }
    }

    pub fn harness(&self, ns: &str) -> GardenerEtcd {
        GardenerEtcd::new(&self.server.admin_kubeconfig(), ns)
    }

    /// The live `etcd-main` as JSON, without managedFields.
    pub async fn etcd(&self, ns: &str) -> Value {
        let mut v =
            serde_json::to_value(etcds(&self.client, ns).get("etcd-main").await.unwrap()).unwrap();
        v["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("managedFields");
        v
    }

    /// The secrets Gardener's secrets manager keeps for gardenlet in `ns`, by its labels.
    pub async fn gardener_secrets(&self, ns: &str) -> Vec<Secret> {
        let lp =
            ListParams::default().labels("managed-by=secrets-manager,manager-identity=gardenlet");
        let mut list = Api::<Secret>::namespaced(self.client.clone(), ns)
            .list(&lp)
            .await
            .unwrap()
            .items;
        list.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        list
    }

    /// Server-side apply as the isthmus controller does (no force: a conflict fails).
    pub async fn apply_as_isthmus(&self, obj: &Value) {
        let ns = obj["metadata"]["namespace"].as_str().unwrap();
        let pp = PatchParams::apply("isthmus").validation_strict();
        etcds(&self.client, ns)
            .patch("etcd-main", &pp, &Patch::Apply(obj))
            .await
            .unwrap_or_else(|e| panic!("isthmus' apply: {e}\n{obj:#}"));
    }

    /// What etcd-druid writes when it has reconciled the current generation: observedGeneration,
    /// `ready` (from the Ready condition), the given conditions, and the reconcile request gone.
    pub async fn druid_done(&self, ns: &str, conditions: &[(&str, &str)]) {
        let api = etcds(&self.client, ns);
        let generation = api
            .get("etcd-main")
            .await
            .unwrap()
            .metadata
            .generation
            .unwrap();
        let now = "2026-08-01T00:00:00Z";
        let conds: Vec<Value> = conditions
            .iter()
            .map(|(t, s)| {
                json!({"type": t, "status": s, "reason": "Test", "message": "set by the test",
                                 "lastTransitionTime": now, "lastUpdateTime": now})
            })
            .collect();
        let ready = conditions.contains(&("Ready", "True"));
        let status = json!({"status": {"observedGeneration": generation, "ready": ready, "conditions": conds}});
        api.patch_status("etcd-main", &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap();
        let drop = json!({"metadata": {"annotations": {"gardener.cloud/operation": null}}});
        api.patch("etcd-main", &PatchParams::default(), &Patch::Merge(&drop))
            .await
            .unwrap();
    }

    pub async fn annotate(&self, ns: &str, key: &str, value: &str) {
        let p = json!({"metadata": {"annotations": {key: value}}});
        etcds(&self.client, ns)
            .patch("etcd-main", &PatchParams::default(), &Patch::Merge(&p))
            .await
            .unwrap();
    }
}

pub fn by_label<'a>(secrets: &'a [Secret], key: &str, value: &str) -> Vec<&'a Secret> {
    secrets
        .iter()
        .filter(|s| {
            s.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(key))
                .is_some_and(|v| v == value)
        })
        .collect()
}

pub fn secret_named<'a>(secrets: &'a [Secret], name: &str) -> &'a Secret {
    secrets
        .iter()
        .find(|s| s.metadata.name.as_deref() == Some(name))
        .unwrap_or_else(|| panic!("no secret {name}"))
}

pub fn keys(s: &Secret) -> Vec<String> {
    s.data
        .as_ref()
        .map(|d| d.keys().cloned().collect())
        .unwrap_or_default()
}

pub fn uids(secrets: &[Secret]) -> Vec<(String, String)> {
    secrets
        .iter()
        .map(|s| {
            (
                s.metadata.name.clone().unwrap(),
                s.metadata.uid.clone().unwrap(),
            )
        })
        .collect()
}

/// `openssl verify`: `cert`'s tls.crt chains to the CAs in `ca`'s `key`.
pub fn verify_chain(ca: &Secret, key: &str, cert: &Secret) {
    let (ok, out) = chains(ca, key, cert);
    assert!(
        ok,
        "{} does not chain to {}/{key}: {out}",
        cert.metadata.name.as_deref().unwrap(),
        ca.metadata.name.as_deref().unwrap()
    );
}

/// Whether `cert`'s tls.crt chains to `ca`'s `key` (`openssl verify`), and openssl's words.
pub fn chains(ca: &Secret, key: &str, cert: &Secret) -> (bool, String) {
    let dir = Scratch::new("gardener-etcd-verify");
    let data = |s: &Secret, k: &str| {
        s.data
            .as_ref()
            .and_then(|d| d.get(k))
            .map(|b| b.0.clone())
            .unwrap()
    };
    std::fs::write(dir.join("ca.pem"), data(ca, key)).unwrap();
    std::fs::write(dir.join("cert.pem"), data(cert, "tls.crt")).unwrap();
    let out = Command::new("openssl")
        .args(["verify", "-CAfile", "ca.pem", "cert.pem"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let words = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    (out.status.success(), words.into_owned())
}

pub fn print_secrets(secrets: &[Secret]) {
    for s in secrets {
        println!(
            "secret {} type={} immutable={:?} keys={:?} labels={}",
            s.metadata.name.as_deref().unwrap(),
            s.type_.as_deref().unwrap_or(""),
            s.immutable,
            keys(s),
            serde_json::to_string(&s.metadata.labels).unwrap()
        );
    }
}

/// The fields isthmus sets, before and after, as JSON.
pub fn print_before_after(what: &str, before: &Value, after: &Value) {
    let pick = |o: &Value| {
        let e = &o["spec"]["etcd"];
        json!({"replicas": o["spec"]["replicas"], "etcd": {
            "additionalAdvertisePeerURLs": e["additionalAdvertisePeerURLs"],
            "bootstrapWithExistingCluster": e["bootstrapWithExistingCluster"],
            "peerUrlTls.skipClientSANVerification": e["peerUrlTls"]["skipClientSANVerification"],
        }})
    };
    println!("{what} before Deploy: {}", pick(before));
    println!("{what} after Deploy:  {}", pick(after));
}

/// `additionalAdvertisePeerURLs` for members 0..n (names `<prefix>etcd-main-<i>`), one port per
/// member (2380 + i) as isthmus.
pub fn advertised(ns: &str, prefix: &str, n: usize) -> Value {
    Value::Array(
        (0..n)
            .map(|i| json!({"memberName": format!("{prefix}etcd-main-{i}"),
                            "urls": [format!("https://etcd-main-{i}.{ns}.seed.example:{}", 2380 + i)]}))
            .collect(),
    )
}

/// Every `namespace: from` in a spec (the secret references) becomes `to`.
pub fn retarget_secret_refs(v: &mut Value, from: &str, to: &str) {
    match v {
        Value::Object(o) => {
            for (k, x) in o.iter_mut() {
                if k == "namespace" && x == from {
                    *x = json!(to);
                } else {
                    retarget_secret_refs(x, from, to);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| retarget_secret_refs(x, from, to)),
        _ => {}
    }
}

pub fn generation(o: &Value) -> i64 {
    o["metadata"]["generation"].as_i64().unwrap()
}

pub fn assert_contains(v: &Value, needle: &str) {
    let s = v.as_str().unwrap_or_else(|| panic!("not a string: {v}"));
    assert!(s.contains(needle), "{s:?} does not contain {needle:?}");
}
