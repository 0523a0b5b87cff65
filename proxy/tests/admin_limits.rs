//! Slow or oversized admin clients, tried as an attacker would: `/readyz` still answers and
//! memory stays under the documented bound (README "Exposure and limits": at most
//! `admin.limits.max_connections` × ~24 KiB, 6 MiB at the defaults).
//!
//! Alone in its test binary so that the process's RSS is the proxy's.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use isthmus_testkit::{http_get, wait_ready, wait_until};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn rss_kib() -> u64 {
    isthmus_testkit::rss_kib(std::process::id()).unwrap()
}

/// What the issue measured on the old binary: 700 clients with a 380 KB unfinished header
/// took the RSS to 275 MiB. Here half of them send 380 KB, the other half 8 KiB and stall.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_admin_clients_neither_stop_readyz_nor_grow_memory() {
    let f = Fixture::start(&format!("{}listeners: []\n", admin_yaml())).await;
    let admin = f.proxy.admin_addr();
    wait_ready(admin, WAIT).await;
    let before = rss_kib();
    let mut head = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Pad: ".to_vec();
    head.resize(380_000, b'a');
    let big: &'static [u8] = head.leak();
    let (mut big_senders, mut stallers) = (Vec::new(), Vec::new());
    for i in 0..700 {
        let part = if i % 2 == 0 { big } else { &big[..8192] };
        let task = tokio::spawn(async move {
            let mut s = TcpStream::connect(admin).await.unwrap();
            let _ = s.write_all(part).await;
            // Hold the connection until the server closes it.
            let mut buf = [0u8; 1024];
            while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {}
        });
        if i % 2 == 0 {
            big_senders.push(task);
        } else {
            stallers.push(task);
        }
    }
    // A head over max_header_bytes is answered 431 and closed.
    for t in big_senders {
        tokio::time::timeout(WAIT, t).await.unwrap().unwrap();
    }
    // 350 stalled clients hold connections (for header_read_timeout, 10 s) in 256 slots: once
    // all are accepted, at least 94 were evicted.
    wait_until("350 stalled clients accepted", WAIT, || async {
        let text = http_get(admin, "/metrics")
            .await
            .map(|r| r.1)
            .unwrap_or_default();
        metric_value(&text, "isthmus_proxy_admin_evicted_connections_total") >= 94.0
    })
    .await;
    for _ in 0..3 {
        assert_eq!(http_get(admin, "/readyz").await.unwrap().0, 200);
        assert_eq!(http_get(admin, "/healthz").await.unwrap().0, 200);
    }
    let grown = rss_kib().saturating_sub(before);
    eprintln!("RSS grew by {grown} KiB with 700 slow admin clients");
    assert!(grown < 32 * 1024, "RSS grew by {grown} KiB");
    for t in stallers {
        t.abort();
    }
}

/// A client that sends half a request head and stops is closed after `header_read_timeout`.
#[tokio::test]
async fn an_unfinished_request_head_is_closed() {
    let yaml = "admin: { address: \"127.0.0.1:0\", limits: { header_read_timeout: 200ms } }\n\
                drain_delay: 0s\nwatch_interval: 0s\nlisteners: []\n";
    let f = Fixture::start(yaml).await;
    let mut s = TcpStream::connect(f.proxy.admin_addr()).await.unwrap();
    s.write_all(b"GET /readyz HTTP/1.1\r\n").await.unwrap();
    let answer = read_to_close(&mut s).await;
    assert!(
        answer.is_empty() || answer.starts_with(b"HTTP/1.1 408"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
}
