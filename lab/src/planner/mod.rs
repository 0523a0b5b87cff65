//! The planner driver: the lab plays the orchestrator (it sets a seed's `spec.step`) and
//! runs planner passes (observe → `plan::plan` → apply) until the planner reports the step
//! ready: the loop the controller's kube adapter runs, without Kubernetes. The plans are
//! applied the way Gardener's controllers apply the objects they stand for (`apply.rs`); what
//! the next pass observes comes from the world itself (`observe.rs`).

mod apply;
mod observe;

use crate::driver::{Conclusion, Driver, StepDeadline};
use crate::error::{Error, Result};
use crate::lab::Lab;
use crate::migration::Migration;
use crate::options::{Options, Scenario};
use crate::proxy::{self, SeedProxy};
use crate::report::STAND_INS;
use crate::side::Side;
use crate::specs;
use crate::topology::Topology;
use crate::world::World;
use isthmus_controller::crd::{EtcdMigrationStatus, Step};
use isthmus_controller::plan::{self, Plan};
use std::time::Duration;

/// Both seeds' migrations, planned in this process.
#[derive(Debug)]
pub struct Planner {
    migrations: [Migration; 2],
}

impl Driver for Planner {
    async fn start(opts: &Options, topo: &Topology) -> Result<(Self, [SeedProxy; 2])> {
        // Both proxies start with the listeners and no route; the planner adds the routes.
        let (bin, dir) = (&opts.proxy_bin, &opts.dir);
        let src_file = proxy::render(Side::Source, &topo.source, &[])?;
        let dst_file = proxy::render(Side::Destination, &topo.destination, &[])?;
        let proxies = [
            SeedProxy::start(bin, &topo.source, dir, &src_file).await?,
            SeedProxy::start(bin, &topo.destination, dir, &dst_file).await?,
        ];
        let planner = Self {
            migrations: Migration::both(topo),
        };
        Ok((planner, proxies))
    }

    fn migrations(&self) -> &[Migration; 2] {
        &self.migrations
    }

    async fn begin(&mut self, _lab: &mut Lab, _opts: &Options) -> Result<()> {
        Ok(())
    }

    async fn set_step(&mut self, _lab: &mut Lab, side: Side, step: Step) -> Result<()> {
        let m = &mut self.migrations[side.index()];
        if m.spec.step != step {
            m.spec.step = step;
            m.obs.generation = Some(m.obs.generation.unwrap_or(0) + 1);
        }
        Ok(())
    }

    async fn copy_source_members(&mut self, _lab: &mut Lab) -> Result<()> {
        let [source, dest] = &mut self.migrations;
        let exposed = source.obs.previous.exposed_members.clone();
        if let Some(d) = dest.spec.destination.as_mut() {
            if d.source_members != exposed {
                d.source_members = exposed;
                dest.obs.generation = Some(dest.obs.generation.unwrap_or(0) + 1);
            }
        }
        Ok(())
    }

    async fn drive(
        &mut self,
        lab: &mut Lab,
        side: Side,
        stop: &dyn Fn(&World) -> bool,
    ) -> Result<()> {
        let deadline = StepDeadline::start();
        loop {
            let (p, acted) = self.pass(lab, side).await?;
            if p.status.step_ready || stop(&lab.world) {
                return Ok(());
            }
            deadline.check(side, p.step, &p.status.conditions)?;
            // A pass that changed nothing waits for the world (a member catching up).
            if !acted {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }

    async fn control_fault(&mut self, _lab: &mut Lab, scenario: Scenario) -> Result<()> {
        Err(Error::State(format!(
            "{} needs the controllers",
            scenario.name()
        )))
    }

    fn conclude(&self, _kube_apiserver: &str, _violations: &mut Vec<String>) -> Conclusion {
        Conclusion {
            control: None,
            stand_ins: STAND_INS,
        }
    }
}

impl Planner {
    /// One planner pass of `side`; returns the plan and whether anything was applied.
    async fn pass(&mut self, lab: &mut Lab, side: Side) -> Result<(Plan, bool)> {
        self.observe(&lab.world, side).await?;
        let m = &self.migrations[side.index()];
        let p = plan::plan(&m.spec, &m.obs);
        let acted = self.apply(lab, side, &p).await?;
        let previous = std::mem::replace(
            &mut self.migrations[side.index()].obs.previous,
            p.status.clone(),
        );
        condition_events(lab, side, &p, &previous);
        Ok((p, acted))
    }
}

/// An event per condition whose status changed in this pass.
fn condition_events(lab: &mut Lab, side: Side, p: &Plan, previous: &EtcdMigrationStatus) {
    for c in &p.status.conditions {
        let old = previous.conditions.iter().find(|o| o.type_ == c.type_);
        if old.is_none_or(|o| o.status != c.status) {
            lab.record.event(format!(
                "plan {:?} ({}): {} {} ({})",
                p.step,
                specs::seed_name(side),
                c.type_,
                c.status,
                c.reason
            ));
        }
    }
}
