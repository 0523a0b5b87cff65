//! The lab's fixed topology: two seeds and the link between them (a relay per peer and client
//! port of the planner's port scheme, in each direction). What each seed's DNS and proxy hold
//! is the migration's business (`crate::world`, the drivers).

use crate::error::{Error, Result};
use crate::link::Link;
use crate::member::{MemberRef, MEMBERS};
use crate::seeds::Seed;
use crate::side::Side;
use isthmus_controller::crd::PortScheme;
use isthmus_seed_world::etcd::MemberDef;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

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
        let ports = (0..MEMBERS).flat_map(|i| {
            let i = u8::try_from(i).unwrap_or(u8::MAX);
            // Peer ports, and the client exposure's (what a controller reads etcd through).
            [
                PortScheme::default().peer(i),
                PortScheme::default().client(i),
            ]
        });
        for port in ports {
            // The source seed reaches the destination's proxy through the host side of its veth.
            link.relay(
                SocketAddr::from((source.host_ip, port)),
                SocketAddr::from((destination.seed_ip, port)),
            )
            .await
            .map_err(|e| Error::io("the link's relay", e))?;
            link.relay(
                SocketAddr::from((destination.host_ip, port)),
                SocketAddr::from((source.seed_ip, port)),
            )
            .await
            .map_err(|e| Error::io("the link's relay", e))?;
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

    /// Every member the lab may run, as the etcd harness runs it (each in its seed).
    pub fn member_defs(&self) -> Vec<MemberDef> {
        crate::member::all()
            .into_iter()
            .map(|m| m.def(self.seed(m.side)))
            .collect()
    }
}
