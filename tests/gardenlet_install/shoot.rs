//! A shoot namespace's side of the install: the Service the controller makes there for a
//! migration, and whether the resource manager lets an extension namespace's proxies out to
//! it.

use super::objects::{get, names};
use isthmus_testkit::KubeApiServer;
use serde_json::Value;
use std::time::{Duration, Instant};

/// The Service the controller makes in the migration's namespace (`isthmus_controller::network`)
/// with the flags the applied controller Deployment carries.
pub fn etcd_service(controller: &Value, migration: &Value) -> Value {
    let args: Vec<&str> = controller["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let flag = |name: &str| {
        let prefix = format!("--{name}=");
        args.iter()
            .find_map(|a| a.strip_prefix(prefix.as_str()))
            .unwrap_or_else(|| panic!("no {prefix} in {args:?}"))
    };
    let labels = flag("proxy-namespace-labels")
        .split(',')
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap();
            (k.to_owned(), v.to_owned())
        })
        .collect();
    let user = isthmus_controller::network::EtcdUser {
        name: migration["metadata"]["name"].as_str().unwrap().to_owned(),
        uid: migration["metadata"]["uid"].as_str().unwrap().to_owned(),
        pod_labels: [("app".to_owned(), "etcd-statefulset".to_owned())].into(),
    };
    isthmus_controller::network::etcd_service(
        migration["metadata"]["namespace"].as_str().unwrap(),
        &[user],
        &labels,
        flag("shoot-alias"),
    )
    .unwrap()
}

/// Puts a pod with the proxy's egress label into `ns` (with the ServiceAccount it needs; no
/// node runs it) and waits until the resource manager has let it out to the shoot's
/// `isthmus-etcd` Service: the egress policy's name.
pub async fn proxies_admitted(server: &KubeApiServer, admin: &kube::Client, ns: &str) -> String {
    let label = "networking.resources.gardener.cloud/to-all-shoots-isthmus-etcd-tcp-2379";
    server
        .apply_yaml_str(&format!(
            "apiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: default, namespace: {ns}}}\n---\n\
             apiVersion: v1\nkind: Pod\nmetadata: {{name: proxy-probe, namespace: {ns}, labels: {{{label}: allowed}}}}\n\
             spec: {{automountServiceAccountToken: false, containers: [{{name: c, image: probe}}]}}\n"
        ))
        .await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let all = names(admin, "networking.k8s.io/v1/NetworkPolicy", ns).await;
        if let Some(p) = all
            .iter()
            .find(|p| p.starts_with("egress-to-") && p.contains("isthmus-etcd-tcp-2379"))
        {
            let policy = get(
                admin,
                &format!("networking.k8s.io/v1/NetworkPolicy/{ns}/{p}"),
            )
            .await
            .unwrap();
            assert_eq!(
                policy["spec"]["podSelector"]["matchLabels"][label], "allowed",
                "{policy:#}"
            );
            return p.clone();
        }
        assert!(
            Instant::now() < deadline,
            "no egress policy to the shoot's isthmus-etcd in {ns} after 60 s: {all:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
