//! Endpoint names resolved with hickory-resolver against a DNS server the test controls: a
//! changed answer is followed without touching existing connections, and a failing server
//! leaves the last good addresses in use.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use hickory_proto::op::{Message, MessageType, ResponseCode};
use hickory_proto::rr::{rdata, RData, Record, RecordType};
use isthmus_testkit::{wait_until, TestPki};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UdpSocket;

/// What the test server answers for every A query: addresses, or SERVFAIL when `None`.
type Answer = Arc<Mutex<Option<Vec<IpAddr>>>>;

async fn dns_server(answer: Answer) -> SocketAddr {
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
    let yaml = format!(
        "{}resolver: {{ nameservers: [\"{dns}\"], min_ttl: 100ms, max_ttl: 200ms, retry_after_failure: 100ms }}
listeners:
  - name: l
    address: \"127.0.0.1:0\"
    routes: [ {{ sni: \"d.example.com\", upstream: u }} ]
upstreams:
  - {{ name: u, endpoints: [\"etcd-0.isthmus.test:{port}\"] }}
",
        admin_yaml()
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
