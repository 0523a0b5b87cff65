//! Accept loops: one [`Listener`] per listening socket and worker (as mini-redis's listener
//! object), each making every accepted connection a `Handler` task (`intake`, `conn`).
//! Accepted sockets are not registered with the runtime (`sys::Acceptor`): the intake reads
//! the bytes `TCP_DEFER_ACCEPT` waited for directly and registers a socket only when it has
//! to wait for more (`intake::Down`).

use crate::intake::{Handler, Reject};
use crate::metrics::{ListenerLabels, Metrics};
use crate::snapshot::Snapshot;
use crate::socket;
use crate::sources::{ActiveGuard, Sources};
use crate::splice::Splicer;
use crate::sys::Acceptor;
use isthmus_config::KeepaliveConfig;
use std::sync::{Arc, RwLock};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::warn;

/// What every accept loop of the proxy reads: the snapshot in effect, the metrics, the count
/// of open connections and its ceiling.
#[derive(Debug)]
pub struct ProxyState {
    pub snapshot: RwLock<Arc<Snapshot>>,
    pub metrics: Arc<Metrics>,
    /// Every connection: intake tasks and, through tokens, spliced connections, so that a
    /// drain can wait for them and the global cap can count them.
    pub connections: TaskTracker,
    /// Connections that fit into the descriptor limit (see `fds`); the global cap is the
    /// smaller of this and `max_connections`.
    pub fd_ceiling: usize,
}

impl ProxyState {
    /// The snapshot in effect.
    pub fn current(&self) -> Arc<Snapshot> {
        match self.snapshot.read() {
            Ok(s) => s.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }
}

/// One accept loop: a listener's socket on one worker, and what its connections share.
#[derive(Debug)]
pub struct Listener {
    pub acceptor: Acceptor,
    /// The listener's name, its key in every snapshot.
    pub name: String,
    pub proxy: Arc<ProxyState>,
    /// Shared by every accept loop of the listener, so that `max_pending_hellos` and the
    /// per-source caps hold for the listener, not for each of its sockets.
    pub sources: Arc<Sources>,
    /// The splicer of the runtime this loop runs on.
    pub splicer: Splicer,
    pub stop: CancellationToken,
}

/// The keepalive settings a listening socket carries.
#[derive(Debug, Clone, Copy, PartialEq)]
enum SocketKeepalive {
    /// Not known until the first connection.
    Unknown,
    /// Set (`None`: off); re-applied whenever a reload changes them.
    Applied(Option<KeepaliveConfig>),
}

impl Listener {
    /// Accepts until `stop` fires. Each connection is handled with the listener's spec from
    /// the snapshot current at accept time, in a task of the runtime this loop runs on, and
    /// then spliced by that runtime's splicer.
    pub async fn run(self) {
        let Listener {
            acceptor: listener,
            name,
            proxy: shared,
            sources,
            splicer,
            stop,
        } = self;
        let mut applied = SocketKeepalive::Unknown;
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
            if applied != SocketKeepalive::Applied(spec.keepalive) {
                // This connection was accepted with the old settings: it gets them directly.
                for result in [
                    socket::apply_keepalive(&listener, spec.keepalive.as_ref()),
                    socket::apply_keepalive(&sock, spec.keepalive.as_ref()),
                ] {
                    if let Err(e) = result {
                        warn!(listener = %name, error = %e, "cannot set TCP keepalive");
                    }
                }
                applied = SocketKeepalive::Applied(spec.keepalive);
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
            let handler = Handler {
                spec,
                peer,
                metrics: shared.metrics.clone(),
                sources: sources.clone(),
                splicer: splicer.clone(),
                tracker: shared.connections.clone(),
            };
            shared.connections.spawn(handler.run(sock, active, refuse));
        }
    }
}
