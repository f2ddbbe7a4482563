//! The fabric object (`fi_fabric`, `struct fid_fabric`) and its
//! `fi_ops_fabric`: domains, passive endpoints, event queues, trywait.

use super::{cstr, ffi, get, publish, shut_core, CObj, EINVAL, PANIC};
use crate::abi::*;
use crate::guard;
use ofi_core::error::errno::FI_EAGAIN;
use ofi_core::info::FabricAttr;

/// A fabric as C sees it: `struct fid_fabric`, then the raw-layer fabric.
#[repr(C)]
pub struct FabricObj {
    c: fid_fabric,
    pub(crate) core: Option<ofi_core::Fabric>,
}

// SAFETY: repr(C), first field fid_fabric whose first field is fid.
unsafe impl CObj for FabricObj {
    const CLASS: usize = class::FI_CLASS_FABRIC;
    fn base_ops() -> *const fi_ops {
        &FABRIC_FI_OPS
    }
    fn shut(&mut self) -> Result<(), c_int> {
        shut_core(&mut self.core, ofi_core::Fabric::close)
    }
}

impl FabricObj {
    /// The API version the application asked for (`FI_VERSION` form).
    pub(crate) fn api_version(&self) -> u32 {
        self.c.api_version
    }
}

static FABRIC_FI_OPS: fi_ops = super::fid_ops::<FabricObj>(super::bind_nosys, super::control_nosys);

static FABRIC_OPS: fi_ops_fabric = fi_ops_fabric {
    size: std::mem::size_of::<fi_ops_fabric>(),
    domain: Some(fabric_domain),
    passive_ep: Some(fabric_passive_ep),
    eq_open: Some(fabric_eq_open),
    wait_open: Some(fabric_wait_open),
    trywait: Some(fabric_trywait),
    domain2: Some(fabric_domain2),
};

/// The fabric behind a `struct fid_fabric *`.
///
/// # Safety
/// `p` is NULL or a readable fid.
pub(crate) unsafe fn fabric<'a>(p: *mut fid_fabric) -> Option<&'a FabricObj> {
    // SAFETY: `p` is NULL or a readable fid (this function's contract), all that `get` asks.
    unsafe { get::<FabricObj>(p.cast::<fid>()) }
}

fn attr_from_c(a: &fi_fabric_attr) -> FabricAttr {
    // SAFETY: the strings of a fabric attribute are NULL or NUL-terminated.
    let s = |p: *mut c_char| unsafe { cstr(p) }.map(str::to_owned);
    FabricAttr {
        name: s(a.name),
        prov_name: s(a.prov_name),
        prov_version: a.prov_version,
        api_version: a.api_version,
    }
}

/// `fi_fabric`: opens the fabric of a provider offer's fabric attributes.
/// `compat` exports it as `fi_fabric@@FABRIC_1.1` (hence no `#[no_mangle]`).
///
/// # Safety
/// `attr` is NULL or a valid `fi_fabric_attr`; `fabric` is NULL or writable.
pub unsafe extern "C" fn fi_fabric(
    attr: *mut fi_fabric_attr,
    fabric: *mut *mut fid_fabric,
    context: *mut c_void,
) -> c_int {
    ffi(PANIC, || {
        if attr.is_null() || fabric.is_null() {
            return EINVAL;
        }
        // SAFETY: attr is non-null and valid (caller's contract).
        let a = attr_from_c(unsafe { &*attr });
        let api = a.api_version;
        ofi::init();
        let core = match ofi_core::Fabric::open(&a) {
            Ok(f) => f,
            Err(e) => return guard::err(&e),
        };
        let p = publish(FabricObj {
            c: fid_fabric {
                fid: fid {
                    fclass: class::FI_CLASS_FABRIC,
                    context,
                    ops: &FABRIC_FI_OPS as *const fi_ops as *mut fi_ops,
                },
                ops: &FABRIC_OPS as *const fi_ops_fabric as *mut fi_ops_fabric,
                api_version: api,
            },
            core: Some(core),
        });
        // SAFETY: fabric is non-null and writable.
        unsafe { *fabric = p.cast::<fid_fabric>() };
        0
    })
}

unsafe extern "C" fn fabric_domain(
    fab: *mut fid_fabric,
    info: *mut fi_info,
    dom: *mut *mut fid_domain,
    context: *mut c_void,
) -> c_int {
    // SAFETY: the application's fi_domain(3) arguments, passed on unchanged, as `domain::open`
    // requires.
    ffi(PANIC, || unsafe {
        super::domain::open(fab, info, dom, context)
    })
}

unsafe extern "C" fn fabric_domain2(
    fab: *mut fid_fabric,
    info: *mut fi_info,
    dom: *mut *mut fid_domain,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    ffi(PANIC, || {
        if flags != 0 {
            return guard::neg(ofi_core::error::errno::FI_EBADFLAGS);
        }
        // SAFETY: the application's fi_domain2(3) arguments but `flags` (zero), passed on
        // unchanged, as `domain::open` requires.
        unsafe { super::domain::open(fab, info, dom, context) }
    })
}

unsafe extern "C" fn fabric_passive_ep(
    fab: *mut fid_fabric,
    info: *mut fi_info,
    pep: *mut *mut fid_pep,
    context: *mut c_void,
) -> c_int {
    // SAFETY: the application's fi_passive_ep(3) arguments, passed on unchanged, as `pep::open`
    // requires.
    ffi(PANIC, || unsafe {
        super::pep::open(fab, info, pep, context)
    })
}

unsafe extern "C" fn fabric_eq_open(
    fab: *mut fid_fabric,
    attr: *mut fi_eq_attr,
    eq: *mut *mut fid_eq,
    context: *mut c_void,
) -> c_int {
    // SAFETY: the application's fi_eq_open(3) arguments, passed on unchanged, as `eq::open`
    // requires.
    ffi(PANIC, || unsafe { super::eq::open(fab, attr, eq, context) })
}

unsafe extern "C" fn fabric_wait_open(
    fab: *mut fid_fabric,
    attr: *mut fi_wait_attr,
    waitset: *mut *mut fid_wait,
) -> c_int {
    // SAFETY: the application's fi_wait_open(3) arguments, passed on unchanged, as `wait::open`
    // requires.
    ffi(PANIC, || unsafe { super::wait::open(fab, attr, waitset) })
}

/// `fi_trywait`: 0 when every listed CQ, counter, EQ and wait set may be waited on
/// through its fd, `-FI_EAGAIN` when one already has something to read.
unsafe extern "C" fn fabric_trywait(
    fab: *mut fid_fabric,
    fids: *mut *mut fid,
    count: c_int,
) -> c_int {
    ffi(PANIC, || {
        // SAFETY: fab is NULL or a fid of the application.
        if unsafe { fabric(fab) }.is_none() {
            return EINVAL;
        }
        let Ok(n) = usize::try_from(count) else {
            return EINVAL;
        };
        // SAFETY: fids has count entries (caller's contract).
        let Some(list) = (unsafe { super::array(fids, n) }) else {
            return EINVAL;
        };
        for &f in list {
            // SAFETY: each entry is NULL or a fid of the application.
            let r = unsafe { trywait_one(f) };
            if r != 0 {
                return r;
            }
        }
        0
    })
}

/// trywait on one object.
///
/// # Safety
/// `f` is NULL or a readable fid.
unsafe fn trywait_one(f: *mut fid) -> c_int {
    // SAFETY: the caller's contract, for each probe.
    unsafe {
        if let Some(cq) = get::<super::cq::CqObj>(f) {
            return cq.trywait();
        }
        if let Some(c) = get::<super::cntr::CntrObj>(f) {
            return c.trywait();
        }
        if let Some(eq) = get::<super::eq::EqObj>(f) {
            return eq.trywait();
        }
        if let Some(w) = get::<super::wait::WaitObj>(f) {
            return w.trywait();
        }
    }
    EINVAL
}

/// `-FI_EAGAIN` as an `int`.
pub(crate) const EAGAIN: c_int = guard::neg(FI_EAGAIN);
