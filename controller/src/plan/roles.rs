//! What each role wants of the `Etcd` and of etcd's membership at each step, and when the
//! step is reached. Membership is read from etcd itself (`Observed::etcd_cluster`), never
//! inferred from etcd-druid's status alone: a member that etcd still lists is still voting.

use super::conditions::{self as cond, Verdict};
use super::names::Member;
use super::steps::{annotations, Ctx};
use super::{EtcdAction, EtcdCluster, EtcdFields, EtcdMember, EtcdOp};
use crate::crd::{DruidApi, MemberUrls, Step};

/// What a role decided.
pub(super) struct Outcome {
    pub(super) etcd: EtcdAction,
    pub(super) members_to_remove: Vec<String>,
    pub(super) ops: Vec<EtcdOp>,
    pub(super) verdict: Verdict,
    pub(super) ready: bool,
}

impl Outcome {
    pub(super) fn new(etcd: EtcdAction, verdict: Verdict, ready: bool) -> Self {
        Self {
            etcd,
            members_to_remove: Vec::new(),
            ops: Vec::new(),
            verdict,
            ready,
        }
    }
}

/// Default `spec.destination.joinTimeout`.
pub const DEFAULT_JOIN_TIMEOUT_SECS: i64 = 600;

/// Whether the observed fields carry what `want` asks (options `None` are not ours).
pub(super) fn covers(have: &EtcdFields, want: &EtcdFields) -> bool {
    (want.replicas.is_none() || have.replicas == want.replicas)
        && (want.member_name_prefix.is_none() || have.member_name_prefix == want.member_name_prefix)
        && (want.skip_client_san_verification.is_none()
            || have.skip_client_san_verification == want.skip_client_san_verification)
        && have.bootstrap_members == want.bootstrap_members
        && have.advertise == want.advertise
}

pub(super) fn apply(ctx: &Ctx<'_>, fields: EtcdFields) -> EtcdAction {
    let existing = ctx.obs.etcd.as_ref();
    let unchanged = existing.is_some_and(|e| covers(&e.fields, &fields));
    let annotations = annotations(
        unchanged,
        existing.and_then(|e| e.timestamp.clone()),
        &ctx.obs.now,
    );
    EtcdAction::Apply {
        fields,
        annotations,
    }
}

/// The etcd side is done as Gardener would judge it: druid acted on our fields, the `Etcd`
/// is healthy, and `replicas` members are ready.
fn etcd_ready(ctx: &Ctx<'_>, fields: &EtcdFields, replicas: i32) -> bool {
    ctx.obs.etcd.as_ref().is_some_and(|e| {
        e.gardener_ready() && covers(&e.fields, fields) && e.ready_replicas >= replicas
    })
}

/// etcd-druid observed the generation carrying `fields` (nothing said of the members' health).
fn etcd_synced(ctx: &Ctx<'_>, fields: &EtcdFields) -> bool {
    ctx.obs
        .etcd
        .as_ref()
        .is_some_and(|e| e.synced() && e.operation.is_none() && covers(&e.fields, fields))
}

/// The members to advertise: only indices below `replicas` (etcd-druid's CEL rule). Client
/// URLs exist only in the `additionalAdvertisedURLs` API.
fn advertised(ctx: &Ctx<'_>, replicas: i32) -> Vec<MemberUrls> {
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

pub(super) fn source(ctx: &Ctx<'_>, step: Step) -> Outcome {
    match step {
        // The source members left the cluster at the destination's Shrink: nothing to roll
        // back, and the `Etcd` is gardenlet's to delete.
        Step::Complete => {
            let v = if ctx.exposure_held {
                Verdict::waiting(
                    cond::SOURCE_CLEANUP,
                    "WaitingForSourceMembersRemoval",
                    "etcd still lists a source member: the exposure stays until it left the cluster",
                )
            } else {
                cleanup_verdict(ctx, cond::SOURCE_CLEANUP)
            };
            Outcome::new(EtcdAction::Keep, v, ctx.cleaned)
        }
        Step::Abort => super::abort::abort(ctx, EtcdAction::Release),
        _ => {
            let t = cond::SOURCE_PREPARED;
            let Some(e) = &ctx.obs.etcd else {
                let msg = format!("Etcd {} not found", ctx.spec.etcd_name);
                let v = Verdict::waiting(t, "EtcdNotFound", msg);
                return Outcome::new(EtcdAction::Keep, v, false);
            };
            // gardenlet owns the source's replicas; advertise only what druid may accept.
            let replicas = e.fields.replicas.unwrap_or(i32::from(ctx.spec.members));
            let fields = EtcdFields {
                advertise: advertised(ctx, replicas),
                skip_client_san_verification: Some(true),
                ..EtcdFields::default()
            };
            // At Shrink the destination's etcd-druid removes the source members one by one;
            // a removed member exits, so the source `Etcd` is not ready again: that is the
            // migration working, not a rollout to wait for. Druid having acted on our fields
            // is all that counts then.
            let prepared = if step == Step::Shrink {
                etcd_synced(ctx, &fields)
            } else {
                etcd_ready(ctx, &fields, replicas)
            };
            let verdict = match &ctx.exposure {
                Some((reason, msg)) => Verdict::waiting(t, reason, msg.clone()),
                None if prepared => Verdict::done(
                    t,
                    "EtcdExposedViaPeerURLs",
                    "Source etcd members exposed and ready for peer connections",
                ),
                None => Verdict::waiting(t, "WaitingForEtcd", "etcd-druid is rolling the members"),
            };
            let ready = verdict.status == "True";
            Outcome::new(apply(ctx, fields), verdict, ready)
        }
    }
}

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

/// The join has been in progress for longer than `spec.destination.joinTimeout`.
fn join_timed_out(ctx: &Ctx<'_>, timeout: Option<&str>) -> bool {
    let limit = timeout
        .and_then(duration_secs)
        .unwrap_or(DEFAULT_JOIN_TIMEOUT_SECS);
    let Some(c) = ctx
        .obs
        .previous
        .conditions
        .iter()
        .find(|c| c.type_ == cond::PEERS_JOINED)
    else {
        return false;
    };
    if c.status == "False" && c.reason == "JoinTimedOut" {
        return true;
    }
    c.status == "Progressing" && cond::seconds_since(c, &ctx.obs.now).is_some_and(|s| s > limit)
}

pub(super) fn destination(ctx: &Ctx<'_>, step: Step) -> Outcome {
    let Some(dest) = &ctx.spec.destination else {
        let v = Verdict::refused(
            cond::PEERS_JOINED,
            "MissingDestinationSpec",
            "spec.destination is required",
        );
        return Outcome::new(EtcdAction::Keep, v, false);
    };
    let own = urls(ctx.members);
    match step {
        Step::Expose => {
            let t = cond::DESTINATION_EXPOSED;
            let v = match &ctx.exposure {
                Some((reason, msg)) => Verdict::waiting(t, reason, msg.clone()),
                None => Verdict::done(t, "EtcdExposed", "destination members exposed"),
            };
            let ready = v.status == "True";
            Outcome::new(EtcdAction::Keep, v, ready)
        }
        Step::Join | Step::Grow | Step::Shrink => {
            let (replicas, t) = match step {
                Step::Join => (2, cond::PEERS_JOINED),
                _ => (3, cond::ETCD_COMPLETE),
            };
            let cluster = ctx.obs.etcd_cluster.as_ref();
            let sources = &dest.source_members;
            // Shrink: leadership moves to a destination voter before the source members go.
            let leader_on_source = cluster.and_then(|c| {
                let leader = c.leader?;
                listed(c, sources)
                    .iter()
                    .any(|m| m.id == leader)
                    .then_some(())
            });
            let voters: Vec<&EtcdMember> = cluster
                .map(|c| {
                    listed(c, &own)
                        .into_iter()
                        .filter(|m| !m.is_learner)
                        .collect()
                })
                .unwrap_or_default();
            let keep_bootstrap = step != Step::Shrink || leader_on_source.is_some();
            let fields = EtcdFields {
                replicas: Some(replicas),
                member_name_prefix: Some(dest.member_name_prefix.clone()),
                bootstrap_members: if keep_bootstrap {
                    sources.clone()
                } else {
                    Vec::new()
                },
                advertise: advertised(ctx, replicas),
                skip_client_san_verification: Some(true),
            };
            match (&ctx.obs.etcd, &ctx.exposure) {
                // Members join only through the exposure: never create the Etcd before it works.
                (None, Some((reason, msg))) => {
                    let v = Verdict::waiting(t, reason, msg.clone());
                    return Outcome::new(EtcdAction::Keep, v, false);
                }
                (None, None) if dest.etcd_template.is_none() => {
                    let msg = format!(
                        "Etcd {} does not exist and spec.destination.etcdTemplate is unset",
                        ctx.spec.etcd_name
                    );
                    let v = Verdict::waiting(t, "EtcdNotFound", msg);
                    return Outcome::new(EtcdAction::Keep, v, false);
                }
                // druid's CEL rule: bootstrapWithExistingCluster only at creation.
                (Some(e), _)
                    if step != Step::Shrink
                        && e.fields.bootstrap_members.is_empty()
                        && e.joined_at.is_none() =>
                {
                    let v = Verdict::refused(
                        t,
                        "EtcdCreatedWithoutBootstrap",
                        "the destination Etcd exists without bootstrapWithExistingCluster, which can be set only at creation",
                    );
                    return Outcome::new(EtcdAction::Keep, v, false);
                }
                _ => {}
            }
            let joined = ctx.obs.etcd.as_ref().is_some_and(|e| e.joined_at.is_some());
            let all_voters = own.iter().take(replicas as usize).all(|m| {
                voters
                    .iter()
                    .any(|v| v.name == m.name || v.peer_urls == m.peer_urls)
            });
            let etcd_done = etcd_ready(ctx, &fields, replicas) && joined && all_voters;
            let leftovers: Vec<String> = match (step, cluster) {
                (Step::Shrink, Some(c)) => listed(c, sources).into_iter().map(label).collect(),
                _ => Vec::new(),
            };
            let mut ops = Vec::new();
            if let (Step::Shrink, Some(()), Some(to)) = (step, leader_on_source, voters.first()) {
                ops.push(EtcdOp::MoveLeader {
                    to: to.id,
                    name: label(to),
                });
            }
            let v = match step {
                _ if cluster.is_none() && ctx.obs.etcd.is_some() => Verdict::waiting(
                    t,
                    "EtcdUnreachable",
                    "cannot read etcd's member list through the client exposure",
                ),
                Step::Join if !etcd_done && join_timed_out(ctx, dest.join_timeout.as_deref()) => {
                    Verdict::refused(
                        t,
                        "JoinTimedOut",
                        "the destination members did not join within spec.destination.joinTimeout; abort is possible",
                    )
                }
                Step::Shrink if leader_on_source.is_some() => Verdict::waiting(
                    t,
                    "MovingLeadership",
                    "moving etcd leadership to a destination member before the source members leave",
                ),
                _ if etcd_done && !ctx.vpn_ready => Verdict::waiting(
                    t,
                    "WaitingForVPNRecord",
                    "the temporary VPN's DNSRecord or proxy route is not ready",
                ),
                Step::Join if etcd_done => Verdict::done(
                    t,
                    "PeersJoinedSuccessfully",
                    "Two etcd peers joined the existing etcd cluster",
                ),
                Step::Grow if etcd_done => Verdict::waiting(
                    t,
                    "ThirdMemberJoined",
                    "3 destination members ready; waiting for Shrink",
                ),
                Step::Shrink if etcd_done && leftovers.is_empty() => Verdict::done(
                    t,
                    "SourceMembersRemoved",
                    "etcd lists only the 3 destination members",
                ),
                Step::Shrink if etcd_done => Verdict::waiting(
                    t,
                    "RemovingSourceMembers",
                    format!("etcd still lists: {}", leftovers.join(", ")),
                ),
                _ => match &ctx.exposure {
                    // Say what blocks first: without exposure etcd cannot make progress.
                    Some((reason, msg)) => Verdict::waiting(t, reason, msg.clone()),
                    None => Verdict::waiting(
                        t,
                        "WaitingForEtcd",
                        format!("waiting for {replicas} destination voters, joined and ready"),
                    ),
                },
            };
            let ready = etcd_done
                && leftovers.is_empty()
                && ctx.vpn_ready
                && cluster.is_some()
                && (step != Step::Shrink || leader_on_source.is_none());
            let mut out = Outcome::new(apply(ctx, fields), v, ready);
            out.members_to_remove = leftovers;
            out.ops = ops;
            out
        }
        Step::Complete => {
            // One definition with the check that releases the routes once druid rolled.
            let fields = super::release::released_fields(ctx.spec, step).unwrap_or_default();
            let t = cond::MIGRATION_COMPLETED;
            let ready = ctx.cleaned && etcd_ready(ctx, &fields, 3);
            let v = if ready {
                Verdict::done(
                    t,
                    "MigrationCompleted",
                    "exposure and temporary VPN record removed",
                )
            } else if let Some(why) = ctx.routes_held {
                Verdict::waiting(t, "CleanUpInProgress", why)
            } else {
                Verdict::waiting(
                    t,
                    "CleanUpInProgress",
                    "removing exposure and migration-only etcd fields",
                )
            };
            Outcome::new(apply(ctx, fields), v, ready)
        }
        Step::Abort => super::abort::abort(ctx, EtcdAction::Delete),
    }
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
