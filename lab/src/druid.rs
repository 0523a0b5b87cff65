//! What etcd-druid does to the cluster for an `Etcd`'s fields, the same for both drivers: one
//! operation per pass (add the next missing destination member as a learner and start it,
//! promote it, remove a leaving member after moving leadership off it), and the peer URLs
//! druid starts members with. A change of those URLs is a rolling update (`crate::rolling`).
//! It acts on real etcd through its member API, as druid does.

use crate::error::{Error, Result};
use crate::etcd;
use crate::lab::Lab;
use crate::member::{self, MemberRef};
use crate::rolling;
use crate::side::Side;
use crate::specs::PREFIX;
use crate::world::World;
use isthmus_controller::plan::EtcdFields;

/// The peer URLs etcd-druid gives `side`'s members in the cluster for `fields`
/// (`druid_urls`). An advertised URL must be the member's exposed one (the only other name
/// the lab's DNS and proxies serve).
pub fn wanted_urls(
    world: &World,
    side: Side,
    override_default_url: bool,
    fields: &EtcdFields,
) -> Result<Vec<(MemberRef, Vec<String>)>> {
    for a in &fields.advertise {
        let ok = member::all()
            .iter()
            .any(|m| m.name() == a.name && a.peer_urls == [m.peer_url()]);
        if !ok {
            return Err(Error::State(format!(
                "the plan advertises {} at {:?}; the lab's members cannot be rolled to it",
                a.name, a.peer_urls
            )));
        }
    }
    Ok(world
        .etcd
        .members
        .iter()
        .filter(|m| m.side == side)
        .map(|m| (*m, druid_urls(override_default_url, fields, *m)))
        .collect())
}

/// One druid step towards `fields` on the destination: add the next missing member as a
/// learner (and start it), or promote the next learner, or roll the members to the spec's
/// URLs. Returns whether it did something.
pub async fn destination(
    lab: &mut Lab,
    override_default_url: bool,
    fields: &EtcdFields,
    tag: &str,
) -> Result<bool> {
    let replicas = check_destination(&lab.world, fields)?;
    if replicas == 0 {
        // An abort stops the joining members first; the lab's learners are stopped when the
        // plan removes them.
        return Ok(false);
    }
    let wanted = member::destination()
        .into_iter()
        .filter(|m| m.index < replicas);
    for m in wanted {
        if !lab.world.etcd.members.contains(&m) {
            // druid starts a joining member with the advertised URL: it must be the one the
            // lab's DNS and proxies serve.
            if !fields
                .advertise
                .iter()
                .any(|a| a.name == m.name() && a.peer_urls == [m.peer_url()])
            {
                return Err(Error::State(format!(
                    "{} is not advertised at {}",
                    m.name(),
                    m.peer_url()
                )));
            }
            let urls = druid_urls(override_default_url, fields, m);
            lab.world.add_learner(m, urls).await?;
            lab.record_membership().await;
            lab.record
                .event(format!("{tag}: added {} as learner", m.name()));
            return Ok(true);
        }
        if !lab.world.etcd.promoted.contains(&m) {
            if lab.world.etcd.hold_promotion {
                return Ok(false);
            }
            lab.world.promote(m).await?;
            lab.record_membership().await;
            lab.record.event(format!("{tag}: promoted {}", m.name()));
            return Ok(true);
        }
    }
    // Every member runs: the spec's URLs reach them by a rolling update (at `Complete`, back
    // to the in-cluster URLs).
    let urls = wanted_urls(&lab.world, Side::Destination, override_default_url, fields)?;
    rolling::roll(lab, Side::Destination, &urls, tag).await
}

/// The destination's replicas, once `fields` are checked against what druid can do here:
/// the lab's member names, no scale-down, bootstrap members that are in the cluster.
fn check_destination(world: &World, fields: &EtcdFields) -> Result<u16> {
    if fields.member_name_prefix.as_deref() != Some(PREFIX) {
        return Err(Error::State(format!(
            "memberNamePrefix {:?}: the lab's destination members are named with {PREFIX:?}",
            fields.member_name_prefix
        )));
    }
    let replicas = fields
        .replicas
        .and_then(|r| u16::try_from(r).ok())
        .unwrap_or(0);
    if replicas == 0 {
        return Ok(0);
    }
    let cluster = &world.etcd;
    if cluster
        .members
        .iter()
        .any(|m| m.side == Side::Destination && m.index >= replicas)
    {
        return Err(Error::State(format!(
            "the plan scales the destination down to {replicas}: not a migration step"
        )));
    }
    for b in &fields.bootstrap_members {
        if !cluster
            .members
            .iter()
            // Listed with URLs the member advertises (with etcd-druid v0.38's API the exposed
            // URL is advertised beside the in-cluster one).
            .any(|m| {
                let urls = cluster.peer_urls(*m);
                m.name() == b.name
                    && !b.peer_urls.is_empty()
                    && b.peer_urls.iter().all(|u| urls.contains(u))
            })
        {
            return Err(Error::State(format!(
                "bootstrap member {} ({:?}) is not in the cluster",
                b.name, b.peer_urls
            )));
        }
    }
    Ok(replicas)
}

/// Removes `name`, first moving leadership to a voter that stays if the leader is leaving
/// (removing the leader would force an election that stalls requests).
/// Returns whether it did anything.
pub async fn remove(lab: &mut Lab, name: &str, leaving: &[String], tag: &str) -> Result<bool> {
    // A learner that has not started yet is listed by its peer URL only.
    let Some(m) = member::all()
        .into_iter()
        .find(|m| m.name() == name || m.peer_url() == name || m.in_cluster_url() == name)
    else {
        return Err(Error::State(format!(
            "the plan removes unknown member {name}"
        )));
    };
    if !lab.world.etcd.members.contains(&m) {
        // Already removed: the member list was observed on a member that had not applied the
        // removal yet (member lists are served locally, not linearizably).
        return Ok(false);
    }
    let urls = lab.world.voter_urls();
    if leaving.contains(&etcd::leader(&urls).await?) {
        let Some(target) = lab
            .world
            .etcd
            .voters()
            .into_iter()
            .find(|v| !leaving.contains(&v.name()))
        else {
            return Err(Error::State("no voter stays to take the leadership".into()));
        };
        etcd::move_leader(&urls, target).await?;
        lab.record
            .event(format!("{tag}: leader moved to {}", target.name()));
    }
    lab.world.remove(m).await?;
    lab.record_membership().await;
    lab.record.event(format!("{tag}: removed {name}"));
    Ok(true)
}

/// The peer URLs etcd-druid starts `m` with for `fields`: the advertised ones, after the
/// in-cluster one unless `overrideDefaultUrl`; the in-cluster one alone when not advertised.
fn druid_urls(override_default_url: bool, fields: &EtcdFields, m: MemberRef) -> Vec<String> {
    match fields.advertise.iter().find(|a| a.name == m.name()) {
        Some(a) if override_default_url => a.peer_urls.clone(),
        Some(a) => [vec![m.in_cluster_url()], a.peer_urls.clone()].concat(),
        None => vec![m.in_cluster_url()],
    }
}
