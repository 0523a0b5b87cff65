//! Peers that get past what the server checks first and then misbehave (issue 47): a holder
//! of an agent certificate that never finishes setting up its session, a proxy whose PROXY
//! header the server was not told to expect, strangers failing TLS over and over.

mod common;

use common::*;
use isthmus_proxy_protocol::{encode_v2, Addresses};
use isthmus_testkit::wait_until;
use rustls::pki_types::ServerName;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

const SETUP_TIMEOUT: &str =
    "isthmus_tunnel_refused_total{listener=\"agents\",reason=\"setup_timeout\"}";

/// Reads until the peer closes (or resets); panics if it does not within the deadline.
#[allow(clippy::expect_used)]
async fn closed<S: tokio::io::AsyncRead + Unpin>(s: &mut S) {
    let mut buf = [0u8; 1024];
    let until_closed = async { while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {} };
    tokio::time::timeout(DEADLINE, until_closed)
        .await
        .expect("the server did not close the connection");
}

/// With room for one session, two holders of the agent certificate take it in turn and
/// never finish: one goes silent after TLS, the other speaks HTTP/2 (PINGs are answered)
/// but never answers the verifying probe. Each is closed at `setup_timeout`, and the real
/// agent then gets the place (without the timeout the first kept it for good).
#[allow(clippy::unwrap_used, clippy::expect_used)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_that_is_never_verified_gives_its_place_back() {
    let world = World::new();
    let mut opts = world.server_options(false);
    opts.limits.max_sessions = 1;
    opts.limits.setup_timeout = Duration::from_millis(500);
    let server = TestServer::start(opts, None, None).await;
    let tls = || async {
        let tcp = TcpStream::connect(server.agents).await.unwrap();
        let config = world.pki.client_config(Some(&world.agent_cert), &["h2"]);
        let name = ServerName::try_from("vpn.test").unwrap();
        TlsConnector::from(config).connect(name, tcp).await.unwrap()
    };

    let mut silent = tls().await;
    closed(&mut silent).await;
    let mut h2 = h2::server::handshake(tls().await).await.unwrap();
    let mut unanswered = Vec::new();
    // Accepting drives the connection (and answers PINGs); the requests are never answered.
    let until_closed = async {
        while let Some(Ok((_request, respond))) = h2.accept().await {
            unanswered.push(respond);
        }
    };
    tokio::time::timeout(DEADLINE, until_closed)
        .await
        .expect("the server did not close the session");
    assert!(!unanswered.is_empty(), "the server sent no probe");
    assert_eq!(metric(&server.metrics(), SETUP_TIMEOUT), 2.0);

    let agent = TestAgent::start(world.agent_options(
        vec![entry("vpn.test:443")],
        SwitchResolver::new(vec![server.agents]),
        &["127.0.0.0/8"],
    ));
    let s = server.server.clone();
    wait_until("the agent gets the place", DEADLINE, || {
        let s = s.clone();
        async move { s.live_sessions() == 1 }
    })
    .await;
    agent.stop().await;
    server.stop().await;
}

/// A PROXY header from a peer not in `trusted_proxies` (a proxy sending v2 to a server that
/// does not expect it) is refused as such: counted under its own reason and logged at
/// `error`, once per interval however many arrive, instead of passing for broken TLS.
#[test]
fn a_proxy_header_from_an_untrusted_peer_is_refused_visibly() {
    let world = World::new();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // The server runs on this thread, under the capturing subscriber.
    let (metrics, logs) = logs_of(|| {
        rt.block_on(async {
            let server = TestServer::start(world.server_options(false), None, None).await;
            for _ in 0..5 {
                let mut s = TcpStream::connect(server.agents).await.unwrap();
                let mut first = Vec::new();
                let a = Addresses {
                    source: "192.0.2.1:40000".parse().unwrap(),
                    destination: server.agents,
                };
                encode_v2(&a, &mut first);
                first.extend_from_slice(&[0x16, 0x03, 0x01, 0x02, 0x00]);
                s.write_all(&first).await.unwrap();
                closed(&mut s).await;
            }
            let m = server.metrics();
            server.stop().await;
            m
        })
    });
    let series =
        "isthmus_tunnel_refused_total{listener=\"agents\",reason=\"untrusted_proxy_header\"}";
    assert_eq!(metric(&metrics, series), 5.0, "{metrics}");
    let errors: Vec<_> = logs
        .lines()
        .filter(|l| l.contains("ERROR") && l.contains("agents.trusted_proxies"))
        .collect();
    assert_eq!(errors.len(), 1, "{logs}");
}

/// A stranger's failed TLS handshake is logged at `debug`, and above that at most once per
/// interval with the count; every one is counted.
#[test]
fn strangers_failed_handshakes_are_counted_not_logged_one_by_one() {
    let world = World::new();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (metrics, logs) = logs_of(|| {
        rt.block_on(async {
            let server = TestServer::start(world.server_options(false), None, None).await;
            for _ in 0..5 {
                let mut s = TcpStream::connect(server.agents).await.unwrap();
                s.write_all(b"GET / HTTP/1.1\r\nHost: vpn.test\r\n\r\n")
                    .await
                    .unwrap();
                closed(&mut s).await;
            }
            let m = server.metrics();
            server.stop().await;
            m
        })
    });
    let failed = "isthmus_tunnel_handshakes_total{outcome=\"failed\"}";
    assert_eq!(metric(&metrics, failed), 5.0, "{metrics}");
    let at = |level: &str| {
        logs.lines()
            .filter(|l| l.contains(level) && l.contains("agent TLS handshake"))
            .count()
    };
    assert_eq!(at("DEBUG"), 5, "{logs}");
    assert!(at("INFO") <= 1 && at("WARN") == 0, "{logs}");
}

/// Log lines (debug and up) written while `f` runs on this thread.
#[allow(clippy::unwrap_used)]
fn logs_of<T>(f: impl FnOnce() -> T) -> (T, String) {
    #[derive(Clone, Default)]
    struct Capture(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
    impl std::io::Write for Capture {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let capture = Capture::default();
    let writer = capture.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_max_level(tracing::Level::DEBUG)
        .with_writer(move || writer.clone())
        .finish();
    let out = tracing::subscriber::with_default(subscriber, f);
    let text = String::from_utf8(capture.0.lock().unwrap().clone()).unwrap();
    (out, text)
}
