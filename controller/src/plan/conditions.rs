//! Condition bookkeeping: a new condition keeps its previous `lastTransitionTime` when its
//! status did not change, so that resuming a step does not look like a transition.

use crate::crd::Condition;

/// GEP-0039: the source members are exposed and advertise their extra peer URLs.
pub const SOURCE_PREPARED: &str = "SourceEtcdPreparedForPeerJoin";
/// isthmus: the destination members are exposed (no GEP name; the GEP folds it into joining).
pub const DESTINATION_EXPOSED: &str = "DestinationEtcdExposed";
/// GEP-0039: the two destination members joined the source cluster.
pub const PEERS_JOINED: &str = "DestinationEtcdPeersJoined";
/// GEP-0039: the cluster is 3 destination members.
pub const ETCD_COMPLETE: &str = "EtcdMigrationComplete";
/// Gardener's condition type (`ShootLiveMigrationSourceSeedCleanup`; the GEP's text spells it
/// `…CleanUp`): the source removed what it hosted for the migration.
pub const SOURCE_CLEANUP: &str = "SourceSeedCleanup";
/// GEP-0039: the destination finished (exposure and temporary VPN record removed).
pub const MIGRATION_COMPLETED: &str = "MigrationCompleted";
/// isthmus: every object of the last pass was applied (`False`: the API server refused one;
/// the reason says how: `FieldConflict` with another manager, `Invalid`, `Forbidden`).
pub const APPLIED: &str = "ObjectsApplied";
/// isthmus: the abort's cleanup state (or why an abort was refused).
pub const ABORTED: &str = "LiveMigrationAborted";
/// isthmus: present (`True`) while the controller refuses the spec; the reason and message
/// name the field and why. Nothing is planned until the spec changes; removed once it is valid.
pub const SPEC_INVALID: &str = "SpecInvalid";
/// isthmus: the members' routes admit only listed sources (`False`, reason `OpenToAnySource`:
/// they admit every address; `True` with reason `NoSourceAllowed`: they admit nobody).
pub const EXPOSURE_RESTRICTED: &str = "ExposureRestricted";
/// isthmus: another writer (gardenlet's `Deploy`) removed or changed fields isthmus set on the
/// `Etcd` (`True`: reason `Reasserted`, `ReplicasRaised` or `BootstrapRemoved`, the fields and
/// the orchestrator's duty in the message; `False` / `FieldsInPlace` once the step is reached
/// again). Written only once it happened (`plan::overwrite`).
pub const OVERWRITTEN: &str = "EtcdSpecOverwritten";
/// isthmus: a route this migration needs (the temporary VPN's name, say) is held by an older
/// migration (`True`); the file then lacks it, so the exposure is not reported served.
/// Written only once it happened (`False` when resolved).
pub const ROUTE_CONFLICT: &str = "RouteConflict";
/// isthmus: the tunnel server this controller runs for `spec.vpn.server` is available
/// (`True`), rolling out (`Progressing`: the step is not reached meanwhile), held by another
/// migration of the namespace or removed with the VPN's route (`False`).
pub const TUNNEL_SERVER: &str = "TunnelServerAvailable";

/// A condition before merging with its previous value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Condition type.
    pub type_: &'static str,
    /// `True`, `False` or `Progressing`.
    pub status: &'static str,
    /// CamelCase reason.
    pub reason: &'static str,
    /// Detail.
    pub message: String,
}

impl Verdict {
    /// A `True` verdict.
    pub fn done(type_: &'static str, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            type_,
            status: "True",
            reason,
            message: message.into(),
        }
    }
    /// A `Progressing` verdict: waiting for something that should happen by itself.
    pub fn waiting(type_: &'static str, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            type_,
            status: "Progressing",
            reason,
            message: message.into(),
        }
    }
    /// A `False` verdict: will not happen without a change of spec.
    pub fn refused(type_: &'static str, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            type_,
            status: "False",
            reason,
            message: message.into(),
        }
    }
}

/// Replaces (or adds) `verdict` in `previous`, keeping timestamps that did not change.
pub fn merge(previous: &[Condition], verdict: &Verdict, now: &str) -> Vec<Condition> {
    let old = previous.iter().find(|c| c.type_ == verdict.type_);
    let transition = match old {
        Some(c) if c.status == verdict.status => c.last_transition_time.clone(),
        _ => now.to_string(),
    };
    let update = match old {
        Some(c)
            if c.status == verdict.status
                && c.reason == verdict.reason
                && c.message == verdict.message =>
        {
            c.last_update_time.clone()
        }
        _ => now.to_string(),
    };
    let new = Condition {
        type_: verdict.type_.to_string(),
        status: verdict.status.to_string(),
        reason: verdict.reason.to_string(),
        message: verdict.message.clone(),
        last_transition_time: transition,
        last_update_time: update,
    };
    let mut out: Vec<Condition> = previous
        .iter()
        .filter(|c| c.type_ != verdict.type_)
        .cloned()
        .collect();
    out.push(new);
    out
}

/// Whether `previous` holds `type_` with status `True`.
pub fn is_true(previous: &[Condition], type_: &str) -> bool {
    previous
        .iter()
        .any(|c| c.type_ == type_ && c.status == "True")
}

/// Seconds since `c` last changed status, at `now` (RFC 3339); `None` if either time does not
/// parse (a condition written by something else, or a clock we cannot read).
pub(super) fn seconds_since(c: &Condition, now: &str) -> Option<i64> {
    let since = c
        .last_transition_time
        .parse::<k8s_openapi::jiff::Timestamp>()
        .ok()?;
    let now = now.parse::<k8s_openapi::jiff::Timestamp>().ok()?;
    Some(now.as_second() - since.as_second())
}
