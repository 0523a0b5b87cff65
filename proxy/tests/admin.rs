//! The admin endpoint and the drain sequence.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use isthmus_testkit::{
    client_config, http_get, server_config, tls_connect, wait_draining, wait_ready, TestPki,
    TlsEchoServer,
};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn config_endpoint_reports_the_file_hash_and_effective_config() {
    let yaml = format!("{}listeners: []\n", admin_yaml());
    let f = Fixture::start(&yaml).await;
    let (status, body) = http_get(f.proxy.admin_addr(), "/config").await.unwrap();
    assert_eq!(status, 200);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["hash"], isthmus_config::hash_bytes(yaml.as_bytes()));
    assert_eq!(v["config"]["drain_timeout"], "30s");
    assert_eq!(
        http_get(f.proxy.admin_addr(), "/healthz").await.unwrap().0,
        200
    );
    assert_eq!(
        http_get(f.proxy.admin_addr(), "/readyz").await.unwrap().0,
        200
    );
    assert_eq!(
        http_get(f.proxy.admin_addr(), "/nope").await.unwrap().0,
        404
    );
}

/// Drain: readiness turns false first, listeners close after `drain_delay`, an open
/// connection may finish its exchange, and shutdown returns once it has closed.
#[tokio::test]
async fn shutdown_drains_readiness_then_listeners_then_connections() {
    let pki = TestPki::new();
    let id = pki.server_cert(&["a.example.com"]);
    let up = TlsEchoServer::start("up", server_config(&pki, &id)).await;
    let yaml = format!(
        "admin: {{ address: \"127.0.0.1:0\" }}
watch_interval: 0s
listeners:
  - name: l
    address: \"127.0.0.1:0\"
    routes: [ {{ sni: \"a.example.com\", upstream: u }} ]
upstreams:
  - {{ name: u, endpoints: [\"{}\"] }}
",
        up.addr
    );
    let f = Fixture::start(&yaml).await;
    let addr = f.addr("l").await;
    let mut tls = tls_connect(client_config(&pki), addr, "a.example.com")
        .await
        .unwrap();
    let proxy = f.proxy.clone();
    let drain = tokio::spawn(async move {
        proxy
            .shutdown(Duration::from_millis(200), Duration::from_secs(20))
            .await
    });
    let admin = f.proxy.admin_addr();
    wait_draining(admin, addr, WAIT).await;
    // The established connection still works during the drain.
    tls.write_all(b"late").await.unwrap();
    let mut buf = [0u8; 16];
    let n = tls.read(&mut buf).await.unwrap();
    assert_eq!(&buf[..n], b"up:late");
    assert!(
        !drain.is_finished(),
        "shutdown must wait for the open connection"
    );
    tls.shutdown().await.unwrap();
    drop(tls);
    let left = tokio::time::timeout(WAIT, drain).await.unwrap().unwrap();
    assert_eq!(left, 0);
}

/// Issue 47, point 1: the admin socket is bound without `SO_REUSEPORT`, so no listener (nor
/// any other process) can join its port and take a share of the kubelet's probes: a second
/// `SO_REUSEPORT` socket on the admin address, as a listener would bind it, is refused.
#[tokio::test]
async fn nothing_can_join_the_admin_port() {
    let f = Fixture::start(&format!("{}listeners: []\n", admin_yaml())).await;
    let admin = f.proxy.admin_addr();
    let socket = socket2::Socket::new(
        socket2::Domain::IPV4,
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )
    .unwrap();
    socket.set_reuse_address(true).unwrap();
    socket.set_reuse_port(true).unwrap();
    let joined = socket.bind(&admin.into()).and_then(|()| socket.listen(16));
    let e = joined.expect_err("a listener joined the admin port");
    assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse, "{e}");
    assert_eq!(http_get(admin, "/readyz").await.unwrap().0, 200);
}

/// A proxy restarted in place (same network namespace, as `isthmus-lab` restarts a seed's
/// proxy) finds its draining predecessor on the admin port: it does not give up, it takes the
/// port once the predecessor lets go; one that never lets go fails the start with the address.
#[tokio::test]
async fn a_successor_takes_the_admin_port_when_its_predecessor_lets_go() {
    let dir = isthmus_testkit::Scratch::new("admin-successor");
    let file = |admin: std::net::SocketAddr| {
        let path = dir.join(&format!("proxy-{}.yaml", admin.port()));
        std::fs::write(
            &path,
            format!(
                "admin: {{ address: \"{admin}\" }}\ndrain_delay: 0s\ndrain_timeout: 1s\n\
                 watch_interval: 0s\nlisteners: []\n"
            ),
        )
        .unwrap();
        path
    };
    // The predecessor's admin socket.
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let admin = holder.local_addr().unwrap();
    let path = file(admin);
    let start = tokio::spawn(async move {
        isthmus_proxy::Proxy::start(&path, prometheus_client::registry::Registry::default()).await
    });
    // Before the fix the first poll of the start returned the bind error.
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
    if start.is_finished() {
        panic!(
            "the successor gave up at once: {:?}",
            start.await.unwrap().err()
        );
    }
    drop(holder);
    let proxy = start.await.unwrap().unwrap();
    assert_eq!(proxy.admin_addr(), admin);
    wait_ready(admin, WAIT).await;
    proxy.shutdown(Duration::ZERO, Duration::ZERO).await;

    // A holder that never lets go: the start fails after the predecessor's longest drain.
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let admin = holder.local_addr().unwrap();
    let path = file(admin);
    let e = isthmus_proxy::Proxy::start(&path, prometheus_client::registry::Registry::default())
        .await
        .expect_err("started without its admin port");
    assert!(e.to_string().contains(&admin.to_string()), "{e}");
    drop(holder);
}
