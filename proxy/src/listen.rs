//! Accept loops: one per listening socket, each handing accepted connections to `conn::handle`.
//! Accepted sockets are not registered with the runtime (`sys::Acceptor`): the intake reads
//! the bytes `TCP_DEFER_ACCEPT` waited for directly and registers a socket only when it has
//! to wait for more (`intake::Down`).

use crate::conn::{self, Ctx, Reject};
use crate::metrics::{ListenerLabels, Metrics};
use crate::snapshot::Snapshot;
use crate::socket;
use crate::sources::ActiveGuard;
use crate::sys::Acceptor;
use isthmus_config::KeepaliveConfig;
use std::sync::{Arc, RwLock};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::warn;

/// Everything an accept loop needs, shared by all of them.
#[derive(Debug)]
pub struct Shared {
    pub snapshot: RwLock<Arc<Snapshot>>,
    pub metrics: Arc<Metrics>,
    /// Every connection: intake tasks and, through tokens, spliced connections, so that a
    /// drain can wait for them and the global cap can count them.
    pub connections: TaskTracker,
    /// Connections that fit into the descriptor limit (see `fds`); the global cap is the
    /// smaller of this and `max_connections`.
    pub fd_ceiling: usize,
}

impl Shared {
    /// The snapshot in effect.
    pub fn current(&self) -> Arc<Snapshot> {
        match self.snapshot.read() {
            Ok(s) => s.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }
}

/// Accepts until `stop` fires. Each connection is handled with the listener's spec from the
/// snapshot current at accept time, in a task of the runtime this loop runs on, and then
/// spliced by that runtime's splicer (`ctx`). `ctx.sources` is shared by every accept loop of
/// the listener, so that `max_pending_hellos` and the per-source caps hold for the listener,
/// not for each of its sockets.
pub async fn accept_loop(
    listener: Acceptor,
    name: String,
    shared: Arc<Shared>,
    ctx: Ctx,
    stop: CancellationToken,
) {
    // The keepalive settings the listening socket carries (`None` inside: off); unknown until
    // the first connection, and re-applied whenever a reload changes them.
    let mut applied: Option<Option<KeepaliveConfig>> = None;
    let errors = shared
        .metrics
        .accept_errors
        .get_or_create_owned(&ListenerLabels {
            listener: name.clone(),
        });
    loop {
        let accepted = tokio::select! {
            _ = stop.cancelled() => return,
            r = listener.accept() => r,
        };
        let (sock, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                errors.inc();
                if !isthmus_admin::backoff::is_per_connection(&e) {
                    if let Some(count) = shared.metrics.warnings.event(&name, "accept_error") {
                        warn!(listener = %name, error = %e, count, "accept failed, backing off");
                    }
                }
                isthmus_admin::backoff::after_accept_error(&e).await;
                continue;
            }
        };
        // The listener may have been removed by a reload that has not stopped this loop yet;
        // such a connection is closed, never routed with a stale table.
        let snapshot = shared.current();
        let Some(spec) = snapshot.listeners.get(&name).cloned() else {
            continue;
        };
        if applied != Some(spec.keepalive) {
            // This connection was accepted with the old settings: it gets them directly.
            for result in [
                socket::apply_keepalive(&listener, spec.keepalive.as_ref()),
                socket::apply_keepalive(&sock, spec.keepalive.as_ref()),
            ] {
                if let Err(e) = result {
                    warn!(listener = %name, error = %e, "cannot set TCP keepalive");
                }
            }
            applied = Some(spec.keepalive);
        }
        // The global cap counts open connections, the listener's its own (`active`, counted
        // from here on, so that a burst of accepts cannot pass it before the tasks run); the
        // one over either is closed (and counted) by its own task so that the accept loop
        // never waits on it.
        let cap = snapshot.config.max_connections.min(shared.fd_ceiling);
        let refuse = if shared.connections.len() >= cap {
            Some(Reject::TooManyConnections)
        } else if spec
            .max_connections
            .is_some_and(|m| usize::try_from(spec.active.get()).unwrap_or(0) >= m)
        {
            Some(Reject::TooManyListenerConnections)
        } else {
            None
        };
        drop(snapshot);
        let active = ActiveGuard::new(spec.active.clone());
        shared
            .connections
            .spawn(conn::handle(sock, peer, spec, ctx.clone(), active, refuse));
    }
}
