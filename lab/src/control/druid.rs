//! The etcd-druid stand-in of the controller-driven runs, behaving as etcd-druid does as
//! Gardener deploys it (`controllers.etcd.enableEtcdSpecAutoReconcile: false`,
//! docs/etcd-druid-contract.md):
//!
//! - it acts on an `Etcd` only when it was created or carries
//!   `gardener.cloud/operation: reconcile`, and then on the spec of that generation; a spec
//!   changed without the annotation does not reach the members and its generation stays
//!   unobserved;
//! - the membership operations and rolling updates are the planner-driven runs' own
//!   (`crate::druid`, `crate::rolling`), one per pass; once a generation needs none, it writes
//!   `status.observedGeneration` and only then removes the annotation;
//! - a request for a generation it already reconciled is a violation (the annotation put back
//!   after its removal makes etcd-druid reconcile the same generation twice);
//! - the source members leave one by one, [`REMOVAL_INTERVAL`] apart (a removed member's pod
//!   takes time to go), once the destination's bootstrap members were cleared;
//! - every pass it writes the health status etcd-druid's status flow writes: `ready`,
//!   `readyReplicas`, `members`, `AllMembersUpdated`, and `bootstrapWithExistingCluster` once,
//!   when the destination's members have joined.

use super::DruidState;
use crate::backend::idx;
use crate::error::{Error, Result};
use crate::etcd::{self, MemberRef, Side};
use crate::lab::Lab;
use crate::specs;
use crate::topology;
use isthmus_controller::gardener::etcd_observe;
use isthmus_controller::plan::EtcdFields;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// How long the removal of one source member takes before the next one goes.
pub const REMOVAL_INTERVAL: Duration = Duration::from_secs(2);

/// What a pass saw, for the control plane's records.
#[derive(Debug, Default)]
pub struct Pass {
    /// Changes of the `Etcd` the controllers wrote.
    pub written: Vec<String>,
    /// Breaches of the contract.
    pub violations: Vec<String>,
}

fn kube(what: &str, e: kube::Error) -> Error {
    Error::State(format!("etcd-druid stand-in: {what}: {e}"))
}

impl Lab {
    /// One pass of etcd-druid over `side`'s `Etcd` (read through `api`).
    pub(super) async fn druid(
        &mut self,
        side: Side,
        api: &Api<DynamicObject>,
        st: &mut DruidState,
    ) -> Result<Pass> {
        let mut pass = Pass::default();
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
                pass.written.push("Etcd deleted".into());
            }
            *st = DruidState::default();
            return Ok(pass);
        };
        let v = serde_json::to_value(&obj).map_err(|e| Error::State(e.to_string()))?;
        let spec = &self.migrations[idx(side)].spec;
        let mut e = etcd_observe(&v, spec.druid_api);
        let previous = self.migrations[idx(side)].obs.etcd.clone();
        if previous.as_ref().map(|p| p.generation) != Some(e.generation) {
            let f = &e.fields;
            pass.written.push(format!(
                "Etcd generation {}: replicas {:?}, {} bootstrap members, {} advertised URLs",
                e.generation,
                f.replicas,
                f.bootstrap_members.len(),
                f.advertise.len()
            ));
        }
        let requested = e.operation.is_some();
        let created = v.pointer("/status/observedGeneration").is_none() && st.observed.is_none();
        if (requested || created) && st.target.as_ref().map(|t| t.0) != Some(e.generation) {
            if st.done.contains(&e.generation) {
                pass.violations.push(format!(
                    "{}: reconcile requested again for Etcd generation {}, which etcd-druid had reconciled",
                    specs::seed_name(side),
                    e.generation
                ));
            }
            st.target = Some((e.generation, e.fields.clone()));
            st.acted = Some(e.fields.clone());
        }
        let tag = format!("etcd-druid stand-in ({})", specs::seed_name(side));
        if side == Side::Destination {
            // The controller removes an aborted join's learners through etcd's API: their
            // pods stop whatever the spec says.
            self.forget_unlisted(side).await?;
        }
        let busy = match st.target.clone() {
            Some((_, fields)) => self.reconcile(side, &fields, &previous, st, &tag).await?,
            None => false,
        };
        let finished = match (&st.target, busy) {
            (Some((g, _)), false) => Some(*g),
            _ => None,
        };
        if let Some(g) = finished {
            st.observed = Some(g);
            st.done.insert(g);
            st.target = None;
        }
        let fields = st.acted.clone().unwrap_or_else(|| e.fields.clone());
        let (status, joined_at) = self
            .druid_status(side, &fields, &previous, st, busy, &v)
            .await?;
        let body = json!({"apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd", "status": status});
        api.patch_status(
            specs::ETCD,
            &PatchParams::apply("etcd-druid").force(),
            &Patch::Apply(body),
        )
        .await
        .map_err(|e| kube("Etcd status", e))?;
        // After `observedGeneration`, as etcd-druid's `completeReconcile` does.
        if finished.is_some() && requested {
            let drop_op = json!({"metadata": {"annotations": {"gardener.cloud/operation": null}}});
            api.patch(specs::ETCD, &PatchParams::default(), &Patch::Merge(drop_op))
                .await
                .map_err(|e| kube("Etcd annotation", e))?;
            e.operation = None;
        }
        e.observed_generation = st.observed;
        e.joined_at = joined_at;
        self.migrations[idx(side)].obs.etcd = Some(e);
        Ok(pass)
    }

    /// One step towards `fields`; whether more steps are needed.
    async fn reconcile(
        &mut self,
        side: Side,
        fields: &EtcdFields,
        previous: &Option<isthmus_controller::plan::EtcdObs>,
        st: &mut DruidState,
        tag: &str,
    ) -> Result<bool> {
        if side == Side::Source {
            // A rolling update runs within the pass.
            let wanted = self.wanted_urls(side, fields)?;
            self.roll(side, &wanted, tag).await?;
            return Ok(false);
        }
        let joined = previous.as_ref().and_then(|p| p.joined_at.clone());
        if fields.replicas.unwrap_or(0) == 0 {
            return Ok(false);
        }
        let sources_left = self.cluster.iter().any(|m| m.side == Side::Source);
        if fields.bootstrap_members.is_empty() && joined.is_some() && sources_left {
            // etcd-druid removes the source members once the bootstrap members are cleared
            // (its proposed removal, DEP #1355), one at a time.
            if st
                .last_removal
                .is_some_and(|t| t.elapsed() < REMOVAL_INTERVAL)
            {
                return Ok(true);
            }
            let removed = self.remove_sources(tag).await?;
            if removed {
                st.last_removal = Some(Instant::now());
            }
            return Ok(true);
        }
        self.druid_destination(fields, tag).await
    }

    /// The status etcd-druid writes for `fields` (the spec the members run), and the join
    /// time it records once.
    async fn druid_status(
        &self,
        side: Side,
        fields: &EtcdFields,
        previous: &Option<isthmus_controller::plan::EtcdObs>,
        st: &DruidState,
        busy: bool,
        v: &Value,
    ) -> Result<(Value, Option<String>)> {
        let now = crate::drive::now;
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
        if let Some(o) = st.observed {
            status["observedGeneration"] = json!(o);
        }
        if let Some(j) = &joined_at {
            let members = v
                .pointer("/spec/etcd/bootstrapWithExistingCluster/members")
                .cloned();
            status["bootstrapWithExistingCluster"] =
                json!({"joinedAt": j, "members": members.unwrap_or(json!([]))});
        }
        Ok((status, joined_at))
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
}
