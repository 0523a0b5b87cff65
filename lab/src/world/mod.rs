//! The world a run acts on: the two seeds and their link, each seed's proxy, the etcd cluster,
//! the tunnel with its webhook, and the shoot's kube-apiservers. Dropping it stops every
//! process and deletes the namespaces. It acts and answers; what happened is the caller's to
//! record (`crate::record`).

pub mod cluster;
pub mod hosts;
mod membership;

use crate::api::ShootApi;
use crate::error::{Error, Result};
use crate::etcd::{self, Member};
use crate::member::MemberRef;
use crate::proxy::SeedProxy;
use crate::seeds::Seed;
use crate::side::Side;
use crate::topology::Topology;
use crate::webhook::WebhookLab;
use cluster::Cluster;
use isthmus_controller::plan::{EtcdCluster, EtcdMember};
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
        self.urls(&self.etcd.voters())
    }

    /// Member names as etcd lists them (learners marked), asked of `urls`.
    pub async fn member_names(&self, urls: &[String]) -> Result<Vec<String>> {
        let mut c = etcd::connect(urls).await?;
        Ok(etcd::list(&mut c)
            .await?
            .iter()
            .map(crate::member::Listed::marked_name)
            .collect())
    }

    /// etcd's own member list and leader, with learners named by their peer URL (what the
    /// controller reads through the client exposure); `None` if the voters do not answer.
    pub async fn etcd_cluster(&self) -> Option<EtcdCluster> {
        let mut c = etcd::connect(&self.voter_urls()).await.ok()?;
        let listed = etcd::list(&mut c).await.ok()?;
        let status = c.status().await.ok();
        let leader = status.as_ref().map(|s| s.leader());
        let version = status.map(|s| s.version().to_string());
        Some(EtcdCluster {
            members: listed
                .into_iter()
                .map(|l| EtcdMember {
                    id: l.id,
                    name: l.name,
                    peer_urls: l.peer_urls,
                    is_learner: l.learner,
                })
                .collect(),
            leader,
            version,
        })
    }

    /// etcd's member names (learners included; a learner not started yet has no name in etcd,
    /// so names come from peer URLs) and how many of `side`'s members are voters that serve:
    /// what etcd-druid reports as an `Etcd`'s members and ready replicas.
    pub async fn etcd_status(&self, side: Side) -> Result<(Vec<String>, i32)> {
        let voters = self.etcd.voters();
        let mut c = etcd::connect(&self.urls(&voters)).await?;
        let listed = etcd::list(&mut c).await?;
        let names = listed.iter().map(crate::member::Listed::lab_name).collect();
        let mut ready = 0;
        for m in voters.iter().filter(|m| m.side == side) {
            let voter = listed.iter().any(|l| m.listed_as(l) && !l.learner);
            if voter && etcd::serving(&m.client_url(self.seed(side))).await {
                ready += 1;
            }
        }
        Ok((names, ready))
    }

    /// Adds the last lines of the members' logs to an error, so a failure can be read.
    pub fn explain(&self, e: Error) -> Error {
        let mut logs = String::new();
        for m in &self.etcd.members {
            let path = Member::log_path(&self.dir, *m);
            if let Ok(t) = std::fs::read_to_string(&path) {
                let tail: Vec<&str> = t.lines().rev().take(5).collect();
                logs += &format!(
                    "\n--- {}:\n{}",
                    path.display(),
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                );
            }
        }
        Error::State(format!("{e}{logs}"))
    }
}
