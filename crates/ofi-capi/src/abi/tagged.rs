//! `rdma/fi_tagged.h`: tagged messages.

use crate::abi::{fi_addr_t, fid_ep};
use libc::{c_void, iovec, size_t, ssize_t};

/// A tagged message description (`struct fi_msg_tagged`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_msg_tagged {
    /// Buffers.
    pub msg_iov: *const iovec,
    /// Memory descriptors.
    pub desc: *mut *mut c_void,
    /// Number of buffers.
    pub iov_count: size_t,
    /// Peer address.
    pub addr: fi_addr_t,
    /// Tag.
    pub tag: u64,
    /// Tag bits to ignore (receives).
    pub ignore: u64,
    /// Operation context.
    pub context: *mut c_void,
    /// Remote CQ data.
    pub data: u64,
}

/// Tagged operations (`struct fi_ops_tagged`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_ops_tagged {
    /// Size of this table.
    pub size: size_t,
    /// `fi_trecv`.
    pub recv: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            buf: *mut c_void,
            len: size_t,
            desc: *mut c_void,
            src_addr: fi_addr_t,
            tag: u64,
            ignore: u64,
            context: *mut c_void,
        ) -> ssize_t,
    >,
    /// `fi_trecvv`.
    pub recvv: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            iov: *const iovec,
            desc: *mut *mut c_void,
            count: size_t,
            src_addr: fi_addr_t,
            tag: u64,
            ignore: u64,
            context: *mut c_void,
        ) -> ssize_t,
    >,
    /// `fi_trecvmsg`.
    pub recvmsg: Option<
        unsafe extern "C" fn(ep: *mut fid_ep, msg: *const fi_msg_tagged, flags: u64) -> ssize_t,
    >,
    /// `fi_tsend`.
    pub send: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            buf: *const c_void,
            len: size_t,
            desc: *mut c_void,
            dest_addr: fi_addr_t,
            tag: u64,
            context: *mut c_void,
        ) -> ssize_t,
    >,
    /// `fi_tsendv`.
    pub sendv: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            iov: *const iovec,
            desc: *mut *mut c_void,
            count: size_t,
            dest_addr: fi_addr_t,
            tag: u64,
            context: *mut c_void,
        ) -> ssize_t,
    >,
    /// `fi_tsendmsg`.
    pub sendmsg: Option<
        unsafe extern "C" fn(ep: *mut fid_ep, msg: *const fi_msg_tagged, flags: u64) -> ssize_t,
    >,
    /// `fi_tinject`.
    pub inject: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            buf: *const c_void,
            len: size_t,
            dest_addr: fi_addr_t,
            tag: u64,
        ) -> ssize_t,
    >,
    /// `fi_tsenddata`.
    pub senddata: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            buf: *const c_void,
            len: size_t,
            desc: *mut c_void,
            data: u64,
            dest_addr: fi_addr_t,
            tag: u64,
            context: *mut c_void,
        ) -> ssize_t,
    >,
    /// `fi_tinjectdata`.
    pub injectdata: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            buf: *const c_void,
            len: size_t,
            data: u64,
            dest_addr: fi_addr_t,
            tag: u64,
        ) -> ssize_t,
    >,
}
