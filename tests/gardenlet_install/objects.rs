//! Reading what gardener-resource-manager made, by `apiVersion/Kind/namespace/name` (the
//! harness' and the ManagedResource's way of naming objects).

use kube::api::{Api, DynamicObject, ListParams};
use kube::core::GroupVersionKind;
use kube::discovery::Scope;
use kube::Client;
use serde_json::Value;

/// The API of one `apiVersion/Kind/namespace/name` id, and the object's name.
pub async fn api(client: &Client, id: &str) -> (Api<DynamicObject>, String) {
    let parts: Vec<&str> = id.rsplitn(3, '/').collect();
    let [name, ns, gvk] = parts[..] else {
        panic!("bad id {id}")
    };
    let (api_version, kind) = gvk.rsplit_once('/').unwrap();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let (ar, caps) =
        kube::discovery::pinned_kind(client, &GroupVersionKind::gvk(group, version, kind))
            .await
            .unwrap_or_else(|e| panic!("discovery of {id}: {e}"));
    let api = if caps.scope == Scope::Namespaced {
        Api::namespaced_with(client.clone(), ns, &ar)
    } else {
        Api::all_with(client.clone(), &ar)
    };
    (api, name.to_owned())
}

/// The object as JSON, `None` if it does not exist.
pub async fn get(client: &Client, id: &str) -> Option<Value> {
    let (api, name) = api(client, id).await;
    api.get_opt(&name)
        .await
        .unwrap_or_else(|e| panic!("get {id}: {e}"))
        .map(|o| serde_json::to_value(o).unwrap())
}

/// Every object of `apiVersion/Kind` in `ns`, by name.
pub async fn names(client: &Client, api_version_kind: &str, ns: &str) -> Vec<String> {
    let (api, _) = api(client, &format!("{api_version_kind}/{ns}/x")).await;
    let mut out: Vec<String> = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|o| o.metadata.name)
        .collect();
    out.sort();
    out
}

/// The status of condition `type_` of an object's `status.conditions`.
pub fn condition<'a>(obj: &'a Value, type_: &str) -> Option<&'a str> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)?["status"]
        .as_str()
}

/// The ManagedResource's `status.resources` as ids.
pub fn managed(mr: &Value) -> Vec<String> {
    let mut out: Vec<String> = mr["status"]["resources"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|r| {
                    format!(
                        "{}/{}/{}/{}",
                        r["apiVersion"].as_str().unwrap(),
                        r["kind"].as_str().unwrap(),
                        r["namespace"].as_str().unwrap_or(""),
                        r["name"].as_str().unwrap()
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}
