//! A far agent's handshakes against a flood from more sources than the server has handshake
//! slots (issue 47 point 2: 300 addresses at 1,000 handshakes/s left an agent 300 ms away 0 of
//! 40 handshakes; a table that closes the oldest handshake closes every handshake that takes
//! longer than the flood needs to fill it). The agent reaches the server as it does in a seed:
//! over a long link (the testkit's userspace link emulator, 300 ms) into a real isthmus proxy
//! whose upstream sends PROXY v2. The flood comes from the proxies' address too, each
//! connection with a PROXY v2 header naming one of 300 sources, as the proxy writes it for
//! 300 internet hosts; then it starts a TLS record and stalls.

mod common;

use common::*;
use isthmus_config::Cidr;
use isthmus_proxy::Proxy;
use isthmus_proxy_protocol::{encode_v2, Addresses};
use isthmus_testkit::link::Link;
use isthmus_testkit::{wait_until, Scratch};
use prometheus_client::registry::Registry;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

const RTT: Duration = Duration::from_millis(300);
const SOURCES: u32 = 300;
/// Handshake slots of the server under test (a reserve of 8 for known sources).
const SLOTS: usize = 32;
const HANDSHAKES: f64 = 40.0;
const SERVER_OK: &str = "isthmus_tunnel_handshakes_total{outcome=\"ok\"}";
const AGENT_OK: &str = "isthmus_tunnel_handshakes_total{outcome=\"ok\"}";
const AGENT_FAILED: &str = "isthmus_tunnel_handshakes_total{outcome=\"failed\"}";
const EVICTED: &str = "isthmus_tunnel_refused_total{listener=\"agents\",reason=\"evicted\"}";

/// One connection per source, each reopened `pause` after the server closed it: all from
/// 127.0.0.1, each source named by its PROXY v2 header.
fn flood(server: SocketAddr, pause: Duration) -> Flood {
    let connections = (0..SOURCES)
        .map(|i| {
            let source = SocketAddr::from((Ipv4Addr::from(0x0a00_0000 + i), 40000));
            let mut first = Vec::new();
            encode_v2(
                &Addresses {
                    source,
                    destination: server,
                },
                &mut first,
            );
            // The first bytes of a TLS record, then silence.
            first.extend_from_slice(&[0x16, 0x03, 0x01, 0x02, 0x00]);
            (None, Arc::new(first))
        })
        .collect();
    Flood::start(server, connections, pause)
}

/// Two agents 300 ms away (through the link and the proxy) rotate their sessions while the
/// flood runs: of their first 40 handshakes under the flood, the server completes at least
/// 38 (the closing oldest-first table completed none).
#[allow(clippy::unwrap_used)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_far_agent_keeps_its_handshakes_under_a_flood_from_many_sources() {
    let world = Arc::new(World::new());
    let mut opts = world.server_options(true);
    opts.limits.trusted_proxies = vec![Cidr::parse("127.0.0.1/32").unwrap()];
    opts.limits.max_handshakes = SLOTS;
    let server = TestServer::start_deferred(opts).await;

    let dir = Scratch::new("far-agent");
    let path = dir.join("proxy.yaml");
    std::fs::write(&path, proxy_yaml(server.agents)).unwrap();
    let proxy = Proxy::start(&path, Registry::default()).await.unwrap();
    let ingress = proxy.listener_addr("vpn").await.unwrap();
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let far = Link::new(RTT).relay(any, ingress).await.unwrap();

    // The agents connect before the flood, as a shoot's agent is connected when an attack
    // starts; then every session is rotated (a new handshake) once verified.
    let start_agent = || {
        let mut o = world.agent_options(
            vec![entry(&format!("vpn.test:{}", far.port()))],
            SwitchResolver::new(vec![far]),
            &["127.0.0.0/8"],
        );
        o.max_session_age = Some(Duration::from_millis(100));
        TestAgent::start(o)
    };
    let agents = [start_agent(), start_agent()];
    let s = server.server.clone();
    wait_until("both agents are connected", DEADLINE, || {
        let s = s.clone();
        async move { s.live_sessions() >= 2 }
    })
    .await;

    let flood = flood(server.agents, Duration::from_millis(200));
    wait_until(
        "the flood fills the table many times over",
        DEADLINE,
        || async { metric(&server.metrics(), EVICTED) >= 10.0 * SLOTS as f64 },
    )
    .await;
    let attempts = |a: &[TestAgent; 2]| -> f64 {
        a.iter()
            .map(|a| {
                let m = a.metrics();
                metric(&m, AGENT_OK) + metric(&m, AGENT_FAILED)
            })
            .sum()
    };
    let (tried_before, ok_before) = (attempts(&agents), metric(&server.metrics(), SERVER_OK));
    let (evicted_before, opened_before) = (metric(&server.metrics(), EVICTED), flood.opened());
    let started = std::time::Instant::now();
    wait_until(
        "40 agent handshakes under the flood",
        Duration::from_secs(120),
        || {
            let tried = attempts(&agents) - tried_before;
            async move { tried >= HANDSHAKES }
        },
    )
    .await;
    // Read together: the server has completed at most the last attempt's handshake later.
    let tried = attempts(&agents) - tried_before;
    let completed = metric(&server.metrics(), SERVER_OK) - ok_before;
    let secs = started.elapsed().as_secs_f64();
    let flooded = (flood.opened() - opened_before) as f64 / secs;
    let evicted = (metric(&server.metrics(), EVICTED) - evicted_before) / secs;
    println!(
        "{SOURCES} sources, {flooded:.0} stalled connections/s ({evicted:.0} evictions/s, \
         {SLOTS} slots), agents {RTT:?} away: {completed} of {tried} handshakes completed"
    );
    flood.stop().await;
    for a in agents {
        a.stop().await;
    }
    assert!(
        completed >= tried - 2.0,
        "{completed} of {tried} handshakes completed"
    );
    server.stop().await;
    proxy.shutdown(Duration::ZERO, Duration::from_secs(1)).await;
}
