//! Saying where an operator looks what another writer did to isthmus' fields on the `Etcd`
//! (gardenlet's `Deploy`, `plan::overwrite`): beside the `EtcdSpecOverwritten` condition the
//! planner writes, a Warning Event on the `EtcdMigration` (reason: the finding's), a log line and
//! `isthmus_controller_etcd_overwritten_total{reason}`, once per finding — when the condition
//! turns `True` or changes its reason, not on every pass that carries it.

use super::context::Context;
use super::metrics::OverwriteLabels;
use super::refuse::truncate;
use crate::crd::{Condition, EtcdMigration, EtcdMigrationStatus};
use crate::plan::conditions as cond;
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};

fn finding(status: &EtcdMigrationStatus) -> Option<&Condition> {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == cond::OVERWRITTEN && c.status == "True")
}

/// Reports the finding of `now` if `previous` did not hold it already.
pub(super) async fn overwritten(
    ctx: &Context,
    m: &EtcdMigration,
    previous: &EtcdMigrationStatus,
    now: &EtcdMigrationStatus,
) {
    let Some(c) = finding(now) else { return };
    if finding(previous).is_some_and(|p| p.reason == c.reason) {
        return;
    }
    let key = format!("{}/{}", m.namespace().unwrap_or_default(), m.name_any());
    tracing::warn!(migration = %key, reason = %c.reason, message = %c.message, "Etcd overwritten by another writer");
    ctx.metrics
        .overwritten
        .get_or_create(&OverwriteLabels {
            reason: c.reason.clone(),
        })
        .inc();
    // The finding's reason, not the condition type: the recorder counts an Event with the
    // same reason as a repeat of the first (its note unchanged), so a later, graver finding
    // would not show.
    let event = Event {
        type_: EventType::Warning,
        reason: c.reason.clone(),
        note: Some(truncate(&c.message, 1000)),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, &m.object_ref(&())).await {
        tracing::warn!(error = %e, "publishing the EtcdSpecOverwritten event");
    }
}
