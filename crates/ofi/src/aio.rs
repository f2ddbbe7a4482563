//! The async layer (cargo feature `tokio`): a [`Channel`] whose operations
//! are futures that own their buffers and resolve to what the safe layer's
//! handles return: a [`Done`] with the buffer, or an [`OpError`] (which
//! converts into [`Error`], so `?` works, and holds the buffer if it can be
//! handed back).
//!
//! ```no_run
//! # async fn demo() -> ofi::Result<()> {
//! use ofi::aio::Channel;
//! use ofi::{Caps, EpType, Hints};
//! let info = Hints::new().caps(Caps::TAGGED).ep_type(EpType::Rdm).provider("shm").first()?;
//! let (a, b) = (Channel::open(&info)?, Channel::open(&info)?);
//! let to_b = a.insert(&b.address()?)?;
//! let reply = b.trecv(vec![0u8; 64], 1, 0);
//! a.tsend(b"hello".to_vec(), to_b, 1).await?;
//! let got = reply.await?;
//! assert_eq!(got.bytes(), b"hello");
//! # Ok(()) }
//! ```
//!
//! - **Sharing**: a channel is a cheap handle (`Clone`); any number of
//!   tasks post on it and await their own operations. The channel closes
//!   when its last handle drops (or on [`Channel::close`]): operations
//!   still in flight then resolve to a `Canceled` error with their buffers.
//! - **Progress**: a pending operation drives the channel's completion
//!   queue when polled, then sleeps on the queue's wait fd through tokio's
//!   `AsyncFd` (no thread of ofi's own). [`Channel::open_busy`] instead
//!   polls without sleeping, for the lowest latency at the cost of a core.
//! - **Cancellation**: dropping an operation's future cancels it (a
//!   receive is cancelled at the provider; a send or one-sided operation
//!   runs to its end) and hands the buffer to the channel, which frees it
//!   only once the provider is done with it. Posts are made when the
//!   operation is created, in program order; a post the provider refuses
//!   resolves at once to an [`OpError`] holding the buffer.
//! - **Connections**: MSG endpoints connect with [`Channel::connect`] and
//!   accept through a [`Listener`].
//! - **Collectives**: an RDM channel opened from an offer with
//!   FI_COLLECTIVE [`join`](Channel::join)s a group of its peers; each
//!   collective over it is an [`Op`] owning its buffers.
//!
//! The channel needs a tokio runtime with I/O enabled when it is opened
//! (busy-poll channels do not); outside one, `open` fails with an error.

// The async layer calls the raw layer as the safe layer does (each
// buffer owned by its future or the table until completion), and registers
// wait fds with tokio.
#![allow(unsafe_code)]

mod cm;
mod coll;
mod op;

pub use crate::safe::{Done, OpError};
pub use cm::Listener;
pub use op::Op;

use crate::consts::*;
use crate::safe::buf::Held;
use crate::safe::table::Table;
use crate::safe::{Addr, Atomic};
use crate::spi::HasCore;
use crate::{
    errno, AddressVector, AtomicKind, AtomicOp, AvAttr, CompletionQueue, CqAttr, Domain, Endpoint,
    Error, EventQueue, Fabric, Info, IoBuf, IoBufMut, Ioc, RecvOp, Result, RmaDir, RmaIoc, RmaIov,
    RmaOp, SendOp,
};
use ofi_core::util::atomic::datatype_size;
use ofi_core::util::iov::IoVec;
use ofi_core::util::lock::{SpinGuard, SpinLock};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::io::unix::AsyncFd;

/// What the channel's lock guards: the endpoint (gone once closed) and the
/// operations in flight.
pub(crate) struct Core {
    // Field order is drop order: the endpoint stops touching buffers
    // before the table (holding abandoned operations' buffers) goes.
    ep: Option<Endpoint>,
    pub(crate) table: Table,
    /// Wakers of the operations a progress pass completed, woken once the
    /// queue's lock is released (kept: no allocation per pass).
    woken: Vec<std::task::Waker>,
    /// The operation whose task last registered for the wait fd (tokio
    /// wakes only the last one): (slot, generation).
    pub(crate) watcher: Option<(u32, u32)>,
}

/// A channel's shared state: futures hold it, handles count themselves.
pub(crate) struct Inner {
    // Field order is drop order: the fd leaves the reactor first, then the
    // endpoint closes (inside `core`), then the objects it was bound to.
    fd: Option<AsyncFd<OwnedFd>>,
    /// A test-and-set lock (one atomic operation to take it, a plain
    /// store to give it back; std's mutex spends a second on unlock), as
    /// the providers' data paths use: posts and progress hold it briefly.
    core: SpinLock<Core>,
    cq: CompletionQueue,
    _av: Option<AddressVector>,
    _eq: Option<(EventQueue, AsyncFd<OwnedFd>)>,
    /// Joins started (their contexts).
    joins: AtomicUsize,
    handles: AtomicUsize,
    /// Buffers of dropped regions a peer was still accessing.
    parked: Arc<crate::safe::region::Parked>,
    _domain: Domain,
    _fabric: Fabric,
}

/// The channel's lock, held: on release, the buffers of abandoned
/// operations that finished meanwhile are dropped after the lock is given
/// back. Dropping a buffer runs its owner's code, which may use the
/// channel (or drop its last handle, which takes this lock to close it).
pub(crate) struct CoreGuard<'a> {
    guard: Option<SpinGuard<'a, Core>>,
}

impl std::ops::Deref for CoreGuard<'_> {
    type Target = Core;
    #[inline(always)]
    fn deref(&self) -> &Core {
        match &self.guard {
            Some(g) => g,
            None => unreachable!("a CoreGuard holds its lock until it drops"),
        }
    }
}

impl std::ops::DerefMut for CoreGuard<'_> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut Core {
        match &mut self.guard {
            Some(g) => g,
            None => unreachable!("a CoreGuard holds its lock until it drops"),
        }
    }
}

impl Drop for CoreGuard<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        if let Some(g) = self.guard.take() {
            if g.table.has_dead() {
                release_with_dead(g);
            }
        }
    }
}

/// Gives the lock back, then drops the buffers that waited for it.
#[cold]
#[inline(never)]
fn release_with_dead(g: SpinGuard<'_, Core>) {
    let dead = g.table.take_dead();
    drop(g);
    drop(dead);
}

impl Inner {
    #[inline(always)]
    pub(crate) fn lock(&self) -> CoreGuard<'_> {
        CoreGuard {
            guard: Some(self.core.lock()),
        }
    }

    pub(crate) fn busy(&self) -> bool {
        self.fd.is_none()
    }

    pub(crate) fn fd(&self) -> Option<&AsyncFd<OwnedFd>> {
        self.fd.as_ref()
    }

    pub(crate) fn cq(&self) -> &CompletionQueue {
        &self.cq
    }

    /// One progress pass: reads up to 16 completions, each straight into
    /// its operation's slot, and wakes their tasks. Buffers of abandoned
    /// operations that finished are dropped when `core`'s guard releases
    /// the lock. Returns how many arrived.
    pub(crate) fn progress(&self, core: &mut Core) -> usize {
        self.parked.sweep();
        let Core { table, woken, .. } = core;
        let read = self.cq.core().readfrom_with(16, |e, src| {
            if let Some(w) = table.record::<true>(e, src) {
                woken.push(w);
            }
        });
        if !woken.is_empty() {
            for w in woken.drain(..) {
                w.wake();
            }
        }
        match read {
            Ok(n) => n,
            Err(e) if e.code() == errno::FI_EAVAIL => match self.cq.readerr() {
                Ok(e) => {
                    if let Some(w) = table.record_err(&e) {
                        w.wake();
                    }
                    1
                }
                Err(_) => 0,
            },
            Err(_) => 0,
        }
    }

    /// Ends the channel: the endpoint closes (no provider touches a buffer
    /// afterwards) and every operation in flight resolves to `FI_ECANCELED`.
    fn close(&self) {
        let mut core = self.lock();
        let ep = core.ep.take();
        drop(ep);
        let wake = core.table.end_all(errno::FI_ECANCELED);
        core.watcher = None;
        drop(core);
        for w in wake {
            w.wake();
        }
    }
}

/// A registered `AsyncFd` over a copy of a wait fd (the copy shares the
/// original's epoll instance, and lives as long as the registration).
pub(crate) fn async_fd(fd: std::os::fd::BorrowedFd<'_>) -> Result<AsyncFd<OwnedFd>> {
    if tokio::runtime::Handle::try_current().is_err() {
        return Err(Error::new(
            errno::FI_EOPBADSTATE,
            "aio: no tokio runtime here (open the channel inside one, or use open_busy)",
        ));
    }
    let owned = fd
        .try_clone_to_owned()
        .map_err(|e| Error::os(e, "aio: dup of the wait fd"))?;
    // A runtime without I/O enabled panics in AsyncFd::new: turned into an
    // error (the panic message still reaches the panic hook).
    let made = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: an OwnedFd is a valid open descriptor that stays open,
        // and always names the same description, until the AsyncFd drops it.
        unsafe { AsyncFd::register_with_interest(owned, tokio::io::Interest::READABLE) }
    }));
    match made {
        Ok(Ok(fd)) => Ok(fd),
        Ok(Err(e)) => Err(Error::os(
            e.into_parts().1,
            "aio: registering the wait fd with tokio",
        )),
        Err(_) => Err(Error::new(
            errno::FI_EOPBADSTATE,
            "aio: the tokio runtime has no I/O driver (build it with enable_io)",
        )),
    }
}

/// A handle on an async channel: an endpoint with its completion queue
/// (and address vector, or connection) shared by every task holding a
/// clone. See the [module](self) docs.
pub struct Channel {
    inner: Arc<Inner>,
}

// Tasks on any thread share a channel and await its operations.
const _: fn() = || {
    fn shared<T: Send + Sync>() {}
    fn send<T: Send>() {}
    shared::<Channel>();
    send::<Op<Vec<u8>>>();
};

impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("aio::Channel")
            .field("busy_poll", &self.inner.busy())
            .finish()
    }
}

impl Clone for Channel {
    fn clone(&self) -> Channel {
        self.inner.handles.fetch_add(1, Ordering::Relaxed);
        Channel {
            inner: self.inner.clone(),
        }
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        if self.inner.handles.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.inner.close();
        }
    }
}

/// The objects behind a channel, before the endpoint is enabled.
pub(crate) struct Parts {
    pub fabric: Fabric,
    pub domain: Domain,
    pub cq: CompletionQueue,
    pub av: Option<AddressVector>,
    pub eq: Option<(EventQueue, AsyncFd<OwnedFd>)>,
    pub ep: Endpoint,
}

impl Parts {
    /// Opens the fabric, domain, queue and endpoint for `info` (an AV
    /// unless it is an MSG offer).
    pub(crate) fn open(info: &Info, fabric: Option<Fabric>) -> Result<Parts> {
        let fabric = match fabric {
            Some(f) => f,
            None => Fabric::open(&info.fabric_attr)?,
        };
        let domain = fabric.domain(info)?;
        let cq = domain.cq(&CqAttr {
            size: 0,
            format: cq_format::FI_CQ_FORMAT_TAGGED,
            wait_obj: wait_obj::FI_WAIT_FD,
        })?;
        let ep = domain.endpoint(info)?;
        ep.bind_cq(&cq, FI_TRANSMIT | FI_RECV)?;
        let av = if info.ep_attr.ep_type == ep_type::FI_EP_MSG {
            None
        } else {
            let av = domain.av(&AvAttr::default())?;
            ep.bind_av(&av)?;
            Some(av)
        };
        Ok(Parts {
            fabric,
            domain,
            cq,
            av,
            eq: None,
            ep,
        })
    }

    /// The channel over these parts (the endpoint enabled by the caller).
    pub(crate) fn channel(self, busy: bool) -> Result<Channel> {
        // The queue's fd unexposed (an exposed fd costs a system call per
        // completion): a sleeping operation registers as a sleeper instead,
        // which makes new completions signal the fd.
        let fd =
            match busy {
                true => None,
                false => {
                    let waits =
                        self.cq.core().driver().waits().ok_or_else(|| {
                            Error::nodata("aio: the completion queue has no wait fd")
                        })?;
                    Some(async_fd(waits.as_fd())?)
                }
            };
        let table = Table::default();
        // Abandoned operations' buffers on shm / hybrid stay if they time
        // out (see `table::late_writes`).
        table.keep_timed_out.set(crate::safe::table::late_writes(
            self.domain.info().provider(),
        ));
        Ok(Channel {
            inner: Arc::new(Inner {
                fd,
                core: SpinLock::new(Core {
                    ep: Some(self.ep),
                    table,
                    woken: Vec::new(),
                    watcher: None,
                }),
                cq: self.cq,
                _av: self.av,
                _eq: self.eq,
                joins: AtomicUsize::new(0),
                handles: AtomicUsize::new(1),
                parked: Arc::default(),
                _domain: self.domain,
                _fabric: self.fabric,
            }),
        })
    }
}

fn iov_of(b: &[u8]) -> IoVec {
    IoVec {
        base: b.as_ptr() as usize,
        len: b.len(),
    }
}

impl Channel {
    /// Opens a channel on an RDM or DGRAM offer; its operations sleep on
    /// the completion queue's fd. Needs a tokio runtime with I/O enabled.
    pub fn open(info: &Info) -> Result<Channel> {
        Self::open_mode(info, false)
    }

    /// Opens a channel whose pending operations poll the queue on every
    /// wake-up instead of sleeping on its fd (busy polling: lowest
    /// latency, a core kept busy while operations are pending).
    pub fn open_busy(info: &Info) -> Result<Channel> {
        Self::open_mode(info, true)
    }

    fn open_mode(info: &Info, busy: bool) -> Result<Channel> {
        if info.ep_attr.ep_type == ep_type::FI_EP_MSG {
            return Err(Error::inval(
                "aio: an MSG offer connects: use Channel::connect or a Listener",
            ));
        }
        let mut parts = Parts::open(info, None)?;
        if info.caps & FI_COLLECTIVE != 0 {
            // Joins complete on an event queue.
            let (eq, fd) = cm::event_queue(&parts.fabric)?;
            parts.ep.bind_eq(&eq)?;
            parts.eq = Some((eq, fd));
        }
        parts.ep.enable()?;
        parts.channel(busy)
    }

    /// This channel's address, to give to peers.
    pub fn address(&self) -> Result<Vec<u8>> {
        self.with_ep(|ep| ep.getname())
    }

    /// Adds a peer's address (RDM and DGRAM channels).
    pub fn insert(&self, addr: &[u8]) -> Result<Addr> {
        match &self.inner._av {
            Some(av) => av.insert_one(addr).map(Addr),
            None => Err(Error::inval(
                "aio: a connected channel has no address vector (send to Addr::PEER)",
            )),
        }
    }

    /// Closes the channel for every handle: the endpoint shuts down, and
    /// operations in flight resolve to `FI_ECANCELED` with their buffers;
    /// later posts resolve to `FI_ESHUTDOWN`.
    pub fn close(&self) {
        self.inner.close();
    }

    /// True once the channel is closed.
    pub fn is_closed(&self) -> bool {
        self.inner.lock().ep.is_none()
    }

    /// One progress pass without waiting: collects up to 16 completions
    /// and wakes their tasks (also carries out peers' accesses to this
    /// channel's regions under manual progress). Returns how many arrived.
    pub fn progress(&self) -> usize {
        let mut core = self.inner.lock();
        self.inner.progress(&mut core)
    }

    /// Operations in flight (including abandoned ones whose buffers wait
    /// for the provider).
    pub fn in_flight(&self) -> usize {
        self.inner.lock().table.in_flight()
    }

    fn with_ep<T>(&self, f: impl FnOnce(&Endpoint) -> Result<T>) -> Result<T> {
        match &self.inner.lock().ep {
            Some(ep) => f(ep),
            None => Err(closed()),
        }
    }

    /// Takes a slot and posts under the lock; a refused post (or a closed
    /// channel) makes a future that resolves at once. Inlined, so the
    /// future is built where the caller keeps it (an `Op` returned through
    /// memory is copied back in wider moves than it was written in, which
    /// stalls on store forwarding).
    #[inline(always)]
    fn post<B: Send + 'static>(
        &self,
        buf: Held<B>,
        cancel_on_drop: bool,
        f: impl FnOnce(&Endpoint, usize) -> Result<()>,
    ) -> Op<B> {
        let mut guard = self.inner.lock();
        let core = &mut *guard;
        let posted = match &core.ep {
            Some(ep) => {
                let (_, slot, gen) = core.table.open();
                // The context is the slot id + 1, so 0 never names an
                // operation.
                match f(ep, slot as usize + 1) {
                    Ok(()) => Ok((slot, gen)),
                    Err(e) => {
                        core.table.close(slot);
                        Err(e)
                    }
                }
            }
            None => Err(closed()),
        };
        drop(guard);
        match posted {
            Ok((slot, gen)) => Op::posted(self.inner.clone(), slot, gen, buf, cancel_on_drop),
            Err(e) => Op::failed(self.inner.clone(), buf, e),
        }
    }

    #[inline(always)]
    fn send_op<B: IoBuf>(
        &self,
        buf: B,
        dest: Addr,
        tag: u64,
        data: Option<u64>,
        tagged: bool,
    ) -> Op<B> {
        let buf = Held::new(buf);
        let iov = [iov_of(buf.as_ref())];
        let desc = buf.desc();
        self.post(buf, false, |ep, ctx| {
            let d = desc.map(|d| [d]);
            let op = SendOp {
                iov: &iov,
                desc: d.as_ref().map_or(&[], |d| d.as_slice()),
                dest: dest.0,
                tag,
                data: data.unwrap_or(0),
                context: ctx,
                flags: FI_COMPLETION | if data.is_some() { FI_REMOTE_CQ_DATA } else { 0 },
                tagged,
            };
            // SAFETY: the buffer's bytes (which do not move with it: IoBuf's
            // contract) belong to the future, or to the table once the
            // future is dropped, until the completion is recorded or the
            // endpoint has closed (`Inner::close`, field order).
            unsafe { ep.post_send(&op) }
        })
    }

    /// Sends a message; resolves to a [`Done`] holding the buffer.
    #[inline(always)]
    pub fn send<B: IoBuf>(&self, buf: B, dest: Addr) -> Op<B> {
        self.send_op(buf, dest, 0, None, false)
    }

    /// Sends a message carrying remote CQ data.
    pub fn senddata<B: IoBuf>(&self, buf: B, data: u64, dest: Addr) -> Op<B> {
        self.send_op(buf, dest, 0, Some(data), false)
    }

    /// Sends a tagged message.
    #[inline(always)]
    pub fn tsend<B: IoBuf>(&self, buf: B, dest: Addr, tag: u64) -> Op<B> {
        self.send_op(buf, dest, tag, None, true)
    }

    #[inline(always)]
    fn recv_op<B: IoBufMut>(&self, buf: B, tag: u64, ignore: u64, tagged: bool) -> Op<B> {
        let mut buf = Held::new(buf);
        let m = buf.as_mut();
        let iov = [IoVec {
            base: m.as_mut_ptr() as usize,
            len: m.len(),
        }];
        let desc = buf.desc();
        self.post(buf, true, |ep, ctx| {
            let d = desc.map(|d| [d]);
            let op = RecvOp {
                iov: &iov,
                desc: d.as_ref().map_or(&[], |d| d.as_slice()),
                src: FI_ADDR_UNSPEC,
                tag,
                ignore,
                context: ctx,
                flags: FI_COMPLETION,
                tagged,
            };
            // SAFETY: the buffer's bytes (which do not move with it:
            // IoBufMut's contract) belong to the future, or to the table once
            // the future is dropped (which cancels the receive), until the
            // completion is recorded or the endpoint has closed
            // (`Inner::close`, field order); nothing else reads or writes
            // them meanwhile.
            unsafe { ep.post_recv(&op) }
        })
    }

    /// Receives a message into `buf` (its whole length); resolves to a
    /// [`Done`] holding the buffer (`len` bytes arrived: [`Done::bytes`]).
    #[inline(always)]
    pub fn recv<B: IoBufMut>(&self, buf: B) -> Op<B> {
        self.recv_op(buf, 0, 0, false)
    }

    /// Receives a tagged message with a tag equal to `tag` outside the
    /// `ignore` bits.
    #[inline(always)]
    pub fn trecv<B: IoBufMut>(&self, buf: B, tag: u64, ignore: u64) -> Op<B> {
        self.recv_op(buf, tag, ignore, true)
    }

    fn rma_op<B: Send + 'static>(
        &self,
        buf: Held<B>,
        range: IoVec,
        dir: RmaDir,
        peer: Addr,
        remote: (u64, u64),
    ) -> Op<B> {
        self.post(buf, false, |ep, ctx| {
            if ep.info().caps & FI_RMA == 0 {
                return Err(Error::new(
                    errno::FI_EOPNOTSUPP,
                    "rma: the channel's offer has no FI_RMA",
                ));
            }
            let v = [range];
            let rma = [RmaIov {
                addr: remote.0,
                len: range.len,
                key: remote.1,
            }];
            let op = RmaOp {
                iov: &v,
                desc: &[],
                addr: peer.0,
                rma_iov: &rma,
                data: 0,
                context: ctx,
                flags: FI_COMPLETION,
                dir,
            };
            // SAFETY: `range` spans the buffer's bytes (which do not move
            // with it: IoBuf's contract for a write, IoBufMut's for a read);
            // the buffer belongs to the future, or to the table once the
            // future is dropped, until the completion is recorded or the
            // endpoint has closed (`Inner::close`, field order).
            unsafe { ep.post_rma(&op) }
        })
    }

    /// Writes `buf` to the peer's region at `(remote_addr, key)`.
    pub fn write<B: IoBuf>(&self, buf: B, dest: Addr, remote_addr: u64, key: u64) -> Op<B> {
        let buf = Held::new(buf);
        let range = iov_of(buf.as_ref());
        self.rma_op(buf, range, RmaDir::Write, dest, (remote_addr, key))
    }

    /// Reads `buf`'s length of the peer's region at `(remote_addr, key)`.
    pub fn read<B: IoBufMut>(&self, buf: B, src: Addr, remote_addr: u64, key: u64) -> Op<B> {
        let mut buf = Held::new(buf);
        let m = buf.as_mut();
        let range = IoVec {
            base: m.as_mut_ptr() as usize,
            len: m.len(),
        };
        self.rma_op(buf, range, RmaDir::Read, src, (remote_addr, key))
    }

    /// Applies an atomic to the peer's region at `(remote_addr, key)`;
    /// resolves to a [`Done`] holding the [`Atomic`] (with `result` filled
    /// for fetch and compare forms).
    pub fn atomic(&self, mut a: Atomic, dest: Addr, remote_addr: u64, key: u64) -> Op<Atomic> {
        let Some(size) = datatype_size(a.datatype) else {
            let e = Error::inval(format!("atomic: unknown datatype {}", a.datatype));
            return Op::failed(self.inner.clone(), Held::new(a), e);
        };
        if a.operand.is_empty()
            || !a.operand.len().is_multiple_of(size)
            || a.compare
                .as_ref()
                .is_some_and(|c| c.len() != a.operand.len())
        {
            let e = Error::inval(format!(
                "atomic: {} operand bytes are not a whole, non-zero number of {size}-byte \
                 elements, or the compare values differ in length",
                a.operand.len()
            ));
            return Op::failed(self.inner.clone(), Held::new(a), e);
        }
        let count = a.operand.len() / size;
        let kind = match (&a.compare, a.fetch) {
            (Some(_), _) => AtomicKind::Compare,
            (None, true) => AtomicKind::Fetch,
            (None, false) => AtomicKind::Basic,
        };
        a.result.clear();
        if kind != AtomicKind::Basic {
            a.result.resize(a.operand.len(), 0);
        }
        let elems = |v: &mut Vec<u8>| {
            [Ioc {
                addr: v.as_mut_ptr() as usize,
                count: v.len() / size,
            }]
        };
        let operand = elems(&mut a.operand);
        let compare = a.compare.as_mut().map(elems);
        let result = elems(&mut a.result);
        let (op, datatype) = (a.op, a.datatype);
        self.post(Held::new(a), false, |ep, ctx| {
            if ep.info().caps & FI_ATOMIC == 0 {
                return Err(Error::new(
                    errno::FI_EOPNOTSUPP,
                    "atomic: the channel's offer has no FI_ATOMIC",
                ));
            }
            let no_operand = kind == AtomicKind::Fetch && op == atomic_op::FI_ATOMIC_READ;
            let rma = [RmaIoc {
                addr: remote_addr,
                count,
                key,
            }];
            let op = AtomicOp {
                kind,
                op,
                datatype,
                operand: if no_operand { &[] } else { &operand },
                compare: compare.as_ref().map_or(&[], |c| c.as_slice()),
                result: if kind == AtomicKind::Basic {
                    &[]
                } else {
                    &result
                },
                desc: &[],
                addr: dest.0,
                rma_ioc: &rma,
                data: 0,
                context: ctx,
                flags: FI_COMPLETION,
            };
            // SAFETY: the Atomic's vectors (heap memory that does not move
            // with it) belong to the future or the table until the
            // completion is recorded or the endpoint has closed.
            unsafe { ep.post_atomic(&op) }
        })
    }

    /// Adds `value` to the 64-bit word at `(remote_addr, key)`; resolves to
    /// the word's previous value.
    pub async fn fetch_add_u64(
        &self,
        dest: Addr,
        remote_addr: u64,
        key: u64,
        value: u64,
    ) -> Result<u64> {
        let a = Atomic {
            op: atomic_op::FI_SUM,
            datatype: datatype::FI_UINT64,
            operand: value.to_ne_bytes().to_vec(),
            fetch: true,
            ..Atomic::default()
        };
        self.atomic(a, dest, remote_addr, key)
            .await?
            .fetched_u64()
            .ok_or_else(|| Error::inval("atomic: no fetched value"))
    }

    /// Stores `swap` in the 64-bit word at `(remote_addr, key)` if it holds
    /// `compare`; resolves to the word's previous value.
    pub async fn compare_swap_u64(
        &self,
        dest: Addr,
        remote_addr: u64,
        key: u64,
        compare: u64,
        swap: u64,
    ) -> Result<u64> {
        let a = Atomic {
            op: atomic_op::FI_CSWAP,
            datatype: datatype::FI_UINT64,
            operand: swap.to_ne_bytes().to_vec(),
            compare: Some(compare.to_ne_bytes().to_vec()),
            fetch: true,
            ..Atomic::default()
        };
        self.atomic(a, dest, remote_addr, key)
            .await?
            .fetched_u64()
            .ok_or_else(|| Error::inval("atomic: no fetched value"))
    }

    /// Registers `buf` as a region peers reach with `access` (remote read
    /// and/or write), exposed until the region is dropped or unregistered;
    /// peers' accesses are carried out while this channel makes progress.
    pub fn register(
        &self,
        buf: Vec<u8>,
        access: crate::MrAccess,
    ) -> std::result::Result<Region, crate::safe::PostError<Vec<u8>>> {
        let caps = match self.with_ep(|ep| Ok(ep.info().caps)) {
            Ok(c) => c,
            Err(error) => return Err(crate::safe::PostError { buf, error }),
        };
        if caps & (FI_RMA | FI_ATOMIC) == 0 {
            return Err(crate::safe::PostError {
                buf,
                error: Error::new(
                    errno::FI_EOPNOTSUPP,
                    "register: the channel's offer has neither FI_RMA nor FI_ATOMIC",
                ),
            });
        }
        self.inner.parked.sweep();
        crate::safe::Region::register(&self.inner._domain, buf, access, self.inner.parked.clone())
            .map(|region| Region {
                region,
                _ch: self.inner.clone(),
            })
            .map_err(|(buf, error)| crate::safe::PostError { buf, error })
    }

    /// Drives the channel's progress until `until` resolves (for a target
    /// whose peers' RMA must be carried out while it awaits nothing of its
    /// own, under manual progress).
    pub async fn progress_until<F: std::future::Future>(&self, until: F) -> F::Output {
        let mut until = std::pin::pin!(until);
        std::future::poll_fn(|cx| {
            if let std::task::Poll::Ready(v) = until.as_mut().poll(cx) {
                return std::task::Poll::Ready(v);
            }
            let mut core = self.inner.lock();
            self.inner.progress(&mut core);
            drop(core);
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        })
        .await
    }
}

/// A region registered through an async channel: the safe layer's
/// [`Region`](crate::safe::Region), kept with its channel's objects.
pub struct Region {
    // Field order is drop order: the region retires before the channel's
    // objects may go.
    region: crate::safe::Region,
    _ch: Arc<Inner>,
}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.region.fmt(f)
    }
}

impl std::ops::Deref for Region {
    type Target = crate::safe::Region;
    fn deref(&self) -> &crate::safe::Region {
        &self.region
    }
}

impl Region {
    /// Unregisters the region and hands its bytes back (see
    /// [`safe::Region::into_vec`](crate::safe::Region::into_vec)).
    pub fn into_vec(self) -> std::result::Result<Vec<u8>, Region> {
        let Region { region, _ch } = self;
        region.into_vec().map_err(|region| Region { region, _ch })
    }
}

/// The error of a post on a closed channel.
#[cold]
fn closed() -> Error {
    Error::new(errno::FI_ESHUTDOWN, "aio: the channel is closed")
}

impl Addr {
    /// The peer of a connected (MSG) channel.
    pub const PEER: Addr = Addr(FI_ADDR_UNSPEC);
}
