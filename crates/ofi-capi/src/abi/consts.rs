//! Values of the anonymous and named C enums that only the C ABI uses.
//! Flags, capabilities and the enums shared with the raw layer come from
//! `ofi_core::consts`.

/// Longest path (`FI_PATH_MAX`).
pub const FI_PATH_MAX: usize = 256;
/// Longest name (`FI_NAME_MAX`).
pub const FI_NAME_MAX: usize = 64;
/// Longest version string (`FI_VERSION_MAX`).
pub const FI_VERSION_MAX: usize = 64;
/// `fi_av_insert` flag: `context` is an `int` array that receives each
/// address's status (0 or an `FI_E*` number).
pub const FI_SYNC_ERR: u64 = 1 << 58;
/// `fi_av_open` flag: inserts are reported on the AV's event queue
/// (libfabric spells it as FI_COMPLETION's bit).
pub const FI_EVENT: u64 = ofi_core::consts::FI_COMPLETION;

/// Object classes (`fid.fclass`).
pub mod class {
    /// Unspecified.
    pub const FI_CLASS_UNSPEC: usize = 0;
    /// Fabric.
    pub const FI_CLASS_FABRIC: usize = 1;
    /// Domain.
    pub const FI_CLASS_DOMAIN: usize = 2;
    /// Endpoint.
    pub const FI_CLASS_EP: usize = 3;
    /// Scalable endpoint.
    pub const FI_CLASS_SEP: usize = 4;
    /// Receive context.
    pub const FI_CLASS_RX_CTX: usize = 5;
    /// Shared receive context.
    pub const FI_CLASS_SRX_CTX: usize = 6;
    /// Transmit context.
    pub const FI_CLASS_TX_CTX: usize = 7;
    /// Shared transmit context.
    pub const FI_CLASS_STX_CTX: usize = 8;
    /// Passive endpoint.
    pub const FI_CLASS_PEP: usize = 9;
    /// Interface.
    pub const FI_CLASS_INTERFACE: usize = 10;
    /// Address vector.
    pub const FI_CLASS_AV: usize = 11;
    /// Memory region.
    pub const FI_CLASS_MR: usize = 12;
    /// Event queue.
    pub const FI_CLASS_EQ: usize = 13;
    /// Completion queue.
    pub const FI_CLASS_CQ: usize = 14;
    /// Counter.
    pub const FI_CLASS_CNTR: usize = 15;
    /// Wait set.
    pub const FI_CLASS_WAIT: usize = 16;
    /// Poll set.
    pub const FI_CLASS_POLL: usize = 17;
    /// Connection request.
    pub const FI_CLASS_CONNREQ: usize = 18;
    /// Multicast group.
    pub const FI_CLASS_MC: usize = 19;
    /// NIC.
    pub const FI_CLASS_NIC: usize = 20;
    /// AV set.
    pub const FI_CLASS_AV_SET: usize = 21;
    /// MR cache.
    pub const FI_CLASS_MR_CACHE: usize = 22;
    /// Memory monitor.
    pub const FI_CLASS_MEM_MONITOR: usize = 23;
    /// Peer CQ.
    pub const FI_CLASS_PEER_CQ: usize = 24;
    /// Peer shared receive context.
    pub const FI_CLASS_PEER_SRX: usize = 25;
    /// Log.
    pub const FI_CLASS_LOG: usize = 26;
    /// Peer AV.
    pub const FI_CLASS_PEER_AV: usize = 27;
    /// Peer AV set.
    pub const FI_CLASS_PEER_AV_SET: usize = 28;
}

/// `fi_control` commands.
pub mod control {
    use libc::c_int;
    /// Get the object's flags.
    pub const FI_GETFIDFLAG: c_int = 0;
    /// Set the object's flags.
    pub const FI_SETFIDFLAG: c_int = 1;
    /// Get the operation flags.
    pub const FI_GETOPSFLAG: c_int = 2;
    /// Set the operation flags.
    pub const FI_SETOPSFLAG: c_int = 3;
    /// Create an alias (`struct fi_alias`).
    pub const FI_ALIAS: c_int = 4;
    /// Get the wait object.
    pub const FI_GETWAIT: c_int = 5;
    /// Enable an endpoint.
    pub const FI_ENABLE: c_int = 6;
    /// Set a listen backlog (`int *`).
    pub const FI_BACKLOG: c_int = 7;
    /// Get a raw memory key (`struct fi_mr_raw_attr`).
    pub const FI_GET_RAW_MR: c_int = 8;
    /// Map a raw memory key (`struct fi_mr_map_raw`).
    pub const FI_MAP_RAW_MR: c_int = 9;
    /// Unmap a key (`uint64_t *`).
    pub const FI_UNMAP_KEY: c_int = 10;
    /// Queue deferred work (`struct fi_deferred_work`).
    pub const FI_QUEUE_WORK: c_int = 11;
    /// Cancel deferred work.
    pub const FI_CANCEL_WORK: c_int = 12;
    /// Flush deferred work.
    pub const FI_FLUSH_WORK: c_int = 13;
    /// Refresh a memory region (`struct fi_mr_modify`).
    pub const FI_REFRESH: c_int = 14;
    /// Duplicate an object (`struct fid **`).
    pub const FI_DUP: c_int = 15;
    /// Get the wait object type (`enum fi_wait_obj *`).
    pub const FI_GETWAITOBJ: c_int = 16;
    /// Get a value (`struct fi_fid_var`).
    pub const FI_GET_VAL: c_int = 17;
    /// Set a value (`struct fi_fid_var`).
    pub const FI_SET_VAL: c_int = 18;
    /// Export an object.
    pub const FI_EXPORT_FID: c_int = 19;
}

/// `enum fi_type`: what `fi_tostr` formats.
pub mod tostr_type {
    use crate::abi::fi_type;
    /// `struct fi_info`.
    pub const FI_TYPE_INFO: fi_type = 0;
    /// `enum fi_ep_type`.
    pub const FI_TYPE_EP_TYPE: fi_type = 1;
    /// Capability bits.
    pub const FI_TYPE_CAPS: fi_type = 2;
    /// Operation flags.
    pub const FI_TYPE_OP_FLAGS: fi_type = 3;
    /// Address format.
    pub const FI_TYPE_ADDR_FORMAT: fi_type = 4;
    /// `struct fi_tx_attr`.
    pub const FI_TYPE_TX_ATTR: fi_type = 5;
    /// `struct fi_rx_attr`.
    pub const FI_TYPE_RX_ATTR: fi_type = 6;
    /// `struct fi_ep_attr`.
    pub const FI_TYPE_EP_ATTR: fi_type = 7;
    /// `struct fi_domain_attr`.
    pub const FI_TYPE_DOMAIN_ATTR: fi_type = 8;
    /// `struct fi_fabric_attr`.
    pub const FI_TYPE_FABRIC_ATTR: fi_type = 9;
    /// `enum fi_threading`.
    pub const FI_TYPE_THREADING: fi_type = 10;
    /// `enum fi_progress`.
    pub const FI_TYPE_PROGRESS: fi_type = 11;
    /// Protocol.
    pub const FI_TYPE_PROTOCOL: fi_type = 12;
    /// Message order bits.
    pub const FI_TYPE_MSG_ORDER: fi_type = 13;
    /// Mode bits.
    pub const FI_TYPE_MODE: fi_type = 14;
    /// `enum fi_av_type`.
    pub const FI_TYPE_AV_TYPE: fi_type = 15;
    /// `enum fi_datatype`.
    pub const FI_TYPE_ATOMIC_TYPE: fi_type = 16;
    /// `enum fi_op`.
    pub const FI_TYPE_ATOMIC_OP: fi_type = 17;
    /// Library version (no data).
    pub const FI_TYPE_VERSION: fi_type = 18;
    /// EQ event number.
    pub const FI_TYPE_EQ_EVENT: fi_type = 19;
    /// CQ completion flags.
    pub const FI_TYPE_CQ_EVENT_FLAGS: fi_type = 20;
    /// MR mode bits.
    pub const FI_TYPE_MR_MODE: fi_type = 21;
    /// `enum fi_op_type`.
    pub const FI_TYPE_OP_TYPE: fi_type = 22;
    /// `struct fid`.
    pub const FI_TYPE_FID: fi_type = 23;
    /// `enum fi_collective_op`.
    pub const FI_TYPE_COLLECTIVE_OP: fi_type = 24;
    /// `enum fi_hmem_iface`.
    pub const FI_TYPE_HMEM_IFACE: fi_type = 25;
    /// `enum fi_cq_format`.
    pub const FI_TYPE_CQ_FORMAT: fi_type = 26;
    /// `enum fi_log_level`.
    pub const FI_TYPE_LOG_LEVEL: fi_type = 27;
    /// `enum fi_log_subsys`.
    pub const FI_TYPE_LOG_SUBSYS: fi_type = 28;
}

/// `enum fi_param_type`.
pub mod param_type {
    use crate::abi::fi_param_type;
    /// A string.
    pub const FI_PARAM_STRING: fi_param_type = 0;
    /// An `int`.
    pub const FI_PARAM_INT: fi_param_type = 1;
    /// A boolean stored in an `int`.
    pub const FI_PARAM_BOOL: fi_param_type = 2;
    /// A `size_t`.
    pub const FI_PARAM_SIZE_T: fi_param_type = 3;
}

/// `fi_getopt` / `fi_setopt` levels and names.
pub mod ep_opt {
    use libc::c_int;
    /// The endpoint level.
    pub const FI_OPT_ENDPOINT: c_int = 0;
    /// Smallest space left in a multi-receive buffer (`size_t`).
    pub const FI_OPT_MIN_MULTI_RECV: c_int = 0;
    /// Connection data size (`size_t`).
    pub const FI_OPT_CM_DATA_SIZE: c_int = 1;
    /// Buffered minimum (`size_t`).
    pub const FI_OPT_BUFFERED_MIN: c_int = 2;
    /// Buffered limit (`size_t`).
    pub const FI_OPT_BUFFERED_LIMIT: c_int = 3;
    /// Send buffer size (`size_t`).
    pub const FI_OPT_SEND_BUF_SIZE: c_int = 4;
    /// Receive buffer size (`size_t`).
    pub const FI_OPT_RECV_BUF_SIZE: c_int = 5;
    /// Transmit queue size (`size_t`).
    pub const FI_OPT_TX_SIZE: c_int = 6;
    /// Receive queue size (`size_t`).
    pub const FI_OPT_RX_SIZE: c_int = 7;
    /// Peer-to-peer device memory policy (`int`).
    pub const FI_OPT_FI_HMEM_P2P: c_int = 8;
    /// XPU trigger (`struct fi_trigger_xpu`).
    pub const FI_OPT_XPU_TRIGGER: c_int = 9;
}

/// `enum fi_op_type`: kinds of deferred work.
pub mod op_type {
    use crate::abi::fi_op_type;
    /// Receive.
    pub const FI_OP_RECV: fi_op_type = 0;
    /// Send.
    pub const FI_OP_SEND: fi_op_type = 1;
    /// Tagged receive.
    pub const FI_OP_TRECV: fi_op_type = 2;
    /// Tagged send.
    pub const FI_OP_TSEND: fi_op_type = 3;
    /// RMA read.
    pub const FI_OP_READ: fi_op_type = 4;
    /// RMA write.
    pub const FI_OP_WRITE: fi_op_type = 5;
    /// Atomic.
    pub const FI_OP_ATOMIC: fi_op_type = 6;
    /// Fetching atomic.
    pub const FI_OP_FETCH_ATOMIC: fi_op_type = 7;
    /// Compare atomic.
    pub const FI_OP_COMPARE_ATOMIC: fi_op_type = 8;
    /// Counter set.
    pub const FI_OP_CNTR_SET: fi_op_type = 9;
    /// Counter add.
    pub const FI_OP_CNTR_ADD: fi_op_type = 10;
}

/// `enum fi_trigger_event`.
pub mod trigger_event {
    use crate::abi::fi_trigger_event;
    /// Counter threshold.
    pub const FI_TRIGGER_THRESHOLD: fi_trigger_event = 0;
    /// Device trigger.
    pub const FI_TRIGGER_XPU: fi_trigger_event = 1;
}

/// `enum fi_collective_op`.
pub mod collective_op {
    use crate::abi::fi_collective_op;
    /// Barrier.
    pub const FI_BARRIER: fi_collective_op = 0;
    /// Broadcast.
    pub const FI_BROADCAST: fi_collective_op = 1;
    /// All-to-all.
    pub const FI_ALLTOALL: fi_collective_op = 2;
    /// All-reduce.
    pub const FI_ALLREDUCE: fi_collective_op = 3;
    /// All-gather.
    pub const FI_ALLGATHER: fi_collective_op = 4;
    /// Reduce-scatter.
    pub const FI_REDUCE_SCATTER: fi_collective_op = 5;
    /// Reduce.
    pub const FI_REDUCE: fi_collective_op = 6;
    /// Scatter.
    pub const FI_SCATTER: fi_collective_op = 7;
    /// Gather.
    pub const FI_GATHER: fi_collective_op = 8;
}

/// `enum fi_hmem_iface`.
pub mod hmem_iface {
    use crate::abi::fi_hmem_iface;
    /// Host memory.
    pub const FI_HMEM_SYSTEM: fi_hmem_iface = 0;
    /// CUDA.
    pub const FI_HMEM_CUDA: fi_hmem_iface = 1;
    /// ROCr.
    pub const FI_HMEM_ROCR: fi_hmem_iface = 2;
    /// Level Zero.
    pub const FI_HMEM_ZE: fi_hmem_iface = 3;
    /// Neuron.
    pub const FI_HMEM_NEURON: fi_hmem_iface = 4;
    /// SynapseAI.
    pub const FI_HMEM_SYNAPSEAI: fi_hmem_iface = 5;
}

/// `enum fi_cq_wait_cond`.
pub mod cq_wait_cond {
    use crate::abi::fi_cq_wait_cond;
    /// No condition.
    pub const FI_CQ_COND_NONE: fi_cq_wait_cond = 0;
    /// Wait for a threshold of entries (`size_t`).
    pub const FI_CQ_COND_THRESHOLD: fi_cq_wait_cond = 1;
}

/// `enum fi_log_level`.
pub mod log_level {
    use crate::abi::fi_log_level;
    /// Warnings.
    pub const FI_LOG_WARN: fi_log_level = 0;
    /// Traces.
    pub const FI_LOG_TRACE: fi_log_level = 1;
    /// Information.
    pub const FI_LOG_INFO: fi_log_level = 2;
    /// Debugging.
    pub const FI_LOG_DEBUG: fi_log_level = 3;
}

/// `enum fi_log_subsys`.
pub mod log_subsys {
    use crate::abi::fi_log_subsys;
    /// Core.
    pub const FI_LOG_CORE: fi_log_subsys = 0;
    /// Fabric.
    pub const FI_LOG_FABRIC: fi_log_subsys = 1;
    /// Domain.
    pub const FI_LOG_DOMAIN: fi_log_subsys = 2;
    /// Endpoint control.
    pub const FI_LOG_EP_CTRL: fi_log_subsys = 3;
    /// Endpoint data.
    pub const FI_LOG_EP_DATA: fi_log_subsys = 4;
    /// Address vectors.
    pub const FI_LOG_AV: fi_log_subsys = 5;
    /// Completion queues.
    pub const FI_LOG_CQ: fi_log_subsys = 6;
    /// Event queues.
    pub const FI_LOG_EQ: fi_log_subsys = 7;
    /// Memory registration.
    pub const FI_LOG_MR: fi_log_subsys = 8;
    /// Counters.
    pub const FI_LOG_CNTR: fi_log_subsys = 9;
}

/// Set in enum values a provider defines itself (`FI_PROV_SPECIFIC`).
pub const FI_PROV_SPECIFIC: u32 = 1 << 31;
