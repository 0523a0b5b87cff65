//! An upstream endpoint, parsed once while the file is read, so that nothing downstream parses
//! the string again.

use crate::SniPattern;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::net::SocketAddr;

/// Where an upstream endpoint is: an address dialled as is, or a host name resolved in the
/// background. Written `10.1.2.3:2380`, `[fd00::1]:2380` or `etcd-0.etcd-peer.ns.svc:2380`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// `10.1.2.3:2380`, `[fd00::1]:2380`.
    Addr(SocketAddr),
    /// `etcd-0.etcd-peer.ns.svc:2380`: the host as written and the port.
    Name {
        /// The host name.
        host: String,
        /// The port, 1-65535.
        port: u16,
    },
}

impl Endpoint {
    /// Parses `host:port`, `[ipv6]:port` or `ip:port`; the error is the message an operator
    /// sees for the field.
    pub fn parse(e: &str) -> Result<Endpoint, String> {
        if let Ok(a) = e.parse::<SocketAddr>() {
            return Ok(Endpoint::Addr(a));
        }
        let bad = || format!("invalid endpoint {e:?}: write host:port, [ipv6]:port or ip:port");
        let (host, port) = e.rsplit_once(':').ok_or_else(bad)?;
        if host.is_empty() || host.contains(':') || host.starts_with('[') {
            return Err(bad());
        }
        let port = match port.parse::<u16>() {
            Ok(p) if p > 0 => p,
            _ => return Err(format!("invalid endpoint {e:?}: port must be 1-65535")),
        };
        SniPattern::parse(host)
            .ok()
            .filter(|h| !h.is_wildcard())
            .ok_or_else(bad)?;
        Ok(Endpoint::Name {
            host: host.to_owned(),
            port,
        })
    }
}

/// As written (an address in its canonical form): the `endpoint` label of the metrics.
impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Addr(a) => write!(f, "{a}"),
            Endpoint::Name { host, port } => write!(f, "{host}:{port}"),
        }
    }
}

impl<'de> Deserialize<'de> for Endpoint {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        crate::text::parse_str(d, "host:port, [ipv6]:port or ip:port", Self::parse)
    }
}

impl Serialize for Endpoint {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::Endpoint;

    #[test]
    fn addresses_and_names() {
        assert_eq!(
            Endpoint::parse("[::1]:2379"),
            Ok(Endpoint::Addr(
                "[::1]:2379".parse().unwrap_or_else(|_| unreachable!())
            ))
        );
        assert_eq!(
            Endpoint::parse("Etcd-0.peer:2380"),
            Ok(Endpoint::Name {
                host: "Etcd-0.peer".into(),
                port: 2380
            })
        );
        assert!(Endpoint::parse("no-port").is_err());
        assert!(Endpoint::parse("a:0").is_err());
        assert!(Endpoint::parse("*.a:1").is_err());
        for text in ["[::1]:2379", "10.0.0.1:2380", "Etcd-0.peer:2380"] {
            let shown = Endpoint::parse(text).map(|e| e.to_string());
            assert_eq!(shown.as_deref(), Ok(text));
        }
    }
}
