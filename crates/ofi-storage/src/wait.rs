//! Sleeping until a channel, sockets or a deadline need attention.

use ofi::safe::Channel;
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use std::os::fd::{AsFd, BorrowedFd};
use std::time::Duration;

/// Sleeps up to `timeout` until the channel has completions to collect or
/// one of `fds` is readable. Returns at once when the channel says there is
/// something to collect already.
pub fn sleep(ch: &Channel, fds: &[BorrowedFd<'_>], timeout: Duration) {
    let chan = ch.trywait().is_ok();
    if !chan {
        return;
    }
    let mut p: Vec<PollFd<'_>> = Vec::with_capacity(fds.len() + 1);
    p.push(PollFd::from_borrowed_fd(ch.as_fd(), PollFlags::IN));
    for fd in fds {
        p.push(PollFd::from_borrowed_fd(*fd, PollFlags::IN));
    }
    let t = Timespec {
        tv_sec: timeout.as_secs() as i64,
        tv_nsec: timeout.subsec_nanos() as i64,
    };
    let _ = poll(&mut p, Some(&t));
}
