//! The splicer's connection table, whose keys the handing-over thread picks.
//!
//! A pair's sockets are registered in the splicer's `epoll` by the thread that hands it over
//! (see `Splicer::adopt`), under the key the pair will have in the table: a slab, which picks
//! a key only on insertion, cannot take that. So the table is a vector of slots, and the keys
//! of closed connections go back to [`Keys`] (behind the inbox's lock) once per turn, never
//! while a turn's events could still name them.

/// Open connections by key.
#[derive(Debug)]
pub struct Table<T> {
    slots: Vec<Option<T>>,
    len: usize,
    /// Keys closed since they were last given back to [`Keys`].
    freed: Vec<usize>,
}

impl<T> Default for Table<T> {
    fn default() -> Self {
        Table {
            slots: Vec::new(),
            len: 0,
            freed: Vec::new(),
        }
    }
}

impl<T> Table<T> {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn get_mut(&mut self, key: usize) -> Option<&mut T> {
        self.slots.get_mut(key)?.as_mut()
    }

    /// Puts `value` under `key`, which [`Keys::take`] gave out and nothing holds.
    pub fn insert(&mut self, key: usize, value: T) {
        if key >= self.slots.len() {
            self.slots.resize_with(key + 1, || None);
        }
        if let Some(slot) = self.slots.get_mut(key) {
            if slot.replace(value).is_none() {
                self.len += 1;
            }
        }
    }

    /// Takes the value under `key` out; its key is given back at the next [`Table::give_back`].
    pub fn remove(&mut self, key: usize) -> Option<T> {
        let value = self.slots.get_mut(key)?.take()?;
        self.len -= 1;
        self.freed.push(key);
        Some(value)
    }

    /// Hands the keys closed since the last call to `keys`, for new pairs to take.
    pub fn give_back(&mut self, keys: &mut Keys) {
        keys.free.append(&mut self.freed);
    }
}

/// The keys new pairs take: closed ones first (the most recent first, whose slot is likely
/// still cached), then the next never used.
#[derive(Debug, Default)]
pub struct Keys {
    free: Vec<usize>,
    next: usize,
}

impl Keys {
    pub fn take(&mut self) -> usize {
        self.free.pop().unwrap_or_else(|| {
            self.next += 1;
            self.next - 1
        })
    }

    /// Returns a key taken for a pair that never reached the table.
    pub fn put_back(&mut self, key: usize) {
        self.free.push(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_key_is_taken_again_only_after_it_was_given_back() {
        let (mut table, mut keys) = (Table::default(), Keys::default());
        let (a, b) = (keys.take(), keys.take());
        assert_ne!(a, b);
        table.insert(b, "b");
        table.insert(a, "a");
        assert_eq!(table.len(), 2);
        assert_eq!(table.remove(a), Some("a"));
        assert_eq!(table.remove(a), None, "removed twice");
        assert_eq!(table.len(), 1);
        let c = keys.take();
        assert!(c != a && c != b, "key {c} taken before it was given back");
        table.give_back(&mut keys);
        assert_eq!(keys.take(), a);
        assert_eq!(table.get_mut(b), Some(&mut "b"));
        assert_eq!(table.get_mut(a), None);
        assert_eq!(table.get_mut(1000), None);
    }

    #[test]
    fn a_key_put_back_is_taken_next() {
        let mut keys = Keys::default();
        let a = keys.take();
        keys.put_back(a);
        assert_eq!(keys.take(), a);
        assert_ne!(keys.take(), a);
    }
}
