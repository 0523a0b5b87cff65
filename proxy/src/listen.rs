//! Binding listener sockets and running their accept loops.

use crate::conn;
use crate::metrics::{ListenerLabels, Metrics};
use crate::snapshot::Snapshot;
use std::io;
use std::net::SocketAddr;
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
pub fn bind_group(addr: SocketAddr, n: usize) -> io::Result<Vec<std::net::TcpListener>> {
    let first = bind_std(addr)?;
    let bound = first.local_addr()?;
    let mut group = vec![first];
    for _ in 1..n {
        group.push(bind_std(bound)?);
    }
    Ok(group)
}

/// A non-blocking listening socket not yet registered with any runtime, so that it can be
/// handed to the runtime that will accept on it.
fn bind_std(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(4096)?;
    Ok(socket.into())
}

/// Applies TCP keepalive settings to a connected socket.
pub fn set_keepalive(
    stream: &tokio::net::TcpStream,
    k: &isthmus_config::KeepaliveConfig,
) -> io::Result<()> {
    let ka = socket2::TcpKeepalive::new()
        .with_time(k.time.get())
        .with_interval(k.interval.get())
        .with_retries(k.probes);
    socket2::SockRef::from(stream).set_tcp_keepalive(&ka)
}

/// Everything an accept loop needs, shared by all of them.
#[derive(Debug)]
pub struct Shared {
    pub snapshot: RwLock<Arc<Snapshot>>,
    pub metrics: Arc<Metrics>,
    /// Every connection task, so that a drain can wait for them.
    pub connections: TaskTracker,
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
/// snapshot current at accept time and keeps it for its whole life, in a task of the runtime
/// this loop runs on. `pending` is shared by every accept loop of the listener, so that
/// `max_pending_hellos` caps the listener, not each of its sockets.
pub async fn accept_loop(
    listener: TcpListener,
    name: String,
    shared: Arc<Shared>,
    pending: Arc<crate::conn::Pending>,
    stop: CancellationToken,
) {
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
                    warn!(listener = %name, error = %e, "accept failed, backing off");
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
        // The global cap counts connection tasks; the one over it is closed (and counted)
        // by its own task so that the accept loop never waits on it.
        let over = shared.connections.len() >= snapshot.config.max_connections;
        drop(snapshot);
        shared.connections.spawn(conn::handle(
            sock,
            peer,
            spec,
            shared.metrics.clone(),
            pending.clone(),
            over,
        ));
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
