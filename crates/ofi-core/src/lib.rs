//! ofi-core: the object model, getinfo and hint matching, the provider
//! registry, configuration, errors, and the utilities providers share.
//!
//! Applications normally depend on the `ofi` crate, which re-exports this
//! crate and registers the built-in providers.

pub mod config;
pub mod consts;
pub mod error;
pub mod external;
pub mod hints;
pub mod info;
pub mod object;
pub mod provider;
pub mod registry;
pub mod spi;
pub mod typed;
pub mod util;

pub use error::{Error, Result};
pub use info::Info;
pub use object::*;
pub use registry::getinfo;
