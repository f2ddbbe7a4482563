//! `fi_ops_collective`: barrier, broadcast, alltoall, allreduce,
//! allgather, reduce-scatter, reduce, scatter, gather, the message form
//! and `fi_barrier2`, over the core's collective layer
//! (`ofi_core::Endpoint::collective`). Each completes in the endpoint's
//! transmit CQ with the caller's context and FI_COLLECTIVE.

use super::ep;
use crate::abi::*;
use crate::obj::{ffi, sret, EINVAL_S, PANIC_S};
use ofi_core::consts::coll_op::*;
use ofi_core::CollOp;

/// Posts `op` on the endpoint behind `p`.
///
/// # Safety
/// `p` is NULL or a fid; `op.buf` is readable for the operation's input
/// now and `op.result` (a broadcast's `op.buf`) writable for its output
/// until the operation completes.
unsafe fn post(p: *mut fid_ep, op: CollOp) -> ssize_t {
    // SAFETY: p is NULL or a fid of the application.
    let Some((_, e)) = (unsafe { ep(p) }) else {
        return EINVAL_S;
    };
    // SAFETY: the memory promise of this function's caller is `collective`'s.
    sret(unsafe { e.collective(&op) })
}

unsafe extern "C" fn coll_barrier(
    p: *mut fid_ep,
    coll_addr: fi_addr_t,
    context: *mut c_void,
) -> ssize_t {
    ffi(PANIC_S, || {
        let op = CollOp {
            coll: FI_BARRIER,
            coll_addr,
            context: context as usize,
            ..Default::default()
        };
        // SAFETY: a barrier names no memory.
        unsafe { post(p, op) }
    })
}

unsafe extern "C" fn coll_barrier2(
    p: *mut fid_ep,
    coll_addr: fi_addr_t,
    flags: u64,
    context: *mut c_void,
) -> ssize_t {
    ffi(PANIC_S, || {
        let op = CollOp {
            coll: FI_BARRIER,
            coll_addr,
            flags,
            context: context as usize,
            ..Default::default()
        };
        // SAFETY: a barrier names no memory.
        unsafe { post(p, op) }
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn coll_broadcast(
    p: *mut fid_ep,
    buf: *mut c_void,
    count: size_t,
    _desc: *mut c_void,
    coll_addr: fi_addr_t,
    root_addr: fi_addr_t,
    datatype: fi_datatype,
    flags: u64,
    context: *mut c_void,
) -> ssize_t {
    ffi(PANIC_S, || {
        let op = CollOp {
            coll: FI_BROADCAST,
            buf: buf as usize,
            count,
            coll_addr,
            root_addr,
            datatype,
            flags,
            context: context as usize,
            ..Default::default()
        };
        // SAFETY: fi_broadcast(3): buf holds count elements until completion.
        unsafe { post(p, op) }
    })
}

/// The slots of the collectives without a root: `coll` is the one.
#[allow(clippy::too_many_arguments)]
unsafe fn unrooted(
    coll: u32,
    p: *mut fid_ep,
    buf: *const c_void,
    count: size_t,
    result: *mut c_void,
    coll_addr: fi_addr_t,
    datatype: fi_datatype,
    op: fi_op,
    flags: u64,
    context: *mut c_void,
) -> ssize_t {
    let c = CollOp {
        coll,
        buf: buf as usize,
        count,
        result: result as usize,
        coll_addr,
        datatype,
        op,
        flags,
        context: context as usize,
        ..Default::default()
    };
    // SAFETY: fi_collective(3): buf holds the input now, result has room
    // for the output until completion (the caller's contract).
    unsafe { post(p, c) }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn coll_alltoall(
    p: *mut fid_ep,
    buf: *const c_void,
    count: size_t,
    _desc: *mut c_void,
    result: *mut c_void,
    _result_desc: *mut c_void,
    coll_addr: fi_addr_t,
    datatype: fi_datatype,
    flags: u64,
    context: *mut c_void,
) -> ssize_t {
    ffi(PANIC_S, || {
        // SAFETY: the application's fi_alltoall(3) arguments, passed on.
        unsafe {
            unrooted(
                FI_ALLTOALL,
                p,
                buf,
                count,
                result,
                coll_addr,
                datatype,
                FI_NOOP,
                flags,
                context,
            )
        }
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn coll_allgather(
    p: *mut fid_ep,
    buf: *const c_void,
    count: size_t,
    _desc: *mut c_void,
    result: *mut c_void,
    _result_desc: *mut c_void,
    coll_addr: fi_addr_t,
    datatype: fi_datatype,
    flags: u64,
    context: *mut c_void,
) -> ssize_t {
    ffi(PANIC_S, || {
        // SAFETY: the application's fi_allgather(3) arguments, passed on.
        unsafe {
            unrooted(
                FI_ALLGATHER,
                p,
                buf,
                count,
                result,
                coll_addr,
                datatype,
                FI_NOOP,
                flags,
                context,
            )
        }
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn coll_allreduce(
    p: *mut fid_ep,
    buf: *const c_void,
    count: size_t,
    _desc: *mut c_void,
    result: *mut c_void,
    _result_desc: *mut c_void,
    coll_addr: fi_addr_t,
    datatype: fi_datatype,
    op: fi_op,
    flags: u64,
    context: *mut c_void,
) -> ssize_t {
    ffi(PANIC_S, || {
        // SAFETY: the application's fi_allreduce(3) arguments, passed on.
        unsafe {
            unrooted(
                FI_ALLREDUCE,
                p,
                buf,
                count,
                result,
                coll_addr,
                datatype,
                op,
                flags,
                context,
            )
        }
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn coll_reduce_scatter(
    p: *mut fid_ep,
    buf: *const c_void,
    count: size_t,
    _desc: *mut c_void,
    result: *mut c_void,
    _result_desc: *mut c_void,
    coll_addr: fi_addr_t,
    datatype: fi_datatype,
    op: fi_op,
    flags: u64,
    context: *mut c_void,
) -> ssize_t {
    ffi(PANIC_S, || {
        // SAFETY: the application's fi_reduce_scatter(3) arguments, passed on.
        unsafe {
            unrooted(
                FI_REDUCE_SCATTER,
                p,
                buf,
                count,
                result,
                coll_addr,
                datatype,
                op,
                flags,
                context,
            )
        }
    })
}

/// The slots of the rooted collectives: `coll` is the one.
#[allow(clippy::too_many_arguments)]
unsafe fn rooted(
    coll: u32,
    p: *mut fid_ep,
    buf: *const c_void,
    count: size_t,
    result: *mut c_void,
    coll_addr: fi_addr_t,
    root_addr: fi_addr_t,
    datatype: fi_datatype,
    op: fi_op,
    flags: u64,
    context: *mut c_void,
) -> ssize_t {
    let c = CollOp {
        coll,
        buf: buf as usize,
        count,
        result: result as usize,
        coll_addr,
        root_addr,
        datatype,
        op,
        flags,
        context: context as usize,
    };
    // SAFETY: fi_collective(3): buf holds the input now, result has room
    // for the output until completion (the caller's contract).
    unsafe { post(p, c) }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn coll_reduce(
    p: *mut fid_ep,
    buf: *const c_void,
    count: size_t,
    _desc: *mut c_void,
    result: *mut c_void,
    _result_desc: *mut c_void,
    coll_addr: fi_addr_t,
    root_addr: fi_addr_t,
    datatype: fi_datatype,
    op: fi_op,
    flags: u64,
    context: *mut c_void,
) -> ssize_t {
    ffi(PANIC_S, || {
        // SAFETY: the application's fi_reduce(3) arguments, passed on.
        unsafe {
            rooted(
                FI_REDUCE, p, buf, count, result, coll_addr, root_addr, datatype, op, flags,
                context,
            )
        }
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn coll_scatter(
    p: *mut fid_ep,
    buf: *const c_void,
    count: size_t,
    _desc: *mut c_void,
    result: *mut c_void,
    _result_desc: *mut c_void,
    coll_addr: fi_addr_t,
    root_addr: fi_addr_t,
    datatype: fi_datatype,
    flags: u64,
    context: *mut c_void,
) -> ssize_t {
    ffi(PANIC_S, || {
        // SAFETY: the application's fi_scatter(3) arguments, passed on.
        unsafe {
            rooted(
                FI_SCATTER, p, buf, count, result, coll_addr, root_addr, datatype, FI_NOOP, flags,
                context,
            )
        }
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn coll_gather(
    p: *mut fid_ep,
    buf: *const c_void,
    count: size_t,
    _desc: *mut c_void,
    result: *mut c_void,
    _result_desc: *mut c_void,
    coll_addr: fi_addr_t,
    root_addr: fi_addr_t,
    datatype: fi_datatype,
    flags: u64,
    context: *mut c_void,
) -> ssize_t {
    ffi(PANIC_S, || {
        // SAFETY: the application's fi_gather(3) arguments, passed on.
        unsafe {
            rooted(
                FI_GATHER, p, buf, count, result, coll_addr, root_addr, datatype, FI_NOOP, flags,
                context,
            )
        }
    })
}

/// `fi_collectivemsg`: the collective `msg->coll` with one input range
/// (`msg_iov`, its `count` the element count) and at most one result
/// range; more ranges are `-FI_EINVAL`.
unsafe extern "C" fn coll_msg(
    p: *mut fid_ep,
    msg: *const fi_msg_collective,
    resultv: *mut fi_ioc,
    _result_desc: *mut *mut c_void,
    result_count: size_t,
    flags: u64,
) -> ssize_t {
    ffi(PANIC_S, || {
        if msg.is_null() || result_count > 1 || (result_count == 1 && resultv.is_null()) {
            return EINVAL_S;
        }
        // SAFETY: msg is a readable fi_msg_collective (fi_collective(3)).
        let m = unsafe { *msg };
        if m.iov_count > 1 || (m.iov_count == 1 && m.msg_iov.is_null()) {
            return EINVAL_S;
        }
        let (buf, count) = if m.iov_count == 1 {
            // SAFETY: msg_iov holds iov_count (1) entries.
            let v = unsafe { *m.msg_iov };
            (v.addr as usize, v.count)
        } else {
            (0, 0)
        };
        let result = if result_count == 1 {
            // SAFETY: resultv holds result_count (1) entries.
            unsafe { (*resultv).addr as usize }
        } else {
            0
        };
        let op = CollOp {
            coll: m.coll,
            buf,
            count,
            result,
            coll_addr: m.coll_addr,
            root_addr: m.root_addr,
            datatype: m.datatype,
            op: m.op,
            flags,
            context: m.context as usize,
        };
        // SAFETY: fi_collective(3): the ranges hold the input now and have
        // room for the output until completion.
        unsafe { post(p, op) }
    })
}

/// Every slot filled, each running the core's collectives.
static COLL_OPS: fi_ops_collective = fi_ops_collective {
    size: std::mem::size_of::<fi_ops_collective>(),
    barrier: Some(coll_barrier),
    broadcast: Some(coll_broadcast),
    alltoall: Some(coll_alltoall),
    allreduce: Some(coll_allreduce),
    allgather: Some(coll_allgather),
    reduce_scatter: Some(coll_reduce_scatter),
    reduce: Some(coll_reduce),
    scatter: Some(coll_scatter),
    gather: Some(coll_gather),
    msg: Some(coll_msg),
    barrier2: Some(coll_barrier2),
};

/// The `fi_ops_collective` table of endpoints.
pub(crate) fn coll_ops_table() -> *mut fi_ops_collective {
    &COLL_OPS as *const fi_ops_collective as *mut fi_ops_collective
}
