//! The membership operations etcd-druid performs, through etcd's member API: each one
//! idempotent (done counts as done) and retried while etcd refuses it for a transient reason.

use super::{connect, find, healthy_count, list, retry, MemberDef};
use crate::error::{Error, Result};
use etcd_client::{Client, MemberAddOptions};
use std::time::Duration;

/// Adds `m` as a learner advertising `urls` (idempotent: `m` listed counts as done).
pub async fn add_learner(c: &Client, m: &MemberDef, urls: &[String]) -> Result<()> {
    retry(
        &format!("add learner {}", m.name),
        Duration::from_secs(60),
        || async {
            let mut c = c.clone();
            if list(&mut c).await?.iter().any(|l| m.listed_as(l)) {
                return Ok(());
            }
            c.member_add(
                urls.to_vec(),
                Some(MemberAddOptions::new().with_is_learner()),
            )
            .await
            .map(|_| ())
            .map_err(|e| Error::etcd("member add", e))
        },
    )
    .await
}

/// Promotes the learner `m` to a voter once it caught up.
pub async fn promote(c: &Client, m: &MemberDef) -> Result<()> {
    retry(
        &format!("promote {}", m.name),
        Duration::from_secs(60),
        || async {
            let mut c = c.clone();
            let l = find(&mut c, m).await?;
            if !l.learner {
                return Ok(());
            }
            c.member_promote(l.id)
                .await
                .map(|_| ())
                .map_err(|e| Error::etcd("member promote", e))
        },
    )
    .await
}

/// Removes `m` after checking that the remaining voters are all healthy and form a quorum.
pub async fn remove(c: &Client, m: &MemberDef, endpoints_after: &[String]) -> Result<()> {
    retry(
        &format!("remove {}", m.name),
        Duration::from_secs(60),
        || async {
            let mut c = c.clone();
            let members = list(&mut c).await?;
            let Some(l) = members.iter().find(|l| m.listed_as(l)) else {
                return Ok(());
            };
            let voters_after = members
                .iter()
                .filter(|x| !x.learner && x.id != l.id)
                .count();
            let healthy = healthy_count(endpoints_after).await;
            if healthy < voters_after / 2 + 1 || voters_after == 0 {
                return Err(Error::State(format!(
                    "removing {} would leave {healthy} healthy of {voters_after} voters",
                    m.name
                )));
            }
            c.member_remove(l.id)
                .await
                .map(|_| ())
                .map_err(|e| Error::etcd("member remove", e))
        },
    )
    .await
}

/// `member update`: `m` advertises `urls` from now on (what etcd-druid's backup-restore
/// sidecar does when a pod starts with peer URLs the cluster does not list yet).
pub async fn update_peer_urls(c: &Client, m: &MemberDef, urls: &[String]) -> Result<()> {
    retry(
        &format!("member update {}", m.name),
        Duration::from_secs(60),
        || async {
            let mut c = c.clone();
            let l = find(&mut c, m).await?;
            if l.peer_urls == urls {
                return Ok(());
            }
            c.member_update(l.id, urls.to_vec())
                .await
                .map(|_| ())
                .map_err(|e| Error::etcd("member update", e))
        },
    )
    .await
}

/// Moves leadership to `m` (sent to the current leader, as etcd requires).
pub async fn move_leader(endpoints: &[String], m: &MemberDef) -> Result<()> {
    retry(
        &format!("move leader to {}", m.name),
        Duration::from_secs(30),
        || async {
            let mut any = connect(endpoints).await?;
            let target = find(&mut any, m).await?.id;
            for e in endpoints {
                let mut one = connect(std::slice::from_ref(e)).await?;
                let st = one.status().await.map_err(|e| Error::etcd("status", e))?;
                if st.leader() == target {
                    return Ok(());
                }
                if st.header().map(|h| h.member_id()) == Some(st.leader()) {
                    one.move_leader(target)
                        .await
                        .map_err(|e| Error::etcd("move leader", e))?;
                    return Ok(());
                }
            }
            Err(Error::State("no leader among the endpoints".into()))
        },
    )
    .await
}
