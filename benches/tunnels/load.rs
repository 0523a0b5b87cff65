//! The one load generator every peer is driven by: kube-apiserver-style webhook calls (a new
//! connection, CONNECT where the peer has a front, TLS to the webhook, one POST, read to the
//! close), pulls of N bytes, idle streams, and the process accounting (CPU, RSS).

use super::targets::{ALLOWED, WEBHOOK_NAME};
use rustls::pki_types::ServerName;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};
use tokio_rustls::TlsConnector;

pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// How a peer is entered.
#[derive(Clone, Debug)]
pub enum Entry {
    /// Plain TCP to the addresses (the floor across the link relay; OpenVPN's TUN route).
    Tcp,
    /// HTTP CONNECT on a Unix socket (the isthmus and konnectivity fronts, as kube-apiserver's
    /// `EgressSelectorConfiguration` with `transport.uds` uses them).
    Connect(PathBuf),
}

/// One peer as the load generator sees it.
#[derive(Clone, Debug)]
pub struct Dialer {
    pub entry: Entry,
    pub webhook: SocketAddr,
    pub source: SocketAddr,
    pub tls: Arc<rustls::ClientConfig>,
}

impl Dialer {
    pub async fn dial(&self, to: SocketAddr) -> std::io::Result<Box<dyn Io>> {
        match &self.entry {
            Entry::Tcp => {
                let s = TcpStream::connect(to).await?;
                s.set_nodelay(true)?;
                Ok(Box::new(s))
            }
            Entry::Connect(path) => {
                let mut s = UnixStream::connect(path).await?;
                let req = format!("CONNECT {to} HTTP/1.1\r\nHost: {to}\r\n\r\n");
                s.write_all(req.as_bytes()).await?;
                // Read as kube-apiserver's egress dialer reads it (Go's bufio, 4 KiB at a
                // time, then an error if the proxy sent more than the head): nothing may
                // follow the head before the caller speaks. (Byte by byte, this cost the
                // CONNECT fronts ~50 system calls per call in this process, which shares the
                // two cores with the peer.)
                let mut head = Vec::new();
                let mut b = [0u8; 4096];
                while !head.ends_with(b"\r\n\r\n") {
                    let n = s.read(&mut b).await?;
                    if n == 0 || head.len() > 8192 {
                        return Err(std::io::ErrorKind::UnexpectedEof.into());
                    }
                    head.extend_from_slice(&b[..n]);
                    if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
                        if end + 4 != head.len() {
                            return Err(std::io::Error::other("bytes after the CONNECT answer"));
                        }
                    }
                }
                if !head.starts_with(b"HTTP/1.1 200") && !head.starts_with(b"HTTP/1.0 200") {
                    return Err(std::io::Error::other(
                        String::from_utf8_lossy(&head).into_owned(),
                    ));
                }
                Ok(Box::new(s))
            }
        }
    }

    /// One webhook call; its latency from the first byte of the connect to the end of the
    /// answer, as kube-apiserver's webhook client sees it.
    pub async fn call(&self) -> std::io::Result<Duration> {
        let t = Instant::now();
        let io = self.dial(self.webhook).await?;
        let name = ServerName::try_from(WEBHOOK_NAME).map_err(std::io::Error::other)?;
        let mut io = TlsConnector::from(self.tls.clone())
            .connect(name, io)
            .await?;
        let body = r#"{"kind":"AdmissionReview"}"#;
        let req = format!(
            "POST /validate HTTP/1.1\r\nHost: {WEBHOOK_NAME}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        io.write_all(req.as_bytes()).await?;
        let mut answer = Vec::new();
        io.read_to_end(&mut answer).await?;
        if !answer.starts_with(b"HTTP/1.1 200") || !answer.ends_with(ALLOWED.as_bytes()) {
            return Err(std::io::Error::other("bad answer"));
        }
        Ok(t.elapsed())
    }

    /// A call that must succeed within 10 s (kube-apiserver's default webhook timeout).
    pub async fn call_ok(&self) -> Duration {
        match tokio::time::timeout(Duration::from_secs(10), self.call()).await {
            Ok(Ok(d)) => d,
            Ok(Err(e)) => panic!("webhook call failed: {e}"),
            Err(_) => panic!("webhook call timed out"),
        }
    }

    /// Opens a stream from the source asking for `bytes` (0: idle).
    pub async fn source(&self, bytes: u64) -> std::io::Result<Box<dyn Io>> {
        let mut io = self.dial(self.source).await?;
        io.write_all(&bytes.to_be_bytes()).await?;
        Ok(io)
    }

    pub async fn pull(&self, bytes: u64) -> u64 {
        let mut io = self.dial(self.source).await.unwrap();
        crate::byte_source::pull(&mut io, bytes).await
    }
}

/// `n` calls made by `workers` concurrent callers, each call on a new connection.
pub async fn latency(d: &Dialer, n: usize, workers: usize) -> Vec<Duration> {
    let per = n.div_ceil(workers);
    let tasks: Vec<_> = (0..workers)
        .map(|_| {
            let d = d.clone();
            tokio::spawn(async move {
                let mut v = Vec::with_capacity(per);
                for _ in 0..per {
                    v.push(d.call_ok().await);
                }
                v
            })
        })
        .collect();
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all
}

/// Gbit/s of `streams` parallel pulls of `each` bytes.
pub async fn throughput(d: &Dialer, streams: usize, each: u64) -> f64 {
    let t = Instant::now();
    let tasks: Vec<_> = (0..streams)
        .map(|_| {
            let d = d.clone();
            tokio::spawn(async move { d.pull(each).await })
        })
        .collect();
    let mut total = 0;
    for task in tasks {
        total += task.await.unwrap();
    }
    total as f64 * 8.0 / t.elapsed().as_secs_f64() / 1e9
}

/// Webhook calls per second with `workers` callers back to back for `for_`, and the calls made.
pub async fn saturation(d: &Dialer, workers: usize, for_: Duration) -> (f64, u64) {
    let t = Instant::now();
    let until = t + for_;
    let tasks: Vec<_> = (0..workers)
        .map(|_| {
            let d = d.clone();
            tokio::spawn(async move {
                let mut n = 0u64;
                while Instant::now() < until {
                    d.call_ok().await;
                    n += 1;
                }
                n
            })
        })
        .collect();
    let mut total = 0;
    for task in tasks {
        total += task.await.unwrap();
    }
    (total as f64 / t.elapsed().as_secs_f64(), total)
}

/// Small-call latency while one stream is stalled (its reader stopped after the first MiB) or
/// saturated (read as fast as it comes).
pub async fn isolation(d: &Dialer, bulk: bool, calls: usize) -> Vec<Duration> {
    let mut io = d.source(1 << 40).await.unwrap();
    let mut buf = vec![0u8; 256 * 1024];
    let mut got = 0usize;
    while got < 1 << 20 {
        got += io.read(&mut buf).await.unwrap();
    }
    let reader = bulk.then(|| {
        tokio::spawn(async move { while matches!(io.read(&mut buf).await, Ok(n) if n > 0) {} })
    });
    if !bulk {
        // The stalled stream's buffers along the path fill up before calls start: a stall
        // measured before it bit would measure nothing. (A bench, not a test: waiting here is
        // the scenario, not synchronisation.)
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let v = latency(d, calls, 1).await;
    if let Some(r) = reader {
        r.abort();
    }
    v
}

/// CPU seconds (user + system) of `pids` so far.
pub fn cpu_seconds(pids: &[u32]) -> f64 {
    pids.iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/stat")).ok())
        .map(|s| {
            // Fields after the command name (which may hold spaces) in parentheses.
            let rest = &s[s.rfind(')').map_or(0, |i| i + 2)..];
            let f: Vec<&str> = rest.split_whitespace().collect();
            let ticks: u64 = f[11].parse::<u64>().unwrap_or(0) + f[12].parse::<u64>().unwrap_or(0);
            ticks as f64 / 100.0
        })
        .sum()
}

/// Resident memory of `pids`, bytes.
pub fn rss_bytes(pids: &[u32]) -> u64 {
    pids.iter()
        .filter_map(|&p| isthmus_testkit::rss_kib(p))
        .map(|kib| kib * 1024)
        .sum()
}
