//! ofi-storage: block storage over the fabric interfaces, the storage
//! mid-layer of the kfabric proposal.
//!
//! NVMe-oF style: the initiator registers its buffers and sends a 40-byte
//! command capsule ([`wire`]) naming a buffer's address and key; the target
//! moves the data with RMA (it reads the initiator's buffer for a WRITE and
//! writes into it for a READ) and answers with a completion capsule. Each
//! session gets credits (its queue depth) when it opens; the target never
//! reads or writes outside its volume, and drops a peer that breaks the
//! protocol.
//!
//! Layers, as in ofi's providers: the wire format as checked views
//! ([`wire`], [`nbd::wire`]), sans-IO state machines ([`core`], [`nbd`]),
//! and thin drivers over ofi (feature `fabric`, on by default): the
//! [`target`], the initiator's [`Volume`] and the NBD [`gateway`].

#![forbid(unsafe_code)]

pub mod core;
pub mod nbd;
pub mod wire;

#[cfg(feature = "fabric")]
pub mod backend;
#[cfg(feature = "fabric")]
mod backlog;
#[cfg(feature = "fabric")]
pub mod control;
#[cfg(feature = "fabric")]
pub mod gateway;
#[cfg(feature = "fabric")]
pub mod initiator;
#[cfg(feature = "fabric")]
pub mod net;
#[cfg(feature = "fabric")]
mod post;
#[cfg(feature = "fabric")]
mod session;
#[cfg(feature = "fabric")]
pub mod target;
#[cfg(feature = "fabric")]
mod wait;

#[cfg(feature = "fabric")]
pub use initiator::{Completion, Inline, Volume, VolumeOptions};
#[cfg(feature = "fabric")]
pub use net::{EpKind, NetOptions};

pub use wire::Status;
