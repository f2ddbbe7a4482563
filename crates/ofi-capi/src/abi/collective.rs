//! `rdma/fi_collective.h`: address vector sets and collective operations.

use crate::abi::{
    fi_addr_t, fi_atomic_attr, fi_collective_op, fi_datatype, fi_ioc, fi_op, fid, fid_ep,
};
use libc::{c_int, c_void, size_t, ssize_t};

/// Address vector set operations (`struct fi_ops_av_set`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_ops_av_set {
    /// Size of this table.
    pub size: size_t,
    /// `fi_av_set_union`.
    pub set_union:
        Option<unsafe extern "C" fn(dst: *mut fid_av_set, src: *const fid_av_set) -> c_int>,
    /// `fi_av_set_intersect`.
    pub intersect:
        Option<unsafe extern "C" fn(dst: *mut fid_av_set, src: *const fid_av_set) -> c_int>,
    /// `fi_av_set_diff`.
    pub diff: Option<unsafe extern "C" fn(dst: *mut fid_av_set, src: *const fid_av_set) -> c_int>,
    /// `fi_av_set_insert`.
    pub insert: Option<unsafe extern "C" fn(set: *mut fid_av_set, addr: fi_addr_t) -> c_int>,
    /// `fi_av_set_remove`.
    pub remove: Option<unsafe extern "C" fn(set: *mut fid_av_set, addr: fi_addr_t) -> c_int>,
    /// `fi_av_set_addr`.
    pub addr:
        Option<unsafe extern "C" fn(set: *mut fid_av_set, coll_addr: *mut fi_addr_t) -> c_int>,
}

/// An address vector set (`struct fid_av_set`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fid_av_set {
    /// Object header.
    pub fid: fid,
    /// AV set operations.
    pub ops: *mut fi_ops_av_set,
}

/// What a collective supports (`struct fi_collective_attr`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_collective_attr {
    /// Reduction operation.
    pub op: fi_op,
    /// Element type.
    pub datatype: fi_datatype,
    /// Element limits.
    pub datatype_attr: fi_atomic_attr,
    /// Largest group.
    pub max_members: size_t,
    /// Mode bits.
    pub mode: u64,
}

/// Argument of `FI_JOIN` on a collective group (`struct fi_collective_addr`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_collective_addr {
    /// The AV set.
    pub set: *const fid_av_set,
    /// Collective address.
    pub coll_addr: fi_addr_t,
}

/// A collective message description (`struct fi_msg_collective`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_msg_collective {
    /// Operand buffers.
    pub msg_iov: *const fi_ioc,
    /// Memory descriptors.
    pub desc: *mut *mut c_void,
    /// Number of buffers.
    pub iov_count: size_t,
    /// Group address.
    pub coll_addr: fi_addr_t,
    /// Root of the collective.
    pub root_addr: fi_addr_t,
    /// Collective.
    pub coll: fi_collective_op,
    /// Element type.
    pub datatype: fi_datatype,
    /// Reduction operation.
    pub op: fi_op,
    /// Operation context.
    pub context: *mut c_void,
}

/// The slot type of `fi_alltoall` and `fi_allgather`, which share it.
pub type coll_gatherlike_fn = unsafe extern "C" fn(
    ep: *mut fid_ep,
    buf: *const c_void,
    count: size_t,
    desc: *mut c_void,
    result: *mut c_void,
    result_desc: *mut c_void,
    coll_addr: fi_addr_t,
    datatype: fi_datatype,
    flags: u64,
    context: *mut c_void,
) -> ssize_t;

/// The slot type of `fi_allreduce` and `fi_reduce_scatter`, which share it.
pub type coll_reducelike_fn = unsafe extern "C" fn(
    ep: *mut fid_ep,
    buf: *const c_void,
    count: size_t,
    desc: *mut c_void,
    result: *mut c_void,
    result_desc: *mut c_void,
    coll_addr: fi_addr_t,
    datatype: fi_datatype,
    op: fi_op,
    flags: u64,
    context: *mut c_void,
) -> ssize_t;

/// The slot type of `fi_scatter` and `fi_gather`, which share it.
pub type coll_rooted_fn = unsafe extern "C" fn(
    ep: *mut fid_ep,
    buf: *const c_void,
    count: size_t,
    desc: *mut c_void,
    result: *mut c_void,
    result_desc: *mut c_void,
    coll_addr: fi_addr_t,
    root_addr: fi_addr_t,
    datatype: fi_datatype,
    flags: u64,
    context: *mut c_void,
) -> ssize_t;

/// Collective operations (`struct fi_ops_collective`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_ops_collective {
    /// Size of this table.
    pub size: size_t,
    /// `fi_barrier`.
    pub barrier: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            coll_addr: fi_addr_t,
            context: *mut c_void,
        ) -> ssize_t,
    >,
    /// `fi_broadcast`.
    pub broadcast: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            buf: *mut c_void,
            count: size_t,
            desc: *mut c_void,
            coll_addr: fi_addr_t,
            root_addr: fi_addr_t,
            datatype: fi_datatype,
            flags: u64,
            context: *mut c_void,
        ) -> ssize_t,
    >,
    /// `fi_alltoall`.
    pub alltoall: Option<coll_gatherlike_fn>,
    /// `fi_allreduce`.
    pub allreduce: Option<coll_reducelike_fn>,
    /// `fi_allgather`.
    pub allgather: Option<coll_gatherlike_fn>,
    /// `fi_reduce_scatter`.
    pub reduce_scatter: Option<coll_reducelike_fn>,
    /// `fi_reduce`.
    pub reduce: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            buf: *const c_void,
            count: size_t,
            desc: *mut c_void,
            result: *mut c_void,
            result_desc: *mut c_void,
            coll_addr: fi_addr_t,
            root_addr: fi_addr_t,
            datatype: fi_datatype,
            op: fi_op,
            flags: u64,
            context: *mut c_void,
        ) -> ssize_t,
    >,
    /// `fi_scatter`.
    pub scatter: Option<coll_rooted_fn>,
    /// `fi_gather`.
    pub gather: Option<coll_rooted_fn>,
    /// `fi_collectivemsg`.
    pub msg: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            msg: *const fi_msg_collective,
            resultv: *mut fi_ioc,
            result_desc: *mut *mut c_void,
            result_count: size_t,
            flags: u64,
        ) -> ssize_t,
    >,
    /// `fi_barrier2`.
    pub barrier2: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            coll_addr: fi_addr_t,
            flags: u64,
            context: *mut c_void,
        ) -> ssize_t,
    >,
}
