//! What the controller cannot do, said in the status: a spec it refuses (the `SpecInvalid`
//! condition naming field and reason, a Warning Event, a failure counted once, no retry until
//! the spec changes), and an object the API server does not let it read (`ObjectsApplied=
//! False / Forbidden`, retried with backoff: a grant may come).

use super::context::Context;
use super::write::status_apply;
use super::Error;
use crate::crd::EtcdMigration;
use crate::plan::conditions::{self as cond, Verdict};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};

/// Writes `verdict` (a `SpecInvalid` condition) into the status, keeping everything else as
/// the last valid pass left it (`exposedMembers` keep this migration's routes rendered by the
/// others' passes: nothing is torn down because of a typo), and waits for a change of the
/// object. The Event and the metric come once per new message, not once per pass.
pub(super) async fn refuse(
    m: &EtcdMigration,
    ns: &str,
    ctx: &Context,
    verdict: Verdict,
) -> Result<Action, Error> {
    let name = m.name_any();
    let previous = m.status.clone().unwrap_or_default();
    let repeated = previous
        .conditions
        .iter()
        .any(|c| c.type_ == cond::SPEC_INVALID && c.message == verdict.message);
    let mut status = previous.clone();
    status.observed_generation = m.metadata.generation;
    status.step_ready = false;
    status.conditions = cond::merge(&previous.conditions, &verdict, &(ctx.now)());
    status_apply(ctx, ns, &name, &status).await?;
    if repeated {
        return Ok(Action::await_change());
    }
    tracing::warn!(migration = %format!("{ns}/{name}"), reason = verdict.reason, message = %verdict.message, "spec refused");
    ctx.metrics
        .failures
        .get_or_create(&super::metrics::FailureLabels {
            reason: "spec_invalid".into(),
        })
        .inc();
    let event = Event {
        type_: EventType::Warning,
        reason: cond::SPEC_INVALID.into(),
        note: Some(truncate(&verdict.message, 1000)),
        action: "Validate".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, &m.object_ref(&())).await {
        tracing::warn!(error = %e, "publishing the SpecInvalid event");
    }
    Ok(Action::await_change())
}

/// Reports `e`, an error reading what a pass observes, as `ObjectsApplied=False` when the API
/// server refused the request (`Forbidden`: typically the namespace's grant is missing), and
/// returns it for the backoff. Other errors only return.
pub(super) async fn refuse_access(
    m: &EtcdMigration,
    ns: &str,
    ctx: &Context,
    e: Error,
) -> Result<Action, Error> {
    let Error::Kube(kube::Error::Api(s)) = &e else {
        return Err(e);
    };
    let mut status = m.status.clone().unwrap_or_default();
    let verdict = Verdict::refused(
        cond::APPLIED,
        e.apply_reason(),
        format!(
            "{}: {} (the grant in this namespace: deploy/examples/access-*.yaml)",
            s.reason, s.message
        ),
    );
    status.observed_generation = m.metadata.generation;
    status.step_ready = false;
    status.conditions = cond::merge(&status.conditions, &verdict, &(ctx.now)());
    status_apply(ctx, ns, &m.name_any(), &status).await?;
    Err(e)
}

/// At most `max` bytes of `s`, cut at a character boundary (an Event note holds 1 kB).
pub(super) fn truncate(s: &str, max: usize) -> String {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}
