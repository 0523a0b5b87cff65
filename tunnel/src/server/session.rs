//! One agent session on the server: TLS accept, HTTP/2 client handshake, a verifying request,
//! then periodic round-trip probes until the connection ends.

use super::{Counted, Shared};
use crate::Error;
use bytes::Bytes;
use http_body_util::Empty;
use hyper::client::conn::http2::SendRequest;
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpStream;

/// The path of the probe request; the agent answers it without dialing anything.
const PING_URI: &str = "http://isthmus-agent/ping";

/// Runs one session until it ends or the server stops. `handshaking` counts this connection
/// among the handshakes in progress until the handshake is over.
pub(crate) async fn run(
    shared: Arc<Shared>,
    tcp: TcpStream,
    peer: SocketAddr,
    handshaking: Counted,
) {
    let _ = tcp.set_nodelay(true);
    // A TLS handshake that takes longer is abandoned (slowloris protection).
    let timeout = shared.limits.handshake_timeout;
    let tls = match tokio::time::timeout(timeout, shared.acceptor.accept(tcp)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => {
            shared.metrics.handshake(false);
            tracing::warn!(%peer, error = %e, "agent TLS handshake failed");
            return;
        }
        Err(_) => {
            shared.metrics.handshake(false);
            tracing::warn!(%peer, "agent TLS handshake timed out");
            return;
        }
    };
    shared.metrics.handshake(true);
    drop(handshaking);
    let Some(_open) = Counted::try_new(&shared.sessions_open, shared.limits.max_sessions) else {
        shared.limits.refuse("agents", "too_many_sessions");
        tracing::warn!(%peer, max = shared.limits.max_sessions, "too many agent sessions, closing");
        return;
    };
    let mut connecting = shared.metrics.session_state("connecting");
    let (send, conn) = match shared.http2.handshake(TokioIo::new(tls)).await {
        Ok(x) => x,
        Err(e) => {
            tracing::warn!(%peer, error = %e, "HTTP/2 handshake with agent failed");
            return;
        }
    };
    // The connection runs in its own task so that probes awaited below never stop it.
    let mut conn = tokio::spawn(conn);
    let _abort = AbortOnDrop(conn.abort_handle());
    // Verify before use: the session joins the table only after one request has made the
    // round trip, so a half-open session never gets a stream (make before break).
    let verified = tokio::select! {
        r = &mut conn => { tracing::warn!(%peer, result = ?r, "agent session closed before verification"); return; }
        _ = shared.shutdown.cancelled() => return,
        r = probe(send.clone()) => r,
    };
    let rtt = match verified {
        Ok(rtt) => rtt,
        Err(e) => {
            tracing::warn!(%peer, error = %e, "agent session failed verification");
            return;
        }
    };
    connecting.set("active");
    drop(connecting);
    shared.metrics.ping_rtt.observe(rtt.as_secs_f64());
    let session = shared.sessions.add(peer, send.clone(), &shared.metrics);
    tracing::info!(session = session.id, %peer, rtt_ms = rtt.as_secs_f64() * 1e3, "agent session active");
    let mut ticker = tokio::time::interval(shared.probe_interval);
    ticker.tick().await;
    loop {
        tokio::select! {
            r = &mut conn => {
                tracing::info!(session = session.id, %peer, result = ?r, "agent session closed");
                break;
            }
            _ = shared.shutdown.cancelled() => break,
            _ = ticker.tick() => {
                match probe(send.clone()).await {
                    Ok(rtt) => shared.metrics.ping_rtt.observe(rtt.as_secs_f64()),
                    Err(e) => tracing::debug!(session = session.id, error = %e, "probe failed"),
                }
            }
        }
    }
    session.drain();
    shared.sessions.remove(session.id);
}

/// One request/answer round trip on the session.
async fn probe(mut send: SendRequest<Empty<Bytes>>) -> Result<Duration, Error> {
    let req = Request::get(PING_URI)
        .body(Empty::new())
        .map_err(|e| Error::io("probe", std::io::Error::other(e)))?;
    let start = Instant::now();
    send.ready().await?;
    let resp = send.send_request(req).await?;
    if resp.status() != StatusCode::OK {
        return Err(Error::io(
            "probe",
            std::io::Error::other(format!("agent answered {}", resp.status())),
        ));
    }
    Ok(start.elapsed())
}

/// Ends the connection task when the session task ends (server stop, or a panic upstream).
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
