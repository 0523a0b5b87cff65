//! `Cidr`: a network written `10.0.0.0/8`, `2001:db8::/32`, or a bare address (a single host),
//! as used by the proxy's `allowed_sources` and `trusted_proxies`.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::net::IpAddr;

/// A network: address with its host bits zero, and a prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Cidr {
    net: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Parses `ip/prefix` or a bare `ip` (a /32 or /128). Host bits must be zero.
    pub fn parse(s: &str) -> Result<Self, String> {
        let bad = |why: &str| format!("invalid CIDR {s:?}: {why}");
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let net: IpAddr = addr.parse().map_err(|_| bad("not an IP address"))?;
        let max = if net.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| bad(&format!("prefix length must be 0 to {max}")))?,
            None => max,
        };
        let c = Self { net, prefix };
        if mask(net, prefix) != net {
            return Err(bad("host bits are set (write the network address)"));
        }
        Ok(c)
    }

    /// Whether `ip` is inside the network. An IPv4-mapped IPv6 address (`::ffff:10.1.2.3`, what
    /// a dual-stack socket reports for an IPv4 client) matches as the IPv4 address it carries,
    /// and as itself (a network written in the mapped form matches it too).
    pub fn contains(&self, ip: IpAddr) -> bool {
        [ip, ip.to_canonical()]
            .into_iter()
            .any(|ip| ip.is_ipv4() == self.net.is_ipv4() && mask(ip, self.prefix) == self.net)
    }

    /// Whether it holds every address of its family (`0.0.0.0/0`, `::/0`).
    pub fn is_everything(&self) -> bool {
        self.prefix == 0
    }

    /// Whether any network of `list` contains `ip`.
    pub fn any_contains(list: &[Cidr], ip: IpAddr) -> bool {
        list.iter().any(|c| c.contains(ip))
    }
}

/// `ip` with every bit after the first `prefix` cleared.
pub fn mask(ip: IpAddr, prefix: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v) => {
            let m = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            IpAddr::from((u32::from(v) & m).to_be_bytes())
        }
        IpAddr::V6(v) => {
            let m = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            IpAddr::from((u128::from(v) & m).to_be_bytes())
        }
    }
}

impl<'de> Deserialize<'de> for Cidr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        crate::text::parse_str(d, "a CIDR such as 10.0.0.0/8, or an address", Self::parse)
    }
}

impl Serialize for Cidr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.net, self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_match() {
        let c = Cidr::parse("10.0.0.0/8").unwrap();
        assert!(c.contains("10.200.1.2".parse().unwrap()));
        assert!(c.contains("::ffff:10.1.2.3".parse().unwrap()));
        assert!(!c.contains("11.0.0.1".parse().unwrap()));
        assert!(!c.contains("fd00::1".parse().unwrap()));
        let host = Cidr::parse("192.0.2.7").unwrap();
        assert_eq!(host.to_string(), "192.0.2.7/32");
        assert!(host.contains("192.0.2.7".parse().unwrap()));
        assert!(!host.contains("192.0.2.8".parse().unwrap()));
        let v6 = Cidr::parse("2001:db8::/32").unwrap();
        assert!(v6.contains("2001:db8:1::9".parse().unwrap()));
        assert!(Cidr::parse("0.0.0.0/0")
            .unwrap()
            .contains("1.2.3.4".parse().unwrap()));
        for bad in [
            "10.0.0.1/8",
            "10.0.0.0/33",
            "x/8",
            "",
            "fd00::/129",
            "10.0.0.0/",
        ] {
            assert!(Cidr::parse(bad).is_err(), "{bad} was accepted");
        }
    }
}
