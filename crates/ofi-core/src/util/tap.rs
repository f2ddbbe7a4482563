//! Taps: a layer of the core that runs operations of its own over an
//! application's endpoint (the collectives, [`crate::coll`]) sees their
//! completions, and the endpoint's peer-death reports, before the
//! application does.
//!
//! The completions come through a relay queue the layer puts between the
//! provider and the application's queue (only on endpoints opened for the
//! layer, so no other endpoint pays for it): the relay offers each entry
//! to the layer's [`CqTap`] first and passes the rest on. An event queue
//! shows its error entries to its watchers ([`EqWatch`]), which only look:
//! the entry stays queued for the application. With no watcher, the cost
//! is one atomic load per error entry.

use super::cq::{CqErrEntry, CqTaggedEntry};
use super::eq::EqError;
use super::lock::SpinLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A layer that takes the completions of its own operations.
pub trait CqTap: Send + Sync {
    /// A successful completion with the source address the provider gave:
    /// true when it is the tap's (it is then not passed on).
    fn completed(&self, e: &CqTaggedEntry, src: u64) -> bool;
    /// An error completion: true when it is the tap's.
    fn failed(&self, e: &CqErrEntry) -> bool;
}

/// A layer that watches an event queue's error entries (peer deaths).
pub trait EqWatch: Send + Sync {
    /// An error entry was queued (it stays queued). Called where the
    /// provider writes it: a watcher only records it.
    fn error(&self, e: &EqError);
}

/// The taps of one queue.
pub struct Taps<T: ?Sized> {
    on: AtomicBool,
    list: SpinLock<Vec<Arc<T>>>,
}

impl<T: ?Sized> Default for Taps<T> {
    fn default() -> Self {
        Taps {
            on: AtomicBool::new(false),
            list: SpinLock::new(Vec::new()),
        }
    }
}

impl<T: ?Sized> std::fmt::Debug for Taps<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Taps")
            .field("on", &self.on.load(Ordering::Relaxed))
            .finish()
    }
}

impl<T: ?Sized> Taps<T> {
    /// True when a tap is installed (one atomic load).
    #[inline(always)]
    pub fn active(&self) -> bool {
        self.on.load(Ordering::Acquire)
    }

    /// Installs a tap.
    pub fn add(&self, t: Arc<T>) {
        let mut l = self.list.lock();
        l.push(t);
        self.on.store(true, Ordering::Release);
    }

    /// Removes a tap (the same `Arc`).
    pub fn remove(&self, t: &Arc<T>) {
        let mut l = self.list.lock();
        l.retain(|x| !std::ptr::addr_eq(Arc::as_ptr(x), Arc::as_ptr(t)));
        self.on.store(!l.is_empty(), Ordering::Release);
    }

    /// True when `f` is true for a tap (tried in the order they came).
    #[cold]
    pub fn any(&self, mut f: impl FnMut(&T) -> bool) -> bool {
        let l = self.list.lock();
        l.iter().any(|t| f(t))
    }
}
