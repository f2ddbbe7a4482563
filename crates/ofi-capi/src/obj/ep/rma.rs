//! `fi_ops_rma`: reads and writes of registered remote memory, in their
//! plain, vector, `*msg`, `*data` and inject forms.

use super::args::{iov_lists, one, one_desc, Flags};
use super::ep;
use crate::abi::*;
use crate::obj::{hot, sret, EINVAL_S, PANIC_S};
use ofi_core::consts::{FI_INJECT, FI_REMOTE_CQ_DATA, FI_TRIGGER};
use ofi_core::object::{RmaDir, RmaOp};
use ofi_core::util::iov::{iov_len, IoVec};
use ofi_core::util::rma::RmaIov;

const _: () = assert!(std::mem::size_of::<RmaIov>() == std::mem::size_of::<fi_rma_iov>());

/// Posts an RMA operation on the endpoint behind `p`.
///
/// # Safety
/// The local ranges stay valid until completion (FI_INJECT: until return).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn post(
    p: *mut fid_ep,
    iov: &[IoVec],
    desc: &[u64],
    peer: fi_addr_t,
    rma_iov: &[RmaIov],
    data: u64,
    context: *mut c_void,
    flags: Flags,
    dir: RmaDir,
) -> ssize_t {
    // SAFETY: p is NULL or a fid of the application.
    let Some((o, e)) = (unsafe { ep(p) }) else {
        return EINVAL_S;
    };
    let flags = flags.resolve(|| o.tx_flags());
    let op = RmaOp {
        iov,
        desc,
        addr: peer,
        rma_iov,
        data,
        context: context as usize,
        flags,
        dir,
    };
    if flags & FI_TRIGGER != 0 {
        // SAFETY: the local ranges stay valid until completion (this
        // function's contract), as `deferred` requires.
        return unsafe { deferred(e, &op) };
    }
    // SAFETY: the local ranges stay valid until completion, with FI_INJECT until return (this
    // function's contract), as `post_rma` requires.
    sret(unsafe { e.post_rma(&op) })
}

/// An operation with FI_TRIGGER: kept until its counter reaches the
/// threshold.
///
/// # Safety
/// The local ranges of `op` stay valid until the deferred operation
/// completes.
#[cold]
#[inline(never)]
unsafe fn deferred(e: &ofi_core::Endpoint, op: &RmaOp<'_>) -> ssize_t {
    let d = ofi_core::Deferred::Rma {
        iov: op.iov.to_vec(),
        addr: op.addr,
        rma_iov: op.rma_iov.to_vec(),
        data: op.data,
        context: op.context,
        flags: op.flags,
        dir: op.dir,
    };
    // SAFETY: with FI_TRIGGER the context is the application's fi_triggered_context
    // (fi_trigger(3)); the local ranges stay valid until the deferred operation completes (this
    // function's contract).
    unsafe { super::trigger(e, op.context as *mut c_void, d) }
}

/// The remote range list of a `fi_msg_rma`.
///
/// # Safety
/// `p` holds `n` entries.
unsafe fn rma_iovs<'a>(p: *const fi_rma_iov, n: usize) -> Option<&'a [RmaIov]> {
    // SAFETY: RmaIov has fi_rma_iov's layout; the caller's contract.
    unsafe { crate::obj::array(p.cast::<RmaIov>(), n) }
}

/// The one-buffer forms (`read`, `write`, `inject`, `writedata`,
/// `injectdata`): `buf` as the one local range, `len` bytes at `addr`
/// under `key` as the remote one.
///
/// # Safety
/// `buf` is NULL or valid for `len` bytes until completion (with
/// FI_INJECT, until this call returns); for a read, unaliased.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn post_buf(
    p: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    desc: *mut c_void,
    peer: fi_addr_t,
    addr: u64,
    key: u64,
    data: u64,
    context: *mut c_void,
    flags: Flags,
    dir: RmaDir,
) -> ssize_t {
    let Some(iov) = one(buf, len) else {
        return EINVAL_S;
    };
    let d = [desc as u64];
    let r = [RmaIov { addr, len, key }];
    // SAFETY: the one local range is `buf`, valid as long as the operation
    // needs it (this function's contract).
    unsafe { post(p, &iov, one_desc(&d), peer, &r, data, context, flags, dir) }
}

/// The vector forms (`readv`, `writev`): `count` local ranges, and as many
/// bytes at `addr` under `key` as the remote range.
///
/// # Safety
/// `iov` holds `count` ranges valid until completion (for a read,
/// unaliased); `desc` is NULL or holds `count` descriptors.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn post_iov(
    p: *mut fid_ep,
    iov: *const iovec,
    desc: *mut *mut c_void,
    count: usize,
    peer: fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
    dir: RmaDir,
) -> ssize_t {
    // SAFETY: iov / desc hold count entries (this function's contract).
    let Some((v, d)) = (unsafe { iov_lists(iov, desc, count) }) else {
        return EINVAL_S;
    };
    let r = [RmaIov {
        addr,
        len: iov_len(v),
        key,
    }];
    let f = Flags::Default(0);
    // SAFETY: the ranges stay valid until completion (this function's
    // contract).
    unsafe { post(p, v, d, peer, &r, 0, context, f, dir) }
}

/// `fi_readmsg` / `fi_writemsg`.
///
/// # Safety
/// As the C calls.
unsafe fn rma_msg(p: *mut fid_ep, msg: *const fi_msg_rma, flags: u64, dir: RmaDir) -> ssize_t {
    // SAFETY: msg is NULL or a valid message.
    let Some(m) = (unsafe { msg.as_ref() }) else {
        return EINVAL_S;
    };
    // SAFETY: the lists hold their counts of entries.
    let (Some((v, d)), Some(r)) = (
        unsafe { iov_lists(m.msg_iov, m.desc, m.iov_count) },
        unsafe { rma_iovs(m.rma_iov, m.rma_iov_count) },
    ) else {
        return EINVAL_S;
    };
    let f = Flags::Given(flags);
    // SAFETY: the application keeps the ranges valid until completion.
    unsafe { post(p, v, d, m.addr, r, m.data, m.context, f, dir) }
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
    hot(PANIC_S, || {
        let f = Flags::Default(0);
        // SAFETY: the application keeps buf valid until completion.
        unsafe {
            post_buf(
                p,
                buf,
                len,
                desc,
                src,
                addr,
                key,
                0,
                context,
                f,
                RmaDir::Read,
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
    // SAFETY: iov / desc hold count entries; the application keeps the
    // ranges valid until completion.
    hot(PANIC_S, || unsafe {
        post_iov(p, iov, desc, count, src, addr, key, context, RmaDir::Read)
    })
}

unsafe extern "C" fn rma_readmsg(p: *mut fid_ep, msg: *const fi_msg_rma, flags: u64) -> ssize_t {
    // SAFETY: the application's fi_readmsg(3) arguments, passed on unchanged: `msg` is NULL or a
    // valid message whose lists hold their counts and whose ranges stay valid until completion, as
    // `rma_msg` requires.
    hot(PANIC_S, || unsafe { rma_msg(p, msg, flags, RmaDir::Read) })
}

unsafe extern "C" fn rma_writemsg(p: *mut fid_ep, msg: *const fi_msg_rma, flags: u64) -> ssize_t {
    // SAFETY: the application's fi_writemsg(3) arguments, passed on unchanged: `msg` is NULL or a
    // valid message whose lists hold their counts and whose ranges stay valid until completion, as
    // `rma_msg` requires.
    hot(PANIC_S, || unsafe { rma_msg(p, msg, flags, RmaDir::Write) })
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
    hot(PANIC_S, || {
        let f = Flags::Default(0);
        // SAFETY: the application keeps buf valid until completion.
        unsafe {
            post_buf(
                p,
                buf,
                len,
                desc,
                dest,
                addr,
                key,
                0,
                context,
                f,
                RmaDir::Write,
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
    // SAFETY: iov / desc hold count entries; the application keeps the
    // ranges valid until completion.
    hot(PANIC_S, || unsafe {
        post_iov(p, iov, desc, count, dest, addr, key, context, RmaDir::Write)
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
    hot(PANIC_S, || {
        let f = Flags::Inject(FI_INJECT);
        let none = std::ptr::null_mut();
        // SAFETY: FI_INJECT: buf is read before the call returns.
        unsafe {
            post_buf(
                p,
                buf,
                len,
                none,
                dest,
                addr,
                key,
                0,
                none,
                f,
                RmaDir::Write,
            )
        }
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
    hot(PANIC_S, || {
        let f = Flags::Default(FI_REMOTE_CQ_DATA);
        // SAFETY: the application keeps buf valid until completion.
        unsafe {
            post_buf(
                p,
                buf,
                len,
                desc,
                dest,
                addr,
                key,
                data,
                context,
                f,
                RmaDir::Write,
            )
        }
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
    hot(PANIC_S, || {
        let f = Flags::Inject(FI_INJECT | FI_REMOTE_CQ_DATA);
        let none = std::ptr::null_mut();
        // SAFETY: FI_INJECT: buf is read before the call returns.
        unsafe {
            post_buf(
                p,
                buf,
                len,
                none,
                dest,
                addr,
                key,
                data,
                none,
                f,
                RmaDir::Write,
            )
        }
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
