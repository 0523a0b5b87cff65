//! Thread-per-core serving (`isthmus proxy --runtime per-core`): every listener has one
//! `SO_REUSEPORT` socket per worker runtime, each runtime accepts and serves its own
//! connections, and reload, drain and the connection cap work across all of them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use isthmus_proxy::{ConnectionThreads, Proxy};
use isthmus_testkit::{
    client_config, server_config, tls_connect, wait_until, Scratch, TestPki, TlsEchoServer,
};
use prometheus_client::registry::Registry;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::runtime::Handle;

/// `n` current-thread runtimes on their own threads, as the CLI starts them.
fn workers(n: usize) -> Vec<Handle> {
    (0..n)
        .map(|_| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let handle = rt.handle().clone();
            std::thread::spawn(move || rt.block_on(std::future::pending::<()>()));
            handle
        })
        .collect()
}

async fn ping<S: AsyncReadExt + AsyncWriteExt + Unpin>(tls: &mut S) -> String {
    tls.write_all(b"ping").await.unwrap();
    let mut buf = [0u8; 64];
    let n = tls.read(&mut buf).await.unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[tokio::test]
async fn per_core_workers_route_reload_and_drain() {
    let pki = TestPki::new();
    let id = pki.server_cert(&["a.example.com", "b.example.com"]);
    let up = TlsEchoServer::start("up", server_config(&pki, &id)).await;
    let yaml = |routes: &str| {
        format!(
            "{}listeners:\n  - name: l\n    address: \"127.0.0.1:0\"\n    routes: [ {routes} ]\n\
             upstreams:\n  - {{ name: u, endpoints: [\"{}\"] }}\n",
            admin_yaml(),
            up.addr
        )
    };
    let dir = Scratch::new("per-core");
    let path = dir.join("proxy.yaml");
    std::fs::write(&path, yaml("{ sni: a.example.com, upstream: u }")).unwrap();
    let threads = ConnectionThreads {
        runtimes: workers(2),
        ..ConnectionThreads::default()
    };
    let proxy = Proxy::start_on(&path, Registry::default(), threads)
        .await
        .unwrap();
    let addr = proxy.listener_addr("l").await.unwrap();
    // Enough connections that the kernel hands some to each worker's socket.
    let mut open = Vec::new();
    for _ in 0..16 {
        let mut tls = tls_connect(client_config(&pki), addr, "a.example.com")
            .await
            .unwrap();
        assert_eq!(ping(&mut tls).await, "up:ping");
        open.push(tls);
    }
    std::fs::write(
        &path,
        yaml("{ sni: a.example.com, upstream: u }, { sni: b.example.com, upstream: u }"),
    )
    .unwrap();
    proxy.reload().await.unwrap();
    let mut b = tls_connect(client_config(&pki), addr, "b.example.com")
        .await
        .unwrap();
    assert_eq!(ping(&mut b).await, "up:ping");
    drop(b);
    // Connections opened before the reload, on either worker, are untouched by it.
    for tls in &mut open {
        assert_eq!(ping(tls).await, "up:ping");
    }
    wait_until("16 connections open", WAIT, || async {
        proxy.open_connections() == 16
    })
    .await;
    drop(open);
    assert_eq!(proxy.shutdown(Duration::ZERO, WAIT).await, 0);
}
