//! The agent's ways in (through an HTTP CONNECT proxy with Gardener's routing header), the
//! admin endpoint, and the example configuration files.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use isthmus_config::{ServerEntryConfig, TunnelAgentConfig, TunnelServerConfig};
use isthmus_testkit::wait_until;
use prometheus_client::registry::Registry;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

const HEADER: &str =
    "X-Gardener-Destination: outbound|1194||vpn-seed-server-0.shoot--foo--bar.svc.cluster.local";

/// A stand-in for the seed's ingress: routes CONNECT on the header, else 403.
async fn start_ingress(
    backend: std::net::SocketAddr,
) -> (std::net::SocketAddr, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        loop {
            let (mut client, _) = listener.accept().await.unwrap();
            let log = log.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut b = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if client.read(&mut b).await.unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(b[0]);
                }
                let text = String::from_utf8_lossy(&head).into_owned();
                log.lock().unwrap().push(text.clone());
                if !text.lines().any(|l| l == HEADER) {
                    let _ = client.write_all(b"HTTP/1.1 403 Forbidden\r\n\r\n").await;
                    return;
                }
                let mut upstream = TcpStream::connect(backend).await.unwrap();
                client
                    .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .await
                    .unwrap();
                let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
            });
        }
    });
    (addr, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_through_http_connect_proxy_with_header() {
    let world = Arc::new(World::new());
    let (webhook, _) = start_webhook(&world).await;
    let server = TestServer::start(world.server_options(true), None, None).await;
    let (ingress, seen) = start_ingress(server.agents).await;
    let via_proxy = ServerEntryConfig {
        address: "api.example.test:8443".into(),
        server_name: Some("vpn.test".into()),
        http_connect_header: Some(HEADER.into()),
    };
    let agent = TestAgent::start(world.agent_options(
        vec![via_proxy],
        SwitchResolver::new(vec![ingress]),
        &["127.0.0.0/8"],
    ));
    live(
        &server.server,
        1,
        "the agent is connected through the proxy",
    )
    .await;
    call(
        &world,
        &ConnectAddr::Tcp(server.connect),
        true,
        webhook,
        "/",
    )
    .await
    .unwrap();
    let first = seen.lock().unwrap()[0].clone();
    assert!(
        first.starts_with("CONNECT api.example.test:8443 HTTP/1.1\r\n"),
        "{first}"
    );

    // Without the header the ingress refuses, and the agent never gets a session.
    let mut opts = world.agent_options(
        vec![entry("api.example.test:8443")],
        SwitchResolver::new(vec![ingress]),
        &["127.0.0.0/8"],
    );
    opts.servers[0].http_connect_header = Some("X-Other: 1".into());
    let refused = TestAgent::start(opts);
    wait_until("the ingress refused the agent", DEADLINE, || {
        let n = seen.lock().unwrap().len();
        async move { n >= 3 }
    })
    .await;
    assert_eq!(refused.agent.live_sessions(), 0);
    assert_eq!(server.server.live_sessions(), 1);
    refused.stop().await;
    agent.stop().await;
    server.stop().await;
}

async fn get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n");
    tcp.write_all(req.as_bytes()).await.unwrap();
    let mut text = String::new();
    tcp.read_to_string(&mut text).await.unwrap();
    let code = text.split_whitespace().nth(1).unwrap().parse().unwrap();
    (code, text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_ready_only_with_a_live_session() {
    let world = World::new();
    let agents = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let connect = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let agents_addr = agents.local_addr().unwrap();
    let mut registry = Registry::default();
    let server = isthmus_tunnel::server::Server::new(world.server_options(true), &mut registry);
    let stop = CancellationToken::new();
    let s = server.clone();
    let t = stop.clone();
    let run = tokio::spawn(async move {
        s.run(
            agents,
            isthmus_tunnel::server::ConnectListener::Tcp(connect),
            t,
        )
        .await
    });
    let admin = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin_addr = admin.local_addr().unwrap();
    let s = server.clone();
    let ready = Arc::new(move || s.live_sessions() > 0);
    tokio::spawn(isthmus_tunnel::admin::serve(
        admin,
        Arc::new(registry),
        ready,
        stop.clone(),
    ));

    assert_eq!(get(admin_addr, "/healthz").await.0, 200);
    assert_eq!(get(admin_addr, "/readyz").await.0, 503);
    let agent = TestAgent::start(world.loopback_agent(agents_addr));
    wait_until("ready", DEADLINE, || async move {
        get(admin_addr, "/readyz").await.0 == 200
    })
    .await;
    let (code, text) = get(admin_addr, "/metrics").await;
    assert_eq!(code, 200);
    assert!(
        text.contains("isthmus_tunnel_sessions{state=\"active\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("isthmus_tunnel_ping_rtt_seconds_bucket"),
        "{text}"
    );
    agent.stop().await;
    wait_until("not ready once the agent left", DEADLINE, || async move {
        get(admin_addr, "/readyz").await.0 == 503
    })
    .await;
    stop.cancel();
    run.await.unwrap();
}

#[test]
fn example_configs_parse() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let path = e.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&path).unwrap();
        if name.starts_with("server") {
            let c = isthmus_config::parse::<TunnelServerConfig>(&name, &text)
                .unwrap_or_else(|e| panic!("{e}"));
            // Readers copy the examples: each is the safe form (names listed, a CA per role,
            // the proxies whose PROXY header names the agent).
            assert_eq!(c.warnings(), Vec::<String>::new(), "{name}");
            assert!(!c.agents.trusted_proxies.is_empty(), "{name}");
        } else if name.starts_with("agent") {
            isthmus_config::parse::<TunnelAgentConfig>(&name, &text)
                .unwrap_or_else(|e| panic!("{e}"));
        } else {
            continue;
        }
        n += 1;
    }
    assert!(n >= 3, "expected the example configs in {}", dir.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn target_names_are_resolved_in_the_shoot_and_checked() {
    let world = World::new();
    let (webhook, _) = start_webhook(&world).await;
    let server = TestServer::start(world.server_options(true), None, None).await;
    let allow = format!("127.0.0.1/32:{}", webhook.port());
    let mut opts = world.agent_options(
        vec![entry("vpn.test:443")],
        SwitchResolver::new(vec![server.agents]),
        &[allow.as_str()],
    );
    // Bounds the lookup of the unknown name where DNS does not answer at all.
    opts.dial_timeout = std::time::Duration::from_secs(1);
    let agent = TestAgent::start(opts);
    live(&server.server, 1, "the agent is connected").await;
    let addr = ConnectAddr::Tcp(server.connect);
    // `localhost` resolves (in the shoot) to 127.0.0.1 (and maybe ::1, which is not allowed).
    let ok = connect(
        &addr,
        Some(world.apiserver_tls()),
        &format!("localhost:{}", webhook.port()),
    )
    .await;
    assert!(ok.is_ok(), "{:?}", ok.err());
    drop(ok);
    let denied = connect(
        &addr,
        Some(world.apiserver_tls()),
        &format!("localhost:{}", server.agents.port()),
    )
    .await;
    assert_eq!(denied.err().as_deref(), Some("status 403"));
    let unknown = connect(
        &addr,
        Some(world.apiserver_tls()),
        "no-such-host.invalid:443",
    )
    .await;
    assert_eq!(unknown.err().as_deref(), Some("status 502"));
    let m = agent.metrics();
    assert_eq!(
        metric(
            &m,
            "isthmus_tunnel_dials_total{outcome=\"failed\",reason=\"resolve\"}"
        ),
        1.0,
        "{m}"
    );
    agent.stop().await;
    server.stop().await;
}
