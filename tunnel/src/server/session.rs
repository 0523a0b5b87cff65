//! One agent session on the server: its admission and TLS handshake (`handshake.rs`), the
//! HTTP/2 client handshake, a verifying request, then periodic round-trip probes until the
//! connection ends.
//!
//! The drain handshake: before the verifying probe the server asks `GET /drain`, which the
//! agent answers only when it wants to leave the session (rotation, handover, shutdown). The
//! server then opens no new stream there and says so with `GET /drained`, queued behind every
//! stream it opened before; only then does the agent send GOAWAY. With GOAWAY alone a stream
//! the server queued just as the GOAWAY arrived could reach the agent after it had closed its
//! stream count (h2 answers the GOAWAY's PING before writing queued HEADERS) and be refused,
//! costing the CONNECT a second round trip (issue 17). An agent that does not know `/drain`
//! answers it `405` and drains with GOAWAY alone, as before.

use super::{handshake, Counted, Shared};
use crate::Error;
use bytes::Bytes;
use h2::client::SendRequest;
use hyper::{Request, StatusCode};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpStream;

/// The path of the probe request; the agent answers it without dialing anything.
const PING_URI: &str = "http://isthmus-agent/ping";
/// Answered by the agent when it wants to leave the session.
const DRAIN_URI: &str = "http://isthmus-agent/drain";
/// Tells the agent that this server opens no more streams on the session.
const DRAINED_URI: &str = "http://isthmus-agent/drained";

/// Runs one session from its accepted connection until it ends or the server stops.
pub(crate) async fn run(shared: Arc<Shared>, tcp: TcpStream, peer: SocketAddr) {
    let _ = tcp.set_nodelay(true);
    let (mut tls, peer) = match handshake::accept(&shared, tcp, peer).await {
        Ok(x) => x,
        Err(refused) => return refused_handshake(&shared, peer, refused),
    };
    shared.metrics.handshake(true);
    crate::http2::tune_tls(&mut **tls.get_mut().1);
    let Some(_open) = Counted::try_new(&shared.sessions_open, shared.limits.max_sessions) else {
        shared.limits.refuse("agents", "too_many_sessions");
        tracing::warn!(%peer, max = shared.limits.max_sessions, "too many agent sessions, closing");
        return;
    };
    let mut connecting = shared.metrics.session_state("connecting");
    // From here to a verified session, one deadline: a peer that completed TLS (it holds a
    // certificate of the CA) but stalls HTTP/2 or never answers the probe must not keep one
    // of the `max_sessions` places.
    let setup_by = tokio::time::Instant::now() + shared.limits.setup_timeout;
    let not_set_up = |what: &str| {
        shared.limits.refuse("agents", "setup_timeout");
        tracing::warn!(%peer, timeout = ?shared.limits.setup_timeout, "agent session not set up in time ({what}), closing");
    };
    let handshake = shared.http2.handshake::<_, Bytes>(tls);
    let (send, mut conn) = match tokio::time::timeout_at(setup_by, handshake).await {
        Ok(Ok(x)) => x,
        Ok(Err(e)) => {
            tracing::warn!(%peer, error = %e, "HTTP/2 handshake with agent failed");
            return;
        }
        Err(_) => return not_set_up("HTTP/2 handshake"),
    };
    // The connection runs in its own task so that probes awaited below never stop it; it ends
    // when the agent closes it, on an error, or when a PING goes unanswered.
    let keepalive = shared.keepalive.run(conn.ping_pong());
    let mut conn = tokio::spawn(async move {
        tokio::select! {
            r = conn => r.map_err(|e| e.to_string()),
            () = keepalive => Err("keepalive timed out".to_owned()),
        }
    });
    let _abort = AbortOnDrop(conn.abort_handle());
    // Queued (synchronously) before the probe, so the agent knows of it once verified.
    let leave = send.clone().send_request(get(DRAIN_URI), true);
    let mut leave = std::pin::pin!(async move {
        match leave {
            Ok((answer, _)) => answer.await.map(|r| r.status()).ok(),
            Err(_) => None,
        }
    });
    let mut left = false;
    // Verify before use: the session joins the table only after one request has made the
    // round trip, so a half-open session never gets a stream (make before break).
    let verified = tokio::select! {
        r = &mut conn => { tracing::warn!(%peer, result = ?r, "agent session closed before verification"); return; }
        _ = shared.shutdown.cancelled() => return,
        r = tokio::time::timeout_at(setup_by, probe(send.clone())) => r,
    };
    let rtt = match verified {
        Ok(Ok(rtt)) => rtt,
        Ok(Err(e)) => {
            tracing::warn!(%peer, error = %e, "agent session failed verification");
            return;
        }
        Err(_) => return not_set_up("no answer to the verifying probe"),
    };
    connecting.set("active");
    drop(connecting);
    shared.metrics.ping_rtt.observe(rtt.as_secs_f64());
    let session = shared.sessions.add(peer, send.clone(), &shared.metrics);
    tracing::info!(session = session.id, %peer, rtt_ms = rtt.as_secs_f64() * 1e3, "agent session active");
    let mut ticker = tokio::time::interval(shared.probe_interval);
    // After a slow probe the next one waits an interval, not one per tick missed meanwhile.
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await;
    // One probe at a time, bounded by `keepalive_timeout`, beside the loop (not in it: the
    // loop must see the connection end and the server stop while a probe waits).
    let mut probing = None;
    loop {
        tokio::select! {
            r = &mut conn => {
                tracing::info!(session = session.id, %peer, result = ?r, "agent session closed");
                break;
            }
            _ = shared.shutdown.cancelled() => break,
            status = &mut leave, if !left => {
                left = true;
                // `None`: the connection ended; another status: an agent without the handshake.
                if status == Some(StatusCode::OK) {
                    session.drain();
                    tracing::info!(session = session.id, %peer, "agent leaves the session");
                    // Behind every stream queued before `drain` returned (see `sessions.rs`).
                    if let Ok((answer, _)) = send.clone().send_request(get(DRAINED_URI), true) {
                        tokio::spawn(async move {
                            let _ = answer.await;
                        });
                    }
                }
            }
            // A draining session carries no new request: one queued after the acknowledgement
            // could be refused by the GOAWAY that follows it.
            _ = ticker.tick(), if !session.is_draining() && probing.is_none() => {
                let probe = tokio::time::timeout(shared.keepalive.timeout, probe(send.clone()));
                probing = Some(Box::pin(probe));
            }
            r = pending_or(&mut probing) => {
                probing = None;
                match r {
                    Ok(Ok(rtt)) => shared.metrics.ping_rtt.observe(rtt.as_secs_f64()),
                    Ok(Err(e)) => tracing::debug!(session = session.id, error = %e, "probe failed"),
                    Err(_) => tracing::info!(session = session.id, %peer, "probe not answered within keepalive_timeout"),
                }
            }
        }
    }
    session.close();
    session.drain();
    shared.sessions.remove(session.id);
}

/// What `f` gives, or never if there is nothing to wait for.
async fn pending_or<F: std::future::Future + Unpin>(f: &mut Option<F>) -> F::Output {
    match f {
        Some(f) => f.await,
        None => std::future::pending().await,
    }
}

/// Counts and logs an agent connection closed before the end of its TLS handshake. What a
/// stranger can cause as often as it likes is logged at `debug` one by one and at most once
/// per interval above that, with the count ([`RateLog`](isthmus_admin::ratelog::RateLog)).
fn refused_handshake(shared: &Shared, peer: SocketAddr, refused: handshake::Refused) {
    use handshake::Refused;
    shared.metrics.handshake(false);
    if let Some(reason) = refused.reason() {
        shared.limits.refuse("agents", reason);
    }
    let budget = |reason| shared.ratelog.event("agents", reason);
    match refused {
        Refused::Tls(e) => {
            tracing::debug!(%peer, error = %e, "agent TLS handshake failed");
            if let Some(n) = budget("tls") {
                tracing::info!(%peer, error = %e, failed = n, "agent TLS handshakes failed (this one, and the count since the last such line)");
            }
        }
        Refused::ProxyProtocol(why) => {
            if let Some(n) = budget("proxy_protocol") {
                tracing::warn!(%peer, why, refused = n, "bad PROXY header from a trusted proxy");
            }
        }
        Refused::UntrustedProxyHeader => {
            if let Some(n) = budget("untrusted_proxy_header") {
                tracing::error!(%peer, refused = n, "PROXY header from a peer not in agents.trusted_proxies: \
                    every connection through it fails; list the proxy's addresses there, or stop it sending the header");
            }
        }
        // Evictions and timeouts are what a flood causes: counted, not logged one by one.
        r => tracing::debug!(%peer, refused = ?r, "agent handshake closed"),
    }
}

/// One request/answer round trip on the session.
async fn probe(send: SendRequest<Bytes>) -> Result<Duration, Error> {
    let start = Instant::now();
    let mut send = send.ready().await?;
    let (answer, _) = send.send_request(get(PING_URI), true)?;
    let resp = answer.await?;
    if resp.status() != StatusCode::OK {
        return Err(Error::io(
            "probe",
            std::io::Error::other(format!("agent answered {}", resp.status())),
        ));
    }
    Ok(start.elapsed())
}

/// A `GET` of one of the constant URIs above.
fn get(uri: &'static str) -> Request<()> {
    let mut req = Request::new(());
    *req.uri_mut() = hyper::Uri::from_static(uri);
    req
}

/// Ends the connection task when the session task ends (server stop, or a panic upstream).
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
