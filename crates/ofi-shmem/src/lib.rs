//! ofi-shmem: the one home of ofi's shared-memory `unsafe`: segments in
//! /dev/shm, the lock-free slot ring, doorbells, process liveness and
//! cross-process copies. The shm provider above it maps, rings and copies
//! only through this crate; its own `unsafe` (about thirty sites, all in its
//! endpoint module, each with a `// SAFETY:` comment) is the raw layer's
//! memory contract: user buffers named by address, valid until their
//! operation completes, read or written by the copies this crate makes and
//! by `ofi_core`'s iov copies.
//!
//! Each module that needs `unsafe` says so (`#![allow(unsafe_code)]`) and
//! says, in its documentation, what its safe interface guarantees.

#[cfg(not(loom))]
pub mod board;
#[cfg(not(loom))]
pub mod cma;
#[cfg(not(loom))]
pub mod doorbell;
#[cfg(not(loom))]
pub mod name;
#[cfg(not(loom))]
pub mod proc;
pub mod ring;
#[cfg(not(loom))]
pub mod segment;
mod sync;
pub mod wake;
pub mod xfer;
