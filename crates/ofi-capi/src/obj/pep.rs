//! Passive endpoints (`fi_passive_ep`, `struct fid_pep`) and connection
//! requests (the `FI_CLASS_CONNREQ` fid an FI_CONNREQ event's `info->handle`
//! names, passed back to `fi_endpoint` and `fi_reject`).

use super::{ffi, get, publish, unpublish, CObj, EINVAL, PANIC};
use crate::abi::*;
use crate::guard;
use ofi_core::info::{ConnHandle, Info};
use ofi_core::PassiveEndpoint;
use std::sync::atomic::{AtomicBool, Ordering};

/// A passive endpoint as C sees it: `struct fid_pep`, then the raw-layer one.
#[repr(C)]
pub struct PepObj {
    c: fid_pep,
    pub(crate) core: Option<PassiveEndpoint>,
}

// SAFETY: repr(C), first field fid_pep whose first field is fid.
unsafe impl CObj for PepObj {
    const CLASS: usize = class::FI_CLASS_PEP;
    fn base_ops() -> *const fi_ops {
        &PEP_FI_OPS
    }
    fn shut(&mut self) -> Result<(), c_int> {
        super::shut_core(&mut self.core, PassiveEndpoint::close)
    }
}

/// A pending connection request: `struct fid`, then the raw layer's handle.
#[repr(C)]
pub struct ConnReqObj {
    c: fid,
    pub(crate) handle: ConnHandle,
    /// An endpoint was opened for the request and owns (frees) this fid.
    taken: AtomicBool,
}

impl ConnReqObj {
    /// Claims the request for an endpoint: true for the first claimant,
    /// which then frees it when it closes.
    pub(crate) fn take(&self) -> bool {
        !self.taken.swap(true, Ordering::AcqRel)
    }
    /// Whether an endpoint owns the request.
    pub(crate) fn taken(&self) -> bool {
        self.taken.load(Ordering::Acquire)
    }
}

// SAFETY: repr(C), first field fid.
unsafe impl CObj for ConnReqObj {
    const CLASS: usize = class::FI_CLASS_CONNREQ;
    fn base_ops() -> *const fi_ops {
        &CONNREQ_FI_OPS
    }
    fn shut(&mut self) -> Result<(), c_int> {
        Ok(())
    }
}

static PEP_FI_OPS: fi_ops = super::fid_ops::<PepObj>(pep_bind, pep_control);

static CONNREQ_FI_OPS: fi_ops =
    super::fid_ops::<ConnReqObj>(super::bind_nosys, super::control_nosys);

/// The passive endpoint behind a fid.
///
/// # Safety
/// `p` is NULL or a readable fid.
pub(crate) unsafe fn pep<'a>(p: *const fid) -> Option<&'a PassiveEndpoint> {
    // SAFETY: `p` is NULL or a readable fid (this function's contract), all that `get` asks.
    unsafe { get::<PepObj>(p) }.and_then(|o| o.core.as_ref())
}

/// `fi_passive_ep`.
///
/// # Safety
/// Arguments as `fi_passive_ep(3)`.
pub(crate) unsafe fn open(
    fab: *mut fid_fabric,
    info: *mut fi_info,
    out: *mut *mut fid_pep,
    context: *mut c_void,
) -> c_int {
    // SAFETY: fab is NULL or a fid of the application.
    let Some(fcore) = (unsafe { super::fabric::fabric(fab) }).and_then(|f| f.core.as_ref()) else {
        return EINVAL;
    };
    if info.is_null() || out.is_null() {
        return EINVAL;
    }
    // SAFETY: info is a valid fi_info.
    let i = match unsafe { crate::info::info_from_c(info) } {
        Ok(i) => i,
        Err(e) => return e,
    };
    let p = publish(PepObj {
        c: fid_pep {
            fid: fid {
                fclass: class::FI_CLASS_PEP,
                context,
                ops: &PEP_FI_OPS as *const fi_ops as *mut fi_ops,
            },
            ops: super::ep::ep_ops_table(),
            cm: super::ep::cm_ops_table(),
        },
        core: None,
    });
    // Events about this passive endpoint name it by its C fid.
    match fcore.passive_ep(&i, p as usize) {
        Ok(core) => {
            // SAFETY: p came from publish and is not yet shared.
            unsafe { (*p).core = Some(core) };
            // SAFETY: out is non-null and writable.
            unsafe { *out = p.cast::<fid_pep>() };
            0
        }
        Err(e) => {
            // SAFETY: p came from publish and was never shared.
            unsafe { unpublish(p) };
            guard::err(&e)
        }
    }
}

/// The `fi_info` of an FI_CONNREQ event: its `handle` is a new connection
/// request fid (freed by `fi_reject`, or when the endpoint opened with it
/// closes). NULL if the conversion fails.
pub(crate) fn connreq_info(info: &Info) -> *mut fi_info {
    let ci = crate::info::info_to_c(info);
    if ci.is_null() {
        return ci;
    }
    if let Some(h) = &info.handle {
        let r = publish(ConnReqObj {
            c: fid {
                fclass: class::FI_CLASS_CONNREQ,
                context: std::ptr::null_mut(),
                ops: &CONNREQ_FI_OPS as *const fi_ops as *mut fi_ops,
            },
            handle: h.clone(),
            taken: AtomicBool::new(false),
        });
        // SAFETY: ci is a fresh fi_info from info_to_c.
        unsafe { (*ci).handle = r.cast::<fid>() };
    }
    ci
}

/// The connection request behind an `info->handle`.
///
/// # Safety
/// `p` is NULL or a readable fid.
pub(crate) unsafe fn connreq<'a>(p: *const fid) -> Option<&'a ConnReqObj> {
    // SAFETY: `p` is NULL or a readable fid (this function's contract), all that `get` asks.
    unsafe { get::<ConnReqObj>(p) }
}

/// Frees a connection request fid.
///
/// # Safety
/// `p` is a live connection request nobody uses afterwards.
pub(crate) unsafe fn free_connreq(p: *mut ConnReqObj) {
    // SAFETY: `p` is a live connection request made by `publish` that nobody uses afterwards (this
    // function's contract), as `unpublish` requires.
    unsafe { unpublish(p) }
}

/// `fi_pep_bind`: the EQ that receives FI_CONNREQ events.
unsafe extern "C" fn pep_bind(f: *mut fid, bfid: *mut fid, _flags: u64) -> c_int {
    ffi(PANIC, || {
        // SAFETY: f and bfid are NULL or fids of the application.
        let (Some(p), Some(q)) = (unsafe { pep(f) }, unsafe { get::<super::eq::EqObj>(bfid) })
        else {
            return EINVAL;
        };
        let Some(q) = q.core.as_ref() else {
            return EINVAL;
        };
        super::ret(p.bind_eq(q))
    })
}

/// `fi_control` of passive endpoints: FI_BACKLOG is accepted (the
/// provider's listen backlog stands).
unsafe extern "C" fn pep_control(f: *mut fid, command: c_int, _arg: *mut c_void) -> c_int {
    ffi(PANIC, || {
        // SAFETY: f is NULL or a fid of the application.
        if unsafe { pep(f) }.is_none() {
            return EINVAL;
        }
        match command {
            control::FI_BACKLOG => 0,
            _ => super::ENOSYS,
        }
    })
}
