//! The splicer's timers: when to look at a connection's limits again, at most one entry per
//! open connection with a limit, and none once it has closed.
//!
//! Why indexed: a plain binary heap cannot take an entry out before it is due, so it kept the
//! entry of every closed connection until its deadline. With the controller's
//! `idle_timeout: 3h` on every upstream that was 32 bytes per connection closed in the last
//! three hours: +15.9 MiB per 500,000 connections, and a pod's memory limit reached under
//! sustained churn (issue 47, point 3). Here every key knows where its entry is, so closing a
//! connection removes it in O(log n), and the heap holds what is open.

use std::time::Instant;

/// Below this capacity the heap is never shrunk: 1,024 entries, 24 KiB.
const KEEP: usize = 1024;

/// A min-heap of deadlines keyed by connection key (the splicer's table keys: small, dense,
/// reused once closed).
#[derive(Debug, Default)]
pub struct Timers {
    /// Ordered on `at`: every entry is due no later than its children.
    heap: Vec<Entry>,
    /// Per key: its entry's index in `heap` plus one; 0 for none. As long as the highest key
    /// ever used, like the connection table's slots it sits beside (8 bytes a slot).
    pos: Vec<usize>,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    at: Instant,
    key: usize,
}

impl Timers {
    /// Entries held: connections with a limit still open.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// When the first entry is due.
    pub fn next(&self) -> Option<Instant> {
        self.heap.first().map(|e| e.at)
    }

    /// Sets `key`'s deadline to `at`, replacing the one it had.
    pub fn set(&mut self, key: usize, at: Instant) {
        match self.index(key) {
            Some(i) => {
                let earlier = at < self.heap[i].at;
                self.heap[i].at = at;
                if earlier {
                    self.up(i);
                } else {
                    self.down(i);
                }
            }
            None => {
                if key >= self.pos.len() {
                    self.pos.resize(key + 1, 0);
                }
                self.heap.push(Entry { at, key });
                let i = self.heap.len() - 1;
                self.pos[key] = i + 1;
                self.up(i);
            }
        }
    }

    /// Takes `key`'s entry out, if it has one.
    pub fn remove(&mut self, key: usize) {
        let Some(i) = self.index(key) else { return };
        self.pos[key] = 0;
        let last = self.heap.len() - 1;
        self.heap.swap(i, last);
        self.heap.pop();
        if i < last {
            self.pos[self.heap[i].key] = i + 1;
            // The entry moved into the hole may belong above or below it.
            self.up(i);
            self.down(i);
        }
        if self.heap.capacity() > KEEP && self.heap.len() < self.heap.capacity() / 4 {
            self.heap.shrink_to((self.heap.len() * 2).max(KEEP));
        }
    }

    /// Takes the first entry out if it is due by `now`: its key.
    pub fn pop_due(&mut self, now: Instant) -> Option<usize> {
        let first = *self.heap.first().filter(|e| e.at <= now)?;
        self.remove(first.key);
        Some(first.key)
    }

    fn index(&self, key: usize) -> Option<usize> {
        self.pos.get(key).copied().filter(|&p| p > 0).map(|p| p - 1)
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.pos[self.heap[a].key] = a + 1;
        self.pos[self.heap[b].key] = b + 1;
    }

    fn up(&mut self, mut i: usize) {
        while i > 0 {
            let parent = (i - 1) / 2;
            if self.heap[parent].at <= self.heap[i].at {
                break;
            }
            self.swap(i, parent);
            i = parent;
        }
    }

    fn down(&mut self, mut i: usize) {
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut first = i;
            if l < self.heap.len() && self.heap[l].at < self.heap[first].at {
                first = l;
            }
            if r < self.heap.len() && self.heap[r].at < self.heap[first].at {
                first = r;
            }
            if first == i {
                return;
            }
            self.swap(i, first);
            i = first;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Keys in the order they come due, draining the heap.
    fn drain(t: &mut Timers, now: Instant) -> Vec<usize> {
        std::iter::from_fn(|| t.pop_due(now)).collect()
    }

    #[test]
    fn entries_come_due_in_order_and_a_removed_one_never_does() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut t = Timers::default();
        // Deadlines scrambled over keys 0..50.
        for k in 0..50usize {
            t.set(k, t0 + s(((k * 37) % 50) as u64));
        }
        assert_eq!(t.len(), 50);
        for k in (0..50).step_by(3) {
            t.remove(k);
        }
        t.remove(1000);
        // Moved both ways.
        t.set(1, t0 + s(100));
        t.set(2, t0);
        assert_eq!(t.next(), Some(t0));
        assert_eq!(t.pop_due(t0 - s(1)), None, "nothing is due before its time");
        let order = drain(&mut t, t0 + s(1000));
        let mut expected: Vec<usize> = (0..50).filter(|k| k % 3 != 0).collect();
        let at = |k: usize| match k {
            1 => 100,
            2 => 0,
            _ => (k * 37) % 50,
        };
        expected.sort_by_key(|&k| at(k));
        assert_eq!(order, expected);
        assert_eq!((t.len(), t.next()), (0, None));
    }

    #[test]
    fn closing_every_connection_leaves_nothing_and_frees_a_large_heap() {
        let t0 = Instant::now();
        let mut t = Timers::default();
        for k in 0..100_000 {
            t.set(k, t0 + Duration::from_secs(3 * 3600));
        }
        for k in 0..100_000 {
            t.remove(k);
        }
        assert_eq!(t.len(), 0);
        assert!(t.heap.capacity() <= 2 * KEEP, "{}", t.heap.capacity());
        // A key reused after its connection closed starts with no entry.
        t.set(7, t0);
        assert_eq!(drain(&mut t, t0), [7]);
    }
}
