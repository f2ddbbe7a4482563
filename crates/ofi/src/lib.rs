//! ofi: the OpenFabrics Interfaces, written in Rust.
//!
//! Discover what the fabrics on this machine offer with typed [`Hints`],
//! then move data through one of three layers:
//!
//! - the **safe layer** ([`safe`]): a [`safe::Channel`] owns an endpoint
//!   with its queue and address vector; buffers ([`IoBuf`]: `Vec<u8>`,
//!   `Box<[u8]>`, `bytes::BytesMut`, pooled registered buffers) move into
//!   each operation and come back when it finishes, so no memory a
//!   provider may still touch is reachable from safe code;
//! - the **async layer** (`aio`, cargo feature `tokio`): the same
//!   channel as futures that own their buffers and resolve to
//!   `(result, buffer)`, progress driven from the completion queue's fd;
//! - the **raw layer** ([`Fabric`], [`Domain`], [`Endpoint`] …): libfabric's
//!   calls one for one, caller-owned memory, `unsafe` where the caller must
//!   keep memory alive until completion; the C ABI sits on it.
//!
//! ```no_run
//! use ofi::safe::Channel;
//! use ofi::{Caps, EpType, Hints};
//! use std::time::Duration;
//!
//! let info = Hints::new()
//!     .caps(Caps::MSG | Caps::TAGGED)
//!     .ep_type(EpType::Rdm)
//!     .provider("shm")
//!     .first()?;
//! let (a, b) = (Channel::open(&info)?, Channel::open(&info)?);
//! let to_b = a.insert(&b.address()?)?;
//! let mut rx = b.trecv(vec![0u8; 64], 7, 0)?;
//! let mut tx = a.tsend(b"hello".to_vec(), to_b, 7)?;
//! let got = rx.wait(Duration::from_secs(5))?;
//! assert_eq!(got.bytes(), b"hello");
//! tx.wait(Duration::from_secs(5))?;
//! # Ok::<(), ofi::Error>(())
//! ```
//!
//! The built-in providers are cargo features, all on by default: `shm`,
//! `tcp`, `udp` and `hybrid` (which brings `shm` and `tcp`, the providers
//! it composes); [`init`] registers those the build has.
//!
//! Coming from C? The [`guide`] maps libfabric's calls to ofi's.

#![deny(unsafe_code)]

pub mod guide;
pub mod hints;
pub mod safe;
pub mod spi;

#[cfg(feature = "tokio")]
pub mod aio;

pub use hints::Hints;
pub use safe::buf::{IoBuf, IoBufMut};

pub use ofi_core::config;
pub use ofi_core::consts;
pub use ofi_core::error::{self, errno, Error, ErrorKind, Result};
pub use ofi_core::info::{self, DomainAttr, EpAttr, FabricAttr, Info, RxAttr, Summary, TxAttr};
pub use ofi_core::object::{
    AddressVector, AtomicOp, CloseResult, CompletionQueue, Counter, Deferred, Domain, Endpoint,
    EventQueue, Fabric, MemoryRegion, PassiveEndpoint, PollSet, RecvOp, RmaDir, RmaOp, SendOp,
    WaitSet,
};
pub use ofi_core::typed::{
    AddrFormat, AvType, Caps, EpType, Mode, MrAccess, MrMode, MsgOrder, OpFlags, Progress,
    Protocol, Threading, UnknownValue,
};
pub use ofi_core::util::atomic::AtomicKind;
pub use ofi_core::util::av::AvAttr;
pub use ofi_core::util::cntr::CntrAttr;
pub use ofi_core::util::cq::{
    CqAttr, CqDataEntry, CqEntry, CqErrEntry, CqFormat, CqMsgEntry, CqTaggedEntry,
};
pub use ofi_core::util::eq::{EqAttr, EqError, EqEvent};
pub use ofi_core::util::iov::IoVec;
pub use ofi_core::util::mr::MrAttr;
pub use ofi_core::util::peer::{Cause, PeerDown};
pub use ofi_core::util::rma::{Ioc, RmaIoc, RmaIov};

/// Registers the built-in providers this build has (idempotent; getinfo
/// calls it). Each is a cargo feature of this crate, all on by default:
/// `shm`, `tcp`, `udp` and `hybrid` (which brings `shm` and `tcp`, the
/// providers it composes). Their order in getinfo's answers is
/// [`spi::registry::BUILTIN_ORDER`], whatever the order they register in.
pub fn init() {
    /// A built-in provider's registration call.
    type Register = fn() -> Result<()>;
    let builtins: &[(&str, Register)] = &[
        #[cfg(feature = "shm")]
        ("shm", ofi_prov_shm::register),
        #[cfg(feature = "tcp")]
        ("tcp", ofi_prov_tcp::register),
        #[cfg(feature = "udp")]
        ("udp", ofi_prov_udp::register),
        #[cfg(feature = "hybrid")]
        ("hybrid", ofi_prov_hybrid::register),
    ];
    for (name, register) in builtins {
        if let Err(e) = register() {
            eprintln!("ofi: {name} provider failed to register: {e}");
        }
    }
}

/// `fi_getinfo`: every offer satisfying the hints, best first. See
/// [`Hints::getinfo`] for the typed form.
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

/// The providers ofi knows (built in or loaded): name, version, origin
/// (`fi_info -l`).
pub fn providers() -> Vec<(String, u32, spi::registry::Origin)> {
    init();
    ofi_core::registry::providers()
}

/// Every tunable (`FI_*` variable) of the core and the providers, with its
/// default and help (`fi_info -e`).
pub fn tunables() -> Vec<config::Tunable> {
    init();
    ofi_core::registry::tunables()
}

/// Loads an external provider from a shared object (as FI_PROVIDER_PATH
/// does); returns its name. A provider built against another ofi is
/// refused, naming what differs.
///
/// # Safety
/// As [`spi::registry::load_external`]: the object's code runs in this
/// process unchecked, so `path` must name a trusted provider built for
/// this ofi.
#[allow(unsafe_code)]
pub unsafe fn load_external(path: &str) -> Result<String> {
    // SAFETY: the caller's promise, forwarded.
    unsafe { ofi_core::registry::load_external(path) }
}
