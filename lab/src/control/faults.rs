//! The control-plane faults, in the destination seed, while its Join runs: the controller
//! holding the Lease killed (the other replica must take the Lease and finish the step; the
//! killed one starts again), or the seed's kube-apiserver restarted.

use super::controller::LEASE_SECONDS;
use super::Controllers;
use crate::error::{Error, Result};
use crate::lab::Lab;
use crate::options::Scenario;
use crate::side::Side;
use std::time::Duration;
use tokio::time::Instant;

impl Controllers {
    /// Injects `scenario`'s fault (the others have none here).
    pub(super) async fn fault(&mut self, lab: &mut Lab, scenario: Scenario) -> Result<()> {
        match scenario {
            Scenario::KillController => self.kill_controller(lab).await,
            Scenario::RestartSeedApi => {
                let t0 = Instant::now();
                let seed = &lab.world.topo.destination;
                let api = &mut self.plane.seeds[Side::Destination.index()].api;
                let how = api.restart(seed).await?;
                lab.record.event(format!(
                    "destination seed kube-apiserver restarted ({how}), ready again after {:.1} s",
                    t0.elapsed().as_secs_f64()
                ));
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// `kill -9` of the destination controller holding the Lease; waits until another one
    /// holds it, then starts the killed one again (a standby now).
    async fn kill_controller(&mut self, lab: &mut Lab) -> Result<()> {
        let t0 = Instant::now();
        let killed = self.plane.kill_leader(Side::Destination).await?;
        lab.record.event(format!(
            "kill -9 of the destination controller {killed} (Lease holder)"
        ));
        let deadline = t0 + Duration::from_secs(10 * LEASE_SECONDS);
        let holder = loop {
            let t_ms = lab.record.now_ms();
            match self.watch_lease(Side::Destination, t_ms).await? {
                Some(h) if h != killed => break h,
                _ if Instant::now() > deadline => {
                    return Err(Error::Timeout {
                        what: "the other destination controller to take the Lease".into(),
                        after: deadline - t0,
                    })
                }
                _ => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        };
        lab.record.event(format!(
            "{holder} took the destination Lease {:.1} s after the kill",
            t0.elapsed().as_secs_f64()
        ));
        self.plane.restart_replica(Side::Destination, &killed)?;
        lab.record
            .event(format!("{killed} started again (a standby now)"));
        Ok(())
    }
}
