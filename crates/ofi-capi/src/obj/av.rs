//! Address vectors (`fi_av_open`, `struct fid_av`, `fi_ops_av`): raw
//! addresses of the domain's address format in, `fi_addr_t` out.

use super::{cstr, ffi, get, publish, shut_core, CObj, EINVAL, ENOSYS, PANIC};
use crate::abi::*;
use crate::guard;
use ofi_core::consts::{addr_format, FI_ADDR_NOTAVAIL};
use ofi_core::util::av::AvAttr;
use ofi_core::AddressVector;
use std::ffi::CStr;

/// An address vector as C sees it: `struct fid_av`, then the raw-layer AV.
#[repr(C)]
pub struct AvObj {
    c: fid_av,
    pub(crate) core: Option<AddressVector>,
    /// The domain's address format: how inserted addresses are laid out.
    addr_format: u32,
}

// SAFETY: repr(C), first field fid_av whose first field is fid.
unsafe impl CObj for AvObj {
    const CLASS: usize = class::FI_CLASS_AV;
    fn base_ops() -> *const fi_ops {
        &AV_FI_OPS
    }
    fn shut(&mut self) -> Result<(), c_int> {
        shut_core(&mut self.core, AddressVector::close)
    }
}

static AV_FI_OPS: fi_ops = fi_ops {
    size: std::mem::size_of::<fi_ops>(),
    close: Some(super::close::<AvObj>),
    bind: Some(super::bind_nosys),
    control: Some(super::control_nosys),
    ops_open: Some(super::ops_open_nosys),
    tostr: Some(super::tostr),
    ops_set: Some(super::ops_set_nosys),
};

static AV_OPS: fi_ops_av = fi_ops_av {
    size: std::mem::size_of::<fi_ops_av>(),
    insert: Some(av_insert),
    insertsvc: Some(av_insertsvc),
    insertsym: Some(av_insertsym),
    remove: Some(av_remove),
    lookup: Some(av_lookup),
    straddr: Some(av_straddr),
    av_set: Some(av_av_set),
};

/// The AV behind a `struct fid_av *`.
///
/// # Safety
/// `p` is NULL or a readable fid.
#[inline]
unsafe fn av<'a>(p: *mut fid_av) -> Option<(&'a AvObj, &'a AddressVector)> {
    // SAFETY: forwarded.
    let o = unsafe { get::<AvObj>(p.cast::<fid>()) }?;
    Some((o, o.core.as_ref()?))
}

/// `fi_av_open`.
///
/// # Safety
/// Arguments as `fi_av_open(3)`.
pub(crate) unsafe fn open(
    d: *mut fid_domain,
    attr: *mut fi_av_attr,
    out: *mut *mut fid_av,
    context: *mut c_void,
) -> c_int {
    // SAFETY: d is NULL or a fid of the application.
    let Some(dcore) = (unsafe { super::domain::domain(d) }).and_then(|x| x.core()) else {
        return EINVAL;
    };
    if attr.is_null() || out.is_null() {
        return EINVAL;
    }
    // SAFETY: attr is non-null and valid.
    let a = unsafe { &*attr };
    if !a.name.is_null() {
        // Named (shared) AVs are not supported.
        return ENOSYS;
    }
    let core = match dcore.av(&AvAttr {
        av_type: a.r#type,
        count: a.count,
    }) {
        Ok(v) => v,
        Err(e) => return guard::err(&e),
    };
    let p = publish(AvObj {
        c: fid_av {
            fid: fid {
                fclass: class::FI_CLASS_AV,
                context,
                ops: &AV_FI_OPS as *const fi_ops as *mut fi_ops,
            },
            ops: &AV_OPS as *const fi_ops_av as *mut fi_ops_av,
        },
        core: Some(core),
        addr_format: dcore.info().addr_format,
    });
    // SAFETY: out is non-null and writable.
    unsafe { *out = p.cast::<fid_av>() };
    0
}

/// True when `p` starts with an address string (`scheme://...` before the
/// first NUL) rather than with a `char *`: FI_ADDR_STR addresses come either
/// as strings packed one after another (what `fi_getname` gives and what
/// applications pass on) or as an array of `char *` (what fi_av(3) says).
///
/// # Safety
/// `p` points to at least 8 readable bytes.
unsafe fn packed_strings(p: *const c_void) -> bool {
    // SAFETY: the caller's contract; a user-space pointer has zero high
    // bytes, so reading up to the first NUL stays within its 8 bytes, and
    // a string is NUL-terminated.
    let s = unsafe { CStr::from_ptr(p.cast::<c_char>()) }.to_bytes();
    s.windows(3).any(|w| w == b"://")
}

/// Splits the application's address array into raw addresses.
///
/// # Safety
/// `addr` holds `count` addresses in `format`.
unsafe fn split<'a>(format: u32, addr: *const c_void, count: usize) -> Option<Vec<&'a [u8]>> {
    let mut out = Vec::with_capacity(count);
    if format == addr_format::FI_ADDR_STR {
        // SAFETY: the caller's contract (the array holds at least one entry).
        if unsafe { packed_strings(addr) } {
            let mut p = addr.cast::<u8>();
            for _ in 0..count {
                // SAFETY: each packed string is NUL-terminated and followed
                // by the next.
                let s = unsafe { CStr::from_ptr(p.cast::<c_char>()) }.to_bytes_with_nul();
                out.push(s);
                // SAFETY: stays within the packed array.
                p = unsafe { p.add(s.len()) };
            }
        } else {
            // SAFETY: an array of count `char *`.
            let ptrs = unsafe { std::slice::from_raw_parts(addr.cast::<*const c_char>(), count) };
            for &s in ptrs {
                if s.is_null() {
                    return None;
                }
                // SAFETY: each entry is a NUL-terminated string.
                out.push(unsafe { CStr::from_ptr(s) }.to_bytes_with_nul());
            }
        }
        return Some(out);
    }
    let mut p = addr.cast::<u8>();
    for _ in 0..count {
        // SAFETY: p points to a complete address of the format.
        let n = unsafe { super::addr_len(format, p.cast::<c_void>()) }?;
        // SAFETY: the address is n readable bytes.
        out.push(unsafe { std::slice::from_raw_parts(p, n) });
        // SAFETY: stays within the array.
        p = unsafe { p.add(n) };
    }
    Some(out)
}

unsafe extern "C" fn av_insert(
    p: *mut fid_av,
    addr: *const c_void,
    count: size_t,
    fi_addr: *mut fi_addr_t,
    _flags: u64,
    _context: *mut c_void,
) -> c_int {
    ffi(PANIC, || {
        // SAFETY: p is NULL or a fid of the application.
        let Some((o, v)) = (unsafe { av(p) }) else {
            return EINVAL;
        };
        if count == 0 {
            return 0;
        }
        if addr.is_null() || c_int::try_from(count).is_err() {
            return EINVAL;
        }
        // SAFETY: addr holds count addresses of the domain's format.
        let Some(list) = (unsafe { split(o.addr_format, addr, count) }) else {
            return EINVAL;
        };
        let mut tmp;
        let out: &mut [u64] = if fi_addr.is_null() {
            tmp = vec![FI_ADDR_NOTAVAIL; count];
            &mut tmp
        } else {
            // SAFETY: fi_addr has room for count results.
            unsafe { std::slice::from_raw_parts_mut(fi_addr, count) }
        };
        match v.insert(&list, out) {
            Ok(n) => n as c_int,
            Err(e) => guard::err(&e),
        }
    })
}

unsafe extern "C" fn av_insertsvc(
    p: *mut fid_av,
    node: *const c_char,
    service: *const c_char,
    fi_addr: *mut fi_addr_t,
    _flags: u64,
    _context: *mut c_void,
) -> c_int {
    ffi(PANIC, || {
        // SAFETY: p is NULL or a fid of the application.
        let Some((_, v)) = (unsafe { av(p) }) else {
            return EINVAL;
        };
        // SAFETY: node and service are NULL or C strings.
        let (Some(n), s) = (unsafe { cstr(node) }, unsafe { cstr(service) }) else {
            return EINVAL;
        };
        match v.insertsvc(n, s.unwrap_or("")) {
            Ok(a) => {
                if !fi_addr.is_null() {
                    // SAFETY: fi_addr is writable.
                    unsafe { *fi_addr = a };
                }
                1
            }
            Err(e) => guard::err(&e),
        }
    })
}

/// `fi_av_insertsym`: `nodecnt` consecutive IP addresses from `node`, each
/// with `svccnt` consecutive ports from `service`.
unsafe extern "C" fn av_insertsym(
    p: *mut fid_av,
    node: *const c_char,
    nodecnt: size_t,
    service: *const c_char,
    svccnt: size_t,
    fi_addr: *mut fi_addr_t,
    _flags: u64,
    _context: *mut c_void,
) -> c_int {
    ffi(PANIC, || {
        // SAFETY: p is NULL or a fid of the application.
        let Some((_, v)) = (unsafe { av(p) }) else {
            return EINVAL;
        };
        // SAFETY: node and service are NULL or C strings.
        let (Some(n), Some(s)) = (unsafe { cstr(node) }, unsafe { cstr(service) }) else {
            return EINVAL;
        };
        let (Ok(ip), Ok(port)) = (n.parse::<std::net::IpAddr>(), s.parse::<u16>()) else {
            return EINVAL;
        };
        let Some(total) = nodecnt.checked_mul(svccnt) else {
            return EINVAL;
        };
        let mut k = 0usize;
        let mut done = 0;
        for i in 0..nodecnt {
            let host = match ip {
                std::net::IpAddr::V4(a) => {
                    std::net::IpAddr::V4(u32::from(a).wrapping_add(i as u32).into())
                }
                std::net::IpAddr::V6(a) => {
                    std::net::IpAddr::V6(u128::from(a).wrapping_add(i as u128).into())
                }
            };
            for j in 0..svccnt {
                let svc = (u32::from(port) + j as u32).to_string();
                let r = v.insertsvc(&host.to_string(), &svc);
                if k < total && !fi_addr.is_null() {
                    // SAFETY: fi_addr has room for nodecnt * svccnt results.
                    unsafe { *fi_addr.add(k) = *r.as_ref().unwrap_or(&FI_ADDR_NOTAVAIL) };
                }
                if r.is_ok() {
                    done += 1;
                }
                k += 1;
            }
        }
        done
    })
}

unsafe extern "C" fn av_remove(
    p: *mut fid_av,
    fi_addr: *mut fi_addr_t,
    count: size_t,
    _flags: u64,
) -> c_int {
    ffi(PANIC, || {
        // SAFETY: p is NULL or a fid of the application.
        let Some((_, v)) = (unsafe { av(p) }) else {
            return EINVAL;
        };
        // SAFETY: fi_addr holds count entries.
        let Some(list) = (unsafe { super::array(fi_addr.cast_const(), count) }) else {
            return EINVAL;
        };
        super::ret(v.remove(list))
    })
}

unsafe extern "C" fn av_lookup(
    p: *mut fid_av,
    fi_addr: fi_addr_t,
    addr: *mut c_void,
    addrlen: *mut size_t,
) -> c_int {
    ffi(PANIC, || {
        // SAFETY: p is NULL or a fid of the application.
        let Some((_, v)) = (unsafe { av(p) }) else {
            return EINVAL;
        };
        if addrlen.is_null() {
            return EINVAL;
        }
        let a = match v.lookup(fi_addr) {
            Ok(a) => a,
            Err(e) => return guard::err(&e),
        };
        // SAFETY: addrlen is valid; addr has *addrlen writable bytes. A
        // short buffer gets a truncated address and the full length.
        unsafe {
            let n = a.len().min(*addrlen);
            if n > 0 && !addr.is_null() {
                std::ptr::copy_nonoverlapping(a.as_ptr(), addr.cast::<u8>(), n);
            }
            *addrlen = a.len();
        }
        0
    })
}

unsafe extern "C" fn av_straddr(
    p: *mut fid_av,
    addr: *const c_void,
    buf: *mut c_char,
    len: *mut size_t,
) -> *const c_char {
    ffi(std::ptr::null(), || {
        // SAFETY: p is NULL or a fid of the application.
        let Some((o, v)) = (unsafe { av(p) }) else {
            return std::ptr::null();
        };
        if addr.is_null() || buf.is_null() || len.is_null() {
            return std::ptr::null();
        }
        // SAFETY: addr is one address of the AV's format.
        let Some(n) = (unsafe { super::addr_len(o.addr_format, addr) }) else {
            return std::ptr::null();
        };
        // SAFETY: the address is n readable bytes.
        let raw = unsafe { std::slice::from_raw_parts(addr.cast::<u8>(), n) };
        let s = v.straddr(raw);
        // SAFETY: len is valid; buf has *len writable bytes.
        unsafe {
            if *len > 0 {
                super::write_cstr(buf, *len, &s);
            }
            *len = s.len() + 1;
        }
        buf
    })
}

unsafe extern "C" fn av_av_set(
    _p: *mut fid_av,
    _attr: *mut fi_av_set_attr,
    _av_set: *mut *mut fid_av_set,
    _context: *mut c_void,
) -> c_int {
    ffi(PANIC, || ENOSYS)
}
