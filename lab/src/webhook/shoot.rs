//! The shoot: a third network namespace, outside both seeds, where the tunnel agents run as
//! `isthmus tunnel-agent` processes. The shoot is remote: it reaches each seed's ingress (the
//! seed's isthmus proxy) only through its own link emulator with the lab's RTT, a relay in
//! front of each seed listening on the host end of that seed's veth.
//!
//! The shoot's DNS is its own hosts file: `vpn-seed.lab` (the regular agent's server name)
//! points at the source seed's ingress and moves to the destination's; `vpn-destination.lab`
//! (the temporary agent's) always points at the destination's. The agents re-resolve every
//! [`RESOLVE`], so the move is a hosts-file change, as the DNSRecord change is in Gardener.
//!
//! This link is not the inter-seed link: a shoot's path to a seed does not cross the path
//! between the seeds, so the inter-seed cut of the `link-cut` scenario leaves it up.

use super::certs::Certs;
use super::process::Process;
use crate::error::{Error, Result};
use crate::link::Link;
use crate::proxy::{TUNNEL_PORT, TUNNEL_SNI};
use crate::seeds::Seed;
use crate::topology::Topology;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

/// The temporary agent's server name (resolves to the destination's ingress only).
const VPN_DESTINATION: &str = "vpn-destination.lab";
/// How often agents re-resolve their server names: the DNS move is noticed within this.
const RESOLVE: Duration = Duration::from_millis(100);
/// How long an agent's open streams may take when it drains.
pub(super) const DRAIN: Duration = Duration::from_secs(10);
/// Agents rotate their sessions (make before break) at this age, so that a restarting seed
/// proxy never cuts one: its `drain_timeout` is 3 s (`LAB_SETTINGS` in `crate::proxy`), and a
/// session opened through the old process just before it closed its listeners must have
/// rotated and finished its streams by then. Budget at the lab's largest RTT, 150 ms: set-up of
/// the replacement ≈ 3 RTT = 0.45 s, longest webhook call ≈ 0.81 s (measured max at 150 ms:
/// 300 ms in the webhook + ~3.5 RTT); 1.5 s + 0.45 s + 0.81 s = 2.76 s < 3 s.
const MAX_SESSION_AGE: Duration = Duration::from_millis(1500);

/// Which agent: they differ in server name and admin port (both run in the shoot).
#[derive(Debug, Clone, Copy)]
pub(super) enum Role {
    /// Dials `vpn-seed.lab`: the source, then the destination after the move.
    Regular,
    /// Dials the destination only, for the duration of the migration.
    Temporary,
}

#[derive(Debug)]
pub(super) struct Shoot {
    /// The namespace (a `Seed` by construction: veth, hosts file, commands inside).
    ns: Seed,
    /// Each seed's ingress as the shoot sees it: the relay in front of the seed's proxy.
    ingress: [Ipv4Addr; 2],
    /// The shoot→seeds link (kept for its relays' lifetime; it is never cut).
    _link: Link,
    dir: PathBuf,
}

impl Shoot {
    /// Creates the namespace, the link with `rtt` to each seed's ingress, and points
    /// `vpn-seed.lab` at the source.
    pub(super) async fn new(topo: &Topology, rtt: Duration, dir: &Path) -> Result<Self> {
        // Subnets 10.a.128+ never meet the seeds' 10.a.0.. pairs (see `Topology::new`).
        static N: AtomicU8 = AtomicU8::new(0);
        let a = 100 + (std::process::id() % 100) as u8;
        let n = 128 + (N.fetch_add(1, Ordering::Relaxed) % 100);
        let ns = Seed::new("shoot", (a, n))?;
        ns.route_via_host()?;
        let link = Link::new(rtt);
        let mut ingress = [Ipv4Addr::UNSPECIFIED; 2];
        for (i, seed) in [&topo.source, &topo.destination].into_iter().enumerate() {
            link.relay(
                SocketAddr::from((seed.host_ip, TUNNEL_PORT)),
                SocketAddr::from((seed.seed_ip, TUNNEL_PORT)),
            )
            .await
            .map_err(|e| Error::io("the link's relay", e))?;
            ingress[i] = seed.host_ip;
        }
        let shoot = Self {
            ns,
            ingress,
            _link: link,
            dir: dir.to_path_buf(),
        };
        shoot.point_vpn_at(0)?;
        Ok(shoot)
    }

    /// Where the shoot's webhook listens: the host end of the shoot's veth, the one address
    /// the agents reach without a link (the webhook is a pod of the shoot).
    pub(super) fn webhook_ip(&self) -> Ipv4Addr {
        self.ns.host_ip
    }

    /// The DNS move: `vpn-seed.lab` resolves to seed `i`'s ingress (0 source, 1 destination).
    pub(super) fn point_vpn_at(&self, i: usize) -> Result<()> {
        self.ns.set_hosts(&[
            (self.ingress[i].to_string(), TUNNEL_SNI.to_string()),
            (self.ingress[1].to_string(), VPN_DESTINATION.to_string()),
        ])
    }

    /// Starts an agent process in the shoot; the tunnel server's sessions show when it is in.
    pub(super) fn start_agent(&self, bin: &Path, certs: &Certs, role: Role) -> Result<Process> {
        let (stem, name, admin) = match role {
            Role::Regular => ("tunnel-agent-regular", TUNNEL_SNI, 9903),
            Role::Temporary => ("tunnel-agent-temporary", VPN_DESTINATION, 9904),
        };
        let (crt, key) = certs.pair("tunnel-agent");
        let yaml = format!(
            "servers:\n  - {{ address: \"{name}:{TUNNEL_PORT}\", server_name: \"{TUNNEL_SNI}\" }}\n\
             tls: {{ ca: \"{}\", cert: \"{}\", key: \"{}\" }}\n\
             allow: [\"{}/32\"]\n\
             admin: {{ address: \"127.0.0.1:{admin}\" }}\n\
             resolve_interval: {}ms\n\
             dial_timeout: 5s\n\
             backoff_initial: 50ms\n\
             backoff_max: 500ms\n\
             drain_timeout: {}s\n\
             max_session_age: {}ms\n",
            certs.ca().display(),
            crt.display(),
            key.display(),
            self.webhook_ip(),
            RESOLVE.as_millis(),
            DRAIN.as_secs(),
            MAX_SESSION_AGE.as_millis(),
        );
        Process::start(bin, &self.ns, "tunnel-agent", &self.dir, stem, &yaml)
    }
}
