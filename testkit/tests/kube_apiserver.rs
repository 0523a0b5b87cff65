//! The kube-apiserver fixture against the real thing: the pinned kube-apiserver enforces the
//! upstream Etcd CRD's CEL rules, RBAC for a ServiceAccount, and strict field validation.
//! Needs `scripts/build-kube-apiserver.sh` and `scripts/upstream-crds.sh` (install-deps runs both).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use isthmus_testkit::{minimal_etcd, wait_until, KubeApiServer};
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use serde_json::{json, Value};
use std::time::Duration;

const NS: &str = "shoot--garden--migrate";

fn etcd_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("druid.gardener.cloud", "v1alpha1", "Etcd"),
        "etcds",
    )
}

fn api_error(e: kube::Error) -> Box<kube::core::Status> {
    match e {
        kube::Error::Api(s) => s,
        other => panic!("expected an API error, got {other}"),
    }
}

fn object(v: Value) -> DynamicObject {
    serde_json::from_value(v).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_crds_cel_rules_rbac_and_strict_validation() {
    let server = KubeApiServer::start().await;
    eprintln!(
        "kube-apiserver {} at {}: spawn to ready in {:?}",
        server.version(),
        server.url(),
        server.startup_time()
    );
    assert_eq!(server.version(), "v1.34.4");

    let mut applied = Vec::new();
    for crd in KubeApiServer::upstream_crd_paths() {
        applied.extend(server.apply_yaml(&crd).await);
    }
    assert_eq!(
        applied,
        [
            "CustomResourceDefinition/etcds.druid.gardener.cloud",
            "CustomResourceDefinition/dnsrecords.extensions.gardener.cloud"
        ]
    );
    let ns = server
        .apply_yaml_str(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NS}\n"
        ))
        .await;
    assert_eq!(ns, [format!("Namespace/{NS}")]);

    let admin = server.admin().await;
    let etcds: Api<DynamicObject> = Api::namespaced_with(admin.clone(), NS, &etcd_resource());

    // A CEL rule of the Etcd CRD: an advertised member's index must be < replicas.
    let mut bad = minimal_etcd("etcd-main", NS, 3);
    bad["spec"]["etcd"]["additionalAdvertisePeerURLs"] =
        json!([{"memberName": "etcd-main-5", "urls": ["https://10.0.0.5:2380"]}]);
    let err = api_error(
        etcds
            .create(&PostParams::default(), &object(bad))
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"), "{err:?}");
    assert!(
        err.message
            .contains("member name index must be less than replicas"),
        "{}",
        err.message
    );

    // The same Etcd with a member index < replicas is accepted.
    let mut good = minimal_etcd("etcd-main", NS, 3);
    good["spec"]["etcd"]["additionalAdvertisePeerURLs"] =
        json!([{"memberName": "etcd-main-2", "urls": ["https://10.0.0.2:2380"]}]);
    etcds
        .create(&PostParams::default(), &object(good))
        .await
        .unwrap();

    // A field the CRD does not define (the wrong casing). With a merge patch (or create /
    // update) the server's default field validation, Warn, drops it silently: the patch
    // "succeeds" and the field is gone -- the trap a controller without Strict falls into.
    let typo = json!({"spec": {"etcd": {"additionalAdvertisePeerUrls": [
        {"memberName": "etcd-main-1", "urls": ["https://10.0.0.1:2380"]}]}}});
    let dropped = etcds
        .patch("etcd-main", &PatchParams::default(), &Patch::Merge(&typo))
        .await
        .unwrap();
    assert!(dropped.data["spec"]["etcd"]
        .get("additionalAdvertisePeerUrls")
        .is_none());
    // fieldValidation=Strict rejects it.
    let err = api_error(
        etcds
            .patch(
                "etcd-main",
                &PatchParams::default().validation_strict(),
                &Patch::Merge(&typo),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"), "{err:?}");
    assert!(
        err.message.ends_with(
            r#"strict decoding error: unknown field "spec.etcd.additionalAdvertisePeerUrls""#
        ),
        "{err:?}"
    );
    // Server-side apply refuses undeclared fields whatever the validation directive (with a
    // 500 from building the typed patch).
    let mut typo_apply = typo.clone();
    typo_apply["apiVersion"] = json!("druid.gardener.cloud/v1alpha1");
    typo_apply["kind"] = json!("Etcd");
    typo_apply["metadata"] = json!({"name": "etcd-main", "namespace": NS});
    for pp in [
        PatchParams::apply("typo"),
        PatchParams::apply("typo").validation_strict(),
    ] {
        let err = api_error(
            etcds
                .patch("etcd-main", &pp, &Patch::Apply(&typo_apply))
                .await
                .unwrap_err(),
        );
        eprintln!(
            "apply, {:?}: {} {}: {}",
            pp.field_validation, err.code, err.reason, err.message
        );
        assert!(
            err.message
                .contains(".spec.etcd.additionalAdvertisePeerUrls: field not declared in schema"),
            "{err:?}"
        );
    }

    // RBAC: a ServiceAccount without a binding may not list Etcds; with a RoleBinding it may.
    let sa = server
        .service_account("isthmus-system", "isthmus-controller")
        .await;
    let sa_etcds: Api<DynamicObject> = Api::namespaced_with(sa, NS, &etcd_resource());
    let err = api_error(sa_etcds.list(&ListParams::default()).await.unwrap_err());
    assert_eq!(
        (err.code, err.reason.as_str()),
        (403, "Forbidden"),
        "{err:?}"
    );
    server
        .apply_yaml_str(&format!(
            r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: etcd-reader, namespace: {NS}}}
rules:
- apiGroups: [druid.gardener.cloud]
  resources: [etcds]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: isthmus-controller, namespace: {NS}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: etcd-reader}}
subjects:
- {{kind: ServiceAccount, name: isthmus-controller, namespace: isthmus-system}}
"#
        ))
        .await;
    // The authorizer reads RBAC objects from an informer: the binding takes effect shortly.
    wait_until(
        "the RoleBinding to let the ServiceAccount list Etcds",
        Duration::from_secs(30),
        || {
            let sa_etcds = sa_etcds.clone();
            async move { sa_etcds.list(&ListParams::default()).await.is_ok() }
        },
    )
    .await;
    let names: Vec<String> = sa_etcds
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|e| e.metadata.name)
        .collect();
    assert_eq!(names, ["etcd-main"]);
    // Listing is all it got.
    let err = api_error(
        sa_etcds
            .delete("etcd-main", &Default::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 403, "{err:?}");
}
