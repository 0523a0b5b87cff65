//! Assembling a plan: the exposure (DNS records, proxy routes) each step wants, whether it is
//! ready, and the conditions; the `Etcd` side is in `roles`.

use super::conditions::{self as cond, Verdict};
use super::names::{members, routes, Member, VPN_RECORD};
use super::roles;
use super::{DnsRecordDesired, DnsRecordSpec, Observed, Plan, OPERATION, TIMESTAMP};
use crate::crd::{EtcdMigrationSpec, EtcdMigrationStatus, Role, Step};
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
        Role::Source => roles::source(&ctx, step),
        Role::Destination => roles::destination(&ctx, step),
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
pub(super) type Exposure = Option<(&'static str, String)>;

pub(super) struct Ctx<'a> {
    pub(super) spec: &'a EtcdMigrationSpec,
    pub(super) obs: &'a Observed,
    pub(super) members: &'a [Member],
    pub(super) exposure: Exposure,
    /// The temporary VPN's record is ready (or not wanted); it does not gate etcd.
    pub(super) vpn_ready: bool,
    pub(super) cleaned: bool,
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
pub(super) fn annotations(
    unchanged: bool,
    old: Option<String>,
    now: &str,
) -> BTreeMap<String, String> {
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
