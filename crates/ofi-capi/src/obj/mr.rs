//! Memory regions (`fi_mr_reg` / `fi_mr_regv` / `fi_mr_regattr` through
//! the domain's `fi_ops_mr`, `struct fid_mr` with `mem_desc` and `key`).

use super::{ffi, get, publish, CObj, EINVAL, ENOSYS, PANIC};
use crate::abi::*;
use crate::guard;
use ofi_core::consts::FI_HMEM;
use ofi_core::error::errno::*;
use ofi_core::util::mr::MrAttr;
use ofi_core::MemoryRegion;

/// A memory region as C sees it: `struct fid_mr`, then the raw-layer region.
#[repr(C)]
pub struct MrObj {
    c: fid_mr,
    core: Option<MemoryRegion>,
    /// The EQ its registration was reported on (FI_REG_MR): the report
    /// goes with the region if unread when it closes.
    reported: Option<std::sync::Arc<ofi_core::util::eq::EqCore>>,
}

// SAFETY: repr(C), first field fid_mr whose first field is fid.
unsafe impl CObj for MrObj {
    const CLASS: usize = class::FI_CLASS_MR;
    fn base_ops() -> *const fi_ops {
        &MR_FI_OPS
    }
    /// Revokes the key and waits (up to FI_MR_CLOSE_MS) for remote
    /// accesses still running on the memory: `-FI_EBUSY` keeps the object
    /// for a retry, so the application never frees memory under a copy.
    fn shut(&mut self) -> Result<(), c_int> {
        super::shut_core(&mut self.core, MemoryRegion::close)?;
        if let Some(q) = self.reported.take() {
            q.forget(self as *const MrObj as usize);
        }
        Ok(())
    }
}

static MR_FI_OPS: fi_ops = super::fid_ops::<MrObj>(mr_bind, mr_control);

/// Registers ranges of the application's memory with a domain.
///
/// # Safety
/// `d` is NULL or a readable fid; `out` is NULL or writable; the ranges stay
/// valid while registered (the application's promise to `fi_mr_reg`).
unsafe fn register(
    d: *mut fid,
    attr: MrAttr,
    out: *mut *mut fid_mr,
    context: *mut c_void,
) -> c_int {
    // SAFETY: d is NULL or a fid of the application.
    let Some(dom) = (unsafe { get::<super::domain::DomainObj>(d) }).and_then(|x| x.core()) else {
        return EINVAL;
    };
    if out.is_null() {
        return EINVAL;
    }
    // SAFETY: the application keeps the ranges valid while registered.
    let core = match unsafe { dom.mr_reg(&attr) } {
        Ok(m) => m,
        Err(e) => return guard::err(&e),
    };
    let p = publish(MrObj {
        c: fid_mr {
            fid: fid {
                fclass: class::FI_CLASS_MR,
                context,
                ops: &MR_FI_OPS as *const fi_ops as *mut fi_ops,
            },
            mem_desc: core.desc() as usize as *mut c_void,
            key: core.key(),
        },
        core: Some(core),
        reported: None,
    });
    // SAFETY: out is non-null and writable.
    unsafe { *out = p.cast::<fid_mr>() };
    // A domain bound to an EQ with FI_REG_MR reports the registration.
    let reported = dom.report_reg(p as usize, context as usize);
    // SAFETY: p came from publish; the application has not seen it yet
    // apart from *out, and no other thread can close it before this call
    // returns.
    unsafe { (*p).reported = reported };
    0
}

/// Registers the `count` ranges at `iov` (`fi_mr_regv`, `fi_mr_regattr`).
///
/// # Safety
/// `iov` holds `count` entries; otherwise as [`register`].
#[allow(clippy::too_many_arguments)]
unsafe fn register_iov(
    d: *mut fid,
    iov: *const iovec,
    count: usize,
    access: u64,
    offset: u64,
    requested_key: u64,
    out: *mut *mut fid_mr,
    context: *mut c_void,
) -> c_int {
    // SAFETY: iov holds count entries (this function's contract).
    let Some(list) = (unsafe { super::array(iov, count) }) else {
        return EINVAL;
    };
    let attr = MrAttr {
        iov: list
            .iter()
            .map(|v| (v.iov_base as usize, v.iov_len))
            .collect(),
        access,
        requested_key,
        offset,
    };
    // SAFETY: `d`, `out` and the ranges as `register` requires (this
    // function's contract).
    unsafe { register(d, attr, out, context) }
}

/// `fi_ops_mr.reg` (`fi_mr_reg`).
pub(crate) unsafe extern "C" fn mr_reg(
    d: *mut fid,
    buf: *const c_void,
    len: size_t,
    access: u64,
    offset: u64,
    requested_key: u64,
    _flags: u64,
    mr: *mut *mut fid_mr,
    context: *mut c_void,
) -> c_int {
    ffi(PANIC, || {
        let attr = MrAttr {
            iov: vec![(buf as usize, len)],
            access,
            requested_key,
            offset,
        };
        // SAFETY: the application's fi_mr_reg(3) arguments: `d` is NULL or its domain fid, `mr`
        // NULL or writable, and `buf` stays valid while registered, as `register` requires.
        unsafe { register(d, attr, mr, context) }
    })
}

/// `fi_ops_mr.regv` (`fi_mr_regv`).
pub(crate) unsafe extern "C" fn mr_regv(
    d: *mut fid,
    iov: *const iovec,
    count: size_t,
    access: u64,
    offset: u64,
    requested_key: u64,
    _flags: u64,
    mr: *mut *mut fid_mr,
    context: *mut c_void,
) -> c_int {
    ffi(PANIC, || {
        // SAFETY: the application's fi_mr_regv(3) arguments: `d` is NULL or its domain fid, `iov`
        // holds `count` ranges that stay valid while registered, `mr` is NULL or writable, as
        // `register_iov` requires.
        unsafe { register_iov(d, iov, count, access, offset, requested_key, mr, context) }
    })
}

/// `fi_ops_mr.regattr` (`fi_mr_regattr`): host memory only.
pub(crate) unsafe extern "C" fn mr_regattr(
    d: *mut fid,
    attr: *const fi_mr_attr,
    _flags: u64,
    mr: *mut *mut fid_mr,
) -> c_int {
    ffi(PANIC, || {
        if attr.is_null() {
            return EINVAL;
        }
        // `iface` (and what follows it) is read only when the application
        // asked for FI_HMEM (fi_mr(3)): otherwise it may be left unset,
        // and headers before 1.9 end the struct before it.
        // SAFETY: d is NULL or a fid of the application.
        let hmem = unsafe { get::<super::domain::DomainObj>(d) }
            .and_then(|x| x.core())
            .is_some_and(|dom| dom.info().caps & FI_HMEM != 0);
        // SAFETY: attr is non-null and holds at least the fields through
        // `context` (every header version has them); each is read alone.
        let (iov, count, access, offset, requested_key, context) = unsafe {
            (
                std::ptr::addr_of!((*attr).mr_iov).read(),
                std::ptr::addr_of!((*attr).iov_count).read(),
                std::ptr::addr_of!((*attr).access).read(),
                std::ptr::addr_of!((*attr).offset).read(),
                std::ptr::addr_of!((*attr).requested_key).read(),
                std::ptr::addr_of!((*attr).context).read(),
            )
        };
        // SAFETY: with FI_HMEM asked for, the application's header has `iface`.
        if hmem && unsafe { std::ptr::addr_of!((*attr).iface).read() } != hmem_iface::FI_HMEM_SYSTEM
        {
            return guard::neg(FI_EOPNOTSUPP);
        }
        // SAFETY: the application's fi_mr_regattr(3) arguments: `d` is NULL or its domain fid,
        // `mr_iov` holds `iov_count` ranges that stay valid while registered, `mr` is NULL or
        // writable, as `register_iov` requires.
        unsafe { register_iov(d, iov, count, access, offset, requested_key, mr, context) }
    })
}

/// `fi_mr_bind`: a counter of remote accesses (FI_REMOTE_READ / FI_REMOTE_WRITE).
unsafe extern "C" fn mr_bind(f: *mut fid, bfid: *mut fid, flags: u64) -> c_int {
    ffi(PANIC, || {
        // SAFETY: f is NULL or a fid of the application.
        let Some(m) = (unsafe { get::<MrObj>(f) }).and_then(|o| o.core.as_ref()) else {
            return EINVAL;
        };
        // SAFETY: bfid is NULL or a fid of the application.
        let cntr = unsafe { get::<super::cntr::CntrObj>(bfid) };
        if let Some(c) = cntr.and_then(|o| o.core.as_ref()) {
            return super::ret(m.bind_cntr(c, flags));
        }
        // SAFETY: bfid is NULL or a fid of the application; `get` checks its class.
        if unsafe { get::<super::ep::EpObj>(bfid) }.is_some() {
            // FI_MR_ENDPOINT regions are not offered.
            return ENOSYS;
        }
        EINVAL
    })
}

/// `fi_mr_enable` (FI_ENABLE) succeeds: regions are usable once registered.
unsafe extern "C" fn mr_control(f: *mut fid, command: c_int, _arg: *mut c_void) -> c_int {
    ffi(PANIC, || {
        // SAFETY: f is NULL or a fid of the application.
        if unsafe { get::<MrObj>(f) }.is_none() {
            return EINVAL;
        }
        match command {
            control::FI_ENABLE => 0,
            _ => ENOSYS,
        }
    })
}
