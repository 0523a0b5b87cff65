//! Every reason a connection is refused before routing: counted by reason, never forwarded.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use isthmus_testkit::TestPki;
use std::time::Duration;

async fn fixture(up: &RawUpstream, extra: &str) -> Fixture {
    let yaml = format!(
        "{}listeners:
  - name: l
    address: \"127.0.0.1:0\"
    client_hello_timeout: 300ms
    max_client_hello_bytes: 4096
{extra}    routes: [ {{ sni: \"known.example.com\", upstream: u }} ]
upstreams:
  - {{ name: u, endpoints: [\"{}\"] }}
",
        admin_yaml(),
        up.addr
    );
    Fixture::start(&yaml).await
}

fn series(reason: &str) -> String {
    format!("isthmus_proxy_hello_rejections_total{{listener=\"l\",reason=\"{reason}\"}}")
}

/// Sends `bytes`, expects the proxy to close, returns what it answered.
async fn rejected(f: &Fixture, bytes: &[u8], half_close: bool) -> Vec<u8> {
    let (_, mut s) = send_raw(f.addr("l").await, bytes, bytes.len().max(1)).await;
    if half_close {
        tokio::io::AsyncWriteExt::shutdown(&mut s).await.unwrap();
    }
    read_to_close(&mut s).await
}

#[tokio::test]
async fn each_rejection_reason_is_counted_alerted_and_never_forwarded() {
    let pki = TestPki::new();
    let up = RawUpstream::start("u").await;
    let f = fixture(&up, "").await;
    let unrecognized_name = vec![21, 3, 3, 0, 2, 2, 112];
    let decode_error = vec![21, 3, 3, 0, 2, 2, 50];

    let unknown = capture_hello(&pki, "unknown.example.com").await;
    assert_eq!(rejected(&f, &unknown, false).await, unrecognized_name);
    f.wait_metric(&series("unknown_sni"), 1.0).await;

    // A ClientHello without SNI: rustls sends none for an IP address.
    let no_sni = capture_hello(&pki, "127.0.0.1").await;
    assert_eq!(rejected(&f, &no_sni, false).await, unrecognized_name);
    f.wait_metric(&series("no_sni"), 1.0).await;

    assert_eq!(
        rejected(
            &f,
            b"GET / HTTP/1.1\r\nHost: known.example.com\r\n\r\n",
            false
        )
        .await,
        b""
    );
    f.wait_metric(&series("not_tls"), 1.0).await;

    let mut broken = capture_hello(&pki, "known.example.com").await;
    broken[5] = 2; // a ServerHello where a ClientHello must be
    assert_eq!(rejected(&f, &broken, false).await, decode_error);
    f.wait_metric(&series("malformed"), 1.0).await;

    // 4 KiB cap: a record announcing 5000 bytes is read up to the cap and refused.
    let mut big = vec![22, 3, 1, 0x13, 0x88, 1, 0, 0x13, 0x84];
    big.resize(4200, 0);
    assert_eq!(rejected(&f, &big, false).await, decode_error);
    f.wait_metric(&series("too_large"), 1.0).await;

    // Half a hello, then silence: the 300 ms hello timeout closes it.
    let known = capture_hello(&pki, "known.example.com").await;
    assert_eq!(rejected(&f, &known[..known.len() / 2], false).await, b"");
    f.wait_metric(&series("timeout"), 1.0).await;

    // Half a hello, then FIN.
    assert_eq!(rejected(&f, &known[..10], true).await, b"");
    f.wait_metric(&series("client_closed"), 1.0).await;

    assert_eq!(
        up.connections(),
        0,
        "a rejected connection must never reach an upstream"
    );
}

#[tokio::test]
async fn alerts_can_be_turned_off() {
    let pki = TestPki::new();
    let up = RawUpstream::start("u").await;
    let f = fixture(&up, "    reject_with_alert: false\n").await;
    let unknown = capture_hello(&pki, "unknown.example.com").await;
    assert_eq!(rejected(&f, &unknown, false).await, b"");
    f.wait_metric(&series("unknown_sni"), 1.0).await;
}

#[tokio::test]
async fn unreachable_upstream_is_counted_and_closed() {
    let pki = TestPki::new();
    // Bound and never listening: connections are refused, and no other process can take
    // the port meanwhile (as a port merely freed could be).
    let dead_socket = tokio::net::TcpSocket::new_v4().unwrap();
    dead_socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let dead = dead_socket.local_addr().unwrap();
    let yaml = format!(
        "{}listeners:
  - name: l
    address: \"127.0.0.1:0\"
    routes: [ {{ sni: \"known.example.com\", upstream: u }} ]
upstreams:
  - {{ name: u, endpoints: [\"{dead}\"] }}
",
        admin_yaml()
    );
    let f = Fixture::start(&yaml).await;
    let known = capture_hello(&pki, "known.example.com").await;
    assert_eq!(rejected(&f, &known, false).await, b"");
    f.wait_metric(
        "isthmus_proxy_connections_total{listener=\"l\",route=\"known.example.com\",upstream=\"u\",outcome=\"upstream_unavailable\"}",
        1.0,
    )
    .await;
    f.wait_metric(
        "isthmus_proxy_upstream_connect_errors_total{upstream=\"u\",reason=\"refused\"}",
        1.0,
    )
    .await;
    let _ = Duration::ZERO;
}
