//! Doorbells: a FIFO per endpoint that peers write a byte to when the owner
//! is asleep. The owner's end is an fd it can put in epoll.

use rustix::fs::{self, Mode, OFlags};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

/// One end of a doorbell.
#[derive(Debug)]
pub struct Bell {
    fd: OwnedFd,
    path: PathBuf,
    owner: bool,
}

fn open(p: &Path, flags: OFlags) -> io::Result<OwnedFd> {
    Ok(fs::open(
        p,
        flags | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

impl Bell {
    /// Creates the owner's end (mode 0600), replacing a stale FIFO.
    pub fn create(path: &Path) -> io::Result<Bell> {
        // A stale FIFO of a dead process may be in the way.
        let _ = fs::unlink(path);
        fs::mkfifoat(fs::CWD, path, Mode::from_raw_mode(0o600))?;
        // O_RDWR keeps the FIFO open for writing too, so it never reports EOF.
        let fd = open(path, OFlags::RDWR)?;
        Ok(Bell {
            fd,
            path: path.to_path_buf(),
            owner: true,
        })
    }

    /// Opens a peer's doorbell for ringing.
    pub fn open_peer(path: &Path) -> io::Result<Bell> {
        let fd = open(path, OFlags::WRONLY)?;
        Ok(Bell {
            fd,
            path: path.to_path_buf(),
            owner: false,
        })
    }

    /// Rings (a full pipe already means "rung").
    pub fn ring(&self) {
        let _ = rustix::io::write(&self.fd, &[1u8]);
    }

    /// Empties the FIFO (owner).
    pub fn drain(&self) {
        let mut buf = [0u8; 64];
        while let Ok(n) = rustix::io::read(&self.fd, &mut buf) {
            if n < buf.len() {
                break;
            }
        }
    }

    /// The fd (readable when rung).
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl Drop for Bell {
    fn drop(&mut self) {
        if self.owner {
            let _ = fs::unlink(&self.path);
        }
    }
}
