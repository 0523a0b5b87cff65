//! The DNS provider stand-in: a Gardener DNS extension (a `DNSRecord` controller, which needs
//! a cloud's DNS) as its generic reconciler acts (gardener v1.149.3
//! `extensions/pkg/controller/dnsrecord/reconciler.go`, wrapped by
//! `pkg/controllerutils/reconciler/operation_annotation_wrapper.go`): for a record with a
//! generation it has not acted on, or carrying `gardener.cloud/operation: reconcile`, it first
//! takes the request away, then writes the record into its zone, then reports
//! `status.observedGeneration` and `lastOperation` `Succeeded` (`extensions/pkg/controller/
//! status.go`, `SuccessCustom`). The zone is the caller's: nothing to write in the controller's
//! tests ([`DnsProviderTask`]), both seeds' hosts files in the lab.

use crate::error::{Error, Result};
use isthmus_controller::gardener::{dnsrecord_observe, dnsrecord_resource};
use isthmus_controller::plan::{DnsRecordObs, OPERATION};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::Client;
use serde_json::json;
use std::time::Duration;
use tokio::task::JoinHandle;

/// One `DNSRecord` as the provider reads it.
#[derive(Debug, Clone)]
pub struct Record {
    /// The object's name.
    pub name: String,
    pub obs: DnsRecordObs,
}

impl Record {
    /// The provider has something to do: a generation it has not acted on, or a request.
    pub fn due(&self) -> bool {
        !self.obs.ready() || self.requested()
    }

    fn requested(&self) -> bool {
        self.obs.operation.as_deref() == Some("reconcile")
    }
}

/// The `DNSRecord`s `api` lists.
pub async fn records(api: &Api<DynamicObject>) -> Result<Vec<Record>> {
    let list = api
        .list(&Default::default())
        .await
        .map_err(|e| Error::kube("DNS provider stand-in: listing DNSRecords", e))?;
    let mut out = Vec::new();
    for r in list.items {
        let v = serde_json::to_value(&r).map_err(|e| Error::State(e.to_string()))?;
        let name = r.metadata.name.clone().unwrap_or_default();
        out.push(Record {
            name,
            obs: dnsrecord_observe(&v),
        });
    }
    Ok(out)
}

/// Takes `r`'s reconcile request away, before the provider acts on it.
pub async fn take_request(api: &Api<DynamicObject>, r: &Record) -> Result<()> {
    if !r.requested() {
        return Ok(());
    }
    let drop = json!({"metadata": {"annotations": {OPERATION: null}}});
    api.patch(&r.name, &PatchParams::default(), &Patch::Merge(drop))
        .await
        .map_err(|e| Error::kube(format!("DNS provider stand-in: {} annotation", r.name), e))?;
    Ok(())
}

/// Reports `r`'s generation written into the zone (`how`).
pub async fn succeeded(api: &Api<DynamicObject>, r: &Record, how: &str) -> Result<()> {
    let status = json!({
        "apiVersion": "extensions.gardener.cloud/v1alpha1", "kind": "DNSRecord",
        "status": {"observedGeneration": r.obs.generation, "lastOperation": {
            "type": "Reconcile", "state": "Succeeded", "progress": 100,
            "description": format!("Successfully reconciled DNSRecord ({how})"),
            "lastUpdateTime": crate::now()}},
    });
    let pp = PatchParams::apply("dns-provider-stand-in").force();
    api.patch_status(&r.name, &pp, &Patch::Apply(status))
        .await
        .map_err(|e| Error::kube(format!("DNS provider stand-in: {} status", r.name), e))?;
    Ok(())
}

/// One pass over a zone that needs no writing: every due record's request taken, then its
/// generation reported written.
pub async fn pass(api: &Api<DynamicObject>) -> Result<()> {
    for r in records(api).await?.into_iter().filter(Record::due) {
        take_request(api, &r).await?;
        succeeded(api, &r, "stand-in, no zone").await?;
    }
    Ok(())
}

/// The provider for one namespace of a seed in a task of its own, a pass every 100 ms;
/// stopped on drop.
#[derive(Debug)]
pub struct DnsProviderTask(JoinHandle<()>);

impl DnsProviderTask {
    /// Starts it for `namespace`, as `admin`.
    pub fn spawn(admin: Client, namespace: &str) -> Self {
        let api = Api::namespaced_with(admin, namespace, &dnsrecord_resource());
        Self(tokio::spawn(async move {
            loop {
                if let Err(e) = pass(&api).await {
                    eprintln!("{e}");
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }))
    }
}

impl Drop for DnsProviderTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}
