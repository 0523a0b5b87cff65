//! The schema of `isthmus proxy --config FILE`. Every field is documented here and in the
//! README's configuration reference; the two must stay in step.

use crate::{nullable, Cidr, Duration};
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
    /// Default `1s`; `0s` disables watching (SIGHUP still reloads).
    #[serde(default = "defaults::watch_interval")]
    pub watch_interval: Duration,
    /// Most connections open at once over all listeners; beyond it new connections are
    /// closed at once and counted. Default `100000`.
    #[serde(default = "defaults::max_connections")]
    pub max_connections: usize,
    /// How endpoint host names are resolved.
    #[serde(default)]
    pub resolver: ResolverConfig,
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
}

impl Default for ResolverConfig {
    fn default() -> Self {
        Self {
            nameservers: Vec::new(),
            min_ttl: defaults::min_ttl(),
            max_ttl: defaults::max_ttl(),
            retry_after_failure: defaults::retry(),
        }
    }
}

/// TCP keepalive probes (`SO_KEEPALIVE`, `TCP_KEEPIDLE`, `TCP_KEEPINTVL`, `TCP_KEEPCNT`).
/// They keep load-balancer and NAT state of idle etcd streams alive and detect dead peers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct KeepaliveConfig {
    /// Idle time before the first probe. Default `60s`.
    #[serde(default = "defaults::keepalive_time")]
    pub time: Duration,
    /// Time between probes. Default `10s`.
    #[serde(default = "defaults::keepalive_interval")]
    pub interval: Duration,
    /// Unanswered probes before the connection is declared dead. Default `6`.
    #[serde(default = "defaults::keepalive_probes")]
    pub probes: u32,
}

impl Default for KeepaliveConfig {
    fn default() -> Self {
        Self {
            time: defaults::keepalive_time(),
            interval: defaults::keepalive_interval(),
            probes: defaults::keepalive_probes(),
        }
    }
}

/// What a listener speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ListenerKind {
    /// TLS, routed by the ClientHello's SNI and passed through untouched.
    #[default]
    TlsPassthrough,
    /// One HTTP/1.1 CONNECT request, routed by the value of `route_header`; answered `200`
    /// once the upstream is connected, then spliced.
    HttpConnect,
}

/// Whether a listener expects a PROXY protocol header from the load balancer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProxyProtocolMode {
    /// No header is expected; bytes are TLS (or CONNECT) from the first byte.
    #[default]
    None,
    /// A v1 or v2 header is used when present.
    Accept,
    /// A v1 or v2 header must be present; connections without one are rejected.
    Require,
}

/// Which PROXY protocol header to send to an upstream before the client's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SendProxyProtocol {
    /// Send nothing.
    #[default]
    None,
    /// The text header (`PROXY TCP4 …\r\n`).
    V1,
    /// The binary header.
    V2,
}

/// How a connection picks among an upstream's endpoints. Whatever the choice, when the
/// chosen endpoint fails the others are tried (up to `connect_attempts`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LoadBalancing {
    /// Endpoints in the order written; the first that accepts gets the connection.
    #[default]
    FirstAvailable,
    /// Rotate the starting endpoint per connection.
    RoundRobin,
    /// The endpoint with the fewest open connections through this proxy.
    LeastConnections,
    /// Of two endpoints picked at random, the one with fewer open connections.
    RandomTwoChoices,
}

/// Ejection of endpoints that keep refusing connections (Istio's `outlierDetection` for TCP).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct OutlierDetection {
    /// Consecutive failed connects that eject an endpoint; `0` turns detection off.
    /// Default `5`.
    #[serde(default = "defaults::consecutive_failures")]
    pub consecutive_failures: u32,
    /// An ejection lasts this long times the number of times the endpoint has been ejected
    /// in a row (a successful connect resets the count). Default `30s`.
    #[serde(default = "defaults::base_ejection_time")]
    pub base_ejection_time: Duration,
    /// Most endpoints of the upstream ejected at once, in percent (at least one may always
    /// be ejected). If every endpoint is ejected, they are all tried anyway. Default `50`.
    #[serde(default = "defaults::max_ejection_percent")]
    pub max_ejection_percent: u32,
}

impl Default for OutlierDetection {
    fn default() -> Self {
        Self {
            consecutive_failures: defaults::consecutive_failures(),
            base_ejection_time: defaults::base_ejection_time(),
            max_ejection_percent: defaults::max_ejection_percent(),
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
    /// Admin endpoints: a connection this old finishes the response in progress (within
    /// `write_timeout`) and is closed, however it is used. Default `60s`.
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

/// One listening socket that routes TLS connections by the SNI of their ClientHello.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ListenerConfig {
    /// Unique name; used in metrics and to match the listener across reloads.
    pub name: String,
    /// Address and port, IPv4 (`0.0.0.0:2380`) or IPv6 (`[::]:2380`).
    pub address: SocketAddr,
    /// How long a client may take to send its complete ClientHello. Default `10s`.
    #[serde(default = "defaults::client_hello_timeout")]
    pub client_hello_timeout: Duration,
    /// Most bytes read while waiting for a complete ClientHello (all its TLS records).
    /// Default `16384`; allowed 512 to 1048576.
    #[serde(default = "defaults::max_client_hello_bytes")]
    pub max_client_hello_bytes: usize,
    /// Upstream for connections whose SNI matches no route or that send no SNI.
    /// Default: none, such connections are rejected.
    #[serde(default, deserialize_with = "nullable::string")]
    pub default_upstream: Option<String>,
    /// Send a TLS alert (`unrecognized_name`, `decode_error`, …) before closing a rejected
    /// connection, so the client's error says why. Default `true`.
    #[serde(default = "defaults::yes")]
    pub reject_with_alert: bool,
    /// `tls_passthrough` (default) or `http_connect`.
    #[serde(default)]
    pub kind: ListenerKind,
    /// For `http_connect`: the request header whose value selects the route
    /// (`X-Gardener-Destination`, legacy `Reversed-VPN`). Matched case-insensitively.
    #[serde(default, deserialize_with = "nullable::string")]
    pub route_header: Option<String>,
    /// For `http_connect`: most bytes of the request head. Default `8192`.
    #[serde(default = "defaults::max_request_bytes")]
    pub max_request_bytes: usize,
    /// `none` (default), `accept` or `require` a PROXY protocol v1/v2 header from the load
    /// balancer; the address it carries is the client's in logs, metrics and headers sent on.
    #[serde(default)]
    pub proxy_protocol: ProxyProtocolMode,
    /// Most connections of this listener still sending their ClientHello (or request). When
    /// one more has sent its first bytes, the *oldest* pending connection is closed and counted
    /// (`evicted`): a flood of slow clients cannot keep a fresh, fast one out. Default `1024`.
    #[serde(default = "defaults::max_pending_hellos")]
    pub max_pending_hellos: usize,
    /// Most pending connections (as for `max_pending_hellos`) of one source address (an IPv6
    /// source counts by its /64); when one more comes, that source's oldest pending connection
    /// is closed (`evicted`). Default `32`.
    #[serde(default = "defaults::max_pending_hellos_per_source")]
    pub max_pending_hellos_per_source: usize,
    /// Most open connections (pending or spliced) of one source address (IPv6: its /64) on
    /// this listener; beyond it new connections are closed at once and counted
    /// (`too_many_connections_per_source`). Default: no limit.
    #[serde(default)]
    pub max_connections_per_source: Option<usize>,
    /// Source networks allowed to connect (`10.0.0.0/8`, `2001:db8::/32`, or a bare address).
    /// Matched against the client address of a PROXY header when one is honoured, else the
    /// peer's. Others are closed before anything is read and counted (`source_not_allowed`).
    /// Default: empty, meaning any source.
    #[serde(default)]
    pub allowed_sources: Vec<Cidr>,
    /// Peers (the load balancer) whose PROXY protocol header is honoured. Required (non-empty)
    /// when `proxy_protocol` is `accept` or `require`, refused otherwise. A header from any
    /// other peer closes the connection (`untrusted_proxy`); with `require` such a peer is
    /// closed before anything is read. Default: empty.
    #[serde(default)]
    pub trusted_proxies: Vec<Cidr>,
    /// TCP keepalive of accepted (downstream) sockets; `null` turns it off.
    #[serde(
        default = "defaults::keepalive",
        deserialize_with = "nullable::keepalive"
    )]
    pub tcp_keepalive: Option<KeepaliveConfig>,
    /// Routes. For `tls_passthrough` each has an `sni`: matching is case-insensitive and
    /// ignores a trailing dot; an exact name wins over a wildcard, and the longest
    /// `*.suffix` wildcard wins among wildcards. For `http_connect` each has a
    /// `header_value`: exact, or a pattern with `*` matching any run of characters (the
    /// exact value wins, then the pattern with the longest literal text).
    #[serde(default)]
    pub routes: Vec<RouteConfig>,
}

/// One route: an SNI (for `tls_passthrough`) or a header value (for `http_connect`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// A host name (`etcd-main-0.shoot--foo--bar.seed-a.example.com`) or a wildcard
    /// (`*.vpn.seed-a.example.com`, matching one or more labels in front of the suffix).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sni: String,
    /// The value of the listener's `route_header`
    /// (`outbound|1194||vpn-seed-server-0.shoot--foo--bar.svc.cluster.local`), or a pattern
    /// with `*` (`outbound|1194||vpn-seed-server-*.svc.cluster.local`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub header_value: String,
    /// Name of the upstream that matching connections go to.
    pub upstream: String,
    /// `sni` normalised (lower case, no trailing dot), as route tables take it; filled once
    /// the file is valid.
    #[serde(skip)]
    pub sni_pattern: String,
}

/// A named group of endpoints.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// Unique name, referenced by routes and `default_upstream`.
    pub name: String,
    /// `host:port` endpoints (`10.1.2.3:2380`, `[fd00::1]:2380`, `etcd-0.etcd-peer.ns.svc:2380`).
    /// Host names are resolved in the background (see `resolver`); every address of a name
    /// is tried before the next endpoint.
    pub endpoints: Vec<String>,
    /// `endpoints` parsed, in the same order; filled once the file is valid.
    #[serde(skip)]
    pub targets: Vec<crate::Endpoint>,
    /// Time allowed for one TCP connect to one address. Default `10s`.
    #[serde(default = "defaults::connect_timeout")]
    pub connect_timeout: Duration,
    /// Most endpoints tried for one connection. Default: every endpoint once.
    #[serde(default)]
    pub connect_attempts: Option<u32>,
    /// `first_available` (default), `round_robin`, `least_connections` or
    /// `random_two_choices`.
    #[serde(default)]
    pub load_balancing: LoadBalancing,
    /// Close a spliced connection when no byte moved for this long. Default: never (Istio's
    /// 1 h default silently cuts idle etcd watches).
    #[serde(default, deserialize_with = "nullable::duration")]
    pub idle_timeout: Option<Duration>,
    /// Close a spliced connection this long after it was opened. Default: never.
    #[serde(default, deserialize_with = "nullable::duration")]
    pub max_connection_duration: Option<Duration>,
    /// Most open connections to this upstream through this proxy; beyond it new connections
    /// are closed at once and counted. Default: no limit.
    #[serde(default)]
    pub max_connections: Option<usize>,
    /// TCP keepalive of upstream sockets; `null` turns it off.
    #[serde(
        default = "defaults::keepalive",
        deserialize_with = "nullable::keepalive"
    )]
    pub tcp_keepalive: Option<KeepaliveConfig>,
    /// Ejection of endpoints that keep failing.
    #[serde(default)]
    pub outlier_detection: OutlierDetection,
    /// Send a PROXY protocol header (`v1` or `v2`) before the client's bytes. Default `none`.
    #[serde(default)]
    pub send_proxy_protocol: SendProxyProtocol,
}

mod defaults {
    use crate::Duration;
    pub fn header_read_timeout() -> Duration {
        Duration::from_secs(10)
    }
    pub fn max_header_bytes() -> usize {
        16 * 1024
    }
    pub fn write_timeout() -> Duration {
        Duration::from_secs(10)
    }
    pub fn connection_timeout() -> Duration {
        Duration::from_secs(60)
    }
    pub fn http_max_connections() -> usize {
        256
    }
    pub fn drain_delay() -> Duration {
        Duration::from_secs(5)
    }
    pub fn drain_timeout() -> Duration {
        Duration::from_secs(30)
    }
    pub fn watch_interval() -> Duration {
        Duration::from_secs(1)
    }
    pub fn client_hello_timeout() -> Duration {
        Duration::from_secs(10)
    }
    pub fn max_client_hello_bytes() -> usize {
        16 * 1024
    }
    pub fn yes() -> bool {
        true
    }
    pub fn max_connections() -> usize {
        100_000
    }
    pub fn min_ttl() -> Duration {
        Duration::from_secs(1)
    }
    pub fn max_ttl() -> Duration {
        Duration::from_secs(60)
    }
    pub fn retry() -> Duration {
        Duration::from_secs(2)
    }
    pub fn keepalive_time() -> Duration {
        Duration::from_secs(60)
    }
    pub fn keepalive_interval() -> Duration {
        Duration::from_secs(10)
    }
    pub fn keepalive_probes() -> u32 {
        6
    }
    pub fn keepalive() -> Option<super::KeepaliveConfig> {
        Some(super::KeepaliveConfig::default())
    }
    pub fn max_request_bytes() -> usize {
        8192
    }
    pub fn max_pending_hellos() -> usize {
        1024
    }
    pub fn max_pending_hellos_per_source() -> usize {
        32
    }
    pub fn connect_timeout() -> Duration {
        Duration::from_secs(10)
    }
    pub fn consecutive_failures() -> u32 {
        5
    }
    pub fn base_ejection_time() -> Duration {
        Duration::from_secs(30)
    }
    pub fn max_ejection_percent() -> u32 {
        50
    }
}
