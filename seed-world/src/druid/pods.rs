//! What etcd-druid's pods do for the spec its StatefulSet runs, one operation per pass,
//! through etcd's member API (a StatefulSet's pods with their etcd-backup-restore sidecars,
//! which need kubelets): stop when scaled to 0, add the next missing member as a learner and
//! start it, promote it once it caught up, roll the members onto the peer URLs the spec wants
//! (`crate::etcd::rolling`); and etcd-druid#1426's removal of the source members once the
//! bootstrap members were cleared, one at a time.

use super::spec::DruidSpec;
use crate::error::{Error, Result};
use crate::etcd::Cluster;
use crate::journal::Journal;
use std::time::{Duration, Instant};

/// How long the removal of one source member takes before the next one goes (its pod
/// terminating).
pub const REMOVAL_INTERVAL: Duration = Duration::from_secs(2);

/// One step towards `spec`: stop the pods at `replicas: 0`, add the next missing member as a
/// learner (and start it), or promote the next learner, or roll the members to the spec's
/// URLs. Returns whether the members do not run the spec yet (the StatefulSet is still
/// rolling out: the step did something, or waits for a learner to be promoted).
pub async fn step(
    c: &mut Cluster,
    spec: &DruidSpec,
    j: &mut dyn Journal,
    tag: &str,
) -> Result<bool> {
    let pods = spec.pods(c);
    for name in &pods {
        c.set_server_port(name, spec.server_port);
    }
    // The controller removes an aborted join's learners through etcd's API: their pods stop.
    for name in c.forget_unlisted(&pods).await? {
        j.event(format!("{tag}: {name} left etcd, its pod stopped"));
    }
    if spec.replicas == 0 {
        // The StatefulSet scaled to 0: the pods stop, their members stay in etcd's list.
        let running = c.running();
        for name in pods.iter().filter(|n| running.contains(n)) {
            c.stop(name);
            j.event(format!("{tag}: {name} stopped (replicas 0)"));
        }
        return Ok(false);
    }
    check(c, spec)?;
    for name in spec.members() {
        if !c.is_member(&name) {
            // A removed member never joins again (etcd-druid#1426's anti-rejoin guard).
            if c.was_removed(&name) {
                continue;
            }
            // A member joins another seed's cluster through its exposed URL: the only one
            // the other seed reaches.
            if !spec.advertised.iter().any(|a| a.name == name) {
                return Err(Error::State(format!(
                    "{name} joins without an advertised URL"
                )));
            }
            let urls = spec.peer_urls(c.def(&name)?)?;
            c.add_learner(&name, urls).await?;
            c.note_membership(j).await;
            j.event(format!("{tag}: added {name} as learner"));
            return Ok(true);
        }
        if !c.is_voter(&name) {
            // A held learner is a pod that is not ready: the rollout is not done.
            if c.hold_promotion {
                return Ok(true);
            }
            c.promote(&name).await?;
            c.note_membership(j).await;
            j.event(format!("{tag}: promoted {name}"));
            return Ok(true);
        }
    }
    // Every member runs: the spec's URLs reach them by a rolling update (at `Complete`, back
    // to the in-cluster URLs).
    let mut wanted = Vec::new();
    for name in spec.members().into_iter().filter(|n| c.is_member(n)) {
        let urls = spec.peer_urls(c.def(&name)?)?;
        wanted.push((name, urls));
    }
    c.roll(&wanted, j, tag).await
}

/// Whether the members run `spec` (its StatefulSet rolled out): each of its members that was
/// not removed votes, advertising the peer URLs `spec` gives it; at `replicas: 0`, none runs.
pub fn runs(c: &Cluster, spec: &DruidSpec) -> bool {
    if spec.replicas == 0 {
        let running = c.running();
        return !spec.pods(c).iter().any(|p| running.contains(p));
    }
    let urls = |n: &str| c.def(n).and_then(|d| spec.peer_urls(d)).ok();
    spec.members()
        .iter()
        .filter(|n| !c.was_removed(n))
        .all(|n| c.is_voter(n) && urls(n) == Some(c.peer_urls(n)))
}

/// etcd-druid#1426's removal of the members of the cluster this `Etcd` joined (`sources`, its
/// join record) once its bootstrap members were cleared: one at a time, [`REMOVAL_INTERVAL`]
/// apart, leadership moved off a leaving leader first. Returns whether one is still in etcd.
pub async fn remove_sources(
    c: &mut Cluster,
    spec: &DruidSpec,
    sources: &[String],
    last_removal: &mut Option<Instant>,
    j: &mut dyn Journal,
    tag: &str,
) -> Result<bool> {
    if !spec.bootstrap.is_empty() || spec.replicas == 0 {
        return Ok(false);
    }
    let Some(next) = sources.iter().find(|s| c.is_member(s)).cloned() else {
        return Ok(false);
    };
    if last_removal.is_some_and(|t| t.elapsed() < REMOVAL_INTERVAL) {
        return Ok(true);
    }
    if c.remove_moving_leader(&next, sources, j, tag).await? {
        *last_removal = Some(Instant::now());
    }
    Ok(true)
}

/// `spec` checked against what the pods can do here: no scale-in of its own members,
/// bootstrap members that are in the cluster with the URLs they advertise.
fn check(c: &Cluster, spec: &DruidSpec) -> Result<()> {
    let pods = spec.pods(c);
    if let Some(extra) = pods
        .iter()
        .skip(usize::from(spec.replicas))
        .find(|n| c.is_member(n))
    {
        return Err(Error::State(format!(
            "the Etcd {} scales down to {} ({extra} is a member): not a migration step",
            spec.etcd, spec.replicas
        )));
    }
    for b in &spec.bootstrap {
        let urls: Vec<String> = c
            .peer_urls(&b.name)
            .into_iter()
            .map(|u| as_druid_spells_it(c, &b.name, u))
            .collect();
        let listed = c.is_member(&b.name)
            && !b.peer_urls.is_empty()
            && b.peer_urls.iter().all(|u| urls.contains(u));
        if !listed && !c.was_removed(&b.name) {
            return Err(Error::State(format!(
                "bootstrap member {} ({:?}) is not in the cluster",
                b.name, b.peer_urls
            )));
        }
    }
    Ok(())
}

/// `url`, a peer URL etcd holds for `name`, as the orchestrator knows it: the in-cluster one
/// with the port of its `Etcd`'s `spec.etcd.serverPort` (default 2380; etcd-druid v0.38.1
/// `internal/component/configmap/etcdconfig.go` `getAdvertiseURLs`), which the loopback
/// harness serves at the member's own port (its members share 127.0.0.1).
fn as_druid_spells_it(c: &Cluster, name: &str, url: String) -> String {
    match c.def(name) {
        Ok(d) if d.in_cluster_peer_url == url => match url.rsplit_once(':') {
            Some((host, _)) => format!("{host}:{}", c.server_port(name)),
            None => url,
        },
        _ => url,
    }
}
