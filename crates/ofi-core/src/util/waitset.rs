//! Wait sets (`fi_wait_open`, `fi_wait`): one wait object for many CQs,
//! counters and EQs. Each member keeps its own wait fd, nested in the set's
//! epoll, so the set's fd is readable when any member's is; `fi_wait` is the
//! members' progress and the blocking wait CQs already use (a [`Driver`]
//! whose sources are the members), until one of them has something to read.

use super::cntr::CntrCore;
use super::cq::CqCore;
use super::driver::Driver;
use super::eq::EqCore;
use super::lock::SpinLock;
use crate::consts::wait_obj;
use crate::error::{errno, Error, Result};
use crate::provider::Progress;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

/// What a wait set (or poll set) watches: a CQ, counter or EQ.
pub trait Waitable: Send + Sync {
    /// The object's driver: its bound endpoints and wait fd.
    fn driver(&self) -> &Driver;
    /// Whether it has something to read now (entries queued; for a
    /// counter, a count changed since the application last read one).
    fn has_events(&self) -> bool;
}

impl Waitable for CqCore {
    fn driver(&self) -> &Driver {
        CqCore::driver(self)
    }
    fn has_events(&self) -> bool {
        CqCore::has_events(self)
    }
}

impl Waitable for EqCore {
    fn driver(&self) -> &Driver {
        EqCore::driver(self)
    }
    fn has_events(&self) -> bool {
        EqCore::has_events(self)
    }
}

impl Waitable for CntrCore {
    fn driver(&self) -> &Driver {
        CntrCore::driver(self)
    }
    fn has_events(&self) -> bool {
        CntrCore::has_events(self)
    }
}

/// A member as the set's driver sees it: a source whose progress is the
/// member's, whose wake-up fd is the member's wait fd, and whose arming
/// arms the member's endpoints.
struct Member {
    obj: Weak<dyn Waitable>,
    /// The endpoints each outstanding `arm` armed (one list per arm).
    armed: SpinLock<Vec<Vec<Arc<dyn Progress>>>>,
}

impl Progress for Member {
    fn progress(&self) {
        if let Some(o) = self.obj.upgrade() {
            o.driver().progress();
        }
    }
    fn arm(&self) -> bool {
        let Some(o) = self.obj.upgrade() else {
            return true;
        };
        let (safe, list) = o.driver().arm_sources();
        self.armed.lock().push(list);
        safe && !o.has_events()
    }
    fn disarm(&self) {
        let list = self.armed.lock().pop();
        if let (Some(o), Some(list)) = (self.obj.upgrade(), list) {
            o.driver().disarm_sources(list);
        }
    }
    fn wait_fd(&self) -> Option<RawFd> {
        self.obj.upgrade().and_then(|o| o.driver().expose())
    }
}

/// A wait set.
pub struct WaitSetCore {
    driver: Driver,
    members: SpinLock<Vec<Weak<dyn Waitable>>>,
    /// CQs, counters and EQs that use this set (a used set cannot close).
    pub(crate) bound: AtomicUsize,
}

impl std::fmt::Debug for WaitSetCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WaitSetCore")
            .field("members", &self.bound.load(Ordering::Relaxed))
            .finish()
    }
}

/// A member's place in a wait set; leaving the set when dropped.
pub struct Membership {
    set: Arc<WaitSetCore>,
    member: Arc<dyn Progress>,
    obj: Weak<dyn Waitable>,
}

impl std::fmt::Debug for Membership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Membership")
            .field("set", &self.set)
            .finish()
    }
}

impl Membership {
    /// The set.
    pub fn set(&self) -> &Arc<WaitSetCore> {
        &self.set
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        self.set.driver.detach(&self.member);
        self.set
            .members
            .lock()
            .retain(|m| !Weak::ptr_eq(m, &self.obj) && m.strong_count() > 0);
        self.set.bound.fetch_sub(1, Ordering::AcqRel);
    }
}

impl WaitSetCore {
    /// Opens a wait set with a wait object of kind `wait_obj`: FI_WAIT_UNSPEC,
    /// FI_WAIT_FD, FI_WAIT_POLLFD or FI_WAIT_YIELD (all served by one fd);
    /// `FI_EINVAL` for FI_WAIT_NONE, FI_WAIT_SET or an unknown kind,
    /// `FI_ENOSYS` for FI_WAIT_MUTEX_COND.
    pub fn new(wait_obj: u32) -> Result<Arc<Self>> {
        match wait_obj {
            wait_obj::FI_WAIT_UNSPEC
            | wait_obj::FI_WAIT_FD
            | wait_obj::FI_WAIT_POLLFD
            | wait_obj::FI_WAIT_YIELD => {}
            wait_obj::FI_WAIT_MUTEX_COND => {
                return Err(Error::nosys(
                    "wait set: FI_WAIT_MUTEX_COND is not supported (use FI_WAIT_FD)",
                ))
            }
            v => {
                return Err(Error::inval(format!(
                    "wait set: wait_obj = {v} is not a wait object a set can use"
                )))
            }
        }
        Ok(Arc::new(WaitSetCore {
            driver: Driver::new(true)?,
            members: SpinLock::new(Vec::new()),
            bound: AtomicUsize::new(0),
        }))
    }

    /// Adds a CQ, counter or EQ (opened with FI_WAIT_SET naming this set);
    /// it stays a member while the returned membership lives.
    pub fn join(self: &Arc<Self>, obj: Arc<dyn Waitable>) -> Result<Membership> {
        let weak = Arc::downgrade(&obj);
        let member: Arc<dyn Progress> = Arc::new(Member {
            obj: weak.clone(),
            armed: SpinLock::new(Vec::new()),
        });
        self.driver.attach(member.clone())?;
        self.members.lock().push(weak.clone());
        self.bound.fetch_add(1, Ordering::AcqRel);
        Ok(Membership {
            set: self.clone(),
            member,
            obj: weak,
        })
    }

    /// The members still alive, taken out of the lock (a member's last
    /// drop leaves the set, which takes the lock).
    fn live_members(&self) -> Vec<Arc<dyn Waitable>> {
        self.members
            .lock()
            .iter()
            .filter_map(Weak::upgrade)
            .collect()
    }

    /// Whether some member has something to read (no progress).
    pub fn has_events(&self) -> bool {
        self.live_members().iter().any(|m| m.has_events())
    }

    /// Takes the members' pending signals (`fi_cq_signal` on a member):
    /// true when one was signalled.
    fn take_member_signals(&self) -> bool {
        self.live_members()
            .iter()
            .fold(false, |any, m| m.driver().take_signal() | any)
    }

    /// `fi_wait`: drives the members' progress until one has something to
    /// read or is signalled (Ok) or `timeout` passes (`FI_ETIMEDOUT`);
    /// None waits forever.
    pub fn wait(&self, timeout: Option<Duration>) -> Result<()> {
        let ready = || self.has_events() | self.take_member_signals();
        match self.driver.block(timeout, ready) {
            Err(e) if e.is_again() => Err(Error::new(
                errno::FI_ETIMEDOUT,
                "fi_wait: no member had an event in time",
            )),
            r => r,
        }
    }

    /// `fi_trywait` on the set: Ok when it is safe to sleep on its fd,
    /// `FI_EAGAIN` when a member has something to read or work pending.
    pub fn trywait(&self) -> Result<()> {
        self.driver.progress();
        for m in &self.live_members() {
            m.driver().reset_signal();
        }
        if self.has_events() || !self.driver.trywait() || self.has_events() {
            return Err(Error::again());
        }
        Ok(())
    }

    /// The set's driver (its wait fd).
    pub fn driver(&self) -> &Driver {
        &self.driver
    }

    /// The set's fd (`FI_GETWAIT`): readable when a member's fd is.
    pub fn wait_fd(&self) -> Option<RawFd> {
        self.driver.waits().map(|w| w.as_raw_fd())
    }

    /// Members.
    pub fn members(&self) -> usize {
        self.bound.load(Ordering::Acquire)
    }
}

/// Puts `obj` in `set` once, keeping the membership in `slot` (the
/// object's own field); `FI_EINVAL` when it already is in a set.
pub fn join_once(
    slot: &std::sync::OnceLock<Membership>,
    set: &Arc<WaitSetCore>,
    obj: Arc<dyn Waitable>,
) -> Result<()> {
    if slot.get().is_some() {
        return Err(Error::inval("already a member of a wait set"));
    }
    let m = set.join(obj)?;
    slot.set(m)
        .map_err(|_| Error::inval("already a member of a wait set"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::cntr::CntrAttr;
    use crate::util::eq::{EqAttr, EqEvent};

    fn eq() -> Arc<EqCore> {
        EqCore::new(&EqAttr {
            size: 8,
            wait_obj: wait_obj::FI_WAIT_SET,
        })
        .expect("eq")
    }

    #[test]
    fn wait_returns_when_a_member_has_an_event() {
        let set = WaitSetCore::new(wait_obj::FI_WAIT_FD).expect("set");
        let q = eq();
        let _m = set.join(q.clone()).expect("join");
        let c = CntrCore::new(&CntrAttr {
            events: 0,
            wait_obj: wait_obj::FI_WAIT_SET,
        })
        .expect("cntr");
        let _n = set.join(c.clone()).expect("join");
        assert_eq!(set.members(), 2);
        let e = set.wait(Some(Duration::from_millis(1))).unwrap_err();
        assert_eq!(e.code(), errno::FI_ETIMEDOUT);
        q.write(EqEvent::default());
        set.wait(Some(Duration::ZERO)).expect("the EQ has an event");
        assert!(set.trywait().unwrap_err().is_again());
        q.read(false).expect("event");
        assert!(set.wait(Some(Duration::ZERO)).is_err());
        set.trywait().expect("nothing to read");
        c.add(1);
        set.wait(Some(Duration::ZERO)).expect("the counter changed");
        c.read();
        assert!(set.wait(Some(Duration::ZERO)).is_err());
    }

    #[test]
    fn the_set_fd_is_readable_while_a_member_has_events() {
        let set = WaitSetCore::new(wait_obj::FI_WAIT_FD).expect("set");
        assert!(set.wait_fd().is_some());
        let q = eq();
        let m = set.join(q.clone()).expect("join");
        let readable = || set.driver.waits().is_some_and(|w| w.readable_now());
        assert!(!readable());
        q.write(EqEvent::default());
        assert!(readable());
        q.read(false).expect("event");
        assert!(!readable());
        drop(m);
        assert_eq!(set.members(), 0);
        q.write(EqEvent::default());
        assert!(!readable(), "a member that left is no longer watched");
    }
}
