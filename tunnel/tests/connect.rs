//! The CONNECT endpoint end to end: webhook calls through the tunnel (our client and curl),
//! the allow-list, malformed requests, refused certificates, the Unix socket endpoint, metrics.

mod common;

use common::*;
use isthmus_testkit::wait_until;
use std::time::Instant;

/// `series` of the metrics text `m` is `want`.
fn assert_metric(m: &str, series: &str, want: f64) {
    assert_eq!(metric(m, series), want, "{series}: {m}");
}

async fn setup(world: &World, allow: &[&str]) -> (TestServer, TestAgent) {
    let server = TestServer::start(world.server_options(true), None, None).await;
    let resolver = SwitchResolver::new(vec![server.agents]);
    let agent = TestAgent::start(world.agent_options(vec![entry("vpn.test:443")], resolver, allow));
    live(&server.server, 1, "the agent session is live").await;
    (server, agent)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_calls_in_parallel() {
    let world = std::sync::Arc::new(World::new());
    let (webhook, served) = start_webhook(&world).await;
    let (server, agent) = setup(&world, &["127.0.0.0/8"]).await;
    let addr = ConnectAddr::Tcp(server.connect);
    let start = Instant::now();
    let results = parallel_calls(&world, &addr, true, webhook, 200).await;
    let failed: Vec<_> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    println!(
        "200 parallel webhook calls through the tunnel in {:?}",
        start.elapsed()
    );
    assert!(failed.is_empty(), "failed: {failed:?}");
    assert_eq!(served.load(std::sync::atomic::Ordering::Relaxed), 200);

    // Exact series, once every stream has closed on both ends.
    let s = server.server.clone();
    wait_until("server streams closed", DEADLINE, || {
        let s = s.clone();
        async move { s.streams_in_flight() == 0 }
    })
    .await;
    let m = server.metrics();
    assert_metric(&m, "isthmus_tunnel_connects_total{code=\"200\"}", 200.0);
    assert_metric(&m, "isthmus_tunnel_sessions{state=\"active\"}", 1.0);
    assert_metric(&m, "isthmus_tunnel_handshakes_total{outcome=\"ok\"}", 1.0);
    assert!(
        metric(&m, "isthmus_tunnel_ping_rtt_seconds_count") >= 1.0,
        "{m}"
    );
    assert!(
        metric(&m, "isthmus_tunnel_bytes_total{direction=\"to_target\"}") > 0.0,
        "{m}"
    );
    let am = agent.metrics();
    wait_until("agent streams closed", DEADLINE, || {
        let text = agent.metrics();
        async move { metric(&text, "isthmus_tunnel_streams_in_flight") == 0.0 }
    })
    .await;
    assert_metric(
        &am,
        "isthmus_tunnel_dials_total{outcome=\"ok\",reason=\"connected\"}",
        200.0,
    );
    assert_metric(&am, "isthmus_tunnel_sessions{state=\"active\"}", 1.0);
    agent.stop().await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_proxytunnel() {
    let world = World::new();
    let (webhook, _) = start_webhook(&world).await;
    let (server, agent) = setup(&world, &["127.0.0.1/32"]).await;
    let dir = world.dir.path();
    let ca = world.pki.write_ca(dir);
    let (cert, key) = world.apiserver_cert.write(dir, "apiserver");
    let url = format!("https://127.0.0.1:{}/", webhook.port());
    let proxy = format!("https://127.0.0.1:{}", server.connect.port());
    let mut cmd = std::process::Command::new("curl");
    cmd.args([
        "-sS",
        "--fail",
        "--max-time",
        "10",
        "--proxytunnel",
        "--proxy",
        &proxy,
    ])
    .arg("--proxy-cacert")
    .arg(&ca)
    .arg("--proxy-cert")
    .arg(&cert)
    .arg("--proxy-key")
    .arg(&key)
    .arg("--cacert")
    .arg(&ca)
    .arg(&url);
    // curl blocks; run it off the runtime threads that serve the tunnel.
    let out = tokio::task::spawn_blocking(move || cmd.output())
        .await
        .unwrap()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "curl failed: {stderr}");
    assert_eq!(out.stdout, b"ok");
    agent.stop().await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn target_outside_allow_list_gets_403_without_dial() {
    let world = World::new();
    let (webhook, _) = start_webhook(&world).await;
    // Only the webhook's port is allowed; a listener on another port must never see a dial.
    let forbidden = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let allow = format!("127.0.0.1/32:{}", webhook.port());
    let (server, agent) = setup(&world, &[allow.as_str()]).await;
    let addr = ConnectAddr::Tcp(server.connect);
    let target = forbidden.local_addr().unwrap().to_string();
    let err = connect(&addr, Some(world.apiserver_tls()), &target)
        .await
        .err();
    assert_eq!(err.as_deref(), Some("status 403"));
    let accepted =
        tokio::time::timeout(std::time::Duration::from_millis(50), forbidden.accept()).await;
    assert!(accepted.is_err(), "the forbidden target was dialed");
    let am = agent.metrics();
    assert_metric(
        &am,
        "isthmus_tunnel_dials_total{outcome=\"denied\",reason=\"not_allowed\"}",
        1.0,
    );
    assert_metric(
        &am,
        "isthmus_tunnel_dials_total{outcome=\"ok\",reason=\"connected\"}",
        0.0,
    );
    assert_eq!(
        metric(
            &server.metrics(),
            "isthmus_tunnel_connects_total{code=\"403\"}"
        ),
        1.0
    );
    // The allowed port still works.
    call(&world, &addr, true, webhook, "/").await.unwrap();
    agent.stop().await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_target_and_no_agent_answer_5xx() {
    let world = World::new();
    let (server, agent) = setup(&world, &["127.0.0.0/8"]).await;
    let addr = ConnectAddr::Tcp(server.connect);
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let err = connect(&addr, Some(world.apiserver_tls()), &closed.to_string())
        .await
        .err();
    assert_eq!(err.as_deref(), Some("status 502"));
    let am = agent.metrics();
    assert_metric(
        &am,
        "isthmus_tunnel_dials_total{outcome=\"failed\",reason=\"refused\"}",
        1.0,
    );
    agent.stop().await;
    live(&server.server, 0, "the session is gone").await;
    let err = connect(&addr, Some(world.apiserver_tls()), "127.0.0.1:1")
        .await
        .err();
    assert_eq!(err.as_deref(), Some("status 503"));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_connect_gets_400() {
    let world = World::new();
    let (server, agent) = setup(&world, &["127.0.0.0/8"]).await;
    let addr = ConnectAddr::Tcp(server.connect);
    for (request, want) in [
        (&b"CONNECT 127.0.0.1 HTTP/1.1\r\nHost: x\r\n\r\n"[..], 400),
        (b"CONNECT /path HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        (b"GARBAGE\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", 405),
    ] {
        let mut io = open_endpoint(&addr, Some(world.apiserver_tls()))
            .await
            .unwrap();
        let code = raw_connect(&mut io, request).await.unwrap();
        assert_eq!(code, want, "{}", String::from_utf8_lossy(request));
    }
    let am = agent.metrics();
    assert_metric(
        &am,
        "isthmus_tunnel_dials_total{outcome=\"ok\",reason=\"connected\"}",
        0.0,
    );
    agent.stop().await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_client_certificates_are_refused_at_the_handshake() {
    let world = World::new();
    let (server, agent) = setup(&world, &["127.0.0.0/8"]).await;
    let other = isthmus_testkit::TestPki::new();
    let intruder = other.client_cert("vpn-shoot");

    // An agent whose certificate comes from another CA never gets a session.
    let mut opts = world.agent_options(
        vec![entry("vpn.test:443")],
        SwitchResolver::new(vec![server.agents]),
        &["0.0.0.0/0"],
    );
    opts.tls = world.pki.client_config(Some(&intruder), &["h2"]);
    let bad_agent = TestAgent::start(opts);
    wait_until("the server refused a handshake", DEADLINE, || {
        let m = server.metrics();
        async move { metric(&m, "isthmus_tunnel_handshakes_total{outcome=\"failed\"}") >= 1.0 }
    })
    .await;
    assert_eq!(server.server.live_sessions(), 1);
    assert_eq!(bad_agent.agent.live_sessions(), 0);
    bad_agent.stop().await;

    // Nor does a CONNECT client with such a certificate, or with none.
    let addr = ConnectAddr::Tcp(server.connect);
    for tls in [
        world.pki.client_config(Some(&intruder), &[]),
        world.pki.client_config(None, &[]),
    ] {
        let r = connect(&addr, Some(tls), "127.0.0.1:1").await;
        assert!(
            r.is_err(),
            "CONNECT without a valid client certificate got through"
        );
        assert!(
            !r.err().unwrap().starts_with("status"),
            "the refusal must come from TLS, not HTTP"
        );
    }
    agent.stop().await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unix_socket_endpoint() {
    let world = World::new();
    let (webhook, _) = start_webhook(&world).await;
    let path = world.dir.path().join("connect.sock");
    let a = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let agents = a.local_addr().unwrap();
    let unix = tokio::net::UnixListener::bind(&path).unwrap();
    let server = TestServer::start_with(
        world.server_options(false),
        a,
        isthmus_tunnel::server::ConnectListener::Unix(unix),
        agents,
        agents,
    );
    let agent = TestAgent::start(world.agent_options(
        vec![entry("vpn.test:443")],
        SwitchResolver::new(vec![agents]),
        &["127.0.0.1/32"],
    ));
    live(&server.server, 1, "the agent session is live").await;
    let addr = ConnectAddr::Unix(path);
    for _ in 0..20 {
        call(&world, &addr, false, webhook, "/").await.unwrap();
    }
    agent.stop().await;
    server.stop().await;
}
