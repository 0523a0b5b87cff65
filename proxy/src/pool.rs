//! The live state of upstreams and endpoints: open connections, load-balancing position and
//! outlier detection. It outlives config snapshots (a reload carries it over by name), so a
//! reload neither forgets an ejection nor resets connection counts.

use crate::dns::DnsEntry;
use crate::metrics::{EndpointLabels, Metrics, UpstreamLabels};
use isthmus_config::{LoadBalancing, OutlierDetection};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Where an endpoint points.
#[derive(Debug)]
pub enum Target {
    Addr(SocketAddr),
    Name(Arc<DnsEntry>),
}

/// One endpoint's state.
#[derive(Debug)]
pub struct Endpoint {
    /// As written in the configuration.
    pub label: String,
    pub target: Target,
    active: AtomicUsize,
    consecutive_failures: AtomicU32,
    ejections_in_a_row: AtomicU32,
    ejected_until: Mutex<Option<Instant>>,
    ejections: Counter,
    ejected: Gauge,
}

impl Endpoint {
    pub fn new(upstream: &str, label: &str, target: Target, m: &Metrics) -> Self {
        let labels = EndpointLabels {
            upstream: upstream.to_owned(),
            endpoint: label.to_owned(),
        };
        Self {
            label: label.to_owned(),
            target,
            active: AtomicUsize::new(0),
            consecutive_failures: AtomicU32::new(0),
            ejections_in_a_row: AtomicU32::new(0),
            ejected_until: Mutex::new(None),
            ejections: m.ejections.get_or_create_owned(&labels),
            ejected: m.ejected.get_or_create_owned(&labels),
        }
    }

    /// Open connections through this proxy.
    pub fn active(&self) -> usize {
        self.active.load(Ordering::Relaxed)
    }

    /// True while an ejection lasts; clears the ejection (readmits) once it has expired.
    pub fn is_ejected(&self, now: Instant) -> bool {
        let mut until = lock(&self.ejected_until);
        match *until {
            Some(t) if t > now => true,
            Some(_) => {
                *until = None;
                self.ejected.set(0);
                false
            }
            None => false,
        }
    }

    fn record_success(&self) {
        self.consecutive_failures.store(0, Ordering::Relaxed);
        self.ejections_in_a_row.store(0, Ordering::Relaxed);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One upstream's state.
#[derive(Debug)]
pub struct Pool {
    pub name: String,
    pub endpoints: Vec<Arc<Endpoint>>,
    active: Arc<AtomicUsize>,
    next: AtomicUsize,
    active_gauge: Gauge,
}

impl Pool {
    /// A pool over `endpoints`; `carried` is the previous snapshot's open-connection count
    /// of the same upstream, so that `max_connections` holds across reloads.
    pub fn new(
        name: &str,
        endpoints: Vec<Arc<Endpoint>>,
        carried: Option<Arc<AtomicUsize>>,
        m: &Metrics,
    ) -> Self {
        Self {
            name: name.to_owned(),
            endpoints,
            active: carried.unwrap_or_default(),
            next: AtomicUsize::new(0),
            active_gauge: m.upstream_active.get_or_create_owned(&UpstreamLabels {
                upstream: name.to_owned(),
            }),
        }
    }

    /// The shared open-connection count, to carry into the next snapshot.
    pub fn active_counter(&self) -> Arc<AtomicUsize> {
        self.active.clone()
    }

    /// Reserves a connection slot, or `None` when `max` are open.
    pub fn reserve(self: &Arc<Self>, max: Option<usize>) -> Option<Slot> {
        let limit = max.unwrap_or(usize::MAX);
        let ok = self
            .active
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < limit).then_some(n + 1)
            })
            .is_ok();
        ok.then(|| {
            self.active_gauge.inc();
            Slot {
                pool: self.clone(),
                endpoint: None,
            }
        })
    }

    /// Endpoint indices in the order to try them: by the balancing policy, ejected ones
    /// left out (unless every endpoint is ejected: then all are tried rather than none),
    /// at most `attempts`.
    pub fn order(&self, policy: LoadBalancing, attempts: Option<u32>) -> Vec<usize> {
        let n = self.endpoints.len();
        let mut order: Vec<usize> = (0..n).collect();
        match policy {
            LoadBalancing::FirstAvailable => {}
            LoadBalancing::RoundRobin => {
                let start = self.next.fetch_add(1, Ordering::Relaxed) % n.max(1);
                order.rotate_left(start);
            }
            LoadBalancing::LeastConnections => {
                // Stable: ties keep configuration order.
                order.sort_by_key(|&i| self.endpoints[i].active());
            }
            LoadBalancing::RandomTwoChoices if n >= 2 => {
                let a = random_below(n);
                let b = (a + 1 + random_below(n - 1)) % n;
                let pick = if self.endpoints[b].active() < self.endpoints[a].active() {
                    b
                } else {
                    a
                };
                order.rotate_left(pick);
            }
            LoadBalancing::RandomTwoChoices => {}
        }
        let now = Instant::now();
        let healthy: Vec<usize> = order
            .iter()
            .copied()
            .filter(|&i| !self.endpoints[i].is_ejected(now))
            .collect();
        let mut chosen = if healthy.is_empty() { order } else { healthy };
        if let Some(a) = attempts {
            chosen.truncate(a as usize);
        }
        chosen
    }

    /// Records a failed connect; ejects the endpoint when outlier detection says so.
    pub fn record_failure(&self, index: usize, od: &OutlierDetection) {
        let Some(ep) = self.endpoints.get(index) else {
            return;
        };
        let failures = ep.consecutive_failures.fetch_add(1, Ordering::Relaxed) + 1;
        if od.consecutive_failures == 0 || failures < od.consecutive_failures {
            return;
        }
        let now = Instant::now();
        let ejected_now = self.endpoints.iter().filter(|e| e.is_ejected(now)).count();
        let allowed = (self.endpoints.len() * od.max_ejection_percent as usize / 100).max(1);
        if od.max_ejection_percent == 0 || ejected_now >= allowed || ep.is_ejected(now) {
            return;
        }
        let times = ep.ejections_in_a_row.fetch_add(1, Ordering::Relaxed) + 1;
        let duration = od.base_ejection_time.get().saturating_mul(times);
        *lock(&ep.ejected_until) = Some(now + duration);
        ep.consecutive_failures.store(0, Ordering::Relaxed);
        ep.ejections.inc();
        ep.ejected.set(1);
        tracing::warn!(upstream = %self.name, endpoint = %ep.label, ?duration, "endpoint ejected");
    }
}

/// A reserved connection slot of a pool, and once connected, of an endpoint. Released on drop.
#[derive(Debug)]
pub struct Slot {
    pool: Arc<Pool>,
    endpoint: Option<Arc<Endpoint>>,
}

impl Slot {
    /// Marks the connection as established to endpoint `index`.
    pub fn connected(&mut self, index: usize) {
        if let Some(ep) = self.pool.endpoints.get(index) {
            ep.record_success();
            ep.active.fetch_add(1, Ordering::Relaxed);
            self.endpoint = Some(ep.clone());
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(ep) = &self.endpoint {
            ep.active.fetch_sub(1, Ordering::Relaxed);
        }
        self.pool.active.fetch_sub(1, Ordering::AcqRel);
        self.pool.active_gauge.dec();
    }
}

/// A uniformly distributed index below `n` (n ≥ 1), from std's per-process random SipHash
/// keys: good enough to spread load, and no extra dependency.
fn random_below(n: usize) -> usize {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_usize(n);
    (h.finish() % n.max(1) as u64) as usize
}

/// How long to wait for a name's first resolution before giving up on that endpoint.
pub const FIRST_RESOLUTION_PATIENCE: Duration = Duration::from_secs(5);
