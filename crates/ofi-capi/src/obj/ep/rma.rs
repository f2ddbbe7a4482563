//! `fi_ops_rma`: reads and writes of registered remote memory, in their
//! plain, vector, `*msg`, `*data` and inject forms.

use super::{descs, ep, iovs};
use crate::abi::*;
use crate::obj::{ffi, sret, EINVAL_S, PANIC_S};
use ofi_core::consts::{FI_INJECT, FI_REMOTE_CQ_DATA, FI_TRIGGER, OFI_INJECT_CALL};
use ofi_core::object::RmaOp;
use ofi_core::util::iov::{iov_len, IoVec};
use ofi_core::util::rma::RmaIov;

const _: () = assert!(std::mem::size_of::<RmaIov>() == std::mem::size_of::<fi_rma_iov>());

/// Where a call's flags come from.
#[derive(Clone, Copy)]
enum Flags {
    Default(u64),
    Given(u64),
    /// An inject call's flags: no completion on success (OFI_INJECT_CALL).
    Inject(u64),
}

/// Posts an RMA operation on the endpoint behind `p`.
///
/// # Safety
/// The local ranges stay valid until completion (FI_INJECT: until return).
#[allow(clippy::too_many_arguments)]
unsafe fn post(
    p: *mut fid_ep,
    iov: &[IoVec],
    desc: &[u64],
    peer: fi_addr_t,
    rma_iov: &[RmaIov],
    data: u64,
    context: *mut c_void,
    flags: Flags,
    read: bool,
) -> ssize_t {
    // SAFETY: p is NULL or a fid of the application.
    let Some((o, e)) = (unsafe { ep(p) }) else {
        return EINVAL_S;
    };
    let flags = match flags {
        Flags::Default(add) => o.tx_flags() | add,
        Flags::Given(f) => f & !OFI_INJECT_CALL,
        Flags::Inject(f) => f | OFI_INJECT_CALL,
    };
    if flags & FI_TRIGGER != 0 {
        let d = ofi_core::Deferred::Rma {
            iov: iov.to_vec(),
            addr: peer,
            rma_iov: rma_iov.to_vec(),
            data,
            context: context as usize,
            flags,
            read,
        };
        // SAFETY: with FI_TRIGGER the context is the application's fi_triggered_context
        // (fi_trigger(3)); the local ranges stay valid until the deferred operation completes (this
        // function's contract).
        return unsafe { super::trigger(e, context, d) };
    }
    let op = RmaOp {
        iov,
        desc,
        addr: peer,
        rma_iov,
        data,
        context: context as usize,
        flags,
        read,
    };
    // SAFETY: the local ranges stay valid until completion, with FI_INJECT until return (this
    // function's contract), as `post_rma` requires.
    sret(unsafe { e.post_rma(&op) })
}

fn one(buf: *const c_void, len: usize) -> Option<[IoVec; 1]> {
    if buf.is_null() && len > 0 {
        return None;
    }
    Some([IoVec {
        base: buf as usize,
        len,
    }])
}

fn one_desc(d: &[u64; 1]) -> &[u64] {
    if d[0] == 0 {
        &[]
    } else {
        d
    }
}

/// The remote range list of a `fi_msg_rma`.
///
/// # Safety
/// `p` holds `n` entries.
unsafe fn rma_iovs<'a>(p: *const fi_rma_iov, n: usize) -> Option<&'a [RmaIov]> {
    // SAFETY: RmaIov has fi_rma_iov's layout; the caller's contract.
    unsafe { crate::obj::array(p.cast::<RmaIov>(), n) }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn rma_read(
    p: *mut fid_ep,
    buf: *mut c_void,
    len: size_t,
    desc: *mut c_void,
    src: fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> ssize_t {
    ffi(PANIC_S, || {
        let Some(iov) = one(buf, len) else {
            return EINVAL_S;
        };
        let d = [desc as u64];
        let r = [RmaIov { addr, len, key }];
        // SAFETY: the application keeps buf valid until completion.
        unsafe {
            post(
                p,
                &iov,
                one_desc(&d),
                src,
                &r,
                0,
                context,
                Flags::Default(0),
                true,
            )
        }
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn rma_readv(
    p: *mut fid_ep,
    iov: *const iovec,
    desc: *mut *mut c_void,
    count: size_t,
    src: fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> ssize_t {
    ffi(PANIC_S, || {
        // SAFETY: iov / desc hold count entries.
        let (Some(v), d) = (unsafe { iovs(iov, count) }, unsafe { descs(desc, count) }) else {
            return EINVAL_S;
        };
        let r = [RmaIov {
            addr,
            len: iov_len(v),
            key,
        }];
        // SAFETY: the application keeps the ranges valid until completion.
        unsafe { post(p, v, d, src, &r, 0, context, Flags::Default(0), true) }
    })
}

/// `fi_readmsg` / `fi_writemsg`.
///
/// # Safety
/// As the C calls.
unsafe fn rma_msg(p: *mut fid_ep, msg: *const fi_msg_rma, flags: u64, read: bool) -> ssize_t {
    if msg.is_null() {
        return EINVAL_S;
    }
    // SAFETY: msg is non-null and valid.
    let m = unsafe { &*msg };
    // SAFETY: the lists hold their counts of entries.
    let (Some(v), d, Some(r)) = (
        unsafe { iovs(m.msg_iov, m.iov_count) },
        unsafe { descs(m.desc, m.iov_count) },
        unsafe { rma_iovs(m.rma_iov, m.rma_iov_count) },
    ) else {
        return EINVAL_S;
    };
    // SAFETY: the application keeps the ranges valid until completion.
    unsafe {
        post(
            p,
            v,
            d,
            m.addr,
            r,
            m.data,
            m.context,
            Flags::Given(flags),
            read,
        )
    }
}

unsafe extern "C" fn rma_readmsg(p: *mut fid_ep, msg: *const fi_msg_rma, flags: u64) -> ssize_t {
    // SAFETY: the application's fi_readmsg(3) arguments, passed on unchanged: `msg` is NULL or a
    // valid message whose lists hold their counts and whose ranges stay valid until completion, as
    // `rma_msg` requires.
    ffi(PANIC_S, || unsafe { rma_msg(p, msg, flags, true) })
}

unsafe extern "C" fn rma_writemsg(p: *mut fid_ep, msg: *const fi_msg_rma, flags: u64) -> ssize_t {
    // SAFETY: the application's fi_writemsg(3) arguments, passed on unchanged: `msg` is NULL or a
    // valid message whose lists hold their counts and whose ranges stay valid until completion, as
    // `rma_msg` requires.
    ffi(PANIC_S, || unsafe { rma_msg(p, msg, flags, false) })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn rma_write(
    p: *mut fid_ep,
    buf: *const c_void,
    len: size_t,
    desc: *mut c_void,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> ssize_t {
    ffi(PANIC_S, || {
        let Some(iov) = one(buf, len) else {
            return EINVAL_S;
        };
        let d = [desc as u64];
        let r = [RmaIov { addr, len, key }];
        // SAFETY: the application keeps buf valid until completion.
        unsafe {
            post(
                p,
                &iov,
                one_desc(&d),
                dest,
                &r,
                0,
                context,
                Flags::Default(0),
                false,
            )
        }
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn rma_writev(
    p: *mut fid_ep,
    iov: *const iovec,
    desc: *mut *mut c_void,
    count: size_t,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> ssize_t {
    ffi(PANIC_S, || {
        // SAFETY: iov / desc hold count entries.
        let (Some(v), d) = (unsafe { iovs(iov, count) }, unsafe { descs(desc, count) }) else {
            return EINVAL_S;
        };
        let r = [RmaIov {
            addr,
            len: iov_len(v),
            key,
        }];
        // SAFETY: the application keeps the ranges valid until completion.
        unsafe { post(p, v, d, dest, &r, 0, context, Flags::Default(0), false) }
    })
}

unsafe extern "C" fn rma_inject(
    p: *mut fid_ep,
    buf: *const c_void,
    len: size_t,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
) -> ssize_t {
    ffi(PANIC_S, || {
        let Some(iov) = one(buf, len) else {
            return EINVAL_S;
        };
        let r = [RmaIov { addr, len, key }];
        let f = Flags::Inject(FI_INJECT);
        // SAFETY: FI_INJECT: buf is read before the call returns.
        unsafe { post(p, &iov, &[], dest, &r, 0, std::ptr::null_mut(), f, false) }
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn rma_writedata(
    p: *mut fid_ep,
    buf: *const c_void,
    len: size_t,
    desc: *mut c_void,
    data: u64,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> ssize_t {
    ffi(PANIC_S, || {
        let Some(iov) = one(buf, len) else {
            return EINVAL_S;
        };
        let d = [desc as u64];
        let r = [RmaIov { addr, len, key }];
        let f = Flags::Default(FI_REMOTE_CQ_DATA);
        // SAFETY: the application keeps buf valid until completion.
        unsafe { post(p, &iov, one_desc(&d), dest, &r, data, context, f, false) }
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn rma_injectdata(
    p: *mut fid_ep,
    buf: *const c_void,
    len: size_t,
    data: u64,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
) -> ssize_t {
    ffi(PANIC_S, || {
        let Some(iov) = one(buf, len) else {
            return EINVAL_S;
        };
        let r = [RmaIov { addr, len, key }];
        let f = Flags::Inject(FI_INJECT | FI_REMOTE_CQ_DATA);
        // SAFETY: FI_INJECT: buf is read before the call returns.
        unsafe { post(p, &iov, &[], dest, &r, data, std::ptr::null_mut(), f, false) }
    })
}

static RMA_OPS: fi_ops_rma = fi_ops_rma {
    size: std::mem::size_of::<fi_ops_rma>(),
    read: Some(rma_read),
    readv: Some(rma_readv),
    readmsg: Some(rma_readmsg),
    write: Some(rma_write),
    writev: Some(rma_writev),
    writemsg: Some(rma_writemsg),
    inject: Some(rma_inject),
    writedata: Some(rma_writedata),
    injectdata: Some(rma_injectdata),
};

/// The endpoints' `fi_ops_rma` table.
pub(crate) fn rma_ops_table() -> *mut fi_ops_rma {
    &RMA_OPS as *const fi_ops_rma as *mut fi_ops_rma
}
