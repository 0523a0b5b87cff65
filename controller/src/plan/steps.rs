//! Assembling a plan: the exposure (DNS records, proxy routes) each step wants, whether it is
//! ready, and the conditions; the `Etcd` and etcd membership side is in `roles`.

use super::conditions::{self as cond, Verdict};
use super::ctx::{annotations, member_prefix, server_port, Ctx, Exposure, Outcome};
use super::names::{members_named, routes, Member, VPN_RECORD};
use super::{abort, druid, overwrite, release, roles};
use super::{DnsRecordDesired, DnsRecordSpec, EtcdAction, Observed, Plan};
use crate::crd::{EtcdMigrationSpec, EtcdMigrationStatus, Role, Step};
use std::net::IpAddr;

/// Plans one migration. Pure: equal inputs give equal plans. The spec must have passed
/// [`super::validate`]: a refused spec is reported, not planned.
pub fn plan(spec: &EtcdMigrationSpec, obs: &Observed) -> Plan {
    let mut verdicts = Vec::new();
    let members = members_named(
        spec,
        &obs.namespace,
        member_prefix(spec, obs).as_deref(),
        server_port(spec, obs),
    );
    let step = effective_step(spec, obs, &members, &mut verdicts);
    let (wanted_exposure, with_vpn) = exposure_wanted(spec, step);
    // An accepted abort keeps the exposure until the members it added have left etcd: the
    // removal goes through the other seed's exposure, and a learner cut off mid-removal is
    // left behind in the member list.
    // The source's `Complete` likewise while etcd still lists one of its members.
    let hold = match step {
        Step::Abort => abort::abort_holds_exposure(spec, obs, &members),
        Step::Complete if spec.role == Role::Source => {
            !release::source_cleanup_started(&obs.previous)
                && release::members_listed(obs, &members)
        }
        _ => false,
    };
    let exposing = wanted_exposure || hold;
    // A released exposure keeps its member routes until nothing dials the exposed names
    // (`release`): records go now, routes after them.
    let routes_held = if exposing {
        None
    } else {
        release::routes_held(spec, obs, step)
    };

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
    // Not exposing means no VPN (`with_vpn` is false): held routes are the members' only.
    let my_routes = if exposing || routes_held.is_some() {
        routes(spec, &obs.namespace, with_vpn)
    } else {
        Vec::new()
    };
    // The members' routes gate etcd; the VPN route only the VPN (like their DNS records).
    let member_routes = if exposing {
        routes(spec, &obs.namespace, false)
    } else {
        Vec::new()
    };
    let routes_served = obs.served_routes.as_ref() == Some(&my_routes);
    let members_served = obs
        .served_routes
        .as_ref()
        .is_some_and(|s| member_routes.iter().all(|r| s.contains(r)));
    let exposure = exposure_state(spec, obs, &members, &wanted, members_served);
    let vpn_ready = !with_vpn
        || routes_served
            && wanted.iter().any(|w| {
                w.object_name == VPN_RECORD
                    && obs
                        .dns_records
                        .get(VPN_RECORD)
                        .is_some_and(|o| o.spec == w.spec && o.ready())
            });
    let cleaned = dns_deletions.is_empty() && !exposing && routes_held.is_none() && routes_served;

    let ctx = Ctx {
        spec,
        obs,
        members: &members,
        exposure,
        vpn_ready,
        cleaned,
        routes_held,
        exposure_held: hold,
    };
    let out = decide(&ctx, step);
    let verdict = druid::suspended(&ctx, &out).unwrap_or_else(|| out.verdict.clone());
    verdicts.push(verdict);
    verdicts.extend(overwrite::verdict(&ctx, step, &out));
    // The destination's abort stops its members whatever `replicas` a Deploy wrote since.
    let force_etcd = step == Step::Abort && matches!(out.etcd, EtcdAction::Apply { .. });

    // Planning at all means the spec was accepted (`validate`).
    let mut conditions = obs.previous.conditions.clone();
    conditions.retain(|c| c.type_ != cond::SPEC_INVALID);
    for v in &verdicts {
        conditions = cond::merge(&conditions, v, &obs.now);
    }
    Plan {
        step,
        dns_records: wanted,
        dns_deletions,
        routes: my_routes,
        etcd: out.etcd,
        force_etcd,
        members_to_remove: out.members_to_remove,
        etcd_ops: out.ops,
        status: EtcdMigrationStatus {
            observed_generation: obs.generation,
            step: Some(step),
            step_ready: out.ready,
            // Listed while routes are held too: the other migrations' passes render our routes
            // into the shared proxy file from it (`wanted_routes`).
            exposed_members: if exposing || routes_held.is_some() {
                members
                    .iter()
                    .map(|m| m.reported_urls(spec.override_default_url))
                    .collect()
            } else {
                Vec::new()
            },
            conditions,
        },
    }
}

/// What this seed's role wants at `step`: the one place that tells roles and steps apart.
fn decide(ctx: &Ctx<'_>, step: Step) -> Outcome {
    use Step::*;
    match (ctx.spec.role, &ctx.spec.destination, step) {
        (Role::Destination, None, _) => roles::missing_destination(),
        (Role::Source, _, Abort) => abort::abort(ctx, EtcdAction::Release),
        (Role::Source, _, Complete) => roles::source_complete(ctx),
        (Role::Source, _, Expose | Join | Grow | Shrink) => roles::source_prepared(ctx, step),
        (Role::Destination, Some(_), Abort) => abort::abort(ctx, EtcdAction::Delete),
        (Role::Destination, Some(_), Expose) => roles::destination_exposed(ctx),
        (Role::Destination, Some(d), Join | Grow | Shrink) => {
            roles::destination_members(ctx, d, step)
        }
        (Role::Destination, Some(_), Complete) => roles::destination_complete(ctx),
    }
}

/// The proxy routes another migration holds, from its last written status: what the adapter
/// renders for every *other* migration on the seed into the shared ConfigMap. A migration
/// holds its routes exactly while its status lists exposed members.
pub fn wanted_routes(
    spec: &EtcdMigrationSpec,
    namespace: &str,
    previous: &EtcdMigrationStatus,
) -> Vec<super::MemberRoute> {
    if previous.exposed_members.is_empty() {
        return Vec::new();
    }
    let with_vpn = previous.step.is_some_and(|s| exposure_wanted(spec, s).1);
    routes(spec, namespace, with_vpn)
}

/// `(members exposed, temporary VPN exposed)` at `step`.
fn exposure_wanted(spec: &EtcdMigrationSpec, step: Step) -> (bool, bool) {
    let exposing = matches!(step, Step::Expose | Step::Join | Step::Grow | Step::Shrink);
    let with_vpn = spec.role == Role::Destination
        && matches!(step, Step::Join | Step::Grow | Step::Shrink)
        && spec.vpn.is_some();
    (exposing, with_vpn)
}

/// An `Abort` is refused once the migration cannot be undone by removing learners: after
/// `DestinationEtcdPeersJoined` was True, or when etcd lists a joining member as a voter.
/// The previous step stays planned.
fn effective_step(
    spec: &EtcdMigrationSpec,
    obs: &Observed,
    members: &[Member],
    verdicts: &mut Vec<Verdict>,
) -> Step {
    if spec.step != Step::Abort {
        return spec.step;
    }
    let previous = &obs.previous;
    let refusal = if cond::is_true(&previous.conditions, cond::PEERS_JOINED) {
        Some(
            "DestinationEtcdPeersJoined is True: abort is allowed only before the peers joined"
                .to_string(),
        )
    } else {
        abort::voter_blocking_abort(spec, obs, members)
            .map(|m| format!("etcd member {m} is a voter: abort is allowed only while the joining members are learners"))
    };
    let Some(message) = refusal else {
        return Step::Abort;
    };
    verdicts.push(Verdict::refused(cond::ABORTED, "AbortRefused", message));
    match previous.step {
        Some(s) if s != Step::Abort => s,
        _ => Step::Join,
    }
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
    // Under the seed's wildcard ingress record the members need no records of their own.
    let mut names: Vec<(String, String)> = members
        .iter()
        .filter_map(|m| Some((m.record.clone()?, m.dns_name.clone())))
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

fn exposure_state(
    spec: &EtcdMigrationSpec,
    obs: &Observed,
    members: &[Member],
    wanted: &[DnsRecordDesired],
    routes_served: bool,
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
        .filter(|w| {
            members
                .iter()
                .any(|m| m.record.as_ref() == Some(&w.object_name))
        })
        .collect();
    let with_records = members.iter().filter(|m| m.record.is_some()).count();
    let pending: Vec<&str> = member_records
        .iter()
        .filter(|w| {
            !obs.dns_records
                .get(&w.object_name)
                .is_some_and(|o| o.spec == w.spec && o.ready())
        })
        .map(|w| w.object_name.as_str())
        .collect();
    if member_records.len() != with_records || !pending.is_empty() {
        return Some((
            "WaitingForDNSRecords",
            format!("DNSRecords not ready: {}", pending.join(", ")),
        ));
    }
    if !routes_served {
        let msg = "not every proxy pod serves the new routes yet".to_string();
        return Some(("WaitingForProxyRollout", msg));
    }
    None
}
