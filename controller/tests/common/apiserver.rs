//! A scripted API server on kube-rs's `tower-test` mock: every expected request is asserted
//! (verb, path, query such as the field manager, body) and answered, in order.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test support: a panic is a test failure

use bytes::Bytes;
use http::{Method, Request, Response};
use http_body_util::BodyExt;
use kube::client::Body;
use kube::Client;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};

type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;
type Check = Box<dyn Fn(&Value) + Send>;

/// One expected request and its answer.
pub struct Exchange {
    method: Method,
    path: String,
    query: Vec<String>,
    check: Option<Check>,
    status: u16,
    reply: Value,
}

pub fn expect(method: Method, path: impl Into<String>) -> Exchange {
    Exchange {
        method,
        path: path.into(),
        query: Vec::new(),
        check: None,
        status: 200,
        reply: Value::Null,
    }
}

impl Exchange {
    /// The query string must contain this (e.g. `fieldManager=isthmus`).
    pub fn query(mut self, q: &str) -> Self {
        self.query.push(q.to_string());
        self
    }
    /// A server-side apply by isthmus.
    pub fn ssa(self) -> Self {
        self.query("fieldManager=isthmus").query("force=true")
    }
    pub fn check(mut self, f: impl Fn(&Value) + Send + 'static) -> Self {
        self.check = Some(Box::new(f));
        self
    }
    /// Answer with `v` (default: echo the request body, as an apply or patch answers with the
    /// object; a body without `metadata` gets an empty one).
    pub fn reply(mut self, v: Value) -> Self {
        self.reply = v;
        self
    }
    /// Answers with a `Status` failure.
    pub fn fail(mut self, code: u16, reason: &str) -> Self {
        self.status = code;
        self.reply = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                            "message": format!("scripted {reason}"), "reason": reason, "code": code});
        self
    }
}

/// What the scripted server saw; `proxy_text` is the last proxy ConfigMap written.
#[derive(Debug, Default)]
pub struct Seen {
    pub proxy_text: Option<String>,
    pub requests: Vec<String>,
}

pub fn mock() -> (Client, Handle) {
    let (svc, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    (Client::new(svc, "default"), handle)
}

/// Serves `script` in order, then returns. Panics (failing the test) on any mismatch.
pub async fn serve(mut handle: Handle, script: Vec<Exchange>, seen: Arc<Mutex<Seen>>) {
    for e in script {
        let want = format!("{} {}", e.method, e.path);
        let Some((req, send)) = handle.next_request().await else {
            panic!("client went away; expected {want}");
        };
        let got = format!("{} {}", req.method(), req.uri().path());
        let query = req.uri().query().unwrap_or_default().to_string();
        seen.lock().unwrap().requests.push(format!("{got}?{query}"));
        assert_eq!(got, want, "unexpected request (query {query})");
        for q in &e.query {
            assert!(
                query.contains(q.as_str()),
                "{want}: query {query:?} lacks {q:?}"
            );
        }
        let bytes: Bytes = req.into_body().collect().await.unwrap().to_bytes();
        let body: Value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap()
        };
        if let Some(text) = body.pointer("/data/proxy.json").and_then(Value::as_str) {
            seen.lock().unwrap().proxy_text = Some(text.to_string());
        }
        if let Some(check) = &e.check {
            check(&body);
        }
        let reply = match (e.reply, body) {
            (Value::Null, Value::Object(mut o)) => {
                o.entry("metadata").or_insert(json!({}));
                Value::Object(o)
            }
            (Value::Null, _) => {
                json!({"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Success"})
            }
            (r, _) => r,
        };
        let resp = Response::builder()
            .status(e.status)
            .body(Body::from(serde_json::to_vec(&reply).unwrap()))
            .unwrap();
        send.send_response(resp);
    }
}
