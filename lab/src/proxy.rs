//! A seed's isthmus proxy, run as its own process inside the seed (`isthmus proxy --config`),
//! driven the way the controller drives it: the planner's routes rendered by the controller's
//! `proxy_config::render` (JSON), the file rewritten, SIGHUP, and `/config`'s hash compared
//! with the rendered file's (the controller's rollout rule).
//!
//! Two things differ from a cluster, both because a seed here is one network namespace with no
//! pod IPs or Services: the upstream endpoints are the members' local ports (the planner's
//! in-cluster `<pod>.etcd-main-peer.<ns>.svc.cluster.local:2380` would be the proxy's own
//! listener port in the same namespace), and the admin port is fixed (9901).

use crate::error::{Error, Result};
use crate::member::MemberRef;
use crate::seeds::{run, Seed};
use crate::side::Side;
use isthmus_controller::crd::{PortScheme, ProxyProtocol};
use isthmus_controller::plan::MemberRoute;
use isthmus_controller::proxy_config::{self, Layout};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The admin port inside every seed.
pub const ADMIN_PORT: u16 = 9901;
/// The seed's ingress for the shoot's tunnel agents: TLS passthrough on SNI [`TUNNEL_SNI`] to
/// the seed's tunnel server on `127.0.0.1:`[`TUNNEL_UPSTREAM_PORT`] (see [`crate::webhook`]),
/// with a PROXY v2 header (`spec.vpn.proxyProtocol: v2`), as the controller renders it.
/// Every configuration carries it, whatever etcd routes the migration sets.
pub const TUNNEL_PORT: u16 = 8443;
pub const TUNNEL_SNI: &str = "vpn-seed.lab";
pub const TUNNEL_UPSTREAM_PORT: u16 = 9443;

/// The VPN listener port of the controller-rendered proxy file in controller-driven runs: the
/// seed's tunnel ingress on [`TUNNEL_PORT`] is a proxy of its own there
/// ([`render_tunnel_ingress`]), so the migration's proxy serves exactly the controller's file.
pub const UNUSED_VPN_PORT: u16 = 8444;
/// The admin port of the tunnel-ingress proxy (controller-driven runs).
pub const TUNNEL_ADMIN_PORT: u16 = 9905;

/// Settings the lab adds to the controller's file: a faster file watch and a short drain, so a
/// restart in the `five` phase takes a second rather than the defaults' 5 s + 30 s. (In a
/// cluster they would come with the proxy's deployment values.)
fn lab_settings(c: &mut isthmus_config::ProxyConfig) {
    c.watch_interval = isthmus_config::Duration::from_millis(100);
    c.drain_delay = isthmus_config::Duration::from_millis(500);
    c.drain_timeout = isthmus_config::Duration::from_secs(3);
}

/// A rendered proxy file and its hash (what `/config` reports once the proxy loaded it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyFile {
    pub text: String,
    pub hash: String,
}

/// Renders `routes` of `side`'s migration with the controller's renderer, pointing each upstream
/// at the member's local port in `seed`.
pub fn render(side: Side, seed: &Seed, routes: &[MemberRoute]) -> Result<ProxyFile> {
    let local: Vec<MemberRoute> = routes
        .iter()
        .map(|r| {
            let m = (0..crate::member::MEMBERS)
                .map(|index| MemberRef { side, index })
                .find(|m| m.dns() == r.sni)
                .ok_or_else(|| Error::State(format!("route for unknown member {}", r.sni)))?;
            let endpoint = if r.listener.starts_with("peer-") {
                format!("127.0.0.1:{}", m.peer_port())
            } else {
                // Client routes exist as in a cluster; the lab's client dials etcd directly.
                format!("{}:{}", seed.seed_ip, m.client_port())
            };
            Ok(MemberRoute {
                endpoint,
                ..r.clone()
            })
        })
        .collect::<Result<Vec<_>>>()?;
    // The shoot's tunnel ingress rides on the layout's VPN listener, whatever the migration
    // routes are (the lab's specs have no `vpn`, so the planner adds no VPN route itself).
    let mut local = local;
    local.push(tunnel_route(format!("vpn-{TUNNEL_PORT}")));
    let admin = SocketAddr::from(([0, 0, 0, 0], ADMIN_PORT));
    let layout = Layout::standard(PortScheme::default(), 3, TUNNEL_PORT, admin);
    file(proxy_config::render_with(&layout, &local, lab_settings))
}

/// The file `isthmus controller` renders for a seed with no migration routes (its standard
/// layout with `--vpn-port` [`UNUSED_VPN_PORT`]): what the proxy's volume holds before the
/// controller's first ConfigMap arrives.
pub fn controller_initial() -> Result<ProxyFile> {
    let admin = SocketAddr::from(([0, 0, 0, 0], ADMIN_PORT));
    let layout = Layout::standard(PortScheme::default(), 3, UNUSED_VPN_PORT, admin);
    file(proxy_config::render(&layout, &[]))
}

/// The seed's tunnel ingress alone (controller-driven runs): TLS passthrough on
/// [`TUNNEL_SNI`] to the seed's tunnel server.
pub fn render_tunnel_ingress() -> Result<ProxyFile> {
    let admin = SocketAddr::from(([0, 0, 0, 0], TUNNEL_ADMIN_PORT));
    let listener = format!("vpn-{TUNNEL_PORT}");
    let layout = Layout {
        admin,
        listeners: vec![(listener.clone(), TUNNEL_PORT)],
        trusted_proxies: Vec::new(),
        default_allowed_sources: Vec::new(),
    };
    let route = tunnel_route(listener);
    file(proxy_config::render_with(&layout, &[route], lab_settings))
}

fn file(
    r: std::result::Result<proxy_config::Rendered, proxy_config::RenderError>,
) -> Result<ProxyFile> {
    let r = r.map_err(|e| Error::State(e.to_string()))?;
    Ok(ProxyFile {
        text: r.text,
        hash: r.hash,
    })
}

/// The proxy process of one seed.
#[derive(Debug)]
pub struct SeedProxy {
    bin: PathBuf,
    config: PathBuf,
    log: PathBuf,
    admin: SocketAddr,
    child: Option<Child>,
    /// Children being drained after a restart, reaped on drop.
    draining: Vec<Child>,
    /// Hash of the file last written.
    written: String,
}

impl SeedProxy {
    /// Writes `file` and starts the proxy in `seed`; returns once it serves that file.
    pub async fn start(bin: &Path, seed: &Seed, dir: &Path, file: &ProxyFile) -> Result<Self> {
        let config = dir.join(format!("proxy-{}.json", seed.label));
        write(&config, &file.text)?;
        let log = dir.join(format!("proxy-{}.log", seed.label));
        Self::start_at(bin, seed, config, log, ADMIN_PORT, &file.hash).await
    }

    /// Starts the proxy in `seed` on the file at `config` (already written; its hash `hash`)
    /// with its admin on `admin_port`; returns once it serves that file.
    pub async fn start_at(
        bin: &Path,
        seed: &Seed,
        config: PathBuf,
        log: PathBuf,
        admin_port: u16,
        hash: &str,
    ) -> Result<Self> {
        let mut p = Self {
            bin: bin.to_path_buf(),
            config,
            log,
            admin: SocketAddr::from((seed.seed_ip, admin_port)),
            child: None,
            draining: Vec::new(),
            written: hash.to_string(),
        };
        p.spawn(seed)?;
        p.wait_hash().await?;
        Ok(p)
    }

    fn spawn(&mut self, seed: &Seed) -> Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| Error::io(self.log.display(), e))?;
        let child = seed
            .command(&self.bin.display().to_string())
            .arg("proxy")
            .arg("--config")
            .arg(&self.config)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| Error::Command {
                command: format!("{} proxy", self.bin.display()),
                detail: e.to_string(),
            })?;
        self.child = Some(child);
        Ok(())
    }

    /// Writes `file` (if it changed), sends SIGHUP and waits until `/config` reports its hash.
    /// Returns whether it changed.
    pub async fn set_config(&mut self, file: &ProxyFile) -> Result<bool> {
        if file.hash == self.written {
            return Ok(false);
        }
        write(&self.config, &file.text)?;
        self.written = file.hash.clone();
        if let Some(c) = &self.child {
            run(Command::new("kill").args(["-HUP", &c.id().to_string()]))?;
        }
        self.wait_hash().await?;
        Ok(true)
    }

    /// The hash of the config the proxy serves now (`/config`), if it answers.
    pub async fn serving_hash(&self) -> Option<String> {
        let response = http_get(self.admin, "/config").await.ok()?;
        let body = response.split_once("\r\n\r\n")?.1;
        let v: serde_json::Value = serde_json::from_str(body).ok()?;
        v.get("hash")?.as_str().map(str::to_string)
    }

    /// Connections open now on the member listeners (`peer-*`, `client-*`) other than
    /// `kept`, per listener with any, from the proxy's `isthmus_proxy_active_connections`;
    /// `None` if it does not answer.
    pub async fn member_connections(&self, kept: &[String]) -> Option<Vec<(String, u64)>> {
        let response = http_get(self.admin, "/metrics").await.ok()?;
        let body = response.split_once("\r\n\r\n")?.1;
        let mut open = Vec::new();
        for line in body.lines() {
            let Some(rest) = line.strip_prefix("isthmus_proxy_active_connections{listener=\"")
            else {
                continue;
            };
            let (listener, value) = rest.split_once("\"}")?;
            let n = value.trim().parse::<u64>().ok()?;
            let member = listener.starts_with("peer-") || listener.starts_with("client-");
            if member && n > 0 && !kept.iter().any(|k| k == listener) {
                open.push((listener.to_string(), n));
            }
        }
        Some(open)
    }

    /// Restarts with drain, as a DaemonSet rollout would: SIGTERM the old process, and as soon
    /// as it has closed its listeners start the new one (on the same file), while the old one
    /// still drains the connections it holds.
    pub async fn restart(&mut self, seed: &Seed) -> Result<()> {
        let Some(old) = self.child.take() else {
            return self.spawn(seed);
        };
        run(Command::new("kill").args(["-TERM", &old.id().to_string()]))?;
        self.draining.push(old);
        // The first peer listener exists whatever the routes (`Layout::standard`).
        let probe = SocketAddr::from((seed.seed_ip, PortScheme::default().peer(0)));
        let deadline = Instant::now() + Duration::from_secs(30);
        while tokio::net::TcpStream::connect(probe).await.is_ok() {
            if Instant::now() > deadline {
                return Err(Error::Timeout {
                    what: "the draining proxy to close its listeners".into(),
                    after: Duration::from_secs(30),
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // The file may have changed since this process wrote it (the controller's ConfigMap,
        // delivered by the kubelet stand-in): the new process must serve what is there now.
        if let Ok(bytes) = std::fs::read(&self.config) {
            self.written = isthmus_config::hash_bytes(&bytes);
        }
        self.spawn(seed)?;
        self.wait_hash().await
    }

    /// Polls `/config` until it reports the hash of the file last written.
    async fn wait_hash(&self) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if self.serving_hash().await.as_deref() == Some(self.written.as_str()) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(Error::Timeout {
                    what: format!("proxy {} to serve config {}", self.admin, self.written),
                    after: Duration::from_secs(30),
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for SeedProxy {
    fn drop(&mut self) {
        for c in self.child.iter_mut().chain(self.draining.iter_mut()) {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn write(path: &Path, text: &str) -> Result<()> {
    // Write then rename: the proxy's file watcher must never see half a file.
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).map_err(|e| Error::io(tmp.display(), e))?;
    std::fs::rename(&tmp, path).map_err(|e| Error::io(path.display(), e))
}

/// A minimal HTTP/1.0 GET (the admin endpoint closes after answering).
pub async fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<String> {
    let mut s = tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(addr))
        .await??;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: lab\r\n\r\n").as_bytes())
        .await?;
    let mut body = String::new();
    tokio::time::timeout(Duration::from_secs(2), s.read_to_string(&mut body)).await??;
    Ok(body)
}

/// The seed's tunnel route on `listener`: TLS passthrough on [`TUNNEL_SNI`] to the seed's
/// tunnel server, from any source, with a PROXY v2 header.
fn tunnel_route(listener: String) -> MemberRoute {
    MemberRoute {
        listener,
        port: TUNNEL_PORT,
        sni: TUNNEL_SNI.into(),
        upstream: "tunnel-server".into(),
        endpoint: format!("127.0.0.1:{TUNNEL_UPSTREAM_PORT}"),
        allowed_sources: crate::specs::ANY_SOURCE.map(String::from).to_vec(),
        proxy_protocol: ProxyProtocol::V2,
    }
}
