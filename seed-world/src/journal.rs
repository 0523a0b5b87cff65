//! Where the seed world notes what it did, as it happens: the lab's record (events with their
//! time, the rolls, the membership timeline of its report) or a test's log.

use std::time::{Duration, Instant};

/// One member restarted onto new peer URLs by a rolling update.
#[derive(Debug, Clone)]
pub struct Rolled {
    /// When its quorum check began.
    pub started: Instant,
    pub member: String,
    pub peer_urls: Vec<String>,
    /// The member led, and leadership went here before it stopped.
    pub leader_moved: Option<String>,
    /// From the quorum check to the restarted member serving.
    pub took: Duration,
}

/// What the stand-ins and the etcd harness report.
pub trait Journal: Send {
    /// Something done or seen (a learner added, a leader moved, a member removed).
    fn event(&mut self, what: String);
    /// A member was rolled onto new peer URLs.
    fn rolled(&mut self, _r: Rolled) {}
    /// The membership as etcd lists it after a change (learners marked).
    fn membership(&mut self, _members: Vec<String>) {}
}

/// A journal that prints each event (a test's output, shown when it fails).
#[derive(Debug, Default, Clone, Copy)]
pub struct Log;

impl Journal for Log {
    fn event(&mut self, what: String) {
        eprintln!("seed world: {what}");
    }
}
