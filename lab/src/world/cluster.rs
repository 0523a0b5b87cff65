//! The etcd cluster as etcd-druid keeps it: which members are in it (and which of them vote),
//! the peer URLs each advertises, and the member processes that run.

use crate::etcd::{initial_cluster, Member};
use crate::member::MemberRef;
use crate::side::Side;
use std::collections::HashMap;

/// The cluster's membership and processes.
#[derive(Debug, Default)]
pub struct Cluster {
    /// The running member processes.
    pub processes: Vec<Member>,
    /// Members in the cluster (as etcd-druid believes), in join order.
    pub members: Vec<MemberRef>,
    /// Destination members promoted to voters (source members vote from the start).
    pub promoted: Vec<MemberRef>,
    /// The peer URLs each member advertises (etcd's member list as the lab set it); a member
    /// not in it advertises its in-cluster URL.
    pub advertised: HashMap<MemberRef, Vec<String>>,
    /// Whether members run with `--pre-vote` (see [`crate::etcd::Member::start`]).
    pub pre_vote: bool,
    /// etcd-druid leaves learners unpromoted (a learner still catching up): the abort
    /// scenario's window, which a controller's reaction time would otherwise miss.
    pub hold_promotion: bool,
}

impl Cluster {
    /// An empty cluster whose members will run with `--pre-vote={pre_vote}`.
    pub fn new(pre_vote: bool) -> Self {
        Self {
            pre_vote,
            ..Self::default()
        }
    }

    /// Voting members (source members start as voters; others after promotion).
    pub fn voters(&self) -> Vec<MemberRef> {
        self.members
            .iter()
            .copied()
            .filter(|m| m.side == Side::Source || self.promoted.contains(m))
            .collect()
    }

    /// Whether any of `side`'s members is in the cluster.
    pub fn has(&self, side: Side) -> bool {
        self.members.iter().any(|m| m.side == side)
    }

    /// The peer URLs `m` advertises now.
    pub fn peer_urls(&self, m: MemberRef) -> Vec<String> {
        self.advertised
            .get(&m)
            .cloned()
            .unwrap_or_else(|| vec![m.in_cluster_url()])
    }

    /// `--initial-cluster` of the members in the cluster, with the URLs they advertise.
    pub fn initial_cluster(&self) -> String {
        let entries: Vec<(MemberRef, Vec<String>)> = self
            .members
            .iter()
            .map(|m| (*m, self.peer_urls(*m)))
            .collect();
        initial_cluster(&entries)
    }

    /// `m` left the cluster: its process stops (dropped), its URLs are forgotten.
    pub fn forget(&mut self, m: MemberRef) {
        self.members.retain(|x| *x != m);
        self.promoted.retain(|x| *x != m);
        self.processes.retain(|x| x.r != m);
        self.advertised.remove(&m);
    }

    /// `side`'s `Etcd` is deleted: its member processes stop and it has no members any more.
    /// (Their URLs stay as they were: no member of that side runs to advertise them.)
    pub fn forget_side(&mut self, side: Side) {
        self.processes.retain(|m| m.r.side != side);
        self.members.retain(|m| m.side != side);
        self.promoted.retain(|m| m.side != side);
    }
}
