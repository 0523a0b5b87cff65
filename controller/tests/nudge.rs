//! The nudge that makes kubelet deliver a new route file at once (`kube_adapter::nudge`), as
//! the controller's ServiceAccount under `deploy/controller.yaml`, against a real
//! kube-apiserver (v1.34.4): the annotation lands on a proxy pod, and the admission policy
//! that comes with the `patch` verb refuses every other change of a pod — a label, the spec,
//! another annotation, a pod that is not a proxy. How fast the file then reaches a real pod
//! is measured on the node (`tests/cluster.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use isthmus_controller::kube_adapter::nudge::{self, ANNOTATION};
use isthmus_testkit::kube::KubeApiServer;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use serde_json::json;
use std::path::Path;
use std::time::Duration;

const SYSTEM: &str = "isthmus-system";

fn pod(name: &str, app: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app.kubernetes.io/name": app},
                     "annotations": {"kept": "yes"}},
        "spec": {"nodeName": "node-a", "serviceAccountName": "isthmus-controller",
                 "automountServiceAccountToken": false,
                 "containers": [{"name": "c", "image": "isthmus"}]},
    }))
    .unwrap()
}

#[tokio::test]
async fn the_controller_may_change_only_the_nudge_annotation_of_a_proxy_pod() {
    let k = KubeApiServer::start().await;
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    k.apply_yaml(&root.join("deploy/00-namespace.yaml")).await;
    k.apply_yaml(&root.join("deploy/controller.yaml")).await;
    let admin: Api<Pod> = Api::namespaced(k.admin().await, SYSTEM);
    for (name, app) in [("isthmus-proxy-a", "isthmus-proxy"), ("other", "something")] {
        admin
            .create(&PostParams::default(), &pod(name, app))
            .await
            .unwrap();
    }
    let pods: Api<Pod> = Api::namespaced(
        k.service_account(SYSTEM, "isthmus-controller").await,
        SYSTEM,
    );
    let proxy = admin.get("isthmus-proxy-a").await.unwrap();

    // The policy is read through an informer, like RBAC: wait until it refuses (422;
    // RBAC's 403 means the Role is not in effect yet). The probe is
    // a dry run: before the policy is in effect it would otherwise relabel the proxy pod.
    let label = json!({"metadata": {"labels": {"app.kubernetes.io/name": "hijacked"}}});
    isthmus_testkit::wait_until(
        "the admission policy in effect",
        Duration::from_secs(30),
        || {
            let pods = pods.clone();
            let label = label.clone();
            async move {
                pods.patch(
                    "isthmus-proxy-a",
                    &PatchParams::default().dry_run(),
                    &Patch::Merge(label),
                )
                .await
                .is_err_and(|e| matches!(e, kube::Error::Api(s) if s.code == 422))
            }
        },
    )
    .await;

    assert!(nudge::nudge(&pods, &proxy, "h1", 1_000, 1_000).await);
    let after = admin.get("isthmus-proxy-a").await.unwrap();
    assert_eq!(
        after.annotations().get(ANNOTATION).map(String::as_str),
        Some("h1@1000@1000")
    );
    assert_eq!(
        after.annotations().get("kept").map(String::as_str),
        Some("yes")
    );
    assert_eq!(after.labels(), proxy.labels(), "nothing else changed");
    // A second nudge for the same hash is accepted too (the re-nudge after a second).
    assert!(nudge::nudge(&pods, &after, "h1", 1_000, 2_000).await);

    let refused = [
        (
            "isthmus-proxy-a",
            json!({"metadata": {"labels": {"app.kubernetes.io/name": "x"}}}),
        ),
        (
            "isthmus-proxy-a",
            json!({"metadata": {"annotations": {"kept": "no"}}}),
        ),
        (
            "isthmus-proxy-a",
            json!({"metadata": {"annotations": {"kept": null}}}),
        ),
        (
            "isthmus-proxy-a",
            json!({"metadata": {"annotations": {"new": "x"}}}),
        ),
        (
            "isthmus-proxy-a",
            json!({"spec": {"activeDeadlineSeconds": 5}}),
        ),
        (
            "other",
            json!({"metadata": {"annotations": {ANNOTATION: "h1@1@1"}}}),
        ),
    ];
    for (name, patch) in refused {
        let err = pods
            .patch(name, &PatchParams::default(), &Patch::Merge(patch.clone()))
            .await
            .expect_err(&format!("{name}: {patch} must be refused"));
        let text = err.to_string();
        assert!(
            text.contains("isthmus controller may"),
            "{name}: {patch}: refused for another reason: {text}"
        );
    }
    // The refusals changed nothing.
    let last = admin.get("isthmus-proxy-a").await.unwrap();
    assert_eq!(last.labels(), proxy.labels());
    assert_eq!(
        last.annotations().get("kept").map(String::as_str),
        Some("yes")
    );
    assert!(admin
        .get("other")
        .await
        .unwrap()
        .annotations()
        .get(ANNOTATION)
        .is_none());
    // An admin is not bound by the policy.
    admin
        .patch(
            "other",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
        )
        .await
        .unwrap();
}
