//! Tunnel benchmark: throughput of one tunnelled stream and of 32 parallel streams against the
//! direct path, and CONNECT setup latency p50/p99. Everything on loopback, one process.
//!
//! `cargo bench --bench tunnel` (prints figures; no harness). `TUNNEL_BENCH_MIB` sets the bytes
//! per single stream (default 256; the 32 streams carry an eighth of it each).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/byte_source.rs"]
mod byte_source;

use isthmus_config::{AllowRule, Http2Config, ServerEntryConfig};
use isthmus_testkit::{percentile, TestPki};
use isthmus_tunnel::agent::{Agent, AgentOptions, DnsResolver};
use isthmus_tunnel::server::{ConnectListener, Server, ServerOptions};
use prometheus_client::registry::Registry;
use rustls::pki_types::ServerName;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsConnector;
use tokio_util::sync::CancellationToken;

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// A target that sends the number of bytes the client asks for (8-byte big-endian request).
async fn start_source() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = l.accept().await.unwrap();
            let _ = s.set_nodelay(true);
            tokio::spawn(async move { byte_source::serve(&mut s).await });
        }
    });
    addr
}

struct Bench {
    connect: SocketAddr,
    source: SocketAddr,
    tls: Arc<rustls::ClientConfig>,
}

impl Bench {
    async fn open(&self, tunnel: bool) -> (Box<dyn Io>, Duration) {
        if !tunnel {
            let t = Instant::now();
            let s = TcpStream::connect(self.source).await.unwrap();
            s.set_nodelay(true).unwrap();
            return (Box::new(s), t.elapsed());
        }
        let tcp = TcpStream::connect(self.connect).await.unwrap();
        tcp.set_nodelay(true).unwrap();
        let name = ServerName::IpAddress(self.connect.ip().into());
        let mut io = TlsConnector::from(self.tls.clone())
            .connect(name, tcp)
            .await
            .unwrap();
        // Setup latency of the tunnel itself: CONNECT written → 200 read (stream opened on the
        // session, agent's allow-list check and dial, answers back).
        let t = Instant::now();
        let req = format!("CONNECT {0} HTTP/1.1\r\nHost: {0}\r\n\r\n", self.source);
        io.write_all(req.as_bytes()).await.unwrap();
        let mut head = Vec::new();
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            assert_eq!(io.read(&mut b).await.unwrap(), 1);
            head.push(b[0]);
        }
        let took = t.elapsed();
        assert!(
            head.starts_with(b"HTTP/1.1 200"),
            "{}",
            String::from_utf8_lossy(&head)
        );
        (Box::new(io), took)
    }

    async fn pull(&self, tunnel: bool, bytes: u64) -> u64 {
        let (mut io, _) = self.open(tunnel).await;
        byte_source::pull(&mut io, bytes).await
    }

    /// Gbit/s, and CPU seconds (the whole process: client, server, agent, source) per GB.
    async fn throughput(
        self: &Arc<Self>,
        tunnel: bool,
        streams: usize,
        per_stream: u64,
    ) -> (f64, f64) {
        let cpu = cpu_seconds();
        let t = Instant::now();
        let tasks: Vec<_> = (0..streams)
            .map(|_| {
                let b = self.clone();
                tokio::spawn(async move { b.pull(tunnel, per_stream).await })
            })
            .collect();
        let mut total = 0;
        for task in tasks {
            total += task.await.unwrap();
        }
        let gbit = total as f64 * 8.0 / t.elapsed().as_secs_f64() / 1e9;
        (gbit, (cpu_seconds() - cpu) / (total as f64 / 1e9))
    }
}

/// User + system CPU time of this process so far (Linux `/proc/self/stat`, 100 ticks/s), so
/// that the cost per byte can be read even when other work on the machine slows the run.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name (which is in parentheses and may hold spaces).
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<f64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|v| v.parse().ok())
        .collect();
    f.iter().sum::<f64>() / 100.0
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run());
}

async fn run() {
    let mib: u64 = std::env::var("TUNNEL_BENCH_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    let pki = TestPki::new();
    let server_cert = pki.server_cert(&["vpn.test", "127.0.0.1"]);
    let agents = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let connect = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (agents_addr, connect_addr) = (agents.local_addr().unwrap(), connect.local_addr().unwrap());
    let server = Server::new(
        ServerOptions {
            limits: Default::default(),
            agents_tls: pki.server_config(&server_cert, true, &["h2"]),
            connect_tls: Some(pki.server_config(&server_cert, true, &[])),
            http2: Http2Config::default(),
            connect_timeout: Duration::from_secs(10),
            session_wait: Duration::from_secs(3),
            drain_timeout: Duration::from_secs(1),
            probe_interval: Duration::from_secs(1),
        },
        &mut Registry::default(),
    );
    let stop = CancellationToken::new();
    let (s, t) = (server.clone(), stop.clone());
    tokio::spawn(async move { s.run(agents, ConnectListener::Tcp(connect), t).await });
    let agent = Agent::new(
        AgentOptions {
            servers: vec![ServerEntryConfig {
                address: agents_addr.to_string(),
                server_name: Some("vpn.test".into()),
                http_connect_header: None,
            }],
            tls: pki.client_config(Some(&pki.client_cert("vpn-shoot")), &["h2"]),
            allow: vec![AllowRule::parse("127.0.0.0/8").unwrap()],
            http2: Http2Config::default(),
            resolve_interval: Duration::from_secs(30),
            dial_timeout: Duration::from_secs(5),
            backoff_initial: Duration::from_millis(50),
            backoff_max: Duration::from_secs(1),
            drain_timeout: Duration::from_secs(1),
            max_session_age: None,
            resolver: Arc::new(DnsResolver),
        },
        &mut Registry::default(),
    );
    let (a, t) = (agent.clone(), stop.clone());
    tokio::spawn(async move { a.run(t).await });
    while server.live_sessions() == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let bench = Arc::new(Bench {
        connect: connect_addr,
        source: start_source().await,
        tls: pki.client_config(Some(&pki.client_cert("kube-apiserver")), &[]),
    });

    let one = mib << 20;
    let each = one / 8;
    println!("tunnel bench (loopback, one process; tunnel = mTLS CONNECT endpoint + TLS 1.3 HTTP/2 session)");
    for (label, tunnel) in [("direct", false), ("tunnel", true)] {
        // Warm-up, then measure.
        bench.throughput(tunnel, 1, 8 << 20).await;
        let (single, single_cpu) = bench.throughput(tunnel, 1, one).await;
        let (multi, multi_cpu) = bench.throughput(tunnel, 32, each).await;
        println!("  {label:6}: 1 stream {single:6.2} Gbit/s ({mib} MiB, {single_cpu:.2} CPU s/GB); 32 streams {multi:6.2} Gbit/s ({} MiB each, {multi_cpu:.2} CPU s/GB)", each >> 20);
    }
    let mut setup = Vec::new();
    let mut direct = Vec::new();
    for _ in 0..500 {
        setup.push(bench.open(true).await.1);
        direct.push(bench.open(false).await.1);
    }
    println!(
        "  CONNECT setup (CONNECT sent -> 200 read, 500 sequential): p50 {:?} p99 {:?}; direct TCP connect p50 {:?} p99 {:?}",
        percentile(&setup, 50.0),
        percentile(&setup, 99.0),
        percentile(&direct, 50.0),
        percentile(&direct, 99.0)
    );
    stop.cancel();
}
