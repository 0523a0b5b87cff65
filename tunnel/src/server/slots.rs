//! The agents listener's handshake slots: every connection holds one from accept until its
//! TLS handshake is over. The table never refuses a newcomer; it makes room by closing a
//! handshake already in progress:
//!
//! - a source at `per_source` handshakes loses its own oldest;
//! - a full table loses the oldest handshake of the source that holds the most slots.
//!
//! So a flood from one address only ever closes its own connections, and a flood from many
//! addresses closes the flooders' before an agent's: an agent holds one or two slots during
//! its ~2 round trips, a flooder as many as it can. Only more sources than slots, each with
//! a single handshake younger than the agent's, could push the agent out.
//!
//! Sources are IP addresses; IPv6 counts by /64 (one host usually owns a whole /64).

use isthmus_config::cidr::mask;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::oneshot;

/// The handshake slots of one listener.
#[derive(Debug)]
pub(crate) struct Slots {
    max: usize,
    per_source: usize,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    next: u64,
    /// Each source's handshakes, oldest first.
    by_source: HashMap<IpAddr, VecDeque<u64>>,
    /// Every handshake in admission order: the first is the oldest.
    open: BTreeMap<u64, (IpAddr, oneshot::Sender<()>)>,
}

/// One handshake's slot; dropping it frees the slot (if an eviction has not taken it).
#[derive(Debug)]
pub(crate) struct Slot {
    slots: Arc<Slots>,
    source: IpAddr,
    seq: u64,
}

/// The key a source is counted under: IPv4 (also IPv4-mapped) as is, IPv6 by its /64.
fn key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        v4 @ IpAddr::V4(_) => v4,
        v6 => mask(v6, 64),
    }
}

impl Slots {
    /// A table of `max` slots, at most `per_source` for one source (both at least 1).
    pub(crate) fn new(max: usize, per_source: usize) -> Arc<Self> {
        Arc::new(Self {
            max: max.max(1),
            per_source: per_source.max(1),
            state: Mutex::default(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every update is complete before the lock is released.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes a slot for a handshake from `source`, closing another handshake if there is no
    /// room (see the module). The receiver fires when this one is closed in turn.
    pub(crate) fn admit(self: &Arc<Self>, source: IpAddr) -> (Slot, oneshot::Receiver<()>) {
        let source = key(source);
        let (tx, rx) = oneshot::channel();
        let mut st = self.lock();
        let own = st.by_source.get(&source).map_or(0, VecDeque::len);
        let victim = if own >= self.per_source {
            st.by_source.get(&source).and_then(|q| q.front().copied())
        } else if st.open.len() >= self.max {
            st.heaviest_oldest()
        } else {
            None
        };
        if let Some(seq) = victim {
            st.evict(seq);
        }
        let seq = st.next;
        st.next += 1;
        st.open.insert(seq, (source, tx));
        st.by_source.entry(source).or_default().push_back(seq);
        drop(st);
        let slot = Slot {
            slots: self.clone(),
            source,
            seq,
        };
        (slot, rx)
    }

    /// Handshakes in progress.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().open.len()
    }
}

impl State {
    /// The oldest handshake of the source with the most; of equals, the older one.
    fn heaviest_oldest(&self) -> Option<u64> {
        self.by_source
            .values()
            .filter_map(|q| Some((q.len(), std::cmp::Reverse(*q.front()?))))
            .max()
            .map(|(_, std::cmp::Reverse(seq))| seq)
    }

    /// Removes handshake `seq` and tells its connection to close.
    fn evict(&mut self, seq: u64) {
        if let Some((source, closed)) = self.open.remove(&seq) {
            self.forget(source, seq);
            let _ = closed.send(());
        }
    }

    fn forget(&mut self, source: IpAddr, seq: u64) {
        if let Some(q) = self.by_source.get_mut(&source) {
            q.retain(|s| *s != seq);
            if q.is_empty() {
                self.by_source.remove(&source);
            }
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut st = self.slots.lock();
        if st.open.remove(&self.seq).is_some() {
            st.forget(self.source, self.seq);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_source_at_its_share_loses_its_own_oldest() {
        let t = Slots::new(10, 2);
        let (_a1, mut r1) = t.admit(ip("10.0.0.1"));
        let (_a2, mut r2) = t.admit(ip("::ffff:10.0.0.1"));
        let (_b, mut rb) = t.admit(ip("10.0.0.2"));
        let (_a3, mut r3) = t.admit(ip("10.0.0.1"));
        assert!(r1.try_recv().is_ok());
        assert!(r2.try_recv().is_err() && r3.try_recv().is_err() && rb.try_recv().is_err());
        assert_eq!(t.len(), 3);
        // One /64 is one source.
        let (_c1, mut rc1) = t.admit(ip("2001:db8::1"));
        let (_c2, _) = t.admit(ip("2001:db8::ffff:1"));
        let (_c3, _) = t.admit(ip("2001:db8::2"));
        assert!(rc1.try_recv().is_ok());
    }

    #[test]
    fn a_full_table_loses_the_heaviest_sources_oldest() {
        let t = Slots::new(4, 3);
        // The agent's handshake is the oldest of all.
        let (_agent, mut agent) = t.admit(ip("192.0.2.1"));
        let (_f1, mut f1) = t.admit(ip("10.0.0.1"));
        let (_f2, mut f2) = t.admit(ip("10.0.0.1"));
        let (_g1, mut g1) = t.admit(ip("10.0.0.2"));
        // Full: 10.0.0.1 holds the most, its oldest goes.
        let (_g2, mut g2) = t.admit(ip("10.0.0.2"));
        assert!(f1.try_recv().is_ok());
        // Now 10.0.0.1 and 10.0.0.2 hold one and two: 10.0.0.2's oldest goes.
        let (_h, _) = t.admit(ip("10.0.0.3"));
        assert!(g1.try_recv().is_ok());
        // Every source holds one: the oldest of all goes, which is finally the agent's.
        assert!(agent.try_recv().is_err() && f2.try_recv().is_err() && g2.try_recv().is_err());
        let (_i, _) = t.admit(ip("10.0.0.4"));
        assert!(agent.try_recv().is_ok());
        assert_eq!(t.len(), 4);
    }

    #[test]
    fn finished_handshakes_free_their_slots() {
        let t = Slots::new(2, 2);
        let (a, _) = t.admit(ip("10.0.0.1"));
        let (b, mut rb) = t.admit(ip("10.0.0.1"));
        drop(a);
        let (_c, _) = t.admit(ip("10.0.0.2"));
        assert!(rb.try_recv().is_err());
        drop(b);
        assert_eq!(t.len(), 1);
        assert_eq!(t.lock().by_source.len(), 1);
    }
}
