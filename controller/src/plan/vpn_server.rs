//! What a spec asking for a tunnel server (`spec.vpn.server`) must fit: a controller that runs
//! them (`--tunnel-image`), proxies the server can trust when they send a PROXY v2 header, a
//! configuration the server's own loader takes, endpoints whose clients cannot pass for each
//! other, and a VPN route that leads to that server.

use super::seed_rules::SeedRules;
use crate::crd::{EtcdMigrationSpec, ProxyProtocol, Role};
use crate::tunnel_server::{server_yaml, AGENTS_PORT, NAME};
use std::collections::BTreeSet;

impl SeedRules {
    /// Reports the problems of `spec.vpn.server` to `bad`, none for a field in `named`.
    pub(super) fn tunnel_server(
        &self,
        spec: &EtcdMigrationSpec,
        namespace: &str,
        named: &BTreeSet<String>,
        bad: &mut impl FnMut(String, &'static str, String),
    ) {
        let Some(vpn) = &spec.vpn else { return };
        let Some(server) = &vpn.server else { return };
        if spec.role != Role::Destination {
            bad(
                "spec.vpn.server".into(),
                "UnexpectedField",
                "the temporary VPN's tunnel server runs on the destination seed only".into(),
            );
            return;
        }
        let Some(trusted) = &self.tunnel_servers else {
            bad(
                "spec.vpn.server".into(),
                "TunnelServersDisabled",
                "this seed's controller runs no tunnel servers (no --tunnel-image): leave \
                 spec.vpn.server out and name a server someone else runs in spec.vpn.target"
                    .into(),
            );
            return;
        };
        if vpn.proxy_protocol == ProxyProtocol::V2 && trusted.is_empty() {
            bad(
                "spec.vpn.proxyProtocol".into(),
                "NoTrustedProxies",
                "v2: the proxies send a PROXY v2 header, which the tunnel server refuses from \
                 proxies it does not trust, and this seed's controller lists none \
                 (--tunnel-trusted-proxies, the seed's pod network)"
                    .into(),
            );
        }
        let (a, c) = (&server.agents, &server.connect);
        let shared = a.client_names.iter().find(|n| c.client_names.contains(n));
        if let (true, Some(n)) = (a.client_ca == c.client_ca, shared) {
            bad(
                "spec.vpn.server.connect.clientNames".into(),
                "RolesNotApart",
                format!(
                    "{n:?} is an agent's name too, and both endpoints trust the same CA: an \
                     agent's certificate would open the CONNECT front into the shoot's networks"
                ),
            );
        }
        // The wildcard is the controller's; either family loads the same.
        let any = std::net::IpAddr::from([0, 0, 0, 0]);
        if let Err(e) = server_yaml(server, trusted, any) {
            bad("spec.vpn.server".into(), "ServerConfigRefused", e.0);
        }
        let want = format!(
            "{NAME}.{namespace}.svc.{}:{AGENTS_PORT}",
            self.cluster_domain
        );
        if !named.contains("spec.vpn.target") && vpn.target != want {
            bad(
                "spec.vpn.target".into(),
                "TargetNotTunnelServer",
                format!(
                    "{:?}: with spec.vpn.server the route leads to the server this controller runs, {want}",
                    vpn.target
                ),
            );
        }
    }
}
