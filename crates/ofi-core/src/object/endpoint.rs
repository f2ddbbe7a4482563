//! The objects applications open: fabric, domain, endpoint, completion
//! queue, counter, address vector and memory region (the raw layer).
//!
//! Raw data-transfer calls take caller-owned memory and a per-operation
//! context and allocate nothing; they are `unsafe` because the memory must
//! stay valid until the operation completes. Closing an object that others
//! still depend on is refused with `FI_EBUSY` and the object is handed back.
// The raw layer's unsafe is contract forwarding: each unsafe fn passes the
// caller's memory promise on to the provider unchanged.
#![allow(unsafe_code)]

use crate::consts::*;
use crate::error::{errno, Error, Result};
use crate::info::ConnHandle;
use crate::info::{FabricAttr, Info};
use crate::provider::{DomainOps, EndpointOps, FabricOps, PassiveEndpointOps, Progress};
use crate::util::atomic::AtomicKind;
use crate::util::av::{AvAttr, AvCore};
use crate::util::cntr::{CntrAttr, CntrCore};
use crate::util::cq::{CqAttr, CqCore, CqErrEntry, CqFormat, CqTaggedEntry};
use crate::util::driver::Driver;
use crate::util::eq::{EqAttr, EqCore, EqError, EqEvent};
use crate::util::iov::IoVec;
use crate::util::mr::{MrAttr, MrCore, MrMap};
use crate::util::rma::{Ioc, RmaIoc, RmaIov};
use std::os::fd::{AsFd, BorrowedFd, RawFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod mc;
mod one_sided;
mod sets;
pub use mc::Multicast;
pub use one_sided::Deferred;
// Providers and white-box tests glob-import this module: the provider-side
// accessors (`core()`, `ops()`, `mr_map()`) stay in scope for them.
pub use crate::spi::{HasCore, HasMrMap, HasOps};
pub use sets::{PollSet, WaitSet};

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
    /// A read (remote to local) rather than a write.
    pub read: bool,
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
    /// messages first (see [`RxHook`](crate::provider::RxHook)); providers
    /// that do not support it ignore it.
    pub rx_hook: Option<Arc<dyn crate::provider::RxHook>>,
}

impl EpBindings {
    /// The counter a transmit-side operation counts into, by its completion
    /// flags: FI_READ (RMA reads, fetching atomics) the read counter,
    /// FI_WRITE (RMA writes, basic atomics) the write counter, else the
    /// send counter.
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
    #[inline]
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

/// Counts an object's open dependents; decremented when a dependent drops.
#[derive(Debug)]
struct DepGuard(Arc<AtomicUsize>);

impl DepGuard {
    fn new(c: &Arc<AtomicUsize>) -> Self {
        c.fetch_add(1, Ordering::AcqRel);
        DepGuard(c.clone())
    }
}

impl Drop for DepGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The result of `close`: on refusal (`FI_EBUSY`) the object comes back with the error.
pub type CloseResult<T> = std::result::Result<(), Box<(T, Error)>>;

fn refuse<T>(obj: T, what: &str, n: usize) -> CloseResult<T> {
    Err(Box::new((
        obj,
        Error::busy(format!("{what} still has {n} open dependent object(s)")),
    )))
}

/// FI_WAIT_SET needs the set: refused where none is given.
fn no_set(wait: u32, what: &str, instead: &str) -> Result<()> {
    if wait == wait_obj::FI_WAIT_SET {
        return Err(Error::inval(format!(
            "{what}: wait_obj FI_WAIT_SET needs a wait set ({instead})"
        )));
    }
    Ok(())
}

/// The exposed wait fd of a driver, borrowed for as long as its object.
fn borrowed<'a>(driver: &'a Driver, what: &str) -> Result<BorrowedFd<'a>> {
    driver.waits().map(|w| w.as_fd()).ok_or_else(|| {
        Error::nodata(format!(
            "{what}: opened with FI_WAIT_NONE, it has no wait fd"
        ))
    })
}

/// A fabric: the root of one provider's objects.
pub struct Fabric {
    ops: Arc<dyn FabricOps>,
    prov: String,
    deps: Arc<AtomicUsize>,
    _open: DepGuard,
}

impl std::fmt::Debug for Fabric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fabric")
            .field("provider", &self.prov)
            .finish()
    }
}

impl Fabric {
    /// Opens the fabric of an offer (`fi_fabric`).
    pub fn open(attr: &FabricAttr) -> Result<Fabric> {
        let name = attr
            .prov_name
            .as_deref()
            .ok_or_else(|| Error::inval("fabric_attr.prov_name is not set"))?;
        let name = name.split(';').next().unwrap_or(name);
        let (prov, open) = crate::registry::lookup(name)
            .ok_or_else(|| Error::nodata(format!("no provider named '{name}' is registered")))?;
        let ops = prov.fabric(attr)?;
        Ok(Fabric {
            ops,
            prov: name.to_string(),
            deps: Arc::new(AtomicUsize::new(0)),
            _open: DepGuard::new(&open),
        })
    }
    /// The provider's name.
    pub fn provider(&self) -> &str {
        &self.prov
    }
    /// Opens a domain (`fi_domain`). The provider (and [`Domain::info`])
    /// see the memory-registration modes in force (FI_MR_BASIC spelled out).
    pub fn domain(&self, info: &Info) -> Result<Domain> {
        let info = info.in_force();
        let ops = self.ops.domain(&info)?;
        Ok(Domain {
            ops,
            info,
            mr_map: MrMap::new(),
            deps: Arc::new(AtomicUsize::new(0)),
            default_eq: Arc::new(Mutex::new(None)),
            _parent: DepGuard::new(&self.deps),
        })
    }
    /// Opens an event queue (`fi_eq_open`); one with FI_WAIT_SET opens
    /// through [`eq_in`](Self::eq_in).
    pub fn eq(&self, attr: &EqAttr) -> Result<EventQueue> {
        no_set(attr.wait_obj, "eq", "Fabric::eq_in")?;
        self.eq_any(attr)
    }
    fn eq_any(&self, attr: &EqAttr) -> Result<EventQueue> {
        Ok(EventQueue {
            core: EqCore::new(attr)?,
            _parent: DepGuard::new(&self.deps),
        })
    }
    /// Opens a passive endpoint (`fi_passive_ep`) for a connection-oriented
    /// offer; `context` is reported as `fid` in its events.
    pub fn passive_ep(&self, info: &Info, context: usize) -> Result<PassiveEndpoint> {
        if info.ep_attr.ep_type != ep_type::FI_EP_MSG {
            return Err(Error::inval("passive endpoints are for FI_EP_MSG offers"));
        }
        let ops = self.ops.passive_ep(&info.in_force())?;
        Ok(PassiveEndpoint {
            ops,
            context,
            listening: std::sync::atomic::AtomicBool::new(false),
            eq: Mutex::new(None),
            _parent: DepGuard::new(&self.deps),
        })
    }
    /// Closes the fabric; refused while domains are open.
    pub fn close(self) -> CloseResult<Self> {
        match self.deps.load(Ordering::Acquire) {
            0 => Ok(()),
            n => refuse(self, "fabric", n),
        }
    }
}

/// A domain: one provider's resource domain.
pub struct Domain {
    ops: Arc<dyn DomainOps>,
    info: Info,
    mr_map: Arc<MrMap>,
    deps: Arc<AtomicUsize>,
    /// The event queue bound to the domain (`fi_domain_bind`) and its
    /// flags: the default of its endpoints, shared with them.
    default_eq: DefaultEq,
    _parent: DepGuard,
}

#[cold]
fn discard_alone() -> Error {
    Error::new(
        errno::FI_EBADFLAGS,
        "receive: FI_DISCARD goes with FI_PEEK or FI_CLAIM",
    )
}

/// A domain's bound event queue and the flags it was bound with.
type DefaultEq = Arc<Mutex<Option<(Arc<EqCore>, u64)>>>;

impl Drop for Domain {
    fn drop(&mut self) {
        let g = self.default_eq.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((q, _)) = g.as_ref() {
            q.bound.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl std::fmt::Debug for Domain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Domain")
            .field("name", &self.info.domain_attr.name)
            .finish()
    }
}

impl Domain {
    /// The offer this domain was opened with.
    pub fn info(&self) -> &Info {
        &self.info
    }
    /// Binds the domain's event queue (`fi_domain_bind`): the default
    /// queue of its endpoints (one bound to none gets it when enabled:
    /// connection events, peer deaths), and with `FI_REG_MR` the queue of
    /// registration events, which whoever registers reports with
    /// [`report_reg`](Self::report_reg) (the C ABI does). The queue cannot
    /// close while bound.
    pub fn bind_eq(&self, eq: &EventQueue, flags: u64) -> Result<()> {
        if flags & !FI_REG_MR != 0 {
            return Err(Error::new(
                errno::FI_EBADFLAGS,
                format!("domain bind: flags {flags:#x} (only FI_REG_MR)"),
            ));
        }
        let mut g = self.default_eq.lock().unwrap_or_else(|e| e.into_inner());
        if g.is_some() {
            return Err(Error::inval("domain bind: an event queue is already bound"));
        }
        eq.core.bound.fetch_add(1, Ordering::AcqRel);
        *g = Some((eq.core.clone(), flags));
        Ok(())
    }
    /// After a registration: with an event queue bound with `FI_REG_MR`,
    /// reports it (FI_MR_COMPLETE naming the region's `fid` and the
    /// registration's `context`, fi_domain(3)) and returns the queue, on
    /// which the region [`forget`](EqCore::forget)s its `fid` when it
    /// closes. Registrations complete at once; the event is for
    /// applications that wait for it. (The caller reports: `mr_reg` does
    /// not know the fid a C caller names the region by.)
    pub fn report_reg(&self, fid: usize, context: usize) -> Option<Arc<EqCore>> {
        let g = self.default_eq.lock().unwrap_or_else(|e| e.into_inner());
        match g.as_ref() {
            Some((q, flags)) if flags & FI_REG_MR != 0 => {
                q.push(EqEvent {
                    event: eq_event::FI_MR_COMPLETE,
                    fid,
                    context,
                    ..Default::default()
                });
                Some(q.clone())
            }
            _ => None,
        }
    }
    /// `fi_query_atomic`: the largest element count one operation of this
    /// kind, op and datatype may carry on the domain's endpoints, or
    /// `FI_EOPNOTSUPP` (the provider's answer; no endpoint needed).
    pub fn query_atomic(&self, kind: AtomicKind, op: u32, datatype: u32) -> Result<usize> {
        self.ops.query_atomic(kind, op, datatype)
    }
    /// Opens a completion queue (`fi_cq_open`); one with FI_WAIT_SET
    /// opens through [`cq_in`](Self::cq_in).
    pub fn cq(&self, attr: &CqAttr) -> Result<CompletionQueue> {
        no_set(attr.wait_obj, "cq", "Domain::cq_in")?;
        self.cq_any(attr)
    }
    fn cq_any(&self, attr: &CqAttr) -> Result<CompletionQueue> {
        let mut a = *attr;
        if a.size == 0 {
            a.size = self.info.rx_attr.size.max(self.info.tx_attr.size).max(1);
        }
        Ok(CompletionQueue {
            core: CqCore::new(&a)?,
            _parent: DepGuard::new(&self.deps),
        })
    }
    /// Opens a counter (`fi_cntr_open`); one with FI_WAIT_SET opens
    /// through [`cntr_in`](Self::cntr_in).
    pub fn cntr(&self, attr: &CntrAttr) -> Result<Counter> {
        no_set(attr.wait_obj, "cntr", "Domain::cntr_in")?;
        self.cntr_any(attr)
    }
    fn cntr_any(&self, attr: &CntrAttr) -> Result<Counter> {
        Ok(Counter {
            core: CntrCore::new(attr)?,
            _parent: DepGuard::new(&self.deps),
        })
    }
    /// Opens an address vector (`fi_av_open`).
    pub fn av(&self, attr: &AvAttr) -> Result<AddressVector> {
        let want = self.info.domain_attr.av_type;
        if attr.av_type != av_type::FI_AV_UNSPEC
            && want != av_type::FI_AV_UNSPEC
            && attr.av_type != want
        {
            return Err(Error::inval(format!(
                "av_attr.type {} differs from the domain's av_type {want}",
                attr.av_type
            )));
        }
        Ok(AddressVector {
            core: AvCore::new(attr, self.ops.addr_ops())?,
            eq: Mutex::new(None),
            reported_as: AtomicUsize::new(0),
            _parent: DepGuard::new(&self.deps),
        })
    }
    /// Registers memory (`fi_mr_reg` / `fi_mr_regv`).
    ///
    /// # Safety
    /// The ranges must stay valid while the region is registered and used.
    pub unsafe fn mr_reg(&self, attr: &MrAttr) -> Result<MemoryRegion> {
        let limit = self.info.domain_attr.mr_iov_limit.max(1);
        if attr.iov.len() > limit {
            return Err(Error::inval(format!(
                "mr: {} ranges exceed mr_iov_limit {limit}",
                attr.iov.len()
            )));
        }
        let prov_key = self.info.domain_attr.mr_mode & mr_mode::FI_MR_PROV_KEY != 0;
        Ok(MemoryRegion {
            // SAFETY: this function's contract (the ranges stay valid while
            // registered and used) is register's.
            core: unsafe { self.mr_map.register(attr, prov_key) }?,
            wait_on_drop: true,
            _parent: DepGuard::new(&self.deps),
        })
    }
    pub(crate) fn mr_map_arc(&self) -> &Arc<MrMap> {
        &self.mr_map
    }
    /// Opens an endpoint (`fi_endpoint`).
    pub fn endpoint(&self, info: &Info) -> Result<Endpoint> {
        self.endpoint_with_context(info, 0)
    }
    /// Opens an endpoint whose `context` is reported as `fid` in its EQ events.
    pub fn endpoint_with_context(&self, info: &Info, context: usize) -> Result<Endpoint> {
        let info = &info.in_force();
        let ops = self.ops.endpoint(info)?;
        let mut state = EpState::default();
        state.b.fid = context;
        Ok(Endpoint {
            ops,
            info: info.clone(),
            mr_map: self.mr_map.clone(),
            state: Mutex::new(state),
            default_eq: self.default_eq.clone(),
            _parent: DepGuard::new(&self.deps),
        })
    }
    /// Closes the domain; refused while endpoints, queues, AVs, counters or regions are open.
    pub fn close(self) -> CloseResult<Self> {
        match self.deps.load(Ordering::Acquire) {
            0 => Ok(()),
            n => refuse(self, "domain", n),
        }
    }
}

/// A completion queue.
#[derive(Debug)]
pub struct CompletionQueue {
    core: Arc<CqCore>,
    _parent: DepGuard,
}

impl CompletionQueue {
    /// Reads up to `out.len()` completions (`fi_cq_read`).
    #[inline]
    pub fn read<E: CqFormat>(&self, out: &mut [E]) -> Result<usize> {
        self.core.read(out)
    }
    /// Reads completions with source addresses (`fi_cq_readfrom`).
    pub fn readfrom<E: CqFormat>(&self, out: &mut [E], src: &mut [u64]) -> Result<usize> {
        self.core.readfrom(out, src)
    }
    /// Reads the next error completion (`fi_cq_readerr`).
    pub fn readerr(&self) -> Result<CqErrEntry> {
        self.core.readerr()
    }
    /// Blocks for completions (`fi_cq_sread`); `None` waits forever.
    pub fn sread<E: CqFormat>(&self, out: &mut [E], timeout: Option<Duration>) -> Result<usize> {
        self.core.sread(out, timeout)
    }
    /// Blocks for completions with sources (`fi_cq_sreadfrom`).
    pub fn sreadfrom<E: CqFormat>(
        &self,
        out: &mut [E],
        src: &mut [u64],
        timeout: Option<Duration>,
    ) -> Result<usize> {
        self.core.sreadfrom(out, src, timeout)
    }
    /// Wakes a blocked reader (`fi_cq_signal`): an `sread` returns
    /// `FI_EAGAIN`, a wait set holding the queue wakes, and the wait fd is
    /// readable until a reader takes the signal (the next `trywait` or
    /// blocking read does).
    pub fn signal(&self) {
        self.core.signal()
    }
    /// The fd to put in epoll (`fi_control(FI_GETWAIT)`); call
    /// [`trywait`](Self::trywait) before sleeping on it.
    pub fn wait_fd(&self) -> Option<RawFd> {
        self.core.wait_fd()
    }
    /// `fi_trywait`: Ok if it is safe to sleep on the wait fd.
    pub fn trywait(&self) -> Result<()> {
        self.core.trywait()
    }
    /// The wait fd, for the application's epoll, mio or tokio (`AsyncFd`):
    /// made readable while completions are queued from now on; call
    /// [`trywait`](Self::trywait) before sleeping on it. It lives as long
    /// as the queue. `FI_ENODATA` for a queue opened with FI_WAIT_NONE.
    pub fn fd(&self) -> Result<BorrowedFd<'_>> {
        self.core.wait_fd();
        borrowed(self.core.driver(), "completion queue")
    }
    pub(crate) fn core_arc(&self) -> &Arc<CqCore> {
        &self.core
    }
    /// Closes the queue; refused while endpoints are bound to it.
    pub fn close(self) -> CloseResult<Self> {
        match self.core.bound.load(Ordering::Acquire) {
            0 => Ok(()),
            n => refuse(self, "completion queue", n),
        }
    }
}

/// A counter.
#[derive(Debug)]
pub struct Counter {
    core: Arc<CntrCore>,
    _parent: DepGuard,
}

impl Counter {
    /// `fi_cntr_read`.
    pub fn read(&self) -> u64 {
        self.core.read()
    }
    /// `fi_cntr_readerr`.
    pub fn readerr(&self) -> u64 {
        self.core.readerr()
    }
    /// `fi_cntr_add`.
    pub fn add(&self, n: u64) {
        self.core.add(n);
        crate::util::trigger::run_ready();
    }
    /// `fi_cntr_set`.
    pub fn set(&self, v: u64) {
        self.core.set(v);
        crate::util::trigger::run_ready();
    }
    /// `fi_cntr_adderr`.
    pub fn add_err(&self, n: u64) {
        self.core.add_err(n)
    }
    /// `fi_cntr_seterr`.
    pub fn set_err(&self, v: u64) {
        self.core.set_err(v)
    }
    /// `fi_cntr_wait`.
    pub fn wait(&self, threshold: u64, timeout: Option<Duration>) -> Result<()> {
        self.core.wait(threshold, timeout)
    }
    /// The fd to put in epoll; call [`trywait`](Self::trywait) before sleeping on it.
    pub fn wait_fd(&self) -> Option<RawFd> {
        self.core.wait_fd()
    }
    /// `fi_trywait` for a count of `threshold`.
    pub fn trywait(&self, threshold: u64) -> Result<()> {
        self.core.trywait(threshold)
    }
    /// The wait fd, for epoll, mio or tokio: readable once a count
    /// changed; call [`trywait`](Self::trywait) before sleeping on it.
    /// `FI_ENODATA` for a counter opened with FI_WAIT_NONE.
    pub fn fd(&self) -> Result<BorrowedFd<'_>> {
        self.core.wait_fd();
        borrowed(self.core.driver(), "counter")
    }
    pub(crate) fn core_arc(&self) -> &Arc<CntrCore> {
        &self.core
    }
    /// Closes the counter; refused while endpoints are bound to it.
    pub fn close(self) -> CloseResult<Self> {
        match self.core.bound.load(Ordering::Acquire) {
            0 => Ok(()),
            n => refuse(self, "counter", n),
        }
    }
}

/// An address vector.
pub struct AddressVector {
    core: Arc<AvCore>,
    /// The event queue bound for asynchronous inserts (`fi_av_bind`).
    eq: Mutex<Option<Arc<EqCore>>>,
    /// The `fid` insert reports named it by (0: none yet).
    reported_as: AtomicUsize,
    _parent: DepGuard,
}

impl std::fmt::Debug for AddressVector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AddressVector")
            .field("kind", &self.core.kind())
            .finish_non_exhaustive()
    }
}

impl Drop for AddressVector {
    fn drop(&mut self) {
        let eq = self.eq.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Some(q) = eq.take() {
            // Insert reports still queued name the closed AV: they go too.
            let fid = self.reported_as.load(Ordering::Acquire);
            if fid != 0 {
                q.forget(fid);
            }
            q.bound.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl AddressVector {
    /// The AV type in force (an FI_AV_UNSPEC request gets the domain's).
    pub fn kind(&self) -> u32 {
        self.core.kind()
    }
    /// Binds the event queue that reports asynchronous inserts
    /// (`fi_av_bind`, for an AV opened with FI_EVENT); the queue cannot
    /// close while bound.
    pub fn bind_eq(&self, eq: &EventQueue) -> Result<()> {
        let mut g = self.eq.lock().unwrap_or_else(|e| e.into_inner());
        if g.is_some() {
            return Err(Error::inval("av bind: an event queue is already bound"));
        }
        eq.core.bound.fetch_add(1, Ordering::AcqRel);
        *g = Some(eq.core.clone());
        Ok(())
    }
    /// Whether an event queue is bound.
    pub fn has_eq(&self) -> bool {
        self.eq.lock().unwrap_or_else(|e| e.into_inner()).is_some()
    }
    /// Reports an insert as an AV opened with FI_EVENT does (fi_av(3)):
    /// an error entry (`FI_EINVAL`, `data` the address's index) for each
    /// address `out` holds as `FI_ADDR_NOTAVAIL`, then FI_AV_COMPLETE
    /// with the number inserted. `fid` names the AV and `context` is the
    /// insert's, in every entry. `FI_ENOEQ` when no queue is bound.
    pub fn report_insert(&self, fid: usize, context: usize, out: &[u64]) -> Result<()> {
        let g = self.eq.lock().unwrap_or_else(|e| e.into_inner());
        let Some(q) = g.as_ref() else {
            return Err(Error::new(
                errno::FI_ENOEQ,
                "av insert: an AV opened with FI_EVENT needs a bound event queue",
            ));
        };
        self.reported_as.store(fid, Ordering::Release);
        let mut inserted = 0u64;
        for (i, a) in out.iter().enumerate() {
            if *a == FI_ADDR_NOTAVAIL {
                q.push_err(EqError {
                    fid,
                    context,
                    data: i as u64,
                    err: errno::FI_EINVAL,
                    ..Default::default()
                });
            } else {
                inserted += 1;
            }
        }
        q.push(EqEvent {
            event: eq_event::FI_AV_COMPLETE,
            fid,
            context,
            data: inserted,
            ..Default::default()
        });
        Ok(())
    }
    /// Inserts raw addresses (`fi_av_insert`); see [`AvCore::insert`].
    pub fn insert(&self, addrs: &[&[u8]], out: &mut [u64]) -> Result<usize> {
        self.core.insert(addrs, out)
    }
    /// Inserts one address, returning its fi_addr or the reason it was rejected.
    pub fn insert_one(&self, addr: &[u8]) -> Result<u64> {
        let mut out = [0u64];
        self.core.insert(&[addr], &mut out)?;
        if out[0] == FI_ADDR_NOTAVAIL {
            // Re-run the check to report why.
            return Err(self.core_reason(addr));
        }
        Ok(out[0])
    }
    fn core_reason(&self, addr: &[u8]) -> Error {
        Error::inval(format!(
            "address '{}' was rejected",
            self.core.straddr(addr)
        ))
    }
    /// `fi_av_insertsvc`.
    pub fn insertsvc(&self, node: &str, service: &str) -> Result<u64> {
        self.core.insertsvc(node, service)
    }
    /// `fi_av_remove`.
    pub fn remove(&self, fi_addrs: &[u64]) -> Result<()> {
        self.core.remove(fi_addrs)
    }
    /// `fi_av_lookup`.
    pub fn lookup(&self, fi_addr: u64) -> Result<Vec<u8>> {
        self.core.lookup(fi_addr).map(|a| a.to_vec())
    }
    /// `fi_av_straddr`.
    pub fn straddr(&self, addr: &[u8]) -> String {
        self.core.straddr(addr)
    }
    pub(crate) fn core_arc(&self) -> &Arc<AvCore> {
        &self.core
    }
    /// Closes the AV; refused while endpoints are bound to it.
    pub fn close(self) -> CloseResult<Self> {
        match self.core.bound.load(Ordering::Acquire) {
            0 => Ok(()),
            n => refuse(self, "address vector", n),
        }
    }
}

/// A registered memory region.
///
/// Closing it ([`close`](Self::close) or dropping it) revokes its key at
/// once and then waits for remote accesses already running on its memory
/// (a provider thread copying a peer's WRITE into it, a READ answer being
/// sent from it): `close` up to `FI_MR_CLOSE_MS` (then `FI_EBUSY`, the
/// region handed back, still revoked: retry), drop up to the same bound,
/// after which it logs an error and returns: use `close` for a guarantee.
#[derive(Debug)]
pub struct MemoryRegion {
    core: Arc<MrCore>,
    /// Drop waits for running accesses (not after `release`).
    wait_on_drop: bool,
    _parent: DepGuard,
}

/// How long closing a region waits for running accesses (`FI_MR_CLOSE_MS`).
fn mr_close_wait() -> Duration {
    let t = crate::config::core_tunable("mr_close_ms");
    Duration::from_millis(t.get_size().unwrap_or(5000) as u64)
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        self.core.revoke();
        if self.wait_on_drop {
            let limit = mr_close_wait();
            if !crate::util::mr::wait_idle(&self.core, 1, Some(limit)) {
                tracing::error!(
                    key = self.core.key,
                    "memory region dropped while {} remote access(es) still run on it after {} ms; \
                     they may still touch its memory (close it to get FI_EBUSY instead)",
                    Arc::strong_count(&self.core) - 1,
                    limit.as_millis()
                );
            }
        }
        // Accesses that ran until now were counted; the counter may close.
        self.core.unbind_cntr();
    }
}

impl MemoryRegion {
    /// Closes the region (`fi_close`): revokes its key, then waits up to
    /// `FI_MR_CLOSE_MS` for the remote accesses still running on it. On
    /// `FI_EBUSY` the (revoked) region comes back: drive progress and retry.
    /// After `Ok` no provider touches the memory any more.
    pub fn close(self) -> CloseResult<Self> {
        self.core.revoke();
        let limit = mr_close_wait();
        if crate::util::mr::wait_idle(&self.core, 1, Some(limit)) {
            return Ok(());
        }
        let n = Arc::strong_count(&self.core) - 1;
        let e = Error::busy(format!(
            "memory region {:#x}: {n} remote access(es) still running after {} ms \
             (the key is revoked; retry the close)",
            self.core.key,
            limit.as_millis()
        ));
        Err(Box::new((self, e)))
    }
    /// Revokes the region without waiting: no new remote access starts;
    /// those already running hold the returned region core until they end
    /// (idle once it has no strong count). The memory must stay valid until
    /// then (the registration's promise).
    pub fn release(mut self) -> std::sync::Weak<MrCore> {
        self.core.revoke();
        self.wait_on_drop = false;
        Arc::downgrade(&self.core)
    }
    /// The remote key (`fi_mr_key`).
    pub fn key(&self) -> u64 {
        self.core.key
    }
    /// The local descriptor (`fi_mr_desc`).
    pub fn desc(&self) -> u64 {
        self.core.desc()
    }
    pub(crate) fn core_arc(&self) -> &Arc<MrCore> {
        &self.core
    }
    /// Binds a counter that counts remote reads and/or writes of this region
    /// (`fi_mr_bind` with FI_REMOTE_READ / FI_REMOTE_WRITE; needs FI_RMA_EVENT).
    pub fn bind_cntr(&self, cntr: &Counter, flags: u64) -> Result<()> {
        self.core.bind_cntr(cntr.core.clone(), flags)
    }
}

#[derive(Default)]
struct EpState {
    b: EpBindings,
    enabled: bool,
}

/// An endpoint.
pub struct Endpoint {
    ops: Arc<dyn EndpointOps>,
    info: Info,
    mr_map: Arc<MrMap>,
    state: Mutex<EpState>,
    /// The domain's event queue, taken at enable when none is bound.
    default_eq: DefaultEq,
    _parent: DepGuard,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("provider", &self.info.provider())
            .finish()
    }
}

fn single(buf: *const u8, len: usize) -> [IoVec; 1] {
    [IoVec {
        base: buf as usize,
        len,
    }]
}

impl Endpoint {
    fn state(&self) -> std::sync::MutexGuard<'_, EpState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn not_enabled(&self, what: &str) -> Result<std::sync::MutexGuard<'_, EpState>> {
        let s = self.state();
        if s.enabled {
            return Err(Error::new(
                errno::FI_EOPBADSTATE,
                format!("{what}: the endpoint is already enabled"),
            ));
        }
        Ok(s)
    }

    /// Binds a completion queue (`fi_ep_bind`) with FI_TRANSMIT and/or
    /// FI_RECV, optionally FI_SELECTIVE_COMPLETION.
    pub fn bind_cq(&self, cq: &CompletionQueue, flags: u64) -> Result<()> {
        let known = FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION;
        if flags & !known != 0 || flags & (FI_TRANSMIT | FI_RECV) == 0 {
            return Err(Error::new(
                errno::FI_EBADFLAGS,
                format!("bind cq: flags {flags:#x} must be FI_TRANSMIT and/or FI_RECV"),
            ));
        }
        let mut s = self.not_enabled("bind cq")?;
        let already = [&s.b.tx_cq, &s.b.rx_cq]
            .into_iter()
            .flatten()
            .any(|c| Arc::ptr_eq(c, &cq.core));
        let sel = flags & FI_SELECTIVE_COMPLETION != 0;
        if flags & FI_TRANSMIT != 0 {
            if s.b.tx_cq.is_some() {
                return Err(Error::inval("bind cq: a transmit CQ is already bound"));
            }
            s.b.tx_cq = Some(cq.core.clone());
            s.b.tx_selective = sel;
        }
        if flags & FI_RECV != 0 {
            if s.b.rx_cq.is_some() {
                return Err(Error::inval("bind cq: a receive CQ is already bound"));
            }
            s.b.rx_cq = Some(cq.core.clone());
            s.b.rx_selective = sel;
        }
        if !already {
            cq.core.bound.fetch_add(1, Ordering::AcqRel);
        }
        Ok(())
    }

    /// Binds an address vector.
    pub fn bind_av(&self, av: &AddressVector) -> Result<()> {
        let mut s = self.not_enabled("bind av")?;
        if s.b.av.is_some() {
            return Err(Error::inval("bind av: an address vector is already bound"));
        }
        s.b.av = Some(av.core.clone());
        av.core.bound.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// Binds a counter for FI_SEND / FI_RECV / FI_READ / FI_WRITE events.
    pub fn bind_cntr(&self, cntr: &Counter, flags: u64) -> Result<()> {
        let known = FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
        if flags & !known != 0 || flags == 0 {
            return Err(Error::new(
                errno::FI_EBADFLAGS,
                format!("bind cntr: flags {flags:#x} name no counted event"),
            ));
        }
        let mut s = self.not_enabled("bind cntr")?;
        let already =
            s.b.cntrs()
                .into_iter()
                .flatten()
                .any(|c| Arc::ptr_eq(c, &cntr.core));
        let c = Some(cntr.core.clone());
        let b = &mut s.b;
        for (bit, slot) in [
            (FI_SEND, &mut b.send_cntr),
            (FI_RECV, &mut b.recv_cntr),
            (FI_READ, &mut b.read_cntr),
            (FI_WRITE, &mut b.write_cntr),
            (FI_REMOTE_READ, &mut b.rem_read_cntr),
            (FI_REMOTE_WRITE, &mut b.rem_write_cntr),
        ] {
            if flags & bit != 0 {
                *slot = c.clone();
            }
        }
        if !already {
            cntr.core.bound.fetch_add(1, Ordering::AcqRel);
        }
        Ok(())
    }

    /// Binds an event queue for connection events (`fi_ep_bind` with an EQ).
    pub fn bind_eq(&self, eq: &EventQueue) -> Result<()> {
        let mut s = self.not_enabled("bind eq")?;
        if s.b.eq.is_some() {
            return Err(Error::inval("bind eq: an event queue is already bound"));
        }
        s.b.eq = Some(eq.core.clone());
        eq.core.bound.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    fn enabled_for(&self, what: &str) -> Result<()> {
        if !self.state().enabled {
            return Err(Error::new(
                errno::FI_EOPBADSTATE,
                format!("{what}: enable the endpoint first"),
            ));
        }
        Ok(())
    }

    /// Whether connection events have a queue: the endpoint's own, or the
    /// domain's it takes when enabled.
    fn has_eq(&self) -> bool {
        let s = self.state();
        s.b.eq.is_some()
            || (!s.enabled
                && self
                    .default_eq
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .is_some())
    }

    /// Enables the endpoint if it is not yet (`fi_connect` and `fi_accept`
    /// do, fi_endpoint(3)); an endpoint another thread enabled meanwhile
    /// is fine.
    fn enable_implicitly(&self) -> Result<()> {
        if self.state().enabled {
            return Ok(());
        }
        match self.enable() {
            Err(_) if self.state().enabled => Ok(()),
            r => r,
        }
    }

    /// Connects to a listening peer with private data (`fi_connect`); the
    /// outcome arrives on the bound EQ as FI_CONNECTED or an error entry.
    /// An endpoint not yet enabled is enabled first.
    pub fn connect(&self, addr: &[u8], param: &[u8]) -> Result<()> {
        if !self.has_eq() {
            return Err(Error::new(
                errno::FI_ENOEQ,
                "connect: no event queue is bound",
            ));
        }
        self.enable_implicitly()?;
        self.ops.connect(addr, param)
    }

    /// Accepts the connection request this endpoint was opened for
    /// (`fi_accept`), enabling the endpoint first if it is not yet.
    pub fn accept(&self, param: &[u8]) -> Result<()> {
        if !self.has_eq() {
            return Err(Error::new(
                errno::FI_ENOEQ,
                "accept: no event queue is bound",
            ));
        }
        self.enable_implicitly()?;
        self.ops.accept(param)
    }

    /// Shuts the connection down (`fi_shutdown`).
    pub fn shutdown(&self, flags: u64) -> Result<()> {
        self.ops.shutdown(flags)
    }

    /// The connected peer's address (`fi_getpeer`).
    pub fn getpeer(&self) -> Result<Vec<u8>> {
        self.ops.getpeer()
    }

    /// Enables the endpoint (`fi_enable`). An RDM endpoint needs an AV
    /// (`FI_ENOAV`); transfers need a CQ or counter (`FI_ENOCQ`).
    pub fn enable(&self) -> Result<()> {
        let mut s = self.not_enabled("enable")?;
        if self.info.ep_attr.ep_type == ep_type::FI_EP_RDM && s.b.av.is_none() {
            return Err(Error::new(
                errno::FI_ENOAV,
                "enable: an RDM endpoint needs a bound address vector",
            ));
        }
        if s.b.tx_cq.is_none()
            && s.b.send_cntr.is_none()
            && s.b.rx_cq.is_none()
            && s.b.recv_cntr.is_none()
            && s.b.read_cntr.is_none()
            && s.b.write_cntr.is_none()
            && s.b.rem_read_cntr.is_none()
            && s.b.rem_write_cntr.is_none()
        {
            return Err(Error::new(
                errno::FI_ENOCQ,
                "enable: no completion queue or counter is bound",
            ));
        }
        s.b.mr_map = Some(self.mr_map.clone());
        s.b.info = self.info.clone();
        // No queue of its own: the domain's, if it has one.
        let defaulted = s.b.eq.is_none();
        if defaulted {
            let d = self.default_eq.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((q, _)) = d.as_ref() {
                q.bound.fetch_add(1, Ordering::AcqRel);
                s.b.eq = Some(q.clone());
            }
        }
        if let Err(e) = self.ops.enable(s.b.clone()) {
            if defaulted {
                if let Some(q) = s.b.eq.take() {
                    q.bound.fetch_sub(1, Ordering::AcqRel);
                }
            }
            return Err(e);
        }
        let prog: Arc<dyn Progress> = self.ops.clone();
        for cq in [&s.b.tx_cq, &s.b.rx_cq].into_iter().flatten() {
            cq.attach(prog.clone())?;
        }
        for c in s.b.cntrs().into_iter().flatten() {
            c.attach(prog.clone())?;
        }
        if let Some(eq) = &s.b.eq {
            eq.attach(prog.clone())?;
        }
        s.enabled = true;
        Ok(())
    }

    /// The endpoint's address (`fi_getname`).
    pub fn getname(&self) -> Result<Vec<u8>> {
        self.ops.getname()
    }

    /// Sets the endpoint's own address (`fi_setname`), in the offer's
    /// address format; `getname` then returns it. Only before `enable`
    /// (`FI_EOPBADSTATE` after).
    pub fn setname(&self, addr: &[u8]) -> Result<()> {
        let _s = self.not_enabled("setname")?;
        self.ops.setname(addr)
    }

    /// The offer this endpoint was opened with.
    pub fn info(&self) -> &Info {
        &self.info
    }

    /// Sets an option (`fi_setopt`, level FI_OPT_ENDPOINT).
    pub fn setopt(&self, name: i32, value: usize) -> Result<()> {
        self.ops.setopt(name, value)
    }

    /// Reads an option (`fi_getopt`).
    pub fn getopt(&self, name: i32) -> Result<usize> {
        self.ops.getopt(name)
    }

    /// Cancels a posted receive (`fi_cancel`); it completes with FI_ECANCELED.
    pub fn cancel(&self, context: usize) -> Result<()> {
        self.ops.cancel(context)
    }

    /// Drives progress directly (what CQ reads do).
    pub fn progress(&self) {
        self.ops.progress()
    }

    /// `fi_sendmsg` / `fi_tsendmsg`: the general send.
    ///
    /// # Safety
    /// The iov memory must stay valid until the send completes (with
    /// FI_INJECT: until this call returns).
    #[inline]
    pub unsafe fn post_send(&self, op: &SendOp<'_>) -> Result<()> {
        // SAFETY: forwarded caller contract.
        unsafe { self.ops.post_send(op) }
    }

    /// `fi_recvmsg` / `fi_trecvmsg`: the general receive. FI_DISCARD
    /// goes with FI_PEEK or FI_CLAIM (fi_tagged(3)); alone it is
    /// `FI_EBADFLAGS`, whatever the provider.
    ///
    /// # Safety
    /// The iov memory must stay valid and unaliased until the receive completes.
    #[inline]
    pub unsafe fn post_recv(&self, op: &RecvOp<'_>) -> Result<()> {
        if op.flags & FI_DISCARD != 0 && op.flags & (FI_PEEK | FI_CLAIM) == 0 {
            return Err(discard_alone());
        }
        // SAFETY: forwarded caller contract.
        unsafe { self.ops.post_recv(op) }
    }

    /// `fi_send`.
    ///
    /// # Safety
    /// `buf..buf+len` must stay valid until the send completes.
    #[inline]
    pub unsafe fn send(&self, buf: *const u8, len: usize, dest: u64, context: usize) -> Result<()> {
        let iov = single(buf, len);
        let op = SendOp {
            iov: &iov,
            desc: &[],
            dest,
            tag: 0,
            data: 0,
            context,
            flags: FI_COMPLETION,
            tagged: false,
        };
        // SAFETY: forwarded caller contract.
        unsafe { self.ops.post_send(&op) }
    }

    /// `fi_senddata`: a send carrying remote CQ data.
    ///
    /// # Safety
    /// As [`send`](Self::send).
    pub unsafe fn senddata(
        &self,
        buf: *const u8,
        len: usize,
        data: u64,
        dest: u64,
        context: usize,
    ) -> Result<()> {
        let iov = single(buf, len);
        let op = SendOp {
            iov: &iov,
            desc: &[],
            dest,
            tag: 0,
            data,
            context,
            flags: FI_COMPLETION | FI_REMOTE_CQ_DATA,
            tagged: false,
        };
        // SAFETY: forwarded caller contract.
        unsafe { self.ops.post_send(&op) }
    }

    /// `fi_sendv`.
    ///
    /// # Safety
    /// Every iov range must stay valid until the send completes.
    pub unsafe fn sendv(&self, iov: &[IoVec], dest: u64, context: usize) -> Result<()> {
        let op = SendOp {
            iov,
            desc: &[],
            dest,
            tag: 0,
            data: 0,
            context,
            flags: FI_COMPLETION,
            tagged: false,
        };
        // SAFETY: forwarded caller contract.
        unsafe { self.ops.post_send(&op) }
    }

    /// `fi_inject`: the buffer may be reused on return; no completion.
    pub fn inject(&self, buf: &[u8], dest: u64) -> Result<()> {
        let iov = [IoVec::from_slice(buf)];
        let op = SendOp {
            iov: &iov,
            desc: &[],
            dest,
            tag: 0,
            data: 0,
            context: 0,
            flags: FI_INJECT | OFI_INJECT_CALL,
            tagged: false,
        };
        // SAFETY: FI_INJECT copies before returning; buf is live for the call.
        unsafe { self.ops.post_send(&op) }
    }

    /// `fi_injectdata`.
    pub fn injectdata(&self, buf: &[u8], data: u64, dest: u64) -> Result<()> {
        let iov = [IoVec::from_slice(buf)];
        let op = SendOp {
            iov: &iov,
            desc: &[],
            dest,
            tag: 0,
            data,
            context: 0,
            flags: FI_INJECT | OFI_INJECT_CALL | FI_REMOTE_CQ_DATA,
            tagged: false,
        };
        // SAFETY: FI_INJECT copies before returning; buf is live for the call.
        unsafe { self.ops.post_send(&op) }
    }

    /// `fi_recv`.
    ///
    /// # Safety
    /// `buf..buf+len` must stay valid and unaliased until the receive completes.
    #[inline]
    pub unsafe fn recv(&self, buf: *mut u8, len: usize, src: u64, context: usize) -> Result<()> {
        let iov = single(buf, len);
        let op = RecvOp {
            iov: &iov,
            desc: &[],
            src,
            tag: 0,
            ignore: 0,
            context,
            flags: FI_COMPLETION,
            tagged: false,
        };
        // SAFETY: forwarded caller contract.
        unsafe { self.ops.post_recv(&op) }
    }

    /// `fi_recvv`.
    ///
    /// # Safety
    /// Every iov range must stay valid and unaliased until the receive completes.
    pub unsafe fn recvv(&self, iov: &[IoVec], src: u64, context: usize) -> Result<()> {
        let op = RecvOp {
            iov,
            desc: &[],
            src,
            tag: 0,
            ignore: 0,
            context,
            flags: FI_COMPLETION,
            tagged: false,
        };
        // SAFETY: forwarded caller contract.
        unsafe { self.ops.post_recv(&op) }
    }

    /// `fi_tsend`.
    ///
    /// # Safety
    /// As [`send`](Self::send).
    #[inline]
    pub unsafe fn tsend(
        &self,
        buf: *const u8,
        len: usize,
        dest: u64,
        tag: u64,
        context: usize,
    ) -> Result<()> {
        let iov = single(buf, len);
        let op = SendOp {
            iov: &iov,
            desc: &[],
            dest,
            tag,
            data: 0,
            context,
            flags: FI_COMPLETION,
            tagged: true,
        };
        // SAFETY: forwarded caller contract.
        unsafe { self.ops.post_send(&op) }
    }

    /// `fi_tsenddata`.
    ///
    /// # Safety
    /// As [`send`](Self::send).
    pub unsafe fn tsenddata(
        &self,
        buf: *const u8,
        len: usize,
        data: u64,
        dest: u64,
        tag: u64,
        context: usize,
    ) -> Result<()> {
        let iov = single(buf, len);
        let op = SendOp {
            iov: &iov,
            desc: &[],
            dest,
            tag,
            data,
            context,
            flags: FI_COMPLETION | FI_REMOTE_CQ_DATA,
            tagged: true,
        };
        // SAFETY: forwarded caller contract.
        unsafe { self.ops.post_send(&op) }
    }

    /// `fi_tinject`.
    pub fn tinject(&self, buf: &[u8], dest: u64, tag: u64) -> Result<()> {
        let iov = [IoVec::from_slice(buf)];
        let op = SendOp {
            iov: &iov,
            desc: &[],
            dest,
            tag,
            data: 0,
            context: 0,
            flags: FI_INJECT | OFI_INJECT_CALL,
            tagged: true,
        };
        // SAFETY: FI_INJECT copies before returning; buf is live for the call.
        unsafe { self.ops.post_send(&op) }
    }

    /// `fi_trecv`.
    ///
    /// # Safety
    /// As [`recv`](Self::recv).
    #[inline]
    pub unsafe fn trecv(
        &self,
        buf: *mut u8,
        len: usize,
        src: u64,
        tag: u64,
        ignore: u64,
        context: usize,
    ) -> Result<()> {
        let iov = single(buf, len);
        let op = RecvOp {
            iov: &iov,
            desc: &[],
            src,
            tag,
            ignore,
            context,
            flags: FI_COMPLETION,
            tagged: true,
        };
        // SAFETY: forwarded caller contract.
        unsafe { self.ops.post_recv(&op) }
    }

    pub(crate) fn ops_arc(&self) -> &Arc<dyn EndpointOps> {
        &self.ops
    }

    /// Closes the endpoint, releasing its bindings.
    pub fn close(self) -> CloseResult<Self> {
        Ok(())
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        let s = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        let prog: Arc<dyn Progress> = self.ops.clone();
        if s.enabled {
            for cq in [&s.b.tx_cq, &s.b.rx_cq].into_iter().flatten() {
                cq.detach(&prog);
            }
            for c in s.b.cntrs().into_iter().flatten() {
                c.detach(&prog);
            }
            if let Some(eq) = &s.b.eq {
                eq.detach(&prog);
            }
        }
        self.ops.close();
        if let Some(eq) = &s.b.eq {
            // Events naming the closed endpoint go with it (a context of 0
            // names nothing apart: others may share it).
            if s.b.fid != 0 {
                eq.forget(s.b.fid);
            }
            eq.bound.fetch_sub(1, Ordering::AcqRel);
        }
        // Release the bound counts taken at bind time (a CQ bound for both
        // directions was counted once).
        let mut seen: Vec<*const CqCore> = Vec::new();
        for cq in [&s.b.tx_cq, &s.b.rx_cq].into_iter().flatten() {
            let p = Arc::as_ptr(cq);
            if !seen.contains(&p) {
                seen.push(p);
                cq.bound.fetch_sub(1, Ordering::AcqRel);
            }
        }
        if let Some(av) = &s.b.av {
            av.bound.fetch_sub(1, Ordering::AcqRel);
        }
        let mut seen_c: Vec<*const CntrCore> = Vec::new();
        for c in s.b.cntrs().into_iter().flatten() {
            let p = Arc::as_ptr(c);
            if !seen_c.contains(&p) {
                seen_c.push(p);
                c.bound.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
}

/// An event queue.
#[derive(Debug)]
pub struct EventQueue {
    core: Arc<EqCore>,
    _parent: DepGuard,
}

impl EventQueue {
    /// `fi_eq_read`: the next event; `FI_EAGAIN` when none, `FI_EAVAIL`
    /// when an error entry is next.
    pub fn read(&self) -> Result<EqEvent> {
        self.core.read(false)
    }
    /// `fi_eq_read` with FI_PEEK: the next event, left in the queue.
    pub fn peek(&self) -> Result<EqEvent> {
        self.core.read(true)
    }
    /// `fi_eq_readerr`.
    pub fn readerr(&self) -> Result<EqError> {
        self.core.readerr()
    }
    /// `fi_eq_sread`: waits up to `timeout` (None: forever).
    pub fn sread(&self, timeout: Option<Duration>) -> Result<EqEvent> {
        self.core.sread(timeout, false)
    }
    /// `fi_eq_write`: inserts an application event.
    pub fn write(&self, e: EqEvent) {
        self.core.write(e)
    }
    /// The wait fd for epoll: readable while events are queued; call
    /// [`trywait`](Self::trywait) before sleeping on it.
    pub fn wait_fd(&self) -> Option<RawFd> {
        self.core.wait_fd()
    }
    /// `fi_trywait`: Ok if it is safe to sleep on the wait fd.
    pub fn trywait(&self) -> Result<()> {
        self.core.trywait()
    }
    /// Wakes a blocked `sread`.
    pub fn signal(&self) {
        self.core.signal()
    }
    /// The wait fd, for epoll, mio or tokio: readable while events are
    /// queued; call [`trywait`](Self::trywait) before sleeping on it.
    /// `FI_ENODATA` for a queue opened with FI_WAIT_NONE.
    pub fn fd(&self) -> Result<BorrowedFd<'_>> {
        self.core.wait_fd();
        borrowed(self.core.driver(), "event queue")
    }
    pub(crate) fn core_arc(&self) -> &Arc<EqCore> {
        &self.core
    }
    /// Closes the queue; refused while endpoints are bound to it.
    pub fn close(self) -> CloseResult<Self> {
        match self.core.bound.load(Ordering::Acquire) {
            0 => Ok(()),
            n => refuse(self, "event queue", n),
        }
    }
}

/// A passive endpoint: listens for connection requests.
pub struct PassiveEndpoint {
    ops: Arc<dyn PassiveEndpointOps>,
    context: usize,
    /// `listen` succeeded (the address can no longer change).
    listening: std::sync::atomic::AtomicBool,
    eq: Mutex<Option<Arc<EqCore>>>,
    _parent: DepGuard,
}

impl std::fmt::Debug for PassiveEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PassiveEndpoint")
            .field("context", &self.context)
            .finish()
    }
}

impl PassiveEndpoint {
    /// Binds the event queue that receives FI_CONNREQ events.
    pub fn bind_eq(&self, eq: &EventQueue) -> Result<()> {
        let mut g = self.eq.lock().unwrap_or_else(|e| e.into_inner());
        if g.is_some() {
            return Err(Error::inval("bind eq: an event queue is already bound"));
        }
        self.ops.bind_eq(eq.core.clone(), self.context)?;
        eq.core.attach(self.ops.clone())?;
        eq.core.bound.fetch_add(1, Ordering::AcqRel);
        *g = Some(eq.core.clone());
        Ok(())
    }
    /// Starts listening (`fi_listen`); needs a bound event queue.
    pub fn listen(&self) -> Result<()> {
        if self.eq.lock().unwrap_or_else(|e| e.into_inner()).is_none() {
            return Err(Error::new(
                errno::FI_ENOEQ,
                "listen: no event queue is bound",
            ));
        }
        self.ops.listen()?;
        self.listening.store(true, Ordering::Release);
        Ok(())
    }
    /// The listening address (`fi_getname`).
    pub fn getname(&self) -> Result<Vec<u8>> {
        self.ops.getname()
    }
    /// Sets the address to listen on (`fi_setname`), in the offer's
    /// address format; `getname` then returns it. Only before `listen`
    /// (`FI_EOPBADSTATE` after).
    pub fn setname(&self, addr: &[u8]) -> Result<()> {
        if self.listening.load(Ordering::Acquire) {
            return Err(Error::new(
                errno::FI_EOPBADSTATE,
                "setname: the passive endpoint is already listening",
            ));
        }
        self.ops.setname(addr)
    }
    /// Reads an option (`fi_getopt`, level FI_OPT_ENDPOINT):
    /// FI_OPT_CM_DATA_SIZE is the largest private data a connection
    /// request to this endpoint may carry.
    pub fn getopt(&self, name: i32) -> Result<usize> {
        self.ops.getopt(name)
    }
    /// Rejects a connection request with private data (`fi_reject`).
    pub fn reject(&self, handle: &ConnHandle, param: &[u8]) -> Result<()> {
        self.ops.reject(handle, param)
    }
    /// Closes the passive endpoint.
    pub fn close(self) -> CloseResult<Self> {
        Ok(())
    }
}

impl Drop for PassiveEndpoint {
    fn drop(&mut self) {
        let eq = self.eq.get_mut().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(eq) = &eq {
            let p: Arc<dyn Progress> = self.ops.clone();
            eq.detach(&p);
        }
        self.ops.close();
        if let Some(eq) = eq {
            // Its unread connection requests go with it (unless its
            // context, 0, names nothing apart).
            if self.context != 0 {
                eq.forget(self.context);
            }
            eq.bound.fetch_sub(1, Ordering::AcqRel);
        }
    }
}
