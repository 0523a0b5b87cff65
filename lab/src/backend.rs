//! The local backend: applies one seed's [`Plan`] to the lab the way Gardener's controllers
//! apply the objects it stands for, and observes the result for the next pass.
//!
//! - `DNSRecord` → both seeds' hosts files: a seed resolves its own records to 127.0.0.1 (its
//!   proxy) and the other seed's to the link relay in front of that seed's proxy. The record's
//!   value is the owning seed's proxy address (`lb_address`); the lab has no address both seeds
//!   reach the same way, so it translates per resolving seed (split horizon).
//! - Proxy routes → `proxy::render` (the controller's renderer) + SIGHUP + `/config` hash check.
//! - `Etcd` → what etcd-druid would do (`crate::druid`), one membership operation per pass:
//!   add a member as a learner and start it, promote it, and for `members_to_remove` move
//!   leadership to a member that stays, then remove one member (quorum checked). A change of
//!   the advertised peer URLs is a rolling update (`crate::rolling`): `member update` and a
//!   restart, one member at a time.
//!
//! Exposure is built before etcd uses it and torn down after etcd stopped using it: routes
//! go only once no connection uses them.

use crate::error::{Error, Result};
use crate::etcd::{self, MemberRef, Side};
use crate::lab::Lab;
use crate::specs::{self, NAMESPACE};
use crate::topology::{self, Topology};
use crate::{drive, proxy};
use isthmus_controller::crd::EtcdMigrationSpec;
use isthmus_controller::plan::{
    self, DnsRecordObs, EtcdAction, EtcdCluster, EtcdFields, EtcdMember, EtcdObs, EtcdOp, Observed,
    Plan, TIMESTAMP,
};

/// One seed's `EtcdMigration` as the lab keeps it: the spec the orchestrator sets and what the
/// planner observes of the objects the backend stands for.
#[derive(Debug, Clone)]
pub struct Migration {
    pub spec: EtcdMigrationSpec,
    pub obs: Observed,
}

impl Migration {
    /// `side`'s migration at `Expose`, nothing applied yet.
    pub fn new(side: Side, topo: &Topology) -> Self {
        Self {
            spec: specs::spec(side, isthmus_controller::crd::Step::Expose),
            obs: Observed {
                namespace: NAMESPACE.into(),
                now: drive::now(),
                generation: Some(1),
                // The seed's proxy as reached from the host namespace.
                lb_address: Some(topo.seed(side).seed_ip.to_string()),
                ..Observed::default()
            },
        }
    }
}

/// Index of `side` in [`Lab::migrations`] and [`Lab::proxies`].
pub fn idx(side: Side) -> usize {
    match side {
        Side::Source => 0,
        Side::Destination => 1,
    }
}

impl Lab {
    /// Refreshes what the planner observes of `side`: whether the proxy serves the routes the
    /// plan wants, the `Etcd`'s members and ready replicas, and etcd's own member list and
    /// leader (what the controller reads through the client exposure).
    pub async fn observe(&mut self, side: Side) -> Result<()> {
        let i = idx(side);
        let m = &self.migrations[i];
        // The routes this pass's plan wants (they do not depend on the rollout itself).
        let wanted = plan::plan(&m.spec, &m.obs).routes;
        let file = proxy::render(side, self.topo.seed(side), &wanted)?;
        let rolled_out = self.proxies[i].serving_hash().await.as_deref() == Some(&file.hash);
        let status = match m.obs.etcd {
            Some(_) => Some(self.etcd_status(side).await?),
            None => None,
        };
        let cluster = self.etcd_cluster().await;
        let m = &mut self.migrations[i];
        m.obs.now = drive::now();
        m.obs.served_routes = rolled_out.then_some(wanted);
        m.obs.etcd_cluster = cluster;
        if let (Some(e), Some((members, ready))) = (m.obs.etcd.as_mut(), status) {
            e.members = members;
            e.ready_replicas = ready;
            // The lab's druid stand-in reports the join once the destination's members vote
            // (etcd-druid writes `status.bootstrapWithExistingCluster` once, at that point).
            if side == Side::Destination && e.joined_at.is_none() && ready >= 2 {
                e.joined_at = Some(drive::now());
            }
        }
        Ok(())
    }

    /// etcd's own member list and leader, with learners named by their peer URL.
    async fn etcd_cluster(&self) -> Option<EtcdCluster> {
        let urls = self.urls(&self.voters());
        let mut c = etcd::connect(&urls).await.ok()?;
        let listed = etcd::list(&mut c).await.ok()?;
        let leader = c.status().await.ok().map(|s| s.leader());
        Some(EtcdCluster {
            members: listed
                .into_iter()
                .map(|l| EtcdMember {
                    id: l.id,
                    name: l.name,
                    peer_urls: l.peer_urls,
                    is_learner: l.learner,
                })
                .collect(),
            leader,
        })
    }

    /// etcd's member names (learners included; a learner not started yet has no name in etcd,
    /// so names come from peer URLs) and how many of `side`'s members are voters that serve.
    pub(crate) async fn etcd_status(&self, side: Side) -> Result<(Vec<String>, i32)> {
        let voters = self.voters();
        let mut c = etcd::connect(&self.urls(&voters)).await?;
        let listed = etcd::list(&mut c).await?;
        let names = listed.iter().map(etcd::Listed::lab_name).collect();
        let mut ready = 0;
        for m in voters.iter().filter(|m| m.side == side) {
            let voter = listed.iter().any(|l| m.listed_as(l) && !l.learner);
            if voter && etcd::serving(&m.client_url(self.topo.seed(side))).await {
                ready += 1;
            }
        }
        Ok((names, ready))
    }

    /// Applies one pass's plan of `side`; returns whether anything changed.
    pub async fn apply(&mut self, side: Side, p: &Plan) -> Result<bool> {
        let tag = format!("plan {:?} ({})", p.step, specs::seed_name(side));
        let building = !p.routes.is_empty();
        let mut acted = false;
        if building {
            acted |= self.apply_records(side, p, &tag)?;
            acted |= self.apply_routes(side, p, &tag).await?;
        } else {
            // Tearing down: the names go first, so nothing dials them again (a restarted
            // etcd member replays its log and dials a peer at the URL it was added with,
            // keeping that connection after the peer's URL changed: seen here); the routes
            // go last, once no connection uses them.
            acted |= self.apply_records(side, p, &tag)?;
        }
        acted |= self.apply_etcd(side, p, &tag).await?;
        if !building {
            self.wait_routes_unused(side, p, &tag).await?;
            acted |= self.apply_routes(side, p, &tag).await?;
        }
        Ok(acted)
    }

    fn apply_records(&mut self, side: Side, p: &Plan, tag: &str) -> Result<bool> {
        let records = &mut self.migrations[idx(side)].obs.dns_records;
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
                        // Ready once written: the hosts files are rewritten below, in place.
                        observed_generation: Some(generation),
                        last_operation_state: Some("Succeeded".into()),
                    };
                    records.insert(d.object_name.clone(), rec);
                    written.push(d.spec.name.clone());
                }
            }
        }
        let deleted: Vec<String> = p
            .dns_deletions
            .iter()
            .filter_map(|n| records.remove(n).map(|r| r.spec.name))
            .collect();
        if written.is_empty() && deleted.is_empty() {
            return Ok(false);
        }
        self.write_hosts()?;
        if !written.is_empty() {
            self.event(format!("{tag}: DNSRecords written: {}", written.join(", ")));
        }
        if !deleted.is_empty() {
            self.event(format!("{tag}: DNSRecords deleted: {}", deleted.join(", ")));
        }
        Ok(true)
    }

    /// Rewrites both seeds' hosts files from both migrations' records, after each seed's
    /// cluster DNS: the in-cluster peer names, which every seed resolves to its own pods.
    pub(crate) fn write_hosts(&self) -> Result<()> {
        for resolver in [Side::Source, Side::Destination] {
            let seed = self.topo.seed(resolver);
            let mut entries: Vec<(String, String)> = (0..topology::MEMBERS)
                .flat_map(|index| {
                    let m = MemberRef {
                        side: resolver,
                        index,
                    };
                    [
                        ("127.0.0.1".to_string(), m.in_cluster_dns()),
                        (m.pod_ip().to_string(), m.pod_dns()),
                    ]
                })
                .collect();
            for owner in [Side::Source, Side::Destination] {
                let obs = &self.migrations[idx(owner)].obs;
                for rec in obs.dns_records.values() {
                    if rec.spec.values.first() != obs.lb_address.as_ref() {
                        return Err(Error::State(format!(
                            "DNSRecord {} points at {:?}, not at its seed's proxy {:?}",
                            rec.spec.name, rec.spec.values, obs.lb_address
                        )));
                    }
                    let addr = if owner == resolver {
                        "127.0.0.1".to_string()
                    } else {
                        seed.host_ip.to_string()
                    };
                    entries.push((addr, rec.spec.name.clone()));
                }
            }
            seed.set_hosts(&entries)?;
        }
        Ok(())
    }

    async fn apply_routes(&mut self, side: Side, p: &Plan, tag: &str) -> Result<bool> {
        let file = proxy::render(side, self.topo.seed(side), &p.routes)?;
        let changed = self.proxies[idx(side)].set_config(&file).await?;
        if changed {
            let short = file.hash.get(..12).unwrap_or(&file.hash);
            self.event(format!(
                "{tag}: {} routes rendered, reloaded, /config serves {short}",
                p.routes.len()
            ));
        }
        Ok(changed)
    }

    async fn apply_etcd(&mut self, side: Side, p: &Plan, tag: &str) -> Result<bool> {
        let mut acted = false;
        match &p.etcd {
            EtcdAction::Keep | EtcdAction::Delete => {}
            EtcdAction::Apply {
                fields,
                annotations,
            } => {
                let changed = self.set_fields(side, fields.clone(), tag);
                acted |= changed;
                if let Some(e) = self.migrations[idx(side)].obs.etcd.as_mut() {
                    e.timestamp = annotations.get(TIMESTAMP).cloned();
                }
                let busy = match side {
                    // A rolling update is done within the pass; the next pass sees it synced.
                    Side::Source => {
                        let wanted = self.wanted_urls(side, fields)?;
                        acted |= self.roll(side, &wanted, tag).await?;
                        false
                    }
                    Side::Destination => self.druid_destination(fields, tag).await?,
                };
                if !busy {
                    self.synced(side);
                }
                acted |= busy;
            }
            EtcdAction::Release => {
                let e = self.migrations[idx(side)].obs.etcd.as_ref();
                let replicas = e.and_then(|e| e.fields.replicas);
                let released = EtcdFields {
                    replicas,
                    ..EtcdFields::default()
                };
                // The source's abort: its members roll back to their in-cluster URLs. (At
                // `Complete` the source members are gone and the planner leaves the `Etcd`.)
                let wanted = self.wanted_urls(side, &released)?;
                acted |= self.set_fields(side, released, tag);
                acted |= self.roll(side, &wanted, tag).await?;
                self.synced(side);
            }
        }
        for op in &p.etcd_ops {
            if let EtcdOp::MoveLeader { name, .. } = op {
                let all = [topology::source(), topology::destination()].concat();
                if let Some(target) = all.into_iter().find(|m| &m.name() == name) {
                    etcd::move_leader(&self.urls(&self.voters()), target).await?;
                    self.event(format!("{tag}: leader moved to {name}"));
                    acted = true;
                }
            }
        }
        if let Some(name) = p.members_to_remove.first() {
            return self.remove_planned(name, &p.members_to_remove, tag).await;
        }
        if p.etcd == EtcdAction::Delete {
            self.members.retain(|m| m.r.side != side);
            self.cluster.retain(|m| m.side != side);
            self.promoted.retain(|m| m.side != side);
            self.migrations[idx(side)].obs.etcd = None;
            self.event(format!("{tag}: Etcd deleted"));
            acted = true;
        }
        Ok(acted)
    }

    /// Owns `fields` on `side`'s `Etcd` (creating it); a change is a new generation.
    fn set_fields(&mut self, side: Side, mut fields: EtcdFields, tag: &str) -> bool {
        let e = self.migrations[idx(side)]
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
        let what = format!(
            "{tag}: Etcd generation {}: replicas {replicas}, {} bootstrap members, {} advertised URLs",
            e.generation,
            e.fields.bootstrap_members.len(),
            e.fields.advertise.len()
        );
        self.event(what);
        true
    }

    /// etcd-druid acted on the current generation.
    fn synced(&mut self, side: Side) {
        if let Some(e) = self.migrations[idx(side)].obs.etcd.as_mut() {
            e.observed_generation = Some(e.generation);
            e.ready = Some(true);
        }
    }

    /// Waits until no connection uses the member routes this pass removes from `side`'s
    /// proxy (the members stopped dialling the exposed names), as a controller must before
    /// deleting a route in use.
    async fn wait_routes_unused(&self, side: Side, p: &Plan, tag: &str) -> Result<()> {
        let kept: Vec<String> = p.routes.iter().map(|r| r.listener.clone()).collect();
        let proxy = &self.proxies[idx(side)];
        etcd::retry(
            &format!("{tag}: no connection on the member listeners being released"),
            std::time::Duration::from_secs(60),
            || async {
                match proxy.member_connections(&kept).await {
                    Some(open) if open.is_empty() => Ok(()),
                    Some(open) => Err(Error::State(format!("connections open: {open:?}"))),
                    None => Err(Error::State("the proxy's /metrics did not answer".into())),
                }
            },
        )
        .await
    }
}
