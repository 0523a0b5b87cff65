//! The resource manager's high-availability-config webhook as a seed registers it
//! (`NewHighAvailabilityConfigMutatingWebhook` and `buildWebhookNamespaceSelector` of Gardener
//! v1.149.3's `pkg/component/gardener/resourcemanager`), reached by URL instead of its Service.

use crate::KubeApiServer;
use std::time::{Duration, Instant};

/// Waits until the API server calls the webhook: a dry-run Deployment of type `controller`
/// with one replica comes back with the two the webhook gives a controller.
pub(super) async fn answers(server: &KubeApiServer) {
    use k8s_openapi::api::apps::v1::Deployment;
    let ns = "grm-webhook-probe";
    server
        .apply_yaml_str(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n  labels:\n    \
             gardener.cloud/role: probe\n    \
             high-availability-config.resources.gardener.cloud/consider: \"true\"\n"
        ))
        .await;
    let probe: Deployment = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "probe", "labels": {"high-availability-config.resources.gardener.cloud/type": "controller"}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "probe"}},
            "template": {"metadata": {"labels": {"app": "probe"}},
                         "spec": {"containers": [{"name": "c", "image": "probe"}]}},
        },
    }))
    .expect("a Deployment");
    let api: kube::Api<Deployment> = kube::Api::namespaced(server.admin().await, ns);
    let pp = kube::api::PostParams {
        dry_run: true,
        ..Default::default()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let answer = api.create(&pp, &probe).await;
        let replicas = answer.as_ref().ok().and_then(|d| d.spec.as_ref()?.replicas);
        if replicas == Some(2) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the high-availability-config webhook does not answer after 60 s: {answer:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The seed's registration of the high-availability-config webhook (module doc), at
/// `https://127.0.0.1:<port>`, as JSON.
pub(super) fn registration(port: u16, ca_pem: &str) -> String {
    // k8s-openapi's ByteString serialises as base64, as `caBundle` wants.
    let ca = serde_json::to_value(k8s_openapi::ByteString(ca_pem.as_bytes().to_vec()))
        .expect("a byte string serialises");
    let ha = "high-availability-config.resources.gardener.cloud";
    serde_json::json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "gardener-resource-manager"},
        "webhooks": [{
            "name": ha,
            "rules": [
                {"apiGroups": ["apps"], "apiVersions": ["v1"],
                 "resources": ["deployments", "statefulsets"], "operations": ["CREATE", "UPDATE"]},
                {"apiGroups": ["autoscaling"], "apiVersions": ["v2"],
                 "resources": ["horizontalpodautoscalers"], "operations": ["CREATE", "UPDATE"]},
            ],
            "namespaceSelector": {
                "matchLabels": {format!("{ha}/consider"): "true"},
                "matchExpressions": [
                    {"key": "gardener.cloud/role", "operator": "Exists"},
                    {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                     "values": ["kube-system", "kubernetes-dashboard"]},
                ],
            },
            "objectSelector": {"matchExpressions": [
                {"key": format!("{ha}/skip"), "operator": "DoesNotExist"},
            ]},
            "clientConfig": {
                "url": format!("https://127.0.0.1:{port}/webhooks/high-availability-config"),
                "caBundle": ca,
            },
            "admissionReviewVersions": ["v1beta1", "v1"],
            "failurePolicy": "Fail",
            "matchPolicy": "Equivalent",
            "sideEffects": "None",
            "timeoutSeconds": 10,
        }],
    })
    .to_string()
}
