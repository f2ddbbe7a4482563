//! Event queues: connection-management and asynchronous control events
//! (FI_CONNREQ, FI_CONNECTED, FI_SHUTDOWN …), error entries read with
//! readerr, blocking reads with a timeout, and a wait fd.

use super::driver::Driver;
use super::lock::SpinLock;
use super::tap::{EqWatch, Taps};
use super::waitset::{join_once, Membership, WaitSetCore, Waitable};
use crate::consts::wait_obj;
use crate::error::{errno, Error, Result};
use crate::info::Info;
use crate::provider::Progress;
use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Event queue attributes (`struct fi_eq_attr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EqAttr {
    /// Expected number of queued events (0: provider default).
    pub size: usize,
    /// Wait object.
    pub wait_obj: u32,
}

impl Default for EqAttr {
    fn default() -> Self {
        EqAttr {
            size: 0,
            wait_obj: wait_obj::FI_WAIT_UNSPEC,
        }
    }
}

/// An event (`struct fi_eq_entry` / `struct fi_eq_cm_entry`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EqEvent {
    /// `eq_event::*`.
    pub event: u32,
    /// The context of the object the event is about (endpoint or passive endpoint).
    pub fid: usize,
    /// Event context (`fi_eq_entry.context`).
    pub context: usize,
    /// Event data.
    pub data: u64,
    /// For FI_CONNREQ: the offer to open the accepting endpoint with (its
    /// `handle` names the request).
    pub info: Option<Box<Info>>,
    /// Connection private data.
    pub cm_data: Vec<u8>,
    /// An event the application wrote (`fi_eq_write`): its bytes, read
    /// back as written, whatever their length (None for the library's).
    pub written: Option<Vec<u8>>,
}

/// An error entry (`struct fi_eq_err_entry`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EqError {
    /// The object the error is about.
    pub fid: usize,
    /// Context.
    pub context: usize,
    /// Data.
    pub data: u64,
    /// Positive FI_E* number (FI_ECONNREFUSED, FI_ETIMEDOUT, FI_EHOSTUNREACH …).
    pub err: i32,
    /// Provider error number.
    pub prov_errno: i32,
    /// Provider error data (for a rejection: the peer's private data).
    pub err_data: Vec<u8>,
}

/// An error entry is next: the reader must take it with readerr.
#[cold]
fn error_next() -> Error {
    Error::new(
        errno::FI_EAVAIL,
        "an error entry is available: call readerr",
    )
}

/// The event queue shared by the core and providers.
pub struct EqCore {
    /// The wait set this object belongs to (FI_WAIT_SET). Declared first:
    /// it leaves the set before its wait fd closes.
    in_set: OnceLock<Membership>,
    queue: SpinLock<VecDeque<std::result::Result<EqEvent, EqError>>>,
    driver: Driver,
    pub(crate) bound: AtomicUsize,
    /// Layers that watch the error entries ([`EqWatch`]).
    watchers: Taps<dyn EqWatch>,
}

impl std::fmt::Debug for EqCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EqCore").finish()
    }
}

impl EqCore {
    /// Creates an event queue.
    pub fn new(attr: &EqAttr) -> Result<Arc<Self>> {
        let waitable = match attr.wait_obj {
            wait_obj::FI_WAIT_NONE => false,
            wait_obj::FI_WAIT_UNSPEC
            | wait_obj::FI_WAIT_FD
            | wait_obj::FI_WAIT_YIELD
            | wait_obj::FI_WAIT_POLLFD
            | wait_obj::FI_WAIT_SET => true,
            v => {
                return Err(Error::inval(format!(
                    "eq_attr.wait_obj = {v} is not supported"
                )))
            }
        };
        Ok(Arc::new(EqCore {
            in_set: OnceLock::new(),
            queue: SpinLock::new(VecDeque::with_capacity(attr.size.clamp(16, 4096))),
            driver: Driver::new(waitable)?,
            bound: AtomicUsize::new(0),
            watchers: Taps::default(),
        }))
    }

    /// The layers shown every error entry as it is queued ([`EqWatch`]).
    pub fn watchers(&self) -> &Taps<dyn EqWatch> {
        &self.watchers
    }

    /// The driver (bound objects, waiting).
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

    /// Drops the events and error entries still queued about the object
    /// named `fid` (it is closing: nothing may name it afterwards, as
    /// libfabric's queues forget a closed endpoint's events).
    pub fn forget(&self, fid: usize) {
        {
            let mut q = self.queue.lock();
            q.retain(|e| match e {
                Ok(ev) => ev.fid != fid,
                Err(er) => er.fid != fid,
            });
        }
        self.changed();
    }

    /// Provider side: queues an event.
    pub fn push(&self, e: EqEvent) {
        self.queue.lock().push_back(Ok(e));
        self.changed();
        self.driver.wake();
    }

    /// Provider side: queues an error entry.
    pub fn push_err(&self, e: EqError) {
        if self.watchers.active() {
            self.watchers.any(|w| {
                w.error(&e);
                false
            });
        }
        self.queue.lock().push_back(Err(e));
        self.changed();
        self.driver.wake();
    }

    /// After events came or went: an exposed wait fd is readable while
    /// events (or error entries) are queued.
    fn changed(&self) {
        self.driver.set_ready(|| self.has_events());
    }

    /// True when events or error entries are queued (what a wait set
    /// reports). Runs no progress.
    pub fn has_events(&self) -> bool {
        !self.queue.lock().is_empty()
    }

    fn take(&self, peek: bool) -> Result<EqEvent> {
        if peek {
            let q = self.queue.lock();
            return match q.front() {
                None => Err(Error::again()),
                Some(Err(_)) => Err(error_next()),
                Some(Ok(e)) => Ok(e.clone()),
            };
        }
        self.take_fitting(|_| true)?.ok_or_else(Error::again)
    }

    /// Takes the next event if `fits` says the caller has room for it,
    /// decided under the queue's lock (another reader may have taken the
    /// one the caller looked at): `Ok(None)` when it does not fit (it
    /// stays), `FI_EAGAIN` when empty, `FI_EAVAIL` when an error is next.
    pub fn take_fitting(&self, fits: impl FnOnce(&EqEvent) -> bool) -> Result<Option<EqEvent>> {
        let mut q = self.queue.lock();
        let r = match q.front() {
            None => return Err(Error::again()),
            Some(Err(_)) => return Err(error_next()),
            Some(Ok(e)) if !fits(e) => return Ok(None),
            Some(Ok(_)) => match q.pop_front() {
                Some(Ok(e)) => Some(e),
                _ => None,
            },
        };
        drop(q);
        self.changed();
        Ok(r)
    }

    /// `fi_eq_read`: drives progress, then takes (or with `peek`, copies) the
    /// next event. `FI_EAGAIN` when empty, `FI_EAVAIL` when an error is next.
    pub fn read(&self, peek: bool) -> Result<EqEvent> {
        self.driver.progress();
        self.take(peek)
    }

    /// `fi_eq_readerr`: takes the next error entry.
    pub fn readerr(&self) -> Result<EqError> {
        self.driver.progress();
        let mut q = self.queue.lock();
        let pos = q.iter().position(|e| e.is_err());
        match pos.and_then(|p| q.remove(p)) {
            Some(Err(e)) => {
                drop(q);
                self.changed();
                Ok(e)
            }
            _ => Err(Error::again()),
        }
    }

    /// `fi_eq_sread`: waits up to `timeout` (None: forever).
    pub fn sread(&self, timeout: Option<Duration>, peek: bool) -> Result<EqEvent> {
        if self.driver.waits().is_none() {
            return Err(Error::nosys("sread on an EQ opened with FI_WAIT_NONE"));
        }
        self.driver
            .block(timeout, || !self.queue.lock().is_empty())?;
        self.take(peek)
    }

    /// `fi_eq_write`: the application inserts an event.
    pub fn write(&self, e: EqEvent) {
        self.push(e);
    }

    /// The wait fd for epoll: readable while events are queued (no
    /// `fi_trywait` needed for those) and when a bound object's wake-up fd
    /// is (`fi_trywait` first).
    pub fn wait_fd(&self) -> Option<RawFd> {
        let fd = self.driver.expose();
        self.changed();
        fd
    }

    /// `fi_trywait`: Ok when it is safe to sleep on the wait fd,
    /// `FI_EAGAIN` when events are queued or a bound object has work.
    pub fn trywait(&self) -> Result<()> {
        self.driver.progress();
        if self.has_events() || !self.driver.trywait() || self.has_events() {
            return Err(Error::again());
        }
        Ok(())
    }

    /// Wakes a blocked `sread`, which returns FI_EAGAIN.
    pub fn signal(&self) {
        self.driver.signal();
    }

    /// Attaches an object's progress (endpoint or passive endpoint).
    pub fn attach(&self, p: Arc<dyn Progress>) -> Result<()> {
        self.driver.attach(p)
    }

    /// Detaches an object.
    pub fn detach(&self, p: &Arc<dyn Progress>) {
        self.driver.detach(p)
    }

    /// Objects bound to this queue.
    pub fn bound(&self) -> usize {
        self.bound.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn take_fitting_leaves_an_event_the_caller_has_no_room_for() {
        let q = EqCore::new(&EqAttr::default()).unwrap();
        q.push(EqEvent {
            event: 1,
            written: Some(vec![0; 64]),
            ..Default::default()
        });
        let room = 24;
        let fits = |e: &EqEvent| e.written.as_ref().is_none_or(|w| w.len() <= room);
        assert!(q.take_fitting(fits).unwrap().is_none(), "no room: it stays");
        assert_eq!(q.take(true).unwrap().event, 1, "still queued");
        assert!(q.take_fitting(|_| true).unwrap().is_some());
        assert!(q.take_fitting(|_| true).unwrap_err().is_again());
        q.push_err(EqError::default());
        assert_eq!(
            q.take_fitting(|_| true).unwrap_err().code(),
            errno::FI_EAVAIL
        );
        // Closing an object drops the events naming it, and only those.
        q.readerr().unwrap();
        for fid in [5, 6, 5] {
            q.push(EqEvent {
                fid,
                ..Default::default()
            });
        }
        q.forget(5);
        assert_eq!(q.take(false).unwrap().fid, 6);
        assert!(q.take(false).unwrap_err().is_again());
    }
}
