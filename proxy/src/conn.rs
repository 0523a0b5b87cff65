//! One downstream connection: optional PROXY header, then the ClientHello (or the CONNECT
//! request), route, connect under the upstream's policy, send a PROXY header if asked, replay
//! the buffered bytes unchanged, splice.

use crate::duplex;
use crate::hello::{self, Reject};
use crate::http_connect;
use crate::metrics::{LimitLabels, Metrics};
use crate::proxy_protocol::{self, Addresses, Header};
use crate::snapshot::{ListenerSpec, Route};
use crate::upstream::{self, Failure};
use isthmus_config::{ListenerKind, ProxyProtocolMode, SendProxyProtocol};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tracing::{debug, debug_span, field, warn, Instrument};

/// Counts a listener's connections that have not finished their hello/request yet.
#[derive(Debug, Default)]
pub struct Pending(AtomicUsize);

struct PendingGuard<'a>(&'a Pending, &'a ListenerSpec);

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        self.0 .0.fetch_sub(1, Ordering::Relaxed);
        self.1.pending.dec();
    }
}

/// Handles one accepted connection to completion. Never panics, never returns an error: every
/// outcome is counted and logged here.
///
/// Not an `async fn`: that would hold the instrumented future *and* the block it wraps in its
/// own state, doubling what every open connection's task holds.
pub fn handle(
    down: TcpStream,
    peer: SocketAddr,
    spec: Arc<ListenerSpec>,
    metrics: Arc<Metrics>,
    pending: Arc<Pending>,
    over_capacity: bool,
) -> impl std::future::Future<Output = ()> + Send {
    // A debug span, not info: with the default `info` filter an enabled span costs every
    // connection its formatted fields and a registry slot (~0.45 KiB held while it lives,
    // and the formatting on the accept path). Events at info and above carry their context
    // as fields instead.
    let span = debug_span!("conn", listener = %spec.name, %peer, client = field::Empty, sni = field::Empty, upstream = field::Empty);
    async move {
        spec.active.inc();
        if over_capacity {
            reject(down, &spec, &metrics, Reject::TooManyConnections).await;
        } else {
            serve(down, peer, &spec, &metrics, &pending).await;
        }
        spec.active.dec();
    }
    .instrument(span)
}

/// What the intake phase learned.
struct Intake {
    route: Arc<Route>,
    client: Addresses,
    /// Bytes to replay to the upstream (the ClientHello, or what followed the CONNECT head).
    replay: Vec<u8>,
}

async fn serve(
    mut down: TcpStream,
    peer: SocketAddr,
    spec: &ListenerSpec,
    metrics: &Metrics,
    pending: &Pending,
) {
    let _ = down.set_nodelay(true);
    if let Some(k) = &spec.keepalive {
        let _ = crate::listen::set_keepalive(&down, k);
    }
    let local = down.local_addr().unwrap_or(peer);
    let intake = {
        if pending.0.fetch_add(1, Ordering::Relaxed) >= spec.max_pending {
            pending.0.fetch_sub(1, Ordering::Relaxed);
            return reject(down, spec, metrics, Reject::TooManyPending).await;
        }
        spec.pending.inc();
        let _guard = PendingGuard(pending, spec);
        let deadline = Instant::now() + spec.hello_timeout;
        let client = Addresses {
            source: peer,
            destination: local,
        };
        match tokio::time::timeout_at(deadline, intake(&mut down, spec, client)).await {
            Ok(Ok(i)) => i,
            Ok(Err(IntakeError::Reject(r))) => return reject(down, spec, metrics, r).await,
            Ok(Err(IntakeError::Http(status, reason))) => {
                metrics.reject(&spec.name, reason);
                let _ = down.write_all(&http_connect::response(status)).await;
                return;
            }
            Err(_) => return reject(down, spec, metrics, Reject::Timeout).await,
        }
    };
    forward(down, spec, metrics, intake).await;
}

enum IntakeError {
    Reject(Reject),
    /// An HTTP status to answer (http_connect listeners) and the rejection reason label.
    Http(u16, &'static str),
}

impl From<Reject> for IntakeError {
    fn from(r: Reject) -> Self {
        IntakeError::Reject(r)
    }
}

async fn intake(
    down: &mut TcpStream,
    spec: &ListenerSpec,
    mut client: Addresses,
) -> Result<Intake, IntakeError> {
    let span = tracing::Span::current();
    let mut buf = Vec::new();
    let cap = match spec.kind {
        ListenerKind::TlsPassthrough => spec.max_hello_bytes,
        ListenerKind::HttpConnect => spec.max_request_bytes,
    };
    if spec.proxy_protocol != ProxyProtocolMode::None {
        if let Some(Header::Proxied(a)) =
            read_proxy_header(down, &mut buf, spec.proxy_protocol, cap).await?
        {
            client = a;
        }
        span.record("client", field::display(client.source));
    }
    let route = match spec.kind {
        ListenerKind::TlsPassthrough => {
            let sni = hello::read_client_hello(down, &mut buf, cap).await?;
            if let Some(name) = &sni {
                span.record("sni", name.as_str());
            }
            let route = sni
                .as_deref()
                .and_then(|n| spec.routes.find(n))
                .or(spec.default_route.as_ref());
            match route {
                Some(r) => r.clone(),
                None if sni.is_some() => return Err(Reject::UnknownSni.into()),
                None => return Err(Reject::NoSni.into()),
            }
        }
        ListenerKind::HttpConnect => {
            let request = read_connect_request(down, &mut buf, spec).await?;
            let value = request.header_value.as_deref();
            let route = value
                .and_then(|v| spec.header_routes.find(v))
                .or(spec.default_route.as_ref());
            match (route, value) {
                (Some(r), _) => {
                    buf.drain(..request.head_len);
                    r.clone()
                }
                (None, Some(_)) => return Err(IntakeError::Http(404, "unknown_header_value")),
                (None, None) => return Err(IntakeError::Http(400, "missing_route_header")),
            }
        }
    };
    Ok(Intake {
        route,
        client,
        replay: buf,
    })
}

async fn read_proxy_header(
    down: &mut TcpStream,
    buf: &mut Vec<u8>,
    mode: ProxyProtocolMode,
    cap: usize,
) -> Result<Option<Header>, Reject> {
    loop {
        if !buf.is_empty() {
            match proxy_protocol::parse(buf) {
                proxy_protocol::Parsed::NeedMore => {}
                proxy_protocol::Parsed::Absent if mode == ProxyProtocolMode::Require => {
                    return Err(Reject::ProxyProtocol)
                }
                proxy_protocol::Parsed::Absent => return Ok(None),
                proxy_protocol::Parsed::Header { header, len } => {
                    buf.drain(..len.min(buf.len()));
                    return Ok(Some(header));
                }
                proxy_protocol::Parsed::Invalid(why) => {
                    debug!(why, "invalid PROXY protocol header");
                    return Err(Reject::ProxyProtocol);
                }
            }
        }
        // A v2 header may carry TLVs beyond the hello cap's room; 64 KiB covers any header.
        hello::read_more(down, buf, cap.max(65_536 + 16)).await?;
    }
}

async fn read_connect_request(
    down: &mut TcpStream,
    buf: &mut Vec<u8>,
    spec: &ListenerSpec,
) -> Result<http_connect::Request, IntakeError> {
    loop {
        if !buf.is_empty() {
            match http_connect::parse(buf, &spec.route_header, spec.max_request_bytes) {
                Ok(r) => return Ok(r),
                Err(http_connect::Error::NeedMore) => {}
                Err(http_connect::Error::NotConnect) => {
                    return Err(IntakeError::Http(405, "not_connect"))
                }
                Err(http_connect::Error::Malformed(_)) => {
                    return Err(IntakeError::Http(400, "malformed"))
                }
                Err(http_connect::Error::TooLarge) => {
                    return Err(IntakeError::Http(431, "too_large"))
                }
            }
        }
        match hello::read_more(down, buf, spec.max_request_bytes).await {
            Ok(_) => {}
            Err(Reject::TooLarge) => return Err(IntakeError::Http(431, "too_large")),
            Err(r) => return Err(r.into()),
        }
    }
}

async fn forward(mut down: TcpStream, spec: &ListenerSpec, metrics: &Metrics, intake: Intake) {
    let Intake {
        route,
        client,
        replay,
    } = intake;
    let up_spec = &route.upstream;
    tracing::Span::current().record("upstream", up_spec.name.as_str());
    let counters = route.counters(metrics);
    let connect = spec.kind == ListenerKind::HttpConnect;
    let mut up = match upstream::connect(up_spec, metrics).await {
        Ok(c) => c,
        Err(e) => {
            match e {
                Failure::Overflow(_) => counters.overflow.inc(),
                Failure::Unavailable { .. } => counters.unavailable.inc(),
            };
            warn!(listener = %spec.name, client = %client.source, upstream = %up_spec.name,
                error = %e, "no upstream connection, closing");
            if connect {
                let _ = down.write_all(&http_connect::response(503)).await;
            }
            return;
        }
    };
    counters.forwarded.inc();
    let mut head = Vec::new();
    match up_spec.policy.send_proxy_protocol {
        SendProxyProtocol::None => {}
        SendProxyProtocol::V1 => proxy_protocol::encode_v1(&client, &mut head),
        SendProxyProtocol::V2 => proxy_protocol::encode_v2(&client, &mut head),
    }
    head.extend_from_slice(&replay);
    drop(replay);
    if !head.is_empty() {
        if let Err(e) = up.stream.write_all(&head).await {
            debug!(error = %e, addr = %up.addr, "upstream closed before the buffered bytes were replayed");
            return;
        }
        counters.bytes_to_upstream.inc_by(head.len() as u64);
    }
    drop(head);
    if connect && down.write_all(&http_connect::response(200)).await.is_err() {
        return;
    }
    debug!(addr = %up.addr, "spliced");
    let limits = duplex::Limits {
        idle_timeout: up_spec.policy.idle_timeout.map(|d| d.get()),
        max_duration: up_spec.policy.max_connection_duration.map(|d| d.get()),
    };
    let result = duplex::splice(
        &down,
        &up.stream,
        &counters.bytes_to_upstream,
        &counters.bytes_to_downstream,
        limits,
    )
    .await;
    match result {
        Ok((t, end)) => {
            let limit = match end {
                duplex::End::Closed => None,
                duplex::End::Idle => Some("idle_timeout"),
                duplex::End::MaxDuration => Some("max_connection_duration"),
            };
            if let Some(limit) = limit {
                metrics
                    .closed_by_limit
                    .get_or_create(&LimitLabels {
                        upstream: up_spec.name.clone(),
                        limit,
                    })
                    .inc();
            }
            debug!(
                up = t.downstream_to_upstream,
                down = t.upstream_to_downstream,
                ?end,
                "closed"
            );
        }
        Err(e) => debug!(error = %e, "closed with error"),
    }
}

async fn reject(mut down: TcpStream, spec: &ListenerSpec, metrics: &Metrics, reason: Reject) {
    metrics.reject(&spec.name, reason.as_str());
    debug!(reason = reason.as_str(), "rejected");
    let answer = match spec.kind {
        // An HTTP client gets an HTTP status, never a TLS alert.
        ListenerKind::HttpConnect => http_status(reason).map(http_connect::response),
        ListenerKind::TlsPassthrough if spec.reject_with_alert => {
            reason.alert().map(|a| hello::alert_record(a).to_vec())
        }
        ListenerKind::TlsPassthrough => None,
    };
    if let Some(bytes) = answer {
        let _ = down.write_all(&bytes).await;
        let _ = down.shutdown().await;
    }
}

fn http_status(reason: Reject) -> Option<u16> {
    match reason {
        Reject::Timeout => Some(408),
        Reject::TooManyPending | Reject::TooManyConnections => Some(503),
        Reject::ProxyProtocol => Some(400),
        Reject::TooLarge => Some(431),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;

    /// Every open connection holds its task's future for its whole life, so its size is most
    /// of the memory per idle connection. Printed for the benchmarks' memory analysis; the
    /// bound only catches a large regression (e.g. an unboxed timer or buffer in the state).
    #[tokio::test]
    async fn connection_task_is_small() {
        let yaml = "listeners:\n  - { name: l, address: \"127.0.0.1:0\" }\n";
        let config = isthmus_config::parse_proxy("t.yaml", yaml).unwrap();
        let metrics = Arc::new(Metrics::register(&mut Default::default()));
        let dns = crate::dns::Dns::new(&config.resolver, metrics.clone()).unwrap();
        let snapshot =
            crate::snapshot::Snapshot::compile(config, String::new(), &metrics, &dns, None);
        let spec = snapshot.listeners["l"].clone();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stream = TcpStream::connect(addr).await.unwrap();
        let task = handle(stream, addr, spec, metrics, Arc::default(), false);
        let size = std::mem::size_of_val(&task);
        eprintln!("connection future: {size} bytes");
        let s2 = TcpStream::connect(addr).await.unwrap();
        let s3 = TcpStream::connect(addr).await.unwrap();
        let c = prometheus_client::metrics::counter::Counter::default();
        let sp = duplex::splice(&s2, &s3, &c, &c, duplex::Limits::default());
        eprintln!("splice future: {} bytes", std::mem::size_of_val(&sp));

        // Debug builds lay futures out less tightly; the bound is for optimised builds.
        if !cfg!(debug_assertions) {
            assert!(size <= 2048, "connection future grew to {size} bytes");
        }
    }
}
