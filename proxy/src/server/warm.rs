//! Readiness after warm-up: a starting proxy reports ready once every upstream name of its
//! configuration has had its first answer (or `resolver.warm_up` has passed). Until then the
//! load balancer keeps sending new connections to the pods that already route them (a rolling
//! update's old pod), instead of to one that would hold each connection until its name
//! resolves, as Envoy warms a cluster before its listener takes traffic. A lost UDP answer
//! costs the resolver its 5 s query timeout, as long as a client's connect timeout.

use crate::pool::Target;
use crate::snapshot::Snapshot;
use std::time::{Duration, Instant};

/// How the warm-up ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Warmed {
    /// Upstream names followed.
    pub names: usize,
    /// Of those, how many had their first answer within the patience.
    pub answered: usize,
    pub took: Duration,
}

/// Waits for the first answer of every upstream name in `snapshot`, all of them within
/// `patience`.
pub(super) async fn first_answers(snapshot: &Snapshot, patience: Duration) -> Warmed {
    let t0 = Instant::now();
    let entries: Vec<_> = snapshot
        .upstreams
        .values()
        .flat_map(|u| u.pool.endpoints.iter())
        .filter_map(|e| match &e.target {
            Target::Name(entry) => Some(entry.clone()),
            Target::Addr(_) => None,
        })
        .collect();
    // The names resolve in their own tasks at once: waiting for one after another, each for
    // what is left of the patience, bounds the whole wait by the patience.
    let mut answered = 0;
    for entry in &entries {
        let left = patience.saturating_sub(t0.elapsed());
        answered += usize::from(entry.first_answer(left).await);
    }
    Warmed {
        names: entries.len(),
        answered,
        took: t0.elapsed(),
    }
}
