//! libfabric's numeric values for capabilities, flags, modes and enums.
//!
//! Every value here equals the one in Debian's libfabric 1.17 headers
//! (`rdma/fabric.h`, `rdma/fi_*.h`), so the C ABI passes them through
//! untranslated.

/// Builds an API version number the way `FI_VERSION(major, minor)` does.
pub const fn fi_version(major: u32, minor: u32) -> u32 {
    (major << 16) | minor
}
/// The API version this library implements.
pub const FI_VERSION_CURRENT: u32 = fi_version(1, 17);

macro_rules! bits {
    ($($(#[$m:meta])* $name:ident = $val:expr;)*) => {
        $($(#[$m])* pub const $name: u64 = $val;)*
    };
}

bits! {
    /// Message send and receive.
    FI_MSG = 1 << 1;
    /// Remote memory access.
    FI_RMA = 1 << 2;
    /// Tagged messages.
    FI_TAGGED = 1 << 3;
    /// Remote atomics.
    FI_ATOMIC = 1 << 4;
    /// Multicast.
    FI_MULTICAST = 1 << 5;
    /// Collectives.
    FI_COLLECTIVE = 1 << 6;
    /// Initiate RMA reads / atomic fetches.
    FI_READ = 1 << 8;
    /// Initiate RMA writes / atomics.
    FI_WRITE = 1 << 9;
    /// Receive messages.
    FI_RECV = 1 << 10;
    /// Send messages.
    FI_SEND = 1 << 11;
    /// Alias of [`FI_SEND`] used in bind flags.
    FI_TRANSMIT = 1 << 11;
    /// Target of RMA reads.
    FI_REMOTE_READ = 1 << 12;
    /// Target of RMA writes.
    FI_REMOTE_WRITE = 1 << 13;
    /// One buffer receives many messages.
    FI_MULTI_RECV = 1 << 16;
    /// Remote completion data.
    FI_REMOTE_CQ_DATA = 1 << 17;
    /// More operations follow.
    FI_MORE = 1 << 18;
    /// Peek for a matching message.
    FI_PEEK = 1 << 19;
    /// Triggered operation.
    FI_TRIGGER = 1 << 20;
    /// Fence.
    FI_FENCE = 1 << 21;
    /// Priority.
    FI_PRIORITY = 1 << 22;
    /// Generate a completion.
    FI_COMPLETION = 1 << 24;
    /// Buffer may be reused at return.
    FI_INJECT = 1 << 25;
    /// Completion once the buffer may be reused.
    FI_INJECT_COMPLETE = 1 << 26;
    /// Completion once the data left the initiator.
    FI_TRANSMIT_COMPLETE = 1 << 27;
    /// Completion once the data is at the target.
    FI_DELIVERY_COMPLETE = 1 << 28;
    /// Affinity.
    FI_AFFINITY = 1 << 29;
    /// Completion once the data is durable at the target.
    FI_COMMIT_COMPLETE = 1 << 30;
    /// Completion once the message is matched.
    FI_MATCH_COMPLETE = 1 << 31;
    /// Peer transfer.
    FI_PEER_TRANSFER = 1 << 36;
    /// AV user ids.
    FI_AV_USER_ID = 1 << 41;
    /// Peer provider.
    FI_PEER = 1 << 43;
    /// XPU trigger.
    FI_XPU_TRIGGER = 1 << 44;
    /// Heterogeneous memory.
    FI_HMEM = 1 << 47;
    /// Variable messages.
    FI_VARIABLE_MSG = 1 << 48;
    /// Persistent memory RMA.
    FI_RMA_PMEM = 1 << 49;
    /// Source address on error.
    FI_SOURCE_ERR = 1 << 50;
    /// Communication within the node.
    FI_LOCAL_COMM = 1 << 51;
    /// Communication across nodes.
    FI_REMOTE_COMM = 1 << 52;
    /// Shared address vectors.
    FI_SHARED_AV = 1 << 53;
    /// Provider attributes only.
    FI_PROV_ATTR_ONLY = 1 << 54;
    /// Node is a numeric host.
    FI_NUMERICHOST = 1 << 55;
    /// RMA events.
    FI_RMA_EVENT = 1 << 56;
    /// Report the source address of received messages.
    FI_SOURCE = 1 << 57;
    /// Named receive contexts.
    FI_NAMED_RX_CTX = 1 << 58;
    /// Receives may name the source they accept.
    FI_DIRECTED_RECV = 1 << 59;
    /// ofi's own operation flag, in a bit libfabric's operation flags leave
    /// unused: the operation comes from an inject call (`fi_inject`,
    /// `fi_injectdata`, `fi_tinject`, `fi_inject_write`, `fi_inject_atomic`
    /// …), which writes no completion when it succeeds (fi_msg(3): as if
    /// selective completion were on and FI_COMPLETION not given). FI_INJECT
    /// alone (`fi_sendmsg` with FI_INJECT) only frees the buffer at return;
    /// whether such an operation completes follows the usual rules.
    OFI_INJECT_CALL = 1 << 63;
    /// Claim a peeked message (operation flag, shares the bit of FI_DIRECTED_RECV).
    FI_CLAIM = 1 << 59;
    /// Discard a peeked message (operation flag, shares the bit of FI_NAMED_RX_CTX).
    FI_DISCARD = 1 << 58;
    /// Selective completion (bind flag).
    FI_SELECTIVE_COMPLETION = 1 << 59;
}

/// Capabilities that ask for a primary operation class.
pub const FI_PRIMARY_CAPS: u64 = FI_MSG
    | FI_RMA
    | FI_TAGGED
    | FI_ATOMIC
    | FI_MULTICAST
    | FI_COLLECTIVE
    | FI_READ
    | FI_WRITE
    | FI_RECV
    | FI_SEND
    | FI_REMOTE_READ
    | FI_REMOTE_WRITE
    | FI_NAMED_RX_CTX
    | FI_DIRECTED_RECV
    | FI_VARIABLE_MSG
    | FI_HMEM
    | FI_COLLECTIVE
    | FI_LOCAL_COMM
    | FI_REMOTE_COMM
    | FI_SHARED_AV
    | FI_AV_USER_ID
    | FI_PEER;
/// `fi_domain_bind` flag: registrations are reported on the bound event
/// queue (FI_MR_COMPLETE).
pub const FI_REG_MR: u64 = 1 << 59;

/// Secondary capabilities: a provider may offer them unasked.
pub const FI_SECONDARY_CAPS: u64 =
    FI_MULTI_RECV | FI_SOURCE | FI_RMA_EVENT | FI_TRIGGER | FI_FENCE | FI_SOURCE_ERR | FI_RMA_PMEM;

bits! {
    /// Mode: the application provides a `fi_context` per operation.
    FI_CONTEXT = 1 << 59;
    /// Mode: message prefix space.
    FI_MSG_PREFIX = 1 << 58;
    /// Mode: iov arrays must stay valid until completion.
    FI_ASYNC_IOV = 1 << 57;
    /// Mode: remote CQ data only on receive completions.
    FI_RX_CQ_DATA = 1 << 56;
    /// Mode (old): local memory registration.
    FI_LOCAL_MR = 1 << 55;
    /// Mode: notify flags only.
    FI_NOTIFY_FLAGS_ONLY = 1 << 54;
    /// Mode: restricted completions.
    FI_RESTRICTED_COMP = 1 << 53;
    /// Mode: the application provides a `fi_context2` per operation.
    FI_CONTEXT2 = 1 << 52;
    /// Mode: buffered receive.
    FI_BUFFERED_RECV = 1 << 51;
}

/// MR mode bits (`domain_attr.mr_mode`).
pub mod mr_mode {
    /// Basic (old) registration mode.
    pub const FI_MR_BASIC: u32 = 1;
    /// Scalable (old) registration mode.
    pub const FI_MR_SCALABLE: u32 = 2;
    /// Local buffers must be registered.
    pub const FI_MR_LOCAL: u32 = 1 << 2;
    /// Raw keys.
    pub const FI_MR_RAW: u32 = 1 << 3;
    /// RMA addresses are virtual addresses.
    pub const FI_MR_VIRT_ADDR: u32 = 1 << 4;
    /// Registered memory must be allocated.
    pub const FI_MR_ALLOCATED: u32 = 1 << 5;
    /// The provider chooses keys.
    pub const FI_MR_PROV_KEY: u32 = 1 << 6;
    /// MMU notification.
    pub const FI_MR_MMU_NOTIFY: u32 = 1 << 7;
    /// RMA events need MR binding.
    pub const FI_MR_RMA_EVENT: u32 = 1 << 8;
    /// Regions are bound to endpoints.
    pub const FI_MR_ENDPOINT: u32 = 1 << 9;
    /// Device memory registration.
    pub const FI_MR_HMEM: u32 = 1 << 10;
    /// Collective registration.
    pub const FI_MR_COLLECTIVE: u32 = 1 << 11;
}

/// Message ordering bits.
pub mod order {
    /// No ordering.
    pub const FI_ORDER_NONE: u64 = 0;
    /// Read after read.
    pub const FI_ORDER_RAR: u64 = 1 << 0;
    /// Read after write.
    pub const FI_ORDER_RAW: u64 = 1 << 1;
    /// Read after send.
    pub const FI_ORDER_RAS: u64 = 1 << 2;
    /// Write after read.
    pub const FI_ORDER_WAR: u64 = 1 << 3;
    /// Write after write.
    pub const FI_ORDER_WAW: u64 = 1 << 4;
    /// Write after send.
    pub const FI_ORDER_WAS: u64 = 1 << 5;
    /// Send after read.
    pub const FI_ORDER_SAR: u64 = 1 << 6;
    /// Send after write.
    pub const FI_ORDER_SAW: u64 = 1 << 7;
    /// Send after send.
    pub const FI_ORDER_SAS: u64 = 1 << 8;
    /// All of the above.
    pub const FI_ORDER_STRICT: u64 = 0x1ff;
    /// Data ordering.
    pub const FI_ORDER_DATA: u64 = 1 << 16;
}

/// An endpoint type (`enum fi_ep_type`).
pub mod ep_type {
    /// Unspecified.
    pub const FI_EP_UNSPEC: u32 = 0;
    /// Connected, reliable.
    pub const FI_EP_MSG: u32 = 1;
    /// Unconnected, unreliable.
    pub const FI_EP_DGRAM: u32 = 2;
    /// Reliable datagram.
    pub const FI_EP_RDM: u32 = 3;
    /// Socket stream.
    pub const FI_EP_SOCK_STREAM: u32 = 4;
    /// Socket datagram.
    pub const FI_EP_SOCK_DGRAM: u32 = 5;
}

/// Address formats (`addr_format`).
pub mod addr_format {
    /// Unspecified.
    pub const FI_FORMAT_UNSPEC: u32 = 0;
    /// `struct sockaddr`.
    pub const FI_SOCKADDR: u32 = 1;
    /// `struct sockaddr_in`.
    pub const FI_SOCKADDR_IN: u32 = 2;
    /// `struct sockaddr_in6`.
    pub const FI_SOCKADDR_IN6: u32 = 3;
    /// `struct sockaddr_ib`.
    pub const FI_SOCKADDR_IB: u32 = 4;
    /// PSM address.
    pub const FI_ADDR_PSMX: u32 = 5;
    /// GNI address.
    pub const FI_ADDR_GNI: u32 = 6;
    /// BGQ address.
    pub const FI_ADDR_BGQ: u32 = 7;
    /// MLX address.
    pub const FI_ADDR_MLX: u32 = 8;
    /// A formatted string.
    pub const FI_ADDR_STR: u32 = 9;
    /// PSM2 address.
    pub const FI_ADDR_PSMX2: u32 = 10;
    /// IB UD address.
    pub const FI_ADDR_IB_UD: u32 = 11;
    /// EFA address.
    pub const FI_ADDR_EFA: u32 = 12;
    /// PSM3 address.
    pub const FI_ADDR_PSMX3: u32 = 13;
    /// OPX address.
    pub const FI_ADDR_OPX: u32 = 14;
    /// CXI address.
    pub const FI_ADDR_CXI: u32 = 15;
}

/// Endpoint protocols (`ep_attr.protocol`).
pub mod protocol {
    /// Unspecified.
    pub const FI_PROTO_UNSPEC: u32 = 0;
    /// UDP.
    pub const FI_PROTO_UDP: u32 = 5;
    /// TCP sockets.
    pub const FI_PROTO_SOCK_TCP: u32 = 6;
    /// RxM.
    pub const FI_PROTO_RXM: u32 = 11;
    /// RxD.
    pub const FI_PROTO_RXD: u32 = 12;
    /// Shared memory.
    pub const FI_PROTO_SHM: u32 = 16;
    /// RxM over TCP.
    pub const FI_PROTO_RXM_TCP: u32 = 22;
    /// xnet (tcp).
    pub const FI_PROTO_XNET: u32 = 25;
}

/// Threading models.
pub mod threading {
    /// Unspecified.
    pub const FI_THREAD_UNSPEC: u32 = 0;
    /// Fully thread safe.
    pub const FI_THREAD_SAFE: u32 = 1;
    /// Serialised per object.
    pub const FI_THREAD_FID: u32 = 2;
    /// Serialised per domain.
    pub const FI_THREAD_DOMAIN: u32 = 3;
    /// Serialised per completion queue.
    pub const FI_THREAD_COMPLETION: u32 = 4;
    /// Serialised per endpoint.
    pub const FI_THREAD_ENDPOINT: u32 = 5;
}

/// Progress models.
pub mod progress {
    /// Unspecified.
    pub const FI_PROGRESS_UNSPEC: u32 = 0;
    /// The provider makes progress on its own.
    pub const FI_PROGRESS_AUTO: u32 = 1;
    /// The application's calls drive progress.
    pub const FI_PROGRESS_MANUAL: u32 = 2;
}

/// Resource management.
pub mod resource_mgmt {
    /// Unspecified.
    pub const FI_RM_UNSPEC: u32 = 0;
    /// Disabled.
    pub const FI_RM_DISABLED: u32 = 1;
    /// Enabled.
    pub const FI_RM_ENABLED: u32 = 2;
}

/// Address vector types.
pub mod av_type {
    /// Unspecified.
    pub const FI_AV_UNSPEC: u32 = 0;
    /// Map: fi_addr values are opaque.
    pub const FI_AV_MAP: u32 = 1;
    /// Table: fi_addr values are indices.
    pub const FI_AV_TABLE: u32 = 2;
}

/// Completion queue formats.
pub mod cq_format {
    /// Unspecified.
    pub const FI_CQ_FORMAT_UNSPEC: u32 = 0;
    /// Context only.
    pub const FI_CQ_FORMAT_CONTEXT: u32 = 1;
    /// Context, flags, length.
    pub const FI_CQ_FORMAT_MSG: u32 = 2;
    /// Plus buffer and data.
    pub const FI_CQ_FORMAT_DATA: u32 = 3;
    /// Plus tag.
    pub const FI_CQ_FORMAT_TAGGED: u32 = 4;
}

/// Wait objects.
pub mod wait_obj {
    /// No waiting.
    pub const FI_WAIT_NONE: u32 = 0;
    /// Provider's choice.
    pub const FI_WAIT_UNSPEC: u32 = 1;
    /// Wait set.
    pub const FI_WAIT_SET: u32 = 2;
    /// File descriptor.
    pub const FI_WAIT_FD: u32 = 3;
    /// Mutex and condition.
    pub const FI_WAIT_MUTEX_COND: u32 = 4;
    /// Yield.
    pub const FI_WAIT_YIELD: u32 = 5;
    /// Poll fd set.
    pub const FI_WAIT_POLLFD: u32 = 6;
}

/// Event queue event kinds (`enum fi_eq_event`... the unnamed enum in fi_eq.h).
pub mod eq_event {
    /// Generic notification.
    pub const FI_NOTIFY: u32 = 0;
    /// A connection request arrived at a passive endpoint.
    pub const FI_CONNREQ: u32 = 1;
    /// A connection is established.
    pub const FI_CONNECTED: u32 = 2;
    /// The connection was shut down.
    pub const FI_SHUTDOWN: u32 = 3;
    /// An asynchronous registration finished.
    pub const FI_MR_COMPLETE: u32 = 4;
    /// An asynchronous AV insertion finished.
    pub const FI_AV_COMPLETE: u32 = 5;
    /// A multicast join finished.
    pub const FI_JOIN_COMPLETE: u32 = 6;
}

/// `fi_query_atomic` flag: ask about the fetch form.
pub const FI_FETCH_ATOMIC: u64 = 1 << 58;
/// `fi_query_atomic` flag: ask about the compare form.
pub const FI_COMPARE_ATOMIC: u64 = 1 << 59;

/// Atomic datatypes (`enum fi_datatype`).
pub mod datatype {
    /// Signed 8-bit integer.
    pub const FI_INT8: u32 = 0;
    /// Unsigned 8-bit integer.
    pub const FI_UINT8: u32 = 1;
    /// Signed 16-bit integer.
    pub const FI_INT16: u32 = 2;
    /// Unsigned 16-bit integer.
    pub const FI_UINT16: u32 = 3;
    /// Signed 32-bit integer.
    pub const FI_INT32: u32 = 4;
    /// Unsigned 32-bit integer.
    pub const FI_UINT32: u32 = 5;
    /// Signed 64-bit integer.
    pub const FI_INT64: u32 = 6;
    /// Unsigned 64-bit integer.
    pub const FI_UINT64: u32 = 7;
    /// IEEE 754 single precision.
    pub const FI_FLOAT: u32 = 8;
    /// IEEE 754 double precision.
    pub const FI_DOUBLE: u32 = 9;
    /// Pair of floats (real, imaginary).
    pub const FI_FLOAT_COMPLEX: u32 = 10;
    /// Pair of doubles (real, imaginary).
    pub const FI_DOUBLE_COMPLEX: u32 = 11;
    /// x86-64 80-bit extended precision, stored in 16 bytes.
    pub const FI_LONG_DOUBLE: u32 = 12;
    /// Pair of long doubles.
    pub const FI_LONG_DOUBLE_COMPLEX: u32 = 13;
    /// Signed 128-bit integer.
    pub const FI_INT128: u32 = 14;
    /// Unsigned 128-bit integer.
    pub const FI_UINT128: u32 = 15;
    /// One past the last point-to-point datatype.
    pub const FI_DATATYPE_COUNT: u32 = 16;
}

/// Atomic operations (`enum fi_op`).
pub mod atomic_op {
    /// Minimum.
    pub const FI_MIN: u32 = 0;
    /// Maximum.
    pub const FI_MAX: u32 = 1;
    /// Sum.
    pub const FI_SUM: u32 = 2;
    /// Product.
    pub const FI_PROD: u32 = 3;
    /// Logical or.
    pub const FI_LOR: u32 = 4;
    /// Logical and.
    pub const FI_LAND: u32 = 5;
    /// Bitwise or.
    pub const FI_BOR: u32 = 6;
    /// Bitwise and.
    pub const FI_BAND: u32 = 7;
    /// Logical exclusive or.
    pub const FI_LXOR: u32 = 8;
    /// Bitwise exclusive or.
    pub const FI_BXOR: u32 = 9;
    /// Read the target (fetch form only).
    pub const FI_ATOMIC_READ: u32 = 10;
    /// Write the target.
    pub const FI_ATOMIC_WRITE: u32 = 11;
    /// Compare equal and swap.
    pub const FI_CSWAP: u32 = 12;
    /// Compare not equal and swap.
    pub const FI_CSWAP_NE: u32 = 13;
    /// Swap if compare <= target.
    pub const FI_CSWAP_LE: u32 = 14;
    /// Swap if compare < target.
    pub const FI_CSWAP_LT: u32 = 15;
    /// Swap if compare >= target.
    pub const FI_CSWAP_GE: u32 = 16;
    /// Swap if compare > target.
    pub const FI_CSWAP_GT: u32 = 17;
    /// Masked swap.
    pub const FI_MSWAP: u32 = 18;
    /// One past the last point-to-point operation.
    pub const FI_ATOMIC_OP_LAST: u32 = 19;
}

/// Collective operations (`enum fi_collective_op`), and the values
/// `fi_collective(3)` adds to `enum fi_op` and `enum fi_datatype`.
pub mod coll_op {
    /// `fi_barrier`.
    pub const FI_BARRIER: u32 = 0;
    /// `fi_broadcast`.
    pub const FI_BROADCAST: u32 = 1;
    /// `fi_alltoall`.
    pub const FI_ALLTOALL: u32 = 2;
    /// `fi_allreduce`.
    pub const FI_ALLREDUCE: u32 = 3;
    /// `fi_allgather`.
    pub const FI_ALLGATHER: u32 = 4;
    /// `fi_reduce_scatter`.
    pub const FI_REDUCE_SCATTER: u32 = 5;
    /// `fi_reduce`.
    pub const FI_REDUCE: u32 = 6;
    /// `fi_scatter`.
    pub const FI_SCATTER: u32 = 7;
    /// `fi_gather`.
    pub const FI_GATHER: u32 = 8;
    /// `FI_COLLECTIVE_OFFSET`: where the collective values of `enum fi_op`
    /// and `enum fi_datatype` start.
    pub const FI_COLLECTIVE_OFFSET: u32 = 256;
    /// `enum fi_op`: no operation (barrier, and collectives that move data only).
    pub const FI_NOOP: u32 = FI_COLLECTIVE_OFFSET;
    /// `enum fi_datatype`: no data (barrier).
    pub const FI_VOID: u32 = FI_COLLECTIVE_OFFSET;
}

bits! {
    /// AV set flag: every address of the AV.
    FI_UNIVERSE = 1 << 57;
    /// AV set flag: the set will run barriers.
    FI_BARRIER_SET = 1 << 40;
    /// AV set flag: broadcasts.
    FI_BROADCAST_SET = 1 << 41;
    /// AV set flag: alltoalls.
    FI_ALLTOALL_SET = 1 << 42;
    /// AV set flag: allreduces.
    FI_ALLREDUCE_SET = 1 << 43;
    /// AV set flag: allgathers.
    FI_ALLGATHER_SET = 1 << 44;
    /// AV set flag: reduce-scatters.
    FI_REDUCE_SCATTER_SET = 1 << 45;
    /// AV set flag: reduces.
    FI_REDUCE_SET = 1 << 46;
    /// AV set flag: scatters.
    FI_SCATTER_SET = 1 << 47;
    /// AV set flag: gathers.
    FI_GATHER_SET = 1 << 48;
}

/// Every `FI_*_SET` flag of AV set creation.
pub const FI_COLL_SET_FLAGS: u64 = FI_BARRIER_SET
    | FI_BROADCAST_SET
    | FI_ALLTOALL_SET
    | FI_ALLREDUCE_SET
    | FI_ALLGATHER_SET
    | FI_REDUCE_SCATTER_SET
    | FI_REDUCE_SET
    | FI_SCATTER_SET
    | FI_GATHER_SET;

/// Counter event kinds.
pub mod cntr_events {
    /// Count completions.
    pub const FI_CNTR_EVENTS_COMP: u32 = 0;
}

/// Endpoint option names (`FI_OPT_ENDPOINT` level).
pub mod opt {
    /// Minimum free space before a multi-receive buffer is released.
    pub const FI_OPT_MIN_MULTI_RECV: i32 = 0;
    /// Connection private data size.
    pub const FI_OPT_CM_DATA_SIZE: i32 = 1;
}

/// `fi_addr_t` meaning "any" / "not available".
pub const FI_ADDR_UNSPEC: u64 = u64::MAX;
/// `ep_attr.tx_ctx_cnt` / `rx_ctx_cnt`: the endpoint uses a shared
/// transmit or receive context (`fi_stx_context`, `fi_srx_context`).
pub const FI_SHARED_CONTEXT: usize = usize::MAX;
/// `fi_addr_t` meaning the source is not known.
pub const FI_ADDR_NOTAVAIL: u64 = u64::MAX;
/// Flag value for `getinfo`: node is the source address.
pub const FI_SOURCE_FLAG: u64 = FI_SOURCE;

/// A name table entry for printing bit sets.
pub type NameTable = &'static [(u64, &'static str)];

/// Capability and operation flag names in libfabric's print order.
pub const CAP_NAMES: NameTable = &[
    (FI_MSG, "FI_MSG"),
    (FI_RMA, "FI_RMA"),
    (FI_TAGGED, "FI_TAGGED"),
    (FI_ATOMIC, "FI_ATOMIC"),
    (FI_MULTICAST, "FI_MULTICAST"),
    (FI_COLLECTIVE, "FI_COLLECTIVE"),
    (FI_READ, "FI_READ"),
    (FI_WRITE, "FI_WRITE"),
    (FI_RECV, "FI_RECV"),
    (FI_SEND, "FI_SEND"),
    (FI_REMOTE_READ, "FI_REMOTE_READ"),
    (FI_REMOTE_WRITE, "FI_REMOTE_WRITE"),
    (FI_MULTI_RECV, "FI_MULTI_RECV"),
    (FI_REMOTE_CQ_DATA, "FI_REMOTE_CQ_DATA"),
    (FI_TRIGGER, "FI_TRIGGER"),
    (FI_FENCE, "FI_FENCE"),
    (FI_VARIABLE_MSG, "FI_VARIABLE_MSG"),
    (FI_RMA_PMEM, "FI_RMA_PMEM"),
    (FI_SOURCE_ERR, "FI_SOURCE_ERR"),
    (FI_LOCAL_COMM, "FI_LOCAL_COMM"),
    (FI_REMOTE_COMM, "FI_REMOTE_COMM"),
    (FI_SHARED_AV, "FI_SHARED_AV"),
    (FI_RMA_EVENT, "FI_RMA_EVENT"),
    (FI_SOURCE, "FI_SOURCE"),
    (FI_NAMED_RX_CTX, "FI_NAMED_RX_CTX"),
    (FI_DIRECTED_RECV, "FI_DIRECTED_RECV"),
    (FI_HMEM, "FI_HMEM"),
    (FI_AV_USER_ID, "FI_AV_USER_ID"),
    (FI_PEER, "FI_PEER"),
];

/// Operation flag names (tx/rx `op_flags`).
pub const OP_FLAG_NAMES: NameTable = &[
    (FI_MULTI_RECV, "FI_MULTI_RECV"),
    (FI_REMOTE_CQ_DATA, "FI_REMOTE_CQ_DATA"),
    (FI_MORE, "FI_MORE"),
    (FI_PEEK, "FI_PEEK"),
    (FI_TRIGGER, "FI_TRIGGER"),
    (FI_FENCE, "FI_FENCE"),
    (FI_COMPLETION, "FI_COMPLETION"),
    (FI_INJECT, "FI_INJECT"),
    (FI_INJECT_COMPLETE, "FI_INJECT_COMPLETE"),
    (FI_TRANSMIT_COMPLETE, "FI_TRANSMIT_COMPLETE"),
    (FI_DELIVERY_COMPLETE, "FI_DELIVERY_COMPLETE"),
    (FI_COMMIT_COMPLETE, "FI_COMMIT_COMPLETE"),
    (FI_MATCH_COMPLETE, "FI_MATCH_COMPLETE"),
];

/// Mode bit names.
pub const MODE_NAMES: NameTable = &[
    (FI_CONTEXT, "FI_CONTEXT"),
    (FI_MSG_PREFIX, "FI_MSG_PREFIX"),
    (FI_ASYNC_IOV, "FI_ASYNC_IOV"),
    (FI_RX_CQ_DATA, "FI_RX_CQ_DATA"),
    (FI_LOCAL_MR, "FI_LOCAL_MR"),
    (FI_NOTIFY_FLAGS_ONLY, "FI_NOTIFY_FLAGS_ONLY"),
    (FI_RESTRICTED_COMP, "FI_RESTRICTED_COMP"),
    (FI_CONTEXT2, "FI_CONTEXT2"),
    (FI_BUFFERED_RECV, "FI_BUFFERED_RECV"),
];

/// MR mode names.
pub const MR_MODE_NAMES: NameTable = &[
    (mr_mode::FI_MR_BASIC as u64, "FI_MR_BASIC"),
    (mr_mode::FI_MR_SCALABLE as u64, "FI_MR_SCALABLE"),
    (mr_mode::FI_MR_LOCAL as u64, "FI_MR_LOCAL"),
    (mr_mode::FI_MR_RAW as u64, "FI_MR_RAW"),
    (mr_mode::FI_MR_VIRT_ADDR as u64, "FI_MR_VIRT_ADDR"),
    (mr_mode::FI_MR_ALLOCATED as u64, "FI_MR_ALLOCATED"),
    (mr_mode::FI_MR_PROV_KEY as u64, "FI_MR_PROV_KEY"),
    (mr_mode::FI_MR_MMU_NOTIFY as u64, "FI_MR_MMU_NOTIFY"),
    (mr_mode::FI_MR_RMA_EVENT as u64, "FI_MR_RMA_EVENT"),
    (mr_mode::FI_MR_ENDPOINT as u64, "FI_MR_ENDPOINT"),
    (mr_mode::FI_MR_HMEM as u64, "FI_MR_HMEM"),
    (mr_mode::FI_MR_COLLECTIVE as u64, "FI_MR_COLLECTIVE"),
];

/// Message order names.
pub const ORDER_NAMES: NameTable = &[
    (order::FI_ORDER_RAR, "FI_ORDER_RAR"),
    (order::FI_ORDER_RAW, "FI_ORDER_RAW"),
    (order::FI_ORDER_RAS, "FI_ORDER_RAS"),
    (order::FI_ORDER_WAR, "FI_ORDER_WAR"),
    (order::FI_ORDER_WAW, "FI_ORDER_WAW"),
    (order::FI_ORDER_WAS, "FI_ORDER_WAS"),
    (order::FI_ORDER_SAR, "FI_ORDER_SAR"),
    (order::FI_ORDER_SAW, "FI_ORDER_SAW"),
    (order::FI_ORDER_SAS, "FI_ORDER_SAS"),
    (order::FI_ORDER_DATA, "FI_ORDER_DATA"),
];

/// Endpoint type names, indexed by value.
pub const EP_TYPE_NAMES: &[(u32, &str)] = &[
    (ep_type::FI_EP_UNSPEC, "FI_EP_UNSPEC"),
    (ep_type::FI_EP_MSG, "FI_EP_MSG"),
    (ep_type::FI_EP_DGRAM, "FI_EP_DGRAM"),
    (ep_type::FI_EP_RDM, "FI_EP_RDM"),
    (ep_type::FI_EP_SOCK_STREAM, "FI_EP_SOCK_STREAM"),
    (ep_type::FI_EP_SOCK_DGRAM, "FI_EP_SOCK_DGRAM"),
];

/// Address format names.
pub const ADDR_FORMAT_NAMES: &[(u32, &str)] = &[
    (addr_format::FI_FORMAT_UNSPEC, "FI_FORMAT_UNSPEC"),
    (addr_format::FI_SOCKADDR, "FI_SOCKADDR"),
    (addr_format::FI_SOCKADDR_IN, "FI_SOCKADDR_IN"),
    (addr_format::FI_SOCKADDR_IN6, "FI_SOCKADDR_IN6"),
    (addr_format::FI_SOCKADDR_IB, "FI_SOCKADDR_IB"),
    (addr_format::FI_ADDR_PSMX, "FI_ADDR_PSMX"),
    (addr_format::FI_ADDR_GNI, "FI_ADDR_GNI"),
    (addr_format::FI_ADDR_BGQ, "FI_ADDR_BGQ"),
    (addr_format::FI_ADDR_MLX, "FI_ADDR_MLX"),
    (addr_format::FI_ADDR_STR, "FI_ADDR_STR"),
    (addr_format::FI_ADDR_PSMX2, "FI_ADDR_PSMX2"),
    (addr_format::FI_ADDR_IB_UD, "FI_ADDR_IB_UD"),
    (addr_format::FI_ADDR_EFA, "FI_ADDR_EFA"),
    (addr_format::FI_ADDR_PSMX3, "FI_ADDR_PSMX3"),
    (addr_format::FI_ADDR_OPX, "FI_ADDR_OPX"),
    (addr_format::FI_ADDR_CXI, "FI_ADDR_CXI"),
];

/// Protocol names.
pub const PROTOCOL_NAMES: &[(u32, &str)] = &[
    (protocol::FI_PROTO_UNSPEC, "FI_PROTO_UNSPEC"),
    (protocol::FI_PROTO_UDP, "FI_PROTO_UDP"),
    (protocol::FI_PROTO_SOCK_TCP, "FI_PROTO_SOCK_TCP"),
    (protocol::FI_PROTO_RXM, "FI_PROTO_RXM"),
    (protocol::FI_PROTO_RXD, "FI_PROTO_RXD"),
    (protocol::FI_PROTO_SHM, "FI_PROTO_SHM"),
    (protocol::FI_PROTO_RXM_TCP, "FI_PROTO_RXM_TCP"),
    (protocol::FI_PROTO_XNET, "FI_PROTO_XNET"),
];

/// Threading names.
pub const THREADING_NAMES: &[(u32, &str)] = &[
    (threading::FI_THREAD_UNSPEC, "FI_THREAD_UNSPEC"),
    (threading::FI_THREAD_SAFE, "FI_THREAD_SAFE"),
    (threading::FI_THREAD_FID, "FI_THREAD_FID"),
    (threading::FI_THREAD_DOMAIN, "FI_THREAD_DOMAIN"),
    (threading::FI_THREAD_COMPLETION, "FI_THREAD_COMPLETION"),
    (threading::FI_THREAD_ENDPOINT, "FI_THREAD_ENDPOINT"),
];

/// Progress names.
pub const PROGRESS_NAMES: &[(u32, &str)] = &[
    (progress::FI_PROGRESS_UNSPEC, "FI_PROGRESS_UNSPEC"),
    (progress::FI_PROGRESS_AUTO, "FI_PROGRESS_AUTO"),
    (progress::FI_PROGRESS_MANUAL, "FI_PROGRESS_MANUAL"),
];

/// Resource management names.
pub const RM_NAMES: &[(u32, &str)] = &[
    (resource_mgmt::FI_RM_UNSPEC, "FI_RM_UNSPEC"),
    (resource_mgmt::FI_RM_DISABLED, "FI_RM_DISABLED"),
    (resource_mgmt::FI_RM_ENABLED, "FI_RM_ENABLED"),
];

/// AV type names.
pub const AV_TYPE_NAMES: &[(u32, &str)] = &[
    (av_type::FI_AV_UNSPEC, "FI_AV_UNSPEC"),
    (av_type::FI_AV_MAP, "FI_AV_MAP"),
    (av_type::FI_AV_TABLE, "FI_AV_TABLE"),
];

/// Atomic datatype names.
pub const DATATYPE_NAMES: &[(u32, &str)] = &[
    (datatype::FI_INT8, "FI_INT8"),
    (datatype::FI_UINT8, "FI_UINT8"),
    (datatype::FI_INT16, "FI_INT16"),
    (datatype::FI_UINT16, "FI_UINT16"),
    (datatype::FI_INT32, "FI_INT32"),
    (datatype::FI_UINT32, "FI_UINT32"),
    (datatype::FI_INT64, "FI_INT64"),
    (datatype::FI_UINT64, "FI_UINT64"),
    (datatype::FI_FLOAT, "FI_FLOAT"),
    (datatype::FI_DOUBLE, "FI_DOUBLE"),
    (datatype::FI_FLOAT_COMPLEX, "FI_FLOAT_COMPLEX"),
    (datatype::FI_DOUBLE_COMPLEX, "FI_DOUBLE_COMPLEX"),
    (datatype::FI_LONG_DOUBLE, "FI_LONG_DOUBLE"),
    (datatype::FI_LONG_DOUBLE_COMPLEX, "FI_LONG_DOUBLE_COMPLEX"),
    (datatype::FI_INT128, "FI_INT128"),
    (datatype::FI_UINT128, "FI_UINT128"),
];

/// Atomic operation names.
pub const ATOMIC_OP_NAMES: &[(u32, &str)] = &[
    (atomic_op::FI_MIN, "FI_MIN"),
    (atomic_op::FI_MAX, "FI_MAX"),
    (atomic_op::FI_SUM, "FI_SUM"),
    (atomic_op::FI_PROD, "FI_PROD"),
    (atomic_op::FI_LOR, "FI_LOR"),
    (atomic_op::FI_LAND, "FI_LAND"),
    (atomic_op::FI_BOR, "FI_BOR"),
    (atomic_op::FI_BAND, "FI_BAND"),
    (atomic_op::FI_LXOR, "FI_LXOR"),
    (atomic_op::FI_BXOR, "FI_BXOR"),
    (atomic_op::FI_ATOMIC_READ, "FI_ATOMIC_READ"),
    (atomic_op::FI_ATOMIC_WRITE, "FI_ATOMIC_WRITE"),
    (atomic_op::FI_CSWAP, "FI_CSWAP"),
    (atomic_op::FI_CSWAP_NE, "FI_CSWAP_NE"),
    (atomic_op::FI_CSWAP_LE, "FI_CSWAP_LE"),
    (atomic_op::FI_CSWAP_LT, "FI_CSWAP_LT"),
    (atomic_op::FI_CSWAP_GE, "FI_CSWAP_GE"),
    (atomic_op::FI_CSWAP_GT, "FI_CSWAP_GT"),
    (atomic_op::FI_MSWAP, "FI_MSWAP"),
];

/// Looks up the name of an enum value.
pub fn enum_name(table: &[(u32, &'static str)], v: u32) -> Option<&'static str> {
    table.iter().find(|(x, _)| *x == v).map(|(_, n)| *n)
}

/// Looks up an enum value by name (`FI_EP_RDM`, or the short form `rdm`).
pub fn enum_value(table: &[(u32, &'static str)], prefix: &str, name: &str) -> Option<u32> {
    let up = name.trim().to_ascii_uppercase();
    table
        .iter()
        .find(|(_, n)| *n == up || n.strip_prefix(prefix) == Some(up.as_str()))
        .map(|(v, _)| *v)
}

/// Formats a bit set as `[ FI_A, FI_B ]`, the way `fi_tostr` does.
pub fn bits_to_string(table: NameTable, v: u64) -> String {
    let mut s = String::from("[ ");
    let mut first = true;
    let mut rest = v;
    for (bit, name) in table {
        if *bit != 0 && v & bit == *bit && rest & bit != 0 {
            if !first {
                s.push_str(", ");
            }
            s.push_str(name);
            first = false;
            rest &= !bit;
        }
    }
    if rest != 0 {
        if !first {
            s.push_str(", ");
        }
        s.push_str(&format!("{rest:#x}"));
    }
    s.push_str(" ]");
    s
}

/// Parses `FI_MSG|FI_TAGGED` (or `msg,tagged`) into a bit set.
pub fn parse_bits(table: NameTable, prefix: &str, text: &str) -> Result<u64, String> {
    let mut v = 0;
    for part in text.split(['|', ',', ' ']).filter(|p| !p.is_empty()) {
        let up = part.trim().to_ascii_uppercase();
        let bit = table
            .iter()
            .find(|(_, n)| *n == up || n.strip_prefix(prefix) == Some(up.as_str()))
            .map(|(b, _)| *b)
            .or_else(|| {
                up.strip_prefix("0X")
                    .and_then(|h| u64::from_str_radix(h, 16).ok())
            })
            .ok_or_else(|| format!("unknown flag '{part}'"))?;
        v |= bit;
    }
    Ok(v)
}
