//! Binding listener sockets and running their accept loops.

use crate::conn::{self, Ctx};
use crate::metrics::{ListenerLabels, Metrics};
use crate::snapshot::Snapshot;
use isthmus_config::KeepaliveConfig;
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::warn;

/// Binds with `SO_REUSEADDR` and `SO_REUSEPORT`: a reload can bind a listener's new socket
/// while the old one still accepts (make before break), and a new isthmus process can take
/// over a port from an old one during a rolling update.
pub fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    TcpListener::from_std(bind_std(addr)?)
}

/// Binds `n` (at least one) sockets to the same address with `SO_REUSEPORT`, one per worker
/// runtime: the kernel spreads new connections over them, so each connection is accepted and
/// served by one thread with no hand-off between workers. The first socket takes `addr` (port
/// 0 picks a free port); the others join it on the port it got.
///
/// `defer` sets `TCP_DEFER_ACCEPT`: a connection is accepted only once its first bytes have
/// arrived (or after about `defer`, when the kernel gives up waiting), so clients that connect
/// and send nothing sit in the kernel's SYN queue instead of taking pending-hello slots.
/// Every protocol a listener speaks (TLS, HTTP CONNECT, PROXY) has the client speak first.
pub fn bind_group(
    addr: SocketAddr,
    n: usize,
    defer: Duration,
) -> io::Result<Vec<std::net::TcpListener>> {
    let first = bind_std(addr)?;
    let bound = first.local_addr()?;
    let mut group = vec![first];
    for _ in 1..n {
        group.push(bind_std(bound)?);
    }
    for socket in &group {
        crate::sys::set_defer_accept(socket, defer)?;
    }
    Ok(group)
}

/// A non-blocking listening socket not yet registered with any runtime, so that it can be
/// handed to the runtime that will accept on it. TCP_NODELAY is set here because accepted
/// sockets inherit it (Linux), as they inherit keepalive (see [`apply_keepalive`]).
fn bind_std(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.set_nonblocking(true)?;
    socket.set_tcp_nodelay(true)?;
    socket.bind(&addr.into())?;
    socket.listen(4096)?;
    Ok(socket.into())
}

/// Applies TCP keepalive settings to a socket.
pub fn set_keepalive(socket: &impl AsFd, k: &KeepaliveConfig) -> io::Result<()> {
    let ka = socket2::TcpKeepalive::new()
        .with_time(k.time.get())
        .with_interval(k.interval.get())
        .with_retries(k.probes);
    socket2::SockRef::from(socket).set_tcp_keepalive(&ka)
}

/// Sets (or, with `None`, turns off) keepalive on a socket. On a listening socket it applies
/// to every connection accepted afterwards: Linux copies the options into accepted sockets,
/// which saves four system calls per connection.
fn apply_keepalive(socket: &impl AsFd, k: Option<&KeepaliveConfig>) -> io::Result<()> {
    match k {
        Some(k) => set_keepalive(socket, k),
        None => socket2::SockRef::from(socket).set_keepalive(false),
    }
}

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
    listener: TcpListener,
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
                if !is_per_connection(&e) {
                    // EMFILE/ENFILE/ENOBUFS: accepting again at once would spin at 100% CPU
                    // while nothing frees up; back off briefly instead.
                    if let Some(count) = shared.metrics.warnings.event(&name, "accept_error") {
                        warn!(listener = %name, error = %e, count, "accept failed, backing off");
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
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
                apply_keepalive(&listener, spec.keepalive.as_ref()),
                apply_keepalive(&sock, spec.keepalive.as_ref()),
            ] {
                if let Err(e) = result {
                    warn!(listener = %name, error = %e, "cannot set TCP keepalive");
                }
            }
            applied = Some(spec.keepalive);
        }
        // The global cap counts open connections; the one over it is closed (and counted)
        // by its own task so that the accept loop never waits on it.
        let cap = snapshot.config.max_connections.min(shared.fd_ceiling);
        let over = shared.connections.len() >= cap;
        drop(snapshot);
        shared
            .connections
            .spawn(conn::handle(sock, peer, spec, ctx.clone(), over));
    }
}

fn is_per_connection(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
    )
}
