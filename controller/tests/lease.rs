//! Leader election against the scripted API server, and the `/config/hash` probe against a
//! real HTTP server on 127.0.0.1:0 (and the real proxy: `tests/rollout_probe.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test]: a panic is a failure

mod common;

use common::apiserver::{expect, mock, serve, Exchange, Seen};
use http::Method;
use isthmus_controller::kube_adapter::lease::LeaseLock;
use isthmus_controller::kube_adapter::probe::{HashFetcher, HttpFetcher};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const PATH: &str =
    "/apis/coordination.k8s.io/v1/namespaces/isthmus-system/leases/isthmus-controller";
const NOW: &str = "2026-01-01T00:01:00Z";

fn lease(holder: &str, renewed: &str) -> Value {
    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
           "metadata": {"name": "isthmus-controller", "namespace": "isthmus-system", "resourceVersion": "5"},
           "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15,
                    "renewTime": renewed, "acquireTime": renewed, "leaseTransitions": 2}})
}

async fn attempt(script: Vec<Exchange>) -> Result<bool, kube::Error> {
    let (client, handle) = mock();
    let server = tokio::spawn(serve(handle, script, Arc::new(Mutex::new(Seen::default()))));
    let api: Api<Lease> = Api::namespaced(client, "isthmus-system");
    let lock = LeaseLock::new(api, "isthmus-controller", "pod-a", Duration::from_secs(15));
    let r = lock.try_acquire_or_renew(NOW.parse().unwrap()).await;
    server.await.unwrap();
    r
}

#[tokio::test]
async fn creates_a_missing_lease() {
    let script = vec![
        expect(Method::GET, PATH).fail(404, "NotFound"),
        expect(
            Method::POST,
            "/apis/coordination.k8s.io/v1/namespaces/isthmus-system/leases",
        )
        .check(|b| {
            assert_eq!(b["spec"]["holderIdentity"], "pod-a");
            assert_eq!(b["spec"]["leaseDurationSeconds"], 15);
        }),
    ];
    assert!(attempt(script).await.unwrap());
}

#[tokio::test]
async fn respects_a_fresh_lease_of_another_replica() {
    let script = vec![expect(Method::GET, PATH).reply(lease("pod-b", "2026-01-01T00:00:50Z"))];
    assert!(!attempt(script).await.unwrap());
}

#[tokio::test]
async fn takes_over_an_expired_lease_conditionally() {
    let script = vec![
        expect(Method::GET, PATH).reply(lease("pod-b", "2026-01-01T00:00:00Z")),
        expect(Method::PUT, PATH).check(|b| {
            assert_eq!(
                b["metadata"]["resourceVersion"], "5",
                "replace must be conditional"
            );
            assert_eq!(b["spec"]["holderIdentity"], "pod-a");
            assert_eq!(b["spec"]["leaseTransitions"], 3);
        }),
    ];
    assert!(attempt(script).await.unwrap());
}

#[tokio::test]
async fn losing_the_renew_race_is_not_leading() {
    let script = vec![
        expect(Method::GET, PATH).reply(lease("pod-a", "2026-01-01T00:00:55Z")),
        expect(Method::PUT, PATH)
            .check(|b| assert_eq!(b["spec"]["leaseTransitions"], 2, "renewal is no transition"))
            .fail(409, "Conflict"),
    ];
    assert!(!attempt(script).await.unwrap());
}

#[tokio::test]
async fn other_api_errors_surface() {
    let script = vec![expect(Method::GET, PATH).fail(500, "InternalError")];
    assert!(attempt(script).await.is_err());
}

async fn one_shot_http(answer: &'static str) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut buf = [0u8; 1024];
        let n = s.read(&mut buf).await.unwrap();
        // The hash alone: the full /config is megabytes with thousands of routes.
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("GET /config/hash HTTP/1.1"));
        s.write_all(answer.as_bytes()).await.unwrap();
    });
    addr
}

#[tokio::test]
async fn http_fetcher_reads_the_hash() {
    let body = r#"{"hash":"abc123","config":{}}"#;
    let answer = Box::leak(
        format!(
            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\ncontent-type: application/json\r\n\r\n{body}",
            body.len()
        )
        .into_boxed_str(),
    );
    let addr = one_shot_http(answer).await;
    let f = HttpFetcher::new(Duration::from_secs(2));
    assert_eq!(f.fetch(addr).await.unwrap(), "abc123");
}

#[tokio::test]
async fn http_fetcher_rejects_errors_and_bad_bodies() {
    let f = HttpFetcher::new(Duration::from_secs(2));
    let addr = one_shot_http("HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n").await;
    assert!(f.fetch(addr).await.is_err());
    let addr = one_shot_http("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}").await;
    assert!(f.fetch(addr).await.is_err());
    // An answer far longer than a hash is not read to its end.
    let big = format!(
        "HTTP/1.1 200 OK\r\ncontent-length: 65536\r\n\r\n{{\"hash\":\"abc\",\"pad\":\"{}\"}}",
        "x".repeat(65_536 - 23)
    );
    let addr = one_shot_http(Box::leak(big.into_boxed_str())).await;
    let e = f.fetch(addr).await.unwrap_err().to_string();
    assert!(e.contains("bad /config/hash answer"), "{e}");
}

mod leader_loop {
    use super::*;
    use isthmus_controller::kube_adapter::lease::{run_as_leader, LeaseError};
    use prometheus_client::metrics::gauge::Gauge;

    const CREATE: &str = "/apis/coordination.k8s.io/v1/namespaces/isthmus-system/leases";

    fn lock(client: kube::Client) -> LeaseLock {
        LeaseLock::new(
            Api::namespaced(client, "isthmus-system"),
            "isthmus-controller",
            "pod-a",
            Duration::from_secs(15),
        )
    }

    async fn lead(
        script: Vec<Exchange>,
        work: impl std::future::Future<Output = ()>,
    ) -> (Result<(), LeaseError>, Gauge) {
        let (client, handle) = mock();
        let server = tokio::spawn(serve(handle, script, Arc::new(Mutex::new(Seen::default()))));
        let gauge = Gauge::default();
        let r = run_as_leader(&lock(client), &gauge, work).await;
        server.await.unwrap();
        (r, gauge)
    }

    fn ours_renewed() -> Value {
        lease("pod-a", "2099-01-01T00:00:00Z")
    }

    #[tokio::test(start_paused = true)]
    async fn waits_for_the_holder_then_runs_the_work() {
        let script = vec![
            expect(Method::GET, PATH).reply(lease("pod-b", "2099-01-01T00:00:00Z")),
            expect(Method::GET, PATH).fail(404, "NotFound"),
            expect(Method::POST, CREATE),
            // The work ended: the lease is handed back.
            expect(Method::GET, PATH).reply(ours_renewed()),
            expect(Method::PUT, PATH).check(|b| {
                assert_eq!(b["spec"].get("holderIdentity"), None, "released");
                assert_eq!(b["metadata"]["resourceVersion"], "5");
            }),
        ];
        let ran = Arc::new(Mutex::new(false));
        let flag = ran.clone();
        let (r, gauge) = lead(script, async move { *flag.lock().unwrap() = true }).await;
        assert!(r.is_ok() && *ran.lock().unwrap());
        assert_eq!(gauge.get(), 0, "not leader after the work ended");
    }

    #[tokio::test(start_paused = true)]
    async fn stops_when_the_lease_is_lost() {
        let script = vec![
            expect(Method::GET, PATH).fail(404, "NotFound"),
            expect(Method::POST, CREATE),
            // A renewal: still ours.
            expect(Method::GET, PATH).reply(ours_renewed()),
            expect(Method::PUT, PATH),
            // A transient failure is retried while the lease surely holds.
            expect(Method::GET, PATH).fail(500, "InternalError"),
            // Someone else took it over.
            expect(Method::GET, PATH).reply(lease("pod-b", "2099-01-01T00:00:00Z")),
        ];
        let (r, gauge) = lead(script, futures::future::pending()).await;
        assert!(matches!(r, Err(LeaseError::Lost)), "{r:?}");
        assert_eq!(gauge.get(), 0);
    }
}
