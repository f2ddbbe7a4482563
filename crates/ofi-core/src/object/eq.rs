//! The event queue (`fi_eq_open`): connection, registration and AV events,
//! over the core's shared queue ([`EqCore`]).

use super::{borrowed, refuse, CloseResult, DepGuard};
use crate::error::Result;
use crate::util::eq::{EqCore, EqError, EqEvent};
use std::os::fd::{BorrowedFd, RawFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// An event queue.
#[derive(Debug)]
pub struct EventQueue {
    pub(super) core: Arc<EqCore>,
    pub(super) _parent: DepGuard,
}

impl EventQueue {
    /// `fi_eq_read`: the next event; `FI_EAGAIN` when none, `FI_EAVAIL`
    /// when an error entry is next.
    pub fn read(&self) -> Result<EqEvent> {
        self.core.read(false)
    }
    /// `fi_eq_read` with FI_PEEK: the next event, left in the queue.
    pub fn peek(&self) -> Result<EqEvent> {
        self.core.read(true)
    }
    /// `fi_eq_readerr`.
    pub fn readerr(&self) -> Result<EqError> {
        self.core.readerr()
    }
    /// `fi_eq_sread`: waits up to `timeout` (None: forever).
    pub fn sread(&self, timeout: Option<Duration>) -> Result<EqEvent> {
        self.core.sread(timeout, false)
    }
    /// `fi_eq_write`: inserts an application event.
    pub fn write(&self, e: EqEvent) {
        self.core.write(e)
    }
    /// The wait fd for epoll: readable while events are queued; call
    /// [`trywait`](Self::trywait) before sleeping on it.
    pub fn wait_fd(&self) -> Option<RawFd> {
        self.core.wait_fd()
    }
    /// `fi_trywait`: Ok if it is safe to sleep on the wait fd.
    pub fn trywait(&self) -> Result<()> {
        self.core.trywait()
    }
    /// Wakes a blocked `sread`.
    pub fn signal(&self) {
        self.core.signal()
    }
    /// The wait fd, for epoll, mio or tokio: readable while events are
    /// queued; call [`trywait`](Self::trywait) before sleeping on it.
    /// `FI_ENODATA` for a queue opened with FI_WAIT_NONE.
    pub fn fd(&self) -> Result<BorrowedFd<'_>> {
        self.core.wait_fd();
        borrowed(self.core.driver(), "event queue")
    }
    pub(crate) fn core_arc(&self) -> &Arc<EqCore> {
        &self.core
    }
    /// Closes the queue; refused while endpoints are bound to it.
    pub fn close(self) -> CloseResult<Self> {
        match self.core.bound.load(Ordering::Acquire) {
            0 => Ok(()),
            n => refuse(self, "event queue", n),
        }
    }
}
