//! The lab's etcd-druid stand-in for the destination's `Etcd` and for membership changes the
//! planner asks for: one operation per pass (add the next missing member as a learner and
//! start it, promote it, remove a leaving member after moving leadership off it), and the peer
//! URLs druid starts members with. A change of those URLs is a rolling update
//! (`crate::rolling`). It acts on real etcd through its member API, as druid does.

use crate::backend::idx;
use crate::error::{Error, Result};
use crate::etcd::{self, MemberRef, Side};
use crate::lab::Lab;
use crate::specs::PREFIX;
use crate::topology;
use isthmus_controller::plan::EtcdFields;

impl Lab {
    /// The peer URLs etcd-druid gives `side`'s members in the cluster for `fields`
    /// ([`druid_urls`]). An advertised URL must be the member's exposed one (the only other
    /// name the lab's DNS and proxies serve).
    pub(crate) fn wanted_urls(
        &self,
        side: Side,
        fields: &EtcdFields,
    ) -> Result<Vec<(MemberRef, Vec<String>)>> {
        let spec = &self.migrations[idx(side)].spec;
        let all = [topology::source(), topology::destination()].concat();
        for a in &fields.advertise {
            let ok = all
                .iter()
                .any(|m| m.name() == a.name && a.peer_urls == [m.peer_url()]);
            if !ok {
                return Err(Error::State(format!(
                    "the plan advertises {} at {:?}; the lab's members cannot be rolled to it",
                    a.name, a.peer_urls
                )));
            }
        }
        Ok(self
            .cluster
            .iter()
            .filter(|m| m.side == side)
            .map(|m| (*m, druid_urls(spec.override_default_url, fields, *m)))
            .collect())
    }

    /// One druid step towards `fields` on the destination: add the next missing member as a
    /// learner (and start it), or promote the next learner. Returns whether it did something.
    pub(crate) async fn druid_destination(
        &mut self,
        fields: &EtcdFields,
        tag: &str,
    ) -> Result<bool> {
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
            // An abort stops the joining members first; the lab's learners are stopped when
            // the plan removes them.
            return Ok(false);
        }
        if self
            .cluster
            .iter()
            .any(|m| m.side == Side::Destination && m.index >= replicas)
        {
            return Err(Error::State(format!(
                "the plan scales the destination down to {replicas}: not a migration step"
            )));
        }
        for b in &fields.bootstrap_members {
            if !self
                .cluster
                .iter()
                // Listed with URLs the member advertises (with etcd-druid v0.38's API the
                // exposed URL is advertised beside the in-cluster one).
                .any(|m| {
                    let urls = self.peer_urls(*m);
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
        let wanted: Vec<MemberRef> = topology::destination()
            .into_iter()
            .filter(|m| m.index < replicas)
            .collect();
        for m in wanted {
            if !self.cluster.contains(&m) {
                // druid starts a joining member with the advertised URL: it must be the one
                // the lab's DNS and proxies serve.
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
                let spec = &self.migrations[idx(Side::Destination)].spec;
                let urls = druid_urls(spec.override_default_url, fields, m);
                self.add_learner(m, urls).await?;
                self.event(format!("{tag}: added {} as learner", m.name()));
                return Ok(true);
            }
            if !self.promoted.contains(&m) {
                if self.hold_promotion {
                    return Ok(false);
                }
                self.promote(m).await?;
                self.event(format!("{tag}: promoted {}", m.name()));
                return Ok(true);
            }
        }
        // Every member runs: the spec's URLs reach them by a rolling update (at `Complete`,
        // back to the in-cluster URLs).
        let urls = self.wanted_urls(Side::Destination, fields)?;
        self.roll(Side::Destination, &urls, tag).await
    }

    /// Removes `name`, first moving leadership to a voter that stays if the leader is leaving
    /// (removing the leader would force an election that stalls requests).
    /// Returns whether it did anything.
    pub(crate) async fn remove_planned(
        &mut self,
        name: &str,
        leaving: &[String],
        tag: &str,
    ) -> Result<bool> {
        let all = [topology::source(), topology::destination()].concat();
        // A learner that has not started yet is listed by its peer URL only.
        let Some(m) = all
            .into_iter()
            .find(|m| m.name() == name || m.peer_url() == name || m.in_cluster_url() == name)
        else {
            return Err(Error::State(format!(
                "the plan removes unknown member {name}"
            )));
        };
        if !self.cluster.contains(&m) {
            // Already removed: the member list was observed on a member that had not applied
            // the removal yet (member lists are served locally, not linearizably).
            return Ok(false);
        }
        let urls = self.urls(&self.voters());
        if leaving.contains(&etcd::leader(&urls).await?) {
            let Some(target) = self
                .voters()
                .into_iter()
                .find(|v| !leaving.contains(&v.name()))
            else {
                return Err(Error::State("no voter stays to take the leadership".into()));
            };
            etcd::move_leader(&urls, target).await?;
            self.event(format!("{tag}: leader moved to {}", target.name()));
        }
        self.remove(m).await?;
        self.event(format!("{tag}: removed {name}"));
        Ok(true)
    }
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
