//! How the cluster changes, as etcd-druid's pods change it: members started, added as
//! learners, promoted, removed (leadership moved off a leaving leader first), stopped, killed
//! and restarted.

use super::Cluster;
use crate::error::{Error, Result};
use crate::etcd::process::MemberProcess;
use crate::etcd::{self, connect, list};
use crate::journal::Journal;
use std::time::Duration;

impl Cluster {
    /// Starts `name`'s process advertising `urls`, with the cluster as it is now (`state`:
    /// `new` or `existing`; a member with a data directory rejoins as itself).
    pub fn start(&mut self, name: &str, urls: &[String], state: &str) -> Result<()> {
        let ic = self.initial_cluster();
        let def = self.def(name)?;
        let p = MemberProcess::start(def, &self.dir, urls, &ic, state, self.pre_vote)?;
        self.processes.push(p);
        Ok(())
    }

    /// Starts `names` as a new cluster on their in-cluster peer URLs, as a seed runs them
    /// before any migration, and waits until each serves.
    pub async fn bootstrap(&mut self, names: &[String]) -> Result<()> {
        self.members = names.to_vec();
        self.voters = names.iter().cloned().collect();
        for n in names {
            let urls = self.peer_urls(n);
            self.start(n, &urls, "new")?;
        }
        for url in self.client_urls(names) {
            etcd::wait_serving(&url, Duration::from_secs(60))
                .await
                .map_err(|e| self.explain(e))?;
        }
        Ok(())
    }

    /// Adds `name` as a learner advertising `urls` and starts it (the first half of a join).
    pub async fn add_learner(&mut self, name: &str, urls: Vec<String>) -> Result<()> {
        let admin = connect(&self.voter_urls()).await?;
        etcd::add_learner(&admin, self.def(name)?, &urls).await?;
        self.advertised.insert(name.to_string(), urls.clone());
        // The new member asks the first peer that answers for the member list and exits if
        // that peer has not applied the addition yet ("member count is unequal", seen at 150 ms
        // RTT): start it only once every member lists it.
        let def = self.def(name)?.clone();
        for url in self.client_urls(&self.members) {
            etcd::retry(
                &format!("{url} lists {name}"),
                Duration::from_secs(30),
                || async {
                    let mut c = connect(std::slice::from_ref(&url)).await?;
                    if list(&mut c).await?.iter().any(|l| def.listed_as(l)) {
                        Ok(())
                    } else {
                        Err(Error::State("not yet".into()))
                    }
                },
            )
            .await?;
        }
        self.members.push(name.to_string());
        self.start(name, &urls, "existing")
    }

    /// Promotes `name` once it caught up, and waits until it serves linearizable reads.
    pub async fn promote(&mut self, name: &str) -> Result<()> {
        let admin = connect(&self.voter_urls()).await?;
        etcd::promote(&admin, self.def(name)?)
            .await
            .map_err(|e| self.explain(e))?;
        self.voters.insert(name.to_string());
        let url = self.def(name)?.client_url.clone();
        etcd::wait_serving(&url, Duration::from_secs(60)).await
    }

    /// Removes `name` from the cluster (quorum checked), then stops its process.
    pub async fn remove(&mut self, name: &str) -> Result<()> {
        let rest: Vec<String> = self
            .members
            .iter()
            .filter(|m| *m != name)
            .cloned()
            .collect();
        let rest_voters: Vec<String> = self.voters().into_iter().filter(|m| m != name).collect();
        let admin = connect(&self.client_urls(&rest)).await?;
        etcd::remove(&admin, self.def(name)?, &self.client_urls(&rest_voters)).await?;
        self.forget(name);
        Ok(())
    }

    /// Removes `name` (a member name, or the peer URL a learner not started yet is listed
    /// by), first moving leadership to a voter that stays if the leader is one of `leaving`
    /// (removing the leader would force an election that stalls requests). Returns whether it
    /// did anything.
    pub async fn remove_moving_leader(
        &mut self,
        name: &str,
        leaving: &[String],
        j: &mut dyn Journal,
        tag: &str,
    ) -> Result<bool> {
        let Some(def) = self.find(name) else {
            return Err(Error::State(format!("removing unknown member {name}")));
        };
        let member = def.name.clone();
        if !self.is_member(&member) {
            // Already removed: the member list was observed on a member that had not applied
            // the removal yet (member lists are served locally, not linearizably).
            return Ok(false);
        }
        let urls = self.voter_urls();
        if leaving.contains(&etcd::leader(&urls).await?) {
            let Some(target) = self.voters().into_iter().find(|v| !leaving.contains(v)) else {
                return Err(Error::State("no voter stays to take the leadership".into()));
            };
            etcd::move_leader(&urls, self.def(&target)?).await?;
            j.event(format!("{tag}: leader moved to {target}"));
        }
        self.remove(&member).await?;
        self.note_membership(j).await;
        j.event(format!("{tag}: removed {name}"));
        Ok(true)
    }

    /// `name` left the cluster: its process stops, its URLs are forgotten, and it never
    /// rejoins.
    pub fn forget(&mut self, name: &str) {
        self.members.retain(|m| m != name);
        self.voters.remove(name);
        self.processes.retain(|p| p.name != name);
        self.advertised.remove(name);
        self.removed.insert(name.to_string());
    }

    /// Stops `name`'s process as a scaled-away pod stops; etcd still lists it.
    pub fn stop(&mut self, name: &str) {
        self.processes.retain(|p| p.name != name);
    }

    /// `kill -9` of `name`'s process (a crashed container); it stays a member.
    pub fn kill9(&mut self, name: &str) -> Result<()> {
        let p = self
            .processes
            .iter_mut()
            .find(|p| p.name == name)
            .ok_or_else(|| Error::State(format!("{name} is not running")))?;
        p.kill9();
        self.processes.retain(|p| p.name != name);
        Ok(())
    }

    /// Starts `name` again on its data directory, as kubelet restarts a crashed container
    /// (etcd then ignores `--initial-cluster` and rejoins as itself), and waits until it
    /// serves.
    pub async fn restart(&mut self, name: &str) -> Result<()> {
        self.processes.retain(|p| p.name != name);
        let urls = self.peer_urls(name);
        self.start(name, &urls, "existing")?;
        let url = self.def(name)?.client_url.clone();
        etcd::wait_serving(&url, Duration::from_secs(60)).await
    }

    /// Stops `name` as kubelet stops a pod, SIGKILL after `grace`; says how it went.
    pub(crate) async fn stop_pod(&mut self, name: &str, grace: Duration) -> Result<String> {
        let how = match self.processes.iter_mut().find(|p| p.name == name) {
            Some(p) => p.stop(grace).await?,
            None => "not running".into(),
        };
        self.processes.retain(|p| p.name != name);
        Ok(how)
    }

    pub(crate) fn set_advertised(&mut self, name: &str, urls: Vec<String>) {
        self.advertised.insert(name.to_string(), urls);
    }
}
