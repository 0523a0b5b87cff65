//! The running proxy: start from a file, reload it, drain and stop.

use crate::admin::{self, AdminState};
use crate::conn::Ctx;
use crate::dns::{Dns, DnsError};
use crate::http1::Gate;
use crate::listen::{self, Shared};
use crate::metrics::Metrics;
use crate::snapshot::Snapshot;
use crate::socket;
use crate::sources::Sources;
use crate::splice::Splicer;
use isthmus_config::{load_proxy_file, LoadError, Loaded, ProxyConfig};
use prometheus_client::registry::Registry;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
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

/// How the proxy runs its connections.
#[derive(Debug, Clone, Default)]
pub struct Workers {
    /// Runtimes that accept and serve connections, one listening socket and one splicer
    /// each per listener; empty means the runtime that starts the proxy.
    pub runtimes: Vec<Handle>,
    /// How long a splicer keeps polling after its last event before it parks; zero (the
    /// default) parks at once. See the `splice` module.
    pub busy_poll: Duration,
}

/// Why a reload was not applied; the old configuration stays in effect.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReloadError {
    #[error(transparent)]
    Config(#[from] LoadError),
    #[error(transparent)]
    Dns(#[from] DnsError),
    #[error("cannot listen on {address} for listener {listener:?}: {source}")]
    Bind {
        listener: String,
        address: SocketAddr,
        source: std::io::Error,
    },
    #[error("{path}: refused: {why}")]
    LargeRemoval { path: String, why: String },
}

/// What a successful reload did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reloaded {
    /// The file's content did not change.
    Unchanged,
    /// A new snapshot is in effect.
    Applied {
        hash: String,
        added: Vec<String>,
        removed: Vec<String>,
    },
}

/// A listener bound by a reload and not yet serving: name, configured address, sockets.
type Fresh = (String, SocketAddr, Vec<std::net::TcpListener>);

#[derive(Debug)]
struct Running {
    configured: SocketAddr,
    bound: SocketAddr,
    stop: CancellationToken,
}

/// A running proxy. Cheap to clone; all clones control the same proxy.
#[derive(Debug, Clone)]
pub struct Proxy {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    path: PathBuf,
    shared: Arc<Shared>,
    ready: AtomicBool,
    /// Parent of every accept loop's token: cancelling it stops all accepting.
    accepting: CancellationToken,
    /// Held for the whole of a reload, so reloads never interleave.
    running: Mutex<HashMap<String, Running>>,
    admin_addr: SocketAddr,
    admin_stop: CancellationToken,
    /// Where connections are accepted and served: one listening socket per listener and
    /// worker; without worker runtimes, one worker on the runtime that started the proxy.
    workers: Vec<Worker>,
}

/// A runtime that accepts and serves connections, and the splicer its connections go to.
#[derive(Debug)]
struct Worker {
    runtime: Handle,
    splicer: Splicer,
}

impl Proxy {
    /// Loads `path`, binds every listener and the admin endpoint, and starts serving.
    /// The proxy's series are registered into `registry`, which the admin endpoint serves.
    pub async fn start(path: &Path, registry: Registry) -> Result<Self, StartError> {
        Self::start_with(path, registry, Workers::default()).await
    }

    /// Like [`Proxy::start`], but every listener gets one `SO_REUSEPORT` socket per runtime
    /// in `workers`, accepted on and served by that runtime (thread-per-core: with
    /// current-thread runtimes a connection never changes threads). The admin endpoint, the
    /// file watcher, reloads and DNS stay on the calling runtime.
    pub async fn start_on(
        path: &Path,
        registry: Registry,
        workers: Vec<Handle>,
    ) -> Result<Self, StartError> {
        let workers = Workers {
            runtimes: workers,
            ..Workers::default()
        };
        Self::start_with(path, registry, workers).await
    }

    /// Like [`Proxy::start_on`], with every setting of [`Workers`].
    pub async fn start_with(
        path: &Path,
        mut registry: Registry,
        workers: Workers,
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
        let snapshot = Snapshot::compile(loaded.config, loaded.hash, &metrics, &dns, None);
        let admin_listener = socket::bind(admin_address).map_err(|source| StartError::Bind {
            what: "admin".into(),
            address: admin_address,
            source,
        })?;
        let admin_addr = admin_listener
            .local_addr()
            .map_err(|source| StartError::Bind {
                what: "admin".into(),
                address: admin_address,
                source,
            })?;
        let mut bound = Vec::new();
        for l in &snapshot.config.listeners {
            let sockets = workers.runtimes.len().max(1);
            let listener = socket::bind_group(l.address, sockets, l.client_hello_timeout.get())
                .map_err(|source| StartError::Bind {
                    what: format!("listener {:?}", l.name),
                    address: l.address,
                    source,
                })?;
            bound.push((l.name.clone(), l.address, listener));
        }
        // Started once nothing above can fail, so that a bad file leaves no splicer behind.
        let mut runtimes = workers.runtimes;
        if runtimes.is_empty() {
            runtimes.push(Handle::current());
        }
        let workers = runtimes
            .into_iter()
            .map(|runtime| {
                let splicer = Splicer::start(&runtime, workers.busy_poll)?;
                Ok(Worker { runtime, splicer })
            })
            .collect::<Result<Vec<_>, std::io::Error>>()
            .map_err(StartError::Splicer)?;
        let inner = Arc::new(Inner {
            path: path.to_owned(),
            shared: Arc::new(Shared {
                snapshot: RwLock::new(Arc::new(snapshot)),
                metrics,
                connections: TaskTracker::new(),
                fd_ceiling,
            }),
            ready: AtomicBool::new(true),
            accepting: CancellationToken::new(),
            running: Mutex::new(HashMap::new()),
            admin_addr,
            admin_stop: CancellationToken::new(),
            workers,
        });
        let proxy = Proxy { inner };
        {
            let mut running = proxy.inner.running.lock().await;
            for (name, configured, listener) in bound {
                let r = proxy.spawn_accept(name.clone(), configured, listener);
                running.insert(name, r);
            }
        }
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
        info!(config = %path.display(), admin = %admin_addr, "proxy started");
        Ok(proxy)
    }

    fn spawn_accept(
        &self,
        name: String,
        configured: SocketAddr,
        sockets: Vec<std::net::TcpListener>,
    ) -> Running {
        let bound = sockets
            .first()
            .and_then(|l| l.local_addr().ok())
            .unwrap_or(configured);
        let stop = self.inner.accepting.child_token();
        let sources = Arc::new(Sources::default());
        // bind_group made one socket per worker.
        for (socket, worker) in sockets.into_iter().zip(&self.inner.workers) {
            let (name, shared) = (name.clone(), self.inner.shared.clone());
            let ctx = Ctx {
                metrics: shared.metrics.clone(),
                sources: sources.clone(),
                splicer: worker.splicer.clone(),
                tracker: shared.connections.clone(),
            };
            let stop = stop.clone();
            // Registered inside the task, so with the I/O driver of the runtime that accepts.
            crate::supervise::spawn_critical(&worker.runtime, "accept loop", async move {
                match tokio::net::TcpListener::from_std(socket) {
                    Ok(l) => listen::accept_loop(l, name, shared, ctx, stop).await,
                    Err(e) => warn!(listener = %name, error = %e, "cannot register listener"),
                }
            });
        }
        info!(listener = %name, address = %bound, "listening");
        Running {
            configured,
            bound,
            stop,
        }
    }

    /// The address the admin endpoint is bound to.
    pub fn admin_addr(&self) -> SocketAddr {
        self.inner.admin_addr
    }

    /// The address a listener is bound to (useful with port 0).
    pub async fn listener_addr(&self, name: &str) -> Option<SocketAddr> {
        self.inner.running.lock().await.get(name).map(|r| r.bound)
    }

    /// SHA-256 of the configuration file in effect.
    pub fn config_hash(&self) -> String {
        self.inner.shared.current().hash.clone()
    }

    /// Connections currently open.
    pub fn open_connections(&self) -> usize {
        self.inner.shared.connections.len()
    }

    /// Re-reads the file. On any error the old configuration stays and the error is returned
    /// (and counted); established connections are never touched either way.
    ///
    /// Five steps, each counting and logging its own failure: parse, guard (a file that would
    /// remove every listener or most routes needs `allow_large_removal`), bind (every new or
    /// moved listener, before anything changes), compile (resolver and snapshot), swap.
    pub async fn reload(&self) -> Result<Reloaded, ReloadError> {
        let mut running = self.inner.running.lock().await;
        let started = std::time::Instant::now();
        let loaded = self.parse().await?;
        let parsed_in = started.elapsed();
        let old = self.inner.shared.current();
        if loaded.hash == old.hash {
            self.inner.shared.metrics.reload("unchanged");
            return Ok(Reloaded::Unchanged);
        }
        if let Some(why) = crate::guard::large_removal(&old.config, &loaded.config) {
            self.inner.shared.metrics.reload("removal_refused");
            warn!(%why, "reload refused; the previous configuration stays in effect");
            return Err(ReloadError::LargeRemoval {
                path: self.inner.path.display().to_string(),
                why,
            });
        }
        let fresh = self.bind(&loaded.config, &running)?;
        let compiling = std::time::Instant::now();
        let snapshot = self.compile(loaded, &old)?;
        let compiled_in = compiling.elapsed();
        let hash = snapshot.hash.clone();
        let (added, removed) = self.swap(&mut running, snapshot, &old, fresh);
        self.inner.shared.metrics.reload("applied");
        info!(%hash, ?added, ?removed, ?parsed_in, ?compiled_in, total = ?started.elapsed(),
            "configuration reloaded");
        Ok(Reloaded::Applied {
            hash,
            added,
            removed,
        })
    }

    /// Reads and validates the file, off the async workers: parsing a 10k-route file takes
    /// tens of milliseconds, and the connections they serve must not stall meanwhile.
    async fn parse(&self) -> Result<Loaded<ProxyConfig>, ReloadError> {
        let path = self.inner.path.clone();
        let parsed = tokio::task::spawn_blocking(move || load_proxy_file(&path)).await;
        let parsed = parsed.unwrap_or_else(|e| {
            Err(LoadError::Read {
                path: self.inner.path.clone(),
                source: std::io::Error::other(e),
            })
        });
        parsed.map_err(|e| {
            self.inner.shared.metrics.reload(match e {
                LoadError::Read { .. } => "unreadable",
                _ => "invalid",
            });
            warn!(error = %e, "reload rejected; the previous configuration stays in effect");
            e.into()
        })
    }

    /// Binds every new or moved listener, so that a failure leaves the running configuration
    /// exactly as it was.
    fn bind(
        &self,
        config: &ProxyConfig,
        running: &HashMap<String, Running>,
    ) -> Result<Vec<Fresh>, ReloadError> {
        let mut fresh = Vec::new();
        for l in &config.listeners {
            if running
                .get(&l.name)
                .is_some_and(|r| r.configured == l.address)
            {
                continue;
            }
            match socket::bind_group(
                l.address,
                self.inner.workers.len(),
                l.client_hello_timeout.get(),
            ) {
                Ok(listener) => fresh.push((l.name.clone(), l.address, listener)),
                Err(source) => {
                    self.inner.shared.metrics.reload("bind_error");
                    warn!(listener = %l.name, address = %l.address, error = %source,
                        "reload rejected; the previous configuration stays in effect");
                    return Err(ReloadError::Bind {
                        listener: l.name.clone(),
                        address: l.address,
                        source,
                    });
                }
            }
        }
        Ok(fresh)
    }

    /// The new snapshot: route tables, upstreams (carrying what did not change) and the
    /// resolver (a new one only when its settings changed).
    fn compile(
        &self,
        loaded: Loaded<ProxyConfig>,
        old: &Snapshot,
    ) -> Result<Arc<Snapshot>, ReloadError> {
        let metrics = &self.inner.shared.metrics;
        let dns = if old.dns.config() == &loaded.config.resolver {
            old.dns.clone()
        } else {
            Dns::new(&loaded.config.resolver, metrics.clone()).map_err(|e| {
                metrics.reload("invalid");
                warn!(error = %e, "reload rejected; the previous configuration stays in effect");
                ReloadError::from(e)
            })?
        };
        Ok(Arc::new(Snapshot::compile(
            loaded.config,
            loaded.hash,
            metrics,
            &dns,
            Some(old),
        )))
    }

    /// Swaps the snapshot in, starts the accept loops of the fresh listeners and stops those
    /// of removed ones; returns the names added and removed.
    fn swap(
        &self,
        running: &mut HashMap<String, Running>,
        snapshot: Arc<Snapshot>,
        old: &Snapshot,
        fresh: Vec<Fresh>,
    ) -> (Vec<String>, Vec<String>) {
        let shared = &self.inner.shared;
        let removed: Vec<String> = running
            .keys()
            .filter(|name| !snapshot.listeners.contains_key(*name))
            .cloned()
            .collect();
        let hash = snapshot.hash.clone();
        match shared.snapshot.write() {
            Ok(mut s) => *s = snapshot,
            Err(poisoned) => *poisoned.into_inner() = snapshot,
        }
        shared.metrics.set_config_hash(Some(&old.hash), &hash);
        shared
            .metrics
            .connection_cap(shared.current().config.max_connections, shared.fd_ceiling);
        let mut added = Vec::new();
        for (name, configured, listener) in fresh {
            let r = self.spawn_accept(name.clone(), configured, listener);
            if let Some(previous) = running.insert(name.clone(), r) {
                previous.stop.cancel();
            }
            added.push(name);
        }
        for name in &removed {
            if let Some(r) = running.remove(name) {
                r.stop.cancel();
                info!(listener = %name, "listener removed; its open connections stay");
            }
            // A removed listener has no routes, open or not.
            let labels = crate::metrics::ListenerLabels {
                listener: name.clone(),
            };
            shared.metrics.open_routes.remove(&labels);
        }
        (added, removed)
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

impl AdminState for Proxy {
    fn ready(&self) -> bool {
        self.inner.ready.load(Ordering::SeqCst)
    }

    fn config_json(&self) -> serde_json::Value {
        let s = self.inner.shared.current();
        let bound: HashMap<String, String> = self
            .inner
            .running
            .try_lock()
            .map(|r| {
                r.iter()
                    .map(|(n, r)| (n.clone(), r.bound.to_string()))
                    .collect()
            })
            .unwrap_or_default();
        serde_json::json!({
            "hash": s.hash,
            "path": self.inner.path.display().to_string(),
            "bound": bound,
            "config": s.config,
        })
    }
}

/// Polls the file's identity (device, inode, size, mtime — following symlinks, so a ConfigMap's
/// `..data` swap shows as a new inode) and reloads when it changes. Polling rather than
/// inotify: ConfigMap updates replace a symlink two levels up, which inotify watches on the
/// file itself miss, and a stat per second is negligible.
async fn watch(proxy: Proxy) {
    let mut last = fingerprint(&proxy.inner.path);
    loop {
        let interval = proxy.inner.shared.current().config.watch_interval.get();
        let pause = if interval.is_zero() {
            Duration::from_secs(1)
        } else {
            interval
        };
        tokio::select! {
            _ = proxy.inner.accepting.cancelled() => return,
            _ = tokio::time::sleep(pause) => {}
        }
        if interval.is_zero() {
            continue;
        }
        let now = fingerprint(&proxy.inner.path);
        if now != last {
            last = now;
            // Errors are logged and counted inside reload.
            let _ = proxy.reload().await;
        }
    }
}

fn fingerprint(path: &Path) -> Option<(u64, u64, u64, std::time::SystemTime)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.dev(), m.ino(), m.len(), m.modified().ok()?))
}
