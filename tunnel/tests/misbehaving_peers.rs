//! Peers that get past what the server checks first and then misbehave (issue 47): a holder
//! of an agent certificate that never finishes setting up its session, a proxy whose PROXY
//! header the server was not told to expect, strangers failing TLS over and over.

mod common;

use common::*;
use isthmus_proxy_protocol::{encode_v2, Addresses};

use rustls::pki_types::ServerName;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

const SETUP_TIMEOUT: &str =
    "isthmus_tunnel_refused_total{listener=\"agents\",reason=\"setup_timeout\"}";

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

    let agent = TestAgent::start(world.loopback_agent(server.agents));
    live(&server.server, 1, "the agent gets the place").await;
    agent.stop().await;
    server.stop().await;
}

/// Five connections from strangers, each sending `first(the agents address)` and closed by
/// the server, to a server run on this thread under a subscriber capturing debug and up:
/// the server's metrics and the log lines.
#[allow(clippy::unwrap_used)]
fn five_strangers(first: impl Fn(SocketAddr) -> Vec<u8>) -> (String, String) {
    let world = World::new();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    logs_of(tracing::Level::DEBUG, || {
        rt.block_on(async {
            let server = TestServer::start(world.server_options(false), None, None).await;
            for _ in 0..5 {
                let mut s = TcpStream::connect(server.agents).await.unwrap();
                s.write_all(&first(server.agents)).await.unwrap();
                closed(&mut s).await;
            }
            let m = server.metrics();
            server.stop().await;
            m
        })
    })
}

/// A PROXY header from a peer not in `trusted_proxies` (a proxy sending v2 to a server that
/// does not expect it) is refused as such: counted under its own reason and logged at
/// `error`, once per interval however many arrive, instead of passing for broken TLS.
#[test]
fn a_proxy_header_from_an_untrusted_peer_is_refused_visibly() {
    let (metrics, logs) = five_strangers(|agents| {
        let mut first = Vec::new();
        let a = Addresses {
            source: "192.0.2.1:40000".parse().unwrap(),
            destination: agents,
        };
        encode_v2(&a, &mut first);
        first.extend_from_slice(&[0x16, 0x03, 0x01, 0x02, 0x00]);
        first
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
    let (metrics, logs) = five_strangers(|_| b"GET / HTTP/1.1\r\nHost: vpn.test\r\n\r\n".to_vec());
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
