//! Server-side apply of one manifest, as an installer does it: the kind found through
//! discovery (a CRD applied a moment ago takes a moment to be served), field validation
//! `Strict`, the apply forced for its field manager, and a `CustomResourceDefinition` waited
//! for until `Established`. The one apply of the kube-apiserver fixture ([`crate::kube`]), the
//! seed world's set-up and the lab's seeds.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::Scope;
use kube::Client;
use serde_json::Value;
use std::time::{Duration, Instant};

/// How long a kind may take to be discoverable, and a CRD to be established.
const SERVED: Duration = Duration::from_secs(30);

/// Why a manifest was not applied.
#[derive(Debug)]
pub struct ApplyError(pub String);

impl std::fmt::Display for ApplyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ApplyError {}

/// Server-side applies `doc` with `client` as field manager `manager`; returns
/// `Kind/namespace/name` (`Kind/name` for cluster-scoped objects).
pub async fn try_apply(client: &Client, doc: &Value, manager: &str) -> Result<String, ApplyError> {
    let api_version = doc["apiVersion"].as_str().unwrap_or_default();
    let kind = doc["kind"].as_str().unwrap_or_default();
    let name = doc["metadata"]["name"].as_str().unwrap_or_default();
    if api_version.is_empty() || kind.is_empty() || name.is_empty() {
        return Err(ApplyError(format!(
            "document without apiVersion, kind or metadata.name: {doc}"
        )));
    }
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let deadline = Instant::now() + SERVED;
    let (ar, caps) = loop {
        match kube::discovery::pinned_kind(client, &gvk).await {
            Ok(found) => break found,
            Err(e) if Instant::now() > deadline => {
                return Err(ApplyError(format!(
                    "discovery of {api_version} {kind}: {e}"
                )))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    let (api, id): (Api<DynamicObject>, String) = if caps.scope == Scope::Namespaced {
        let ns = doc["metadata"]["namespace"].as_str().unwrap_or("default");
        (
            Api::namespaced_with(client.clone(), ns, &ar),
            format!("{kind}/{ns}/{name}"),
        )
    } else {
        (Api::all_with(client.clone(), &ar), format!("{kind}/{name}"))
    };
    let pp = PatchParams::apply(manager).force().validation_strict();
    api.patch(name, &pp, &Patch::Apply(doc))
        .await
        .map_err(|e| ApplyError(format!("applying {id}: {e}")))?;
    if kind == "CustomResourceDefinition" && group == "apiextensions.k8s.io" {
        established(client, name, &id).await?;
    }
    Ok(id)
}

/// Every document of a (multi-document) YAML text, applied in order with [`try_apply`].
pub async fn try_apply_yaml(
    client: &Client,
    yaml: &str,
    manager: &str,
) -> Result<Vec<String>, ApplyError> {
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(yaml).map_err(|e| ApplyError(format!("parsing YAML: {e}")))?;
    let mut applied = Vec::new();
    for doc in docs
        .iter()
        .filter(|d| d.as_object().is_some_and(|o| !o.is_empty()))
    {
        applied.push(try_apply(client, doc, manager).await?);
    }
    Ok(applied)
}

async fn established(client: &Client, name: &str, id: &str) -> Result<(), ApplyError> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let deadline = Instant::now() + SERVED;
    loop {
        let crd = crds.get(name).await.ok();
        let conditions = crd.and_then(|c| c.status).and_then(|s| s.conditions);
        if conditions
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(ApplyError(format!("{id} not Established after {SERVED:?}")));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
