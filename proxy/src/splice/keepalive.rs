//! Upstream TCP keepalive, set by the splicer once a connection has lived [`DEFER`].
//!
//! Keepalive is for connections that sit idle for a minute and more (etcd's peer streams and
//! watches behind NAT and load balancers). Set at connect time it costs four `setsockopt`
//! calls on every upstream socket, also on the many connections that carry one exchange and
//! close within milliseconds (health checks, short clients): 4 of isthmus's 22 system calls
//! per proxied connection, where nginx makes 18 in all (BENCHMARKS.md, issue 28, round 11).
//! Deferred, a connection that ends within [`DEFER`] never pays them, and one that lives on
//! gets them then: its first probe comes at most [`DEFER`] (plus [`SLACK`]) later than the
//! configured `time`, which is 60 s by default (a `time` under [`DEFER_FROM`] is set at once).
//! Accepted sockets are not concerned: they inherit keepalive from their listening socket.

use isthmus_config::KeepaliveConfig;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// How long a connection lives before its upstream socket gets keepalive.
pub const DEFER: Duration = Duration::from_secs(1);

/// A `time` under this is set at once: deferring would delay its first probe by too large a
/// share of it.
pub const DEFER_FROM: Duration = Duration::from_secs(10);

/// Connections due within this much of the first are served in the same turn, so a trickle
/// of new connections wakes a quiet splicer at most a few times a second for them.
pub const SLACK: Duration = Duration::from_millis(250);

/// Distinct settings a tag can name; a connection with yet another gets its keepalive at once.
const KINDS: usize = 15;

/// Queue room kept once the queue has emptied: a burst of connections does not leave its
/// allocation behind.
const KEEP: usize = 64;

/// What a connection carries about its keepalive: [`Tag::NONE`] when it needs none (or has
/// it already), otherwise which of the splicer's distinct settings to set (the low 4 bits)
/// and a generation (the other 12) that tells the connection apart from an earlier one that
/// had the same table key. Two bytes, which fit in padding: the table entry does not grow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tag(u16);

impl Tag {
    pub const NONE: Tag = Tag(0);
}

/// The young connections whose upstream socket still waits for keepalive.
#[derive(Debug, Default)]
pub struct Deferred {
    /// The distinct settings seen (at most [`KINDS`]): a tag whose low 4 bits are `n` stands
    /// for `kinds[n - 1]`. Upstream policies are few, and most share the default.
    kinds: Vec<KeepaliveConfig>,
    /// When each is due, its table key and its tag, oldest first.
    due: VecDeque<(Instant, usize, Tag)>,
    /// The last generation given (12 bits, wrapping: a connection that took over a key from
    /// one enlisted a multiple of 4096 connections earlier may get its keepalive early, which
    /// costs only the system calls this saves elsewhere).
    gen: u16,
}

/// What to do with a new connection's keepalive.
#[derive(Debug, PartialEq, Eq)]
pub enum Plan {
    /// Nothing (the upstream has keepalive off).
    None,
    /// Set later: the entry carries this tag.
    Later(Tag),
    /// Set now: a `time` under [`DEFER_FROM`], or more distinct settings than a tag names.
    Now(KeepaliveConfig),
}

impl Deferred {
    /// Enlists the connection at `key`, adopted at `now`, for `keepalive`.
    pub fn enlist(&mut self, keepalive: Option<KeepaliveConfig>, key: usize, now: Instant) -> Plan {
        let Some(k) = keepalive else {
            return Plan::None;
        };
        if k.time.get() < DEFER_FROM {
            return Plan::Now(k);
        }
        let index = match self.kinds.iter().position(|&seen| seen == k) {
            Some(i) => i,
            None if self.kinds.len() < KINDS => {
                self.kinds.push(k);
                self.kinds.len() - 1
            }
            None => return Plan::Now(k),
        };
        self.gen = self.gen.wrapping_add(1) & 0x0fff;
        // `index + 1` is 1..=15: there are at most `KINDS` kinds.
        let tag = Tag(self.gen << 4 | (index as u16 + 1));
        self.due.push_back((now + DEFER, key, tag));
        Plan::Later(tag)
    }

    /// The next connection due by `now` (or within [`SLACK`] after it), taken off the queue:
    /// its table key and the tag it was given. Set its keepalive only if the entry at that key
    /// still carries that tag (the connection may have closed, and the key gone to another).
    pub fn pop_due(&mut self, now: Instant) -> Option<(usize, Tag)> {
        match self.due.front() {
            Some(&(at, key, tag)) if at <= now + SLACK => {
                self.due.pop_front();
                Some((key, tag))
            }
            Some(_) => None,
            None => {
                if self.due.capacity() > KEEP {
                    self.due.shrink_to(KEEP);
                }
                None
            }
        }
    }

    /// When the next connection is due.
    pub fn next_due(&self) -> Option<Instant> {
        self.due.front().map(|&(at, _, _)| at)
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

    /// What the splicer does in a turn: `tags[key]` is what the table entry at `key` carries.
    fn serve(d: &mut Deferred, now: Instant, tags: &mut [Tag]) -> Vec<(usize, u64)> {
        let mut set = Vec::new();
        while let Some((key, tag)) = d.pop_due(now) {
            if tags[key] == tag {
                tags[key] = Tag::NONE;
                if let Some(k) = d.kind(tag) {
                    set.push((key, k.time.get().as_secs()));
                }
            }
        }
        set
    }

    #[test]
    fn a_connection_is_served_once_after_the_deferral_and_only_while_open() {
        let mut d = Deferred::default();
        let t0 = Instant::now();
        assert_eq!(d.enlist(None, 0, t0), Plan::None);
        let a = later(d.enlist(Some(k(60)), 1, t0));
        let b = later(d.enlist(Some(k(90)), 2, t0 + Duration::from_millis(100)));
        let c = later(d.enlist(Some(k(60)), 3, t0 + DEFER));
        assert_eq!(d.kind(a), d.kind(c), "one kind per distinct setting");
        assert_ne!(d.kind(a), d.kind(b));
        assert_eq!(d.kind(Tag::NONE), None);
        // Key 2's connection closed before its turn.
        let mut tags = vec![Tag::NONE, a, Tag::NONE, c];
        assert_eq!(serve(&mut d, t0, &mut tags), vec![]);
        assert_eq!(d.next_due(), Some(t0 + DEFER));
        // Key 1 is due at t0 + 1 s; key 2, within the slack after it, is taken in the same
        // turn (and skipped: closed); key 3 is not due yet.
        assert_eq!(serve(&mut d, t0 + DEFER, &mut tags), vec![(1, 60)]);
        assert_eq!(d.next_due(), Some(t0 + DEFER + DEFER));
        assert_eq!(serve(&mut d, t0 + DEFER + DEFER, &mut tags), vec![(3, 60)]);
        assert_eq!(d.next_due(), None);
    }

    #[test]
    fn a_reused_key_is_served_at_its_new_connections_time_not_the_old_ones() {
        let mut d = Deferred::default();
        let t0 = Instant::now();
        let old = later(d.enlist(Some(k(60)), 0, t0));
        // The first connection at key 0 closed; a newer one took the key.
        let new = later(d.enlist(Some(k(60)), 0, t0 + Duration::from_millis(600)));
        assert_ne!(old, new);
        let mut tags = vec![new];
        assert_eq!(serve(&mut d, t0 + DEFER, &mut tags), vec![]);
        assert_eq!(tags[0], new, "served on the closed connection's entry");
        assert_eq!(
            serve(&mut d, t0 + Duration::from_millis(600) + DEFER, &mut tags),
            vec![(0, 60)]
        );
        assert_eq!(d.next_due(), None);
    }

    #[test]
    fn a_short_time_or_past_15_settings_a_connection_gets_its_keepalive_at_once() {
        let mut d = Deferred::default();
        let t0 = Instant::now();
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
    fn generations_wrap_without_ever_making_a_tag_none() {
        let mut d = Deferred::default();
        let t0 = Instant::now();
        for _ in 0..5000 {
            assert_ne!(later(d.enlist(Some(k(60)), 0, t0)), Tag::NONE);
        }
    }
}
