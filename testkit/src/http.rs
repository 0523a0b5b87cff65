//! A minimal HTTP GET for admin endpoints and Prometheus, so tests need no HTTP client crate.

use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// GETs `path` with `Connection: close`; returns the status code and the body.
pub async fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    exchange(addr, &req).await
}

/// Waits until a starting proxy is ready: its admin endpoint's `/readyz` answers 200, which it
/// does only once its warm-up task has run (proxy `server/start.rs` `warm_up`; a CI run at load
/// asked before that and got 503); panics after `timeout`.
pub async fn wait_ready(admin: SocketAddr, timeout: Duration) {
    crate::wait_until("readyz 200", timeout, || async {
        http_get(admin, "/readyz").await.ok().map(|r| r.0) == Some(200)
    })
    .await;
}

/// Waits until a draining proxy says so: its admin endpoint's `/readyz` answers 503 and its
/// `listener` no longer accepts; panics after `timeout`.
pub async fn wait_draining(admin: SocketAddr, listener: SocketAddr, timeout: Duration) {
    crate::wait_until("readyz 503", timeout, || async {
        http_get(admin, "/readyz").await.ok().map(|r| r.0) == Some(503)
    })
    .await;
    crate::wait_until("listener closed", timeout, || async {
        TcpStream::connect(listener).await.is_err()
    })
    .await;
}

/// Sends one request, reads until the server closes; the status code and the body (the
/// request must make the answer unchunked: `Connection: close` for servers that then send a
/// length, HTTP/1.0 for those that would chunk anyway).
pub(crate) async fn exchange(addr: SocketAddr, req: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(addr).await?;
    s.write_all(req.as_bytes()).await?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Ok((status, body.to_owned()))
}
