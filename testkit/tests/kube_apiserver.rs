//! The kube-apiserver fixture against the real thing: the pinned kube-apiserver enforces the
//! upstream Etcd CRD's CEL rules, RBAC for a ServiceAccount, and strict field validation.
//! Needs `scripts/build-kubernetes.sh` and `scripts/upstream-crds.sh` (install-deps runs both).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use futures::StreamExt;
use isthmus_testkit::kube::client_from_kubeconfig;
use isthmus_testkit::{minimal_etcd, wait_until, KubeApiServer};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use kube::runtime::{watcher, WatchStreamExt};
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

/// Waits (deadline, not sleep) for the next watcher event that `pick` accepts; errors are
/// returned to `on_error`, which decides whether they are fatal.
async fn next_event<S, T>(
    events: &mut S,
    what: &str,
    mut on_error: impl FnMut(&watcher::Error),
    mut pick: impl FnMut(watcher::Event<ConfigMap>) -> Option<T>,
) -> T
where
    S: futures::Stream<Item = Result<watcher::Event<ConfigMap>, watcher::Error>> + Unpin,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        match tokio::time::timeout_at(deadline, events.next()).await {
            Err(_) => panic!("timed out waiting for {what}"),
            Ok(None) => panic!("watch stream ended while waiting for {what}"),
            Ok(Some(Err(e))) => on_error(&e),
            Ok(Some(Ok(ev))) => {
                if let Some(t) = pick(ev) {
                    return t;
                }
            }
        }
    }
}

fn name(cm: &ConfigMap) -> String {
    cm.metadata.name.clone().unwrap_or_default()
}

/// Watches of both initial-list strategies (list+watch, and the streaming list kube-apiserver
/// 1.34 serves only on an etcd with progress requests), clients from the kubeconfig files, and
/// a watch that carries on across a kube-apiserver restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_and_kubeconfigs_across_an_apiserver_restart() {
    let mut server = KubeApiServer::start().await;
    let url = server.url();
    let admin = client_from_kubeconfig(&server.admin_kubeconfig()).await;
    server
        .apply_yaml_str(&format!(
            r#"
apiVersion: v1
kind: Namespace
metadata: {{name: {NS}}}
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: before, namespace: {NS}}}
data: {{a: "1"}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: configmap-watcher, namespace: {NS}}}
rules:
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: watcher, namespace: {NS}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: configmap-watcher}}
subjects:
- {{kind: ServiceAccount, name: watcher, namespace: {NS}}}
"#
        ))
        .await;
    let sa = client_from_kubeconfig(&server.service_account_kubeconfig(NS, "watcher").await).await;
    let cms: Api<ConfigMap> = Api::namespaced(sa, NS);
    wait_until(
        "the RoleBinding to take effect",
        Duration::from_secs(30),
        || {
            let cms = cms.clone();
            async move { cms.list(&ListParams::default()).await.is_ok() }
        },
    )
    .await;

    let mut streams = Vec::new();
    for (label, config) in [
        ("list+watch", watcher::Config::default()),
        (
            "streaming list",
            watcher::Config::default().streaming_lists(),
        ),
    ] {
        let mut events = watcher(cms.clone(), config).default_backoff().boxed();
        let mut listed = Vec::new();
        next_event(
            &mut events,
            &format!("the initial {label}"),
            |e| panic!("{label}: {e}"),
            |ev| match ev {
                watcher::Event::InitApply(cm) => {
                    listed.push(name(&cm));
                    None
                }
                watcher::Event::InitDone => Some(()),
                _ => None,
            },
        )
        .await;
        assert_eq!(listed, ["before"], "{label}");
        streams.push((label, events));
    }

    server.restart().await;
    assert_eq!(server.url(), url);
    // The client made before the restart still works (it reconnects).
    let admin_cms: Api<ConfigMap> = Api::namespaced(admin, NS);
    wait_until(
        "a create through the old admin client",
        Duration::from_secs(30),
        || {
            let admin_cms = admin_cms.clone();
            async move {
                let cm: ConfigMap = serde_json::from_value(json!({
                    "metadata": {"name": "after", "namespace": NS}, "data": {"b": "2"}
                }))
                .unwrap();
                match admin_cms.create(&PostParams::default(), &cm).await {
                    Ok(_) => true,
                    Err(kube::Error::Api(s)) if s.code == 409 => true,
                    Err(_) => false,
                }
            }
        },
    )
    .await;
    // Both watches carry on (resumed, or re-listed after a 410) and see the new object.
    for (label, mut events) in streams {
        next_event(
            &mut events,
            &format!("{label}: `after` once the apiserver is back"),
            |_| {}, // connection errors while it was down
            |ev| match ev {
                watcher::Event::Apply(cm) | watcher::Event::InitApply(cm)
                    if name(&cm) == "after" =>
                {
                    Some(())
                }
                _ => None,
            },
        )
        .await;
    }
}
