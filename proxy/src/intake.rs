//! The intake of one accepted connection, under one deadline and into one buffer: admission
//! (a PROXY header from a trusted peer, the listener's allow-list, the source's caps, a
//! pending slot), then the ClientHello (or the CONNECT request) read into the buffer that is
//! later replayed, its route looked up, and the route's own allow-list checked.

//!
//! One accepted connection is one [`Handler`] (as mini-redis's per-connection object): what
//! its task needs, owned, with the steps as methods: [`Handler::admit`] here,
//! `Handler::forward` in `forward.rs`, `Handler::run` (the steps in order) in `conn.rs`.
//! `intake/hello.rs` only parses, `intake/down.rs` reads, `intake/reject.rs` says why a
//! connection was refused and what its client is told.

mod down;
mod hello;
mod reject;

pub use down::Down;
pub use reject::Reject;

use crate::http_connect;
use crate::metrics::Metrics;
use crate::proxy_protocol::{self, Addresses, Header};
use crate::snapshot::{ListenerSpec, Route};
use crate::sources::{ActiveGuard, Sources};
use crate::splice::Splicer;
use isthmus_config::{Cidr, ListenerKind, ProxyProtocolMode};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;
use tokio_util::task::TaskTracker;
use tracing::{debug, field};

/// One accepted connection's task: the listener's spec from the snapshot current at accept
/// time, the client's address, and what every connection of its accept loop shares.
#[derive(Debug)]
pub struct Handler {
    pub spec: Arc<ListenerSpec>,
    /// The client's address as the socket has it (a PROXY header may name another).
    pub peer: SocketAddr,
    pub metrics: Arc<Metrics>,
    /// Per-source counts and the pending slots of the listener (all its accept loops).
    pub sources: Arc<Sources>,
    /// The splicer of the runtime this connection's accept loop runs on.
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

/// What the intake phase learned.
pub struct Intake {
    pub route: Arc<Route>,
    /// The client's addresses from a PROXY header; `None` means the socket's own.
    pub client: Option<Addresses>,
    /// Bytes to replay to the upstream (the ClientHello, or what followed the CONNECT head).
    pub replay: Vec<u8>,
    /// Counts the connection as open until it closes (handed on to the splicer).
    pub active: ActiveGuard,
}

// TCP_NODELAY and keepalive come with the accepted socket: they are set on the listening
// socket (Linux passes them on), which saves five system calls per connection.
//
// Admission, in order: a PROXY header from a trusted peer (outside the pending slots: only
// the load balancer gets there, and it sends the header with its first bytes), the source's
// allow-list and connection cap, then a pending slot for the hello (the oldest pending
// connection of the source, or of the listener, is evicted to make room).
//
// Returns the connection with what was learnt, or `None` once a rejected one is answered.
impl Handler {
    pub async fn admit(&self, mut down: Down, mut active: ActiveGuard) -> Option<(Down, Intake)> {
        let spec = &*self.spec;
        let deadline = Instant::now() + spec.hello_timeout;
        let mut buf = Vec::new();
        let mut client = None;
        let trusted = spec.proxy_protocol != ProxyProtocolMode::None
            && Cidr::any_contains(&spec.trusted_proxies, self.peer.ip());
        if trusted {
            let cap = intake_cap(spec);
            let header = read_proxy_header(&mut down, &mut buf, spec.proxy_protocol, cap);
            match tokio::time::timeout_at(deadline, header).await {
                Ok(Ok(Some(Header::Proxied(a)))) => {
                    tracing::Span::current().record("client", field::display(a.source));
                    client = Some(a);
                }
                Ok(Ok(_)) => {}
                Ok(Err(r)) => return self.refuse(down, r).await,
                Err(_) => return self.refuse(down, Reject::Timeout).await,
            }
        } else if spec.proxy_protocol == ProxyProtocolMode::Require {
            return self.refuse(down, Reject::UntrustedProxy).await;
        }
        let source = client.map_or(self.peer.ip(), |a| a.source.ip());
        if !spec.allowed_sources.is_empty() && !Cidr::any_contains(&spec.allowed_sources, source) {
            return self.refuse(down, Reject::SourceNotAllowed).await;
        }
        match self.sources.open(source, spec.max_connections_per_source) {
            Some(g) => active.set_source(g),
            None => return self.refuse(down, Reject::TooManyConnectionsPerSource).await,
        }
        let (route, replay) = {
            let (_slot, evicted) =
                self.sources
                    .wait(source, spec.max_pending_per_source, spec.max_pending);
            spec.pending.inc();
            let _gauge = PendingGauge(spec);
            // An untrusted peer's PROXY header is looked for only to refuse it.
            let untrusted_header = !trusted && spec.proxy_protocol == ProxyProtocolMode::Accept;
            let reading =
                tokio::time::timeout_at(deadline, route(&mut down, spec, buf, untrusted_header));
            let result = tokio::select! {
                r = reading => r,
                Ok(()) = evicted => Ok(Err(IntakeError::Reject(Reject::Evicted))),
            };
            match result {
                Ok(Ok(i)) => i,
                Ok(Err(IntakeError::Reject(r))) => return self.refuse(down, r).await,
                Ok(Err(IntakeError::Http(status, reason))) => {
                    self.metrics.reject(&spec.name, reason);
                    if let Ok(s) = down.registered() {
                        let _ = s.write_all(&http_connect::response(status)).await;
                    }
                    return None;
                }
                Err(_) => return self.refuse(down, Reject::Timeout).await,
            }
        };
        if !route.sources.admits(source) {
            return self.refuse(down, Reject::RouteSourceNotAllowed).await;
        }
        let intake = Intake {
            route,
            client,
            replay,
            active,
        };
        Some((down, intake))
    }

    /// Answers and closes a rejected connection; `None` for [`Handler::admit`] to return.
    async fn refuse<T>(&self, down: Down, reason: Reject) -> Option<T> {
        self.reject(down, reason).await;
        None
    }

    /// Counts a refused connection, tells its client why if it should learn it, and closes it.
    pub async fn reject(&self, mut down: Down, reason: Reject) {
        let spec = &*self.spec;
        self.metrics.reject(&spec.name, reason.as_str());
        debug!(reason = reason.as_str(), "rejected");
        let answer = match spec.kind {
            // An HTTP client gets an HTTP status, never a TLS alert.
            ListenerKind::HttpConnect => reject::http_status(reason).map(http_connect::response),
            ListenerKind::TlsPassthrough if spec.reject_with_alert => {
                reason.alert().map(|a| reject::alert_record(a).to_vec())
            }
            ListenerKind::TlsPassthrough => None,
        };
        if let (Some(bytes), Ok(down)) = (answer, down.registered()) {
            let _ = down.write_all(&bytes).await;
            let _ = down.shutdown().await;
        }
    }
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

/// Reads the ClientHello or CONNECT request (after refusing an untrusted PROXY header) and
/// looks its route up; the route and the bytes to replay.
async fn route(
    down: &mut Down,
    spec: &ListenerSpec,
    mut buf: Vec<u8>,
    untrusted_header: bool,
) -> Result<(Arc<Route>, Vec<u8>), IntakeError> {
    let span = tracing::Span::current();
    let cap = intake_cap(spec);
    if untrusted_header {
        refuse_proxy_header(down, &mut buf, cap).await?;
    }
    let route = match spec.kind {
        ListenerKind::TlsPassthrough => {
            let sni = read_client_hello(down, &mut buf, cap).await?;
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
    Ok((route, buf))
}

async fn read_proxy_header(
    down: &mut Down,
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
        // A v2 header may carry TLVs beyond a small hello cap's room (512 bytes).
        down.read_more(buf, cap.max(proxy_protocol::V2_MAX_LEN))
            .await?;
    }
}

/// Refuses an untrusted peer's PROXY header at its signature (what it announces is never
/// waited for); other bytes stay in `buf` for the hello.
async fn refuse_proxy_header(down: &mut Down, buf: &mut Vec<u8>, cap: usize) -> Result<(), Reject> {
    loop {
        match proxy_protocol::detect(buf) {
            proxy_protocol::Detected::Absent => return Ok(()),
            proxy_protocol::Detected::Header => return Err(Reject::UntrustedProxy),
            proxy_protocol::Detected::NeedMore => {
                down.read_more(buf, cap).await?;
            }
        }
    }
}

async fn read_connect_request(
    down: &mut Down,
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
        match down.read_more(buf, spec.max_request_bytes).await {
            Ok(_) => {}
            Err(Reject::TooLarge) => return Err(IntakeError::Http(431, "too_large")),
            Err(r) => return Err(r.into()),
        }
    }
}

/// The SNI a client asked for, if any. `buf` may already hold bytes (after a PROXY
/// header); on return it holds every byte of the hello, for replay. The caller bounds the time.
async fn read_client_hello(
    down: &mut Down,
    buf: &mut Vec<u8>,
    max_bytes: usize,
) -> Result<Option<String>, Reject> {
    loop {
        if let Some(parsed) = hello::sni(buf) {
            return parsed;
        }
        down.read_more(buf, max_bytes).await?;
    }
}
