//! The optional limits of a spliced connection (`idle_timeout`, `max_connection_duration`) and
//! when they pass (the splicer's timers, one per connection with a limit, are `timers.rs`).
//! Only connections with a limit (or an enabled span) carry the boxed [`LimitsAndSpan`]; the rest cost
//! nothing here.

use crate::metrics::Metrics;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Optional limits on a spliced connection. Both default to none: etcd peer streams and
/// watches live for days, and cutting them is exactly what we exist to avoid.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Close when no byte moved in either direction for this long.
    pub idle_timeout: Option<Duration>,
    /// Close this long after the splice started, whatever the traffic.
    pub max_duration: Option<Duration>,
}

/// Why a spliced connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// Both sides closed their direction.
    Closed,
    /// A socket failed (reset, broken pipe): both are dropped, passing the reset on.
    Failed,
    /// `idle_timeout` elapsed.
    Idle,
    /// `max_duration` elapsed.
    MaxDuration,
}

/// What a connection with a limit or an enabled span carries besides its sockets.
#[derive(Debug)]
pub struct LimitsAndSpan {
    pub limits: Limits,
    /// When the pair was handed over.
    pub started: Instant,
    /// When a byte last moved.
    pub last: Instant,
    /// Where a close by a limit is counted, under `upstream`.
    pub metrics: Arc<Metrics>,
    pub upstream: Arc<str>,
    pub span: tracing::Span,
}

impl LimitsAndSpan {
    /// When the next limit could pass, if any limit is set.
    pub fn deadline(&self) -> Option<Instant> {
        let max = self.limits.max_duration.map(|d| self.started + d);
        let idle = self.limits.idle_timeout.map(|d| self.last + d);
        match (max, idle) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    pub fn expired(&self, now: Instant) -> Option<End> {
        if self
            .limits
            .max_duration
            .is_some_and(|d| now >= self.started + d)
        {
            return Some(End::MaxDuration);
        }
        if self
            .limits
            .idle_timeout
            .is_some_and(|d| now >= self.last + d)
        {
            return Some(End::Idle);
        }
        None
    }
}
