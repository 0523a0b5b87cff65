//! Builders shared by the planner tests: specs, and a tiny simulated seed that "applies" a plan
//! the way the API server plus Gardener's controllers would.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test]: a panic is a failure
#![allow(dead_code)]

pub mod apiserver;

use isthmus_controller::crd::{
    DestinationSpec, DnsProvider, DruidApi, EtcdMigrationSpec, EtcdTemplate, MemberUrls, ObjectRef,
    PortScheme, Role, Step, VpnSpec,
};
use isthmus_controller::plan::request::{dnsrecord_needs_request, etcd_needs_request};
use isthmus_controller::plan::{
    self, DnsRecordObs, EtcdAction, EtcdCluster, EtcdFields, EtcdMember, EtcdObs, EtcdOp, Observed,
    Plan, TIMESTAMP,
};

pub const NS: &str = "shoot--foo--bar";

pub fn spec(role: Role, step: Step) -> EtcdMigrationSpec {
    let seed = if role == Role::Source {
        "seed-a"
    } else {
        "seed-b"
    };
    EtcdMigrationSpec {
        role,
        step,
        etcd_name: "etcd-main".into(),
        seed_name: seed.into(),
        internal_domain: "internal.example.com".into(),
        members: 3,
        dns: DnsProvider {
            provider_type: "aws-route53".into(),
            secret_ref: ObjectRef {
                name: "dns".into(),
                namespace: NS.into(),
            },
            zone: None,
        },
        load_balancer: ObjectRef {
            name: "isthmus-proxy".into(),
            namespace: "isthmus-system".into(),
        },
        ports: PortScheme::default(),
        destination: (role == Role::Destination).then(|| DestinationSpec {
            member_name_prefix: "dest".into(),
            source_members: source_members(),
            etcd_template: Some(EtcdTemplate {
                labels: [("app".to_string(), "etcd-statefulset".to_string())].into(),
                annotations: Default::default(),
                spec: serde_json::json!({"labels": {"app": "etcd-statefulset"}}),
            }),
            join_timeout: Some("10m".into()),
            etcd_version: None,
        }),
        vpn: (role == Role::Destination).then(|| VpnSpec {
            dns_name: "vpn-tmp.foo.internal.example.com".into(),
            target: "vpn-seed-server.shoot--foo--bar.svc.cluster.local:9443".into(),
            port: 8443,
            proxy_protocol: Default::default(),
            server: None,
        }),
        druid_api: DruidApi::default(),
        override_default_url: false,
        seed_ingress: None,
        allowed_sources: Vec::new(),
    }
}

pub fn source_members() -> Vec<MemberUrls> {
    (0..3)
        .map(|i| MemberUrls {
            name: format!("etcd-main-{i}"),
            peer_urls: vec![format!(
                "https://etcd-main-{i}.{NS}.seed-a.internal.example.com:{}",
                2380 + i
            )],
            client_urls: vec![format!(
                "https://etcd-main-{i}.{NS}.seed-a.internal.example.com:{}",
                2379 - i
            )],
        })
        .collect()
}

/// Drives `role` through `steps` behind the load balancer address `lb`, each step converged
/// to ready (asserted), calling `after` with the world after each.
pub fn driven(
    role: Role,
    steps: &[Step],
    lb: &str,
    mut after: impl FnMut(&mut Observed),
) -> Observed {
    let mut obs = observed("2026-01-01T00:00:00Z");
    obs.lb_address = Some(lb.into());
    if role == Role::Source {
        obs.etcd = Some(source_etcd());
    }
    for step in steps {
        let p = converge(&spec(role, *step), &mut obs, 10);
        assert!(
            p.status.step_ready,
            "{role:?} {step:?} not ready: {:?}",
            p.status
        );
        after(&mut obs);
    }
    obs
}

pub fn observed(now: &str) -> Observed {
    Observed {
        namespace: NS.into(),
        now: now.into(),
        generation: Some(1),
        etcd_cluster: Some(source_cluster()),
        ..Observed::default()
    }
}

/// etcd's view of the running source cluster: 3 voters, member 0 leads.
pub fn source_cluster() -> EtcdCluster {
    EtcdCluster {
        members: source_members()
            .into_iter()
            .enumerate()
            .map(|(i, m)| EtcdMember {
                id: 100 + i as u64,
                name: m.name,
                peer_urls: m.peer_urls,
                is_learner: false,
            })
            .collect(),
        leader: Some(100),
        version: Some("3.5.27".into()),
    }
}

/// etcd's view once the destination's Shrink removed the source members: 3 destination
/// voters, one of them leads.
pub fn destination_cluster() -> EtcdCluster {
    let spec = spec(Role::Destination, Step::Shrink);
    EtcdCluster {
        members: plan::members(&spec, NS)
            .into_iter()
            .map(|m| EtcdMember {
                id: 200 + u64::from(m.index),
                name: m.member.clone(),
                peer_urls: vec![m.peer_url()],
                is_learner: false,
            })
            .collect(),
        leader: Some(200),
        version: Some("3.5.27".into()),
    }
}

/// A running 3-member source Etcd that gardenlet owns (replicas 3, none of our fields).
pub fn source_etcd() -> EtcdObs {
    EtcdObs {
        generation: 4,
        observed_generation: Some(4),
        ready_replicas: 3,
        members: (0..3).map(|i| format!("etcd-main-{i}")).collect(),
        fields: EtcdFields {
            replicas: Some(3),
            ..EtcdFields::default()
        },
        ready: Some(true),
        all_members_updated: Some(true),
        ..EtcdObs::default()
    }
}

/// How the simulated Gardener controllers behave on this pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Behaviour {
    /// DNS provider finishes records at once.
    pub dns: bool,
    /// Proxy pods pick up the config at once.
    pub proxy: bool,
    /// etcd-druid acts on the Etcd at once (rolls, adds or removes members).
    pub druid: bool,
}

pub const ALL: Behaviour = Behaviour {
    dns: true,
    proxy: true,
    druid: true,
};
pub const NOTHING: Behaviour = Behaviour {
    dns: false,
    proxy: false,
    druid: false,
};

/// Applies `plan` to `obs` like the API server would, then lets the controllers in `b` act.
pub fn apply(obs: &mut Observed, plan: &Plan, b: Behaviour, role: Role) {
    for name in &plan.dns_deletions {
        obs.dns_records.remove(name);
    }
    for d in &plan.dns_records {
        let prev = obs.dns_records.get(&d.object_name).cloned();
        let changed = prev.as_ref().map(|p| p.spec != d.spec).unwrap_or(true);
        let generation = prev.as_ref().map(|p| p.generation).unwrap_or(0) + i64::from(changed);
        let mut rec = prev.clone().unwrap_or(DnsRecordObs {
            spec: d.spec.clone(),
            timestamp: None,
            operation: None,
            generation,
            observed_generation: None,
            last_operation_state: None,
        });
        rec.spec = d.spec.clone();
        rec.generation = generation;
        rec.timestamp = d.annotations.get(TIMESTAMP).cloned();
        // The adapter's reconcile request after the apply.
        if dnsrecord_needs_request(prev.as_ref(), &rec) {
            rec.operation = Some("reconcile".into());
        }
        if b.dns {
            rec.operation = None;
            rec.observed_generation = Some(generation);
            rec.last_operation_state = Some("Succeeded".into());
        }
        obs.dns_records.insert(d.object_name.clone(), rec);
    }
    obs.served_routes = b.proxy.then(|| plan.routes.clone());
    match &plan.etcd {
        EtcdAction::Keep => {}
        EtcdAction::Delete => obs.etcd = None,
        EtcdAction::Release => {
            if let Some(e) = &mut obs.etcd {
                let keep_replicas = e.fields.replicas;
                if e.fields.advertise != Vec::new()
                    || e.fields.skip_client_san_verification.is_some()
                {
                    e.generation += 1;
                }
                e.fields = EtcdFields {
                    replicas: keep_replicas,
                    ..EtcdFields::default()
                };
                request(e);
            }
        }
        EtcdAction::Apply { fields } => {
            let e = obs.etcd.get_or_insert_with(EtcdObs::default);
            let mut merged = fields.clone();
            if merged.replicas.is_none() {
                merged.replicas = e.fields.replicas;
            }
            if merged != e.fields {
                e.generation += 1;
                e.fields = merged;
            }
            request(e);
        }
    }
    // The controller's own etcd operations.
    if let Some(c) = &mut obs.etcd_cluster {
        for op in &plan.etcd_ops {
            match op {
                EtcdOp::MoveLeader { to, .. } => c.leader = Some(*to),
                EtcdOp::Remove { id, .. } => c.members.retain(|m| m.id != *id),
            }
        }
    }
    if b.druid {
        druid(obs, role);
    }
}

/// The adapter's reconcile request after writing the `Etcd`.
fn request(e: &mut EtcdObs) {
    if etcd_needs_request(e) {
        e.operation = Some("reconcile".into());
    }
}

/// etcd-druid (and etcd) acting on the `Etcd` as Gardener deploys it: only on a reconcile
/// request. The destination's members join as learners and are promoted; clearing the
/// bootstrap members removes the source members.
pub fn druid(obs: &mut Observed, role: Role) {
    let Some(e) = &mut obs.etcd else { return };
    if e.operation.is_none() || e.suspended {
        return;
    }
    e.observed_generation = Some(e.generation);
    e.operation = None;
    e.ready = Some(true);
    e.all_members_updated = Some(true);
    let want = e.fields.replicas.unwrap_or(0);
    e.ready_replicas = want;
    if role != Role::Destination {
        return;
    }
    e.members = (0..want).map(|i| format!("dest-etcd-main-{i}")).collect();
    if e.joined_at.is_none() && want >= 2 {
        e.joined_at = Some(obs.now.clone());
    }
    let Some(c) = &mut obs.etcd_cluster else {
        return;
    };
    let spec = spec(Role::Destination, Step::Join);
    for m in plan::members(&spec, NS).into_iter().take(want as usize) {
        if !c.members.iter().any(|x| x.name == m.member) {
            c.members.push(EtcdMember {
                id: 200 + u64::from(m.index),
                name: m.member.clone(),
                peer_urls: vec![m.peer_url()],
                is_learner: false,
            });
        }
    }
    if e.fields.bootstrap_members.is_empty() {
        let sources = source_members();
        c.members
            .retain(|m| !sources.iter().any(|s| s.name == m.name));
    }
}

/// Plans and applies until the status says ready (or `limit` passes), returning the last plan.
pub fn converge(spec: &EtcdMigrationSpec, obs: &mut Observed, limit: usize) -> Plan {
    let mut last = plan::plan(spec, obs);
    for _ in 0..limit {
        last = plan::plan(spec, obs);
        obs.previous = last.status.clone();
        if last.status.step_ready {
            return last;
        }
        apply(obs, &last, ALL, spec.role);
    }
    last
}

pub fn condition<'a>(plan: &'a Plan, type_: &str) -> Option<(&'a str, &'a str)> {
    plan.status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.as_str(), c.reason.as_str()))
}
