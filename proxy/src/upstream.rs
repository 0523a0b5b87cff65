//! Connecting to an upstream under its policy: a connection slot (`max_connections`), the
//! endpoint order of the balancing policy with ejected endpoints left out, every address of a
//! name, `connect_timeout` per address, TCP keepalive, and outlier detection on failures.

use crate::metrics::{Metrics, UpstreamErrorLabels};
use crate::pool::{Slot, Target, FIRST_RESOLUTION_PATIENCE};
use crate::snapshot::Upstream;
use std::io;
use std::net::SocketAddr;
use std::time::Instant;
use tokio::net::TcpStream;

/// An established upstream connection; the slot is released when it is dropped.
#[derive(Debug)]
pub struct Connected {
    pub stream: TcpStream,
    pub addr: SocketAddr,
    /// Held, not read: dropping it releases the connection slot.
    pub _slot: Slot,
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

/// Connects to `up` under its policy.
pub async fn connect(up: &Upstream, metrics: &Metrics) -> Result<Connected, Failure> {
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
        for &addr in addrs.iter() {
            let started = Instant::now();
            let attempt =
                tokio::time::timeout(policy.connect_timeout.get(), TcpStream::connect(addr)).await;
            match attempt {
                Ok(Ok(stream)) => {
                    up.connect_seconds.observe(started.elapsed().as_secs_f64());
                    let _ = stream.set_nodelay(true);
                    if let Some(k) = &policy.tcp_keepalive {
                        let _ = crate::listen::set_keepalive(&stream, k);
                    }
                    slot.connected(index);
                    return Ok(Connected {
                        stream,
                        addr,
                        _slot: slot,
                    });
                }
                Ok(Err(e)) => {
                    count(metrics, up, reason(&e));
                    last = format!("{} ({addr}): {e}", endpoint.label);
                }
                Err(_) => {
                    count(metrics, up, "timeout");
                    last = format!(
                        "{} ({addr}): connect timed out after {}",
                        endpoint.label, policy.connect_timeout
                    );
                }
            }
        }
        up.pool.record_failure(index, &policy.outlier_detection);
    }
    Err(Failure::Unavailable {
        upstream: up.name.clone(),
        last,
    })
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
