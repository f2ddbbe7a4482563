//! The domain object (`fi_domain`, `struct fid_domain`), its
//! `fi_ops_domain` (AVs, CQs, counters, endpoints, atomic queries) and its
//! `fi_ops_mr` (memory registration).

use super::{ffi, get, publish, shut_core, CObj, EINVAL, ENOSYS, PANIC};
use crate::abi::*;
use crate::guard;
use ofi_core::consts::{FI_COMPARE_ATOMIC, FI_FETCH_ATOMIC, FI_TAGGED};
use ofi_core::error::errno::*;
use ofi_core::util::atomic::{self, AtomicKind};

/// A domain as C sees it: `struct fid_domain`, then the raw-layer domain.
#[repr(C)]
pub struct DomainObj {
    c: fid_domain,
    pub(crate) core: Option<ofi_core::Domain>,
    /// API version of the application (decides the CQ/EQ error entry layout).
    pub(crate) api_version: u32,
}

// SAFETY: repr(C), first field fid_domain whose first field is fid.
unsafe impl CObj for DomainObj {
    const CLASS: usize = class::FI_CLASS_DOMAIN;
    fn base_ops() -> *const fi_ops {
        &DOMAIN_FI_OPS
    }
    fn shut(&mut self) -> Result<(), c_int> {
        shut_core(&mut self.core, ofi_core::Domain::close)
    }
}

impl DomainObj {
    /// The raw-layer domain, while open.
    pub(crate) fn core(&self) -> Option<&ofi_core::Domain> {
        self.core.as_ref()
    }
}

static DOMAIN_FI_OPS: fi_ops = super::fid_ops::<DomainObj>(domain_bind, super::control_nosys);

static DOMAIN_OPS: fi_ops_domain = fi_ops_domain {
    size: std::mem::size_of::<fi_ops_domain>(),
    av_open: Some(domain_av_open),
    cq_open: Some(domain_cq_open),
    endpoint: Some(domain_endpoint),
    scalable_ep: Some(domain_scalable_ep),
    cntr_open: Some(domain_cntr_open),
    poll_open: Some(domain_poll_open),
    stx_ctx: Some(domain_stx_ctx),
    srx_ctx: Some(domain_srx_ctx),
    query_atomic: Some(domain_query_atomic),
    query_collective: Some(domain_query_collective),
    endpoint2: Some(domain_endpoint2),
};

static DOMAIN_MR_OPS: fi_ops_mr = fi_ops_mr {
    size: std::mem::size_of::<fi_ops_mr>(),
    reg: Some(super::mr::mr_reg),
    regv: Some(super::mr::mr_regv),
    regattr: Some(super::mr::mr_regattr),
};

/// The domain behind a `struct fid_domain *`.
///
/// # Safety
/// `p` is NULL or a readable fid.
pub(crate) unsafe fn domain<'a>(p: *mut fid_domain) -> Option<&'a DomainObj> {
    // SAFETY: `p` is NULL or a readable fid (this function's contract), all that `get` asks.
    unsafe { get::<DomainObj>(p.cast::<fid>()) }
}

/// `fi_domain`: opens a domain of a fabric for an offer.
///
/// # Safety
/// Arguments as `fi_domain(3)`: `info` a valid fi_info, `dom` writable.
pub(crate) unsafe fn open(
    fab: *mut fid_fabric,
    info: *mut fi_info,
    dom: *mut *mut fid_domain,
    context: *mut c_void,
) -> c_int {
    // SAFETY: fab is NULL or a fid of the application.
    let Some(f) = (unsafe { super::fabric::fabric(fab) }) else {
        return EINVAL;
    };
    let Some(fcore) = f.core.as_ref() else {
        return EINVAL;
    };
    if info.is_null() || dom.is_null() {
        return EINVAL;
    }
    // SAFETY: info is a valid fi_info (caller's contract).
    let i = match unsafe { crate::info::info_from_c(info) } {
        Ok(i) => i,
        Err(e) => return e,
    };
    let api = match i.fabric_attr.api_version {
        0 => f.api_version(),
        v => v,
    };
    let core = match fcore.domain(&i) {
        Ok(d) => d,
        Err(e) => return guard::err(&e),
    };
    let p = publish(DomainObj {
        c: fid_domain {
            fid: fid {
                fclass: class::FI_CLASS_DOMAIN,
                context,
                ops: &DOMAIN_FI_OPS as *const fi_ops as *mut fi_ops,
            },
            ops: &DOMAIN_OPS as *const fi_ops_domain as *mut fi_ops_domain,
            mr: &DOMAIN_MR_OPS as *const fi_ops_mr as *mut fi_ops_mr,
        },
        core: Some(core),
        api_version: api,
    });
    // SAFETY: dom is non-null and writable.
    unsafe { *dom = p.cast::<fid_domain>() };
    0
}

/// `fi_domain_bind`: the domain's event queue, the default of endpoints
/// bound to none (their connection events and peer deaths), and with
/// FI_REG_MR the queue of FI_MR_COMPLETE events (registrations complete
/// at once; the event follows each).
unsafe extern "C" fn domain_bind(f: *mut fid, bfid: *mut fid, flags: u64) -> c_int {
    ffi(PANIC, || {
        // SAFETY: both are NULL or fids of the application.
        let (Some(d), Some(q)) = (unsafe { get::<DomainObj>(f) }, unsafe {
            get::<super::eq::EqObj>(bfid)
        }) else {
            return EINVAL;
        };
        let (Some(d), Some(q)) = (d.core(), q.core.as_ref()) else {
            return EINVAL;
        };
        super::ret(d.bind_eq(q, flags))
    })
}

unsafe extern "C" fn domain_av_open(
    d: *mut fid_domain,
    attr: *mut fi_av_attr,
    av: *mut *mut fid_av,
    context: *mut c_void,
) -> c_int {
    // SAFETY: the application's fi_av_open(3) arguments, passed on unchanged, as `av::open`
    // requires.
    ffi(PANIC, || unsafe { super::av::open(d, attr, av, context) })
}

unsafe extern "C" fn domain_cq_open(
    d: *mut fid_domain,
    attr: *mut fi_cq_attr,
    cq: *mut *mut fid_cq,
    context: *mut c_void,
) -> c_int {
    // SAFETY: the application's fi_cq_open(3) arguments, passed on unchanged, as `cq::open`
    // requires.
    ffi(PANIC, || unsafe { super::cq::open(d, attr, cq, context) })
}

unsafe extern "C" fn domain_cntr_open(
    d: *mut fid_domain,
    attr: *mut fi_cntr_attr,
    cntr: *mut *mut fid_cntr,
    context: *mut c_void,
) -> c_int {
    // SAFETY: the application's fi_cntr_open(3) arguments, passed on unchanged, as `cntr::open`
    // requires.
    ffi(PANIC, || unsafe {
        super::cntr::open(d, attr, cntr, context)
    })
}

unsafe extern "C" fn domain_endpoint(
    d: *mut fid_domain,
    info: *mut fi_info,
    ep: *mut *mut fid_ep,
    context: *mut c_void,
) -> c_int {
    // SAFETY: the application's fi_endpoint(3) arguments, passed on unchanged, as `ep::open`
    // requires.
    ffi(PANIC, || unsafe { super::ep::open(d, info, ep, context) })
}

unsafe extern "C" fn domain_endpoint2(
    d: *mut fid_domain,
    info: *mut fi_info,
    ep: *mut *mut fid_ep,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    ffi(PANIC, || {
        if flags != 0 {
            return guard::neg(FI_EBADFLAGS);
        }
        // SAFETY: the application's fi_endpoint2(3) arguments but `flags` (zero), passed on
        // unchanged, as `ep::open` requires.
        unsafe { super::ep::open(d, info, ep, context) }
    })
}

unsafe extern "C" fn domain_scalable_ep(
    _d: *mut fid_domain,
    _info: *mut fi_info,
    _sep: *mut *mut fid_ep,
    _context: *mut c_void,
) -> c_int {
    ffi(PANIC, || ENOSYS)
}

unsafe extern "C" fn domain_poll_open(
    d: *mut fid_domain,
    attr: *mut fi_poll_attr,
    pollset: *mut *mut fid_poll,
) -> c_int {
    // SAFETY: the application's fi_poll_open(3) arguments, passed on unchanged, as `poll::open`
    // requires.
    ffi(PANIC, || unsafe { super::poll::open(d, attr, pollset) })
}

unsafe extern "C" fn domain_stx_ctx(
    d: *mut fid_domain,
    attr: *mut fi_tx_attr,
    stx: *mut *mut fid_stx,
    context: *mut c_void,
) -> c_int {
    // SAFETY: the application's fi_stx_context(3) arguments, passed on
    // unchanged, as `ep::open_stx` requires.
    ffi(PANIC, || unsafe {
        super::ep::open_stx(d, attr, stx, context)
    })
}

unsafe extern "C" fn domain_srx_ctx(
    d: *mut fid_domain,
    attr: *mut fi_rx_attr,
    rx_ep: *mut *mut fid_ep,
    context: *mut c_void,
) -> c_int {
    // SAFETY: the application's fi_srx_context(3) arguments, passed on
    // unchanged, as `ep::open_srx` requires.
    ffi(PANIC, || unsafe {
        super::ep::open_srx(d, attr, rx_ep, context)
    })
}

/// `fi_query_atomic`: whether the domain's provider does `op` on
/// `datatype` in the form `flags` selects, and how many elements at most.
unsafe extern "C" fn domain_query_atomic(
    d: *mut fid_domain,
    datatype: fi_datatype,
    op: fi_op,
    attr: *mut fi_atomic_attr,
    flags: u64,
) -> c_int {
    ffi(PANIC, || {
        // SAFETY: d is NULL or a fid of the application.
        let Some(dom) = (unsafe { domain(d) }) else {
            return EINVAL;
        };
        if attr.is_null() {
            return EINVAL;
        }
        let kind = match flags & (FI_FETCH_ATOMIC | FI_COMPARE_ATOMIC) {
            0 => AtomicKind::Basic,
            FI_FETCH_ATOMIC => AtomicKind::Fetch,
            FI_COMPARE_ATOMIC => AtomicKind::Compare,
            _ => return EINVAL,
        };
        if !atomic::valid(kind, op, datatype) {
            return guard::neg(FI_EOPNOTSUPP);
        }
        let Some(size) = atomic::datatype_size(datatype) else {
            return guard::neg(FI_EOPNOTSUPP);
        };
        // Atomics into tagged receive buffers are not offered.
        if flags & FI_TAGGED != 0 {
            return guard::neg(FI_EOPNOTSUPP);
        }
        let Some(core) = dom.core() else {
            return EINVAL;
        };
        // The provider's domain answers, the same before and after any
        // endpoint is opened.
        let count = match core.query_atomic(kind, op, datatype) {
            Ok(n) => n,
            Err(e) => return guard::err(&e),
        };
        // SAFETY: attr is non-null and writable.
        unsafe {
            (*attr).count = count;
            (*attr).size = size;
        }
        0
    })
}

/// `fi_query_collective`: `attr->op` and `attr->datatype` in, the limits
/// (`datatype_attr`, `max_members`, `mode`) out; see
/// `ofi_core::Domain::query_collective`.
unsafe extern "C" fn domain_query_collective(
    d: *mut fid_domain,
    coll: fi_collective_op,
    attr: *mut fi_collective_attr,
    flags: u64,
) -> c_int {
    ffi(PANIC, || {
        // SAFETY: d is NULL or a fid of the application.
        let Some(core) = (unsafe { domain(d) }).and_then(DomainObj::core) else {
            return EINVAL;
        };
        if attr.is_null() {
            return EINVAL;
        }
        // SAFETY: attr is non-null and readable (fi_collective(3)).
        let a = unsafe { *attr };
        let mut q = ofi_core::CollAttr {
            op: a.op,
            datatype: a.datatype,
            ..Default::default()
        };
        if let Err(e) = core.query_collective(coll, &mut q, flags) {
            return guard::err(&e);
        }
        // SAFETY: attr is non-null and writable.
        unsafe {
            (*attr).datatype_attr.count = q.count;
            (*attr).datatype_attr.size = q.size;
            (*attr).max_members = q.max_members;
            (*attr).mode = q.mode;
        }
        0
    })
}
