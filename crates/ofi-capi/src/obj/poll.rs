//! Poll sets (`fi_poll_open`, `struct fid_poll`, `fi_ops_poll`): progress
//! many CQs and counters in one call and learn which have news.

use super::{ffi, get, publish, shut_core, CObj, EINVAL, PANIC};
use crate::abi::*;
use crate::guard;
use ofi_core::PollSet;

/// A poll set as C sees it: `struct fid_poll`, then the raw-layer set.
#[repr(C)]
pub struct PollObj {
    c: fid_poll,
    pub(crate) core: Option<PollSet>,
}

// SAFETY: repr(C), first field fid_poll whose first field is fid.
unsafe impl CObj for PollObj {
    const CLASS: usize = class::FI_CLASS_POLL;
    fn base_ops() -> *const fi_ops {
        &POLL_FI_OPS
    }
    fn shut(&mut self) -> Result<(), c_int> {
        shut_core(&mut self.core, PollSet::close)
    }
}

static POLL_FI_OPS: fi_ops = super::fid_ops::<PollObj>(super::bind_nosys, super::control_nosys);

static POLL_OPS: fi_ops_poll = fi_ops_poll {
    size: std::mem::size_of::<fi_ops_poll>(),
    poll: Some(poll_poll),
    poll_add: Some(poll_add),
    poll_del: Some(poll_del),
};

/// The set behind a `struct fid_poll *`.
///
/// # Safety
/// `p` is NULL or a readable fid.
unsafe fn poll_set<'a>(p: *mut fid_poll) -> Option<&'a PollSet> {
    // SAFETY: `p` is NULL or a readable fid (this function's contract), all that `get` asks.
    unsafe { get::<PollObj>(p.cast::<fid>()) }.and_then(|o| o.core.as_ref())
}

/// `fi_poll_open`.
///
/// # Safety
/// Arguments as `fi_poll_open(3)`.
pub(crate) unsafe fn open(
    d: *mut fid_domain,
    attr: *mut fi_poll_attr,
    out: *mut *mut fid_poll,
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
    // The flags are reserved (fi_poll(3): "must be set to 0").
    // SAFETY: attr is non-null and valid (caller's contract).
    if unsafe { (*attr).flags } != 0 {
        return EINVAL;
    }
    let core = match dcore.poll_set() {
        Ok(p) => p,
        Err(e) => return guard::err(&e),
    };
    let p = publish(PollObj {
        c: fid_poll {
            fid: fid {
                fclass: class::FI_CLASS_POLL,
                context: std::ptr::null_mut(),
                ops: &POLL_FI_OPS as *const fi_ops as *mut fi_ops,
            },
            ops: &POLL_OPS as *const fi_ops_poll as *mut fi_ops_poll,
        },
        core: Some(core),
    });
    // SAFETY: out is non-null and writable.
    unsafe { *out = p.cast::<fid_poll>() };
    0
}

/// `fi_poll`: the contexts of the members with news, at most `count`.
unsafe extern "C" fn poll_poll(p: *mut fid_poll, context: *mut *mut c_void, count: c_int) -> c_int {
    ffi(PANIC, || {
        // SAFETY: p is NULL or a fid of the application.
        let Some(ps) = (unsafe { poll_set(p) }) else {
            return EINVAL;
        };
        let Ok(n) = usize::try_from(count) else {
            return EINVAL;
        };
        if n > 0 && context.is_null() {
            return EINVAL;
        }
        let mut found = vec![0usize; n];
        // Each member is kept by its fid, and its context is read now (the
        // application may set it after fi_poll_add), under the set's lock.
        // SAFETY: a member's fid stays valid while it is in the set (closing
        // it is -FI_EBUSY, and fi_poll_del waits for the lock held here).
        let got = ps.poll_with(&mut found, |f| unsafe {
            (*(f as *const fid)).context as usize
        });
        for (i, c) in found[..got].iter().enumerate() {
            // SAFETY: context has count >= got writable entries.
            unsafe { *context.add(i) = *c as *mut c_void };
        }
        got as c_int
    })
}

/// Which member a fid names: a CQ or a counter of this library.
///
/// # Safety
/// `f` is NULL or a readable fid.
unsafe fn member(ps: &PollSet, f: *mut fid, add: bool) -> Result<(), c_int> {
    // SAFETY: f is NULL or a fid of the application.
    unsafe {
        if let Some(q) = get::<super::cq::CqObj>(f).and_then(|o| o.core.as_ref()) {
            if add {
                ps.add_cq(q, f as usize);
                return Ok(());
            }
            return ps.del_cq(q).map_err(|e| guard::err(&e));
        }
        if let Some(c) = get::<super::cntr::CntrObj>(f).and_then(|o| o.core.as_ref()) {
            if add {
                ps.add_cntr(c, f as usize);
                return Ok(());
            }
            return ps.del_cntr(c).map_err(|e| guard::err(&e));
        }
    }
    // fi_poll(3): completion queues and counters only.
    Err(EINVAL)
}

unsafe extern "C" fn poll_add(p: *mut fid_poll, f: *mut fid, _flags: u64) -> c_int {
    ffi(PANIC, || {
        // SAFETY: p is NULL or a fid of the application.
        let Some(ps) = (unsafe { poll_set(p) }) else {
            return EINVAL;
        };
        // SAFETY: f is NULL or a fid of the application.
        match unsafe { member(ps, f, true) } {
            Ok(()) => 0,
            Err(e) => e,
        }
    })
}

unsafe extern "C" fn poll_del(p: *mut fid_poll, f: *mut fid, _flags: u64) -> c_int {
    ffi(PANIC, || {
        // SAFETY: p is NULL or a fid of the application.
        let Some(ps) = (unsafe { poll_set(p) }) else {
            return EINVAL;
        };
        // SAFETY: f is NULL or a fid of the application.
        match unsafe { member(ps, f, false) } {
            Ok(()) => 0,
            Err(e) => e,
        }
    })
}
