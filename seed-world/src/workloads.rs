//! What the controller's per-shoot tunnel server and on-demand load balancer wait for, as
//! stand-ins acting only through the seed's API (without kubelets or a cloud they cannot run
//! here; `tests/cluster.rs` runs both for real on a node):
//! - the Deployment controller with the kubelet: a Deployment's status once its pods are
//!   available (k8s.io/kubernetes v1.34.4 `pkg/controller/deployment/sync.go`,
//!   `calculateStatus`);
//! - the cloud provider's service controller: a LoadBalancer Service's address
//!   (k8s.io/cloud-provider v0.34.4 `controllers/service/controller.go`,
//!   `patchStatus` of `status.loadBalancer`).

use crate::setup::SYSTEM;
use crate::{Error, Result};
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use std::time::Duration;
use tokio::task::JoinHandle;

/// The API of `kind` objects (`group/version` or `v1`) in `ns`.
pub fn api(c: &Client, ns: &str, api_version: &str, kind: &str) -> Api<DynamicObject> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
    Api::namespaced_with(c.clone(), ns, &ar)
}

/// The Deployment `name` of `ns` has its current generation rolled out and one pod available.
pub async fn deployment_available(c: &Client, ns: &str, name: &str) -> Result<()> {
    let deployments = api(c, ns, "apps/v1", "Deployment");
    let what = format!("Deployment {ns}/{name}");
    let d = deployments
        .get(name)
        .await
        .map_err(|e| Error::kube(&what, e))?;
    let status = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "status": {"observedGeneration": d.metadata.generation, "replicas": 1,
                   "updatedReplicas": 1, "readyReplicas": 1, "availableReplicas": 1},
    });
    let pp = PatchParams::apply("deployment-controller-stand-in").force();
    deployments
        .patch_status(name, &pp, &Patch::Apply(status))
        .await
        .map_err(|e| Error::kube(what, e))?;
    Ok(())
}

/// Every LoadBalancer Service of the proxies' namespace without an address gets `address`,
/// until the task is aborted.
pub fn cloud_provider(c: Client, address: &str) -> JoinHandle<()> {
    let address = address.to_owned();
    tokio::spawn(async move {
        let services: Api<Service> = Api::namespaced(c, SYSTEM);
        loop {
            for s in services
                .list(&Default::default())
                .await
                .into_iter()
                .flat_map(|l| l.items)
            {
                let lb = s.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("LoadBalancer");
                let has = s
                    .status
                    .as_ref()
                    .and_then(|s| s.load_balancer.as_ref())
                    .and_then(|l| l.ingress.as_ref())
                    .is_some_and(|i| !i.is_empty());
                if lb && !has {
                    let status = json!({"apiVersion": "v1", "kind": "Service",
                        "status": {"loadBalancer": {"ingress": [{"ip": address}]}}});
                    let pp = PatchParams::apply("cloud-provider-stand-in").force();
                    // A Service deleted meanwhile: the next round sees it gone.
                    let _ = services
                        .patch_status(&s.name_any(), &pp, &Patch::Apply(status))
                        .await;
                }
            }
            // The service controller's informer, as a poll.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}
