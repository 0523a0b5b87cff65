//! Removing the series of what a reload took out of the file: routes (also a route whose
//! upstream changed), upstreams, endpoints and the names they were resolved from. Without it a
//! pod's `/metrics` (and every scrape, and every copy of the body an admin client holds) grew
//! with every route the pod had ever had: each migration adds its routes and upstreams, and
//! their series stayed after it finished (issue 47, point 4).
//!
//! A connection still open on a removed route keeps counting into the handles it holds; they
//! are just no longer exported (Prometheus sees the series end). A `prometheus-client`
//! family cannot be listed, so each series is removed by its full label set, from the label
//! values written below.

use super::{
    BytesLabels, DnsLabels, DnsResultLabels, EndpointLabels, LimitLabels, Metrics, OutcomeLabels,
    UpstreamErrorLabels, UpstreamLabels,
};
use isthmus_config::{Endpoint, ListenerKind, ProxyConfig};
use std::collections::{BTreeMap, BTreeSet};

/// `isthmus_proxy_connections_total{outcome}` (see `snapshot::RouteCounters`).
const OUTCOMES: [&str; 4] = [
    "forwarded",
    "upstream_unavailable",
    "overflow",
    "source_overflow",
];
/// `isthmus_proxy_bytes_total{direction}`.
const DIRECTIONS: [&str; 2] = ["downstream_to_upstream", "upstream_to_downstream"];
/// `isthmus_proxy_upstream_connect_errors_total{reason}` (see `upstream::connect`).
const CONNECT_ERRORS: [&str; 6] = [
    "refused",
    "timeout",
    "unreachable",
    "resolve",
    "other",
    "local",
];
/// `isthmus_proxy_closed_by_limit_total{limit}` (see `splice/conn.rs`, `Conn::close`).
const LIMITS: [&str; 2] = ["idle_timeout", "max_connection_duration"];
/// `isthmus_proxy_dns_resolutions_total{result}`.
const RESULTS: [&str; 2] = ["success", "failure"];

/// `(listener, route, upstream)`: the labels of one route's series.
type RouteKey = (String, String, String);

impl Metrics {
    /// Removes the series of the routes, upstreams, endpoints and names in `old` that `new`
    /// does not have.
    pub fn forget_removed(&self, old: &ProxyConfig, new: &ProxyConfig) {
        let kept = routes(new);
        for (listener, route, upstream) in routes(old).difference(&kept) {
            for outcome in OUTCOMES {
                self.connections.remove(&OutcomeLabels {
                    listener: listener.clone(),
                    route: route.clone(),
                    upstream: upstream.clone(),
                    outcome,
                });
            }
            for direction in DIRECTIONS {
                self.bytes.remove(&BytesLabels {
                    listener: listener.clone(),
                    route: route.clone(),
                    upstream: upstream.clone(),
                    direction,
                });
            }
        }
        let kept = endpoints(new);
        for (upstream, gone) in endpoints(old) {
            let still = kept.get(&upstream);
            for endpoint in gone
                .iter()
                .filter(|e| still.is_none_or(|s| !s.contains(*e)))
            {
                let labels = EndpointLabels {
                    upstream: upstream.clone(),
                    endpoint: endpoint.clone(),
                };
                self.ejections.remove(&labels);
                self.ejected.remove(&labels);
            }
            if still.is_none() {
                self.forget_upstream(&upstream);
            }
        }
        let kept = names(new);
        for name in names(old).difference(&kept) {
            let labels = DnsLabels { name: name.clone() };
            self.dns_addresses.remove(&labels);
            for result in RESULTS {
                self.dns_resolutions.remove(&DnsResultLabels {
                    name: name.clone(),
                    result,
                });
            }
        }
    }

    fn forget_upstream(&self, upstream: &str) {
        let labels = UpstreamLabels {
            upstream: upstream.to_owned(),
        };
        self.upstream_active.remove(&labels);
        self.upstream_connect_seconds.remove(&labels);
        for reason in CONNECT_ERRORS {
            self.upstream_connect_errors.remove(&UpstreamErrorLabels {
                upstream: upstream.to_owned(),
                reason,
            });
        }
        for limit in LIMITS {
            self.closed_by_limit.remove(&LimitLabels {
                upstream: upstream.to_owned(),
                limit,
            });
        }
    }
}

/// Every route of `c` as its series label it (`snapshot::compile_listener`).
fn routes(c: &ProxyConfig) -> BTreeSet<RouteKey> {
    let mut out = BTreeSet::new();
    for l in &c.listeners {
        for r in &l.routes {
            let pattern = match (l.kind, &r.sni) {
                (ListenerKind::HttpConnect, _) => r.header_value.clone(),
                (ListenerKind::TlsPassthrough, Some(sni)) => sni.as_str().to_owned(),
                (ListenerKind::TlsPassthrough, None) => continue,
            };
            out.insert((l.name.clone(), pattern, r.upstream.clone()));
        }
        if let Some(u) = &l.default_upstream {
            out.insert((l.name.clone(), "default".to_owned(), u.clone()));
        }
    }
    out
}

/// Every upstream of `c` with its endpoints' labels.
fn endpoints(c: &ProxyConfig) -> BTreeMap<String, BTreeSet<String>> {
    c.upstreams
        .iter()
        .map(|u| {
            let labels = u.endpoints.iter().map(ToString::to_string).collect();
            (u.name.clone(), labels)
        })
        .collect()
}

/// Every host name `c`'s endpoints are resolved from.
fn names(c: &ProxyConfig) -> BTreeSet<String> {
    c.upstreams
        .iter()
        .flat_map(|u| &u.endpoints)
        .filter_map(|e| match e {
            Endpoint::Name { host, .. } => Some(host.clone()),
            Endpoint::Addr(_) => None,
        })
        .collect()
}
