//! Per-source admission of one listener: open connections per source (and per source and
//! upstream, for an upstream's `max_connections_per_source`), and the pending slots
//! (connections still sending their hello) per source and per listener, with eviction of the
//! oldest pending connection when a cap is reached.
//!
//! Memory is bounded by what is open: a source has an entry only while it has a connection
//! open (at most `max_connections` entries of ~80 bytes), and a pending connection one slot.
//! IPv6 sources count by their /64: one host usually owns a whole /64.

use isthmus_config::cidr::mask;
use prometheus_client::metrics::gauge::Gauge;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::oneshot;

/// The admission state of one listener, shared by all its accept loops.
#[derive(Debug, Default)]
pub struct Sources {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    next: u64,
    by_source: HashMap<IpAddr, Entry>,
    /// Pending connections in admission order: the first is the oldest.
    pending: BTreeMap<u64, Waiting>,
}

#[derive(Debug)]
struct Entry {
    /// Shared by this source's guards, so that a guard is one pointer (it sits in every
    /// spliced connection's table entry).
    tag: Arc<Tag>,
    open: usize,
    /// This source's pending connections, oldest first.
    pending: VecDeque<u64>,
    /// Of `open`, those to upstreams with a per-source cap, by upstream: the tag their guards
    /// share, and how many. A source reaches few upstreams: a short list.
    upstreams: Vec<(Arc<Tag>, usize)>,
}

#[derive(Debug)]
struct Waiting {
    source: IpAddr,
    evict: oneshot::Sender<()>,
}

/// The key a source is counted under: IPv4 (also IPv4-mapped) as is, IPv6 by its /64.
pub fn key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        v4 @ IpAddr::V4(_) => v4,
        v6 => mask(v6, 64),
    }
}

#[derive(Debug)]
struct Tag {
    sources: Arc<Sources>,
    source: IpAddr,
    /// The upstream the connection is counted for too ([`SourceGuard::route`]).
    upstream: Option<Box<str>>,
}

/// One open connection counted for its source (and, once routed, maybe for its source and
/// upstream); dropping it uncounts it. One pointer: it sits in every spliced connection's
/// table entry.
#[derive(Debug)]
pub struct SourceGuard(Arc<Tag>);

/// A pending slot; dropping it frees the slot (if it was not taken by an eviction).
#[derive(Debug)]
pub struct PendingSlot {
    sources: Arc<Sources>,
    source: IpAddr,
    seq: u64,
}

impl Sources {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Every update below is complete before the lock is released: a panic elsewhere
        // cannot leave the table half-changed.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts one more open connection of `source`, or `None` when it already has `max`.
    pub fn open(self: &Arc<Self>, source: IpAddr, max: Option<usize>) -> Option<SourceGuard> {
        let source = key(source);
        let mut st = self.lock();
        let entry = st.by_source.entry(source).or_insert_with(|| Entry {
            tag: Arc::new(Tag {
                sources: self.clone(),
                source,
                upstream: None,
            }),
            open: 0,
            pending: VecDeque::new(),
            upstreams: Vec::new(),
        });
        if max.is_some_and(|m| entry.open >= m) {
            return None;
        }
        entry.open += 1;
        Some(SourceGuard(entry.tag.clone()))
    }

    /// Takes a pending slot for `source`, which must hold a [`SourceGuard`] (its entry
    /// exists while it does). When the source
    /// already has `per_source` pending connections its oldest is evicted, else when the
    /// listener has `per_listener` the listener's oldest is. The receiver fires when this
    /// connection is evicted in turn.
    pub fn wait(
        self: &Arc<Self>,
        source: IpAddr,
        per_source: usize,
        per_listener: usize,
    ) -> (PendingSlot, oneshot::Receiver<()>) {
        let source = key(source);
        let (tx, rx) = oneshot::channel();
        let mut st = self.lock();
        let own = st.by_source.get(&source).map_or(0, |e| e.pending.len());
        let victim = if own >= per_source.max(1) {
            st.by_source
                .get_mut(&source)
                .and_then(|e| e.pending.pop_front())
        } else if st.pending.len() >= per_listener.max(1) {
            st.pending.first_key_value().map(|(seq, _)| *seq)
        } else {
            None
        };
        if let Some(seq) = victim {
            st.take(seq);
        }
        let seq = st.next;
        st.next += 1;
        st.pending.insert(seq, Waiting { source, evict: tx });
        if let Some(e) = st.by_source.get_mut(&source) {
            e.pending.push_back(seq);
        }
        drop(st);
        let slot = PendingSlot {
            sources: self.clone(),
            source,
            seq,
        };
        (slot, rx)
    }

    /// Pending connections of the listener.
    #[cfg(test)]
    pub fn pending(&self) -> usize {
        self.lock().pending.len()
    }

    /// Sources with a connection open.
    #[cfg(test)]
    pub fn tracked(&self) -> usize {
        self.lock().by_source.len()
    }
}

impl State {
    /// Removes pending slot `seq` and tells its connection to go.
    fn take(&mut self, seq: u64) {
        if let Some(w) = self.pending.remove(&seq) {
            if let Some(e) = self.by_source.get_mut(&w.source) {
                e.pending.retain(|s| *s != seq);
            }
            let _ = w.evict.send(());
        }
    }

    fn forget_if_unused(&mut self, source: IpAddr) {
        if self
            .by_source
            .get(&source)
            .is_some_and(|e| e.open == 0 && e.pending.is_empty())
        {
            self.by_source.remove(&source);
        }
    }
}

impl SourceGuard {
    /// Counts this connection also as one of its source's to `upstream`, unless the source
    /// has `max` open to it already through this listener: then returns `false` and nothing
    /// changes.
    pub fn route(&mut self, upstream: &str, max: usize) -> bool {
        let tag = self.0.clone();
        if tag.upstream.is_some() {
            return true;
        }
        let mut st = tag.sources.lock();
        let Some(e) = st.by_source.get_mut(&tag.source) else {
            return true;
        };
        let i = match e
            .upstreams
            .iter()
            .position(|(t, _)| t.upstream.as_deref() == Some(upstream))
        {
            Some(i) => i,
            None => {
                let counted = Tag {
                    sources: tag.sources.clone(),
                    source: tag.source,
                    upstream: Some(upstream.into()),
                };
                e.upstreams.push((Arc::new(counted), 0));
                e.upstreams.len() - 1
            }
        };
        let Some((counted, n)) = e.upstreams.get_mut(i) else {
            return true;
        };
        if *n >= max.max(1) {
            return false;
        }
        *n += 1;
        // The same connection, now counted for the upstream too: its `open` stays one.
        self.0 = counted.clone();
        true
    }
}

impl Drop for SourceGuard {
    fn drop(&mut self) {
        let Tag {
            sources,
            source,
            upstream,
        } = &*self.0;
        let mut st = sources.lock();
        if let Some(e) = st.by_source.get_mut(source) {
            e.open = e.open.saturating_sub(1);
            if upstream.is_some() {
                let mine = e
                    .upstreams
                    .iter()
                    .position(|(t, _)| Arc::ptr_eq(t, &self.0));
                if let Some(i) = mine {
                    let left = e.upstreams.get_mut(i).map_or(0, |(_, n)| {
                        *n = n.saturating_sub(1);
                        *n
                    });
                    if left == 0 {
                        e.upstreams.swap_remove(i);
                    }
                }
            }
        }
        st.forget_if_unused(*source);
    }
}

impl Drop for PendingSlot {
    fn drop(&mut self) {
        let mut st = self.sources.lock();
        if st.pending.remove(&self.seq).is_some() {
            if let Some(e) = st.by_source.get_mut(&self.source) {
                e.pending.retain(|s| *s != self.seq);
            }
        }
        st.forget_if_unused(self.source);
    }
}

/// Counts one open connection in `isthmus_proxy_active_connections{listener}` (and, once its
/// source is known, in that source's count) from creation until dropped, whether by the
/// intake task or, once spliced, by the splicer.
#[derive(Debug)]
pub struct ActiveGuard {
    gauge: Gauge,
    pub(crate) source: Option<SourceGuard>,
}

impl ActiveGuard {
    pub fn new(gauge: Gauge) -> Self {
        gauge.inc();
        ActiveGuard {
            gauge,
            source: None,
        }
    }
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}

impl ActiveGuard {
    /// Ties the source's count to the connection's lifetime, spliced or not.
    pub fn set_source(&mut self, guard: SourceGuard) {
        self.source = Some(guard);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn open_connections_per_source_are_capped_and_forgotten() {
        let s = Arc::new(Sources::default());
        let a1 = s.open(ip("10.0.0.1"), Some(2)).unwrap();
        let _a2 = s.open(ip("::ffff:10.0.0.1"), Some(2)).unwrap();
        assert!(s.open(ip("10.0.0.1"), Some(2)).is_none());
        let _b = s.open(ip("10.0.0.2"), Some(2)).unwrap();
        drop(a1);
        let _a3 = s.open(ip("10.0.0.1"), Some(2)).unwrap();
        assert_eq!(s.tracked(), 2);
        // One /64 is one source.
        let _c = s.open(ip("2001:db8::1"), Some(1)).unwrap();
        assert!(s.open(ip("2001:db8::ffff:2"), Some(1)).is_none());
        drop((_a2, _a3, _b, _c));
        assert_eq!(s.tracked(), 0);
    }

    #[test]
    fn connections_to_an_upstream_are_capped_per_source_and_forgotten() {
        let s = Arc::new(Sources::default());
        let mut a: Vec<SourceGuard> = (0..3)
            .map(|_| s.open(ip("10.0.0.1"), None).unwrap())
            .collect();
        assert!(a[0].route("vpn", 2));
        assert!(a[1].route("vpn", 2));
        assert!(
            !a[2].route("vpn", 2),
            "a third connection of the source to the upstream"
        );
        assert!(a[2].route("etcd", 2), "another upstream counts on its own");
        let mut b = s.open(ip("10.0.0.2"), None).unwrap();
        assert!(b.route("vpn", 2), "another source counts on its own");
        a.remove(0);
        let mut again = s.open(ip("10.0.0.1"), None).unwrap();
        assert!(again.route("vpn", 2), "a closed connection makes room");
        // Routed or not, each connection counts once for its source.
        assert!(s.open(ip("10.0.0.1"), Some(3)).is_none());
        drop((a, b, again));
        assert_eq!(s.tracked(), 0);
    }

    #[test]
    fn the_oldest_pending_connection_is_evicted() {
        let s = Arc::new(Sources::default());
        let _g = s.open(ip("10.0.0.1"), None).unwrap();
        let (a1, mut ra1) = s.wait(ip("10.0.0.1"), 2, 3);
        let (_a2, mut ra2) = s.wait(ip("10.0.0.1"), 2, 3);
        // The source is at its cap: its own oldest goes.
        let (_a3, mut ra3) = s.wait(ip("10.0.0.1"), 2, 3);
        assert!(ra1.try_recv().is_ok());
        assert!(ra2.try_recv().is_err() && ra3.try_recv().is_err());
        drop(a1);
        assert_eq!(s.pending(), 2);
        // Another source fills the listener: the listener's oldest (a2) goes.
        let _h = s.open(ip("10.0.0.2"), None).unwrap();
        let (_b1, mut rb1) = s.wait(ip("10.0.0.2"), 2, 3);
        assert!(ra2.try_recv().is_err());
        let (_b2, _rb2) = s.wait(ip("10.0.0.2"), 2, 3);
        assert!(ra2.try_recv().is_ok());
        assert!(rb1.try_recv().is_err());
        assert_eq!(s.pending(), 3);
    }
}
