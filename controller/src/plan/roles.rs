//! What each role wants of the `Etcd` at each step, and when the step is reached.

use super::conditions::{self as cond, Verdict};
use super::names::Member;
use super::steps::{annotations, Ctx};
use super::{EtcdAction, EtcdFields};
use crate::crd::{MemberUrls, Step};

/// Whether the observed fields carry what `want` asks (options `None` are not ours).
fn covers(have: &EtcdFields, want: &EtcdFields) -> bool {
    (want.replicas.is_none() || have.replicas == want.replicas)
        && (want.member_name_prefix.is_none() || have.member_name_prefix == want.member_name_prefix)
        && (want.skip_client_san_verification.is_none()
            || have.skip_client_san_verification == want.skip_client_san_verification)
        && have.bootstrap_members == want.bootstrap_members
        && have.advertise == want.advertise
}

fn apply(ctx: &Ctx<'_>, fields: EtcdFields) -> EtcdAction {
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

/// The etcd side is done: druid acted on our fields and `replicas` members are ready.
fn etcd_ready(ctx: &Ctx<'_>, fields: &EtcdFields, replicas: i32) -> bool {
    ctx.obs
        .etcd
        .as_ref()
        .is_some_and(|e| e.synced() && covers(&e.fields, fields) && e.ready_replicas >= replicas)
}

fn peer_urls(members: &[Member]) -> Vec<MemberUrls> {
    members
        .iter()
        .map(|m| MemberUrls {
            name: m.member.clone(),
            peer_urls: vec![m.peer_url()],
            client_urls: Vec::new(),
        })
        .collect()
}

pub(super) type Outcome = (EtcdAction, Vec<String>, Verdict, bool);

pub(super) fn source(ctx: &Ctx<'_>, step: Step) -> Outcome {
    match step {
        Step::Complete | Step::Abort => {
            let etcd = match ctx.obs.etcd {
                Some(_) => EtcdAction::Release,
                None => EtcdAction::Keep,
            };
            let kind = if step == Step::Abort {
                cond::ABORTED
            } else {
                cond::SOURCE_CLEANUP
            };
            (etcd, Vec::new(), cleanup_verdict(ctx, kind), ctx.cleaned)
        }
        _ => {
            let t = cond::SOURCE_PREPARED;
            if ctx.obs.etcd.is_none() {
                let msg = format!("Etcd {} not found", ctx.spec.etcd_name);
                return (
                    EtcdAction::Keep,
                    Vec::new(),
                    Verdict::waiting(t, "EtcdNotFound", msg),
                    false,
                );
            }
            let fields = EtcdFields {
                advertise: peer_urls(ctx.members),
                skip_client_san_verification: Some(true),
                ..EtcdFields::default()
            };
            // At Shrink the destination's etcd-druid removes the source members one by one:
            // fewer ready source replicas is the migration working, not a rollout to wait for
            // (found by the lab, which keeps planning the source while it shrinks).
            let replicas = if step == Step::Shrink {
                0
            } else {
                i32::from(ctx.spec.members)
            };
            let verdict = match &ctx.exposure {
                Some((reason, msg)) => Verdict::waiting(t, reason, msg.clone()),
                None if etcd_ready(ctx, &fields, replicas) => Verdict::done(
                    t,
                    "EtcdExposedViaPeerURLs",
                    "Source etcd members exposed and ready for peer connections",
                ),
                None => Verdict::waiting(t, "WaitingForEtcd", "etcd-druid is rolling the members"),
            };
            let ready = verdict.status == "True";
            (apply(ctx, fields), Vec::new(), verdict, ready)
        }
    }
}

fn cleanup_verdict(ctx: &Ctx<'_>, kind: &'static str) -> Verdict {
    if ctx.cleaned {
        Verdict::done(kind, "CleanedUp", "exposure removed")
    } else {
        Verdict::waiting(
            kind,
            "CleanUpInProgress",
            "removing DNS records and proxy routes",
        )
    }
}

pub(super) fn destination(ctx: &Ctx<'_>, step: Step) -> Outcome {
    let Some(dest) = &ctx.spec.destination else {
        let v = Verdict::refused(
            cond::PEERS_JOINED,
            "MissingDestinationSpec",
            "spec.destination is required",
        );
        return (EtcdAction::Keep, Vec::new(), v, false);
    };
    let observed_members = ctx
        .obs
        .etcd
        .as_ref()
        .map(|e| e.members.clone())
        .unwrap_or_default();
    let present = |names: Vec<String>| -> Vec<String> {
        names
            .into_iter()
            .filter(|n| observed_members.contains(n))
            .collect()
    };
    let own: Vec<String> = ctx.members.iter().map(|m| m.member.clone()).collect();
    let source_names: Vec<String> = dest.source_members.iter().map(|m| m.name.clone()).collect();
    let joining = |replicas: i32, bootstrap: bool| EtcdFields {
        replicas: Some(replicas),
        member_name_prefix: Some(dest.member_name_prefix.clone()),
        bootstrap_members: if bootstrap {
            dest.source_members.clone()
        } else {
            Vec::new()
        },
        advertise: peer_urls(ctx.members),
        skip_client_san_verification: Some(true),
    };
    match step {
        Step::Expose => {
            let t = cond::DESTINATION_EXPOSED;
            let v = match &ctx.exposure {
                Some((reason, msg)) => Verdict::waiting(t, reason, msg.clone()),
                None => Verdict::done(t, "EtcdExposed", "destination members exposed"),
            };
            let ready = v.status == "True";
            (EtcdAction::Keep, Vec::new(), v, ready)
        }
        Step::Join | Step::Grow | Step::Shrink => {
            let (replicas, bootstrap, t) = match step {
                Step::Join => (2, true, cond::PEERS_JOINED),
                Step::Grow => (3, true, cond::ETCD_COMPLETE),
                _ => (3, false, cond::ETCD_COMPLETE),
            };
            let fields = joining(replicas, bootstrap);
            // Members join only through the exposure: never create the Etcd before it works.
            if ctx.obs.etcd.is_none() {
                if let Some((reason, msg)) = &ctx.exposure {
                    let v = Verdict::waiting(t, reason, msg.clone());
                    return (EtcdAction::Keep, Vec::new(), v, false);
                }
            }
            let joined = own
                .iter()
                .take(replicas as usize)
                .all(|m| observed_members.contains(m));
            let etcd_done = etcd_ready(ctx, &fields, replicas) && joined;
            let leftovers = if step == Step::Shrink {
                present(source_names)
            } else {
                Vec::new()
            };
            let v = match step {
                _ if etcd_done && !ctx.vpn_ready => Verdict::waiting(
                    t,
                    "WaitingForVPNRecord",
                    "the temporary VPN's DNSRecord is not ready",
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
                    "the cluster is 3 destination members",
                ),
                Step::Shrink if etcd_done => Verdict::waiting(
                    t,
                    "RemovingSourceMembers",
                    format!("still members: {}", leftovers.join(", ")),
                ),
                _ => match &ctx.exposure {
                    // Say what blocks first: without exposure etcd cannot make progress.
                    Some((reason, msg)) => Verdict::waiting(t, reason, msg.clone()),
                    None => Verdict::waiting(
                        t,
                        "WaitingForEtcd",
                        format!("waiting for {replicas} ready destination members"),
                    ),
                },
            };
            let ready = etcd_done && leftovers.is_empty() && ctx.vpn_ready;
            (apply(ctx, fields), leftovers, v, ready)
        }
        Step::Complete => {
            let fields = EtcdFields {
                replicas: Some(3),
                member_name_prefix: Some(dest.member_name_prefix.clone()),
                ..EtcdFields::default()
            };
            let t = cond::MIGRATION_COMPLETED;
            let ready = ctx.cleaned && etcd_ready(ctx, &fields, 3);
            let v = if ready {
                Verdict::done(
                    t,
                    "MigrationCompleted",
                    "exposure and temporary VPN record removed",
                )
            } else {
                Verdict::waiting(
                    t,
                    "CleanUpInProgress",
                    "removing exposure and migration-only etcd fields",
                )
            };
            (apply(ctx, fields), Vec::new(), v, ready)
        }
        Step::Abort => {
            let etcd = if ctx.obs.etcd.is_some() {
                EtcdAction::Delete
            } else {
                EtcdAction::Keep
            };
            let ready = ctx.cleaned && ctx.obs.etcd.is_none();
            let v = if ready {
                Verdict::done(
                    cond::ABORTED,
                    "CleanedUp",
                    "destination etcd and exposure removed",
                )
            } else {
                Verdict::waiting(
                    cond::ABORTED,
                    "CleanUpInProgress",
                    "removing destination etcd and exposure",
                )
            };
            (etcd, present(own), v, ready)
        }
    }
}
