//! The shoot-side HTTPS webhook called through the temporary VPN for the whole migration
//! (issue 6, point 5): a tunnel server per seed, the regular agent on the source server, a
//! temporary agent joining the destination server when the join starts, the regular agent
//! moving to the destination (make before break) and the temporary agent draining at the end.
//!
//! Placement, as in Gardener:
//! - each seed runs `isthmus tunnel-server` as a process in its namespace ([`servers`]),
//!   reachable from outside only through the seed's isthmus proxy (SNI route, TLS passthrough);
//! - the shoot is a namespace of its own ([`shoot`]) where both agents run as
//!   `isthmus tunnel-agent` processes; it reaches the seeds' proxies across its own link
//!   emulator with the lab's RTT; the handover is driven by the shoot's hosts file (the DNS
//!   move), by starting the temporary agent, and by SIGTERM (drain);
//! - the kube-apiserver-like callers ([`caller`]) and the webhook ([`endpoint`]) run in the lab
//!   process: the callers dial a seed's CONNECT endpoint over the seed's veth (kube-apiserver
//!   runs in the seed, next to the tunnel server), the webhook listens on the host end of the
//!   shoot's veth (where the shoot's agents dial it).

mod caller;
mod certs;
pub mod endpoint;
mod http;
pub use http::{answer_json, read_request};
mod process;
mod servers;
mod shoot;

use crate::error::{Error, Result};
use crate::topology::Topology;
use caller::{Callers, ROUTE_BOTH, ROUTE_DESTINATION, ROUTE_SOURCE};
use certs::{Certs, LabTls};
use process::Process;
use serde::Serialize;
use servers::SeedServer;
use shoot::{Role, Shoot};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The tunnel server's TLS name (the agents' SNI, routed by each seed's proxy).
const VPN_NAME: &str = crate::proxy::TUNNEL_SNI;
/// The webhook's TLS name, checked by the caller.
const WEBHOOK_NAME: &str = "webhook.lab";
/// The webhook's Service as the shoot's kube-apiservers reach it (an `ExternalName` Service
/// `lab-webhook` in `default`, see [`crate::api`]), and the TLS name they check.
pub const WEBHOOK_SERVICE: (&str, &str) = ("default", "lab-webhook");
const WEBHOOK_SERVICE_NAME: &str = "lab-webhook.default.svc";
/// How long a session change (join, move, drain) may take before the run fails.
const SESSION_DEADLINE: Duration = Duration::from_secs(30);

/// Which seed's tunnel server a call went through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Via {
    Source,
    Destination,
}

/// One webhook call.
#[derive(Debug, Clone, Serialize)]
pub struct Call {
    /// Milliseconds since the lab started.
    pub start_ms: f64,
    /// The call's latency less the time the webhook holds a `/slow` call on purpose.
    pub latency_ms: f64,
    pub via: Via,
    pub ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// How a seed's kube-apiserver reaches the shoot's webhook: `--egress-selector-config-file`
/// (`cluster`, HTTPConnect over mTLS to `connect`) and the webhook behind the tunnel.
#[derive(Debug, Clone)]
pub struct Egress {
    pub connect: SocketAddr,
    /// The tunnel's CA: it signed the tunnel server's and the webhook's certificates.
    pub ca: PathBuf,
    /// kube-apiserver's client certificate (to the CONNECT endpoint and to the webhook).
    pub cert: PathBuf,
    pub key: PathBuf,
    /// The webhook's address in the shoot (what the agents dial).
    pub webhook: SocketAddr,
}

/// The webhook part of a lab run. Dropping it stops every task and process.
#[derive(Debug)]
pub struct WebhookLab {
    bin: PathBuf,
    certs: Certs,
    callers: Callers,
    workers: Vec<JoinHandle<()>>,
    stop_webhook: CancellationToken,
    served: endpoint::Served,
    // Field order is drop order: the agents before their namespace.
    regular: Option<Process>,
    temporary: Option<Process>,
    shoot: Shoot,
    /// Source and destination tunnel servers (in the seeds, which outlive this).
    servers: Vec<SeedServer>,
}

impl WebhookLab {
    /// Starts both seeds' tunnel servers, the shoot with the webhook and the regular agent on
    /// the source, waits until its session is verified, then starts calling through the
    /// source server.
    pub async fn start(
        epoch: Instant,
        dir: &Path,
        bin: &Path,
        topo: &Topology,
        rtt: Duration,
    ) -> Result<Self> {
        let dir = dir.join("tunnel");
        let certs = Certs::new(&dir, &[topo.source.seed_ip, topo.destination.seed_ip])?;
        let tls = LabTls::new(&certs)?;
        let servers = vec![
            SeedServer::start(bin, &topo.source, &dir, &certs).await?,
            SeedServer::start(bin, &topo.destination, &dir, &certs).await?,
        ];
        let shoot = Shoot::new(topo, rtt, &dir).await?;
        let stop_webhook = CancellationToken::new();
        let served = endpoint::Served::default();
        let webhook = endpoint::start(
            SocketAddr::from((shoot.webhook_ip(), 0)),
            tls.webhook.clone(),
            stop_webhook.clone(),
            served.clone(),
        )
        .await?;
        let regular = shoot.start_agent(bin, &certs, Role::Regular)?;
        let callers = Callers {
            epoch,
            tls,
            connects: [servers[0].connect, servers[1].connect],
            webhook,
            route: Arc::new(AtomicU8::new(ROUTE_SOURCE)),
            calls: Arc::default(),
            stop: CancellationToken::new(),
        };
        let mut lab = Self {
            bin: bin.to_path_buf(),
            certs,
            callers,
            workers: Vec::new(),
            stop_webhook,
            served,
            regular: Some(regular),
            temporary: None,
            shoot,
            servers,
        };
        lab.wait_active(
            0,
            1,
            "the regular agent's session on the source tunnel server",
        )
        .await?;
        lab.workers = lab.callers.spawn();
        Ok(lab)
    }

    /// The join starts: the temporary agent connects to the destination's tunnel server and
    /// the destination kube-apiserver starts calling through it (alongside the source's).
    pub async fn join_temporary(&mut self) -> Result<()> {
        self.temporary = Some(
            self.shoot
                .start_agent(&self.bin, &self.certs, Role::Temporary)?,
        );
        self.wait_active(1, 1, "the temporary agent's session on the destination")
            .await?;
        self.callers.route.store(ROUTE_BOTH, Ordering::Relaxed);
        Ok(())
    }

    /// The kube-apiserver's DNS moved: calls go through the destination only; then the
    /// regular agent's name moves too (the shoot's hosts file), and it opens and verifies its
    /// destination session before it drains the source one.
    pub async fn move_to_destination(&mut self) -> Result<()> {
        self.callers
            .route
            .store(ROUTE_DESTINATION, Ordering::Relaxed);
        self.shoot.point_vpn_at(1)?;
        self.wait_active(1, 2, "the regular agent's session on the destination")
            .await?;
        self.wait_active(0, 0, "the regular agent leaving the source")
            .await
    }

    /// The temporary agent drains (SIGTERM: its open streams finish) and exits; with `abort`
    /// the destination kube-apiserver goes away first, so calls return to the source only.
    pub async fn drain_temporary(&mut self, abort: bool) -> Result<()> {
        if abort {
            self.callers.route.store(ROUTE_SOURCE, Ordering::Relaxed);
        }
        if let Some(t) = self.temporary.take() {
            t.stop(shoot::DRAIN + Duration::from_secs(5)).await?;
        }
        // After a move the regular agent stays on the destination; after an abort nobody does.
        let left = if abort { 0 } else { 1 };
        self.wait_active(1, left, "the temporary agent gone").await
    }

    /// Stops calling (in-flight calls finish), stops every party, returns every call.
    pub async fn stop(mut self) -> Vec<Call> {
        self.callers.stop.cancel();
        for w in std::mem::take(&mut self.workers) {
            let _ = w.await;
        }
        // Teardown errors (a process that would not drain) do not change what the calls saw;
        // they are logged, and drop kills what is left.
        for a in [self.regular.take(), self.temporary.take()]
            .into_iter()
            .flatten()
        {
            if let Err(e) = a.stop(shoot::DRAIN + Duration::from_secs(5)).await {
                tracing::warn!(error = %e, "tunnel agent teardown");
            }
        }
        for s in std::mem::take(&mut self.servers) {
            if let Err(e) = s.stop().await {
                tracing::warn!(error = %e, "tunnel server teardown");
            }
        }
        self.stop_webhook.cancel();
        let calls = self
            .callers
            .calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        calls.clone()
    }

    /// What a seed's kube-apiserver needs to call the webhook through this tunnel: its egress
    /// (the seed's CONNECT endpoint, mTLS) and the webhook's address and CA.
    pub fn kube_apiserver_egress(&self, seed: usize) -> Option<Egress> {
        let server = self.servers.get(seed)?;
        let (cert, key) = self.certs.pair("kube-apiserver");
        Some(Egress {
            connect: server.connect,
            ca: self.certs.ca(),
            cert,
            key,
            webhook: self.callers.webhook,
        })
    }

    /// AdmissionReviews from the real kube-apiservers the webhook answered so far.
    pub fn kube_apiserver_calls(&self) -> usize {
        self.served.total()
    }

    /// Waits until seed `seed`'s tunnel server has exactly `n` active sessions.
    async fn wait_active(&self, seed: usize, n: usize, what: &str) -> Result<()> {
        let deadline = Instant::now() + SESSION_DEADLINE;
        let server = self
            .servers
            .get(seed)
            .ok_or_else(|| Error::State(format!("no tunnel server {seed}")))?;
        while server.active_sessions().await != Some(n) {
            if Instant::now() >= deadline {
                return Err(Error::Timeout {
                    what: format!("{what} (see {}'s tunnel logs)", server.label),
                    after: SESSION_DEADLINE,
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }
}

impl Drop for WebhookLab {
    fn drop(&mut self) {
        // On an error path nobody calls `stop`: end every task; the processes die with their
        // `Process` handles.
        self.callers.stop.cancel();
        self.stop_webhook.cancel();
    }
}
