//! A seed's isthmus proxy, run as its own process inside the seed (`isthmus proxy --config`),
//! driven the way the controller drives it: rewrite the route YAML, SIGHUP, verify `/config`.
//!
//! Ports inside a seed are fixed (peer listener 2380 + member index, admin 9901): the namespace
//! is private to this lab, and etcd needs its peer URLs before anything starts.

use crate::error::{Error, Result};
use crate::seeds::{run, Seed};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The admin port inside every seed.
pub const ADMIN_PORT: u16 = 9901;
/// The seed's ingress for the shoot's tunnel agents: TLS passthrough on SNI [`TUNNEL_SNI`] to
/// the seed's tunnel server on `127.0.0.1:`[`TUNNEL_UPSTREAM_PORT`] (see [`crate::webhook`]).
/// Every configuration carries it, whatever etcd routes the migration sets.
pub const TUNNEL_PORT: u16 = 8443;
pub const TUNNEL_SNI: &str = "vpn-seed.lab";
pub const TUNNEL_UPSTREAM_PORT: u16 = 9443;

/// One route: SNI `host` on listener `2380 + index` to the member's local peer port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub index: u16,
    pub host: String,
    pub upstream_port: u16,
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
}

impl SeedProxy {
    /// Writes the config for `routes` and starts the proxy in `seed`; returns once it is ready.
    pub async fn start(bin: &Path, seed: &Seed, dir: &Path, routes: &[Route]) -> Result<Self> {
        let config = dir.join(format!("proxy-{}.yaml", seed.label));
        write(&config, &yaml(routes))?;
        let mut p = Self {
            bin: bin.to_path_buf(),
            config,
            log: dir.join(format!("proxy-{}.log", seed.label)),
            admin: SocketAddr::from((seed.seed_ip, ADMIN_PORT)),
            child: None,
            draining: Vec::new(),
        };
        p.spawn(seed)?;
        p.wait_config(routes).await?;
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

    /// Rewrites the routes, sends SIGHUP and waits until `/config` shows them.
    pub async fn set_routes(&mut self, routes: &[Route]) -> Result<()> {
        write(&self.config, &yaml(routes))?;
        if let Some(c) = &self.child {
            run(Command::new("kill").args(["-HUP", &c.id().to_string()]))?;
        }
        self.wait_config(routes).await
    }

    /// Restarts with drain, as a DaemonSet rollout would: SIGTERM the old process, and as soon
    /// as it has closed its listeners start the new one, while the old one still drains the
    /// connections it holds.
    pub async fn restart(&mut self, seed: &Seed, routes: &[Route]) -> Result<()> {
        let Some(old) = self.child.take() else {
            return self.spawn(seed);
        };
        run(Command::new("kill").args(["-TERM", &old.id().to_string()]))?;
        self.draining.push(old);
        let probe = SocketAddr::from((seed.seed_ip, 2380 + routes.first().map_or(0, |r| r.index)));
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
        self.spawn(seed)?;
        self.wait_config(routes).await
    }

    async fn wait_config(&self, routes: &[Route]) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(body) = http_get(self.admin, "/config").await {
                if routes.iter().all(|r| body.contains(&r.host)) {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                return Err(Error::Timeout {
                    what: format!("proxy {} to serve its routes", self.admin),
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

/// The proxy YAML for these routes: one listener per member index, as Gardener exposes them.
pub fn yaml(routes: &[Route]) -> String {
    let mut y = format!(
        "admin: {{ address: \"0.0.0.0:{ADMIN_PORT}\" }}\nwatch_interval: 100ms\ndrain_delay: 500ms\ndrain_timeout: 3s\nlisteners:\n"
    );
    let mut indices: Vec<u16> = routes.iter().map(|r| r.index).collect();
    indices.sort_unstable();
    indices.dedup();
    y += &format!(
        "  - name: tunnel\n    address: \"0.0.0.0:{TUNNEL_PORT}\"\n    routes:\n      - {{ sni: \"{TUNNEL_SNI}\", upstream: tunnel-server }}\n"
    );
    for i in &indices {
        y += &format!(
            "  - name: etcd-peer-{i}\n    address: \"0.0.0.0:{}\"\n    routes:\n",
            2380 + i
        );
        for r in routes.iter().filter(|r| r.index == *i) {
            y += &format!(
                "      - {{ sni: \"{}\", upstream: \"{}\" }}\n",
                r.host, r.host
            );
        }
    }
    y += &format!(
        "upstreams:\n  - {{ name: tunnel-server, endpoints: [\"127.0.0.1:{TUNNEL_UPSTREAM_PORT}\"] }}\n"
    );
    for r in routes {
        y += &format!(
            "  - {{ name: \"{}\", endpoints: [\"127.0.0.1:{}\"] }}\n",
            r.host, r.upstream_port
        );
    }
    y
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
