//! Process identity and liveness: start times against pid reuse, and pidfds
//! to notice a peer's death without signals.
#![allow(unsafe_code)]

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A process's start time in clock ticks since boot (`/proc/PID/stat` field 22).
pub fn start_time(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain spaces.
    let after = &s[s.rfind(')')? + 2..];
    after.split(' ').nth(19)?.parse().ok()
}

/// True when a process with this pid exists.
pub fn alive(pid: u32) -> bool {
    if pid == 0 || pid > i32::MAX as u32 {
        return false;
    }
    // SAFETY: signal 0 only checks for existence and permission.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// The effective user id.
pub fn uid() -> u32 {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() }
}

/// Watches one process for death.
#[derive(Debug)]
pub struct Watch {
    pid: u32,
    start: Option<u64>,
    fd: Option<OwnedFd>,
}

impl Watch {
    /// Starts watching `pid`, whose start time should be `start` (0: unknown).
    pub fn new(pid: u32, start: u64) -> Watch {
        // SAFETY: pidfd_open takes a pid and flags; the result is checked.
        let r = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
        // SAFETY: r is a fresh fd we own when non-negative.
        let fd = (r >= 0).then(|| unsafe { OwnedFd::from_raw_fd(r as i32) });
        Watch {
            pid,
            start: (start != 0).then_some(start),
            fd,
        }
    }

    /// True once the process has exited (or its pid now names another process).
    pub fn dead(&self) -> bool {
        if let Some(fd) = &self.fd {
            let mut p = libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: polling one valid pollfd without blocking.
            let n = unsafe { libc::poll(&mut p, 1, 0) };
            return n > 0 && p.revents & libc::POLLIN != 0;
        }
        if !alive(self.pid) {
            return true;
        }
        match (self.start, start_time(self.pid)) {
            (Some(a), Some(b)) => a != b,
            _ => false,
        }
    }

    /// The watched pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }
}
