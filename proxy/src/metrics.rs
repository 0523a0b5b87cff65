//! The proxy's Prometheus series, registered into a registry handed down from `main`.
//!
//! Per-route handles are resolved once per config snapshot (see `snapshot.rs`), so that the
//! per-connection cost is a few atomic increments and no label hashing or allocation. A
//! reload removes the series of the routes, upstreams and names it took out (`forget.rs`).

mod forget;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Labels of per-route series. `route` is the matched SNI pattern, or `default` when the
/// listener's default upstream took the connection.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub listener: String,
    pub route: String,
    pub upstream: String,
    /// `forwarded` (spliced to an upstream), `upstream_unavailable` (every endpoint failed),
    /// `overflow` (the upstream's `max_connections`) or `source_overflow` (its
    /// `max_connections_per_source`).
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BytesLabels {
    pub listener: String,
    pub route: String,
    pub upstream: String,
    /// `downstream_to_upstream` or `upstream_to_downstream`.
    pub direction: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RejectLabels {
    pub listener: String,
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ListenerLabels {
    pub listener: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpstreamLabels {
    pub upstream: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpstreamErrorLabels {
    pub upstream: String,
    /// `refused`, `timeout`, `unreachable`, `resolve`, `other`, or `local` (this process
    /// could not dial: no descriptor, ephemeral port or buffer; never held against the
    /// endpoint by outlier detection).
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EndpointLabels {
    pub upstream: String,
    pub endpoint: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DnsLabels {
    pub name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DnsResultLabels {
    pub name: String,
    /// `success` or `failure`.
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LimitLabels {
    pub upstream: String,
    /// `idle_timeout` or `max_connection_duration`.
    pub limit: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReloadLabels {
    /// `applied`, `unchanged`, `invalid`, `unreadable`, `removal_refused`, `bind_error`.
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HashLabels {
    pub hash: String,
}

/// Every series of the proxy.
#[derive(Clone, Debug)]
pub struct Metrics {
    pub connections: Family<OutcomeLabels, Counter>,
    pub active: Family<ListenerLabels, Gauge>,
    pub bytes: Family<BytesLabels, Counter>,
    pub hello_rejections: Family<RejectLabels, Counter>,
    pub upstream_connect_errors: Family<UpstreamErrorLabels, Counter>,
    pub upstream_connect_seconds: Family<UpstreamLabels, Histogram, fn() -> Histogram>,
    pub reloads: Family<ReloadLabels, Counter>,
    pub config_info: Family<HashLabels, Gauge>,
    pub accept_errors: Family<ListenerLabels, Counter>,
    pub pending_hellos: Family<ListenerLabels, Gauge>,
    /// Routes (with the default route) that admit every address of a family.
    pub open_routes: Family<ListenerLabels, Gauge>,
    pub upstream_active: Family<UpstreamLabels, Gauge>,
    pub ejections: Family<EndpointLabels, Counter>,
    pub ejected: Family<EndpointLabels, Gauge>,
    pub dns_resolutions: Family<DnsResultLabels, Counter>,
    pub dns_addresses: Family<DnsLabels, Gauge>,
    pub closed_by_limit: Family<LimitLabels, Counter>,
    /// Busy-polling pauses for a contended CPU (see `splice::pace`).
    pub busy_poll_contended: Counter,
    /// Splicer threads leaving `SCHED_BATCH` for a contended CPU (see `sched`).
    pub sched_demoted: Counter,
    /// The soft `RLIMIT_NOFILE` in effect.
    pub fd_limit: Gauge,
    /// The global connection cap in effect: `max_connections`, or less when that many
    /// connections would not fit into the descriptor limit.
    pub max_connections_effective: Gauge,
    /// Budgets of the warnings logged under attack (one line per key every 10 s).
    pub warnings: std::sync::Arc<isthmus_admin::ratelog::RateLog>,
}

fn connect_histogram() -> Histogram {
    // 100 µs .. ~13 s: loopback connects take tens of µs, cross-zone ones milliseconds, and a
    // connect that ends in a timeout lands in the last buckets.
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        0.0001, 2.0, 18,
    ))
}

impl Metrics {
    /// Creates the series and registers them under the `isthmus_` prefix.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self {
            connections: Family::default(),
            active: Family::default(),
            bytes: Family::default(),
            hello_rejections: Family::default(),
            upstream_connect_errors: Family::default(),
            upstream_connect_seconds: Family::new_with_constructor(connect_histogram),
            reloads: Family::default(),
            config_info: Family::default(),
            accept_errors: Family::default(),
            pending_hellos: Family::default(),
            open_routes: Family::default(),
            upstream_active: Family::default(),
            ejections: Family::default(),
            ejected: Family::default(),
            dns_resolutions: Family::default(),
            dns_addresses: Family::default(),
            closed_by_limit: Family::default(),
            busy_poll_contended: Counter::default(),
            sched_demoted: Counter::default(),
            fd_limit: Gauge::default(),
            max_connections_effective: Gauge::default(),
            warnings: Default::default(),
        };
        let r = registry.sub_registry_with_prefix("isthmus");
        r.register(
            "proxy_connections",
            "Accepted connections that were routed, by listener, route, upstream and outcome",
            m.connections.clone(),
        );
        r.register(
            "proxy_active_connections",
            "Connections currently open (reading the ClientHello or spliced), by listener",
            m.active.clone(),
        );
        r.register(
            "proxy_bytes",
            "Bytes spliced, by listener, route, upstream and direction",
            m.bytes.clone(),
        );
        r.register(
            "proxy_hello_rejections",
            "Connections closed before routing, by listener and reason (no_sni, unknown_sni, \
             not_tls, malformed, too_large, timeout, client_closed, proxy_protocol, evicted, \
             too_many_connections, too_many_listener_connections, \
             too_many_connections_per_source, source_not_allowed, \
             route_source_not_allowed, untrusted_proxy; http_connect: not_connect, malformed, \
             missing_route_header, unknown_header_value)",
            m.hello_rejections.clone(),
        );
        r.register(
            "proxy_open_routes",
            "Routes of a listener (its default route included) that admit every IPv4 or every \
             IPv6 address: no allowed_sources narrows them",
            m.open_routes.clone(),
        );
        r.register(
            "proxy_upstream_connect_errors",
            "Failed TCP connects to upstream endpoints, by upstream and reason (refused, \
             timeout, unreachable, resolve, other; local: this process could not dial, which \
             outlier detection does not hold against the endpoint)",
            m.upstream_connect_errors.clone(),
        );
        r.register(
            "proxy_upstream_connect_duration_seconds",
            "Time to establish the TCP connection to the chosen endpoint",
            m.upstream_connect_seconds.clone(),
        );
        r.register(
            "proxy_config_reloads",
            "Configuration reload attempts by result",
            m.reloads.clone(),
        );
        r.register(
            "proxy_config_info",
            "1 for the SHA-256 of the configuration file in effect",
            m.config_info.clone(),
        );
        r.register(
            "proxy_accept_errors",
            "Errors from accept(2), e.g. EMFILE, by listener",
            m.accept_errors.clone(),
        );
        r.register(
            "proxy_pending_hellos",
            "Connections still sending their ClientHello (or CONNECT request), by listener",
            m.pending_hellos.clone(),
        );
        r.register(
            "proxy_upstream_active_connections",
            "Open connections to each upstream through this proxy",
            m.upstream_active.clone(),
        );
        r.register(
            "proxy_upstream_ejections",
            "Times an endpoint was ejected by outlier detection",
            m.ejections.clone(),
        );
        r.register(
            "proxy_upstream_ejected",
            "1 while an endpoint is ejected",
            m.ejected.clone(),
        );
        r.register(
            "proxy_dns_resolutions",
            "Background resolutions of endpoint host names, by name and result",
            m.dns_resolutions.clone(),
        );
        r.register(
            "proxy_dns_addresses",
            "Addresses in the last successful answer for a name",
            m.dns_addresses.clone(),
        );
        r.register(
            "proxy_closed_by_limit",
            "Spliced connections closed by idle_timeout or max_connection_duration",
            m.closed_by_limit.clone(),
        );
        r.register(
            "proxy_busy_poll_contended",
            "Times a splicer found its CPU contended (a yield of busy polling came back after \
             another thread's time slice): busy polling then pauses for 1 s",
            m.busy_poll_contended.clone(),
        );
        r.register(
            "proxy_sched_demoted",
            "Times a splicer thread left SCHED_BATCH for SCHED_OTHER because its CPU was \
             contended (its wake-ups waited more than 30 us on average while it moved mostly \
             messages rather than bulk bursts, or busy polling found it contended); it returns \
             after a pause of 4 s, doubled up to 64 s while the contention lasts",
            m.sched_demoted.clone(),
        );
        r.register(
            "proxy_fd_limit",
            "The soft limit on open files (RLIMIT_NOFILE), raised to the hard limit at start",
            m.fd_limit.clone(),
        );
        r.register(
            "proxy_max_connections_effective",
            "The global connection cap in effect: max_connections, or what fits into the \
             descriptor limit (2 per connection after the splice pipes and a reserve for the \
             admin and the rest)",
            m.max_connections_effective.clone(),
        );
        m
    }

    /// Publishes the cap in effect and warns when `max_connections` does not fit.
    pub fn connection_cap(&self, configured: usize, ceiling: usize) {
        let effective = configured.min(ceiling);
        self.max_connections_effective
            .set(i64::try_from(effective).unwrap_or(i64::MAX));
        if effective < configured {
            tracing::warn!(
                max_connections = configured,
                effective,
                fd_limit = self.fd_limit.get(),
                "max_connections does not fit into the open-files limit (2 per connection plus \
                 splice pipes and a reserve); connections beyond the effective cap are refused; \
                 raise the container's nofile limit"
            );
        }
    }

    pub fn dns_result(&self, labels: &DnsLabels, result: &'static str) {
        self.dns_resolutions
            .get_or_create(&DnsResultLabels {
                name: labels.name.clone(),
                result,
            })
            .inc();
    }

    pub fn reload(&self, result: &'static str) {
        self.reloads.get_or_create(&ReloadLabels { result }).inc();
    }

    /// Counts a connection closed before routing, and logs a warning for it at most once
    /// per listener and reason every 10 s (with how many it stands for).
    pub fn reject(&self, listener: &str, reason: &'static str) {
        self.hello_rejections
            .get_or_create(&RejectLabels {
                listener: listener.to_owned(),
                reason,
            })
            .inc();
        if let Some(count) = self.warnings.event(listener, reason) {
            tracing::warn!(
                listener,
                reason,
                count,
                "connections closed before routing (at most one line per listener and reason \
                 every 10s; isthmus_proxy_hello_rejections_total counts each)"
            );
        }
    }

    pub fn set_config_hash(&self, old: Option<&str>, new: &str) {
        if let Some(old) = old.filter(|o| *o != new) {
            self.config_info.remove(&HashLabels {
                hash: old.to_owned(),
            });
        }
        self.config_info
            .get_or_create(&HashLabels {
                hash: new.to_owned(),
            })
            .set(1);
    }
}
