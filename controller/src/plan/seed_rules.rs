//! What a spec is checked against beyond itself: the settings of this seed's controller (its
//! flags). The CRD's CEL rules see only the defaults (admin port 9901, the member listeners
//! of up to 10 members, VPN port 8443); these see the flags the proxies actually run with.

use super::names::routes;
use crate::crd::EtcdMigrationSpec;
use std::collections::BTreeSet;

/// The controller's settings a spec must fit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeedRules {
    /// The proxy's admin port (`--proxy-admin-port`): the admin socket and a listener on one
    /// port would share the kubelet's probes.
    pub admin_port: u16,
    /// `(name, port)` of the listeners every proxy binds (the rendered layout: `--members`,
    /// `--vpn-port`): a migration's listener on one of those ports must be that listener,
    /// or the proxies would refuse the whole file.
    pub listeners: Vec<(String, u16)>,
    /// The cluster's DNS domain (`--cluster-domain`, default `cluster.local`): `vpn.target`
    /// is exactly `<service>.<namespace>.svc.<domain>:<port>`, which the proxy pods'
    /// resolver answers from the cluster's own Services.
    pub cluster_domain: String,
    /// Domains `vpn.dnsName` may be under besides the spec's `internalDomain`
    /// (`--vpn-dns-parent`): the VPN name is a public SNI route, not any name a spec likes.
    pub vpn_dns_parents: Vec<String>,
    /// `agents.trusted_proxies` of the tunnel servers this controller runs for a
    /// `spec.vpn.server` (`--tunnel-trusted-proxies`); `None`: it runs none (no
    /// `--tunnel-image`).
    pub tunnel_servers: Option<Vec<String>>,
}

/// The default of `--cluster-domain`.
pub const DEFAULT_CLUSTER_DOMAIN: &str = "cluster.local";

impl Default for SeedRules {
    /// The controller's defaults: admin port 9901, three members, VPN port 8443.
    fn default() -> Self {
        let listeners = super::names::standard_listeners(Default::default(), 3, 8443);
        Self::new(9901, listeners)
    }
}

impl SeedRules {
    /// The rules of a controller whose proxies bind `listeners` and the admin port, with the
    /// default cluster domain and no further VPN name parents.
    pub fn new(admin_port: u16, listeners: Vec<(String, u16)>) -> Self {
        Self {
            admin_port,
            listeners,
            cluster_domain: DEFAULT_CLUSTER_DOMAIN.into(),
            vpn_dns_parents: Vec::new(),
            tunnel_servers: None,
        }
    }

    /// Reports each problem of `spec` in `namespace` to `bad` (field, reason, message), none
    /// for a field in `named` (one reason per field: those already refused).
    pub(super) fn check(
        &self,
        spec: &EtcdMigrationSpec,
        namespace: &str,
        named: &BTreeSet<String>,
        bad: &mut impl FnMut(String, &'static str, String),
    ) {
        self.vpn_name(spec, bad);
        self.tunnel_server(spec, namespace, named, bad);
        let mut seen = BTreeSet::new();
        for r in routes(spec, namespace, true) {
            let field = match (r.listener.starts_with("vpn-"), &spec.seed_ingress) {
                (true, _) => "spec.vpn.port",
                (false, None) => "spec.ports",
                (false, Some(_)) => "spec.seedIngress",
            };
            if named.contains(field) || !seen.insert((field, r.port)) {
                continue;
            }
            let other = self
                .listeners
                .iter()
                .find(|(name, port)| *port == r.port && *name != r.listener);
            let message = if r.port == self.admin_port {
                format!(
                    "{} is the proxy's admin port (--proxy-admin-port): the kubelet's probes would be spread over a TLS listener",
                    r.port
                )
            } else if let Some((name, _)) = other {
                format!(
                    "{} is the port of the listener {name:?} every proxy binds: a listener {:?} on it would make the proxies refuse the seed's routes",
                    r.port, r.listener
                )
            } else {
                continue;
            };
            bad(field.into(), "PortConflict", message);
        }
    }

    /// `vpn.dnsName` is under the spec's internal domain or a configured parent.
    fn vpn_name(
        &self,
        spec: &EtcdMigrationSpec,
        bad: &mut impl FnMut(String, &'static str, String),
    ) {
        let Some(vpn) = &spec.vpn else { return };
        let parents: Vec<&str> = std::iter::once(spec.internal_domain.as_str())
            .chain(self.vpn_dns_parents.iter().map(String::as_str))
            .collect();
        let under = |p: &&str| {
            vpn.dns_name
                .strip_suffix(*p)
                .is_some_and(|rest| rest.len() > 1 && rest.ends_with('.'))
        };
        if !parents.iter().any(under) {
            bad(
                "spec.vpn.dnsName".into(),
                "VpnNameOutsideDomain",
                format!(
                    "{:?} is under none of {} (spec.internalDomain, --vpn-dns-parent): the VPN name is a public route of the seed's proxies",
                    vpn.dns_name,
                    parents.join(", ")
                ),
            );
        }
    }
}
