//! ofi-base: what the sans-IO protocol cores share with the rest of ofi,
//! and nothing more: libfabric's constants and error numbers, the plain
//! types of the raw layer (iovecs, remote ranges), the atomic operations'
//! arithmetic, receive matching, the auth key and its MACs, and the causes
//! of peer death.
//!
//! It is a crate of its own so that `ofi-proto` (the protocol cores) and
//! `ofi-wire` (the wire formats) depend on nothing heavier, as quinn-proto
//! keeps its dependencies small: no provider registry, no dynamic loading,
//! no random source, no logging, no unsafe. ofi-core depends on it and
//! re-exports each module at its old path (`ofi_core::consts`,
//! `ofi_core::error`, `ofi_core::util::{atomic, auth, iov, matching, peer,
//! rma}`).

#![forbid(unsafe_code)]

pub mod atomic;
pub mod auth;
pub mod consts;
pub mod error;
pub mod fifo;
pub mod iov;
pub mod matching;
pub mod peer;
pub mod rma;

pub use error::{Error, Result};
