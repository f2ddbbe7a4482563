//! Sleeping until a channel, sockets or a deadline need attention.

use ofi::consts::ep_type;
use ofi::safe::Channel;
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use std::os::fd::BorrowedFd;
use std::time::Duration;

/// What woke a [`sleep`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Woken {
    /// The channel has (or may have) completions to collect.
    Channel,
    /// One of the other fds is ready (or failed).
    Fds,
    /// The timeout passed.
    Timeout,
}

/// Sleeps up to `timeout` until the channel has completions to collect or
/// one of `fds` is ready for its events (an MSG channel's connection
/// events count as one of those). Returns at once when the channel says
/// there is something to collect already.
pub fn sleep(ch: &Channel, fds: &[(BorrowedFd<'_>, PollFlags)], timeout: Duration) -> Woken {
    if ch.trywait().is_err() {
        return Woken::Channel;
    }
    let msg = ch.info().ep_attr.ep_type == ep_type::FI_EP_MSG;
    if msg && ch.cm_trywait().is_err() {
        return Woken::Fds;
    }
    let mut p: Vec<PollFd<'_>> = Vec::with_capacity(fds.len() + 2);
    p.push(PollFd::from_borrowed_fd(ch.sleep_fd(), PollFlags::IN));
    if let Some(fd) = ch.cm_fd().ok().filter(|_| msg) {
        p.push(PollFd::from_borrowed_fd(fd, PollFlags::IN));
    }
    for (fd, ev) in fds {
        p.push(PollFd::from_borrowed_fd(*fd, *ev));
    }
    let t = Timespec {
        tv_sec: timeout.as_secs() as i64,
        tv_nsec: timeout.subsec_nanos() as i64,
    };
    match poll(&mut p, Some(&t)) {
        Ok(0) => Woken::Timeout,
        Ok(_) if p[1..].iter().any(|f| !f.revents().is_empty()) => Woken::Fds,
        Ok(_) => Woken::Channel,
        // Interrupted or failed: look at everything.
        Err(_) => Woken::Fds,
    }
}
