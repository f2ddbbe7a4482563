//! The driver half of `ofi_proto::tcp`'s protocol core: what turns the raw
//! layer's operations into the core's requests and the core's events into
//! completions, independent of the transport that carries the core's bytes.

pub mod attrs;
pub mod completions;
pub mod one_sided;
pub mod sends;

/// Most iov entries per operation of an endpoint running the core.
pub const IOV_LIMIT: usize = 4;
/// Largest FI_INJECT send of an endpoint running the core.
pub const INJECT_SIZE: usize = 4096;
/// Most remote ranges per RMA or atomic operation.
pub const RMA_IOV_LIMIT: usize = ofi_proto::tcp::MAX_RANGES;
