//! The etcd cluster as etcd-druid's pods keep it: which members are in it (and which vote),
//! the peer URLs each advertises, the member processes that run, and the members that were
//! removed (they never rejoin: etcd-druid#1426's anti-rejoin guard, DEP-08). Its changes are
//! etcd-druid's: a member started with the cluster's current `--initial-cluster`, a learner
//! added and started only once every member lists it, a learner promoted once it caught up,
//! a member removed with quorum checked (leadership moved off it first when it leads).

mod changes;
mod reads;

use super::process::MemberProcess;
use super::MemberDef;
use crate::error::{Error, Result};
use isthmus_testkit::Scratch;
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// The cluster's membership and processes.
#[derive(Debug)]
pub struct Cluster {
    dir: PathBuf,
    defs: Vec<MemberDef>,
    processes: Vec<MemberProcess>,
    /// Members in the cluster (as etcd-druid believes), in join order.
    members: Vec<String>,
    /// Members that vote: started with the cluster, or promoted.
    voters: BTreeSet<String>,
    /// The peer URLs each member advertises (etcd's member list as the harness set it); a
    /// member not in it advertises its in-cluster URL.
    advertised: HashMap<String, Vec<String>>,
    /// Members removed from the cluster: never added again.
    removed: BTreeSet<String>,
    /// The `spec.etcd.serverPort` of the `Etcd` whose druid runs each member: the port of its
    /// in-cluster peer URL outside the harness (which serves each member at a loopback port
    /// of its own); etcd-druid's default where no druid said.
    server_ports: HashMap<String, u16>,
    /// Whether members run with `--pre-vote` (see [`MemberProcess::start`]).
    pub pre_vote: bool,
    /// The pods leave learners unpromoted (a learner still catching up): the window an abort
    /// needs, which a controller's reaction time would otherwise miss.
    pub hold_promotion: bool,
    /// The directory, removed last, when the cluster owns it.
    scratch: Option<Scratch>,
}

impl Cluster {
    /// A cluster of none of `defs` yet, its files (certificates, data, logs) in `dir`.
    pub fn new(dir: &Path, defs: Vec<MemberDef>, pre_vote: bool) -> Self {
        Self {
            dir: dir.to_path_buf(),
            defs,
            processes: Vec::new(),
            members: Vec::new(),
            voters: BTreeSet::new(),
            advertised: HashMap::new(),
            removed: BTreeSet::new(),
            server_ports: HashMap::new(),
            pre_vote,
            hold_promotion: false,
            scratch: None,
        }
    }

    /// [`Cluster::new`] in `scratch`, which goes with the cluster.
    pub fn in_scratch(scratch: Scratch, defs: Vec<MemberDef>, pre_vote: bool) -> Self {
        let mut c = Self::new(scratch.path(), defs, pre_vote);
        c.scratch = Some(scratch);
        c
    }

    /// The directory of its files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Member `name`'s definition.
    pub fn def(&self, name: &str) -> Result<&MemberDef> {
        self.defs
            .iter()
            .find(|d| d.name == name)
            .ok_or_else(|| Error::State(format!("the harness runs no member {name}")))
    }

    /// The member named `name`, or listed with peer URL `name` (a learner not started yet).
    pub fn find(&self, name_or_url: &str) -> Option<&MemberDef> {
        self.defs.iter().find(|d| {
            d.name == name_or_url
                || d.exposed_peer_url == name_or_url
                || d.in_cluster_peer_url == name_or_url
        })
    }

    /// Members in the cluster, in join order.
    pub fn members(&self) -> &[String] {
        &self.members
    }

    /// Whether `name` is in the cluster.
    pub fn is_member(&self, name: &str) -> bool {
        self.members.iter().any(|m| m == name)
    }

    /// Whether `name` votes.
    pub fn is_voter(&self, name: &str) -> bool {
        self.voters.contains(name)
    }

    /// Records the `Etcd`'s `spec.etcd.serverPort` for its member `name`.
    pub fn set_server_port(&mut self, name: &str, port: u16) {
        self.server_ports.insert(name.to_string(), port);
    }

    /// The port `name`'s in-cluster peer URL has outside the harness.
    pub fn server_port(&self, name: &str) -> u16 {
        self.server_ports
            .get(name)
            .copied()
            .unwrap_or(isthmus_controller::plan::DRUID_SERVER_PORT)
    }

    /// Whether `name` was removed from the cluster (it never rejoins).
    pub fn was_removed(&self, name: &str) -> bool {
        self.removed.contains(name)
    }

    /// Voting members, in join order.
    pub fn voters(&self) -> Vec<String> {
        self.members
            .iter()
            .filter(|m| self.voters.contains(*m))
            .cloned()
            .collect()
    }

    /// Members whose process runs.
    pub fn running(&self) -> Vec<String> {
        self.processes.iter().map(|p| p.name.clone()).collect()
    }

    /// The peer URLs `name` advertises now.
    pub fn peer_urls(&self, name: &str) -> Vec<String> {
        match self.advertised.get(name) {
            Some(urls) => urls.clone(),
            None => self
                .def(name)
                .map(|d| vec![d.in_cluster_peer_url.clone()])
                .unwrap_or_default(),
        }
    }

    /// Client URLs of `names`.
    pub fn client_urls(&self, names: &[String]) -> Vec<String> {
        names
            .iter()
            .filter_map(|n| self.def(n).ok().map(|d| d.client_url.clone()))
            .collect()
    }

    /// Client URLs of the voters: where a question to the cluster goes.
    pub fn voter_urls(&self) -> Vec<String> {
        self.client_urls(&self.voters())
    }

    /// `--initial-cluster` of the members in the cluster, with the URLs they advertise.
    fn initial_cluster(&self) -> String {
        self.members
            .iter()
            .flat_map(|m| {
                self.peer_urls(m)
                    .into_iter()
                    .map(move |u| format!("{m}={u}"))
            })
            .collect::<Vec<_>>()
            .join(",")
    }
}
