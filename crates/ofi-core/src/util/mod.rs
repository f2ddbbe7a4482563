//! Reusable parts providers share instead of re-implementing them: the
//! completion queue, counters, address vectors, memory regions, receive
//! matching, scatter-gather copies, wait objects, wait sets, poll sets,
//! the slab that keeps operations in flight, and the taps through which
//! the core's own operations over an endpoint complete.

pub mod auth;
pub mod av;
pub mod cntr;
pub mod cq;
pub mod driver;
pub mod durable;
pub mod eq;
pub mod hash;
pub mod iov;
pub mod lock;
pub mod mr;
pub mod netif;
pub mod peer;
pub mod poll;
pub mod rma;
pub mod slab;
pub mod srx;
pub mod stx;
pub mod tap;
pub mod trigger;
pub mod wait;
pub mod waitset;

pub use ofi_base::{atomic, matching};
