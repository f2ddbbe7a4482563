//! Caller-owned memory named by address (`struct iovec`): the protocol
//! cores pass such ranges back and forth and never touch the bytes; the
//! copies into and out of them are ofi-core's (`util::iov`), whose unsafe
//! stays with the raw layer.

/// `struct iovec`: a caller-owned memory range, as addresses.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoVec {
    /// Start address.
    pub base: usize,
    /// Length in bytes.
    pub len: usize,
}

const _: () = assert!(std::mem::size_of::<IoVec>() == std::mem::size_of::<libc::iovec>());

impl IoVec {
    /// An iov over a slice (the slice must outlive the operation).
    pub fn from_slice(s: &[u8]) -> Self {
        IoVec {
            base: s.as_ptr() as usize,
            len: s.len(),
        }
    }
    /// An iov over a mutable slice.
    pub fn from_mut(s: &mut [u8]) -> Self {
        IoVec {
            base: s.as_mut_ptr() as usize,
            len: s.len(),
        }
    }
}

/// Total length of an iov list.
#[inline]
pub fn iov_len(iov: &[IoVec]) -> usize {
    match iov {
        [v] => v.len,
        _ => iov.iter().fold(0usize, |a, v| a.saturating_add(v.len)),
    }
}
