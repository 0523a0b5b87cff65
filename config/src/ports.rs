//! Which addresses the proxy's listeners and its admin endpoint may take.
//!
//! Listener sockets are bound with `SO_REUSEPORT` (a reload binds a moved listener before it
//! closes the old socket), so the kernel does not refuse two listeners on one port: it spreads
//! connections over both, or gives a specific address priority over a wildcard one. With the
//! admin endpoint's port that sent the kubelet's probes to a TLS listener (`/readyz` answered
//! 23 of 60) and every pod was restarted (issue 47, point 1). So two listeners, or a listener
//! and the admin endpoint, may not share a port where their addresses overlap: the same
//! address, or a wildcard (`0.0.0.0` covers every IPv4 address, `[::]` every address of both
//! families). Port 0 (the kernel picks a free one) never collides.
//!
//! A port below 1024 needs `CAP_NET_BIND_SERVICE`: a file that binds one where the process has
//! it would crash-loop every pod started without it, so it is refused unless the file says
//! `allow_privileged_ports: true`.

use crate::ProxyConfig;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};

/// The lowest port a process may bind without `CAP_NET_BIND_SERVICE`.
pub const FIRST_UNPRIVILEGED: u16 = 1024;

/// Every problem of the addresses of `c`, as `(field path, message)`.
pub(crate) fn problems(c: &ProxyConfig) -> Vec<(String, String)> {
    let mut p = Vec::new();
    let admin = c.admin.address;
    privileged(&mut p, c, "admin.address", admin);
    let mut taken: Vec<(SocketAddr, &str)> = Vec::new();
    for (i, l) in c.listeners.iter().enumerate() {
        let at = || format!("listeners[{i}].address");
        privileged(&mut p, c, &at(), l.address);
        if overlap(l.address, admin) {
            p.push((
                at(),
                format!(
                    "{} takes the port of the admin endpoint (admin.address {admin}): the \
                     probes would reach this listener",
                    l.address
                ),
            ));
        }
        if let Some((other, name)) = taken.iter().find(|(a, _)| overlap(*a, l.address)) {
            let message = if *other == l.address {
                format!("{} is already used by listener {name:?}", l.address)
            } else {
                format!(
                    "{} shares its port with listener {name:?} ({other}): a wildcard address \
                     takes the port on every address",
                    l.address
                )
            };
            p.push((at(), message));
        }
        taken.push((l.address, l.name.as_str()));
    }
    p
}

fn privileged(p: &mut Vec<(String, String)>, c: &ProxyConfig, at: &str, a: SocketAddr) {
    if (1..FIRST_UNPRIVILEGED).contains(&a.port()) && !c.allow_privileged_ports {
        p.push((
            at.to_owned(),
            format!(
                "port {} is below {FIRST_UNPRIVILEGED}: binding it needs CAP_NET_BIND_SERVICE, \
                 which the chart's pods do not have (a restarted pod would crash-loop); use a \
                 port of {FIRST_UNPRIVILEGED} or more, or set allow_privileged_ports: true \
                 where the process has the capability",
                a.port()
            ),
        ));
    }
}

/// Whether sockets bound to `a` and `b` would share connections: the same port (not 0) on
/// the same address, or on a wildcard address covering the other.
pub(crate) fn overlap(a: SocketAddr, b: SocketAddr) -> bool {
    if a.port() != b.port() || a.port() == 0 {
        return false;
    }
    let (x, y) = (a.ip().to_canonical(), b.ip().to_canonical());
    let covers = |w: IpAddr, o: IpAddr| {
        w == IpAddr::V6(Ipv6Addr::UNSPECIFIED) || (w.is_unspecified() && w.is_ipv4() == o.is_ipv4())
    };
    x == y || covers(x, y) || covers(y, x)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn addresses_overlap_on_one_port_when_equal_or_a_wildcard_covers_the_other() {
        for (x, y) in [
            ("10.0.0.1:443", "10.0.0.1:443"),
            ("0.0.0.0:443", "10.0.0.1:443"),
            ("[::]:443", "10.0.0.1:443"),
            ("[::]:443", "[fd00::1]:443"),
            ("[::ffff:10.0.0.1]:443", "10.0.0.1:443"),
            ("0.0.0.0:443", "[::ffff:10.0.0.1]:443"),
        ] {
            assert!(overlap(a(x), a(y)), "{x} {y}");
            assert!(overlap(a(y), a(x)), "{y} {x}");
        }
        for (x, y) in [
            ("10.0.0.1:443", "10.0.0.2:443"),
            ("0.0.0.0:443", "[fd00::1]:443"),
            ("0.0.0.0:443", "0.0.0.0:444"),
            ("127.0.0.1:0", "127.0.0.1:0"),
        ] {
            assert!(!overlap(a(x), a(y)), "{x} {y}");
        }
    }
}
