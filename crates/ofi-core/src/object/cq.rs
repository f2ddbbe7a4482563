//! The completion queue (`fi_cq_open`): reads, blocking reads and the wait
//! fd over the core's shared queue ([`CqCore`]).

use super::{borrowed, refuse, CloseResult, DepGuard};
use crate::error::Result;
use crate::util::cq::{CqCore, CqErrEntry, CqFormat};
use std::os::fd::{BorrowedFd, RawFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// A completion queue.
#[derive(Debug)]
pub struct CompletionQueue {
    pub(super) core: Arc<CqCore>,
    pub(super) _parent: DepGuard,
}

impl CompletionQueue {
    /// Reads up to `out.len()` completions (`fi_cq_read`).
    #[inline]
    pub fn read<E: CqFormat>(&self, out: &mut [E]) -> Result<usize> {
        self.core.read(out)
    }
    /// Reads completions with source addresses (`fi_cq_readfrom`).
    pub fn readfrom<E: CqFormat>(&self, out: &mut [E], src: &mut [u64]) -> Result<usize> {
        self.core.readfrom(out, src)
    }
    /// Reads the next error completion (`fi_cq_readerr`).
    pub fn readerr(&self) -> Result<CqErrEntry> {
        self.core.readerr()
    }
    /// Blocks for completions (`fi_cq_sread`); `None` waits forever.
    pub fn sread<E: CqFormat>(&self, out: &mut [E], timeout: Option<Duration>) -> Result<usize> {
        self.core.sread(out, timeout)
    }
    /// Blocks for completions with sources (`fi_cq_sreadfrom`).
    pub fn sreadfrom<E: CqFormat>(
        &self,
        out: &mut [E],
        src: &mut [u64],
        timeout: Option<Duration>,
    ) -> Result<usize> {
        self.core.sreadfrom(out, src, timeout)
    }
    /// Wakes a blocked reader (`fi_cq_signal`): an `sread` returns
    /// `FI_EAGAIN`, a wait set holding the queue wakes, and the wait fd is
    /// readable until a reader takes the signal (the next `trywait` or
    /// blocking read does).
    pub fn signal(&self) {
        self.core.signal()
    }
    /// The fd to put in epoll (`fi_control(FI_GETWAIT)`); call
    /// [`trywait`](Self::trywait) before sleeping on it.
    pub fn wait_fd(&self) -> Option<RawFd> {
        self.core.wait_fd()
    }
    /// `fi_trywait`: Ok if it is safe to sleep on the wait fd.
    pub fn trywait(&self) -> Result<()> {
        self.core.trywait()
    }
    /// The wait fd, for the application's epoll, mio or tokio (`AsyncFd`):
    /// made readable while completions are queued from now on; call
    /// [`trywait`](Self::trywait) before sleeping on it. It lives as long
    /// as the queue. `FI_ENODATA` for a queue opened with FI_WAIT_NONE.
    pub fn fd(&self) -> Result<BorrowedFd<'_>> {
        self.core.wait_fd();
        borrowed(self.core.driver(), "completion queue")
    }
    pub(crate) fn core_arc(&self) -> &Arc<CqCore> {
        &self.core
    }
    /// Closes the queue; refused while endpoints are bound to it.
    pub fn close(self) -> CloseResult<Self> {
        match self.core.bound.load(Ordering::Acquire) {
            0 => Ok(()),
            n => refuse(self, "completion queue", n),
        }
    }
}
