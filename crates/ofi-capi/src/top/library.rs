//! Library information: `fi_version`, `fi_strerror` and `fi_open`.

use super::PANIC;
use crate::abi::*;
use crate::guard::{self, ffi};
use ofi_core::error::errno::*;
use std::ffi::CString;
use std::ptr;
use std::sync::OnceLock;

/// `fi_version`: the API version this library implements (1.17).
pub extern "C" fn fi_version() -> u32 {
    ofi_core::consts::FI_VERSION_CURRENT
}

/// Error numbers at or above this are libfabric's own (`FI_ERRNO_OFFSET`).
const FI_ERRNO_OFFSET: c_int = 256;

/// `fi_strerror`: the text of an error number (either sign). Numbers below
/// 256 are the C library's `strerror`; libfabric's own numbers have their
/// own texts; beyond those, "Unspecified error".
pub extern "C" fn fi_strerror(errnum: c_int) -> *const c_char {
    static OWN: OnceLock<Vec<CString>> = OnceLock::new();
    ffi(ptr::null(), || {
        let code = errnum.checked_abs().unwrap_or(FI_EOTHER);
        if code < FI_ERRNO_OFFSET {
            // SAFETY: strerror returns a string that stays valid at least
            // until the next strerror call of this thread, as in libfabric.
            return unsafe { libc::strerror(code) }.cast_const();
        }
        let own = OWN.get_or_init(|| {
            (FI_ERRNO_OFFSET..=FI_ENORX)
                .map(|c| CString::new(ofi_core::error::strerror(c)).unwrap_or_default())
                .collect()
        });
        let idx = if code > FI_ENORX { FI_EOTHER } else { code } - FI_ERRNO_OFFSET;
        own[idx as usize].as_ptr()
    })
}

/// `fi_open` (FABRIC_1.5): opens a named library resource. This library has
/// none (libfabric's "mr_cache" and "logging" are not provided), so every
/// name is `-FI_ENOSYS`; a NULL name or output is `-FI_EINVAL`.
///
/// # Safety
/// `name` is NULL or a C string; `fid` is NULL or writable.
pub unsafe extern "C" fn fi_open(
    _version: u32,
    name: *const c_char,
    _attr: *mut c_void,
    _attr_len: size_t,
    _flags: u64,
    fid: *mut *mut fid,
    _context: *mut c_void,
) -> c_int {
    ffi(PANIC, || {
        if name.is_null() || fid.is_null() {
            return guard::neg(FI_EINVAL);
        }
        guard::neg(FI_ENOSYS)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::info;

    #[test]
    fn strerror_texts() {
        // SAFETY: fi_strerror returns C strings.
        let s = |c| unsafe { info::c_str(fi_strerror(c)) }.unwrap_or_default();
        assert_eq!(s(FI_EAGAIN), "Resource temporarily unavailable");
        assert_eq!(s(-FI_ETRUNC), "Truncation error");
        assert_eq!(s(4000), "Unspecified error");
    }
}
