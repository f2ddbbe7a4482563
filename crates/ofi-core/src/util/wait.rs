//! Wait objects: an epoll set with an eventfd for local wake-ups, beside the
//! wake-up fds of providers. The epoll fd is what `wait_fd()` exposes, so a
//! CQ, counter, EQ or wait set plugs into the application's own epoll, mio
//! or tokio. Once exposed, a second eventfd in the set stays readable while
//! the owner has something to read ([`WaitFd::set_ready`]), so the fd is
//! readable without a prior `fi_trywait` (libfabric's `fi_control`
//! FI_GETWAIT contract). System calls go through rustix.
// Unsafe blocks: borrowing a raw fd (a provider's, or a watched one) for
// epoll_ctl.
#![allow(unsafe_code)]

use crate::error::{Error, Result};
use rustix::event::{epoll, eventfd, EventfdFlags};
use rustix::io::Errno;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// An epoll set with a built-in eventfd for local signals.
#[derive(Debug)]
pub struct WaitFd {
    epoll: OwnedFd,
    event: OwnedFd,
    /// Readable while the owner has something to read; made when the fd is
    /// first exposed (an object nobody watches pays nothing for it).
    ready: OnceLock<Ready>,
}

/// The level-triggered "something to read" eventfd and whether it is set.
#[derive(Debug)]
struct Ready {
    fd: OwnedFd,
    set: Mutex<bool>,
}

fn os(e: Errno, what: &str) -> Error {
    Error::os(e.into(), what)
}

/// Adds `fd` to `epoll` for readability (level-triggered); already there is fine.
fn add_fd(epoll: &OwnedFd, fd: BorrowedFd<'_>) -> Result<()> {
    let data = epoll::EventData::new_u64(fd.as_raw_fd() as u64);
    match epoll::add(epoll, fd, data, epoll::EventFlags::IN) {
        Ok(()) | Err(Errno::EXIST) => Ok(()),
        Err(e) => Err(os(e, "epoll_ctl(ADD)")),
    }
}

/// Adds one to an eventfd's count.
fn bump(fd: &OwnedFd) {
    // A full counter (2^64 - 2 signals) or a nonblocking EAGAIN both leave
    // the fd readable, which is all a signal means.
    let _ = rustix::io::write(fd, &1u64.to_ne_bytes());
}

/// Resets an eventfd's count to zero.
fn clear(fd: &OwnedFd) {
    let mut v = [0u8; 8];
    let _ = rustix::io::read(fd, &mut v);
}

impl WaitFd {
    /// Creates the epoll set and its eventfd.
    pub fn new() -> Result<Self> {
        let epoll =
            epoll::create(epoll::CreateFlags::CLOEXEC).map_err(|e| os(e, "epoll_create1"))?;
        let event = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)
            .map_err(|e| os(e, "eventfd"))?;
        add_fd(&epoll, event.as_fd())?;
        Ok(WaitFd {
            epoll,
            event,
            ready: OnceLock::new(),
        })
    }

    /// Adds a provider's fd (level-triggered, readable).
    pub fn add(&self, fd: RawFd) -> Result<()> {
        // SAFETY: a provider's wake-up fd stays open while its endpoint is
        // attached (it is removed on detach, before the endpoint closes);
        // the borrow lasts for this call only.
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        add_fd(&self.epoll, fd)
    }

    /// Adds another wait object's fd: its readiness shows in this set (a
    /// wait set holds the fds of its members).
    pub fn add_nested(&self, other: &WaitFd) -> Result<()> {
        add_fd(&self.epoll, other.epoll.as_fd())
    }

    /// Removes a provider's fd.
    pub fn remove(&self, fd: RawFd) {
        // SAFETY: as in `add`; removing an fd that is not in the set only fails.
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        let _ = epoll::delete(&self.epoll, fd);
    }

    /// Removes a nested wait object's fd.
    pub fn remove_nested(&self, other: &WaitFd) {
        let _ = epoll::delete(&self.epoll, other.epoll.as_fd());
    }

    /// Wakes a waiter (`fi_cq_signal`).
    pub fn signal(&self) {
        bump(&self.event);
    }

    /// Clears pending local signals.
    pub fn drain(&self) {
        clear(&self.event);
    }

    /// The fd to hand out (`FI_GETWAIT`): from now on it is also readable
    /// while [`set_ready`](Self::set_ready) says so. Returns the epoll fd.
    pub fn expose(&self) -> Result<RawFd> {
        if self.ready.get().is_none() {
            let fd = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)
                .map_err(|e| os(e, "eventfd"))?;
            let r = Ready {
                fd,
                set: Mutex::new(false),
            };
            if self.ready.set(r).is_ok() {
                if let Some(r) = self.ready.get() {
                    add_fd(&self.epoll, r.fd.as_fd())?;
                }
            }
        }
        Ok(self.epoll.as_raw_fd())
    }

    /// Whether the fd was exposed (the level is kept).
    #[inline]
    pub fn exposed(&self) -> bool {
        self.ready.get().is_some()
    }

    /// Once exposed, makes the fd readable while `has_events()` holds. The
    /// owner calls it after every change of what it holds; calls are
    /// serialised and `has_events` is evaluated inside, so the last change
    /// decides whatever the interleaving. Nothing happens before exposure.
    #[inline]
    pub fn set_ready(&self, has_events: impl FnOnce() -> bool) {
        if let Some(r) = self.ready.get() {
            let mut set = r.set.lock().unwrap_or_else(|e| e.into_inner());
            let want = has_events();
            if want != *set {
                if want {
                    bump(&r.fd);
                } else {
                    clear(&r.fd);
                }
                *set = want;
            }
        }
    }

    /// True when some fd in the set is readable now (a waiter sleeping on
    /// the set would be woken).
    pub fn readable_now(&self) -> bool {
        let mut ev = [epoll::Event {
            flags: epoll::EventFlags::empty(),
            data: epoll::EventData::new_u64(0),
        }];
        let zero = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        matches!(epoll::wait(&self.epoll, &mut ev, Some(&zero)), Ok(n) if n > 0)
    }

    /// Blocks until some fd in the set is readable or the timeout passes.
    /// Returns false on timeout.
    pub fn wait(&self, timeout: Option<Duration>) -> Result<bool> {
        // Whole milliseconds, a nonzero timeout at least one (epoll's unit).
        let t = timeout.map(|d| {
            let ms = d
                .as_millis()
                .min(i32::MAX as u128)
                .max(u128::from(!d.is_zero())) as i64;
            rustix::event::Timespec {
                tv_sec: ms / 1000,
                tv_nsec: (ms % 1000) * 1_000_000,
            }
        });
        let mut evs = [epoll::Event {
            flags: epoll::EventFlags::empty(),
            data: epoll::EventData::new_u64(0),
        }; 8];
        loop {
            match epoll::wait(&self.epoll, &mut evs, t.as_ref()) {
                Ok(n) => return Ok(n > 0),
                Err(Errno::INTR) => continue,
                Err(e) => return Err(os(e, "epoll_wait")),
            }
        }
    }
}

impl AsRawFd for WaitFd {
    fn as_raw_fd(&self) -> RawFd {
        self.epoll.as_raw_fd()
    }
}

impl AsFd for WaitFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.epoll.as_fd()
    }
}

/// A readiness doorbell: a thread sleeps until `fd` is readable, then
/// advances a counter (the watch's epoch) that busy-polling owners read
/// with one load instead of a system call. The watch is one-shot: after it
/// fires it stays quiet until [`rearm`](Self::rearm). A composing provider
/// uses it for an inner path that is idle (no traffic lately): it polls
/// that path only once the epoch moved past the one it last saw, so an
/// idle path costs its busy siblings nothing, and the first arrival is
/// noticed within a thread wake-up. Several owners may share one watch
/// (each keeps the epoch it saw; any of them re-arms). The thread ends
/// when the watch is dropped.
#[derive(Debug)]
pub struct ReadyWatch {
    shared: std::sync::Arc<WatchShared>,
}

#[derive(Debug)]
struct WatchShared {
    epoll: OwnedFd,
    /// Readable once the watch is dropped: the thread's signal to end.
    stop: OwnedFd,
    /// The watched fd's number (the caller keeps it open while the watch
    /// lives; see [`ReadyWatch::new`]).
    fd: RawFd,
    /// Firings so far.
    epoch: std::sync::atomic::AtomicU64,
}

/// The watched fd's key in the watch's epoll set (the stop fd has 0).
const WATCHED: u64 = 1;

impl ReadyWatch {
    /// Watches `fd` for readability (level-triggered, one-shot: the watch
    /// is armed at once). `name` names the thread. The caller keeps `fd`
    /// open for as long as the watch lives, or drops the watch first.
    pub fn new(fd: RawFd, name: &str) -> Result<Self> {
        let epoll =
            epoll::create(epoll::CreateFlags::CLOEXEC).map_err(|e| os(e, "epoll_create1"))?;
        let stop = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)
            .map_err(|e| os(e, "eventfd"))?;
        epoll::add(
            &epoll,
            stop.as_fd(),
            epoll::EventData::new_u64(0),
            epoll::EventFlags::IN,
        )
        .map_err(|e| os(e, "epoll_ctl(ADD)"))?;
        // SAFETY: the caller keeps `fd` open while the watch lives (this
        // function's contract); the borrow lasts for this call only.
        let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
        epoll::add(
            &epoll,
            borrowed,
            epoll::EventData::new_u64(WATCHED),
            epoll::EventFlags::IN | epoll::EventFlags::ONESHOT,
        )
        .map_err(|e| os(e, "epoll_ctl(ADD)"))?;
        let shared = std::sync::Arc::new(WatchShared {
            epoll,
            stop,
            fd,
            epoch: std::sync::atomic::AtomicU64::new(0),
        });
        let s = shared.clone();
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || s.run())
            .map_err(|e| Error::os(e, "starting a readiness watch thread"))?;
        Ok(ReadyWatch { shared })
    }

    /// How many times the watch fired (one atomic load): an owner that
    /// saw a smaller number has something to look at.
    #[inline]
    pub fn epoch(&self) -> u64 {
        self.shared.epoch.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Watches again (after a firing the watch is quiet until this). If
    /// the fd is readable already, it fires at once (level-triggered).
    pub fn rearm(&self) -> Result<()> {
        // SAFETY: as in `new`: the fd is open while the watch lives.
        let borrowed = unsafe { BorrowedFd::borrow_raw(self.shared.fd) };
        epoll::modify(
            &self.shared.epoll,
            borrowed,
            epoll::EventData::new_u64(WATCHED),
            epoll::EventFlags::IN | epoll::EventFlags::ONESHOT,
        )
        .map_err(|e| os(e, "epoll_ctl(MOD)"))
    }
}

impl WatchShared {
    fn run(&self) {
        let mut evs = [epoll::Event {
            flags: epoll::EventFlags::empty(),
            data: epoll::EventData::new_u64(0),
        }; 2];
        loop {
            match epoll::wait(&self.epoll, &mut evs, None) {
                Ok(n) => {
                    for e in &evs[..n] {
                        if e.data.u64() == WATCHED {
                            self.epoch.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
                        } else {
                            return;
                        }
                    }
                }
                Err(Errno::INTR) => {}
                // Nothing to wait on any more (cannot happen with a live
                // epoll fd): the owner then sees no more firings and its
                // fallback poll takes over.
                Err(_) => return,
            }
        }
    }
}

impl Drop for ReadyWatch {
    fn drop(&mut self) {
        bump(&self.shared.stop);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_follows_the_owner_once_exposed() {
        let w = WaitFd::new().expect("wait fd");
        // Before exposure, set_ready changes nothing.
        w.set_ready(|| true);
        assert!(!w.readable_now());
        w.expose().expect("expose");
        w.set_ready(|| true);
        assert!(w.readable_now());
        assert!(w.readable_now(), "level-triggered: still readable");
        w.set_ready(|| true);
        w.set_ready(|| false);
        assert!(!w.readable_now());
        // Signals are separate from readiness.
        w.signal();
        assert!(w.readable_now());
        w.drain();
        assert!(!w.readable_now());
        assert!(!w.wait(Some(Duration::from_millis(1))).expect("wait"));
    }

    #[test]
    fn a_ready_watch_fires_once_per_arming() {
        use std::time::Instant;
        let src = WaitFd::new().expect("source");
        let w = ReadyWatch::new(src.as_raw_fd(), "test-watch").expect("watch");
        let wait_epoch = |w: &ReadyWatch, e: u64| {
            let t = Instant::now();
            while w.epoch() < e {
                assert!(
                    t.elapsed() < Duration::from_secs(10),
                    "the watch never fired"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
        };
        assert_eq!(w.epoch(), 0);
        src.signal();
        wait_epoch(&w, 1);
        // One-shot: still readable, but quiet until rearmed.
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(w.epoch(), 1, "fired again without a rearm");
        // Still readable: rearming fires again (level-triggered).
        w.rearm().expect("rearm");
        wait_epoch(&w, 2);
        // Drained, rearmed: quiet until the next signal.
        src.drain();
        w.rearm().expect("rearm");
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(w.epoch(), 2, "fired with nothing readable");
        src.signal();
        wait_epoch(&w, 3);
        drop(w);
    }

    #[test]
    fn nested_sets_report_their_members() {
        let outer = WaitFd::new().expect("outer");
        let inner = WaitFd::new().expect("inner");
        outer.add_nested(&inner).expect("nest");
        assert!(!outer.readable_now());
        inner.signal();
        assert!(outer.readable_now());
        inner.drain();
        assert!(!outer.readable_now());
        outer.remove_nested(&inner);
        inner.signal();
        assert!(!outer.readable_now());
    }
}
