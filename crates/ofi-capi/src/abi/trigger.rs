//! `rdma/fi_trigger.h`: triggered operations and deferred work.

use crate::abi::{
    fi_context2, fi_datatype, fi_hmem_iface, fi_msg, fi_msg_atomic, fi_msg_compare, fi_msg_fetch,
    fi_msg_rma, fi_msg_tagged, fid_cntr, fid_ep,
};
use libc::{c_int, c_void, size_t};

/// `enum fi_trigger_event`.
pub type fi_trigger_event = u32;
/// `enum fi_op_type`.
pub type fi_op_type = u32;

/// A counter threshold trigger (`struct fi_trigger_threshold`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_trigger_threshold {
    /// Counter watched.
    pub cntr: *mut fid_cntr,
    /// Value at which the operation fires.
    pub threshold: size_t,
}

/// The value of an XPU trigger variable.
#[repr(C)]
#[derive(Clone, Copy)]
pub union fi_trigger_var_value {
    /// 8-bit value.
    pub val8: u8,
    /// 16-bit value.
    pub val16: u16,
    /// 32-bit value.
    pub val32: u32,
    /// 64-bit value.
    pub val64: u64,
    /// Larger values.
    pub data: *mut u8,
}

/// An XPU trigger variable (`struct fi_trigger_var`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_trigger_var {
    /// Value type.
    pub datatype: fi_datatype,
    /// Element count.
    pub count: c_int,
    /// Where the device writes.
    pub addr: *mut c_void,
    /// Value.
    pub value: fi_trigger_var_value,
}

/// The device of an XPU trigger.
#[repr(C)]
#[derive(Clone, Copy)]
pub union fi_trigger_xpu_device {
    /// Unused.
    pub reserved: u64,
    /// CUDA device.
    pub cuda: c_int,
    /// Level Zero device.
    pub ze: c_int,
}

/// An XPU trigger (`struct fi_trigger_xpu`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_trigger_xpu {
    /// Number of variables.
    pub count: c_int,
    /// Memory interface.
    pub iface: fi_hmem_iface,
    /// Device.
    pub device: fi_trigger_xpu_device,
    /// Variables.
    pub var: *mut fi_trigger_var,
}

/// A deferred message send or receive (`struct fi_op_msg`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_op_msg {
    /// Endpoint.
    pub ep: *mut fid_ep,
    /// Message.
    pub msg: fi_msg,
    /// Flags.
    pub flags: u64,
}

/// A deferred tagged operation (`struct fi_op_tagged`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_op_tagged {
    /// Endpoint.
    pub ep: *mut fid_ep,
    /// Message.
    pub msg: fi_msg_tagged,
    /// Flags.
    pub flags: u64,
}

/// A deferred RMA operation (`struct fi_op_rma`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_op_rma {
    /// Endpoint.
    pub ep: *mut fid_ep,
    /// Message.
    pub msg: fi_msg_rma,
    /// Flags.
    pub flags: u64,
}

/// A deferred atomic (`struct fi_op_atomic`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_op_atomic {
    /// Endpoint.
    pub ep: *mut fid_ep,
    /// Message.
    pub msg: fi_msg_atomic,
    /// Flags.
    pub flags: u64,
}

/// A deferred fetching atomic (`struct fi_op_fetch_atomic`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_op_fetch_atomic {
    /// Endpoint.
    pub ep: *mut fid_ep,
    /// Message.
    pub msg: fi_msg_atomic,
    /// Result buffers.
    pub fetch: fi_msg_fetch,
    /// Flags.
    pub flags: u64,
}

/// A deferred compare atomic (`struct fi_op_compare_atomic`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_op_compare_atomic {
    /// Endpoint.
    pub ep: *mut fid_ep,
    /// Message.
    pub msg: fi_msg_atomic,
    /// Result buffers.
    pub fetch: fi_msg_fetch,
    /// Compare buffers.
    pub compare: fi_msg_compare,
    /// Flags.
    pub flags: u64,
}

/// A deferred counter update (`struct fi_op_cntr`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_op_cntr {
    /// Counter.
    pub cntr: *mut fid_cntr,
    /// Value to set or add.
    pub value: u64,
}

/// The trigger of a [`fi_triggered_context`].
#[repr(C)]
#[derive(Clone, Copy)]
pub union fi_triggered_context_trigger {
    /// Threshold trigger.
    pub threshold: fi_trigger_threshold,
    /// XPU trigger.
    pub xpu: fi_trigger_xpu,
    /// Provider space.
    pub internal: [*mut c_void; 3],
}

/// The context of a triggered operation (`struct fi_triggered_context`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_triggered_context {
    /// Trigger kind.
    pub event_type: fi_trigger_event,
    /// Trigger.
    pub trigger: fi_triggered_context_trigger,
}

/// The trigger of a [`fi_triggered_context2`].
#[repr(C)]
#[derive(Clone, Copy)]
pub union fi_triggered_context2_trigger {
    /// Threshold trigger.
    pub threshold: fi_trigger_threshold,
    /// XPU trigger.
    pub xpu: fi_trigger_xpu,
    /// Provider space.
    pub internal: [*mut c_void; 7],
}

/// The context of a triggered operation under FI_CONTEXT2 (`struct fi_triggered_context2`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_triggered_context2 {
    /// Trigger kind.
    pub event_type: fi_trigger_event,
    /// Trigger.
    pub trigger: fi_triggered_context2_trigger,
}

/// The operation of a [`fi_deferred_work`].
#[repr(C)]
#[derive(Clone, Copy)]
pub union fi_deferred_work_op {
    /// Message operation.
    pub msg: *mut fi_op_msg,
    /// Tagged operation.
    pub tagged: *mut fi_op_tagged,
    /// RMA operation.
    pub rma: *mut fi_op_rma,
    /// Atomic.
    pub atomic: *mut fi_op_atomic,
    /// Fetching atomic.
    pub fetch_atomic: *mut fi_op_fetch_atomic,
    /// Compare atomic.
    pub compare_atomic: *mut fi_op_compare_atomic,
    /// Counter update.
    pub cntr: *mut fi_op_cntr,
}

/// Work queued on a domain with `FI_QUEUE_WORK` (`struct fi_deferred_work`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_deferred_work {
    /// Provider space.
    pub context: fi_context2,
    /// Counter value at which the work runs.
    pub threshold: u64,
    /// Counter watched.
    pub triggering_cntr: *mut fid_cntr,
    /// Counter incremented on completion.
    pub completion_cntr: *mut fid_cntr,
    /// Kind of operation.
    pub op_type: fi_op_type,
    /// Operation.
    pub op: fi_deferred_work_op,
}
