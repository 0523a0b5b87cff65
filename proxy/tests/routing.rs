//! Routing by SNI with real rustls clients and servers through the proxy.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use isthmus_testkit::{
    client_config, server_config, tls_connect, wait_until, TestPki, TlsEchoServer,
};
use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

async fn roundtrip(pki: &TestPki, addr: std::net::SocketAddr, sni: &str) -> String {
    let mut tls = tls_connect(client_config(pki), addr, sni).await.unwrap();
    tls.write_all(b"ping").await.unwrap();
    let mut buf = vec![0u8; 256];
    let n = tls.read(&mut buf).await.unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[tokio::test]
async fn routes_by_sni_across_listeners_with_wildcard_precedence() {
    let pki = TestPki::new();
    let names = [
        "etcd-0.seed-a.example.com",
        "x.vpn.seed-a.example.com",
        "y.seed-a.example.com",
        "etcd-1.seed-a.example.com",
    ];
    let id = pki.server_cert(&names);
    let (a, b, c, d) = (
        TlsEchoServer::start("exact-0", server_config(&pki, &id)).await,
        TlsEchoServer::start("wild-long", server_config(&pki, &id)).await,
        TlsEchoServer::start("wild-short", server_config(&pki, &id)).await,
        TlsEchoServer::start("exact-1", server_config(&pki, &id)).await,
    );
    let yaml = format!(
        "{}listeners:
  - name: peer-0
    address: \"127.0.0.1:0\"
    routes:
      - {{ sni: \"etcd-0.seed-a.example.com\", upstream: a }}
      - {{ sni: \"*.vpn.seed-a.example.com\", upstream: b }}
      - {{ sni: \"*.seed-a.example.com\", upstream: c }}
  - name: peer-1
    address: \"127.0.0.1:0\"
    routes:
      - {{ sni: \"ETCD-1.seed-a.example.com.\", upstream: d }}
upstreams:
  - {{ name: a, endpoints: [\"{}\"] }}
  - {{ name: b, endpoints: [\"{}\"] }}
  - {{ name: c, endpoints: [\"{}\"] }}
  - {{ name: d, endpoints: [\"{}\"] }}
",
        admin_yaml(),
        a.addr,
        b.addr,
        c.addr,
        d.addr
    );
    let f = Fixture::start(&yaml).await;
    let (p0, p1) = (f.addr("peer-0").await, f.addr("peer-1").await);
    assert_eq!(
        roundtrip(&pki, p0, "etcd-0.seed-a.example.com").await,
        "exact-0:ping"
    );
    assert_eq!(
        roundtrip(&pki, p0, "ETCD-0.Seed-A.example.com").await,
        "exact-0:ping"
    );
    assert_eq!(
        roundtrip(&pki, p0, "x.vpn.seed-a.example.com").await,
        "wild-long:ping"
    );
    assert_eq!(
        roundtrip(&pki, p0, "y.seed-a.example.com").await,
        "wild-short:ping"
    );
    assert_eq!(
        roundtrip(&pki, p1, "etcd-1.seed-a.example.com").await,
        "exact-1:ping"
    );
    // The same name on the other listener has no route there.
    assert!(
        tls_connect(client_config(&pki), p1, "etcd-0.seed-a.example.com")
            .await
            .is_err()
    );
    let m = f.metrics().await;
    assert_eq!(
        metric_value(&m, "isthmus_proxy_connections_total{listener=\"peer-0\",route=\"*.vpn.seed-a.example.com\",upstream=\"b\",outcome=\"forwarded\"}"),
        1.0
    );
    assert_eq!(
        metric_value(&m, "isthmus_proxy_connections_total{listener=\"peer-0\",route=\"etcd-0.seed-a.example.com\",upstream=\"a\",outcome=\"forwarded\"}"),
        2.0
    );
    assert_eq!(
        metric_value(
            &m,
            "isthmus_proxy_hello_rejections_total{listener=\"peer-1\",reason=\"unknown_sni\"}"
        ),
        1.0
    );
}

#[tokio::test]
async fn default_upstream_takes_unknown_and_missing_sni() {
    let up = RawUpstream::start("fallback").await;
    let pki = TestPki::new();
    let yaml = format!(
        "{}listeners:
  - name: l
    address: \"127.0.0.1:0\"
    default_upstream: fb
upstreams:
  - {{ name: fb, endpoints: [\"{}\"] }}
",
        admin_yaml(),
        up.addr
    );
    let f = Fixture::start(&yaml).await;
    let hello = capture_hello(&pki, "nobody.example.com").await;
    let (_, mut s) = send_raw(f.addr("l").await, &hello, hello.len()).await;
    let mut buf = vec![0u8; 9];
    s.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"fallback:");
    isthmus_testkit::wait_until("upstream saw the hello", WAIT, || async {
        up.connections() == 1 && up.bytes(0) == hello
    })
    .await;
}

/// The ClientHello reaches the upstream byte for byte, however the client framed and
/// fragmented it: 1-byte TCP writes, several TLS records, a 2 KB and a 12 KB hello.
#[tokio::test]
async fn fragmented_multi_record_and_large_hellos_are_replayed_unchanged() {
    let pki = TestPki::new();
    let up = RawUpstream::start("u").await;
    let yaml = format!(
        "{}listeners:
  - name: l
    address: \"127.0.0.1:0\"
    routes: [ {{ sni: \"etcd-0.example.com\", upstream: u }} ]
upstreams:
  - {{ name: u, endpoints: [\"{}\"] }}
",
        admin_yaml(),
        up.addr
    );
    let f = Fixture::start(&yaml).await;
    let addr = f.addr("l").await;
    let hello = capture_hello(&pki, "etcd-0.example.com").await;
    let big = pad_hello(&hello, 2048);
    let huge = pad_hello(&hello, 12 * 1024);
    let cases: Vec<(&str, Vec<u8>, usize)> = vec![
        ("one write", hello.clone(), hello.len()),
        ("1-byte writes", hello.clone(), 1),
        ("3 records", reframe(&hello, hello.len() / 3 + 1), 7),
        (
            "many 40-byte records, 1-byte writes",
            reframe(&hello, 40),
            1,
        ),
        ("2 KB hello", big.clone(), 100),
        ("2 KB hello in 2 records", reframe(&big, 1100), big.len()),
        ("12 KB hello", huge.clone(), 1000),
    ];
    for (i, (what, bytes, step)) in cases.iter().enumerate() {
        let mut with_data = bytes.clone();
        with_data.extend_from_slice(b"after-hello");
        let (_, mut s) = send_raw(addr, &with_data, *step).await;
        let expected = with_data.clone();
        isthmus_testkit::wait_until(what, WAIT, || async {
            up.connections() == i + 1 && up.bytes(i) == expected
        })
        .await;
        s.shutdown().await.unwrap();
        read_to_close(&mut s).await;
    }
}

/// Adds a padding extension (type 21) so that the hello has about `extra` more bytes, fixing
/// every length on the way. Stands in for post-quantum key shares of the same size.
fn pad_hello(hello: &[u8], extra: usize) -> Vec<u8> {
    let body = &hello[5..];
    // handshake header (4) + version (2) + random (32)
    let mut at = 4 + 2 + 32;
    at += 1 + usize::from(body[at]); // session id
    at += 2 + usize::from(u16::from_be_bytes([body[at], body[at + 1]])); // cipher suites
    at += 1 + usize::from(body[at]); // compression
    let ext_len = usize::from(u16::from_be_bytes([body[at], body[at + 1]]));
    let mut out_body = body[..at].to_vec();
    out_body.extend_from_slice(&((ext_len + 4 + extra) as u16).to_be_bytes());
    out_body.extend_from_slice(&body[at + 2..at + 2 + ext_len]);
    out_body.extend_from_slice(&[0, 21]);
    out_body.extend_from_slice(&(extra as u16).to_be_bytes());
    out_body.extend(std::iter::repeat_n(0u8, extra));
    let hs_len = out_body.len() - 4;
    out_body[1..4].copy_from_slice(&(hs_len as u32).to_be_bytes()[1..]);
    let mut out = vec![22, hello[1], hello[2]];
    out.extend_from_slice(&(out_body.len() as u16).to_be_bytes());
    out.extend_from_slice(&out_body);
    out
}

/// One side's FIN is passed on while the other direction keeps flowing.
#[tokio::test]
async fn half_close_is_passed_on_and_the_other_direction_keeps_flowing() {
    let pki = TestPki::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up_addr = listener.local_addr().unwrap();
    let yaml = format!(
        "{}listeners:
  - name: l
    address: \"127.0.0.1:0\"
    routes: [ {{ sni: \"h.example.com\", upstream: u }} ]
upstreams:
  - {{ name: u, endpoints: [\"{up_addr}\"] }}
",
        admin_yaml()
    );
    let f = Fixture::start(&yaml).await;
    let hello = capture_hello(&pki, "h.example.com").await;
    let (_, mut client) = send_raw(f.addr("l").await, &hello, hello.len()).await;
    let (mut server, _) = listener.accept().await.unwrap();
    let mut got = vec![0u8; hello.len()];
    server.read_exact(&mut got).await.unwrap();
    // Client sends its last bytes and half-closes.
    client.write_all(b"request").await.unwrap();
    client.shutdown().await.unwrap();
    let rest = read_to_close(&mut server).await;
    assert_eq!(rest, b"request", "upstream must see the data and then EOF");
    // The upstream can still answer after the client's FIN.
    for _ in 0..3 {
        server.write_all(b"response-part").await.unwrap();
    }
    server.shutdown().await.unwrap();
    let answer = read_to_close(&mut client).await;
    assert_eq!(answer, b"response-part".repeat(3));
    isthmus_testkit::wait_until("connection closed on both sides", WAIT, || async {
        f.proxy.open_connections() == 0
    })
    .await;
    assert_eq!(
        f.metric("isthmus_proxy_bytes_total{listener=\"l\",route=\"h.example.com\",upstream=\"u\",direction=\"upstream_to_downstream\"}").await,
        39.0
    );
}

/// Whether a socket of this machine is in SYN_SENT towards `port` on 127.0.0.1.
fn syn_sent_to(port: u16) -> bool {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let remote = format!("0100007F:{port:04X}");
    table.lines().skip(1).any(|l| {
        l.split_whitespace().nth(2) == Some(remote.as_str())
            && l.split_whitespace().nth(3) == Some("02")
    })
}

/// Across a network the upstream's handshake is still in flight when connect(2) returns (on
/// loopback it completes inside the call). Here the upstream's accept queue is full, so the
/// proxy's SYN is dropped and the kernel retransmits it: the proxy waits for the handshake,
/// then replays the hello unchanged and splices as usual.
#[tokio::test]
async fn an_upstream_handshake_still_in_flight_is_waited_for() {
    let pki = TestPki::new();
    // Backlog 0: the accept queue holds one connection; while it is full, SYNs are dropped.
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket
        .bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .unwrap();
    socket.listen(0).unwrap();
    let upstream: std::net::TcpListener = socket.into();
    let up_addr = upstream.local_addr().unwrap();
    let filler = std::net::TcpStream::connect_timeout(&up_addr, WAIT).unwrap();
    let yaml = format!(
        "{}listeners:
  - name: l
    address: \"127.0.0.1:0\"
    routes: [ {{ sni: \"slow.example.com\", upstream: u }} ]
upstreams:
  - {{ name: u, endpoints: [\"{up_addr}\"] }}
",
        admin_yaml()
    );
    let f = Fixture::start(&yaml).await;
    let hello = capture_hello(&pki, "slow.example.com").await;
    let (_, mut client) = send_raw(f.addr("l").await, &hello, hello.len()).await;
    wait_until("the proxy's SYN to the full upstream", WAIT, || async {
        syn_sent_to(up_addr.port())
    })
    .await;
    // Make room: the retransmitted SYN now completes the handshake.
    let (queued, _) = upstream.accept().unwrap();
    drop((queued, filler));
    let upstream = TcpListener::from_std({
        upstream.set_nonblocking(true).unwrap();
        upstream
    })
    .unwrap();
    let (mut server, _) = tokio::time::timeout(WAIT, upstream.accept())
        .await
        .expect("the proxy never completed its upstream handshake")
        .unwrap();
    let mut got = vec![0u8; hello.len()];
    server.read_exact(&mut got).await.unwrap();
    assert!(got == hello, "the replayed hello differs");
    server.write_all(b"pong").await.unwrap();
    let mut back = [0u8; 4];
    client.read_exact(&mut back).await.unwrap();
    assert_eq!(&back, b"pong");
    assert_eq!(
        f.metric("isthmus_proxy_connections_total{listener=\"l\",route=\"slow.example.com\",upstream=\"u\",outcome=\"forwarded\"}").await,
        1.0
    );
}
