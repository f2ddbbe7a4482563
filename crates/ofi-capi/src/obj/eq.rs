//! Event queues (`fi_eq_open`, `struct fid_eq`, `fi_ops_eq`):
//! connection-management entries (`fi_eq_cm_entry` with the connection
//! request's `fi_info` and private data), generic entries, error entries,
//! application writes, blocking reads, wait fd.

use super::cq::API_1_5;
use super::{ffi, get, publish, shut_core, CObj, EINVAL, EINVAL_S, PANIC, PANIC_S};
use crate::abi::*;
use crate::guard;
use ofi_core::consts::{eq_event, wait_obj, FI_PEEK};
use ofi_core::error::errno::*;
use ofi_core::info::{ConnHandle, Info};
use ofi_core::spi::HasCore;
use ofi_core::util::eq::{EqAttr, EqEvent};
use ofi_core::EventQueue;
use std::sync::Mutex;
use std::time::Duration;

/// An event queue as C sees it: `struct fid_eq`, then the raw-layer queue.
#[repr(C)]
pub struct EqObj {
    c: fid_eq,
    pub(crate) core: Option<EventQueue>,
    api_version: u32,
    /// The wait object asked for (FI_WAIT_UNSPEC as FI_WAIT_FD).
    wait_obj: u32,
    /// Error data of the last error entry read, kept until the next read
    /// (what `err_data` points to when the application gave no buffer).
    err_data: Mutex<Vec<u8>>,
    /// The `fi_info` a peek (FI_PEEK) gave for the FI_CONNREQ at the head,
    /// with that request's handle: the read that takes the event gives
    /// the same pointer, and further peeks make no new one.
    peeked: Mutex<Option<(ConnHandle, usize)>>,
}

// SAFETY: repr(C), first field fid_eq whose first field is fid.
unsafe impl CObj for EqObj {
    const CLASS: usize = class::FI_CLASS_EQ;
    fn base_ops() -> *const fi_ops {
        &EQ_FI_OPS
    }
    fn shut(&mut self) -> Result<(), c_int> {
        shut_core(&mut self.core, EventQueue::close)?;
        // A peeked request nobody read goes with its queue.
        let peeked = self.peeked.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Some((_, info)) = peeked.take() {
            // SAFETY: made by connreq_info and never handed over by a read.
            unsafe { crate::info::free_info(info as *mut fi_info) };
        }
        Ok(())
    }
}

impl EqObj {
    /// `fi_trywait` on this queue: `-FI_EAGAIN` while an entry is queued
    /// or a bound object has work.
    pub(crate) fn trywait(&self) -> c_int {
        match &self.core {
            Some(q) => super::ret(q.trywait()),
            None => EINVAL,
        }
    }
}

static EQ_FI_OPS: fi_ops = super::fid_ops::<EqObj>(super::bind_nosys, eq_control);

static EQ_OPS: fi_ops_eq = fi_ops_eq {
    size: std::mem::size_of::<fi_ops_eq>(),
    read: Some(eq_read),
    readerr: Some(eq_readerr),
    write: Some(eq_write),
    sread: Some(eq_sread),
    strerror: Some(eq_strerror),
};

/// The queue behind a `struct fid_eq *`.
///
/// # Safety
/// `p` is NULL or a readable fid.
#[inline]
unsafe fn eq<'a>(p: *mut fid_eq) -> Option<&'a EqObj> {
    // SAFETY: `p` is NULL or a readable fid (this function's contract), all that `get` asks.
    unsafe { get::<EqObj>(p.cast::<fid>()) }
}

/// `fi_eq_open`.
///
/// # Safety
/// Arguments as `fi_eq_open(3)`.
pub(crate) unsafe fn open(
    fab: *mut fid_fabric,
    attr: *mut fi_eq_attr,
    out: *mut *mut fid_eq,
    context: *mut c_void,
) -> c_int {
    // SAFETY: fab is NULL or a fid of the application.
    let Some(f) = (unsafe { super::fabric::fabric(fab) }) else {
        return EINVAL;
    };
    let Some(fcore) = f.core.as_ref() else {
        return EINVAL;
    };
    if attr.is_null() || out.is_null() {
        return EINVAL;
    }
    // SAFETY: attr is non-null and valid.
    let a = unsafe { &*attr };
    let ea = EqAttr {
        size: a.size,
        wait_obj: a.wait_obj,
    };
    let opened = if a.wait_obj == wait_obj::FI_WAIT_SET {
        // SAFETY: wait_set is NULL or a fid of the application.
        match unsafe { super::wait::wait_set(a.wait_set) } {
            Some(set) => fcore.eq_in(&ea, set),
            None => return EINVAL,
        }
    } else {
        fcore.eq(&ea)
    };
    let core = match opened {
        Ok(q) => q,
        Err(e) => return guard::err(&e),
    };
    let p = publish(EqObj {
        c: fid_eq {
            fid: fid {
                fclass: class::FI_CLASS_EQ,
                context,
                ops: &EQ_FI_OPS as *const fi_ops as *mut fi_ops,
            },
            ops: &EQ_OPS as *const fi_ops_eq as *mut fi_ops_eq,
        },
        core: Some(core),
        api_version: f.api_version(),
        wait_obj: if a.wait_obj == wait_obj::FI_WAIT_SET {
            // SAFETY: checked above to be a wait set of this library.
            unsafe { super::wait::member_kind(a.wait_set) }
        } else {
            super::cq::wait_kind(a.wait_obj)
        },
        err_data: Mutex::new(Vec::new()),
        peeked: Mutex::new(None),
    });
    // SAFETY: out is non-null and writable.
    unsafe { *out = p.cast::<fid_eq>() };
    0
}

fn is_cm(event: u32) -> bool {
    matches!(
        event,
        eq_event::FI_CONNREQ | eq_event::FI_CONNECTED | eq_event::FI_SHUTDOWN
    )
}

const CM_HDR: usize = std::mem::size_of::<fi_eq_cm_entry>();
const ENTRY: usize = std::mem::size_of::<fi_eq_entry>();

/// The bytes event `ev` needs in the application's buffer at least: its
/// entry's header (a written event shorter than that, all of it). What
/// follows (private data, the rest of a written event) is cut to the
/// buffer, as libfabric does.
fn needs(ev: &EqEvent) -> usize {
    let header = if is_cm(ev.event) { CM_HDR } else { ENTRY };
    ev.written.as_ref().map_or(header, |w| w.len().min(header))
}

impl EqObj {
    /// The `fi_info` of an FI_CONNREQ's request, made once per event: a
    /// peek keeps it for the read that takes the event, which hands it
    /// over to the application.
    fn connreq_info(&self, info: &Info, peek: bool) -> *mut fi_info {
        let mut kept = self.peeked.lock().unwrap_or_else(|e| e.into_inner());
        let same = matches!((&*kept, &info.handle), (Some((h, _)), Some(i)) if h == i);
        let ci = if same {
            kept.as_ref().map_or(0, |k| k.1) as *mut fi_info
        } else {
            if let Some((_, stale)) = kept.take() {
                // SAFETY: made by connreq_info for an event this queue no
                // longer holds; never handed over.
                unsafe { crate::info::free_info(stale as *mut fi_info) };
            }
            super::pep::connreq_info(info)
        };
        *kept = match (&info.handle, peek && !ci.is_null()) {
            (Some(h), true) => Some((h.clone(), ci as usize)),
            _ => None,
        };
        ci
    }
}

/// Writes one event into the application's buffer; returns bytes written.
///
/// # Safety
/// `buf` is writable for `len` bytes, `len` at least [`needs`]`(ev)`.
unsafe fn give_event(q: &EqObj, ev: &EqEvent, buf: *mut c_void, len: usize, peek: bool) -> ssize_t {
    if let Some(w) = &ev.written {
        let n = w.len().min(len);
        // SAFETY: buf has len >= n writable bytes.
        unsafe { std::ptr::copy_nonoverlapping(w.as_ptr(), buf.cast::<u8>(), n) };
        return n as ssize_t;
    }
    if is_cm(ev.event) {
        let info = match (&ev.info, ev.event) {
            (Some(i), eq_event::FI_CONNREQ) => q.connreq_info(i, peek),
            _ => std::ptr::null_mut(),
        };
        let n = ev.cm_data.len().min(len - CM_HDR);
        // SAFETY: buf has len >= CM_HDR + n writable bytes.
        unsafe {
            let e = buf.cast::<fi_eq_cm_entry>();
            std::ptr::addr_of_mut!((*e).fid).write_unaligned(ev.fid as fid_t);
            std::ptr::addr_of_mut!((*e).info).write_unaligned(info);
            std::ptr::copy_nonoverlapping(ev.cm_data.as_ptr(), buf.cast::<u8>().add(CM_HDR), n);
        }
        (CM_HDR + n) as ssize_t
    } else {
        let e = fi_eq_entry {
            fid: ev.fid as fid_t,
            context: ev.context as *mut c_void,
            data: ev.data,
        };
        // SAFETY: buf has len >= ENTRY writable bytes.
        unsafe { buf.cast::<fi_eq_entry>().write_unaligned(e) };
        ENTRY as ssize_t
    }
}

/// The read slots' common body: look at the next event, check that it
/// fits, then take it (unless FI_PEEK) and write it out.
///
/// # Safety
/// Arguments as `fi_eq_read(3)`.
unsafe fn read_any(
    p: *mut fid_eq,
    event: *mut u32,
    buf: *mut c_void,
    len: size_t,
    flags: u64,
    wait: Option<Option<Duration>>,
) -> ssize_t {
    // SAFETY: p is NULL or a fid of the application.
    let Some(obj) = (unsafe { eq(p) }) else {
        return EINVAL_S;
    };
    let Some(q) = obj.core.as_ref() else {
        return EINVAL_S;
    };
    // No room at all (`fi_eq_read(eq, NULL, NULL, 0, ...)`): a probe, as
    // libfabric answers it: 0 when an event is queued (left there),
    // -FI_EAGAIN when none, -FI_EAVAIL when an error entry is next.
    let probe = len == 0 && buf.is_null();
    if (event.is_null() || buf.is_null()) && !probe {
        return EINVAL_S;
    }
    let first = match wait {
        None => q.peek(),
        Some(t) => q.core().sread(t, true),
    };
    let ev = match first {
        Ok(ev) => ev,
        Err(e) => return guard::err_isize(&e),
    };
    if probe {
        return 0;
    }
    if len < needs(&ev) {
        return guard::neg_isize(FI_ETOOSMALL);
    }
    let peek = flags & FI_PEEK != 0;
    let ev = if peek {
        ev
    } else {
        // Taken only if it fits: another thread may have taken the event
        // looked at, and the next one may need more room.
        match q.core().take_fitting(|e| len >= needs(e)) {
            Ok(Some(ev)) => ev,
            Ok(None) => return guard::neg_isize(FI_ETOOSMALL),
            Err(e) => return guard::err_isize(&e),
        }
    };
    // SAFETY: event is non-null and writable; buf has len bytes.
    unsafe {
        *event = ev.event;
        give_event(obj, &ev, buf, len, peek)
    }
}

unsafe extern "C" fn eq_read(
    p: *mut fid_eq,
    event: *mut u32,
    buf: *mut c_void,
    len: size_t,
    flags: u64,
) -> ssize_t {
    // SAFETY: the application's fi_eq_read(3) arguments, passed on unchanged, as `read_any`
    // requires.
    ffi(PANIC_S, || unsafe {
        read_any(p, event, buf, len, flags, None)
    })
}

unsafe extern "C" fn eq_sread(
    p: *mut fid_eq,
    event: *mut u32,
    buf: *mut c_void,
    len: size_t,
    timeout: c_int,
    flags: u64,
) -> ssize_t {
    ffi(PANIC_S, || {
        let t = super::timeout_ms(timeout);
        // SAFETY: the application's fi_eq_sread(3) arguments (those fi_eq_read also takes), passed
        // on unchanged, as `read_any` requires.
        unsafe { read_any(p, event, buf, len, flags, Some(t)) }
    })
}

unsafe extern "C" fn eq_readerr(p: *mut fid_eq, buf: *mut fi_eq_err_entry, _flags: u64) -> ssize_t {
    ffi(PANIC_S, || {
        // SAFETY: p is NULL or a fid of the application.
        let Some(obj) = (unsafe { eq(p) }) else {
            return EINVAL_S;
        };
        let Some(q) = obj.core.as_ref() else {
            return EINVAL_S;
        };
        if buf.is_null() {
            return EINVAL_S;
        }
        let e = match q.readerr() {
            Ok(e) => e,
            Err(e) => return guard::err_isize(&e),
        };
        let new = obj.api_version == 0 || obj.api_version >= API_1_5;
        let mut kept = obj.err_data.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: buf is a writable error entry of the application's version.
        unsafe {
            let user = if new {
                ((*buf).err_data, (*buf).err_data_size)
            } else {
                (std::ptr::null_mut(), 0)
            };
            let (data, size) = if user.1 > 0 && !user.0.is_null() {
                let n = e.err_data.len().min(user.1);
                std::ptr::copy_nonoverlapping(e.err_data.as_ptr(), user.0.cast::<u8>(), n);
                (user.0, n)
            } else if e.err_data.is_empty() {
                (std::ptr::null_mut(), 0)
            } else {
                *kept = e.err_data.clone();
                (kept.as_mut_ptr().cast::<c_void>(), kept.len())
            };
            (*buf).fid = e.fid as fid_t;
            (*buf).context = e.context as *mut c_void;
            (*buf).data = e.data;
            (*buf).err = e.err;
            (*buf).prov_errno = e.prov_errno;
            (*buf).err_data = data;
            if new {
                (*buf).err_data_size = size;
                std::mem::size_of::<fi_eq_err_entry>() as ssize_t
            } else {
                std::mem::offset_of!(fi_eq_err_entry, err_data_size) as ssize_t
            }
        }
    })
}

unsafe extern "C" fn eq_write(
    p: *mut fid_eq,
    event: u32,
    buf: *const c_void,
    len: size_t,
    _flags: u64,
) -> ssize_t {
    ffi(PANIC_S, || {
        // SAFETY: p is NULL or a fid of the application.
        let Some(q) = (unsafe { eq(p) }).and_then(|o| o.core.as_ref()) else {
            return EINVAL_S;
        };
        if buf.is_null() && len != 0 {
            return EINVAL_S;
        }
        // The bytes are read back as written (fi_eq(3)); a generic entry's
        // fields are decoded too, for the library's own readers.
        // SAFETY: buf is readable for len bytes (the caller's contract).
        let bytes = unsafe { crate::info::c_bytes(buf, len) }.unwrap_or_default();
        let mut ev = EqEvent {
            event,
            ..Default::default()
        };
        if bytes.len() >= ENTRY {
            // SAFETY: bytes holds at least an fi_eq_entry.
            let e = unsafe { bytes.as_ptr().cast::<fi_eq_entry>().read_unaligned() };
            ev.fid = e.fid as usize;
            ev.context = e.context as usize;
            ev.data = e.data;
        }
        ev.written = Some(bytes);
        q.write(ev);
        len as ssize_t
    })
}

unsafe extern "C" fn eq_strerror(
    _p: *mut fid_eq,
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

unsafe extern "C" fn eq_control(f: *mut fid, command: c_int, arg: *mut c_void) -> c_int {
    ffi(PANIC, || {
        // SAFETY: f is NULL or a fid of the application.
        let Some(o) = (unsafe { get::<EqObj>(f) }) else {
            return EINVAL;
        };
        let Some(q) = o.core.as_ref() else {
            return EINVAL;
        };
        // SAFETY: arg is what the command takes (caller's contract).
        unsafe { super::cq::wait_control(q.wait_fd(), o.wait_obj, command, arg) }
    })
}
