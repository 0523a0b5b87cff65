//! The running proxy: what it holds and what it tells about itself. Starting and draining are
//! in `start.rs`; reloading (parse, guard, bind, compile, swap) and the file watch in
//! `reload.rs`.

mod reload;
mod start;
mod warm;

pub use reload::{ReloadError, Reloaded};
pub use start::{ConnectionThreads, StartError};

use crate::admin::AdminState;
use crate::listen::{Listener, ProxyState};
use crate::sources::Sources;
use crate::splice::Splicer;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::runtime::Handle;
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// A listener being served: its configured and bound address, and the token that stops its
/// accept loops.
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
    shared: Arc<ProxyState>,
    /// False once draining began.
    ready: AtomicBool,
    /// True once the first configuration's upstream names had their first answers
    /// (`warm.rs`).
    warm: AtomicBool,
    /// Parent of every accept loop's token: cancelling it stops all accepting.
    accepting: CancellationToken,
    /// Held for the whole of a reload, so reloads never interleave.
    running: Mutex<HashMap<String, Running>>,
    admin_addr: SocketAddr,
    admin_stop: CancellationToken,
    /// Where connections are accepted and served: one listening socket per listener and
    /// runtime; without runtimes of their own, the runtime that started the proxy.
    serving: Vec<ServingRuntime>,
}

/// A runtime that accepts and serves connections, and the splicer its connections go to.
#[derive(Debug)]
struct ServingRuntime {
    runtime: Handle,
    splicer: Splicer,
}

impl Proxy {
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
        // bind_group made one socket per serving runtime.
        for (socket, serving) in sockets.into_iter().zip(&self.inner.serving) {
            let (name, shared) = (name.clone(), self.inner.shared.clone());
            let (sources, splicer, stop) = (sources.clone(), serving.splicer.clone(), stop.clone());
            // Registered inside the task, so with the I/O driver of the runtime that accepts.
            crate::supervise::spawn_critical(&serving.runtime, "accept loop", async move {
                match crate::sys::Acceptor::register(socket) {
                    Ok(acceptor) => {
                        let listener = Listener {
                            acceptor,
                            name,
                            proxy: shared,
                            sources,
                            splicer,
                            stop,
                        };
                        listener.run().await;
                    }
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
}

impl AdminState for Proxy {
    fn ready(&self) -> bool {
        self.inner.warm.load(Ordering::SeqCst) && self.inner.ready.load(Ordering::SeqCst)
    }

    fn config_hash(&self) -> String {
        self.inner.shared.current().hash.clone()
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
