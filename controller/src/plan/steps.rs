//! The step logic: what each role wants at each step, and when that step is reached.

use super::conditions::{self as cond, Verdict};
use super::names::{members, routes, Member, VPN_RECORD};
use super::{
    DnsRecordDesired, DnsRecordSpec, EtcdAction, EtcdFields, Observed, Plan, OPERATION, TIMESTAMP,
};
use crate::crd::{EtcdMigrationSpec, EtcdMigrationStatus, MemberUrls, Role, Step};
use std::collections::BTreeMap;
use std::net::IpAddr;

/// Plans one migration. Pure: equal inputs give equal plans.
pub fn plan(spec: &EtcdMigrationSpec, obs: &Observed) -> Plan {
    let mut verdicts = Vec::new();
    let step = effective_step(spec, &obs.previous, &mut verdicts);
    let members = members(spec, &obs.namespace);
    let (exposing, with_vpn) = exposure_wanted(spec, step);

    let wanted = if exposing {
        desired_records(spec, obs, &members, with_vpn)
    } else {
        Vec::new()
    };
    let dns_deletions: Vec<String> = obs
        .dns_records
        .keys()
        .filter(|name| !wanted.iter().any(|w| &w.object_name == *name))
        .cloned()
        .collect();
    let exposure = exposure_state(spec, obs, &members, &wanted);
    let vpn_ready = !with_vpn
        || wanted.iter().any(|w| {
            w.object_name == VPN_RECORD
                && obs
                    .dns_records
                    .get(VPN_RECORD)
                    .is_some_and(|o| o.spec == w.spec && o.ready())
        });
    let cleaned = dns_deletions.is_empty() && obs.proxy_rolled_out;

    let ctx = Ctx {
        spec,
        obs,
        members: &members,
        exposure,
        vpn_ready,
        cleaned,
    };
    let (etcd, members_to_remove, verdict, ready) = match spec.role {
        Role::Source => source(&ctx, step),
        Role::Destination => destination(&ctx, step),
    };
    verdicts.push(verdict);

    let mut conditions = obs.previous.conditions.clone();
    for v in &verdicts {
        conditions = cond::merge(&conditions, v, &obs.now);
    }
    Plan {
        step,
        dns_records: wanted,
        dns_deletions,
        routes: if exposing {
            routes(spec, &obs.namespace, with_vpn)
        } else {
            Vec::new()
        },
        etcd,
        members_to_remove,
        status: EtcdMigrationStatus {
            observed_generation: obs.generation,
            step: Some(step),
            step_ready: ready,
            exposed_members: if exposing {
                members.iter().map(Member::urls).collect()
            } else {
                Vec::new()
            },
            conditions,
        },
    }
}

/// The proxy routes a migration wants, from its spec and last status alone: what the
/// adapter renders for *every* migration on the seed into the shared ConfigMap.
pub fn wanted_routes(
    spec: &EtcdMigrationSpec,
    namespace: &str,
    previous: &EtcdMigrationStatus,
) -> Vec<super::MemberRoute> {
    let step = effective_step(spec, previous, &mut Vec::new());
    match exposure_wanted(spec, step) {
        (true, with_vpn) => routes(spec, namespace, with_vpn),
        (false, _) => Vec::new(),
    }
}

/// `(members exposed, temporary VPN exposed)` at `step`.
fn exposure_wanted(spec: &EtcdMigrationSpec, step: Step) -> (bool, bool) {
    let exposing = matches!(step, Step::Expose | Step::Join | Step::Grow | Step::Shrink);
    let with_vpn = spec.role == Role::Destination
        && matches!(step, Step::Join | Step::Grow | Step::Shrink)
        && spec.vpn.is_some();
    (exposing, with_vpn)
}

/// An `Abort` after the peers joined is refused: the previous step stays planned.
fn effective_step(
    spec: &EtcdMigrationSpec,
    previous: &EtcdMigrationStatus,
    verdicts: &mut Vec<Verdict>,
) -> Step {
    if spec.step != Step::Abort || !cond::is_true(&previous.conditions, cond::PEERS_JOINED) {
        return spec.step;
    }
    verdicts.push(Verdict::refused(
        cond::ABORTED,
        "AbortRefused",
        "DestinationEtcdPeersJoined is True: abort is allowed only before the peers joined",
    ));
    match previous.step {
        Some(s) if s != Step::Abort => s,
        _ => Step::Join,
    }
}

/// Why exposure is not ready yet, or `None` when it is.
type Exposure = Option<(&'static str, String)>;

struct Ctx<'a> {
    spec: &'a EtcdMigrationSpec,
    obs: &'a Observed,
    members: &'a [Member],
    exposure: Exposure,
    /// The temporary VPN's record is ready (or not wanted); it does not gate etcd.
    vpn_ready: bool,
    cleaned: bool,
}

fn desired_records(
    spec: &EtcdMigrationSpec,
    obs: &Observed,
    members: &[Member],
    with_vpn: bool,
) -> Vec<DnsRecordDesired> {
    let Some(address) = &obs.lb_address else {
        return Vec::new();
    };
    let record_type = match address.parse::<IpAddr>() {
        Ok(IpAddr::V4(_)) => "A",
        Ok(IpAddr::V6(_)) => "AAAA",
        Err(_) => "CNAME",
    };
    let mut names: Vec<(String, String)> = members
        .iter()
        .map(|m| (m.record_name.clone(), m.dns_name.clone()))
        .collect();
    if let (true, Some(vpn)) = (with_vpn, &spec.vpn) {
        names.push((VPN_RECORD.to_string(), vpn.dns_name.clone()));
    }
    names
        .into_iter()
        .map(|(object_name, dns_name)| {
            let spec = DnsRecordSpec {
                provider_type: spec.dns.provider_type.clone(),
                secret_ref: spec.dns.secret_ref.clone(),
                zone: spec.dns.zone.clone(),
                name: dns_name,
                record_type: record_type.to_string(),
                values: vec![address.clone()],
            };
            let existing = obs.dns_records.get(&object_name);
            let unchanged = existing.is_some_and(|e| e.spec == spec);
            let annotations = annotations(
                unchanged,
                existing.and_then(|e| e.timestamp.clone()),
                &obs.now,
            );
            DnsRecordDesired {
                object_name,
                spec,
                annotations,
            }
        })
        .collect()
}

/// `operation: reconcile` + a new timestamp on a change; only the old timestamp otherwise.
fn annotations(unchanged: bool, old: Option<String>, now: &str) -> BTreeMap<String, String> {
    let mut a = BTreeMap::new();
    if unchanged {
        if let Some(ts) = old {
            a.insert(TIMESTAMP.to_string(), ts);
        }
    } else {
        a.insert(OPERATION.to_string(), "reconcile".to_string());
        a.insert(TIMESTAMP.to_string(), now.to_string());
    }
    a
}

fn exposure_state(
    spec: &EtcdMigrationSpec,
    obs: &Observed,
    members: &[Member],
    wanted: &[DnsRecordDesired],
) -> Exposure {
    if obs.lb_address.is_none() {
        let lb = &spec.load_balancer;
        let msg = format!(
            "Service {}/{} has no load-balancer address",
            lb.namespace, lb.name
        );
        return Some(("WaitingForLoadBalancer", msg));
    }
    // Only the members' records gate etcd; the VPN record is checked on its own.
    let member_records: Vec<&DnsRecordDesired> = wanted
        .iter()
        .filter(|w| members.iter().any(|m| m.record_name == w.object_name))
        .collect();
    let pending: Vec<&str> = member_records
        .iter()
        .filter(|w| {
            !obs.dns_records
                .get(&w.object_name)
                .is_some_and(|o| o.spec == w.spec && o.ready())
        })
        .map(|w| w.object_name.as_str())
        .collect();
    if member_records.len() != members.len() || !pending.is_empty() {
        return Some((
            "WaitingForDNSRecords",
            format!("DNSRecords not ready: {}", pending.join(", ")),
        ));
    }
    if !obs.proxy_rolled_out {
        let msg = "not every proxy pod serves the new routes yet".to_string();
        return Some(("WaitingForProxyRollout", msg));
    }
    None
}

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

type Outcome = (EtcdAction, Vec<String>, Verdict, bool);

fn source(ctx: &Ctx<'_>, step: Step) -> Outcome {
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
            let verdict = match &ctx.exposure {
                Some((reason, msg)) => Verdict::waiting(t, reason, msg.clone()),
                None if etcd_ready(ctx, &fields, i32::from(ctx.spec.members)) => Verdict::done(
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

fn destination(ctx: &Ctx<'_>, step: Step) -> Outcome {
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
