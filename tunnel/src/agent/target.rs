//! The agent's HTTP/2 service: answers the server's probe, and for `CONNECT host:port` checks
//! the allow-list, dials the target and pipes bytes. Never dials a target outside the list.

use crate::metrics::Metrics;
use crate::pipe::{pipe, End, Stream};
use bytes::Bytes;
use h2::server::SendResponse;
use h2::RecvStream;
use hyper::{Method, Request, Response, StatusCode};
use isthmus_config::AllowRule;
use std::future::{poll_fn, Future};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::sync::watch;

/// What every stream of a session needs.
#[derive(Debug)]
pub(crate) struct Targets {
    pub(crate) allow: Vec<AllowRule>,
    pub(crate) dial_timeout: Duration,
    pub(crate) metrics: Metrics,
}

/// The agent's half of one connection's drain handshake (described in `server/session.rs`).
#[derive(Debug)]
pub(crate) struct Leave {
    /// The server holds a `/drain` request: it stops opening streams when that is answered.
    watched: AtomicBool,
    /// Set when this connection should drain: answers `/drain`.
    asked: watch::Sender<bool>,
    /// Set by the server's `/drained`: it opens no more streams here.
    acked: watch::Sender<bool>,
}

impl Leave {
    pub(crate) fn new() -> Self {
        Self {
            watched: AtomicBool::new(false),
            asked: watch::Sender::new(false),
            acked: watch::Sender::new(false),
        }
    }

    /// Whether the server takes part in the handshake.
    pub(crate) fn watched(&self) -> bool {
        self.watched.load(Ordering::SeqCst)
    }

    /// Answers the server's `/drain` (also ends that request when the connection ends).
    pub(crate) fn ask(&self) {
        self.asked.send_replace(true);
    }

    /// Returns once the server said it opens no more streams here.
    pub(crate) async fn acked(&self) {
        let mut rx = self.acked.subscribe();
        let _ = rx.wait_for(|a| *a).await;
    }
}

/// Per-session state of the service.
#[derive(Debug, Clone)]
pub(crate) struct Service {
    pub(crate) targets: Arc<Targets>,
    /// Set once the server's probe arrived: the session works both ways.
    pub(crate) verified: watch::Sender<bool>,
    pub(crate) leave: Arc<Leave>,
}

/// Answers `code` and ends the stream.
fn answer(respond: &mut SendResponse<Bytes>, code: StatusCode) {
    let mut r = Response::new(());
    *r.status_mut() = code;
    // An error: the server reset the stream or the session ended; nobody is left to tell.
    let _ = respond.send_response(r, true);
}

/// Runs `work` unless the server resets the stream first (it gave up: its CONNECT timed out,
/// or it stops); `None` then.
async fn unless_reset<F: Future>(respond: &mut SendResponse<Bytes>, work: F) -> Option<F::Output> {
    tokio::select! {
        r = work => Some(r),
        _ = poll_fn(|cx| respond.poll_reset(cx)) => None,
    }
}

impl Service {
    /// Serves one stream the server opened: its task runs until the stream is over.
    pub(crate) async fn handle(self, req: Request<RecvStream>, mut respond: SendResponse<Bytes>) {
        if req.method() == Method::GET {
            match req.uri().path() {
                "/ping" => {
                    self.verified.send_replace(true);
                    return answer(&mut respond, StatusCode::OK);
                }
                "/drain" => {
                    self.leave.watched.store(true, Ordering::SeqCst);
                    let mut asked = self.leave.asked.subscribe();
                    if unless_reset(&mut respond, asked.wait_for(|a| *a))
                        .await
                        .is_some()
                    {
                        answer(&mut respond, StatusCode::OK);
                    }
                    return;
                }
                "/drained" => {
                    self.leave.acked.send_replace(true);
                    return answer(&mut respond, StatusCode::OK);
                }
                _ => {}
            }
        }
        if req.method() != Method::CONNECT {
            return answer(&mut respond, StatusCode::METHOD_NOT_ALLOWED);
        }
        let t = &self.targets;
        let Some((host, port)) = req
            .uri()
            .authority()
            .and_then(|a| Some((a.host().to_owned(), a.port_u16()?)))
        else {
            t.metrics.dial("denied", "bad_target");
            return answer(&mut respond, StatusCode::BAD_REQUEST);
        };
        let tcp = match unless_reset(&mut respond, self.dial(&host, port)).await {
            Some(Ok(tcp)) => tcp,
            Some(Err(code)) => return answer(&mut respond, code),
            None => return,
        };
        let _counted = t.metrics.stream();
        let send = match respond.send_response(Response::new(()), false) {
            Ok(send) => send,
            Err(e) => {
                tracing::debug!(error = %e, "stream reset before the answer");
                return;
            }
        };
        let stream = Stream {
            send,
            recv: req.into_body(),
        };
        pipe(tcp, stream, Bytes::new(), End::Agent, &t.metrics).await;
    }

    /// Resolves, filters by the allow-list, dials. The status says why not.
    async fn dial(&self, host: &str, port: u16) -> Result<TcpStream, StatusCode> {
        let t = &self.targets;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let addrs: Vec<SocketAddr> = match host.parse() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            // Names are resolved here, in the shoot, where cluster DNS answers them.
            Err(_) => {
                match tokio::time::timeout(t.dial_timeout, tokio::net::lookup_host((host, port)))
                    .await
                {
                    Ok(Ok(a)) => a.collect(),
                    _ => {
                        t.metrics.dial("failed", "resolve");
                        return Err(StatusCode::BAD_GATEWAY);
                    }
                }
            }
        };
        let allowed: Vec<SocketAddr> = addrs
            .into_iter()
            .filter(|a| t.allow.iter().any(|r| r.allows(*a)))
            .collect();
        if allowed.is_empty() {
            t.metrics.dial("denied", "not_allowed");
            tracing::info!(%host, port, "target not allowed");
            return Err(StatusCode::FORBIDDEN);
        }
        let mut code = StatusCode::BAD_GATEWAY;
        for addr in allowed {
            match tokio::time::timeout(t.dial_timeout, TcpStream::connect(addr)).await {
                Ok(Ok(tcp)) => {
                    let _ = tcp.set_nodelay(true);
                    t.metrics.dial("ok", "connected");
                    return Ok(tcp);
                }
                Ok(Err(e)) => {
                    let reason = match e.kind() {
                        std::io::ErrorKind::ConnectionRefused => "refused",
                        std::io::ErrorKind::HostUnreachable
                        | std::io::ErrorKind::NetworkUnreachable => "unreachable",
                        _ => "error",
                    };
                    t.metrics.dial("failed", reason);
                    tracing::info!(%addr, error = %e, "dial failed");
                }
                Err(_) => {
                    t.metrics.dial("failed", "timeout");
                    code = StatusCode::GATEWAY_TIMEOUT;
                }
            }
        }
        Err(code)
    }
}
