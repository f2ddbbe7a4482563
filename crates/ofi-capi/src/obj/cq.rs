//! Completion queues (`fi_cq_open`, `struct fid_cq`, `fi_ops_cq`): reads
//! in the queue's entry format, error entries, blocking reads, wait fd.

use super::{ffi, get, publish, shut_core, CObj, EINVAL, EINVAL_S, ENOSYS, PANIC, PANIC_S};
use crate::abi::*;
use crate::guard;
use ofi_core::consts::{cq_format, wait_obj};
use ofi_core::error::errno::*;
use ofi_core::spi::HasCore;
use ofi_core::util::cq::{
    CqAttr, CqDataEntry, CqEntry, CqErrEntry, CqFormat, CqMsgEntry, CqTaggedEntry,
};
use ofi_core::CompletionQueue;
use std::time::Duration;

/// `FI_VERSION(1, 5)`: from this API version on, error entries carry
/// `err_data_size` and `err_data` may be a buffer of the application.
pub(crate) const API_1_5: u32 = (1 << 16) | 5;

/// A completion queue as C sees it: `struct fid_cq`, then the raw-layer queue.
#[repr(C)]
pub struct CqObj {
    c: fid_cq,
    pub(crate) core: Option<CompletionQueue>,
    format: u32,
    api_version: u32,
    /// The wait object asked for (FI_WAIT_UNSPEC as FI_WAIT_FD).
    wait_obj: u32,
}

// SAFETY: repr(C), first field fid_cq whose first field is fid.
unsafe impl CObj for CqObj {
    const CLASS: usize = class::FI_CLASS_CQ;
    fn base_ops() -> *const fi_ops {
        &CQ_FI_OPS
    }
    fn shut(&mut self) -> Result<(), c_int> {
        shut_core(&mut self.core, CompletionQueue::close)
    }
}

impl CqObj {
    /// `fi_trywait` on this queue.
    pub(crate) fn trywait(&self) -> c_int {
        match &self.core {
            Some(c) => super::ret(c.trywait()),
            None => EINVAL,
        }
    }
}

static CQ_FI_OPS: fi_ops = super::fid_ops::<CqObj>(super::bind_nosys, cq_control);

static CQ_OPS: fi_ops_cq = fi_ops_cq {
    size: std::mem::size_of::<fi_ops_cq>(),
    read: Some(cq_read),
    readfrom: Some(cq_readfrom),
    readerr: Some(cq_readerr),
    sread: Some(cq_sread),
    sreadfrom: Some(cq_sreadfrom),
    signal: Some(cq_signal),
    strerror: Some(cq_strerror),
};

/// The queue behind a `struct fid_cq *`.
///
/// # Safety
/// `p` is NULL or a readable fid.
#[inline]
unsafe fn cq<'a>(p: *mut fid_cq) -> Option<&'a CqObj> {
    // SAFETY: `p` is NULL or a readable fid (this function's contract), all that `get` asks.
    unsafe { get::<CqObj>(p.cast::<fid>()) }
}

/// `fi_cq_open`.
///
/// # Safety
/// Arguments as `fi_cq_open(3)`.
pub(crate) unsafe fn open(
    d: *mut fid_domain,
    attr: *mut fi_cq_attr,
    out: *mut *mut fid_cq,
    context: *mut c_void,
) -> c_int {
    // SAFETY: d is NULL or a fid of the application.
    let Some(dom) = (unsafe { super::domain::domain(d) }) else {
        return EINVAL;
    };
    let Some(dcore) = dom.core() else {
        return EINVAL;
    };
    if attr.is_null() || out.is_null() {
        return EINVAL;
    }
    // SAFETY: attr is non-null and valid.
    let a = unsafe { &*attr };
    let ca = CqAttr {
        size: a.size,
        format: a.format,
        wait_obj: a.wait_obj,
    };
    let opened = if a.wait_obj == wait_obj::FI_WAIT_SET {
        // SAFETY: wait_set is NULL or a fid of the application.
        match unsafe { super::wait::wait_set(a.wait_set) } {
            Some(set) => dcore.cq_in(&ca, set),
            None => return EINVAL,
        }
    } else {
        dcore.cq(&ca)
    };
    let core = match opened {
        Ok(c) => c,
        Err(e) => return guard::err(&e),
    };
    let format = core.core().attr().format;
    let p = publish(CqObj {
        c: fid_cq {
            fid: fid {
                fclass: class::FI_CLASS_CQ,
                context,
                ops: &CQ_FI_OPS as *const fi_ops as *mut fi_ops,
            },
            ops: &CQ_OPS as *const fi_ops_cq as *mut fi_ops_cq,
        },
        core: Some(core),
        format,
        api_version: dom.api_version,
        wait_obj: if a.wait_obj == wait_obj::FI_WAIT_SET {
            // SAFETY: checked above to be a wait set of this library.
            unsafe { super::wait::member_kind(a.wait_set) }
        } else {
            wait_kind(a.wait_obj)
        },
    });
    // SAFETY: out is non-null and writable.
    unsafe { *out = p.cast::<fid_cq>() };
    0
}

/// How a read waits: not at all, or up to a timeout (None: forever).
#[derive(Clone, Copy)]
enum Wait {
    No,
    Up(Option<Duration>),
}

/// Reads up to `count` entries of format `E` into `buf` (and sources into
/// `src` when non-NULL).
///
/// # Safety
/// `buf` holds `count` entries of `E`; `src` is NULL or holds `count` fi_addr_t.
unsafe fn take<E: CqFormat>(
    q: &CompletionQueue,
    buf: *mut c_void,
    count: usize,
    src: *mut fi_addr_t,
    wait: Wait,
) -> ssize_t {
    // SAFETY: the caller's contract on buf.
    let out = unsafe { std::slice::from_raw_parts_mut(buf.cast::<E>(), count) };
    let r = if src.is_null() {
        match wait {
            Wait::No => q.read(out),
            Wait::Up(t) => q.sread(out, t),
        }
    } else {
        // SAFETY: the caller's contract on src.
        let s = unsafe { std::slice::from_raw_parts_mut(src, count) };
        match wait {
            Wait::No => q.readfrom(out, s),
            Wait::Up(t) => q.sreadfrom(out, s, t),
        }
    };
    match r {
        Ok(n) => n as ssize_t,
        Err(e) => guard::err_isize(&e),
    }
}

/// The read slots' common body: dispatch on the queue's format.
///
/// # Safety
/// As [`take`], for the queue's entry size.
#[inline]
unsafe fn read_any(
    p: *mut fid_cq,
    buf: *mut c_void,
    count: size_t,
    src: *mut fi_addr_t,
    wait: Wait,
) -> ssize_t {
    // SAFETY: p is NULL or a fid of the application.
    let Some(obj) = (unsafe { cq(p) }) else {
        return EINVAL_S;
    };
    let Some(q) = obj.core.as_ref() else {
        return EINVAL_S;
    };
    // `fi_cq_read(cq, NULL, 0)` drives progress without taking entries:
    // 0 when some are queued, -FI_EAGAIN when none (libfabric's answer).
    if count == 0 {
        let r = match wait {
            Wait::No => q.read::<CqEntry>(&mut []),
            Wait::Up(t) => q.sread::<CqEntry>(&mut [], t),
        };
        return match r {
            Ok(n) => n as ssize_t,
            Err(e) => guard::err_isize(&e),
        };
    }
    // Every entry format starts with a pointer: buffers are pointer-aligned.
    if buf.is_null() || !(buf as usize).is_multiple_of(std::mem::align_of::<usize>()) {
        return EINVAL_S;
    }
    // SAFETY: `buf` is non-NULL, aligned and holds `count` entries of the format the queue was
    // opened with (this function's contract), and `obj.format` picks that format's entry type for
    // `take`; `src` is NULL or holds `count` addresses.
    unsafe {
        match obj.format {
            cq_format::FI_CQ_FORMAT_CONTEXT => take::<CqEntry>(q, buf, count, src, wait),
            cq_format::FI_CQ_FORMAT_MSG => take::<CqMsgEntry>(q, buf, count, src, wait),
            cq_format::FI_CQ_FORMAT_DATA => take::<CqDataEntry>(q, buf, count, src, wait),
            _ => take::<CqTaggedEntry>(q, buf, count, src, wait),
        }
    }
}

unsafe extern "C" fn cq_read(p: *mut fid_cq, buf: *mut c_void, count: size_t) -> ssize_t {
    // SAFETY: the application's fi_cq_read(3) arguments, passed on unchanged: `buf` holds `count`
    // entries of the queue's format, as `read_any` requires.
    super::hot(PANIC_S, || unsafe {
        read_any(p, buf, count, std::ptr::null_mut(), Wait::No)
    })
}

unsafe extern "C" fn cq_readfrom(
    p: *mut fid_cq,
    buf: *mut c_void,
    count: size_t,
    src: *mut fi_addr_t,
) -> ssize_t {
    // SAFETY: the application's fi_cq_readfrom(3) arguments, passed on unchanged: `buf` holds
    // `count` entries of the queue's format, `src` is NULL or holds `count` addresses, as
    // `read_any` requires.
    super::hot(PANIC_S, || unsafe {
        read_any(p, buf, count, src, Wait::No)
    })
}

unsafe extern "C" fn cq_sread(
    p: *mut fid_cq,
    buf: *mut c_void,
    count: size_t,
    _cond: *const c_void,
    timeout: c_int,
) -> ssize_t {
    ffi(PANIC_S, || {
        let w = Wait::Up(super::timeout_ms(timeout));
        // SAFETY: the application's fi_cq_sread(3) arguments, passed on unchanged: `buf` holds
        // `count` entries of the queue's format, as `read_any` requires.
        unsafe { read_any(p, buf, count, std::ptr::null_mut(), w) }
    })
}

unsafe extern "C" fn cq_sreadfrom(
    p: *mut fid_cq,
    buf: *mut c_void,
    count: size_t,
    src: *mut fi_addr_t,
    _cond: *const c_void,
    timeout: c_int,
) -> ssize_t {
    ffi(PANIC_S, || {
        let w = Wait::Up(super::timeout_ms(timeout));
        // SAFETY: the application's fi_cq_sreadfrom(3) arguments, passed on unchanged: `buf` holds
        // `count` entries of the queue's format, `src` is NULL or holds `count` addresses, as
        // `read_any` requires.
        unsafe { read_any(p, buf, count, src, w) }
    })
}

/// Writes an error entry for the application's API version: before 1.5
/// the entry ends at `err_data`; from 1.5 on, an application buffer named
/// by `err_data` / `err_data_size` receives provider data (ofi has none,
/// so its size becomes 0), and without one `err_data` is NULL.
///
/// # Safety
/// `buf` is a writable `fi_cq_err_entry` of the application's version.
pub(crate) unsafe fn give_err(e: &CqErrEntry, buf: *mut fi_cq_err_entry, api: u32) {
    let new = api == 0 || api >= API_1_5;
    let mut out = *e;
    out.err_data = 0;
    out.err_data_size = 0;
    if new {
        // SAFETY: buf is a 1.5 entry: err_data and err_data_size are readable.
        let (d, n) = unsafe { ((*buf).err_data, (*buf).err_data_size) };
        if n > 0 {
            out.err_data = d as usize;
        }
    }
    let len = if new {
        std::mem::size_of::<CqErrEntry>()
    } else {
        std::mem::offset_of!(fi_cq_err_entry, err_data_size)
    };
    // SAFETY: CqErrEntry has fi_cq_err_entry's layout (both repr(C), same
    // fields); len bytes fit the application's entry of its version.
    unsafe {
        std::ptr::copy_nonoverlapping(
            (&out as *const CqErrEntry).cast::<u8>(),
            buf.cast::<u8>(),
            len,
        )
    };
}

const _: () = assert!(std::mem::size_of::<CqErrEntry>() == std::mem::size_of::<fi_cq_err_entry>());
const _: () =
    assert!(std::mem::size_of::<CqTaggedEntry>() == std::mem::size_of::<fi_cq_tagged_entry>());
const _: () =
    assert!(std::mem::size_of::<CqDataEntry>() == std::mem::size_of::<fi_cq_data_entry>());
const _: () = assert!(std::mem::size_of::<CqMsgEntry>() == std::mem::size_of::<fi_cq_msg_entry>());
const _: () = assert!(std::mem::size_of::<CqEntry>() == std::mem::size_of::<fi_cq_entry>());

unsafe extern "C" fn cq_readerr(p: *mut fid_cq, buf: *mut fi_cq_err_entry, _flags: u64) -> ssize_t {
    ffi(PANIC_S, || {
        // SAFETY: p is NULL or a fid of the application.
        let Some(obj) = (unsafe { cq(p) }) else {
            return EINVAL_S;
        };
        let Some(q) = obj.core.as_ref() else {
            return EINVAL_S;
        };
        if buf.is_null() {
            return EINVAL_S;
        }
        match q.readerr() {
            Ok(e) => {
                // SAFETY: buf is a writable error entry (caller's contract).
                unsafe { give_err(&e, buf, obj.api_version) };
                1
            }
            Err(e) => guard::err_isize(&e),
        }
    })
}

unsafe extern "C" fn cq_signal(p: *mut fid_cq) -> c_int {
    ffi(PANIC, || {
        // SAFETY: p is NULL or a fid of the application.
        match unsafe { cq(p) }.and_then(|o| o.core.as_ref()) {
            Some(q) => {
                q.signal();
                0
            }
            None => EINVAL,
        }
    })
}

unsafe extern "C" fn cq_strerror(
    _p: *mut fid_cq,
    prov_errno: c_int,
    _err_data: *const c_void,
    buf: *mut c_char,
    len: size_t,
) -> *const c_char {
    // SAFETY: buf is NULL or writable for len bytes.
    ffi(std::ptr::null(), || unsafe {
        super::strerror_into(prov_errno, buf, len)
    })
}

/// The wait object an application asked for, as this library provides
/// it: FI_WAIT_UNSPEC becomes FI_WAIT_FD.
pub(crate) fn wait_kind(requested: u32) -> u32 {
    match requested {
        wait_obj::FI_WAIT_UNSPEC => wait_obj::FI_WAIT_FD,
        w => w,
    }
}

/// `fi_control` of CQs, counters and EQs: FI_GETWAIT gives the wait object
/// (an `int *` fd for FI_WAIT_FD, a `struct fi_wait_pollfd *` for
/// FI_WAIT_POLLFD), FI_GETWAITOBJ its kind.
///
/// # Safety
/// `arg` is NULL or points to what the command takes for `kind`.
pub(crate) unsafe fn wait_control(
    fd: Option<i32>,
    kind: u32,
    command: c_int,
    arg: *mut c_void,
) -> c_int {
    if arg.is_null() {
        return EINVAL;
    }
    let kind = if fd.is_some() {
        kind
    } else {
        wait_obj::FI_WAIT_NONE
    };
    match (command, fd) {
        (control::FI_GETWAIT, Some(fd)) if kind == wait_obj::FI_WAIT_POLLFD => {
            let p = arg.cast::<fi_wait_pollfd>();
            // SAFETY: FI_GETWAIT on an FI_WAIT_POLLFD object takes a
            // struct fi_wait_pollfd * whose fd array has nfds entries.
            unsafe {
                let room = (*p).nfds;
                (*p).nfds = 1;
                (*p).change_index = 1;
                if room < 1 || (*p).fd.is_null() {
                    return guard::neg(FI_ETOOSMALL);
                }
                *(*p).fd = libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                };
            }
            0
        }
        (control::FI_GETWAIT, Some(fd))
            if kind == wait_obj::FI_WAIT_FD || kind == wait_obj::FI_WAIT_SET =>
        {
            // SAFETY: FI_GETWAIT on an FI_WAIT_FD object takes an int * (a
            // member of a wait set gives its own fd, nested in the set's).
            unsafe { *arg.cast::<c_int>() = fd };
            0
        }
        (control::FI_GETWAIT, _) => guard::neg(FI_ENODATA),
        (control::FI_GETWAITOBJ, _) => {
            // SAFETY: FI_GETWAITOBJ takes an enum fi_wait_obj *.
            unsafe { *arg.cast::<fi_wait_obj>() = kind };
            0
        }
        _ => ENOSYS,
    }
}

unsafe extern "C" fn cq_control(f: *mut fid, command: c_int, arg: *mut c_void) -> c_int {
    ffi(PANIC, || {
        // SAFETY: f is NULL or a fid of the application.
        let Some(o) = (unsafe { get::<CqObj>(f) }) else {
            return EINVAL;
        };
        let Some(q) = o.core.as_ref() else {
            return EINVAL;
        };
        // SAFETY: arg is what the command takes (caller's contract).
        unsafe { wait_control(q.wait_fd(), o.wait_obj, command, arg) }
    })
}
