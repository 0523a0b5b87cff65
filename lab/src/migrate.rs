//! The migration, driven by the controller's planner: the lab plays the orchestrator (it
//! advances a source and a destination `EtcdMigration` spec through the steps, `drive.rs`) and
//! Gardener's controllers (the local backend, `backend.rs`). The report's phases map to steps:
//!
//! | phase | what is driven | ready when |
//! |---|---|---|
//! | `source` | the source kube-apiserver serves (API load, watch, webhook through the tunnel) | |
//! | `expose` | both seeds at `Expose`: the source members roll from their in-cluster peer URLs to the exposed ones | `SourceEtcdPreparedForPeerJoin`, `DestinationEtcdExposed` |
//! | `join` | `Join` (destination: 2 members as learners, promoted) | `DestinationEtcdPeersJoined` |
//! | `five` | the destination kube-apiserver starts (`DestinationKubeAPIServerReady`); `Join` holds, 5 voters, the faults | its `/readyz` |
//! | `grow` | the shoot API's name, the etcd client and the tunnel move (`MigrateDNSRecords`), then `Grow` (third member) | 3 destination members ready |
//! | `six` | nothing: 6 voters (the `link-cut-six` fault) | |
//! | `shrink` | the source kube-apiserver stops, `Shrink` (source members removed), source `Complete` | `EtcdMigrationComplete`, `SourceSeedCleanup` |
//! | `destination` | destination `Complete`: its members roll back to their in-cluster peer URLs, then the exposure goes once no connection uses it | `MigrationCompleted` |
//!
//! Scenarios inject one fault each: a link cut, a proxy restart or a `kill -9` of the etcd
//! leader in the 5-member phase, a link cut in the 6-member phase (no quorum anywhere), or an
//! abort (destination `Abort`, then source `Abort`) after the first learner was added, before
//! the join completes.

use crate::api::ShootApi;
use crate::client::{self, Continuous};
use crate::error::Result;
use crate::etcd::{self, Side};
use crate::lab::{Lab, TunnelStep};
use crate::report::{self, Members, Report, Webhook, Writes};
use crate::topology;
use isthmus_controller::crd::Step;
use std::path::PathBuf;
use std::time::Duration;

/// What to inject during the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// The migration with no fault.
    Migrate,
    /// Cut the inter-seed link for `cut` during the 5-member phase, then restore it.
    LinkCut { cut: Duration },
    /// Abort after the first destination member was added, before the join completes.
    Abort,
    /// Restart (with drain) the source seed's proxy in the middle of the 5-member phase.
    ProxyRestart,
    /// `kill -9` of the etcd leader in the 5-member phase; restarted on its data after 2 s.
    KillLeader,
    /// Cut the inter-seed link for `cut` in the 6-member phase: neither side has a quorum
    /// (3 of 6), so the API stops acknowledging writes until the link returns. Failures inside
    /// the cut (plus [`RECOVERY`]) are reported as the fault's, not as violations; nothing
    /// acknowledged may be lost.
    LinkCutSix { cut: Duration },
    /// `kill -9` of the destination controller holding the Lease while its Join runs (after
    /// the first learner was added); the other replica must take the Lease and finish the
    /// step; the killed one starts again. Needs the controllers.
    KillController,
    /// The destination seed's kube-apiserver restarts while its Join runs. Needs the
    /// controllers.
    RestartSeedApi,
}

impl Scenario {
    /// Whether the scenario acts on the seeds' control planes (so the controllers must drive).
    pub fn needs_controllers(&self) -> bool {
        matches!(self, Self::KillController | Self::RestartSeedApi)
    }
}

/// How long after a quorum-losing cut ends failures still count as the cut's.
pub const RECOVERY: Duration = Duration::from_secs(15);

impl Scenario {
    fn name(&self) -> &'static str {
        match self {
            Self::Migrate => "migrate",
            Self::LinkCut { .. } => "link-cut",
            Self::Abort => "abort",
            Self::ProxyRestart => "proxy-restart",
            Self::KillLeader => "kill-leader",
            Self::LinkCutSix { .. } => "link-cut-six",
            Self::KillController => "kill-controller",
            Self::RestartSeedApi => "restart-seed-api",
        }
    }
}

/// How to run the lab.
#[derive(Debug, Clone)]
pub struct Options {
    pub rtt: Duration,
    pub scenario: Scenario,
    /// The `isthmus` binary (each seed runs `isthmus proxy`).
    pub proxy_bin: PathBuf,
    /// The shoot's kube-apiserver (built by `scripts/build-kubernetes.sh`).
    pub kube_apiserver_bin: PathBuf,
    /// Scratch directory for certificates, configs, data and logs.
    pub dir: PathBuf,
    /// Time between two client requests (writes and reads alternate).
    pub interval: Duration,
    /// How long the steady phases (source, 5 members, destination) last.
    pub hold: Duration,
    /// Run etcd with `--pre-vote` (on by default; off shows the election a rejoining,
    /// partitioned member forces).
    pub pre_vote: bool,
    /// The controllers drive the migration: each seed runs its own kube-apiserver and
    /// `isthmus controller` replicas (`crate::control`), instead of the lab calling the
    /// controller's planner as a library.
    pub controllers: bool,
}

/// Runs the scenario and returns its report (invariant violations inside it).
pub async fn run(opts: &Options) -> Result<Report> {
    let control = opts.controllers.then(|| crate::control::ControlOptions {
        kube_apiserver_bin: opts.kube_apiserver_bin.clone(),
        replicas: 2,
    });
    let mut lab = Lab::start(
        opts.rtt,
        &opts.proxy_bin,
        &opts.dir,
        opts.pre_vote,
        control.as_ref(),
    )
    .await?;
    let initial = lab.member_names(&lab.urls(&lab.cluster.clone())).await?;
    let client =
        Continuous::start(lab.epoch, &lab.urls(&topology::source()), opts.interval).await?;
    lab.client = Some(client.clone());
    let webhook = lab
        .webhook
        .as_ref()
        .ok_or_else(|| crate::Error::State("the tunnel did not start".into()))?;
    let api = ShootApi::start(
        lab.epoch,
        &opts.kube_apiserver_bin,
        &opts.dir,
        [&lab.topo.source, &lab.topo.destination],
        webhook,
        &lab.urls(&topology::source()),
        opts.interval * 2,
    )
    .await?;
    lab.api = Some(api);
    lab.event("source kube-apiserver serving; API load, watch and webhook start");
    lab.enter("source").await;
    tokio::time::sleep(opts.hold).await;

    lab.enter("expose").await;
    lab.drive(Side::Source, |_| false).await?;
    lab.drive(Side::Destination, |_| false).await?;

    lab.enter("join").await;
    lab.tunnel(TunnelStep::JoinTemporary).await?;
    let join_start = lab.now_ms();
    lab.copy_source_members().await?;
    lab.step(Side::Source, Step::Join).await?;
    if opts.scenario == Scenario::Abort {
        return abort(lab, client, opts, initial).await;
    }
    if opts.scenario.needs_controllers() {
        // The fault lands mid-step: after the first destination member was added.
        lab.set_step(Side::Destination, Step::Join).await?;
        lab.drive(Side::Destination, |lab| {
            lab.cluster.iter().any(|m| m.side == Side::Destination)
        })
        .await?;
        control_fault(&mut lab, opts.scenario).await?;
        lab.drive(Side::Destination, |_| false).await?;
    } else {
        lab.step(Side::Destination, Step::Join).await?;
    }
    let join_ms = lab.now_ms() - join_start;

    lab.enter("five").await;
    // DestinationKubeAPIServerReady: the destination kube-apiserver on the destination members.
    let dest_urls = lab.urls(&topology::destination());
    let started = match lab.api.as_mut() {
        Some(api) => {
            api.start_destination(&lab.topo.destination, &dest_urls)
                .await?
        }
        None => Err("no shoot API".into()),
    };
    match started {
        Ok(took) => lab.event(format!(
            "destination kube-apiserver ready ({:.1} s)",
            took / 1000.0
        )),
        Err(why) => {
            // The GEP's failure boundary: report it, do not hide it. The migration cannot go
            // on (nothing may move the DNS to an API server that is not ready); the run ends
            // here with 5 voters and says so.
            lab.event(format!("destination kube-apiserver not ready: {why}"));
            let five = lab.cluster.clone();
            let mut report =
                finish(lab, client, opts, initial, Some(join_ms), &five, false).await?;
            report.violations.push(format!(
                "the destination kube-apiserver did not become ready at RTT {} ms: {why}",
                client::ms(opts.rtt)
            ));
            return Ok(report);
        }
    }
    five_member_phase(&mut lab, opts).await?;

    // The kube-apiserver now runs in the destination and the shoot's API DNS moved to it.
    // (The client's move opens the `grow` phase: from here it talks to destination members.)
    lab.enter("grow").await;
    let dest = topology::destination();
    client.move_to(&lab.urls(&dest[..2])).await?;
    lab.event("client moved to the destination members");
    if let Some(api) = lab.api.as_ref() {
        api.move_dns();
        lab.event(format!(
            "{} now points at the destination kube-apiserver",
            crate::api::API_NAME
        ));
    }
    lab.tunnel(TunnelStep::MoveToDestination).await?;
    lab.step(Side::Source, Step::Grow).await?;
    lab.step(Side::Destination, Step::Grow).await?;
    lab.enter("six").await;
    if let Scenario::LinkCutSix { cut } = opts.scenario {
        six_member_cut(&mut lab, cut).await?;
    }

    // The planner lists the source members to remove; the backend moves leadership to a
    // destination member first (again if an election put it back in the source).
    if let Some(api) = lab.api.as_mut() {
        let how = api.stop_source().await?;
        lab.event(format!("source kube-apiserver stopped: {how}"));
    }
    lab.enter("shrink").await;
    lab.set_step(Side::Source, Step::Shrink).await?;
    lab.step(Side::Destination, Step::Shrink).await?;
    // The source, planned again without members, still counts as prepared.
    lab.drive(Side::Source, |_| false).await?;
    lab.step(Side::Source, Step::Complete).await?;

    lab.enter("destination").await;
    lab.tunnel(TunnelStep::DrainTemporary { abort: false })
        .await?;
    lab.step(Side::Destination, Step::Complete).await?;
    tokio::time::sleep(opts.hold).await;
    finish(lab, client, opts, initial, Some(join_ms), &dest, true).await
}

/// The control-plane faults, in the destination seed.
async fn control_fault(lab: &mut Lab, scenario: Scenario) -> Result<()> {
    let t0 = tokio::time::Instant::now();
    let Some(plane) = lab.control.as_mut() else {
        return Err(crate::Error::State(format!(
            "{} needs the controllers",
            scenario.name()
        )));
    };
    match scenario {
        Scenario::KillController => {
            let killed = plane.kill_leader(Side::Destination).await?;
            lab.event(format!(
                "kill -9 of the destination controller {killed} (Lease holder)"
            ));
            let deadline = t0 + Duration::from_secs(10 * crate::control::controller::LEASE_SECONDS);
            let holder = loop {
                let t_ms = lab.now_ms();
                let plane = lab
                    .control
                    .as_mut()
                    .ok_or_else(|| crate::Error::State("no control plane".into()))?;
                match plane.watch_lease(Side::Destination, t_ms).await? {
                    Some(h) if h != killed => break h,
                    _ if tokio::time::Instant::now() > deadline => {
                        return Err(crate::Error::Timeout {
                            what: "the other destination controller to take the Lease".into(),
                            after: deadline - t0,
                        })
                    }
                    _ => tokio::time::sleep(Duration::from_millis(200)).await,
                }
            };
            lab.event(format!(
                "{holder} took the destination Lease {:.1} s after the kill",
                t0.elapsed().as_secs_f64()
            ));
            if let Some(plane) = lab.control.as_mut() {
                plane.restart_replica(Side::Destination, &killed)?;
            }
            lab.event(format!("{killed} started again (a standby now)"));
        }
        Scenario::RestartSeedApi => {
            let how = plane.seeds[1].api.restart(&lab.topo.destination).await?;
            lab.event(format!(
                "destination seed kube-apiserver restarted ({how}), ready again after {:.1} s",
                t0.elapsed().as_secs_f64()
            ));
        }
        _ => {}
    }
    Ok(())
}

async fn five_member_phase(lab: &mut Lab, opts: &Options) -> Result<()> {
    tokio::time::sleep(opts.hold / 2).await;
    match opts.scenario {
        Scenario::LinkCut { cut } => {
            lab.topo.link.cut();
            lab.event(format!("link cut for {} ms", cut.as_millis()));
            tokio::time::sleep(cut).await;
            lab.topo.link.restore();
            let resets = lab.topo.link.resets();
            lab.event(format!("link restored ({resets} connections reset)"));
        }
        Scenario::ProxyRestart => {
            lab.event("source proxy: SIGTERM (drain)");
            lab.proxies[0].restart(&lab.topo.source).await?;
            lab.event("source proxy: new process serving");
        }
        Scenario::KillLeader => {
            lab.kill_leader_and_restart(Duration::from_secs(2)).await?;
        }
        Scenario::Migrate
        | Scenario::Abort
        | Scenario::LinkCutSix { .. }
        | Scenario::KillController
        | Scenario::RestartSeedApi => {}
    }
    tokio::time::sleep(opts.hold / 2).await;
    // All five serve again before the migration goes on (the destination caught up).
    for url in lab.urls(&lab.voters()) {
        etcd::wait_serving(&url, Duration::from_secs(60)).await?;
    }
    Ok(())
}

/// The 6-member cut: 3 voters each side, no quorum anywhere until the link returns.
async fn six_member_cut(lab: &mut Lab, cut: Duration) -> Result<()> {
    let start = lab.now_ms();
    lab.topo.link.cut();
    lab.event(format!(
        "link cut for {} ms with 6 voters (3 + 3): no quorum on either side",
        cut.as_millis()
    ));
    tokio::time::sleep(cut).await;
    lab.topo.link.restore();
    let resets = lab.topo.link.resets();
    lab.event(format!("link restored ({resets} connections reset)"));
    lab.fault = Some(report::Fault {
        what: "link cut with 6 voters".into(),
        start_ms: start,
        end_ms: lab.now_ms() + client::ms(RECOVERY),
        api_failed: 0,
        etcd_failed: 0,
    });
    for url in lab.urls(&lab.voters()) {
        etcd::wait_serving(&url, Duration::from_secs(60)).await?;
    }
    lab.event("all 6 voters serving again");
    Ok(())
}

async fn abort(
    mut lab: Lab,
    client: Continuous,
    opts: &Options,
    initial: Vec<String>,
) -> Result<Report> {
    // The join runs until the first destination member was added as a learner; it stays a
    // learner (still catching up) while the abort is decided.
    lab.hold_promotion = true;
    lab.set_step(Side::Destination, Step::Join).await?;
    lab.drive(Side::Destination, |lab| {
        lab.cluster.iter().any(|m| m.side == Side::Destination)
    })
    .await?;
    // `abort-live-migration=true` while DestinationEtcdPeersJoined is not True: the
    // destination removes what it added, then the source rolls its members back to their
    // in-cluster peer URLs and removes its exposure once no connection uses it.
    lab.enter("abort").await;
    lab.event("abort-live-migration=true");
    lab.step(Side::Destination, Step::Abort).await?;
    lab.step(Side::Source, Step::Abort).await?;
    lab.tunnel(TunnelStep::DrainTemporary { abort: true })
        .await?;
    lab.enter("source-after-abort").await;
    tokio::time::sleep(opts.hold).await;
    finish(lab, client, opts, initial, None, &topology::source(), true).await
}

async fn finish(
    mut lab: Lab,
    client: Continuous,
    opts: &Options,
    initial: Vec<String>,
    join_ms: Option<f64>,
    expected: &[crate::etcd::MemberRef],
    released: bool,
) -> Result<Report> {
    lab.end_phases();
    let rec = client.stop().await;
    let mut violations = Vec::new();
    let api = lab
        .api
        .take()
        .ok_or_else(|| crate::Error::State("the shoot API did not start".into()))?;
    let (api, objects, control_plane) = api
        .finish(
            lab.webhook.as_ref(),
            &lab.phases,
            lab.fault.as_ref(),
            &mut violations,
        )
        .await?;
    let fault = lab.fault.clone().map(|mut f| {
        f.api_failed = api
            .samples
            .iter()
            .filter(|s| !s.ok && f.covers(s.start_ms))
            .count();
        f.etcd_failed = rec
            .samples
            .iter()
            .filter(|s| !s.ok && f.covers(s.start_ms))
            .count();
        f
    });
    let calls = match lab.webhook.take() {
        Some(w) => w.stop().await,
        None => Vec::new(),
    };
    let calls_path = lab.dir.join("webhook_calls.json");
    if let Ok(text) = serde_json::to_string(&calls) {
        std::fs::write(&calls_path, text).map_err(|e| crate::Error::io(calls_path.display(), e))?;
    }
    let webhook = Webhook::from_calls(
        &calls,
        &lab.phases,
        Some(
            "a tunnel-server process in each seed behind its proxy; the agents in a shoot \
             namespace reach it through that proxy across a link with the RTT (never cut)"
                .into(),
        ),
    );
    lab.record_membership().await;
    let urls = lab.urls(expected);
    // One member list gives the final names and the URLs they advertise.
    let listed = etcd::list(&mut etcd::connect(&urls).await?).await?;
    let final_members: Vec<String> = listed.iter().map(crate::lab::marked_name).collect();
    let final_peer_urls: std::collections::BTreeMap<String, Vec<String>> = listed
        .into_iter()
        .map(|l| (l.lab_name(), l.peer_urls))
        .collect();
    if released {
        // The exposure is gone: every member must be back on its in-cluster URL alone.
        for m in expected {
            let got = final_peer_urls.get(&m.name());
            if got != Some(&vec![m.in_cluster_url()]) {
                violations.push(format!(
                    "{} advertises {got:?} after the migration, not its in-cluster URL {}",
                    m.name(),
                    m.in_cluster_url()
                ));
            }
        }
    }
    let missing = client::missing(&urls, &rec.acknowledged).await?;
    // Every request, for whoever wants to look closer than the report.
    let api_path = lab.dir.join("api_samples.json");
    if let Ok(text) = serde_json::to_string(&api.samples) {
        std::fs::write(&api_path, text).map_err(|e| crate::Error::io(api_path.display(), e))?;
    }
    let samples_path = lab.dir.join("samples.json");
    if let Ok(text) = serde_json::to_string(&rec.samples) {
        std::fs::write(&samples_path, text)
            .map_err(|e| crate::Error::io(samples_path.display(), e))?;
    }
    let mut acks = rec.write_acks_ms.clone();
    let phases = lab
        .phases
        .iter()
        .map(|(n, s, e)| report::phase(n, *s, *e, &rec))
        .collect();
    let etcd = report::etcd_totals(&rec);
    let etcd_unexpected = rec
        .samples
        .iter()
        .filter(|s| !s.ok && !report::covered(fault.as_ref(), s.start_ms))
        .count();
    if etcd_unexpected > 0 {
        violations.push(format!("{etcd_unexpected} etcd requests failed"));
    }
    if !missing.is_empty() {
        violations.push(format!(
            "{} acknowledged writes missing or changed: {:?}",
            missing.len(),
            &missing[..missing.len().min(5)]
        ));
    }
    let mut want: Vec<String> = expected.iter().map(|m| m.name()).collect();
    let mut got = final_members.clone();
    want.sort();
    got.sort();
    if want != got {
        violations.push(format!("final members {got:?}, expected {want:?}"));
    }
    if webhook.failed > 0 {
        let first = calls.iter().find_map(|c| c.error.clone());
        violations.push(format!(
            "{} of {} webhook calls through the tunnel failed (first: {first:?})",
            webhook.failed, webhook.requests
        ));
    }
    if webhook.requests == 0 {
        violations.push("no webhook call was made through the tunnel".into());
    }
    if rec.acknowledged.is_empty() {
        violations.push("no write was acknowledged".into());
    }
    let control = lab.control.as_ref().map(|c| report::Control {
        real: format!(
            "each seed: kube-apiserver {} on etcd v3.6, the pinned etcd-druid and Gardener CRDs, \
             deploy/'s RBAC; {} isthmus controller replicas as its ServiceAccount",
            control_plane.kube_apiserver,
            c.seeds[0].replicas.len()
        ),
        conditions: c.timeline.clone(),
        objects: c.written.clone(),
        leases: c.leases.clone(),
        refused: c.refused.clone(),
    });
    if let Some(c) = &lab.control {
        violations.extend(c.druid_violations.iter().cloned());
    }
    if let Some(c) = &control {
        if c.refused.iter().any(|r| r == "ACCEPTED") || c.refused.is_empty() {
            violations.push(format!(
                "an invalid EtcdMigration was not refused by the API server: {:?}",
                c.refused
            ));
        }
    }
    let stand_ins = if control.is_some() {
        report::CONTROLLED_STAND_INS
    } else {
        report::STAND_INS
    };
    Ok(Report {
        stand_ins: stand_ins.iter().map(|s| s.to_string()).collect(),
        control,
        quorum: lab.quorum.clone(),
        scenario: opts.scenario.name().into(),
        rtt_ms: client::ms(opts.rtt),
        api,
        objects,
        control_plane,
        etcd,
        webhook,
        writes: Writes {
            acknowledged: rec.acknowledged.len(),
            missing: missing.len(),
            longest_gap_ms: report::longest_gap(&mut acks),
        },
        members: Members {
            initial,
            r#final: final_members,
            timeline: lab.timeline.clone(),
            final_peer_urls,
            rolled: lab.rolled.clone(),
        },
        phases,
        events: lab.events.clone(),
        fault,
        join_ms,
        violations,
        samples: rec.samples,
    })
}
