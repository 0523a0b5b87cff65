//! An immutable, compiled view of one configuration: route tables per listener and upstreams
//! with their metric handles. A reload builds a new snapshot and swaps it in; connections keep
//! the `Arc`s they started with, so nothing a reload does can reach them.

use crate::metrics::ListenerLabels;
use crate::metrics::{BytesLabels, Metrics, OutcomeLabels, UpstreamLabels};
use crate::routes::RouteTable;
use isthmus_config::validate::normalize_sni_pattern;
use isthmus_config::{ListenerConfig, ProxyConfig};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use std::collections::HashMap;
use std::net::SocketAddr;
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
}

/// What a listener needs to handle one connection.
#[derive(Debug)]
pub struct ListenerSpec {
    pub name: String,
    pub hello_timeout: Duration,
    pub max_hello_bytes: usize,
    pub reject_with_alert: bool,
    pub routes: RouteTable<Arc<Route>>,
    pub default_route: Option<Arc<Route>>,
    /// `isthmus_proxy_active_connections{listener}`.
    pub active: Gauge,
}

/// A matched route: where to go and what to count.
#[derive(Debug)]
pub struct Route {
    /// The SNI pattern, or `default`.
    pub pattern: String,
    pub listener: Arc<str>,
    pub upstream: Arc<Upstream>,
    /// Created on first use: a 100k-route reload must not create 400k series up front.
    counters: OnceLock<RouteCounters>,
}

/// The per-route series, resolved once.
#[derive(Debug)]
pub struct RouteCounters {
    pub forwarded: Counter,
    pub unavailable: Counter,
    pub bytes_to_upstream: Counter,
    pub bytes_to_downstream: Counter,
}

/// A named group of endpoints.
#[derive(Debug)]
pub struct Upstream {
    pub name: String,
    pub endpoints: Vec<Endpoint>,
    pub connect_seconds: Histogram,
}

/// An endpoint: an address, or a name resolved when a connection needs it.
#[derive(Debug, Clone)]
pub enum Endpoint {
    Addr(SocketAddr),
    Host(String),
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Addr(a) => write!(f, "{a}"),
            Endpoint::Host(h) => write!(f, "{h}"),
        }
    }
}

impl Snapshot {
    /// Compiles a validated configuration. Never fails: validation already ran.
    pub fn compile(config: ProxyConfig, hash: String, metrics: &Metrics) -> Self {
        let upstreams: HashMap<&str, Arc<Upstream>> = config
            .upstreams
            .iter()
            .map(|u| {
                let up = Upstream {
                    name: u.name.clone(),
                    endpoints: u
                        .endpoints
                        .iter()
                        .map(|e| match e.parse() {
                            Ok(a) => Endpoint::Addr(a),
                            Err(_) => Endpoint::Host(e.clone()),
                        })
                        .collect(),
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
                let spec = compile_listener(l, &upstreams, metrics);
                (l.name.clone(), Arc::new(spec))
            })
            .collect();
        Self {
            config,
            hash,
            listeners,
        }
    }
}

fn compile_listener(
    l: &ListenerConfig,
    upstreams: &HashMap<&str, Arc<Upstream>>,
    metrics: &Metrics,
) -> ListenerSpec {
    let listener: Arc<str> = l.name.as_str().into();
    let route = |pattern: &str, upstream: &str| {
        upstreams.get(upstream).map(|u| {
            Arc::new(Route {
                pattern: pattern.to_owned(),
                listener: listener.clone(),
                upstream: u.clone(),
                counters: OnceLock::new(),
            })
        })
    };
    let mut routes = RouteTable::default();
    for r in &l.routes {
        let pattern = normalize_sni_pattern(&r.sni).unwrap_or_else(|_| r.sni.clone());
        if let Some(route) = route(&pattern, &r.upstream) {
            routes.insert(&pattern, route);
        }
    }
    ListenerSpec {
        name: l.name.clone(),
        hello_timeout: l.client_hello_timeout.get(),
        max_hello_bytes: l.max_client_hello_bytes,
        reject_with_alert: l.reject_with_alert,
        routes,
        default_route: l
            .default_upstream
            .as_deref()
            .and_then(|u| route("default", u)),
        active: metrics.active.get_or_create_owned(&ListenerLabels {
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
                bytes_to_upstream: bytes("downstream_to_upstream"),
                bytes_to_downstream: bytes("upstream_to_downstream"),
            }
        })
    }
}
