//! The counter (`fi_cntr_open`): success and error counts, waits for a
//! threshold, over the core's shared counter ([`CntrCore`]).

use super::{borrowed, refuse, CloseResult, DepGuard};
use crate::error::Result;
use crate::util::cntr::CntrCore;
use std::os::fd::{BorrowedFd, RawFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// A counter.
#[derive(Debug)]
pub struct Counter {
    pub(super) core: Arc<CntrCore>,
    pub(super) _parent: DepGuard,
}

impl Counter {
    /// `fi_cntr_read`.
    pub fn read(&self) -> u64 {
        self.core.read()
    }
    /// `fi_cntr_readerr`.
    pub fn readerr(&self) -> u64 {
        self.core.readerr()
    }
    /// `fi_cntr_add`.
    pub fn add(&self, n: u64) {
        self.core.add(n);
        crate::util::trigger::run_ready();
    }
    /// `fi_cntr_set`.
    pub fn set(&self, v: u64) {
        self.core.set(v);
        crate::util::trigger::run_ready();
    }
    /// `fi_cntr_adderr`.
    pub fn add_err(&self, n: u64) {
        self.core.add_err(n)
    }
    /// `fi_cntr_seterr`.
    pub fn set_err(&self, v: u64) {
        self.core.set_err(v)
    }
    /// `fi_cntr_wait`.
    pub fn wait(&self, threshold: u64, timeout: Option<Duration>) -> Result<()> {
        self.core.wait(threshold, timeout)
    }
    /// The fd to put in epoll; call [`trywait`](Self::trywait) before sleeping on it.
    pub fn wait_fd(&self) -> Option<RawFd> {
        self.core.wait_fd()
    }
    /// `fi_trywait` for a count of `threshold`.
    pub fn trywait(&self, threshold: u64) -> Result<()> {
        self.core.trywait(threshold)
    }
    /// The wait fd, for epoll, mio or tokio: readable once a count
    /// changed; call [`trywait`](Self::trywait) before sleeping on it.
    /// `FI_ENODATA` for a counter opened with FI_WAIT_NONE.
    pub fn fd(&self) -> Result<BorrowedFd<'_>> {
        self.core.wait_fd();
        borrowed(self.core.driver(), "counter")
    }
    pub(crate) fn core_arc(&self) -> &Arc<CntrCore> {
        &self.core
    }
    /// Closes the counter; refused while endpoints are bound to it.
    pub fn close(self) -> CloseResult<Self> {
        match self.core.bound.load(Ordering::Acquire) {
            0 => Ok(()),
            n => refuse(self, "counter", n),
        }
    }
}
