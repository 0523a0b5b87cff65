//! Shared fixtures of the proxy's integration tests: a proxy started from a YAML file in a
//! scratch directory, TLS upstreams, raw ClientHello capture and metric scraping.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use isthmus_proxy::Proxy;
use isthmus_testkit::{http_get, wait_until, Scratch, TestPki};
use prometheus_client::registry::Registry;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub const WAIT: Duration = Duration::from_secs(10);

/// A proxy running from `proxy.yaml` in a scratch directory.
pub struct Fixture {
    pub dir: Scratch,
    pub proxy: Proxy,
}

impl Fixture {
    pub async fn start(yaml: &str) -> Self {
        let dir = Scratch::new("proxy");
        std::fs::write(dir.join("proxy.yaml"), yaml).unwrap();
        let proxy = Proxy::start(&dir.join("proxy.yaml"), Registry::default())
            .await
            .unwrap();
        Self { dir, proxy }
    }

    /// Rewrites the file (atomically, like a ConfigMap update) without reloading.
    pub fn write(&self, yaml: &str) {
        let tmp = self.dir.join("proxy.yaml.tmp");
        std::fs::write(&tmp, yaml).unwrap();
        std::fs::rename(&tmp, self.dir.join("proxy.yaml")).unwrap();
    }

    pub async fn addr(&self, listener: &str) -> SocketAddr {
        self.proxy.listener_addr(listener).await.unwrap()
    }

    pub async fn metrics(&self) -> String {
        http_get(self.proxy.admin_addr(), "/metrics")
            .await
            .unwrap()
            .1
    }

    /// The value of the series whose line starts with `series` (name and labels, exactly).
    pub async fn metric(&self, series: &str) -> f64 {
        metric_value(&self.metrics().await, series)
    }

    /// Polls until the series reaches `value`.
    pub async fn wait_metric(&self, series: &str, value: f64) {
        wait_until(&format!("{series} == {value}"), WAIT, || async {
            self.metric(series).await == value
        })
        .await;
    }
}

pub use isthmus_testkit::metric as metric_value;

/// Admin address + listeners, with `routes_yaml` spliced under each listener as given.
pub fn admin_yaml() -> &'static str {
    "admin: { address: \"127.0.0.1:0\" }\ndrain_delay: 0s\nwatch_interval: 0s\n"
}

/// A plain TCP upstream that records every byte each connection sent and answers each read
/// with `<label>:` plus the bytes (so it also works as an echo for raw protocols).
pub struct RawUpstream {
    pub addr: SocketAddr,
    pub received: Arc<Mutex<Vec<Vec<u8>>>>,
    task: tokio::task::JoinHandle<()>,
}

impl RawUpstream {
    pub async fn start(label: &str) -> Self {
        Self::start_on(label, "127.0.0.1:0".parse().unwrap()).await
    }

    /// Starts on a given address (e.g. a port an earlier test freed, or `[::1]:0`).
    pub async fn start_on(label: &str, at: SocketAddr) -> Self {
        let listener = TcpListener::bind(at).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let received: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
        let (rec, label) = (received.clone(), label.to_owned());
        let task = tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let index = {
                    let mut r = rec.lock().unwrap();
                    r.push(Vec::new());
                    r.len() - 1
                };
                let (rec, label) = (rec.clone(), label.clone());
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 65536];
                    loop {
                        match s.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                rec.lock().unwrap()[index].extend_from_slice(&buf[..n]);
                                let mut reply = format!("{label}:").into_bytes();
                                reply.extend_from_slice(&buf[..n]);
                                if s.write_all(&reply).await.is_err() {
                                    break;
                                }
                            }
                        }
                    }
                });
            }
        });
        Self {
            addr,
            received,
            task,
        }
    }

    pub fn connections(&self) -> usize {
        self.received.lock().unwrap().len()
    }

    pub fn bytes(&self, conn: usize) -> Vec<u8> {
        self.received.lock().unwrap()[conn].clone()
    }
}

impl Drop for RawUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The exact bytes a rustls client sends as its ClientHello for `sni`.
pub async fn capture_hello(pki: &TestPki, sni: &str) -> Vec<u8> {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let config = isthmus_testkit::client_config(pki);
    let sni = sni.to_owned();
    let client =
        tokio::spawn(async move { isthmus_testkit::tls_connect(config, addr, &sni).await });
    let (mut s, _) = listener.accept().await.unwrap();
    let mut buf = Vec::new();
    loop {
        let mut chunk = [0u8; 4096];
        let n = s.read(&mut chunk).await.unwrap();
        assert!(n > 0, "client closed before sending a hello");
        buf.extend_from_slice(&chunk[..n]);
        if !matches!(
            isthmus_proxy::client_hello::parse(&buf),
            isthmus_proxy::client_hello::Parsed::NeedMore
        ) {
            break;
        }
    }
    drop(s);
    client.abort();
    buf
}

/// Re-frames a single-record ClientHello into records carrying at most `chunk` handshake
/// bytes each, as a TLS stack may legally do.
pub fn reframe(hello: &[u8], chunk: usize) -> Vec<u8> {
    let version = [hello[1], hello[2]];
    let len = usize::from(u16::from_be_bytes([hello[3], hello[4]]));
    let body = &hello[5..5 + len];
    let mut out = Vec::new();
    for piece in body.chunks(chunk) {
        out.push(22);
        out.extend_from_slice(&version);
        out.extend_from_slice(&(piece.len() as u16).to_be_bytes());
        out.extend_from_slice(piece);
    }
    out
}

/// Sends `bytes` in writes of `step` bytes, then reads whatever comes back until EOF.
pub async fn send_raw(addr: SocketAddr, bytes: &[u8], step: usize) -> (Vec<u8>, TcpStream) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.set_nodelay(true).unwrap();
    for piece in bytes.chunks(step) {
        s.write_all(piece).await.unwrap();
        s.flush().await.unwrap();
    }
    (Vec::new(), s)
}

/// Reads until EOF or error (a reset counts as EOF); returns what arrived.
pub async fn read_to_close(s: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(WAIT, s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return out,
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
            Err(_) => panic!("connection was not closed within {WAIT:?}"),
        }
    }
}

/// Connects to `addr` from `from` (any 127.0.0.0/8 address works on Linux loopback), so that
/// tests can play several sources.
pub async fn connect_from(from: &str, addr: SocketAddr) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket
        .bind(SocketAddr::new(from.parse().unwrap(), 0))
        .unwrap();
    let s = socket.connect(addr).await.unwrap();
    s.set_nodelay(true).unwrap();
    s
}

/// Sends `bytes` from `from` and returns the stream and what the upstream answered first
/// (empty when the proxy closed the connection instead of routing it).
pub async fn try_route(from: &str, addr: SocketAddr, bytes: &[u8]) -> (TcpStream, Vec<u8>) {
    let mut s = connect_from(from, addr).await;
    s.write_all(bytes).await.unwrap();
    let mut buf = vec![0u8; bytes.len() + 64];
    let n = match tokio::time::timeout(WAIT, s.read(&mut buf)).await {
        Ok(Ok(n)) => n,
        Ok(Err(_)) => 0,
        Err(_) => panic!("neither routed nor closed within {WAIT:?}"),
    };
    buf.truncate(n);
    (s, buf)
}
