//! The tunnel server's probes against the real binary (tunnel/README.md, *Probes*): `/healthz`
//! answers from start to exit, the drain after SIGTERM included (a liveness probe must not
//! fail while open streams finish); `/readyz` says whether an agent session takes streams.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)]
#[path = "monitoring/tunnel.rs"]
mod tunnel;

use isthmus_testkit::{http_get, wait_until};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_answers_through_the_drain() {
    let mut t = tunnel::Tunnel::start().await;
    assert_eq!(http_get(t.server_admin, "/healthz").await.unwrap().0, 200);
    assert_eq!(http_get(t.server_admin, "/readyz").await.unwrap().0, 200);
    let mut stream = tunnel::traffic(&t, tunnel::echo().await).await;

    t.server.signal("TERM");
    // The CONNECT front is closed once the drain has begun.
    let front = t.connect;
    wait_until(
        "the drain has begun",
        Duration::from_secs(30),
        || async move { TcpStream::connect(front).await.is_err() },
    )
    .await;
    let healthz = http_get(t.server_admin, "/healthz").await;
    assert_eq!(healthz.expect("the admin endpoint during the drain").0, 200);
    // No session takes new streams while the server drains.
    assert_eq!(http_get(t.server_admin, "/readyz").await.unwrap().0, 503);
    // The open stream still carries bytes; once it ends the server exits.
    stream.write_all(b"x").await.unwrap();
    let mut b = [0u8; 1];
    stream.read_exact(&mut b).await.unwrap();
    drop(stream);
    let status = t.server.exit_status(Duration::from_secs(30)).await;
    assert!(status.success(), "{status:?}");
}
