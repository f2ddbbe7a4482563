//! Helpers shared by the providers' system tests (a dev-dependency): opening
//! socket-addressed endpoints ([`open`]), polling completion queues against
//! deadlines ([`cq`]), data patterns that reveal
//! misplaced or stale bytes ([`data`]), child processes of the test binary
//! spoken to by lines over stdin/stdout ([`child`]), `ip` for the tests
//! that make network namespaces ([`netns`]), and the log lines a test
//! provokes ([`log`]).
//!
//! Everything is re-exported at the root, so a suite's `common` module
//! re-exports this crate next to its provider's own openers.

#![forbid(unsafe_code)]

pub mod child;
pub mod cq;
pub mod data;
pub mod log;
pub mod netns;
pub mod open;

pub use child::*;
pub use cq::*;
pub use data::*;
pub use open::*;
