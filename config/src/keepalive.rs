//! TCP keepalive of a socket (a listener's accepted sockets, an upstream's connections): a
//! leaf of the schema, so that the defaults, the `null` reader and both schemas name it
//! without naming each other.

use crate::defaults;
use crate::duration::Duration;
use serde::{Deserialize, Serialize};

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

/// A `tcp_keepalive` field's default: on, with the default probes.
pub(crate) fn on() -> Option<KeepaliveConfig> {
    Some(KeepaliveConfig::default())
}

/// Whether a `tcp_keepalive` field is at its default (for `skip_serializing_if`).
pub(crate) fn is_on(k: &Option<KeepaliveConfig>) -> bool {
    *k == on()
}
