//! The names libfabric prints for flag bits and enum values: the tables of
//! `fi_tostr`, also read by hint relaxing and by logging.

use crate::abi::*;

/// Flag bits with their names, in the order libfabric prints them.
pub(super) type Bits = &'static [(u64, &'static str)];

pub(super) const CAPS: Bits = &[
    (1 << 1, "FI_MSG"),
    (1 << 2, "FI_RMA"),
    (1 << 3, "FI_TAGGED"),
    (1 << 4, "FI_ATOMIC"),
    (1 << 5, "FI_MULTICAST"),
    (1 << 6, "FI_COLLECTIVE"),
    (1 << 8, "FI_READ"),
    (1 << 9, "FI_WRITE"),
    (1 << 10, "FI_RECV"),
    (1 << 11, "FI_SEND"),
    (1 << 12, "FI_REMOTE_READ"),
    (1 << 13, "FI_REMOTE_WRITE"),
    (1 << 16, "FI_MULTI_RECV"),
    (1 << 17, "FI_REMOTE_CQ_DATA"),
    (1 << 20, "FI_TRIGGER"),
    (1 << 21, "FI_FENCE"),
    (1 << 48, "FI_VARIABLE_MSG"),
    (1 << 49, "FI_RMA_PMEM"),
    (1 << 50, "FI_SOURCE_ERR"),
    (1 << 51, "FI_LOCAL_COMM"),
    (1 << 52, "FI_REMOTE_COMM"),
    (1 << 53, "FI_SHARED_AV"),
    (1 << 56, "FI_RMA_EVENT"),
    (1 << 57, "FI_SOURCE"),
    (1 << 58, "FI_NAMED_RX_CTX"),
    (1 << 59, "FI_DIRECTED_RECV"),
    (1 << 47, "FI_HMEM"),
];

pub(super) const OP_FLAGS: Bits = &[
    (1 << 5, "FI_MULTICAST"),
    (1 << 16, "FI_MULTI_RECV"),
    (1 << 17, "FI_REMOTE_CQ_DATA"),
    (1 << 18, "FI_MORE"),
    (1 << 19, "FI_PEEK"),
    (1 << 20, "FI_TRIGGER"),
    (1 << 21, "FI_FENCE"),
    (1 << 24, "FI_COMPLETION"),
    (1 << 25, "FI_INJECT"),
    (1 << 26, "FI_INJECT_COMPLETE"),
    (1 << 27, "FI_TRANSMIT_COMPLETE"),
    (1 << 28, "FI_DELIVERY_COMPLETE"),
    (1 << 31, "FI_MATCH_COMPLETE"),
    (1 << 29, "FI_AFFINITY"),
    (1 << 59, "FI_CLAIM"),
    (1 << 58, "FI_DISCARD"),
];

pub(super) const MSG_ORDER: Bits = &[
    (1 << 0, "FI_ORDER_RAR"),
    (1 << 1, "FI_ORDER_RAW"),
    (1 << 2, "FI_ORDER_RAS"),
    (1 << 3, "FI_ORDER_WAR"),
    (1 << 4, "FI_ORDER_WAW"),
    (1 << 5, "FI_ORDER_WAS"),
    (1 << 6, "FI_ORDER_SAR"),
    (1 << 7, "FI_ORDER_SAW"),
    (1 << 8, "FI_ORDER_SAS"),
    (1 << 32, "FI_ORDER_RMA_RAR"),
    (1 << 33, "FI_ORDER_RMA_RAW"),
    (1 << 34, "FI_ORDER_RMA_WAR"),
    (1 << 35, "FI_ORDER_RMA_WAW"),
    (1 << 36, "FI_ORDER_ATOMIC_RAR"),
    (1 << 37, "FI_ORDER_ATOMIC_RAW"),
    (1 << 38, "FI_ORDER_ATOMIC_WAR"),
    (1 << 39, "FI_ORDER_ATOMIC_WAW"),
];

pub(super) const MODE: Bits = &[
    (1 << 59, "FI_CONTEXT"),
    (1 << 58, "FI_MSG_PREFIX"),
    (1 << 57, "FI_ASYNC_IOV"),
    (1 << 56, "FI_RX_CQ_DATA"),
    (1 << 55, "FI_LOCAL_MR"),
    (1 << 54, "FI_NOTIFY_FLAGS_ONLY"),
    (1 << 53, "FI_RESTRICTED_COMP"),
    (1 << 52, "FI_CONTEXT2"),
    (1 << 51, "FI_BUFFERED_RECV"),
];

pub(super) const CQ_EVENT_FLAGS: Bits = &[
    (1 << 11, "FI_SEND"),
    (1 << 10, "FI_RECV"),
    (1 << 2, "FI_RMA"),
    (1 << 4, "FI_ATOMIC"),
    (1 << 1, "FI_MSG"),
    (1 << 3, "FI_TAGGED"),
    (1 << 8, "FI_READ"),
    (1 << 9, "FI_WRITE"),
    (1 << 12, "FI_REMOTE_READ"),
    (1 << 13, "FI_REMOTE_WRITE"),
    (1 << 17, "FI_REMOTE_CQ_DATA"),
    (1 << 16, "FI_MULTI_RECV"),
    (1 << 18, "FI_MORE"),
    (1 << 59, "FI_CLAIM"),
];

pub(super) const MR_MODE: Bits = &[
    (1 << 0, "FI_MR_BASIC"),
    (1 << 1, "FI_MR_SCALABLE"),
    (1 << 2, "FI_MR_LOCAL"),
    (1 << 3, "FI_MR_RAW"),
    (1 << 4, "FI_MR_VIRT_ADDR"),
    (1 << 5, "FI_MR_ALLOCATED"),
    (1 << 6, "FI_MR_PROV_KEY"),
    (1 << 7, "FI_MR_MMU_NOTIFY"),
    (1 << 8, "FI_MR_RMA_EVENT"),
    (1 << 9, "FI_MR_ENDPOINT"),
    (1 << 10, "FI_MR_HMEM"),
    (1 << 11, "FI_MR_COLLECTIVE"),
];

/// Names of consecutive enum values from 0 (`""`: a hole, printed "Unknown").
pub(super) type Names = &'static [&'static str];

pub(super) const EP_TYPE: Names = &[
    "FI_EP_UNSPEC",
    "FI_EP_MSG",
    "FI_EP_DGRAM",
    "FI_EP_RDM",
    "FI_EP_SOCK_STREAM",
    "FI_EP_SOCK_DGRAM",
];
pub(super) const ADDR_FORMAT: Names = &[
    "FI_FORMAT_UNSPEC",
    "FI_SOCKADDR",
    "FI_SOCKADDR_IN",
    "FI_SOCKADDR_IN6",
    "FI_SOCKADDR_IB",
    "FI_ADDR_PSMX",
    "FI_ADDR_GNI",
    "FI_ADDR_BGQ",
    "FI_ADDR_MLX",
    "FI_ADDR_STR",
    "FI_ADDR_PSMX2",
    "FI_ADDR_IB_UD",
    "FI_ADDR_EFA",
    "FI_ADDR_PSMX3",
    "FI_ADDR_OPX",
    "FI_ADDR_CXI",
];
pub(super) const THREADING: Names = &[
    "FI_THREAD_UNSPEC",
    "FI_THREAD_SAFE",
    "FI_THREAD_FID",
    "FI_THREAD_DOMAIN",
    "FI_THREAD_COMPLETION",
    "FI_THREAD_ENDPOINT",
];
pub(super) const PROGRESS: Names = &[
    "FI_PROGRESS_UNSPEC",
    "FI_PROGRESS_AUTO",
    "FI_PROGRESS_MANUAL",
];
pub(super) const RESOURCE_MGMT: Names = &["FI_RM_UNSPEC", "FI_RM_DISABLED", "FI_RM_ENABLED"];
pub(super) const PROTOCOL: Names = &[
    "FI_PROTO_UNSPEC",
    "FI_PROTO_RDMA_CM_IB_RC",
    "FI_PROTO_IWARP",
    "FI_PROTO_IB_UD",
    "FI_PROTO_PSMX",
    "FI_PROTO_UDP",
    "FI_PROTO_SOCK_TCP",
    "",
    "FI_PROTO_IWARP_RDM",
    "FI_PROTO_IB_RDM",
    "FI_PROTO_GNI",
    "FI_PROTO_RXM",
    "FI_PROTO_RXD",
    "FI_PROTO_MLX",
    "FI_PROTO_NETWORKDIRECT",
    "FI_PROTO_PSMX2",
    "FI_PROTO_SHM",
    "",
    "FI_PROTO_RSTREAM",
    "FI_PROTO_RDMA_CM_IB_XRC",
    "FI_PROTO_EFA",
    "FI_PROTO_PSMX3",
    "FI_PROTO_RXM_TCP",
    "FI_PROTO_OPX",
    "FI_PROTO_CXI",
    "FI_PROTO_XNET",
];
pub(super) const AV_TYPE: Names = &["FI_AV_UNSPEC", "FI_AV_MAP", "FI_AV_TABLE"];
pub(super) const ATOMIC_TYPE: Names = &[
    "FI_INT8",
    "FI_UINT8",
    "FI_INT16",
    "FI_UINT16",
    "FI_INT32",
    "FI_UINT32",
    "FI_INT64",
    "FI_UINT64",
    "FI_FLOAT",
    "FI_DOUBLE",
    "FI_FLOAT_COMPLEX",
    "FI_DOUBLE_COMPLEX",
    "FI_LONG_DOUBLE",
    "FI_LONG_DOUBLE_COMPLEX",
    "FI_INT128",
    "FI_UINT128",
];
pub(super) const ATOMIC_OP: Names = &[
    "FI_MIN",
    "FI_MAX",
    "FI_SUM",
    "FI_PROD",
    "FI_LOR",
    "FI_LAND",
    "FI_BOR",
    "FI_BAND",
    "FI_LXOR",
    "FI_BXOR",
    "FI_ATOMIC_READ",
    "FI_ATOMIC_WRITE",
    "FI_CSWAP",
    "FI_CSWAP_NE",
    "FI_CSWAP_LE",
    "FI_CSWAP_LT",
    "FI_CSWAP_GE",
    "FI_CSWAP_GT",
    "FI_MSWAP",
];
pub(super) const EQ_EVENT: Names = &[
    "FI_NOTIFY",
    "FI_CONNREQ",
    "FI_CONNECTED",
    "FI_SHUTDOWN",
    "FI_MR_COMPLETE",
    "FI_AV_COMPLETE",
    "FI_JOIN_COMPLETE",
];
pub(super) const OP_TYPE: Names = &[
    "FI_OP_RECV",
    "FI_OP_SEND",
    "FI_OP_TRECV",
    "FI_OP_TSEND",
    "FI_OP_READ",
    "FI_OP_WRITE",
    "FI_OP_ATOMIC",
    "FI_OP_FETCH_ATOMIC",
    "FI_OP_COMPARE_ATOMIC",
    "FI_OP_CNTR_SET",
    "FI_OP_CNTR_ADD",
];
pub(super) const COLLECTIVE_OP: Names = &[
    "FI_BARRIER",
    "FI_BROADCAST",
    "FI_ALLTOALL",
    "FI_ALLREDUCE",
    "FI_ALLGATHER",
    "FI_REDUCE_SCATTER",
    "FI_REDUCE",
    "FI_SCATTER",
    "FI_GATHER",
];
pub(super) const HMEM_IFACE: Names = &[
    "FI_HMEM_SYSTEM",
    "FI_HMEM_CUDA",
    "FI_HMEM_ROCR",
    "FI_HMEM_ZE",
    "FI_HMEM_NEURON",
    "FI_HMEM_SYNAPSEAI",
];
pub(super) const CQ_FORMAT: Names = &[
    "FI_CQ_FORMAT_UNSPEC",
    "FI_CQ_FORMAT_CONTEXT",
    "FI_CQ_FORMAT_MSG",
    "FI_CQ_FORMAT_DATA",
    "FI_CQ_FORMAT_TAGGED",
];
pub(super) const LOG_LEVEL: Names = &["warn", "trace", "info", "debug"];
pub(super) const LOG_SUBSYS: Names = &[
    "core", "fabric", "domain", "ep_ctrl", "ep_data", "av", "cq", "eq", "mr", "cntr",
];

/// The name of enum value `v`; "Unknown" for a hole or a value past the table.
pub(super) fn name(table: Names, v: u32) -> &'static str {
    match table.get(v as usize) {
        Some(n) if !n.is_empty() => n,
        _ => "Unknown",
    }
}

/// Protocols and address formats may be provider-specific values.
pub(super) fn prov_name(table: Names, v: u32) -> &'static str {
    if v & FI_PROV_SPECIFIC != 0 {
        "Provider specific"
    } else {
        name(table, v)
    }
}
