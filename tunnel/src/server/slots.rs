//! The agents listener's handshake slots: every connection holds one from accept until its
//! TLS handshake is over. The table never refuses a newcomer; it makes room by closing a
//! handshake already in progress:
//!
//! - a source at `per_source` handshakes loses its own oldest;
//! - a full table loses a handshake of the *stranger* source that holds the most slots (one
//!   of them at random when several hold as many), its oldest.
//!
//! A source is *known* once a handshake from it has completed (a certificate of the agents'
//! CA, with an allowed name): the agent's address, behind the seed's proxies the one their
//! PROXY v2 header names. Known sources share a reserve of `max / 4` slots that strangers
//! never take from them: a handshake of a known source is closed only for a newer one of its
//! own, or of another known source once the reserve is full. So a flood from any number of
//! addresses cannot close the handshake of an agent that has connected before — not even a
//! far agent's, whose handshake takes a round trip during which a fast flood would otherwise
//! recycle every slot (issue 47: 300 addresses at 1,000/s left an agent 300 ms away 0 of
//! 40 handshakes when the oldest handshake went first). A source never seen competes with the
//! strangers; picking among them at random rather than the oldest first gives a far agent a
//! chance there too (oldest-first closes every handshake that outlives `max` arrivals).
//!
//! Sources are IP addresses; IPv6 counts by /64 (one host usually owns a whole /64).

use isthmus_config::cidr::mask;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::hash::BuildHasher;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::oneshot;

/// Known sources remembered (the least recently successful is forgotten first): a shoot's
/// agents come from a few addresses; the bound keeps the table small whoever holds a
/// certificate.
const KNOWN_MAX: usize = 64;

/// The handshake slots of one listener.
#[derive(Debug)]
pub(crate) struct Slots {
    max: usize,
    per_source: usize,
    /// Slots of known sources that strangers cannot take.
    reserve: usize,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    next: u64,
    /// Each source's handshakes, oldest first.
    by_source: HashMap<IpAddr, VecDeque<u64>>,
    /// Every handshake in admission order: the first is the oldest.
    open: BTreeMap<u64, (IpAddr, oneshot::Sender<()>)>,
    /// Sources with a completed handshake, and the sequence number of their latest.
    known: HashMap<IpAddr, u64>,
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
        let max = max.max(1);
        Arc::new(Self {
            max,
            per_source: per_source.max(1),
            reserve: max / 4,
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
        let known = st.known.contains_key(&source);
        let victim = if own >= self.per_source {
            st.by_source.get(&source).and_then(|q| q.front().copied())
        } else if st.open.len() >= self.max {
            // A known newcomer takes from the strangers until the reserve is full, then from
            // the known; a stranger takes from the strangers (from the known only when none
            // is left, which takes known sources holding more than `max - reserve`).
            let from_known = known && st.known_open() >= self.reserve;
            st.heaviest(from_known).or_else(|| st.heaviest(!from_known))
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
    /// Handshakes in progress from known sources.
    fn known_open(&self) -> usize {
        let known = &self.known;
        self.by_source
            .iter()
            .filter(|(s, _)| known.contains_key(*s))
            .map(|(_, q)| q.len())
            .sum()
    }

    /// The oldest handshake of the known (or stranger) source holding the most slots; of
    /// several holding as many, one at random.
    fn heaviest(&self, known: bool) -> Option<u64> {
        let mine = || {
            self.by_source
                .iter()
                .filter(move |(s, _)| self.known.contains_key(*s) == known)
                .map(|(_, q)| q)
        };
        let most = mine().map(VecDeque::len).max()?;
        let ties = mine().filter(|q| q.len() == most).count();
        // A fresh `RandomState` is randomly keyed: no RNG dependency needed.
        let r = std::collections::hash_map::RandomState::new().hash_one(self.next);
        let pick = usize::try_from(r % ties as u64).unwrap_or(0);
        mine()
            .filter(|q| q.len() == most)
            .nth(pick)
            .and_then(|q| q.front().copied())
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

impl Slot {
    /// The handshake completed: its source is known from now on (see the module).
    pub(crate) fn completed(self) {
        let mut st = self.slots.lock();
        st.known.insert(self.source, self.seq);
        if st.known.len() > KNOWN_MAX {
            let stalest = st
                .known
                .iter()
                .min_by_key(|(_, seq)| **seq)
                .map(|(s, _)| *s);
            if let Some(s) = stalest {
                st.known.remove(&s);
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
mod tests;
