//! The record of a run: what the report reads at the end and nothing else. Phases, events,
//! the membership as etcd listed it, leader and quorum at each phase's start, the rolls of peer
//! URLs, the fault whose failures are expected; every entry stamped in ms since the lab started.

use crate::clock::ms;
use crate::report::{Event, Membership, Quorum, Rolled};
use crate::stats::Fault;
use isthmus_seed_world::journal::{self, Journal};
use tokio::time::Instant;

/// Everything the run noted, in order.
#[derive(Debug)]
pub struct Record {
    epoch: Instant,
    /// `(name, start, end)`, ms.
    pub phases: Vec<(String, f64, f64)>,
    /// The membership each time it was asked for.
    pub timeline: Vec<Membership>,
    /// What the migration did or injected, and when.
    pub events: Vec<Event>,
    /// A fault whose failures are expected (see [`Fault`]).
    pub fault: Option<Fault>,
    /// Leader and quorum at the start of each phase.
    pub quorum: Vec<Quorum>,
    /// Members the etcd-druid stand-in rolled to new peer URLs, in order.
    pub rolled: Vec<Rolled>,
}

impl Record {
    /// An empty record whose clock started at `epoch`.
    pub fn new(epoch: Instant) -> Self {
        Self {
            epoch,
            phases: Vec::new(),
            timeline: Vec::new(),
            events: Vec::new(),
            fault: None,
            quorum: Vec::new(),
            rolled: Vec::new(),
        }
    }

    /// When the lab started (every client stamps its requests against it).
    pub fn epoch(&self) -> Instant {
        self.epoch
    }

    /// Milliseconds since the lab started.
    pub fn now_ms(&self) -> f64 {
        ms(self.epoch.elapsed())
    }

    /// Opens a phase (closing the previous one).
    pub fn phase(&mut self, name: &str) {
        let now = self.now_ms();
        if let Some(last) = self.phases.last_mut() {
            last.2 = now;
        }
        tracing::info!(phase = name, t_ms = now as u64, "phase");
        self.phases.push((name.to_string(), now, now));
    }

    /// Closes the last phase.
    pub fn end_phases(&mut self) {
        let now = self.now_ms();
        if let Some(last) = self.phases.last_mut() {
            last.2 = now;
        }
    }

    /// Records an event.
    pub fn event(&mut self, what: impl Into<String>) {
        let what = what.into();
        tracing::info!(%what, "event");
        let t_ms = self.now_ms();
        self.events.push(Event { t_ms, what });
    }

    /// Records the membership as etcd listed it, now.
    pub fn membership(&mut self, members: Vec<String>) {
        let t_ms = self.now_ms();
        self.timeline.push(Membership { t_ms, members });
    }
}

/// The seed world's stand-ins and etcd harness note into the record: events, the rolls of
/// peer URLs, the membership after each change.
impl Journal for Record {
    fn event(&mut self, what: String) {
        Record::event(self, what);
    }

    fn rolled(&mut self, r: journal::Rolled) {
        let since_epoch = r.started.saturating_duration_since(self.epoch.into_std());
        self.rolled.push(Rolled {
            t_ms: ms(since_epoch),
            member: r.member,
            peer_urls: r.peer_urls,
            leader_moved: r.leader_moved,
            took_ms: ms(r.took),
        });
    }

    fn membership(&mut self, members: Vec<String>) {
        Record::membership(self, members);
    }
}
