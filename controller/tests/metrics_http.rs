//! The controller's `/metrics` and `/healthz` endpoint on a real socket.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test]: a panic is a failure

use isthmus_controller::kube_adapter::{serve_metrics, FailureLabels, Metrics};
use prometheus_client::registry::Registry;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn get(addr: std::net::SocketAddr, path: &str) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

#[tokio::test]
async fn serves_metrics_and_health() {
    let mut registry = Registry::default();
    let metrics = Metrics::new(&mut registry);
    metrics.leader.set(1);
    metrics
        .failures
        .get_or_create(&FailureLabels {
            reason: "conflict".into(),
        })
        .inc();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve_metrics(listener, Arc::new(registry)));

    let m = get(addr, "/metrics").await;
    assert!(m.starts_with("HTTP/1.1 200"), "{m}");
    assert!(m.contains("isthmus_controller_leader 1"), "{m}");
    assert!(
        m.contains(r#"isthmus_controller_failures_total{reason="conflict"} 1"#),
        "{m}"
    );
    assert!(get(addr, "/healthz").await.starts_with("HTTP/1.1 200"));
    assert!(get(addr, "/nope").await.starts_with("HTTP/1.1 404"));
}

/// Slow clients that never finish their request head (more than the connection cap) neither
/// keep `/healthz` from answering nor get an oversized head accepted.
#[tokio::test]
async fn slow_clients_cannot_hold_the_endpoint() {
    use isthmus_controller::kube_adapter::serve_metrics_with;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let limits = isthmus_config::HttpLimits {
        max_connections: 8,
        ..isthmus_config::HttpLimits::default()
    };
    tokio::spawn(serve_metrics_with(
        listener,
        Arc::new(Registry::default()),
        limits,
    ));
    let mut slow = Vec::new();
    for _ in 0..32 {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\n")
            .await
            .unwrap();
        slow.push(s);
    }
    assert!(get(addr, "/healthz").await.starts_with("HTTP/1.1 200"));
    let mut big = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!("GET / HTTP/1.1\r\nx: {}\r\n\r\n", "a".repeat(64 * 1024));
    let _ = big.write_all(head.as_bytes()).await;
    let mut out = Vec::new();
    let _ = big.read_to_end(&mut out).await;
    assert!(
        out.is_empty() || String::from_utf8_lossy(&out).starts_with("HTTP/1.1 431"),
        "{}",
        String::from_utf8_lossy(&out)
    );
}
