//! Event queues: connection-management and asynchronous control events
//! (FI_CONNREQ, FI_CONNECTED, FI_SHUTDOWN …), error entries read with
//! readerr, blocking reads with a timeout, and a wait fd.

use super::driver::Driver;
use super::lock::SpinLock;
use crate::consts::wait_obj;
use crate::error::{errno, Error, Result};
use crate::info::Info;
use crate::provider::Progress;
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
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

/// The event queue shared by the core and providers.
pub struct EqCore {
    queue: SpinLock<VecDeque<std::result::Result<EqEvent, EqError>>>,
    driver: Driver,
    pub(crate) bound: AtomicUsize,
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
            | wait_obj::FI_WAIT_POLLFD => true,
            v => {
                return Err(Error::inval(format!(
                    "eq_attr.wait_obj = {v} is not supported"
                )))
            }
        };
        Ok(Arc::new(EqCore {
            queue: SpinLock::new(VecDeque::with_capacity(attr.size.clamp(16, 4096))),
            driver: Driver::new(waitable)?,
            bound: AtomicUsize::new(0),
        }))
    }

    /// Provider side: queues an event.
    pub fn push(&self, e: EqEvent) {
        self.queue.lock().push_back(Ok(e));
        self.driver.wake();
    }

    /// Provider side: queues an error entry.
    pub fn push_err(&self, e: EqError) {
        self.queue.lock().push_back(Err(e));
        self.driver.wake();
    }

    fn take(&self, peek: bool) -> Result<EqEvent> {
        let mut q = self.queue.lock();
        match q.front() {
            None => Err(Error::again()),
            Some(Err(_)) => Err(Error::new(
                errno::FI_EAVAIL,
                "an error entry is available: call readerr",
            )),
            Some(Ok(e)) if peek => Ok(e.clone()),
            Some(Ok(_)) => match q.pop_front() {
                Some(Ok(e)) => Ok(e),
                _ => Err(Error::again()),
            },
        }
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
            Some(Err(e)) => Ok(e),
            _ => Err(Error::again()),
        }
    }

    /// `fi_eq_sread`: waits up to `timeout` (None: forever).
    pub fn sread(&self, timeout: Option<Duration>, peek: bool) -> Result<EqEvent> {
        if self.driver.wait_set().is_none() {
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

    /// The wait fd for epoll.
    pub fn wait_fd(&self) -> Option<RawFd> {
        self.driver.wait_set().map(|w| w.as_raw_fd())
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
