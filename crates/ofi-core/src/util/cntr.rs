//! Counters: success and error counts, add/set, and waits with a timeout.

use super::driver::Driver;
use super::waitset::{join_once, Membership, WaitSetCore, Waitable};
use crate::consts::wait_obj;
use crate::error::{errno, Error, Result};
use crate::provider::Progress;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Counter attributes (`struct fi_cntr_attr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CntrAttr {
    /// Events counted (`FI_CNTR_EVENTS_COMP`).
    pub events: u32,
    /// Wait object.
    pub wait_obj: u32,
}

impl Default for CntrAttr {
    fn default() -> Self {
        CntrAttr {
            events: 0,
            wait_obj: wait_obj::FI_WAIT_UNSPEC,
        }
    }
}

/// The counter shared by the core and providers.
pub struct CntrCore {
    /// The wait set this object belongs to (FI_WAIT_SET). Declared first:
    /// it leaves the set before its wait fd closes.
    in_set: OnceLock<Membership>,
    value: AtomicU64,
    errors: AtomicU64,
    driver: Driver,
    deferred: super::trigger::Deferrals,
    /// A count changed since the application last read one (what an
    /// exposed wait fd and a wait set report).
    unseen: AtomicBool,
    pub(crate) bound: AtomicUsize,
}

impl std::fmt::Debug for CntrCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CntrCore")
            .field("value", &self.value.load(Ordering::Relaxed))
            .field("errors", &self.errors.load(Ordering::Relaxed))
            .finish()
    }
}

impl CntrCore {
    /// Creates a counter.
    pub fn new(attr: &CntrAttr) -> Result<Arc<Self>> {
        if attr.events != 0 {
            return Err(Error::inval(format!(
                "cntr_attr.events = {} is not FI_CNTR_EVENTS_COMP",
                attr.events
            )));
        }
        let waitable = match attr.wait_obj {
            wait_obj::FI_WAIT_NONE => false,
            wait_obj::FI_WAIT_UNSPEC
            | wait_obj::FI_WAIT_FD
            | wait_obj::FI_WAIT_YIELD
            | wait_obj::FI_WAIT_POLLFD
            | wait_obj::FI_WAIT_SET => true,
            v => {
                return Err(Error::inval(format!(
                    "cntr_attr.wait_obj = {v} is not supported"
                )))
            }
        };
        Ok(Arc::new(CntrCore {
            in_set: OnceLock::new(),
            value: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            driver: Driver::new(waitable)?,
            deferred: Default::default(),
            unseen: AtomicBool::new(false),
            bound: AtomicUsize::new(0),
        }))
    }
    /// The driver (bound endpoints, waiting).
    pub fn driver(&self) -> &Driver {
        &self.driver
    }

    /// Joins a wait set (the object was opened with FI_WAIT_SET).
    pub fn join(self: &Arc<Self>, set: &Arc<WaitSetCore>) -> Result<()> {
        let me: Arc<dyn Waitable> = self.clone();
        join_once(&self.in_set, set, me)
    }

    /// The wait set this object belongs to, if any.
    pub fn wait_set(&self) -> Option<&Arc<WaitSetCore>> {
        self.in_set.get().map(Membership::set)
    }

    /// `fi_cntr_read`: drives progress, returns the success count.
    pub fn read(&self) -> u64 {
        self.driver.progress();
        self.seen();
        self.value.load(Ordering::Acquire)
    }
    /// `fi_cntr_readerr`.
    pub fn readerr(&self) -> u64 {
        self.driver.progress();
        self.seen();
        self.errors.load(Ordering::Acquire)
    }
    /// The success and error counts, without progress, as they are now
    /// (what a poll set compares with its last look).
    pub fn counts(&self) -> (u64, u64) {
        (
            self.value.load(Ordering::Acquire),
            self.errors.load(Ordering::Acquire),
        )
    }
    /// True when a count changed since the application last read one.
    pub fn has_events(&self) -> bool {
        self.unseen.load(Ordering::Acquire)
    }
    /// The application looks at the counts: an exposed wait fd stops
    /// being readable until the next change.
    fn seen(&self) {
        if self.unseen.swap(false, Ordering::AcqRel) {
            self.driver.set_ready(|| self.has_events());
        }
    }
    /// A count changed: wakes a waiter and makes an exposed fd readable.
    #[inline]
    fn changed(&self) {
        if !self.unseen.swap(true, Ordering::AcqRel) {
            self.driver.set_ready(|| self.has_events());
        }
        self.driver.wake();
    }
    /// `fi_cntr_add` (also the provider's increment).
    pub fn add(&self, n: u64) {
        let v = self.value.fetch_add(n, Ordering::AcqRel).wrapping_add(n);
        self.deferred.reached(v);
        self.changed();
    }
    /// `fi_cntr_set`.
    pub fn set(&self, v: u64) {
        self.value.store(v, Ordering::Release);
        self.deferred.reached(v);
        self.changed();
    }
    /// Defers `fire` until the count reaches `threshold` (triggered
    /// operations); queued as ready at once when it already has.
    pub fn defer(&self, threshold: u64, fire: super::trigger::Fire) {
        self.deferred.add(threshold, fire);
        self.deferred.reached(self.value.load(Ordering::Acquire));
    }
    /// Deferred operations not yet triggered.
    pub fn deferred_len(&self) -> usize {
        self.deferred.len()
    }
    /// `fi_cntr_adderr` (also the provider's error increment).
    pub fn add_err(&self, n: u64) {
        self.errors.fetch_add(n, Ordering::AcqRel);
        self.changed();
    }
    /// `fi_cntr_seterr`.
    pub fn set_err(&self, v: u64) {
        self.errors.store(v, Ordering::Release);
        self.changed();
    }
    /// `fi_cntr_wait`: until the count reaches `threshold`. `FI_ETIMEDOUT`
    /// on timeout; `FI_EAVAIL` if the error count rises meanwhile.
    pub fn wait(&self, threshold: u64, timeout: Option<Duration>) -> Result<()> {
        if self.driver.waits().is_none() {
            return Err(Error::nosys("wait on a counter opened with FI_WAIT_NONE"));
        }
        let errs = self.errors.load(Ordering::Acquire);
        // Each look reads the counts: an exposed fd, readable after a
        // change below the threshold, must not keep the sleep from sleeping.
        let r = self.driver.block(timeout, || {
            self.seen();
            self.value.load(Ordering::Acquire) >= threshold
                || self.errors.load(Ordering::Acquire) != errs
        });
        match r {
            Ok(()) if self.value.load(Ordering::Acquire) >= threshold => Ok(()),
            Ok(()) => Err(Error::new(
                errno::FI_EAVAIL,
                "the error count rose while waiting",
            )),
            Err(e) if e.is_again() => Err(Error::new(
                errno::FI_ETIMEDOUT,
                format!("counter did not reach {threshold} in time"),
            )),
            Err(e) => Err(e),
        }
    }
    /// `fi_trywait`: Ok when it is safe to sleep on the wait fd until the
    /// count passes `threshold`; `FI_EAGAIN` when it already has.
    pub fn trywait(&self, threshold: u64) -> Result<()> {
        self.driver.progress();
        if self.value.load(Ordering::Acquire) >= threshold || !self.driver.trywait() {
            return Err(Error::again());
        }
        if self.value.load(Ordering::Acquire) >= threshold {
            return Err(Error::again());
        }
        Ok(())
    }
    /// The wait fd for epoll: readable once a count changed, until the
    /// application reads one (and when a bound endpoint's wake-up fd is:
    /// `fi_trywait` first).
    pub fn wait_fd(&self) -> Option<RawFd> {
        let fd = self.driver.expose();
        self.driver.set_ready(|| self.has_events());
        fd
    }
    /// Attaches an endpoint's progress.
    pub fn attach(&self, p: Arc<dyn Progress>) -> Result<()> {
        self.driver.attach(p)
    }
    /// Detaches an endpoint.
    pub fn detach(&self, p: &Arc<dyn Progress>) {
        self.driver.detach(p)
    }
}
