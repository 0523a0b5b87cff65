//! The migration's script, written once for both drivers (`crate::driver`): the lab plays the
//! orchestrator (it advances a source and a destination `EtcdMigration` through the steps)
//! while the driver moves each step (the planner in process, or the controllers through the
//! seeds' API servers). The report's phases map to steps:
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
//! Scenarios inject one fault each (`faults.rs`): a link cut, a proxy restart or a `kill -9`
//! of the etcd leader in the 5-member phase, a link cut in the 6-member phase (no quorum
//! anywhere), an abort (destination `Abort`, then source `Abort`) after the first learner was
//! added, before the join completes, or a fault in the destination's control plane mid-Join
//! (controllers only). How a run starts is `start.rs`; what the report makes of it, `finish.rs`.

mod faults;
mod finish;
mod leadership;
mod start;

use crate::api::API_NAME;
use crate::client::Continuous;
use crate::control::Controllers;
use crate::driver::Driver;
use crate::error::Result;
use crate::lab::{Lab, TunnelStep};
use crate::member;
use crate::options::{Options, Scenario};
use crate::planner::Planner;
use crate::report::Report;
use crate::side::Side;
use isthmus_controller::crd::Step;

/// Runs the scenario and returns its report (invariant violations inside it).
pub async fn run(opts: &Options) -> Result<Report> {
    // On the heap: each driver's run is one deep state machine.
    if opts.controllers {
        Box::pin(migrate::<Controllers>(opts)).await
    } else {
        Box::pin(migrate::<Planner>(opts)).await
    }
}

/// A run in progress.
struct Run<D> {
    // Field order is drop order: the driver's processes (the seeds' control planes) before
    // the world's namespaces.
    driver: D,
    lab: Lab,
    /// The lab's own etcd client, writing and reading from the start.
    client: Continuous,
    /// The members at the start, as etcd listed them.
    initial: Vec<String>,
    /// How long the destination members took to join (3 → 5), once they did.
    join_ms: Option<f64>,
}

/// The migration from start to report.
async fn migrate<D: Driver>(opts: &Options) -> Result<Report> {
    let mut run = Run::<D>::start(opts).await?;
    run.lab.enter("source").await;
    tokio::time::sleep(opts.hold).await;
    run.lab.enter("expose").await;
    run.drive(Side::Source).await?;
    run.drive(Side::Destination).await?;
    let join_start = run.join_source().await?;
    if opts.scenario == Scenario::Abort {
        return run.abort(opts).await;
    }
    run.join_destination(opts.scenario).await?;
    run.join_ms = Some(run.lab.record.now_ms() - join_start);
    run.lab.enter("five").await;
    if let Err(why) = run.start_destination_api().await? {
        return run.not_ready(opts, why).await;
    }
    run.five_member_phase(opts).await?;
    run.grow().await?;
    run.lab.enter("six").await;
    if let Scenario::LinkCutSix { cut } = opts.scenario {
        run.six_member_cut(cut).await?;
    }
    run.shrink().await?;
    run.lab.enter("destination").await;
    run.lab
        .tunnel(TunnelStep::DrainTemporary { abort: false })
        .await?;
    run.step(Side::Destination, Step::Complete).await?;
    tokio::time::sleep(opts.hold).await;
    run.finish(opts, &member::destination(), true).await
}

impl<D: Driver> Run<D> {
    /// Sets `step` on `side` and drives it until ready.
    async fn step(&mut self, side: Side, step: Step) -> Result<()> {
        self.driver.step(&mut self.lab, side, step).await
    }

    /// Drives `side`'s current step until ready.
    async fn drive(&mut self, side: Side) -> Result<()> {
        self.driver.drive(&mut self.lab, side, &|_| false).await
    }

    /// Sets `spec.step` of `side` without waiting for it.
    async fn set_step(&mut self, side: Side, step: Step) -> Result<()> {
        self.driver.set_step(&mut self.lab, side, step).await
    }

    /// Drives the destination's `Join` until its first member was added (the faults land
    /// there: mid-step, before the join completes).
    async fn join_until_first_learner(&mut self) -> Result<()> {
        self.set_step(Side::Destination, Step::Join).await?;
        let added = |w: &crate::world::World| w.has(Side::Destination);
        self.driver
            .drive(&mut self.lab, Side::Destination, &added)
            .await
    }

    /// `join`: the temporary tunnel agent joins, the destination learns the source's exposed
    /// members, and the source's `Join` is driven. Returns when the join started (ms).
    async fn join_source(&mut self) -> Result<f64> {
        self.lab.enter("join").await;
        self.lab.tunnel(TunnelStep::JoinTemporary).await?;
        let join_start = self.lab.record.now_ms();
        self.driver.copy_source_members(&mut self.lab).await?;
        self.step(Side::Source, Step::Join).await?;
        Ok(join_start)
    }

    /// The destination's `Join` (2 members as learners, promoted); a control-plane fault lands
    /// in the middle of it.
    async fn join_destination(&mut self, scenario: Scenario) -> Result<()> {
        if !scenario.needs_controllers() {
            return self.step(Side::Destination, Step::Join).await;
        }
        self.join_until_first_learner().await?;
        self.driver.control_fault(&mut self.lab, scenario).await?;
        self.drive(Side::Destination).await
    }

    /// `DestinationKubeAPIServerReady`: the destination kube-apiserver on the destination
    /// members. Err (inside Ok) with why it did not become ready.
    async fn start_destination_api(&mut self) -> Result<std::result::Result<(), String>> {
        // Its start-up (every resource LISTed, the bootstrap objects written) loads the
        // members and the machine: a slow request in `five` names it.
        self.lab.record.event("destination kube-apiserver starting");
        let w = &mut self.lab.world;
        let dest_urls = w.urls(&member::destination());
        let started = match w.api.as_mut() {
            Some(api) => {
                api.start_destination(&w.topo.destination, &dest_urls)
                    .await?
            }
            None => Err("no shoot API".into()),
        };
        match started {
            Ok(took) => {
                self.lab.record.event(format!(
                    "destination kube-apiserver ready ({:.1} s)",
                    took / 1000.0
                ));
                Ok(Ok(()))
            }
            Err(why) => {
                self.lab
                    .record
                    .event(format!("destination kube-apiserver not ready: {why}"));
                Ok(Err(why))
            }
        }
    }

    /// `grow`: the kube-apiserver now runs in the destination and the shoot's API DNS moves
    /// to it; the lab's client moves to destination members (so the phase opens with it),
    /// the tunnel moves, then the third destination member joins.
    async fn grow(&mut self) -> Result<()> {
        self.lab.enter("grow").await;
        let dest = member::destination();
        self.client
            .move_to(&self.lab.world.urls(&dest[..2]))
            .await?;
        self.lab
            .record
            .event("client moved to the destination members");
        if let Some(api) = self.lab.world.api.as_ref() {
            api.move_dns();
            self.lab.record.event(format!(
                "{API_NAME} now points at the destination kube-apiserver"
            ));
        }
        self.lab.tunnel(TunnelStep::MoveToDestination).await?;
        self.step(Side::Source, Step::Grow).await?;
        self.step(Side::Destination, Step::Grow).await
    }

    /// `shrink`: the source kube-apiserver stops (its members are about to go), the source
    /// members leave (leadership moved to a destination member first, again if an election put
    /// it back in the source), and the source completes.
    async fn shrink(&mut self) -> Result<()> {
        if let Some(api) = self.lab.world.api.as_mut() {
            let how = api.stop_source().await?;
            self.lab
                .record
                .event(format!("source kube-apiserver stopped: {how}"));
        }
        self.lab.enter("shrink").await;
        self.set_step(Side::Source, Step::Shrink).await?;
        self.step(Side::Destination, Step::Shrink).await?;
        // The source, planned again without members, still counts as prepared.
        self.drive(Side::Source).await?;
        self.step(Side::Source, Step::Complete).await
    }
}
