//! The abort of a migration: when it is refused (a joining member votes), and the order of an
//! accepted one — the joining members stop (`replicas: 0`), leave etcd (learners removed
//! through etcd's API), and only then the `Etcd` and the exposure go.
//!
//! The destination removes the members it added (GEP-0039: "the destination gardenlet will
//! also take care to remove the newly added members"). The source waits for that and holds
//! its exposure meanwhile: a learner removed while etcd-druid still runs its pod is added
//! again by that pod. Only when the foreign members stay for [`SOURCE_ABORT_GRACE_SECS`]
//! (the destination seed is gone) does the source remove them itself.

use super::conditions::{self as cond, Verdict};
use super::ctx::{apply, cleanup_verdict, covers, label, listed, urls, Ctx, Outcome};
use super::names::Member;
use super::{EtcdAction, EtcdCluster, EtcdFields, EtcdMember, EtcdOp, Observed};
use crate::crd::{EtcdMigrationSpec, Role};

/// How long the source's abort leaves foreign members to the destination before it removes
/// them itself.
pub const SOURCE_ABORT_GRACE_SECS: i64 = 120;

/// Members this seed's abort must see leave etcd: the destination's own joining members, or
/// on the source every member that is not its own.
fn abort_targets<'a>(
    spec: &EtcdMigrationSpec,
    cluster: &'a EtcdCluster,
    members: &[Member],
) -> Vec<&'a EtcdMember> {
    let own = urls(members);
    match spec.role {
        Role::Destination => listed(cluster, &own),
        Role::Source => {
            let mine = listed(cluster, &own);
            cluster
                .members
                .iter()
                .filter(|m| !mine.iter().any(|x| x.id == m.id))
                .collect()
        }
    }
}

/// A joining member that is already a voter: an abort can no longer just remove learners.
pub(super) fn voter_blocking_abort(
    spec: &EtcdMigrationSpec,
    obs: &Observed,
    members: &[Member],
) -> Option<String> {
    let cluster = obs.etcd_cluster.as_ref()?;
    abort_targets(spec, cluster, members)
        .into_iter()
        .find(|m| !m.is_learner)
        .map(label)
}

/// The abort still needs the exposure: members it added are in etcd (or etcd cannot be
/// asked while an `Etcd` exists and the abort has not released yet).
pub(super) fn abort_holds_exposure(
    spec: &EtcdMigrationSpec,
    obs: &Observed,
    members: &[Member],
) -> bool {
    match &obs.etcd_cluster {
        Some(c) => !abort_targets(spec, c, members).is_empty(),
        None => obs.etcd.is_some() && !release_seen(spec, obs),
    }
}

/// The release happened, as the last status says ([`released`]) or as the world shows it
/// when that status lacks it: a pass may read the status from before the release (its write
/// refused or timed out, or a watch cache behind it: found in the lab under load, the records
/// written back and released again). Releasing is monotone: once seen, an unreadable etcd
/// never brings the exposure back. The source's release leaves its `Etcd` without isthmus'
/// fields and no `DNSRecord` (a `Deploy` that wiped the fields leaves the records: still
/// held); the destination's deletes its `Etcd`, which only the abort does.
fn release_seen(spec: &EtcdMigrationSpec, obs: &Observed) -> bool {
    released(obs)
        || obs.etcd.as_ref().is_some_and(|e| match spec.role {
            Role::Source => obs.dns_records.is_empty() && covers(&e.fields, &EtcdFields::default()),
            Role::Destination => e.deleting,
        })
}

/// A previous pass saw the joined members gone and started releasing. From then on etcd is
/// not asked again: the controller reads it through the exposed client names, which the
/// release deletes (found in the lab: records deleted and re-created every few seconds).
/// Nothing can join again meanwhile: the destination's `Etcd` went first.
pub(super) fn released(obs: &Observed) -> bool {
    obs.previous.conditions.iter().any(|c| {
        c.type_ == cond::ABORTED && matches!(c.reason.as_str(), "CleanUpInProgress" | "CleanedUp")
    })
}

/// Destination abort, first step: `replicas: 0` (the only decrease druid's CEL rule allows),
/// so druid stops the joining pods and cannot add them again once they are removed. The
/// bootstrap members stay as they are (druid refuses changes while the join is in progress).
fn scale_to_zero(ctx: &Ctx<'_>) -> Option<EtcdAction> {
    let dest = ctx.spec.destination.as_ref()?;
    let e = ctx.obs.etcd.as_ref()?;
    let fields = EtcdFields {
        replicas: Some(0),
        member_name_prefix: Some(dest.member_name_prefix.clone()),
        bootstrap_members: e.fields.bootstrap_members.clone(),
        advertise: Vec::new(),
        skip_client_san_verification: Some(true),
    };
    let stopped = e.synced() && e.fields.replicas == Some(0) && e.ready_replicas == 0;
    (!stopped).then(|| apply(ctx, fields))
}

pub(super) fn abort(ctx: &Ctx<'_>, release: EtcdAction) -> Outcome {
    let empty = EtcdCluster::default();
    let cluster = match &ctx.obs.etcd_cluster {
        Some(c) => c,
        None if release_seen(ctx.spec, ctx.obs) => &empty,
        None => return unreachable(ctx),
    };
    let targets = abort_targets(ctx.spec, cluster, ctx.members);
    if !targets.is_empty() {
        let names: Vec<String> = targets.iter().map(|m| label(m)).collect();
        if ctx.spec.role == Role::Destination {
            if let Some(scale) = scale_to_zero(ctx) {
                let v = Verdict::waiting(
                    cond::ABORTED,
                    "StoppingJoinedMembers",
                    "replicas: 0 before the joined members are removed from etcd",
                );
                let mut out = Outcome::new(scale, v, false);
                out.members_to_remove = names;
                return out;
            }
        }
        if ctx.spec.role == Role::Source && !grace_over(ctx) {
            let v = Verdict::waiting(
                cond::ABORTED,
                "WaitingForDestination",
                format!(
                    "the destination removes its joined members ({}); removed here if they stay {SOURCE_ABORT_GRACE_SECS} s",
                    names.join(", ")
                ),
            );
            return Outcome::new(EtcdAction::Keep, v, false);
        }
        let v = Verdict::waiting(
            cond::ABORTED,
            "RemovingJoinedMembers",
            format!("removing from etcd: {}", names.join(", ")),
        );
        let mut out = Outcome::new(EtcdAction::Keep, v, false);
        // Learners only: a voter made the abort refused before we got here.
        out.ops = targets
            .iter()
            .filter(|m| m.is_learner)
            .map(|m| EtcdOp::Remove {
                id: m.id,
                name: label(m),
            })
            .collect();
        out.members_to_remove = names;
        return out;
    }
    let etcd = if ctx.obs.etcd.is_some() {
        release
    } else {
        EtcdAction::Keep
    };
    let done = ctx.cleaned && (ctx.spec.role == Role::Source || ctx.obs.etcd.is_none());
    let v = if done {
        Verdict::done(
            cond::ABORTED,
            "CleanedUp",
            "joined members removed, exposure removed",
        )
    } else if let Some(why) = ctx.routes_held {
        Verdict::waiting(cond::ABORTED, "CleanUpInProgress", why)
    } else {
        Verdict::waiting(
            cond::ABORTED,
            "CleanUpInProgress",
            "removing the exposure (and the destination Etcd)",
        )
    };
    Outcome::new(etcd, v, done)
}

/// etcd's member list cannot be read: nothing is removed before it can (while an `Etcd`
/// exists); without one there is nothing left but the exposure.
fn unreachable(ctx: &Ctx<'_>) -> Outcome {
    if ctx.obs.etcd.is_some() {
        let v = Verdict::waiting(
            cond::ABORTED,
            "EtcdUnreachable",
            "cannot read etcd's member list; nothing is removed before it can",
        );
        return Outcome::new(EtcdAction::Keep, v, false);
    }
    let v = cleanup_verdict(ctx, cond::ABORTED);
    Outcome::new(EtcdAction::Keep, v, ctx.cleaned)
}

/// The abort has been in progress on this seed for longer than the grace (its condition's
/// transition time: it stays while the status stays `Progressing`).
fn grace_over(ctx: &Ctx<'_>) -> bool {
    let Some(c) = ctx
        .obs
        .previous
        .conditions
        .iter()
        .find(|c| c.type_ == cond::ABORTED && c.status == "Progressing")
    else {
        return false;
    };
    cond::seconds_since(c, &ctx.obs.now).is_some_and(|s| s > SOURCE_ABORT_GRACE_SECS)
}
