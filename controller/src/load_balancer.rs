//! The proxies' LoadBalancer Service made on demand (the chart's `proxy.service.mode:
//! onDemand`): it exists only while a migration of the seed needs an exposure, since
//! operators pay for and push back on every load balancer of a seed (gardener#12626). The
//! chart renders the Service as a template into a ConfigMap; the controller applies it with
//! the first migration that needs it and deletes it once none does. The planner already
//! waits for its address (`spec.loadBalancer`) before any `DNSRecord` is written, so a new
//! load balancer's address is known before a name points at it.
//!
//! It must never delete a Service it did not make: only one carrying [`ON_DEMAND_LABEL`].

use crate::crd::{EtcdMigration, Step};
use crate::plan::{validate, SeedRules};
use kube::ResourceExt;
use serde_json::{json, Value};

/// The ConfigMap key of the template.
pub const TEMPLATE_KEY: &str = "service.yaml";
/// The label on a Service the controller made from the template (only such a one is deleted).
pub const ON_DEMAND_LABEL: &str = "isthmus.dev/on-demand";

/// The template is not a LoadBalancer Service.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the load balancer template ({TEMPLATE_KEY}) is not a LoadBalancer Service: {0}")]
pub struct TemplateError(String);

/// Whether `m` needs the load balancer: from its creation until its last step is reached
/// with nothing exposed any more (`Complete` or an accepted `Abort`), unless it is being
/// deleted (its cleanup removes routes and records; neither needs the address) or its spec
/// is refused (nothing is planned for it).
pub fn needs(m: &EtcdMigration, rules: &SeedRules) -> bool {
    if m.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let ns = m.namespace().unwrap_or_default();
    if !validate(&m.spec, &ns, rules).is_empty() {
        return false;
    }
    let Some(s) = &m.status else { return true };
    let done = matches!(m.spec.step, Step::Complete | Step::Abort)
        && s.step == Some(m.spec.step)
        && s.step_ready
        && s.exposed_members.is_empty();
    !done
}

/// The server-side-apply body of the template `text` in `namespace`, and its name.
pub fn service(text: &str, namespace: &str) -> Result<(String, Value), TemplateError> {
    let mut svc: Value = serde_saphyr::from_str(text).map_err(|e| TemplateError(e.to_string()))?;
    if svc["apiVersion"] != "v1" || svc["kind"] != "Service" {
        return Err(TemplateError(format!(
            "apiVersion {} kind {}",
            svc["apiVersion"], svc["kind"]
        )));
    }
    if svc["spec"]["type"] != "LoadBalancer" {
        return Err(TemplateError(format!("spec.type {}", svc["spec"]["type"])));
    }
    let name = svc["metadata"]["name"]
        .as_str()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| TemplateError("no metadata.name".into()))?
        .to_string();
    let meta = &mut svc["metadata"];
    meta["namespace"] = json!(namespace);
    if !meta["labels"].is_object() {
        meta["labels"] = json!({});
    }
    meta["labels"][ON_DEMAND_LABEL] = json!("true");
    meta["labels"]["app.kubernetes.io/managed-by"] = json!("isthmus-controller");
    if let Some(o) = svc.as_object_mut() {
        o.remove("status");
    }
    Ok((name, svc))
}
