//! Connecting to an upstream under its policy: a connection slot (`max_connections`), the
//! endpoint order of the balancing policy with ejected endpoints left out, every address of a
//! name, `connect_timeout` per address, and outlier detection on the endpoint's failures. A
//! failure of this process's own (no descriptor, no ephemeral port, no buffer memory) is
//! counted as `local` and never held against the endpoint: under descriptor exhaustion every
//! endpoint would otherwise be ejected in turn, and stay ejected after the pressure went.
//! (The policy's TCP keepalive is set by the splicer, on connections that live a second.)
//!
//! The connection's first flight (PROXY header and replayed ClientHello) is sent as soon as
//! the socket is connected, which is often before `connect(2)` returns (a near upstream: the
//! handshake completes inside the call). Only a handshake still in flight is waited for
//! through the runtime; either way the socket is returned unregistered, for the splicer.

use crate::metrics::{Metrics, UpstreamErrorLabels};
use crate::pool::{Slot, Target, FIRST_RESOLUTION_PATIENCE};
use crate::snapshot::Upstream;
use std::io::{self, Write};
use std::net::SocketAddr;
use std::time::Instant;

/// An established upstream connection; the slot is released when it is dropped.
#[derive(Debug)]
pub struct Connected {
    /// Non-blocking, not registered with any runtime.
    pub stream: std::net::TcpStream,
    pub addr: SocketAddr,
    /// How many bytes of the first flight were sent; the rest is the caller's to send.
    pub sent: usize,
    pub slot: Slot,
}

/// Why no upstream connection was made.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// `max_connections` connections to the upstream are open.
    #[error("upstream {0:?} is at max_connections")]
    Overflow(String),
    /// Every endpoint tried failed; the last error says why.
    #[error("no endpoint of upstream {upstream:?} accepted: {last}")]
    Unavailable { upstream: String, last: String },
}

/// Connects to `up` under its policy and sends what it can of `first`.
pub async fn connect(up: &Upstream, metrics: &Metrics, first: &[u8]) -> Result<Connected, Failure> {
    let policy = &up.policy;
    let Some(mut slot) = up.pool.reserve(policy.max_connections) else {
        return Err(Failure::Overflow(up.name.clone()));
    };
    let mut last = String::from("no endpoint to try");
    for index in up
        .pool
        .order(policy.load_balancing, policy.connect_attempts)
    {
        let Some(endpoint) = up.pool.endpoints.get(index) else {
            continue;
        };
        let addrs: std::sync::Arc<[SocketAddr]> = match &endpoint.target {
            Target::Addr(a) => std::sync::Arc::from(vec![*a]),
            Target::Name(entry) => entry.addrs(FIRST_RESOLUTION_PATIENCE).await,
        };
        if addrs.is_empty() {
            count(metrics, up, "resolve");
            up.pool.record_failure(index, &policy.outlier_detection);
            last = format!("{}: no addresses (not resolved yet)", endpoint.label);
            continue;
        }
        // Whether an address failed for a reason of the endpoint's, not of this process's.
        let mut endpoint_failed = false;
        for &addr in addrs.iter() {
            let started = Instant::now();
            let attempt =
                tokio::time::timeout(policy.connect_timeout.get(), dial(addr, first)).await;
            match attempt {
                Ok(Ok((stream, sent))) => {
                    up.connect_seconds.observe(started.elapsed().as_secs_f64());
                    slot.connected(index);
                    return Ok(Connected {
                        stream,
                        addr,
                        sent,
                        slot,
                    });
                }
                Ok(Err(e)) => {
                    let local = is_local(&e);
                    endpoint_failed |= !local;
                    count(metrics, up, if local { "local" } else { reason(&e) });
                    last = format!("{} ({addr}): {e}", endpoint.label);
                }
                Err(_) => {
                    endpoint_failed = true;
                    count(metrics, up, "timeout");
                    last = format!(
                        "{} ({addr}): connect timed out after {}",
                        endpoint.label, policy.connect_timeout
                    );
                }
            }
        }
        if endpoint_failed {
            up.pool.record_failure(index, &policy.outlier_detection);
        }
    }
    Err(Failure::Unavailable {
        upstream: up.name.clone(),
        last,
    })
}

/// One connection attempt: a non-blocking socket with TCP_NODELAY, `connect`, then `first`
/// sent as soon as the handshake is done. Returns the bytes sent.
async fn dial(addr: SocketAddr, first: &[u8]) -> io::Result<(std::net::TcpStream, usize)> {
    let socket = crate::socket::upstream(addr)?;
    match socket.connect(&addr.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(e) => return Err(e),
    }
    let stream: std::net::TcpStream = socket.into();
    // While the handshake is in flight this says EAGAIN; a refusal already seen is its error.
    match send(&stream, first) {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
        done => return done.map(|n| (stream, n)),
    }
    let registered = tokio::net::TcpStream::from_std(stream)?;
    registered.writable().await?;
    if let Some(e) = registered.take_error()? {
        return Err(e);
    }
    let stream = registered.into_std()?;
    match send(&stream, first) {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok((stream, 0)),
        done => done.map(|n| (stream, n)),
    }
}

/// A non-blocking write, retried when interrupted. An empty `first` still tells whether the
/// socket is connected (`Ok(0)`) or not yet (`EAGAIN`).
fn send(mut stream: &std::net::TcpStream, data: &[u8]) -> io::Result<usize> {
    loop {
        match stream.write(data) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            r => return r,
        }
    }
}

/// Whether a failed dial is this process's or host's doing rather than the endpoint's: out
/// of descriptors (`EMFILE`, `ENFILE`), of ephemeral ports (`EADDRNOTAVAIL`, `EADDRINUSE`),
/// or of memory (`ENOBUFS`, `ENOMEM`).
fn is_local(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(
            libc::EMFILE
                | libc::ENFILE
                | libc::EADDRNOTAVAIL
                | libc::EADDRINUSE
                | libc::ENOBUFS
                | libc::ENOMEM
        )
    )
}

fn reason(e: &io::Error) -> &'static str {
    match e.kind() {
        io::ErrorKind::ConnectionRefused => "refused",
        io::ErrorKind::TimedOut => "timeout",
        io::ErrorKind::HostUnreachable | io::ErrorKind::NetworkUnreachable => "unreachable",
        _ => "other",
    }
}

fn count(m: &Metrics, up: &Upstream, reason: &'static str) {
    m.upstream_connect_errors
        .get_or_create(&UpstreamErrorLabels {
            upstream: up.name.clone(),
            reason,
        })
        .inc();
}
