//! The provider interface: what a provider implements to plug into ofi.
//!
//! A provider answers getinfo with offers and opens fabrics; its fabric opens
//! domains; its domain opens endpoints. Completion queues, counters, address
//! vectors and memory regions are the core's shared implementations
//! ([`crate::util`]), which providers fill and drive. The operations an
//! endpoint is handed ([`SendOp`], [`RecvOp`], [`RmaOp`], [`AtomicOp`]) and
//! what it is bound to ([`EpBindings`]) are defined here too.

// The endpoint trait declares the raw layer's unsafe send/receive entry points.
#![allow(unsafe_code)]

use crate::config::Tunable;
use crate::consts::{FI_ADDR_NOTAVAIL, FI_COMPLETION, FI_READ, FI_WRITE, OFI_INJECT_CALL};
use crate::error::Result;
use crate::error::{errno, Error};
use crate::info::{ConnHandle, FabricAttr, Info};
use crate::util::atomic::AtomicKind;
use crate::util::av::AvCore;
use crate::util::cntr::CntrCore;
use crate::util::cq::{CqCore, CqErrEntry, CqTaggedEntry};
use crate::util::eq::EqCore;
use crate::util::iov::IoVec;
use crate::util::mr::MrMap;
use crate::util::rma::{Ioc, RmaIoc, RmaIov};
use crate::util::srx::{SrxBinding, SrxCore};
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

/// A provider: registers with one call to [`crate::registry::register`]
/// ([`crate::registry::register_builtin`] for a built-in one).
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
    /// True when peers copy into this process's memory themselves
    /// (cross-process copies), so that a peer declared dead by silence,
    /// maybe alive, may still write into a buffer after its operation
    /// failed with FI_ETIMEDOUT: the safe layer then keeps such buffers
    /// for good.
    fn late_writes(&self) -> bool {
        false
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
    /// An active endpoint took this endpoint's address (the core's
    /// `PassiveEndpoint::release`): stop listening so that it can bind
    /// there. The default does nothing (a provider that binds at listen
    /// and was not listening holds nothing).
    fn release(&self) {}
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
    /// Operand, compare and result memory must stay valid until completion
    /// (operands, with FI_INJECT, until this call returns).
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
    /// A receive was posted to the shared receive context this endpoint
    /// is bound to (see [`crate::util::srx`]), after the endpoint asked it
    /// for one in vain: offer the messages still waiting to it. Providers
    /// without shared receive contexts never see it.
    fn srx_posted(&self) {}
    /// The shared receive context this handle is (the core's own), if it is one.
    fn as_srx(&self) -> Option<&Arc<SrxCore>> {
        None
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
    /// The endpoint's shared-memory board for collectives among members on
    /// its node ([`crate::coll::board`]), if the provider has one.
    fn coll_board(&self) -> Option<Arc<dyn crate::coll::board::CollBoard>> {
        None
    }
}

/// A multicast group a provider's endpoint joined: dropping it leaves.
pub trait McOps: Send + Sync {
    /// The address that sends to the group (`fi_mc_addr`).
    fn fi_addr(&self) -> u64;
    /// This endpoint's rank in a collective group (None: not one).
    fn rank(&self) -> Option<usize> {
        None
    }
}

/// A send (message or tagged) as the provider sees it.
#[derive(Clone, Copy, Debug)]
pub struct SendOp<'a> {
    /// Source ranges.
    pub iov: &'a [IoVec],
    /// Local descriptors (one per iov entry, or empty).
    pub desc: &'a [u64],
    /// Destination fi_addr.
    pub dest: u64,
    /// Tag (tagged sends).
    pub tag: u64,
    /// Remote CQ data (with FI_REMOTE_CQ_DATA).
    pub data: u64,
    /// The caller's context.
    pub context: usize,
    /// Operation flags (FI_INJECT, FI_REMOTE_CQ_DATA, FI_COMPLETION …).
    pub flags: u64,
    /// Tagged or message queue.
    pub tagged: bool,
}

/// Whether a transmit-side operation with these flags writes a CQ entry
/// when it succeeds, on an endpoint bound with or without
/// FI_SELECTIVE_COMPLETION: not one from an inject call (OFI_INJECT_CALL);
/// otherwise always, or with selective completion only when it asks for
/// FI_COMPLETION. FI_INJECT alone, as `fi_sendmsg` may pass it, does not
/// suppress the completion.
pub fn tx_completion(flags: u64, selective: bool) -> bool {
    flags & OFI_INJECT_CALL == 0 && (!selective || flags & FI_COMPLETION != 0)
}

/// A receive (or peek / claim / discard) as the provider sees it.
#[derive(Clone, Copy, Debug)]
pub struct RecvOp<'a> {
    /// Destination ranges.
    pub iov: &'a [IoVec],
    /// Local descriptors.
    pub desc: &'a [u64],
    /// Accepted source (`FI_ADDR_UNSPEC`: any).
    pub src: u64,
    /// Tag.
    pub tag: u64,
    /// Ignore bits.
    pub ignore: u64,
    /// The caller's context.
    pub context: usize,
    /// Operation flags (FI_MULTI_RECV, FI_PEEK, FI_CLAIM, FI_DISCARD, FI_COMPLETION …).
    pub flags: u64,
    /// Tagged or message queue.
    pub tagged: bool,
}

/// An RMA read or write as the provider sees it (`fi_readmsg` / `fi_writemsg`).
#[derive(Clone, Copy, Debug)]
pub struct RmaOp<'a> {
    /// Local ranges (source of a write, destination of a read).
    pub iov: &'a [IoVec],
    /// Local descriptors.
    pub desc: &'a [u64],
    /// Target fi_addr.
    pub addr: u64,
    /// Remote ranges; their total length equals the local total.
    pub rma_iov: &'a [RmaIov],
    /// Remote CQ data (writes with FI_REMOTE_CQ_DATA).
    pub data: u64,
    /// The caller's context.
    pub context: usize,
    /// Operation flags (FI_INJECT, FI_REMOTE_CQ_DATA, FI_COMPLETION,
    /// FI_DELIVERY_COMPLETE, FI_FENCE …).
    pub flags: u64,
    /// Which way the data goes.
    pub dir: RmaDir,
}

/// The direction of an RMA operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RmaDir {
    /// Remote memory to local (`fi_read`).
    Read,
    /// Local memory to remote (`fi_write`).
    Write,
}

impl RmaDir {
    /// True for [`RmaDir::Read`].
    #[inline]
    pub const fn is_read(self) -> bool {
        matches!(self, RmaDir::Read)
    }

    /// The completion and capability bit of the direction: `FI_READ` or
    /// `FI_WRITE`.
    #[inline]
    pub const fn flag(self) -> u64 {
        match self {
            RmaDir::Read => crate::consts::FI_READ,
            RmaDir::Write => crate::consts::FI_WRITE,
        }
    }

    /// "read" or "write", for messages.
    pub const fn name(self) -> &'static str {
        match self {
            RmaDir::Read => "read",
            RmaDir::Write => "write",
        }
    }
}

/// An atomic as the provider sees it (`fi_atomicmsg`, `fi_fetch_atomicmsg`,
/// `fi_compare_atomicmsg`). Element counts agree across the lists (checked
/// by the core before the provider sees the operation).
#[derive(Clone, Copy, Debug)]
pub struct AtomicOp<'a> {
    /// Basic, fetch or compare form.
    pub kind: AtomicKind,
    /// `enum fi_op` value.
    pub op: u32,
    /// `enum fi_datatype` value.
    pub datatype: u32,
    /// Operands (empty for FI_ATOMIC_READ).
    pub operand: &'a [Ioc],
    /// Compare values (compare form).
    pub compare: &'a [Ioc],
    /// Where original target values go (fetch and compare forms).
    pub result: &'a [Ioc],
    /// Local descriptors of the operands.
    pub desc: &'a [u64],
    /// Target fi_addr.
    pub addr: u64,
    /// Remote ranges.
    pub rma_ioc: &'a [RmaIoc],
    /// Remote CQ data.
    pub data: u64,
    /// The caller's context.
    pub context: usize,
    /// Operation flags.
    pub flags: u64,
}

/// What an endpoint is bound to when it is enabled.
#[derive(Clone, Debug, Default)]
pub struct EpBindings {
    /// Transmit completions.
    pub tx_cq: Option<Arc<CqCore>>,
    /// Only operations with FI_COMPLETION complete into `tx_cq`.
    pub tx_selective: bool,
    /// Receive completions.
    pub rx_cq: Option<Arc<CqCore>>,
    /// Only operations with FI_COMPLETION complete into `rx_cq`.
    pub rx_selective: bool,
    /// Address vector.
    pub av: Option<Arc<AvCore>>,
    /// Counter of completed sends.
    pub send_cntr: Option<Arc<CntrCore>>,
    /// Counter of completed receives.
    pub recv_cntr: Option<Arc<CntrCore>>,
    /// Counter of completed reads.
    pub read_cntr: Option<Arc<CntrCore>>,
    /// Counter of completed writes.
    pub write_cntr: Option<Arc<CntrCore>>,
    /// Counter of remote reads of this endpoint's memory (FI_RMA_EVENT).
    pub rem_read_cntr: Option<Arc<CntrCore>>,
    /// Counter of remote writes to this endpoint's memory (FI_RMA_EVENT).
    pub rem_write_cntr: Option<Arc<CntrCore>>,
    /// The domain's registered regions.
    pub mr_map: Option<Arc<MrMap>>,
    /// Event queue for connection management.
    pub eq: Option<Arc<EqCore>>,
    /// The endpoint's context, reported as `fid` in its EQ events.
    pub fid: usize,
    /// The endpoint's attributes as opened.
    pub info: Info,
    /// A composing provider's receive side, offered small untagged
    /// messages first (see [`RxHook`]); providers
    /// that do not support it ignore it.
    pub rx_hook: Option<Arc<dyn RxHook>>,
    /// The shared receive context the endpoint is bound to
    /// (`fi_srx_context`): its receives serve messages none of the
    /// endpoint's own takes (see [`crate::util::srx`]).
    pub srx: Option<SrxBinding>,
}

impl EpBindings {
    /// The counter a transmit-side operation counts into, by its completion
    /// flags: FI_READ (RMA reads, fetching atomics) the read counter,
    /// FI_WRITE (RMA writes, basic atomics) the write counter, else the
    /// send counter.
    #[inline]
    pub fn tx_cntr(&self, flags: u64) -> &Option<Arc<CntrCore>> {
        if flags & FI_READ != 0 {
            &self.read_cntr
        } else if flags & FI_WRITE != 0 {
            &self.write_cntr
        } else {
            &self.send_cntr
        }
    }

    /// Whether a transmit-side operation with these flags writes a CQ entry
    /// when it succeeds: not one from an inject call (OFI_INJECT_CALL);
    /// otherwise always, or with selective completion only when it asks
    /// for FI_COMPLETION. (FI_INJECT alone, as `fi_sendmsg` may pass it,
    /// does not suppress the completion.)
    pub fn tx_completion(&self, flags: u64) -> bool {
        tx_completion(flags, self.tx_selective)
    }

    /// Reports a finished transmit-side operation: on success a completion
    /// in the transmit CQ (when `completion`) and a count; on failure
    /// (`err`, a positive FI_E* number) an error completion, always, and an
    /// error count.
    #[inline(always)]
    pub fn tx_done(&self, context: usize, flags: u64, completion: bool, err: Option<i32>) {
        if let Some(e) = err {
            return self.tx_failed(context, flags, e);
        }
        if completion {
            if let Some(cq) = &self.tx_cq {
                cq.push(
                    CqTaggedEntry {
                        op_context: context,
                        flags,
                        ..Default::default()
                    },
                    FI_ADDR_NOTAVAIL,
                );
            }
        }
        if let Some(c) = self.tx_cntr(flags) {
            c.add(1);
        }
    }

    /// [`tx_done`](Self::tx_done)'s failure: an error completion, always,
    /// and an error count.
    #[cold]
    fn tx_failed(&self, context: usize, flags: u64, e: i32) {
        if let Some(cq) = &self.tx_cq {
            cq.push_err(
                CqErrEntry {
                    op_context: context,
                    flags,
                    err: e,
                    prov_errno: e,
                    ..Default::default()
                },
                FI_ADDR_NOTAVAIL,
            );
        }
        if let Some(c) = self.tx_cntr(flags) {
            c.add_err(1);
        }
    }

    /// Every counter slot (send, recv, read, write, remote read, remote write).
    pub fn cntrs(&self) -> [&Option<Arc<CntrCore>>; 6] {
        [
            &self.send_cntr,
            &self.recv_cntr,
            &self.read_cntr,
            &self.write_cntr,
            &self.rem_read_cntr,
            &self.rem_write_cntr,
        ]
    }
}
