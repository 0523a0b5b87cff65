//! What another writer did to isthmus' fields on an `Etcd`, and what isthmus does about it.
//!
//! gardenlet's `Deploy` (gardener v1.149.3 `pkg/component/etcd/etcd/etcd.go`, `Deploy`)
//! assigns a whole new `spec.etcd` and `spec.replicas` and merge-patches the difference,
//! with its own reconcile request: every shoot reconcile removes `additionalAdvertisePeerURLs`
//! and `peerUrlTls.skipClientSANVerification`, sets `replicas` to its own value (3 for an HA
//! shoot), and a gardenlet built on etcd-druid api v0.38 or later removes
//! `bootstrapWithExistingCluster` too. Measured against a real API server
//! (`controller/tests/apiserver_gardenlet.rs`):
//!
//! - a field another manager's merge patch removed has no owner left, so the next server-side
//!   apply puts it back without a conflict: isthmus re-asserts it on its next pass;
//! - a `replicas` another manager changed is that manager's, and etcd-druid's CEL rule allows
//!   no decrease but to 0: a `replicas` raised above the step's stays (the apply carries the
//!   raised value, shared with its writer, so the other fields go back), and is reported;
//! - a removed `bootstrapWithExistingCluster` can never be put back (druid's CEL rule: only at
//!   creation), and its removal is druid's order to remove the source members
//!   (etcd-druid#1426): reported, and `Join`/`Grow` are held (no membership change written,
//!   the step not reached) — only `Shrink` goes on, leadership first.
//!
//! The finding is the `EtcdSpecOverwritten` condition: `True` with reason `BootstrapRemoved`,
//! `ReplicasRaised` or `Reasserted` (fields isthmus had on the `Etcd` at this step are gone
//! and are written again), `False` / `FieldsInPlace` once the step is reached again. Written
//! only once it happened.
//!
//! "Had on the `Etcd` at this step" is what the controller remembers it applied
//! ([`EtcdApplied`]), not the last status it read: that read comes from the watch cache and
//! may not show the status the previous pass wrote yet, nor was the step reached each time
//! isthmus' fields were there. Only without that memory (after a restart, or a local
//! backend) does a reached step in the last status stand for it.

use super::conditions::{self as cond, Verdict};
use super::ctx::{Ctx, Outcome};
use super::{EtcdAction, EtcdFields, EtcdObs};
use crate::crd::{DruidApi, Step};

/// What isthmus' last successful apply left on the observed `Etcd` (the same object, by
/// uid), as the controller remembers it: so a pass knows which fields it had there whatever
/// status it read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdApplied {
    /// The step the apply was for.
    pub step: Step,
    /// The fields it applied.
    pub fields: EtcdFields,
    /// `metadata.generation` the apply returned.
    pub generation: i64,
    /// Our fields as a later generation showed them (the watch saw it), when they lacked some
    /// of `fields`: another writer's version this pass did not read (it came and was written
    /// over between a pass's read and its apply).
    pub seen_without: Option<EtcdFields>,
}

/// Reason: `bootstrapWithExistingCluster` was removed by another writer before isthmus
/// cleared it at `Shrink`.
pub const BOOTSTRAP_REMOVED: &str = "BootstrapRemoved";
/// Reason: another writer raised `replicas` above the step's, which druid lets nobody lower.
pub const REPLICAS_RAISED: &str = "ReplicasRaised";
/// Reason: fields the reached step had on the `Etcd` are gone; isthmus writes them again.
pub const REASSERTED: &str = "Reasserted";

/// What the orchestrator must do, said in every finding.
const DUTY: &str = "the orchestrator must carry isthmus' fields across its Deploy of a migrating Etcd, or not deploy it (docs/etcd-druid-contract.md, \"gardenlet's Deploy\")";

/// The `Etcd` lost its bootstrap block after isthmus created it with one: it exists without
/// it, and isthmus applied to it (or druid recorded the join). An `Etcd` someone else created
/// without it is `EtcdCreatedWithoutBootstrap` instead.
pub(super) fn bootstrap_gone(e: Option<&EtcdObs>) -> bool {
    e.is_some_and(|e| {
        e.fields.bootstrap_members.is_empty() && (e.applied_by_isthmus || e.joined_at.is_some())
    })
}

/// At `Shrink`, a bootstrap block that is gone was cleared by isthmus itself, unless the
/// first pass at `Shrink` already found it gone (and said so): a leader that moves back to a
/// source member afterwards makes no finding.
pub(super) fn cleared_at_shrink(ctx: &Ctx<'_>, step: Step) -> bool {
    let previous = &ctx.obs.previous;
    step == Step::Shrink
        && previous.step == Some(Step::Shrink)
        && !previous.conditions.iter().any(|c| {
            c.type_ == cond::OVERWRITTEN && c.status == "True" && c.reason == BOOTSTRAP_REMOVED
        })
}

/// The `replicas` to write for a step that wants `want`, and the observed value when another
/// writer raised it above: druid's CEL rule (`Replicas can either be increased or be
/// downscaled to 0`) refuses a decrease other than to 0.
pub(super) fn replicas(e: Option<&EtcdObs>, want: i32) -> (i32, Option<i32>) {
    match e.and_then(|e| e.fields.replicas) {
        Some(have) if want > 0 && have > want => (have, Some(have)),
        _ => (want, None),
    }
}

/// The finding when the bootstrap block is gone before `Shrink` cleared it.
pub(super) fn bootstrap_removed(ctx: &Ctx<'_>, step: Step) -> Verdict {
    let held = match step {
        Step::Shrink => "Shrink goes on: leadership moves to a destination voter first",
        _ => "this step is held: no membership change is written and it is not reported reached",
    };
    Verdict::done(
        cond::OVERWRITTEN,
        BOOTSTRAP_REMOVED,
        format!(
            "Etcd {}: spec.etcd.bootstrapWithExistingCluster was removed by another writer (gardenlet's Deploy on etcd-druid api v0.38 or later). It can be set only at creation, so isthmus cannot put it back, and its removal is etcd-druid's order to remove the source members (etcd-druid#1426): {held}; {DUTY}",
            ctx.spec.etcd_name
        ),
    )
}

/// The finding when `replicas` was raised above the step's.
pub(super) fn replicas_raised(ctx: &Ctx<'_>, have: i32, want: i32) -> Verdict {
    Verdict::done(
        cond::OVERWRITTEN,
        REPLICAS_RAISED,
        format!(
            "Etcd {}: spec.replicas is {have} where this step wants {want}, set by another writer (gardenlet's Deploy); etcd-druid allows no decrease but to 0, so the destination grows to {have} members now and isthmus advertises them all; {DUTY}",
            ctx.spec.etcd_name
        ),
    )
}

/// The `EtcdSpecOverwritten` condition of this pass, if there is one to write: what `out`
/// found it cannot put back; else the fields isthmus had on the `Etcd` at this step that are
/// gone ([`gone`]); else, once written, kept `True` until the step is reached again, then
/// `False`.
pub(super) fn verdict(ctx: &Ctx<'_>, step: Step, out: &Outcome) -> Option<Verdict> {
    if let Some(v) = &out.overwritten {
        return Some(v.clone());
    }
    let previous = ctx
        .obs
        .previous
        .conditions
        .iter()
        .find(|c| c.type_ == cond::OVERWRITTEN);
    let gone = match (&out.etcd, &ctx.obs.etcd) {
        (EtcdAction::Apply { fields }, Some(e)) => gone(ctx, step, &e.fields, fields),
        _ => Vec::new(),
    };
    if !gone.is_empty() {
        return Some(Verdict::done(
            cond::OVERWRITTEN,
            REASSERTED,
            format!(
                "Etcd {}: {} removed or changed by another writer (gardenlet's Deploy replaces spec.etcd) after isthmus had them there at this step; isthmus writes them again and etcd-druid reconciles once more; {DUTY}",
                ctx.spec.etcd_name,
                gone.join(", ")
            ),
        ));
    }
    match previous {
        Some(c) if c.status == "True" && c.reason == REASSERTED && !out.ready => Some(
            Verdict::done(cond::OVERWRITTEN, REASSERTED, c.message.clone()),
        ),
        Some(c) if c.status == "True" => Some(Verdict::refused(
            cond::OVERWRITTEN,
            "FieldsInPlace",
            "every field isthmus needs at this step is on the Etcd",
        )),
        _ => None,
    }
}

/// The fields of `want` isthmus had on the `Etcd` at `step` that another writer removed or
/// changed: lacking now (`have`) or in a version seen since, and applied with the value
/// wanted now (a field this step adds, or whose value it changes, was not there to lose).
/// Without a remembered apply: every wanted field `have` lacks, if the last status shows this
/// very step reached (it had them all then).
fn gone(ctx: &Ctx<'_>, step: Step, have: &EtcdFields, want: &EtcdFields) -> Vec<String> {
    let api = ctx.spec.druid_api;
    let Some(applied) = &ctx.obs.etcd_applied else {
        let previous = &ctx.obs.previous;
        return match previous.step == Some(step) && previous.step_ready {
            true => lacking(have, want, api),
            false => Vec::new(),
        };
    };
    if applied.step != step {
        return Vec::new();
    }
    let not_applied = lacking(&applied.fields, want, api);
    let mut out = lacking(have, want, api);
    for p in applied
        .seen_without
        .iter()
        .flat_map(|seen| lacking(seen, want, api))
    {
        if !out.contains(&p) {
            out.push(p);
        }
    }
    out.retain(|p| !not_applied.contains(p));
    out
}

/// The fields of `want` that `have` lacks or holds with another value, by their path (what
/// another writer did to an apply of `want`).
pub fn lacking(have: &EtcdFields, want: &EtcdFields, api: DruidApi) -> Vec<String> {
    let mut out = Vec::new();
    if want.replicas.is_some() && have.replicas != want.replicas {
        out.push("spec.replicas".to_string());
    }
    if want.member_name_prefix.is_some() && have.member_name_prefix != want.member_name_prefix {
        out.push("spec.memberNamePrefix".to_string());
    }
    if have.bootstrap_members != want.bootstrap_members {
        out.push("spec.etcd.bootstrapWithExistingCluster".to_string());
    }
    if have.advertise != want.advertise {
        out.push(
            match api {
                DruidApi::AdditionalAdvertisePeerUrls => "spec.etcd.additionalAdvertisePeerURLs",
                DruidApi::AdditionalAdvertisedUrls => "spec.etcd.additionalAdvertisedURLs",
            }
            .to_string(),
        );
    }
    if want.skip_client_san_verification.is_some()
        && have.skip_client_san_verification != want.skip_client_san_verification
    {
        out.push("spec.etcd.peerUrlTls.skipClientSANVerification".to_string());
    }
    out
}
