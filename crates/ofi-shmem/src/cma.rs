//! Single-copy transfers between processes (process_vm_readv / writev).
#![allow(unsafe_code)]

use std::io;

/// A range in some address space.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Range {
    /// Start address.
    pub base: usize,
    /// Length.
    pub len: usize,
}

fn to_iovec(r: &[Range]) -> Vec<libc::iovec> {
    r.iter()
        .map(|x| libc::iovec {
            iov_base: x.base as *mut _,
            iov_len: x.len,
        })
        .collect()
}

/// Reads the remote ranges of `pid` into the local ranges. Returns bytes
/// copied; loops over partial transfers. Errors: EPERM / ENOSYS when the
/// kernel refuses cross-process copies, ESRCH when the process is gone,
/// EFAULT when a remote range is not mapped.
///
/// # Safety
/// The local ranges must be valid for writes for the duration of the call.
pub unsafe fn read_from(pid: u32, local: &[Range], remote: &[Range]) -> io::Result<usize> {
    // SAFETY: forwarded caller contract.
    unsafe { transfer(pid, local, remote, false) }
}

/// Writes the local ranges into the remote ranges of `pid`.
///
/// # Safety
/// The local ranges must be valid for reads for the duration of the call.
pub unsafe fn write_to(pid: u32, local: &[Range], remote: &[Range]) -> io::Result<usize> {
    // SAFETY: forwarded caller contract.
    unsafe { transfer(pid, local, remote, true) }
}

/// Copies between the local ranges and `pid`'s remote ranges, looping
/// over partial transfers: a write to `pid` when `write`, else a read.
///
/// # Safety
/// The local ranges must be valid for writes (a read) or reads (a write)
/// for the duration of the call.
unsafe fn transfer(pid: u32, local: &[Range], remote: &[Range], write: bool) -> io::Result<usize> {
    let want: usize = local
        .iter()
        .map(|r| r.len)
        .sum::<usize>()
        .min(remote.iter().map(|r| r.len).sum());
    let mut done = 0usize;
    while done < want {
        let l = to_iovec(&advance(local, done));
        let r = to_iovec(&advance(remote, done));
        let n = if write {
            // SAFETY: iovecs describe caller-guaranteed local memory and remote
            // addresses the kernel checks.
            unsafe {
                libc::process_vm_writev(
                    pid as libc::pid_t,
                    l.as_ptr(),
                    l.len() as _,
                    r.as_ptr(),
                    r.len() as _,
                    0,
                )
            }
        } else {
            // SAFETY: as above.
            unsafe {
                libc::process_vm_readv(
                    pid as libc::pid_t,
                    l.as_ptr(),
                    l.len() as _,
                    r.as_ptr(),
                    r.len() as _,
                    0,
                )
            }
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "cross-process copy made no progress",
            ));
        }
        done += n as usize;
    }
    Ok(done)
}

fn advance(r: &[Range], mut skip: usize) -> Vec<Range> {
    let mut out = Vec::with_capacity(r.len());
    for x in r {
        if skip >= x.len {
            skip -= x.len;
            continue;
        }
        out.push(Range {
            base: x.base + skip,
            len: x.len - skip,
        });
        skip = 0;
    }
    out
}
