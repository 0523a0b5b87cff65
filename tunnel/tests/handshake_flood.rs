//! The agents listener under a flood of stalled TLS handshakes from many sources, tried as an
//! attacker would (issue 25 point 1): a real agent that reconnects and rotates its sessions
//! gets every handshake through, directly and behind a real isthmus proxy that sends PROXY v2
//! (then every connection arrives from the proxy's address, and only the header tells the
//! flood from the agent). Sources are loopback addresses (127.1.x.y): Linux routes all of
//! 127/8 locally.

mod common;

use common::*;
use isthmus_config::Cidr;
use isthmus_proxy::Proxy;
use isthmus_testkit::{wait_until, Scratch};
use prometheus_client::registry::Registry;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

const AGE: Duration = Duration::from_millis(300);
const ROTATIONS: &str = "isthmus_tunnel_session_rotations_total{reason=\"max_age\"}";
const AGENT_OK: &str = "isthmus_tunnel_handshakes_total{outcome=\"ok\"}";
const AGENT_FAILED: &str = "isthmus_tunnel_handshakes_total{outcome=\"failed\"}";

/// The first bytes of a TLS record: past `TCP_DEFER_ACCEPT`, then silence.
const STALL: &[u8] = &[0x16, 0x03, 0x01, 0x02, 0x00];

/// `sources` addresses (127.1.x.y), each holding `per_source` connections that send `first`.
fn flood(
    target: SocketAddr,
    first: Arc<Vec<u8>>,
    sources: u16,
    per_source: usize,
    pause: Duration,
) -> Flood {
    let connections = (0..sources)
        .flat_map(|i| {
            let ip = std::net::Ipv4Addr::new(127, 1, (i / 250) as u8, (i % 250 + 1) as u8);
            std::iter::repeat_n((Some(ip.into()), first.clone()), per_source)
        })
        .collect();
    Flood::start(target, connections, pause)
}

/// The server, its agents listener bound as the binary binds it (`TCP_DEFER_ACCEPT`).
#[allow(clippy::unwrap_used)]
async fn start_server(world: &World, trusted: &[&str]) -> TestServer {
    let mut opts = world.server_options(true);
    opts.limits.trusted_proxies = trusted.iter().map(|c| Cidr::parse(c).unwrap()).collect();
    TestServer::start_deferred(opts).await
}

/// Three times over: an agent (dialing `via`) with `max_session_age: 300ms` connects,
/// rotates its session three times, carries a webhook call and stops. Returns its
/// handshakes `(ok, failed)`.
#[allow(clippy::unwrap_used)]
async fn agents_come_and_go(
    world: &Arc<World>,
    server: &TestServer,
    via: SocketAddr,
    webhook: SocketAddr,
) -> (f64, f64) {
    let (mut ok, mut failed) = (0.0, 0.0);
    for _ in 0..3 {
        let mut opts = world.agent_options(
            vec![entry(&format!("vpn.test:{}", via.port()))],
            SwitchResolver::new(vec![via]),
            &["127.0.0.0/8"],
        );
        opts.max_session_age = Some(AGE);
        let agent = TestAgent::start(opts);
        agent.wait_metric("three rotations", ROTATIONS, 3.0).await;
        let addr = ConnectAddr::Tcp(server.connect);
        call(world, &addr, true, webhook, "/").await.unwrap();
        let m = agent.metrics();
        ok += metric(&m, AGENT_OK);
        failed += metric(&m, AGENT_FAILED);
        agent.stop().await;
    }
    (ok, failed)
}

const EVICTED: &str = "isthmus_tunnel_refused_total{listener=\"agents\",reason=\"evicted\"}";

/// 200 sources × 2 stalled handshakes (400; with its 64 slots the old server refused every
/// newcomer, the agent's included, for 10 s at a time) while agents come and go: every agent
/// handshake succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_gets_through_a_flood_of_stalled_handshakes() {
    let world = Arc::new(World::new());
    let (webhook, _) = start_webhook(&world).await;
    let server = start_server(&world, &[]).await;
    let stall = Arc::new(STALL.to_vec());
    let flood = flood(server.agents, stall, 200, 2, Duration::from_millis(20));
    wait_until("the flood is on", DEADLINE, || async {
        flood.opened() >= 400
    })
    .await;
    let (ok, failed) = agents_come_and_go(&world, &server, server.agents, webhook).await;
    let flooded = flood.opened();
    flood.stop().await;
    let evicted = metric(&server.metrics(), EVICTED);
    println!(
        "direct: {flooded} stalled connections from 200 sources ({evicted} evicted); the \
         agents' handshakes: {ok} ok, {failed} failed"
    );
    assert_eq!(failed, 0.0, "{}", server.metrics());
    assert!(ok >= 12.0 && evicted > 0.0);
    server.stop().await;
}

/// A ClientHello for the tunnel's name, as a flooder sends it through the proxy (which then
/// connects it to the server: the server answers and waits for a Finished that never comes).
#[allow(clippy::unwrap_used)]
fn client_hello(world: &World) -> Vec<u8> {
    let config = world.pki.client_config(None, &["h2"]);
    let name = rustls::pki_types::ServerName::try_from("vpn.test").unwrap();
    let mut conn = rustls::ClientConnection::new(config, name).unwrap();
    let mut hello = Vec::new();
    conn.write_tls(&mut hello).unwrap();
    hello
}

/// The same flood through the seed's isthmus proxy: every connection reaches the server from
/// the proxy's address, the flooders' complete ClientHellos included, and the proxy's PROXY v2
/// header (trusted from 127.0.0.1) gives each its real source, so that the per-source share
/// still tells them from the agent.
#[allow(clippy::unwrap_used)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_the_proxy_the_agent_gets_through_too() {
    let world = Arc::new(World::new());
    let (webhook, _) = start_webhook(&world).await;
    let server = start_server(&world, &["127.0.0.1/32"]).await;
    let dir = Scratch::new("flood-proxy");
    let path = dir.join("proxy.yaml");
    std::fs::write(&path, proxy_yaml(server.agents)).unwrap();
    let proxy = Proxy::start(&path, Registry::default()).await.unwrap();
    let ingress = proxy.listener_addr("vpn").await.unwrap();
    let hello = Arc::new(client_hello(&world));
    let flood = flood(ingress, hello, 200, 2, Duration::from_millis(20));
    wait_until("the flood is on", DEADLINE, || async {
        flood.opened() >= 400
    })
    .await;
    let (ok, failed) = agents_come_and_go(&world, &server, ingress, webhook).await;
    let flooded = flood.opened();
    flood.stop().await;
    let evicted = metric(&server.metrics(), EVICTED);
    println!(
        "through the proxy: {flooded} stalled connections from 200 sources ({evicted} \
         evicted); the agents' handshakes: {ok} ok, {failed} failed"
    );
    assert_eq!(failed, 0.0, "{}", server.metrics());
    assert!(ok >= 12.0 && evicted > 0.0);
    server.stop().await;
    proxy.shutdown(Duration::ZERO, Duration::from_secs(1)).await;
}
