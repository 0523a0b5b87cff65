//! One open connection's state: two sockets, two directions, what keeps it counted open and,
//! for the few that have them, its limits and span. Its I/O is `turn.rs`.

use super::flow::Flow;
use super::limits::{End, LimitsAndSpan};
use super::pair::OpenGuards;
use crate::metrics::LimitLabels;
use mio::net::TcpStream;
use std::io;
use tracing::debug;

/// One open connection: two sockets, two directions.
#[derive(Debug)]
pub struct Conn {
    pub down: TcpStream,
    pub up: TcpStream,
    /// Client to upstream.
    pub d2u: Flow,
    /// Upstream to client.
    pub u2d: Flow,
    pub _guards: OpenGuards,
    /// Limits, and the connection's span when it is enabled; most connections have neither.
    pub limits_and_span: Option<Box<LimitsAndSpan>>,
}

impl Conn {
    pub fn debug_error(&self, e: &io::Error) {
        if let Some(x) = &self.limits_and_span {
            x.span.in_scope(|| debug!(error = %e, "closed with error"));
        }
    }

    /// Counts a close by a limit and logs it in the connection's span; dropping the sockets
    /// closes them, dropping the guards counts the connection closed.
    pub fn close(self, end: End) {
        let Some(x) = self.limits_and_span else {
            return;
        };
        let limit = match end {
            End::Idle => Some("idle_timeout"),
            End::MaxDuration => Some("max_connection_duration"),
            End::Closed | End::Failed => None,
        };
        if let Some(limit) = limit {
            x.metrics
                .closed_by_limit
                .get_or_create(&LimitLabels {
                    upstream: x.upstream.to_string(),
                    limit,
                })
                .inc();
        }
        x.span.in_scope(|| debug!(?end, "closed"));
    }
}
