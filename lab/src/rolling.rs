//! The rolling update the lab's etcd-druid stand-in does when the peer URLs a member should
//! advertise change (GEP-0039's first step at `Expose`, and the way back at `Complete` or an
//! abort). First `member update` gives every running member its new URLs (etcd tells the
//! peers; open peer connections stay as they are). Then the members restart one at a time, as
//! a StatefulSet rolls, and only while the others keep quorum: the others must all serve; a
//! leader hands its leadership to a member that stays first; the member stops as a pod does
//! (SIGTERM), starts again on its data directory with the new URLs, and must serve before the
//! next one goes. The restarts are what move the peer connections to the new URLs.

use crate::error::{Error, Result};
use crate::etcd;
use crate::lab::Lab;
use crate::member::MemberRef;
use crate::report::Rolled;
use crate::side::Side;
use std::time::Duration;

/// How long a member may take to stop after SIGTERM (kubelet's default grace is 30 s; etcd
/// stops in well under a second).
const STOP_GRACE: Duration = Duration::from_secs(10);
/// How long the rest of the cluster may take to serve before a member may go, and a restarted
/// member before the next one.
const SERVE_BUDGET: Duration = Duration::from_secs(60);

/// Rolls every member in `wanted` whose advertised peer URLs differ; returns whether it rolled
/// any.
pub async fn roll(
    lab: &mut Lab,
    side: Side,
    wanted: &[(MemberRef, Vec<String>)],
    tag: &str,
) -> Result<bool> {
    let cluster = &lab.world.etcd;
    let mut todo: Vec<(MemberRef, Vec<String>)> = wanted
        .iter()
        .filter(|(m, _)| m.side == side && cluster.members.contains(m))
        .filter(|(m, urls)| cluster.peer_urls(*m) != *urls)
        .cloned()
        .collect();
    if todo.is_empty() {
        return Ok(false);
    }
    // The leader goes last: one leadership move instead of one per restart.
    let leader = etcd::leader(&lab.world.voter_urls())
        .await
        .unwrap_or_default();
    todo.sort_by_key(|(m, _)| m.name() == leader);
    let admin = etcd::connect(&lab.world.voter_urls()).await?;
    for (m, urls) in &todo {
        etcd::update_peer_urls(&admin, *m, urls).await?;
        lab.world.etcd.advertised.insert(*m, urls.clone());
        lab.record.event(format!(
            "{tag}: member update {}: {}",
            m.name(),
            urls.join(",")
        ));
    }
    for (m, urls) in todo {
        restart_one(lab, m, urls, tag).await?;
    }
    lab.record_membership().await;
    Ok(true)
}

/// Restarts `m` advertising `urls`, once the others alone are a quorum that serves, after
/// handing over its leadership; returns once it serves again.
async fn restart_one(lab: &mut Lab, m: MemberRef, urls: Vec<String>, tag: &str) -> Result<()> {
    let t_ms = lab.record.now_ms();
    let voters = lab.world.etcd.voters();
    let others: Vec<MemberRef> = voters.iter().copied().filter(|x| *x != m).collect();
    let quorum = voters.len() / 2 + 1;
    let other_urls = lab.world.urls(&others);
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
    let leader_moved = hand_over(lab, m, &voters, &others).await?;
    let stop = match lab.world.etcd.processes.iter_mut().find(|x| x.r == m) {
        Some(member) => member.stop(STOP_GRACE).await?,
        None => "not running".into(),
    };
    lab.world.etcd.processes.retain(|x| x.r != m);
    lab.world.start_member(m, &urls, "existing")?;
    etcd::wait_serving(&m.client_url(lab.world.seed(m.side)), SERVE_BUDGET)
        .await
        .map_err(|e| lab.world.explain(e))?;
    let took_ms = lab.record.now_ms() - t_ms;
    let moved = leader_moved
        .as_ref()
        .map(|t| format!(", leader moved to {t} first"))
        .unwrap_or_default();
    lab.record.event(format!(
        "{tag}: {} restarted with {} ({stop}){moved}, serving",
        m.name(),
        urls.join(",")
    ));
    lab.record.rolled.push(Rolled {
        t_ms,
        member: m.name(),
        peer_urls: urls,
        leader_moved,
        took_ms,
    });
    Ok(())
}

/// A leader leaving would cost an election: if `m` leads, leadership goes to the first of
/// `others` first. Returns where it went.
async fn hand_over(
    lab: &Lab,
    m: MemberRef,
    voters: &[MemberRef],
    others: &[MemberRef],
) -> Result<Option<String>> {
    let urls = lab.world.urls(voters);
    if etcd::leader(&urls).await? != m.name() {
        return Ok(None);
    }
    let target = others
        .first()
        .copied()
        .ok_or_else(|| Error::State("no voter stays to take the leadership".into()))?;
    etcd::move_leader(&urls, target).await?;
    Ok(Some(target.name()))
}
