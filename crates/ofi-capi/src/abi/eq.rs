//! `rdma/fi_eq.h`: wait sets, poll sets, event queues, completion queues, counters.

use crate::abi::{fi_addr_t, fi_info, fid, fid_t};
use libc::{c_char, c_int, c_void, size_t, ssize_t};

/// `enum fi_wait_obj`.
pub type fi_wait_obj = u32;
/// `enum fi_cq_format`.
pub type fi_cq_format = u32;
/// `enum fi_cq_wait_cond`.
pub type fi_cq_wait_cond = u32;
/// `enum fi_cntr_events`.
pub type fi_cntr_events = u32;

/// Wait set attributes (`struct fi_wait_attr`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_wait_attr {
    /// Wait object.
    pub wait_obj: fi_wait_obj,
    /// Flags.
    pub flags: u64,
}

/// Wait set operations (`struct fi_ops_wait`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_ops_wait {
    /// Size of this table.
    pub size: size_t,
    /// `fi_wait`.
    pub wait: Option<unsafe extern "C" fn(waitset: *mut fid_wait, timeout: c_int) -> c_int>,
}

/// A wait set (`struct fid_wait`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fid_wait {
    /// Object header.
    pub fid: fid,
    /// Wait set operations.
    pub ops: *mut fi_ops_wait,
}

/// The FI_WAIT_MUTEX_COND wait object (`struct fi_mutex_cond`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_mutex_cond {
    /// The mutex.
    pub mutex: *mut libc::pthread_mutex_t,
    /// The condition variable.
    pub cond: *mut libc::pthread_cond_t,
}

/// The FI_WAIT_POLLFD wait object (`struct fi_wait_pollfd`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_wait_pollfd {
    /// Bumped whenever the set of fds changes.
    pub change_index: u64,
    /// Number of entries in `fd` (in: capacity, out: count).
    pub nfds: size_t,
    /// The fds.
    pub fd: *mut libc::pollfd,
}

/// Poll set attributes (`struct fi_poll_attr`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct fi_poll_attr {
    /// Flags.
    pub flags: u64,
}

/// Poll set operations (`struct fi_ops_poll`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_ops_poll {
    /// Size of this table.
    pub size: size_t,
    /// `fi_poll`.
    pub poll: Option<
        unsafe extern "C" fn(
            pollset: *mut fid_poll,
            context: *mut *mut c_void,
            count: c_int,
        ) -> c_int,
    >,
    /// `fi_poll_add`.
    pub poll_add: Option<
        unsafe extern "C" fn(pollset: *mut fid_poll, event_fid: *mut fid, flags: u64) -> c_int,
    >,
    /// `fi_poll_del`.
    pub poll_del: Option<
        unsafe extern "C" fn(pollset: *mut fid_poll, event_fid: *mut fid, flags: u64) -> c_int,
    >,
}

/// A poll set (`struct fid_poll`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fid_poll {
    /// Object header.
    pub fid: fid,
    /// Poll set operations.
    pub ops: *mut fi_ops_poll,
}

/// Event queue attributes (`struct fi_eq_attr`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_eq_attr {
    /// Queue depth.
    pub size: size_t,
    /// Flags.
    pub flags: u64,
    /// Wait object.
    pub wait_obj: fi_wait_obj,
    /// Interrupt vector.
    pub signaling_vector: c_int,
    /// Wait set (FI_WAIT_SET).
    pub wait_set: *mut fid_wait,
}

/// A generic event (`struct fi_eq_entry`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_eq_entry {
    /// Object the event is about.
    pub fid: fid_t,
    /// Its context.
    pub context: *mut c_void,
    /// Event data.
    pub data: u64,
}

/// An error event (`struct fi_eq_err_entry`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_eq_err_entry {
    /// Object the error is about.
    pub fid: fid_t,
    /// Its context.
    pub context: *mut c_void,
    /// Event data.
    pub data: u64,
    /// Positive error code.
    pub err: c_int,
    /// Provider error code.
    pub prov_errno: c_int,
    /// Provider error data.
    pub err_data: *mut c_void,
    /// Length of `err_data`.
    pub err_data_size: size_t,
}

/// A connection management event (`struct fi_eq_cm_entry`); connection
/// data follows it in the buffer (a C flexible array member).
#[repr(C)]
#[derive(Debug)]
pub struct fi_eq_cm_entry {
    /// Endpoint or passive endpoint.
    pub fid: fid_t,
    /// The offer of a connection request (freed by the application).
    pub info: *mut fi_info,
    /// Connection data (flexible array).
    pub data: [u8; 0],
}

/// Event queue operations (`struct fi_ops_eq`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_ops_eq {
    /// Size of this table.
    pub size: size_t,
    /// `fi_eq_read`.
    pub read: Option<
        unsafe extern "C" fn(
            eq: *mut fid_eq,
            event: *mut u32,
            buf: *mut c_void,
            len: size_t,
            flags: u64,
        ) -> ssize_t,
    >,
    /// `fi_eq_readerr`.
    pub readerr: Option<
        unsafe extern "C" fn(eq: *mut fid_eq, buf: *mut fi_eq_err_entry, flags: u64) -> ssize_t,
    >,
    /// `fi_eq_write`.
    pub write: Option<
        unsafe extern "C" fn(
            eq: *mut fid_eq,
            event: u32,
            buf: *const c_void,
            len: size_t,
            flags: u64,
        ) -> ssize_t,
    >,
    /// `fi_eq_sread`.
    pub sread: Option<
        unsafe extern "C" fn(
            eq: *mut fid_eq,
            event: *mut u32,
            buf: *mut c_void,
            len: size_t,
            timeout: c_int,
            flags: u64,
        ) -> ssize_t,
    >,
    /// `fi_eq_strerror`.
    pub strerror: Option<
        unsafe extern "C" fn(
            eq: *mut fid_eq,
            prov_errno: c_int,
            err_data: *const c_void,
            buf: *mut c_char,
            len: size_t,
        ) -> *const c_char,
    >,
}

/// An event queue (`struct fid_eq`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fid_eq {
    /// Object header.
    pub fid: fid,
    /// Event queue operations.
    pub ops: *mut fi_ops_eq,
}

/// FI_CQ_FORMAT_CONTEXT entry (`struct fi_cq_entry`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_cq_entry {
    /// Operation context.
    pub op_context: *mut c_void,
}

/// FI_CQ_FORMAT_MSG entry (`struct fi_cq_msg_entry`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_cq_msg_entry {
    /// Operation context.
    pub op_context: *mut c_void,
    /// Completion flags.
    pub flags: u64,
    /// Length received.
    pub len: size_t,
}

/// FI_CQ_FORMAT_DATA entry (`struct fi_cq_data_entry`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_cq_data_entry {
    /// Operation context.
    pub op_context: *mut c_void,
    /// Completion flags.
    pub flags: u64,
    /// Length received.
    pub len: size_t,
    /// Buffer (multi-receive).
    pub buf: *mut c_void,
    /// Remote CQ data.
    pub data: u64,
}

/// FI_CQ_FORMAT_TAGGED entry (`struct fi_cq_tagged_entry`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_cq_tagged_entry {
    /// Operation context.
    pub op_context: *mut c_void,
    /// Completion flags.
    pub flags: u64,
    /// Length received.
    pub len: size_t,
    /// Buffer (multi-receive).
    pub buf: *mut c_void,
    /// Remote CQ data.
    pub data: u64,
    /// Tag.
    pub tag: u64,
}

/// A completion error (`struct fi_cq_err_entry`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_cq_err_entry {
    /// Operation context.
    pub op_context: *mut c_void,
    /// Completion flags.
    pub flags: u64,
    /// Length received.
    pub len: size_t,
    /// Buffer.
    pub buf: *mut c_void,
    /// Remote CQ data.
    pub data: u64,
    /// Tag.
    pub tag: u64,
    /// Overflow length (truncation).
    pub olen: size_t,
    /// Positive error code.
    pub err: c_int,
    /// Provider error code.
    pub prov_errno: c_int,
    /// Provider error data.
    pub err_data: *mut c_void,
    /// Length of `err_data`.
    pub err_data_size: size_t,
}

/// Completion queue attributes (`struct fi_cq_attr`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_cq_attr {
    /// Queue depth.
    pub size: size_t,
    /// Flags.
    pub flags: u64,
    /// Entry format.
    pub format: fi_cq_format,
    /// Wait object.
    pub wait_obj: fi_wait_obj,
    /// Interrupt vector.
    pub signaling_vector: c_int,
    /// Wait condition.
    pub wait_cond: fi_cq_wait_cond,
    /// Wait set (FI_WAIT_SET).
    pub wait_set: *mut fid_wait,
}

/// Completion queue operations (`struct fi_ops_cq`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_ops_cq {
    /// Size of this table.
    pub size: size_t,
    /// `fi_cq_read`.
    pub read:
        Option<unsafe extern "C" fn(cq: *mut fid_cq, buf: *mut c_void, count: size_t) -> ssize_t>,
    /// `fi_cq_readfrom`.
    pub readfrom: Option<
        unsafe extern "C" fn(
            cq: *mut fid_cq,
            buf: *mut c_void,
            count: size_t,
            src_addr: *mut fi_addr_t,
        ) -> ssize_t,
    >,
    /// `fi_cq_readerr`.
    pub readerr: Option<
        unsafe extern "C" fn(cq: *mut fid_cq, buf: *mut fi_cq_err_entry, flags: u64) -> ssize_t,
    >,
    /// `fi_cq_sread`.
    pub sread: Option<
        unsafe extern "C" fn(
            cq: *mut fid_cq,
            buf: *mut c_void,
            count: size_t,
            cond: *const c_void,
            timeout: c_int,
        ) -> ssize_t,
    >,
    /// `fi_cq_sreadfrom`.
    pub sreadfrom: Option<
        unsafe extern "C" fn(
            cq: *mut fid_cq,
            buf: *mut c_void,
            count: size_t,
            src_addr: *mut fi_addr_t,
            cond: *const c_void,
            timeout: c_int,
        ) -> ssize_t,
    >,
    /// `fi_cq_signal`.
    pub signal: Option<unsafe extern "C" fn(cq: *mut fid_cq) -> c_int>,
    /// `fi_cq_strerror`.
    pub strerror: Option<
        unsafe extern "C" fn(
            cq: *mut fid_cq,
            prov_errno: c_int,
            err_data: *const c_void,
            buf: *mut c_char,
            len: size_t,
        ) -> *const c_char,
    >,
}

/// A completion queue (`struct fid_cq`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fid_cq {
    /// Object header.
    pub fid: fid,
    /// Completion queue operations.
    pub ops: *mut fi_ops_cq,
}

/// Counter attributes (`struct fi_cntr_attr`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_cntr_attr {
    /// What the counter counts.
    pub events: fi_cntr_events,
    /// Wait object.
    pub wait_obj: fi_wait_obj,
    /// Wait set (FI_WAIT_SET).
    pub wait_set: *mut fid_wait,
    /// Flags.
    pub flags: u64,
}

/// Counter operations (`struct fi_ops_cntr`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_ops_cntr {
    /// Size of this table.
    pub size: size_t,
    /// `fi_cntr_read`.
    pub read: Option<unsafe extern "C" fn(cntr: *mut fid_cntr) -> u64>,
    /// `fi_cntr_readerr`.
    pub readerr: Option<unsafe extern "C" fn(cntr: *mut fid_cntr) -> u64>,
    /// `fi_cntr_add`.
    pub add: Option<unsafe extern "C" fn(cntr: *mut fid_cntr, value: u64) -> c_int>,
    /// `fi_cntr_set`.
    pub set: Option<unsafe extern "C" fn(cntr: *mut fid_cntr, value: u64) -> c_int>,
    /// `fi_cntr_wait`.
    pub wait:
        Option<unsafe extern "C" fn(cntr: *mut fid_cntr, threshold: u64, timeout: c_int) -> c_int>,
    /// `fi_cntr_adderr`.
    pub adderr: Option<unsafe extern "C" fn(cntr: *mut fid_cntr, value: u64) -> c_int>,
    /// `fi_cntr_seterr`.
    pub seterr: Option<unsafe extern "C" fn(cntr: *mut fid_cntr, value: u64) -> c_int>,
}

/// A counter (`struct fid_cntr`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fid_cntr {
    /// Object header.
    pub fid: fid,
    /// Counter operations.
    pub ops: *mut fi_ops_cntr,
}
