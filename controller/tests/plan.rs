//! Planner tables: every step × observed state for both roles, including partial progress,
//! restarts mid-step, refused and accepted aborts, and whole runs against a simulated seed.

mod common;

use common::*;
use isthmus_controller::crd::{DruidApi, Role, Step};
use isthmus_controller::plan::{
    self, EtcdAction, EtcdMember, EtcdOp, Observed, Plan, OPERATION, TIMESTAMP,
};

const T0: &str = "2026-01-01T00:00:00Z";
const T1: &str = "2026-01-01T00:01:00Z";

/// Drives `role` to just after `step` was ready, returning the observed world.
fn world_after(role: Role, steps: &[Step]) -> Observed {
    driven(role, steps, "203.0.113.7", |_| {})
}

fn etcd_kind(p: &Plan) -> &'static str {
    match p.etcd {
        EtcdAction::Keep => "keep",
        EtcdAction::Apply { .. } => "apply",
        EtcdAction::Release => "release",
        EtcdAction::Delete => "delete",
    }
}

struct Case {
    name: &'static str,
    role: Role,
    step: Step,
    world: fn() -> Observed,
    etcd: &'static str,
    records: usize,
    deletions: usize,
    routes: usize,
    condition: (&'static str, &'static str, &'static str),
    ready: bool,
}

fn no_lb() -> Observed {
    let mut o = observed(T0);
    o.etcd = Some(source_etcd());
    o
}
fn lb_only() -> Observed {
    let mut o = no_lb();
    o.lb_address = Some("203.0.113.7".into());
    o
}
/// One Expose pass of the source applied, and what `b` says of the DNS provider, the proxy
/// and druid.
fn src_expose_pass(b: Behaviour) -> Observed {
    let mut o = lb_only();
    let p = plan::plan(&spec(Role::Source, Step::Expose), &o);
    apply(&mut o, &p, b, Role::Source);
    o
}
/// One pass applied but the DNS provider, the proxy and druid did nothing yet.
fn src_applied_nothing_done() -> Observed {
    src_expose_pass(NOTHING)
}
fn src_dns_done() -> Observed {
    src_expose_pass(Behaviour {
        dns: true,
        proxy: false,
        druid: false,
    })
}
fn src_proxy_done() -> Observed {
    src_expose_pass(Behaviour {
        dns: true,
        proxy: true,
        druid: false,
    })
}
fn src_exposed() -> Observed {
    world_after(Role::Source, &[Step::Expose])
}
fn src_no_etcd() -> Observed {
    let mut o = lb_only();
    o.etcd = None;
    o
}
fn dst_empty() -> Observed {
    let mut o = observed(T0);
    o.lb_address = Some("198.51.100.9".into());
    o
}
fn dst_exposed() -> Observed {
    world_after(Role::Destination, &[Step::Expose])
}
fn dst_joined() -> Observed {
    world_after(Role::Destination, &[Step::Expose, Step::Join])
}
fn dst_grown() -> Observed {
    world_after(Role::Destination, &[Step::Expose, Step::Join, Step::Grow])
}
fn dst_shrunk() -> Observed {
    world_after(
        Role::Destination,
        &[Step::Expose, Step::Join, Step::Grow, Step::Shrink],
    )
}
/// Restart mid-Join: the Etcd exists, but a proxy pod restarted with an old config.
fn dst_join_proxy_lagging() -> Observed {
    let mut o = dst_joined();
    o.served_routes = None;
    o
}
/// Shrink applied, druid has removed only one source member so far.
fn dst_shrinking() -> Observed {
    let mut o = dst_grown();
    let p = plan::plan(&spec(Role::Destination, Step::Shrink), &o);
    o.previous = p.status.clone();
    let partly = Behaviour {
        dns: true,
        proxy: true,
        druid: false,
    };
    // First pass: leadership moves to a destination member, the bootstrap stays.
    apply(&mut o, &p, partly, Role::Destination);
    assert!(
        matches!(p.etcd_ops[..], [EtcdOp::MoveLeader { to: 200, .. }]),
        "{:?}",
        p.etcd_ops
    );
    let p = plan::plan(&spec(Role::Destination, Step::Shrink), &o);
    o.previous = p.status.clone();
    apply(&mut o, &p, partly, Role::Destination);
    if let Some(e) = &mut o.etcd {
        e.observed_generation = Some(e.generation);
        e.operation = None;
    }
    if let Some(c) = &mut o.etcd_cluster {
        c.members.retain(|m| m.name != "etcd-main-0");
    }
    o
}

/// Restart mid-Join: etcd joined, but the VPN record was recreated and is not ready yet.
fn dst_joined_vpn_pending() -> Observed {
    let mut o = dst_joined();
    if let Some(r) = o.dns_records.get_mut("isthmus-vpn") {
        r.observed_generation = None;
    }
    o
}
/// The source exposed, after the destination's Shrink removed its members from etcd.
fn src_members_gone() -> Observed {
    let mut o = src_exposed();
    o.etcd_cluster = Some(destination_cluster());
    o
}
/// The same as the source's controller sees it: its members no longer answer, and the
/// destination's are not among its endpoints.
fn src_members_unreachable() -> Observed {
    let mut o = src_exposed();
    o.etcd_cluster = None;
    o
}
fn src_cleaned() -> Observed {
    let mut o = src_members_gone();
    converge(&spec(Role::Source, Step::Complete), &mut o, 10);
    o
}
fn dst_completed() -> Observed {
    let mut o = dst_shrunk();
    converge(&spec(Role::Destination, Step::Complete), &mut o, 10);
    o
}

/// `role`'s first pass at `step` (a release) applied: DNS records deleted and the proxies
/// serving what it planned; etcd-druid has not acted yet, or (`rolled`) has rolled the members.
fn released(mut o: Observed, role: Role, step: Step, rolled: bool) -> Observed {
    let p = plan::plan(&spec(role, step), &o);
    o.previous = p.status.clone();
    let no_druid = Behaviour {
        dns: true,
        proxy: true,
        druid: false,
    };
    apply(&mut o, &p, no_druid, role);
    if rolled {
        druid(&mut o, role);
    }
    o
}
/// The release after the roll, with its plan (no routes) applied and served.
fn unrouted(o: Observed, role: Role, step: Step) -> Observed {
    let mut o = released(o, role, step, true);
    let p = plan::plan(&spec(role, step), &o);
    o.previous = p.status.clone();
    apply(&mut o, &p, ALL, role);
    o
}
/// The source's first cleanup pass applied, the DNS provider has not removed the names yet.
fn src_complete_names_pending() -> Observed {
    let mut o = src_members_gone();
    let p = plan::plan(&spec(Role::Source, Step::Complete), &o);
    o.previous = p.status.clone();
    o
}
fn src_complete_names_gone() -> Observed {
    released(src_members_gone(), Role::Source, Step::Complete, false)
}
fn src_complete_unrouted() -> Observed {
    unrouted(src_members_gone(), Role::Source, Step::Complete)
}
fn src_gone_no_etcd() -> Observed {
    let mut o = src_members_gone();
    o.etcd = None;
    o
}
fn src_abort_rolling() -> Observed {
    released(src_exposed(), Role::Source, Step::Abort, false)
}
fn src_abort_rolled() -> Observed {
    released(src_exposed(), Role::Source, Step::Abort, true)
}
fn src_abort_unrouted() -> Observed {
    unrouted(src_exposed(), Role::Source, Step::Abort)
}
fn dst_complete_rolling() -> Observed {
    released(dst_shrunk(), Role::Destination, Step::Complete, false)
}
fn dst_complete_rolled() -> Observed {
    released(dst_shrunk(), Role::Destination, Step::Complete, true)
}
fn dst_complete_unrouted() -> Observed {
    unrouted(dst_shrunk(), Role::Destination, Step::Complete)
}

#[rustfmt::skip]
fn cases() -> Vec<Case> {
    use Role::*;
    use Step::*;
    vec![
        Case { name: "source expose, no LB address", role: Source, step: Expose, world: no_lb, etcd: "apply", records: 0, deletions: 0, routes: 6, condition: ("SourceEtcdPreparedForPeerJoin", "Progressing", "WaitingForLoadBalancer"), ready: false },
        Case { name: "source expose, LB known", role: Source, step: Expose, world: lb_only, etcd: "apply", records: 3, deletions: 0, routes: 6, condition: ("SourceEtcdPreparedForPeerJoin", "Progressing", "WaitingForDNSRecords"), ready: false },
        Case { name: "source expose, records pending", role: Source, step: Expose, world: src_applied_nothing_done, etcd: "apply", records: 3, deletions: 0, routes: 6, condition: ("SourceEtcdPreparedForPeerJoin", "Progressing", "WaitingForDNSRecords"), ready: false },
        Case { name: "source expose, proxy lagging", role: Source, step: Expose, world: src_dns_done, etcd: "apply", records: 3, deletions: 0, routes: 6, condition: ("SourceEtcdPreparedForPeerJoin", "Progressing", "WaitingForProxyRollout"), ready: false },
        Case { name: "source expose, druid rolling", role: Source, step: Expose, world: src_proxy_done, etcd: "apply", records: 3, deletions: 0, routes: 6, condition: ("SourceEtcdPreparedForPeerJoin", "Progressing", "WaitingForEtcd"), ready: false },
        Case { name: "source expose, done", role: Source, step: Expose, world: src_exposed, etcd: "apply", records: 3, deletions: 0, routes: 6, condition: ("SourceEtcdPreparedForPeerJoin", "True", "EtcdExposedViaPeerURLs"), ready: true },
        Case { name: "source expose, Etcd missing", role: Source, step: Expose, world: src_no_etcd, etcd: "keep", records: 3, deletions: 0, routes: 6, condition: ("SourceEtcdPreparedForPeerJoin", "Progressing", "EtcdNotFound"), ready: false },
        Case { name: "source join keeps exposure", role: Source, step: Join, world: src_exposed, etcd: "apply", records: 3, deletions: 0, routes: 6, condition: ("SourceEtcdPreparedForPeerJoin", "True", "EtcdExposedViaPeerURLs"), ready: true },
        Case { name: "source shrink keeps exposure", role: Source, step: Shrink, world: src_exposed, etcd: "apply", records: 3, deletions: 0, routes: 6, condition: ("SourceEtcdPreparedForPeerJoin", "True", "EtcdExposedViaPeerURLs"), ready: true },
        Case { name: "source grow keeps exposure", role: Source, step: Grow, world: src_exposed, etcd: "apply", records: 3, deletions: 0, routes: 6, condition: ("SourceEtcdPreparedForPeerJoin", "True", "EtcdExposedViaPeerURLs"), ready: true },
        Case { name: "source complete, cleaned up", role: Source, step: Complete, world: src_cleaned, etcd: "keep", records: 0, deletions: 0, routes: 0, condition: ("SourceSeedCleanup", "True", "CleanedUp"), ready: true },
        Case { name: "source abort after completion is refused", role: Source, step: Abort, world: src_cleaned, etcd: "keep", records: 0, deletions: 0, routes: 0, condition: ("LiveMigrationAborted", "False", "AbortRefused"), ready: true },
        Case { name: "destination exposed", role: Destination, step: Expose, world: dst_exposed, etcd: "keep", records: 3, deletions: 0, routes: 6, condition: ("DestinationEtcdExposed", "True", "EtcdExposed"), ready: true },
        Case { name: "restart mid-join, VPN record pending", role: Destination, step: Join, world: dst_joined_vpn_pending, etcd: "apply", records: 4, deletions: 0, routes: 7, condition: ("DestinationEtcdPeersJoined", "Progressing", "WaitingForVPNRecord"), ready: false },
        Case { name: "destination completed", role: Destination, step: Complete, world: dst_completed, etcd: "apply", records: 0, deletions: 0, routes: 0, condition: ("MigrationCompleted", "True", "MigrationCompleted"), ready: true },
        Case { name: "step moved back after Complete re-exposes", role: Destination, step: Shrink, world: dst_completed, etcd: "apply", records: 4, deletions: 0, routes: 7, condition: ("EtcdMigrationComplete", "Progressing", "WaitingForDNSRecords"), ready: false },
        // Issue 24: the source's end waits for no roll; its Etcd is left to gardenlet.
        Case { name: "source complete while etcd lists a source member keeps the exposure", role: Source, step: Complete, world: src_exposed, etcd: "keep", records: 3, deletions: 0, routes: 6, condition: ("SourceSeedCleanup", "Progressing", "WaitingForSourceMembersRemoval"), ready: false },
        Case { name: "source complete starts cleanup", role: Source, step: Complete, world: src_members_gone, etcd: "keep", records: 0, deletions: 3, routes: 6, condition: ("SourceSeedCleanup", "Progressing", "CleanUpInProgress"), ready: false },
        Case { name: "source complete, members unreachable: cleanup", role: Source, step: Complete, world: src_members_unreachable, etcd: "keep", records: 0, deletions: 3, routes: 6, condition: ("SourceSeedCleanup", "Progressing", "CleanUpInProgress"), ready: false },
        Case { name: "source abort starts cleanup", role: Source, step: Abort, world: src_exposed, etcd: "release", records: 0, deletions: 3, routes: 6, condition: ("LiveMigrationAborted", "Progressing", "CleanUpInProgress"), ready: false },
        Case { name: "destination expose", role: Destination, step: Expose, world: dst_empty, etcd: "keep", records: 3, deletions: 0, routes: 6, condition: ("DestinationEtcdExposed", "Progressing", "WaitingForDNSRecords"), ready: false },
        Case { name: "destination join before exposure: no Etcd yet", role: Destination, step: Join, world: dst_empty, etcd: "keep", records: 4, deletions: 0, routes: 7, condition: ("DestinationEtcdPeersJoined", "Progressing", "WaitingForDNSRecords"), ready: false },
        Case { name: "destination join after exposure creates Etcd", role: Destination, step: Join, world: dst_exposed, etcd: "apply", records: 4, deletions: 0, routes: 7, condition: ("DestinationEtcdPeersJoined", "Progressing", "WaitingForEtcd"), ready: false },
        Case { name: "destination joined", role: Destination, step: Join, world: dst_joined, etcd: "apply", records: 4, deletions: 0, routes: 7, condition: ("DestinationEtcdPeersJoined", "True", "PeersJoinedSuccessfully"), ready: true },
        Case { name: "restart mid-join, proxy lagging: keep applying", role: Destination, step: Join, world: dst_join_proxy_lagging, etcd: "apply", records: 4, deletions: 0, routes: 7, condition: ("DestinationEtcdPeersJoined", "Progressing", "WaitingForVPNRecord"), ready: false },
        Case { name: "destination grow asks for 3", role: Destination, step: Grow, world: dst_joined, etcd: "apply", records: 4, deletions: 0, routes: 7, condition: ("EtcdMigrationComplete", "Progressing", "WaitingForEtcd"), ready: false },
        Case { name: "destination grown", role: Destination, step: Grow, world: dst_grown, etcd: "apply", records: 4, deletions: 0, routes: 7, condition: ("EtcdMigrationComplete", "Progressing", "ThirdMemberJoined"), ready: true },
        Case { name: "destination shrinking, one source member gone", role: Destination, step: Shrink, world: dst_shrinking, etcd: "apply", records: 4, deletions: 0, routes: 7, condition: ("EtcdMigrationComplete", "Progressing", "RemovingSourceMembers"), ready: false },
        Case { name: "destination shrunk", role: Destination, step: Shrink, world: dst_shrunk, etcd: "apply", records: 4, deletions: 0, routes: 7, condition: ("EtcdMigrationComplete", "True", "SourceMembersRemoved"), ready: true },
        Case { name: "destination complete removes exposure and VPN record", role: Destination, step: Complete, world: dst_shrunk, etcd: "apply", records: 0, deletions: 4, routes: 6, condition: ("MigrationCompleted", "Progressing", "CleanUpInProgress"), ready: false },
        Case { name: "destination abort before join", role: Destination, step: Abort, world: dst_exposed, etcd: "keep", records: 0, deletions: 3, routes: 0, condition: ("LiveMigrationAborted", "Progressing", "CleanUpInProgress"), ready: false },
        // A released exposure: records now, routes once nothing dials the names (the source
        // at Complete: once the names are gone; the others: once etcd-druid rolled back).
        Case { name: "source complete, names pending: routes kept", role: Source, step: Complete, world: src_complete_names_pending, etcd: "keep", records: 0, deletions: 3, routes: 6, condition: ("SourceSeedCleanup", "Progressing", "CleanUpInProgress"), ready: false },
        Case { name: "source complete, names gone: routes go", role: Source, step: Complete, world: src_complete_names_gone, etcd: "keep", records: 0, deletions: 0, routes: 0, condition: ("SourceSeedCleanup", "Progressing", "CleanUpInProgress"), ready: false },
        Case { name: "source complete, routes served empty", role: Source, step: Complete, world: src_complete_unrouted, etcd: "keep", records: 0, deletions: 0, routes: 0, condition: ("SourceSeedCleanup", "True", "CleanedUp"), ready: true },
        Case { name: "source complete, Etcd gone: routes after the names", role: Source, step: Complete, world: src_gone_no_etcd, etcd: "keep", records: 0, deletions: 3, routes: 6, condition: ("SourceSeedCleanup", "Progressing", "CleanUpInProgress"), ready: false },
        Case { name: "source abort, druid rolling: routes kept", role: Source, step: Abort, world: src_abort_rolling, etcd: "release", records: 0, deletions: 0, routes: 6, condition: ("LiveMigrationAborted", "Progressing", "CleanUpInProgress"), ready: false },
        Case { name: "source abort, druid rolled: routes go", role: Source, step: Abort, world: src_abort_rolled, etcd: "release", records: 0, deletions: 0, routes: 0, condition: ("LiveMigrationAborted", "Progressing", "CleanUpInProgress"), ready: false },
        Case { name: "source abort, routes served empty", role: Source, step: Abort, world: src_abort_unrouted, etcd: "release", records: 0, deletions: 0, routes: 0, condition: ("LiveMigrationAborted", "True", "CleanedUp"), ready: true },
        Case { name: "destination complete, druid rolling: routes kept", role: Destination, step: Complete, world: dst_complete_rolling, etcd: "apply", records: 0, deletions: 0, routes: 6, condition: ("MigrationCompleted", "Progressing", "CleanUpInProgress"), ready: false },
        Case { name: "destination complete, druid rolled: routes go", role: Destination, step: Complete, world: dst_complete_rolled, etcd: "apply", records: 0, deletions: 0, routes: 0, condition: ("MigrationCompleted", "Progressing", "CleanUpInProgress"), ready: false },
        Case { name: "destination complete, routes served empty", role: Destination, step: Complete, world: dst_complete_unrouted, etcd: "apply", records: 0, deletions: 0, routes: 0, condition: ("MigrationCompleted", "True", "MigrationCompleted"), ready: true },
        Case { name: "destination abort after join is refused", role: Destination, step: Abort, world: dst_joined, etcd: "apply", records: 4, deletions: 0, routes: 7, condition: ("LiveMigrationAborted", "False", "AbortRefused"), ready: true },
    ]
}

#[test]
fn every_step_and_observed_state() {
    let mut failures = Vec::new();
    for c in cases() {
        let obs = (c.world)();
        let p = plan::plan(&spec(c.role, c.step), &obs);
        let got = (
            etcd_kind(&p),
            p.dns_records.len(),
            p.dns_deletions.len(),
            p.routes.len(),
            condition(&p, c.condition.0),
            p.status.step_ready,
        );
        let want = (
            c.etcd,
            c.records,
            c.deletions,
            c.routes,
            Some((c.condition.1, c.condition.2)),
            c.ready,
        );
        if got != want {
            failures.push(format!("{}:\n   got {got:?}\n  want {want:?}", c.name));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn planning_is_idempotent() {
    for c in cases() {
        let obs = (c.world)();
        let s = spec(c.role, c.step);
        assert_eq!(plan::plan(&s, &obs), plan::plan(&s, &obs), "{}", c.name);
    }
}

#[test]
fn source_run_expose_to_cleanup() {
    let mut obs = world_after(
        Role::Source,
        &[Step::Expose, Step::Join, Step::Grow, Step::Shrink],
    );
    // The destination's Shrink removed the source members.
    obs.etcd_cluster = Some(destination_cluster());
    let before = obs.etcd.clone();
    let p = converge(&spec(Role::Source, Step::Complete), &mut obs, 10);
    assert!(p.status.step_ready);
    assert_eq!(
        condition(&p, "SourceSeedCleanup"),
        Some(("True", "CleanedUp"))
    );
    assert!(obs.dns_records.is_empty());
    // The source `Etcd` is gardenlet's to delete: no write, no roll asked of etcd-druid.
    assert_eq!(obs.etcd, before, "source Etcd untouched at Complete");
}

/// Issue 24: the source's cleanup removes its exposure in order (names, then routes) without
/// waiting for a roll of members that have left the cluster, and never touches the `Etcd`.
#[test]
fn the_source_cleanup_removes_names_then_routes_and_leaves_the_etcd() {
    let s = spec(Role::Source, Step::Complete);
    let members = plan::routes(&s, NS, false);
    let mut obs = src_members_gone();
    let p = plan::plan(&s, &obs);
    assert_eq!((p.dns_deletions.len(), p.routes.len()), (3, members.len()));
    assert_eq!(p.etcd, EtcdAction::Keep);
    // The DNS provider has not removed the names yet: the routes stay.
    obs.previous = p.status.clone();
    let p = plan::plan(&s, &obs);
    assert_eq!(p.routes, members);
    // Once they are gone, so are the routes; etcd-druid never acted (no request was made).
    let before = obs.etcd.clone();
    apply(&mut obs, &p, ALL, Role::Source);
    let p = plan::plan(&s, &obs);
    assert!(p.routes.is_empty() && p.status.exposed_members.is_empty());
    assert_eq!(obs.etcd, before);
    // The cleanup began: a source member listed again (a stale read) brings nothing back.
    obs.previous = p.status.clone();
    obs.etcd_cluster = Some(source_cluster());
    let p = plan::plan(&s, &obs);
    assert!(p.dns_records.is_empty() && p.routes.is_empty());
}

/// docs/lab.md, "Traps": a restarted etcd member dials its peers at their old exposed URLs, so
/// a released exposure's routes stay until etcd-druid rolled the members back, and the other
/// migrations on the seed render them too (from `status.exposedMembers`) meanwhile.
#[test]
fn released_routes_stay_until_druid_rolled_the_members_back() {
    let message = |p: &Plan, t: &str| {
        let c = p.status.conditions.iter().find(|c| c.type_ == t);
        c.map(|c| c.message.clone()).unwrap_or_default()
    };
    #[rustfmt::skip]
    let runs = [
        (Role::Source, Step::Abort, src_exposed(), "LiveMigrationAborted"),
        (Role::Destination, Step::Complete, dst_shrunk(), "MigrationCompleted"),
    ];
    for (role, step, world, t) in runs {
        let s = spec(role, step);
        let members = plan::routes(&s, NS, false);
        // First pass: the records go and the Etcd is released at once; the routes stay.
        let p = plan::plan(&s, &world);
        assert!(p.dns_records.is_empty() && !p.dns_deletions.is_empty());
        assert!(matches!(
            p.etcd,
            EtcdAction::Release | EtcdAction::Apply { .. }
        ));
        assert_eq!(p.routes, members, "{role:?} {step:?}");
        assert_eq!(plan::wanted_routes(&s, NS, &p.status), members);
        assert!(message(&p, t).contains("DNS provider"), "{p:?}");
        // druid observed the generation carrying the release but still rolls the members.
        let mut obs = released(world, role, step, true);
        if let Some(e) = obs.etcd.as_mut() {
            e.all_members_updated = Some(false);
        }
        let p = plan::plan(&s, &obs);
        assert_eq!(p.routes, members, "{role:?} {step:?}: rolling");
        assert!(message(&p, t).contains("in-cluster URLs"), "{p:?}");
        // Every member runs the plain spec: now the routes go, everywhere.
        if let Some(e) = obs.etcd.as_mut() {
            e.all_members_updated = Some(true);
        }
        let p = plan::plan(&s, &obs);
        assert!(p.routes.is_empty(), "{role:?} {step:?}: rolled");
        assert!(plan::wanted_routes(&s, NS, &p.status).is_empty());
        assert!(!message(&p, t).contains("in-cluster URLs"), "{p:?}");
        let done = converge(&s, &mut obs, 3);
        assert!(
            done.status.step_ready,
            "{role:?} {step:?}: {:?}",
            done.status
        );
    }
}

/// The destination's Shrink removes the source members while the source keeps being planned
/// (found by the lab): the source stays prepared; before Shrink, members down are a rollout.
/// A removed member exits, so etcd-druid reports the source `Etcd` not ready from then on
/// (found when the lab's seeds ran the controller against a druid stand-in that says so).
#[test]
fn source_stays_prepared_while_the_destination_removes_its_members() {
    let mut obs = world_after(Role::Source, &[Step::Expose, Step::Join, Step::Grow]);
    if let Some(e) = obs.etcd.as_mut() {
        e.ready_replicas = 0;
        e.ready = Some(false);
        e.members.clear();
    }
    let p = plan::plan(&spec(Role::Source, Step::Shrink), &obs);
    assert!(p.status.step_ready, "{:?}", p.status);
    assert_eq!(
        condition(&p, "SourceEtcdPreparedForPeerJoin"),
        Some(("True", "EtcdExposedViaPeerURLs"))
    );
    let p = plan::plan(&spec(Role::Source, Step::Grow), &obs);
    assert!(!p.status.step_ready);
    assert_eq!(
        condition(&p, "SourceEtcdPreparedForPeerJoin"),
        Some(("Progressing", "WaitingForEtcd"))
    );
}

#[test]
fn destination_run_and_exposed_urls() {
    let mut obs = world_after(
        Role::Destination,
        &[Step::Expose, Step::Join, Step::Grow, Step::Shrink],
    );
    let e = obs.etcd.clone().unwrap_or_default();
    assert_eq!(
        e.members,
        vec!["dest-etcd-main-0", "dest-etcd-main-1", "dest-etcd-main-2"]
    );
    let p = converge(&spec(Role::Destination, Step::Complete), &mut obs, 10);
    assert_eq!(
        condition(&p, "MigrationCompleted"),
        Some(("True", "MigrationCompleted"))
    );
    let f = obs.etcd.map(|e| e.fields).unwrap_or_default();
    assert_eq!(
        (f.replicas, f.member_name_prefix.as_deref()),
        (Some(3), Some("dest"))
    );
    assert!(f.advertise.is_empty() && f.bootstrap_members.is_empty());
    assert!(obs.dns_records.is_empty());
}

#[test]
fn destination_join_fields() {
    let obs = dst_exposed();
    let p = plan::plan(&spec(Role::Destination, Step::Join), &obs);
    let EtcdAction::Apply { fields } = &p.etcd else {
        panic!("expected apply, got {:?}", p.etcd);
    };
    assert_eq!(fields.replicas, Some(2));
    assert_eq!(fields.member_name_prefix.as_deref(), Some("dest"));
    assert_eq!(fields.bootstrap_members, source_members());
    assert_eq!(fields.skip_client_san_verification, Some(true));
    assert_eq!(
        fields.advertise[1].peer_urls,
        vec!["https://etcd-main-1.shoot--foo--bar.seed-b.internal.example.com:2381"]
    );
    assert_eq!(fields.advertise[1].name, "dest-etcd-main-1");
    let vpn = p
        .dns_records
        .iter()
        .find(|r| r.object_name == "isthmus-vpn");
    assert_eq!(
        vpn.map(|r| r.spec.name.as_str()),
        Some("vpn-tmp.foo.internal.example.com")
    );
}

/// The other seed copies `exposedMembers` into its members' `initial-cluster`, which etcd v3.5
/// accepts only with the peer URLs the cluster holds: with `additionalAdvertisePeerURLs` druid
/// keeps each member's in-cluster URL before the exposed one (seen on the node: "PeerURLs: no
/// match found for existing member" while only the exposed one was reported); with
/// `overrideDefaultURL` the exposed one alone.
#[test]
fn exposed_members_carry_the_peer_urls_etcd_holds() {
    let s = spec(Role::Source, Step::Expose);
    assert_eq!(s.druid_api, DruidApi::AdditionalAdvertisePeerUrls);
    let p = plan::plan(&s, &src_exposed());
    let urls: Vec<&[String]> = p
        .status
        .exposed_members
        .iter()
        .map(|m| m.peer_urls.as_slice())
        .collect();
    assert_eq!(
        urls,
        [0, 1, 2].map(|i| vec![
            format!("https://etcd-main-{i}.etcd-main-peer.shoot--foo--bar.svc:2380"),
            format!(
                "https://etcd-main-{i}.shoot--foo--bar.seed-a.internal.example.com:{}",
                2380 + i
            ),
        ])
    );
    let mut s = s;
    s.druid_api = DruidApi::AdditionalAdvertisedUrls;
    s.override_default_url = true;
    let p = plan::plan(&s, &src_exposed());
    assert_eq!(
        p.status.exposed_members[0].peer_urls,
        ["https://etcd-main-0.shoot--foo--bar.seed-a.internal.example.com:2380"]
    );
}

#[test]
fn source_exposed_members_and_ports() {
    let p = plan::plan(&spec(Role::Source, Step::Expose), &src_exposed());
    let m = &p.status.exposed_members[2];
    assert_eq!(m.name, "etcd-main-2");
    assert_eq!(
        m.peer_urls,
        vec![
            "https://etcd-main-2.etcd-main-peer.shoot--foo--bar.svc:2380",
            "https://etcd-main-2.shoot--foo--bar.seed-a.internal.example.com:2382"
        ]
    );
    assert_eq!(
        m.client_urls,
        vec!["https://etcd-main-2.shoot--foo--bar.seed-a.internal.example.com:2377"]
    );
    let listeners: Vec<&str> = p.routes.iter().map(|r| r.listener.as_str()).collect();
    assert_eq!(
        listeners,
        [
            "peer-2380",
            "client-2379",
            "peer-2381",
            "client-2378",
            "peer-2382",
            "client-2377"
        ]
    );
    assert_eq!(
        p.routes[0].endpoint,
        "etcd-main-0.etcd-main-peer.shoot--foo--bar.svc.cluster.local:2380"
    );
}

#[test]
fn converged_objects_are_not_touched_again() {
    // A fresh timestamp or `operation: reconcile` on every pass would reconcile forever.
    let mut obs = src_exposed();
    obs.now = T1.into();
    let p = plan::plan(&spec(Role::Source, Step::Expose), &obs);
    for r in &p.dns_records {
        assert_eq!(r.annotations.get(OPERATION), None);
        assert_eq!(r.annotations.get(TIMESTAMP).map(String::as_str), Some(T0));
    }
    assert!(matches!(p.etcd, EtcdAction::Apply { .. }));
}

#[test]
fn lb_address_change_rewrites_records() {
    let mut obs = src_exposed();
    obs.now = T1.into();
    obs.lb_address = Some("lb-123.elb.example.com".into());
    let p = plan::plan(&spec(Role::Source, Step::Expose), &obs);
    for r in &p.dns_records {
        assert_eq!(r.spec.record_type, "CNAME");
        assert_eq!(r.annotations.get(TIMESTAMP).map(String::as_str), Some(T1));
        assert_eq!(
            r.annotations.get(OPERATION),
            None,
            "requested after the apply"
        );
    }
    assert_eq!(
        condition(&p, "SourceEtcdPreparedForPeerJoin"),
        Some(("Progressing", "WaitingForDNSRecords"))
    );
}

#[test]
fn restart_with_partial_records_keeps_existing_timestamps() {
    let mut obs = src_applied_nothing_done();
    obs.dns_records
        .retain(|name, _| name == "isthmus-etcd-main-0");
    obs.now = T1.into();
    let p = plan::plan(&spec(Role::Source, Step::Expose), &obs);
    let ts: Vec<&str> = p
        .dns_records
        .iter()
        .filter_map(|r| r.annotations.get(TIMESTAMP).map(String::as_str))
        .collect();
    assert_eq!(ts, [T0, T1, T1]);
}

#[test]
fn condition_transition_time_kept_while_status_unchanged() {
    let mut obs = no_lb();
    let s = spec(Role::Source, Step::Expose);
    let first = plan::plan(&s, &obs);
    obs.previous = first.status.clone();
    obs.now = T1.into();
    obs.lb_address = Some("203.0.113.7".into());
    let second = plan::plan(&s, &obs);
    let c = &second.status.conditions[0];
    assert_eq!(
        (c.last_transition_time.as_str(), c.last_update_time.as_str()),
        (T0, T1)
    );
}

#[test]
fn destination_abort_removes_joined_members_and_etcd() {
    // Join was applied and druid added members, but they never became ready: abort allowed.
    let mut obs = dst_exposed();
    let join = plan::plan(&spec(Role::Destination, Step::Join), &obs);
    apply(&mut obs, &join, NOTHING, Role::Destination);
    // etcd lists the first destination member as a learner that has not started (no name).
    let url = "https://etcd-main-0.shoot--foo--bar.seed-b.internal.example.com:2380";
    if let Some(c) = &mut obs.etcd_cluster {
        c.members.push(EtcdMember {
            id: 200,
            name: String::new(),
            peer_urls: vec![url.into()],
            is_learner: true,
        });
    }
    // druid stops the joining pods first (replicas: 0, the only decrease it allows) ...
    let p = plan::plan(&spec(Role::Destination, Step::Abort), &obs);
    let EtcdAction::Apply { fields, .. } = &p.etcd else {
        panic!("expected replicas: 0, got {:?}", p.etcd)
    };
    assert_eq!((fields.replicas, fields.advertise.len()), (Some(0), 0));
    assert!(p.etcd_ops.is_empty() && p.dns_deletions.len() <= 1);
    apply(&mut obs, &p, ALL, Role::Destination);
    // ... then the learner leaves etcd; nothing is deleted while it is a member.
    let p = plan::plan(&spec(Role::Destination, Step::Abort), &obs);
    assert_eq!(p.etcd, EtcdAction::Keep);
    assert_eq!(p.members_to_remove, vec![url]);
    assert!(
        matches!(p.etcd_ops[..], [EtcdOp::Remove { id: 200, .. }]),
        "{:?}",
        p.etcd_ops
    );
    assert!(
        p.dns_records.len() == 3 && !p.routes.is_empty(),
        "member exposure held"
    );
    apply(&mut obs, &p, ALL, Role::Destination);
    let p = plan::plan(&spec(Role::Destination, Step::Abort), &obs);
    assert_eq!(p.etcd, EtcdAction::Delete);
    // The Etcd goes with its members: nothing left to roll back, so the routes go at once.
    assert!(p.routes.is_empty() && p.status.exposed_members.is_empty());
    let done = converge(&spec(Role::Destination, Step::Abort), &mut obs, 10);
    assert_eq!(
        condition(&done, "LiveMigrationAborted"),
        Some(("True", "CleanedUp"))
    );
    assert!(obs.etcd.is_none() && obs.dns_records.is_empty());
}

#[test]
fn source_abort_leaves_joined_members_to_the_destination_for_the_grace() {
    // A destination learner is in etcd; the destination's etcd-druid may still run its pod.
    let mut obs = src_exposed();
    let url = "https://etcd-main-0.shoot--foo--bar.seed-b.internal.example.com:2380";
    if let Some(c) = &mut obs.etcd_cluster {
        c.members.push(EtcdMember {
            id: 300,
            name: "dest-etcd-main-0".into(),
            peer_urls: vec![url.into()],
            is_learner: true,
        });
    }
    let s = spec(Role::Source, Step::Abort);
    let p = plan::plan(&s, &obs);
    assert_eq!(
        condition(&p, "LiveMigrationAborted"),
        Some(("Progressing", "WaitingForDestination"))
    );
    assert!(p.etcd_ops.is_empty(), "{:?}", p.etcd_ops);
    assert!(
        !p.routes.is_empty(),
        "exposure held for the destination's removal"
    );
    // Still there just inside the grace: still left alone.
    obs.previous = p.status.clone();
    obs.now = "2026-01-01T00:02:00Z".into();
    assert!(plan::plan(&s, &obs).etcd_ops.is_empty());
    // Past it (the destination seed is gone): the source removes the learner itself.
    obs.now = "2026-01-01T00:02:01Z".into();
    let p = plan::plan(&s, &obs);
    assert!(
        matches!(p.etcd_ops[..], [EtcdOp::Remove { id: 300, .. }]),
        "{:?}",
        p.etcd_ops
    );
    assert_eq!(plan::SOURCE_ABORT_GRACE_SECS, 120);
}

#[test]
fn refused_abort_plans_the_previous_step() {
    let mut obs = dst_grown();
    let p = plan::plan(&spec(Role::Destination, Step::Abort), &obs);
    assert_eq!(p.step, Step::Grow);
    let EtcdAction::Apply { fields, .. } = &p.etcd else {
        panic!("expected apply")
    };
    assert_eq!(fields.replicas, Some(3));
    obs.previous = p.status;
    assert_eq!(
        plan::plan(&spec(Role::Destination, Step::Abort), &obs).step,
        Step::Grow
    );
}

#[test]
fn shrink_lists_source_members_still_present() {
    let p = plan::plan(&spec(Role::Destination, Step::Shrink), &dst_shrinking());
    assert_eq!(p.members_to_remove, vec!["etcd-main-1", "etcd-main-2"]);
    let EtcdAction::Apply { fields, .. } = &p.etcd else {
        panic!("expected apply")
    };
    assert!(fields.bootstrap_members.is_empty());
}

#[test]
fn missing_destination_spec_is_refused() {
    let mut s = spec(Role::Destination, Step::Join);
    s.destination = None;
    let p = plan::plan(&s, &dst_empty());
    assert_eq!(
        condition(&p, "DestinationEtcdPeersJoined"),
        Some(("False", "MissingDestinationSpec"))
    );
    assert_eq!(p.etcd, EtcdAction::Keep);
}

#[test]
fn seed_ingress_scheme_uses_the_wildcard_record_and_gateway_ports() {
    let mut s = spec(Role::Source, Step::Expose);
    s.seed_ingress = Some(isthmus_controller::crd::SeedIngress {
        domain: "ingress.seed-a.example.com".into(),
    });
    let mut obs = lb_only();
    let p = plan::plan(&s, &obs);
    // No member records: the seed's `*.ingress.<seed>` record already points at the proxy.
    assert!(p.dns_records.is_empty());
    let peer: Vec<(u16, &str)> = p
        .routes
        .iter()
        .filter(|r| r.listener.starts_with("peer-"))
        .map(|r| (r.port, r.sni.as_str()))
        .collect();
    assert_eq!(
        peer,
        [
            (
                12380,
                "seed-a-etcd-main-0-shoot--foo--bar.ingress.seed-a.example.com"
            ),
            (
                12381,
                "seed-a-etcd-main-1-shoot--foo--bar.ingress.seed-a.example.com"
            ),
            (
                12382,
                "seed-a-etcd-main-2-shoot--foo--bar.ingress.seed-a.example.com"
            ),
        ]
    );
    assert!(p
        .routes
        .iter()
        .filter(|r| r.listener.starts_with("client-"))
        .all(|r| r.port == 12379));
    // etcd keeps advertising 2380+i (the load balancer maps it onto 12380+i).
    assert_eq!(
        p.status.exposed_members[1].peer_urls,
        [
            "https://etcd-main-1.etcd-main-peer.shoot--foo--bar.svc:2380",
            "https://seed-a-etcd-main-1-shoot--foo--bar.ingress.seed-a.example.com:2381"
        ]
    );
    assert_eq!(
        p.status.exposed_members[1].client_urls,
        ["https://seed-a-etcd-main-1-shoot--foo--bar.ingress.seed-a.example.com:2379"]
    );
    // The rendered file is one the proxy loads: SNI tells the members apart on 12379.
    let layout = isthmus_controller::proxy_config::Layout::standard(
        isthmus_controller::crd::PortScheme::default(),
        3,
        8443,
        "0.0.0.0:9901".parse().unwrap(),
    );
    let file = isthmus_controller::proxy_config::render(&layout, &p.routes).unwrap();
    isthmus_config::parse_proxy("proxy.json", &file.text).unwrap_or_else(|e| panic!("{e}"));
    // And the step converges without any DNSRecord.
    let done = converge(&s, &mut obs, 10);
    assert!(done.status.step_ready, "{:?}", done.status);
    assert!(obs.dns_records.is_empty());
}

/// Once the source's abort released its exposure, its controller can no longer read etcd
/// through the exposed client names (their DNS records are gone). That must not bring the
/// exposure back: found when the lab's seeds ran the controller (the records were deleted and
/// re-created every few seconds, `EtcdUnreachable` and `CleanUpInProgress` alternating).
#[test]
fn a_released_source_abort_does_not_need_etcd_again() {
    for (what, mut o) in [
        ("rolling", src_abort_rolling()),
        ("rolled", src_abort_rolled()),
        ("unrouted", src_abort_unrouted()),
    ] {
        o.etcd_cluster = None;
        let p = plan::plan(&spec(Role::Source, Step::Abort), &o);
        assert!(p.dns_records.is_empty(), "{what}: {:?}", p.dns_records);
        assert_eq!(etcd_kind(&p), "release", "{what}");
        let c = condition(&p, "LiveMigrationAborted").unwrap();
        assert_ne!(c.1, "EtcdUnreachable", "{what}: {:?}", p.status);
        if what == "unrouted" {
            assert!(p.status.step_ready, "{what}: {:?}", p.status);
        }
    }
    // Before the release, an unreadable etcd still holds everything.
    let mut o = src_exposed();
    o.etcd_cluster = None;
    let p = plan::plan(&spec(Role::Source, Step::Abort), &o);
    assert_eq!(
        condition(&p, "LiveMigrationAborted"),
        Some(("Progressing", "EtcdUnreachable"))
    );
    assert!(!p.dns_records.is_empty());
}

/// The release's status never reached the next pass (its write refused or timed out, or a
/// watch cache behind it: found in the lab under load, `EtcdUnreachable` right after the
/// release, the records written back and released again). That pass reads the status from
/// before the release while etcd can no longer be read through the names the release deleted;
/// the world shows the release (no DNS record left, the source `Etcd` without isthmus'
/// fields, the destination `Etcd` being deleted), and nothing is exposed again.
#[test]
fn a_release_whose_status_was_lost_is_not_undone() {
    for (what, rolled) in [("rolling", false), ("rolled", true)] {
        let before = src_exposed();
        let mut o = released(before.clone(), Role::Source, Step::Abort, rolled);
        assert!(o.dns_records.is_empty(), "{what}: the release deleted them");
        o.previous = before.previous;
        o.etcd_cluster = None;
        let p = plan::plan(&spec(Role::Source, Step::Abort), &o);
        assert!(p.dns_records.is_empty(), "{what}: {:?}", p.dns_records);
        assert_eq!(
            condition(&p, "LiveMigrationAborted").map(|c| c.1),
            Some("CleanUpInProgress"),
            "{what}: {:?}",
            p.status
        );
    }
    // The destination: its `Etcd` is deleted with the release (druid's finalizer holds it).
    let mut o = dst_exposed();
    let join = plan::plan(&spec(Role::Destination, Step::Join), &o);
    apply(&mut o, &join, NOTHING, Role::Destination);
    let before = o.previous.clone();
    let p = plan::plan(&spec(Role::Destination, Step::Abort), &o);
    assert_eq!(p.etcd, EtcdAction::Delete);
    let mut deleting = o.etcd.clone().unwrap_or_default();
    deleting.deleting = true;
    apply(&mut o, &p, ALL, Role::Destination);
    o.etcd = Some(deleting);
    o.previous = before;
    o.etcd_cluster = None;
    let p = plan::plan(&spec(Role::Destination, Step::Abort), &o);
    assert!(p.dns_records.is_empty(), "{:?}", p.dns_records);
    assert_ne!(
        condition(&p, "LiveMigrationAborted").map(|c| c.1),
        Some("EtcdUnreachable"),
        "{:?}",
        p.status
    );
}
