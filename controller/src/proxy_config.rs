//! The shared proxy ConfigMap: every migration's routes on this seed rendered into one isthmus
//! proxy YAML file, and the rule for when a new file counts as rolled out.

use crate::plan::MemberRoute;
use isthmus_config::hash_bytes;
use serde::Serialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;

// The file is written from these minimal shapes rather than `isthmus_config::ProxyConfig`:
// only the fields the controller decides are written, every other setting takes the proxy
// schema's default, and new fields in the proxy schema cannot break this crate. The tests parse
// the output with the proxy's own loader.
#[derive(Serialize)]
struct File {
    admin: Admin,
    listeners: Vec<Listener>,
    upstreams: Vec<Upstream>,
}
#[derive(Serialize)]
struct Admin {
    address: SocketAddr,
}
#[derive(Serialize)]
struct Listener {
    name: String,
    address: SocketAddr,
    #[serde(skip_serializing_if = "Option::is_none")]
    proxy_protocol: Option<&'static str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    trusted_proxies: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    allowed_sources: Vec<String>,
    routes: Vec<Route>,
}
#[derive(Serialize, PartialEq, Eq, PartialOrd, Ord)]
struct Route {
    sni: String,
    upstream: String,
}
#[derive(Serialize)]
struct Upstream {
    name: String,
    endpoints: Vec<String>,
}

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
    /// The load balancer's addresses when it sends PROXY protocol headers: every listener
    /// then accepts a header from these peers only (`proxy_protocol: accept`,
    /// `trusted_proxies`). Empty: no PROXY protocol.
    pub trusted_proxies: Vec<String>,
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
        Self {
            admin,
            listeners,
            trusted_proxies: Vec::new(),
        }
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
    let mut listeners: BTreeMap<(u16, String), Vec<Route>> = BTreeMap::new();
    // Per listener: the union of its routes' allowed sources, `None` once a route allows any.
    let mut sources: BTreeMap<(u16, String), Option<Vec<String>>> = BTreeMap::new();
    for (name, port) in &layout.listeners {
        listeners.entry((*port, name.clone())).or_default();
    }
    let mut upstreams: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in routes {
        listeners
            .entry((r.port, r.listener.clone()))
            .or_default()
            .push(Route {
                sni: r.sni.clone(),
                upstream: r.upstream.clone(),
            });
        let key = (r.port, r.listener.clone());
        let entry = sources.entry(key).or_insert_with(|| Some(Vec::new()));
        match (entry.as_mut(), r.allowed_sources.is_empty()) {
            (Some(_), true) => *entry = None,
            (Some(list), false) => list.extend(r.allowed_sources.iter().cloned()),
            (None, _) => {}
        }
        let eps = upstreams.entry(r.upstream.clone()).or_default();
        if !eps.contains(&r.endpoint) {
            eps.push(r.endpoint.clone());
        }
    }
    let file = File {
        admin: Admin {
            address: layout.admin,
        },
        listeners: listeners
            .into_iter()
            .map(|((port, name), mut routes)| {
                routes.sort();
                routes.dedup();
                let mut allowed = sources
                    .get(&(port, name.clone()))
                    .cloned()
                    .flatten()
                    .unwrap_or_default();
                allowed.sort();
                allowed.dedup();
                Listener {
                    name,
                    address: SocketAddr::from(([0, 0, 0, 0], port)),
                    proxy_protocol: (!layout.trusted_proxies.is_empty()).then_some("accept"),
                    trusted_proxies: layout.trusted_proxies.clone(),
                    allowed_sources: allowed,
                    routes,
                }
            })
            .collect(),
        upstreams: upstreams
            .into_iter()
            .map(|(name, endpoints)| Upstream { name, endpoints })
            .collect(),
    };
    let body = serde_saphyr::to_string(&file).map_err(|e| RenderError::Yaml(e.to_string()))?;
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
