//! What the intake hands the splicer: a connected pair of sockets with what the splicer
//! needs to move and account for their bytes, and the guards that count the connection open.

use super::keepalive;
use super::limits::Limits;
use crate::metrics::Metrics;
use crate::pool::Slot;
use crate::sources::ActiveGuard;
use isthmus_config::KeepaliveConfig;
use mio::net::TcpStream;
use prometheus_client::metrics::counter::Counter;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::task::task_tracker::TaskTrackerToken;

/// What an open connection holds until it closes: dropping it updates the gauges, releases
/// the upstream's connection slot and lets a drain know this connection is gone.
#[derive(Debug)]
pub struct OpenGuards {
    _active: ActiveGuard,
    _slot: Slot,
    _token: TaskTrackerToken,
}

impl OpenGuards {
    pub fn new(active: ActiveGuard, slot: Slot, token: TaskTrackerToken) -> Self {
        OpenGuards {
            _active: active,
            _slot: slot,
            _token: token,
        }
    }
}

/// A connected pair, handed over for splicing (the splicer holds it with mio's sockets).
#[derive(Debug)]
pub struct Pair<S = std::net::TcpStream> {
    pub down: S,
    pub up: S,
    /// Bytes for the upstream before anything the client sends next (the part of the
    /// replayed ClientHello the connect did not get out).
    pub to_up: Vec<u8>,
    pub to_up_counter: Counter,
    pub to_down_counter: Counter,
    pub limits: Limits,
    pub guards: OpenGuards,
    /// For `isthmus_proxy_closed_by_limit_total{upstream}`.
    pub metrics: Arc<Metrics>,
    pub upstream: Arc<str>,
    pub span: tracing::Span,
    /// The upstream's keepalive, set on `up` once the connection has lived a second
    /// (`keepalive`): short connections never pay its four system calls.
    pub keepalive: Option<KeepaliveConfig>,
}

impl<S> Pair<S> {
    /// How long the pair may wait to be taken in: until its first timer (a limit, or the
    /// upstream's keepalive); `None` if it has none and only its sockets' events matter.
    pub fn may_wait(&self) -> Option<Duration> {
        let keepalive = self.keepalive.as_ref().map(|k| {
            if keepalive::deferred(k) {
                keepalive::DEFER
            } else {
                Duration::ZERO
            }
        });
        [
            keepalive,
            self.limits.idle_timeout,
            self.limits.max_duration,
        ]
        .into_iter()
        .flatten()
        .min()
    }
}

impl Pair {
    pub fn into_mio(self) -> Pair<TcpStream> {
        Pair {
            down: TcpStream::from_std(self.down),
            up: TcpStream::from_std(self.up),
            to_up: self.to_up,
            to_up_counter: self.to_up_counter,
            to_down_counter: self.to_down_counter,
            limits: self.limits,
            guards: self.guards,
            metrics: self.metrics,
            upstream: self.upstream,
            span: self.span,
            keepalive: self.keepalive,
        }
    }
}
