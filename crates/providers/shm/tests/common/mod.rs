//! What the shm provider's integration tests share: the slice of the
//! facade (`ofi`) they use, over ofi-core with shm registered, so the
//! tests live beside the provider (the facade depends on it).
#![allow(dead_code, unused_imports)]

/// The facade's names the tests use.
pub mod ofi {
    pub use ofi_core::consts;
    pub use ofi_core::error::{errno, Error, Result};
    pub use ofi_core::info::Info;
    pub use ofi_core::object::*;
    pub use ofi_core::util::av::AvAttr;
    pub use ofi_core::util::cq::{CqAttr, CqTaggedEntry};
    pub use ofi_core::util::mr::MrAttr;

    /// `fi_getinfo` with the shm provider registered.
    pub fn getinfo(
        version: u32,
        node: Option<&str>,
        service: Option<&str>,
        flags: u64,
        hints: Option<&Info>,
    ) -> Result<Vec<Info>> {
        ofi_prov_shm::register()?;
        ofi_core::registry::getinfo(version, node, service, flags, hints)
    }
}

pub mod child;
pub mod forge;
pub mod rdm;
