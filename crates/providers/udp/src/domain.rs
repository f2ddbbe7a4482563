//! What the endpoints of one domain share: an epoll set over their sockets
//! and a timer (the wait fd every endpoint reports), and progress. Manual
//! progress is per domain, as tcp's: a CQ, counter or EQ call on any
//! endpoint drives every endpoint of its domain, so a sender that only
//! waits on its peer's queue still retransmits and acknowledges.
//!
//! The sockets join the epoll set only when a waiter first arms the domain
//! (a blocking read, `fi_trywait`, the auto-progress thread): a socket in an
//! epoll set makes the kernel run the set's wake-up callback under a lock
//! for every datagram that arrives and every one sent, which an application
//! that only busy-polls never needs. Readiness is level-triggered, so
//! datagrams that arrived before the sockets joined still wake the waiter.

use crate::sys::{self, Timer};
use ofi_core::error::{Error, Result};
use ofi_core::util::lock::SpinLock;
use ofi_inet::poller::Poller;
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Instant;

/// An endpoint the domain drives.
pub trait Member: Send + Sync {
    /// Receives, sends, runs timers and completes (non-blocking; skips
    /// when another thread holds the endpoint).
    fn drive(&self);
    /// The earliest time the endpoint has timer work (retransmission,
    /// acknowledgement, the dead bound), if any.
    fn deadline(&self) -> Option<Instant>;
    /// True when it must not sleep: it has work no readiness announces.
    fn restless(&self) -> bool;
}

/// The shared part of a udp domain.
pub struct Shared {
    /// Readiness of the timer, and of every socket of the domain once a
    /// waiter armed it.
    poller: Poller,
    /// The sockets to watch (fd, key) and whether they are in the poller.
    watched: SpinLock<Watched>,
    timer: Timer,
    members: SpinLock<Vec<Weak<dyn Member>>>,
    /// The members one progress call drives (kept: the hot path does not
    /// allocate); held by the thread driving.
    driving: SpinLock<Vec<Arc<dyn Member>>>,
    next_key: AtomicU64,
    auto: AtomicBool,
}

/// The poller key of the domain's timer.
const TIMER_KEY: u64 = 0;

#[derive(Default)]
struct Watched {
    fds: Vec<(RawFd, u64)>,
    in_poller: bool,
}

impl Shared {
    /// A new domain's shared state.
    pub fn new() -> Result<Arc<Shared>> {
        let poller = Poller::new().map_err(|e| Error::os(e, "udp: epoll"))?;
        let timer = Timer::new().map_err(|e| Error::os(e, "udp: timerfd"))?;
        poller
            .add(&timer, TIMER_KEY, false)
            .map_err(|e| Error::os(e, "udp: epoll add"))?;
        Ok(Arc::new(Shared {
            poller,
            watched: SpinLock::new(Watched::default()),
            timer,
            members: SpinLock::new(Vec::new()),
            driving: SpinLock::new(Vec::new()),
            next_key: AtomicU64::new(TIMER_KEY + 1),
            auto: AtomicBool::new(false),
        }))
    }

    /// A key unique in this domain (poller keys).
    pub fn key(&self) -> u64 {
        self.next_key.fetch_add(1, Ordering::Relaxed)
    }

    /// Watches a socket of the domain for readability, tagged `key` (in
    /// the epoll set once a waiter arms the domain).
    pub fn watch(&self, fd: RawFd, key: u64) -> io::Result<()> {
        let mut w = self.watched.lock();
        if w.in_poller {
            sys::watch(&self.poller, fd, key)?;
        }
        w.fds.push((fd, key));
        Ok(())
    }

    /// Stops watching a socket (before it closes).
    pub fn unwatch(&self, fd: RawFd) {
        let mut w = self.watched.lock();
        if let Some(i) = w.fds.iter().position(|&(f, _)| f == fd) {
            w.fds.swap_remove(i);
            if w.in_poller {
                sys::unwatch(&self.poller, fd);
            }
        }
    }

    /// Puts the watched sockets in the epoll set, once.
    fn enter_poller(&self) {
        let mut w = self.watched.lock();
        if w.in_poller {
            return;
        }
        for &(fd, key) in &w.fds {
            if let Err(e) = sys::watch(&self.poller, fd, key) {
                tracing::warn!(error = %e, "udp: a socket could not join the domain's epoll set; waiters may sleep through its datagrams");
            }
        }
        w.in_poller = true;
    }

    /// Adds an endpoint.
    pub fn join(&self, m: Weak<dyn Member>) {
        let mut g = self.members.lock();
        g.retain(|w| w.strong_count() > 0);
        g.push(m);
    }

    /// Drives every endpoint of the domain.
    pub fn progress(&self) {
        // Another thread driving the domain is as good as us.
        self.with_members(|ms| {
            for m in ms {
                m.drive();
            }
        });
    }

    /// Runs `f` over the live endpoints, in a list kept between calls (the
    /// hot path allocates nothing); None, without running it, while another
    /// thread holds the list or the members.
    fn with_members<R>(&self, f: impl FnOnce(&[Arc<dyn Member>]) -> R) -> Option<R> {
        let mut d = self.driving.try_lock()?;
        let g = self.members.try_lock()?;
        d.extend(g.iter().filter_map(Weak::upgrade));
        drop(g);
        let r = f(&d);
        // Taken out before the references drop: an endpoint's last
        // reference may go here, and its drop must not find the lock held.
        let members = std::mem::take(&mut *d);
        let cap = members.capacity();
        drop(d);
        let mut members = members;
        members.clear();
        if let Some(mut d) = self.driving.try_lock() {
            if d.capacity() < cap {
                *d = members;
            }
        }
        Some(r)
    }

    /// A waiter is about to sleep on the wait fd: the timer is set to the
    /// earliest deadline of the domain's endpoints. True if it may sleep
    /// (nothing ready, nothing restless).
    pub fn arm(&self) -> bool {
        self.enter_poller();
        self.timer.drain();
        // Another thread in the list (driving, or arming): not now.
        let Some((restless, next)) = self.with_members(|ms| {
            (
                ms.iter().any(|m| m.restless()),
                ms.iter().filter_map(|m| m.deadline()).min(),
            )
        }) else {
            return false;
        };
        if restless {
            return false;
        }
        let now = Instant::now();
        match next {
            Some(t) if t <= now => return false,
            Some(t) => self.timer.set(Some(t - now)),
            None => self.timer.set(None),
        }
        !self.poller.any_ready()
    }

    /// The waiter woke up or gave up.
    pub fn disarm(&self) {}

    /// The wait fd.
    pub fn fd(&self) -> RawFd {
        self.poller.fd()
    }

    /// FI_PROGRESS_AUTO: a thread that waits on the domain's sockets and
    /// timer and drives its endpoints, until the domain and its endpoints
    /// are gone.
    pub fn start_auto_progress(self: &Arc<Self>) -> Result<()> {
        self.auto.store(true, Ordering::Relaxed);
        let weak = Arc::downgrade(self);
        std::thread::Builder::new()
            .name("ofi-udp-progress".into())
            .spawn(move || {
                while let Some(shared) = weak.upgrade() {
                    if shared.arm() {
                        shared.poller.wait(10);
                    }
                    shared.progress();
                }
            })
            .map(|_| ())
            .map_err(|e| Error::os(e, "udp: starting the progress thread"))
    }
}
