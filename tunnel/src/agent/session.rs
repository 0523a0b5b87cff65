//! One agent session to one server address: connect (with jittered exponential backoff),
//! serve HTTP/2 to the server, reconnect when the connection ends, drain with GOAWAY when
//! told to, and say when the connection reached `max_session_age` (the agent then opens its
//! replacement and drains this one once the replacement is verified).

use super::conn::Conn;
use super::transport::{self, Route};
use super::Shared;
use crate::agent::target::{Leave, Service};
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Connects at most this long (TCP, proxy and TLS together).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A session whose server has not sent its verifying probe by then is dropped and redialed:
/// something that accepted our TLS is not a working tunnel server.
const VERIFY_TIMEOUT: Duration = Duration::from_secs(10);

/// A server that asked to be told of a drain but does not acknowledge it by then gets the
/// GOAWAY anyway.
const LEAVE_TIMEOUT: Duration = Duration::from_secs(10);

/// Keeps a session to `route` until `drain` is cancelled; `verified` is true while the
/// current connection has answered the server's probe; `aged` is set (and the agent woken)
/// once a verified connection is older than its jittered `max_session_age`.
pub(crate) async fn run(
    shared: Arc<Shared>,
    route: Route,
    drain: CancellationToken,
    verified: watch::Sender<bool>,
    aged: Arc<AtomicBool>,
) {
    let mut delay = shared.backoff_initial;
    while !drain.is_cancelled() {
        // Counted from before the TCP connect: the ingress's drain clock for this connection
        // cannot have started earlier, so the age is never underestimated.
        let age_at = shared
            .max_session_age
            .map(|a| tokio::time::Instant::now() + jitter(a, 0.9));
        let mut state = shared.targets.metrics.session_state("connecting");
        let tls = tokio::select! {
            _ = drain.cancelled() => break,
            r = transport::connect(&route, &shared.tls, CONNECT_TIMEOUT) => r,
        };
        let tls = match tls {
            Ok(tls) => tls,
            Err(e) => {
                shared.targets.metrics.handshake(false);
                tracing::warn!(server = %route.addr, error = %e, retry_in_ms = delay.as_millis() as u64, "cannot reach tunnel server");
                drop(state);
                sleep_jittered(delay, &drain).await;
                delay = (delay * 2).min(shared.backoff_max);
                continue;
            }
        };
        shared.targets.metrics.handshake(true);
        let leave = Arc::new(Leave::new());
        let service = Service {
            targets: shared.targets.clone(),
            verified: verified.clone(),
            leave: leave.clone(),
        };
        let mut conn = Conn::new(&shared.http2, shared.keepalive, tls, service);
        let mut seen = verified.subscribe();
        let mut was_verified = false;
        let verify_by = tokio::time::Instant::now() + VERIFY_TIMEOUT;
        loop {
            tokio::select! {
                r = &mut conn => {
                    tracing::info!(server = %route.addr, result = ?r, "session closed");
                    break;
                }
                _ = seen.changed(), if !was_verified => {
                    if *seen.borrow_and_update() {
                        was_verified = true;
                        delay = shared.backoff_initial;
                        state.set("active");
                        tracing::info!(server = %route.addr, "session active");
                        // A session it replaces may drain now.
                        shared.wake.notify_one();
                    }
                }
                _ = tokio::time::sleep_until(verify_by), if !was_verified => {
                    tracing::warn!(server = %route.addr, "server never verified the session; redialing");
                    break;
                }
                // Only a verified session is replaced: until then it carries nothing.
                _ = tokio::time::sleep_until(age_at.unwrap_or(verify_by)),
                    if was_verified && age_at.is_some() && !aged.load(Ordering::SeqCst) => {
                    tracing::info!(server = %route.addr, "session reached max_session_age");
                    aged.store(true, Ordering::SeqCst);
                    shared.wake.notify_one();
                }
                _ = drain.cancelled() => {
                    state.set("draining");
                    tracing::info!(server = %route.addr, "session draining");
                    // First the server stops opening streams here (the drain handshake,
                    // `server/session.rs`), then GOAWAY; open streams finish.
                    if leave.watched() {
                        leave.ask();
                        tokio::select! {
                            r = &mut conn => {
                                tracing::info!(server = %route.addr, result = ?r, "session closed");
                                break;
                            }
                            _ = leave.acked() => {}
                            _ = tokio::time::sleep(LEAVE_TIMEOUT) => {
                                tracing::warn!(server = %route.addr, "server did not acknowledge the drain; GOAWAY anyway");
                            }
                        }
                    }
                    conn.graceful_shutdown();
                    if tokio::time::timeout(shared.drain_timeout, &mut conn).await.is_err() {
                        tracing::warn!(server = %route.addr, "drain timeout: closing open streams");
                    }
                    break;
                }
            }
        }
        verified.send_replace(false);
        // Ends a `/drain` request still held by a connection that ended otherwise.
        leave.ask();
        if !was_verified && !drain.is_cancelled() {
            drop(state);
            sleep_jittered(delay, &drain).await;
            delay = (delay * 2).min(shared.backoff_max);
        }
    }
    verified.send_replace(false);
}

/// A random duration between `least` × `d` and `d` (never more than `d`): agents started
/// together neither rotate (`least` 0.9: the configured age stays an upper bound, which the
/// ingress drain rule in the README relies on) nor reconnect (0.5) in lockstep.
fn jitter(d: Duration, least: f64) -> Duration {
    // A fresh `RandomState` is randomly keyed per call; no RNG dependency needed.
    let r = std::collections::hash_map::RandomState::new().hash_one(0u8);
    d.mul_f64(least + (1.0 - least) * (r % 1001) as f64 / 1000.0)
}

/// Sleeps 50–100 % of `d`, or until `drain`.
async fn sleep_jittered(d: Duration, drain: &CancellationToken) {
    tokio::select! {
        _ = drain.cancelled() => {}
        _ = tokio::time::sleep(jitter(d, 0.5)) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_within_its_band() {
        let d = Duration::from_secs(10);
        for least in [0.5, 0.9] {
            for _ in 0..200 {
                let j = jitter(d, least);
                assert!(j >= d.mul_f64(least) && j <= d, "{j:?} for {least}");
            }
        }
    }
}
