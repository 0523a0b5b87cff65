//! Per-source admission, tried as an attacker would: one source's idle or one-byte sockets
//! must not keep another source out; per-source caps, allow-lists and trusted PROXY peers hold.
//! Sources are loopback addresses (127.0.0.2, 127.0.0.3, …): Linux routes all of 127/8 locally.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use isthmus_testkit::{wait_until, TestPki};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const SNI: &str = "known.example.com";

async fn fixture(up: &RawUpstream, extra: &str) -> Fixture {
    let yaml = format!(
        "{}listeners:
  - name: l
    address: \"127.0.0.1:0\"
{extra}    routes: [ {{ sni: \"{SNI}\", upstream: u }} ]
upstreams:
  - {{ name: u, endpoints: [\"{}\"] }}
",
        admin_yaml(),
        up.addr
    );
    Fixture::start(&yaml).await
}

fn rejections(reason: &str) -> String {
    format!("isthmus_proxy_hello_rejections_total{{listener=\"l\",reason=\"{reason}\"}}")
}

const PENDING: &str = "isthmus_proxy_pending_hellos{listener=\"l\"}";

/// Whether a connection from `from` sending `bytes` reaches the upstream (`u:` echo).
async fn routed(f: &Fixture, from: &str, bytes: &[u8]) -> bool {
    let (_s, answer) = try_route(from, f.addr("l").await, bytes).await;
    answer.starts_with(b"u:")
}

/// `n` sockets from `from` that send `first` (possibly nothing) and then stay silent.
async fn hold(f: &Fixture, from: &str, n: usize, first: &[u8]) -> Vec<TcpStream> {
    let addr = f.addr("l").await;
    let mut held = Vec::with_capacity(n);
    for _ in 0..n {
        let mut s = connect_from(from, addr).await;
        if !first.is_empty() {
            s.write_all(first).await.unwrap();
        }
        held.push(s);
    }
    held
}

#[tokio::test]
async fn idle_sockets_of_one_source_take_no_pending_slot() {
    let pki = TestPki::new();
    let hello = capture_hello(&pki, SNI).await;
    let up = RawUpstream::start("u").await;
    let f = fixture(&up, "    max_pending_hellos: 16\n").await;
    // Far more idle connections than the listener has pending slots: with TCP_DEFER_ACCEPT
    // the kernel does not hand them to the proxy before they send something.
    let _idle = hold(&f, "127.0.0.2", 200, b"").await;
    for i in 0..5 {
        assert!(
            routed(&f, "127.0.0.3", &hello).await,
            "connection {i} not routed"
        );
    }
    assert_eq!(f.metric(PENDING).await, 0.0);
    assert_eq!(up.connections(), 5);
}

#[tokio::test]
async fn one_byte_sockets_of_one_source_are_capped_per_source_and_evicted_oldest_first() {
    let pki = TestPki::new();
    let hello = capture_hello(&pki, SNI).await;
    let up = RawUpstream::start("u").await;
    let f = fixture(
        &up,
        "    max_pending_hellos: 16\n    max_pending_hellos_per_source: 4\n",
    )
    .await;
    // 40 sockets that each send the first byte of a TLS record and stall.
    let mut held = hold(&f, "127.0.0.2", 40, &[22]).await;
    // The source keeps 4 pending slots; each newcomer evicted the source's oldest.
    f.wait_metric(&rejections("evicted"), 36.0).await;
    f.wait_metric(PENDING, 4.0).await;
    // The 4 that hold slots are the 4 youngest: the oldest were closed.
    let first = read_to_close(&mut held[0]).await;
    assert!(first.is_empty());
    for i in 0..5 {
        assert!(
            routed(&f, "127.0.0.3", &hello).await,
            "connection {i} not routed"
        );
    }
    assert_eq!(up.connections(), 5);
}

#[tokio::test]
async fn when_the_listener_is_full_the_oldest_pending_connection_goes() {
    let pki = TestPki::new();
    let hello = capture_hello(&pki, SNI).await;
    let up = RawUpstream::start("u").await;
    let f = fixture(
        &up,
        "    max_pending_hellos: 8\n    max_pending_hellos_per_source: 4\n",
    )
    .await;
    // Four sources with four stalled sockets each: twice the listener's slots.
    let mut held = Vec::new();
    for from in ["127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"] {
        held.extend(hold(&f, from, 4, &[22]).await);
    }
    f.wait_metric(&rejections("evicted"), 8.0).await;
    f.wait_metric(PENDING, 8.0).await;
    // A fresh client still gets in: it evicts the oldest stalled socket, not itself.
    for i in 0..5 {
        assert!(
            routed(&f, "127.0.0.9", &hello).await,
            "connection {i} not routed"
        );
    }
    // Only the first found the listener full: each routed one frees its slot again.
    f.wait_metric(&rejections("evicted"), 9.0).await;
    assert!(read_to_close(&mut held[0]).await.is_empty());
    assert_eq!(up.connections(), 5);
}

#[tokio::test]
async fn connections_per_source_are_capped() {
    let pki = TestPki::new();
    let hello = capture_hello(&pki, SNI).await;
    let up = RawUpstream::start("u").await;
    let f = fixture(&up, "    max_connections_per_source: 2\n").await;
    let addr = f.addr("l").await;
    let (a1, r1) = try_route("127.0.0.2", addr, &hello).await;
    let (_a2, r2) = try_route("127.0.0.2", addr, &hello).await;
    assert!(r1.starts_with(b"u:") && r2.starts_with(b"u:"));
    let (_a3, r3) = try_route("127.0.0.2", addr, &hello).await;
    assert!(r3.is_empty(), "a third connection of the source was routed");
    f.wait_metric(&rejections("too_many_connections_per_source"), 1.0)
        .await;
    // Another source is not affected.
    assert!(routed(&f, "127.0.0.3", &hello).await);
    // Once one closes, the source may open another.
    drop(a1);
    wait_until("a slot of 127.0.0.2 is free again", WAIT, || async {
        routed(&f, "127.0.0.2", &hello).await
    })
    .await;
}

#[tokio::test]
async fn only_allowed_sources_get_in() {
    let pki = TestPki::new();
    let hello = capture_hello(&pki, SNI).await;
    let up = RawUpstream::start("u").await;
    let f = fixture(
        &up,
        "    allowed_sources: [\"127.0.0.3/32\", \"10.0.0.0/8\"]\n",
    )
    .await;
    assert!(!routed(&f, "127.0.0.2", &hello).await);
    f.wait_metric(&rejections("source_not_allowed"), 1.0).await;
    assert!(routed(&f, "127.0.0.3", &hello).await);
    assert_eq!(up.connections(), 1);
}

fn proxy_v1(client: &str, hello: &[u8]) -> Vec<u8> {
    let mut b = format!("PROXY TCP4 {client} 127.0.0.1 40000 443\r\n").into_bytes();
    b.extend_from_slice(hello);
    b
}

#[tokio::test]
async fn proxy_headers_count_only_from_trusted_peers() {
    let pki = TestPki::new();
    let hello = capture_hello(&pki, SNI).await;
    let up = RawUpstream::start("u").await;
    let f = fixture(
        &up,
        "    proxy_protocol: accept
    trusted_proxies: [\"127.0.0.2\"]
    allowed_sources: [\"192.0.2.0/24\", \"127.0.0.3\"]
    max_connections_per_source: 1
",
    )
    .await;
    // The load balancer (trusted) speaks for two clients of the allowed network: the
    // per-source cap counts the clients, not the load balancer.
    let addr = f.addr("l").await;
    let (_c1, r1) = try_route("127.0.0.2", addr, &proxy_v1("192.0.2.1", &hello)).await;
    let (_c2, r2) = try_route("127.0.0.2", addr, &proxy_v1("192.0.2.2", &hello)).await;
    assert!(r1.starts_with(b"u:") && r2.starts_with(b"u:"));
    let (_c3, r3) = try_route("127.0.0.2", addr, &proxy_v1("192.0.2.1", &hello)).await;
    assert!(r3.is_empty());
    f.wait_metric(&rejections("too_many_connections_per_source"), 1.0)
        .await;
    // A client outside the allowed network, announced by the trusted peer.
    assert!(!routed(&f, "127.0.0.2", &proxy_v1("198.51.100.1", &hello)).await);
    f.wait_metric(&rejections("source_not_allowed"), 1.0).await;
    // Another peer claiming an allowed client address is not believed.
    assert!(!routed(&f, "127.0.0.3", &proxy_v1("192.0.2.3", &hello)).await);
    f.wait_metric(&rejections("untrusted_proxy"), 1.0).await;
    // Without a header that peer is judged by its own address (allowed here), and a peer
    // outside the allow-list is closed before anything is read.
    assert!(routed(&f, "127.0.0.3", &hello).await);
    assert!(!routed(&f, "127.0.0.4", &hello).await);
    f.wait_metric(&rejections("source_not_allowed"), 2.0).await;
    assert_eq!(up.connections(), 3);
}

#[tokio::test]
async fn with_require_an_untrusted_peer_is_closed_before_anything_is_read() {
    let pki = TestPki::new();
    let hello = capture_hello(&pki, SNI).await;
    let up = RawUpstream::start("u").await;
    let f = fixture(
        &up,
        "    proxy_protocol: require\n    trusted_proxies: [\"127.0.0.2\"]\n",
    )
    .await;
    assert!(!routed(&f, "127.0.0.3", &proxy_v1("192.0.2.3", &hello)).await);
    f.wait_metric(&rejections("untrusted_proxy"), 1.0).await;
    assert!(routed(&f, "127.0.0.2", &proxy_v1("192.0.2.3", &hello)).await);
    assert_eq!(up.connections(), 1);
}

/// Issue 47, point 2: an upstream's `max_connections_per_source` caps what one client address
/// forwards to it (a tunnel server that sees every connection as the proxy's cannot), while
/// another source, and the listener's other routes, are not affected.
#[tokio::test]
async fn an_upstream_caps_what_one_source_forwards_to_it() {
    let pki = TestPki::new();
    let hello = capture_hello(&pki, SNI).await;
    let up = RawUpstream::start("u").await;
    let yaml = format!(
        "{}listeners:\n  - name: l\n    address: \"127.0.0.1:0\"\n    \
         routes: [ {{ sni: \"{SNI}\", upstream: u }} ]\nupstreams:\n  \
         - {{ name: u, endpoints: [\"{}\"], max_connections_per_source: 2 }}\n",
        admin_yaml(),
        up.addr
    );
    let f = Fixture::start(&yaml).await;
    let addr = f.addr("l").await;
    let (a1, r1) = try_route("127.0.0.2", addr, &hello).await;
    let (_a2, r2) = try_route("127.0.0.2", addr, &hello).await;
    assert!(r1.starts_with(b"u:") && r2.starts_with(b"u:"));
    let (_a3, r3) = try_route("127.0.0.2", addr, &hello).await;
    assert!(
        r3.is_empty(),
        "a third connection of the source was forwarded"
    );
    let refused = format!(
        "isthmus_proxy_connections_total{{listener=\"l\",route=\"{SNI}\",upstream=\"u\",\
         outcome=\"source_overflow\"}}"
    );
    f.wait_metric(&refused, 1.0).await;
    assert!(routed(&f, "127.0.0.3", &hello).await, "another source");
    drop(a1);
    wait_until("a place of 127.0.0.2 is free again", WAIT, || async {
        routed(&f, "127.0.0.2", &hello).await
    })
    .await;
    assert_eq!(up.connections(), 4);
}
