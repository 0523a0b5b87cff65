//! `max_session_age`: the agent replaces old sessions (make before break) while calls run,
//! and so leaves an ingress that drains on restart before the drain ends.

mod common;

use common::*;
use isthmus_proxy::Proxy;
use isthmus_testkit::{wait_until, Scratch};
use prometheus_client::registry::Registry;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const AGE: Duration = Duration::from_millis(500);
const ROTATIONS: &str = "isthmus_tunnel_session_rotations_total{reason=\"max_age\"}";
const SERVER_HANDSHAKES: &str = "isthmus_tunnel_handshakes_total{outcome=\"ok\"}";

/// A server and an agent whose sessions are replaced when they are `AGE` old.
async fn rotating(world: &World) -> (TestServer, TestAgent, ConnectAddr) {
    let server = TestServer::start(world.server_options(true), None, None).await;
    let mut opts = world.loopback_agent(server.agents);
    opts.max_session_age = Some(AGE);
    let agent = TestAgent::start(opts);
    let addr = ConnectAddr::Tcp(server.connect);
    (server, agent, addr)
}

/// A stream through the tunnel to a target the test holds: (kube-apiserver's end, target's end).
#[allow(clippy::unwrap_used)]
async fn hold_stream(world: &World, addr: &ConnectAddr) -> (Box<dyn Io>, TcpStream) {
    let target = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let held = connect(
        addr,
        Some(world.apiserver_tls()),
        &target.local_addr().unwrap().to_string(),
    )
    .await
    .unwrap();
    let (far, _) = target.accept().await.unwrap();
    (held, far)
}

/// Bytes still flow both ways on a held stream.
#[allow(clippy::unwrap_used)]
async fn ping_pong(held: &mut Box<dyn Io>, far: &mut TcpStream) {
    held.write_all(b"ping").await.unwrap();
    let mut got = [0u8; 4];
    far.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"ping");
    far.write_all(b"pong").await.unwrap();
    held.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"pong");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_rotate_without_a_failed_call_and_open_streams_finish_on_the_old_one() {
    let world = Arc::new(World::new());
    let (webhook, _) = start_webhook(&world).await;
    let (server, agent, addr) = rotating(&world).await;
    let load = Load::start(&world, &addr, webhook, 4, 30);
    load.wait_for_more(50).await;

    // A long stream, held open by the test: it sits on whichever session is current now,
    // which will age and be replaced while the stream is open.
    let (mut held, mut far) = hold_stream(&world, &addr).await;
    let before = metric(&agent.metrics(), ROTATIONS);
    agent
        .wait_metric("two rotations", ROTATIONS, before + 2.0)
        .await;
    agent
        .wait_metric(
            "the held stream's session draining",
            "isthmus_tunnel_sessions{state=\"draining\"}",
            1.0,
        )
        .await;
    // The old session got GOAWAY long ago; its open stream still carries bytes both ways.
    ping_pong(&mut held, &mut far).await;
    drop((held, far));
    load.wait_for_more(50).await;
    let records = load.stop().await;

    let failed = failures(&records);
    let (a, s) = (agent.metrics(), server.metrics());
    println!(
        "rotation every {AGE:?}: {} rotations, {} sessions seen by the server; {} calls, {} failed",
        metric(&a, ROTATIONS),
        metric(&s, SERVER_HANDSHAKES),
        records.len(),
        failed.len()
    );
    assert!(failed.is_empty(), "failures: {failed:?}");
    assert!(metric(&s, SERVER_HANDSHAKES) >= 3.0, "{s}");
    agent.stop().await;
    server.stop().await;
}

/// A stream on a session that was rotated away keeps the agent's shutdown waiting: the
/// process must not exit under it (found by the lab: a webhook call on a rotated session
/// failed when the temporary agent was stopped).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_waits_for_streams_on_rotated_sessions() {
    let world = Arc::new(World::new());
    let (server, agent, addr) = rotating(&world).await;
    agent
        .wait_metric(
            "a live session",
            "isthmus_tunnel_sessions{state=\"active\"}",
            1.0,
        )
        .await;
    let (mut held, mut far) = hold_stream(&world, &addr).await;
    let before = metric(&agent.metrics(), ROTATIONS);
    agent
        .wait_metric("a rotation", ROTATIONS, before + 1.0)
        .await;

    let stopping = tokio::spawn(agent.stop());
    // The held stream's session is draining, the agent is shutting down: bytes still flow,
    // and the shutdown (drain timeout 10 s) cannot be over while the stream is open.
    ping_pong(&mut held, &mut far).await;
    assert!(
        !stopping.is_finished(),
        "the agent stopped under an open stream of a rotated session"
    );
    drop((held, far));
    stopping.await.unwrap();
    server.stop().await;
}

fn proxy_yaml(listen: SocketAddr, upstream: SocketAddr) -> String {
    format!(
        "admin: {{ address: \"127.0.0.1:0\" }}\nwatch_interval: 0s\nlisteners:\n  - name: vpn\n    \
         address: \"{listen}\"\n    routes: [ {{ sni: \"vpn.test\", upstream: vpn }} ]\n\
         upstreams:\n  - {{ name: vpn, endpoints: [\"{upstream}\"] }}\n"
    )
}

async fn start_proxy(dir: &Scratch, name: &str, yaml: &str) -> Result<Proxy, String> {
    let path = dir.join(name);
    std::fs::write(&path, yaml).map_err(|e| e.to_string())?;
    Proxy::start(&path, Registry::default())
        .await
        .map_err(|e| e.to_string())
}

/// The agent reaches the server through an isthmus SNI proxy (TLS passthrough) that restarts
/// with drain: the old process closes its listener, the new one binds the same port, the old
/// one gives open connections `DRAIN` and then cuts them. With `max_session_age` well below
/// `DRAIN` the agent has moved to the new process before that: nothing is cut, no call fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_ingress_proxy_cuts_no_session() {
    const DRAIN: Duration = Duration::from_secs(5);
    let world = Arc::new(World::new());
    let (webhook, _) = start_webhook(&world).await;
    let server = TestServer::start(world.server_options(true), None, None).await;
    let dir = Scratch::new("rotation-proxy");
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let old = start_proxy(&dir, "old.yaml", &proxy_yaml(any, server.agents))
        .await
        .unwrap();
    let ingress = old.listener_addr("vpn").await.unwrap();
    let mut opts = world.agent_options(
        vec![entry(&format!("vpn.test:{}", ingress.port()))],
        SwitchResolver::new(vec![ingress]),
        &["127.0.0.0/8"],
    );
    opts.max_session_age = Some(AGE);
    let agent = TestAgent::start(opts);
    let load = Load::start(&world, &ConnectAddr::Tcp(server.connect), webhook, 4, 30);
    load.wait_for_more(50).await;

    // The restart: SIGTERM's drain on the old process, a new process on the same port.
    let draining = old.clone();
    let drain = tokio::spawn(async move { draining.shutdown(Duration::ZERO, DRAIN).await });
    wait_until("the old proxy closed its listener", DEADLINE, || async {
        TcpStream::connect(ingress).await.is_err()
    })
    .await;
    let new = start_proxy(&dir, "new.yaml", &proxy_yaml(ingress, server.agents))
        .await
        .unwrap();
    let left_open = drain.await.unwrap();
    let rotations = metric(&agent.metrics(), ROTATIONS);
    load.wait_for_more(50).await;
    let records = load.stop().await;

    let failed = failures(&records);
    println!(
        "proxy restart with a {DRAIN:?} drain, max_session_age {AGE:?}: {left_open} connections \
         cut by the old proxy, {rotations} rotations; {} calls, {} failed",
        records.len(),
        failed.len()
    );
    assert_eq!(left_open, 0, "the old proxy had to cut connections");
    assert!(failed.is_empty(), "failures: {failed:?}");
    assert!(rotations >= 1.0);
    agent.stop().await;
    server.stop().await;
    new.shutdown(Duration::ZERO, Duration::from_secs(1)).await;
}
