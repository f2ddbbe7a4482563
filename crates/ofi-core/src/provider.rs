//! The provider interface: what a provider implements to plug into ofi.
//!
//! A provider answers getinfo with offers and opens fabrics; its fabric opens
//! domains; its domain opens endpoints. Completion queues, counters, address
//! vectors and memory regions are the core's shared implementations
//! ([`crate::util`]), which providers fill and drive.

// The endpoint trait declares the raw layer's unsafe send/receive entry points.
#![allow(unsafe_code)]

use crate::config::Tunable;
use crate::error::Result;
use crate::error::{errno, Error};
use crate::info::{ConnHandle, FabricAttr, Info};
use crate::object::{AtomicOp, EpBindings, RecvOp, RmaOp, SendOp};
use crate::util::atomic::AtomicKind;
use crate::util::eq::EqCore;
use std::os::fd::RawFd;
use std::sync::Arc;

/// The getinfo request a provider answers.
#[derive(Clone, Copy, Debug)]
pub struct GetinfoRequest<'a> {
    /// Requested API version.
    pub version: u32,
    /// Node (host name or address), if any.
    pub node: Option<&'a str>,
    /// Service (port), if any.
    pub service: Option<&'a str>,
    /// getinfo flags (FI_SOURCE, FI_NUMERICHOST, FI_PROV_ATTR_ONLY).
    pub flags: u64,
    /// The application's hints, if any.
    pub hints: Option<&'a Info>,
}

/// A provider: registers with one call to [`crate::registry::register`].
pub trait Provider: Send + Sync + 'static {
    /// Short name (`shm`, `tcp`).
    fn name(&self) -> &str;
    /// Provider version (`FI_VERSION(major, minor)` form).
    fn version(&self) -> u32;
    /// Offers for this request, before the core's generic hint filtering.
    /// A provider may tailor them to the hints (addresses, progress model).
    fn getinfo(&self, req: &GetinfoRequest<'_>) -> Result<Vec<Info>>;
    /// Opens a fabric for one of its offers.
    fn fabric(&self, attr: &FabricAttr) -> Result<Arc<dyn FabricOps>>;
    /// Tunables this provider reads (listed by `ofi info -e`).
    fn tunables(&self) -> Vec<Tunable> {
        Vec::new()
    }
}

/// A provider's fabric.
pub trait FabricOps: Send + Sync {
    /// Opens a domain for an offer.
    fn domain(&self, info: &Info) -> Result<Arc<dyn DomainOps>>;
    /// Opens a passive (listening) endpoint; providers without connection
    /// management keep the default (`FI_ENOSYS`).
    fn passive_ep(&self, info: &Info) -> Result<Arc<dyn PassiveEndpointOps>> {
        let _ = info;
        Err(Error::nosys("this provider has no passive endpoints"))
    }
}

/// A provider's passive endpoint: listens and reports connection requests
/// as FI_CONNREQ events on its event queue.
pub trait PassiveEndpointOps: Progress {
    /// Binds the event queue that receives FI_CONNREQ events.
    fn bind_eq(&self, eq: Arc<EqCore>, fid: usize) -> Result<()>;
    /// Starts listening (`fi_listen`).
    fn listen(&self) -> Result<()>;
    /// The listening address (`fi_getname`).
    fn getname(&self) -> Result<Vec<u8>>;
    /// Sets the address to listen on (`fi_setname`); the core calls it only
    /// before `listen`. Providers that cannot keep the default (`FI_ENOSYS`).
    fn setname(&self, addr: &[u8]) -> Result<()> {
        let _ = addr;
        Err(Error::nosys(
            "this provider cannot set a passive endpoint's address",
        ))
    }
    /// Reads an option (`fi_getopt`): FI_OPT_CM_DATA_SIZE is the largest
    /// private data a connection request may carry.
    fn getopt(&self, name: i32) -> Result<usize> {
        Err(Error::new(
            errno::FI_ENOPROTOOPT,
            format!("option {name} is not supported on this passive endpoint"),
        ))
    }
    /// Rejects a request with private data (`fi_reject`).
    fn reject(&self, handle: &ConnHandle, param: &[u8]) -> Result<()>;
    /// Stops listening and releases resources; called once on close.
    fn close(&self);
}

/// Address handling that the core's address vector delegates to the provider.
pub trait AddrOps: Send + Sync {
    /// Checks a raw address before insertion; returns its canonical bytes.
    fn canonical(&self, addr: &[u8]) -> Result<Vec<u8>>;
    /// Formats an address (`fi_av_straddr`).
    fn to_string(&self, addr: &[u8]) -> String;
    /// Resolves node + service to an address (`fi_av_insertsvc`).
    fn resolve(&self, node: &str, service: &str) -> Result<Vec<u8>>;
}

/// A provider's domain.
pub trait DomainOps: Send + Sync {
    /// Opens an endpoint for an offer.
    fn endpoint(&self, info: &Info) -> Result<Arc<dyn EndpointOps>>;
    /// The domain's address handling, shared with its address vectors.
    fn addr_ops(&self) -> Arc<dyn AddrOps>;
    /// `fi_query_atomic` on the domain: the largest element count one
    /// operation of this kind, op and datatype may carry on the domain's
    /// endpoints, or `FI_EOPNOTSUPP`. The answer needs no endpoint.
    fn query_atomic(&self, kind: AtomicKind, op: u32, datatype: u32) -> Result<usize> {
        let _ = (kind, op, datatype);
        Err(crate::error::Error::new(
            crate::error::errno::FI_EOPNOTSUPP,
            "the provider's domain answers no atomic queries",
        ))
    }
}

/// A composing provider's receive side, bound to an inner endpoint
/// ([`EpBindings::rx_hook`]): the inner endpoint offers it each small
/// untagged message that arrives whole (inline) and that no earlier
/// untagged message waits ahead of, before matching it against its own
/// receives. A composing provider that matches for several inner endpoints
/// thus takes such messages with no inner receive, copy or completion.
pub trait RxHook: Send + Sync + std::fmt::Debug {
    /// A message from `src` (an fi_addr of the inner endpoint's AV, or
    /// FI_ADDR_NOTAVAIL) arrived, with remote CQ data `data` if it carries
    /// any; `bytes` is all of it. True when taken:
    /// the inner endpoint then forgets it. False: the inner endpoint
    /// handles it as usual (matches it, holds it, completes it). Called
    /// with the inner endpoint's state locked: it must not call back into
    /// that endpoint, nor block on a lock another thread may hold while
    /// calling into it.
    fn arrived(&self, src: u64, data: Option<u64>, bytes: &[u8]) -> bool;
}

/// Something the core drives: the manual-progress and wait hooks of an endpoint.
pub trait Progress: Send + Sync {
    /// Makes progress: receive, match, complete. Called from CQ, counter and EQ reads.
    fn progress(&self);
    /// About to block: arm the wake-up and return true if it is safe to sleep
    /// (nothing is pending). Every `arm` is followed by a `disarm`.
    fn arm(&self) -> bool;
    /// Woken or done waiting: drain the wake-up and clear the armed state.
    fn disarm(&self);
    /// A file descriptor that becomes readable when `progress` has work.
    fn wait_fd(&self) -> Option<RawFd>;
}

/// A provider's endpoint.
pub trait EndpointOps: Progress {
    /// Enables the endpoint with its bindings.
    fn enable(&self, bindings: EpBindings) -> Result<()>;
    /// The endpoint's own address.
    fn getname(&self) -> Result<Vec<u8>>;
    /// Sets the endpoint's own address (`fi_setname`); the core calls it
    /// only before `enable`. Providers that cannot keep the default
    /// (`FI_ENOSYS`).
    fn setname(&self, addr: &[u8]) -> Result<()> {
        let _ = addr;
        Err(Error::nosys(
            "this provider cannot set an endpoint's address",
        ))
    }
    /// Posts a send (msg or tagged).
    ///
    /// # Safety
    /// The iov memory must stay valid until the operation completes (or, with
    /// FI_INJECT, until this call returns).
    unsafe fn post_send(&self, op: &SendOp<'_>) -> Result<()>;
    /// Posts a receive (msg or tagged), or a peek / claim / discard.
    ///
    /// # Safety
    /// The iov memory must stay valid and unaliased until the receive completes.
    unsafe fn post_recv(&self, op: &RecvOp<'_>) -> Result<()>;
    /// Posts an RMA read or write. The core has checked the endpoint's caps,
    /// the iov limits and that local and remote lengths agree.
    ///
    /// # Safety
    /// The local iov memory must stay valid until the operation completes
    /// (with FI_INJECT, until this call returns).
    unsafe fn post_rma(&self, op: &RmaOp<'_>) -> Result<()> {
        let _ = op;
        Err(Error::new(
            errno::FI_EOPNOTSUPP,
            "this endpoint does not support RMA",
        ))
    }
    /// Posts an atomic (basic, fetch or compare). The core has checked the
    /// op and datatype against [`crate::util::atomic::valid`] and the
    /// element counts of every list.
    ///
    /// # Safety
    /// Operand, compare and result memory must stay valid until completion.
    unsafe fn post_atomic(&self, op: &AtomicOp<'_>) -> Result<()> {
        let _ = op;
        Err(Error::new(
            errno::FI_EOPNOTSUPP,
            "this endpoint does not support atomics",
        ))
    }
    /// `fi_query_atomic`: the largest element count one operation of this
    /// kind, op and datatype may carry, or `FI_EOPNOTSUPP`.
    fn query_atomic(&self, kind: AtomicKind, op: u32, datatype: u32) -> Result<usize> {
        let _ = (kind, op, datatype);
        Err(Error::new(
            errno::FI_EOPNOTSUPP,
            "this endpoint does not support atomics",
        ))
    }
    /// Cancels a posted receive by context; a canceled receive completes with FI_ECANCELED.
    fn cancel(&self, context: usize) -> Result<()>;
    /// Sets an endpoint option (`FI_OPT_*`).
    fn setopt(&self, name: i32, value: usize) -> Result<()>;
    /// Reads an endpoint option.
    fn getopt(&self, name: i32) -> Result<usize>;
    /// Releases the endpoint's resources; called once when it closes.
    fn close(&self);
    /// Starts a connection (`fi_connect`), with private data; the outcome
    /// arrives on the bound event queue (FI_CONNECTED or an error entry).
    fn connect(&self, addr: &[u8], param: &[u8]) -> Result<()> {
        let _ = (addr, param);
        Err(Error::new(
            errno::FI_EOPNOTSUPP,
            "this endpoint type does not connect",
        ))
    }
    /// Accepts the connection request this endpoint was opened for (`fi_accept`).
    fn accept(&self, param: &[u8]) -> Result<()> {
        let _ = param;
        Err(Error::new(
            errno::FI_EOPNOTSUPP,
            "this endpoint type does not accept connections",
        ))
    }
    /// Shuts the connection down (`fi_shutdown`).
    fn shutdown(&self, flags: u64) -> Result<()> {
        let _ = flags;
        Err(Error::new(
            errno::FI_EOPNOTSUPP,
            "this endpoint type has no connection",
        ))
    }
    /// The connected peer's address (`fi_getpeer`).
    fn getpeer(&self) -> Result<Vec<u8>> {
        Err(Error::new(
            errno::FI_EOPNOTSUPP,
            "this endpoint type has no connected peer",
        ))
    }
    /// Joins the multicast group at `addr` (`fi_join`; `flags` FI_SEND
    /// and/or FI_RECV, 0 for both). The join is done when this returns;
    /// dropping the returned group leaves it.
    fn join(&self, addr: &[u8], flags: u64) -> Result<Box<dyn McOps>> {
        let _ = (addr, flags);
        Err(Error::new(
            errno::FI_ENOSYS,
            "this endpoint does not join multicast groups",
        ))
    }
}

/// A multicast group a provider's endpoint joined: dropping it leaves.
pub trait McOps: Send + Sync {
    /// The address that sends to the group (`fi_mc_addr`).
    fn fi_addr(&self) -> u64;
}
