//! The live-migration lab end to end: a real 3-member etcd 3.4 cluster moves from a source
//! seed to a destination seed (network namespaces, one isthmus proxy process each, a
//! userspace link with configurable RTT between them) while a kube-apiserver-like client
//! writes and reads; every scenario must end with 0 failed requests and every acknowledged
//! write present with its value.
//!
//! The default run is the demo's (`scripts/demo.sh`): the migration driven by the production
//! controller, each seed a real kube-apiserver with the pinned CRDs and deploy/'s RBAC, two
//! `isthmus controller` processes, and stand-ins (etcd-druid, DNS provider, kubelet,
//! gardenlet) acting only through the API; so are the control plane's faults (a controller
//! killed mid-step, a seed API server restarted mid-step, an invalid `EtcdMigration` beside
//! the real one) and the abort. The other scenarios call the planner as a library.
//!
//! Each scenario is one run, and a run is the slow part of the full tier, so a scenario that
//! would only repeat another's assertions at another setting is merged into it (RTT 0 ms is
//! the proxy restart's RTT; the default run asserts what the planner's default run did).
//! Labs run one at a time (nextest's `lab` group; a lock under `cargo test`): each is
//! a whole etcd cluster, and the CI machine is small. Needs root, iproute2 and etcd;
//! `.ci/run` installs them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use isthmus_lab::member::MemberRef;
use isthmus_lab::side::Side;
use isthmus_lab::{Options, Report, Scenario};
use std::sync::Mutex;
use std::time::Duration;

static ONE_LAB_AT_A_TIME: Mutex<()> = Mutex::new(());

fn lab(name: &str, rtt_ms: u64, scenario: Scenario) -> Report {
    lab_with(name, rtt_ms, scenario, scenario.needs_controllers())
}

/// A run; with `controllers`, each seed runs its own kube-apiserver and two `isthmus
/// controller` replicas that drive the migration (`isthmus_lab::control`).
fn lab_with(name: &str, rtt_ms: u64, scenario: Scenario, controllers: bool) -> Report {
    isthmus_testkit::tier::needs_root("network namespaces: the lab's seeds");
    let _one = ONE_LAB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    isthmus_testkit::tier::needs_tools(
        &["etcd", "ip"],
        "run .ci/run or `apt-get install etcd-server iproute2`",
    );
    let dir = std::env::temp_dir().join(format!("isthmus-lab-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let opts = Options {
        rtt: Duration::from_millis(rtt_ms),
        scenario,
        proxy_bin: env!("CARGO_BIN_EXE_isthmus").into(),
        kube_apiserver_bin: std::env::var_os("ISTHMUS_KUBE_APISERVER")
            .map(Into::into)
            .unwrap_or_else(isthmus_lab::api::default_binary),
        dir: dir.clone(),
        interval: Duration::from_millis(25),
        hold: Duration::from_secs(2),
        pre_vote: true,
        controllers,
    };
    // The lab's future is one deep state machine; unoptimised, it overflowed a test thread's
    // 2 MiB stack (the abort scenario, once the controller-driven code was added). It runs on
    // the heap, polled from a thread with room.
    let run_opts = opts.clone();
    let result = std::thread::Builder::new()
        .name(format!("lab-{name}"))
        .stack_size(64 << 20)
        .spawn(move || {
            let rt = tokio::runtime::Runtime::new().unwrap();
            rt.block_on(Box::pin(isthmus_lab::run(&run_opts)))
        })
        .unwrap()
        .join()
        .unwrap();
    let report =
        result.unwrap_or_else(|e| panic!("lab {name} failed (logs in {}): {e}", dir.display()));
    std::fs::write(
        dir.join("report.json"),
        serde_json::to_string_pretty(&report).unwrap(),
    )
    .unwrap();
    std::fs::write(
        dir.join("timeline.svg"),
        isthmus_lab::svg::timeline(&report),
    )
    .unwrap();
    eprintln!("{name}:\n{}", report.summary());
    // etcd preallocates its WAL: a run leaves ~700 MiB. Keep it only when asked (a failed run
    // panics above and keeps everything for its logs).
    if std::env::var_os("ISTHMUS_KEEP_SCRATCH").is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    report
}

fn assert_clean(r: &Report, name: &str) {
    assert!(r.fault.is_none(), "{name}: {:?}", r.fault);
    assert_clean_but_the_fault(r, name);
}

/// [`assert_clean`], except for the requests that ran into the scenario's fault (counted in
/// `r.fault`; the report's violations already leave them out).
fn assert_clean_but_the_fault(r: &Report, name: &str) {
    let (api_excused, etcd_excused) = r
        .fault
        .as_ref()
        .map_or((0, 0), |f| (f.api_failed, f.etcd_failed));
    // The shoot's API, served by real kube-apiservers on the migrating etcd, with a webhook
    // (failurePolicy Fail) that kube-apiserver calls through the tunnel.
    assert_eq!(r.control_plane.kube_apiserver, "v1.34.4");
    assert_eq!(
        r.api.failed - api_excused,
        0,
        "{name}: failed API requests\n{}",
        r.summary()
    );
    assert_eq!(
        r.objects.missing,
        0,
        "{name}: lost objects\n{}",
        r.summary()
    );
    assert!(
        r.objects.written > 10,
        "{name}: too few API writes\n{}",
        r.summary()
    );
    assert_eq!(
        r.api.watch.missing,
        0,
        "{name}: watch gaps\n{}",
        r.summary()
    );
    assert_eq!(r.api.watch.out_of_order, 0, "{name}\n{}", r.summary());
    assert_eq!(r.api.stale_reads, 0, "{name}\n{}", r.summary());
    // failurePolicy Fail: every acknowledged write was admitted by a webhook call through the
    // tunnel (retried attempts may add calls).
    assert!(
        r.api.webhook.calls >= r.objects.written,
        "{name}: writes without a webhook call\n{}",
        r.summary()
    );
    assert_eq!(r.api.webhook.failed, 0, "{name}\n{}", r.summary());
    assert_eq!(
        r.etcd.failed - etcd_excused,
        0,
        "{name}: failed etcd requests\n{}",
        r.summary()
    );
    assert_eq!(r.writes.missing, 0, "{name}: lost writes\n{}", r.summary());
    assert!(
        r.writes.acknowledged > 50,
        "{name}: too few writes\n{}",
        r.summary()
    );
    assert!(r.violations.is_empty(), "{name}: {:?}", r.violations);
}

/// Which rolling updates of peer URLs a side's members went through.
#[derive(Clone, Copy)]
enum Rolls {
    /// To the exposed URLs (the source's first step).
    Out,
    /// Back to the in-cluster URLs (the destination's `Complete`).
    Back,
    /// Out, then back (the source of an abort).
    OutAndBack,
}

/// The first step and the way back, as etcd-druid's rolling update does them: each of `side`'s
/// 3 members gets a `member update` and a restart per roll, one at a time, the leader last and
/// after handing its leadership over; a member still there at the end advertises its
/// in-cluster URL alone.
fn assert_rolled(r: &Report, side: Side, rolls: Rolls) {
    let members: Vec<MemberRef> = (0..3).map(|index| MemberRef { side, index }).collect();
    let rolled: Vec<_> = r
        .members
        .rolled
        .iter()
        .filter(|x| members.iter().any(|m| m.name() == x.member))
        .collect();
    type Url = fn(&MemberRef) -> String;
    let out: (&str, Url) = ("out", MemberRef::peer_url);
    let back: (&str, Url) = ("back", MemberRef::in_cluster_url);
    let rounds = match rolls {
        Rolls::Out => vec![out],
        Rolls::Back => vec![back],
        Rolls::OutAndBack => vec![out, back],
    };
    assert_eq!(rolled.len(), 3 * rounds.len(), "{side:?}: {rolled:#?}");
    for (round, chunk) in rounds.iter().zip(rolled.chunks(3)) {
        let (what, url) = round;
        let mut names: Vec<&str> = chunk.iter().map(|x| x.member.as_str()).collect();
        names.sort();
        let mut want: Vec<String> = members.iter().map(MemberRef::name).collect();
        want.sort();
        assert_eq!(names, want, "{side:?} {what}: every member once");
        for x in chunk {
            let m = members.iter().find(|m| m.name() == x.member).unwrap();
            assert_eq!(x.peer_urls, [url(m)], "{side:?} {what}: {}", x.member);
        }
        // One restart at a time, the leader last (after the two others), handing over first.
        assert!(
            chunk[2].leader_moved.is_some() && chunk[..2].iter().all(|x| x.leader_moved.is_none()),
            "{side:?} {what}: {chunk:#?}"
        );
        assert!(chunk
            .windows(2)
            .all(|w| w[0].t_ms + w[0].took_ms <= w[1].t_ms));
    }
    if !r.members.r#final.is_empty()
        && members
            .iter()
            .any(|m| r.members.r#final.contains(&m.name()))
    {
        for m in &members {
            assert_eq!(
                r.members.final_peer_urls.get(&m.name()),
                Some(&vec![m.in_cluster_url()]),
                "{} ends on its in-cluster URL",
                m.name()
            );
        }
    }
}

fn assert_moved(r: &Report) {
    // The source members advertised their in-cluster URLs until `Expose` rolled them to the
    // exposed ones, before any destination member was added.
    assert_rolled(r, Side::Source, Rolls::Out);
    assert_rolled(r, Side::Destination, Rolls::Back);
    let first_learner = r
        .events
        .iter()
        .find(|e| e.what.contains("added dest-etcd-main-0 as learner"))
        .unwrap()
        .t_ms;
    assert!(r.members.rolled[..3]
        .iter()
        .all(|x| x.t_ms + x.took_ms < first_learner));
    let mut fin = r.members.r#final.clone();
    fin.sort();
    assert_eq!(
        fin,
        ["dest-etcd-main-0", "dest-etcd-main-1", "dest-etcd-main-2"]
    );
    let mut init = r.members.initial.clone();
    init.sort();
    assert_eq!(init, ["etcd-main-0", "etcd-main-1", "etcd-main-2"]);
    // The membership went through 5 and 6 voters on the way.
    let sizes: Vec<usize> = r.members.timeline.iter().map(|m| m.members.len()).collect();
    assert!(sizes.contains(&5) && sizes.contains(&6), "{sizes:?}");
    // The shoot's API name moved: requests reached both kube-apiservers.
    assert!(
        r.api.via_source > 0 && r.api.via_destination > 0,
        "{:?}",
        r.api
    );
    for p in ["source", "join", "five", "grow", "shrink", "destination"] {
        let phase = r.phases.iter().find(|x| x.name == p).unwrap();
        assert!(
            phase.requests > 0 || p == "shrink",
            "no requests in phase {p}"
        );
    }
}

/// The demo's run (`--controllers`, RTT 50 ms). It holds the assertions of the planner-driven
/// default run, of `rtt_0_ms` (the same at 0 ms; that RTT is now the proxy restart's) and of
/// `controllers_drive_the_migration` (the same run), which were one run each.
#[test]
fn default_run_moves_etcd_with_zero_failures_and_no_lost_write() {
    let r = lab_with("default", 50, Scenario::Migrate, true);
    assert_clean(&r, "default");
    assert_moved(&r);
    // The shoot's webhook was called through the tunnel the whole time, through the source
    // server before the DNS move and the destination server after it, without a failure.
    assert!(
        r.webhook.requests > 0 && r.webhook.failed == 0,
        "webhook through the tunnel\n{}",
        r.summary()
    );
    assert!(
        r.webhook.via_source > 0 && r.webhook.via_destination > 0,
        "{}",
        r.summary()
    );
    let events: Vec<&str> = r.events.iter().map(|e| e.what.as_str()).collect();
    for step in [
        "temporary agent joined",
        "moved to the destination server",
        "drained",
    ] {
        assert!(
            events.iter().any(|e| e.contains(step)),
            "no tunnel step {step:?}: {events:?}"
        );
    }
    // The controllers drove it: their conditions, objects and Leases.
    assert_controlled(&r, "default");
    let c = r.control.as_ref().unwrap();
    assert!(
        c.leases
            .iter()
            .any(|e| e.what.starts_with("source: Lease held by controller-src-"))
            && c.leases.iter().any(|e| e
                .what
                .starts_with("destination: Lease held by controller-dst-")),
        "{:?}",
        c.leases
    );
}

#[test]
fn rtt_150_ms() {
    let r = lab("rtt150", 150, Scenario::Migrate);
    assert_clean(&r, "rtt150");
    assert_moved(&r);
    // Once the client talks to destination members while the leader is still in the source,
    // each request crosses the link: the latency must show the RTT (the link really delays).
    let grow = r.phases.iter().find(|p| p.name == "grow").unwrap();
    assert!(grow.p50_ms >= 150.0, "{}", r.summary());
}

#[test]
fn link_cut_in_the_five_member_phase_the_source_keeps_serving() {
    let r = lab(
        "cut",
        50,
        Scenario::LinkCut {
            cut: Duration::from_secs(3),
        },
    );
    assert_clean(&r, "cut");
    assert_moved(&r);
    let five = r.phases.iter().find(|p| p.name == "five").unwrap();
    // The cut lasted 3 s of this phase and the source (3 of 5 voters) kept acknowledging writes.
    assert!(five.end - five.start >= 3000.0, "{}", r.summary());
    assert!(five.longest_write_gap_ms < 1000.0, "{}", r.summary());
    // The cut really bit: relayed peer connections were reset.
    let restored = r
        .events
        .iter()
        .find(|e| e.what.starts_with("link restored"))
        .unwrap();
    assert!(!restored.what.contains("(0 connections"), "{:?}", r.events);
}

/// At RTT 0 ms: it holds `rtt_0_ms`'s run (every assertion of a migration at 0 ms, which the
/// default run makes at 50 ms).
#[test]
fn source_proxy_restart_with_drain_in_the_five_member_phase() {
    let r = lab("restart", 0, Scenario::ProxyRestart);
    assert_clean(&r, "restart");
    let five = r.phases.iter().find(|p| p.name == "five").unwrap();
    let restarted = r
        .events
        .iter()
        .find(|e| e.what == "source proxy: new process serving")
        .unwrap();
    assert!(
        restarted.t_ms > five.start && restarted.t_ms < five.end,
        "{:?}",
        r.events
    );
    assert_moved(&r);
}

#[test]
fn kill_9_of_the_etcd_leader_in_the_five_member_phase() {
    let r = lab("kill", 50, Scenario::KillLeader);
    // Requests in flight at the forced leader loss may fail (issue 45 point 4 excuses it):
    // they are the fault's, printed; every other invariant holds as in a clean run.
    let fault = r.fault.as_ref().expect("the kill is recorded as the fault");
    println!(
        "figure: kill -9 of the leader: {} API and {} etcd requests ran into it and failed",
        fault.api_failed, fault.etcd_failed
    );
    assert_clean_but_the_fault(&r, "kill");
    assert_moved(&r);
    let killed = r
        .events
        .iter()
        .find(|e| e.what.starts_with("kill -9 of the leader"))
        .unwrap();
    let restarted = r
        .events
        .iter()
        .find(|e| e.what.contains("restarted on its data"));
    assert!(
        restarted.is_some_and(|e| e.t_ms > killed.t_ms),
        "{:?}",
        r.events
    );
}

#[test]
fn link_cut_with_six_voters_stops_writes_and_loses_nothing() {
    // Longer than a request's 5 s budget: requests in the middle of the cut must fail.
    let r = lab(
        "cut6",
        50,
        Scenario::LinkCutSix {
            cut: Duration::from_secs(8),
        },
    );
    // Failures inside the cut are the cut's (no quorum anywhere); none outside it, and nothing
    // acknowledged is lost once the link returns.
    assert!(
        r.violations.is_empty(),
        "{:?}\n{}",
        r.violations,
        r.summary()
    );
    assert_eq!(r.objects.missing, 0, "{}", r.summary());
    assert_eq!(r.writes.missing, 0, "{}", r.summary());
    assert_eq!(r.api.watch.missing, 0, "{}", r.summary());
    assert_moved(&r);
    let fault = r.fault.as_ref().expect("the cut is recorded");
    // The cut bit: with 3 of 6 voters on each side nothing could be acknowledged for 8 s.
    assert!(
        fault.api_failed + fault.etcd_failed > 0,
        "{fault:?}\n{}",
        r.summary()
    );
    assert!(r.writes.longest_gap_ms >= 5000.0, "{}", r.summary());
    assert!(r.api.longest_write_gap_ms >= 5000.0, "{}", r.summary());
}

#[test]
fn rtt_200_ms_reports_whether_the_destination_kube_apiserver_comes_up() {
    let r = lab("rtt200", 200, Scenario::Migrate);
    // Past the GEP's 180 ms limit the lab does not pretend: either the destination
    // kube-apiserver became ready and the run is clean, or the report says it did not and the
    // source kept serving (no acknowledged write lost either way).
    assert_eq!(r.objects.missing, 0, "{}", r.summary());
    assert_eq!(r.writes.missing, 0, "{}", r.summary());
    match r.control_plane.destination_ready_ms {
        Some(_) => {
            assert_clean(&r, "rtt200");
            assert_moved(&r);
        }
        None => assert!(
            r.violations
                .iter()
                .any(|v| v.contains("destination kube-apiserver did not become ready")),
            "{:?}",
            r.violations
        ),
    }
}

/// What the controllers did, as the stand-ins and the seeds' API servers saw it: both seeds'
/// conditions in the order of the steps; each `Etcd` generation written once and in order; each
/// destination member added once; the invalid migration refused by the CRD's rule.
fn assert_controlled(r: &Report, name: &str) {
    let c = r.control.as_ref().expect("the controllers drove the run");
    let conditions: Vec<&str> = c.conditions.iter().map(|e| e.what.as_str()).collect();
    let mut at = 0;
    for want in [
        "(source): SourceEtcdPreparedForPeerJoin True",
        "(destination): DestinationEtcdPeersJoined True",
        "(destination): EtcdMigrationComplete True",
        "(source): SourceSeedCleanup True",
        "(destination): MigrationCompleted True",
    ] {
        let found = conditions[at..]
            .iter()
            .position(|c| c.contains(want))
            .unwrap_or_else(|| panic!("{name}: no {want:?} after #{at}: {conditions:#?}"));
        at += found + 1;
    }
    assert!(
        conditions
            .iter()
            .any(|c| c.contains("(destination): DestinationEtcdExposed True")),
        "{name}: {conditions:#?}"
    );
    for seed in ["source", "destination"] {
        let generations: Vec<i64> = c
            .objects
            .iter()
            .filter_map(|e| e.what.strip_prefix(&format!("{seed}: Etcd generation ")))
            .map(|g| g.split(':').next().unwrap().parse().unwrap())
            .collect();
        assert!(
            !generations.is_empty() && generations.windows(2).all(|w| w[0] < w[1]),
            "{name}: {seed} Etcd generations {generations:?}"
        );
        assert!(
            c.objects.iter().any(|e| e
                .what
                .starts_with(&format!("{seed}: ConfigMap isthmus-proxy-routes"))),
            "{name}: no route ConfigMap delivered in {seed}"
        );
    }
    for i in 0..3 {
        let adds = r
            .events
            .iter()
            .filter(|e| {
                e.what
                    .contains(&format!("added dest-etcd-main-{i} as learner"))
            })
            .count();
        assert_eq!(adds, 1, "{name}: dest-etcd-main-{i} added {adds} times");
    }
    assert_eq!(c.refused.len(), 1, "{name}: {:?}", c.refused);
    assert!(
        c.refused[0].starts_with("422")
            && c.refused[0].contains("clientBase must be below peerBase"),
        "{name}: {:?}",
        c.refused
    );
}

#[test]
fn a_controller_killed_mid_join_is_replaced_through_the_lease() {
    let r = lab("kill-controller", 50, Scenario::KillController);
    assert_clean(&r, "kill-controller");
    assert_moved(&r);
    assert_controlled(&r, "kill-controller");
    let killed = r
        .events
        .iter()
        .find_map(|e| {
            e.what
                .strip_prefix("kill -9 of the destination controller ")
        })
        .map(|w| w.split(' ').next().unwrap().to_string())
        .expect("a controller was killed");
    let c = r.control.as_ref().unwrap();
    let holders: Vec<&str> = c
        .leases
        .iter()
        .filter_map(|e| e.what.strip_prefix("destination: Lease held by "))
        .collect();
    // The killed replica held the Lease, then the other one took it over.
    let pos = holders.iter().position(|h| *h == killed).unwrap();
    assert!(
        holders[pos + 1..].iter().any(|h| *h != killed),
        "{killed}: {holders:?}"
    );
}

#[test]
fn a_seed_api_server_restarted_mid_join_delays_but_does_not_break_the_migration() {
    let r = lab("restart-seed-api", 50, Scenario::RestartSeedApi);
    assert_clean(&r, "restart-seed-api");
    assert_moved(&r);
    assert_controlled(&r, "restart-seed-api");
    assert!(
        r.events.iter().any(|e| e
            .what
            .starts_with("destination seed kube-apiserver restarted")),
        "{:?}",
        r.events
    );
}

/// The abort before the join completes, through the controllers: the destination's controller
/// stops and removes its learner, deletes its `Etcd` and exposure; then the source's releases
/// its exposure once (its DNS records are deleted one time, not deleted and re-created while
/// it can no longer read etcd through them, as before
/// `a_released_source_abort_does_not_need_etcd_again`). It holds the assertions of the
/// planner-driven abort (`abort_before_the_join_completes_leaves_the_source_untouched`), the
/// same scenario.
#[test]
fn an_abort_through_the_controllers_releases_each_exposure_once() {
    let r = lab_with("abort-controllers", 50, Scenario::Abort, true);
    assert_clean(&r, "abort-controllers");
    let mut fin = r.members.r#final.clone();
    fin.sort();
    assert_eq!(fin, ["etcd-main-0", "etcd-main-1", "etcd-main-2"]);
    let sizes: Vec<usize> = r.members.timeline.iter().map(|m| m.members.len()).collect();
    assert_eq!(
        sizes.iter().max(),
        Some(&4),
        "a learner was added, then removed: {sizes:?}"
    );
    // The source rolled out to its exposed URLs and, after the abort, back.
    assert_rolled(&r, Side::Source, Rolls::OutAndBack);
    let c = r.control.as_ref().unwrap();
    let conditions: Vec<&str> = c.conditions.iter().map(|e| e.what.as_str()).collect();
    for seed in ["destination", "source"] {
        assert!(
            conditions
                .iter()
                .any(|c| c.contains(&format!("({seed}): LiveMigrationAborted True (CleanedUp)"))),
            "{seed}: {conditions:#?}"
        );
        let records: Vec<&str> = c
            .objects
            .iter()
            .filter_map(|e| e.what.strip_prefix(&format!("{seed}: DNSRecords now ")))
            .collect();
        assert_eq!(
            records.iter().filter(|r| **r == "[]").count(),
            1,
            "{seed}: {records:?}"
        );
    }
    assert!(
        !conditions.iter().any(|c| c.contains("EtcdUnreachable")),
        "{conditions:#?}"
    );
}
