//! The server's TLS settings, replaced while it runs: SIGHUP (the binary) or a change to the
//! configuration file or to a TLS file it names (polled, [`isthmus_admin::watch`]) re-reads
//! the file, builds both TLS configurations and puts them in place for the next handshakes.
//! Sessions and CONNECT tunnels already up keep the TLS they were set up with, so rotating a
//! certificate, a key, a CA or `allowed_client_names` drops nothing. A file that fails to load
//! or to build changes nothing (logged, `isthmus_tunnel_tls_reloads_total{outcome="failed"}`).
//! Only `agents.tls` and `connect.tls` are applied; other settings take a restart.

use super::Server;
use crate::metrics::RefusedLabels;
use crate::{tls, Error};
use isthmus_admin::watch::Watched;
use isthmus_config::{load_file, ServerTlsConfig, TunnelServerConfig};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use rustls::ServerConfig;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The TLS configurations new handshakes use.
#[derive(Debug)]
pub(crate) struct TlsNow {
    agents: RwLock<Arc<ServerConfig>>,
    connect: RwLock<Option<Arc<ServerConfig>>>,
}

impl TlsNow {
    pub(crate) fn new(agents: Arc<ServerConfig>, connect: Option<Arc<ServerConfig>>) -> Self {
        Self {
            agents: RwLock::new(agents),
            connect: RwLock::new(connect),
        }
    }

    /// For the next agent handshake.
    pub(crate) fn agents(&self) -> Arc<ServerConfig> {
        self.agents
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// For the next CONNECT client's handshake; `None`: plain HTTP.
    pub(crate) fn connect(&self) -> Option<Arc<ServerConfig>> {
        self.connect
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Builds the agents' and the CONNECT front's TLS from `c`; refused client names count into
/// `refused`.
pub(crate) fn build(
    c: &TunnelServerConfig,
    refused: &Family<RefusedLabels, Counter>,
) -> Result<(Arc<ServerConfig>, Option<Arc<ServerConfig>>), Error> {
    let names = |listener| {
        refused.get_or_create_owned(&RefusedLabels {
            listener,
            reason: "client_name",
        })
    };
    let t = &c.agents.tls;
    let agents = tls::server_config_for_names(
        &t.cert,
        &t.key,
        &t.client_ca,
        &[tls::ALPN_H2],
        &t.allowed_client_names,
        names("agents"),
    )?;
    // No ALPN on the CONNECT endpoint: a client offering none, or only `h2`, must still get
    // in (rustls refuses a handshake whose offered protocols do not overlap ours).
    let connect = match &c.connect.tls {
        Some(t) => Some(tls::server_config_for_names(
            &t.cert,
            &t.key,
            &t.client_ca,
            &[],
            &t.allowed_client_names,
            names("connect"),
        )?),
        None => None,
    };
    Ok((agents, connect))
}

/// The file and the TLS files it names.
fn files(path: &Path, c: &TunnelServerConfig) -> Vec<PathBuf> {
    let tls = |t: &ServerTlsConfig| [t.cert.clone(), t.key.clone(), t.client_ca.clone()];
    let mut v = vec![path.to_owned()];
    v.extend(tls(&c.agents.tls));
    v.extend(c.connect.tls.iter().flat_map(tls));
    v
}

impl Server {
    /// Re-reads the configuration file at `path` and applies its `agents.tls` and
    /// `connect.tls` to the handshakes that follow (see the module). Returns the files to
    /// watch from now on.
    pub fn reload_tls(&self, path: &Path) -> Result<Vec<PathBuf>, Error> {
        let applied = load_file::<TunnelServerConfig>(path)
            .map_err(Error::from)
            .and_then(|l| {
                let built = build(&l.config, &self.shared.limits.refused)?;
                Ok((files(path, &l.config), built))
            });
        let (files, (agents, connect)) = match applied {
            Ok(x) => x,
            Err(e) => {
                self.shared.metrics.tls_reload(false);
                tracing::warn!(error = %e, "TLS reload failed; the previous certificates stay in use");
                return Err(e);
            }
        };
        let now = &self.shared.tls;
        *now.agents.write().unwrap_or_else(PoisonError::into_inner) = agents;
        let mut running = now.connect.write().unwrap_or_else(PoisonError::into_inner);
        match (running.as_mut(), connect) {
            (Some(r), Some(c)) => *r = c,
            (None, None) => {}
            _ => tracing::warn!("connect.tls switched on or off: takes a restart"),
        }
        drop(running);
        self.shared.metrics.tls_reload(true);
        tracing::info!(config = %path.display(), "TLS reloaded: new handshakes use the files as they are now");
        Ok(files)
    }

    /// Every `interval` (zero: never), checks whether the configuration file at `path` or a
    /// TLS file it names has changed, and then [`Server::reload_tls`]. Until `stop`.
    pub async fn watch_tls(&self, path: PathBuf, interval: Duration, stop: CancellationToken) {
        if interval.is_zero() {
            return;
        }
        let named = load_file::<TunnelServerConfig>(&path).map(|l| files(&path, &l.config));
        let mut named = named.unwrap_or_else(|_| vec![path.clone()]);
        let mut watched = Watched::new(named.clone());
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(interval) => {}
            }
            // The identities are taken before the files are read: a change made while they
            // are read shows at the next poll.
            if watched.changed() {
                match self.reload_tls(&path) {
                    Ok(files) if files != named => {
                        watched = Watched::new(files.clone());
                        named = files;
                    }
                    _ => {}
                }
            }
        }
    }
}
