//! An upstream of the proxy: its endpoints and the policy of connections to them.

use crate::duration::Duration;
use crate::endpoint::Endpoint;
use crate::keepalive::{self, KeepaliveConfig};
use crate::{defaults, nullable};
use serde::{Deserialize, Serialize};

/// A named group of endpoints. Serialised, it leaves out every field at its default: a seed's
/// file holds one upstream per member route, thousands of them.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// Unique name, referenced by routes and `default_upstream`.
    pub name: String,
    /// `host:port` endpoints (`10.1.2.3:2380`, `[fd00::1]:2380`, `etcd-0.etcd-peer.ns.svc:2380`).
    /// Host names are resolved in the background (see `resolver`); every address of a name
    /// is tried before the next endpoint.
    pub endpoints: Vec<Endpoint>,
    /// Time allowed for one TCP connect to one address. Default `10s`.
    #[serde(
        default = "defaults::connect_timeout",
        skip_serializing_if = "defaults::is_connect_timeout"
    )]
    pub connect_timeout: Duration,
    /// Most endpoints tried for one connection. Default: every endpoint once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_attempts: Option<u32>,
    /// `first_available` (default), `round_robin`, `least_connections` or
    /// `random_two_choices`.
    #[serde(default, skip_serializing_if = "defaults::is_default")]
    pub load_balancing: LoadBalancing,
    /// Close a spliced connection when no byte moved for this long. Default: never (Istio's
    /// 1 h default silently cuts idle etcd watches).
    #[serde(
        default,
        deserialize_with = "nullable::duration",
        skip_serializing_if = "Option::is_none"
    )]
    pub idle_timeout: Option<Duration>,
    /// Close a spliced connection this long after it was opened. Default: never.
    #[serde(
        default,
        deserialize_with = "nullable::duration",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_connection_duration: Option<Duration>,
    /// Most open connections to this upstream through this proxy; beyond it new connections
    /// are closed at once and counted. Default: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<usize>,
    /// Most open connections to this upstream from one client address (IPv6: its /64; the
    /// address of a trusted PROXY header, else the peer's), counted per listener; beyond it
    /// new connections are closed at once and counted (`outcome="source_overflow"`). For a
    /// server that cannot tell its clients apart (a tunnel server behind the proxy without
    /// PROXY headers sees one source), so that one client cannot take its share of
    /// everyone's. Default: no limit (the controller renders 16 on VPN upstreams).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_connections_per_source: Option<usize>,
    /// TCP keepalive of upstream sockets; `null` turns it off.
    #[serde(
        default = "keepalive::on",
        deserialize_with = "nullable::keepalive",
        skip_serializing_if = "keepalive::is_on"
    )]
    pub tcp_keepalive: Option<KeepaliveConfig>,
    /// Ejection of endpoints that keep failing.
    #[serde(default, skip_serializing_if = "defaults::is_default")]
    pub outlier_detection: OutlierDetection,
    /// Send a PROXY protocol header (`v1` or `v2`) before the client's bytes. Default `none`.
    #[serde(default, skip_serializing_if = "defaults::is_default")]
    pub send_proxy_protocol: SendProxyProtocol,
}

impl UpstreamConfig {
    /// An upstream with every setting at its default.
    pub fn new(name: impl Into<String>, endpoints: Vec<Endpoint>) -> Self {
        Self {
            name: name.into(),
            endpoints,
            connect_timeout: defaults::connect_timeout(),
            connect_attempts: None,
            load_balancing: LoadBalancing::default(),
            idle_timeout: None,
            max_connection_duration: None,
            max_connections: None,
            max_connections_per_source: None,
            tcp_keepalive: keepalive::on(),
            outlier_detection: OutlierDetection::default(),
            send_proxy_protocol: SendProxyProtocol::default(),
        }
    }
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
    /// Consecutive failed connects that eject an endpoint (a dial this process could not
    /// make, for lack of a descriptor, an ephemeral port or memory, does not count); `0`
    /// turns detection off. Default `5`.
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
