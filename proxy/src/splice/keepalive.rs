//! Upstream TCP keepalive, set by the splicer once a connection has lived [`DEFER`].
//!
//! Keepalive is for connections that sit idle for a minute and more (etcd's peer streams and
//! watches behind NAT and load balancers). Set at connect time it costs four `setsockopt`
//! calls on every upstream socket, also on the many connections that carry one exchange and
//! close within milliseconds (health checks, short clients): 4 of isthmus's 22 system calls
//! per proxied connection, where nginx makes 18 in all (BENCHMARKS.md, issue 28, round 11).
//! Deferred, a connection that ends within [`DEFER`] never pays them, and one that lives on
//! gets them then. The splicer takes a connection in within [`DEFER`] of its hand-over
//! (`Splicer::adopt`) and serves it [`DEFER`] later, give or take a [`TICK`]: its first probe
//! comes at most twice [`DEFER`] plus one [`TICK`] later than the configured `time`, which is
//! 60 s by default (a `time` under [`DEFER_FROM`] is set at once).
//! Accepted sockets are not concerned: they inherit keepalive from their listening socket.
//!
//! Young connections wait in one queue of table keys (4 bytes a connection: 10,000 connections
//! opened at once cost 40 KB until served), in cohorts of one [`TICK`] of adoption time.

use isthmus_config::KeepaliveConfig;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// How long a connection lives at least before its upstream socket gets keepalive.
pub const DEFER: Duration = Duration::from_secs(1);

/// The cohorts' width: connections adopted within one tick are served together, so a trickle
/// of new connections wakes a quiet splicer at most a few times a second for them.
pub const TICK: Duration = Duration::from_millis(250);

/// Ticks from a cohort's start to its service: [`DEFER`] after its last connection.
const WAIT: u64 = (DEFER.as_millis() / TICK.as_millis()) as u64 + 1;

/// A `time` under this is set at once: deferring would delay its first probe by too large a
/// share of it.
pub const DEFER_FROM: Duration = Duration::from_secs(10);

/// Whether a connection with keepalive `k` gets it only once it has lived [`DEFER`].
pub fn deferred(k: &KeepaliveConfig) -> bool {
    k.time.get() >= DEFER_FROM
}

/// Connections served per turn at most: 10,000 connections opened at once come due at once,
/// and their 40,000 system calls would otherwise hold up the splicer's other connections for
/// one long turn. The rest wait for the next turns, which come at once.
pub const BATCH: usize = 256;

/// Cohorts waiting at once in a steady trickle: one per tick of the deferral, and the next.
const COHORTS: usize = WAIT as usize + 1;

/// Distinct settings a tag can name; a connection with yet another gets its keepalive at once.
const KINDS: usize = 15;

/// Room for young connections allocated when the splicer starts and kept: 4,096 keys, 16 KB.
/// Grown from nothing during a burst of connections, the queue left 0.5–0.6 MiB more resident
/// per 10,000 connections opened at once; allocated up front, 0.1 (BENCHMARKS.md, issue 28,
/// round 11; most likely its allocations came to lie between the growing connection table's
/// and kept the allocator from reusing the table's old ones). A larger burst grows the queue,
/// and the excess is freed once it has emptied.
const KEEP: usize = 4096;

/// What a connection carries about its keepalive: [`Tag::NONE`] when it needs none (or has it
/// already), otherwise which of the splicer's distinct settings to set (the low 4 bits) and
/// the tick it was adopted in (the other 12, wrapping), which tells it apart from an earlier
/// connection that had the same table key. Two bytes, which fit in padding: the table entry
/// does not grow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tag(u16);

impl Tag {
    pub const NONE: Tag = Tag(0);

    fn new(kind: usize, tick: u64) -> Tag {
        // `kind` < `KINDS` = 15, so the low 4 bits are 1..=15 and never make a `NONE`.
        Tag(((tick & 0x0fff) as u16) << 4 | (kind as u16 + 1))
    }

    /// Whether this is the tag of a connection adopted in `tick` (that still waits).
    pub fn adopted_in(self, tick: u64) -> bool {
        self != Tag::NONE && self.0 >> 4 == (tick & 0x0fff) as u16
    }
}

/// The young connections whose upstream socket still waits for keepalive.
#[derive(Debug)]
pub struct Deferred {
    /// Ticks are counted from here.
    epoch: Instant,
    /// The distinct settings seen (at most [`KINDS`]): a tag whose low 4 bits are `n` stands
    /// for `kinds[n - 1]`. Upstream policies are few, and most share the default.
    kinds: Vec<KeepaliveConfig>,
    /// The young connections' table keys, oldest first.
    keys: VecDeque<u32>,
    /// The cohorts of `keys`, oldest first: the tick their connections were adopted in, and
    /// how many of the keys are theirs.
    cohorts: VecDeque<(u64, usize)>,
}

/// What to do with a new connection's keepalive.
#[derive(Debug, PartialEq, Eq)]
pub enum Plan {
    /// Nothing (the upstream has keepalive off).
    None,
    /// Set later: the entry carries this tag.
    Later(Tag),
    /// Set now: a `time` under [`DEFER_FROM`], more distinct settings than a tag names, or a
    /// table key beyond 32 bits.
    Now(KeepaliveConfig),
}

impl Deferred {
    pub fn new(epoch: Instant) -> Deferred {
        Deferred {
            epoch,
            kinds: Vec::new(),
            keys: VecDeque::with_capacity(KEEP),
            cohorts: VecDeque::with_capacity(COHORTS),
        }
    }

    fn tick(&self, now: Instant) -> u64 {
        (now.saturating_duration_since(self.epoch).as_millis() / TICK.as_millis()) as u64
    }

    /// Enlists the connection at `key`, adopted at `now`, for `keepalive`.
    pub fn enlist(&mut self, keepalive: Option<KeepaliveConfig>, key: usize, now: Instant) -> Plan {
        let Some(k) = keepalive else {
            return Plan::None;
        };
        let Ok(key) = u32::try_from(key) else {
            return Plan::Now(k);
        };
        if !deferred(&k) {
            return Plan::Now(k);
        }
        let kind = match self.kinds.iter().position(|&seen| seen == k) {
            Some(i) => i,
            None if self.kinds.len() < KINDS => {
                self.kinds.push(k);
                self.kinds.len() - 1
            }
            None => return Plan::Now(k),
        };
        let tick = self.tick(now);
        self.keys.push_back(key);
        match self.cohorts.back_mut() {
            Some((t, n)) if *t == tick => *n += 1,
            _ => self.cohorts.push_back((tick, 1)),
        }
        Plan::Later(Tag::new(kind, tick))
    }

    /// The next connection due by `now`, taken off its cohort: its table key and the tick it
    /// was adopted in. Set its keepalive only if the entry at that key carries a tag
    /// [`Tag::adopted_in`] that tick (the connection may have closed, and the key gone to a
    /// newer one).
    pub fn pop_due(&mut self, now: Instant) -> Option<(usize, u64)> {
        let &(tick, _) = self.cohorts.front()?;
        if self.tick(now) < tick + WAIT {
            return None;
        }
        let n = &mut self.cohorts.front_mut()?.1;
        *n -= 1;
        if *n == 0 {
            self.cohorts.pop_front();
        }
        let key = self.keys.pop_front()?;
        if self.keys.is_empty() && self.keys.capacity() > KEEP {
            self.keys.shrink_to(KEEP);
        }
        Some((key as usize, tick))
    }

    /// When the next cohort is due.
    pub fn next_due(&self) -> Option<Instant> {
        self.cohorts
            .front()
            .map(|&(tick, _)| self.epoch + TICK * u32::try_from(tick + WAIT).unwrap_or(u32::MAX))
    }

    /// The settings a tag stands for; `None` for [`Tag::NONE`].
    pub fn kind(&self, tag: Tag) -> Option<&KeepaliveConfig> {
        usize::from(tag.0 & 0x0f)
            .checked_sub(1)
            .and_then(|i| self.kinds.get(i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(secs: u64) -> KeepaliveConfig {
        KeepaliveConfig {
            time: isthmus_config::Duration::from_secs(secs),
            ..KeepaliveConfig::default()
        }
    }

    fn later(p: Plan) -> Tag {
        match p {
            Plan::Later(t) => t,
            other => panic!("not deferred: {other:?}"),
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// What the splicer does in a turn: `tags[key]` is what the table entry at `key` carries.
    fn serve(d: &mut Deferred, now: Instant, tags: &mut [Tag]) -> Vec<(usize, u64)> {
        let mut set = Vec::new();
        while let Some((key, tick)) = d.pop_due(now) {
            if tags[key].adopted_in(tick) {
                if let Some(k) = d.kind(tags[key]) {
                    set.push((key, k.time.get().as_secs()));
                }
                tags[key] = Tag::NONE;
            }
        }
        set.sort();
        set
    }

    #[test]
    fn a_connection_is_served_once_it_has_lived_the_deferral_and_only_while_open() {
        let t0 = Instant::now();
        let mut d = Deferred::new(t0);
        assert_eq!(d.enlist(None, 0, t0), Plan::None);
        let a = later(d.enlist(Some(k(60)), 1, t0 + ms(10)));
        let b = later(d.enlist(Some(k(90)), 2, t0 + ms(100)));
        let c = later(d.enlist(Some(k(60)), 3, t0 + ms(1100)));
        assert_eq!(d.kind(a), d.kind(c), "one kind per distinct setting");
        assert_ne!(d.kind(a), d.kind(b));
        assert_eq!(d.kind(Tag::NONE), None);
        // Key 2's connection closed before its turn.
        let mut tags = vec![Tag::NONE, a, Tag::NONE, c];
        assert_eq!(serve(&mut d, t0 + ms(999), &mut tags), vec![]);
        // The first cohort (ticks of 250 ms: adopted before t0 + 250 ms) is due 1 s after it.
        assert_eq!(d.next_due(), Some(t0 + ms(1250)));
        assert_eq!(serve(&mut d, t0 + ms(1250), &mut tags), vec![(1, 60)]);
        // Key 3, adopted at 1.1 s, is due at 2.25 s, not before it has lived 1 s.
        assert_eq!(d.next_due(), Some(t0 + ms(2250)));
        assert_eq!(serve(&mut d, t0 + ms(2100), &mut tags), vec![]);
        assert_eq!(serve(&mut d, t0 + ms(2250), &mut tags), vec![(3, 60)]);
        assert_eq!(d.next_due(), None);
    }

    #[test]
    fn a_reused_key_is_served_at_its_new_connections_time_not_the_old_ones() {
        let t0 = Instant::now();
        let mut d = Deferred::new(t0);
        let old = later(d.enlist(Some(k(60)), 0, t0));
        // The first connection at key 0 closed; a newer one took the key a tick later.
        let new = later(d.enlist(Some(k(60)), 0, t0 + ms(600)));
        assert_ne!(old, new);
        let mut tags = vec![new];
        assert_eq!(serve(&mut d, t0 + ms(1250), &mut tags), vec![]);
        assert_eq!(tags[0], new, "served on the closed connection's entry");
        assert_eq!(serve(&mut d, t0 + ms(1750), &mut tags), vec![(0, 60)]);
        assert_eq!(d.next_due(), None);
    }

    #[test]
    fn a_key_reused_within_a_tick_is_served_once() {
        let t0 = Instant::now();
        let mut d = Deferred::new(t0);
        later(d.enlist(Some(k(60)), 0, t0));
        let new = later(d.enlist(Some(k(60)), 0, t0 + ms(100)));
        let mut tags = vec![new];
        assert_eq!(serve(&mut d, t0 + ms(1250), &mut tags), vec![(0, 60)]);
    }

    #[test]
    fn a_short_time_or_past_15_settings_a_connection_gets_its_keepalive_at_once() {
        let t0 = Instant::now();
        let mut d = Deferred::new(t0);
        assert_eq!(d.enlist(Some(k(9)), 0, t0), Plan::Now(k(9)));
        for s in 10..25 {
            later(d.enlist(Some(k(s)), 0, t0));
        }
        assert_eq!(d.enlist(Some(k(1000)), 0, t0), Plan::Now(k(1000)));
        let ten = later(d.enlist(Some(k(10)), 0, t0));
        assert_eq!(d.kind(ten), Some(&k(10)));
        let last = later(d.enlist(Some(k(24)), 0, t0));
        assert_eq!(d.kind(last), Some(&k(24)));
    }

    #[test]
    fn ticks_wrap_without_ever_making_a_tag_none() {
        for tick in [0, 1, 4095, 4096, 8191, 1 << 40] {
            for kind in 0..KINDS {
                let t = Tag::new(kind, tick);
                assert_ne!(t, Tag::NONE);
                assert!(t.adopted_in(tick));
                assert!(!t.adopted_in(tick + 1));
            }
        }
        assert!(!Tag::NONE.adopted_in(0));
    }
}
