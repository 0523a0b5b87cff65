//! Reloading the file: parse, guard, bind, compile, swap, each refusing on its own with the
//! running configuration untouched; and the watch that reloads when the file changes.

use super::{Proxy, Running};
use crate::dns::{Dns, DnsError};
use crate::snapshot::Snapshot;
use crate::socket;
use isthmus_config::{load_proxy_file, LoadError, Loaded, ProxyConfig};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tracing::{info, warn};

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

impl Proxy {
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
                self.inner.serving.len(),
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
            .forget_removed(&old.config, &shared.current().config);
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
}

/// Polls the file's identity (device, inode, size, mtime — following symlinks, so a ConfigMap's
/// `..data` swap shows as a new inode) and reloads when it changes. Polling rather than
/// inotify: ConfigMap updates replace a symlink two levels up, which inotify watches on the
/// file itself miss, and a stat every `watch_interval` (200 ms by default) is negligible.
pub(super) async fn watch(proxy: Proxy) {
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
