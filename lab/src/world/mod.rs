//! The world a run acts on: the two seeds and their link, each seed's proxy, the etcd cluster
//! (the seed world's harness, its members in the seeds' namespaces), the tunnel with its
//! webhook, and the shoot's kube-apiservers. Dropping it stops every process and deletes the
//! namespaces. It acts and answers; what happened is the caller's to record (`crate::record`).

pub mod hosts;

use crate::api::ShootApi;
use crate::error::Result;
use crate::member::{self, MemberRef};
use crate::proxy::SeedProxy;
use crate::seeds::Seed;
use crate::side::Side;
use crate::topology::Topology;
use crate::webhook::WebhookLab;
use isthmus_seed_world::etcd::Cluster;
use std::path::PathBuf;

/// Every process and link of one run.
#[derive(Debug)]
pub struct World {
    /// The run's scratch directory (certificates, configs, data, logs).
    pub dir: PathBuf,
    // Field order is drop order: processes before the namespaces they run in.
    /// The shoot's kube-apiservers, load and watch; taken by the report at the end.
    pub api: Option<ShootApi>,
    /// The webhook called through the tunnel; taken by the report at the end.
    pub webhook: Option<WebhookLab>,
    pub etcd: Cluster,
    /// Each seed's proxy (source, destination).
    pub proxies: [SeedProxy; 2],
    pub topo: Topology,
}

impl World {
    /// The seed of `side`.
    pub fn seed(&self, side: Side) -> &Seed {
        self.topo.seed(side)
    }

    /// Client URLs of `members`.
    pub fn urls(&self, members: &[MemberRef]) -> Vec<String> {
        self.topo.client_urls(members)
    }

    /// Client URLs of the voters: where a question to the cluster goes.
    pub fn voter_urls(&self) -> Vec<String> {
        self.etcd.voter_urls()
    }

    /// The lab's members in the cluster, in join order.
    pub fn members(&self) -> Vec<MemberRef> {
        refs(self.etcd.members())
    }

    /// The voting members.
    pub fn voters(&self) -> Vec<MemberRef> {
        refs(&self.etcd.voters())
    }

    /// Whether any of `side`'s members is in the cluster.
    pub fn has(&self, side: Side) -> bool {
        self.members().iter().any(|m| m.side == side)
    }

    /// etcd's member names and how many of `side`'s members are voters that serve: what
    /// etcd-druid reports as an `Etcd`'s members and ready replicas.
    pub async fn etcd_status(&self, side: Side) -> Result<(Vec<String>, i32)> {
        let own: Vec<String> = member::of(side).iter().map(MemberRef::name).collect();
        Ok(self.etcd.status(&own).await?)
    }

    /// `side`'s `Etcd` is deleted: its member processes stop and it has no members any more.
    pub fn forget_side(&mut self, side: Side) {
        for m in member::of(side) {
            self.etcd.forget(&m.name());
        }
    }
}

/// The lab members named `names` (the harness names every member the lab defines).
fn refs(names: &[String]) -> Vec<MemberRef> {
    names.iter().filter_map(|n| member::named(n)).collect()
}
