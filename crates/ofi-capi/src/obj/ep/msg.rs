//! `fi_ops_msg` and `fi_ops_tagged`: sends and receives, untagged and
//! tagged, in their plain, vector, `*msg` (with flags), `*data` and inject
//! forms. Calls without a flags argument use the endpoint's default flags;
//! `*msg` calls use exactly the flags given (FI_PEEK / FI_CLAIM /
//! FI_DISCARD / FI_MULTI_RECV / FI_COMPLETION …).

use super::{descs, ep, iovs};
use crate::abi::*;
use crate::obj::{ffi, sret, EINVAL_S, PANIC_S};
use ofi_core::consts::{FI_INJECT, FI_REMOTE_CQ_DATA, FI_TRIGGER, OFI_INJECT_CALL};
use ofi_core::object::{RecvOp, SendOp};
use ofi_core::util::iov::IoVec;

/// Where a call's flags come from.
#[derive(Clone, Copy)]
enum Flags {
    /// The endpoint's default flags, plus these bits.
    Default(u64),
    /// Exactly these (the `*msg` calls); ofi's own OFI_INJECT_CALL bit is
    /// not the caller's to set.
    Given(u64),
    /// An inject call's flags: no completion on success (OFI_INJECT_CALL).
    Inject(u64),
}

/// One range, or none for a zero-length buffer.
#[inline]
fn one(buf: *const c_void, len: usize) -> Option<[IoVec; 1]> {
    if buf.is_null() && len > 0 {
        return None;
    }
    Some([IoVec {
        base: buf as usize,
        len,
    }])
}

/// A single descriptor as a list (empty for NULL).
#[inline]
fn one_desc(d: &[u64; 1]) -> &[u64] {
    if d[0] == 0 {
        &[]
    } else {
        d
    }
}

/// Posts a send on the endpoint behind `p`.
///
/// # Safety
/// The ranges stay valid until the send completes (FI_INJECT: until return).
#[allow(clippy::too_many_arguments)]
#[inline]
unsafe fn send(
    p: *mut fid_ep,
    iov: &[IoVec],
    desc: &[u64],
    dest: fi_addr_t,
    tag: u64,
    data: u64,
    context: *mut c_void,
    flags: Flags,
    tagged: bool,
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
        let d = ofi_core::Deferred::Send {
            iov: iov.to_vec(),
            dest,
            tag,
            data,
            context: context as usize,
            flags,
            tagged,
        };
        // SAFETY: with FI_TRIGGER the context is the application's fi_triggered_context
        // (fi_trigger(3)); the ranges stay valid until the deferred send completes (this function's
        // contract).
        return unsafe { super::trigger(e, context, d) };
    }
    let op = SendOp {
        iov,
        desc,
        dest,
        tag,
        data,
        context: context as usize,
        flags,
        tagged,
    };
    // SAFETY: the ranges stay valid until the send completes, with FI_INJECT until it returns (this
    // function's contract), as `post_send` requires.
    sret(unsafe { e.post_send(&op) })
}

/// Posts a receive on the endpoint behind `p`.
///
/// # Safety
/// The ranges stay valid and unaliased until the receive completes.
#[allow(clippy::too_many_arguments)]
#[inline]
unsafe fn recv(
    p: *mut fid_ep,
    iov: &[IoVec],
    desc: &[u64],
    src: fi_addr_t,
    tag: u64,
    ignore: u64,
    context: *mut c_void,
    flags: Flags,
    tagged: bool,
) -> ssize_t {
    // SAFETY: p is NULL or a fid of the application.
    let Some((o, e)) = (unsafe { ep(p) }) else {
        return EINVAL_S;
    };
    let flags = match flags {
        Flags::Default(add) => o.rx_flags() | add,
        Flags::Given(f) => f & !OFI_INJECT_CALL,
        Flags::Inject(f) => f | OFI_INJECT_CALL,
    };
    let src = o.recv_src(src);
    if flags & FI_TRIGGER != 0 {
        let d = ofi_core::Deferred::Recv {
            iov: iov.to_vec(),
            src,
            tag,
            ignore,
            context: context as usize,
            flags,
            tagged,
        };
        // SAFETY: with FI_TRIGGER the context is the application's fi_triggered_context
        // (fi_trigger(3)); the ranges stay valid and unaliased until the deferred receive completes
        // (this function's contract).
        return unsafe { super::trigger(e, context, d) };
    }
    let op = RecvOp {
        iov,
        desc,
        src,
        tag,
        ignore,
        context: context as usize,
        flags,
        tagged,
    };
    // SAFETY: the ranges stay valid and unaliased until the receive completes (this function's
    // contract), as `post_recv` requires.
    sret(unsafe { e.post_recv(&op) })
}

// ---- fi_ops_msg ----

unsafe extern "C" fn msg_recv(
    p: *mut fid_ep,
    buf: *mut c_void,
    len: size_t,
    desc: *mut c_void,
    src: fi_addr_t,
    context: *mut c_void,
) -> ssize_t {
    ffi(PANIC_S, || {
        let Some(iov) = one(buf, len) else {
            return EINVAL_S;
        };
        let d = [desc as u64];
        // SAFETY: the application keeps buf valid until completion.
        unsafe {
            recv(
                p,
                &iov,
                one_desc(&d),
                src,
                0,
                0,
                context,
                Flags::Default(0),
                false,
            )
        }
    })
}

unsafe extern "C" fn msg_recvv(
    p: *mut fid_ep,
    iov: *const iovec,
    desc: *mut *mut c_void,
    count: size_t,
    src: fi_addr_t,
    context: *mut c_void,
) -> ssize_t {
    ffi(PANIC_S, || {
        // SAFETY: iov / desc hold count entries.
        let (Some(v), d) = (unsafe { iovs(iov, count) }, unsafe { descs(desc, count) }) else {
            return EINVAL_S;
        };
        // SAFETY: the application keeps the ranges valid until completion.
        unsafe { recv(p, v, d, src, 0, 0, context, Flags::Default(0), false) }
    })
}

unsafe extern "C" fn msg_recvmsg(p: *mut fid_ep, msg: *const fi_msg, flags: u64) -> ssize_t {
    ffi(PANIC_S, || {
        if msg.is_null() {
            return EINVAL_S;
        }
        // SAFETY: msg is non-null and valid.
        let m = unsafe { &*msg };
        // SAFETY: msg_iov / desc hold iov_count entries.
        let (Some(v), d) = (unsafe { iovs(m.msg_iov, m.iov_count) }, unsafe {
            descs(m.desc, m.iov_count)
        }) else {
            return EINVAL_S;
        };
        // SAFETY: the application keeps the ranges valid until completion.
        unsafe { recv(p, v, d, m.addr, 0, 0, m.context, Flags::Given(flags), false) }
    })
}

unsafe extern "C" fn msg_send(
    p: *mut fid_ep,
    buf: *const c_void,
    len: size_t,
    desc: *mut c_void,
    dest: fi_addr_t,
    context: *mut c_void,
) -> ssize_t {
    ffi(PANIC_S, || {
        let Some(iov) = one(buf, len) else {
            return EINVAL_S;
        };
        let d = [desc as u64];
        // SAFETY: the application keeps buf valid until completion.
        unsafe {
            send(
                p,
                &iov,
                one_desc(&d),
                dest,
                0,
                0,
                context,
                Flags::Default(0),
                false,
            )
        }
    })
}

unsafe extern "C" fn msg_sendv(
    p: *mut fid_ep,
    iov: *const iovec,
    desc: *mut *mut c_void,
    count: size_t,
    dest: fi_addr_t,
    context: *mut c_void,
) -> ssize_t {
    ffi(PANIC_S, || {
        // SAFETY: iov / desc hold count entries.
        let (Some(v), d) = (unsafe { iovs(iov, count) }, unsafe { descs(desc, count) }) else {
            return EINVAL_S;
        };
        // SAFETY: the application keeps the ranges valid until completion.
        unsafe { send(p, v, d, dest, 0, 0, context, Flags::Default(0), false) }
    })
}

unsafe extern "C" fn msg_sendmsg(p: *mut fid_ep, msg: *const fi_msg, flags: u64) -> ssize_t {
    ffi(PANIC_S, || {
        if msg.is_null() {
            return EINVAL_S;
        }
        // SAFETY: msg is non-null and valid.
        let m = unsafe { &*msg };
        // SAFETY: msg_iov / desc hold iov_count entries.
        let (Some(v), d) = (unsafe { iovs(m.msg_iov, m.iov_count) }, unsafe {
            descs(m.desc, m.iov_count)
        }) else {
            return EINVAL_S;
        };
        // SAFETY: the application keeps the ranges valid until completion.
        unsafe {
            send(
                p,
                v,
                d,
                m.addr,
                0,
                m.data,
                m.context,
                Flags::Given(flags),
                false,
            )
        }
    })
}

unsafe extern "C" fn msg_inject(
    p: *mut fid_ep,
    buf: *const c_void,
    len: size_t,
    dest: fi_addr_t,
) -> ssize_t {
    ffi(PANIC_S, || {
        let Some(iov) = one(buf, len) else {
            return EINVAL_S;
        };
        // SAFETY: FI_INJECT: buf is read before the call returns.
        unsafe {
            send(
                p,
                &iov,
                &[],
                dest,
                0,
                0,
                std::ptr::null_mut(),
                Flags::Inject(FI_INJECT),
                false,
            )
        }
    })
}

unsafe extern "C" fn msg_senddata(
    p: *mut fid_ep,
    buf: *const c_void,
    len: size_t,
    desc: *mut c_void,
    data: u64,
    dest: fi_addr_t,
    context: *mut c_void,
) -> ssize_t {
    ffi(PANIC_S, || {
        let Some(iov) = one(buf, len) else {
            return EINVAL_S;
        };
        let d = [desc as u64];
        let f = Flags::Default(FI_REMOTE_CQ_DATA);
        // SAFETY: the application keeps buf valid until completion.
        unsafe { send(p, &iov, one_desc(&d), dest, 0, data, context, f, false) }
    })
}

unsafe extern "C" fn msg_injectdata(
    p: *mut fid_ep,
    buf: *const c_void,
    len: size_t,
    data: u64,
    dest: fi_addr_t,
) -> ssize_t {
    ffi(PANIC_S, || {
        let Some(iov) = one(buf, len) else {
            return EINVAL_S;
        };
        let f = Flags::Inject(FI_INJECT | FI_REMOTE_CQ_DATA);
        // SAFETY: FI_INJECT: buf is read before the call returns.
        unsafe { send(p, &iov, &[], dest, 0, data, std::ptr::null_mut(), f, false) }
    })
}

static MSG_OPS: fi_ops_msg = fi_ops_msg {
    size: std::mem::size_of::<fi_ops_msg>(),
    recv: Some(msg_recv),
    recvv: Some(msg_recvv),
    recvmsg: Some(msg_recvmsg),
    send: Some(msg_send),
    sendv: Some(msg_sendv),
    sendmsg: Some(msg_sendmsg),
    inject: Some(msg_inject),
    senddata: Some(msg_senddata),
    injectdata: Some(msg_injectdata),
};

/// The endpoints' `fi_ops_msg` table.
pub(crate) fn msg_ops_table() -> *mut fi_ops_msg {
    &MSG_OPS as *const fi_ops_msg as *mut fi_ops_msg
}

// ---- fi_ops_tagged ----

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn tagged_recv(
    p: *mut fid_ep,
    buf: *mut c_void,
    len: size_t,
    desc: *mut c_void,
    src: fi_addr_t,
    tag: u64,
    ignore: u64,
    context: *mut c_void,
) -> ssize_t {
    ffi(PANIC_S, || {
        let Some(iov) = one(buf, len) else {
            return EINVAL_S;
        };
        let d = [desc as u64];
        let f = Flags::Default(0);
        // SAFETY: the application keeps buf valid until completion.
        unsafe { recv(p, &iov, one_desc(&d), src, tag, ignore, context, f, true) }
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn tagged_recvv(
    p: *mut fid_ep,
    iov: *const iovec,
    desc: *mut *mut c_void,
    count: size_t,
    src: fi_addr_t,
    tag: u64,
    ignore: u64,
    context: *mut c_void,
) -> ssize_t {
    ffi(PANIC_S, || {
        // SAFETY: iov / desc hold count entries.
        let (Some(v), d) = (unsafe { iovs(iov, count) }, unsafe { descs(desc, count) }) else {
            return EINVAL_S;
        };
        // SAFETY: the application keeps the ranges valid until completion.
        unsafe { recv(p, v, d, src, tag, ignore, context, Flags::Default(0), true) }
    })
}

unsafe extern "C" fn tagged_recvmsg(
    p: *mut fid_ep,
    msg: *const fi_msg_tagged,
    flags: u64,
) -> ssize_t {
    ffi(PANIC_S, || {
        if msg.is_null() {
            return EINVAL_S;
        }
        // SAFETY: msg is non-null and valid.
        let m = unsafe { &*msg };
        // SAFETY: msg_iov / desc hold iov_count entries (none for a
        // FI_PEEK / FI_DISCARD without a buffer).
        let (Some(v), d) = (unsafe { iovs(m.msg_iov, m.iov_count) }, unsafe {
            descs(m.desc, m.iov_count)
        }) else {
            return EINVAL_S;
        };
        let f = Flags::Given(flags);
        // SAFETY: the application keeps the ranges valid until completion.
        unsafe { recv(p, v, d, m.addr, m.tag, m.ignore, m.context, f, true) }
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn tagged_send(
    p: *mut fid_ep,
    buf: *const c_void,
    len: size_t,
    desc: *mut c_void,
    dest: fi_addr_t,
    tag: u64,
    context: *mut c_void,
) -> ssize_t {
    ffi(PANIC_S, || {
        let Some(iov) = one(buf, len) else {
            return EINVAL_S;
        };
        let d = [desc as u64];
        let f = Flags::Default(0);
        // SAFETY: the application keeps buf valid until completion.
        unsafe { send(p, &iov, one_desc(&d), dest, tag, 0, context, f, true) }
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn tagged_sendv(
    p: *mut fid_ep,
    iov: *const iovec,
    desc: *mut *mut c_void,
    count: size_t,
    dest: fi_addr_t,
    tag: u64,
    context: *mut c_void,
) -> ssize_t {
    ffi(PANIC_S, || {
        // SAFETY: iov / desc hold count entries.
        let (Some(v), d) = (unsafe { iovs(iov, count) }, unsafe { descs(desc, count) }) else {
            return EINVAL_S;
        };
        // SAFETY: the application keeps the ranges valid until completion.
        unsafe { send(p, v, d, dest, tag, 0, context, Flags::Default(0), true) }
    })
}

/// `fi_tsendmsg`; a NULL `msg_iov` with `iov_count` 0 sends an empty message.
unsafe extern "C" fn tagged_sendmsg(
    p: *mut fid_ep,
    msg: *const fi_msg_tagged,
    flags: u64,
) -> ssize_t {
    ffi(PANIC_S, || {
        if msg.is_null() {
            return EINVAL_S;
        }
        // SAFETY: msg is non-null and valid.
        let m = unsafe { &*msg };
        // SAFETY: msg_iov / desc hold iov_count entries.
        let (Some(v), d) = (unsafe { iovs(m.msg_iov, m.iov_count) }, unsafe {
            descs(m.desc, m.iov_count)
        }) else {
            return EINVAL_S;
        };
        let f = Flags::Given(flags);
        // SAFETY: the application keeps the ranges valid until completion.
        unsafe { send(p, v, d, m.addr, m.tag, m.data, m.context, f, true) }
    })
}

unsafe extern "C" fn tagged_inject(
    p: *mut fid_ep,
    buf: *const c_void,
    len: size_t,
    dest: fi_addr_t,
    tag: u64,
) -> ssize_t {
    ffi(PANIC_S, || {
        let Some(iov) = one(buf, len) else {
            return EINVAL_S;
        };
        let f = Flags::Inject(FI_INJECT);
        // SAFETY: FI_INJECT: buf is read before the call returns.
        unsafe { send(p, &iov, &[], dest, tag, 0, std::ptr::null_mut(), f, true) }
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn tagged_senddata(
    p: *mut fid_ep,
    buf: *const c_void,
    len: size_t,
    desc: *mut c_void,
    data: u64,
    dest: fi_addr_t,
    tag: u64,
    context: *mut c_void,
) -> ssize_t {
    ffi(PANIC_S, || {
        let Some(iov) = one(buf, len) else {
            return EINVAL_S;
        };
        let d = [desc as u64];
        let f = Flags::Default(FI_REMOTE_CQ_DATA);
        // SAFETY: the application keeps buf valid until completion.
        unsafe { send(p, &iov, one_desc(&d), dest, tag, data, context, f, true) }
    })
}

unsafe extern "C" fn tagged_injectdata(
    p: *mut fid_ep,
    buf: *const c_void,
    len: size_t,
    data: u64,
    dest: fi_addr_t,
    tag: u64,
) -> ssize_t {
    ffi(PANIC_S, || {
        let Some(iov) = one(buf, len) else {
            return EINVAL_S;
        };
        let f = Flags::Inject(FI_INJECT | FI_REMOTE_CQ_DATA);
        // SAFETY: FI_INJECT: buf is read before the call returns.
        unsafe { send(p, &iov, &[], dest, tag, data, std::ptr::null_mut(), f, true) }
    })
}

static TAGGED_OPS: fi_ops_tagged = fi_ops_tagged {
    size: std::mem::size_of::<fi_ops_tagged>(),
    recv: Some(tagged_recv),
    recvv: Some(tagged_recvv),
    recvmsg: Some(tagged_recvmsg),
    send: Some(tagged_send),
    sendv: Some(tagged_sendv),
    sendmsg: Some(tagged_sendmsg),
    inject: Some(tagged_inject),
    senddata: Some(tagged_senddata),
    injectdata: Some(tagged_injectdata),
};

/// The endpoints' `fi_ops_tagged` table.
pub(crate) fn tagged_ops_table() -> *mut fi_ops_tagged {
    &TAGGED_OPS as *const fi_ops_tagged as *mut fi_ops_tagged
}
