//! Address vectors (`fi_av_open`, `struct fid_av`, `fi_ops_av`): raw
//! addresses of the domain's address format in, `fi_addr_t` out.

use super::{cstr, ffi, get, publish, shut_core, CObj, EINVAL, ENOSYS, PANIC};
use crate::abi::*;
use crate::guard;
use ofi_core::consts::{addr_format, av_type, FI_ADDR_NOTAVAIL};
use ofi_core::error::errno::{FI_EBADFLAGS, FI_EINVAL, FI_ENOEQ};
use ofi_core::util::av::AvAttr;
use ofi_core::AddressVector;

/// An address vector as C sees it: `struct fid_av`, then the raw-layer AV.
#[repr(C)]
pub struct AvObj {
    c: fid_av,
    pub(crate) core: Option<AddressVector>,
    /// The domain's address format: how inserted addresses are laid out.
    addr_format: u32,
    /// Opened with FI_EVENT: inserts are reported on the bound EQ.
    events: bool,
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

static AV_FI_OPS: fi_ops = super::fid_ops::<AvObj>(av_bind, super::control_nosys);

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
    // SAFETY: `p` is NULL or a readable fid (this function's contract), all that `get` asks.
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
    let events = a.flags & FI_EVENT != 0;
    if a.r#type == av_type::FI_AV_UNSPEC {
        // The type chosen goes back through the attributes (fi_av(3)).
        // SAFETY: attr is non-null and writable (the caller's contract).
        unsafe { (*attr).r#type = core.kind() };
    }
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
        events,
    });
    // SAFETY: out is non-null and writable.
    unsafe { *out = p.cast::<fid_av>() };
    0
}

/// Splits the application's buffer into raw addresses of `format`, laid
/// out one after another: sockaddrs of their family's size, or, for
/// FI_ADDR_STR, NUL-terminated strings packed back to back (what
/// `fi_getname` gives and applications pass on, and what libfabric 1.17's
/// providers read; fi_av(3)'s "array of strings" is read the same way).
/// Nothing is guessed: each address is bounded by what the format allows
/// ([`super::addr_len`]), and parsing stops at the first one that is not an
/// address of the format, since the next one cannot be found after it.
/// Returns the addresses parsed and, if parsing stopped early, why.
///
/// # Safety
/// `addr` holds up to `count` addresses in `format`, each readable as far
/// as [`super::addr_len`] reads.
unsafe fn split<'a>(
    format: u32,
    addr: *const c_void,
    count: usize,
) -> (Vec<&'a [u8]>, Option<String>) {
    let mut out = Vec::new();
    let mut p = addr.cast::<u8>();
    for i in 0..count {
        // SAFETY: p starts address i (the caller's contract).
        let Some(n) = (unsafe { super::addr_len(format, p.cast::<c_void>()) }) else {
            let why = match format {
                addr_format::FI_ADDR_STR => format!(
                    "address {i} has no NUL within {} bytes (FI_ADDR_STR)",
                    super::ADDR_STR_MAX
                ),
                f => format!(
                    "address {i} is not an address of format {}",
                    ofi_core::consts::enum_name(ofi_core::consts::ADDR_FORMAT_NAMES, f)
                        .unwrap_or("unknown")
                ),
            };
            return (out, Some(why));
        };
        // SAFETY: the address is n readable bytes (addr_len read them).
        out.push(unsafe { std::slice::from_raw_parts(p, n) });
        // SAFETY: the next address follows this one (the caller's contract).
        p = unsafe { p.add(n) };
    }
    (out, None)
}

/// `fi_av_bind`: the event queue of an AV opened with FI_EVENT.
unsafe extern "C" fn av_bind(f: *mut fid, bfid: *mut fid, flags: u64) -> c_int {
    ffi(PANIC, || {
        // SAFETY: f and bfid are NULL or fids of the application.
        let (Some((_, v)), Some(q)) = (unsafe { av(f.cast::<fid_av>()) }, unsafe {
            get::<super::eq::EqObj>(bfid)
        }) else {
            return EINVAL;
        };
        let Some(q) = q.core.as_ref() else {
            return EINVAL;
        };
        if flags != 0 {
            return EINVAL;
        }
        super::ret(v.bind_eq(q))
    })
}

/// Before an insert: an AV opened with FI_EVENT needs its event queue,
/// and takes no FI_SYNC_ERR (synchronous inserts only, fi_av(3); its
/// context is the event's, not a status array: -FI_EBADFLAGS, as
/// libfabric answers).
fn ready_to_insert(o: &AvObj, v: &AddressVector, flags: u64) -> Result<(), c_int> {
    if o.events && flags & FI_SYNC_ERR != 0 {
        return Err(-FI_EBADFLAGS);
    }
    if o.events && !v.has_eq() {
        return Err(-FI_ENOEQ);
    }
    Ok(())
}

/// After an insert whose results are in `out`: with FI_SYNC_ERR (and a
/// context) each address's status goes to the `int` array at `context`;
/// with FI_EVENT the outcome goes to the EQ (an error entry per failed
/// address, then FI_AV_COMPLETE) and the call returns 0, else the number
/// inserted.
///
/// # Safety
/// `context` is what the application passed with `flags`: with
/// FI_SYNC_ERR, NULL or an array of `out.len()` ints.
unsafe fn finish_insert(
    o: &AvObj,
    v: &AddressVector,
    flags: u64,
    context: *mut c_void,
    out: &[u64],
) -> c_int {
    // FI_SYNC_ERR is for synchronous inserts only (fi_av(3)): with
    // FI_EVENT, context is the application's event context.
    if flags & FI_SYNC_ERR != 0 && !context.is_null() && !o.events {
        // SAFETY: with FI_SYNC_ERR, context is an array of out.len() ints.
        let st = unsafe { std::slice::from_raw_parts_mut(context.cast::<c_int>(), out.len()) };
        for (s, a) in st.iter_mut().zip(out) {
            *s = if *a == FI_ADDR_NOTAVAIL { FI_EINVAL } else { 0 };
        }
    }
    if o.events {
        let fid = o as *const AvObj as usize;
        return match v.report_insert(fid, context as usize, out) {
            Ok(()) => 0,
            Err(e) => guard::err(&e),
        };
    }
    out.iter().filter(|a| **a != FI_ADDR_NOTAVAIL).count() as c_int
}

unsafe extern "C" fn av_insert(
    p: *mut fid_av,
    addr: *const c_void,
    count: size_t,
    fi_addr: *mut fi_addr_t,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    ffi(PANIC, || {
        // SAFETY: p is NULL or a fid of the application.
        let Some((o, v)) = (unsafe { av(p) }) else {
            return EINVAL;
        };
        if count == 0 {
            if let Err(rc) = ready_to_insert(o, v, flags) {
                return rc;
            }
            // FI_EVENT: every insert is reported, an empty one too.
            // SAFETY: context is as the application passed it with flags.
            return unsafe { finish_insert(o, v, flags, context, &[]) };
        }
        if addr.is_null() || c_int::try_from(count).is_err() {
            return EINVAL;
        }
        if let Err(rc) = ready_to_insert(o, v, flags) {
            return rc;
        }
        // SAFETY: addr holds count addresses of the domain's format.
        let (list, stopped) = unsafe { split(o.addr_format, addr, count) };
        if let Some(why) = &stopped {
            tracing::warn!(
                "fi_av_insert: {why}; addresses {} to {} are not inserted",
                list.len(),
                count - 1
            );
        }
        let mut tmp;
        let out: &mut [u64] = if fi_addr.is_null() {
            tmp = vec![FI_ADDR_NOTAVAIL; count];
            &mut tmp
        } else {
            // SAFETY: fi_addr has room for count results.
            unsafe { std::slice::from_raw_parts_mut(fi_addr, count) }
        };
        if let Err(e) = v.insert(&list, out) {
            return guard::err(&e);
        }
        // The addresses that could not be parsed are not available either.
        for a in out.iter_mut().skip(list.len()) {
            *a = FI_ADDR_NOTAVAIL;
        }
        // SAFETY: context is as the application passed it with flags.
        unsafe { finish_insert(o, v, flags, context, out) }
    })
}

unsafe extern "C" fn av_insertsvc(
    p: *mut fid_av,
    node: *const c_char,
    service: *const c_char,
    fi_addr: *mut fi_addr_t,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    ffi(PANIC, || {
        // SAFETY: p is NULL or a fid of the application.
        let Some((o, v)) = (unsafe { av(p) }) else {
            return EINVAL;
        };
        // SAFETY: node and service are NULL or C strings.
        let (Some(n), s) = (unsafe { cstr(node) }, unsafe { cstr(service) }) else {
            return EINVAL;
        };
        if let Err(rc) = ready_to_insert(o, v, flags) {
            return rc;
        }
        let r = v.insertsvc(n, s.unwrap_or(""));
        let out = [*r.as_ref().unwrap_or(&FI_ADDR_NOTAVAIL)];
        if !fi_addr.is_null() {
            // SAFETY: fi_addr is writable.
            unsafe { *fi_addr = out[0] };
        }
        // SAFETY: context is as the application passed it with flags.
        let rc = unsafe { finish_insert(o, v, flags, context, &out) };
        match r {
            // Synchronous: the reason, rather than a count of 0.
            Err(e) if !o.events => guard::err(&e),
            _ => rc,
        }
    })
}

/// The hosts of `fi_av_insertsym`: `nodecnt` consecutive IP addresses
/// from an address, or host names counting up the numeric suffix of a
/// name ("node07" gives node07, node08, ..., keeping the width); a name
/// without a suffix names one host only. None when the range cannot be
/// made.
fn sym_hosts(node: &str, nodecnt: usize) -> Option<Vec<String>> {
    if let Ok(ip) = node.parse::<std::net::IpAddr>() {
        return Some(
            (0..nodecnt)
                .map(|i| match ip {
                    std::net::IpAddr::V4(a) => {
                        std::net::Ipv4Addr::from(u32::from(a).wrapping_add(i as u32)).to_string()
                    }
                    std::net::IpAddr::V6(a) => {
                        std::net::Ipv6Addr::from(u128::from(a).wrapping_add(i as u128)).to_string()
                    }
                })
                .collect(),
        );
    }
    let prefix = node.trim_end_matches(|c: char| c.is_ascii_digit());
    let digits = &node[prefix.len()..];
    if digits.is_empty() {
        return (nodecnt == 1).then(|| vec![node.to_string()]);
    }
    let first: u64 = digits.parse().ok()?;
    let width = digits.len();
    (0..nodecnt as u64)
        .map(|i| Some(format!("{prefix}{:0width$}", first.checked_add(i)?)))
        .collect()
}

/// `fi_av_insertsym`: `nodecnt` hosts from `node` (see [`sym_hosts`]),
/// each with `svccnt` consecutive ports from `service`.
unsafe extern "C" fn av_insertsym(
    p: *mut fid_av,
    node: *const c_char,
    nodecnt: size_t,
    service: *const c_char,
    svccnt: size_t,
    fi_addr: *mut fi_addr_t,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    ffi(PANIC, || {
        // SAFETY: p is NULL or a fid of the application.
        let Some((o, v)) = (unsafe { av(p) }) else {
            return EINVAL;
        };
        // SAFETY: node and service are NULL or C strings.
        let (Some(n), Some(s)) = (unsafe { cstr(node) }, unsafe { cstr(service) }) else {
            return EINVAL;
        };
        let Ok(port) = s.parse::<u16>() else {
            return EINVAL;
        };
        // The count of inserted addresses must fit the int return value,
        // and the ports the port range.
        let Some(total) = nodecnt
            .checked_mul(svccnt)
            .filter(|t| c_int::try_from(*t).is_ok())
            .filter(|_| usize::from(port) + svccnt <= usize::from(u16::MAX) + 1)
        else {
            return EINVAL;
        };
        let Some(hosts) = sym_hosts(n, nodecnt) else {
            return EINVAL;
        };
        if let Err(rc) = ready_to_insert(o, v, flags) {
            return rc;
        }
        let mut out = Vec::with_capacity(total);
        for host in &hosts {
            for j in 0..svccnt {
                let svc = (usize::from(port) + j).to_string();
                out.push(v.insertsvc(host, &svc).unwrap_or(FI_ADDR_NOTAVAIL));
            }
        }
        if !fi_addr.is_null() {
            // SAFETY: fi_addr has room for nodecnt * svccnt results.
            unsafe { std::slice::from_raw_parts_mut(fi_addr, total) }.copy_from_slice(&out);
        }
        // SAFETY: context is as the application passed it with flags.
        unsafe { finish_insert(o, v, flags, context, &out) }
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

/// `fi_av_set`: a set of this AV's addresses (see `obj::av_set`).
unsafe extern "C" fn av_av_set(
    p: *mut fid_av,
    attr: *mut fi_av_set_attr,
    av_set: *mut *mut fid_av_set,
    context: *mut c_void,
) -> c_int {
    ffi(PANIC, || {
        // SAFETY: p is NULL or a fid of the application.
        let Some((_, v)) = (unsafe { av(p) }) else {
            return EINVAL;
        };
        // SAFETY: the application's fi_av_set(3) arguments, passed on.
        unsafe { super::av_set::open(v, attr, av_set, context) }
    })
}
