//! Address vector sets (`fi_av_set`, `struct fid_av_set`, `fi_ops_av_set`):
//! the members of a collective group, as the core's [`AvSet`] holds them.

use super::{ffi, get, publish, shut_core, CObj, EINVAL, PANIC};
use crate::abi::*;
use crate::guard;
use ofi_core::{AddressVector, AvSet, AvSetAttr};

/// An AV set as C sees it: `struct fid_av_set`, then the raw-layer set.
#[repr(C)]
pub struct AvSetObj {
    c: fid_av_set,
    pub(crate) core: Option<AvSet>,
}

// SAFETY: repr(C), first field fid_av_set whose first field is fid.
unsafe impl CObj for AvSetObj {
    const CLASS: usize = class::FI_CLASS_AV_SET;
    fn base_ops() -> *const fi_ops {
        &AV_SET_FI_OPS
    }
    fn shut(&mut self) -> Result<(), c_int> {
        shut_core(&mut self.core, AvSet::close)
    }
}

static AV_SET_FI_OPS: fi_ops = super::fid_ops::<AvSetObj>(super::bind_nosys, super::control_nosys);

static AV_SET_OPS: fi_ops_av_set = fi_ops_av_set {
    size: std::mem::size_of::<fi_ops_av_set>(),
    set_union: Some(set_union),
    intersect: Some(set_intersect),
    diff: Some(set_diff),
    insert: Some(set_insert),
    remove: Some(set_remove),
    addr: Some(set_addr),
};

/// The raw-layer set behind a `struct fid_av_set *`.
///
/// # Safety
/// `p` is NULL or a readable fid.
pub(crate) unsafe fn av_set<'a>(p: *const fid_av_set) -> Option<&'a AvSet> {
    // SAFETY: `p` is NULL or a readable fid (this function's contract), all that `get` asks.
    unsafe { get::<AvSetObj>(p.cast::<fid>()) }?.core.as_ref()
}

/// `fi_av_set` on address vector `av`.
///
/// # Safety
/// Arguments as `fi_av_set(3)`: `attr` NULL or a valid attribute
/// structure (its `comm_key` readable for `comm_key_size` bytes), `out`
/// writable.
pub(crate) unsafe fn open(
    av: &AddressVector,
    attr: *mut fi_av_set_attr,
    out: *mut *mut fid_av_set,
    context: *mut c_void,
) -> c_int {
    if attr.is_null() || out.is_null() {
        return EINVAL;
    }
    // SAFETY: attr is non-null and valid (this function's contract).
    let a = unsafe { &*attr };
    // SAFETY: comm_key is readable for comm_key_size bytes (fi_av_set(3)).
    let Some(key) = (unsafe { super::bytes(a.comm_key.cast(), a.comm_key_size) }) else {
        return EINVAL;
    };
    let set = match av.av_set(&AvSetAttr {
        count: a.count,
        start_addr: a.start_addr,
        end_addr: a.end_addr,
        stride: a.stride,
        comm_key: key.to_vec(),
        flags: a.flags,
    }) {
        Ok(s) => s,
        Err(e) => return guard::err(&e),
    };
    let p = publish(AvSetObj {
        c: fid_av_set {
            fid: fid {
                fclass: class::FI_CLASS_AV_SET,
                context,
                ops: &AV_SET_FI_OPS as *const fi_ops as *mut fi_ops,
            },
            ops: &AV_SET_OPS as *const fi_ops_av_set as *mut fi_ops_av_set,
        },
        core: Some(set),
    });
    // SAFETY: out is non-null and writable.
    unsafe { *out = p.cast::<fid_av_set>() };
    0
}

/// Runs a two-set operation on `dst` and `src`.
///
/// # Safety
/// `dst` and `src` are NULL or fids of the application.
unsafe fn two(
    dst: *mut fid_av_set,
    src: *const fid_av_set,
    f: impl FnOnce(&AvSet, &AvSet) -> ofi_core::Result<()>,
) -> c_int {
    ffi(PANIC, || {
        // SAFETY: dst and src are NULL or fids of the application.
        let (Some(d), Some(s)) = (unsafe { av_set(dst) }, unsafe { av_set(src) }) else {
            return EINVAL;
        };
        super::ret(f(d, s))
    })
}

unsafe extern "C" fn set_union(dst: *mut fid_av_set, src: *const fid_av_set) -> c_int {
    // SAFETY: the application's fids, passed on.
    unsafe { two(dst, src, AvSet::union) }
}

unsafe extern "C" fn set_intersect(dst: *mut fid_av_set, src: *const fid_av_set) -> c_int {
    // SAFETY: the application's fids, passed on.
    unsafe { two(dst, src, AvSet::intersect) }
}

unsafe extern "C" fn set_diff(dst: *mut fid_av_set, src: *const fid_av_set) -> c_int {
    // SAFETY: the application's fids, passed on.
    unsafe { two(dst, src, AvSet::diff) }
}

unsafe extern "C" fn set_insert(set: *mut fid_av_set, addr: fi_addr_t) -> c_int {
    ffi(PANIC, || {
        // SAFETY: set is NULL or a fid of the application.
        match unsafe { av_set(set) } {
            Some(s) => super::ret(s.insert(addr)),
            None => EINVAL,
        }
    })
}

unsafe extern "C" fn set_remove(set: *mut fid_av_set, addr: fi_addr_t) -> c_int {
    ffi(PANIC, || {
        // SAFETY: set is NULL or a fid of the application.
        match unsafe { av_set(set) } {
            Some(s) => super::ret(s.remove(addr)),
            None => EINVAL,
        }
    })
}

unsafe extern "C" fn set_addr(set: *mut fid_av_set, coll_addr: *mut fi_addr_t) -> c_int {
    ffi(PANIC, || {
        // SAFETY: set is NULL or a fid of the application.
        let Some(s) = (unsafe { av_set(set) }) else {
            return EINVAL;
        };
        if coll_addr.is_null() {
            return EINVAL;
        }
        // SAFETY: coll_addr is non-null and writable (fi_av_set(3)).
        unsafe { *coll_addr = s.addr() };
        0
    })
}
