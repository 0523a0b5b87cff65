//! A running lab: the world it acts on and the record of what happened, and the few things
//! that take both (a phase opened with the leader and quorum it starts with, the membership as
//! etcd lists it, a step of the tunnel's handover). Which driver moves the migration is
//! `crate::driver`'s business; how a run is built and scripted is `crate::migrate`'s.

use crate::error::Result;
use crate::etcd;
use crate::member::{self, MemberRef};
use crate::record::Record;
use crate::report::Quorum;
use crate::side::Side;
use crate::webhook::WebhookLab;
use crate::world::World;
use std::path::Path;
use std::time::Duration;

/// A step of the tunnel's handover, at a phase boundary of the migration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TunnelStep {
    /// The join starts: the temporary agent connects to the destination's tunnel server.
    JoinTemporary,
    /// The DNS move: calls and the regular agent go to the destination (make before break).
    MoveToDestination,
    /// The temporary agent drains and stops (after an abort, calls return to the source).
    DrainTemporary { abort: bool },
}

/// The world and its record.
#[derive(Debug)]
pub struct Lab {
    pub world: World,
    pub record: Record,
}

impl Lab {
    /// Starts the source's 3 members as a seed runs them before any migration: advertising
    /// their in-cluster peer URLs only (the seeds' "cluster DNS" resolves those names from the
    /// start; the exposure and the roll to the exposed URLs come at `Expose`), and waits until
    /// they serve.
    pub async fn start_source(&mut self) -> Result<()> {
        let names: Vec<String> = member::source().iter().map(MemberRef::name).collect();
        self.world.etcd.bootstrap(&names).await?;
        self.record_membership().await;
        Ok(())
    }

    /// Starts the shoot's webhook, called through the source seed's tunnel from the start: a
    /// tunnel server process per seed, the shoot's agents reaching them through each seed's
    /// proxy across a link with the same `rtt`.
    pub async fn start_tunnel(&mut self, bin: &Path, rtt: Duration) -> Result<()> {
        let w = &self.world;
        let webhook = WebhookLab::start(self.record.epoch(), &w.dir, bin, &w.topo, rtt).await?;
        self.world.webhook = Some(webhook);
        self.record
            .event("tunnel: regular agent on the source server, webhook calls start");
        Ok(())
    }

    /// Records the membership as etcd lists it now.
    pub async fn record_membership(&mut self) {
        self.world.etcd.note_membership(&mut self.record).await;
    }

    /// Opens a phase and records where the leader is and how many voters the cluster can
    /// lose there (asked of the voters; a cluster that does not answer within 2 s is recorded
    /// without a leader).
    pub async fn enter(&mut self, name: &str) {
        self.record.phase(name);
        let voters = self.world.voters();
        let urls = self.world.urls(&voters);
        let leader = tokio::time::timeout(Duration::from_secs(2), etcd::leader(&urls))
            .await
            .ok()
            .and_then(|r| r.ok())
            .filter(|l| !l.is_empty());
        let leader_seed = leader
            .as_deref()
            .and_then(member::named)
            .map(|m| self.world.seed(m.side).label.clone());
        let n = voters.len();
        let quorum = n / 2 + 1;
        let in_source = voters.iter().filter(|m| m.side == Side::Source).count();
        let t_ms = self.record.now_ms();
        self.record.quorum.push(Quorum {
            phase: name.to_string(),
            t_ms,
            leader,
            leader_seed,
            voters: n,
            quorum,
            margin: n.saturating_sub(quorum),
            voters_source: in_source,
            voters_destination: n - in_source,
        });
    }

    /// Runs one step of the tunnel handover and records it as an event.
    pub async fn tunnel(&mut self, step: TunnelStep) -> Result<()> {
        let Some(w) = self.world.webhook.as_mut() else {
            return Ok(());
        };
        let what = match step {
            TunnelStep::JoinTemporary => {
                w.join_temporary().await?;
                "tunnel: temporary agent joined the destination server"
            }
            TunnelStep::MoveToDestination => {
                w.move_to_destination().await?;
                "tunnel: webhook calls and the regular agent moved to the destination server"
            }
            TunnelStep::DrainTemporary { abort } => {
                w.drain_temporary(abort).await?;
                "tunnel: temporary agent drained and stopped"
            }
        };
        self.record.event(what);
        Ok(())
    }
}
