//! What etcd-druid's pods do for an `Etcd`'s spec, one operation per pass, through etcd's
//! member API (a StatefulSet's pods with their etcd-backup-restore sidecars, which need
//! kubelets): add the next missing member as a learner and start it, promote it once it caught
//! up, and roll the members onto the peer URLs the spec wants (`crate::etcd::rolling`).

use super::spec::DruidSpec;
use crate::error::{Error, Result};
use crate::etcd::Cluster;
use crate::journal::Journal;

/// One step towards `spec`: add the next missing member as a learner (and start it), or
/// promote the next learner, or roll the members to the spec's URLs. Returns whether it did
/// something.
pub async fn step(
    c: &mut Cluster,
    spec: &DruidSpec,
    j: &mut dyn Journal,
    tag: &str,
) -> Result<bool> {
    if spec.replicas == 0 {
        // An abort stops the joining members first; the harness stops learners when they
        // leave etcd.
        return Ok(false);
    }
    check(c, spec)?;
    for name in spec.members() {
        if !c.is_member(&name) {
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
            if c.hold_promotion {
                return Ok(false);
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

/// `spec` checked against what the pods can do here: no scale-in of the members, bootstrap
/// members that are in the cluster with the URLs they advertise.
fn check(c: &Cluster, spec: &DruidSpec) -> Result<()> {
    let mut i = spec.replicas;
    while c.def(&spec.member(i)).is_ok() {
        if c.is_member(&spec.member(i)) {
            return Err(Error::State(format!(
                "the Etcd scales {} down to {}: not a migration step",
                spec.etcd, spec.replicas
            )));
        }
        i += 1;
    }
    for b in &spec.bootstrap {
        let urls = c.peer_urls(&b.name);
        let listed = c.is_member(&b.name)
            && !b.peer_urls.is_empty()
            && b.peer_urls.iter().all(|u| urls.contains(u));
        if !listed {
            return Err(Error::State(format!(
                "bootstrap member {} ({:?}) is not in the cluster",
                b.name, b.peer_urls
            )));
        }
    }
    Ok(())
}
