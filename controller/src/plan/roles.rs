//! What each role wants of the `Etcd` and of etcd's membership at each step, and when the
//! step is reached. Membership is read from etcd itself (`Observed::etcd_cluster`), never
//! inferred from etcd-druid's status alone: a member that etcd still lists is still voting.

use super::conditions::{self as cond, Verdict};
use super::ctx::{
    advertised, apply, cleanup_verdict, duration_secs, etcd_ready, etcd_synced, label, listed,
    urls, Ctx, Outcome,
};
use super::{druid, overwrite, EtcdAction, EtcdFields, EtcdMember, EtcdOp};
use crate::crd::{DestinationSpec, MemberUrls, Step};

/// Default `spec.destination.joinTimeout`.
pub const DEFAULT_JOIN_TIMEOUT_SECS: i64 = 600;

/// The source at `Complete`: its members left the cluster at the destination's Shrink, so
/// nothing is rolled back, and the `Etcd` is gardenlet's to delete.
pub(super) fn source_complete(ctx: &Ctx<'_>) -> Outcome {
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

/// The source from `Expose` to `Shrink`: its members advertise their exposed URLs.
pub(super) fn source_prepared(ctx: &Ctx<'_>, step: Step) -> Outcome {
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

/// A destination without `spec.destination` (the CRD refuses it; a local backend may not).
pub(super) fn missing_destination() -> Outcome {
    let v = Verdict::refused(
        cond::PEERS_JOINED,
        "MissingDestinationSpec",
        "spec.destination is required",
    );
    Outcome::new(EtcdAction::Keep, v, false)
}

/// The destination at `Expose`: its members' names and routes, no `Etcd` yet.
pub(super) fn destination_exposed(ctx: &Ctx<'_>) -> Outcome {
    let t = cond::DESTINATION_EXPOSED;
    let v = match &ctx.exposure {
        Some((reason, msg)) => Verdict::waiting(t, reason, msg.clone()),
        None => Verdict::done(t, "EtcdExposed", "destination members exposed"),
    };
    let ready = v.status == "True";
    Outcome::new(EtcdAction::Keep, v, ready)
}

/// The destination's members at `Join` (2 voters), `Grow` (3) and `Shrink` (the source
/// members gone, leadership moved to a destination voter first).
pub(super) fn destination_members(ctx: &Ctx<'_>, dest: &DestinationSpec, step: Step) -> Outcome {
    let own = urls(ctx.members);
    let (replicas, t) = match step {
        Step::Join => (2, cond::PEERS_JOINED),
        _ => (3, cond::ETCD_COMPLETE),
    };
    let cluster = ctx.obs.etcd_cluster.as_ref();
    let sources = &dest.source_members;
    // Shrink: leadership moves to a destination voter before the source members go.
    let leader_on_source: Option<&EtcdMember> = cluster.and_then(|c| {
        let leader = c.leader?;
        listed(c, sources).into_iter().find(|m| m.id == leader)
    });
    let voters: Vec<&EtcdMember> = cluster
        .map(|c| {
            listed(c, &own)
                .into_iter()
                .filter(|m| !m.is_learner)
                .collect()
        })
        .unwrap_or_default();
    let is_voter = |m: &MemberUrls| {
        voters
            .iter()
            .any(|v| v.name == m.name || v.peer_urls == m.peer_urls)
    };
    // The source members go only once the destination's 3 are voters: without them the rest
    // would have no quorum of its own.
    let keep_bootstrap =
        step != Step::Shrink || leader_on_source.is_some() || !own.iter().take(3).all(is_voter);
    let live = ctx.obs.etcd.as_ref();
    // Removed by another writer (gardenlet's Deploy), it cannot be put back (druid's CEL
    // rule): never in the apply again (`overwrite`).
    let gone = overwrite::bootstrap_gone(live);
    let removed = keep_bootstrap && gone && !overwrite::cleared_at_shrink(ctx, step);
    let hold = removed && step != Step::Shrink;
    let bootstrap = if keep_bootstrap && !gone {
        sources.clone()
    } else {
        Vec::new()
    };
    // Held while the source members may be leaving under druid: no membership change.
    let wanted = match live.and_then(|e| e.fields.replicas) {
        Some(have) if hold => have,
        _ => replicas,
    };
    // Never the opposite of a scale operation druid runs (etcd-druid#1426), never a decrease
    // druid refuses.
    let scale = druid::serialised(ctx, wanted, bootstrap);
    let (scale_replicas, raised) = overwrite::replicas(live, scale.replicas);
    let fields = EtcdFields {
        replicas: Some(scale_replicas),
        member_name_prefix: Some(dest.member_name_prefix.clone()),
        bootstrap_members: scale.bootstrap,
        advertise: advertised(ctx, scale_replicas),
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
        // Created only to join a source cluster of the destination's etcd minor version.
        (None, None) => {
            if let Some(v) = version_gate(ctx, dest, t) {
                return Outcome::new(EtcdAction::Keep, v, false);
            }
        }
        // druid's CEL rule: bootstrapWithExistingCluster only at creation.
        (Some(e), _) if step != Step::Shrink && e.fields.bootstrap_members.is_empty() && !gone => {
            let v = Verdict::refused(
                        t,
                        "EtcdCreatedWithoutBootstrap",
                        "the destination Etcd exists without bootstrapWithExistingCluster, which can be set only at creation",
                    );
            return Outcome::new(EtcdAction::Keep, v, false);
        }
        _ => {}
    }
    // druid records the join once; at Shrink it prunes the record as it removes the source
    // members (etcd-druid#1426), and etcd's own member list says what counts then.
    let joined =
        step == Step::Shrink || ctx.obs.etcd.as_ref().is_some_and(|e| e.joined_at.is_some());
    let all_voters = own.iter().take(replicas as usize).all(is_voter);
    let etcd_done = etcd_ready(ctx, &fields, replicas)
        && joined
        && all_voters
        && scale.waiting.is_none()
        && !hold;
    let leftovers: Vec<String> = match (step, cluster) {
        (Step::Shrink, Some(c)) => listed(c, sources).into_iter().map(label).collect(),
        _ => Vec::new(),
    };
    let mut ops = Vec::new();
    if let (Step::Shrink, Some(leader), Some(to)) = (step, leader_on_source, voters.first()) {
        // etcd accepts a transfer only at the leader: through its exposed client URL.
        let known = [sources.as_slice(), own.as_slice()].concat();
        if let Some(via) = client_url_of(leader, &known) {
            ops.push(EtcdOp::MoveLeader {
                to: to.id,
                via,
                name: label(to),
            });
        }
    }
    let v = match step {
                _ if cluster.is_none() && ctx.obs.etcd.is_some() => Verdict::waiting(
                    t,
                    "EtcdUnreachable",
                    "cannot read etcd's member list through the client exposure",
                ),
                _ if hold => Verdict::refused(
                    t,
                    overwrite::BOOTSTRAP_REMOVED,
                    "spec.etcd.bootstrapWithExistingCluster was removed by another writer before Shrink; the step is held (EtcdSpecOverwritten)",
                ),
                _ if scale.waiting.is_some() => Verdict::waiting(
                    t,
                    druid::SCALE_WAIT,
                    scale.waiting.clone().unwrap_or_default(),
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
                Step::Shrink if keep_bootstrap => Verdict::waiting(
                    t,
                    "WaitingForDestinationVoters",
                    "the source members are removed only once the 3 destination members are voters",
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
    out.overwritten = match raised {
        _ if removed => Some(overwrite::bootstrap_removed(ctx, step)),
        Some(have) => Some(overwrite::replicas_raised(ctx, have, replicas)),
        None => None,
    };
    out
}

/// The destination at `Complete`: back to `replicas: 3` and its member-name prefix only;
/// done once etcd-druid rolled that and the exposure is gone.
pub(super) fn destination_complete(ctx: &Ctx<'_>) -> Outcome {
    // One definition with the check that releases the routes once druid rolled.
    let fields = super::release::released_fields(ctx.spec, Step::Complete).unwrap_or_default();
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

/// Why the destination `Etcd` is not created yet for its etcd version
/// (`spec.destination.etcdVersion`): the source cluster's is unknown, or another minor.
fn version_gate(ctx: &Ctx<'_>, dest: &DestinationSpec, t: &'static str) -> Option<Verdict> {
    let want = dest.etcd_version.as_deref()?;
    let Some(have) = ctx
        .obs
        .etcd_cluster
        .as_ref()
        .and_then(|c| c.version.as_deref())
    else {
        return Some(Verdict::waiting(
            t,
            "EtcdUnreachable",
            "cannot read the source cluster's etcd version through the client exposure",
        ));
    };
    super::validate::etcd_version(want, have).map(|p| Verdict::refused(t, p.reason, p.to_string()))
}

/// The exposed client URL of `m` among `known` (by name, or by peer URL before it started).
fn client_url_of(m: &EtcdMember, known: &[MemberUrls]) -> Option<String> {
    known
        .iter()
        .filter(|k| k.name == m.name || k.peer_urls.iter().any(|u| m.peer_urls.contains(u)))
        .find_map(|k| k.client_urls.first().cloned())
}
