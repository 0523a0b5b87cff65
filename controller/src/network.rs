//! The Service gardener-resource-manager turns into the NetworkPolicies that let the seed's
//! proxies reach a migrating shoot's etcd members: `isthmus-etcd` in the shoot namespace,
//! selecting the migrating `Etcd`s' pods, ports 2379 and 2380, annotated with the proxies'
//! namespace (`namespace-selectors`) and the alias their egress labels name
//! (`to-all-shoots-isthmus-etcd-tcp-2379`, set by the chart). Seeds are deny-all in shoot
//! namespaces; without this Service the proxy's connections to the members are dropped.
//!
//! One Service per namespace, whatever the number of migrations there: the proxy pods' labels
//! name one Service. It selects the labels every migrating `Etcd`'s pods share, owned by every
//! migration that needs it (ownerReferences, so it goes with the last of them). It must never
//! select more than etcd pods: a selector that would be empty (every pod of the namespace) is
//! never written.

use serde_json::{json, Value};
use std::collections::BTreeMap;

/// Name of the Service (the proxy pods' egress labels and gardenlet's grant name it).
pub const ETCD_SERVICE: &str = "isthmus-etcd";
/// The alias of shoot namespaces in Gardener's resource manager (`all-shoots`).
pub const DEFAULT_SHOOT_ALIAS: &str = "all-shoots";
/// gardener-resource-manager's annotation: the namespaces whose pods may reach the Service's.
pub const NAMESPACE_SELECTORS: &str = "networking.resources.gardener.cloud/namespace-selectors";
/// gardener-resource-manager's annotation: the alias in the peers' labels
/// (`networking.resources.gardener.cloud/to-<alias>-<service>-tcp-<port>=allowed`).
pub const NAMESPACE_ALIAS: &str =
    "networking.resources.gardener.cloud/pod-label-selector-namespace-alias";

/// A migration that needs the Service: its routes lead to its `Etcd`'s members.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdUser {
    /// The `EtcdMigration`'s name.
    pub name: String,
    /// Its `metadata.uid` (the ownerReference).
    pub uid: String,
    /// Its `Etcd`'s pod labels (`spec.labels`).
    pub pod_labels: BTreeMap<String, String>,
}

/// The labels every user's pods carry (with the same value): the Service's selector.
pub fn selector(users: &[EtcdUser]) -> BTreeMap<String, String> {
    let Some((first, rest)) = users.split_first() else {
        return BTreeMap::new();
    };
    first
        .pod_labels
        .iter()
        .filter(|(k, v)| rest.iter().all(|u| u.pod_labels.get(*k) == Some(*v)))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The labels that select the proxies' namespace by its name (`kubernetes.io/metadata.name`),
/// for installs whose namespace keeps its name. Under gardenlet the namespace is
/// `extension-<installation>`, renamed with every install, and selected by its registration
/// label instead (the chart's `--proxy-namespace-labels`).
pub fn namespace_name_labels(namespace: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(
        "kubernetes.io/metadata.name".to_string(),
        namespace.to_string(),
    )])
}

/// The server-side-apply body of the Service in `namespace` for `users`, admitting the pods
/// of the namespaces labelled `proxy_namespace_labels` that carry `alias`' labels; `None`
/// when there is nobody to serve or the users' pods share no label (the selector would take
/// every pod of the namespace).
pub fn etcd_service(
    namespace: &str,
    users: &[EtcdUser],
    proxy_namespace_labels: &BTreeMap<String, String>,
    alias: &str,
) -> Option<Value> {
    let selector = selector(users);
    if selector.is_empty() || proxy_namespace_labels.is_empty() {
        return None;
    }
    let peers = json!([{"matchLabels": proxy_namespace_labels}]);
    let owners: Vec<Value> = users
        .iter()
        .map(|u| {
            json!({
                "apiVersion": "isthmus.dev/v1alpha1", "kind": "EtcdMigration",
                "name": u.name, "uid": u.uid,
            })
        })
        .collect();
    Some(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": ETCD_SERVICE,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/part-of": "isthmus"},
            "annotations": {
                NAMESPACE_SELECTORS: peers.to_string(),
                NAMESPACE_ALIAS: alias,
            },
            "ownerReferences": owners,
        },
        "spec": {
            // Only a trigger for the resource manager: no cluster IP is needed.
            "clusterIP": "None",
            "selector": selector,
            "ports": [
                {"name": "client", "port": 2379, "targetPort": 2379, "protocol": "TCP"},
                {"name": "peer", "port": 2380, "targetPort": 2380, "protocol": "TCP"},
            ],
        },
    }))
}

/// An `Etcd`'s pod labels: its `spec.labels` (etcd-druid puts them on every member pod).
pub fn pod_labels(etcd_spec: &Value) -> BTreeMap<String, String> {
    etcd_spec["labels"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str, labels: &[(&str, &str)]) -> EtcdUser {
        EtcdUser {
            name: name.into(),
            uid: format!("uid-{name}"),
            pod_labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn the_selector_is_what_every_users_pods_share() {
        let main = user("main", &[("app", "etcd-statefulset"), ("role", "main")]);
        let events = user("events", &[("app", "etcd-statefulset"), ("role", "events")]);
        let s = etcd_service(
            "shoot--a",
            std::slice::from_ref(&main),
            &namespace_name_labels("extension-isthmus"),
            "all-shoots",
        )
        .unwrap();
        assert_eq!(
            s["spec"]["selector"],
            json!({"app": "etcd-statefulset", "role": "main"})
        );
        assert_eq!(
            s["metadata"]["annotations"][NAMESPACE_SELECTORS],
            r#"[{"matchLabels":{"kubernetes.io/metadata.name":"extension-isthmus"}}]"#
        );
        let registration = BTreeMap::from([(
            "controllerregistration.core.gardener.cloud/name".to_string(),
            "isthmus".to_string(),
        )]);
        let both = etcd_service("shoot--a", &[main, events], &registration, "all-shoots").unwrap();
        assert_eq!(
            both["metadata"]["annotations"][NAMESPACE_SELECTORS],
            r#"[{"matchLabels":{"controllerregistration.core.gardener.cloud/name":"isthmus"}}]"#
        );
        assert_eq!(both["spec"]["selector"], json!({"app": "etcd-statefulset"}));
        assert_eq!(
            both["metadata"]["ownerReferences"]
                .as_array()
                .unwrap()
                .len(),
            2
        );
    }

    #[test]
    fn never_a_selector_of_every_pod_nor_of_every_namespace() {
        let x = namespace_name_labels("x");
        assert_eq!(etcd_service("ns", &[], &x, "all-shoots"), None);
        let a = user("a", &[("role", "main")]);
        let b = user("b", &[("role", "events")]);
        assert_eq!(etcd_service("ns", &[a, b], &x, "all-shoots"), None);
        assert_eq!(
            etcd_service("ns", &[user("c", &[])], &x, "all-shoots"),
            None
        );
        let c = user("c", &[("role", "main")]);
        assert_eq!(
            etcd_service("ns", &[c], &BTreeMap::new(), "all-shoots"),
            None
        );
    }
}
