//! The bottom of the planner: the context one pass shares ([`Ctx`]), what a role or an abort
//! decides ([`Outcome`]), and the helpers every part uses (the `Etcd` fields we own and when
//! they count as applied, etcd's member list, the annotations we own, durations). It imports
//! no other planning module, so `steps`, `roles`, `abort` and `release` all stand on it.

use super::conditions::Verdict;
use super::names::Member;
use super::{EtcdAction, EtcdCluster, EtcdFields, EtcdMember, EtcdOp, Observed, TIMESTAMP};
use crate::crd::{DruidApi, EtcdMigrationSpec, MemberUrls, Role};
use std::collections::BTreeMap;

/// Why exposure is not ready yet, or `None` when it is.
pub(super) type Exposure = Option<(&'static str, String)>;

/// What every part of a pass shares: the spec, the observation, this seed's members, and
/// the exposure's state as `steps` assessed it.
pub(super) struct Ctx<'a> {
    pub(super) spec: &'a EtcdMigrationSpec,
    pub(super) obs: &'a Observed,
    pub(super) members: &'a [Member],
    pub(super) exposure: Exposure,
    /// The temporary VPN's record is ready (or not wanted); it does not gate etcd.
    pub(super) vpn_ready: bool,
    /// Records deleted and every proxy serves none of our routes.
    pub(super) cleaned: bool,
    /// The exposure is released but its routes stay, and why (`release`).
    pub(super) routes_held: Option<&'static str>,
    /// The exposure is kept past its steps: an abort's or the source `Complete`'s members are
    /// still in etcd.
    pub(super) exposure_held: bool,
}

/// What a role decided.
pub(super) struct Outcome {
    pub(super) etcd: EtcdAction,
    pub(super) members_to_remove: Vec<String>,
    pub(super) ops: Vec<EtcdOp>,
    pub(super) verdict: Verdict,
    pub(super) ready: bool,
    /// What another writer did to the `Etcd` that cannot be put back (`overwrite`).
    pub(super) overwritten: Option<Verdict>,
}

impl Outcome {
    pub(super) fn new(etcd: EtcdAction, verdict: Verdict, ready: bool) -> Self {
        Self {
            etcd,
            members_to_remove: Vec::new(),
            ops: Vec::new(),
            verdict,
            ready,
            overwritten: None,
        }
    }
}

/// The etcd member-name prefix of this seed's members: the destination's from its spec, the
/// source's from its `Etcd` (`spec.memberNamePrefix`, set by Gardener for new `Etcd`s).
pub(super) fn member_prefix(spec: &EtcdMigrationSpec, obs: &Observed) -> Option<String> {
    match (&spec.role, &spec.destination) {
        (Role::Destination, Some(d)) => Some(d.member_name_prefix.clone()),
        _ => obs
            .etcd
            .as_ref()
            .and_then(|e| e.fields.member_name_prefix.clone()),
    }
}

/// The members' in-cluster peer port: the observed `Etcd`'s, else (the destination before it
/// created its `Etcd`) its template's.
pub(super) fn server_port(spec: &EtcdMigrationSpec, obs: &Observed) -> u16 {
    obs.etcd
        .as_ref()
        .and_then(|e| e.server_port)
        .unwrap_or_else(|| super::names::template_server_port(spec))
}

/// Whether the observed fields carry what `want` asks (options `None` are not ours).
pub(super) fn covers(have: &EtcdFields, want: &EtcdFields) -> bool {
    (want.replicas.is_none() || have.replicas == want.replicas)
        && (want.member_name_prefix.is_none() || have.member_name_prefix == want.member_name_prefix)
        && (want.skip_client_san_verification.is_none()
            || have.skip_client_san_verification == want.skip_client_san_verification)
        && have.bootstrap_members == want.bootstrap_members
        && have.advertise == want.advertise
}

/// Own exactly `fields` on the `Etcd`. No timestamp: on an `Etcd` it is gardenlet's.
pub(super) fn apply(_ctx: &Ctx<'_>, fields: EtcdFields) -> EtcdAction {
    EtcdAction::Apply { fields }
}

/// The etcd side is done as Gardener would judge it: druid acted on our fields, the `Etcd`
/// is healthy, `replicas` members are ready, and druid reports no scale operation running
/// (etcd-druid#1426's `ScaleOperationComplete`, where druid writes it).
pub(super) fn etcd_ready(ctx: &Ctx<'_>, fields: &EtcdFields, replicas: i32) -> bool {
    ctx.obs.etcd.as_ref().is_some_and(|e| {
        e.gardener_ready()
            && covers(&e.fields, fields)
            && e.ready_replicas >= replicas
            && e.scale_operation.is_none()
    })
}

/// etcd-druid observed the generation carrying `fields` (nothing said of the members' health).
pub(super) fn etcd_synced(ctx: &Ctx<'_>, fields: &EtcdFields) -> bool {
    ctx.obs
        .etcd
        .as_ref()
        .is_some_and(|e| e.synced() && e.operation.is_none() && covers(&e.fields, fields))
}

/// The members to advertise: only indices below `replicas` (etcd-druid's CEL rule). Client
/// URLs exist only in the `additionalAdvertisedURLs` API.
pub(super) fn advertised(ctx: &Ctx<'_>, replicas: i32) -> Vec<MemberUrls> {
    let clients = ctx.spec.druid_api == DruidApi::AdditionalAdvertisedUrls;
    ctx.members
        .iter()
        .filter(|m| i32::from(m.index) < replicas)
        .map(|m| MemberUrls {
            name: m.member.clone(),
            peer_urls: vec![m.peer_url()],
            client_urls: if clients {
                vec![m.client_url()]
            } else {
                Vec::new()
            },
        })
        .collect()
}

/// The members' names and exposed URLs.
pub(super) fn urls(members: &[Member]) -> Vec<MemberUrls> {
    members.iter().map(Member::urls).collect()
}

/// Members of `cluster` that are one of `set`.
pub(super) fn listed<'a>(cluster: &'a EtcdCluster, set: &[MemberUrls]) -> Vec<&'a EtcdMember> {
    cluster
        .members
        .iter()
        .filter(|e| {
            set.iter().any(|m| {
                (!e.name.is_empty() && e.name == m.name)
                    || e.peer_urls.iter().any(|u| m.peer_urls.contains(u))
            })
        })
        .collect()
}

/// How a member is named in messages: its name, or its peer URL before it started.
pub(super) fn label(m: &EtcdMember) -> String {
    if m.name.is_empty() {
        m.peer_urls
            .first()
            .cloned()
            .unwrap_or_else(|| m.id.to_string())
    } else {
        m.name.clone()
    }
}

/// The annotations we own on a `DNSRecord`: a new `gardener.cloud/timestamp` when the spec
/// changes, the existing one otherwise (a new one on every pass would be a change on every
/// pass). The reconcile request is not among them: it is written after the apply, only when
/// the apply changed the spec (see [`super::request`]), and never owned by the apply, so that
/// its owner's removal is final. None at all on an `Etcd` ([`apply`]).
pub(super) fn annotations(
    unchanged: bool,
    old: Option<String>,
    now: &str,
) -> BTreeMap<String, String> {
    let timestamp = match (unchanged, old) {
        (true, Some(ts)) => Some(ts),
        (true, None) => None,
        (false, _) => Some(now.to_string()),
    };
    timestamp
        .map(|ts| (TIMESTAMP.to_string(), ts))
        .into_iter()
        .collect()
}

/// The cleanup condition of a released exposure: done, routes held (and why), or in progress.
pub(super) fn cleanup_verdict(ctx: &Ctx<'_>, kind: &'static str) -> Verdict {
    if ctx.cleaned {
        Verdict::done(kind, "CleanedUp", "exposure removed")
    } else if let Some(why) = ctx.routes_held {
        Verdict::waiting(kind, "CleanUpInProgress", why)
    } else {
        Verdict::waiting(
            kind,
            "CleanUpInProgress",
            "removing DNS records and proxy routes",
        )
    }
}

/// Seconds in a Go-style duration (`10m`, `1h30m`, `90s`, `500ms`); `None` if malformed.
pub(super) fn duration_secs(s: &str) -> Option<i64> {
    let mut total_ms: i64 = 0;
    let mut digits = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let n: i64 = digits.parse().ok()?;
        digits.clear();
        let unit_ms = match c {
            'h' => 3_600_000,
            's' => 1_000,
            'm' if chars.peek() == Some(&'s') => {
                chars.next();
                1
            }
            'm' => 60_000,
            _ => return None,
        };
        total_ms = total_ms.checked_add(n.checked_mul(unit_ms)?)?;
    }
    digits.is_empty().then_some(total_ms / 1000)
}

#[cfg(test)]
mod tests {
    use super::duration_secs;

    #[test]
    fn go_durations() {
        assert_eq!(duration_secs("10m"), Some(600));
        assert_eq!(duration_secs("1h30m"), Some(5400));
        assert_eq!(duration_secs("90s"), Some(90));
        assert_eq!(duration_secs("1500ms"), Some(1));
        assert_eq!(duration_secs("10"), None);
        assert_eq!(duration_secs("1d"), None);
    }
}
