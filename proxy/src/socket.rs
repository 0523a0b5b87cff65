//! Every socket the proxy opens and every option it sets, in one place: listening sockets
//! (`SO_REUSEADDR`, `SO_REUSEPORT`, `TCP_NODELAY`, `TCP_DEFER_ACCEPT`, keepalive inherited by
//! accepted sockets), the admin socket (no `SO_REUSEPORT`) and upstream sockets
//! (`TCP_NODELAY`, the upstream's keepalive).

use isthmus_config::KeepaliveConfig;
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::time::Duration;
use tokio::net::TcpListener;

/// Binds the admin endpoint: `SO_REUSEADDR` (a restarted process rebinds at once) but not
/// `SO_REUSEPORT`, which the listeners have. With it a listener configured on the admin port
/// joined the admin socket's group and the kernel spread the kubelet's probes over both: every
/// pod flapped NotReady and was restarted (issue 47, point 1). Without it such a listener's
/// bind fails, as does any other process's.
pub fn bind_admin(addr: SocketAddr) -> io::Result<TcpListener> {
    TcpListener::from_std(listening(addr, 1024, |_| Ok(()))?.into())
}

/// A non-blocking listening socket with `SO_REUSEADDR` (a restarted process rebinds at once)
/// and what `options` sets before it binds.
fn listening(
    addr: SocketAddr,
    backlog: i32,
    options: impl FnOnce(&socket2::Socket) -> io::Result<()>,
) -> io::Result<socket2::Socket> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    socket.set_reuse_address(true)?;
    options(&socket)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(backlog)?;
    Ok(socket)
}

/// [`bind_admin`], retried every 100 ms for up to `wait` while the address is in use: a
/// process restarted in place (same network namespace, not a new pod) finds its predecessor
/// still holding the admin port while it drains, for at most its drain delay and timeout.
pub async fn bind_admin_when_free(addr: SocketAddr, wait: Duration) -> io::Result<TcpListener> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        match bind_admin(addr) {
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
                if tokio::time::Instant::now() >= deadline {
                    return Err(e);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => return other,
        }
    }
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

/// One listening socket with `SO_REUSEADDR` and `TCP_DEFER_ACCEPT` (see [`bind_group`]), not
/// shared with other processes (no `SO_REUSEPORT`): for a server that is not the proxy (the
/// tunnel server's agents listener), which needs `TCP_DEFER_ACCEPT` from the one module
/// allowed `unsafe` code.
pub fn bind_deferred(addr: SocketAddr, defer: Duration) -> io::Result<std::net::TcpListener> {
    let socket = listening(addr, 1024, |_| Ok(()))?;
    crate::sys::set_defer_accept(&socket, defer)?;
    Ok(socket.into())
}

/// A non-blocking listening socket not yet registered with any runtime, so that it can be
/// handed to the runtime that will accept on it. TCP_NODELAY is set here because accepted
/// sockets inherit it (Linux), as they inherit keepalive (see [`apply_keepalive`]).
fn bind_std(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    let socket = listening(addr, 4096, |s| {
        s.set_reuse_port(true)?;
        s.set_tcp_nodelay(true)
    })?;
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
pub fn apply_keepalive(socket: &impl AsFd, k: Option<&KeepaliveConfig>) -> io::Result<()> {
    match k {
        Some(k) => set_keepalive(socket, k),
        None => socket2::SockRef::from(socket).set_keepalive(false),
    }
}

/// A non-blocking, close-on-exec socket for connecting to an upstream at `addr`, with
/// TCP_NODELAY. Keepalive comes later, from the splicer, once the connection has lived a
/// second (`splice/keepalive.rs`).
pub fn upstream(addr: SocketAddr) -> io::Result<socket2::Socket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(
        Domain::for_address(addr),
        Type::STREAM.nonblocking().cloexec(),
        Some(Protocol::TCP),
    )?;
    socket.set_tcp_nodelay(true)?;
    Ok(socket)
}
