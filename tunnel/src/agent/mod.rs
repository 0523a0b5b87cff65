//! The shoot-side tunnel agent: holds one session per resolved server address, re-resolves
//! periodically and, when the address set changes, makes before it breaks: the new sessions
//! are opened and verified before the old ones are drained. A session older than
//! `max_session_age` is replaced the same way, so that an ingress which drains connections on
//! restart (and cannot tell the agent: it never sees inside the TLS) never has to cut one.

mod conn;
mod options;
mod session;
mod target;
mod transport;

pub use options::{AgentOptions, DnsResolver, Resolve};
pub use transport::{proxy_answer, ProxyAnswer};

use crate::metrics::Metrics;
use crate::{http2, Error};
use isthmus_config::tunnel::split_host_port;
use isthmus_config::ServerEntryConfig;
use prometheus_client::registry::Registry;
use rustls::pki_types::ServerName;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use target::Targets;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use transport::Route;

pub(crate) struct Shared {
    pub(crate) targets: Arc<Targets>,
    pub(crate) tls: Arc<rustls::ClientConfig>,
    pub(crate) http2: h2::server::Builder,
    pub(crate) keepalive: http2::Keepalive,
    pub(crate) backoff_initial: Duration,
    pub(crate) backoff_max: Duration,
    pub(crate) drain_timeout: Duration,
    pub(crate) max_session_age: Option<Duration>,
    /// Woken by a session that was verified (a retiring one may drain now) or reached its
    /// age (its replacement starts at once): the agent's loop waits on this, not on a timer.
    pub(crate) wake: Notify,
}

/// (server entry index, resolved address)
type Key = (usize, SocketAddr);

struct Handle {
    route: Route,
    drain: CancellationToken,
    verified: watch::Receiver<bool>,
    /// Set by the session when it reached `max_session_age`.
    aged: Arc<AtomicBool>,
}

impl Handle {
    fn live(&self) -> bool {
        *self.verified.borrow() && !self.drain.is_cancelled()
    }
}

/// Why a session is being replaced; also the `reason` of the rotation metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reason {
    /// Its address is no longer among its server name's: waits for the whole entry.
    AddressChanged,
    /// It reached `max_session_age`: waits for its own replacement (same key), so that an
    /// unreachable sibling address cannot hold it back while replacements pile up.
    MaxAge,
}

impl Reason {
    fn label(self) -> &'static str {
        match self {
            Self::AddressChanged => "address_changed",
            Self::MaxAge => "max_age",
        }
    }
}

#[derive(Default)]
struct Table {
    current: HashMap<Key, Handle>,
    /// Sessions being replaced, drained once their replacement is verified.
    retiring: Vec<(Key, Handle, Reason)>,
}

/// A tunnel agent.
#[derive(Clone)]
pub struct Agent {
    shared: Arc<Shared>,
    opts: AgentOptions,
    table: Arc<Mutex<Table>>,
    /// Every session task, draining ones included: shutdown waits for them all, or the
    /// process would exit under a stream a replacement left running on its old session.
    tasks: TaskTracker,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("live_sessions", &self.live_sessions())
            .finish()
    }
}

impl Agent {
    /// Creates an agent whose metrics go into `registry`.
    pub fn new(opts: AgentOptions, registry: &mut Registry) -> Self {
        let targets = Arc::new(Targets {
            allow: opts.allow.clone(),
            dial_timeout: opts.dial_timeout,
            metrics: Metrics::new(registry),
        });
        let shared = Arc::new(Shared {
            targets,
            tls: opts.tls.clone(),
            http2: http2::server(&opts.http2),
            keepalive: http2::Keepalive::new(&opts.http2),
            backoff_initial: opts.backoff_initial,
            backoff_max: opts.backoff_max,
            drain_timeout: opts.drain_timeout,
            max_session_age: opts.max_session_age,
            wake: Notify::new(),
        });
        Self {
            shared,
            opts,
            table: Arc::default(),
            tasks: TaskTracker::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sessions verified by their server and not draining. A session waiting for its
    /// replacement still counts: it serves until the replacement is verified, and readiness
    /// must not flap at every rotation.
    pub fn live_sessions(&self) -> usize {
        let t = self.lock();
        let retiring = t.retiring.iter().map(|(_, h, _)| h);
        t.current
            .values()
            .chain(retiring)
            .filter(|h| h.live())
            .count()
    }

    /// Runs until `shutdown`, then drains every session (GOAWAY, open streams finish up to the
    /// drain timeout) and returns.
    pub async fn run(&self, shutdown: CancellationToken) {
        let mut next_resolve = Instant::now();
        loop {
            if Instant::now() >= next_resolve {
                next_resolve = Instant::now() + self.opts.resolve_interval;
                self.reconcile().await;
            }
            // Retire first: a replacement that is verified and already aged (its set-up took
            // longer than `max_session_age`) must retire its predecessor before it is
            // replaced itself, or every replacement would be replaced before it took over
            // and sessions would pile up, none drained.
            self.retire_verified_replacements();
            self.replace_aged();
            // Sessions wake this loop when they are verified or age; otherwise the next
            // resolution does.
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep_until(next_resolve) => {}
                _ = self.shared.wake.notified() => {}
            }
        }
        let handles = {
            let mut t = self.lock();
            let mut v: Vec<Handle> = t.current.drain().map(|(_, h)| h).collect();
            v.extend(t.retiring.drain(..).map(|(_, h, _)| h));
            v
        };
        for h in &handles {
            h.drain.cancel();
        }
        // Each task ends within the drain timeout of its own drain.
        self.tasks.close();
        self.tasks.wait().await;
    }

    /// Resolves every server and starts/retires sessions to match.
    async fn reconcile(&self) {
        let mut desired: HashMap<Key, Route> = HashMap::new();
        let mut failed_entries = Vec::new();
        for (i, entry) in self.opts.servers.iter().enumerate() {
            match self.routes(entry).await {
                Ok(routes) if !routes.is_empty() => {
                    desired.extend(routes.into_iter().map(|r| ((i, r.addr), r)))
                }
                Ok(_) => failed_entries.push(i),
                Err(e) => {
                    tracing::warn!(server = %entry.address, error = %e, "cannot resolve tunnel server; keeping sessions");
                    failed_entries.push(i);
                }
            }
        }
        let mut t = self.lock();
        let gone: Vec<Key> = t
            .current
            .keys()
            .filter(|k| !desired.contains_key(k) && !failed_entries.contains(&k.0))
            .copied()
            .collect();
        for key in gone {
            if let Some(h) = t.current.remove(&key) {
                tracing::info!(server = %key.1, "server address went away; draining once the replacement is verified");
                t.retiring.push((key, h, Reason::AddressChanged));
            }
        }
        for (key, route) in desired {
            if t.current.contains_key(&key) {
                continue;
            }
            tracing::info!(server = %key.1, "opening session");
            t.current.insert(key, self.spawn(route));
        }
    }

    fn spawn(&self, route: Route) -> Handle {
        let drain = CancellationToken::new();
        let (tx, rx) = watch::channel(false);
        let aged = Arc::new(AtomicBool::new(false));
        self.tasks.spawn(session::run(
            self.shared.clone(),
            route.clone(),
            drain.clone(),
            tx,
            aged.clone(),
        ));
        Handle {
            route,
            drain,
            verified: rx,
            aged,
        }
    }

    /// Opens a replacement for every session that reached its age; the old one keeps serving
    /// until [`Self::retire_verified_replacements`] sees the replacement verified.
    fn replace_aged(&self) {
        let mut t = self.lock();
        let aged: Vec<Key> = t
            .current
            .iter()
            .filter(|(_, h)| h.aged.load(Ordering::SeqCst) && !h.drain.is_cancelled())
            .map(|(k, _)| *k)
            .collect();
        for key in aged {
            if let Some(old) = t.current.remove(&key) {
                tracing::info!(server = %key.1, "opening the replacement of an aged session");
                t.current.insert(key, self.spawn(old.route.clone()));
                t.retiring.push((key, old, Reason::MaxAge));
            }
        }
    }

    /// Drains retiring sessions whose replacement is verified: for an aged session its own
    /// (same key); otherwise, or when that key went away, every current session of its entry
    /// (at least one).
    fn retire_verified_replacements(&self) {
        let mut t = self.lock();
        let entry_ready = |t: &Table, entry: usize| {
            let mut mine = t.current.iter().filter(|(k, _)| k.0 == entry).peekable();
            mine.peek().is_some() && mine.all(|(_, h)| *h.verified.borrow())
        };
        let ready = |t: &Table, key: &Key, reason: Reason| match t.current.get(key) {
            Some(h) if reason == Reason::MaxAge => *h.verified.borrow(),
            _ => entry_ready(t, key.0),
        };
        let (go, stay): (Vec<_>, Vec<_>) = std::mem::take(&mut t.retiring)
            .into_iter()
            .partition(|(k, _, r)| ready(&t, k, *r));
        t.retiring = stay;
        for (key, h, reason) in go {
            tracing::info!(server = %key.1, reason = reason.label(), "replacement verified; draining old session");
            h.drain.cancel();
            self.shared.targets.metrics.rotation(reason.label());
            // The task finishes the drain on its own; shutdown waits for it (`tasks`).
        }
    }

    async fn routes(&self, entry: &ServerEntryConfig) -> Result<Vec<Route>, Error> {
        let (host, port) = split_host_port(&entry.address)
            .ok_or_else(|| Error::ServerName(entry.address.clone()))?;
        let name = entry.server_name.clone().unwrap_or_else(|| host.clone());
        let server_name =
            ServerName::try_from(name.clone()).map_err(|_| Error::ServerName(name))?;
        let addrs = self
            .opts
            .resolver
            .resolve(&host, port)
            .await
            .map_err(|e| Error::io(format!("resolve {host}"), e))?;
        Ok(addrs
            .into_iter()
            .map(|addr| Route {
                addr,
                address: entry.address.clone(),
                server_name: server_name.clone(),
                http_connect_header: entry.http_connect_header.clone(),
            })
            .collect())
    }
}
