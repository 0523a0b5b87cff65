//! Admin clients that ask for the big answers and never read them, tried as an attacker would
//! (issue 25 point 2): with 1,400 routes `/metrics` and `/config` are megabytes, and each
//! such client used to hold its own copy in the process plus megabytes of kernel socket
//! buffers until the proxy was OOM-killed. `/readyz` must answer, the process's memory and the
//! admin sockets' send queues must stay bounded, and the clients must be closed once they
//! have not read for `write_timeout`.
//!
//! Alone in its test binary so that the process's RSS is the proxy's.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use isthmus_testkit::{http_get, wait_ready, wait_until};
use std::net::SocketAddr;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const ROUTES: usize = 1400;
const CLIENTS: usize = 256;

fn rss_kib() -> u64 {
    isthmus_testkit::rss_kib(std::process::id()).unwrap()
}

/// One listener with `ROUTES` routes, each to its own upstream (as etcd members are): every
/// route and upstream has its series in `/metrics`.
fn config() -> String {
    let mut s = String::from(
        "admin: { address: \"127.0.0.1:0\", limits: { write_timeout: 3s } }\n\
         drain_delay: 0s\nwatch_interval: 0s\nlisteners:\n  - name: l\n    \
         address: \"127.0.0.1:0\"\n    routes:\n",
    );
    for i in 0..ROUTES {
        s += &format!("      - {{ sni: \"etcd-main-{i}.shoot.example.com\", upstream: u{i} }}\n");
    }
    s += "upstreams:\n";
    for i in 0..ROUTES {
        s += &format!(
            "  - {{ name: u{i}, endpoints: [\"127.0.0.1:{}\"] }}\n",
            10_000 + i
        );
    }
    s
}

/// Bytes queued in the kernel for the admin endpoint's own sockets (`ss`'s `wmem_queued`),
/// and how many of them are established.
fn admin_send_queues(admin: SocketAddr) -> (u64, usize) {
    let out = std::process::Command::new("ss")
        .args(["-tmnH", "state", "established"])
        .arg(format!("( sport = :{} )", admin.port()))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let queued = text
        .split("skmem:(")
        .skip(1)
        .filter_map(|m| m.split(',').find_map(|f| f.strip_prefix('w')))
        .filter_map(|w| w.trim_end_matches(')').parse::<u64>().ok())
        .sum();
    let sockets = text.matches("skmem:(").count();
    (queued, sockets)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_never_read_neither_stop_readyz_nor_grow_memory() {
    let f = Fixture::start(&config()).await;
    let admin = f.proxy.admin_addr();
    wait_ready(admin, WAIT).await;
    let metrics_len = http_get(admin, "/metrics").await.unwrap().1.len();
    let config_len = http_get(admin, "/config").await.unwrap().1.len();
    let before = rss_kib();
    // Half ask for /metrics, half for /config; none reads a byte.
    let mut clients = Vec::new();
    for i in 0..CLIENTS {
        let path = if i % 2 == 0 { "/metrics" } else { "/config" };
        let mut s = TcpStream::connect(admin).await.unwrap();
        let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        clients.push(s);
    }
    // Every answer has started to arrive: each was encoded and is being written.
    for s in &clients {
        let mut b = [0u8; 1];
        tokio::time::timeout(WAIT, s.peek(&mut b))
            .await
            .unwrap()
            .unwrap();
    }
    let grown = rss_kib().saturating_sub(before);
    let (queued, sockets) = admin_send_queues(admin);
    for _ in 0..3 {
        assert_eq!(http_get(admin, "/readyz").await.unwrap().0, 200);
    }
    println!(
        "{ROUTES} routes (/metrics {metrics_len} B, /config {config_len} B), {CLIENTS} clients \
         not reading: RSS grew by {grown} KiB; {sockets} admin sockets hold {} KiB in their send \
         queues",
        queued / 1024
    );
    assert!(metrics_len > 1 << 20, "the test needs a big /metrics");
    assert!(grown < 48 * 1024, "RSS grew by {grown} KiB");
    assert!(
        queued < 32 << 20,
        "{} KiB queued for {sockets} admin sockets",
        queued / 1024
    );
    // Clients that do not read are closed after write_timeout (3 s here).
    wait_until("the non-reading clients are closed", WAIT, || async {
        admin_send_queues(admin).1 == 0
    })
    .await;
    drop(clients);
}
