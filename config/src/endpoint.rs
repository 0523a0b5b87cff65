//! An upstream endpoint, parsed once when the file is valid, so that nothing downstream parses
//! the string again.

use crate::validate::normalize_sni_pattern;
use std::net::SocketAddr;

/// Where an upstream endpoint is: an address dialled as is, or a host name resolved in the
/// background.
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
    /// Parses `host:port`, `[ipv6]:port` or `ip:port`; the error is the message validation
    /// reports.
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
        normalize_sni_pattern(host)
            .ok()
            .filter(|h| !h.starts_with("*."))
            .ok_or_else(bad)?;
        Ok(Endpoint::Name {
            host: host.to_owned(),
            port,
        })
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
    }
}
