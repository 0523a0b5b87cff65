//! Who moves the migration's steps. Two drivers, one contract: the in-process planner
//! (`crate::planner`: the lab calls the controller's planner as a library and applies its
//! plans as Gardener's controllers would) and the controllers (`crate::control`: each seed's
//! `isthmus controller` processes through the seed's API server, with stand-ins acting on what
//! they write). The migration's script (`crate::migrate`) is written once, against this trait.

use crate::error::{Error, Result};
use crate::lab::Lab;
use crate::migration::Migration;
use crate::options::{Options, Scenario};
use crate::proxy::SeedProxy;
use crate::report::Control;
use crate::side::Side;
use crate::specs;
use crate::topology::Topology;
use crate::world::World;
use isthmus_controller::crd::{Condition, Step};
use std::time::Duration;
use tokio::time::Instant;

/// How long one step may take (join at 150 ms RTT takes about 10 s).
const STEP_BUDGET: Duration = Duration::from_secs(180);

/// When a step's budget ([`STEP_BUDGET`]) runs out.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StepDeadline(Instant);

impl StepDeadline {
    /// The budget of a step starting now.
    pub(crate) fn start() -> Self {
        Self(Instant::now() + STEP_BUDGET)
    }

    /// Whether the budget is spent.
    pub(crate) fn passed(&self) -> bool {
        Instant::now() > self.0
    }

    /// Err once the budget is spent: `side`'s `step` is not ready, with its conditions.
    pub(crate) fn check(&self, side: Side, step: Step, conditions: &[Condition]) -> Result<()> {
        if !self.passed() {
            return Ok(());
        }
        Err(Error::Timeout {
            what: format!(
                "{} step {step:?} to be ready (conditions {conditions:?})",
                specs::seed_name(side)
            ),
            after: STEP_BUDGET,
        })
    }
}

/// What a driver adds to the report.
#[derive(Debug)]
pub(crate) struct Conclusion {
    /// The seeds' control planes as the lab saw them, when the controllers drove.
    pub control: Option<Control>,
    /// The parts of Gardener the lab stood in for.
    pub stand_ins: &'static [&'static str],
}

/// A way of moving both seeds' `EtcdMigration`s through their steps. The lab drives one run
/// on one task: nothing here needs to be `Send`.
pub(crate) trait Driver: Sized {
    /// Starts what the driver needs before any member runs, and the seeds' proxies (which
    /// read their routes from the driver).
    async fn start(opts: &Options, topo: &Topology) -> Result<(Self, [SeedProxy; 2])>;

    /// Each seed's `EtcdMigration` as the driver knows it (source, destination).
    fn migrations(&self) -> &[Migration; 2];

    /// Once the source members serve: what a seed has before a migration, the controllers.
    async fn begin(&mut self, lab: &mut Lab, opts: &Options) -> Result<()>;

    /// The orchestrator sets `spec.step` of `side` (a new spec generation).
    async fn set_step(&mut self, lab: &mut Lab, side: Side, step: Step) -> Result<()>;

    /// The orchestrator copies the source's `status.exposedMembers` into the destination's
    /// `spec.destination.sourceMembers` (the members the destination joins).
    async fn copy_source_members(&mut self, lab: &mut Lab) -> Result<()>;

    /// Moves `side` until its step is ready for the spec set last, or `stop` holds (the abort
    /// scenario stops the join after the first learner was added).
    async fn drive(
        &mut self,
        lab: &mut Lab,
        side: Side,
        stop: &dyn Fn(&World) -> bool,
    ) -> Result<()>;

    /// Sets `step` on `side` and drives it until ready.
    async fn step(&mut self, lab: &mut Lab, side: Side, step: Step) -> Result<()> {
        self.set_step(lab, side, step).await?;
        self.drive(lab, side, &|_| false).await
    }

    /// Injects a fault into the destination seed's control plane (`kill-controller`,
    /// `restart-seed-api`).
    async fn control_fault(&mut self, lab: &mut Lab, scenario: Scenario) -> Result<()>;

    /// What the driver saw, for the report; invariants it saw broken go to `violations`.
    /// `kube_apiserver` is the shoot API's version (the seeds run the same build).
    fn conclude(&self, kube_apiserver: &str, violations: &mut Vec<String>) -> Conclusion;
}
