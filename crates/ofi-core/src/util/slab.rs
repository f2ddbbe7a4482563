//! A slab: values stored under small integer keys that the table picks,
//! each key stable while its value is in, vacated keys reused. The tables
//! of operations in flight (sends, RMA, grants, storage commands) keep
//! their records here and hand the key to the peer or the core as an id.

use std::fmt;

/// One place of a [`Slab`]: a value, or a link of the free list.
#[derive(Clone, Debug)]
enum Entry<T> {
    Occupied(T),
    /// Vacant; the key of the next vacant entry (the entries' length ends
    /// the list).
    Vacant(usize),
}

/// Values under keys the slab picks: O(1) insert, remove and lookup.
///
/// Keys are indices into one vector. A removed value's key goes onto a
/// free list threaded through the vacant entries, and the next insert
/// takes it (last vacated, first reused); the vector grows only when no
/// key is vacant, so once it has grown to the most values held at once,
/// inserting allocates nothing. A key names its value until that value is
/// removed; a caller that must tell a reused key from its old meaning keeps
/// a generation beside it.
#[derive(Clone)]
pub struct Slab<T> {
    entries: Vec<Entry<T>>,
    /// Head of the free list: the key the next insert takes
    /// (`entries.len()` when none is vacant).
    next: usize,
    /// Occupied entries.
    len: usize,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab::new()
    }
}

impl<T: fmt::Debug> fmt::Debug for Slab<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<T> Slab<T> {
    /// An empty slab (allocates nothing).
    pub const fn new() -> Self {
        Slab {
            entries: Vec::new(),
            next: 0,
            len: 0,
        }
    }

    /// An empty slab with room for `n` values before it allocates.
    pub fn with_capacity(n: usize) -> Self {
        Slab {
            entries: Vec::with_capacity(n),
            next: 0,
            len: 0,
        }
    }

    /// Values held.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no value is held.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The key the next [`insert`](Self::insert) returns.
    #[inline]
    pub fn vacant_key(&self) -> usize {
        self.next
    }

    /// Stores `value`; returns its key.
    #[inline]
    pub fn insert(&mut self, value: T) -> usize {
        let key = self.next;
        match self.entries.get_mut(key) {
            None => {
                self.entries.push(Entry::Occupied(value));
                self.next = key + 1;
            }
            Some(e) => {
                let Entry::Vacant(next) = *e else {
                    unreachable!("the slab's free list names an occupied entry")
                };
                self.next = next;
                *e = Entry::Occupied(value);
            }
        }
        self.len += 1;
        key
    }

    /// Takes the value under `key` out (None when the key holds none); the
    /// key becomes the next one inserted.
    #[inline]
    pub fn remove(&mut self, key: usize) -> Option<T> {
        let e = self.entries.get_mut(key)?;
        if let Entry::Vacant(_) = e {
            return None;
        }
        let Entry::Occupied(value) = std::mem::replace(e, Entry::Vacant(self.next)) else {
            unreachable!("the entry was just seen occupied")
        };
        self.next = key;
        self.len -= 1;
        Some(value)
    }

    /// The value under `key`.
    #[inline]
    pub fn get(&self, key: usize) -> Option<&T> {
        match self.entries.get(key) {
            Some(Entry::Occupied(v)) => Some(v),
            _ => None,
        }
    }

    /// The value under `key`, to change.
    #[inline]
    pub fn get_mut(&mut self, key: usize) -> Option<&mut T> {
        match self.entries.get_mut(key) {
            Some(Entry::Occupied(v)) => Some(v),
            _ => None,
        }
    }

    /// True when `key` holds a value.
    #[inline]
    pub fn contains(&self, key: usize) -> bool {
        self.get(key).is_some()
    }

    /// The values with their keys, in key order.
    #[inline]
    pub fn iter(&self) -> impl Iterator<Item = (usize, &T)> + '_ {
        self.entries
            .iter()
            .enumerate()
            .filter_map(|(k, e)| match e {
                Entry::Occupied(v) => Some((k, v)),
                Entry::Vacant(_) => None,
            })
    }

    /// The values with their keys, in key order, to change.
    #[inline]
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (usize, &mut T)> + '_ {
        self.entries
            .iter_mut()
            .enumerate()
            .filter_map(|(k, e)| match e {
                Entry::Occupied(v) => Some((k, v)),
                Entry::Vacant(_) => None,
            })
    }

    /// Keeps the values for which `keep` returns true and removes the
    /// others, in key order (so the last removed is the next reused).
    pub fn retain(&mut self, mut keep: impl FnMut(usize, &mut T) -> bool) {
        for (key, e) in self.entries.iter_mut().enumerate() {
            let Entry::Occupied(v) = e else { continue };
            if !keep(key, v) {
                *e = Entry::Vacant(self.next);
                self.next = key;
                self.len -= 1;
            }
        }
    }

    /// Removes every value and forgets the keys (the memory stays).
    pub fn clear(&mut self) {
        self.entries.clear();
        self.next = 0;
        self.len = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_count_up_and_name_their_values() {
        let mut s = Slab::new();
        assert!(s.is_empty());
        assert_eq!(s.vacant_key(), 0);
        assert_eq!(s.insert("a"), 0);
        assert_eq!(s.insert("b"), 1);
        assert_eq!(s.insert("c"), 2);
        assert_eq!(s.len(), 3);
        assert_eq!(s.get(1), Some(&"b"));
        *s.get_mut(2).expect("key 2 holds a value") = "C";
        assert_eq!(s.get(2), Some(&"C"));
        assert!(s.contains(0));
        assert_eq!(s.get(3), None);
        assert_eq!(s.get_mut(usize::MAX), None);
    }

    #[test]
    fn removed_keys_are_reused_last_vacated_first() {
        let mut s = Slab::new();
        for i in 0..5 {
            s.insert(i);
        }
        assert_eq!(s.remove(1), Some(1));
        assert_eq!(s.remove(3), Some(3));
        assert_eq!(s.len(), 3);
        assert!(!s.contains(1));
        assert_eq!(s.vacant_key(), 3);
        assert_eq!(s.insert(30), 3);
        assert_eq!(s.insert(10), 1);
        // No key vacant: the table grows.
        assert_eq!(s.vacant_key(), 5);
        assert_eq!(s.insert(50), 5);
        assert_eq!(s.get(1), Some(&10));
        assert_eq!(s.get(3), Some(&30));
    }

    #[test]
    fn removing_a_vacant_or_unknown_key_changes_nothing() {
        let mut s = Slab::new();
        s.insert('x');
        s.insert('y');
        assert_eq!(s.remove(0), Some('x'));
        assert_eq!(s.remove(0), None);
        assert_eq!(s.remove(7), None);
        assert_eq!(s.len(), 1);
        // The free list still holds key 0 once.
        assert_eq!(s.insert('z'), 0);
        assert_eq!(s.insert('w'), 2);
    }

    #[test]
    fn a_grown_slab_inserts_without_allocating() {
        let mut s = Slab::with_capacity(4);
        let keys: Vec<usize> = (0..4).map(|i| s.insert(i)).collect();
        let cap = s.entries.capacity();
        for round in 0..100 {
            for &k in &keys {
                assert!(s.remove(k).is_some());
            }
            for i in 0..4 {
                s.insert(round * 4 + i);
            }
            assert_eq!(s.entries.capacity(), cap);
            assert_eq!(s.entries.len(), 4);
        }
    }

    #[test]
    fn iteration_yields_the_values_in_key_order() {
        let mut s = Slab::new();
        for i in 0..6 {
            s.insert(i * 10);
        }
        s.remove(0);
        s.remove(4);
        let seen: Vec<(usize, i32)> = s.iter().map(|(k, v)| (k, *v)).collect();
        assert_eq!(seen, [(1, 10), (2, 20), (3, 30), (5, 50)]);
        for (k, v) in s.iter_mut() {
            *v += k as i32;
        }
        let seen: Vec<i32> = s.iter().map(|(_, v)| *v).collect();
        assert_eq!(seen, [11, 22, 33, 55]);
        assert_eq!(format!("{s:?}"), "{1: 11, 2: 22, 3: 33, 5: 55}");
    }

    #[test]
    fn retain_removes_in_key_order_and_frees_the_keys() {
        let mut s = Slab::new();
        for i in 0..6 {
            s.insert(i);
        }
        s.remove(2);
        let mut visited = Vec::new();
        s.retain(|k, v| {
            visited.push(k);
            *v % 2 == 0
        });
        assert_eq!(visited, [0, 1, 3, 4, 5]);
        assert_eq!(s.len(), 2);
        let left: Vec<usize> = s.iter().map(|(k, _)| k).collect();
        assert_eq!(left, [0, 4]);
        // Removed last first: 5, then 3, then 1, then the earlier 2.
        assert_eq!(s.insert(0), 5);
        assert_eq!(s.insert(0), 3);
        assert_eq!(s.insert(0), 1);
        assert_eq!(s.insert(0), 2);
        assert_eq!(s.insert(0), 6);
    }

    #[test]
    fn clear_starts_the_keys_over() {
        let mut s = Slab::new();
        s.insert(1);
        s.insert(2);
        s.remove(0);
        s.clear();
        assert!(s.is_empty());
        assert_eq!(s.iter().count(), 0);
        assert_eq!(s.insert(3), 0);
        assert_eq!(s.insert(4), 1);
    }

    #[test]
    fn values_are_dropped_when_removed_or_cleared() {
        use std::rc::Rc;
        let v = Rc::new(());
        let mut s = Slab::new();
        let k = s.insert(v.clone());
        s.insert(v.clone());
        s.insert(v.clone());
        assert_eq!(Rc::strong_count(&v), 4);
        drop(s.remove(k));
        assert_eq!(Rc::strong_count(&v), 3);
        s.retain(|k, _| k != 1);
        assert_eq!(Rc::strong_count(&v), 2);
        s.clear();
        assert_eq!(Rc::strong_count(&v), 1);
    }
}
