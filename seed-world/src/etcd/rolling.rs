//! The rolling update etcd-druid's StatefulSet does when the peer URLs a member should
//! advertise change (GEP-0039's first step at `Expose`, and the way back at `Complete` or an
//! abort). First `member update` gives every running member its new URLs (what
//! etcd-backup-restore does when a pod starts with peer URLs the cluster does not list yet;
//! etcd tells the peers, open peer connections stay as they are). Then the members restart one
//! at a time, as a StatefulSet rolls, and only while the others keep quorum: the others must
//! all serve; a leader hands its leadership to a member that stays first; the member stops as a
//! pod does (SIGTERM), starts again on its data directory with the new URLs, and must serve
//! before the next one goes. The restarts are what move the peer connections to the new URLs.
//! A cluster of one voter rolls with downtime, as a StatefulSet of one replica does.

use super::Cluster;
use crate::error::{Error, Result};
use crate::journal::{Journal, Rolled};
use std::time::{Duration, Instant};

/// How long a member may take to stop after SIGTERM (kubelet's default grace is 30 s; etcd
/// stops in well under a second).
const STOP_GRACE: Duration = Duration::from_secs(10);
/// How long the rest of the cluster may take to serve before a member may go, and a restarted
/// member before the next one.
const SERVE_BUDGET: Duration = Duration::from_secs(60);

impl Cluster {
    /// Rolls every member of `wanted` (name, peer URLs) in the cluster whose advertised peer
    /// URLs differ; returns whether it rolled any.
    pub async fn roll(
        &mut self,
        wanted: &[(String, Vec<String>)],
        j: &mut dyn Journal,
        tag: &str,
    ) -> Result<bool> {
        let mut todo: Vec<(String, Vec<String>)> = wanted
            .iter()
            .filter(|(m, urls)| self.is_member(m) && self.peer_urls(m) != *urls)
            .cloned()
            .collect();
        if todo.is_empty() {
            return Ok(false);
        }
        // The leader goes last: one leadership move instead of one per restart.
        let leader = self.leader().await.unwrap_or_default();
        todo.sort_by_key(|(m, _)| *m == leader);
        let admin = super::connect(&self.voter_urls()).await?;
        for (m, urls) in &todo {
            super::update_peer_urls(&admin, self.def(m)?, urls).await?;
            self.set_advertised(m, urls.clone());
            j.event(format!("{tag}: member update {m}: {}", urls.join(",")));
        }
        for (m, urls) in todo {
            self.restart_one(&m, urls, j, tag).await?;
        }
        self.note_membership(j).await;
        Ok(true)
    }

    /// Restarts `m` advertising `urls`, once the others alone are a quorum that serves, after
    /// handing over its leadership; returns once it serves again.
    async fn restart_one(
        &mut self,
        m: &str,
        urls: Vec<String>,
        j: &mut dyn Journal,
        tag: &str,
    ) -> Result<()> {
        let started = Instant::now();
        let voters = self.voters();
        let others: Vec<String> = voters.iter().filter(|x| *x != m).cloned().collect();
        let quorum = voters.len() / 2 + 1;
        let other_urls = self.client_urls(&others);
        // Quorum checked: without this member, the others alone must be a quorum, all serving
        // (a single voter has none to keep: it rolls with downtime).
        if !others.is_empty() {
            super::retry(
                &format!("{tag}: quorum without {m}"),
                SERVE_BUDGET,
                || async {
                    let n = super::healthy_count(&other_urls).await;
                    match n >= quorum {
                        true => Ok(()),
                        false => Err(Error::State(format!(
                            "{n} of the other {} voters serve; {quorum} needed",
                            others.len()
                        ))),
                    }
                },
            )
            .await?;
        }
        let leader_moved = self.hand_over(m, &voters, &others).await?;
        let stop = self.stop_pod(m, STOP_GRACE).await?;
        self.start(m, &urls, "existing")?;
        let url = self.def(m)?.client_url.clone();
        super::wait_serving(&url, SERVE_BUDGET)
            .await
            .map_err(|e| self.explain(e))?;
        let moved = leader_moved
            .as_ref()
            .map(|t| format!(", leader moved to {t} first"))
            .unwrap_or_default();
        j.event(format!(
            "{tag}: {m} restarted with {} ({stop}){moved}, serving",
            urls.join(",")
        ));
        j.rolled(Rolled {
            started,
            member: m.to_string(),
            peer_urls: urls,
            leader_moved,
            took: started.elapsed(),
        });
        Ok(())
    }

    /// A leader leaving would cost an election: if `m` leads, leadership goes to the first of
    /// `others` first. Returns where it went.
    async fn hand_over(
        &self,
        m: &str,
        voters: &[String],
        others: &[String],
    ) -> Result<Option<String>> {
        let urls = self.client_urls(voters);
        let Some(target) = others.first() else {
            return Ok(None);
        };
        if super::leader(&urls).await? != m {
            return Ok(None);
        }
        super::move_leader(&urls, self.def(target)?).await?;
        Ok(Some(target.clone()))
    }
}
