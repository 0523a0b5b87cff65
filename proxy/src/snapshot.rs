//! An immutable, compiled view of one configuration: route tables per listener and upstreams
//! with their metric handles. A reload builds a new snapshot and swaps it in; connections keep
//! the `Arc`s they started with, so nothing a reload does can reach them.

use crate::admits::Admits;
use crate::dns::Dns;
use crate::metrics::ListenerLabels;
use crate::metrics::{BytesLabels, Metrics, OutcomeLabels, UpstreamLabels};
use crate::pool::{Endpoint, Pool, Target};
use crate::routes::{HeaderTable, RouteTable};
use isthmus_config::{
    Cidr, KeepaliveConfig, ListenerConfig, ListenerKind, ProxyConfig, ProxyProtocolMode,
    UnlistedSources, UpstreamConfig,
};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// One configuration, compiled.
#[derive(Debug)]
pub struct Snapshot {
    /// The configuration as loaded (served on `/config`).
    pub config: ProxyConfig,
    /// SHA-256 of the file it came from.
    pub hash: String,
    /// Listeners by name.
    pub listeners: HashMap<String, Arc<ListenerSpec>>,
    /// Upstreams by name.
    pub upstreams: HashMap<String, Arc<Upstream>>,
    /// The resolver the upstreams' names follow.
    pub dns: Dns,
}

/// What a listener needs to handle one connection.
#[derive(Debug)]
pub struct ListenerSpec {
    pub name: String,
    pub kind: ListenerKind,
    pub proxy_protocol: ProxyProtocolMode,
    pub route_header: String,
    pub max_request_bytes: usize,
    pub max_pending: usize,
    pub max_pending_per_source: usize,
    pub max_connections_per_source: Option<usize>,
    /// The listener's own cap on open connections.
    pub max_connections: Option<usize>,
    /// Empty: any source.
    pub allowed_sources: Vec<Cidr>,
    pub trusted_proxies: Vec<Cidr>,
    pub keepalive: Option<KeepaliveConfig>,
    pub header_routes: HeaderTable<Arc<Route>>,
    pub hello_timeout: Duration,
    pub max_hello_bytes: usize,
    pub reject_with_alert: bool,
    pub routes: RouteTable<Arc<Route>>,
    pub default_route: Option<Arc<Route>>,
    /// `isthmus_proxy_active_connections{listener}`.
    pub active: Gauge,
    /// `isthmus_proxy_pending_hellos{listener}`.
    pub pending: Gauge,
}

/// A matched route: where to go and what to count.
#[derive(Debug)]
pub struct Route {
    /// The SNI pattern, or `default`.
    pub pattern: String,
    pub listener: Arc<str>,
    pub upstream: Arc<Upstream>,
    /// Checked once the route is found.
    pub sources: Admits,
    /// Created on first use: a 100k-route reload must not create 400k series up front.
    counters: OnceLock<RouteCounters>,
}

/// The per-route series, resolved once.
#[derive(Debug)]
pub struct RouteCounters {
    pub forwarded: Counter,
    pub unavailable: Counter,
    pub overflow: Counter,
    pub source_overflow: Counter,
    pub bytes_to_upstream: Counter,
    pub bytes_to_downstream: Counter,
}

/// A named group of endpoints with its policy.
#[derive(Debug)]
pub struct Upstream {
    pub name: String,
    pub pool: Arc<Pool>,
    pub policy: UpstreamConfig,
    pub connect_seconds: Histogram,
}

impl Snapshot {
    /// Compiles a validated configuration. Never fails: validation already ran. Endpoint
    /// state (connection counts, ejections, DNS answers) of `previous` is carried over for
    /// upstreams and endpoints that keep their names, and for names when `dns` is the same
    /// resolver.
    pub fn compile(
        config: ProxyConfig,
        hash: String,
        metrics: &Metrics,
        dns: &Dns,
        previous: Option<&Snapshot>,
    ) -> Self {
        let old: HashMap<&str, &Arc<Upstream>> = previous
            .map(|p| p.upstreams.iter().map(|(k, v)| (k.as_str(), v)).collect())
            .unwrap_or_default();
        let same_dns = previous.is_some_and(|p| p.dns.config() == dns.config());
        let upstreams: HashMap<&str, Arc<Upstream>> = config
            .upstreams
            .iter()
            .map(|u| {
                let before = old.get(u.name.as_str());
                let endpoints = u
                    .endpoints
                    .iter()
                    .map(|endpoint| {
                        let label = endpoint.to_string();
                        let carried = before.and_then(|b| {
                            b.pool.endpoints.iter().find(|e| {
                                e.label == label
                                    && (same_dns || matches!(e.target, Target::Addr(_)))
                            })
                        });
                        match carried {
                            Some(e) => e.clone(),
                            None => Arc::new(Endpoint::new(
                                &u.name,
                                &label,
                                target(endpoint, dns),
                                metrics,
                            )),
                        }
                    })
                    .collect();
                let carried = before.map(|b| b.pool.active_counter());
                let pool = Pool::new(&u.name, endpoints, carried, metrics);
                let up = Upstream {
                    name: u.name.clone(),
                    pool: Arc::new(pool),
                    policy: u.clone(),
                    connect_seconds: metrics.upstream_connect_seconds.get_or_create_owned(
                        &UpstreamLabels {
                            upstream: u.name.clone(),
                        },
                    ),
                };
                (u.name.as_str(), Arc::new(up))
            })
            .collect();
        let listeners = config
            .listeners
            .iter()
            .map(|l| {
                let unlisted = config.routes_without_allowed_sources;
                let spec = compile_listener(l, &upstreams, unlisted, metrics);
                (l.name.clone(), Arc::new(spec))
            })
            .collect();
        let upstreams = upstreams
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        Self {
            config,
            hash,
            listeners,
            upstreams,
            dns: dns.clone(),
        }
    }
}

fn target(endpoint: &isthmus_config::Endpoint, dns: &Dns) -> Target {
    match endpoint {
        isthmus_config::Endpoint::Addr(a) => Target::Addr(*a),
        isthmus_config::Endpoint::Name { host, port } => Target::Name(dns.follow(host, *port)),
    }
}

fn compile_listener(
    l: &ListenerConfig,
    upstreams: &HashMap<&str, Arc<Upstream>>,
    unlisted: UnlistedSources,
    metrics: &Metrics,
) -> ListenerSpec {
    let listener: Arc<str> = l.name.as_str().into();
    let mut open = 0;
    let mut route = |pattern: &str, upstream: &str, listed: &[Cidr]| {
        upstreams.get(upstream).map(|u| {
            let sources = Admits::of(listed, unlisted);
            open += i64::from(sources.is_open(&l.allowed_sources));
            Arc::new(Route {
                pattern: pattern.to_owned(),
                listener: listener.clone(),
                upstream: u.clone(),
                sources,
                counters: OnceLock::new(),
            })
        })
    };
    let mut routes = RouteTable::default();
    let mut header_routes = HeaderTable::default();
    for r in &l.routes {
        if l.kind == ListenerKind::HttpConnect {
            if let Some(route) = route(&r.header_value, &r.upstream, &r.allowed_sources) {
                header_routes.insert(&r.header_value, route);
            }
            continue;
        }
        if let Some(sni) = &r.sni {
            if let Some(route) = route(sni.as_str(), &r.upstream, &r.allowed_sources) {
                routes.insert(sni.as_str(), route);
            }
        }
    }
    let default_route = l
        .default_upstream
        .as_deref()
        .and_then(|u| route("default", u, &[]));
    let labels = ListenerLabels {
        listener: l.name.clone(),
    };
    metrics.open_routes.get_or_create(&labels).set(open);
    ListenerSpec {
        name: l.name.clone(),
        kind: l.kind,
        proxy_protocol: l.proxy_protocol,
        route_header: l.route_header.clone().unwrap_or_default(),
        max_request_bytes: l.max_request_bytes,
        max_pending: l.max_pending_hellos,
        max_pending_per_source: l.max_pending_hellos_per_source,
        max_connections_per_source: l.max_connections_per_source,
        max_connections: l.max_connections,
        allowed_sources: l.allowed_sources.clone(),
        trusted_proxies: l.trusted_proxies.clone(),
        keepalive: l.tcp_keepalive,
        header_routes,
        hello_timeout: l.client_hello_timeout.get(),
        max_hello_bytes: l.max_client_hello_bytes,
        reject_with_alert: l.reject_with_alert,
        routes,
        default_route,
        active: metrics.active.get_or_create_owned(&ListenerLabels {
            listener: l.name.clone(),
        }),
        pending: metrics.pending_hellos.get_or_create_owned(&ListenerLabels {
            listener: l.name.clone(),
        }),
    }
}

impl Route {
    /// The route's series, registered on first use.
    pub fn counters(&self, m: &Metrics) -> &RouteCounters {
        self.counters.get_or_init(|| {
            let outcome = |outcome| {
                m.connections.get_or_create_owned(&OutcomeLabels {
                    listener: self.listener.to_string(),
                    route: self.pattern.clone(),
                    upstream: self.upstream.name.clone(),
                    outcome,
                })
            };
            let bytes = |direction| {
                m.bytes.get_or_create_owned(&BytesLabels {
                    listener: self.listener.to_string(),
                    route: self.pattern.clone(),
                    upstream: self.upstream.name.clone(),
                    direction,
                })
            };
            RouteCounters {
                forwarded: outcome("forwarded"),
                unavailable: outcome("upstream_unavailable"),
                overflow: outcome("overflow"),
                source_overflow: outcome("source_overflow"),
                bytes_to_upstream: bytes("downstream_to_upstream"),
                bytes_to_downstream: bytes("upstream_to_downstream"),
            }
        })
    }
}
