//! The `http_connect` listener: Gardener's VPN ingress path (`X-Gardener-Destination`, legacy
//! `Reversed-VPN`), routed by header value, `200` only once the upstream is connected.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const DEST: &str = "outbound|1194||vpn-seed-server-0.shoot--foo--bar.svc.cluster.local";

async fn fixture(
    header: &str,
    upstreams: &[(&str, SocketAddr)],
    routes: &[(&str, &str)],
) -> Fixture {
    let mut yaml = format!(
        "{}listeners:
  - name: vpn
    address: \"127.0.0.1:0\"
    kind: http_connect
    route_header: {header}
    routes:
",
        admin_yaml()
    );
    for (value, up) in routes {
        yaml += &format!("      - {{ header_value: \"{value}\", upstream: {up} }}\n");
    }
    yaml += "upstreams:\n";
    for (name, addr) in upstreams {
        yaml += &format!("  - {{ name: {name}, endpoints: [\"{addr}\"] }}\n");
    }
    Fixture::start(&yaml).await
}

/// Sends a request head (plus `extra` bytes pipelined after it) and returns the response
/// head and the open stream.
async fn request(f: &Fixture, head: &str, extra: &[u8]) -> (String, TcpStream) {
    let mut s = TcpStream::connect(f.addr("vpn").await).await.unwrap();
    let mut bytes = head.as_bytes().to_vec();
    bytes.extend_from_slice(extra);
    s.write_all(&bytes).await.unwrap();
    let mut got = Vec::new();
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        let mut b = [0u8; 1];
        match tokio::time::timeout(WAIT, s.read(&mut b)).await.unwrap() {
            Ok(1) => got.push(b[0]),
            _ => break,
        }
    }
    (String::from_utf8_lossy(&got).into_owned(), s)
}

fn connect_head(header: &str, value: &str) -> String {
    format!("CONNECT 10.0.0.1:1194 HTTP/1.1\r\nHost: 10.0.0.1:1194\r\n{header}: {value}\r\n\r\n")
}

#[tokio::test]
async fn the_gardener_header_picks_the_upstream_and_pipelined_bytes_follow() {
    let (vpn0, vpn1) = (
        RawUpstream::start("vpn-0").await,
        RawUpstream::start("vpn-1").await,
    );
    let f = fixture(
        "X-Gardener-Destination",
        &[("vpn-0", vpn0.addr), ("vpn-1", vpn1.addr)],
        &[
            (DEST, "vpn-0"),
            (
                "outbound|1194||vpn-seed-server-*.shoot--foo--bar.svc.cluster.local",
                "vpn-1",
            ),
        ],
    )
    .await;
    let (head, mut s) = request(&f, &connect_head("x-gardener-destination", DEST), b"early").await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf).await.unwrap();
    assert_eq!(
        &buf[..n],
        b"vpn-0:early",
        "bytes after the head reach the upstream unchanged"
    );
    assert_eq!(
        vpn0.bytes(0),
        b"early",
        "the CONNECT head itself is not forwarded"
    );

    let other = DEST.replace("server-0", "server-1");
    let (head, _s) = request(&f, &connect_head("X-Gardener-Destination", &other), b"").await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    isthmus_testkit::wait_until("pattern route reached vpn-1", WAIT, || async {
        vpn1.connections() == 1
    })
    .await;
}

#[tokio::test]
async fn refusals_answer_4xx_or_5xx_and_never_splice() {
    let vpn0 = RawUpstream::start("vpn-0").await;
    // Bound and never listening: connections are refused, and no other process can take
    // the port meanwhile (as a port merely freed could be).
    let dead_socket = tokio::net::TcpSocket::new_v4().unwrap();
    dead_socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let dead = dead_socket.local_addr().unwrap();
    let f = fixture(
        "Reversed-VPN",
        &[("vpn-0", vpn0.addr), ("gone", dead)],
        &[(DEST, "vpn-0"), ("outbound|1194||down", "gone")],
    )
    .await;
    let cases = [
        (
            connect_head("Reversed-VPN", "outbound|1194||unknown"),
            "HTTP/1.1 404",
            "unknown_header_value",
        ),
        (
            "CONNECT 10.0.0.1:1194 HTTP/1.1\r\nHost: x\r\n\r\n".to_string(),
            "HTTP/1.1 400",
            "missing_route_header",
        ),
        (
            "GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_string(),
            "HTTP/1.1 405",
            "not_connect",
        ),
        ("CONNECT\r\n\r\n".to_string(), "HTTP/1.1 400", "malformed"),
    ];
    for (req, status, reason) in cases {
        let (head, mut s) = request(&f, &req, b"").await;
        assert!(head.starts_with(status), "{req:?} -> {head}");
        assert_eq!(read_to_close(&mut s).await, b"");
        f.wait_metric(
            &format!(
                "isthmus_proxy_hello_rejections_total{{listener=\"vpn\",reason=\"{reason}\"}}"
            ),
            1.0,
        )
        .await;
    }
    let (head, _) = request(
        &f,
        &connect_head("Reversed-VPN", "outbound|1194||down"),
        b"",
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 503"), "{head}");
    let (head, _) = request(
        &f,
        &format!(
            "CONNECT a:1 HTTP/1.1\r\nX-Pad: {}\r\n\r\n",
            "a".repeat(9000)
        ),
        b"",
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 431"), "{head}");
    assert_eq!(vpn0.connections(), 0);
}

#[tokio::test]
async fn a_slow_request_gets_408() {
    let vpn0 = RawUpstream::start("vpn-0").await;
    let yaml = format!(
        "{}listeners:
  - name: vpn
    address: \"127.0.0.1:0\"
    kind: http_connect
    route_header: X-Gardener-Destination
    client_hello_timeout: 200ms
    routes: [ {{ header_value: \"{DEST}\", upstream: vpn-0 }} ]
upstreams:
  - {{ name: vpn-0, endpoints: [\"{}\"] }}
",
        admin_yaml(),
        vpn0.addr
    );
    let f = Fixture::start(&yaml).await;
    let (head, _) = request(&f, "CONNECT 10.0.0.1:1194 HTTP/1.1\r\n", b"").await;
    assert!(head.starts_with("HTTP/1.1 408"), "{head}");
    assert_eq!(vpn0.connections(), 0);
}
