//! Load at the shoot's API, through its DNS name: creates of ConfigMaps carrying a sequence
//! number, merge patches of one counter ConfigMap, and reads of that counter (which must never
//! go back behind an acknowledged patch). Every request is recorded; a request fails when an
//! error reaches the caller after its retries or when it took longer than [`BUDGET`].
//!
//! Retries are what a careful client does: transport errors, 429 and 5xx are retried within the
//! budget, and an attempt without an answer after [`ATTEMPT`] is abandoned and retried. The
//! latter matters at every etcd leader change (a `kill -9`, the planner's leader move): a write
//! that kube-apiserver's etcd client sent to a follower is forwarded to the old leader, which
//! drops it, and kube-apiserver then waits out etcd's request timeout (5 s + 2 × the election
//! timeout = 7 s here) before it answers at all. A create retried after an ambiguous failure
//! that answers 409 is read back and counts as acknowledged only if the stored object carries
//! this create's value. A retried request keeps its first error in the record, so an outage
//! the retries hid is still seen (`api.retried` in the report).

use super::dns::Dns;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// One attempt of a request as kube-apiserver saw it (its audit log, `audit.rs`).
#[derive(Debug, Clone, Serialize)]
pub struct Served {
    /// When the server received it, ms since the run started (the client's clock).
    pub received_ms: f64,
    /// From receiving it to the end of the answer.
    pub ms: f64,
    pub code: u16,
}

/// The namespace the load writes in (the webhook validates it).
pub const NAMESPACE: &str = "lab-load";
/// The ConfigMap every patch updates.
pub const COUNTER: &str = "counter";
/// A request slower than this failed, whatever it answered.
pub const BUDGET: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    Create,
    Patch,
    Read,
}

/// One request as the client saw it.
#[derive(Debug, Clone, Serialize)]
pub struct ApiSample {
    pub op: Op,
    /// The ConfigMap it created, patched or read.
    pub object: String,
    pub start_ms: f64,
    pub latency_ms: f64,
    /// The seed whose kube-apiserver the DNS name pointed at when the request started.
    pub via: &'static str,
    pub ok: bool,
    pub attempts: u32,
    /// The first error seen, even when a retry then succeeded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Its attempts as kube-apiserver logged them (`audit.rs`; filled in at the end).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub server: Vec<Served>,
}

/// An acknowledged write: the object, the value it carries, the resourceVersion it got.
#[derive(Debug, Clone, Serialize)]
pub struct Ack {
    pub name: String,
    pub seq: u64,
    pub rv: u64,
    pub t_ms: f64,
}

/// What the load saw.
#[derive(Debug, Clone, Default)]
pub struct Recording {
    pub samples: Vec<ApiSample>,
    pub acks: Vec<Ack>,
    /// Reads of the counter that returned a value behind an acknowledged patch.
    pub stale_reads: Vec<String>,
}

/// The running load; [`Load::stop`] ends it after the request in flight.
#[derive(Debug)]
pub struct Load {
    stop: CancellationToken,
    task: JoinHandle<()>,
    rec: Arc<Mutex<Recording>>,
    /// Dropped without `stop` (a failed run): the worker stops too.
    _guard: tokio_util::sync::DropGuard,
}

impl Load {
    /// Starts one client doing create, patch, read in turn, `interval` apart.
    pub fn start(epoch: Instant, dns: Dns, interval: Duration) -> Self {
        let stop = CancellationToken::new();
        let rec = Arc::new(Mutex::new(Recording::default()));
        let worker = Worker {
            epoch,
            dns,
            rec: rec.clone(),
            patched: 0,
        };
        let task = tokio::spawn(worker.run(stop.clone(), interval));
        let _guard = stop.clone().drop_guard();
        Self {
            stop,
            task,
            rec,
            _guard,
        }
    }

    /// The resourceVersion of the newest acknowledged write.
    pub fn last_rv(&self) -> u64 {
        let rec = self.rec.lock().unwrap_or_else(PoisonError::into_inner);
        rec.acks.iter().map(|a| a.rv).max().unwrap_or(0)
    }

    /// Stops after the request in flight and returns everything recorded.
    pub async fn stop(self) -> Recording {
        self.stop.cancel();
        let _ = self.task.await;
        let rec = self.rec.lock().unwrap_or_else(PoisonError::into_inner);
        rec.clone()
    }
}

struct Worker {
    epoch: Instant,
    dns: Dns,
    rec: Arc<Mutex<Recording>>,
    /// The newest acknowledged patch of the counter.
    patched: u64,
}

/// How one attempt ended.
enum Attempt<T> {
    Done(T),
    /// Worth another try within the budget.
    Retry(String),
    Fatal(String),
}

impl Worker {
    async fn run(mut self, stop: CancellationToken, interval: Duration) {
        let mut seq: u64 = 0;
        while !stop.is_cancelled() {
            seq += 1;
            match seq % 3 {
                1 => self.create(seq).await,
                2 => self.patch(seq).await,
                _ => self.read().await,
            }
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = tokio::time::sleep(interval) => {}
            }
        }
    }

    fn api(&self) -> (Api<ConfigMap>, &'static str) {
        let (client, via) = self.dns.resolve();
        (Api::namespaced(client, NAMESPACE), via)
    }

    async fn create(&mut self, seq: u64) {
        let name = format!("obj-{seq}");
        let cm = config_map(&name, seq);
        let r = self
            .request(Op::Create, &name, |api, attempt| {
                let cm = cm.clone();
                let name = name.clone();
                async move {
                    match api.create(&PostParams::default(), &cm).await {
                        Ok(o) => Attempt::Done(rv(&o)),
                        // Our earlier attempt may have been stored: read it back.
                        Err(kube::Error::Api(s)) if s.code == 409 && attempt > 1 => {
                            match api.get(&name).await {
                                Ok(o) if value(&o) == Some(seq) => Attempt::Done(rv(&o)),
                                Ok(_) => Attempt::Fatal("409 for an object not ours".into()),
                                Err(e) => classify(e),
                            }
                        }
                        Err(e) => classify(e),
                    }
                }
            })
            .await;
        if let Some(rv) = r {
            self.ack(name, seq, rv);
        }
    }

    async fn patch(&mut self, seq: u64) {
        let patch = serde_json::json!({ "data": { "seq": seq.to_string() } });
        let r = self
            .request(Op::Patch, COUNTER, |api, _| {
                let patch = patch.clone();
                async move {
                    match api
                        .patch(COUNTER, &PatchParams::default(), &Patch::Merge(&patch))
                        .await
                    {
                        Ok(o) => Attempt::Done(rv(&o)),
                        Err(e) => classify(e),
                    }
                }
            })
            .await;
        if let Some(rv) = r {
            self.patched = seq;
            self.ack(COUNTER.into(), seq, rv);
        }
    }

    async fn read(&mut self) {
        let r = self
            .request(Op::Read, COUNTER, |api, _| async move {
                match api.get(COUNTER).await {
                    Ok(o) => Attempt::Done(value(&o).unwrap_or(0)),
                    Err(e) => classify(e),
                }
            })
            .await;
        if let Some(v) = r {
            if v < self.patched {
                let mut rec = self.rec.lock().unwrap_or_else(PoisonError::into_inner);
                rec.stale_reads
                    .push(format!("counter read {v} after patch {}", self.patched));
            }
        }
    }

    fn ack(&self, name: String, seq: u64, rv: u64) {
        let t_ms = crate::clock::ms(self.epoch.elapsed());
        let mut rec = self.rec.lock().unwrap_or_else(PoisonError::into_inner);
        rec.acks.push(Ack {
            name,
            seq,
            rv,
            t_ms,
        });
    }

    /// Runs `op` with retries within [`BUDGET`], records the sample, returns the result.
    async fn request<T, F, Fut>(&self, kind: Op, object: &str, op: F) -> Option<T>
    where
        F: Fn(Api<ConfigMap>, u32) -> Fut,
        Fut: std::future::Future<Output = Attempt<T>>,
    {
        let start = Instant::now();
        let deadline = start + BUDGET;
        let (_, via) = self.api();
        let mut attempts = 0;
        let mut first_error = None;
        let result = loop {
            attempts += 1;
            let (api, _) = self.api();
            let left = deadline.saturating_duration_since(Instant::now());
            let outcome = match tokio::time::timeout(left.min(ATTEMPT), op(api, attempts)).await {
                Ok(o) => o,
                Err(_) if left > ATTEMPT => {
                    Attempt::Retry(format!("attempt unanswered after {ATTEMPT:?}"))
                }
                Err(_) => Attempt::Fatal(format!("no answer within {BUDGET:?}")),
            };
            match outcome {
                Attempt::Done(v) => break Ok(v),
                Attempt::Fatal(e) => break Err(first_error.take().unwrap_or(e)),
                Attempt::Retry(e) => {
                    first_error.get_or_insert(e);
                    if Instant::now() + RETRY_PAUSE >= deadline {
                        break Err(first_error.take().unwrap_or_default());
                    }
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
            }
        };
        let latency = start.elapsed();
        let ok = result.is_ok() && latency <= BUDGET;
        let error = match &result {
            Err(e) => Some(e.clone()),
            Ok(_) if latency > BUDGET => Some(format!("took {latency:?}")),
            Ok(_) => first_error,
        };
        let sample = ApiSample {
            op: kind,
            object: object.to_string(),
            start_ms: crate::clock::ms(start - self.epoch),
            latency_ms: crate::clock::ms(latency),
            via,
            ok,
            attempts,
            error,
            server: Vec::new(),
        };
        self.rec
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .samples
            .push(sample);
        result.ok()
    }
}

/// How long one attempt may go unanswered before it is abandoned and retried.
pub const ATTEMPT: Duration = Duration::from_millis(2500);

/// Pause between two attempts of one request.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

fn classify<T>(e: kube::Error) -> Attempt<T> {
    match &e {
        kube::Error::Api(s) if s.code == 429 || s.code >= 500 => Attempt::Retry(e.to_string()),
        kube::Error::Api(_) => Attempt::Fatal(e.to_string()),
        // Transport: connection refused or reset, TLS, a server that went away mid-request.
        _ => Attempt::Retry(e.to_string()),
    }
}

/// The ConfigMap `name` carrying `seq`.
pub fn config_map(name: &str, seq: u64) -> ConfigMap {
    ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("seq".to_string(), seq.to_string())])),
        ..Default::default()
    }
}

/// The sequence number a ConfigMap carries.
pub fn value(cm: &ConfigMap) -> Option<u64> {
    cm.data.as_ref()?.get("seq")?.parse().ok()
}

/// An object's resourceVersion as a number (etcd's revision; kube-apiserver's are numeric).
pub fn rv(cm: &ConfigMap) -> u64 {
    cm.metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}
