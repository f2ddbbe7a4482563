//! The argument forms the data calls share: where a call's flags come
//! from, and its buffer, iovec and descriptor arguments as the raw layer's
//! lists. Everything here inlines into the ops-table slots.

use super::super::array;
use crate::abi::*;
use ofi_core::consts::OFI_INJECT_CALL;
use ofi_core::util::iov::IoVec;

/// Where a data call's flags come from.
#[derive(Clone, Copy)]
pub(crate) enum Flags {
    /// The endpoint's default flags for the call's direction, plus these
    /// bits (calls without a flags argument).
    Default(u64),
    /// Exactly these (the `*msg` calls); ofi's own OFI_INJECT_CALL bit is
    /// not the caller's to set.
    Given(u64),
    /// An inject call's flags: no completion on success (OFI_INJECT_CALL).
    Inject(u64),
}

impl Flags {
    /// The operation's flags; `default` reads the endpoint's default flags,
    /// only for [`Flags::Default`].
    #[inline(always)]
    pub(crate) fn resolve(self, default: impl FnOnce() -> u64) -> u64 {
        match self {
            Flags::Default(add) => default() | add,
            Flags::Given(f) => f & !OFI_INJECT_CALL,
            Flags::Inject(f) => f | OFI_INJECT_CALL,
        }
    }
}

/// One buffer as a range list; `None` for NULL with a length.
#[inline]
pub(crate) fn one(buf: *const c_void, len: usize) -> Option<[IoVec; 1]> {
    if buf.is_null() && len > 0 {
        return None;
    }
    Some([IoVec {
        base: buf as usize,
        len,
    }])
}

/// A single descriptor as a list (empty for NULL).
#[inline]
pub(crate) fn one_desc(d: &[u64; 1]) -> &[u64] {
    if d[0] == 0 {
        &[]
    } else {
        d
    }
}

/// An application iovec array as the raw layer's ranges (same layout).
///
/// # Safety
/// `iov` holds `count` entries.
#[inline]
pub(crate) unsafe fn iovs<'a>(iov: *const iovec, count: usize) -> Option<&'a [IoVec]> {
    // SAFETY: IoVec is laid out as struct iovec (asserted by the core);
    // the caller's contract on iov.
    unsafe { array(iov.cast::<IoVec>(), count) }
}

/// An application descriptor array (`void **desc`) as the raw layer's
/// `u64` descriptors; NULL gives none.
///
/// # Safety
/// `desc` is NULL or holds `count` entries.
#[inline]
pub(crate) unsafe fn descs<'a>(desc: *mut *mut c_void, count: usize) -> &'a [u64] {
    // SAFETY: pointers are u64-sized (asserted in obj); caller's contract.
    unsafe { array(desc.cast_const().cast::<u64>(), count) }.unwrap_or(&[])
}

/// The ranges and descriptors of a vector call or of a message
/// (`iov`, `desc`, `count`); `None` for a NULL `iov` with a count.
///
/// # Safety
/// `iov` holds `count` entries; `desc` is NULL or holds `count` entries.
#[inline]
pub(crate) unsafe fn iov_lists<'a>(
    iov: *const iovec,
    desc: *mut *mut c_void,
    count: usize,
) -> Option<(&'a [IoVec], &'a [u64])> {
    // SAFETY: the caller's contract on iov and desc, as iovs and descs ask.
    unsafe { Some((iovs(iov, count)?, descs(desc, count))) }
}
