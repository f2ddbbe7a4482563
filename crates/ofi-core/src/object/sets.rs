//! Wait sets and poll sets as applications open them: a [`WaitSet`] from a
//! fabric (CQs, counters and EQs opened into it with `cq_in`, `cntr_in`,
//! `eq_in`), a [`PollSet`] from a domain.

use super::{refuse, CloseResult, CompletionQueue, Counter, DepGuard, Domain, EventQueue, Fabric};
use crate::consts::wait_obj;
use crate::error::{Error, Result};
use crate::util::cntr::{CntrAttr, CntrCore};
use crate::util::cq::{CqAttr, CqCore};
use crate::util::eq::{EqAttr, EqCore};
use crate::util::poll::{PollSetCore, Polled};
use crate::util::waitset::WaitSetCore;
use std::os::fd::{BorrowedFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

/// A wait set (`fi_wait_open`): one wait for many CQs, counters and EQs.
#[derive(Debug)]
pub struct WaitSet {
    core: Arc<WaitSetCore>,
    _parent: DepGuard,
}

impl WaitSet {
    /// `fi_wait`: progresses the members until one has something to read
    /// (Ok) or `timeout` passes (`FI_ETIMEDOUT`); None waits forever.
    pub fn wait(&self, timeout: Option<Duration>) -> Result<()> {
        self.core.wait(timeout)
    }
    /// The fd to put in epoll (`FI_GETWAIT`): readable when a member's is;
    /// call [`trywait`](Self::trywait) before sleeping on it.
    pub fn wait_fd(&self) -> Option<RawFd> {
        self.core.wait_fd()
    }
    /// `fi_trywait` on the set.
    pub fn trywait(&self) -> Result<()> {
        self.core.trywait()
    }
    /// The set's fd, for epoll, mio or tokio: readable when a member's
    /// is; call [`trywait`](Self::trywait) before sleeping on it.
    pub fn fd(&self) -> Result<BorrowedFd<'_>> {
        super::borrowed(self.core.driver(), "wait set")
    }
    pub(crate) fn core_arc(&self) -> &Arc<WaitSetCore> {
        &self.core
    }
    /// Closes the set; refused (`FI_EBUSY`) while CQs, counters or EQs use it.
    pub fn close(self) -> CloseResult<Self> {
        match self.core.members() {
            0 => Ok(()),
            n => refuse(self, "wait set", n),
        }
    }
}

/// A poll set (`fi_poll_open`): progresses many CQs and counters at once
/// and names those with news.
#[derive(Debug)]
pub struct PollSet {
    core: Arc<PollSetCore>,
    _parent: DepGuard,
}

impl PollSet {
    /// `fi_poll_add` of a CQ, reported with `context` while it holds entries.
    pub fn add_cq(&self, cq: &CompletionQueue, context: usize) {
        self.core.add(Polled::Cq(cq.core.clone()), context)
    }
    /// `fi_poll_add` of a counter, reported with `context` when its counts
    /// changed since the previous poll.
    pub fn add_cntr(&self, cntr: &Counter, context: usize) {
        self.core.add(Polled::Cntr(cntr.core.clone()), context)
    }
    /// `fi_poll_del` of a CQ; `FI_EINVAL` if it is not a member.
    pub fn del_cq(&self, cq: &CompletionQueue) -> Result<()> {
        self.core.del(&Polled::Cq(cq.core.clone()))
    }
    /// `fi_poll_del` of a counter; `FI_EINVAL` if it is not a member.
    pub fn del_cntr(&self, cntr: &Counter) -> Result<()> {
        self.core.del(&Polled::Cntr(cntr.core.clone()))
    }
    /// `fi_poll`: progresses every member and writes the contexts of those
    /// with news to `out`; returns how many.
    pub fn poll(&self, out: &mut [usize]) -> usize {
        self.core.poll(out)
    }
    /// As [`poll`](Self::poll), each context passed through `map` while the
    /// members are locked (see [`PollSetCore::poll_with`]).
    pub fn poll_with(&self, out: &mut [usize], map: impl Fn(usize) -> usize) -> usize {
        self.core.poll_with(out, map)
    }
    pub(crate) fn core_arc(&self) -> &Arc<PollSetCore> {
        &self.core
    }
    /// Closes the set; refused (`FI_EBUSY`) while it has members.
    pub fn close(self) -> CloseResult<Self> {
        match self.core.len() {
            0 => Ok(()),
            n => refuse(self, "poll set", n),
        }
    }
}

fn in_set(wait: u32, what: &str) -> Result<()> {
    if wait != wait_obj::FI_WAIT_SET {
        return Err(Error::inval(format!(
            "{what}: wait_obj {wait} is not FI_WAIT_SET, yet a wait set is given"
        )));
    }
    Ok(())
}

impl Fabric {
    /// Opens a wait set (`fi_wait_open`) with a wait object of kind
    /// `wait_obj` (FI_WAIT_UNSPEC, FI_WAIT_FD …).
    pub fn wait_set(&self, wait_obj: u32) -> Result<WaitSet> {
        Ok(WaitSet {
            core: WaitSetCore::new(wait_obj)?,
            _parent: DepGuard::new(&self.deps),
        })
    }
    /// Opens an event queue whose wait object is `set` (`attr.wait_obj`
    /// FI_WAIT_SET).
    pub fn eq_in(&self, attr: &EqAttr, set: &WaitSet) -> Result<EventQueue> {
        in_set(attr.wait_obj, "eq")?;
        let q = self.eq_any(attr)?;
        EqCore::join(&q.core, &set.core)?;
        Ok(q)
    }
}

impl Domain {
    /// Opens a poll set (`fi_poll_open`).
    pub fn poll_set(&self) -> Result<PollSet> {
        Ok(PollSet {
            core: PollSetCore::new(),
            _parent: DepGuard::new(&self.deps),
        })
    }
    /// Opens a completion queue whose wait object is `set` (`attr.wait_obj`
    /// FI_WAIT_SET).
    pub fn cq_in(&self, attr: &CqAttr, set: &WaitSet) -> Result<CompletionQueue> {
        in_set(attr.wait_obj, "cq")?;
        let q = self.cq_any(attr)?;
        CqCore::join(&q.core, &set.core)?;
        Ok(q)
    }
    /// Opens a counter whose wait object is `set` (`attr.wait_obj`
    /// FI_WAIT_SET).
    pub fn cntr_in(&self, attr: &CntrAttr, set: &WaitSet) -> Result<Counter> {
        in_set(attr.wait_obj, "cntr")?;
        let c = self.cntr_any(attr)?;
        CntrCore::join(&c.core, &set.core)?;
        Ok(c)
    }
}
