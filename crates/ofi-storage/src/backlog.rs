//! Work the provider pushed back (FI_EAGAIN at post time), kept and
//! offered again instead of failed: flow control, not an error. Items wait
//! in order per key (a peer); a key that pushes back again does not hold
//! the other keys' items up. Bounded by its capacity (the caller never has
//! more items than that: each holds one of a fixed set of resources), and
//! items past their patience come out through [`Backlog::expired`].

use std::collections::VecDeque;
use std::time::{Duration, Instant};

#[derive(Debug)]
struct Entry<K, T> {
    key: K,
    since: Instant,
    item: T,
}

/// Items refused with FI_EAGAIN, oldest first.
#[derive(Debug)]
pub(crate) struct Backlog<K, T> {
    items: VecDeque<Entry<K, T>>,
    cap: usize,
}

impl<K: Copy + PartialEq, T> Backlog<K, T> {
    /// An empty backlog for at most `cap` items.
    pub fn new(cap: usize) -> Self {
        Backlog {
            items: VecDeque::with_capacity(cap),
            cap,
        }
    }

    /// True when nothing waits.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Items waiting.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// True while an item of `key` waits: a new one of that key must go
    /// behind it rather than be posted first.
    pub fn holds(&self, key: K) -> bool {
        self.items.iter().any(|e| e.key == key)
    }

    /// Keeps `item` (pushed back at `now`) behind the others; `Err` with
    /// the item when the backlog is full.
    pub fn push(&mut self, key: K, item: T, now: Instant) -> Result<(), T> {
        if self.items.len() >= self.cap {
            return Err(item);
        }
        self.items.push_back(Entry {
            key,
            since: now,
            item,
        });
        Ok(())
    }

    /// Offers the items to `post`, oldest first: it consumes an item
    /// (`None`: posted, or failed for good and dealt with) or hands it
    /// back (`Some`: pushed back again), after which the rest of that key
    /// waits for the next round while other keys go on. True if any item
    /// was consumed.
    pub fn retry(&mut self, mut post: impl FnMut(K, T) -> Option<T>) -> bool {
        let mut moved = false;
        let mut blocked: Vec<K> = Vec::new();
        let mut keep = VecDeque::with_capacity(self.items.len());
        while let Some(e) = self.items.pop_front() {
            if blocked.contains(&e.key) {
                keep.push_back(e);
                continue;
            }
            let (key, since) = (e.key, e.since);
            match post(key, e.item) {
                None => moved = true,
                Some(item) => {
                    blocked.push(key);
                    keep.push_back(Entry { key, since, item });
                }
            }
        }
        self.items = keep;
        moved
    }

    /// Takes out every item of `key`.
    pub fn remove(&mut self, key: K) -> Vec<T> {
        let mut out = Vec::new();
        let mut keep = VecDeque::with_capacity(self.items.len());
        for e in self.items.drain(..) {
            if e.key == key {
                out.push(e.item);
            } else {
                keep.push_back(e);
            }
        }
        self.items = keep;
        out
    }

    /// Takes out the items that have waited longer than `patience` at
    /// `now`, with their keys.
    pub fn expired(&mut self, now: Instant, patience: Duration) -> Vec<(K, T)> {
        if !self
            .items
            .iter()
            .any(|e| now.duration_since(e.since) > patience)
        {
            return Vec::new();
        }
        let mut out = Vec::new();
        let mut keep = VecDeque::with_capacity(self.items.len());
        for e in self.items.drain(..) {
            if now.duration_since(e.since) > patience {
                out.push((e.key, e.item));
            } else {
                keep.push_back(e);
            }
        }
        self.items = keep;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_go_in_order_per_key_and_a_blocked_key_holds_up_no_other() {
        let now = Instant::now();
        let mut b: Backlog<u8, u32> = Backlog::new(8);
        for (k, v) in [(1, 10), (2, 20), (1, 11), (2, 21), (3, 30)] {
            b.push(k, v, now).unwrap();
        }
        assert!(b.holds(1) && !b.holds(4));
        // Key 1 pushes back: its second item is not offered; 2 and 3 go.
        let mut offered = Vec::new();
        let moved = b.retry(|k, v| {
            offered.push(v);
            (k == 1).then_some(v)
        });
        assert!(moved);
        assert_eq!(offered, vec![10, 20, 21, 30]);
        assert_eq!(b.len(), 2);
        // Then key 1 goes, in order.
        let mut offered = Vec::new();
        b.retry(|_, v| {
            offered.push(v);
            None
        });
        assert_eq!(offered, vec![10, 11]);
        assert!(b.is_empty());
    }

    #[test]
    fn the_bound_refuses_an_item_beyond_the_capacity() {
        let now = Instant::now();
        let mut b: Backlog<u8, u32> = Backlog::new(2);
        b.push(1, 1, now).unwrap();
        b.push(2, 2, now).unwrap();
        assert_eq!(b.push(3, 3, now), Err(3));
        assert_eq!(b.len(), 2);
    }

    #[test]
    fn items_expire_after_their_patience_and_a_key_can_be_removed() {
        let t0 = Instant::now();
        let mut b: Backlog<u8, u32> = Backlog::new(8);
        b.push(1, 10, t0).unwrap();
        b.push(2, 20, t0 + Duration::from_secs(5)).unwrap();
        b.push(3, 30, t0 + Duration::from_secs(5)).unwrap();
        let p = Duration::from_secs(30);
        assert!(b.expired(t0 + Duration::from_secs(30), p).is_empty());
        assert_eq!(b.expired(t0 + Duration::from_secs(31), p), vec![(1, 10)]);
        assert_eq!(b.remove(2), vec![20]);
        assert_eq!(b.len(), 1);
        // A pushed-back item keeps its age.
        b.retry(|_, v| Some(v));
        assert_eq!(b.expired(t0 + Duration::from_secs(36), p), vec![(3, 30)]);
    }
}
