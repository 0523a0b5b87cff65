//! The etcd-druid stand-in of the controller-driven runs, behaving as etcd-druid does as
//! Gardener deploys it (`controllers.etcd.enableEtcdSpecAutoReconcile: false`,
//! docs/etcd-druid-contract.md):
//!
//! - it acts on an `Etcd` only when it was created or carries
//!   `druid.gardener.cloud/operation: reconcile` (or the deprecated
//!   `gardener.cloud/operation: reconcile`; both are removed), and then on the spec of that
//!   generation; a spec
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
//!   when the destination's members have joined (`status.rs`).

mod state;
mod status;

pub use state::DruidState;

use crate::druid;
use crate::error::{Error, Result};
use crate::etcd;
use crate::lab::Lab;
use crate::member::{self, MemberRef};
use crate::migration::Migration;
use crate::rolling;
use crate::side::Side;
use crate::specs;
use isthmus_controller::gardener::etcd_observe;
use isthmus_controller::plan::{EtcdFields, EtcdObs};
use kube::api::{Api, DynamicObject};
use status::{drop_request, status_to_write, write_status};
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

/// One pass of etcd-druid over `side`'s `Etcd` (read through `api`); `m` is `side`'s
/// migration as the stand-ins keep it (its `Etcd` as druid saw it last).
pub(super) async fn pass(
    lab: &mut Lab,
    m: &mut Migration,
    side: Side,
    api: &Api<DynamicObject>,
    st: &mut DruidState,
) -> Result<Pass> {
    let Some(obj) = api
        .get_opt(specs::ETCD)
        .await
        .map_err(|e| kube("reading the Etcd", e))?
    else {
        return gone(lab, m, side, st).await;
    };
    let mut pass = Pass::default();
    let v = serde_json::to_value(&obj).map_err(|e| Error::State(e.to_string()))?;
    let mut e = etcd_observe(&v, m.spec.druid_api);
    let previous = m.obs.etcd.clone();
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
    let requested = e.operation.as_deref() == Some("reconcile");
    let created = v.pointer("/status/observedGeneration").is_none() && st.observed.is_none();
    if (requested || created) && st.request(&e) {
        pass.violations.push(format!(
            "{}: reconcile requested again for Etcd generation {}, which etcd-druid had reconciled",
            specs::seed_name(side),
            e.generation
        ));
    }
    let (busy, finished) = act(lab, side, m.spec.override_default_url, &previous, st).await?;
    let fields = st.acted.clone().unwrap_or_else(|| e.fields.clone());
    let (status, joined_at) = status_to_write(lab, side, &fields, &previous, st, busy, &v).await?;
    write_status(api, status)
        .await
        .map_err(|e| kube("Etcd status", e))?;
    // After `observedGeneration`, as etcd-druid's `completeReconcile` does.
    if finished.is_some() && requested {
        drop_request(api)
            .await
            .map_err(|e| kube("Etcd annotation", e))?;
        e.operation = None;
    }
    e.observed_generation = st.observed;
    e.joined_at = joined_at;
    m.obs.etcd = Some(e);
    Ok(pass)
}

/// What druid does this pass for the generation it reconciles: one step; whether more are
/// needed, and the generation finished by it, if any.
async fn act(
    lab: &mut Lab,
    side: Side,
    override_default_url: bool,
    previous: &Option<EtcdObs>,
    st: &mut DruidState,
) -> Result<(bool, Option<i64>)> {
    let tag = format!("etcd-druid stand-in ({})", specs::seed_name(side));
    if side == Side::Destination {
        // The controller removes an aborted join's learners through etcd's API: their
        // pods stop whatever the spec says.
        forget_unlisted(lab, side).await?;
    }
    let busy = match st.target.clone() {
        Some((_, fields)) => {
            reconcile(lab, side, override_default_url, &fields, previous, st, &tag).await?
        }
        None => false,
    };
    Ok((busy, st.finish(busy)))
}

/// No `Etcd` (any more): a deleted destination's members stop; druid forgets everything.
async fn gone(lab: &mut Lab, m: &mut Migration, side: Side, st: &mut DruidState) -> Result<Pass> {
    let mut pass = Pass::default();
    if side == Side::Destination && m.obs.etcd.take().is_some() {
        forget_unlisted(lab, side).await?;
        lab.world.etcd.forget_side(side);
        pass.written.push("Etcd deleted".into());
    }
    *st = DruidState::default();
    Ok(pass)
}

/// One step towards `fields`; whether more steps are needed.
async fn reconcile(
    lab: &mut Lab,
    side: Side,
    override_default_url: bool,
    fields: &EtcdFields,
    previous: &Option<EtcdObs>,
    st: &mut DruidState,
    tag: &str,
) -> Result<bool> {
    if side == Side::Source {
        // A rolling update runs within the pass.
        let wanted = druid::wanted_urls(&lab.world, side, override_default_url, fields)?;
        rolling::roll(lab, side, &wanted, tag).await?;
        return Ok(false);
    }
    let joined = previous.as_ref().and_then(|p| p.joined_at.clone());
    if fields.replicas.unwrap_or(0) == 0 {
        return Ok(false);
    }
    let sources_left = lab.world.etcd.has(Side::Source);
    if fields.bootstrap_members.is_empty() && joined.is_some() && sources_left {
        // etcd-druid removes the source members once the bootstrap members are cleared
        // (its proposed removal, DEP #1355), one at a time.
        if st
            .last_removal
            .is_some_and(|t| t.elapsed() < REMOVAL_INTERVAL)
        {
            return Ok(true);
        }
        let removed = remove_sources(lab, tag).await?;
        if removed {
            st.last_removal = Some(Instant::now());
        }
        return Ok(true);
    }
    druid::destination(lab, override_default_url, fields, tag).await
}

/// Forgets `side`'s members that etcd no longer lists (the controller removes the learners
/// of an aborted join itself, through etcd's API), stopping their processes.
async fn forget_unlisted(lab: &mut Lab, side: Side) -> Result<()> {
    let Ok(mut c) = etcd::connect(&lab.world.voter_urls()).await else {
        return Ok(());
    };
    let Ok(listed) = etcd::list(&mut c).await else {
        return Ok(());
    };
    let gone: Vec<MemberRef> = lab
        .world
        .etcd
        .members
        .iter()
        .copied()
        .filter(|m| m.side == side && !listed.iter().any(|l| m.listed_as(l)))
        .collect();
    for m in gone {
        lab.world.etcd.forget(m);
        lab.record.event(format!(
            "etcd-druid stand-in: {} left etcd, its pod stopped",
            m.name()
        ));
    }
    Ok(())
}

/// Removes the next source member still in the cluster; whether one was removed.
async fn remove_sources(lab: &mut Lab, tag: &str) -> Result<bool> {
    let leaving: Vec<String> = member::source().iter().map(MemberRef::name).collect();
    let next = lab
        .world
        .etcd
        .members
        .iter()
        .find(|m| m.side == Side::Source)
        .map(MemberRef::name);
    match next {
        Some(name) => druid::remove(lab, &name, &leaving, tag).await,
        None => Ok(false),
    }
}
