//! The lab's etcd members by name: which seed and index a member is, the names and URLs the
//! controller's planner gives it (`crate::specs`), the ports it listens on inside its seed, and
//! how it shows in etcd's member list.
//!
//! A member has two possible peer URLs: its in-cluster one (etcd-druid's peer Service name,
//! `<pod>.<etcd>-peer.<namespace>.svc`, spelled alike in both seeds and resolved by each seed
//! to its own pod) and its exposed one. Which it advertises is the etcd-druid stand-in's
//! business (the seed world's etcd-druid); a listed member is recognised by its name, or by
//! its exposed URL while it is a learner that has not started (learners are added with it).

use crate::seeds::Seed;
use crate::side::Side;
use crate::specs::{self, ETCD, NAMESPACE};
use isthmus_controller::crd::Step;
use isthmus_controller::plan;
use isthmus_seed_world::etcd::{MemberDef, Place};

/// Members per seed (3: the HA control plane of GEP-20).
pub const MEMBERS: u16 = 3;

/// A member's identity: seed and index (the index picks its proxy listener, 2380 + index).
/// Its names and URLs come from the controller's planner (`crate::specs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MemberRef {
    pub side: Side,
    pub index: u16,
}

/// `side`'s members.
pub fn of(side: Side) -> Vec<MemberRef> {
    (0..MEMBERS)
        .map(|index| MemberRef { side, index })
        .collect()
}

/// The source members.
pub fn source() -> Vec<MemberRef> {
    of(Side::Source)
}

/// The destination members.
pub fn destination() -> Vec<MemberRef> {
    of(Side::Destination)
}

/// Every member the lab may run, source first.
pub fn all() -> Vec<MemberRef> {
    [source(), destination()].concat()
}

/// The lab's member named `name`, if any.
pub fn named(name: &str) -> Option<MemberRef> {
    all().into_iter().find(|m| m.name() == name)
}

impl MemberRef {
    /// The etcd member name, as the planner spells it (`crate::specs`): the destination's
    /// carries etcd-druid's member-name prefix.
    pub fn name(&self) -> String {
        self.planned(|m| m.member)
    }
    /// The member's DNS name (`<pod>.<namespace>.<seed>.<domain>`): what its seed's proxy routes
    /// on (SNI) and what peers resolve.
    pub fn dns(&self) -> String {
        self.planned(|m| m.dns_name)
    }
    /// The advertised peer URL on the planner's peer port (`PortScheme`: 2380 + index): a DNS
    /// name (Go sends no SNI for IP addresses).
    pub fn peer_url(&self) -> String {
        self.planned(|m| m.peer_url())
    }
    /// The in-cluster peer name, etcd-druid's peer Service: `<pod>.<etcd>-peer.<namespace>.svc`.
    /// The pod names are the same in both seeds (`etcd-main-<i>`), so the name is too.
    pub fn in_cluster_dns(&self) -> String {
        format!("{}.{ETCD}-peer.{NAMESPACE}.svc", self.planned(|m| m.pod))
    }
    /// Its pod's in-cluster DNS name as etcd-druid's headless peer Service spells it in a
    /// cluster (`<pod>.etcd-main-peer.<ns>.svc.cluster.local`): where the controller's rendered
    /// proxy routes point. Each seed resolves its own members' names to [`Self::pod_ip`].
    pub fn pod_dns(&self) -> String {
        format!("{}.cluster.local", self.in_cluster_dns())
    }
    /// The member's "pod address" inside its seed: a loopback address of its own whose pod
    /// ports (2380 peer, 2379 client) the seed translates to the member's lab ports
    /// ([`crate::seeds::Seed::pod_ports`], what kube-proxy and pod networking do in a cluster;
    /// the seed's proxy holds 2380 and 2379 on every local address itself).
    pub fn pod_ip(&self) -> std::net::Ipv4Addr {
        let i = u8::try_from(self.index).unwrap_or(0);
        std::net::Ipv4Addr::new(127, 0, 1, 10u8.saturating_add(i))
    }
    /// The in-cluster peer URL: reaches the member directly inside its own seed (its listen
    /// port, not the proxy's).
    pub fn in_cluster_url(&self) -> String {
        format!("https://{}:{}", self.in_cluster_dns(), self.peer_port())
    }
    fn planned(&self, f: impl FnOnce(plan::Member) -> String) -> String {
        // Every lab member (index < 3) has a planner entry; an empty name would fail loudly
        // in etcd's flag parsing rather than silently.
        self.plan_entry().map(f).unwrap_or_default()
    }
    /// The planner's view of this member: its member name, DNS name and ports.
    fn plan_entry(&self) -> Option<plan::Member> {
        let index = u8::try_from(self.index).ok()?;
        let mut s = specs::spec(self.side, Step::Expose);
        s.members = index.checked_add(1)?;
        plan::members(&s, NAMESPACE).pop()
    }
    /// Where the member listens for peers (behind its seed's proxy). Not the planner's 2380:
    /// the proxy and every member share the seed's one namespace, and the proxy holds 2380+.
    pub fn peer_port(&self) -> u16 {
        12380 + self.index
    }
    /// Where the member serves clients over TLS (the client exposure's upstream, its pod
    /// port 2379 in a cluster), inside its seed.
    pub fn tls_client_port(&self) -> u16 {
        24379 + self.index
    }
    /// Where the member listens for clients (on the seed side of the veth), for the same reason
    /// not the planner's client port.
    pub fn client_port(&self) -> u16 {
        22379 + self.index
    }
    /// The client URL, reachable from the host namespace over the seed's veth.
    pub fn client_url(&self, seed: &Seed) -> String {
        format!("http://{}:{}", seed.seed_ip, self.client_port())
    }
    /// The member as the etcd harness runs it, inside `seed`.
    pub fn def(&self, seed: &Seed) -> MemberDef {
        MemberDef {
            name: self.name(),
            exposed_peer_url: self.peer_url(),
            in_cluster_peer_url: self.in_cluster_url(),
            listen_peer_url: format!("https://127.0.0.1:{}", self.peer_port()),
            client_url: self.client_url(seed),
            tls_client_url: format!("https://127.0.0.1:{}", self.tls_client_port()),
            place: Place::Netns(seed.netns().to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lab_names_are_the_planners() {
        let m = MemberRef {
            side: Side::Destination,
            index: 1,
        };
        assert_eq!(m.name(), "dest-etcd-main-1");
        assert_eq!(m.dns(), "etcd-main-1.shoot--lab.destination.lab.test");
        assert_eq!(
            m.peer_url(),
            "https://etcd-main-1.shoot--lab.destination.lab.test:2381"
        );
        let s = MemberRef {
            side: Side::Source,
            index: 2,
        };
        assert_eq!(s.name(), "etcd-main-2");
        assert_eq!(
            s.peer_url(),
            "https://etcd-main-2.shoot--lab.source.lab.test:2382"
        );
    }
}
