//! Every version of one object as a watch sees it, with the instant it arrived: what a
//! `Deploy` wiped of the `Etcd`, how long until the controller wrote it again, and what the
//! `EtcdMigration`'s status said meanwhile, are read off it (a poll could miss a version).

use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::{watcher, WatchStreamExt};
use serde_json::Value;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::task::JoinHandle;

/// One version of the object.
#[derive(Debug, Clone)]
pub struct Sample {
    pub at: Instant,
    pub obj: Value,
}

impl Sample {
    /// Where this version stands in the API server's one order of writes. Two recorders'
    /// arrival instants do not order versions of two objects (each watch is delivered on its
    /// own, late under load); their resourceVersions do: one kube-apiserver over one etcd gives
    /// every object its etcd revision as resourceVersion (k8s.io/apiserver
    /// `pkg/storage/etcd3/store.go`, `ModRevision`), which KEP-5504 makes comparable.
    pub fn revision(&self) -> u64 {
        self.obj["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }
    pub fn generation(&self) -> i64 {
        self.obj["metadata"]["generation"].as_i64().unwrap_or(0)
    }
    pub fn timestamp(&self) -> &str {
        self.obj["metadata"]["annotations"]["gardener.cloud/timestamp"]
            .as_str()
            .unwrap_or_default()
    }
    /// An `EtcdMigration`'s `status.stepReady`.
    pub fn ready(&self) -> bool {
        self.obj["status"]["stepReady"] == true
    }
    /// An `EtcdMigration`'s condition `t` as (status, reason).
    pub fn condition(&self, t: &str) -> Option<(String, String)> {
        super::world::condition(&self.obj["status"], t)
    }
}

/// The recorder of one object.
pub struct Recorder {
    samples: Arc<Mutex<Vec<Sample>>>,
    task: JoinHandle<()>,
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Recorder {
    pub fn start(api: Api<DynamicObject>, name: &str) -> Recorder {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let s = samples.clone();
        let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let task = tokio::spawn(async move {
            // With a backoff: once the API server is gone at the test's end, a watcher that
            // retries at once never yields, and the runtime's shutdown waits for it forever.
            let mut stream = watcher(api, cfg).default_backoff().boxed();
            while let Some(ev) = stream.next().await {
                let obj = match ev {
                    Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => o,
                    _ => continue,
                };
                let mut obj = serde_json::to_value(obj).unwrap_or_default();
                if let Some(m) = obj["metadata"].as_object_mut() {
                    m.remove("managedFields");
                }
                s.lock().unwrap().push(Sample {
                    at: Instant::now(),
                    obj,
                });
            }
        });
        Recorder { samples, task }
    }

    pub fn len(&self) -> usize {
        self.samples.lock().unwrap().len()
    }

    /// The samples from index `from` on.
    pub fn since(&self, from: usize) -> Vec<Sample> {
        self.samples.lock().unwrap()[from..].to_vec()
    }
}

/// isthmus' fields of an `Etcd`, by name, as JSON (`null` when absent).
pub fn isthmus_fields(obj: &Value) -> Vec<(&'static str, Value)> {
    let s = &obj["spec"];
    let e = &s["etcd"];
    vec![
        ("replicas", s["replicas"].clone()),
        ("memberNamePrefix", s["memberNamePrefix"].clone()),
        (
            "etcd.additionalAdvertisePeerURLs",
            e["additionalAdvertisePeerURLs"].clone(),
        ),
        (
            "etcd.bootstrapWithExistingCluster",
            e["bootstrapWithExistingCluster"].clone(),
        ),
        (
            "etcd.peerUrlTls.skipClientSANVerification",
            e["peerUrlTls"]["skipClientSANVerification"].clone(),
        ),
    ]
}

/// What changed in isthmus' fields from `before` to `after`: `name: old -> new` (`removed`
/// for a field that went), compact.
pub fn wiped(before: &Value, after: &Value) -> Vec<String> {
    isthmus_fields(before)
        .into_iter()
        .zip(isthmus_fields(after))
        .filter(|((_, b), (_, a))| a != b)
        .map(|((name, b), (_, a))| match (b, a) {
            (_, Value::Null) => format!("{name} removed"),
            (Value::Null, a) => format!("{name} set to {a}"),
            (Value::Array(_) | Value::Object(_), _) => format!("{name} changed"),
            (b, a) => format!("{name} {b} -> {a}"),
        })
        .collect()
}

/// Whether `obj` carries every field in `names` again (what `Deploy` removed; the controller
/// may write another value than before, e.g. one more advertised member).
pub fn present(obj: &Value, names: &[&str]) -> bool {
    let now = isthmus_fields(obj);
    names
        .iter()
        .all(|n| now.iter().any(|(k, v)| k == n && !v.is_null()))
}
