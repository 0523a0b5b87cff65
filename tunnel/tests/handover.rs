//! The live-migration handover with webhook calls running the whole time, and a server
//! restart. Every call is recorded; the handover must not fail a single one.

mod common;

use common::*;
use isthmus_testkit::wait_until;
use std::sync::Arc;
use std::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handover_without_a_failed_call() {
    let world = Arc::new(World::new());
    let (webhook, _) = start_webhook(&world).await;
    let allow = &["127.0.0.0/8"];
    // Source seed S1 and destination seed S2, each with its own tunnel server.
    let s1 = TestServer::start(world.server_options(true), None, None).await;
    let s2 = TestServer::start(world.server_options(true), None, None).await;
    let (c1, c2) = (ConnectAddr::Tcp(s1.connect), ConnectAddr::Tcp(s2.connect));

    // The regular agent serves the source kube-apiserver.
    let dns = SwitchResolver::new(vec![s1.agents]);
    let regular =
        TestAgent::start(world.agent_options(vec![entry("vpn.test:443")], dns.clone(), allow));
    live(&s1.server, 1, "the regular agent is on S1").await;
    let load1 = Load::start(&world, &c1, webhook, 4, 30);
    load1.wait_for_more(50).await;

    // 1. The temporary agent joins the destination; the destination kube-apiserver starts.
    let temp = TestAgent::start(world.agent_options(
        vec![entry("vpn-temp.test:443")],
        SwitchResolver::new(vec![s2.agents]),
        allow,
    ));
    live(&s2.server, 1, "the temporary agent is on S2").await;
    let load2 = Load::start(&world, &c2, webhook, 4, 30);
    load2.wait_for_more(50).await;

    // 2. The source kube-apiserver goes away (its calls stop), leaving long calls open on
    //    S1; the regular agent's name moves to S2: it must open and verify S2 first, then
    //    drain S1 without cutting those calls.
    let records1 = load1.stop().await;
    let long_calls: Vec<_> = (0..4)
        .map(|_| {
            let (world, c1) = (world.clone(), c1.clone());
            tokio::spawn(async move { call(&world, &c1, true, webhook, "/slow/1500").await })
        })
        .collect();
    wait_until("the long calls are open on S1", DEADLINE, || {
        let n = s1.server.streams_in_flight();
        async move { n == 4 }
    })
    .await;
    let moved = Instant::now();
    dns.set(vec![s2.agents]);
    live(&s2.server, 2, "the regular agent is also on S2").await;
    live(&s1.server, 0, "the regular agent left S1").await;
    println!(
        "regular agent moved S1 -> S2 (make before break) in {:?}",
        moved.elapsed()
    );
    let mut long_failures = Vec::new();
    for t in long_calls {
        if let Err(e) = t.await.unwrap() {
            long_failures.push(e);
        }
    }
    load2.wait_for_more(50).await;

    // 3. The temporary agent drains (GOAWAY; its open streams finish) and stops.
    let drained = Instant::now();
    temp.stop().await;
    println!(
        "temporary agent drained and stopped in {:?}",
        drained.elapsed()
    );
    live(&s2.server, 1, "only the regular agent is on S2").await;
    load2.wait_for_more(50).await;
    let records2 = load2.stop().await;

    let (f1, f2) = (failures(&records1), failures(&records2));
    println!(
        "handover: S1 {} calls, {} failed; long calls across the drain: 4, {} failed; \
         S2 {} calls, {} failed",
        records1.len(),
        f1.len(),
        long_failures.len(),
        records2.len(),
        f2.len()
    );
    assert!(f1.is_empty(), "S1 failures: {f1:?}");
    assert!(
        long_failures.is_empty(),
        "long calls cut by the drain: {long_failures:?}"
    );
    assert!(f2.is_empty(), "S2 failures: {f2:?}");
    let m = s2.metrics();
    assert_eq!(
        metric(&m, "isthmus_tunnel_sessions{state=\"active\"}"),
        1.0,
        "{m}"
    );
    regular.stop().await;
    s1.stop().await;
    s2.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_restart_agents_reconnect() {
    let world = Arc::new(World::new());
    let (webhook, _) = start_webhook(&world).await;
    let server = TestServer::start(world.server_options(true), None, None).await;
    let (agents_addr, connect_addr) = (server.agents, server.connect);
    let agent = TestAgent::start(world.loopback_agent(agents_addr));
    live(&server.server, 1, "the agent is connected").await;
    let load = Load::start(&world, &ConnectAddr::Tcp(connect_addr), webhook, 4, 0);
    load.wait_for_more(50).await;

    let stopped = Instant::now();
    server.stop().await;
    // The new server process binds the same ports.
    let restarted = TestServer::start(
        world.server_options(true),
        Some(agents_addr),
        Some(connect_addr),
    )
    .await;
    let bound = Instant::now();
    live(&restarted.server, 1, "the agent reconnected").await;
    let reconnected = bound.elapsed();
    load.wait_for_more(50).await;
    let records = load.stop().await;

    let last_ok_before = records
        .iter()
        .filter(|r| r.result.is_ok() && r.end <= stopped)
        .map(|r| r.end)
        .max()
        .unwrap();
    let first_ok_after = records
        .iter()
        .filter(|r| r.result.is_ok() && r.start >= stopped)
        .map(|r| r.end)
        .min()
        .unwrap();
    let failed = failures(&records);
    println!(
        "server restart: server down for {:?} (stop + bind), agent reconnected {:?} after the new \
         server bound; gap between successful calls {:?}; {} calls, {} failed while no server was \
         listening (first: {:?})",
        bound - stopped,
        reconnected,
        first_ok_after - last_ok_before,
        records.len(),
        failed.len(),
        failed.first()
    );
    assert_eq!(agent.agent.live_sessions(), 1);
    agent.stop().await;
    restarted.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_streams_go_to_the_session_with_fewest_in_flight() {
    let world = Arc::new(World::new());
    let (webhook, _) = start_webhook(&world).await;
    let server = TestServer::start(world.server_options(true), None, None).await;
    let dns = SwitchResolver::new(vec![server.agents]);
    let a = TestAgent::start(world.agent_options(
        vec![entry("vpn.test:443")],
        dns.clone(),
        &["127.0.0.0/8"],
    ));
    let b =
        TestAgent::start(world.agent_options(vec![entry("vpn.test:443")], dns, &["127.0.0.0/8"]));
    live(&server.server, 2, "both agents are connected").await;
    let addr = ConnectAddr::Tcp(server.connect);
    let mut open = Vec::new();
    for _ in 0..10 {
        open.push(
            connect(&addr, Some(world.apiserver_tls()), &webhook.to_string())
                .await
                .unwrap(),
        );
    }
    let in_flight = |t: &TestAgent| metric(&t.metrics(), "isthmus_tunnel_streams_in_flight");
    assert_eq!((in_flight(&a), in_flight(&b)), (5.0, 5.0));
    drop(open);
    a.stop().await;
    b.stop().await;
    server.stop().await;
}
