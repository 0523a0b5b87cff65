//! The agent's allow-list entries: `CIDR`, `CIDR:port`, `IP`, `IP:port`, `[IPv6]:port`.
//! A pure parser and matcher, so the agent's check before any dial is easy to test.

use std::net::{IpAddr, SocketAddr};

/// One parsed `allow` entry: a network and optionally one port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllowRule {
    /// Network address (host bits zero).
    pub net: IpAddr,
    /// Prefix length.
    pub prefix: u8,
    /// The only port allowed, or any port.
    pub port: Option<u16>,
}

impl AllowRule {
    /// Parses `CIDR`, `CIDR:port`, `IP` or `[IPv6]:port`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let bad = |why: &str| format!("invalid allow entry {s:?}: {why}");
        let (addr, rest) = match s.split_once('/') {
            Some((a, r)) => (a, Some(r)),
            None => (s, None),
        };
        let (addr, prefix_text, port_text) = match rest {
            Some(r) => match r.split_once(':') {
                Some((p, port)) => (addr, Some(p), Some(port)),
                None => (addr, Some(r), None),
            },
            None => match s.parse::<SocketAddr>() {
                Ok(sa) => return Ok(Self::host(sa.ip(), Some(sa.port()))),
                Err(_) => (addr, None, None),
            },
        };
        let ip: IpAddr = addr
            .trim_matches(['[', ']'])
            .parse()
            .map_err(|_| bad("not an IP address"))?;
        let max = if ip.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix_text {
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| bad("bad prefix length"))?,
            None => max,
        };
        let port = match port_text {
            Some(p) => Some(
                p.parse::<u16>()
                    .ok()
                    .filter(|p| *p > 0)
                    .ok_or_else(|| bad("port must be 1-65535"))?,
            ),
            None => None,
        };
        let rule = Self {
            net: ip,
            prefix,
            port,
        };
        if rule.masked(ip) != ip {
            return Err(bad("host bits are set (write the network address)"));
        }
        Ok(rule)
    }

    fn host(ip: IpAddr, port: Option<u16>) -> Self {
        let prefix = if ip.is_ipv4() { 32 } else { 128 };
        Self {
            net: ip,
            prefix,
            port,
        }
    }

    fn masked(&self, ip: IpAddr) -> IpAddr {
        match ip {
            IpAddr::V4(v) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                IpAddr::from((u32::from(v) & mask).to_be_bytes())
            }
            IpAddr::V6(v) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                IpAddr::from((u128::from(v) & mask).to_be_bytes())
            }
        }
    }

    /// Whether `addr` is inside this rule.
    /// An IPv4-mapped IPv6 address matches as the IPv4 address it carries and as itself (a
    /// rule written in the mapped form, `::ffff:f:f`, matches it: found by the fuzzer).
    pub fn allows(&self, addr: SocketAddr) -> bool {
        let raw = addr.ip();
        [raw, raw.to_canonical()]
            .into_iter()
            .any(|ip| ip.is_ipv4() == self.net.is_ipv4() && self.masked(ip) == self.net)
            && self.port.is_none_or(|p| p == addr.port())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allow_rules_match() {
        let r = AllowRule::parse("10.250.0.0/16:10250").unwrap();
        assert!(r.allows("10.250.3.4:10250".parse().unwrap()));
        assert!(!r.allows("10.250.3.4:10251".parse().unwrap()));
        assert!(!r.allows("10.251.0.1:10250".parse().unwrap()));
        let r = AllowRule::parse("fd00::/8:443").unwrap();
        assert!(r.allows("[fd12::1]:443".parse().unwrap()));
        assert!(!r.allows("10.0.0.1:443".parse().unwrap()));
        let r = AllowRule::parse("127.0.0.1").unwrap();
        assert!(r.allows("127.0.0.1:9".parse().unwrap()));
        // The fuzzer's find: a rule in the IPv4-mapped form matches its own address, and an
        // IPv4 rule matches the mapped form a dual-stack socket reports.
        let mapped = AllowRule::parse("::ffff:f:f").unwrap();
        assert!(mapped.allows("[::ffff:f:f]:1".parse().unwrap()));
        assert!(r.allows("[::ffff:127.0.0.1]:9".parse().unwrap()));
        assert!(!r.allows("127.0.0.2:9".parse().unwrap()));
        assert_eq!(AllowRule::parse("127.0.0.1:8080").unwrap().port, Some(8080));
        assert!(AllowRule::parse("0.0.0.0/0")
            .unwrap()
            .allows("1.2.3.4:5".parse().unwrap()));
    }
}
