//! `rdma/fi_endpoint.h`: endpoints, their base and message operations.

use crate::abi::{
    fi_addr_t, fi_ops_atomic, fi_ops_cm, fi_ops_collective, fi_ops_rma, fi_ops_tagged, fi_rx_attr,
    fi_tx_attr, fid, fid_t,
};
use libc::{c_int, c_void, iovec, size_t, ssize_t};

/// A message description (`struct fi_msg`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_msg {
    /// Buffers.
    pub msg_iov: *const iovec,
    /// Memory descriptors, one per buffer.
    pub desc: *mut *mut c_void,
    /// Number of buffers.
    pub iov_count: size_t,
    /// Peer address.
    pub addr: fi_addr_t,
    /// Operation context.
    pub context: *mut c_void,
    /// Remote CQ data.
    pub data: u64,
}

/// Endpoint base operations (`struct fi_ops_ep`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_ops_ep {
    /// Size of this table.
    pub size: size_t,
    /// `fi_cancel`.
    pub cancel: Option<unsafe extern "C" fn(fid: fid_t, context: *mut c_void) -> ssize_t>,
    /// `fi_getopt`.
    pub getopt: Option<
        unsafe extern "C" fn(
            fid: fid_t,
            level: c_int,
            optname: c_int,
            optval: *mut c_void,
            optlen: *mut size_t,
        ) -> c_int,
    >,
    /// `fi_setopt`.
    pub setopt: Option<
        unsafe extern "C" fn(
            fid: fid_t,
            level: c_int,
            optname: c_int,
            optval: *const c_void,
            optlen: size_t,
        ) -> c_int,
    >,
    /// `fi_tx_context`.
    pub tx_ctx: Option<
        unsafe extern "C" fn(
            sep: *mut fid_ep,
            index: c_int,
            attr: *mut fi_tx_attr,
            tx_ep: *mut *mut fid_ep,
            context: *mut c_void,
        ) -> c_int,
    >,
    /// `fi_rx_context`.
    pub rx_ctx: Option<
        unsafe extern "C" fn(
            sep: *mut fid_ep,
            index: c_int,
            attr: *mut fi_rx_attr,
            rx_ep: *mut *mut fid_ep,
            context: *mut c_void,
        ) -> c_int,
    >,
    /// `fi_rx_size_left`.
    pub rx_size_left: Option<unsafe extern "C" fn(ep: *mut fid_ep) -> ssize_t>,
    /// `fi_tx_size_left`.
    pub tx_size_left: Option<unsafe extern "C" fn(ep: *mut fid_ep) -> ssize_t>,
}

/// Message operations (`struct fi_ops_msg`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_ops_msg {
    /// Size of this table.
    pub size: size_t,
    /// `fi_recv`.
    pub recv: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            buf: *mut c_void,
            len: size_t,
            desc: *mut c_void,
            src_addr: fi_addr_t,
            context: *mut c_void,
        ) -> ssize_t,
    >,
    /// `fi_recvv`.
    pub recvv: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            iov: *const iovec,
            desc: *mut *mut c_void,
            count: size_t,
            src_addr: fi_addr_t,
            context: *mut c_void,
        ) -> ssize_t,
    >,
    /// `fi_recvmsg`.
    pub recvmsg:
        Option<unsafe extern "C" fn(ep: *mut fid_ep, msg: *const fi_msg, flags: u64) -> ssize_t>,
    /// `fi_send`.
    pub send: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            buf: *const c_void,
            len: size_t,
            desc: *mut c_void,
            dest_addr: fi_addr_t,
            context: *mut c_void,
        ) -> ssize_t,
    >,
    /// `fi_sendv`.
    pub sendv: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            iov: *const iovec,
            desc: *mut *mut c_void,
            count: size_t,
            dest_addr: fi_addr_t,
            context: *mut c_void,
        ) -> ssize_t,
    >,
    /// `fi_sendmsg`.
    pub sendmsg:
        Option<unsafe extern "C" fn(ep: *mut fid_ep, msg: *const fi_msg, flags: u64) -> ssize_t>,
    /// `fi_inject`.
    pub inject: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            buf: *const c_void,
            len: size_t,
            dest_addr: fi_addr_t,
        ) -> ssize_t,
    >,
    /// `fi_senddata`.
    pub senddata: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            buf: *const c_void,
            len: size_t,
            desc: *mut c_void,
            data: u64,
            dest_addr: fi_addr_t,
            context: *mut c_void,
        ) -> ssize_t,
    >,
    /// `fi_injectdata`.
    pub injectdata: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            buf: *const c_void,
            len: size_t,
            data: u64,
            dest_addr: fi_addr_t,
        ) -> ssize_t,
    >,
}

/// An endpoint (`struct fid_ep`), also used for scalable endpoints and
/// transmit/receive contexts.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fid_ep {
    /// Object header.
    pub fid: fid,
    /// Base endpoint operations.
    pub ops: *mut fi_ops_ep,
    /// Connection management operations.
    pub cm: *mut fi_ops_cm,
    /// Message operations.
    pub msg: *mut fi_ops_msg,
    /// RMA operations.
    pub rma: *mut fi_ops_rma,
    /// Tagged operations.
    pub tagged: *mut fi_ops_tagged,
    /// Atomic operations.
    pub atomic: *mut fi_ops_atomic,
    /// Collective operations.
    pub collective: *mut fi_ops_collective,
}

/// A passive (listening) endpoint (`struct fid_pep`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fid_pep {
    /// Object header.
    pub fid: fid,
    /// Base endpoint operations.
    pub ops: *mut fi_ops_ep,
    /// Connection management operations.
    pub cm: *mut fi_ops_cm,
}

/// A shared transmit context (`struct fid_stx`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fid_stx {
    /// Object header.
    pub fid: fid,
    /// Base endpoint operations.
    pub ops: *mut fi_ops_ep,
}
