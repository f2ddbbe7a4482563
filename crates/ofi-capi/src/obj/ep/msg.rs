//! `fi_ops_msg` and `fi_ops_tagged`: sends and receives, untagged and
//! tagged, in their plain, vector, `*msg` (with flags), `*data` and inject
//! forms. Calls without a flags argument use the endpoint's default flags;
//! `*msg` calls use exactly the flags given (FI_PEEK / FI_CLAIM /
//! FI_DISCARD / FI_MULTI_RECV / FI_COMPLETION …).

use super::args::{iov_lists, one, one_desc, Flags};
use super::ep;
use crate::abi::*;
use crate::obj::{hot, sret, EINVAL_S, PANIC_S};
use ofi_core::consts::{FI_INJECT, FI_REMOTE_CQ_DATA, FI_TRIGGER};
use ofi_core::object::{RecvOp, SendOp};
use ofi_core::util::iov::IoVec;

/// Posts a send on the endpoint behind `p`.
///
/// # Safety
/// The ranges stay valid until the send completes (FI_INJECT: until return).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
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
    let flags = flags.resolve(|| o.tx_flags());
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

/// Posts a receive on the endpoint behind `p` (`SRX`: on the shared
/// receive context behind `p`; its own tables call with it, so the
/// endpoints' lookup stays as it is).
///
/// # Safety
/// The ranges stay valid and unaliased until the receive completes.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn recv<const SRX: bool>(
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
    let Some((o, e)) = (unsafe {
        if SRX {
            super::srx_ep(p)
        } else {
            ep(p)
        }
    }) else {
        return EINVAL_S;
    };
    let flags = flags.resolve(|| o.rx_flags());
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

/// The one-buffer send forms (`send`, `senddata`, `inject`, `injectdata`
/// and their tagged twins): `buf` as one range, `desc` as its descriptor.
///
/// # Safety
/// `buf` is NULL or valid for `len` bytes until the send completes (with
/// FI_INJECT, until this call returns).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn send_buf(
    p: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    desc: *mut c_void,
    dest: fi_addr_t,
    tag: u64,
    data: u64,
    context: *mut c_void,
    flags: Flags,
    tagged: bool,
) -> ssize_t {
    let Some(iov) = one(buf, len) else {
        return EINVAL_S;
    };
    let d = [desc as u64];
    // SAFETY: the one range is `buf`, valid as long as the send needs it
    // (this function's contract).
    unsafe {
        send(
            p,
            &iov,
            one_desc(&d),
            dest,
            tag,
            data,
            context,
            flags,
            tagged,
        )
    }
}

/// The vector and message send forms (`sendv`, `sendmsg` and their tagged
/// twins): `count` ranges at `iov` with their descriptors.
///
/// # Safety
/// `iov` holds `count` ranges valid until the send completes (with
/// FI_INJECT, until this call returns); `desc` is NULL or holds `count`
/// descriptors.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn send_iov(
    p: *mut fid_ep,
    iov: *const iovec,
    desc: *mut *mut c_void,
    count: usize,
    dest: fi_addr_t,
    tag: u64,
    data: u64,
    context: *mut c_void,
    flags: Flags,
    tagged: bool,
) -> ssize_t {
    // SAFETY: iov / desc hold count entries (this function's contract).
    let Some((v, d)) = (unsafe { iov_lists(iov, desc, count) }) else {
        return EINVAL_S;
    };
    // SAFETY: the ranges stay valid as long as the send needs them (this
    // function's contract).
    unsafe { send(p, v, d, dest, tag, data, context, flags, tagged) }
}

/// The one-buffer receive forms (`recv` and `trecv`).
///
/// # Safety
/// `buf` is NULL or valid and unaliased for `len` bytes until the receive
/// completes.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn recv_buf<const SRX: bool>(
    p: *mut fid_ep,
    buf: *mut c_void,
    len: usize,
    desc: *mut c_void,
    src: fi_addr_t,
    tag: u64,
    ignore: u64,
    context: *mut c_void,
    flags: Flags,
    tagged: bool,
) -> ssize_t {
    let Some(iov) = one(buf, len) else {
        return EINVAL_S;
    };
    let d = [desc as u64];
    // SAFETY: the one range is `buf`, valid and unaliased until the receive
    // completes (this function's contract).
    unsafe {
        recv::<SRX>(
            p,
            &iov,
            one_desc(&d),
            src,
            tag,
            ignore,
            context,
            flags,
            tagged,
        )
    }
}

/// The vector and message receive forms (`recvv`, `recvmsg` and their
/// tagged twins).
///
/// # Safety
/// `iov` holds `count` ranges valid and unaliased until the receive
/// completes; `desc` is NULL or holds `count` descriptors.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn recv_iov<const SRX: bool>(
    p: *mut fid_ep,
    iov: *const iovec,
    desc: *mut *mut c_void,
    count: usize,
    src: fi_addr_t,
    tag: u64,
    ignore: u64,
    context: *mut c_void,
    flags: Flags,
    tagged: bool,
) -> ssize_t {
    // SAFETY: iov / desc hold count entries (this function's contract).
    let Some((v, d)) = (unsafe { iov_lists(iov, desc, count) }) else {
        return EINVAL_S;
    };
    // SAFETY: the ranges stay valid and unaliased until the receive
    // completes (this function's contract).
    unsafe { recv::<SRX>(p, v, d, src, tag, ignore, context, flags, tagged) }
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
    hot(PANIC_S, || {
        let f = Flags::Default(0);
        // SAFETY: the application keeps buf valid until completion.
        unsafe { recv_buf::<false>(p, buf, len, desc, src, 0, 0, context, f, false) }
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
    hot(PANIC_S, || {
        let f = Flags::Default(0);
        // SAFETY: iov / desc hold count entries; the application keeps the
        // ranges valid until completion.
        unsafe { recv_iov::<false>(p, iov, desc, count, src, 0, 0, context, f, false) }
    })
}

unsafe extern "C" fn msg_recvmsg(p: *mut fid_ep, msg: *const fi_msg, flags: u64) -> ssize_t {
    hot(PANIC_S, || {
        // SAFETY: msg is NULL or a valid message.
        let Some(m) = (unsafe { msg.as_ref() }) else {
            return EINVAL_S;
        };
        let (v, d, n, f) = (m.msg_iov, m.desc, m.iov_count, Flags::Given(flags));
        // SAFETY: msg_iov / desc hold iov_count entries; the application
        // keeps the ranges valid until completion.
        unsafe { recv_iov::<false>(p, v, d, n, m.addr, 0, 0, m.context, f, false) }
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
    hot(PANIC_S, || {
        let f = Flags::Default(0);
        // SAFETY: the application keeps buf valid until completion.
        unsafe { send_buf(p, buf, len, desc, dest, 0, 0, context, f, false) }
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
    hot(PANIC_S, || {
        let f = Flags::Default(0);
        // SAFETY: iov / desc hold count entries; the application keeps the
        // ranges valid until completion.
        unsafe { send_iov(p, iov, desc, count, dest, 0, 0, context, f, false) }
    })
}

unsafe extern "C" fn msg_sendmsg(p: *mut fid_ep, msg: *const fi_msg, flags: u64) -> ssize_t {
    hot(PANIC_S, || {
        // SAFETY: msg is NULL or a valid message.
        let Some(m) = (unsafe { msg.as_ref() }) else {
            return EINVAL_S;
        };
        let (v, d, n, f) = (m.msg_iov, m.desc, m.iov_count, Flags::Given(flags));
        // SAFETY: msg_iov / desc hold iov_count entries; the application
        // keeps the ranges valid until completion.
        unsafe { send_iov(p, v, d, n, m.addr, 0, m.data, m.context, f, false) }
    })
}

unsafe extern "C" fn msg_inject(
    p: *mut fid_ep,
    buf: *const c_void,
    len: size_t,
    dest: fi_addr_t,
) -> ssize_t {
    hot(PANIC_S, || {
        let f = Flags::Inject(FI_INJECT);
        let none = std::ptr::null_mut();
        // SAFETY: FI_INJECT: buf is read before the call returns.
        unsafe { send_buf(p, buf, len, none, dest, 0, 0, none, f, false) }
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
    hot(PANIC_S, || {
        let f = Flags::Default(FI_REMOTE_CQ_DATA);
        // SAFETY: the application keeps buf valid until completion.
        unsafe { send_buf(p, buf, len, desc, dest, 0, data, context, f, false) }
    })
}

unsafe extern "C" fn msg_injectdata(
    p: *mut fid_ep,
    buf: *const c_void,
    len: size_t,
    data: u64,
    dest: fi_addr_t,
) -> ssize_t {
    hot(PANIC_S, || {
        let f = Flags::Inject(FI_INJECT | FI_REMOTE_CQ_DATA);
        let none = std::ptr::null_mut();
        // SAFETY: FI_INJECT: buf is read before the call returns.
        unsafe { send_buf(p, buf, len, none, dest, 0, data, none, f, false) }
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
    hot(PANIC_S, || {
        let f = Flags::Default(0);
        // SAFETY: the application keeps buf valid until completion.
        unsafe { recv_buf::<false>(p, buf, len, desc, src, tag, ignore, context, f, true) }
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
    hot(PANIC_S, || {
        let f = Flags::Default(0);
        // SAFETY: iov / desc hold count entries; the application keeps the
        // ranges valid until completion.
        unsafe { recv_iov::<false>(p, iov, desc, count, src, tag, ignore, context, f, true) }
    })
}

unsafe extern "C" fn tagged_recvmsg(
    p: *mut fid_ep,
    msg: *const fi_msg_tagged,
    flags: u64,
) -> ssize_t {
    hot(PANIC_S, || {
        // SAFETY: msg is NULL or a valid message.
        let Some(m) = (unsafe { msg.as_ref() }) else {
            return EINVAL_S;
        };
        let (v, d, n, f) = (m.msg_iov, m.desc, m.iov_count, Flags::Given(flags));
        // SAFETY: msg_iov / desc hold iov_count entries (none for a
        // FI_PEEK / FI_DISCARD without a buffer); the application keeps
        // the ranges valid until completion.
        unsafe { recv_iov::<false>(p, v, d, n, m.addr, m.tag, m.ignore, m.context, f, true) }
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
    hot(PANIC_S, || {
        let f = Flags::Default(0);
        // SAFETY: the application keeps buf valid until completion.
        unsafe { send_buf(p, buf, len, desc, dest, tag, 0, context, f, true) }
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
    hot(PANIC_S, || {
        let f = Flags::Default(0);
        // SAFETY: iov / desc hold count entries; the application keeps the
        // ranges valid until completion.
        unsafe { send_iov(p, iov, desc, count, dest, tag, 0, context, f, true) }
    })
}

/// `fi_tsendmsg`; a NULL `msg_iov` with `iov_count` 0 sends an empty message.
unsafe extern "C" fn tagged_sendmsg(
    p: *mut fid_ep,
    msg: *const fi_msg_tagged,
    flags: u64,
) -> ssize_t {
    hot(PANIC_S, || {
        // SAFETY: msg is NULL or a valid message.
        let Some(m) = (unsafe { msg.as_ref() }) else {
            return EINVAL_S;
        };
        let (v, d, n, f) = (m.msg_iov, m.desc, m.iov_count, Flags::Given(flags));
        // SAFETY: msg_iov / desc hold iov_count entries; the application
        // keeps the ranges valid until completion.
        unsafe { send_iov(p, v, d, n, m.addr, m.tag, m.data, m.context, f, true) }
    })
}

unsafe extern "C" fn tagged_inject(
    p: *mut fid_ep,
    buf: *const c_void,
    len: size_t,
    dest: fi_addr_t,
    tag: u64,
) -> ssize_t {
    hot(PANIC_S, || {
        let f = Flags::Inject(FI_INJECT);
        let none = std::ptr::null_mut();
        // SAFETY: FI_INJECT: buf is read before the call returns.
        unsafe { send_buf(p, buf, len, none, dest, tag, 0, none, f, true) }
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
    hot(PANIC_S, || {
        let f = Flags::Default(FI_REMOTE_CQ_DATA);
        // SAFETY: the application keeps buf valid until completion.
        unsafe { send_buf(p, buf, len, desc, dest, tag, data, context, f, true) }
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
    hot(PANIC_S, || {
        let f = Flags::Inject(FI_INJECT | FI_REMOTE_CQ_DATA);
        let none = std::ptr::null_mut();
        // SAFETY: FI_INJECT: buf is read before the call returns.
        unsafe { send_buf(p, buf, len, none, dest, tag, data, none, f, true) }
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

// ---- a shared receive context's tables ----
//
// The receive slots of the endpoints' tables, resolving the shared receive
// context behind the fid (`fi_srx_context`); its send slots are the
// endpoints' (they find no endpoint there: -FI_EINVAL).

unsafe extern "C" fn srx_msg_recv(
    p: *mut fid_ep,
    buf: *mut c_void,
    len: size_t,
    desc: *mut c_void,
    src: fi_addr_t,
    context: *mut c_void,
) -> ssize_t {
    hot(PANIC_S, || {
        let f = Flags::Default(0);
        // SAFETY: the application keeps buf valid until completion.
        unsafe { recv_buf::<true>(p, buf, len, desc, src, 0, 0, context, f, false) }
    })
}

unsafe extern "C" fn srx_msg_recvv(
    p: *mut fid_ep,
    iov: *const iovec,
    desc: *mut *mut c_void,
    count: size_t,
    src: fi_addr_t,
    context: *mut c_void,
) -> ssize_t {
    hot(PANIC_S, || {
        let f = Flags::Default(0);
        // SAFETY: iov / desc hold count entries; the application keeps the
        // ranges valid until completion.
        unsafe { recv_iov::<true>(p, iov, desc, count, src, 0, 0, context, f, false) }
    })
}

unsafe extern "C" fn srx_msg_recvmsg(p: *mut fid_ep, msg: *const fi_msg, flags: u64) -> ssize_t {
    hot(PANIC_S, || {
        // SAFETY: msg is NULL or a valid message.
        let Some(m) = (unsafe { msg.as_ref() }) else {
            return EINVAL_S;
        };
        let (v, d, n, f) = (m.msg_iov, m.desc, m.iov_count, Flags::Given(flags));
        // SAFETY: msg_iov / desc hold iov_count entries; the application
        // keeps the ranges valid until completion.
        unsafe { recv_iov::<true>(p, v, d, n, m.addr, 0, 0, m.context, f, false) }
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn srx_tagged_recv(
    p: *mut fid_ep,
    buf: *mut c_void,
    len: size_t,
    desc: *mut c_void,
    src: fi_addr_t,
    tag: u64,
    ignore: u64,
    context: *mut c_void,
) -> ssize_t {
    hot(PANIC_S, || {
        let f = Flags::Default(0);
        // SAFETY: the application keeps buf valid until completion.
        unsafe { recv_buf::<true>(p, buf, len, desc, src, tag, ignore, context, f, true) }
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn srx_tagged_recvv(
    p: *mut fid_ep,
    iov: *const iovec,
    desc: *mut *mut c_void,
    count: size_t,
    src: fi_addr_t,
    tag: u64,
    ignore: u64,
    context: *mut c_void,
) -> ssize_t {
    hot(PANIC_S, || {
        let f = Flags::Default(0);
        // SAFETY: iov / desc hold count entries; the application keeps the
        // ranges valid until completion.
        unsafe { recv_iov::<true>(p, iov, desc, count, src, tag, ignore, context, f, true) }
    })
}

unsafe extern "C" fn srx_tagged_recvmsg(
    p: *mut fid_ep,
    msg: *const fi_msg_tagged,
    flags: u64,
) -> ssize_t {
    hot(PANIC_S, || {
        // SAFETY: msg is NULL or a valid message.
        let Some(m) = (unsafe { msg.as_ref() }) else {
            return EINVAL_S;
        };
        let (v, d, n, f) = (m.msg_iov, m.desc, m.iov_count, Flags::Given(flags));
        // SAFETY: msg_iov / desc hold iov_count entries; the application
        // keeps the ranges valid until completion.
        unsafe { recv_iov::<true>(p, v, d, n, m.addr, m.tag, m.ignore, m.context, f, true) }
    })
}

static SRX_MSG_OPS: fi_ops_msg = fi_ops_msg {
    recv: Some(srx_msg_recv),
    recvv: Some(srx_msg_recvv),
    recvmsg: Some(srx_msg_recvmsg),
    ..MSG_OPS
};

static SRX_TAGGED_OPS: fi_ops_tagged = fi_ops_tagged {
    recv: Some(srx_tagged_recv),
    recvv: Some(srx_tagged_recvv),
    recvmsg: Some(srx_tagged_recvmsg),
    ..TAGGED_OPS
};

/// A shared receive context's `fi_ops_msg` table.
pub(crate) fn srx_msg_ops_table() -> *mut fi_ops_msg {
    &SRX_MSG_OPS as *const fi_ops_msg as *mut fi_ops_msg
}

/// A shared receive context's `fi_ops_tagged` table.
pub(crate) fn srx_tagged_ops_table() -> *mut fi_ops_tagged {
    &SRX_TAGGED_OPS as *const fi_ops_tagged as *mut fi_ops_tagged
}
