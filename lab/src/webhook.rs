//! The shoot-side HTTPS webhook called through the temporary VPN for the whole migration
//! (issue 6, point 5): a tunnel server per seed, the regular agent on the source server, a
//! temporary agent joining the destination server when the join starts, the regular agent
//! moving to the destination (make before break) and the temporary agent draining at the end.
//! A kube-apiserver-like caller (HTTP CONNECT with mTLS to a server's connect endpoint, then
//! TLS to the webhook through the tunnel) calls continuously; every call is recorded.
//!
//! Placement: every party runs in this process on 127.0.0.1 in the host namespace, using the
//! tunnel crate's library API. The tunnel therefore does not cross the seeds' namespaces nor
//! the link emulator: what this shows is the handover's choreography at the migration's phase
//! boundaries, not the tunnel's behaviour at the emulated RTT.

use crate::error::{Error, Result};
use crate::pki::Pki;
use isthmus_config::{AllowRule, Http2Config, ServerEntryConfig};
use isthmus_tunnel::agent::{Agent, AgentOptions, Resolve};
use isthmus_tunnel::server::{ConnectListener, Server, ServerOptions};
use prometheus_client::registry::Registry;
use rustls::pki_types::ServerName;
use serde::Serialize;
use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_rustls::{TlsAcceptor, TlsConnector};
use tokio_util::sync::CancellationToken;

/// Name the agents dial; the lab's resolver maps it to a seed's tunnel server (the DNS move).
const VPN_NAME: &str = "vpn-seed.lab";
/// The webhook's TLS name, checked by the caller.
const WEBHOOK_NAME: &str = "webhook.lab";
/// How long a session change (join, move, drain) may take before the run fails.
const SESSION_DEADLINE: Duration = Duration::from_secs(20);
/// Pause between two calls of a worker: continuous, without starving etcd of the 2 cores.
const PAUSE: Duration = Duration::from_millis(40);
/// Every other call takes this long in the webhook, so that streams are open when a session
/// drains (the drain must let them finish).
const SLOW: Duration = Duration::from_millis(300);
/// Longest a single call may take before it counts as failed (kube-apiserver's default
/// webhook timeout is 10 s).
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Parallel callers.
const WORKERS: usize = 2;

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
    pub latency_ms: f64,
    pub via: Via,
    pub ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Where the callers send their calls: the source kube-apiserver only, both (the destination
/// kube-apiserver runs too, over the temporary agent), or the destination only (after the DNS
/// move).
const ROUTE_SOURCE: u8 = 0;
const ROUTE_BOTH: u8 = 1;
const ROUTE_DESTINATION: u8 = 2;

/// A resolver whose answer the lab moves from one seed to the other.
#[derive(Debug, Default)]
struct SwitchResolver(Mutex<Vec<SocketAddr>>);

impl SwitchResolver {
    fn set(&self, addrs: Vec<SocketAddr>) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = addrs;
    }
}

impl Resolve for SwitchResolver {
    fn resolve<'a>(
        &'a self,
        _host: &'a str,
        _port: u16,
    ) -> Pin<Box<dyn Future<Output = std::io::Result<Vec<SocketAddr>>> + Send + 'a>> {
        let addrs = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        Box::pin(async move { Ok(addrs) })
    }
}

/// One seed's tunnel server.
#[derive(Debug)]
struct SeedServer {
    server: Server,
    agents: SocketAddr,
    connect: SocketAddr,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

/// One agent process (in-process task).
#[derive(Debug)]
struct RunningAgent {
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl RunningAgent {
    fn start(opts: AgentOptions) -> Self {
        // Metrics are not part of the report; the registry only satisfies the API.
        let agent = Agent::new(opts, &mut Registry::default());
        let stop = CancellationToken::new();
        let t = stop.clone();
        let task = tokio::spawn(async move { agent.run(t).await });
        Self { stop, task }
    }

    /// Drains (GOAWAY, open streams finish) and waits until the agent returned.
    async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

/// TLS configurations of every party, all from one throwaway CA.
#[derive(Debug, Clone)]
struct Tls {
    server_agents: Arc<rustls::ServerConfig>,
    server_connect: Arc<rustls::ServerConfig>,
    agent: Arc<rustls::ClientConfig>,
    apiserver_connect: Arc<rustls::ClientConfig>,
    apiserver_webhook: Arc<rustls::ClientConfig>,
    webhook: Arc<rustls::ServerConfig>,
}

impl Tls {
    fn new(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir.display(), e))?;
        let pki = Pki::new(dir)?;
        pki.leaf(dir, "tunnel-server", &[VPN_NAME, "127.0.0.1"])?;
        pki.leaf(dir, "tunnel-agent", &["vpn-shoot"])?;
        pki.leaf(dir, "kube-apiserver", &["kube-apiserver"])?;
        pki.leaf(dir, "webhook", &[WEBHOOK_NAME])?;
        let (ca, f) = (dir.join("ca.crt"), |n: &str| dir.join(n));
        let server = |alpn: &[&[u8]]| {
            isthmus_tunnel::tls::server_config(
                &f("tunnel-server.crt"),
                &f("tunnel-server.key"),
                &ca,
                alpn,
            )
        };
        let client = |stem: &str, alpn: &[&[u8]]| -> Result<Arc<rustls::ClientConfig>> {
            // The tunnel's client builder (TLS 1.3, client certificate) with the caller's ALPN.
            let base = isthmus_tunnel::tls::agent_config(
                &ca,
                &f(&format!("{stem}.crt")),
                &f(&format!("{stem}.key")),
            )?;
            let mut c = (*base).clone();
            c.alpn_protocols = alpn.iter().map(|a| a.to_vec()).collect();
            Ok(Arc::new(c))
        };
        Ok(Self {
            server_agents: server(&[isthmus_tunnel::tls::ALPN_H2])?,
            server_connect: server(&[])?,
            agent: client("tunnel-agent", &[isthmus_tunnel::tls::ALPN_H2])?,
            apiserver_connect: client("kube-apiserver", &[])?,
            apiserver_webhook: client("kube-apiserver", &[b"http/1.1"])?,
            // kube-apiserver presents its client certificate to webhooks that ask for one.
            webhook: isthmus_tunnel::tls::server_config(
                &f("webhook.crt"),
                &f("webhook.key"),
                &ca,
                &[b"http/1.1"],
            )?,
        })
    }
}

/// The webhook part of a lab run. Dropping it stops every task.
#[derive(Debug)]
pub struct WebhookLab {
    epoch: Instant,
    tls: Tls,
    servers: [SeedServer; 2],
    /// The regular agent's view of the VPN name: source first, destination after the move.
    dns: Arc<SwitchResolver>,
    regular: Option<RunningAgent>,
    temporary: Option<RunningAgent>,
    route: Arc<AtomicU8>,
    calls: Arc<Mutex<Vec<Call>>>,
    stop_calls: CancellationToken,
    callers: Vec<JoinHandle<()>>,
    stop_webhook: CancellationToken,
}

impl WebhookLab {
    /// Starts the webhook, both seeds' tunnel servers and the regular agent on the source,
    /// waits until its session is verified, then starts calling through the source server.
    pub async fn start(epoch: Instant, dir: &Path) -> Result<Self> {
        let tls = Tls::new(&dir.join("tunnel"))?;
        let stop_webhook = CancellationToken::new();
        let webhook = start_webhook(tls.webhook.clone(), stop_webhook.clone()).await?;
        let servers = [
            SeedServer::start(&tls).await?,
            SeedServer::start(&tls).await?,
        ];
        let dns = Arc::new(SwitchResolver::default());
        dns.set(vec![servers[0].agents]);
        let regular = RunningAgent::start(agent_options(&tls, dns.clone())?);
        let mut lab = Self {
            epoch,
            tls,
            servers,
            dns,
            regular: Some(regular),
            temporary: None,
            route: Arc::new(AtomicU8::new(ROUTE_SOURCE)),
            calls: Arc::default(),
            stop_calls: CancellationToken::new(),
            callers: Vec::new(),
            stop_webhook,
        };
        lab.wait_live(
            0,
            1,
            "the regular agent's session on the source tunnel server",
        )
        .await?;
        lab.start_callers(webhook);
        Ok(lab)
    }

    /// The join starts: the temporary agent connects to the destination's tunnel server and
    /// the destination kube-apiserver starts calling through it (alongside the source's).
    pub async fn join_temporary(&mut self) -> Result<()> {
        let dns = Arc::new(SwitchResolver::default());
        dns.set(vec![self.servers[1].agents]);
        self.temporary = Some(RunningAgent::start(agent_options(&self.tls, dns)?));
        self.wait_live(1, 1, "the temporary agent's session on the destination")
            .await?;
        self.route.store(ROUTE_BOTH, Ordering::Relaxed);
        Ok(())
    }

    /// The kube-apiserver's DNS moved: calls go through the destination only; then the
    /// regular agent's name moves too, and it opens and verifies its destination session
    /// before it drains the source one.
    pub async fn move_to_destination(&mut self) -> Result<()> {
        self.route.store(ROUTE_DESTINATION, Ordering::Relaxed);
        self.dns.set(vec![self.servers[1].agents]);
        self.wait_live(1, 2, "the regular agent's session on the destination")
            .await?;
        self.wait_live(0, 0, "the regular agent leaving the source")
            .await
    }

    /// The temporary agent drains (its open streams finish) and stops; with `abort` the
    /// destination kube-apiserver goes away first, so calls return to the source only.
    pub async fn drain_temporary(&mut self, abort: bool) -> Result<()> {
        if abort {
            self.route.store(ROUTE_SOURCE, Ordering::Relaxed);
        }
        if let Some(t) = self.temporary.take() {
            t.stop().await;
        }
        // After a move the regular agent stays on the destination; after an abort nobody does.
        let left = if abort { 0 } else { 1 };
        self.wait_live(1, left, "the temporary agent gone").await
    }

    /// Stops calling (in-flight calls finish), stops every party, returns every call.
    pub async fn stop(mut self) -> Vec<Call> {
        self.stop_calls.cancel();
        for c in std::mem::take(&mut self.callers) {
            let _ = c.await;
        }
        for a in [self.regular.take(), self.temporary.take()]
            .into_iter()
            .flatten()
        {
            a.stop().await;
        }
        for s in &self.servers {
            s.stop.cancel();
        }
        for s in &mut self.servers {
            let _ = (&mut s.task).await;
        }
        self.stop_webhook.cancel();
        let calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
        calls.clone()
    }

    async fn wait_live(&self, seed: usize, n: usize, what: &str) -> Result<()> {
        let deadline = Instant::now() + SESSION_DEADLINE;
        while self.servers[seed].server.live_sessions() != n {
            if Instant::now() >= deadline {
                return Err(Error::Timeout {
                    what: what.into(),
                    after: SESSION_DEADLINE,
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    fn start_callers(&mut self, webhook: SocketAddr) {
        let connects = [self.servers[0].connect, self.servers[1].connect];
        self.callers = (0..WORKERS)
            .map(|w| {
                let (route, calls, stop) = (
                    self.route.clone(),
                    self.calls.clone(),
                    self.stop_calls.clone(),
                );
                let (tls, epoch) = (self.tls.clone(), self.epoch);
                tokio::spawn(async move {
                    let mut i = w;
                    while !stop.is_cancelled() {
                        let via = match route.load(Ordering::Relaxed) {
                            ROUTE_SOURCE => Via::Source,
                            ROUTE_BOTH if i % 2 == 0 => Via::Source,
                            _ => Via::Destination,
                        };
                        let slow = (i / 2) % 2 == 1;
                        i += 1;
                        let connect = connects[usize::from(via == Via::Destination)];
                        let start = Instant::now();
                        let result =
                            tokio::time::timeout(CALL_TIMEOUT, call(&tls, connect, webhook, slow))
                                .await
                                .unwrap_or_else(|_| Err("timed out".into()));
                        let latency = start.elapsed();
                        calls
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .push(Call {
                                start_ms: crate::client::ms(start - epoch),
                                latency_ms: crate::client::ms(latency),
                                via,
                                ok: result.is_ok(),
                                error: result.err(),
                            });
                        tokio::time::sleep(PAUSE).await;
                    }
                })
            })
            .collect();
    }
}

impl Drop for WebhookLab {
    fn drop(&mut self) {
        // On an error path nobody calls `stop`: end every task rather than leave them running.
        self.stop_calls.cancel();
        self.stop_webhook.cancel();
        for a in [&self.regular, &self.temporary].into_iter().flatten() {
            a.stop.cancel();
        }
        for s in &self.servers {
            s.stop.cancel();
        }
    }
}

impl SeedServer {
    async fn start(tls: &Tls) -> Result<Self> {
        let opts = ServerOptions {
            agents_tls: tls.server_agents.clone(),
            connect_tls: Some(tls.server_connect.clone()),
            http2: Http2Config::default(),
            connect_timeout: Duration::from_secs(10),
            session_wait: Duration::from_secs(3),
            drain_timeout: Duration::from_secs(10),
            // Sessions are verified by this probe; a short interval keeps the join quick.
            probe_interval: Duration::from_millis(500),
        };
        let a = bind().await?;
        let c = bind().await?;
        let agents = a
            .local_addr()
            .map_err(|e| Error::io("tunnel listener", e))?;
        let connect = c
            .local_addr()
            .map_err(|e| Error::io("tunnel listener", e))?;
        let server = Server::new(opts, &mut Registry::default());
        let stop = CancellationToken::new();
        let (s, t) = (server.clone(), stop.clone());
        let task = tokio::spawn(async move { s.run(a, ConnectListener::Tcp(c), t).await });
        Ok(Self {
            server,
            agents,
            connect,
            stop,
            task,
        })
    }
}

async fn bind() -> Result<TcpListener> {
    TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| Error::io("bind 127.0.0.1:0", e))
}

fn agent_options(tls: &Tls, resolver: Arc<dyn Resolve>) -> Result<AgentOptions> {
    let allow = AllowRule::parse("127.0.0.1/32").map_err(Error::State)?;
    Ok(AgentOptions {
        servers: vec![ServerEntryConfig {
            address: format!("{VPN_NAME}:443"),
            server_name: None,
            http_connect_header: None,
        }],
        tls: tls.agent.clone(),
        allow: vec![allow],
        http2: Http2Config::default(),
        // The DNS move is noticed within this interval.
        resolve_interval: Duration::from_millis(100),
        dial_timeout: Duration::from_secs(5),
        backoff_initial: Duration::from_millis(50),
        backoff_max: Duration::from_millis(500),
        drain_timeout: Duration::from_secs(10),
        resolver,
    })
}

/// Reads an HTTP head (up to the blank line), byte by byte so nothing after it is consumed.
async fn read_head<S: AsyncRead + Unpin>(io: &mut S) -> std::io::Result<String> {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() > 16 * 1024 {
            return Err(std::io::Error::other("HTTP head too long"));
        }
        if io.read(&mut b).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        head.push(b[0]);
    }
    Ok(String::from_utf8_lossy(&head).into_owned())
}

fn status(head: &str) -> Option<u16> {
    head.split_whitespace().nth(1)?.parse().ok()
}

/// The answer an admission webhook gives.
const ALLOWED: &str =
    r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"allowed":true}}"#;

/// One call as kube-apiserver makes it: CONNECT through the seed's tunnel server (mTLS), then
/// TLS to the webhook through the tunnel, `POST` and check the answer.
async fn call(
    tls: &Tls,
    connect: SocketAddr,
    webhook: SocketAddr,
    slow: bool,
) -> std::result::Result<(), String> {
    let tcp = TcpStream::connect(connect)
        .await
        .map_err(|e| format!("connect endpoint: {e}"))?;
    let name = ServerName::IpAddress(connect.ip().into());
    let mut proxy = TlsConnector::from(tls.apiserver_connect.clone())
        .connect(name, tcp)
        .await
        .map_err(|e| format!("connect endpoint TLS: {e}"))?;
    let req = format!("CONNECT {webhook} HTTP/1.1\r\nHost: {webhook}\r\n\r\n");
    proxy
        .write_all(req.as_bytes())
        .await
        .map_err(|e| format!("CONNECT: {e}"))?;
    let head = read_head(&mut proxy)
        .await
        .map_err(|e| format!("CONNECT answer: {e}"))?;
    if status(&head) != Some(200) {
        return Err(format!("CONNECT answered {:?}", head.lines().next()));
    }
    let name = ServerName::try_from(WEBHOOK_NAME).map_err(|e| e.to_string())?;
    let mut io = TlsConnector::from(tls.apiserver_webhook.clone())
        .connect(name, proxy)
        .await
        .map_err(|e| format!("webhook TLS: {e}"))?;
    let path = if slow { "/slow" } else { "/validate" };
    let body = r#"{"kind":"AdmissionReview"}"#;
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: {WEBHOOK_NAME}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    io.write_all(req.as_bytes())
        .await
        .map_err(|e| format!("request: {e}"))?;
    let mut answer = Vec::new();
    io.read_to_end(&mut answer)
        .await
        .map_err(|e| format!("answer: {e}"))?;
    let answer = String::from_utf8_lossy(&answer);
    if status(&answer) == Some(200) && answer.ends_with(ALLOWED) {
        Ok(())
    } else {
        Err(format!("webhook answered {:?}", answer.lines().next()))
    }
}

/// The HTTPS webhook in the shoot: answers every request with an allowing AdmissionReview,
/// `/slow` after [`SLOW`].
async fn start_webhook(
    tls: Arc<rustls::ServerConfig>,
    stop: CancellationToken,
) -> Result<SocketAddr> {
    let listener = bind().await?;
    let addr = listener
        .local_addr()
        .map_err(|e| Error::io("webhook listener", e))?;
    let acceptor = TlsAcceptor::from(tls);
    tokio::spawn(async move {
        loop {
            let tcp = tokio::select! {
                _ = stop.cancelled() => return,
                r = listener.accept() => match r {
                    Ok((tcp, _)) => tcp,
                    Err(e) => {
                        // EMFILE and friends: back off instead of spinning.
                        tracing::warn!(error = %e, "webhook accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                if let Err(e) = serve(acceptor, tcp).await {
                    // The caller records the failure; this says what the webhook saw.
                    tracing::warn!(error = %e, "webhook connection failed");
                }
            });
        }
    });
    Ok(addr)
}

async fn serve(acceptor: TlsAcceptor, tcp: TcpStream) -> std::io::Result<()> {
    let mut io = acceptor.accept(tcp).await?;
    let head = read_head(&mut io).await?;
    let len: usize = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; len.min(64 * 1024)];
    io.read_exact(&mut body).await?;
    if head.starts_with("POST /slow ") {
        tokio::time::sleep(SLOW).await;
    }
    let answer = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{ALLOWED}",
        ALLOWED.len()
    );
    io.write_all(answer.as_bytes()).await?;
    // close_notify: the caller reads to the end of a clean TLS close.
    io.shutdown().await
}
