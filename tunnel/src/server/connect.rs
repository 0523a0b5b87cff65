//! The HTTP/1.1 CONNECT endpoint kube-apiserver's egress selector speaks: one CONNECT per
//! connection, `200` only once the agent has connected to the target, then raw bytes.

use super::sessions::SessionStream;
use super::Shared;
use crate::metrics::CodeLabel;
use crate::pipe::{pipe, End, Stream};
use bytes::Bytes;
use http_body_util::Empty;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite};

/// Serves one client connection (TCP, TLS or Unix) of the CONNECT endpoint.
pub(crate) async fn serve<I>(shared: Arc<Shared>, io: I)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let builder = shared.connect_gate.builder();
    let service = hyper::service::service_fn(move |req| {
        let shared = shared.clone();
        async move { Ok::<_, Infallible>(handle::<I>(shared, req).await) }
    });
    // Malformed requests get hyper's own `400 Bad Request`; CONNECT needs `with_upgrades`.
    let r = builder
        .serve_connection(TokioIo::new(io), service)
        .with_upgrades()
        .await;
    if let Err(e) = r {
        tracing::debug!(error = %e, "CONNECT client connection ended with an error");
    }
}

fn status(shared: &Shared, code: StatusCode) -> Response<Empty<Bytes>> {
    shared
        .metrics
        .connects
        .get_or_create(&CodeLabel {
            code: code.as_u16(),
        })
        .inc();
    let mut r = Response::new(Empty::new());
    *r.status_mut() = code;
    r
}

/// Answers one request of a client connection of type `I`; a CONNECT that got its `200` is
/// piped in a task of its own.
async fn handle<I>(shared: Arc<Shared>, mut req: Request<Incoming>) -> Response<Empty<Bytes>>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    if req.method() != Method::CONNECT {
        return status(&shared, StatusCode::METHOD_NOT_ALLOWED);
    }
    // CONNECT must name `host:port` (RFC 9110 §9.3.6): anything else is malformed.
    let target = match req.uri().authority() {
        Some(a) if a.port_u16().is_some() && req.uri().path_and_query().is_none() => a.to_string(),
        _ => return status(&shared, StatusCode::BAD_REQUEST),
    };
    let client = hyper::upgrade::on(&mut req);
    let opened = tokio::time::timeout(shared.connect_timeout, open(&shared, &target)).await;
    let (agent_stream, session_stream) = match opened {
        Ok(Ok(x)) => x,
        Ok(Err(code)) => {
            tracing::info!(%target, %code, "CONNECT refused");
            return status(&shared, code);
        }
        Err(_) => {
            tracing::warn!(%target, "CONNECT timed out waiting for an agent");
            return status(&shared, StatusCode::GATEWAY_TIMEOUT);
        }
    };
    let stream = shared.metrics.stream();
    let task_shared = shared.clone();
    tokio::spawn(async move {
        let _counted = (stream, session_stream);
        let metrics = &task_shared.metrics;
        match client.await {
            // The client's own socket back from hyper, and what hyper read beyond the request
            // head: the pipe then reads and writes the socket itself.
            Ok(client) => match client.downcast::<TokioIo<I>>() {
                Ok(parts) => {
                    let io = parts.io.into_inner();
                    pipe(io, agent_stream, parts.read_buf, End::Server, metrics).await
                }
                Err(client) => {
                    let io = TokioIo::new(client);
                    pipe(io, agent_stream, Bytes::new(), End::Server, metrics).await
                }
            },
            Err(e) => tracing::debug!(error = %e, "CONNECT client went away before the upgrade"),
        }
    });
    status(&shared, StatusCode::OK)
}

/// Opens a stream to `target` through the best session; a session that fails at the HTTP/2
/// level (GOAWAY, reset, closed) or whose agent could not dial is skipped for the next one.
/// When every session refused at the HTTP/2 level, it waits (within `session_wait`) for a new
/// one: an agent rotating a session sends GOAWAY as soon as it saw the replacement verified,
/// which can be just before this server has added the replacement to its table.
async fn open(shared: &Shared, target: &str) -> Result<(Stream, SessionStream), StatusCode> {
    let deadline = tokio::time::Instant::now() + shared.session_wait;
    let mut last = StatusCode::SERVICE_UNAVAILABLE;
    loop {
        match try_sessions(shared, target, deadline, &mut last).await {
            Some(r) => return r,
            // Refused sessions are marked draining, so the next round sees only new ones.
            None if tokio::time::Instant::now() < deadline => {}
            None => return Err(last),
        }
    }
}

/// One round over the candidates: `None` when every one refused the stream before it reached
/// an agent (nothing was sent to the target, so another round is safe).
async fn try_sessions(
    shared: &Shared,
    target: &str,
    deadline: tokio::time::Instant,
    last: &mut StatusCode,
) -> Option<Result<(Stream, SessionStream), StatusCode>> {
    let sessions = candidates(shared, deadline).await;
    if sessions.is_empty() {
        return Some(Err(*last));
    }
    let mut only_refused = true;
    for session in sessions {
        let Ok(req) = Request::connect(target).body(()) else {
            return Some(Err(StatusCode::BAD_REQUEST));
        };
        // `None`: the session started draining since the list was made (nothing was sent).
        let Some((opened, counted)) = session.open(req) else {
            continue;
        };
        let answered = match opened {
            Ok((answer, send)) => answer.await.map(|resp| (resp, send)),
            Err(e) => Err(e),
        };
        let (resp, send) = match answered {
            Ok(r) => r,
            Err(e) => {
                // The stream never reached the agent's handler or was refused (GOAWAY):
                // retrying elsewhere is safe, nothing was sent to the target.
                tracing::info!(session = session.id, error = %e, "session refused a stream; trying the next");
                session.drain();
                *last = StatusCode::BAD_GATEWAY;
                continue;
            }
        };
        only_refused = false;
        match resp.status() {
            StatusCode::OK => {
                let recv = resp.into_body();
                return Some(Ok((Stream { send, recv }, counted)));
            }
            // The allow-list and malformed targets answer the same on every agent.
            code @ (StatusCode::FORBIDDEN | StatusCode::BAD_REQUEST) => return Some(Err(code)),
            code => *last = code,
        }
    }
    if only_refused {
        None
    } else {
        Some(Err(*last))
    }
}

/// The candidate sessions; when there is none, waits until `deadline` for one, so that a
/// CONNECT arriving while the agent reconnects (server restart) is delayed, not refused.
async fn candidates(
    shared: &Shared,
    deadline: tokio::time::Instant,
) -> Vec<std::sync::Arc<super::sessions::Session>> {
    // Subscribed before looking: a session joining in between still wakes this wait.
    let mut added = shared.sessions.subscribe();
    loop {
        let c = shared.sessions.candidates();
        if !c.is_empty() {
            return c;
        }
        tokio::select! {
            r = added.changed() => if r.is_err() { return c },
            _ = tokio::time::sleep_until(deadline) => return c,
        }
    }
}
