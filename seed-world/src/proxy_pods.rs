//! The proxy pods' `/config/hash` as a stand-in (the kubelet delivering the route ConfigMap to
//! a real proxy pod, and the proxy answering, need a node: `tests/cluster.rs` runs them; the
//! lab runs real proxies on a kubelet stand-in of its own): the hash of the ConfigMap the
//! controller wrote, once the proxy's own loader accepts it (a real proxy refuses a file its
//! loader rejects, and keeps serving the old hash).

use crate::setup::SYSTEM;
use futures::future::BoxFuture;
use isthmus_controller::kube_adapter::probe::{HashFetcher, ProbeError};
use isthmus_controller::proxy_config::CONFIG_KEY;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::Client;
use std::net::SocketAddr;

/// The route ConfigMap the controller writes (`isthmus controller --proxy-configmap`).
pub const ROUTES: &str = "isthmus-proxy-routes";

/// Every proxy pod's answer, read from the seed's API as `admin`.
pub struct KubeletAndProxyStandIn {
    pub admin: Client,
}

impl std::fmt::Debug for KubeletAndProxyStandIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KubeletAndProxyStandIn")
    }
}

impl HashFetcher for KubeletAndProxyStandIn {
    fn fetch(&self, addr: SocketAddr) -> BoxFuture<'_, Result<String, ProbeError>> {
        Box::pin(async move {
            let cms: Api<ConfigMap> = Api::namespaced(self.admin.clone(), SYSTEM);
            let cm = cms
                .get(ROUTES)
                .await
                .map_err(|e| ProbeError::Http(addr, e.to_string()))?;
            let text = cm
                .data
                .and_then(|d| d.get(CONFIG_KEY).cloned())
                .ok_or_else(|| ProbeError::Body(addr, "no proxy.json".into()))?;
            isthmus_config::parse_proxy(CONFIG_KEY, &text)
                .map_err(|e| ProbeError::Body(addr, e.to_string()))?;
            Ok(isthmus_config::hash_bytes(text.as_bytes()))
        })
    }
}
