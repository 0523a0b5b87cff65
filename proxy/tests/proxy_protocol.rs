//! PROXY protocol: accepted from the load balancer (v1 and v2) and sent to upstreams (v1 and
//! v2), checked byte for byte against the HAProxy specification.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use isthmus_testkit::{wait_until, TestPki};
use tokio::io::AsyncWriteExt;

const SIG: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";

fn v2_tcp4(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
    let mut h = SIG.to_vec();
    h.extend_from_slice(&[0x21, 0x11, 0x00, 0x0c]);
    h.extend_from_slice(&src);
    h.extend_from_slice(&dst);
    h.extend_from_slice(&sport.to_be_bytes());
    h.extend_from_slice(&dport.to_be_bytes());
    h
}

fn v2_tcp6(src: std::net::Ipv6Addr, dst: std::net::Ipv6Addr, sport: u16, dport: u16) -> Vec<u8> {
    let mut h = SIG.to_vec();
    h.extend_from_slice(&[0x21, 0x21, 0x00, 0x24]);
    h.extend_from_slice(&src.octets());
    h.extend_from_slice(&dst.octets());
    h.extend_from_slice(&sport.to_be_bytes());
    h.extend_from_slice(&dport.to_be_bytes());
    h
}

async fn fixture(mode: &str, send: &str, up: &RawUpstream) -> Fixture {
    let yaml = format!(
        "{}listeners:
  - name: l
    address: \"127.0.0.1:0\"
    proxy_protocol: {mode}
    trusted_proxies: [\"127.0.0.1\"]
    routes: [ {{ sni: \"pp.example.com\", upstream: u }} ]
upstreams:
  - {{ name: u, endpoints: [\"{}\"], send_proxy_protocol: {send} }}
",
        admin_yaml(),
        up.addr
    );
    Fixture::start(&yaml).await
}

/// Sends `header + hello`, waits until the upstream got `expected_prefix + hello`.
async fn check(
    f: &Fixture,
    up: &RawUpstream,
    header: &[u8],
    hello: &[u8],
    expected_prefix: &[u8],
    step: usize,
) {
    let mut bytes = header.to_vec();
    bytes.extend_from_slice(hello);
    let (_, _s) = send_raw(f.addr("l").await, &bytes, step).await;
    let n = up.connections();
    let mut expected = expected_prefix.to_vec();
    expected.extend_from_slice(hello);
    wait_until("upstream received header and hello", WAIT, || async {
        up.connections() == n.max(1) && up.bytes(up.connections() - 1) == expected
    })
    .await;
}

#[tokio::test]
async fn v1_in_v2_out_and_v2_in_v1_out_byte_exact() {
    let pki = TestPki::new();
    let hello = capture_hello(&pki, "pp.example.com").await;
    let up = RawUpstream::start("u").await;

    let f = fixture("accept", "v2", &up).await;
    let v1 = b"PROXY TCP4 203.0.113.7 198.51.100.1 40000 443\r\n";
    check(
        &f,
        &up,
        v1,
        &hello,
        &v2_tcp4([203, 0, 113, 7], [198, 51, 100, 1], 40000, 443),
        v1.len(),
    )
    .await;

    let up = RawUpstream::start("u").await;
    let f = fixture("require", "v1", &up).await;
    // One byte at a time: the header and the hello may be split anywhere.
    check(
        &f,
        &up,
        &v2_tcp4([203, 0, 113, 7], [198, 51, 100, 1], 40000, 443),
        &hello,
        v1,
        1,
    )
    .await;

    let up = RawUpstream::start("u").await;
    let f = fixture("accept", "v2", &up).await;
    let (a, b) = (
        "2001:db8::7".parse().unwrap(),
        "2001:db8::1".parse().unwrap(),
    );
    let v6 = b"PROXY TCP6 2001:db8::7 2001:db8::1 40000 443\r\n";
    check(&f, &up, v6, &hello, &v2_tcp6(a, b, 40000, 443), 5).await;
}

#[tokio::test]
async fn without_a_header_the_socket_peer_is_sent_on_and_require_rejects() {
    let pki = TestPki::new();
    let hello = capture_hello(&pki, "pp.example.com").await;
    let up = RawUpstream::start("u").await;
    let f = fixture("accept", "v1", &up).await;
    let (_, s) = send_raw(f.addr("l").await, &hello, hello.len()).await;
    let local = s.local_addr().unwrap();
    let expected = format!(
        "PROXY TCP4 127.0.0.1 127.0.0.1 {} {}\r\n",
        local.port(),
        f.addr("l").await.port()
    );
    wait_until(
        "upstream got v1 with the socket addresses",
        WAIT,
        || async {
            up.connections() == 1
                && up.bytes(0).starts_with(expected.as_bytes())
                && up.bytes(0).ends_with(&hello)
        },
    )
    .await;

    let up = RawUpstream::start("u").await;
    let f = fixture("require", "none", &up).await;
    let (_, mut s) = send_raw(f.addr("l").await, &hello, hello.len()).await;
    assert_eq!(read_to_close(&mut s).await, b"");
    f.wait_metric(
        "isthmus_proxy_hello_rejections_total{listener=\"l\",reason=\"proxy_protocol\"}",
        1.0,
    )
    .await;
    let (_, mut s) = send_raw(f.addr("l").await, b"PROXY TCP4 1.2.3.4 nonsense\r\n", 64).await;
    assert_eq!(read_to_close(&mut s).await, b"");
    f.wait_metric(
        "isthmus_proxy_hello_rejections_total{listener=\"l\",reason=\"proxy_protocol\"}",
        2.0,
    )
    .await;
    assert_eq!(up.connections(), 0);
}

/// `header` with a NOOP TLV that makes the whole header `total` bytes long.
fn padded(mut header: Vec<u8>, total: usize) -> Vec<u8> {
    let tlv = total - header.len() - 3;
    header.push(0x04);
    header.extend_from_slice(&u16::try_from(tlv).unwrap().to_be_bytes());
    header.resize(total, 0);
    let body = u16::try_from(total - 16).unwrap();
    header[14..16].copy_from_slice(&body.to_be_bytes());
    header
}

/// A trusted load balancer's v2 header may carry TLVs up to 2 KiB in all; a longer one is
/// refused from its first 16 bytes rather than buffered (it could announce 64 KiB).
#[tokio::test]
async fn trusted_v2_headers_are_capped_at_2_kib() {
    let pki = TestPki::new();
    let hello = capture_hello(&pki, "pp.example.com").await;
    let up = RawUpstream::start("u").await;
    let f = fixture("accept", "none", &up).await;
    let header = v2_tcp4([192, 0, 2, 1], [198, 51, 100, 7], 56324, 443);
    check(&f, &up, &padded(header.clone(), 2048), &hello, b"", 4096).await;
    let mut long = padded(header, 3000);
    long.extend_from_slice(&hello);
    let (_, mut s) = send_raw(f.addr("l").await, &long, long.len()).await;
    assert_eq!(read_to_close(&mut s).await, b"");
    f.wait_metric(
        "isthmus_proxy_hello_rejections_total{listener=\"l\",reason=\"proxy_protocol\"}",
        1.0,
    )
    .await;
    assert_eq!(up.connections(), 1);
}

/// A peer outside `trusted_proxies` that starts a v2 header is closed at the signature:
/// the proxy does not wait for the 64 KiB the header announces (with a 60 s hello timeout,
/// that wait would outlast the test's deadline).
#[tokio::test]
async fn an_untrusted_peer_is_refused_at_the_signature() {
    let up = RawUpstream::start("u").await;
    let yaml = format!(
        "{}listeners:
  - name: l
    address: \"127.0.0.1:0\"
    proxy_protocol: accept
    trusted_proxies: [\"127.0.0.2\"]
    client_hello_timeout: 60s
    routes: [ {{ sni: \"pp.example.com\", upstream: u }} ]
upstreams:
  - {{ name: u, endpoints: [\"{}\"] }}
",
        admin_yaml(),
        up.addr
    );
    let f = Fixture::start(&yaml).await;
    let addr = f.addr("l").await;
    for start in [&SIG[..], b"PROXY TCP4 192.0.2.1"] {
        let mut s = connect_from("127.0.0.3", addr).await;
        let mut first = start.to_vec();
        if first.len() == SIG.len() {
            first.extend_from_slice(&[0x21, 0x11, 0xff, 0xff]);
        }
        s.write_all(&first).await.unwrap();
        assert_eq!(read_to_close(&mut s).await, b"");
    }
    f.wait_metric(
        "isthmus_proxy_hello_rejections_total{listener=\"l\",reason=\"untrusted_proxy\"}",
        2.0,
    )
    .await;
    assert_eq!(up.connections(), 0);
}
