//! Starting the proxy from a file (listeners, splicers, the admin endpoint, the file watch)
//! and draining it on shutdown.

use super::reload::watch;
use super::warm;
use super::{Inner, Proxy, ServingRuntime};
use crate::admin;
use crate::dns::{Dns, DnsError};
use crate::http1::Gate;
use crate::listen::ProxyState;
use crate::metrics::Metrics;
use crate::snapshot::Snapshot;
use crate::socket;
use crate::splice::{BusyPoll, Contention, Splicer, Tuning};
use isthmus_config::{load_proxy_file, LoadError};
use prometheus_client::registry::Registry;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::runtime::Handle;
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] LoadError),
    #[error(transparent)]
    Dns(#[from] DnsError),
    #[error("cannot listen on {address} for {what}: {source}")]
    Bind {
        what: String,
        address: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot start a splicer (epoll): {0}")]
    Splicer(std::io::Error),
}

/// The threads the proxy's connections run on, and how their splicers wait for events.
#[derive(Debug, Clone, Default)]
pub struct ConnectionThreads {
    /// Runtimes that accept and serve connections, one listening socket and one splicer
    /// each per listener; empty means the runtime that starts the proxy.
    pub runtimes: Vec<Handle>,
    /// Whether a splicer keeps polling after its events before it parks; by default only
    /// for answers that usually come within 100 µs. See the `splice` module.
    pub busy_poll: BusyPoll,
}

impl Proxy {
    /// Loads `path`, binds every listener and the admin endpoint, and starts serving on the
    /// calling runtime. The proxy's series are registered into `registry`, which the admin
    /// endpoint serves.
    pub async fn start(path: &Path, registry: Registry) -> Result<Self, StartError> {
        Self::start_on(path, registry, ConnectionThreads::default()).await
    }

    /// Like [`Proxy::start`], on `threads`: every listener gets one `SO_REUSEPORT` socket per
    /// runtime, accepted on and served by that runtime (thread-per-core: with current-thread
    /// runtimes a connection never changes threads). The admin endpoint, the file watcher,
    /// reloads and DNS stay on the calling runtime.
    pub async fn start_on(
        path: &Path,
        mut registry: Registry,
        threads: ConnectionThreads,
    ) -> Result<Self, StartError> {
        let loaded = load_proxy_file(path)?;
        let metrics = Arc::new(Metrics::register(&mut registry));
        let fd_limit = match crate::fds::raise_nofile_limit() {
            Ok(l) => l,
            Err(e) => {
                warn!(error = %e, "cannot read or raise the open-files limit; assuming 1024");
                1024
            }
        };
        metrics
            .fd_limit
            .set(i64::try_from(fd_limit).unwrap_or(i64::MAX));
        let admin_conns = loaded.config.admin.limits.max_connections;
        let fd_ceiling = crate::fds::connections_that_fit(fd_limit, admin_conns);
        crate::sys::limit_pipes(crate::fds::pipes_that_fit(fd_limit));
        metrics.connection_cap(loaded.config.max_connections, fd_ceiling);
        metrics.set_config_hash(None, &loaded.hash);
        let admin_address = loaded.config.admin.address;
        let admin_gate = Gate::new(loaded.config.admin.limits);
        registry.register(
            "isthmus_proxy_admin_evicted_connections",
            "Admin connections closed to make room for a newer one (admin.limits.max_connections)",
            admin_gate.evicted(),
        );
        let dns = Dns::new(&loaded.config.resolver, metrics.clone())?;
        // A predecessor restarted in place drains for at most this long, holding the admin port.
        let predecessor_drain = loaded.config.drain_delay.get()
            + loaded.config.drain_timeout.get()
            + Duration::from_secs(5);
        let snapshot = Snapshot::compile(loaded.config, loaded.hash, &metrics, &dns, None);
        let admin_error = |source| StartError::Bind {
            what: "admin".into(),
            address: admin_address,
            source,
        };
        // The listeners (`SO_REUSEPORT`) take over at once; only the admin port may have to
        // wait for the predecessor, below, once they serve.
        let (admin_listener, admin_addr) = match socket::bind_admin(admin_address) {
            Ok(l) => {
                let addr = l.local_addr().map_err(admin_error)?;
                (Some(l), addr)
            }
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && admin_address.port() != 0 => {
                warn!(admin = %admin_address, wait = ?predecessor_drain,
                    "the admin address is in use (a draining predecessor?): the listeners serve now, the admin endpoint once the address is free");
                (None, admin_address)
            }
            Err(e) => return Err(admin_error(e)),
        };
        let mut bound = Vec::new();
        for l in &snapshot.config.listeners {
            let sockets = threads.runtimes.len().max(1);
            let listener = socket::bind_group(l.address, sockets, l.client_hello_timeout.get())
                .map_err(|source| StartError::Bind {
                    what: format!("listener {:?}", l.name),
                    address: l.address,
                    source,
                })?;
            bound.push((l.name.clone(), l.address, listener));
        }
        // Started once nothing above can fail, so that a bad file leaves no splicer behind.
        let mut runtimes = threads.runtimes;
        if runtimes.is_empty() {
            runtimes.push(Handle::current());
        }
        let serving = runtimes
            .into_iter()
            .enumerate()
            .map(|(i, runtime)| {
                let splicer = Splicer::start(
                    format!("isthmus-splice-{i}"),
                    Tuning::with_busy_poll(threads.busy_poll),
                    Contention {
                        busy_poll: metrics.busy_poll_contended.clone(),
                        demoted: metrics.sched_demoted.clone(),
                    },
                )?;
                Ok(ServingRuntime { runtime, splicer })
            })
            .collect::<Result<Vec<_>, std::io::Error>>()
            .map_err(StartError::Splicer)?;
        let inner = Arc::new(Inner {
            path: path.to_owned(),
            shared: Arc::new(ProxyState {
                snapshot: RwLock::new(Arc::new(snapshot)),
                metrics,
                connections: TaskTracker::new(),
                fd_ceiling,
            }),
            ready: AtomicBool::new(true),
            warm: AtomicBool::new(false),
            accepting: CancellationToken::new(),
            running: Mutex::new(HashMap::new()),
            admin_addr,
            admin_stop: CancellationToken::new(),
            serving,
        });
        let proxy = Proxy { inner };
        {
            let mut running = proxy.inner.running.lock().await;
            for (name, configured, listener) in bound {
                let r = proxy.spawn_accept(name.clone(), configured, listener);
                running.insert(name, r);
            }
        }
        let admin_listener = match admin_listener {
            Some(l) => l,
            None => match socket::bind_admin_when_free(admin_address, predecessor_drain).await {
                Ok(l) => l,
                Err(e) => {
                    proxy.shutdown(Duration::ZERO, Duration::ZERO).await;
                    return Err(admin_error(e));
                }
            },
        };
        crate::supervise::spawn_critical(
            &Handle::current(),
            "admin",
            admin::serve(
                admin_listener,
                Arc::new(proxy.clone()),
                Arc::new(registry),
                admin_gate,
                proxy.inner.admin_stop.clone(),
            ),
        );
        tokio::spawn(watch(proxy.clone()));
        tokio::spawn(warm_up(proxy.clone()));
        info!(config = %path.display(), admin = %admin_addr, "proxy started");
        Ok(proxy)
    }

    /// Drains and stops: `/readyz` turns 503, after `delay` the listeners close, then open
    /// connections get up to `timeout` to finish. Returns how many were still open.
    pub async fn shutdown(&self, delay: Duration, timeout: Duration) -> usize {
        self.inner.ready.store(false, Ordering::SeqCst);
        info!(?delay, "draining: readiness is now false");
        tokio::time::sleep(delay).await;
        self.inner.accepting.cancel();
        let tracker = &self.inner.shared.connections;
        tracker.close();
        info!(
            open = tracker.len(),
            ?timeout,
            "listeners closed; waiting for open connections"
        );
        let _ = tokio::time::timeout(timeout, tracker.wait()).await;
        let left = tracker.len();
        self.inner.admin_stop.cancel();
        info!(left, "stopped");
        left
    }

    /// The drain settings of the configuration in effect.
    pub fn drain_settings(&self) -> (Duration, Duration) {
        let s = self.inner.shared.current();
        (s.config.drain_delay.get(), s.config.drain_timeout.get())
    }
}

/// Ready once the first configuration's upstream names had their first answers, or its
/// `resolver.warm_up` passed.
async fn warm_up(proxy: Proxy) {
    let snapshot = proxy.inner.shared.current();
    let patience = snapshot.config.resolver.warm_up.get();
    let w = warm::first_answers(&snapshot, patience).await;
    if w.answered < w.names {
        warn!(names = w.names, answered = w.answered, took = ?w.took,
            "ready without the first answer for every upstream name (resolver.warm_up)");
    } else {
        info!(names = w.names, took = ?w.took, "warmed up: every upstream name answered");
    }
    proxy.inner.warm.store(true, Ordering::SeqCst);
}
