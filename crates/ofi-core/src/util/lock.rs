//! A small test-and-set lock for the data path: one atomic read-modify-write
//! to take it and a plain release store to give it back (std's mutex spends
//! a second read-modify-write on unlock). Waiters spin briefly, then yield,
//! so an oversubscribed machine still makes progress.
#![allow(unsafe_code)]

use std::cell::UnsafeCell;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};

/// A mutual-exclusion lock for short critical sections.
///
/// Like `std::sync::Mutex`, the lock is `Sync` when `T: Send` (it hands
/// `T` from thread to thread, one holder at a time), and a guard is `Sync`
/// only when `T: Sync` too: a guard shared between threads gives each of
/// them `&T` at once, so a guard over a `Cell` stays on its thread.
///
/// ```compile_fail
/// use ofi_core::util::lock::SpinLock;
/// use std::cell::Cell;
/// let l = SpinLock::new(Cell::new(0u64));
/// let g = l.lock();
/// // Two threads calling `Cell::set` through one guard: refused.
/// std::thread::scope(|s| {
///     s.spawn(|| g.set(g.get() + 1));
///     g.set(g.get() + 1);
/// });
/// ```
///
/// ```
/// use ofi_core::util::lock::SpinLock;
/// use std::sync::atomic::{AtomicU64, Ordering};
/// let l = SpinLock::new(AtomicU64::new(0));
/// let g = l.lock();
/// // A `Sync` value may be shared through its guard.
/// std::thread::scope(|s| {
///     s.spawn(|| g.fetch_add(1, Ordering::Relaxed));
///     g.fetch_add(1, Ordering::Relaxed);
/// });
/// assert_eq!(g.load(Ordering::Relaxed), 2);
/// ```
#[derive(Default)]
pub struct SpinLock<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the lock hands out access to `value` to one holder at a time, so
// sharing the lock shares `T` only by transfer between threads.
unsafe impl<T: Send> Sync for SpinLock<T> {}
// SAFETY: moving the lock moves `T`.
unsafe impl<T: Send> Send for SpinLock<T> {}

/// Exclusive access to a [`SpinLock`]'s value; unlocks on drop.
///
/// `Send` when `T: Send`, `Sync` only when `T: Send + Sync` (the marker
/// says so: the guard is, to the type system, a `&mut T`).
pub struct SpinGuard<'a, T> {
    lock: &'a SpinLock<T>,
    _access: PhantomData<&'a mut T>,
}

impl<T> SpinLock<T> {
    /// A new, unlocked lock.
    pub const fn new(value: T) -> Self {
        SpinLock {
            locked: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// Takes the lock, waiting as long as needed.
    #[inline]
    pub fn lock(&self) -> SpinGuard<'_, T> {
        if let Some(g) = self.try_lock() {
            return g;
        }
        self.lock_slow()
    }

    #[cold]
    fn lock_slow(&self) -> SpinGuard<'_, T> {
        let mut spins = 0u32;
        loop {
            while self.locked.load(Ordering::Relaxed) {
                if spins < 64 {
                    std::hint::spin_loop();
                    spins += 1;
                } else {
                    std::thread::yield_now();
                }
            }
            if let Some(g) = self.try_lock() {
                return g;
            }
        }
    }

    /// Takes the lock if it is free.
    #[inline]
    pub fn try_lock(&self) -> Option<SpinGuard<'_, T>> {
        // SYNC POINT: acquires the previous holder's release in `drop`.
        if self
            .locked
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            Some(SpinGuard {
                lock: self,
                _access: PhantomData,
            })
        } else {
            None
        }
    }

    /// Direct access through exclusive ownership.
    pub fn get_mut(&mut self) -> &mut T {
        self.value.get_mut()
    }
}

impl<T> Deref for SpinGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: holding the guard means holding the lock.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for SpinGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: holding the guard means holding the lock, exclusively.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for SpinGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        // SYNC POINT: releases this holder's writes to the next `try_lock`.
        self.lock.locked.store(false, Ordering::Release);
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for SpinLock<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SpinLock { .. }")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn excludes_across_threads() {
        let l = Arc::new(SpinLock::new(0u64));
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let l = l.clone();
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        *l.lock() += 1;
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(*l.lock(), 80_000);
        let g = l.lock();
        assert!(l.try_lock().is_none());
        drop(g);
        assert!(l.try_lock().is_some());
    }
}
