//! Releasing an exposure in a safe order: the DNS records go first, the proxy routes only once
//! nothing dials the exposed names any more.
//!
//! What "nothing dials them" means depends on who advertised them:
//! - members that stay (the destination's at `Complete`, the source's after an abort) advertise
//!   the exposed names until etcd-druid rolled them onto their in-cluster URLs (docs/lab.md,
//!   "Traps": a restarted etcd member dials its peers at the URLs they were added with, and
//!   keeps those streams open); routes removed earlier cut the members off from each other;
//! - the source members at `Complete` have left the cluster (the destination's `Shrink`), so
//!   no peer dials them again; there is no roll to wait for (a removed member is never ready
//!   again), and the source `Etcd` itself is left to gardenlet's cleanup. While etcd still
//!   lists one of them the whole exposure is kept (an orchestrator that moved on too early).
//!
//! Established connections are never cut by a proxy reload, so removing a route only stops
//! new connections.

use super::conditions as cond;
use super::ctx::{covers, listed, urls};
use super::names::Member;
use super::{EtcdFields, EtcdObs, Observed};
use crate::crd::{EtcdMigrationSpec, EtcdMigrationStatus, Role, Step};

/// The fields the `Etcd` keeps once this seed released its exposure: the destination's
/// `Complete` owns only `replicas: 3` and its member-name prefix; the source's abort owns
/// nothing, which [`covers`] reads as "no bootstrap members and no advertised URLs". `None`
/// when nothing is rolled back (no destination spec: nothing was applied; the source at
/// `Complete`: its members are gone).
pub(super) fn released_fields(spec: &EtcdMigrationSpec, step: Step) -> Option<EtcdFields> {
    match (spec.role, &spec.destination) {
        (Role::Source, _) if step == Step::Complete => None,
        (Role::Source, _) => Some(EtcdFields::default()),
        (Role::Destination, Some(d)) => Some(EtcdFields {
            replicas: Some(3),
            member_name_prefix: Some(d.member_name_prefix.clone()),
            ..EtcdFields::default()
        }),
        (Role::Destination, None) => None,
    }
}

/// Why the routes of a released exposure must stay, or `None` once they can go. Asked only
/// once the exposure is no longer wanted (`Complete`, or an `Abort` past its learner
/// removal). The destination's abort deletes its `Etcd` with its members: nothing dials its
/// names, so its routes go with the records.
/// The source's `Complete` releases only after its members left etcd (the exposure is held
/// before, `steps`), so nothing but its names is left to wait for.
pub(super) fn routes_held(
    spec: &EtcdMigrationSpec,
    obs: &Observed,
    step: Step,
) -> Option<&'static str> {
    if spec.role == Role::Destination && step == Step::Abort {
        return None;
    }
    if !obs.dns_records.is_empty() {
        return Some(NAMES_FIRST);
    }
    match (&obs.etcd, released_fields(spec, step)) {
        (Some(e), Some(fields)) if !rolled(e, &fields) => Some(ROLLING),
        _ => None,
    }
}

/// etcd (as last read) still lists one of `members`.
pub(super) fn members_listed(obs: &Observed, members: &[Member]) -> bool {
    obs.etcd_cluster
        .as_ref()
        .is_some_and(|c| !listed(c, &urls(members)).is_empty())
}

/// etcd-druid rolled the members onto `fields`: it observed the generation that carries them,
/// took the reconcile request, and every member runs that spec (`AllMembersUpdated` present
/// and `True`, as Gardener's waiter requires it). Not `ready`: a member may be down for
/// reasons of its own, yet the roll has ended.
fn rolled(e: &EtcdObs, fields: &EtcdFields) -> bool {
    e.synced()
        && e.operation.is_none()
        && e.all_members_updated == Some(true)
        && covers(&e.fields, fields)
}

/// Cleanup message: the records are deleted, the provider has not removed them yet.
pub(super) const NAMES_FIRST: &str =
    "DNS records deleted; proxy routes kept until the DNS provider removed the names";
/// Cleanup message: the members still advertise the exposed names.
pub(super) const ROLLING: &str =
    "DNS records removed; proxy routes kept until etcd-druid rolled the members back to their in-cluster URLs";

/// A previous pass began the source's cleanup (it saw no source member in etcd). From then on
/// etcd is not asked again: the controller reads it through the exposed client names that the
/// cleanup deletes, and a removed member never comes back.
pub fn source_cleanup_started(previous: &EtcdMigrationStatus) -> bool {
    previous.conditions.iter().any(|c| {
        c.type_ == cond::SOURCE_CLEANUP
            && matches!(c.reason.as_str(), "CleanUpInProgress" | "CleanedUp")
    })
}
