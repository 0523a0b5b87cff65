//! The planner after gardenlet's `Deploy` overwrote the `Etcd` (pure; the real `Deploy` against
//! the real API server is `apiserver_gardenlet.rs`): what is written again, what cannot be and
//! is said, and that no step that could lose quorum goes on (`plan::overwrite`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use isthmus_controller::crd::{Role, Step};
use isthmus_controller::plan::{self, EtcdAction, EtcdApplied, EtcdFields, EtcdOp, Observed, Plan};

/// Drives `role` through `steps`, each reached, as isthmus' applies would leave the `Etcd`
/// (its `managedFields` name isthmus once it applied).
fn reached(role: Role, steps: &[Step]) -> Observed {
    driven(role, steps, "203.0.113.7", |obs| {
        if let Some(e) = obs.etcd.as_mut() {
            e.applied_by_isthmus = true;
        }
    })
}

/// What gardenlet v1.149.3's `Deploy` does to the `Etcd`: a new `spec.etcd` without
/// isthmus' fields, its `replicas`, its reconcile request; `drop_bootstrap` as a gardenlet on
/// etcd-druid api v0.38 or later.
fn deploy(obs: &mut Observed, replicas: i32, drop_bootstrap: bool) {
    let e = obs.etcd.as_mut().expect("an Etcd");
    e.fields = EtcdFields {
        replicas: Some(replicas),
        member_name_prefix: e.fields.member_name_prefix.clone(),
        bootstrap_members: match drop_bootstrap {
            true => Vec::new(),
            false => e.fields.bootstrap_members.clone(),
        },
        advertise: Vec::new(),
        skip_client_san_verification: None,
    };
    e.generation += 1;
    e.operation = Some("reconcile".into());
}

fn fields(p: &Plan) -> &EtcdFields {
    match &p.etcd {
        EtcdAction::Apply { fields } => fields,
        other => panic!("not an apply: {other:?}"),
    }
}

fn message<'a>(p: &'a Plan, t: &str) -> &'a str {
    p.status
        .conditions
        .iter()
        .find(|c| c.type_ == t)
        .map_or("", |c| c.message.as_str())
}

/// The plan says `EtcdSpecOverwritten=True/Reasserted`; its message.
fn reasserted(p: &Plan) -> &str {
    assert_eq!(
        condition(p, "EtcdSpecOverwritten"),
        Some(("True", "Reasserted")),
        "{:?}",
        p.status
    );
    message(p, "EtcdSpecOverwritten")
}

#[test]
fn the_source_writes_its_fields_again_and_says_so_until_reached_again() {
    let s = spec(Role::Source, Step::Expose);
    let mut obs = reached(Role::Source, &[Step::Expose]);
    let quiet = plan::plan(&s, &obs);
    assert_eq!(
        condition(&quiet, "EtcdSpecOverwritten"),
        None,
        "never happened"
    );

    deploy(&mut obs, 3, false);
    let p = plan::plan(&s, &obs);
    let f = fields(&p);
    assert_eq!(f.advertise.len(), 3);
    assert_eq!(f.skip_client_san_verification, Some(true));
    assert!(!p.status.step_ready, "not reached with the fields gone");
    let msg = reasserted(&p);
    assert!(
        msg.contains("spec.etcd.additionalAdvertisePeerURLs")
            && msg.contains("spec.etcd.peerUrlTls.skipClientSANVerification")
            && !msg.contains("spec.replicas")
            && msg.contains("the orchestrator must carry"),
        "{msg}"
    );
    // gardenlet's request is pending: isthmus adds none of its own beside it.
    obs.previous = p.status.clone();
    apply(&mut obs, &p, NOTHING, Role::Source);
    assert_eq!(
        obs.etcd.as_ref().unwrap().operation.as_deref(),
        Some("reconcile")
    );
    // Kept while druid has not reconciled the fields back, then resolved.
    let p = plan::plan(&s, &obs);
    assert_eq!(
        condition(&p, "EtcdSpecOverwritten"),
        Some(("True", "Reasserted"))
    );
    let p = converge(&s, &mut obs, 5);
    assert!(p.status.step_ready);
    assert_eq!(
        condition(&p, "EtcdSpecOverwritten"),
        Some(("False", "FieldsInPlace"))
    );
}

/// What the controller remembers of its last apply at `step` to the `Etcd` as it is now.
fn remembered(obs: &Observed, s: &isthmus_controller::crd::EtcdMigrationSpec) -> EtcdApplied {
    EtcdApplied {
        step: s.step,
        fields: fields(&plan::plan(s, obs)).clone(),
        generation: obs.etcd.as_ref().unwrap().generation,
        seen_without: None,
    }
}

/// The finding rests on what the controller applied, not on the status it read: that read
/// (the watch cache) may not show the step the previous pass reached yet, and fields isthmus
/// had on the `Etcd` before the step was reached are lost all the same.
#[test]
fn a_wipe_is_said_whatever_status_the_pass_read() {
    let s = spec(Role::Source, Step::Expose);
    let mut obs = reached(Role::Source, &[Step::Expose]);
    obs.etcd_applied = Some(remembered(&obs, &s));
    // A stale read: the status of a pass before the step was reached.
    obs.previous.step_ready = false;
    deploy(&mut obs, 3, false);
    let p = plan::plan(&s, &obs);
    assert_eq!(fields(&p).advertise.len(), 3, "written again");
    let msg = reasserted(&p);
    assert!(
        msg.contains("spec.etcd.additionalAdvertisePeerURLs")
            && msg.contains("spec.etcd.peerUrlTls.skipClientSANVerification"),
        "{msg}"
    );

    // A wiped version the pass did not read (another pass wrote over it between its read and
    // its apply; the watch saw it): said by the next pass, though the fields are back.
    let mut obs = reached(Role::Source, &[Step::Expose]);
    let mut applied = remembered(&obs, &s);
    let mut wiped = obs.clone();
    deploy(&mut wiped, 3, false);
    applied.seen_without = Some(wiped.etcd.unwrap().fields);
    obs.etcd_applied = Some(applied);
    let p = plan::plan(&s, &obs);
    assert!(reasserted(&p).contains("additionalAdvertisePeerURLs"));
}

/// Only fields isthmus had there count: an apply at another step, or one without a field
/// (not written yet), makes no finding of its absence — even with the last status showing
/// this step reached.
#[test]
fn a_field_isthmus_never_had_there_is_no_finding() {
    let s = spec(Role::Source, Step::Expose);
    let mut obs = reached(Role::Source, &[Step::Expose]);
    let mut at_other_step = remembered(&obs, &s);
    at_other_step.step = Step::Join;
    let mut without = remembered(&obs, &s);
    without.fields.advertise.clear();
    without.fields.skip_client_san_verification = None;
    deploy(&mut obs, 3, false);
    for applied in [at_other_step, without] {
        obs.etcd_applied = Some(applied);
        let p = plan::plan(&s, &obs);
        assert_eq!(fields(&p).advertise.len(), 3, "written all the same");
        assert_eq!(condition(&p, "EtcdSpecOverwritten"), None, "{:?}", p.status);
    }
}

#[test]
fn a_raised_replicas_is_kept_and_the_other_fields_go_back() {
    let s = spec(Role::Destination, Step::Join);
    let mut obs = reached(Role::Destination, &[Step::Expose, Step::Join]);
    deploy(&mut obs, 3, false);
    let p = plan::plan(&s, &obs);
    // druid's CEL rule refuses 3 -> 2: the apply carries 3 (a conflict-free shared value), so
    // the rest of it goes through, and all three members are advertised.
    let f = fields(&p);
    assert_eq!(f.replicas, Some(3));
    assert_eq!(f.advertise.len(), 3);
    assert_eq!(f.bootstrap_members, source_members());
    assert_eq!(
        condition(&p, "EtcdSpecOverwritten"),
        Some(("True", "ReplicasRaised"))
    );
    assert!(
        message(&p, "EtcdSpecOverwritten").contains("spec.replicas is 3 where this step wants 2")
    );
    // The join itself stands: reached again once druid made the third member too.
    let p = converge(&s, &mut obs, 10);
    assert!(p.status.step_ready, "{:?}", p.status);
    assert_eq!(
        condition(&p, "DestinationEtcdPeersJoined"),
        Some(("True", "PeersJoinedSuccessfully"))
    );
    assert_eq!(
        condition(&p, "EtcdSpecOverwritten"),
        Some(("True", "ReplicasRaised"))
    );
    // Grow wants what is there.
    let p = converge(&spec(Role::Destination, Step::Grow), &mut obs, 10);
    assert!(p.status.step_ready);
    assert_eq!(
        condition(&p, "EtcdSpecOverwritten"),
        Some(("False", "FieldsInPlace"))
    );
}

#[test]
fn a_removed_bootstrap_is_never_written_and_holds_join_and_grow() {
    let mut obs = reached(Role::Destination, &[Step::Expose, Step::Join]);
    deploy(&mut obs, 2, true);
    for step in [Step::Join, Step::Grow] {
        let s = spec(Role::Destination, step);
        let p = plan::plan(&s, &obs);
        let f = fields(&p);
        assert!(f.bootstrap_members.is_empty(), "{step:?}: druid refuses it");
        assert_eq!(f.replicas, Some(2), "{step:?}: no membership change");
        assert_eq!(f.advertise.len(), 2, "{step:?}: the rest goes back");
        assert!(p.etcd_ops.is_empty());
        assert!(!p.status.step_ready);
        assert_eq!(
            condition(&p, "EtcdSpecOverwritten"),
            Some(("True", "BootstrapRemoved"))
        );
        assert!(message(&p, "EtcdSpecOverwritten").contains("this step is held"));
        let t = if step == Step::Join {
            "DestinationEtcdPeersJoined"
        } else {
            "EtcdMigrationComplete"
        };
        assert_eq!(condition(&p, t), Some(("False", "BootstrapRemoved")));
        obs.previous = p.status.clone();
        apply(&mut obs, &p, NOTHING, Role::Destination);
    }
    // Shrink goes on: leadership to a destination voter first, nothing held.
    let s = spec(Role::Destination, Step::Shrink);
    let p = plan::plan(&s, &obs);
    assert_eq!(fields(&p).replicas, Some(3));
    assert!(
        matches!(p.etcd_ops[..], [EtcdOp::MoveLeader { .. }]),
        "{:?}",
        p.etcd_ops
    );
    assert!(message(&p, "EtcdSpecOverwritten").contains("Shrink goes on"));
}

#[test]
fn an_etcd_someone_else_created_without_the_bootstrap_is_still_refused() {
    let s = spec(Role::Destination, Step::Join);
    let mut obs = reached(Role::Destination, &[Step::Expose, Step::Join]);
    deploy(&mut obs, 2, true);
    if let Some(e) = obs.etcd.as_mut() {
        e.applied_by_isthmus = false;
        e.joined_at = None;
    }
    let p = plan::plan(&s, &obs);
    assert_eq!(p.etcd, EtcdAction::Keep);
    assert_eq!(
        condition(&p, "DestinationEtcdPeersJoined"),
        Some(("False", "EtcdCreatedWithoutBootstrap"))
    );
}

#[test]
fn shrink_clears_the_bootstrap_only_with_three_destination_voters() {
    let mut obs = reached(Role::Destination, &[Step::Expose, Step::Join, Step::Grow]);
    // The third destination member is still a learner; leadership is not on a source member.
    if let Some(c) = obs.etcd_cluster.as_mut() {
        c.leader = Some(200);
        for m in c
            .members
            .iter_mut()
            .filter(|m| m.name == "dest-etcd-main-2")
        {
            m.is_learner = true;
        }
    }
    let p = plan::plan(&spec(Role::Destination, Step::Shrink), &obs);
    assert_eq!(fields(&p).bootstrap_members, source_members());
    assert_eq!(
        condition(&p, "EtcdMigrationComplete"),
        Some(("Progressing", "WaitingForDestinationVoters"))
    );
    assert_eq!(condition(&p, "EtcdSpecOverwritten"), None);
}

#[test]
fn a_leader_back_on_a_source_member_after_shrink_cleared_is_no_finding() {
    let s = spec(Role::Destination, Step::Shrink);
    let mut obs = reached(Role::Destination, &[Step::Expose, Step::Join, Step::Grow]);
    for _ in 0..3 {
        let p = plan::plan(&s, &obs);
        obs.previous = p.status.clone();
        apply(&mut obs, &p, NOTHING, Role::Destination);
    }
    assert!(obs
        .etcd
        .as_ref()
        .unwrap()
        .fields
        .bootstrap_members
        .is_empty());
    if let Some(c) = obs.etcd_cluster.as_mut() {
        c.leader = Some(100);
    }
    let p = plan::plan(&s, &obs);
    assert_eq!(condition(&p, "EtcdSpecOverwritten"), None, "{:?}", p.status);
}

#[test]
fn only_the_destination_abort_is_forced() {
    let mut obs = reached(Role::Destination, &[Step::Expose]);
    let p = plan::plan(&spec(Role::Destination, Step::Join), &obs);
    apply(&mut obs, &p, NOTHING, Role::Destination);
    assert!(matches!(p.etcd, EtcdAction::Apply { .. }) && !p.force_etcd);
    // A learner joined; gardenlet's Deploy raises replicas.
    let mut learner = destination_cluster().members[0].clone();
    learner.is_learner = true;
    obs.etcd_cluster.as_mut().unwrap().members.push(learner);
    deploy(&mut obs, 3, false);
    let p = plan::plan(&spec(Role::Destination, Step::Abort), &obs);
    assert_eq!(fields(&p).replicas, Some(0));
    assert!(p.force_etcd, "replicas 0 over the Deploy's 3");
    let src = reached(Role::Source, &[Step::Expose]);
    let p = plan::plan(&spec(Role::Source, Step::Abort), &src);
    assert_eq!(p.etcd, EtcdAction::Release);
    assert!(!p.force_etcd);
}
