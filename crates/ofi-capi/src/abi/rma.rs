//! `rdma/fi_rma.h`: one-sided reads and writes.

use crate::abi::{fi_addr_t, fid_ep};
use libc::{c_void, iovec, size_t, ssize_t};

/// A remote buffer in bytes (`struct fi_rma_iov`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct fi_rma_iov {
    /// Remote address (or offset).
    pub addr: u64,
    /// Length.
    pub len: size_t,
    /// Remote key.
    pub key: u64,
}

/// A remote buffer in elements (`struct fi_rma_ioc`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct fi_rma_ioc {
    /// Remote address (or offset).
    pub addr: u64,
    /// Element count.
    pub count: size_t,
    /// Remote key.
    pub key: u64,
}

/// An RMA message description (`struct fi_msg_rma`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_msg_rma {
    /// Local buffers.
    pub msg_iov: *const iovec,
    /// Memory descriptors.
    pub desc: *mut *mut c_void,
    /// Number of local buffers.
    pub iov_count: size_t,
    /// Peer address.
    pub addr: fi_addr_t,
    /// Remote buffers.
    pub rma_iov: *const fi_rma_iov,
    /// Number of remote buffers.
    pub rma_iov_count: size_t,
    /// Operation context.
    pub context: *mut c_void,
    /// Remote CQ data.
    pub data: u64,
}

/// RMA operations (`struct fi_ops_rma`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_ops_rma {
    /// Size of this table.
    pub size: size_t,
    /// `fi_read`.
    pub read: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            buf: *mut c_void,
            len: size_t,
            desc: *mut c_void,
            src_addr: fi_addr_t,
            addr: u64,
            key: u64,
            context: *mut c_void,
        ) -> ssize_t,
    >,
    /// `fi_readv`.
    pub readv: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            iov: *const iovec,
            desc: *mut *mut c_void,
            count: size_t,
            src_addr: fi_addr_t,
            addr: u64,
            key: u64,
            context: *mut c_void,
        ) -> ssize_t,
    >,
    /// `fi_readmsg`.
    pub readmsg: Option<
        unsafe extern "C" fn(ep: *mut fid_ep, msg: *const fi_msg_rma, flags: u64) -> ssize_t,
    >,
    /// `fi_write`.
    pub write: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            buf: *const c_void,
            len: size_t,
            desc: *mut c_void,
            dest_addr: fi_addr_t,
            addr: u64,
            key: u64,
            context: *mut c_void,
        ) -> ssize_t,
    >,
    /// `fi_writev`.
    pub writev: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            iov: *const iovec,
            desc: *mut *mut c_void,
            count: size_t,
            dest_addr: fi_addr_t,
            addr: u64,
            key: u64,
            context: *mut c_void,
        ) -> ssize_t,
    >,
    /// `fi_writemsg`.
    pub writemsg: Option<
        unsafe extern "C" fn(ep: *mut fid_ep, msg: *const fi_msg_rma, flags: u64) -> ssize_t,
    >,
    /// `fi_inject_write`.
    pub inject: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            buf: *const c_void,
            len: size_t,
            dest_addr: fi_addr_t,
            addr: u64,
            key: u64,
        ) -> ssize_t,
    >,
    /// `fi_writedata`.
    pub writedata: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            buf: *const c_void,
            len: size_t,
            desc: *mut c_void,
            data: u64,
            dest_addr: fi_addr_t,
            addr: u64,
            key: u64,
            context: *mut c_void,
        ) -> ssize_t,
    >,
    /// `fi_inject_writedata`.
    pub injectdata: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            buf: *const c_void,
            len: size_t,
            data: u64,
            dest_addr: fi_addr_t,
            addr: u64,
            key: u64,
        ) -> ssize_t,
    >,
}
