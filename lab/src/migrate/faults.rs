//! The scenarios' faults in the etcd world: a link cut, a proxy restart or a `kill -9` of the
//! leader in the 5-member phase; the link cut with 6 voters (no quorum anywhere); and the
//! abort before the join completes.

use super::Run;
use crate::clock;
use crate::driver::Driver;
use crate::error::{Error, Result};
use crate::etcd;
use crate::lab::TunnelStep;
use crate::member;
use crate::options::{Options, Scenario, RECOVERY};
use crate::report::Report;
use crate::side::Side;
use crate::stats::Fault;
use isthmus_controller::crd::Step;
use std::time::Duration;

impl<D: Driver> Run<D> {
    /// `five`: 5 voters for `hold`, the scenario's fault in the middle; all five serve again
    /// before the migration goes on (the destination caught up).
    pub(super) async fn five_member_phase(&mut self, opts: &Options) -> Result<()> {
        tokio::time::sleep(opts.hold / 2).await;
        match opts.scenario {
            Scenario::LinkCut { cut } => self.cut_link(cut).await,
            Scenario::ProxyRestart => {
                self.lab.record.event("source proxy: SIGTERM (drain)");
                let w = &mut self.lab.world;
                w.proxies[Side::Source.index()]
                    .restart(&w.topo.source)
                    .await?;
                self.lab.record.event("source proxy: new process serving");
            }
            Scenario::KillLeader => {
                self.kill_leader_and_restart(Duration::from_secs(2)).await?;
            }
            Scenario::Migrate
            | Scenario::Abort
            | Scenario::LinkCutSix { .. }
            | Scenario::KillController
            | Scenario::RestartSeedApi => {}
        }
        tokio::time::sleep(opts.hold / 2).await;
        self.voters_serve().await
    }

    /// The 6-member cut: 3 voters each side, no quorum anywhere until the link returns; the
    /// failures inside it (and [`RECOVERY`] after) are the fault's.
    pub(super) async fn six_member_cut(&mut self, cut: Duration) -> Result<()> {
        let start = self.lab.record.now_ms();
        let link = &self.lab.world.topo.link;
        link.cut();
        self.lab.record.event(format!(
            "link cut for {} ms with 6 voters (3 + 3): no quorum on either side",
            cut.as_millis()
        ));
        tokio::time::sleep(cut).await;
        self.restore_link();
        let end_ms = self.lab.record.now_ms() + clock::ms(RECOVERY);
        self.lab.record.fault = Some(Fault {
            what: "link cut with 6 voters".into(),
            start_ms: start,
            end_ms,
            api_failed: 0,
            etcd_failed: 0,
        });
        self.voters_serve().await?;
        self.lab.record.event("all 6 voters serving again");
        Ok(())
    }

    /// The abort: the join runs until the first destination member was added as a learner;
    /// it stays a learner (still catching up) while the abort is decided.
    /// `abort-live-migration=true` while `DestinationEtcdPeersJoined` is not True: the
    /// destination removes what it added, then the source rolls its members back to their
    /// in-cluster peer URLs and removes its exposure once no connection uses it.
    pub(super) async fn abort(mut self, opts: &Options) -> Result<Report> {
        self.lab.world.etcd.hold_promotion = true;
        self.join_until_first_learner().await?;
        self.lab.enter("abort").await;
        self.lab.record.event("abort-live-migration=true");
        self.step(Side::Destination, Step::Abort).await?;
        self.step(Side::Source, Step::Abort).await?;
        self.lab
            .tunnel(TunnelStep::DrainTemporary { abort: true })
            .await?;
        self.lab.enter("source-after-abort").await;
        tokio::time::sleep(opts.hold).await;
        self.finish(opts, &member::source(), true).await
    }

    /// Cuts the inter-seed link for `cut`, then restores it.
    async fn cut_link(&mut self, cut: Duration) {
        self.lab.world.topo.link.cut();
        self.lab
            .record
            .event(format!("link cut for {} ms", cut.as_millis()));
        tokio::time::sleep(cut).await;
        self.restore_link();
    }

    fn restore_link(&mut self) {
        let link = &self.lab.world.topo.link;
        link.restore();
        let resets = link.resets();
        self.lab
            .record
            .event(format!("link restored ({resets} connections reset)"));
    }

    /// `kill -9` of the current leader, then, after `down`, the restart kubelet would do: the
    /// same member on its data directory.
    async fn kill_leader_and_restart(&mut self, down: Duration) -> Result<()> {
        let cluster = &mut self.lab.world.etcd;
        let leader = cluster.leader().await?;
        if !cluster.is_member(&leader) {
            return Err(Error::State(format!(
                "leader {leader:?} is not a lab member"
            )));
        }
        let start_ms = self.lab.record.now_ms();
        cluster.kill9(&leader)?;
        self.lab
            .record
            .event(format!("kill -9 of the leader {leader}"));
        tokio::time::sleep(down).await;
        // The data directory exists: etcd ignores --initial-cluster and rejoins as itself.
        self.lab.world.etcd.restart(&leader).await?;
        self.lab
            .record
            .event(format!("{leader} restarted on its data directory, serving"));
        // A forced leader loss is the one loss issue 45 excuses: a write in flight to the
        // killed member cannot be retried by etcd's client (it may have been applied), and one
        // forwarded to it waits out etcd's request timeout. Requests that ran into it (started
        // up to a budget before the kill, until the member serves again) are the fault's;
        // nothing after it is, and no acknowledged write may be lost.
        self.lab.record.fault = Some(Fault {
            what: format!("kill -9 of the leader {leader}"),
            start_ms,
            end_ms: self.lab.record.now_ms(),
            api_failed: 0,
            etcd_failed: 0,
        });
        Ok(())
    }

    /// Waits until every voter serves again.
    async fn voters_serve(&self) -> Result<()> {
        for url in self.lab.world.voter_urls() {
            etcd::wait_serving(&url, Duration::from_secs(60)).await?;
        }
        Ok(())
    }
}
