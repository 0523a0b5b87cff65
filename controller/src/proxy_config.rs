//! The shared proxy ConfigMap: every migration's routes on this seed rendered into one isthmus
//! proxy YAML file, and the rule for when a new file counts as rolled out.

use crate::plan::MemberRoute;
use isthmus_config::{
    hash_bytes, AdminConfig, Duration, ListenerConfig, ProxyConfig, RouteConfig, UpstreamConfig,
};
use std::collections::BTreeMap;
use std::net::SocketAddr;

/// Key of the proxy file in the ConfigMap (mounted as `/etc/isthmus/proxy.yaml`).
pub const CONFIG_KEY: &str = "proxy.yaml";

/// Listeners that exist whether or not a migration uses them, so the proxy binds the same
/// ports the LoadBalancer Service forwards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// Admin address inside the pod; the controller reads `/config` from each pod's IP on
    /// this port, so it must not be loopback.
    pub admin: SocketAddr,
    /// `(listener name, port)`.
    pub listeners: Vec<(String, u16)>,
}

impl Layout {
    /// Peer and client listeners for member indices `0..members` plus the VPN listener.
    pub fn standard(
        ports: crate::crd::PortScheme,
        members: u8,
        vpn_port: u16,
        admin: SocketAddr,
    ) -> Self {
        let mut listeners = Vec::new();
        for i in 0..members {
            listeners.push((format!("peer-{}", ports.peer(i)), ports.peer(i)));
            listeners.push((format!("client-{}", ports.client(i)), ports.client(i)));
        }
        listeners.push((format!("vpn-{vpn_port}"), vpn_port));
        Self { admin, listeners }
    }
}

/// Rendering failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RenderError {
    /// YAML serialisation failed.
    #[error("cannot serialise the proxy config: {0}")]
    Yaml(String),
}

/// The rendered file and its SHA-256 (what each proxy's `/config` reports once loaded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    /// YAML text.
    pub text: String,
    /// `hash_bytes(text)`.
    pub hash: String,
}

/// Renders `routes` of every migration into one proxy config; output is sorted so equal inputs
/// give byte-identical files (and so identical hashes).
pub fn render(layout: &Layout, routes: &[MemberRoute]) -> Result<Rendered, RenderError> {
    let mut listeners: BTreeMap<(u16, String), Vec<RouteConfig>> = BTreeMap::new();
    for (name, port) in &layout.listeners {
        listeners.entry((*port, name.clone())).or_default();
    }
    let mut upstreams: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in routes {
        listeners
            .entry((r.port, r.listener.clone()))
            .or_default()
            .push(RouteConfig {
                sni: r.sni.clone(),
                upstream: r.upstream.clone(),
            });
        let eps = upstreams.entry(r.upstream.clone()).or_default();
        if !eps.contains(&r.endpoint) {
            eps.push(r.endpoint.clone());
        }
    }
    let config = ProxyConfig {
        admin: AdminConfig {
            address: layout.admin,
        },
        listeners: listeners
            .into_iter()
            .map(|((port, name), mut routes)| {
                routes.sort_by(|a, b| a.sni.cmp(&b.sni));
                routes.dedup();
                ListenerConfig {
                    name,
                    address: SocketAddr::from(([0, 0, 0, 0], port)),
                    client_hello_timeout: Duration::from_secs(10),
                    max_client_hello_bytes: 16 * 1024,
                    default_upstream: None,
                    reject_with_alert: true,
                    routes,
                }
            })
            .collect(),
        upstreams: upstreams
            .into_iter()
            .map(|(name, endpoints)| UpstreamConfig { name, endpoints })
            .collect(),
        drain_delay: Duration::from_secs(5),
        drain_timeout: Duration::from_secs(30),
        watch_interval: Duration::from_secs(1),
    };
    let body = serde_saphyr::to_string(&config).map_err(|e| RenderError::Yaml(e.to_string()))?;
    let text = format!("# Written by isthmus controller; edits are overwritten.\n{body}");
    let hash = hash_bytes(text.as_bytes());
    Ok(Rendered { text, hash })
}

/// The rollout is complete when at least one proxy pod answered and every pod reports `hash`.
/// A pod that did not answer counts as not rolled out: better to wait than to expose a member
/// through a proxy that cannot route it.
pub fn rolled_out<E>(hash: &str, reports: &[Result<String, E>]) -> bool {
    !reports.is_empty() && reports.iter().all(|r| matches!(r, Ok(h) if h == hash))
}
