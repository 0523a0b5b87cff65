//! A watch on the load's namespace from start to end, through the shoot API's DNS name: when
//! its kube-apiserver goes away (the source's, after the DNS move) it reconnects to wherever
//! the name points, from the last resourceVersion it saw, as a reflector does. Every event is
//! recorded; resourceVersions must only grow. A `410 Gone` (the resourceVersion fell out of the
//! watch cache) forces a relist: counted, and what the relist showed is kept so the final check
//! can tell a write the watch skipped from a write it never could have seen.

use super::dns::Dns;
use super::load::{rv, NAMESPACE};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Server-side timeout of one watch request, in seconds.
const WATCH_TIMEOUT_S: u32 = 10;

/// What the watch saw.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    /// `(object, resourceVersion)` of every ADDED/MODIFIED event.
    pub events: HashSet<(String, u64)>,
    pub event_count: usize,
    /// Events whose resourceVersion was not above the previous one.
    pub out_of_order: usize,
    /// Watch connections after the first (a kube-apiserver went away, a timeout).
    pub reconnects: usize,
    /// `410 Gone` answers, each followed by a relist.
    pub gone: usize,
    /// Object → resourceVersion as the relists showed them.
    pub relisted: BTreeMap<String, u64>,
}

/// The running watch.
#[derive(Debug)]
pub struct Watch {
    stop: CancellationToken,
    task: JoinHandle<()>,
    seen: Arc<Mutex<Seen>>,
    last: Arc<AtomicU64>,
    /// Dropped without `stop_after` (a failed run): the watch stops too.
    _guard: tokio_util::sync::DropGuard,
}

impl Watch {
    /// Lists the namespace and watches from the list's resourceVersion.
    pub async fn start(dns: Dns) -> Result<Self, kube::Error> {
        let (client, _) = dns.resolve();
        let list = Api::<ConfigMap>::namespaced(client, NAMESPACE)
            .list(&ListParams::default())
            .await?;
        let from = list
            .metadata
            .resource_version
            .as_deref()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let stop = CancellationToken::new();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let last = Arc::new(AtomicU64::new(from));
        let task = tokio::spawn(run(dns, stop.clone(), seen.clone(), last.clone()));
        let _guard = stop.clone().drop_guard();
        Ok(Self {
            stop,
            task,
            seen,
            last,
            _guard,
        })
    }

    /// The newest resourceVersion the watch has seen (events and bookmarks).
    pub fn last_rv(&self) -> u64 {
        self.last.load(Ordering::Relaxed)
    }

    /// Waits (up to `budget`) until the watch has caught up with `rv`, then stops it.
    pub async fn stop_after(self, rv: u64, budget: Duration) -> Seen {
        let deadline = tokio::time::Instant::now() + budget;
        while self.last_rv() < rv && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.stop.cancel();
        let _ = self.task.await;
        let seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        seen.clone()
    }
}

async fn run(dns: Dns, stop: CancellationToken, seen: Arc<Mutex<Seen>>, last: Arc<AtomicU64>) {
    let mut first = true;
    while !stop.is_cancelled() {
        if !first {
            seen.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .reconnects += 1;
        }
        first = false;
        let (client, _) = dns.resolve();
        let api = Api::<ConfigMap>::namespaced(client, NAMESPACE);
        let from = last.load(Ordering::Relaxed).to_string();
        // Bookmarks are on by default: they keep `last` fresh between writes. A short server
        // timeout (reflectors use 5–10 min) so that a stopping kube-apiserver, which waits for
        // open watch connections, is not held for long; every expiry is a counted reconnect.
        let params = WatchParams::default().timeout(WATCH_TIMEOUT_S);
        let stream = match api.watch(&params, &from).await {
            Ok(s) => s,
            Err(_) => {
                // The name points at a kube-apiserver that is not there (yet): try again.
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_millis(100)) => continue,
                }
            }
        };
        let mut stream = std::pin::pin!(stream.into_stream());
        loop {
            let next = tokio::select! {
                _ = stop.cancelled() => return,
                n = stream.next() => n,
            };
            let ev = match next {
                Some(Ok(ev)) => ev,
                // The connection ended (timeout, server gone): reconnect from `last`.
                Some(Err(_)) | None => break,
            };
            match ev {
                WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => {
                    let v = rv(&o);
                    let mut s = seen.lock().unwrap_or_else(PoisonError::into_inner);
                    if v <= last.load(Ordering::Relaxed) {
                        s.out_of_order += 1;
                    }
                    s.event_count += 1;
                    s.events.insert((o.metadata.name.unwrap_or_default(), v));
                    last.fetch_max(v, Ordering::Relaxed);
                }
                WatchEvent::Bookmark(b) => {
                    if let Ok(v) = b.metadata.resource_version.parse::<u64>() {
                        last.fetch_max(v, Ordering::Relaxed);
                    }
                }
                WatchEvent::Error(e) if e.code == 410 => {
                    seen.lock().unwrap_or_else(PoisonError::into_inner).gone += 1;
                    relist(&api, &seen, &last).await;
                    break;
                }
                WatchEvent::Error(_) => break,
            }
        }
    }
}

/// After a `410 Gone`: list, keep what it shows, watch on from its resourceVersion.
async fn relist(api: &Api<ConfigMap>, seen: &Mutex<Seen>, last: &AtomicU64) {
    let Ok(list) = api.list(&ListParams::default()).await else {
        return;
    };
    let mut s = seen.lock().unwrap_or_else(PoisonError::into_inner);
    for o in &list.items {
        if let Some(name) = &o.metadata.name {
            s.relisted.insert(name.clone(), rv(o));
        }
    }
    if let Some(v) = list
        .metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse::<u64>().ok())
    {
        last.store(v, Ordering::Relaxed);
    }
}
