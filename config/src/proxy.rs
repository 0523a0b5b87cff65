//! The schema of `isthmus proxy --config FILE`. Every field is documented here and in the
//! README's configuration reference; the two must stay in step.

use crate::{nullable, Duration};
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
}

/// The admin endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AdminConfig {
    /// Address to serve admin HTTP on. Default `127.0.0.1:9901`. Changing it needs a restart.
    pub address: SocketAddr,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            address: SocketAddr::from(([127, 0, 0, 1], 9901)),
        }
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
    /// SNI routes. Matching is case-insensitive and ignores a trailing dot; an exact name wins
    /// over a wildcard, and the longest `*.suffix` wildcard wins among wildcards.
    #[serde(default)]
    pub routes: Vec<RouteConfig>,
}

/// One SNI route.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// A host name (`etcd-main-0.shoot--foo--bar.seed-a.example.com`) or a wildcard
    /// (`*.vpn.seed-a.example.com`, matching one or more labels in front of the suffix).
    pub sni: String,
    /// Name of the upstream that matching connections go to.
    pub upstream: String,
}

/// A named group of endpoints.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// Unique name, referenced by routes and `default_upstream`.
    pub name: String,
    /// `host:port` endpoints (`10.1.2.3:2380`, `[fd00::1]:2380`, `etcd-0.etcd-peer.ns.svc:2380`),
    /// tried in order: the first that accepts the TCP connection gets it.
    pub endpoints: Vec<String>,
}

mod defaults {
    use crate::Duration;
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
}
