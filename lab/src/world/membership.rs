//! The world's etcd membership changes, as etcd-druid makes them: a member process started
//! with the cluster's current `--initial-cluster`, a learner added and started only once every
//! member lists it, a learner promoted once it caught up, a member removed with quorum checked.

use super::World;
use crate::error::{Error, Result};
use crate::etcd::{self, Member};
use crate::member::MemberRef;
use std::time::Duration;

impl World {
    /// Starts `m`'s process advertising `urls`, with the cluster as it is now
    /// (`state`: `new` or `existing`; a member with a data directory rejoins as itself).
    pub fn start_member(&mut self, m: MemberRef, urls: &[String], state: &str) -> Result<()> {
        let ic = self.etcd.initial_cluster();
        let seed = self.topo.seed(m.side);
        let member = Member::start(seed, &self.dir, m, urls, &ic, state, self.etcd.pre_vote)?;
        self.etcd.processes.push(member);
        Ok(())
    }

    /// Adds `m` as a learner advertising `urls` and starts it (the first half of a join).
    pub async fn add_learner(&mut self, m: MemberRef, urls: Vec<String>) -> Result<()> {
        let admin = etcd::connect(&self.voter_urls()).await?;
        etcd::add_learner(&admin, m, &urls).await?;
        self.etcd.advertised.insert(m, urls.clone());
        // The new member asks the first peer that answers for the member list and exits if
        // that peer has not applied the addition yet ("member count is unequal", seen at 150 ms
        // RTT): start it only once every member lists it.
        for url in self.urls(&self.etcd.members) {
            etcd::retry(
                &format!("{url} lists {}", m.name()),
                Duration::from_secs(30),
                || async {
                    let mut c = etcd::connect(std::slice::from_ref(&url)).await?;
                    if etcd::list(&mut c).await?.iter().any(|l| m.listed_as(l)) {
                        Ok(())
                    } else {
                        Err(Error::State("not yet".into()))
                    }
                },
            )
            .await?;
        }
        self.etcd.members.push(m);
        self.start_member(m, &urls, "existing")
    }

    /// Promotes `m` once it caught up, and waits until it serves linearizable reads.
    pub async fn promote(&mut self, m: MemberRef) -> Result<()> {
        let admin = etcd::connect(&self.voter_urls()).await?;
        etcd::promote(&admin, m)
            .await
            .map_err(|e| self.explain(e))?;
        self.etcd.promoted.push(m);
        let url = m.client_url(self.topo.seed(m.side));
        etcd::wait_serving(&url, Duration::from_secs(60)).await
    }

    /// Removes `m` from the cluster (quorum checked), then stops its process.
    pub async fn remove(&mut self, m: MemberRef) -> Result<()> {
        let rest: Vec<MemberRef> = self
            .etcd
            .members
            .iter()
            .copied()
            .filter(|x| *x != m)
            .collect();
        let rest_voters: Vec<MemberRef> =
            self.etcd.voters().into_iter().filter(|x| *x != m).collect();
        let admin = etcd::connect(&self.urls(&rest)).await?;
        etcd::remove(&admin, m, &self.urls(&rest_voters)).await?;
        self.etcd.forget(m);
        Ok(())
    }
}
