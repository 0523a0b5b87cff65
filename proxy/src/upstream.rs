//! Connecting to an upstream: endpoints in order, the first that accepts wins.

use crate::metrics::{Metrics, UpstreamErrorLabels};
use crate::snapshot::{Endpoint, Upstream};
use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::net::TcpStream;

/// How long one endpoint may take to accept before the next is tried.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Every endpoint failed; the last error says why.
#[derive(Debug, thiserror::Error)]
#[error("no endpoint of upstream {upstream:?} accepted: {last}")]
pub struct Unavailable {
    pub upstream: String,
    pub last: String,
}

/// Connects to the first endpoint (and, for names, the first address) that accepts.
pub async fn connect(
    up: &Upstream,
    metrics: &Metrics,
) -> Result<(TcpStream, SocketAddr), Unavailable> {
    let mut last = String::from("no endpoints");
    for endpoint in &up.endpoints {
        let addrs: Vec<SocketAddr> = match endpoint {
            Endpoint::Addr(a) => vec![*a],
            Endpoint::Host(h) => match tokio::net::lookup_host(h.as_str()).await {
                Ok(a) => a.collect(),
                Err(e) => {
                    count(metrics, up, "resolve");
                    last = format!("{endpoint}: cannot resolve: {e}");
                    continue;
                }
            },
        };
        for addr in addrs {
            let started = Instant::now();
            match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
                Ok(Ok(stream)) => {
                    up.connect_seconds.observe(started.elapsed().as_secs_f64());
                    let _ = stream.set_nodelay(true);
                    return Ok((stream, addr));
                }
                Ok(Err(e)) => {
                    count(metrics, up, reason(&e));
                    last = format!("{endpoint} ({addr}): {e}");
                }
                Err(_) => {
                    count(metrics, up, "timeout");
                    last = format!("{endpoint} ({addr}): connect timed out");
                }
            }
        }
    }
    Err(Unavailable {
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
