//! `fi_ops_atomic`: basic, fetching and compare atomics in their plain,
//! vector, `*msg` and inject forms, and the `*valid` queries.

use super::args::{descs, one_desc, Flags};
use super::ep;
use crate::abi::*;
use crate::guard;
use crate::obj::{hot, sret, EINVAL, EINVAL_S, PANIC, PANIC_S};
use ofi_core::consts::{atomic_op, FI_COMPARE_ATOMIC, FI_FETCH_ATOMIC, FI_INJECT, FI_TRIGGER};
use ofi_core::object::AtomicOp;
use ofi_core::util::atomic::AtomicKind;
use ofi_core::util::rma::{Ioc, RmaIoc};

const _: () = assert!(std::mem::size_of::<Ioc>() == std::mem::size_of::<fi_ioc>());
const _: () = assert!(std::mem::size_of::<RmaIoc>() == std::mem::size_of::<fi_rma_ioc>());

/// One atomic as the C call describes it.
struct Call<'a> {
    kind: AtomicKind,
    op: u32,
    datatype: u32,
    operand: &'a [Ioc],
    compare: &'a [Ioc],
    result: &'a [Ioc],
    desc: &'a [u64],
    peer: fi_addr_t,
    rma_ioc: &'a [RmaIoc],
    data: u64,
    context: *mut c_void,
    flags: Flags,
}

impl<'a> Call<'a> {
    /// A call with no local lists, no data and the endpoint's default
    /// flags: the plain and vector forms fill in their lists.
    #[inline(always)]
    fn new(
        kind: AtomicKind,
        op: u32,
        datatype: u32,
        peer: fi_addr_t,
        rma_ioc: &'a [RmaIoc],
        context: *mut c_void,
    ) -> Self {
        Call {
            kind,
            op,
            datatype,
            operand: &[],
            compare: &[],
            result: &[],
            desc: &[],
            peer,
            rma_ioc,
            data: 0,
            context,
            flags: Flags::Default(0),
        }
    }

    /// The call an `fi_msg_atomic` describes, with exactly the flags given;
    /// the fetch and compare forms add their result and compare lists.
    #[inline(always)]
    fn msg(kind: AtomicKind, (m, operand, desc, rma_ioc): MsgParts<'a>, flags: u64) -> Self {
        Call {
            operand,
            desc,
            data: m.data,
            flags: Flags::Given(flags),
            ..Call::new(kind, m.op, m.datatype, m.addr, rma_ioc, m.context)
        }
    }
}

/// Posts an atomic on the endpoint behind `p`.
///
/// # Safety
/// Operand, compare and result memory stay valid until completion.
unsafe fn post(p: *mut fid_ep, c: Call<'_>) -> ssize_t {
    // SAFETY: p is NULL or a fid of the application.
    let Some((o, e)) = (unsafe { ep(p) }) else {
        return EINVAL_S;
    };
    let flags = c.flags.resolve(|| o.tx_flags());
    if flags & FI_TRIGGER != 0 {
        let d = ofi_core::Deferred::Atomic {
            kind: c.kind,
            op: c.op,
            datatype: c.datatype,
            operand: c.operand.to_vec(),
            compare: c.compare.to_vec(),
            result: c.result.to_vec(),
            addr: c.peer,
            rma_ioc: c.rma_ioc.to_vec(),
            context: c.context as usize,
            flags,
        };
        // SAFETY: with FI_TRIGGER the context is the application's fi_triggered_context
        // (fi_trigger(3)); the operand, compare and result memory stay valid until the deferred
        // atomic completes (this function's contract).
        return unsafe { super::trigger(e, c.context, d) };
    }
    let op = AtomicOp {
        kind: c.kind,
        op: c.op,
        datatype: c.datatype,
        operand: c.operand,
        compare: c.compare,
        result: c.result,
        desc: c.desc,
        addr: c.peer,
        rma_ioc: c.rma_ioc,
        data: c.data,
        context: c.context as usize,
        flags,
    };
    // SAFETY: operand, compare and result memory stay valid until completion (this function's
    // contract), as `post_atomic` requires.
    sret(unsafe { e.post_atomic(&op) })
}

/// An `fi_ioc` list as the raw layer's.
///
/// # Safety
/// `p` holds `n` entries.
unsafe fn iocs<'a>(p: *const fi_ioc, n: usize) -> Option<&'a [Ioc]> {
    // SAFETY: Ioc has fi_ioc's layout; the caller's contract.
    unsafe { crate::obj::array(p.cast::<Ioc>(), n) }
}

/// An `fi_rma_ioc` list as the raw layer's.
///
/// # Safety
/// `p` holds `n` entries.
unsafe fn rma_iocs<'a>(p: *const fi_rma_ioc, n: usize) -> Option<&'a [RmaIoc]> {
    // SAFETY: RmaIoc has fi_rma_ioc's layout; the caller's contract.
    unsafe { crate::obj::array(p.cast::<RmaIoc>(), n) }
}

fn total(l: &[Ioc]) -> usize {
    l.iter().fold(0usize, |a, v| a.saturating_add(v.count))
}

/// One buffer as an ioc list; a NULL buffer is no operand (FI_ATOMIC_READ).
fn one(buf: *const c_void, count: usize) -> [Ioc; 1] {
    [Ioc {
        addr: buf as usize,
        count,
    }]
}

fn opt_list(l: &[Ioc; 1]) -> &[Ioc] {
    if l[0].addr == 0 {
        &[]
    } else {
        l
    }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn atomic_write(
    p: *mut fid_ep,
    buf: *const c_void,
    count: size_t,
    desc: *mut c_void,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    datatype: fi_datatype,
    op: fi_op,
    context: *mut c_void,
) -> ssize_t {
    hot(PANIC_S, || {
        if buf.is_null() {
            return EINVAL_S;
        }
        let o = one(buf, count);
        let d = [desc as u64];
        let r = [RmaIoc { addr, count, key }];
        let c = Call {
            operand: &o,
            desc: one_desc(&d),
            ..Call::new(AtomicKind::Basic, op, datatype, dest, &r, context)
        };
        // SAFETY: the application keeps buf valid until completion.
        unsafe { post(p, c) }
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn atomic_writev(
    p: *mut fid_ep,
    iov: *const fi_ioc,
    desc: *mut *mut c_void,
    count: size_t,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    datatype: fi_datatype,
    op: fi_op,
    context: *mut c_void,
) -> ssize_t {
    hot(PANIC_S, || {
        // SAFETY: iov / desc hold count entries.
        let (Some(o), d) = (unsafe { iocs(iov, count) }, unsafe { descs(desc, count) }) else {
            return EINVAL_S;
        };
        let r = [RmaIoc {
            addr,
            count: total(o),
            key,
        }];
        let c = Call {
            operand: o,
            desc: d,
            ..Call::new(AtomicKind::Basic, op, datatype, dest, &r, context)
        };
        // SAFETY: the application keeps the operands valid until completion.
        unsafe { post(p, c) }
    })
}

/// An `fi_msg_atomic` with its operand, descriptor and remote lists.
type MsgParts<'a> = (&'a fi_msg_atomic, &'a [Ioc], &'a [u64], &'a [RmaIoc]);

/// The parts of an `fi_msg_atomic`.
///
/// # Safety
/// `msg` is NULL or valid, its lists holding their counts.
unsafe fn msg_parts<'a>(msg: *const fi_msg_atomic) -> Option<MsgParts<'a>> {
    if msg.is_null() {
        return None;
    }
    // SAFETY: the caller's contract.
    unsafe {
        let m = &*msg;
        let o = iocs(m.msg_iov, m.iov_count)?;
        let d = descs(m.desc, m.iov_count);
        let r = rma_iocs(m.rma_iov, m.rma_iov_count)?;
        Some((m, o, d, r))
    }
}

unsafe extern "C" fn atomic_writemsg(
    p: *mut fid_ep,
    msg: *const fi_msg_atomic,
    flags: u64,
) -> ssize_t {
    hot(PANIC_S, || {
        // SAFETY: msg is NULL or a valid message.
        let Some(parts) = (unsafe { msg_parts(msg) }) else {
            return EINVAL_S;
        };
        let c = Call::msg(AtomicKind::Basic, parts, flags);
        // SAFETY: the application keeps the operands valid until completion.
        unsafe { post(p, c) }
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn atomic_inject(
    p: *mut fid_ep,
    buf: *const c_void,
    count: size_t,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    datatype: fi_datatype,
    op: fi_op,
) -> ssize_t {
    hot(PANIC_S, || {
        if buf.is_null() {
            return EINVAL_S;
        }
        let o = one(buf, count);
        let r = [RmaIoc { addr, count, key }];
        let none = std::ptr::null_mut();
        let c = Call {
            operand: &o,
            flags: Flags::Inject(FI_INJECT),
            ..Call::new(AtomicKind::Basic, op, datatype, dest, &r, none)
        };
        // SAFETY: FI_INJECT: the operands are read before the call returns.
        unsafe { post(p, c) }
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn atomic_readwrite(
    p: *mut fid_ep,
    buf: *const c_void,
    count: size_t,
    desc: *mut c_void,
    result: *mut c_void,
    _result_desc: *mut c_void,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    datatype: fi_datatype,
    op: fi_op,
    context: *mut c_void,
) -> ssize_t {
    hot(PANIC_S, || {
        if result.is_null() || (buf.is_null() && op != atomic_op::FI_ATOMIC_READ) {
            return EINVAL_S;
        }
        let o = one(buf, count);
        let res = one(result, count);
        let d = [desc as u64];
        let r = [RmaIoc { addr, count, key }];
        let c = Call {
            operand: opt_list(&o),
            result: &res,
            desc: one_desc(&d),
            ..Call::new(AtomicKind::Fetch, op, datatype, dest, &r, context)
        };
        // SAFETY: the application keeps the buffers valid until completion.
        unsafe { post(p, c) }
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn atomic_readwritev(
    p: *mut fid_ep,
    iov: *const fi_ioc,
    desc: *mut *mut c_void,
    count: size_t,
    resultv: *mut fi_ioc,
    _result_desc: *mut *mut c_void,
    result_count: size_t,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    datatype: fi_datatype,
    op: fi_op,
    context: *mut c_void,
) -> ssize_t {
    hot(PANIC_S, || {
        // SAFETY: the lists hold their counts of entries.
        let (Some(o), d, Some(res)) = (
            unsafe { iocs(iov, count) },
            unsafe { descs(desc, count) },
            unsafe { iocs(resultv.cast_const(), result_count) },
        ) else {
            return EINVAL_S;
        };
        let r = [RmaIoc {
            addr,
            count: total(res),
            key,
        }];
        let c = Call {
            operand: o,
            result: res,
            desc: d,
            ..Call::new(AtomicKind::Fetch, op, datatype, dest, &r, context)
        };
        // SAFETY: the application keeps the buffers valid until completion.
        unsafe { post(p, c) }
    })
}

unsafe extern "C" fn atomic_readwritemsg(
    p: *mut fid_ep,
    msg: *const fi_msg_atomic,
    resultv: *mut fi_ioc,
    _result_desc: *mut *mut c_void,
    result_count: size_t,
    flags: u64,
) -> ssize_t {
    hot(PANIC_S, || {
        // SAFETY: msg is NULL or a valid message; resultv holds result_count.
        let (Some(parts), Some(res)) = (unsafe { msg_parts(msg) }, unsafe {
            iocs(resultv.cast_const(), result_count)
        }) else {
            return EINVAL_S;
        };
        let c = Call {
            result: res,
            ..Call::msg(AtomicKind::Fetch, parts, flags)
        };
        // SAFETY: the application keeps the buffers valid until completion.
        unsafe { post(p, c) }
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn atomic_compwrite(
    p: *mut fid_ep,
    buf: *const c_void,
    count: size_t,
    desc: *mut c_void,
    compare: *const c_void,
    _compare_desc: *mut c_void,
    result: *mut c_void,
    _result_desc: *mut c_void,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    datatype: fi_datatype,
    op: fi_op,
    context: *mut c_void,
) -> ssize_t {
    hot(PANIC_S, || {
        if buf.is_null() || compare.is_null() || result.is_null() {
            return EINVAL_S;
        }
        let o = one(buf, count);
        let cmp = one(compare, count);
        let res = one(result, count);
        let d = [desc as u64];
        let r = [RmaIoc { addr, count, key }];
        let c = Call {
            operand: &o,
            compare: &cmp,
            result: &res,
            desc: one_desc(&d),
            ..Call::new(AtomicKind::Compare, op, datatype, dest, &r, context)
        };
        // SAFETY: the application keeps the buffers valid until completion.
        unsafe { post(p, c) }
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn atomic_compwritev(
    p: *mut fid_ep,
    iov: *const fi_ioc,
    desc: *mut *mut c_void,
    count: size_t,
    comparev: *const fi_ioc,
    _compare_desc: *mut *mut c_void,
    compare_count: size_t,
    resultv: *mut fi_ioc,
    _result_desc: *mut *mut c_void,
    result_count: size_t,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    datatype: fi_datatype,
    op: fi_op,
    context: *mut c_void,
) -> ssize_t {
    hot(PANIC_S, || {
        // SAFETY: the lists hold their counts of entries.
        let (Some(o), d, Some(cmp), Some(res)) = (
            unsafe { iocs(iov, count) },
            unsafe { descs(desc, count) },
            unsafe { iocs(comparev, compare_count) },
            unsafe { iocs(resultv.cast_const(), result_count) },
        ) else {
            return EINVAL_S;
        };
        let r = [RmaIoc {
            addr,
            count: total(o),
            key,
        }];
        let c = Call {
            operand: o,
            compare: cmp,
            result: res,
            desc: d,
            ..Call::new(AtomicKind::Compare, op, datatype, dest, &r, context)
        };
        // SAFETY: the application keeps the buffers valid until completion.
        unsafe { post(p, c) }
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn atomic_compwritemsg(
    p: *mut fid_ep,
    msg: *const fi_msg_atomic,
    comparev: *const fi_ioc,
    _compare_desc: *mut *mut c_void,
    compare_count: size_t,
    resultv: *mut fi_ioc,
    _result_desc: *mut *mut c_void,
    result_count: size_t,
    flags: u64,
) -> ssize_t {
    hot(PANIC_S, || {
        // SAFETY: msg is NULL or a valid message; the lists hold their counts.
        let (Some(parts), Some(cmp), Some(res)) = (
            unsafe { msg_parts(msg) },
            unsafe { iocs(comparev, compare_count) },
            unsafe { iocs(resultv.cast_const(), result_count) },
        ) else {
            return EINVAL_S;
        };
        let c = Call {
            compare: cmp,
            result: res,
            ..Call::msg(AtomicKind::Compare, parts, flags)
        };
        // SAFETY: the application keeps the buffers valid until completion.
        unsafe { post(p, c) }
    })
}

/// The `*valid` queries: 0 with the largest element count, or
/// -FI_EOPNOTSUPP.
///
/// # Safety
/// `count` is NULL or writable.
unsafe fn valid(p: *mut fid_ep, datatype: u32, op: u32, count: *mut size_t, flags: u64) -> c_int {
    // SAFETY: p is NULL or a fid of the application.
    let Some((_, e)) = (unsafe { ep(p) }) else {
        return EINVAL;
    };
    if count.is_null() {
        return EINVAL;
    }
    match e.query_atomic(datatype, op, flags) {
        Ok(n) => {
            // SAFETY: count is non-null and writable.
            unsafe { *count = n };
            0
        }
        Err(err) => guard::err(&err),
    }
}

unsafe extern "C" fn atomic_writevalid(
    p: *mut fid_ep,
    datatype: fi_datatype,
    op: fi_op,
    count: *mut size_t,
) -> c_int {
    // SAFETY: the application's fi_atomicvalid(3) arguments, passed on unchanged: `count` is NULL
    // or writable, as `valid` requires.
    hot(PANIC, || unsafe { valid(p, datatype, op, count, 0) })
}

unsafe extern "C" fn atomic_readwritevalid(
    p: *mut fid_ep,
    datatype: fi_datatype,
    op: fi_op,
    count: *mut size_t,
) -> c_int {
    // SAFETY: the application's fi_fetch_atomicvalid(3) arguments, passed on unchanged: `count` is
    // NULL or writable, as `valid` requires.
    hot(PANIC, || unsafe {
        valid(p, datatype, op, count, FI_FETCH_ATOMIC)
    })
}

unsafe extern "C" fn atomic_compwritevalid(
    p: *mut fid_ep,
    datatype: fi_datatype,
    op: fi_op,
    count: *mut size_t,
) -> c_int {
    // SAFETY: the application's fi_compare_atomicvalid(3) arguments, passed on unchanged: `count`
    // is NULL or writable, as `valid` requires.
    hot(PANIC, || unsafe {
        valid(p, datatype, op, count, FI_COMPARE_ATOMIC)
    })
}

static ATOMIC_OPS: fi_ops_atomic = fi_ops_atomic {
    size: std::mem::size_of::<fi_ops_atomic>(),
    write: Some(atomic_write),
    writev: Some(atomic_writev),
    writemsg: Some(atomic_writemsg),
    inject: Some(atomic_inject),
    readwrite: Some(atomic_readwrite),
    readwritev: Some(atomic_readwritev),
    readwritemsg: Some(atomic_readwritemsg),
    compwrite: Some(atomic_compwrite),
    compwritev: Some(atomic_compwritev),
    compwritemsg: Some(atomic_compwritemsg),
    writevalid: Some(atomic_writevalid),
    readwritevalid: Some(atomic_readwritevalid),
    compwritevalid: Some(atomic_compwritevalid),
};

/// The endpoints' `fi_ops_atomic` table.
pub(crate) fn atomic_ops_table() -> *mut fi_ops_atomic {
    &ATOMIC_OPS as *const fi_ops_atomic as *mut fi_ops_atomic
}
