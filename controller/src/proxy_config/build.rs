//! Every migration's routes into one typed proxy configuration, remembering which migration
//! each route and upstream came from, so that a problem at a field path can be traced to the
//! migration that put it there, which is then left out.

use super::ports::{taken, Taken};
use super::{Layout, RenderError};
use crate::crd::ProxyProtocol;
use crate::plan::MemberRoute;
use isthmus_config::{
    AdminConfig, Cidr, Endpoint, ListenerConfig, ProxyConfig, ProxyProtocolMode, RouteConfig,
    Schema, SendProxyProtocol, SniPattern, UnlistedSources, UpstreamConfig,
};
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;

/// One migration's routes; `owner` names it (`namespace/name`) in what is reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// `namespace/name` of the migration.
    pub owner: String,
    /// Its routes.
    pub routes: Vec<MemberRoute>,
}

/// A migration whose routes are not in the file: the first problem they caused, at its field
/// path in the file (`listeners[3].routes[7].sni`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftOut {
    /// `namespace/name` of the migration.
    pub owner: String,
    /// Field path of the problem.
    pub path: String,
    /// What is wrong, as the proxy's loader would say it.
    pub message: String,
}

impl std::fmt::Display for LeftOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}: {}", self.owner, self.path, self.message)
    }
}

/// The configuration built, and who was left out of it.
#[derive(Debug)]
pub(super) struct Built {
    pub config: ProxyConfig,
    pub left_out: Vec<LeftOut>,
    pub conflicts: Vec<Conflict>,
}

/// Indices into the claims: who put a route or an upstream into the file.
type Owners = BTreeSet<usize>;

/// A problem, with the migrations that caused it (`None`: the layout's own part).
struct Problem {
    owners: Option<Owners>,
    path: String,
    message: String,
}

/// Builds the file of every claim, in order of precedence: a route an earlier claim holds is
/// left out (a [`Conflict`]); a claim whose routes cause a problem is left out and the rest
/// built again, so each pass checks the whole file once.
pub(super) fn build(layout: &Layout, claims: &[Claim]) -> Result<Built, RenderError> {
    let mut excluded = Owners::new();
    let mut left_out = Vec::new();
    loop {
        let mut draft = Draft::new(layout, claims, &excluded);
        let conflicts = std::mem::take(&mut draft.conflicts);
        let (config, problems) = draft.typed(layout);
        if problems.is_empty() {
            return Ok(Built {
                config,
                left_out,
                conflicts,
            });
        }
        let mut progress = false;
        for p in problems {
            let Some(owners) = p.owners else {
                return Err(RenderError::Invalid(format!("{}: {}", p.path, p.message)));
            };
            for o in owners {
                if excluded.insert(o) {
                    progress = true;
                    left_out.push(LeftOut {
                        owner: claims[o].owner.clone(),
                        path: p.path.clone(),
                        message: p.message.clone(),
                    });
                }
            }
        }
        if !progress {
            return Err(RenderError::Invalid(
                "the rendered file stays invalid".into(),
            ));
        }
    }
}

/// A route of a migration that an earlier claim (an older migration) holds: the same name on
/// the same listener to another upstream, or the same upstream name to another endpoint (or
/// PROXY header). The
/// older keeps it; the route is left out of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// `namespace/name` of the migration whose route is left out.
    pub owner: String,
    /// `namespace/name` of the migration that holds it.
    pub held_by: String,
    /// The listener.
    pub listener: String,
    /// The route's SNI.
    pub sni: String,
    /// When the older holds the port rather than the route: its listener on that port
    /// (one port, one listener name).
    pub port_held_by: Option<String>,
}

/// Where an upstream goes: its endpoint (text) and the PROXY header it gets.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Target {
    endpoint: String,
    proxy_protocol: ProxyProtocol,
}

impl Target {
    fn of(r: &MemberRoute) -> Self {
        Self {
            endpoint: r.endpoint.clone(),
            proxy_protocol: r.proxy_protocol,
        }
    }
}

/// The file as text values, sorted, each with its owners.
struct Draft {
    /// Per listener `(port, name)`: its routes.
    listeners: BTreeMap<(u16, String), Listener>,
    /// Per upstream name: its endpoint and PROXY header.
    upstreams: BTreeMap<String, (Target, Owners)>,
    conflicts: Vec<Conflict>,
    /// Listeners no proxy could bind, by their owners.
    problems: Vec<Problem>,
}

/// Per route SNI: its upstream, owners and the sources it admits (its migration's
/// `allowedSources`, else the seed's default; empty: none). A listener the layout does not
/// have belongs to the migrations that asked for it.
#[derive(Default)]
struct Listener {
    routes: BTreeMap<String, (String, Owners, BTreeSet<String>)>,
    layout: bool,
    owners: Owners,
}

impl Draft {
    fn new(layout: &Layout, claims: &[Claim], excluded: &Owners) -> Self {
        let mut listeners: BTreeMap<(u16, String), Listener> = BTreeMap::new();
        for (name, port) in &layout.listeners {
            listeners.entry((*port, name.clone())).or_default().layout = true;
        }
        let mut upstreams: BTreeMap<String, (Target, Owners)> = BTreeMap::new();
        let mut conflicts = Vec::new();
        let mut problems = Vec::new();
        for (o, claim) in claims.iter().enumerate() {
            if excluded.contains(&o) {
                continue;
            }
            for r in &claim.routes {
                let on_port = listeners
                    .range((r.port, String::new())..)
                    .take_while(|((port, _), _)| *port == r.port)
                    .map(|((_, name), l)| {
                        (
                            name.as_str(),
                            (!l.layout).then(|| l.owners.first().copied()).flatten(),
                        )
                    });
                match taken(layout.admin.port(), r, o, on_port) {
                    Some(Taken::Problem(message)) => {
                        problems.push(Problem {
                            owners: Some(Owners::from([o])),
                            path: format!("listeners[{}].address", r.listener),
                            message,
                        });
                        continue;
                    }
                    Some(Taken::By(h, name)) => {
                        conflicts.push(Conflict {
                            owner: claim.owner.clone(),
                            held_by: claims[h].owner.clone(),
                            listener: r.listener.clone(),
                            sni: r.sni.clone(),
                            port_held_by: Some(name),
                        });
                        continue;
                    }
                    None => {}
                }
                let l = listeners.entry((r.port, r.listener.clone())).or_default();
                if !l.layout {
                    l.owners.insert(o);
                }
                let route = l.routes.get(&r.sni).map(|(u, owners, _)| (u, owners));
                let upstream = upstreams.get(&r.upstream).map(|(e, owners)| (e, owners));
                let held_by = match (route, upstream) {
                    (Some((u, owners)), _) if *u != r.upstream => owners.first(),
                    (_, Some((t, owners))) if *t != Target::of(r) => owners.first(),
                    _ => None,
                };
                if let Some(&h) = held_by {
                    conflicts.push(Conflict {
                        owner: claim.owner.clone(),
                        held_by: claims[h].owner.clone(),
                        listener: r.listener.clone(),
                        sni: r.sni.clone(),
                        port_held_by: None,
                    });
                    continue;
                }
                let (_, owners, sources) = l
                    .routes
                    .entry(r.sni.clone())
                    .or_insert_with(|| (r.upstream.clone(), Owners::new(), BTreeSet::new()));
                owners.insert(o);
                let listed = if r.allowed_sources.is_empty() {
                    &layout.default_allowed_sources
                } else {
                    &r.allowed_sources
                };
                sources.extend(listed.iter().cloned());
                let (_, owners) = upstreams
                    .entry(r.upstream.clone())
                    .or_insert_with(|| (Target::of(r), Owners::new()));
                owners.insert(o);
            }
        }
        Self {
            listeners,
            upstreams,
            conflicts,
            problems,
        }
    }

    /// The typed configuration and every problem in it, each traced to its owners.
    fn typed(self, layout: &Layout) -> (ProxyConfig, Vec<Problem>) {
        let mut problems = self.problems;
        let trusted = trusted_proxies(layout, &mut problems);
        let mut route_owners = Vec::new();
        let mut listener_owners = Vec::new();
        let mut listeners = Vec::new();
        for (i, ((port, name), l)) in self.listeners.into_iter().enumerate() {
            listener_owners.push((!l.layout).then_some(l.owners));
            let at = format!("listeners[{i}]");
            let mut routes = Vec::new();
            let mut owners_here = Vec::new();
            for (sni, (upstream, owners, sources)) in l.routes {
                let j = routes.len();
                let mut problem = |field: String, message: String| {
                    problems.push(Problem {
                        owners: Some(owners.clone()),
                        path: format!("{at}.routes[{j}].{field}"),
                        message,
                    })
                };
                let sni = match SniPattern::parse(&sni) {
                    Ok(sni) => sni,
                    Err(message) => {
                        problem("sni".into(), message);
                        continue;
                    }
                };
                let mut allowed_sources = Vec::new();
                for (k, text) in sources.iter().enumerate() {
                    match Cidr::parse(text) {
                        Ok(c) => allowed_sources.push(c),
                        Err(message) => problem(format!("allowed_sources[{k}]"), message),
                    }
                }
                routes.push(RouteConfig {
                    sni: Some(sni),
                    upstream,
                    allowed_sources,
                    ..RouteConfig::default()
                });
                owners_here.push(owners);
            }
            // The listener admits the union of its routes' sources before reading a byte
            // (nothing listed: any, and each route refuses on its own).
            let mut allowed: Vec<Cidr> = routes
                .iter()
                .flat_map(|r| r.allowed_sources.iter().copied())
                .collect();
            allowed.sort();
            allowed.dedup();
            route_owners.push(owners_here);
            listeners.push(listener(name, port, layout, &trusted, allowed, routes));
        }
        let mut upstream_owners = Vec::new();
        let mut upstreams = Vec::new();
        for (k, (name, (target, owners))) in self.upstreams.into_iter().enumerate() {
            let mut endpoints = Vec::new();
            match Endpoint::parse(&target.endpoint) {
                Ok(ep) => endpoints.push(ep),
                Err(message) => problems.push(Problem {
                    owners: Some(owners.clone()),
                    path: format!("upstreams[{k}].endpoints[0]"),
                    message,
                }),
            }
            let vpn = name.ends_with(VPN_UPSTREAM);
            let mut u = UpstreamConfig::new(name, endpoints);
            u.idle_timeout = Some(super::IDLE_TIMEOUT);
            if vpn {
                u.max_connections_per_source = Some(VPN_CONNECTIONS_PER_SOURCE);
            }
            u.send_proxy_protocol = match target.proxy_protocol {
                ProxyProtocol::None => SendProxyProtocol::None,
                ProxyProtocol::V2 => SendProxyProtocol::V2,
            };
            upstreams.push(u);
            upstream_owners.push(owners);
        }
        let config = ProxyConfig {
            admin: AdminConfig {
                address: layout.admin,
                ..AdminConfig::default()
            },
            listeners,
            upstreams,
            // Every route comes from the live migrations, so a removal is this controller's
            // job (a finished migration's routes go), and a proxy refusing the file would
            // stall every rollout. The proxy's guard is for files written by other hands.
            allow_large_removal: true,
            // Deny unless listed: a route carries its migration's sources or the seed's
            // default, and with neither it admits nobody (the old union over a listener let
            // one migration without `allowedSources` open every shoot's members).
            routes_without_allowed_sources: UnlistedSources::Deny,
            ..ProxyConfig::default()
        };
        for (path, message) in config.validate() {
            let owners = owners_at(&path, &listener_owners, &route_owners, &upstream_owners);
            problems.push(Problem {
                owners,
                path,
                message,
            });
        }
        (config, problems)
    }
}

/// The layout's load balancers; a bad one is the layout's problem.
fn trusted_proxies(layout: &Layout, problems: &mut Vec<Problem>) -> Vec<Cidr> {
    let mut out = Vec::new();
    for (i, t) in layout.trusted_proxies.iter().enumerate() {
        match Cidr::parse(t) {
            Ok(c) => out.push(c),
            Err(message) => problems.push(Problem {
                owners: None,
                path: format!("trusted_proxies[{i}]"),
                message,
            }),
        }
    }
    out
}

/// Who put the field at `path` into the file: a route's or an upstream's owners, or those of
/// a listener the layout does not have; `None` for anything else (the layout's part).
fn owners_at(
    path: &str,
    listeners: &[Option<Owners>],
    routes: &[Vec<Owners>],
    upstreams: &[Owners],
) -> Option<Owners> {
    let index = |s: &str, prefix: &str| -> Option<(usize, String)> {
        let rest = s.strip_prefix(prefix)?;
        let (n, rest) = rest.split_once(']')?;
        Some((n.parse().ok()?, rest.to_owned()))
    };
    if let Some((i, rest)) = index(path, "listeners[") {
        return match index(&rest, ".routes[") {
            Some((j, _)) => routes.get(i)?.get(j).cloned(),
            None => listeners.get(i)?.clone(),
        };
    }
    let (k, _) = index(path, "upstreams[")?;
    upstreams.get(k).cloned()
}

fn listener(
    name: String,
    port: u16,
    layout: &Layout,
    trusted: &[Cidr],
    allowed_sources: Vec<Cidr>,
    routes: Vec<RouteConfig>,
) -> ListenerConfig {
    // On the admin address's wildcard: `0.0.0.0`, or `::` on a seed with IPv6 (one
    // dual-stack socket).
    let mut l = ListenerConfig::new(name, SocketAddr::new(layout.admin.ip(), port));
    if !layout.trusted_proxies.is_empty() {
        l.proxy_protocol = ProxyProtocolMode::Accept;
        l.trusted_proxies = trusted.to_vec();
    }
    l.allowed_sources = allowed_sources;
    l.max_connections_per_source = Some(super::connections_per_source(routes.len()));
    if l.name.starts_with(VPN_LISTENER) {
        l.max_connections = Some(vpn_connections(routes.len()));
    }
    l.routes = routes;
    l
}

/// The prefix of the VPN listener's name (`vpn-8443`, see `plan::names`).
const VPN_LISTENER: &str = "vpn-";

/// The suffix of a VPN upstream's name (`<namespace>.vpn`, see `plan::names`).
const VPN_UPSTREAM: &str = ".vpn";

/// What one client address may have open to a tunnel server through the proxy (its
/// `max_connections_per_source`): the server tells sources apart only by PROXY headers, and
/// without them one host sending ClientHellos took the share of handshakes every agent needs.
/// A shoot's agents, maybe behind one NAT address, hold a few sessions each (one per address
/// of the server, two while one rotates), and a reconnect may overlap its dying session.
pub(super) const VPN_CONNECTIONS_PER_SOURCE: usize = 16;

/// The VPN listener's own `max_connections`: it admits any source (the shoot's nodes dial
/// from anywhere), and without a cap of its own one stranger's connections could take the
/// proxy's whole `max_connections` from the etcd listeners. A shoot's agents hold a few
/// sessions each (one per address of the tunnel server, two while one rotates), so 64 per
/// migration's VPN route, at least 512.
pub(super) fn vpn_connections(routes: usize) -> usize {
    routes.saturating_mul(64).max(512)
}
