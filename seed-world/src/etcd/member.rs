//! One member as the harness knows it: the names etcd-druid gives it, where it listens, where
//! its process runs; and how etcd lists it.

use std::path::PathBuf;
use std::process::Command;

/// Where a member's process runs, which decides what its DNS resolves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// Inside network namespace `.0` (`ip netns exec`), whose `/etc/netns/<ns>/hosts` is its
    /// DNS: the lab's seeds.
    Netns(String),
    /// In this network namespace with `.0` bind-mounted over `/etc/hosts` in a mount namespace
    /// of its own (`unshare -m`): the controller tests, whose names all resolve to loopback.
    PrivateHosts(PathBuf),
}

impl Place {
    /// A command that runs `program` there.
    pub fn command(&self, program: &str) -> Command {
        match self {
            Place::Netns(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, program]);
                c
            }
            Place::PrivateHosts(hosts) => {
                let mut c = Command::new("unshare");
                let script = format!(
                    "mount --bind {} /etc/hosts && exec \"$0\" \"$@\"",
                    hosts.display()
                );
                c.args(["-m", "sh", "-c", &script, program]);
                c
            }
        }
    }
}

/// One member the harness may run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberDef {
    /// etcd's member name (`etcd-main-0`, `dest-etcd-main-0`).
    pub name: String,
    /// Its exposed peer URL: advertised during a migration; a learner is added with it, and
    /// listed by it until it starts (a learner that has not started has no name in etcd).
    pub exposed_peer_url: String,
    /// Its in-cluster peer URL (etcd-druid's peer Service): what it advertises otherwise.
    pub in_cluster_peer_url: String,
    /// Where it listens for peers (`https://127.0.0.1:<port>`).
    pub listen_peer_url: String,
    /// Its plain client URL: where the harness asks it, and what it advertises to clients.
    pub client_url: String,
    /// Its TLS client listener (client certificates of the cluster's CA): what the controller
    /// reads etcd through.
    pub tls_client_url: String,
    /// Where its process runs.
    pub place: Place,
}

impl MemberDef {
    /// Whether `l` is this member in etcd's list: by name, or, for a learner that has not
    /// started (no name yet), by the exposed URL it was added with.
    pub fn listed_as(&self, l: &Listed) -> bool {
        if l.name.is_empty() {
            l.peer_urls.contains(&self.exposed_peer_url)
        } else {
            l.name == self.name
        }
    }
}

/// One member as the cluster lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub id: u64,
    pub name: String,
    pub peer_urls: Vec<String>,
    pub learner: bool,
}
