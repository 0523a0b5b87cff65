//! Allow-lists per route, end to end (issue 25 point 5): three shoots' `EtcdMigration`s on one
//! seed, their routes planned by the controller's planner and rendered by its `render_claims`,
//! served by the real proxy. Shoot A lists its peer seed (127.0.0.2), shoot B its own
//! (127.0.0.3), shoot C nothing. Every member index shares one listener across the shoots.
//! A's peer seed must not reach B's members (the old union per listener let it), and C must
//! not open anything to anyone. Sources are loopback addresses (Linux routes 127/8 locally).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use isthmus_controller::crd::{EtcdMigrationSpec, PortScheme};
use isthmus_controller::plan::routes;
use isthmus_controller::proxy_config::{render_claims, Claim, Layout};
use isthmus_testkit::{
    client_config, http_get, metric, server_config, tls_connect_from, Scratch, TestPki,
    TlsEchoServer,
};
use std::net::{IpAddr, SocketAddr};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn spec(ns: &str, allowed: &[&str]) -> EtcdMigrationSpec {
    serde_json::from_value(serde_json::json!({
        "role": "source", "step": "Expose", "etcdName": "etcd-main", "seedName": "seed-a",
        "internalDomain": "internal.example.com",
        "dns": {"type": "aws-route53", "secretRef": {"name": "dns", "namespace": ns}},
        "loadBalancer": {"name": "isthmus-proxy", "namespace": "isthmus-system"},
        "allowedSources": allowed,
    }))
    .unwrap()
}

fn member(ns: &str, i: u8) -> String {
    format!("etcd-main-{i}.{ns}.seed-a.internal.example.com")
}

/// Whether a TLS client from `from` gets through `addr` to the upstream named `label`.
async fn reaches(pki: &TestPki, from: &str, addr: SocketAddr, sni: &str, label: &str) -> bool {
    let from: IpAddr = from.parse().unwrap();
    let Ok(mut tls) = tls_connect_from(client_config(pki), from, addr, sni).await else {
        return false;
    };
    let mut buf = [0u8; 32];
    tls.write_all(b"x").await.is_ok()
        && matches!(tls.read(&mut buf).await, Ok(n) if buf[..n] == *format!("{label}:x").as_bytes())
}

#[tokio::test]
async fn a_shoots_peer_seed_reaches_only_that_shoots_members() {
    let pki = TestPki::new();
    let shoots = [
        ("shoot--a", vec!["127.0.0.2"]),
        ("shoot--b", vec!["127.0.0.3/32"]),
        ("shoot--c", vec![]),
    ];
    let mut claims = Vec::new();
    let mut upstreams = Vec::new();
    for (ns, allowed) in &shoots {
        let names: Vec<String> = (0..3).map(|i| member(ns, i)).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let up = TlsEchoServer::start(ns, server_config(&pki, &pki.server_cert(&names))).await;
        let mut r = routes(&spec(ns, allowed), ns, false);
        for route in &mut r {
            route.endpoint = up.addr.to_string();
        }
        claims.push(Claim {
            owner: format!("{ns}/etcd-main"),
            routes: r,
        });
        upstreams.push(up);
    }
    let layout = Layout::standard(
        PortScheme::default(),
        3,
        8443,
        SocketAddr::from(([127, 0, 0, 1], 0)),
    );
    let outcome = render_claims(&layout, &claims).unwrap();
    assert!(outcome.left_out.is_empty(), "{:?}", outcome.left_out);
    // The controller's file as rendered, with the listeners on free loopback ports.
    let mut config: serde_json::Value = serde_json::from_str(&outcome.rendered.text).unwrap();
    for l in config["listeners"].as_array_mut().unwrap() {
        l["address"] = "127.0.0.1:0".into();
    }
    config["watch_interval"] = "0s".into();
    let dir = Scratch::new("allow-lists");
    let path = dir.join("proxy.json");
    std::fs::write(&path, config.to_string()).unwrap();
    let proxy = isthmus_proxy::Proxy::start(&path, Default::default())
        .await
        .unwrap();
    let peer0 = proxy.listener_addr("peer-2380").await.unwrap();
    let client1 = proxy.listener_addr("client-2378").await.unwrap();

    for addr in [peer0, client1] {
        let i = if addr == peer0 { 0 } else { 1 };
        // A's peer seed: A's members only.
        assert!(reaches(&pki, "127.0.0.2", addr, &member("shoot--a", i), "shoot--a").await);
        assert!(!reaches(&pki, "127.0.0.2", addr, &member("shoot--b", i), "shoot--b").await);
        assert!(!reaches(&pki, "127.0.0.2", addr, &member("shoot--c", i), "shoot--c").await);
        // B's peer seed: B's members only.
        assert!(reaches(&pki, "127.0.0.3", addr, &member("shoot--b", i), "shoot--b").await);
        assert!(!reaches(&pki, "127.0.0.3", addr, &member("shoot--a", i), "shoot--a").await);
        // C lists nothing: nobody reaches it, and it opens nothing for a stranger.
        for name in ["shoot--a", "shoot--b", "shoot--c"] {
            assert!(!reaches(&pki, "127.0.0.9", addr, &member(name, i), name).await);
        }
    }
    let (_, body) = http_get(proxy.admin_addr(), "/metrics").await.unwrap();
    let refused = |reason: &str| {
        metric(
            &body,
            &format!(
                "isthmus_proxy_hello_rejections_total{{listener=\"peer-2380\",reason=\"{reason}\"}}"
            ),
        )
    };
    // Picked the route, then refused by its list: A->B, A->C, B->A; strangers never got that
    // far (not in the listener's union of A's and B's sources).
    assert_eq!(refused("route_source_not_allowed"), 3.0);
    assert_eq!(refused("source_not_allowed"), 3.0);
    assert_eq!(
        metric(&body, "isthmus_proxy_open_routes{listener=\"peer-2380\"}"),
        0.0
    );
}

/// The rendered per-source cap (issue 25 point 7): one source holding idle spliced
/// connections cannot take every connection of the proxy. Before the controller rendered a
/// cap, one source opening `max_connections` idle connections left another 0 of 30.
#[tokio::test]
async fn one_source_cannot_take_every_connection() {
    use isthmus_controller::proxy_config::connections_per_source;
    let pki = TestPki::new();
    let ns = "shoot--a";
    let names: Vec<String> = (0..3).map(|i| member(ns, i)).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let up = TlsEchoServer::start(ns, server_config(&pki, &pki.server_cert(&names))).await;
    let mut r = routes(&spec(ns, &["127.0.0.0/8"]), ns, false);
    for route in &mut r {
        route.endpoint = up.addr.to_string();
    }
    let claims = [Claim {
        owner: format!("{ns}/etcd-main"),
        routes: r,
    }];
    let layout = Layout::standard(
        PortScheme::default(),
        3,
        8443,
        SocketAddr::from(([127, 0, 0, 1], 0)),
    );
    let outcome = render_claims(&layout, &claims).unwrap();
    let mut config: serde_json::Value = serde_json::from_str(&outcome.rendered.text).unwrap();
    for l in config["listeners"].as_array_mut().unwrap() {
        l["address"] = "127.0.0.1:0".into();
    }
    // The whole proxy's cap, small for the test: the rendered per-source cap is below it.
    let cap = connections_per_source(1);
    config["max_connections"] = (cap + 44).into();
    let dir = Scratch::new("per-source");
    let path = dir.join("proxy.json");
    std::fs::write(&path, config.to_string()).unwrap();
    let proxy = isthmus_proxy::Proxy::start(&path, Default::default())
        .await
        .unwrap();
    let addr = proxy.listener_addr("peer-2380").await.unwrap();
    let sni = member(ns, 0);
    let mut held = Vec::new();
    for _ in 0..cap + 44 {
        let from: IpAddr = "127.0.0.2".parse().unwrap();
        if let Ok(mut tls) = tls_connect_from(client_config(&pki), from, addr, &sni).await {
            let mut buf = [0u8; 16];
            if tls.write_all(b"x").await.is_ok() && tls.read(&mut buf).await.is_ok_and(|n| n > 0) {
                held.push(tls);
            }
        }
    }
    assert_eq!(held.len(), cap, "the first source gets its share, no more");
    let mut other = 0;
    for _ in 0..30 {
        other += usize::from(reaches(&pki, "127.0.0.3", addr, &sni, ns).await);
    }
    assert_eq!(other, 30, "another source still gets through");
    drop(held);
}
