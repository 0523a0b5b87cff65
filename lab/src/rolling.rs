//! The rolling update the lab's etcd-druid stand-in does when the peer URLs a member should
//! advertise change (GEP-0039's first step at `Expose`, and the way back at `Complete` or an
//! abort). First `member update` gives every running member its new URLs (etcd tells the
//! peers; open peer connections stay as they are). Then the members restart one at a time, as
//! a StatefulSet rolls, and only while the others keep quorum: the others must all serve; a
//! leader hands its leadership to a member that stays first; the member stops as a pod does
//! (SIGTERM), starts again on its data directory with the new URLs, and must serve before the
//! next one goes. The restarts are what move the peer connections to the new URLs.

use crate::error::{Error, Result};
use crate::etcd::{self, Member, MemberRef};
use crate::lab::Lab;
use crate::report::Rolled;
use std::time::Duration;

/// How long a member may take to stop after SIGTERM (kubelet's default grace is 30 s; etcd
/// stops in well under a second).
const STOP_GRACE: Duration = Duration::from_secs(10);
/// How long the rest of the cluster may take to serve before a member may go, and a restarted
/// member before the next one.
const SERVE_BUDGET: Duration = Duration::from_secs(60);

impl Lab {
    /// Rolls every member in `wanted` whose advertised peer URLs differ; returns whether it
    /// rolled any.
    pub async fn roll(
        &mut self,
        side: etcd::Side,
        wanted: &[(MemberRef, Vec<String>)],
        tag: &str,
    ) -> Result<bool> {
        let mut todo: Vec<(MemberRef, Vec<String>)> = wanted
            .iter()
            .filter(|(m, _)| m.side == side && self.cluster.contains(m))
            .filter(|(m, urls)| self.peer_urls(*m) != *urls)
            .cloned()
            .collect();
        if todo.is_empty() {
            return Ok(false);
        }
        // The leader goes last: one leadership move instead of one per restart.
        let leader = etcd::leader(&self.urls(&self.voters()))
            .await
            .unwrap_or_default();
        todo.sort_by_key(|(m, _)| m.name() == leader);
        let admin = etcd::connect(&self.urls(&self.voters())).await?;
        for (m, urls) in &todo {
            etcd::update_peer_urls(&admin, *m, urls).await?;
            self.advertised.insert(*m, urls.clone());
            self.event(format!(
                "{tag}: member update {}: {}",
                m.name(),
                urls.join(",")
            ));
        }
        for (m, urls) in todo {
            self.restart_one(m, urls, tag).await?;
        }
        self.record_membership().await;
        Ok(true)
    }

    async fn restart_one(&mut self, m: MemberRef, urls: Vec<String>, tag: &str) -> Result<()> {
        let t_ms = self.now_ms();
        let voters = self.voters();
        let others: Vec<MemberRef> = voters.iter().copied().filter(|x| *x != m).collect();
        let quorum = voters.len() / 2 + 1;
        let other_urls = self.urls(&others);
        // Quorum checked: without this member, the others alone must be a quorum, all serving.
        etcd::retry(
            &format!("{tag}: quorum without {}", m.name()),
            SERVE_BUDGET,
            || async {
                let n = etcd::healthy_count(&other_urls).await;
                if n >= quorum {
                    Ok(())
                } else {
                    Err(Error::State(format!(
                        "{n} of the other {} voters serve; {quorum} needed",
                        others.len()
                    )))
                }
            },
        )
        .await?;
        // Leadership checked: a leader leaving would cost an election; hand it over first.
        let mut leader_moved = None;
        if etcd::leader(&self.urls(&voters)).await? == m.name() {
            let target = others
                .first()
                .copied()
                .ok_or_else(|| Error::State("no voter stays to take the leadership".into()))?;
            etcd::move_leader(&self.urls(&voters), target).await?;
            leader_moved = Some(target.name());
        }
        let stop = match self.members.iter_mut().find(|x| x.r == m) {
            Some(member) => member.stop(STOP_GRACE).await?,
            None => "not running".into(),
        };
        self.members.retain(|x| x.r != m);
        let ic = self.initial_cluster();
        let seed = self.topo.seed(m.side);
        let started = Member::start(seed, &self.dir, m, &urls, &ic, "existing", self.pre_vote)?;
        self.members.push(started);
        etcd::wait_serving(&m.client_url(seed), SERVE_BUDGET)
            .await
            .map_err(|e| self.explain(e))?;
        let took_ms = self.now_ms() - t_ms;
        let moved = leader_moved
            .as_ref()
            .map(|t| format!(", leader moved to {t} first"))
            .unwrap_or_default();
        self.event(format!(
            "{tag}: {} restarted with {} ({stop}){moved}, serving",
            m.name(),
            urls.join(",")
        ));
        self.rolled.push(Rolled {
            t_ms,
            member: m.name(),
            peer_urls: urls,
            leader_moved,
            took_ms,
        });
        Ok(())
    }
}
