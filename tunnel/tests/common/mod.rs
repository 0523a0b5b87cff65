//! Shared set-up of the tunnel tests: a PKI, servers and agents on 127.0.0.1:0, an HTTPS
//! "webhook" in the shoot, and a client that speaks CONNECT like kube-apiserver.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use isthmus_config::{AllowRule, Http2Config, ServerEntryConfig};
use isthmus_testkit::{CertKey, Scratch, TestPki};
use isthmus_tunnel::agent::{AgentOptions, Resolve};
use isthmus_tunnel::server::ServerOptions;
use rustls::pki_types::ServerName;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};

mod load;
#[allow(unused_imports)] // Not every test file uses the load.
pub use load::{failures, Load, Record};
mod parties;
#[allow(unused_imports)] // Not every test file waits for sessions.
pub use parties::{encode, live, TestAgent, TestServer};
mod peers;
#[allow(unused_imports)] // Only the tests of misbehaving peers and floods use them.
pub use peers::{closed, logs_of, proxy_yaml, Flood};

pub const DEADLINE: Duration = Duration::from_secs(20);

/// Certificates of every party.
pub struct World {
    pub pki: TestPki,
    pub dir: Scratch,
    pub server_cert: CertKey,
    pub agent_cert: CertKey,
    pub apiserver_cert: CertKey,
    pub webhook_cert: CertKey,
}

impl World {
    pub fn new() -> Self {
        // `RUST_LOG=isthmus_tunnel=debug cargo test ... -- --nocapture` shows the tunnel's logs.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        let pki = TestPki::new();
        Self {
            server_cert: pki.server_cert(&["vpn.test", "vpn-temp.test", "127.0.0.1"]),
            agent_cert: pki.client_cert("vpn-shoot"),
            apiserver_cert: pki.client_cert("kube-apiserver"),
            webhook_cert: pki.server_cert(&["webhook.test", "127.0.0.1"]),
            dir: Scratch::new("tunnel"),
            pki,
        }
    }

    pub fn server_options(&self, connect_tls: bool) -> ServerOptions {
        ServerOptions {
            agents_tls: self.pki.server_config(&self.server_cert, true, &["h2"]),
            connect_tls: connect_tls.then(|| self.pki.server_config(&self.server_cert, true, &[])),
            http2: Http2Config::default(),
            connect_timeout: Duration::from_secs(10),
            session_wait: Duration::from_secs(3),
            drain_timeout: Duration::from_secs(10),
            probe_interval: Duration::from_millis(200),
            limits: Default::default(),
        }
    }

    pub fn agent_options(
        &self,
        servers: Vec<ServerEntryConfig>,
        resolver: Arc<dyn Resolve>,
        allow: &[&str],
    ) -> AgentOptions {
        AgentOptions {
            servers,
            tls: self.pki.client_config(Some(&self.agent_cert), &["h2"]),
            allow: allow.iter().map(|a| AllowRule::parse(a).unwrap()).collect(),
            http2: Http2Config::default(),
            resolve_interval: Duration::from_millis(100),
            dial_timeout: Duration::from_secs(5),
            backoff_initial: Duration::from_millis(50),
            backoff_max: Duration::from_millis(500),
            drain_timeout: Duration::from_secs(10),
            max_session_age: None,
            resolver,
        }
    }

    /// An agent that dials `vpn.test:443` at `agents` and may reach the loopback network.
    pub fn loopback_agent(&self, agents: SocketAddr) -> AgentOptions {
        self.agent_options(
            vec![entry("vpn.test:443")],
            SwitchResolver::new(vec![agents]),
            &["127.0.0.0/8"],
        )
    }

    /// TLS for kube-apiserver towards the CONNECT endpoint.
    pub fn apiserver_tls(&self) -> Arc<rustls::ClientConfig> {
        self.pki.client_config(Some(&self.apiserver_cert), &[])
    }
}

/// A resolver whose answer the test changes (DNS moving to another seed).
#[derive(Debug, Default)]
pub struct SwitchResolver(Mutex<Vec<SocketAddr>>);

impl SwitchResolver {
    pub fn new(addrs: Vec<SocketAddr>) -> Arc<Self> {
        Arc::new(Self(Mutex::new(addrs)))
    }
    pub fn set(&self, addrs: Vec<SocketAddr>) {
        *self.0.lock().unwrap() = addrs;
    }
}

impl Resolve for SwitchResolver {
    fn resolve<'a>(
        &'a self,
        _host: &'a str,
        _port: u16,
    ) -> Pin<Box<dyn Future<Output = std::io::Result<Vec<SocketAddr>>> + Send + 'a>> {
        let addrs = self.0.lock().unwrap().clone();
        Box::pin(async move { Ok(addrs) })
    }
}

pub fn entry(address: &str) -> ServerEntryConfig {
    ServerEntryConfig {
        address: address.into(),
        server_name: None,
        http_connect_header: None,
    }
}

#[derive(Clone, Debug)]
pub enum ConnectAddr {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

#[allow(unused_imports)] // not every test binary reads metrics
pub use isthmus_testkit::metric;

/// The HTTPS webhook in the shoot: `/` answers "ok", `/slow/MS` answers after MS ms.
pub async fn start_webhook(world: &World) -> (SocketAddr, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let acceptor = TlsAcceptor::from(world.pki.server_config(
        &world.webhook_cert,
        false,
        &["http/1.1"],
    ));
    let served = Arc::new(AtomicU64::new(0));
    let counter = served.clone();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            let (acceptor, counter) = (acceptor.clone(), counter.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                    let counter = counter.clone();
                    async move {
                        if let Some(ms) = req.uri().path().strip_prefix("/slow/") {
                            tokio::time::sleep(Duration::from_millis(ms.parse().unwrap())).await;
                        }
                        counter.fetch_add(1, Ordering::Relaxed);
                        Ok::<_, std::convert::Infallible>(Response::new(Full::new(
                            Bytes::from_static(b"ok"),
                        )))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    (addr, served)
}

pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// Opens the CONNECT endpoint like kube-apiserver does (mTLS when `tls` is set).
pub async fn open_endpoint(
    addr: &ConnectAddr,
    tls: Option<Arc<rustls::ClientConfig>>,
) -> std::io::Result<Box<dyn Io>> {
    Ok(match addr {
        ConnectAddr::Unix(p) => Box::new(tokio::net::UnixStream::connect(p).await?),
        ConnectAddr::Tcp(a) => {
            let tcp = TcpStream::connect(a).await?;
            match tls {
                None => Box::new(tcp),
                Some(c) => {
                    let name = ServerName::IpAddress(a.ip().into());
                    Box::new(TlsConnector::from(c).connect(name, tcp).await?)
                }
            }
        }
    })
}

/// Sends raw request bytes and returns the status code of the answer head.
pub async fn raw_connect(io: &mut Box<dyn Io>, request: &[u8]) -> std::io::Result<u16> {
    io.write_all(request).await?;
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if io.read(&mut b).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        head.push(b[0]);
    }
    let text = String::from_utf8_lossy(&head);
    let code = text.split_whitespace().nth(1).and_then(|c| c.parse().ok());
    code.ok_or_else(|| std::io::Error::other(format!("bad answer {text:?}")))
}

/// CONNECT to `target`; Ok(stream) on 200, Err(status or io error text) otherwise.
pub async fn connect(
    addr: &ConnectAddr,
    tls: Option<Arc<rustls::ClientConfig>>,
    target: &str,
) -> Result<Box<dyn Io>, String> {
    let mut io = open_endpoint(addr, tls).await.map_err(|e| e.to_string())?;
    let req = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n");
    match raw_connect(&mut io, req.as_bytes()).await {
        Ok(200) => Ok(io),
        Ok(code) => Err(format!("status {code}")),
        Err(e) => Err(e.to_string()),
    }
}

/// One webhook call through the tunnel: CONNECT, TLS to the webhook, `GET path`.
pub async fn call(
    world: &World,
    addr: &ConnectAddr,
    tls: bool,
    webhook: SocketAddr,
    path: &str,
) -> Result<(), String> {
    let io = connect(
        addr,
        tls.then(|| world.apiserver_tls()),
        &webhook.to_string(),
    )
    .await?;
    let client = TlsConnector::from(world.pki.client_config(None, &["http/1.1"]));
    let name = ServerName::try_from("webhook.test").unwrap();
    let tls = client
        .connect(name, io)
        .await
        .map_err(|e| format!("webhook TLS: {e}"))?;
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let req = Request::get(path)
        .header("host", "webhook.test")
        .body(http_body_util::Empty::<Bytes>::new())
        .unwrap();
    let resp = send
        .send_request(req)
        .await
        .map_err(|e| format!("request: {e}"))?;
    let status = resp.status();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("body: {e}"))?
        .to_bytes();
    if status == 200 && body.as_ref() == b"ok" {
        Ok(())
    } else {
        Err(format!("webhook answered {status} {body:?}"))
    }
}

/// `n` webhook calls at once, each in its own task; the results in order.
pub async fn parallel_calls(
    world: &Arc<World>,
    addr: &ConnectAddr,
    tls: bool,
    webhook: SocketAddr,
    n: usize,
) -> Vec<Result<(), String>> {
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let (world, addr) = (world.clone(), addr.clone());
            tokio::spawn(async move { call(&world, &addr, tls, webhook, "/").await })
        })
        .collect();
    let mut out = Vec::with_capacity(n);
    for t in tasks {
        out.push(t.await.unwrap_or_else(|e| Err(e.to_string())));
    }
    out
}
