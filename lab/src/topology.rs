//! The lab's fixed topology: two seeds, the link between them, the members' names and routes,
//! and each seed's DNS (which names resolve to the local proxy, which to the link).

use crate::error::Result;
use crate::etcd::{MemberRef, Side};
use crate::link::Link;
use crate::proxy::Route;
use crate::seeds::Seed;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

/// Members per seed (3: the HA control plane of GEP-20).
pub const MEMBERS: u16 = 3;

/// The source members.
pub fn source() -> Vec<MemberRef> {
    (0..MEMBERS)
        .map(|index| MemberRef {
            side: Side::Source,
            index,
        })
        .collect()
}

/// The destination members.
pub fn destination() -> Vec<MemberRef> {
    (0..MEMBERS)
        .map(|index| MemberRef {
            side: Side::Destination,
            index,
        })
        .collect()
}

/// The two seeds and the emulated link between them.
#[derive(Debug)]
pub struct Topology {
    pub source: Seed,
    pub destination: Seed,
    pub link: Link,
}

impl Topology {
    /// Creates both seeds and a relay per remote member index in each direction.
    pub async fn new(rtt: Duration) -> Result<Self> {
        // A private 10.x.y.0/30 pair per lab: the pid and a counter keep parallel labs apart.
        static N: AtomicU8 = AtomicU8::new(0);
        let a = 100 + (std::process::id() % 100) as u8;
        let n = N.fetch_add(1, Ordering::Relaxed).wrapping_mul(2);
        let source = Seed::new("src", (a, n))?;
        let destination = Seed::new("dst", (a, n.wrapping_add(1)))?;
        let link = Link::new(rtt);
        for i in 0..MEMBERS {
            let port = 2380 + i;
            // The source seed reaches the destination's proxy through the host side of its veth.
            link.relay(
                SocketAddr::from((source.host_ip, port)),
                SocketAddr::from((destination.seed_ip, port)),
            )
            .await?;
            link.relay(
                SocketAddr::from((destination.host_ip, port)),
                SocketAddr::from((source.seed_ip, port)),
            )
            .await?;
        }
        Ok(Self {
            source,
            destination,
            link,
        })
    }

    /// The seed a member runs in.
    pub fn seed(&self, side: Side) -> &Seed {
        match side {
            Side::Source => &self.source,
            Side::Destination => &self.destination,
        }
    }

    /// Client URLs of these members.
    pub fn client_urls(&self, members: &[MemberRef]) -> Vec<String> {
        members
            .iter()
            .map(|m| m.client_url(self.seed(m.side)))
            .collect()
    }

    /// Writes both seeds' DNS for the exposed members (the DNSRecords): a seed resolves its own
    /// members to its proxy, the other seed's members to the link towards that seed.
    pub fn set_dns(&self, exposed: &[MemberRef]) -> Result<()> {
        for side in [Side::Source, Side::Destination] {
            let seed = self.seed(side);
            let entries: Vec<(String, String)> = exposed
                .iter()
                .map(|m| {
                    let addr = if m.side == side {
                        "127.0.0.1".to_string()
                    } else {
                        seed.host_ip.to_string()
                    };
                    (addr, m.dns())
                })
                .collect();
            seed.set_hosts(&entries)?;
        }
        Ok(())
    }
}

/// A seed's proxy routes for its exposed members.
pub fn routes(side: Side, exposed: &[MemberRef]) -> Vec<Route> {
    exposed
        .iter()
        .filter(|m| m.side == side)
        .map(|m| Route {
            index: m.index,
            host: m.dns(),
            upstream_port: m.peer_port(),
        })
        .collect()
}
