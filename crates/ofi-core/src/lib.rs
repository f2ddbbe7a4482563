//! ofi-core: the object model, getinfo and hint matching, the provider
//! registry, configuration, errors, and the utilities providers share.
//!
//! Applications normally depend on the `ofi` crate, which re-exports this
//! crate and registers the built-in providers.
//!
//! The constants, errors and the plain utilities the sans-IO protocol
//! cores share (atomics, auth keys, iovecs, matching, peer-death causes,
//! remote ranges) live in `ofi-base` and are re-exported here at their
//! usual paths.

pub mod coll;
pub mod config;
pub mod external;
pub mod hints;
pub mod info;
pub mod object;
pub mod provider;
pub mod registry;
pub mod spi;
pub mod typed;
pub mod util;

pub use ofi_base::{consts, error};

pub use error::{Error, Result};
pub use info::Info;
pub use object::*;
pub use registry::getinfo;
