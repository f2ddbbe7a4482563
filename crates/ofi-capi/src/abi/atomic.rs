//! `rdma/fi_atomic.h`: atomic operations.

use crate::abi::{fi_addr_t, fi_datatype, fi_ioc, fi_op, fi_rma_ioc, fid_ep};
use libc::{c_int, c_void, size_t, ssize_t};

/// What an atomic (datatype, op) pair supports (`struct fi_atomic_attr`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct fi_atomic_attr {
    /// Largest element count of one operation.
    pub count: size_t,
    /// Size of one element.
    pub size: size_t,
}

/// An atomic message description (`struct fi_msg_atomic`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_msg_atomic {
    /// Local operand buffers.
    pub msg_iov: *const fi_ioc,
    /// Memory descriptors.
    pub desc: *mut *mut c_void,
    /// Number of local buffers.
    pub iov_count: size_t,
    /// Peer address.
    pub addr: fi_addr_t,
    /// Remote buffers.
    pub rma_iov: *const fi_rma_ioc,
    /// Number of remote buffers.
    pub rma_iov_count: size_t,
    /// Element type.
    pub datatype: fi_datatype,
    /// Operation.
    pub op: fi_op,
    /// Operation context.
    pub context: *mut c_void,
    /// Remote CQ data.
    pub data: u64,
}

/// Result buffers of a fetching atomic (`struct fi_msg_fetch`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_msg_fetch {
    /// Result buffers.
    pub msg_iov: *mut fi_ioc,
    /// Memory descriptors.
    pub desc: *mut *mut c_void,
    /// Number of buffers.
    pub iov_count: size_t,
}

/// Compare buffers of a compare atomic (`struct fi_msg_compare`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_msg_compare {
    /// Compare buffers.
    pub msg_iov: *const fi_ioc,
    /// Memory descriptors.
    pub desc: *mut *mut c_void,
    /// Number of buffers.
    pub iov_count: size_t,
}

/// Atomic operations (`struct fi_ops_atomic`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_ops_atomic {
    /// Size of this table.
    pub size: size_t,
    /// `fi_atomic`.
    pub write: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            buf: *const c_void,
            count: size_t,
            desc: *mut c_void,
            dest_addr: fi_addr_t,
            addr: u64,
            key: u64,
            datatype: fi_datatype,
            op: fi_op,
            context: *mut c_void,
        ) -> ssize_t,
    >,
    /// `fi_atomicv`.
    pub writev: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            iov: *const fi_ioc,
            desc: *mut *mut c_void,
            count: size_t,
            dest_addr: fi_addr_t,
            addr: u64,
            key: u64,
            datatype: fi_datatype,
            op: fi_op,
            context: *mut c_void,
        ) -> ssize_t,
    >,
    /// `fi_atomicmsg`.
    pub writemsg: Option<
        unsafe extern "C" fn(ep: *mut fid_ep, msg: *const fi_msg_atomic, flags: u64) -> ssize_t,
    >,
    /// `fi_inject_atomic`.
    pub inject: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            buf: *const c_void,
            count: size_t,
            dest_addr: fi_addr_t,
            addr: u64,
            key: u64,
            datatype: fi_datatype,
            op: fi_op,
        ) -> ssize_t,
    >,
    /// `fi_fetch_atomic`.
    pub readwrite: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            buf: *const c_void,
            count: size_t,
            desc: *mut c_void,
            result: *mut c_void,
            result_desc: *mut c_void,
            dest_addr: fi_addr_t,
            addr: u64,
            key: u64,
            datatype: fi_datatype,
            op: fi_op,
            context: *mut c_void,
        ) -> ssize_t,
    >,
    /// `fi_fetch_atomicv`.
    pub readwritev: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            iov: *const fi_ioc,
            desc: *mut *mut c_void,
            count: size_t,
            resultv: *mut fi_ioc,
            result_desc: *mut *mut c_void,
            result_count: size_t,
            dest_addr: fi_addr_t,
            addr: u64,
            key: u64,
            datatype: fi_datatype,
            op: fi_op,
            context: *mut c_void,
        ) -> ssize_t,
    >,
    /// `fi_fetch_atomicmsg`.
    pub readwritemsg: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            msg: *const fi_msg_atomic,
            resultv: *mut fi_ioc,
            result_desc: *mut *mut c_void,
            result_count: size_t,
            flags: u64,
        ) -> ssize_t,
    >,
    /// `fi_compare_atomic`.
    pub compwrite: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            buf: *const c_void,
            count: size_t,
            desc: *mut c_void,
            compare: *const c_void,
            compare_desc: *mut c_void,
            result: *mut c_void,
            result_desc: *mut c_void,
            dest_addr: fi_addr_t,
            addr: u64,
            key: u64,
            datatype: fi_datatype,
            op: fi_op,
            context: *mut c_void,
        ) -> ssize_t,
    >,
    /// `fi_compare_atomicv`.
    pub compwritev: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            iov: *const fi_ioc,
            desc: *mut *mut c_void,
            count: size_t,
            comparev: *const fi_ioc,
            compare_desc: *mut *mut c_void,
            compare_count: size_t,
            resultv: *mut fi_ioc,
            result_desc: *mut *mut c_void,
            result_count: size_t,
            dest_addr: fi_addr_t,
            addr: u64,
            key: u64,
            datatype: fi_datatype,
            op: fi_op,
            context: *mut c_void,
        ) -> ssize_t,
    >,
    /// `fi_compare_atomicmsg`.
    pub compwritemsg: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            msg: *const fi_msg_atomic,
            comparev: *const fi_ioc,
            compare_desc: *mut *mut c_void,
            compare_count: size_t,
            resultv: *mut fi_ioc,
            result_desc: *mut *mut c_void,
            result_count: size_t,
            flags: u64,
        ) -> ssize_t,
    >,
    /// `fi_atomicvalid`.
    pub writevalid: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            datatype: fi_datatype,
            op: fi_op,
            count: *mut size_t,
        ) -> c_int,
    >,
    /// `fi_fetch_atomicvalid`.
    pub readwritevalid: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            datatype: fi_datatype,
            op: fi_op,
            count: *mut size_t,
        ) -> c_int,
    >,
    /// `fi_compare_atomicvalid`.
    pub compwritevalid: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            datatype: fi_datatype,
            op: fi_op,
            count: *mut size_t,
        ) -> c_int,
    >,
}
