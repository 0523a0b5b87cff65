//! The stand-ins that act on what the controllers write, one pass each per tick, only through
//! the seeds' APIs (and etcd's own API, as etcd-druid does):
//!
//! - kubelet: the route ConfigMap → the proxy's volume (`kubelet.rs`);
//! - the DNS provider: every `DNSRecord` of both seeds → both seeds' hosts files (the lab's DNS,
//!   split horizon as in `backend.rs`), then `status.observedGeneration` and
//!   `lastOperation: Succeeded`, and the `gardener.cloud/operation` annotation taken away;
//! - etcd-druid: the `Etcd` → membership operations and rolling updates (`druid.rs`,
//!   `rolling.rs`: the same code the planner-driven runs use), then the status etcd-druid
//!   writes: `observedGeneration` once the generation is rolled out, `ready`,
//!   `readyReplicas`, `members`, `AllMembersUpdated`, and `bootstrapWithExistingCluster`
//!   once, when the destination's members have joined.
//!
//! Every change a stand-in sees is recorded (the report's list of what the controllers wrote),
//! and so is every condition change of both migrations (the condition timeline).

use super::{ControlPlane, ROUTES, SYSTEM};
use crate::backend::idx;
use crate::error::{Error, Result};
use crate::etcd::{self, MemberRef, Side};
use crate::lab::Lab;
use crate::report::Event;
use crate::specs::{self, NAMESPACE};
use crate::topology;
use isthmus_controller::crd::EtcdMigration;
use isthmus_controller::gardener::{
    dnsrecord_observe, dnsrecord_resource, etcd_observe, etcd_resource,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{json, Value};

const SIDES: [Side; 2] = [Side::Source, Side::Destination];

fn kube(what: &str, e: kube::Error) -> Error {
    Error::State(format!("{what}: {e}"))
}

fn now() -> String {
    crate::drive::now()
}

impl Lab {
    fn admin(&self, side: Side) -> Result<kube::Client> {
        self.control
            .as_ref()
            .map(|c| c.admin(side))
            .ok_or_else(|| Error::State("no seed control plane".into()))
    }

    /// Records what a stand-in saw the controllers write.
    fn written(&mut self, side: Side, what: String) {
        let what = format!("{}: {what}", specs::seed_name(side));
        self.control_event(|c| &mut c.written, what.clone());
        self.event(format!("controller wrote {what}"));
    }

    /// Adds `what`, now, to the control plane's list that `list` picks.
    fn control_event(&mut self, list: fn(&mut ControlPlane) -> &mut Vec<Event>, what: String) {
        let t_ms = self.now_ms();
        if let Some(c) = self.control.as_mut() {
            list(c).push(Event { t_ms, what });
        }
    }

    /// One pass of every stand-in over both seeds.
    pub(crate) async fn control_tick(&mut self) -> Result<()> {
        for side in SIDES {
            self.kubelet(side).await?;
        }
        self.dns_provider().await?;
        for side in SIDES {
            self.druid(side).await?;
        }
        for side in SIDES {
            self.conditions(side).await?;
        }
        Ok(())
    }

    async fn kubelet(&mut self, side: Side) -> Result<()> {
        let api: Api<ConfigMap> = Api::namespaced(self.admin(side)?, SYSTEM);
        let Some(c) = self.control.as_mut() else {
            return Ok(());
        };
        if let Some(rv) = c.seeds[idx(side)].volume.sync(&api, ROUTES).await? {
            self.written(
                side,
                format!("ConfigMap {ROUTES} (resourceVersion {rv}), delivered to the proxy"),
            );
        }
        Ok(())
    }

    async fn dns_provider(&mut self) -> Result<()> {
        let mut changed = false;
        let mut pending = Vec::new();
        for side in SIDES {
            let api: Api<DynamicObject> =
                Api::namespaced_with(self.admin(side)?, NAMESPACE, &dnsrecord_resource());
            let list = api
                .list(&Default::default())
                .await
                .map_err(|e| kube("listing DNSRecords", e))?;
            let mut records = std::collections::BTreeMap::new();
            for r in list.items {
                let v = serde_json::to_value(&r).map_err(|e| Error::State(e.to_string()))?;
                let obs = dnsrecord_observe(&v);
                let name = r.metadata.name.clone().unwrap_or_default();
                if !obs.ready() || obs.operation.is_some() {
                    pending.push((side, name.clone(), obs.generation, obs.operation.is_some()));
                }
                records.insert(name, obs);
            }
            let obs = &mut self.migrations[idx(side)].obs;
            let before: Vec<(&String, i64)> = obs
                .dns_records
                .iter()
                .map(|(n, r)| (n, r.generation))
                .collect();
            let after: Vec<(&String, i64)> =
                records.iter().map(|(n, r)| (n, r.generation)).collect();
            if before != after {
                changed = true;
                let names: Vec<String> = records.values().map(|r| r.spec.name.clone()).collect();
                obs.dns_records = records;
                self.written(side, format!("DNSRecords now {names:?}"));
            }
        }
        if changed {
            self.write_hosts()?;
        }
        // Only once the hosts files say so is a record reported written.
        for (side, name, generation, annotated) in pending {
            let api: Api<DynamicObject> =
                Api::namespaced_with(self.admin(side)?, NAMESPACE, &dnsrecord_resource());
            let status = json!({
                "apiVersion": "extensions.gardener.cloud/v1alpha1", "kind": "DNSRecord",
                "status": {"observedGeneration": generation, "lastOperation": {
                    "type": "Reconcile", "state": "Succeeded", "progress": 100,
                    "description": "hosts files written (DNS provider stand-in)",
                    "lastUpdateTime": now()}},
            });
            let pp = PatchParams::apply("dns-provider-stand-in").force();
            api.patch_status(&name, &pp, &Patch::Apply(status))
                .await
                .map_err(|e| kube("DNSRecord status", e))?;
            if annotated {
                let drop_op =
                    json!({"metadata": {"annotations": {"gardener.cloud/operation": null}}});
                api.patch(&name, &PatchParams::default(), &Patch::Merge(drop_op))
                    .await
                    .map_err(|e| kube("DNSRecord annotation", e))?;
            }
        }
        Ok(())
    }

    async fn druid(&mut self, side: Side) -> Result<()> {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.admin(side)?, NAMESPACE, &etcd_resource());
        let Some(obj) = api
            .get_opt(specs::ETCD)
            .await
            .map_err(|e| kube("reading the Etcd", e))?
        else {
            if side == Side::Destination && self.migrations[idx(side)].obs.etcd.take().is_some() {
                self.forget_unlisted(side).await?;
                self.members.retain(|m| m.r.side != side);
                self.cluster.retain(|m| m.side != side);
                self.promoted.retain(|m| m.side != side);
                self.written(side, "Etcd deleted".into());
            }
            return Ok(());
        };
        let v = serde_json::to_value(&obj).map_err(|e| Error::State(e.to_string()))?;
        let spec = &self.migrations[idx(side)].spec;
        let mut e = etcd_observe(&v, spec.druid_api);
        let previous = self.migrations[idx(side)].obs.etcd.clone();
        if previous.as_ref().map(|p| p.generation) != Some(e.generation) {
            let f = &e.fields;
            self.written(
                side,
                format!(
                    "Etcd generation {}: replicas {:?}, {} bootstrap members, {} advertised URLs",
                    e.generation,
                    f.replicas,
                    f.bootstrap_members.len(),
                    f.advertise.len()
                ),
            );
        }
        if e.operation.is_some() {
            let drop_op = json!({"metadata": {"annotations": {"gardener.cloud/operation": null}}});
            api.patch(specs::ETCD, &PatchParams::default(), &Patch::Merge(drop_op))
                .await
                .map_err(|e| kube("Etcd annotation", e))?;
        }
        let tag = format!("etcd-druid stand-in ({})", specs::seed_name(side));
        let fields = e.fields.clone();
        let busy = match side {
            Side::Source => {
                let wanted = self.wanted_urls(side, &fields)?;
                self.roll(side, &wanted, &tag).await?;
                false
            }
            Side::Destination => {
                self.forget_unlisted(side).await?;
                let joined = previous.as_ref().and_then(|p| p.joined_at.clone());
                if fields.replicas.unwrap_or(0) == 0 {
                    false
                } else if fields.bootstrap_members.is_empty()
                    && joined.is_some()
                    && self.remove_sources(&tag).await?
                {
                    // etcd-druid removes the source members once the bootstrap members are
                    // cleared (its proposed removal, DEP #1355), one per pass.
                    true
                } else {
                    self.druid_destination(&fields, &tag).await?
                }
            }
        };
        let (names, ready) = self.etcd_status(side).await?;
        let own: Vec<String> = names
            .into_iter()
            .filter(|n| {
                self.cluster
                    .iter()
                    .any(|m| m.side == side && &m.name() == n)
            })
            .collect();
        let replicas = i64::from(fields.replicas.unwrap_or(0));
        let joined_at = previous
            .as_ref()
            .and_then(|p| p.joined_at.clone())
            .or_else(|| {
                (side == Side::Destination
                    && !fields.bootstrap_members.is_empty()
                    && replicas >= 2
                    && i64::from(ready) >= replicas)
                    .then(now)
            });
        let observed = if busy {
            previous.as_ref().and_then(|p| p.observed_generation)
        } else {
            Some(e.generation)
        };
        let mut status = json!({
            "ready": !busy && i64::from(ready) >= replicas,
            "readyReplicas": ready,
            "replicas": replicas,
            "currentReplicas": ready,
            "conditions": [{"type": "AllMembersUpdated",
                "status": if busy { "False" } else { "True" },
                "reason": if busy { "UpdateInProgress" } else { "AllMembersUpdated" },
                "message": "etcd-druid stand-in", "lastTransitionTime": now(), "lastUpdateTime": now()}],
            "members": own.iter().map(|n| json!({
                "name": n, "status": "Ready", "reason": "LeaseSucceeded", "lastTransitionTime": now(),
            })).collect::<Vec<Value>>(),
        });
        if let Some(o) = observed {
            status["observedGeneration"] = json!(o);
        }
        if let Some(j) = &joined_at {
            let members = v
                .pointer("/spec/etcd/bootstrapWithExistingCluster/members")
                .cloned();
            status["bootstrapWithExistingCluster"] =
                json!({"joinedAt": j, "members": members.unwrap_or(json!([]))});
        }
        let body = json!({"apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd", "status": status});
        api.patch_status(
            specs::ETCD,
            &PatchParams::apply("etcd-druid").force(),
            &Patch::Apply(body),
        )
        .await
        .map_err(|e| kube("Etcd status", e))?;
        e.observed_generation = observed;
        e.joined_at = joined_at;
        self.migrations[idx(side)].obs.etcd = Some(e);
        Ok(())
    }

    /// Forgets `side`'s members that etcd no longer lists (the controller removes the learners
    /// of an aborted join itself, through etcd's API), stopping their processes.
    async fn forget_unlisted(&mut self, side: Side) -> Result<()> {
        let Ok(mut c) = etcd::connect(&self.urls(&self.voters())).await else {
            return Ok(());
        };
        let Ok(listed) = etcd::list(&mut c).await else {
            return Ok(());
        };
        let gone: Vec<MemberRef> = self
            .cluster
            .iter()
            .copied()
            .filter(|m| m.side == side && !listed.iter().any(|l| m.listed_as(l)))
            .collect();
        for m in gone {
            self.cluster.retain(|x| *x != m);
            self.promoted.retain(|x| *x != m);
            self.members.retain(|x| x.r != m);
            self.advertised.remove(&m);
            self.event(format!(
                "etcd-druid stand-in: {} left etcd, its pod stopped",
                m.name()
            ));
        }
        Ok(())
    }

    /// Removes the next source member still in the cluster; whether one was removed.
    async fn remove_sources(&mut self, tag: &str) -> Result<bool> {
        let leaving: Vec<String> = topology::source().iter().map(MemberRef::name).collect();
        let next = self
            .cluster
            .iter()
            .find(|m| m.side == Side::Source)
            .map(MemberRef::name);
        match next {
            Some(name) => self.remove_planned(&name, &leaving, tag).await,
            None => Ok(false),
        }
    }

    /// Records every condition of `side`'s migration whose status or reason changed.
    async fn conditions(&mut self, side: Side) -> Result<()> {
        let api: Api<EtcdMigration> = Api::namespaced(self.admin(side)?, NAMESPACE);
        let Some(m) = api
            .get_opt(super::gardenlet::MIGRATION)
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
        let Some(ctl) = self.control.as_mut() else {
            return Ok(());
        };
        let before = std::mem::replace(&mut ctl.conditions[idx(side)], now.clone());
        for (t, s) in now {
            if !before.contains(&(t.clone(), s.clone())) {
                let what = format!("condition ({}): {t} {s}", specs::seed_name(side));
                self.control_event(|c| &mut c.timeline, what.clone());
                self.event(what);
            }
        }
        Ok(())
    }
}
