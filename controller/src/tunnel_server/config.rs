//! The server's `server.yaml` (tunnel/README.md): both endpoints with the spec's
//! certificates and client names, `agents.trusted_proxies` = the seed's proxies (their PROXY
//! v2 header, the VPN route's default, names each agent), every listener on the wildcard the
//! controller listens on (`::` on a dual-stack or IPv6 seed: one socket for both families,
//! as the proxies do), admin there too for the kubelet's probes and the shoot's Prometheus.
//! Checked with the server's own loader.

use super::{ConfigError, ADMIN_PORT, AGENTS_PORT, CONNECT_PORT};
use crate::crd::{TunnelEndpoint, TunnelServerSpec};
use isthmus_config::TunnelServerConfig;
use serde_json::json;
use std::net::{IpAddr, SocketAddr};

/// The ConfigMap's key (and the file the container reads).
pub const CONFIG_KEY: &str = "server.yaml";
/// Where each endpoint's certificate, key and client CA are mounted.
pub(super) const AGENTS_TLS: &str = "/etc/isthmus/tls/agents";
/// See [`AGENTS_TLS`].
pub(super) const CONNECT_TLS: &str = "/etc/isthmus/tls/connect";

/// The configuration of `server` trusting `trusted` proxies' PROXY headers, listening on the
/// wildcard `listen`.
pub fn server_yaml(
    server: &TunnelServerSpec,
    trusted: &[String],
    listen: IpAddr,
) -> Result<String, ConfigError> {
    let at = |port: u16| SocketAddr::new(listen, port).to_string();
    let tls = |dir: &str, e: &TunnelEndpoint| {
        json!({
            "cert": format!("{dir}/tls.crt"),
            "key": format!("{dir}/tls.key"),
            "client_ca": format!("{dir}/ca.crt"),
            "allowed_client_names": e.client_names,
        })
    };
    let mut agents = json!({
        "address": at(AGENTS_PORT),
        "tls": tls(AGENTS_TLS, &server.agents),
    });
    if !trusted.is_empty() {
        agents["trusted_proxies"] = json!(trusted);
    }
    let body = json!({
        "agents": agents,
        "connect": {
            "address": at(CONNECT_PORT),
            "tls": tls(CONNECT_TLS, &server.connect),
        },
        "admin": {"address": at(ADMIN_PORT)},
    });
    let yaml = serde_saphyr::to_string(&body).map_err(|e| ConfigError(e.to_string()))?;
    let text = format!(
        "# Written by the isthmus controller from the EtcdMigration's spec.vpn.server.\n{yaml}"
    );
    isthmus_config::parse::<TunnelServerConfig>(CONFIG_KEY, &text)
        .map_err(|e| ConfigError(e.to_string()))?;
    Ok(text)
}
