//! A vector of slots with a free list: the splicer's connection table. A key stays valid until
//! its entry is removed; a removed key is handed out again, which is why timers carry a
//! generation as well.

#[derive(Debug)]
enum Entry<T> {
    Vacant(usize),
    Occupied(T),
}

#[derive(Debug)]
pub struct Slab<T> {
    entries: Vec<Entry<T>>,
    /// Head of the free list; `entries.len()` when there is no vacant slot.
    free: usize,
    #[cfg(test)]
    len: usize,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab {
            entries: Vec::new(),
            free: 0,
            #[cfg(test)]
            len: 0,
        }
    }
}

impl<T> Slab<T> {
    /// The key the next `insert` will use.
    pub fn vacant_key(&self) -> usize {
        self.free
    }

    pub fn insert(&mut self, value: T) -> usize {
        let key = self.free;
        let end = self.entries.len();
        match self.entries.get_mut(key) {
            Some(e) => {
                self.free = match e {
                    Entry::Vacant(next) => *next,
                    Entry::Occupied(_) => end,
                };
                *e = Entry::Occupied(value);
            }
            None => {
                self.entries.push(Entry::Occupied(value));
                self.free = end + 1;
            }
        }
        #[cfg(test)]
        {
            self.len += 1;
        }
        key
    }

    pub fn get_mut(&mut self, key: usize) -> Option<&mut T> {
        match self.entries.get_mut(key) {
            Some(Entry::Occupied(v)) => Some(v),
            _ => None,
        }
    }

    pub fn remove(&mut self, key: usize) -> Option<T> {
        let e = self.entries.get_mut(key)?;
        if matches!(e, Entry::Vacant(_)) {
            return None;
        }
        let old = std::mem::replace(e, Entry::Vacant(self.free));
        self.free = key;
        #[cfg(test)]
        {
            self.len -= 1;
        }
        match old {
            Entry::Occupied(v) => Some(v),
            Entry::Vacant(_) => None,
        }
    }

    /// Occupied entries (a walk over the table: for rare reports only).
    pub fn count(&self) -> usize {
        self.entries
            .iter()
            .filter(|e| matches!(e, Entry::Occupied(_)))
            .count()
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::Slab;

    #[test]
    fn keys_are_reused_after_removal() {
        let mut s = Slab::default();
        assert_eq!(s.vacant_key(), 0);
        let a = s.insert("a");
        let b = s.insert("b");
        assert_eq!((a, b, s.len()), (0, 1, 2));
        assert_eq!(s.remove(a), Some("a"));
        assert_eq!(s.remove(a), None);
        assert_eq!(s.get_mut(a), None);
        assert_eq!(s.vacant_key(), a);
        assert_eq!(s.insert("c"), a);
        assert_eq!(s.insert("d"), 2);
        assert_eq!(s.get_mut(b).copied(), Some("b"));
        assert_eq!(s.len(), 3);
    }
}
