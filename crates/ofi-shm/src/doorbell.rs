//! Doorbells: a FIFO per endpoint that peers write a byte to when the owner
//! is asleep. The owner's end is an fd it can put in epoll.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// One end of a doorbell.
#[derive(Debug)]
pub struct Bell {
    fd: OwnedFd,
    path: PathBuf,
    owner: bool,
}

fn cpath(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in path"))
}

fn open(c: &CString, flags: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: c is a valid C string; the result is checked and owned.
    let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_NONBLOCK | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

impl Bell {
    /// Creates the owner's end (mode 0600), replacing a stale FIFO.
    pub fn create(path: &Path) -> io::Result<Bell> {
        let c = cpath(path)?;
        // SAFETY: c is valid; a stale FIFO of a dead process may be in the way.
        unsafe { libc::unlink(c.as_ptr()) };
        // SAFETY: c is valid.
        if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } < 0 {
            return Err(io::Error::last_os_error());
        }
        // O_RDWR keeps the FIFO open for writing too, so it never reports EOF.
        let fd = open(&c, libc::O_RDWR)?;
        Ok(Bell {
            fd,
            path: path.to_path_buf(),
            owner: true,
        })
    }

    /// Opens a peer's doorbell for ringing.
    pub fn open_peer(path: &Path) -> io::Result<Bell> {
        let c = cpath(path)?;
        let fd = open(&c, libc::O_WRONLY)?;
        Ok(Bell {
            fd,
            path: path.to_path_buf(),
            owner: false,
        })
    }

    /// Rings (a full pipe already means "rung").
    pub fn ring(&self) {
        let b = 1u8;
        // SAFETY: writing one byte from a valid location to our fd.
        unsafe { libc::write(self.fd.as_raw_fd(), (&b as *const u8).cast(), 1) };
    }

    /// Empties the FIFO (owner).
    pub fn drain(&self) {
        let mut buf = [0u8; 64];
        loop {
            // SAFETY: reading into a valid 64-byte buffer from our nonblocking fd.
            let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n < buf.len() as isize {
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
            if let Ok(c) = cpath(&self.path) {
                // SAFETY: removing our own FIFO.
                unsafe { libc::unlink(c.as_ptr()) };
            }
        }
    }
}
