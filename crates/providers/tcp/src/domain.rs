//! What the endpoints of one domain share: an epoll set (the wait fd every
//! endpoint reports), connection keys, and progress. Manual progress is per
//! domain: a CQ, counter or EQ call on any endpoint drives every endpoint of
//! its domain, so a sender that only waits on its peer's queue still sends.

use ofi_core::error::{Error, Result};
use ofi_core::util::lock::SpinLock;
use ofi_inet::poller::Poller;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

/// An endpoint the domain drives.
pub trait Member: Send + Sync {
    /// Moves this endpoint's bytes and completions (non-blocking; skips if busy).
    fn drive(&self);
    /// True when it must not sleep: it has work no socket readiness
    /// announces (a connect in progress, wakeups of its receive side, bytes
    /// read ahead). A contended endpoint is restless.
    fn restless(&self) -> bool;
    /// True when driving it now would find nothing to do unless one of the
    /// domain's sockets is ready (no connect, write, read-ahead bytes or
    /// parked message pending). A busy or contended endpoint is not idle.
    fn idle(&self) -> bool;
    /// True when the endpoint has at most one connection: polling that
    /// socket with `recv` costs one system call, the same as asking the
    /// poller, and saves one when a message is there.
    fn single(&self) -> bool;
    /// Puts every socket it took out of the poller back in (someone is
    /// about to sleep on the poller).
    fn watch_all(&self);
}

/// The shared part of a tcp domain.
pub struct Shared {
    /// Readiness of every socket of the domain.
    pub poller: Poller,
    members: SpinLock<Vec<Weak<dyn Member>>>,
    next_key: AtomicU64,
    poll_recv: bool,
    /// Waiters between `arm` and `disarm`: they sleep on the poller.
    armed: AtomicUsize,
    /// A progress thread sleeps on the poller.
    auto: AtomicBool,
    /// Set by each progress pass: the lone member polls its one socket
    /// with `recv` (and may keep it out of the poller unless `armed`).
    quiet: AtomicBool,
    /// Progress passes since a waiter last armed (up to [`QUIET_AFTER`]).
    since_arm: AtomicU32,
}

/// Passes without a waiter after which the domain counts as busy-polled
/// (`quiet`): a caller that sleeps every few passes (a storage server
/// between batches) keeps its sockets in the poller instead of paying an
/// `epoll_ctl` to take each out after every wakeup and another to put it
/// back before the next sleep.
const QUIET_AFTER: u32 = 64;

impl Shared {
    /// A new domain's shared state.
    /// `poll_recv`: let a lone single-connection endpoint poll with `recv`
    /// (FI_TCP_POLL_RECV).
    pub fn new(poll_recv: bool) -> Result<Arc<Shared>> {
        Ok(Arc::new(Shared {
            poller: Poller::new().map_err(|e| Error::os(e, "tcp: epoll"))?,
            members: SpinLock::new(Vec::new()),
            next_key: AtomicU64::new(1),
            poll_recv,
            armed: AtomicUsize::new(0),
            auto: AtomicBool::new(false),
            quiet: AtomicBool::new(false),
            since_arm: AtomicU32::new(0),
        }))
    }

    /// A key unique in this domain (connection ids, poller keys).
    pub fn key(&self) -> u64 {
        self.next_key.fetch_add(1, Ordering::Relaxed)
    }

    /// Adds an endpoint.
    pub fn join(&self, m: Weak<dyn Member>) {
        let mut g = self.members.lock();
        g.retain(|w| w.strong_count() > 0);
        g.push(m);
    }

    /// Drives the endpoints of the domain. An idle poll costs one
    /// `epoll_wait` that takes no socket lock (a `recv` on every socket
    /// would contend with the kernel delivering the next message); sockets
    /// are read only when one is ready or an endpoint has other work.
    pub fn progress(&self) {
        // Another thread driving the domain is as good as us.
        let Some(g) = self.members.try_lock() else {
            return;
        };
        let alone = self.poll_recv && g.len() == 1;
        let calm = self.since_arm.load(Ordering::Relaxed);
        if calm < QUIET_AFTER {
            self.since_arm.store(calm + 1, Ordering::Relaxed);
        }
        self.quiet.store(
            alone && !self.auto.load(Ordering::Relaxed) && calm >= QUIET_AFTER,
            Ordering::Relaxed,
        );
        // Asked of the poller at most once per pass, and only when needed.
        let mut ready = None;
        for w in g.iter() {
            if let Some(m) = w.upgrade() {
                let go = (alone && m.single())
                    || *ready.get_or_insert_with(|| self.poller.any_ready())
                    || !m.idle();
                if go {
                    m.drive();
                }
            }
        }
    }

    /// True while the lone member of the domain may keep its one socket
    /// out of the poller (it is driven on every pass, polling with `recv`).
    pub fn quiet(&self) -> bool {
        // The armed count is read here, not folded into the flag: `arm`
        // raises it before taking any endpoint's lock, and this is read
        // under one, so no pass can leave a stale "quiet" behind it.
        self.quiet.load(Ordering::Relaxed) && !self.armed()
    }

    /// True while some waiter is between `arm` and `disarm`.
    pub fn armed(&self) -> bool {
        self.armed.load(Ordering::SeqCst) != 0
    }

    /// A waiter is about to sleep on the poller: every socket goes back in
    /// (epoll then reports what arrived meanwhile), and none leaves again
    /// until the matching [`disarm`](Self::disarm). True if it may sleep.
    pub fn arm(&self) -> bool {
        self.armed.fetch_add(1, Ordering::SeqCst);
        self.since_arm.store(0, Ordering::Relaxed);
        // Under the members lock, in the order progress takes the locks
        // (members, then an endpoint's), with nothing allocated: a composing
        // provider arms an idle inner endpoint on its hot path.
        for m in self.members.lock().iter().filter_map(Weak::upgrade) {
            m.watch_all();
        }
        self.may_sleep()
    }

    /// The waiter of an [`arm`](Self::arm) woke up or gave up.
    pub fn disarm(&self) {
        let _ = self
            .armed
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }

    /// True when a waiter may sleep on the poller: nothing is ready now and
    /// no endpoint has work that readiness would not report (a connect in
    /// progress, a wakeup of its receive side, bytes read ahead).
    pub fn may_sleep(&self) -> bool {
        if self.poller.any_ready() {
            return false;
        }
        let g = self.members.lock();
        !g.iter().filter_map(Weak::upgrade).any(|m| m.restless())
    }

    /// The wait fd.
    pub fn fd(&self) -> RawFd {
        self.poller.fd()
    }

    /// FI_PROGRESS_AUTO: a thread that waits on the domain's sockets and
    /// drives its endpoints, until the domain and its endpoints are gone.
    pub fn start_auto_progress(self: &Arc<Self>) -> Result<()> {
        self.auto.store(true, Ordering::Relaxed);
        self.quiet.store(false, Ordering::Relaxed);
        let weak = Arc::downgrade(self);
        std::thread::Builder::new()
            .name("ofi-tcp-progress".into())
            .spawn(move || {
                while let Some(shared) = weak.upgrade() {
                    shared.poller.wait(10);
                    shared.progress();
                }
            })
            .map(|_| ())
            .map_err(|e| Error::os(e, "tcp: starting the progress thread"))
    }
}
