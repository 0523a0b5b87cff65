//! What the cluster says: etcd's member list with the harness' names, the leader, what
//! etcd-druid reports of an `Etcd`'s members (its status), the controller's view of the
//! cluster.

use super::Cluster;
use crate::error::{Error, Result};
use crate::etcd::process::MemberProcess;
use crate::etcd::{self, connect, list, Listed};
use crate::journal::Journal;
use isthmus_controller::plan::{EtcdCluster, EtcdMember};

impl Cluster {
    /// A member's name as the harness knows it: etcd's, or, for a learner that has not
    /// started (no name in etcd yet), the name it was added as.
    pub fn name_of(&self, l: &Listed) -> String {
        self.defs
            .iter()
            .find(|d| d.listed_as(l))
            .map_or_else(|| l.name.clone(), |d| d.name.clone())
    }

    /// The member list, asked of the voters.
    pub async fn list(&self) -> Result<Vec<Listed>> {
        list(&mut connect(&self.voter_urls()).await?).await
    }

    /// [`Cluster::name_of`], marked when it is a learner (the membership timeline's
    /// spelling).
    pub fn marked_name(&self, l: &Listed) -> String {
        match l.learner {
            true => format!("{} (learner)", self.name_of(l)),
            false => self.name_of(l),
        }
    }

    /// Member names as etcd lists them, learners marked, asked of `urls`.
    pub async fn marked_names(&self, urls: &[String]) -> Result<Vec<String>> {
        let listed = list(&mut connect(urls).await?).await?;
        Ok(listed.iter().map(|l| self.marked_name(l)).collect())
    }

    /// Tells `j` the membership as the voters list it now (a voter just added as a learner is
    /// not serving yet; voters list learners too). A list that fails is logged, not fatal.
    pub async fn note_membership(&self, j: &mut dyn Journal) {
        match self.marked_names(&self.voter_urls()).await {
            Ok(names) => j.membership(names),
            Err(e) => tracing::warn!(error = %e, "membership not noted"),
        }
    }

    /// The current leader's name, asked of the voters.
    pub async fn leader(&self) -> Result<String> {
        etcd::leader(&self.voter_urls()).await
    }

    /// etcd's own member list and leader, with learners named by their peer URL (what the
    /// controller reads through the client exposure); `None` if the voters do not answer.
    pub async fn etcd_cluster(&self) -> Option<EtcdCluster> {
        let mut c = connect(&self.voter_urls()).await.ok()?;
        let listed = list(&mut c).await.ok()?;
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

    /// etcd's member names (learners included, named by [`Cluster::name_of`]) and how many of
    /// `own` are voters that serve: what etcd-druid reports as an `Etcd`'s members and ready
    /// replicas.
    pub async fn status(&self, own: &[String]) -> Result<(Vec<String>, i32)> {
        let listed = self.list().await?;
        let names = listed.iter().map(|l| self.name_of(l)).collect();
        let mut ready = 0;
        for name in own.iter().filter(|n| self.is_voter(n)) {
            let Ok(def) = self.def(name) else { continue };
            let voter = listed.iter().any(|l| def.listed_as(l) && !l.learner);
            if voter && etcd::serving(&def.client_url).await {
                ready += 1;
            }
        }
        Ok((names, ready))
    }

    /// Forgets those of `own` that etcd no longer lists (the controller removes an aborted
    /// join's learners through etcd's API: their pods stop); returns their names.
    pub async fn forget_unlisted(&mut self, own: &[String]) -> Result<Vec<String>> {
        let Ok(listed) = self.list().await else {
            return Ok(Vec::new());
        };
        let gone: Vec<String> = own
            .iter()
            .filter(|n| self.is_member(n))
            .filter(|n| {
                self.def(n)
                    .is_ok_and(|d| !listed.iter().any(|l| d.listed_as(l)))
            })
            .cloned()
            .collect();
        for n in &gone {
            self.forget(n);
        }
        Ok(gone)
    }

    /// Adds the last lines of the members' logs to an error, so a failure can be read.
    pub fn explain(&self, e: Error) -> Error {
        let mut logs = String::new();
        for m in &self.members {
            let path = MemberProcess::log_path(&self.dir, m);
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
