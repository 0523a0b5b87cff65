//! Head-of-line blocking: streams whose reader has stopped reading must not delay the
//! other streams of the same session (per-stream HTTP/2 flow control), and what they buffer
//! must stay bounded.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use isthmus_testkit::{percentile, wait_until};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;

/// A target that writes as fast as it is allowed, forever; counts what it wrote.
async fn start_firehose() -> (std::net::SocketAddr, Arc<AtomicU64>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let written = Arc::new(AtomicU64::new(0));
    let w = written.clone();
    tokio::spawn(async move {
        loop {
            let (mut tcp, _) = listener.accept().await.unwrap();
            let w = w.clone();
            tokio::spawn(async move {
                let chunk = vec![0x5a; 64 * 1024];
                while tcp.write_all(&chunk).await.is_ok() {
                    w.fetch_add(chunk.len() as u64, Ordering::Relaxed);
                }
            });
        }
    });
    (addr, written)
}

async fn latencies(
    world: &Arc<World>,
    addr: &ConnectAddr,
    webhook: std::net::SocketAddr,
) -> Vec<Duration> {
    let mut out = Vec::new();
    for _ in 0..10 {
        let tasks: Vec<_> = (0..10)
            .map(|_| {
                let (world, addr) = (world.clone(), addr.clone());
                tokio::spawn(async move {
                    let t = Instant::now();
                    call(&world, &addr, true, webhook, "/")
                        .await
                        .map(|()| t.elapsed())
                })
            })
            .collect();
        for t in tasks {
            out.push(
                t.await
                    .unwrap()
                    .expect("a call failed while readers were stalled"),
            );
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_readers_do_not_delay_other_streams() {
    let world = Arc::new(World::new());
    let (webhook, _) = start_webhook(&world).await;
    let (firehose, written) = start_firehose().await;
    let server = TestServer::start(world.server_options(true), None, None).await;
    let _agent = TestAgent::start(world.loopback_agent(server.agents));
    live(&server.server, 1, "the agent is connected").await;
    let addr = ConnectAddr::Tcp(server.connect);
    let before = latencies(&world, &addr, webhook).await;

    // Four clients CONNECT to the firehose and never read.
    const STALLED: usize = 4;
    let mut stalled = Vec::new();
    for _ in 0..STALLED {
        stalled.push(
            connect(&addr, Some(world.apiserver_tls()), &firehose.to_string())
                .await
                .unwrap(),
        );
    }
    wait_until(
        "the stalled streams have filled their windows",
        DEADLINE,
        || {
            let n = written.load(Ordering::Relaxed);
            async move { n >= STALLED as u64 * (4 << 20) }
        },
    )
    .await;
    let during = latencies(&world, &addr, webhook).await;
    let buffered = written.load(Ordering::Relaxed);

    println!(
        "slow readers: 100 webhook calls (10 x 10 parallel) p50/p99 {:?}/{:?} before, \
         {:?}/{:?} with {STALLED} stalled streams holding {:.1} MiB; those streams are still \
         open and blocked",
        percentile(&before, 50.0),
        percentile(&before, 99.0),
        percentile(&during, 50.0),
        percentile(&during, 99.0),
        buffered as f64 / f64::from(1 << 20),
    );
    // Every other call completed (above) while the stalled streams are still open, and the
    // firehose is held back by flow control instead of being buffered without bound
    // (per stream: 4 MiB HTTP/2 window plus the kernel's socket buffers on four hops).
    let s = server.server.clone();
    wait_until("only the stalled streams are left open", DEADLINE, || {
        let n = s.streams_in_flight();
        async move { n == STALLED }
    })
    .await;
    assert!(
        buffered < STALLED as u64 * (64 << 20),
        "{buffered} bytes buffered: flow control is not holding"
    );
    drop(stalled);
}
