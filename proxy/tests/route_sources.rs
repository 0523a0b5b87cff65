//! Allow-lists per route (issue 25 point 5): checked once the SNI (or header value) picked the
//! route, so two shoots sharing a listener do not share their peers; a route without a list
//! follows `routes_without_allowed_sources`; a refused source is answered as for an unknown
//! name; open routes are counted per listener. Sources are loopback addresses.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use isthmus_testkit::TestPki;

const A: &str = "a.example.com";
const B: &str = "b.example.com";
/// The TLS alert `unrecognized_name`, as for an SNI no route matches.
const UNRECOGNIZED_NAME: [u8; 7] = [21, 3, 3, 0, 2, 2, 112];

fn config(up: &RawUpstream, unlisted: &str, b_sources: &str) -> String {
    format!(
        "{}routes_without_allowed_sources: {unlisted}
listeners:
  - name: l
    address: \"127.0.0.1:0\"
    routes:
      - {{ sni: \"{A}\", upstream: u, allowed_sources: [\"127.0.0.2\"] }}
      - {{ sni: \"{B}\", upstream: u{b_sources} }}
  - name: vpn
    address: \"127.0.0.1:0\"
    kind: http_connect
    route_header: X-Dest
    routes:
      - {{ header_value: v, upstream: u, allowed_sources: [\"127.0.0.2\"] }}
upstreams:
  - {{ name: u, endpoints: [\"{}\"] }}
",
        admin_yaml(),
        up.addr
    )
}

async fn answer(f: &Fixture, listener: &str, from: &str, bytes: &[u8]) -> Vec<u8> {
    try_route(from, f.addr(listener).await, bytes).await.1
}

fn rejected(reason: &str) -> String {
    format!("isthmus_proxy_hello_rejections_total{{listener=\"l\",reason=\"{reason}\"}}")
}

#[tokio::test]
async fn a_route_admits_only_its_sources_and_the_rest_follows_the_seed_default() {
    let pki = TestPki::new();
    let up = RawUpstream::start("u").await;
    let (hello_a, hello_b) = (capture_hello(&pki, A).await, capture_hello(&pki, B).await);
    let f = Fixture::start(&config(&up, "deny", "")).await;
    // A's peer reaches A; nobody reaches B, which lists no source under `deny`.
    assert!(answer(&f, "l", "127.0.0.2", &hello_a)
        .await
        .starts_with(b"u:"));
    assert_eq!(
        answer(&f, "l", "127.0.0.3", &hello_a).await,
        UNRECOGNIZED_NAME
    );
    assert_eq!(
        answer(&f, "l", "127.0.0.2", &hello_b).await,
        UNRECOGNIZED_NAME
    );
    assert_eq!(
        answer(&f, "l", "127.0.0.3", &hello_b).await,
        UNRECOGNIZED_NAME
    );
    f.wait_metric(&rejected("route_source_not_allowed"), 3.0)
        .await;
    assert_eq!(
        f.metric("isthmus_proxy_open_routes{listener=\"l\"}").await,
        0.0
    );

    // `allow`: B is open to any source, A still only to its own.
    f.write(&config(&up, "allow", ""));
    f.proxy.reload().await.unwrap();
    assert!(answer(&f, "l", "127.0.0.3", &hello_b)
        .await
        .starts_with(b"u:"));
    assert_eq!(
        answer(&f, "l", "127.0.0.3", &hello_a).await,
        UNRECOGNIZED_NAME
    );
    assert_eq!(
        f.metric("isthmus_proxy_open_routes{listener=\"l\"}").await,
        1.0
    );

    // Listing 0.0.0.0/0 opens a route as much as listing nothing under `allow`.
    f.write(&config(&up, "deny", ", allowed_sources: [\"0.0.0.0/0\"]"));
    f.proxy.reload().await.unwrap();
    assert!(answer(&f, "l", "127.0.0.4", &hello_b)
        .await
        .starts_with(b"u:"));
    assert_eq!(
        f.metric("isthmus_proxy_open_routes{listener=\"l\"}").await,
        1.0
    );
    assert_eq!(
        f.metric("isthmus_proxy_open_routes{listener=\"vpn\"}")
            .await,
        0.0
    );
}

#[tokio::test]
async fn an_http_connect_route_refuses_like_an_unknown_header_value() {
    let up = RawUpstream::start("u").await;
    let f = Fixture::start(&config(&up, "deny", "")).await;
    let request = b"CONNECT t:1 HTTP/1.1\r\nHost: t:1\r\nX-Dest: v\r\n\r\n";
    let refused = answer(&f, "vpn", "127.0.0.3", request).await;
    assert!(refused.starts_with(b"HTTP/1.1 404"), "{refused:?}");
    let ok = answer(&f, "vpn", "127.0.0.2", request).await;
    assert!(ok.starts_with(b"HTTP/1.1 200"), "{ok:?}");
}
