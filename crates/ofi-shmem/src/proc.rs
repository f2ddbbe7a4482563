//! Process identity and liveness: start times against pid reuse, and pidfds
//! to notice a peer's death without signals.

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::io::Errno;
use rustix::process::{pidfd_open, test_kill_process, Pid, PidfdFlags};
use std::os::fd::OwnedFd;

/// A process's start time in clock ticks since boot (`/proc/PID/stat` field 22).
pub fn start_time(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain spaces.
    let after = &s[s.rfind(')')? + 2..];
    after.split(' ').nth(19)?.parse().ok()
}

/// True when a process with this pid exists.
pub fn alive(pid: u32) -> bool {
    let Some(p) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
        return false;
    };
    // Signal 0 only checks for existence and permission.
    matches!(test_kill_process(p), Ok(()) | Err(Errno::PERM))
}

/// The effective user id.
pub fn uid() -> u32 {
    rustix::process::geteuid().as_raw()
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
        let fd = i32::try_from(pid)
            .ok()
            .and_then(Pid::from_raw)
            .and_then(|p| pidfd_open(p, PidfdFlags::empty()).ok());
        Watch {
            pid,
            start: (start != 0).then_some(start),
            fd,
        }
    }

    /// True once the process has exited (or its pid now names another process).
    pub fn dead(&self) -> bool {
        if let Some(fd) = &self.fd {
            let mut p = [PollFd::new(fd, PollFlags::IN)];
            let zero = Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            let n = poll(&mut p, Some(&zero)).unwrap_or(0);
            return n > 0 && p[0].revents().contains(PollFlags::IN);
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
