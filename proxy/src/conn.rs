//! One downstream connection's intake: optional PROXY header, then the ClientHello (or the
//! CONNECT request), route, connect under the upstream's policy with the PROXY header (if
//! asked) and the buffered bytes as its first flight, then hand the pair to the worker's
//! splicer, which holds it until it closes.

use crate::hello::{self, Reject};
use crate::http_connect;
use crate::metrics::Metrics;
use crate::proxy_protocol::{self, Addresses, Header};
use crate::snapshot::{ListenerSpec, Route};
use crate::sources::{SourceGuard, Sources};
use crate::splice::{self, Keep, Pair, Splicer};
use crate::upstream::{self, Failure};
use isthmus_config::{Cidr, ListenerKind, ProxyProtocolMode, SendProxyProtocol};
use prometheus_client::metrics::gauge::Gauge;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_util::task::TaskTracker;
use tracing::{debug, debug_span, field, warn, Instrument};

/// Counts one open connection in `isthmus_proxy_active_connections{listener}` (and, once its
/// source is known, in that source's count) from creation until dropped, whether by the
/// intake task or, once spliced, by the splicer.
#[derive(Debug)]
pub struct ActiveGuard {
    gauge: Gauge,
    pub(crate) source: Option<SourceGuard>,
}

impl ActiveGuard {
    pub fn new(gauge: Gauge) -> Self {
        gauge.inc();
        ActiveGuard {
            gauge,
            source: None,
        }
    }
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}

/// What every connection of one accept loop shares.
#[derive(Debug, Clone)]
pub struct Ctx {
    pub metrics: Arc<Metrics>,
    /// Per-source counts and the pending slots of the listener (all its accept loops).
    pub sources: Arc<Sources>,
    /// The splicer of the runtime this accept loop runs on.
    pub splicer: Splicer,
    /// Counts intake tasks and spliced connections, for the drain and the global cap.
    pub tracker: TaskTracker,
}

struct PendingGauge<'a>(&'a ListenerSpec);

impl Drop for PendingGauge<'_> {
    fn drop(&mut self) {
        self.0.pending.dec();
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
    ctx: Ctx,
    over_capacity: bool,
) -> impl std::future::Future<Output = ()> + Send {
    // A debug span, not info: with the default `info` filter an enabled span costs every
    // connection its formatted fields and a registry slot (~0.45 KiB held while it lives,
    // and the formatting on the accept path). Events at info and above carry their context
    // as fields instead.
    let span = debug_span!("conn", listener = %spec.name, %peer, client = field::Empty, sni = field::Empty, upstream = field::Empty);
    async move {
        let active = ActiveGuard::new(spec.active.clone());
        if over_capacity {
            reject(down, &spec, &ctx.metrics, Reject::TooManyConnections).await;
        } else {
            serve(down, peer, &spec, &ctx, active).await;
        }
    }
    .instrument(span)
}

/// What the intake phase learned.
struct Intake {
    route: Arc<Route>,
    /// The client's addresses from a PROXY header; `None` means the socket's own.
    client: Option<Addresses>,
    /// Bytes to replay to the upstream (the ClientHello, or what followed the CONNECT head).
    replay: Vec<u8>,
}

// TCP_NODELAY and keepalive come with the accepted socket: they are set on the listening
// socket (Linux passes them on), which saves five system calls per connection.
//
// Admission, in order: a PROXY header from a trusted peer (outside the pending slots: only
// the load balancer gets there, and it sends the header with its first bytes), the source's
// allow-list and connection cap, then a pending slot for the hello (the oldest pending
// connection of the source, or of the listener, is evicted to make room).
async fn serve(
    mut down: TcpStream,
    peer: SocketAddr,
    spec: &ListenerSpec,
    ctx: &Ctx,
    mut active: ActiveGuard,
) {
    let metrics = &*ctx.metrics;
    let deadline = Instant::now() + spec.hello_timeout;
    let mut buf = Vec::new();
    let mut client = None;
    let trusted = spec.proxy_protocol != ProxyProtocolMode::None
        && Cidr::any_contains(&spec.trusted_proxies, peer.ip());
    if trusted {
        let cap = intake_cap(spec);
        let header = read_proxy_header(&mut down, &mut buf, spec.proxy_protocol, cap);
        match tokio::time::timeout_at(deadline, header).await {
            Ok(Ok(Some(Header::Proxied(a)))) => {
                tracing::Span::current().record("client", field::display(a.source));
                client = Some(a);
            }
            Ok(Ok(_)) => {}
            Ok(Err(r)) => return reject(down, spec, metrics, r).await,
            Err(_) => return reject(down, spec, metrics, Reject::Timeout).await,
        }
    } else if spec.proxy_protocol == ProxyProtocolMode::Require {
        return reject(down, spec, metrics, Reject::UntrustedProxy).await;
    }
    let source = client.map_or(peer.ip(), |a| a.source.ip());
    if !spec.allowed_sources.is_empty() && !Cidr::any_contains(&spec.allowed_sources, source) {
        return reject(down, spec, metrics, Reject::SourceNotAllowed).await;
    }
    match ctx.sources.open(source, spec.max_connections_per_source) {
        Some(g) => active.set_source(g),
        None => return reject(down, spec, metrics, Reject::TooManyConnectionsPerSource).await,
    }
    let intake = {
        let (_slot, evicted) =
            ctx.sources
                .wait(source, spec.max_pending_per_source, spec.max_pending);
        spec.pending.inc();
        let _gauge = PendingGauge(spec);
        // An untrusted peer's PROXY header is looked for only to refuse it.
        let untrusted_header = !trusted && spec.proxy_protocol == ProxyProtocolMode::Accept;
        let reading = tokio::time::timeout_at(
            deadline,
            intake(&mut down, spec, buf, client, untrusted_header),
        );
        let result = tokio::select! {
            r = reading => r,
            Ok(()) = evicted => Ok(Err(IntakeError::Reject(Reject::Evicted))),
        };
        match result {
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
    forward(down, peer, spec, ctx, intake, active).await;
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

fn intake_cap(spec: &ListenerSpec) -> usize {
    match spec.kind {
        ListenerKind::TlsPassthrough => spec.max_hello_bytes,
        ListenerKind::HttpConnect => spec.max_request_bytes,
    }
}

async fn intake(
    down: &mut TcpStream,
    spec: &ListenerSpec,
    mut buf: Vec<u8>,
    client: Option<Addresses>,
    untrusted_header: bool,
) -> Result<Intake, IntakeError> {
    let span = tracing::Span::current();
    if untrusted_header
        && read_proxy_header(down, &mut buf, spec.proxy_protocol, intake_cap(spec))
            .await?
            .is_some()
    {
        return Err(Reject::UntrustedProxy.into());
    }
    let cap = intake_cap(spec);
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

async fn forward(
    mut down: TcpStream,
    peer: SocketAddr,
    spec: &ListenerSpec,
    ctx: &Ctx,
    intake: Intake,
    active: ActiveGuard,
) {
    let Intake {
        route,
        client,
        replay,
    } = intake;
    let metrics = &*ctx.metrics;
    let up_spec = &route.upstream;
    tracing::Span::current().record("upstream", up_spec.name.as_str());
    let counters = route.counters(metrics);
    let connect = spec.kind == ListenerKind::HttpConnect;
    // The upstream's first flight: the PROXY header if asked, then the buffered bytes.
    let mut first = match up_spec.policy.send_proxy_protocol {
        SendProxyProtocol::None => replay,
        version => {
            // The local address costs a system call: asked only when a header needs it.
            let client = client.unwrap_or_else(|| Addresses {
                source: peer,
                destination: down.local_addr().unwrap_or(peer),
            });
            // 107: the longest v1 line; the v2 headers written here are shorter.
            let mut head = Vec::with_capacity(107 + replay.len());
            if version == SendProxyProtocol::V1 {
                proxy_protocol::encode_v1(&client, &mut head);
            } else {
                proxy_protocol::encode_v2(&client, &mut head);
            }
            head.extend_from_slice(&replay);
            head
        }
    };
    let up = match upstream::connect(up_spec, metrics, &first).await {
        Ok(c) => c,
        Err(e) => {
            match e {
                Failure::Overflow(_) => counters.overflow.inc(),
                Failure::Unavailable { .. } => counters.unavailable.inc(),
            };
            let source = client.map_or(peer, |c| c.source);
            if let Some(count) = metrics
                .warnings
                .event(&up_spec.name, "no_upstream_connection")
            {
                warn!(listener = %spec.name, client = %source, upstream = %up_spec.name,
                    error = %e, count, "no upstream connection, closing (at most one line per \
                    upstream every 10s; isthmus_proxy_connections_total counts each)");
            }
            if connect {
                let _ = down.write_all(&http_connect::response(503)).await;
            }
            return;
        }
    };
    counters.forwarded.inc();
    counters.bytes_to_upstream.inc_by(up.sent as u64);
    first.drain(..up.sent.min(first.len()));
    if connect && down.write_all(&http_connect::response(200)).await.is_err() {
        return;
    }
    debug!(addr = %up.addr, "spliced");
    let down = match down.into_std() {
        Ok(d) => d,
        Err(e) => return debug!(error = %e, "cannot take the client socket over"),
    };
    let policy = &up_spec.policy;
    let pair = Pair {
        down,
        up: up.stream,
        to_up: first,
        to_up_counter: counters.bytes_to_upstream.clone(),
        to_down_counter: counters.bytes_to_downstream.clone(),
        limits: splice::Limits {
            idle_timeout: policy.idle_timeout.map(|d| d.get()),
            max_duration: policy.max_connection_duration.map(|d| d.get()),
        },
        keep: Keep::new(active, up.slot, ctx.tracker.token()),
        metrics: ctx.metrics.clone(),
        upstream: up_spec.name.as_str().into(),
        span: tracing::Span::current(),
    };
    if let Err(e) = ctx.splicer.adopt(pair) {
        warn!(listener = %spec.name, error = %e, "cannot splice the connection, closing it");
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
        Reject::TooManyConnections | Reject::TooManyConnectionsPerSource => Some(503),
        Reject::ProxyProtocol => Some(400),
        Reject::TooLarge => Some(431),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;

    /// The intake task lives only until the pair is handed to the splicer; its size is what
    /// each connection costs while its ClientHello is read and its upstream connected.
    #[tokio::test]
    async fn intake_task_size() {
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
        let ctx = Ctx {
            metrics,
            sources: Arc::default(),
            splicer: Splicer::start(&tokio::runtime::Handle::current(), Default::default())
                .unwrap(),
            tracker: TaskTracker::new(),
        };
        let task = handle(stream, addr, spec, ctx, false);
        let size = std::mem::size_of_val(&task);
        eprintln!("intake task future: {size} bytes");
        if !cfg!(debug_assertions) {
            assert!(size <= 4096, "intake future grew to {size} bytes");
        }
    }
}
