//! A seed's tunnel server: `isthmus tunnel-server` as a process in the seed's namespace, like
//! the seed's proxy. Agents reach it only through the seed's proxy (SNI route
//! [`crate::proxy::TUNNEL_SNI`] to `127.0.0.1:`[`crate::proxy::TUNNEL_UPSTREAM_PORT`]); the
//! seed's kube-apiserver reaches its CONNECT endpoint on the seed's address. The proxy sends
//! PROXY v2 on that route and the server trusts it from loopback (`agents.trusted_proxies`),
//! as a seed's tunnel server trusts the seed's pod network: per-source handshake shares count
//! the agents' addresses, not the proxy's.

use super::certs::Certs;
use super::process::Process;
use crate::error::{Error, Result};
use crate::proxy::TUNNEL_UPSTREAM_PORT;
use crate::seeds::Seed;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

/// The CONNECT endpoint (TLS, client certificates) inside every seed.
const CONNECT_PORT: u16 = 9444;
/// The admin endpoint (`/metrics`) inside every seed; the lab reads the session gauge there.
const ADMIN_PORT: u16 = 9902;
/// How long open streams may take after SIGTERM.
const DRAIN: Duration = Duration::from_secs(10);

#[derive(Debug)]
pub(super) struct SeedServer {
    pub(super) label: String,
    /// Where the seed's kube-apiserver sends its CONNECTs.
    pub(super) connect: SocketAddr,
    admin: SocketAddr,
    process: Process,
}

impl SeedServer {
    /// Starts the server in `seed` and waits until its admin endpoint answers.
    pub(super) async fn start(bin: &Path, seed: &Seed, dir: &Path, certs: &Certs) -> Result<Self> {
        let (crt, key) = certs.pair("tunnel-server");
        let tls = format!(
            "{{ cert: \"{}\", key: \"{}\", client_ca: \"{}\" }}",
            crt.display(),
            key.display(),
            certs.ca().display()
        );
        let yaml = format!(
            "agents: {{ address: \"127.0.0.1:{TUNNEL_UPSTREAM_PORT}\", tls: {tls}, \
             trusted_proxies: [127.0.0.0/8] }}\n\
             connect: {{ address: \"0.0.0.0:{CONNECT_PORT}\", tls: {tls} }}\n\
             admin: {{ address: \"0.0.0.0:{ADMIN_PORT}\" }}\n\
             connect_timeout: 10s\n\
             session_wait: 3s\n\
             drain_timeout: {}s\n",
            DRAIN.as_secs()
        );
        let stem = format!("tunnel-server-{}", seed.label);
        let process = Process::start(bin, seed, "tunnel-server", dir, &stem, &yaml)?;
        let mut s = Self {
            label: seed.label.clone(),
            connect: SocketAddr::from((seed.seed_ip, CONNECT_PORT)),
            admin: SocketAddr::from((seed.seed_ip, ADMIN_PORT)),
            process,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while s.active_sessions().await.is_none() {
            s.process.check_running()?;
            if Instant::now() > deadline {
                return Err(Error::Timeout {
                    what: format!("the {} tunnel server's admin endpoint", s.label),
                    after: Duration::from_secs(20),
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(s)
    }

    /// Verified sessions that take new streams (`isthmus_tunnel_sessions{state="active"}`),
    /// or `None` when the admin endpoint does not answer.
    pub(super) async fn active_sessions(&self) -> Option<usize> {
        let text = metrics(self.admin).await.ok()?;
        if !text.contains("HTTP/1.1 200") && !text.contains("HTTP/1.0 200") {
            return None;
        }
        // A gauge family without any sample yet has no line: no session was ever active.
        Some(
            text.lines()
                .find_map(|l| l.strip_prefix("isthmus_tunnel_sessions{state=\"active\"} "))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0),
        )
    }

    /// Drains and stops.
    pub(super) async fn stop(self) -> Result<()> {
        self.process.stop(DRAIN + Duration::from_secs(5)).await
    }
}

async fn metrics(addr: SocketAddr) -> std::io::Result<String> {
    let io = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: lab\r\nConnection: close\r\n\r\n")
            .await?;
        let mut body = String::new();
        s.read_to_string(&mut body).await?;
        Ok(body)
    };
    tokio::time::timeout(Duration::from_secs(2), io).await?
}
