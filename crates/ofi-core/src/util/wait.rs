//! Wait objects: an eventfd for local wake-ups inside an epoll set that also
//! holds providers' wake-up fds. The epoll fd is what `wait_fd()` exposes, so
//! a CQ or counter plugs into the application's own epoll, mio or tokio.
#![allow(unsafe_code)]

use crate::error::{Error, Result};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// An epoll set with a built-in eventfd for local signals.
#[derive(Debug)]
pub struct WaitSet {
    epoll: OwnedFd,
    event: OwnedFd,
}

fn cvt(r: libc::c_int, what: &str) -> Result<libc::c_int> {
    if r < 0 {
        Err(Error::os(std::io::Error::last_os_error(), what))
    } else {
        Ok(r)
    }
}

impl WaitSet {
    /// Creates the epoll set and its eventfd.
    pub fn new() -> Result<Self> {
        // SAFETY: plain syscall; the result is checked and owned below.
        let ep = cvt(
            unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) },
            "epoll_create1",
        )?;
        // SAFETY: ep is a fresh fd we own.
        let epoll = unsafe { OwnedFd::from_raw_fd(ep) };
        // SAFETY: plain syscall; the result is checked and owned below.
        let ev = cvt(
            unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) },
            "eventfd",
        )?;
        // SAFETY: ev is a fresh fd we own.
        let event = unsafe { OwnedFd::from_raw_fd(ev) };
        let ws = WaitSet { epoll, event };
        ws.add(ws.event.as_raw_fd())?;
        Ok(ws)
    }

    /// Adds a provider's fd (level-triggered, readable).
    pub fn add(&self, fd: RawFd) -> Result<()> {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: fd as u64,
        };
        // SAFETY: epoll and fd are valid; ev is a valid epoll_event.
        let r =
            unsafe { libc::epoll_ctl(self.epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EEXIST) {
                return Ok(());
            }
            return Err(Error::os(e, "epoll_ctl(ADD)"));
        }
        Ok(())
    }

    /// Removes a provider's fd.
    pub fn remove(&self, fd: RawFd) {
        // SAFETY: epoll is valid; removing an fd that is not there only fails.
        unsafe {
            libc::epoll_ctl(
                self.epoll.as_raw_fd(),
                libc::EPOLL_CTL_DEL,
                fd,
                std::ptr::null_mut(),
            );
        }
    }

    /// Wakes a waiter (`fi_cq_signal`).
    pub fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writing 8 bytes from a valid u64 to our eventfd.
        unsafe {
            libc::write(self.event.as_raw_fd(), (&one as *const u64).cast(), 8);
        }
    }

    /// Clears pending local signals.
    pub fn drain(&self) {
        let mut v: u64 = 0;
        // SAFETY: reading 8 bytes into a valid u64 from our nonblocking eventfd.
        unsafe {
            libc::read(self.event.as_raw_fd(), (&mut v as *mut u64).cast(), 8);
        }
    }

    /// True when some fd in the set is readable now (a waiter sleeping on
    /// the set would be woken).
    pub fn readable_now(&self) -> bool {
        let mut ev = [libc::epoll_event { events: 0, u64: 0 }; 1];
        // SAFETY: ev is a valid buffer of one event; a zero timeout never blocks.
        unsafe { libc::epoll_wait(self.epoll.as_raw_fd(), ev.as_mut_ptr(), 1, 0) > 0 }
    }

    /// Blocks until some fd in the set is readable or the timeout passes.
    /// Returns false on timeout.
    pub fn wait(&self, timeout: Option<Duration>) -> Result<bool> {
        let ms = match timeout {
            None => -1,
            Some(d) => d
                .as_millis()
                .min(i32::MAX as u128)
                .max(u128::from(!d.is_zero())) as i32,
        };
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 8];
        loop {
            // SAFETY: evs is a valid buffer of 8 events.
            let n = unsafe { libc::epoll_wait(self.epoll.as_raw_fd(), evs.as_mut_ptr(), 8, ms) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                return Err(Error::os(e, "epoll_wait"));
            }
            return Ok(n > 0);
        }
    }
}

impl AsRawFd for WaitSet {
    fn as_raw_fd(&self) -> RawFd {
        self.epoll.as_raw_fd()
    }
}

impl AsFd for WaitSet {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.epoll.as_fd()
    }
}
