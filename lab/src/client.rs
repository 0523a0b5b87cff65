//! A kube-apiserver-like continuous client: writes and linearizable reads at a steady rate,
//! each request on its own task (a slow request never delays the schedule), every request
//! recorded with its start, latency and outcome.
//!
//! A request counts as failed if an error reaches the application after the client's own
//! retries, or if it takes more than [`FAIL_AFTER`]. The client's endpoints can be moved to
//! the destination as a kube-apiserver would be (new connection, traffic switched over).

use crate::clock::ms;
use crate::error::{Error, Result};
use etcd_client::{Client, ConnectOptions, GetOptions};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::time::Instant;

/// Over this, a request counts as failed even if it eventually succeeds.
pub const FAIL_AFTER: Duration = Duration::from_secs(5);

/// The key prefix of the client's writes.
pub const PREFIX: &str = "/registry/lab/";

/// What a request did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Write,
    Read,
}

/// One request as the application saw it.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    pub kind: Kind,
    /// Milliseconds since the lab started.
    pub start_ms: f64,
    pub latency_ms: f64,
    pub ok: bool,
    /// Attempts made (1 = no retry).
    pub attempts: u32,
    /// The last error seen (after retries if `ok` is false; absorbed by a retry otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Default)]
struct Shared {
    samples: Vec<Sample>,
    acknowledged: BTreeMap<String, String>,
    write_acks_ms: Vec<f64>,
}

/// The running client.
#[derive(Clone)]
pub struct Continuous {
    epoch: Instant,
    conn: Arc<RwLock<Client>>,
    shared: Arc<Mutex<Shared>>,
    stop: tokio::sync::watch::Sender<bool>,
    in_flight: Arc<std::sync::atomic::AtomicUsize>,
}

impl std::fmt::Debug for Continuous {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Continuous").finish_non_exhaustive()
    }
}

/// What the client recorded.
#[derive(Debug, Clone, Default)]
pub struct Recording {
    pub samples: Vec<Sample>,
    pub acknowledged: BTreeMap<String, String>,
    pub write_acks_ms: Vec<f64>,
}

async fn connect(endpoints: &[String]) -> Result<Client> {
    // Per-attempt timeout well under FAIL_AFTER so a retry still fits in the budget.
    let opts = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(1))
        .with_timeout(Duration::from_secs(2))
        .with_keep_alive(Duration::from_secs(1), Duration::from_secs(1));
    Client::connect(endpoints, Some(opts))
        .await
        .map_err(|e| Error::etcd(format!("client connect {endpoints:?}"), e))
}

impl Continuous {
    /// Starts writing and reading every `interval` against `endpoints`.
    pub async fn start(epoch: Instant, endpoints: &[String], interval: Duration) -> Result<Self> {
        let c = Self {
            epoch,
            conn: Arc::new(RwLock::new(connect(endpoints).await?)),
            shared: Arc::default(),
            stop: tokio::sync::watch::channel(false).0,
            in_flight: Arc::default(),
        };
        let me = c.clone();
        tokio::spawn(async move { me.run(interval).await });
        Ok(c)
    }

    /// Moves the client to new endpoints: new requests use them, in-flight ones finish.
    pub async fn move_to(&self, endpoints: &[String]) -> Result<()> {
        let fresh = connect(endpoints).await?;
        if let Ok(mut g) = self.conn.write() {
            *g = fresh;
        }
        Ok(())
    }

    /// Stops issuing requests, waits for in-flight ones, and returns the recording.
    pub async fn stop(&self) -> Recording {
        self.stop.send_replace(true);
        // In-flight requests end within FAIL_AFTER (each attempt is bounded by it).
        let deadline = Instant::now() + FAIL_AFTER + Duration::from_secs(2);
        while self.in_flight.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let g = self.shared.lock().map(|g| Recording {
            samples: g.samples.clone(),
            acknowledged: g.acknowledged.clone(),
            write_acks_ms: g.write_acks_ms.clone(),
        });
        g.unwrap_or_default()
    }

    /// Failed requests so far (for progress output).
    pub fn counts(&self) -> (usize, usize) {
        self.shared
            .lock()
            .map(|g| (g.samples.len(), g.samples.iter().filter(|s| !s.ok).count()))
            .unwrap_or_default()
    }

    async fn run(&self, interval: Duration) {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut stop = self.stop.subscribe();
        let mut seq: u64 = 0;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            seq += 1;
            let me = self.clone();
            // Counted here, not in the task, so `stop` cannot miss a request just spawned.
            self.in_flight.fetch_add(1, Ordering::SeqCst);
            if seq % 2 == 1 {
                tokio::spawn(async move {
                    me.write(seq).await;
                    me.in_flight.fetch_sub(1, Ordering::SeqCst);
                });
            } else {
                tokio::spawn(async move {
                    me.read().await;
                    me.in_flight.fetch_sub(1, Ordering::SeqCst);
                });
            }
        }
    }

    fn client(&self) -> Option<Client> {
        self.conn.read().ok().map(|g| g.clone())
    }

    async fn write(&self, seq: u64) {
        let key = format!("{PREFIX}{seq:010}");
        let value = format!(
            "value-{seq}-{}",
            seq.wrapping_mul(2_654_435_761) % 1_000_003
        );
        let (k, v) = (key.clone(), value.clone());
        let s = self
            .attempt(Kind::Write, move |mut c| {
                let (k, v) = (k.clone(), v.clone());
                async move { c.put(k, v, None).await.map(|_| ()) }
            })
            .await;
        if let Ok(mut g) = self.shared.lock() {
            if s.ok {
                g.acknowledged.insert(key, value);
                g.write_acks_ms.push(s.start_ms + s.latency_ms);
            }
            g.samples.push(s);
        }
    }

    async fn read(&self) {
        let s = self
            .attempt(Kind::Read, |mut c| async move {
                // Linearizable is etcd's default: the read goes through the leader's quorum.
                c.get(
                    PREFIX,
                    Some(GetOptions::new().with_prefix().with_count_only()),
                )
                .await
                .map(|_| ())
            })
            .await;
        if let Ok(mut g) = self.shared.lock() {
            g.samples.push(s);
        }
    }

    /// One application request: retried (as clientv3 does for unavailable endpoints) until it
    /// succeeds or the FAIL_AFTER budget is spent.
    async fn attempt<F, Fut>(&self, kind: Kind, op: F) -> Sample
    where
        F: Fn(Client) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<(), etcd_client::Error>>,
    {
        let start = Instant::now();
        let mut attempts = 0;
        let mut error = None;
        let ok = loop {
            attempts += 1;
            let Some(c) = self.client() else {
                break false;
            };
            let left = FAIL_AFTER.saturating_sub(start.elapsed());
            match tokio::time::timeout(left, op(c)).await {
                Ok(Ok(())) => break true,
                Ok(Err(e)) => error = Some(e.to_string()),
                Err(_) => {
                    error = Some("timed out".into());
                    break false;
                }
            }
            if start.elapsed() + Duration::from_millis(100) >= FAIL_AFTER {
                break false;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let latency = start.elapsed();
        Sample {
            kind,
            start_ms: ms(start.duration_since(self.epoch)),
            latency_ms: ms(latency),
            ok: ok && latency <= FAIL_AFTER,
            attempts,
            // Kept for retried successes too: it says what the retry absorbed.
            error,
        }
    }
}

/// Reads every key under [`PREFIX`] from `endpoints` and returns the acknowledged writes that
/// are missing or carry another value.
pub async fn missing(
    endpoints: &[String],
    acknowledged: &BTreeMap<String, String>,
) -> Result<Vec<String>> {
    let mut c = connect(endpoints).await?;
    let r = c
        .get(PREFIX, Some(GetOptions::new().with_prefix()))
        .await
        .map_err(|e| Error::etcd("read back", e))?;
    let mut found = BTreeMap::new();
    for kv in r.kvs() {
        found.insert(
            String::from_utf8_lossy(kv.key()).into_owned(),
            String::from_utf8_lossy(kv.value()).into_owned(),
        );
    }
    Ok(acknowledged
        .iter()
        .filter(|(k, v)| found.get(*k) != Some(*v))
        .map(|(k, _)| k.clone())
        .collect())
}
