//! The planner against etcd-druid's API as it is now (v0.38.1, and etcd-druid#1426 where
//! named): a suspended spec reconciliation is said, not waited on silently.

mod common;

use common::*;
use isthmus_controller::crd::{Role, Step};
use isthmus_controller::plan::{self, EtcdAction, Observed};

const T0: &str = "2026-01-01T00:00:00Z";

/// The source at `Expose` with its records and routes served, druid not acted yet.
fn src_exposure_ready() -> Observed {
    let mut o = observed(T0);
    o.lb_address = Some("203.0.113.7".into());
    o.etcd = Some(source_etcd());
    let s = spec(Role::Source, Step::Expose);
    let p = plan::plan(&s, &o);
    let only_exposure = Behaviour {
        dns: true,
        proxy: true,
        druid: false,
    };
    apply(&mut o, &p, only_exposure, Role::Source);
    o.previous = p.status;
    o
}

#[test]
fn a_suspended_spec_reconcile_is_a_condition_with_its_reason() {
    let s = spec(Role::Source, Step::Expose);
    let mut o = src_exposure_ready();
    if let Some(e) = o.etcd.as_mut() {
        e.suspended = true;
    }
    // The request stays pending: druid acts on no spec while the annotation is there.
    for _ in 0..3 {
        let p = plan::plan(&s, &o);
        o.previous = p.status.clone();
        apply(&mut o, &p, ALL, Role::Source);
        assert_eq!(
            condition(&p, "SourceEtcdPreparedForPeerJoin"),
            Some(("Progressing", "EtcdSpecReconcileSuspended")),
            "{:?}",
            p.status.conditions
        );
        assert!(!p.status.step_ready);
        let c = p
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == "SourceEtcdPreparedForPeerJoin");
        assert!(c.is_some_and(|c| c
            .message
            .contains("druid.gardener.cloud/suspend-etcd-spec-reconcile")));
    }
    assert_eq!(
        o.etcd.as_ref().and_then(|e| e.operation.as_deref()),
        Some("reconcile")
    );
    // The operator lifts it: druid takes the pending request and the step is reached.
    if let Some(e) = o.etcd.as_mut() {
        e.suspended = false;
    }
    let p = converge(&s, &mut o, 5);
    assert!(p.status.step_ready, "{:?}", p.status);
    assert_eq!(
        condition(&p, "SourceEtcdPreparedForPeerJoin"),
        Some(("True", "EtcdExposedViaPeerURLs"))
    );
}

#[test]
fn a_suspension_druid_owes_nothing_under_changes_nothing() {
    // Reached, in sync, nothing to change: the annotation blocks no work of this step.
    let s = spec(Role::Source, Step::Expose);
    let mut o = src_exposure_ready();
    let p = converge(&s, &mut o, 5);
    assert!(p.status.step_ready);
    if let Some(e) = o.etcd.as_mut() {
        e.suspended = true;
    }
    let p = plan::plan(&s, &o);
    assert!(p.status.step_ready, "{:?}", p.status);
    assert!(matches!(p.etcd, EtcdAction::Apply { .. }));
    assert_eq!(
        condition(&p, "SourceEtcdPreparedForPeerJoin"),
        Some(("True", "EtcdExposedViaPeerURLs"))
    );
}

/// Gardener's waiter (gardener v1.149.3 `pkg/component/etcd/etcd/waiter.go`,
/// `CheckEtcdObject`) needs `AllMembersUpdated` present and `True`: absent or `Unknown` is not
/// ready, except at `replicas: 0`, where it checks neither the condition nor `ready`.
#[test]
fn all_members_updated_must_be_present_and_true() {
    use isthmus_controller::crd::DruidApi;
    use isthmus_controller::gardener::etcd_observe;
    use serde_json::json;
    let obj = |replicas: i64, condition: Option<&str>| {
        let conditions: Vec<_> = condition
            .map(|s| json!({"type": "AllMembersUpdated", "status": s}))
            .into_iter()
            .collect();
        json!({
            "metadata": {"generation": 2},
            "spec": {"replicas": replicas},
            "status": {"observedGeneration": 2, "ready": replicas > 0, "conditions": conditions},
        })
    };
    let ready = |v: serde_json::Value| etcd_observe(&v, DruidApi::default()).gardener_ready();
    assert!(ready(obj(3, Some("True"))));
    assert!(!ready(obj(3, None)), "absent");
    assert!(!ready(obj(3, Some("Unknown"))), "Unknown");
    assert!(!ready(obj(3, Some("False"))));
    assert!(ready(obj(0, None)), "replicas 0: no condition checks");
    let mut deleting = obj(3, Some("True"));
    deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    assert!(!ready(deleting), "a deletion timestamp");
}

#[test]
fn a_step_waits_for_all_members_updated() {
    let s = spec(Role::Source, Step::Expose);
    let mut o = src_exposure_ready();
    let p = converge(&s, &mut o, 5);
    assert!(p.status.step_ready);
    // A druid that has not (yet) written the condition: the step is not reached.
    if let Some(e) = o.etcd.as_mut() {
        e.all_members_updated = None;
    }
    let p = plan::plan(&s, &o);
    assert!(!p.status.step_ready, "{:?}", p.status);
    assert_eq!(
        condition(&p, "SourceEtcdPreparedForPeerJoin"),
        Some(("Progressing", "WaitingForEtcd"))
    );
}

/// Drives `role` through `steps`, each to ready.
fn world_after(role: Role, steps: &[Step]) -> Observed {
    driven(role, steps, "198.51.100.9", |_| {})
}

fn applied(p: &plan::Plan) -> isthmus_controller::plan::EtcdFields {
    match &p.etcd {
        EtcdAction::Apply { fields, .. } => fields.clone(),
        other => panic!("expected an apply, got {other:?}"),
    }
}

fn running(o: &mut Observed, op: Option<&str>) {
    if let Some(e) = o.etcd.as_mut() {
        e.scale_operation = op.map(String::from);
    }
}

/// etcd-druid#1426: while druid reports a scale-in or a bootstrap members removal, Grow's
/// scale-out waits (its CEL rules would refuse it); the same direction goes on.
#[test]
fn grow_waits_for_an_opposite_scale_operation() {
    let s = spec(Role::Destination, Step::Grow);
    for op in ["ScalingIn", "BootstrapMembersRemoval"] {
        let mut o = world_after(Role::Destination, &[Step::Expose, Step::Join]);
        running(&mut o, Some(op));
        let p = plan::plan(&s, &o);
        let f = applied(&p);
        assert_eq!(f.replicas, Some(2), "{op}: replicas held");
        assert_eq!(
            f.advertise.len(),
            2,
            "{op}: member 2 not advertised (index < replicas)"
        );
        assert_eq!(
            condition(&p, "EtcdMigrationComplete"),
            Some(("Progressing", "WaitingForScaleOperation")),
            "{op}"
        );
        assert!(!p.status.step_ready);
        // druid finished it: the scale-out goes on.
        running(&mut o, None);
        let p = converge(&s, &mut o, 10);
        assert!(p.status.step_ready, "{op}: {:?}", p.status);
    }
    // A join still recorded as a scale-out: the same direction.
    let mut o = world_after(Role::Destination, &[Step::Expose, Step::Join]);
    running(&mut o, Some("ScalingOut"));
    assert_eq!(applied(&plan::plan(&s, &o)).replicas, Some(3));
}

/// Shrink's removal of the bootstrap members waits for a scale-out druid reports running
/// (the third member's), and the step is reached without druid's join record, which
/// etcd-druid#1426 prunes as it removes the source members.
#[test]
fn shrink_waits_for_the_scale_out_and_needs_no_join_record() {
    let s = spec(Role::Destination, Step::Shrink);
    let mut o = world_after(Role::Destination, &[Step::Expose, Step::Join, Step::Grow]);
    running(&mut o, Some("ScalingOut"));
    let mut held = false;
    for _ in 0..4 {
        let p = plan::plan(&s, &o);
        o.previous = p.status.clone();
        let f = applied(&p);
        assert!(
            !f.bootstrap_members.is_empty(),
            "bootstrap kept: {:?}",
            p.status
        );
        held |= condition(&p, "EtcdMigrationComplete")
            == Some(("Progressing", "WaitingForScaleOperation"));
        apply(&mut o, &p, ALL, Role::Destination);
        running(&mut o, Some("ScalingOut"));
    }
    assert!(held, "the wait is said");
    running(&mut o, None);
    if let Some(e) = o.etcd.as_mut() {
        e.joined_at = None;
    }
    let p = converge(&s, &mut o, 10);
    assert!(p.status.step_ready, "{:?}", p.status);
    assert!(applied(&p).bootstrap_members.is_empty());
}

/// A step is not reached while druid reports its own scale operation running.
#[test]
fn a_running_scale_operation_is_not_ready() {
    let s = spec(Role::Destination, Step::Grow);
    let mut o = world_after(Role::Destination, &[Step::Expose, Step::Join, Step::Grow]);
    running(&mut o, Some("ScalingOut"));
    let p = plan::plan(&s, &o);
    assert!(!p.status.step_ready);
    assert_eq!(applied(&p).replicas, Some(3));
}

/// Scaling to 0 (the destination's abort) is never held: transitions to 0 are outside
/// etcd-druid#1426's rules.
#[test]
fn abort_scales_to_zero_whatever_runs() {
    let s = spec(Role::Destination, Step::Abort);
    let mut o = world_after(Role::Destination, &[Step::Expose]);
    let p = converge(&spec(Role::Destination, Step::Join), &mut o, 1);
    o.previous = p.status;
    // The join in progress: learners listed, druid scaling out.
    if let Some(c) = o.etcd_cluster.as_mut() {
        for m in c.members.iter_mut().filter(|m| m.name.starts_with("dest-")) {
            m.is_learner = true;
        }
    }
    running(&mut o, Some("ScalingOut"));
    let p = plan::plan(&s, &o);
    assert_eq!(applied(&p).replicas, Some(0), "{:?}", p.status);
}

/// etcd-druid joins only a source cluster of the same etcd minor version
/// (`docs/usage/bootstrapping-with-existing-cluster.md`): the destination `Etcd` is created
/// only once etcd reports the source's version and it matches `spec.destination.etcdVersion`.
#[test]
fn the_destination_etcd_is_created_only_for_the_same_minor_version() {
    let mut s = spec(Role::Destination, Step::Join);
    if let Some(d) = s.destination.as_mut() {
        d.etcd_version = Some("3.5".into());
    }
    let exposed = || {
        let mut o = world_after(Role::Destination, &[Step::Expose]);
        o.previous.conditions.clear();
        o
    };
    // The source cluster is read before the `Etcd` exists, source members first.
    let o = exposed();
    let needs = plan::needs(&s, &o);
    assert_eq!(
        needs.etcd_endpoints.first(),
        source_members()[0].client_urls.first()
    );
    let undeclared = spec(Role::Destination, Step::Join);
    assert!(plan::needs(&undeclared, &o).etcd_endpoints.is_empty());

    let with_version = |v: Option<&str>| {
        let mut o = exposed();
        match v {
            Some(v) => {
                if let Some(c) = o.etcd_cluster.as_mut() {
                    c.version = Some(v.into());
                }
            }
            None => o.etcd_cluster = None,
        }
        plan::plan(&s, &o)
    };
    let p = with_version(Some("3.4.34"));
    assert_eq!(p.etcd, EtcdAction::Keep);
    assert_eq!(
        condition(&p, "DestinationEtcdPeersJoined"),
        Some(("False", "EtcdVersionMismatch"))
    );
    let msg = &p
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "DestinationEtcdPeersJoined")
        .map(|c| c.message.clone())
        .unwrap_or_default();
    assert!(
        msg.contains("3.4.34") && msg.contains("spec.destination.etcdVersion"),
        "{msg}"
    );
    let p = with_version(None);
    assert_eq!(p.etcd, EtcdAction::Keep);
    assert_eq!(
        condition(&p, "DestinationEtcdPeersJoined"),
        Some(("Progressing", "EtcdUnreachable"))
    );
    let p = with_version(Some("3.5.27"));
    assert_eq!(applied(&p).replicas, Some(2), "created");
    // Undeclared: not checked.
    let mut o = exposed();
    o.etcd_cluster = None;
    assert_eq!(applied(&plan::plan(&undeclared, &o)).replicas, Some(2));
}

#[test]
fn a_malformed_etcd_version_is_refused() {
    let mut s = spec(Role::Destination, Step::Join);
    for (v, ok) in [
        ("3.5", true),
        ("3.5.27", true),
        ("3", false),
        ("3.x", false),
        ("3.5.", false),
    ] {
        if let Some(d) = s.destination.as_mut() {
            d.etcd_version = Some(v.into());
        }
        let problems = plan::validate(&s, NS, &plan::validate::SeedRules::default());
        let refused = problems
            .iter()
            .any(|p| p.field == "spec.destination.etcdVersion" && p.reason == "InvalidVersion");
        assert_eq!(refused, !ok, "{v}: {problems:?}");
    }
    use isthmus_controller::plan::validate::etcd_version;
    assert!(etcd_version("3.5", "3.5.27").is_none());
    assert!(etcd_version("3.5", "v3.5.0").is_none());
    assert!(etcd_version("3.5", "3.6.1").is_some());
    assert!(etcd_version("3.5", "garbage").is_some());
}
