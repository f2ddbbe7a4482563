//! ofi-shm: the one home of ofi's shared-memory `unsafe`: segments in
//! /dev/shm, the lock-free slot ring, doorbells, process liveness and
//! cross-process copies. Everything above it (the shm provider) is safe code.
//!
//! Each module that needs `unsafe` says so (`#![allow(unsafe_code)]`) and
//! says, in its documentation, what its safe interface guarantees.

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
