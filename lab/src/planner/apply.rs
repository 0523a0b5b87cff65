//! Applies one seed's [`Plan`] to the lab the way Gardener's controllers apply the objects it
//! stands for:
//!
//! - `DNSRecord` → both seeds' hosts files (`crate::world::hosts`).
//! - Proxy routes → `proxy::render` (the controller's renderer) + SIGHUP + `/config` hash check.
//! - `Etcd` → what etcd-druid's pods would do (the seed world's `druid::pods`, the same the
//!   controllers' stand-in runs), one membership operation per pass: add a member as a
//!   learner and start it, promote it, and for `members_to_remove` move leadership to a member
//!   that stays, then remove one member (quorum checked). A change of the advertised peer URLs
//!   is a rolling update (`isthmus_seed_world::etcd::rolling`): `member update` and a restart,
//!   one member at a time.
//!
//! Exposure is built before etcd uses it and torn down after etcd stopped using it: routes
//! go only once no connection uses them.

use super::Planner;
use crate::error::{Error, Result};
use crate::etcd;
use crate::lab::Lab;
use crate::proxy;
use crate::side::Side;
use crate::specs;
use crate::world::hosts;
use isthmus_controller::plan::{
    DnsRecordObs, EtcdAction, EtcdFields, EtcdObs, EtcdOp, Plan, TIMESTAMP,
};
use isthmus_seed_world::druid::{pods, DruidSpec};
use std::collections::BTreeMap;
use std::time::Duration;

impl Planner {
    /// Applies one pass's plan of `side`; returns whether anything changed.
    pub(super) async fn apply(&mut self, lab: &mut Lab, side: Side, p: &Plan) -> Result<bool> {
        let tag = format!("plan {:?} ({})", p.step, specs::seed_name(side));
        let building = !p.routes.is_empty();
        let mut acted = false;
        if building {
            acted |= self.apply_records(lab, side, p, &tag)?;
            acted |= apply_routes(lab, side, p, &tag).await?;
        } else {
            // Tearing down: the names go first, so nothing dials them again (a restarted
            // etcd member replays its log and dials a peer at the URL it was added with,
            // keeping that connection after the peer's URL changed: seen here); the routes
            // go last, once no connection uses them.
            acted |= self.apply_records(lab, side, p, &tag)?;
        }
        acted |= self.apply_etcd(lab, side, p, &tag).await?;
        if !building {
            wait_routes_unused(lab, side, p, &tag).await?;
            acted |= apply_routes(lab, side, p, &tag).await?;
        }
        Ok(acted)
    }

    /// The plan's `DNSRecord`s, written (ready at once) and deleted; both seeds' hosts files
    /// rewritten if any changed.
    fn apply_records(&mut self, lab: &mut Lab, side: Side, p: &Plan, tag: &str) -> Result<bool> {
        let records = &mut self.migrations[side.index()].obs.dns_records;
        let written = write_records(records, p);
        let deleted: Vec<String> = p
            .dns_deletions
            .iter()
            .filter_map(|n| records.remove(n).map(|r| r.spec.name))
            .collect();
        if written.is_empty() && deleted.is_empty() {
            return Ok(false);
        }
        hosts::write(&lab.world.topo, &self.migrations)?;
        if !written.is_empty() {
            lab.record
                .event(format!("{tag}: DNSRecords written: {}", written.join(", ")));
        }
        if !deleted.is_empty() {
            lab.record
                .event(format!("{tag}: DNSRecords deleted: {}", deleted.join(", ")));
        }
        Ok(true)
    }

    async fn apply_etcd(&mut self, lab: &mut Lab, side: Side, p: &Plan, tag: &str) -> Result<bool> {
        let mut acted = match &p.etcd {
            EtcdAction::Keep | EtcdAction::Delete => false,
            EtcdAction::Apply { fields } => {
                let acted = self.set_fields(lab, side, fields.clone(), tag);
                acted | self.druid(lab, side, tag).await?
            }
            EtcdAction::Release => self.release(lab, side, tag).await?,
        };
        for op in &p.etcd_ops {
            if let EtcdOp::MoveLeader { name, .. } = op {
                if let Ok(target) = lab.world.etcd.def(name) {
                    etcd::move_leader(&lab.world.voter_urls(), target).await?;
                    lab.record.event(format!("{tag}: leader moved to {name}"));
                    acted = true;
                }
            }
        }
        if let Some(name) = p.members_to_remove.first() {
            let (etcd, leaving) = (&mut lab.world.etcd, &p.members_to_remove);
            return Ok(etcd
                .remove_moving_leader(name, leaving, &mut lab.record, tag)
                .await?);
        }
        if p.etcd == EtcdAction::Delete {
            lab.world.forget_side(side);
            self.migrations[side.index()].obs.etcd = None;
            lab.record.event(format!("{tag}: Etcd deleted"));
            acted = true;
        }
        Ok(acted)
    }

    /// What etcd-druid's pods do for `side`'s `Etcd` (its fields as set) within the pass
    /// (`isthmus_seed_world::druid::pods`): the source's rolling update is done within it; the
    /// destination takes one step per pass. The generation is observed once nothing more is
    /// needed.
    async fn druid(&mut self, lab: &mut Lab, side: Side, tag: &str) -> Result<bool> {
        let m = &self.migrations[side.index()];
        let fields = m
            .obs
            .etcd
            .as_ref()
            .map(|e| e.fields.clone())
            .unwrap_or_default();
        let spec = DruidSpec::from_fields(specs::ETCD, &fields, m.spec.override_default_url);
        let did = pods::step(&mut lab.world.etcd, &spec, &mut lab.record, tag).await?;
        let (acted, busy) = match side {
            // A rolling update is done within the pass; the next pass sees it synced.
            Side::Source => (did, false),
            Side::Destination => (false, did),
        };
        if !busy {
            self.synced(side);
        }
        Ok(acted | busy)
    }

    /// The source's abort: its members roll back to their in-cluster URLs and isthmus' fields
    /// leave its `Etcd`. (At `Complete` the source members are gone and the planner leaves the
    /// `Etcd`.)
    async fn release(&mut self, lab: &mut Lab, side: Side, tag: &str) -> Result<bool> {
        let m = &self.migrations[side.index()];
        let replicas = m.obs.etcd.as_ref().and_then(|e| e.fields.replicas);
        let released = EtcdFields {
            replicas,
            ..EtcdFields::default()
        };
        let spec = DruidSpec::from_fields(specs::ETCD, &released, m.spec.override_default_url);
        let mut acted = self.set_fields(lab, side, released, tag);
        acted |= pods::step(&mut lab.world.etcd, &spec, &mut lab.record, tag).await?;
        self.synced(side);
        Ok(acted)
    }

    /// Owns `fields` on `side`'s `Etcd` (creating it); a change is a new generation.
    fn set_fields(&mut self, lab: &mut Lab, side: Side, mut fields: EtcdFields, tag: &str) -> bool {
        let e = self.migrations[side.index()]
            .obs
            .etcd
            .get_or_insert_with(EtcdObs::default);
        // `replicas: None` is not ours: gardenlet's value stays.
        if fields.replicas.is_none() {
            fields.replicas = e.fields.replicas;
        }
        if e.fields == fields {
            return false;
        }
        e.generation += 1;
        e.fields = fields;
        let replicas = e.fields.replicas.map_or("-".into(), |r| r.to_string());
        lab.record.event(format!(
            "{tag}: Etcd generation {}: replicas {replicas}, {} bootstrap members, {} advertised URLs",
            e.generation,
            e.fields.bootstrap_members.len(),
            e.fields.advertise.len()
        ));
        true
    }

    /// etcd-druid acted on the current generation.
    fn synced(&mut self, side: Side) {
        if let Some(e) = self.migrations[side.index()].obs.etcd.as_mut() {
            e.observed_generation = Some(e.generation);
            e.ready = Some(true);
            e.all_members_updated = Some(true);
        }
    }
}

/// Writes the plan's records into `records` (a changed spec is a new generation, ready at
/// once: the hosts files are rewritten in place); returns the names written.
fn write_records(records: &mut BTreeMap<String, DnsRecordObs>, p: &Plan) -> Vec<String> {
    let mut written = Vec::new();
    for d in &p.dns_records {
        let timestamp = d.annotations.get(TIMESTAMP).cloned();
        match records.get_mut(&d.object_name) {
            Some(o) if o.spec == d.spec => o.timestamp = timestamp,
            prev => {
                let generation = prev.map_or(1, |o| o.generation + 1);
                let rec = DnsRecordObs {
                    spec: d.spec.clone(),
                    timestamp,
                    operation: None,
                    generation,
                    observed_generation: Some(generation),
                    last_operation_state: Some("Succeeded".into()),
                };
                records.insert(d.object_name.clone(), rec);
                written.push(d.spec.name.clone());
            }
        }
    }
    written
}

/// Renders `side`'s routes of the plan, reloads the proxy and waits until `/config` serves
/// them; returns whether they changed.
async fn apply_routes(lab: &mut Lab, side: Side, p: &Plan, tag: &str) -> Result<bool> {
    let file = proxy::render(side, lab.world.seed(side), &p.routes)?;
    let changed = lab.world.proxies[side.index()].set_config(&file).await?;
    if changed {
        let short = file.hash.get(..12).unwrap_or(&file.hash);
        lab.record.event(format!(
            "{tag}: {} routes rendered, reloaded, /config serves {short}",
            p.routes.len()
        ));
    }
    Ok(changed)
}

/// Waits until no connection uses the member routes this pass removes from `side`'s proxy
/// (the members stopped dialling the exposed names), as a controller must before deleting a
/// route in use.
async fn wait_routes_unused(lab: &Lab, side: Side, p: &Plan, tag: &str) -> Result<()> {
    let kept: Vec<String> = p.routes.iter().map(|r| r.listener.clone()).collect();
    let proxy = &lab.world.proxies[side.index()];
    etcd::retry(
        &format!("{tag}: no connection on the member listeners being released"),
        Duration::from_secs(60),
        || async {
            match proxy.member_connections(&kept).await {
                Some(open) if open.is_empty() => Ok(()),
                Some(open) => Err(Error::State(format!("connections open: {open:?}"))),
                None => Err(Error::State("the proxy's /metrics did not answer".into())),
            }
        },
    )
    .await?;
    Ok(())
}
