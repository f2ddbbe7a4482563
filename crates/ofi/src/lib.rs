//! ofi: the OpenFabrics Interfaces, written in Rust.
//!
//! Discover providers with [`getinfo`], open a [`Fabric`], a [`Domain`],
//! completion queues, address vectors and endpoints, and move data with
//! message and tagged operations. Two layers:
//!
//! - the **raw layer** ([`Endpoint`]'s `unsafe` calls): caller-owned memory,
//!   a context per operation, no allocation per operation;
//! - the **safe layer** ([`safe`]): buffers are moved into the operation and
//!   handed back in its completion, so no borrowed memory outlives a call.
//!
//! ```no_run
//! use ofi::consts::*;
//! let mut hints = ofi::Info::hints();
//! hints.caps = FI_MSG;
//! hints.ep_attr.ep_type = ep_type::FI_EP_RDM;
//! hints.fabric_attr.prov_name = Some("shm".into());
//! let offers = ofi::getinfo(FI_VERSION_CURRENT, None, None, 0, Some(&hints)).unwrap();
//! println!("{}", offers[0].provider());
//! ```

#![deny(unsafe_code)]

pub mod safe;

pub use ofi_core::config;
pub use ofi_core::consts;
pub use ofi_core::error::{self, errno, Error, Result};
pub use ofi_core::info::{self, DomainAttr, EpAttr, FabricAttr, Info, RxAttr, TxAttr};
pub use ofi_core::object::*;
pub use ofi_core::provider;
pub use ofi_core::registry;
pub use ofi_core::util::atomic::AtomicKind;
pub use ofi_core::util::av::AvAttr;
pub use ofi_core::util::cntr::CntrAttr;
pub use ofi_core::util::cq::{
    CqAttr, CqDataEntry, CqEntry, CqErrEntry, CqFormat, CqMsgEntry, CqTaggedEntry,
};
pub use ofi_core::util::eq::{self as util_eq, EqAttr, EqError, EqEvent};
pub use ofi_core::util::iov::IoVec;
pub use ofi_core::util::mr::MrAttr;
pub use ofi_core::util::peer::{self as peer, Cause, PeerDown};
pub use ofi_core::util::rma::{Ioc, RmaIoc, RmaIov};

/// Registers the built-in providers (idempotent; getinfo calls it).
pub fn init() {
    if let Err(e) = ofi_prov_shm::register() {
        eprintln!("ofi: shm provider failed to register: {e}");
    }
    if let Err(e) = ofi_prov_tcp::register() {
        eprintln!("ofi: tcp provider failed to register: {e}");
    }
    if let Err(e) = ofi_prov_hybrid::register() {
        eprintln!("ofi: hybrid provider failed to register: {e}");
    }
}

/// `fi_getinfo`: every offer satisfying the hints, best first. See
/// [`ofi_core::registry::getinfo`].
pub fn getinfo(
    version: u32,
    node: Option<&str>,
    service: Option<&str>,
    flags: u64,
    hints: Option<&Info>,
) -> Result<Vec<Info>> {
    init();
    ofi_core::registry::getinfo(version, node, service, flags, hints)
}
