//! Releasing an exposure in a safe order: the DNS records go at once, the `Etcd` is released
//! (or rolled back to plain fields) at once, and the proxy routes go only once etcd-druid has
//! rolled the members onto those fields.
//!
//! Why (docs/lab.md, "Traps": a restarted etcd member dials its peers at the URLs they were
//! added with): until the roll is done the members still advertise, and keep streams open to,
//! the exposed names; routes removed earlier cut the members off from each other.

use super::roles::covers;
use super::{EtcdFields, EtcdObs, Observed};
use crate::crd::{EtcdMigrationSpec, Role, Step};

/// The fields the `Etcd` keeps once this seed released its exposure: the destination's
/// `Complete` owns only `replicas: 3` and its member-name prefix; the source (`Complete`, and
/// an `Abort`'s `Release`) owns nothing, which [`covers`] reads as "no bootstrap members and
/// no advertised URLs". `None` when no release is planned (no destination spec: nothing is
/// applied, so there is nothing to wait for).
pub(super) fn released_fields(spec: &EtcdMigrationSpec) -> Option<EtcdFields> {
    match (spec.role, &spec.destination) {
        (Role::Source, _) => Some(EtcdFields::default()),
        (Role::Destination, Some(d)) => Some(EtcdFields {
            replicas: Some(3),
            member_name_prefix: Some(d.member_name_prefix.clone()),
            ..EtcdFields::default()
        }),
        (Role::Destination, None) => None,
    }
}

/// Whether the routes of a released exposure must stay: an `Etcd` exists that etcd-druid has
/// not rolled onto the released fields yet. Asked only once the exposure is no longer wanted
/// (`Complete`, or an `Abort` past its learner removal). No `Etcd` (the source's members are
/// gone) or the destination's abort, which deletes its `Etcd`: nothing to roll, routes go.
pub(super) fn routes_held(spec: &EtcdMigrationSpec, obs: &Observed, step: Step) -> bool {
    if spec.role == Role::Destination && step == Step::Abort {
        return false;
    }
    match (&obs.etcd, released_fields(spec)) {
        (Some(e), Some(fields)) => !rolled(e, &fields),
        _ => false,
    }
}

/// etcd-druid rolled the members onto `fields`: it observed the generation that carries them,
/// took the reconcile request, and (where it reports it) every member runs that spec. Not
/// `ready`: a source whose members left etcd at `Shrink` is never ready again, yet its roll
/// ends.
fn rolled(e: &EtcdObs, fields: &EtcdFields) -> bool {
    e.synced()
        && e.operation.is_none()
        && e.all_members_updated != Some(false)
        && covers(&e.fields, fields)
}

/// The cleanup condition's message while the routes are held.
pub(super) const HELD: &str =
    "DNS records removed; proxy routes kept until etcd-druid rolled the members back to their in-cluster URLs";
