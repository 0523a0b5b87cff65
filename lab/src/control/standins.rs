//! The stand-ins that act on what the controllers write, one pass each per tick, only through
//! the seeds' APIs (and etcd's own API, as etcd-druid does):
//!
//! - kubelet: the route ConfigMap → the proxy's volume (`kubelet.rs`);
//! - the DNS provider (the seed world's, `isthmus_seed_world::dns`, the one the controller's
//!   tests run): a due `DNSRecord`'s `gardener.cloud/operation` annotation taken away, every
//!   `DNSRecord` of both seeds → both seeds' hosts files (the lab's DNS, split horizon,
//!   `crate::world::hosts`), then `status.observedGeneration` and `lastOperation: Succeeded`;
//! - etcd-druid (the seed world's `DruidStandIn`, the one the controller's tests run): the
//!   `Etcd`, on a reconcile request only → its pods' membership operations and rolling
//!   updates (`isthmus_seed_world::druid::pods`: the same code the planner-driven runs use),
//!   and the status etcd-druid writes.
//!
//! Every change a stand-in sees is recorded (the report's list of what the controllers wrote),
//! and so is every condition change of both migrations (the condition timeline) and every
//! change of the controllers' Lease holders.

use super::{Controllers, MIGRATION, ROUTES, SYSTEM};
use crate::error::{Error, Result};
use crate::lab::Lab;
use crate::report::Event;
use crate::side::Side;
use crate::specs::{self, NAMESPACE};
use crate::world::hosts;
use isthmus_controller::crd::EtcdMigration;
use isthmus_controller::gardener::{dnsrecord_resource, etcd_observe, etcd_resource};
use isthmus_controller::plan::DnsRecordObs;
use isthmus_seed_world::dns;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject};
use std::collections::BTreeMap;

fn kube(what: &str, e: kube::Error) -> Error {
    Error::State(format!("{what}: {e}"))
}

impl Controllers {
    /// One pass of every stand-in over both seeds.
    pub(super) async fn tick(&mut self, lab: &mut Lab) -> Result<()> {
        for side in Side::BOTH {
            self.kubelet(lab, side).await?;
        }
        self.dns_provider(lab).await?;
        for side in Side::BOTH {
            self.druid_tick(lab, side).await?;
        }
        for side in Side::BOTH {
            self.conditions(lab, side).await?;
        }
        Ok(())
    }

    /// Records a change of `side`'s Lease holder (at `t_ms`); returns the holder.
    pub(super) async fn watch_lease(&mut self, side: Side, t_ms: f64) -> Result<Option<String>> {
        let holder = self.plane.lease_holder(side).await?;
        let i = side.index();
        if holder != self.holders[i] {
            self.holders[i] = holder.clone();
            self.seen.leases.push(Event {
                t_ms,
                what: format!(
                    "{}: Lease held by {}",
                    specs::seed_name(side),
                    holder.as_deref().unwrap_or("nobody")
                ),
            });
        }
        Ok(holder)
    }

    /// Records what a stand-in saw the controllers write.
    fn written(&mut self, lab: &mut Lab, side: Side, what: String) {
        let what = format!("{}: {what}", specs::seed_name(side));
        let t_ms = lab.record.now_ms();
        self.seen.written.push(Event {
            t_ms,
            what: what.clone(),
        });
        lab.record.event(format!("controller wrote {what}"));
    }

    async fn kubelet(&mut self, lab: &mut Lab, side: Side) -> Result<()> {
        let api: Api<ConfigMap> = Api::namespaced(self.plane.admin(side), SYSTEM);
        let volume = &mut self.plane.seeds[side.index()].volume;
        if let Some(rv) = volume.sync(&api, ROUTES).await? {
            self.written(
                lab,
                side,
                format!("ConfigMap {ROUTES} (resourceVersion {rv}), delivered to the proxy"),
            );
        }
        Ok(())
    }

    /// The DNS provider (the seed world's, `isthmus_seed_world::dns`) over both seeds, whose
    /// zone is both seeds' hosts files: every due record's request taken, the hosts files
    /// rewritten when the records changed, then each due record reported written.
    async fn dns_provider(&mut self, lab: &mut Lab) -> Result<()> {
        let mut changed = false;
        let mut due = Vec::new();
        for side in Side::BOTH {
            let api = self.dns_api(side);
            let records = dns::records(&api).await?;
            for r in records.iter().filter(|r| r.due()) {
                dns::take_request(&api, r).await?;
                due.push((side, r.clone()));
            }
            let records: BTreeMap<String, DnsRecordObs> =
                records.into_iter().map(|r| (r.name, r.obs)).collect();
            let obs = &mut self.migrations[side.index()].obs;
            let generations = |m: &BTreeMap<String, DnsRecordObs>| -> Vec<(String, i64)> {
                m.iter().map(|(n, r)| (n.clone(), r.generation)).collect()
            };
            if generations(&obs.dns_records) != generations(&records) {
                changed = true;
                let names: Vec<String> = records.values().map(|r| r.spec.name.clone()).collect();
                obs.dns_records = records;
                self.written(lab, side, format!("DNSRecords now {names:?}"));
            }
        }
        if changed {
            hosts::write(&lab.world.topo, &self.migrations)?;
        }
        // Only once the hosts files say so is a record reported written.
        for (side, r) in due {
            dns::succeeded(&self.dns_api(side), &r, "both seeds' hosts files").await?;
        }
        Ok(())
    }

    fn dns_api(&self, side: Side) -> Api<DynamicObject> {
        Api::namespaced_with(self.plane.admin(side), NAMESPACE, &dnsrecord_resource())
    }

    /// One pass of the etcd-druid stand-in over `side`; a new generation of the `Etcd` (or
    /// its deletion) and every breach of the contract recorded.
    async fn druid_tick(&mut self, lab: &mut Lab, side: Side) -> Result<()> {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.plane.admin(side), NAMESPACE, &etcd_resource());
        let i = side.index();
        let etcd = &mut lab.world.etcd;
        let pass = self.druid[i].pass(&api, etcd, &mut lab.record).await?;
        let m = &mut self.migrations[i];
        let seen = pass.etcd.map(|v| etcd_observe(&v, m.spec.druid_api));
        let written = match (&m.obs.etcd, &seen) {
            (Some(_), None) => Some("Etcd deleted".to_string()),
            (before, Some(e)) if before.as_ref().map(|b| b.generation) != Some(e.generation) => {
                let f = &e.fields;
                Some(format!(
                    "Etcd generation {}: replicas {:?}, {} bootstrap members, {} advertised URLs",
                    e.generation,
                    f.replicas,
                    f.bootstrap_members.len(),
                    f.advertise.len()
                ))
            }
            _ => None,
        };
        m.obs.etcd = seen;
        if let Some(w) = written {
            self.written(lab, side, w);
        }
        for v in pass.violations {
            lab.record.event(format!("violation: {v}"));
            self.seen.druid_violations.push(v);
        }
        Ok(())
    }

    /// Records every condition of `side`'s migration whose status or reason changed.
    pub(super) async fn conditions(&mut self, lab: &mut Lab, side: Side) -> Result<()> {
        let api: Api<EtcdMigration> = Api::namespaced(self.plane.admin(side), NAMESPACE);
        let Some(m) = api
            .get_opt(MIGRATION)
            .await
            .map_err(|e| kube("reading the migration", e))?
        else {
            return Ok(());
        };
        let now: Vec<(String, String)> = m
            .status
            .unwrap_or_default()
            .conditions
            .iter()
            .map(|c| (c.type_.clone(), format!("{} ({})", c.status, c.reason)))
            .collect();
        let before = std::mem::replace(&mut self.conditions[side.index()], now.clone());
        for (t, s) in now {
            if !before.contains(&(t.clone(), s.clone())) {
                let what = format!("condition ({}): {t} {s}", specs::seed_name(side));
                let t_ms = lab.record.now_ms();
                self.seen.timeline.push(Event {
                    t_ms,
                    what: what.clone(),
                });
                lab.record.event(what);
            }
        }
        Ok(())
    }
}
