//! Wait sets (`fi_wait_open`, `struct fid_wait`, `fi_ops_wait`): one wait
//! object for the CQs, counters and EQs opened with FI_WAIT_SET naming it.

use super::{ffi, get, publish, shut_core, CObj, EINVAL, PANIC};
use crate::abi::*;
use crate::guard;
use ofi_core::WaitSet;

/// A wait set as C sees it: `struct fid_wait`, then the raw-layer set.
#[repr(C)]
pub struct WaitObj {
    c: fid_wait,
    pub(crate) core: Option<WaitSet>,
    /// The wait object asked for (FI_WAIT_UNSPEC as FI_WAIT_FD).
    wait_obj: u32,
}

// SAFETY: repr(C), first field fid_wait whose first field is fid.
unsafe impl CObj for WaitObj {
    const CLASS: usize = class::FI_CLASS_WAIT;
    fn base_ops() -> *const fi_ops {
        &WAIT_FI_OPS
    }
    fn shut(&mut self) -> Result<(), c_int> {
        shut_core(&mut self.core, WaitSet::close)
    }
}

impl WaitObj {
    /// `fi_trywait` on this set.
    pub(crate) fn trywait(&self) -> c_int {
        match &self.core {
            Some(w) => super::ret(w.trywait()),
            None => EINVAL,
        }
    }
}

static WAIT_FI_OPS: fi_ops = super::fid_ops::<WaitObj>(super::bind_nosys, wait_control);

static WAIT_OPS: fi_ops_wait = fi_ops_wait {
    size: std::mem::size_of::<fi_ops_wait>(),
    wait: Some(wait_wait),
};

/// The set behind a `struct fid_wait *` (an attribute's `wait_set`).
///
/// # Safety
/// `p` is NULL or a readable fid.
pub(crate) unsafe fn wait_set<'a>(p: *mut fid_wait) -> Option<&'a WaitSet> {
    // SAFETY: `p` is NULL or a readable fid (this function's contract), all that `get` asks.
    unsafe { get::<WaitObj>(p.cast::<fid>()) }.and_then(|w| w.core.as_ref())
}

/// The wait object kind of a member of the set at `p`: the set's own
/// (FI_GETWAITOBJ on a member answers FI_WAIT_FD, as libfabric does).
///
/// # Safety
/// `p` is NULL or a readable fid.
pub(crate) unsafe fn member_kind(p: *mut fid_wait) -> u32 {
    // SAFETY: `p` is NULL or a readable fid (this function's contract), all that `get` asks.
    unsafe { get::<WaitObj>(p.cast::<fid>()) }
        .map_or(ofi_core::consts::wait_obj::FI_WAIT_SET, |w| w.wait_obj)
}

/// `fi_wait_open`.
///
/// # Safety
/// Arguments as `fi_wait_open(3)`.
pub(crate) unsafe fn open(
    fab: *mut fid_fabric,
    attr: *mut fi_wait_attr,
    out: *mut *mut fid_wait,
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
    // SAFETY: attr is non-null and valid (caller's contract).
    let a = unsafe { &*attr };
    // The flags are reserved (fi_poll(3): "must be set to 0").
    if a.flags != 0 {
        return guard::neg(ofi_core::error::errno::FI_EBADFLAGS);
    }
    let core = match fcore.wait_set(a.wait_obj) {
        Ok(w) => w,
        Err(e) => return guard::err(&e),
    };
    let p = publish(WaitObj {
        c: fid_wait {
            fid: fid {
                fclass: class::FI_CLASS_WAIT,
                context: std::ptr::null_mut(),
                ops: &WAIT_FI_OPS as *const fi_ops as *mut fi_ops,
            },
            ops: &WAIT_OPS as *const fi_ops_wait as *mut fi_ops_wait,
        },
        core: Some(core),
        wait_obj: super::cq::wait_kind(a.wait_obj),
    });
    // SAFETY: out is non-null and writable.
    unsafe { *out = p.cast::<fid_wait>() };
    0
}

/// `fi_wait`: 0 once a member has something to read, `-FI_ETIMEDOUT`
/// after `timeout` ms (negative: forever).
unsafe extern "C" fn wait_wait(p: *mut fid_wait, timeout: c_int) -> c_int {
    ffi(PANIC, || {
        // SAFETY: p is NULL or a fid of the application.
        match unsafe { wait_set(p) } {
            Some(w) => super::ret(w.wait(super::timeout_ms(timeout))),
            None => EINVAL,
        }
    })
}

unsafe extern "C" fn wait_control(f: *mut fid, command: c_int, arg: *mut c_void) -> c_int {
    ffi(PANIC, || {
        // SAFETY: f is NULL or a fid of the application.
        let Some(o) = (unsafe { get::<WaitObj>(f) }) else {
            return EINVAL;
        };
        let Some(w) = o.core.as_ref() else {
            return EINVAL;
        };
        // SAFETY: arg is what the command takes (caller's contract).
        unsafe { super::cq::wait_control(w.wait_fd(), o.wait_obj, command, arg) }
    })
}
