//! The shoot's admission webhook as kube-apiserver knows it: an `ExternalName` Service and a
//! `ValidatingWebhookConfiguration` (`failurePolicy: Fail`) on the load's ConfigMaps, reached
//! through the `cluster` egress, the tunnel. Registered before the load starts, and waited
//! for until a write went through it (also by tests/seeds/shoot_load.rs, on real seeds).

use super::load::{self, NAMESPACE};
use crate::error::{Error, Result};
use crate::webhook::WEBHOOK_SERVICE;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::ByteString;
use kube::api::{Api, PostParams};
use kube::Client;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;
use tokio::time::Instant;

/// How long the first write through the webhook may take after the configuration is created
/// (kube-apiserver picks it up from its informer).
const WEBHOOK_READY: Duration = Duration::from_secs(30);

fn kube_err(what: &str, e: kube::Error) -> Error {
    Error::State(format!("shoot API {what}: {e}"))
}

fn json_err(e: serde_json::Error) -> Error {
    Error::State(format!("shoot API object: {e}"))
}

/// Registers the webhook at `hook` (its address in the shoot) whose serving certificate
/// chains to the CA in the file `ca`.
pub async fn register(c: &Client, hook: SocketAddr, ca: &Path) -> Result<()> {
    let pp = PostParams::default();
    // An ExternalName Service: kube-apiserver's service resolver turns it into
    // `https://<address>:<port>`, dialled through the `cluster` egress (the tunnel), where
    // the shoot's agents reach the webhook.
    let (svc_ns, svc_name) = WEBHOOK_SERVICE;
    let svc: Service = serde_json::from_value(serde_json::json!({
        "metadata": { "name": svc_name, "namespace": svc_ns },
        "spec": { "type": "ExternalName", "externalName": hook.ip().to_string(),
                  "ports": [{ "port": hook.port() }] }
    }))
    .map_err(json_err)?;
    Api::<Service>::namespaced(c.clone(), svc_ns)
        .create(&pp, &svc)
        .await
        .map_err(|e| kube_err("webhook service", e))?;
    let ca = std::fs::read(ca).map_err(|e| Error::io(ca.display(), e))?;
    let mut vwc: ValidatingWebhookConfiguration = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "isthmus-lab" },
        "webhooks": [{
            "name": "validate.lab.isthmus.dev",
            "clientConfig": {
                "service": { "namespace": svc_ns, "name": svc_name,
                             "path": "/validate", "port": hook.port() },
            },
            "rules": [{ "operations": ["CREATE", "UPDATE"], "apiGroups": [""],
                        "apiVersions": ["v1"], "resources": ["configmaps"] }],
            "namespaceSelector": { "matchLabels":
                { "kubernetes.io/metadata.name": NAMESPACE } },
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 10,
        }]
    }))
    .map_err(json_err)?;
    // `caBundle` is bytes: k8s-openapi's ByteString encodes it (base64) on the wire.
    for w in vwc.webhooks.iter_mut().flatten() {
        w.client_config.ca_bundle = Some(ByteString(ca.clone()));
    }
    Api::<ValidatingWebhookConfiguration>::all(c.clone())
        .create(&pp, &vwc)
        .await
        .map_err(|e| kube_err("webhook configuration", e))?;
    Ok(())
}

/// Writes probe ConfigMaps until the webhook answered one (`calls`: the reviews it answered
/// so far): until kube-apiserver's informer has the configuration, writes skip the webhook.
pub async fn first_call(c: &Client, calls: impl Fn() -> usize) -> Result<()> {
    let pp = PostParams::default();
    let cms = Api::<ConfigMap>::namespaced(c.clone(), NAMESPACE);
    let deadline = Instant::now() + WEBHOOK_READY;
    let mut n = 0;
    while calls() == 0 {
        if Instant::now() >= deadline {
            return Err(Error::Timeout {
                what: "a write through the webhook (kube-apiserver → tunnel → shoot)".into(),
                after: WEBHOOK_READY,
            });
        }
        n += 1;
        let probe = load::config_map(&format!("probe-{n}"), 0);
        let _ = cms.create(&pp, &probe).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}
