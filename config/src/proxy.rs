//! The schema of `isthmus proxy --config FILE`: the file as a whole, its admin endpoint and
//! resolver (listeners in `listener.rs`, upstreams in `upstream.rs`). Every field is
//! documented here and in the README's configuration reference; the two must stay in step.

use crate::{defaults, Duration, ListenerConfig, UpstreamConfig};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;

/// The whole proxy configuration file.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ProxyConfig {
    /// The admin HTTP endpoint (`/metrics`, `/healthz`, `/readyz`, `/config`).
    #[serde(default)]
    pub admin: AdminConfig,
    /// Sockets to accept on. Listeners are matched across reloads by `name`.
    #[serde(default)]
    pub listeners: Vec<ListenerConfig>,
    /// Named groups of endpoints that routes point at.
    #[serde(default)]
    pub upstreams: Vec<UpstreamConfig>,
    /// After SIGTERM, how long `/readyz` reports 503 before the listeners close, so that the
    /// load balancer stops sending new connections first. Default `5s`.
    #[serde(default = "defaults::drain_delay")]
    pub drain_delay: Duration,
    /// After the listeners close, how long open connections may take to finish before the
    /// process exits anyway. Default `30s`. Keep `terminationGracePeriodSeconds` above
    /// `drain_delay + drain_timeout`.
    #[serde(default = "defaults::drain_timeout")]
    pub drain_timeout: Duration,
    /// How often the file is checked for changes (content, or a ConfigMap symlink swap).
    /// Default `200ms`; `0s` disables watching (SIGHUP still reloads).
    #[serde(default = "defaults::proxy_watch_interval")]
    pub watch_interval: Duration,
    /// Most connections open at once over all listeners; beyond it new connections are
    /// closed at once and counted. Default `100000`.
    #[serde(default = "defaults::max_connections")]
    pub max_connections: usize,
    /// How endpoint host names are resolved.
    #[serde(default)]
    pub resolver: ResolverConfig,
    /// Lets a reload remove every listener, or more than half of the routes in effect (when
    /// there are at least 10). Without it such a reload is refused and counted
    /// (`removal_refused`), and the configuration in effect stays: an emptied or truncated
    /// file must not take every route down. Start-up is not a reload. Default `false`.
    #[serde(default)]
    pub allow_large_removal: bool,
    /// Which sources a route admits when it lists no `allowed_sources` of its own: `allow`
    /// (default: any source its listener admits) or `deny` (none: a seed-wide "deny unless
    /// listed", what the controller renders). Applies to a listener's `default_upstream` too.
    #[serde(default)]
    pub routes_without_allowed_sources: UnlistedSources,
    /// Lets listeners and the admin endpoint take ports below 1024. Binding one needs
    /// `CAP_NET_BIND_SERVICE`, which the chart's pods do not have: a file with such a port
    /// may start where the process has it and crash-loop every pod started without it, so it
    /// is refused unless this says the process has the capability. Default `false`.
    #[serde(default, skip_serializing_if = "defaults::is_default")]
    pub allow_privileged_ports: bool,
}

/// Which sources a route without `allowed_sources` admits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum UnlistedSources {
    /// Any source its listener admits.
    #[default]
    Allow,
    /// No source.
    Deny,
}

/// Every setting at its default, as an empty YAML file gives it.
impl Default for ProxyConfig {
    fn default() -> Self {
        Self {
            admin: AdminConfig::default(),
            listeners: Vec::new(),
            upstreams: Vec::new(),
            drain_delay: defaults::drain_delay(),
            drain_timeout: defaults::drain_timeout(),
            watch_interval: defaults::proxy_watch_interval(),
            max_connections: defaults::max_connections(),
            resolver: ResolverConfig::default(),
            allow_large_removal: false,
            routes_without_allowed_sources: UnlistedSources::Allow,
            allow_privileged_ports: false,
        }
    }
}

/// DNS resolution of endpoint host names (hickory-resolver). Names are resolved in the
/// background and re-resolved when their TTL (clamped to `min_ttl..=max_ttl`) runs out; a
/// failed resolution keeps the last good addresses.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ResolverConfig {
    /// `ip:port` of DNS servers to ask (UDP and TCP). Default: empty, meaning the system's
    /// `/etc/resolv.conf` (search domains and `ndots` included).
    #[serde(default)]
    pub nameservers: Vec<SocketAddr>,
    /// Floor for a record's TTL: re-resolve at most this often. Default `1s`.
    #[serde(default = "defaults::min_ttl")]
    pub min_ttl: Duration,
    /// Ceiling for a record's TTL: re-resolve at least this often. Default `60s`.
    #[serde(default = "defaults::max_ttl")]
    pub max_ttl: Duration,
    /// After a failed resolution, retry after this long (the last good addresses stay in
    /// use meanwhile). Default `2s`.
    #[serde(default = "defaults::retry")]
    pub retry_after_failure: Duration,
    /// How long a starting proxy waits for the first answer (addresses, or that it has none) for each
    /// upstream name before `/readyz` answers 200: a pod the load balancer sends connections
    /// to can route them at once, instead of holding each until its name resolves. `0s`:
    /// ready as soon as the listeners are bound. Default `15s` (one lost UDP answer costs the
    /// resolver's 5 s query timeout, twice with both address families).
    #[serde(default = "defaults::warm_up")]
    pub warm_up: Duration,
}

impl Default for ResolverConfig {
    fn default() -> Self {
        Self {
            nameservers: Vec::new(),
            min_ttl: defaults::min_ttl(),
            max_ttl: defaults::max_ttl(),
            retry_after_failure: defaults::retry(),
            warm_up: defaults::warm_up(),
        }
    }
}

/// The admin endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AdminConfig {
    /// Address to serve admin HTTP on. Default `127.0.0.1:9901`. Changing it needs a restart.
    pub address: SocketAddr,
    /// Limits of the admin HTTP server. Changing them needs a restart.
    #[serde(default)]
    pub limits: HttpLimits,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            address: SocketAddr::from(([127, 0, 0, 1], 9901)),
            limits: HttpLimits::default(),
        }
    }
}

/// Limits of an HTTP/1 server (every admin endpoint, the tunnel's CONNECT front), so that no
/// client can hold it or its memory: at most `max_connections` connections of at most
/// `max_header_bytes` of buffered request head each (about 24 KiB per connection with hyper's
/// buffers: 6 MiB at the defaults), none waiting longer than `header_read_timeout`; on the
/// admin endpoints, none whose client stops reading for `write_timeout`, and none older than
/// `connection_timeout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct HttpLimits {
    /// Time a client has to send a complete request head (after the TLS handshake, if any);
    /// then the connection is closed. Also bounds an idle keep-alive connection and a TLS
    /// handshake. Default `10s`.
    #[serde(default = "defaults::header_read_timeout")]
    pub header_read_timeout: Duration,
    /// Most bytes of a request head (request line and headers); a larger head gets `431` and
    /// the connection is closed. Default `16384`; allowed 8192 to 1048576.
    #[serde(default = "defaults::max_header_bytes")]
    pub max_header_bytes: usize,
    /// Most connections at once. When one more arrives, the *oldest* open connection is
    /// closed, so that a probe always gets in: slow clients cannot keep `/readyz` from
    /// answering. Default `256`.
    #[serde(default = "defaults::http_max_connections")]
    pub max_connections: usize,
    /// Admin endpoints: a response the client does not read for this long (no byte written)
    /// closes the connection, with the bytes it held. Default `10s`.
    #[serde(default = "defaults::write_timeout")]
    pub write_timeout: Duration,
    /// Admin endpoints: a connection is closed at this age, however it is used and whatever
    /// it is doing (a response a slow client is still reading included); from this age minus
    /// `write_timeout` (or half of it, if less) it takes no new request. Default `60s`.
    #[serde(default = "defaults::connection_timeout")]
    pub connection_timeout: Duration,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: defaults::header_read_timeout(),
            max_header_bytes: defaults::max_header_bytes(),
            max_connections: defaults::http_max_connections(),
            write_timeout: defaults::write_timeout(),
            connection_timeout: defaults::connection_timeout(),
        }
    }
}

impl HttpLimits {
    /// Every problem of these limits, as `(field, message)` relative to `at`.
    pub fn problems(&self, at: &str) -> Vec<(String, String)> {
        let mut p = Vec::new();
        for (field, d) in [
            ("header_read_timeout", self.header_read_timeout),
            ("write_timeout", self.write_timeout),
            ("connection_timeout", self.connection_timeout),
        ] {
            if d.get().is_zero() {
                p.push((format!("{at}.{field}"), "must be more than 0s".into()));
            }
        }
        if !(8192..=1 << 20).contains(&self.max_header_bytes) {
            p.push((
                format!("{at}.max_header_bytes"),
                format!("{} is outside 8192..=1048576", self.max_header_bytes),
            ));
        }
        if self.max_connections == 0 {
            p.push((format!("{at}.max_connections"), "must be at least 1".into()));
        }
        p
    }
}
