//! Routes to shm peers that a send reads without the endpoint's lock: the
//! small sends of a local exchange take no hybrid lock at all (shm takes
//! its own).

use std::sync::atomic::{AtomicU64, Ordering};

/// Outer fi_addrs below this have a lock-free shm route; the others take
/// the locked path.
const SLOTS: usize = 4096;

/// Per outer fi_addr, the inner shm fi_addr, valid for one AV generation.
/// Written under the endpoint's lock (while it mirrors the AV), read
/// without it.
pub(super) struct ShmRoutes {
    /// The AV generation the entries hold for (u64::MAX: none).
    gen: AtomicU64,
    /// Inner shm fi_addr + 1; 0: no shm route.
    inner: Box<[AtomicU64]>,
}

impl ShmRoutes {
    pub(super) fn new() -> ShmRoutes {
        ShmRoutes {
            gen: AtomicU64::new(u64::MAX),
            inner: (0..SLOTS).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Forgets every route (an AV entry was removed): readers fall back to
    /// the locked path until [`publish`](Self::publish).
    pub(super) fn clear(&self) {
        self.gen.store(u64::MAX, Ordering::Release);
        for e in self.inner.iter() {
            e.store(0, Ordering::Relaxed);
        }
    }

    /// Records the shm route of outer `fi_addr`.
    pub(super) fn set(&self, fi_addr: u64, inner: u64) {
        if let Some(e) = usize::try_from(fi_addr)
            .ok()
            .and_then(|i| self.inner.get(i))
        {
            e.store(inner.wrapping_add(1), Ordering::Relaxed);
        }
    }

    /// The entries hold for AV generation `gen`.
    pub(super) fn publish(&self, gen: u64) {
        // SYNC POINT: releases the entries written before it to readers
        // that acquire `gen` in `get`.
        self.gen.store(gen, Ordering::Release);
    }

    /// The inner shm fi_addr of outer `fi_addr` when the AV is at
    /// generation `av_gen`; None: not known here (take the locked path).
    #[inline]
    pub(super) fn get(&self, fi_addr: u64, av_gen: u64) -> Option<u64> {
        // SYNC POINT: acquires the entries published with `gen`.
        if self.gen.load(Ordering::Acquire) != av_gen {
            return None;
        }
        let v = self
            .inner
            .get(usize::try_from(fi_addr).ok()?)?
            .load(Ordering::Relaxed);
        v.checked_sub(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_hold_for_their_generation_only() {
        let r = ShmRoutes::new();
        assert_eq!(r.get(3, 0), None, "nothing published");
        r.set(3, 0);
        r.set(5, 7);
        r.set(u64::MAX, 1);
        r.publish(2);
        assert_eq!(r.get(3, 2), Some(0));
        assert_eq!(r.get(5, 2), Some(7));
        assert_eq!(r.get(4, 2), None, "no route");
        assert_eq!(r.get(3, 1), None, "another generation");
        assert_eq!(r.get(SLOTS as u64, 2), None, "beyond the table");
        r.clear();
        assert_eq!(r.get(3, 2), None, "cleared");
        r.publish(3);
        assert_eq!(r.get(5, 3), None, "cleared entries stay empty");
    }
}
