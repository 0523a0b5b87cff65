//! A listening socket of the proxy and its routes.

use crate::cidr::Cidr;
use crate::duration::Duration;
use crate::keepalive::{self, KeepaliveConfig};
use crate::sni::SniPattern;
use crate::{defaults, nullable};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;

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
    #[serde(
        default,
        deserialize_with = "nullable::string",
        skip_serializing_if = "Option::is_none"
    )]
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
    #[serde(
        default,
        deserialize_with = "nullable::string",
        skip_serializing_if = "Option::is_none"
    )]
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_connections_per_source: Option<usize>,
    /// Most open connections (pending or spliced) of this listener; beyond it new connections
    /// are closed at once and counted (`too_many_listener_connections`). The top-level
    /// `max_connections` is shared by every listener: this keeps one open to the internet
    /// (the VPN's) from taking what the others (etcd's) need. Default: no limit of its own
    /// (the controller renders one on its VPN listener).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<usize>,
    /// Source networks allowed to connect (`10.0.0.0/8`, `2001:db8::/32`, or a bare address).
    /// Matched against the client address of a PROXY header when one is honoured, else the
    /// peer's. Others are closed before anything is read and counted (`source_not_allowed`).
    /// Default: empty, meaning any source. Each route may narrow it further (its own
    /// `allowed_sources`, checked after the route is found).
    #[serde(default)]
    pub allowed_sources: Vec<Cidr>,
    /// Peers (the load balancer) whose PROXY protocol header is honoured. Required (non-empty)
    /// when `proxy_protocol` is `accept` or `require`, refused otherwise. A header from any
    /// other peer closes the connection (`untrusted_proxy`); with `require` such a peer is
    /// closed before anything is read. Default: empty.
    #[serde(default)]
    pub trusted_proxies: Vec<Cidr>,
    /// TCP keepalive of accepted (downstream) sockets; `null` turns it off.
    #[serde(default = "keepalive::on", deserialize_with = "nullable::keepalive")]
    pub tcp_keepalive: Option<KeepaliveConfig>,
    /// Routes. For `tls_passthrough` each has an `sni`: matching is case-insensitive and
    /// ignores a trailing dot; an exact name wins over a wildcard, and the longest
    /// `*.suffix` wildcard wins among wildcards. For `http_connect` each has a
    /// `header_value`: exact, or a pattern with `*` matching any run of characters (the
    /// exact value wins, then the pattern with the longest literal text).
    #[serde(default)]
    pub routes: Vec<RouteConfig>,
}

impl ListenerConfig {
    /// A listener with every setting at its default, as the file `{name, address}` gives it.
    pub fn new(name: impl Into<String>, address: SocketAddr) -> Self {
        Self {
            name: name.into(),
            address,
            client_hello_timeout: defaults::client_hello_timeout(),
            max_client_hello_bytes: defaults::max_client_hello_bytes(),
            default_upstream: None,
            reject_with_alert: defaults::yes(),
            kind: ListenerKind::default(),
            route_header: None,
            max_request_bytes: defaults::max_request_bytes(),
            proxy_protocol: ProxyProtocolMode::default(),
            max_pending_hellos: defaults::max_pending_hellos(),
            max_pending_hellos_per_source: defaults::max_pending_hellos_per_source(),
            max_connections_per_source: None,
            max_connections: None,
            allowed_sources: Vec::new(),
            trusted_proxies: Vec::new(),
            tcp_keepalive: keepalive::on(),
            routes: Vec::new(),
        }
    }
}

/// One route: an SNI (for `tls_passthrough`) or a header value (for `http_connect`), and the
/// sources it admits. Serialised, it leaves out what it does not set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// A host name (`etcd-main-0.shoot--foo--bar.seed-a.example.com`) or a wildcard
    /// (`*.vpn.seed-a.example.com`, matching one or more labels in front of the suffix);
    /// matched case-insensitively, a trailing dot ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sni: Option<SniPattern>,
    /// The value of the listener's `route_header`
    /// (`outbound|1194||vpn-seed-server-0.shoot--foo--bar.svc.cluster.local`), or a pattern
    /// with `*` (`outbound|1194||vpn-seed-server-*.svc.cluster.local`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub header_value: String,
    /// Name of the upstream that matching connections go to.
    pub upstream: String,
    /// Source networks this route admits, checked once the SNI (or header value) picked it,
    /// against the same client address as the listener's `allowed_sources`. Others are closed
    /// as an unknown name would be, and counted (`route_source_not_allowed`). Empty (default):
    /// the top-level `routes_without_allowed_sources` decides.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_sources: Vec<Cidr>,
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
