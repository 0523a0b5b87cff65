//! The orchestrator's side: set a seed's `spec.step`, then run planner passes (observe → plan
//! → apply through [`crate::backend`]) until the planner reports the step ready — the loop the
//! kube adapter runs, without Kubernetes. With the controllers driving (`crate::control`), the
//! same calls go through the seeds' APIs to the `isthmus controller` processes.

use crate::backend::idx;
use crate::error::{Error, Result};
use crate::etcd::Side;
use crate::lab::Lab;
use crate::specs;
use isthmus_controller::crd::{EtcdMigrationStatus, Step};
use isthmus_controller::plan::{self, Plan};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::Instant;

/// How long one step may take (join at 150 ms RTT takes about 10 s).
const STEP_BUDGET: Duration = Duration::from_secs(180);

impl Lab {
    /// The orchestrator sets `spec.step` of `side` (a new spec generation); with the
    /// controllers driving, through the seed's API (`crate::control::gardenlet`).
    pub async fn set_step(&mut self, side: Side, step: Step) -> Result<()> {
        if self.control.is_some() {
            return self.gardenlet_step(side, step).await;
        }
        let m = &mut self.migrations[idx(side)];
        if m.spec.step != step {
            m.spec.step = step;
            m.obs.generation = Some(m.obs.generation.unwrap_or(0) + 1);
        }
        Ok(())
    }

    /// The orchestrator copies the source's `status.exposedMembers` into the destination's
    /// `spec.destination.sourceMembers` (the members the destination joins).
    pub async fn copy_source_members(&mut self) -> Result<()> {
        if self.control.is_some() {
            return self.gardenlet_copy_members().await;
        }
        let exposed = self.migrations[idx(Side::Source)]
            .obs
            .previous
            .exposed_members
            .clone();
        let dest = &mut self.migrations[idx(Side::Destination)];
        if let Some(d) = dest.spec.destination.as_mut() {
            if d.source_members != exposed {
                d.source_members = exposed;
                dest.obs.generation = Some(dest.obs.generation.unwrap_or(0) + 1);
            }
        }
        Ok(())
    }

    /// One planner pass of `side`; returns the plan and whether the backend did anything.
    pub async fn pass(&mut self, side: Side) -> Result<(Plan, bool)> {
        self.observe(side).await?;
        let m = &self.migrations[idx(side)];
        let p = plan::plan(&m.spec, &m.obs);
        let acted = self.apply(side, &p).await?;
        let previous = std::mem::replace(
            &mut self.migrations[idx(side)].obs.previous,
            p.status.clone(),
        );
        self.condition_events(side, &p, &previous);
        Ok((p, acted))
    }

    /// Passes until the step is ready, or `stop` holds after a pass (the abort scenario stops
    /// the join after the first learner was added).
    pub async fn drive(&mut self, side: Side, stop: impl Fn(&Lab) -> bool) -> Result<()> {
        if self.control.is_some() {
            return self.gardenlet_wait(side, stop).await;
        }
        let deadline = Instant::now() + STEP_BUDGET;
        loop {
            let (p, acted) = self.pass(side).await?;
            if p.status.step_ready || stop(self) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(Error::Timeout {
                    what: format!(
                        "{} step {:?} to be ready: {:?}",
                        specs::seed_name(side),
                        p.step,
                        p.status.conditions
                    ),
                    after: STEP_BUDGET,
                });
            }
            // A pass that changed nothing waits for the world (a member catching up).
            if !acted {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }

    /// Sets `step` on `side` and drives it until ready.
    pub async fn step(&mut self, side: Side, step: Step) -> Result<()> {
        self.set_step(side, step).await?;
        self.drive(side, |_| false).await
    }

    /// An event per condition whose status changed in this pass.
    fn condition_events(&mut self, side: Side, p: &Plan, previous: &EtcdMigrationStatus) {
        for c in &p.status.conditions {
            let old = previous.conditions.iter().find(|o| o.type_ == c.type_);
            if old.is_none_or(|o| o.status != c.status) {
                self.event(format!(
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
}

/// The current time, RFC 3339 (the planner's condition and annotation times).
pub fn now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    rfc3339(secs)
}

fn rfc3339(secs: u64) -> String {
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = i64::try_from(days).unwrap_or(0) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn rfc3339_dates() {
        assert_eq!(super::rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(super::rfc3339(951_782_400 + 3_661), "2000-02-29T01:01:01Z");
        assert_eq!(super::rfc3339(1_767_225_599), "2025-12-31T23:59:59Z");
    }
}
