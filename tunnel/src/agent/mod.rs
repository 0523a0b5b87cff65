//! The shoot-side tunnel agent: holds one session per resolved server address, re-resolves
//! periodically and, when the address set changes, makes before it breaks: the new sessions
//! are opened and verified before the old ones are drained.

mod session;
mod target;
mod transport;

use crate::metrics::Metrics;
use crate::{tls, Error};
use hyper_util::rt::TokioExecutor;
use isthmus_config::tunnel::split_host_port;
use isthmus_config::{AllowRule, Http2Config, ServerEntryConfig, TunnelAgentConfig};
use prometheus_client::registry::Registry;
use rustls::pki_types::ServerName;
use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use target::Targets;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use transport::Route;

/// Resolves a server's host name. Swappable so tests can move a name to another address.
pub trait Resolve: Send + Sync + std::fmt::Debug {
    /// The addresses of `host:port`.
    fn resolve<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> Pin<Box<dyn Future<Output = std::io::Result<Vec<SocketAddr>>> + Send + 'a>>;
}

/// The system resolver.
#[derive(Debug, Clone, Copy, Default)]
pub struct DnsResolver;

impl Resolve for DnsResolver {
    fn resolve<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> Pin<Box<dyn Future<Output = std::io::Result<Vec<SocketAddr>>> + Send + 'a>> {
        Box::pin(async move { Ok(tokio::net::lookup_host((host, port)).await?.collect()) })
    }
}

/// Everything the agent needs.
#[derive(Debug, Clone)]
pub struct AgentOptions {
    /// Servers to hold sessions to.
    pub servers: Vec<ServerEntryConfig>,
    /// TLS client config (client certificate, trusted CA, ALPN h2).
    pub tls: Arc<rustls::ClientConfig>,
    /// Targets that may be dialed.
    pub allow: Vec<AllowRule>,
    /// HTTP/2 settings.
    pub http2: Http2Config,
    /// How often names are re-resolved.
    pub resolve_interval: Duration,
    /// Dial timeout for targets.
    pub dial_timeout: Duration,
    /// First reconnect delay.
    pub backoff_initial: Duration,
    /// Largest reconnect delay.
    pub backoff_max: Duration,
    /// How long a draining session's streams may take.
    pub drain_timeout: Duration,
    /// Name resolution for servers.
    pub resolver: Arc<dyn Resolve>,
}

impl AgentOptions {
    /// Reads the TLS files named in `c`; uses the system resolver.
    pub fn from_config(c: &TunnelAgentConfig) -> Result<Self, Error> {
        Ok(Self {
            servers: c.servers.clone(),
            tls: tls::agent_config(&c.tls.ca, &c.tls.cert, &c.tls.key)?,
            allow: c.allow_rules(),
            http2: c.http2.clone(),
            resolve_interval: c.resolve_interval.get(),
            dial_timeout: c.dial_timeout.get(),
            backoff_initial: c.backoff_initial.get(),
            backoff_max: c.backoff_max.get(),
            drain_timeout: c.drain_timeout.get(),
            resolver: Arc::new(DnsResolver),
        })
    }
}

pub(crate) struct Shared {
    pub(crate) targets: Arc<Targets>,
    pub(crate) tls: Arc<rustls::ClientConfig>,
    pub(crate) http2: hyper::server::conn::http2::Builder<TokioExecutor>,
    pub(crate) backoff_initial: Duration,
    pub(crate) backoff_max: Duration,
    pub(crate) drain_timeout: Duration,
}

/// (server entry index, resolved address)
type Key = (usize, SocketAddr);

struct Handle {
    drain: CancellationToken,
    verified: watch::Receiver<bool>,
    task: JoinHandle<()>,
}

#[derive(Default)]
struct Table {
    current: HashMap<Key, Handle>,
    /// Sessions whose address went away, drained once their entry's new sessions verify.
    retiring: Vec<(Key, Handle)>,
}

/// A tunnel agent.
#[derive(Clone)]
pub struct Agent {
    shared: Arc<Shared>,
    opts: AgentOptions,
    table: Arc<Mutex<Table>>,
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
            http2: crate::h2::server(&opts.http2),
            backoff_initial: opts.backoff_initial,
            backoff_max: opts.backoff_max,
            drain_timeout: opts.drain_timeout,
        });
        Self {
            shared,
            opts,
            table: Arc::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sessions verified by their server and not draining.
    pub fn live_sessions(&self) -> usize {
        let t = self.lock();
        t.current
            .values()
            .filter(|h| *h.verified.borrow() && !h.drain.is_cancelled())
            .count()
    }

    /// Runs until `shutdown`, then drains every session (GOAWAY, open streams finish up to the
    /// drain timeout) and returns.
    pub async fn run(&self, shutdown: CancellationToken) {
        let mut last_resolve: Option<Instant> = None;
        loop {
            if last_resolve.is_none_or(|t| t.elapsed() >= self.opts.resolve_interval) {
                last_resolve = Some(Instant::now());
                self.reconcile().await;
            }
            let retiring = self.retire_verified_replacements();
            // While old sessions wait for their replacements, look often; otherwise wake
            // for the next resolution.
            let wait = if retiring > 0 {
                Duration::from_millis(20)
            } else {
                self.opts.resolve_interval
            };
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(wait) => {}
            }
        }
        let handles: Vec<Handle> = {
            let mut t = self.lock();
            let mut v: Vec<Handle> = t.current.drain().map(|(_, h)| h).collect();
            v.extend(t.retiring.drain(..).map(|(_, h)| h));
            v
        };
        for h in &handles {
            h.drain.cancel();
        }
        for h in handles {
            let _ = h.task.await;
        }
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
                t.retiring.push((key, h));
            }
        }
        for (key, route) in desired {
            if t.current.contains_key(&key) {
                continue;
            }
            tracing::info!(server = %key.1, "opening session");
            let drain = CancellationToken::new();
            let (tx, rx) = watch::channel(false);
            let task = tokio::spawn(session::run(self.shared.clone(), route, drain.clone(), tx));
            t.current.insert(
                key,
                Handle {
                    drain,
                    verified: rx,
                    task,
                },
            );
        }
    }

    /// Drains retiring sessions whose entry has only verified sessions now (at least one).
    fn retire_verified_replacements(&self) -> usize {
        let mut t = self.lock();
        let ready = |t: &Table, entry: usize| {
            let mut mine = t.current.iter().filter(|(k, _)| k.0 == entry).peekable();
            mine.peek().is_some() && mine.all(|(_, h)| *h.verified.borrow())
        };
        let (go, stay): (Vec<_>, Vec<_>) = std::mem::take(&mut t.retiring)
            .into_iter()
            .partition(|(k, _)| ready(&t, k.0));
        t.retiring = stay;
        for (key, h) in go {
            tracing::info!(server = %key.1, "replacement verified; draining old session");
            h.drain.cancel();
            // The task finishes the drain on its own; it is not awaited here.
        }
        t.retiring.len()
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
