//! The tunnel server tried as an attacker would: a certificate of the right CA for the wrong
//! name or for a wildcard, a server that trusts every certificate of its CA, a plain-TCP
//! CONNECT front facing a network, one source's stalled handshakes, slow CONNECT clients.

mod common;

use common::*;
use isthmus_config::{parse, TunnelServerConfig};
use isthmus_testkit::wait_until;
use isthmus_tunnel::metrics::RefusedLabels;
use isthmus_tunnel::server::{ConnectListener, ServerOptions};
use isthmus_tunnel::tls;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A server that takes only `agent.vpn.test`: an agent with a certificate of its CA for
/// `refused` is refused at the handshake (counted, no session); one for `accepted` gets a
/// session.
#[allow(clippy::unwrap_used)]
async fn only_the_allowed_name_gets_a_session(refused: &str, accepted: &str) {
    let world = World::new();
    let dir = world.dir.path();
    let (crt, key) = world.server_cert.write(dir, "server");
    let ca = world.pki.write_ca(dir);
    let mut opts = world.server_options(false);
    let refused_total = opts.limits.refused.get_or_create_owned(&RefusedLabels {
        listener: "agents",
        reason: "client_name",
    });
    let allowed = vec!["agent.vpn.test".to_string()];
    opts.agents_tls =
        tls::server_config_for_names(&crt, &key, &ca, &[tls::ALPN_H2], &allowed, refused_total)
            .unwrap();
    let server = TestServer::start(opts, None, None).await;
    let resolver = SwitchResolver::new(vec![server.agents]);
    let agent_with = |name: &str| {
        let cert = world.pki.peer_cert(&[name]);
        let mut o = world.agent_options(vec![entry("vpn.test:443")], resolver.clone(), &[]);
        o.tls = world.pki.client_config(Some(&cert), &["h2"]);
        TestAgent::start(o)
    };

    let bad = agent_with(refused);
    wait_until(&format!("{refused} is refused"), DEADLINE, || async {
        metric(
            &server.metrics(),
            "isthmus_tunnel_refused_total{listener=\"agents\",reason=\"client_name\"}",
        ) >= 1.0
    })
    .await;
    assert_eq!(server.server.live_sessions(), 0);
    bad.stop().await;

    let good = agent_with(accepted);
    live(&server.server, 1, &format!("{accepted} gets a session")).await;
    good.stop().await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_with_the_wrong_name_is_refused_at_the_handshake() {
    // Same CA, another name.
    only_the_allowed_name_gets_a_session("intruder.vpn.test", "agent.vpn.test").await;
}

fn server_yaml(connect: &str) -> String {
    format!(
        "agents: {{ address: \"0.0.0.0:9443\", tls: {{ cert: a.crt, key: a.key, client_ca: ca.crt, \
         allowed_client_names: [agent.vpn.test] }} }}\nconnect: {connect}\n"
    )
}

#[test]
fn a_plain_tcp_connect_front_beyond_loopback_is_refused_at_start() {
    let e = parse::<TunnelServerConfig>("s.yaml", &server_yaml("{ address: \"0.0.0.0:9444\" }"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("connect.tls: required: 0.0.0.0:9444 is not a loopback address"),
        "{e}"
    );
    let e = parse::<TunnelServerConfig>("s.yaml", &server_yaml("{ address: \"10.1.2.3:9444\" }"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("connect.tls: required"), "{e}");
    for ok in [
        "{ address: \"127.0.0.1:9444\" }",
        "{ address: \"[::1]:9444\" }",
        "{ unix: /run/connect.sock }",
        "{ address: \"0.0.0.0:9444\", tls: { cert: c.crt, key: c.key, client_ca: ca.crt } }",
    ] {
        let c = parse::<TunnelServerConfig>("s.yaml", &server_yaml(ok));
        assert!(c.is_ok(), "{ok}: {}", c.unwrap_err());
    }
}

#[tokio::test]
async fn the_unix_connect_socket_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let world = World::new();
    let path = world.dir.join("connect.sock");
    std::fs::write(&path, "stale").unwrap();
    let config = parse::<TunnelServerConfig>(
        "s.yaml",
        &server_yaml(&format!("{{ unix: {} }}", path.display())),
    )
    .unwrap();
    let _l = ConnectListener::bind(&config.connect).await.unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "mode {mode:o}");
    tokio::net::UnixStream::connect(&path).await.unwrap();
}

/// A source at its share of handshake slots loses its own oldest handshake to a new one
/// (the flood across many sources is `handshake_flood.rs`).
#[tokio::test]
async fn a_sources_oldest_handshake_makes_room() {
    let world = World::new();
    let mut opts = world.server_options(false);
    opts.limits.max_handshakes_per_source = 2;
    opts.limits.handshake_timeout = std::time::Duration::from_secs(60);
    let server = TestServer::start(opts, None, None).await;
    // Connections that start a TLS record and stall, from one address.
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut s = TcpStream::connect(server.agents).await.unwrap();
        s.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00]).await.unwrap();
        held.push(s);
    }
    let series = "isthmus_tunnel_refused_total{listener=\"agents\",reason=\"evicted\"}";
    wait_until("one handshake is evicted", DEADLINE, || async {
        metric(&server.metrics(), series) >= 1.0
    })
    .await;
    // With a 60 s handshake timeout, only the eviction can have closed one of them.
    let [a, b, c] = &mut held[..] else {
        unreachable!()
    };
    tokio::select! {
        _ = closed(a) => {}
        _ = closed(b) => {}
        _ = closed(c) => {}
    }
    assert_eq!(metric(&server.metrics(), series), 1.0);
    server.stop().await;
}

#[tokio::test]
async fn slow_connect_clients_make_room_for_new_ones() {
    let world = World::new();
    let mut opts = world.server_options(false);
    opts.limits.connect.max_connections = 2;
    let server = TestServer::start(opts, None, None).await;
    let mut slow = Vec::new();
    for _ in 0..3 {
        let mut s = TcpStream::connect(server.connect).await.unwrap();
        s.write_all(b"CONNECT 10.0.0.1:443 HTTP/1.1\r\n")
            .await
            .unwrap();
        slow.push(s);
    }
    // The oldest went to make room.
    closed(&mut slow[0]).await;
    wait_until("the eviction is counted", DEADLINE, || async {
        metric(
            &server.metrics(),
            "isthmus_tunnel_refused_total{listener=\"connect\",reason=\"evicted\"}",
        ) >= 1.0
    })
    .await;
    // An oversized head is refused (431) rather than buffered.
    let mut big = TcpStream::connect(server.connect).await.unwrap();
    let mut head = b"CONNECT 10.0.0.1:443 HTTP/1.1\r\nX-Pad: ".to_vec();
    head.resize(64 * 1024, b'a');
    let _ = big.write_all(&head).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(DEADLINE, big.read_to_end(&mut answer)).await;
    assert!(
        answer.is_empty() || answer.starts_with(b"HTTP/1.1 431"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    server.stop().await;
}

/// A certificate of the right CA issued for a wildcard that covers an allowed name is not
/// that name: `allowed_client_names` compares names exactly (the exact name, in another case,
/// is the name).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wildcard_certificate_does_not_stand_for_an_allowed_name() {
    only_the_allowed_name_gets_a_session("*.vpn.test", "Agent.VPN.test").await;
}

/// Without `allowed_client_names` any certificate of the CA is an agent: the server says so
/// when it starts, and stays quiet once the names are set.
#[test]
fn a_server_without_allowed_client_names_warns_at_start() {
    let world = World::new();
    let dir = world.dir.path();
    let (crt, key) = world.server_cert.write(dir, "server");
    let ca = world.pki.write_ca(dir);
    let file = |names: &str| {
        format!(
            "agents: {{ address: \"127.0.0.1:0\", tls: {{ cert: {c}, key: {k}, client_ca: {ca}{names} }} }}\n\
             connect: {{ unix: /nonexistent/connect.sock }}\n",
            c = crt.display(),
            k = key.display(),
            ca = ca.display(),
        )
    };
    let open = parse::<TunnelServerConfig>("s.yaml", &file("")).unwrap();
    let (opts, logs) = logs_of(tracing::Level::INFO, || ServerOptions::from_config(&open));
    opts.unwrap();
    assert!(
        logs.contains("WARN") && logs.contains("agents.tls.allowed_client_names is empty"),
        "{logs}"
    );
    let named = file(", allowed_client_names: [agent.vpn.test]");
    let named = parse::<TunnelServerConfig>("s.yaml", &named).unwrap();
    let (opts, logs) = logs_of(tracing::Level::INFO, || ServerOptions::from_config(&named));
    opts.unwrap();
    assert!(!logs.contains("allowed_client_names"), "{logs}");
}
