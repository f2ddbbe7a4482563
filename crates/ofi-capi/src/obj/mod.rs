//! The libfabric objects: fids and their ops tables.
//!
//! Every C object is a `Box` of a `#[repr(C)]` struct whose first field is
//! the C `fid_*` struct, so the pointer handed to C casts back to the Rust
//! object; the raw-layer object of `ofi_core` follows it. A fid is accepted
//! only if its class and its `fi_ops` table are the ones this library gave
//! it. Ops tables are `static`s, every slot filled; every slot runs inside
//! the panic boundary.

pub mod av;
pub mod av_set;
pub mod cntr;
pub mod cq;
pub mod domain;
pub mod ep;
pub mod eq;
pub mod fabric;
pub mod mc;
pub mod mr;
pub mod pep;
pub mod poll;
pub mod wait;

use crate::abi::*;
use crate::guard;
use ofi_core::error::errno::*;
use ofi_core::object::CloseResult;
use std::ffi::CStr;
use std::time::Duration;

// The ABI passes `void *` descriptors and contexts where the raw layer keeps
// `u64` / `usize`: both are pointer-sized here.
const _: () = assert!(std::mem::size_of::<*mut c_void>() == std::mem::size_of::<u64>());

/// Return value of an `int` slot that panicked.
pub(crate) const PANIC: c_int = guard::neg(FI_EOTHER);
/// Return value of an `ssize_t` slot that panicked.
pub(crate) const PANIC_S: ssize_t = guard::neg_isize(FI_EOTHER);
/// `-FI_EINVAL` as an `int`.
pub(crate) const EINVAL: c_int = guard::neg(FI_EINVAL);
/// `-FI_EINVAL` as an `ssize_t`.
pub(crate) const EINVAL_S: ssize_t = guard::neg_isize(FI_EINVAL);
/// `-FI_ENOSYS` as an `int`.
pub(crate) const ENOSYS: c_int = guard::neg(FI_ENOSYS);
/// `-FI_ENOSYS` as an `ssize_t`.
pub(crate) const ENOSYS_S: ssize_t = guard::neg_isize(FI_ENOSYS);

/// Runs a slot body inside the panic boundary.
#[inline(always)]
pub(crate) fn ffi<R>(on_panic: R, f: impl FnOnce() -> R) -> R {
    guard::ffi(on_panic, f)
}

/// Runs a data-path slot body inside the panic boundary, inlined
/// ([`guard::hot`]).
#[inline(always)]
pub(crate) fn hot<R>(on_panic: R, f: impl FnOnce() -> R) -> R {
    guard::hot(on_panic, f)
}

/// A Rust object that stands behind a C fid.
///
/// # Safety
/// The implementor is `#[repr(C)]` and its first field is a C object whose
/// first field is `struct fid`, so a `*mut fid` of it is a `*mut Self`.
pub(crate) unsafe trait CObj: Sized {
    /// `FI_CLASS_*` of the object.
    const CLASS: usize;
    /// The object's `fi_ops` table (identifies objects this library made).
    fn base_ops() -> *const fi_ops;
    /// Releases the raw-layer object; `Err(-FI_EBUSY)` (object kept) when
    /// it still has dependents.
    fn shut(&mut self) -> Result<(), c_int>;
}

/// The object behind `p`, if `p` is a live object of class `T` made here.
///
/// # Safety
/// `p` is NULL or points to readable memory of at least a `struct fid`.
#[inline]
pub(crate) unsafe fn get<'a, T: CObj>(p: *const fid) -> Option<&'a T> {
    if p.is_null() {
        return None;
    }
    // SAFETY: p is non-null and, by the caller's contract, a readable fid.
    let f = unsafe { &*p };
    if f.fclass != T::CLASS || !std::ptr::eq(f.ops as *const fi_ops, T::base_ops()) {
        return None;
    }
    // SAFETY: class and ops table show this fid is the head of a T made by
    // `publish` (CObj guarantees the layout).
    Some(unsafe { &*(p as *const T) })
}

/// Moves an object to the heap and returns its C pointer.
pub(crate) fn publish<T: CObj>(obj: T) -> *mut T {
    Box::into_raw(Box::new(obj))
}

/// Frees an object made by [`publish`] whose raw-layer object is already
/// released (or never existed).
///
/// # Safety
/// `p` came from `publish` and nobody uses it afterwards.
pub(crate) unsafe fn unpublish<T: CObj>(p: *mut T) {
    // SAFETY: the caller's contract.
    drop(unsafe { Box::from_raw(p) });
}

/// The `close` slot of every class: refuses with `-FI_EBUSY` while the
/// object has dependents, else frees it.
pub(crate) unsafe extern "C" fn close<T: CObj>(f: *mut fid) -> c_int {
    ffi(PANIC, || {
        // SAFETY: f is NULL or a fid given to the application.
        if unsafe { get::<T>(f) }.is_none() {
            return EINVAL;
        }
        let p = f as *mut T;
        // SAFETY: checked above that p is a live T; closing gives up the
        // application's pointer, so this is the only user.
        match unsafe { (*p).shut() } {
            Ok(()) => {
                // SAFETY: p came from publish and its core is released.
                unsafe { unpublish(p) };
                0
            }
            Err(e) => e,
        }
    })
}

/// Releases a raw-layer object with its `close`, putting it back on refusal.
pub(crate) fn shut_core<T>(
    slot: &mut Option<T>,
    close: impl FnOnce(T) -> CloseResult<T>,
) -> Result<(), c_int> {
    let Some(core) = slot.take() else {
        return Ok(());
    };
    match close(core) {
        Ok(()) => Ok(()),
        Err(b) => {
            let (core, e) = *b;
            *slot = Some(core);
            Err(guard::err(&e))
        }
    }
}

/// An `fi_ops.bind` slot.
pub(crate) type BindFn = unsafe extern "C" fn(*mut fid, *mut fid, u64) -> c_int;
/// An `fi_ops.control` slot.
pub(crate) type ControlFn = unsafe extern "C" fn(*mut fid, c_int, *mut c_void) -> c_int;

/// The `fi_ops` table of class `T`: its [`close`], the class's `bind` and
/// `control`, the common [`tostr`], and no provider-specific interfaces.
/// Each class keeps the table in a `static` of its own: that address is
/// what [`CObj::base_ops`] returns and [`get`] checks.
pub(crate) const fn fid_ops<T: CObj>(bind: BindFn, control: ControlFn) -> fi_ops {
    fi_ops {
        size: std::mem::size_of::<fi_ops>(),
        close: Some(close::<T>),
        bind: Some(bind),
        control: Some(control),
        ops_open: Some(ops_open_nosys),
        tostr: Some(tostr),
        ops_set: Some(ops_set_nosys),
    }
}

/// `fi_ops.ops_open`: no provider-specific interfaces.
pub(crate) unsafe extern "C" fn ops_open_nosys(
    _fid: *mut fid,
    _name: *const c_char,
    _flags: u64,
    _ops: *mut *mut c_void,
    _context: *mut c_void,
) -> c_int {
    ffi(PANIC, || ENOSYS)
}

/// `fi_ops.ops_set`: no provider-specific interfaces.
pub(crate) unsafe extern "C" fn ops_set_nosys(
    _fid: *mut fid,
    _name: *const c_char,
    _flags: u64,
    _ops: *mut c_void,
    _context: *mut c_void,
) -> c_int {
    ffi(PANIC, || ENOSYS)
}

/// `fi_ops.bind` of classes that bind nothing.
pub(crate) unsafe extern "C" fn bind_nosys(_fid: *mut fid, _bfid: *mut fid, _flags: u64) -> c_int {
    ffi(PANIC, || ENOSYS)
}

/// `fi_ops.control` of classes without commands.
pub(crate) unsafe extern "C" fn control_nosys(
    _fid: *mut fid,
    _command: c_int,
    _arg: *mut c_void,
) -> c_int {
    ffi(PANIC, || ENOSYS)
}

/// `fi_ops.tostr`: the object's class and address.
pub(crate) unsafe extern "C" fn tostr(f: *const fid, buf: *mut c_char, len: size_t) -> c_int {
    ffi(PANIC, || {
        if f.is_null() || buf.is_null() || len == 0 {
            return EINVAL;
        }
        // SAFETY: f is a non-null fid of the application.
        let class = unsafe { (*f).fclass };
        let name = match class {
            class::FI_CLASS_FABRIC => "fabric",
            class::FI_CLASS_DOMAIN => "domain",
            class::FI_CLASS_EP => "endpoint",
            class::FI_CLASS_PEP => "passive endpoint",
            class::FI_CLASS_AV => "address vector",
            class::FI_CLASS_MR => "memory region",
            class::FI_CLASS_EQ => "event queue",
            class::FI_CLASS_CQ => "completion queue",
            class::FI_CLASS_CNTR => "counter",
            class::FI_CLASS_CONNREQ => "connection request",
            class::FI_CLASS_WAIT => "wait set",
            class::FI_CLASS_POLL => "poll set",
            class::FI_CLASS_MC => "multicast group",
            class::FI_CLASS_AV_SET => "address vector set",
            _ => "fid",
        };
        // SAFETY: buf has len writable bytes (caller's contract).
        unsafe { write_cstr(buf, len, &format!("{name} {f:p}")) };
        0
    })
}

/// Copies `s` into a C buffer of `len` bytes, truncated and NUL-terminated.
///
/// # Safety
/// `buf` is writable for `len` bytes, `len > 0`.
pub(crate) unsafe fn write_cstr(buf: *mut c_char, len: usize, s: &str) {
    let n = s.len().min(len - 1);
    // SAFETY: n + 1 <= len bytes of buf are written; s has n readable bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), buf.cast::<u8>(), n);
        *buf.add(n) = 0;
    }
}

/// A C string argument, if non-NULL and UTF-8.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string.
pub(crate) unsafe fn cstr<'a>(p: *const c_char) -> Option<&'a str> {
    if p.is_null() {
        return None;
    }
    // SAFETY: the caller's contract.
    unsafe { CStr::from_ptr(p) }.to_str().ok()
}

/// A C byte range as a slice (`&[]` for length 0, even with a NULL pointer).
///
/// # Safety
/// If `len > 0`, `p` points to `len` readable bytes that outlive `'a`.
pub(crate) unsafe fn bytes<'a>(p: *const c_void, len: usize) -> Option<&'a [u8]> {
    if len == 0 {
        return Some(&[]);
    }
    if p.is_null() {
        return None;
    }
    // SAFETY: the caller's contract.
    Some(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) })
}

/// A C array as a slice (`&[]` for count 0); `None` for NULL with a count.
///
/// # Safety
/// If `count > 0`, `p` points to `count` readable `T` that outlive `'a`.
pub(crate) unsafe fn array<'a, T>(p: *const T, count: usize) -> Option<&'a [T]> {
    if count == 0 {
        return Some(&[]);
    }
    if p.is_null() {
        return None;
    }
    // SAFETY: the caller's contract.
    Some(unsafe { std::slice::from_raw_parts(p, count) })
}

/// Converts a C timeout in milliseconds (negative: forever).
pub(crate) fn timeout_ms(ms: c_int) -> Option<Duration> {
    u64::try_from(ms).ok().map(Duration::from_millis)
}

/// `0` or the negative error.
pub(crate) fn ret(r: ofi_core::Result<()>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => guard::err(&e),
    }
}

/// `0` or the negative error, as `ssize_t`.
pub(crate) fn sret(r: ofi_core::Result<()>) -> ssize_t {
    match r {
        Ok(()) => 0,
        Err(e) => guard::err_isize(&e),
    }
}

/// A NUL-terminated copy of `fi_strerror`'s text for an error number,
/// kept for the life of the process (strerror slots return `const char *`).
pub(crate) fn strerror_static(code: c_int) -> *const c_char {
    use std::collections::HashMap;
    use std::ffi::CString;
    use std::sync::{Mutex, OnceLock};
    static TEXTS: OnceLock<Mutex<HashMap<c_int, &'static CStr>>> = OnceLock::new();
    let mut m = TEXTS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let c = m.entry(code.abs()).or_insert_with(|| {
        let s = CString::new(ofi_core::error::strerror(code)).unwrap_or_default();
        Box::leak(s.into_boxed_c_str())
    });
    c.as_ptr()
}

/// The `strerror` slot of CQs and EQs: the text of `prov_errno`, in `buf`
/// when one is given.
///
/// # Safety
/// `buf` is NULL or writable for `len` bytes.
pub(crate) unsafe fn strerror_into(
    prov_errno: c_int,
    buf: *mut c_char,
    len: size_t,
) -> *const c_char {
    let s = strerror_static(prov_errno);
    if buf.is_null() || len == 0 {
        return s;
    }
    // SAFETY: s is a NUL-terminated static string.
    let text = unsafe { CStr::from_ptr(s) }.to_str().unwrap_or("");
    // SAFETY: the caller's contract on buf.
    unsafe { write_cstr(buf, len, text) };
    buf
}

/// The longest FI_ADDR_STR address the C ABI reads, with its NUL: far above
/// any provider's (`fi_sockaddr_in6://[...%scope]:port` is under 80 bytes).
/// Bytes without a NUL within it are not an address of the format.
pub(crate) const ADDR_STR_MAX: usize = 256;

/// The NUL-terminated string at `p` (with its NUL), reading one byte at a
/// time and never past the first NUL nor past `max` bytes; `None` when no
/// NUL comes within `max` bytes.
///
/// # Safety
/// `p` is readable up to its first NUL or for `max` bytes, whichever is
/// shorter.
pub(crate) unsafe fn bounded_cstr<'a>(p: *const u8, max: usize) -> Option<&'a [u8]> {
    for i in 0..max {
        // SAFETY: byte i precedes the first NUL and lies within `max` bytes
        // (the caller's contract).
        if unsafe { *p.add(i) } == 0 {
            // SAFETY: the i + 1 bytes just read.
            return Some(unsafe { std::slice::from_raw_parts(p, i + 1) });
        }
    }
    None
}

/// The length of the address at `p` in a given address format: sockaddr
/// lengths by family, the string length (with NUL) for FI_ADDR_STR. `None`
/// for an unknown family or format, or a string longer than
/// [`ADDR_STR_MAX`]: nothing past what the format allows is read.
///
/// # Safety
/// `p` is non-NULL and readable for the address the format describes: the
/// sockaddr of its family, or a string up to its NUL (or ADDR_STR_MAX bytes).
pub(crate) unsafe fn addr_len(format: u32, p: *const c_void) -> Option<usize> {
    use ofi_core::consts::addr_format as af;
    match format {
        af::FI_SOCKADDR_IN => Some(std::mem::size_of::<libc::sockaddr_in>()),
        af::FI_SOCKADDR_IN6 => Some(std::mem::size_of::<libc::sockaddr_in6>()),
        af::FI_SOCKADDR | af::FI_FORMAT_UNSPEC => {
            // SAFETY: a sockaddr starts with its family.
            let fam = unsafe { (*(p as *const libc::sockaddr)).sa_family };
            match i32::from(fam) {
                libc::AF_INET => Some(std::mem::size_of::<libc::sockaddr_in>()),
                libc::AF_INET6 => Some(std::mem::size_of::<libc::sockaddr_in6>()),
                _ => None,
            }
        }
        // SAFETY: the caller's contract.
        af::FI_ADDR_STR => unsafe { bounded_cstr(p.cast::<u8>(), ADDR_STR_MAX) }.map(<[u8]>::len),
        _ => None,
    }
}

/// Copies an address into a C buffer of `*addrlen` bytes: sets `*addrlen`
/// to the full length; when it does not fit, copies what fits (the
/// address truncated, fi_cm(3)) and returns `-FI_ETOOSMALL`.
///
/// # Safety
/// `addr` is NULL or writable for `*addrlen` bytes; `addrlen` is valid.
pub(crate) unsafe fn give_addr(a: &[u8], addr: *mut c_void, addrlen: *mut size_t) -> c_int {
    if addrlen.is_null() {
        return EINVAL;
    }
    // SAFETY: addrlen is non-null (caller's contract: valid).
    let room = unsafe { *addrlen };
    // SAFETY: `addrlen` is non-NULL (checked above) and valid (caller's contract).
    unsafe { *addrlen = a.len() };
    if addr.is_null() {
        return guard::neg(FI_ETOOSMALL);
    }
    let n = room.min(a.len());
    // SAFETY: addr has room >= n writable bytes.
    unsafe { std::ptr::copy_nonoverlapping(a.as_ptr(), addr.cast::<u8>(), n) };
    if n < a.len() {
        return guard::neg(FI_ETOOSMALL);
    }
    0
}

#[cfg(test)]
mod tests;
