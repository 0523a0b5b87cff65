//! Endpoint names resolved with hickory-resolver against a DNS server the test controls: a
//! changed answer is followed without touching existing connections, a failing server
//! leaves the last good addresses in use, and a starting proxy is ready only once its names
//! answered (`resolver.warm_up`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use hickory_proto::op::{Message, MessageType, ResponseCode};
use hickory_proto::rr::{rdata, RData, Record, RecordType};
use isthmus_testkit::{http_get, wait_until, TestPki};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UdpSocket;

/// What the test server answers for every A query: addresses, or SERVFAIL when `None`.
type Answer = Arc<Mutex<Option<Vec<IpAddr>>>>;
/// Beyond hickory's query timeout (5 s) and a retry, on a busy machine.
const LONG: std::time::Duration = std::time::Duration::from_secs(60);
/// While true the server reads queries and never answers (lost answers: the resolver times
/// out).
type Silent = Arc<AtomicBool>;

async fn dns_server(answer: Answer) -> SocketAddr {
    dns_server_silent(answer, Arc::default()).await
}

async fn dns_server_silent(answer: Answer, silent: Silent) -> SocketAddr {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 4096];
        loop {
            let Ok((n, from)) = socket.recv_from(&mut buf).await else {
                return;
            };
            let Ok(query) = Message::from_vec(&buf[..n]) else {
                continue;
            };
            if silent.load(Ordering::SeqCst) {
                continue;
            }
            let mut reply = Message::new(
                query.metadata.id,
                MessageType::Response,
                query.metadata.op_code,
            );
            reply.metadata.recursion_desired = query.metadata.recursion_desired;
            reply.metadata.recursion_available = true;
            reply.queries = query.queries.clone();
            let current = answer.lock().unwrap().clone();
            match current {
                None => reply.metadata.response_code = ResponseCode::ServFail,
                Some(ips) => {
                    for q in &query.queries {
                        for ip in &ips {
                            let data = match (q.query_type(), ip) {
                                (RecordType::A, IpAddr::V4(v4)) => RData::A(rdata::A(*v4)),
                                (RecordType::AAAA, IpAddr::V6(v6)) => RData::AAAA(rdata::AAAA(*v6)),
                                _ => continue,
                            };
                            reply
                                .answers
                                .push(Record::from_rdata(q.name().clone(), 1, data));
                        }
                    }
                }
            }
            let _ = socket.send_to(&reply.to_vec().unwrap(), from).await;
        }
    });
    addr
}

/// The proxy's file: one listener routing `d.example.com` to `etcd-0.isthmus.test:{port}`,
/// resolved by the test's server at `dns` with the other `resolver` settings in `resolver`.
fn config(dns: SocketAddr, resolver: &str, port: u16) -> String {
    format!(
        "{}resolver: {{ nameservers: [\"{dns}\"], {resolver} }}
listeners:
  - name: l
    address: \"127.0.0.1:0\"
    routes: [ {{ sni: \"d.example.com\", upstream: u }} ]
upstreams:
  - {{ name: u, endpoints: [\"etcd-0.isthmus.test:{port}\"] }}
",
        admin_yaml()
    )
}

#[tokio::test]
async fn a_changed_answer_is_followed_and_a_failure_keeps_the_last_good_addresses() {
    let pki = TestPki::new();
    let hello = capture_hello(&pki, "d.example.com").await;
    // Two upstreams on the same port of two loopback addresses: only DNS tells them apart.
    let a = RawUpstream::start_on("a", "127.0.0.1:0".parse().unwrap()).await;
    let port = a.addr.port();
    let b = RawUpstream::start_on("b", SocketAddr::from(([127, 0, 0, 2], port))).await;
    let answer: Answer = Arc::new(Mutex::new(Some(vec![IpAddr::from([127, 0, 0, 1])])));
    let dns = dns_server(answer.clone()).await;
    let yaml = config(
        dns,
        "min_ttl: 100ms, max_ttl: 200ms, retry_after_failure: 100ms",
        port,
    );
    let f = Fixture::start(&yaml).await;
    let addr = f.addr("l").await;
    let open = || async {
        let (_, mut s) = send_raw(addr, &hello, hello.len()).await;
        let mut buf = vec![0u8; 2];
        s.read_exact(&mut buf).await.unwrap();
        (s, String::from_utf8_lossy(&buf[..1]).into_owned())
    };
    let (mut old, label) = open().await;
    assert_eq!(label, "a");

    *answer.lock().unwrap() = Some(vec![IpAddr::from([127, 0, 0, 2])]);
    wait_until("new connections follow the new answer", WAIT, || async {
        open().await.1 == "b"
    })
    .await;
    // The connection made before the change is untouched.
    old.write_all(b"old").await.unwrap();
    let mut seen = Vec::new();
    while !seen.ends_with(b"a:old") {
        let mut buf = [0u8; 4096];
        let n = old.read(&mut buf).await.unwrap();
        assert!(n > 0, "old connection closed");
        seen.extend_from_slice(&buf[..n]);
    }

    *answer.lock().unwrap() = None;
    let failures =
        "isthmus_proxy_dns_resolutions_total{name=\"etcd-0.isthmus.test\",result=\"failure\"}";
    wait_until("a failed resolution", WAIT, || async {
        f.metric(failures).await >= 1.0
    })
    .await;
    for _ in 0..3 {
        assert_eq!(open().await.1, "b", "the last good address stays in use");
    }
    drop(b);
}

async fn readyz(f: &Fixture) -> (u16, String) {
    http_get(f.proxy.admin_addr(), "/readyz").await.unwrap()
}

/// A proxy whose upstream name has not been answered yet would hold every connection the
/// load balancer sends it until the name resolves (a rolling update's new pod): it says it is
/// not ready until the DNS server answers, and then at once.
#[tokio::test]
async fn a_starting_proxy_is_ready_once_its_names_are_answered() {
    let upstream = RawUpstream::start("a").await;
    let port = upstream.addr.port();
    let answer: Answer = Arc::new(Mutex::new(Some(vec![IpAddr::from([127, 0, 0, 1])])));
    let silent: Silent = Arc::new(AtomicBool::new(true));
    let dns = dns_server_silent(answer, silent.clone()).await;
    let yaml = config(dns, "retry_after_failure: 100ms, warm_up: 1h", port);
    let f = Fixture::start(&yaml).await;
    let failures =
        "isthmus_proxy_dns_resolutions_total{name=\"etcd-0.isthmus.test\",result=\"failure\"}";
    // hickory gives up on a query after its 5 s timeout.
    wait_until("a resolution that timed out", LONG, || async {
        f.metric(failures).await >= 1.0
    })
    .await;
    let (code, body) = readyz(&f).await;
    assert_eq!(code, 503, "not ready before its name was answered: {body}");
    assert!(body.contains("warming up"), "{body}");

    silent.store(false, Ordering::SeqCst);
    wait_until("ready once the name is answered", LONG, || async {
        readyz(&f).await.0 == 200
    })
    .await;
    let addresses = "isthmus_proxy_dns_addresses{name=\"etcd-0.isthmus.test\"}";
    assert_eq!(f.metric(addresses).await, 1.0);
}

/// The warm-up is bounded: a name no server answers delays readiness by `warm_up`, no more,
/// and a name the server says has no addresses not at all.
#[tokio::test]
async fn the_warm_up_ends_after_its_patience_or_an_empty_answer() {
    let silent: Silent = Arc::new(AtomicBool::new(true));
    let dns = dns_server_silent(Arc::new(Mutex::new(None)), silent).await;
    let yaml = |dns, warm_up: &str| config(dns, &format!("warm_up: {warm_up}"), 2379);
    let f = Fixture::start(&yaml(dns, "300ms")).await;
    wait_until("ready after warm_up", LONG, || async {
        readyz(&f).await.0 == 200
    })
    .await;
    drop(f);

    // No addresses (NOERROR, no records): the server answered, there is nothing to wait for.
    let dns = dns_server(Arc::new(Mutex::new(Some(Vec::new())))).await;
    let f = Fixture::start(&yaml(dns, "1h")).await;
    wait_until("ready after the server answered", LONG, || async {
        readyz(&f).await.0 == 200
    })
    .await;
}
