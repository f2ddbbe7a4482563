//! Counters (`fi_cntr_open`, `struct fid_cntr`, `fi_ops_cntr`).

use super::{ffi, get, publish, shut_core, CObj, EINVAL, PANIC};
use crate::abi::*;
use crate::guard;
use ofi_core::consts::wait_obj;
use ofi_core::spi::HasCore;
use ofi_core::util::cntr::CntrAttr;
use ofi_core::Counter;

/// A counter as C sees it: `struct fid_cntr`, then the raw-layer counter.
#[repr(C)]
pub struct CntrObj {
    c: fid_cntr,
    pub(crate) core: Option<Counter>,
    /// The wait object asked for (FI_WAIT_UNSPEC as FI_WAIT_FD).
    wait_obj: u32,
}

// SAFETY: repr(C), first field fid_cntr whose first field is fid.
unsafe impl CObj for CntrObj {
    const CLASS: usize = class::FI_CLASS_CNTR;
    fn base_ops() -> *const fi_ops {
        &CNTR_FI_OPS
    }
    fn shut(&mut self) -> Result<(), c_int> {
        shut_core(&mut self.core, Counter::close)
    }
}

impl CntrObj {
    /// `fi_trywait` on this counter: safe to sleep unless a count changed
    /// since the application last read one.
    pub(crate) fn trywait(&self) -> c_int {
        match &self.core {
            Some(c) if c.core().has_events() => super::fabric::EAGAIN,
            Some(c) => super::ret(c.trywait(c.core().counts().0.saturating_add(1))),
            None => EINVAL,
        }
    }
}

static CNTR_FI_OPS: fi_ops = super::fid_ops::<CntrObj>(super::bind_nosys, cntr_control);

static CNTR_OPS: fi_ops_cntr = fi_ops_cntr {
    size: std::mem::size_of::<fi_ops_cntr>(),
    read: Some(cntr_read),
    readerr: Some(cntr_readerr),
    add: Some(cntr_add),
    set: Some(cntr_set),
    wait: Some(cntr_wait),
    adderr: Some(cntr_adderr),
    seterr: Some(cntr_seterr),
};

/// The counter behind a `struct fid_cntr *`.
///
/// # Safety
/// `p` is NULL or a readable fid.
#[inline]
unsafe fn counter<'a>(p: *mut fid_cntr) -> Option<&'a Counter> {
    // SAFETY: `p` is NULL or a readable fid (this function's contract), all that `get` asks.
    unsafe { get::<CntrObj>(p.cast::<fid>()) }.and_then(|o| o.core.as_ref())
}

/// `fi_cntr_open`.
///
/// # Safety
/// Arguments as `fi_cntr_open(3)`.
pub(crate) unsafe fn open(
    d: *mut fid_domain,
    attr: *mut fi_cntr_attr,
    out: *mut *mut fid_cntr,
    context: *mut c_void,
) -> c_int {
    // SAFETY: d is NULL or a fid of the application.
    let Some(dcore) = (unsafe { super::domain::domain(d) }).and_then(|x| x.core()) else {
        return EINVAL;
    };
    if out.is_null() {
        return EINVAL;
    }
    let (a, set) = if attr.is_null() {
        (CntrAttr::default(), std::ptr::null_mut())
    } else {
        // SAFETY: attr is non-null and valid.
        let a = unsafe { &*attr };
        (
            CntrAttr {
                events: a.events,
                wait_obj: a.wait_obj,
            },
            a.wait_set,
        )
    };
    let opened = if a.wait_obj == wait_obj::FI_WAIT_SET {
        // SAFETY: wait_set is NULL or a fid of the application.
        match unsafe { super::wait::wait_set(set) } {
            Some(s) => dcore.cntr_in(&a, s),
            None => return EINVAL,
        }
    } else {
        dcore.cntr(&a)
    };
    let core = match opened {
        Ok(c) => c,
        Err(e) => return guard::err(&e),
    };
    let p = publish(CntrObj {
        c: fid_cntr {
            fid: fid {
                fclass: class::FI_CLASS_CNTR,
                context,
                ops: &CNTR_FI_OPS as *const fi_ops as *mut fi_ops,
            },
            ops: &CNTR_OPS as *const fi_ops_cntr as *mut fi_ops_cntr,
        },
        core: Some(core),
        wait_obj: if a.wait_obj == wait_obj::FI_WAIT_SET {
            // SAFETY: checked above to be a wait set of this library.
            unsafe { super::wait::member_kind(set) }
        } else {
            super::cq::wait_kind(a.wait_obj)
        },
    });
    // SAFETY: out is non-null and writable.
    unsafe { *out = p.cast::<fid_cntr>() };
    0
}

unsafe extern "C" fn cntr_read(p: *mut fid_cntr) -> u64 {
    // SAFETY: p is NULL or a fid of the application.
    super::hot(0, || unsafe { counter(p) }.map_or(0, |c| c.read()))
}

unsafe extern "C" fn cntr_readerr(p: *mut fid_cntr) -> u64 {
    // SAFETY: p is NULL or a fid of the application.
    super::hot(0, || unsafe { counter(p) }.map_or(0, |c| c.readerr()))
}

/// Runs a counter update, `-FI_EINVAL` for a bad fid.
///
/// # Safety
/// `p` is NULL or a readable fid.
unsafe fn update(p: *mut fid_cntr, f: impl FnOnce(&Counter)) -> c_int {
    // SAFETY: `p` is NULL or a readable fid (this function's contract), as `counter` requires.
    match unsafe { counter(p) } {
        Some(c) => {
            f(c);
            0
        }
        None => EINVAL,
    }
}

unsafe extern "C" fn cntr_add(p: *mut fid_cntr, value: u64) -> c_int {
    // SAFETY: p is NULL or a fid of the application.
    super::hot(PANIC, || unsafe { update(p, |c| c.add(value)) })
}

unsafe extern "C" fn cntr_set(p: *mut fid_cntr, value: u64) -> c_int {
    // SAFETY: p is NULL or a fid of the application.
    super::hot(PANIC, || unsafe { update(p, |c| c.set(value)) })
}

unsafe extern "C" fn cntr_adderr(p: *mut fid_cntr, value: u64) -> c_int {
    // SAFETY: p is NULL or a fid of the application.
    super::hot(PANIC, || unsafe { update(p, |c| c.add_err(value)) })
}

unsafe extern "C" fn cntr_seterr(p: *mut fid_cntr, value: u64) -> c_int {
    // SAFETY: p is NULL or a fid of the application.
    super::hot(PANIC, || unsafe { update(p, |c| c.set_err(value)) })
}

unsafe extern "C" fn cntr_wait(p: *mut fid_cntr, threshold: u64, timeout: c_int) -> c_int {
    ffi(PANIC, || {
        // SAFETY: p is NULL or a fid of the application.
        match unsafe { counter(p) } {
            Some(c) => super::ret(c.wait(threshold, super::timeout_ms(timeout))),
            None => EINVAL,
        }
    })
}

unsafe extern "C" fn cntr_control(f: *mut fid, command: c_int, arg: *mut c_void) -> c_int {
    ffi(PANIC, || {
        // SAFETY: f is NULL or a fid of the application.
        let Some(o) = (unsafe { get::<CntrObj>(f) }) else {
            return EINVAL;
        };
        let Some(c) = o.core.as_ref() else {
            return EINVAL;
        };
        // SAFETY: arg is what the command takes (caller's contract).
        unsafe { super::cq::wait_control(c.wait_fd(), o.wait_obj, command, arg) }
    })
}
