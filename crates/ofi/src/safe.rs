//! The safe layer: buffers are moved into each operation and handed back
//! in its completion, so no borrowed memory can outlive a call and no
//! undefined behaviour is reachable from safe code.
//!
//! A [`Channel`] owns an endpoint, its completion queue and address vector,
//! and the buffers of every operation in flight. Dropping the channel shuts
//! the endpoint down before the buffers are freed.
//!
//! One-sided operations follow the same rule: the initiator's buffers
//! (written, read into, atomic operands and results) are owned by the
//! operation; the target exposes a [`Region`] that owns its memory and
//! hands it back only once no peer can reach it (see [`region`]).

// The one place the safe layer calls the raw layer: every buffer passed to
// a raw post is owned by `inflight` until its completion is reaped.
#![allow(unsafe_code)]

pub mod region;
mod sets;

pub use region::Region;
pub use sets::{PollSet, WaitSet};

use crate::consts::*;
use crate::{
    errno, AddressVector, AtomicKind, AtomicOp, AvAttr, CompletionQueue, CqAttr, CqTaggedEntry,
    Domain, Endpoint, Error, Fabric, Info, Ioc, RecvOp, Result, RmaIoc, RmaIov, RmaOp, SendOp,
};
use ofi_core::util::atomic::datatype_size;
use ofi_core::util::iov::IoVec;
use region::Parked;
use std::cell::{RefCell, RefMut};
use std::sync::Arc;
use std::time::Duration;

/// An address inserted into a channel's address vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Addr(pub u64);

/// Identifies an operation posted on a channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OpId(pub u64);

/// An atomic operation: what to apply and the buffers it owns.
///
/// The form follows the buffers: with `compare` it is a compare atomic
/// (`fi_compare_atomic`: the cswap family, FI_MSWAP), else with `fetch` a
/// fetching one (`fi_fetch_atomic`), else a plain `fi_atomic`. Fetch and
/// compare forms hand the target's original values back in
/// [`Completion::Atomic`]'s `result`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Atomic {
    /// The operation (`atomic_op::FI_SUM`, `FI_CSWAP` …).
    pub op: u32,
    /// The element type (`datatype::FI_UINT64` …).
    pub datatype: u32,
    /// Operand elements, native byte order; their number is the element
    /// count (for FI_ATOMIC_READ only the length matters).
    pub operand: Vec<u8>,
    /// Compare elements (the mask for FI_MSWAP), as many as the operands.
    pub compare: Option<Vec<u8>>,
    /// Hand back the target's original values.
    pub fetch: bool,
}

/// A finished operation, with its buffer handed back.
#[derive(Debug)]
#[non_exhaustive]
pub enum Completion {
    /// A send finished; the buffer may be reused.
    Sent {
        /// The operation.
        id: OpId,
        /// The buffer that was sent.
        buf: Vec<u8>,
    },
    /// A message arrived.
    Received {
        /// The operation.
        id: OpId,
        /// The buffer; `len` bytes of it hold the message.
        buf: Vec<u8>,
        /// Bytes received.
        len: usize,
        /// The message's tag (tagged receives).
        tag: u64,
        /// Remote CQ data, if the sender attached some.
        data: Option<u64>,
        /// The sender, if it is in the address vector.
        src: Option<Addr>,
    },
    /// An RMA write (or writedata) finished.
    Written {
        /// The operation.
        id: OpId,
        /// The buffer that was written.
        buf: Vec<u8>,
    },
    /// An RMA read finished; the buffer holds the remote bytes.
    Read {
        /// The operation.
        id: OpId,
        /// The buffer read into.
        buf: Vec<u8>,
    },
    /// An atomic finished.
    Atomic {
        /// The operation.
        id: OpId,
        /// The operands, handed back.
        operand: Vec<u8>,
        /// The compare values, handed back.
        compare: Option<Vec<u8>>,
        /// The target's original values (fetch and compare forms; else empty).
        result: Vec<u8>,
    },
    /// A peer's write (or atomic) carrying remote CQ data landed in one of
    /// this channel's regions.
    RemoteWrite {
        /// Bytes written.
        len: usize,
        /// The data the peer attached.
        data: u64,
        /// The peer, if it is in the address vector.
        src: Option<Addr>,
    },
    /// The operation failed (truncated, cancelled, peer gone, access
    /// refused at the target …).
    Failed {
        /// The operation.
        id: OpId,
        /// The buffer, handed back (an atomic's operands).
        buf: Vec<u8>,
        /// What went wrong.
        error: Error,
        /// Bytes that did not fit (truncation).
        overflow: usize,
    },
}

impl Completion {
    /// The fetched value of a one-element 64-bit fetch or compare atomic
    /// (as from [`Channel::fetch_add_u64`]).
    pub fn fetched_u64(&self) -> Option<u64> {
        match self {
            Completion::Atomic { result, .. } => {
                Some(u64::from_ne_bytes(result.as_slice().try_into().ok()?))
            }
            _ => None,
        }
    }
}

/// What an operation in flight owns, by kind.
enum Held {
    Send(Vec<u8>),
    Recv(Vec<u8>),
    Write(Vec<u8>),
    Read(Vec<u8>),
    Atomic(Box<AtomicBufs>),
}

struct AtomicBufs {
    operand: Vec<u8>,
    compare: Option<Vec<u8>>,
    result: Vec<u8>,
}

impl Held {
    /// The buffer a failure hands back.
    fn into_buf(self) -> Vec<u8> {
        match self {
            Held::Send(b) | Held::Recv(b) | Held::Write(b) | Held::Read(b) => b,
            Held::Atomic(a) => a.operand,
        }
    }
}

enum Slot {
    Free(usize),
    Busy(Held),
}

struct Inflight {
    slots: Vec<Slot>,
    free: usize,
}

impl Inflight {
    /// Parks the operation `make` builds in a free slot. Built at the slot
    /// rather than moved in: a `Held` made on the stack and copied into the
    /// slot stalled on store forwarding (about 5 ns per post).
    fn put(&mut self, make: impl FnOnce() -> Held) -> usize {
        if self.free < self.slots.len() {
            let i = self.free;
            let next = match self.slots[i] {
                Slot::Free(n) => n,
                Slot::Busy(_) => self.slots.len(),
            };
            self.slots[i] = Slot::Busy(make());
            self.free = next;
            i
        } else {
            self.slots.push(Slot::Busy(make()));
            self.free = self.slots.len();
            self.slots.len() - 1
        }
    }
    fn take(&mut self, i: usize) -> Option<Held> {
        let s = self.slots.get_mut(i)?;
        if let Slot::Busy(_) = s {
            let old = std::mem::replace(s, Slot::Free(self.free));
            self.free = i;
            if let Slot::Busy(b) = old {
                return Some(b);
            }
        }
        None
    }
}

fn iov(buf: &mut [u8]) -> IoVec {
    IoVec {
        base: buf.as_mut_ptr() as usize,
        len: buf.len(),
    }
}

/// An endpoint with its queue, address vector and in-flight buffers.
///
/// A channel is `Send` but not `Sync`: one thread drives it at a time (wrap
/// it in a `Mutex` to share it), which keeps its bookkeeping free of atomics.
///
/// One-sided calls need an offer with FI_RMA (reads and writes) or
/// FI_ATOMIC; on other channels they fail with `FI_EOPNOTSUPP`.
pub struct Channel {
    // Field order is drop order: the endpoint shuts down (and stops touching
    // posted buffers and registered regions) before the buffers it may
    // reference are freed.
    ep: Endpoint,
    cq: CompletionQueue,
    av: AddressVector,
    inflight: RefCell<Inflight>,
    scratch: RefCell<([CqTaggedEntry; 16], [u64; 16])>,
    parked: Arc<Parked>,
    domain: Domain,
    _fabric: Fabric,
}

impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channel").field("ep", &self.ep).finish()
    }
}

type Posted = std::result::Result<OpId, (Vec<u8>, Error)>;

impl Channel {
    /// Opens a channel on an offer (from [`crate::getinfo`]). The endpoint
    /// gets the offer's capabilities: ask for FI_RMA / FI_ATOMIC in the
    /// hints to use the one-sided calls.
    pub fn open(info: &Info) -> Result<Channel> {
        Self::open_with(info, |d, mut attr| {
            attr.wait_obj = wait_obj::FI_WAIT_FD;
            d.cq(&attr)
        })
    }

    /// Opens a channel whose completions wake `set` (its completion queue
    /// is opened into the wait set): one [`WaitSet::wait`] for many channels.
    pub fn open_in(info: &Info, set: &WaitSet) -> Result<Channel> {
        Self::open_with(info, |d, mut attr| {
            attr.wait_obj = wait_obj::FI_WAIT_SET;
            d.cq_in(&attr, set.raw())
        })
    }

    fn open_with(
        info: &Info,
        cq: impl FnOnce(&Domain, CqAttr) -> Result<CompletionQueue>,
    ) -> Result<Channel> {
        let fabric = Fabric::open(&info.fabric_attr)?;
        let domain = fabric.domain(info)?;
        let cq = cq(
            &domain,
            CqAttr {
                size: 0,
                format: cq_format::FI_CQ_FORMAT_TAGGED,
                wait_obj: wait_obj::FI_WAIT_FD,
            },
        )?;
        let av = domain.av(&AvAttr::default())?;
        let ep = domain.endpoint(info)?;
        ep.bind_cq(&cq, FI_TRANSMIT | FI_RECV)?;
        ep.bind_av(&av)?;
        ep.enable()?;
        Ok(Channel {
            ep,
            cq,
            av,
            scratch: RefCell::new(([CqTaggedEntry::default(); 16], [FI_ADDR_NOTAVAIL; 16])),
            inflight: RefCell::new(Inflight {
                slots: Vec::new(),
                free: 0,
            }),
            parked: Arc::default(),
            domain,
            _fabric: fabric,
        })
    }

    /// This channel's address, to give to peers.
    pub fn address(&self) -> Result<Vec<u8>> {
        self.ep.getname()
    }

    /// Adds a peer's address.
    pub fn insert(&self, addr: &[u8]) -> Result<Addr> {
        self.av.insert_one(addr).map(Addr)
    }

    fn lock(&self) -> RefMut<'_, Inflight> {
        self.inflight.borrow_mut()
    }

    /// Parks what `make` builds in a slot, then posts it with `f(held,
    /// context)`; the pointers `f` takes from it stay valid because the
    /// slot owns the buffers (heap memory does not move with the `Vec`).
    fn post(
        &self,
        make: impl FnOnce() -> Held,
        f: impl FnOnce(&mut Held, usize) -> Result<()>,
    ) -> std::result::Result<OpId, (Held, Error)> {
        let mut g = self.lock();
        let i = g.put(make);
        let r = match g.slots.get_mut(i) {
            // The context is the slot index + 1, so 0 never names an operation.
            Some(Slot::Busy(h)) => f(h, i + 1),
            _ => Err(Error::inval("safe: lost an in-flight slot")),
        };
        match r {
            Ok(()) => Ok(OpId(i as u64 + 1)),
            Err(e) => match g.take(i) {
                Some(h) => Err((h, e)),
                None => Err((Held::Send(Vec::new()), e)),
            },
        }
    }

    /// Posts a one-buffer operation: `kind` says what the slot holds. The
    /// buffer's range is taken before the buffer moves into its slot (its
    /// heap memory does not move), not read back from the slot just written,
    /// which stalled on store forwarding.
    fn post_buf(
        &self,
        mut buf: Vec<u8>,
        kind: fn(Vec<u8>) -> Held,
        f: impl FnOnce(IoVec, usize) -> Result<()>,
    ) -> Posted {
        let range = iov(&mut buf);
        self.post(move || kind(buf), |_, ctx| f(range, ctx))
            .map_err(|(h, e)| (h.into_buf(), e))
    }

    fn send_op(
        &self,
        buf: Vec<u8>,
        dest: Addr,
        tag: u64,
        data: Option<u64>,
        tagged: bool,
    ) -> Posted {
        self.post_buf(buf, Held::Send, |iov, ctx| {
            let v = [iov];
            let op = SendOp {
                iov: &v,
                desc: &[],
                dest: dest.0,
                tag,
                data: data.unwrap_or(0),
                context: ctx,
                flags: FI_COMPLETION | if data.is_some() { FI_REMOTE_CQ_DATA } else { 0 },
                tagged,
            };
            // SAFETY: the buffer is owned by `inflight` until this operation's
            // completion is reaped (or the endpoint is shut down first on drop);
            // moving the Vec never moves its heap memory.
            unsafe { self.ep.post_send(&op) }
        })
    }

    /// Sends a message; the buffer comes back in [`Completion::Sent`].
    pub fn send(&self, buf: Vec<u8>, dest: Addr) -> Posted {
        self.send_op(buf, dest, 0, None, false)
    }

    /// Sends a message carrying remote CQ data.
    pub fn senddata(&self, buf: Vec<u8>, data: u64, dest: Addr) -> Posted {
        self.send_op(buf, dest, 0, Some(data), false)
    }

    /// Sends a tagged message.
    pub fn tsend(&self, buf: Vec<u8>, dest: Addr, tag: u64) -> Posted {
        self.send_op(buf, dest, tag, None, true)
    }

    /// Sends a small message by copy; no completion, nothing to hand back.
    pub fn inject(&self, buf: &[u8], dest: Addr) -> Result<()> {
        self.ep.inject(buf, dest.0)
    }

    fn recv_op(&self, buf: Vec<u8>, tag: u64, ignore: u64, tagged: bool) -> Posted {
        self.post_buf(buf, Held::Recv, |iov, ctx| {
            let v = [iov];
            let op = RecvOp {
                iov: &v,
                desc: &[],
                src: FI_ADDR_UNSPEC,
                tag,
                ignore,
                context: ctx,
                flags: FI_COMPLETION,
                tagged,
            };
            // SAFETY: as in `send_op`: `inflight` owns the buffer until completion.
            unsafe { self.ep.post_recv(&op) }
        })
    }

    /// Posts a receive buffer; it comes back in [`Completion::Received`].
    pub fn recv(&self, buf: Vec<u8>) -> Posted {
        self.recv_op(buf, 0, 0, false)
    }

    /// Posts a tagged receive.
    pub fn trecv(&self, buf: Vec<u8>, tag: u64, ignore: u64) -> Posted {
        self.recv_op(buf, tag, ignore, true)
    }

    /// Cancels a posted receive; it completes as [`Completion::Failed`] with FI_ECANCELED.
    pub fn cancel(&self, id: OpId) -> Result<()> {
        self.ep.cancel(id.0 as usize)
    }

    /// Registers `buf` as a region peers may access with `access`
    /// (FI_REMOTE_READ and/or FI_REMOTE_WRITE; FI_READ / FI_WRITE / FI_SEND
    /// / FI_RECV are accepted too). The buffer comes back with the error on
    /// failure; `FI_EOPNOTSUPP` on channels without FI_RMA or FI_ATOMIC.
    ///
    /// A peer's accesses are carried out by this channel's endpoint: with
    /// manual progress, drive the channel (`poll`/`wait`) for them to happen.
    pub fn register(
        &self,
        buf: Vec<u8>,
        access: u64,
    ) -> std::result::Result<Region, (Vec<u8>, Error)> {
        if self.ep.info().caps & (FI_RMA | FI_ATOMIC) == 0 {
            return Err((
                buf,
                Error::new(
                    errno::FI_EOPNOTSUPP,
                    "register: the channel's offer has neither FI_RMA nor FI_ATOMIC",
                ),
            ));
        }
        self.parked.sweep();
        Region::register(&self.domain, buf, access, self.parked.clone())
    }

    fn rma_op(
        &self,
        buf: Vec<u8>,
        read: bool,
        peer: Addr,
        remote_addr: u64,
        key: u64,
        data: Option<u64>,
    ) -> Posted {
        let kind = if read { Held::Read } else { Held::Write };
        self.post_buf(buf, kind, |iov, ctx| {
            let v = [iov];
            let rma = [RmaIov {
                addr: remote_addr,
                len: iov.len,
                key,
            }];
            let op = RmaOp {
                iov: &v,
                desc: &[],
                addr: peer.0,
                rma_iov: &rma,
                data: data.unwrap_or(0),
                context: ctx,
                flags: FI_COMPLETION | if data.is_some() { FI_REMOTE_CQ_DATA } else { 0 },
                read,
            };
            // SAFETY: as in `send_op`: `inflight` owns the buffer (read into
            // or written from) until the completion is reaped or the
            // endpoint has shut down.
            unsafe { self.ep.post_rma(&op) }
        })
    }

    /// Writes `buf` to the peer's region at `(remote_addr, key)`; the
    /// buffer comes back in [`Completion::Written`].
    pub fn write(&self, buf: Vec<u8>, dest: Addr, remote_addr: u64, key: u64) -> Posted {
        self.rma_op(buf, false, dest, remote_addr, key, None)
    }

    /// Writes `buf` and delivers `data` to the target, where it shows up as
    /// [`Completion::RemoteWrite`].
    pub fn writedata(
        &self,
        buf: Vec<u8>,
        data: u64,
        dest: Addr,
        remote_addr: u64,
        key: u64,
    ) -> Posted {
        self.rma_op(buf, false, dest, remote_addr, key, Some(data))
    }

    /// Reads `buf.len()` bytes of the peer's region at `(remote_addr, key)`
    /// into `buf`; it comes back in [`Completion::Read`].
    pub fn read(&self, buf: Vec<u8>, src: Addr, remote_addr: u64, key: u64) -> Posted {
        self.rma_op(buf, true, src, remote_addr, key, None)
    }

    /// Applies an atomic to the peer's region at `(remote_addr, key)`; its
    /// buffers come back in [`Completion::Atomic`] (or with the error).
    pub fn atomic(
        &self,
        a: Atomic,
        dest: Addr,
        remote_addr: u64,
        key: u64,
    ) -> std::result::Result<OpId, (Atomic, Error)> {
        let Some(size) = datatype_size(a.datatype) else {
            let e = Error::inval(format!("atomic: unknown datatype {}", a.datatype));
            return Err((a, e));
        };
        if a.operand.is_empty() || !a.operand.len().is_multiple_of(size) {
            let e = Error::inval(format!(
                "atomic: {} operand bytes are not a whole, non-zero number of {size}-byte elements",
                a.operand.len()
            ));
            return Err((a, e));
        }
        let count = a.operand.len() / size;
        let kind = match (&a.compare, a.fetch) {
            (Some(_), _) => AtomicKind::Compare,
            (None, true) => AtomicKind::Fetch,
            (None, false) => AtomicKind::Basic,
        };
        let (op, datatype) = (a.op, a.datatype);
        let result = if kind == AtomicKind::Basic {
            Vec::new()
        } else {
            vec![0; a.operand.len()]
        };
        let held = Held::Atomic(Box::new(AtomicBufs {
            operand: a.operand,
            compare: a.compare,
            result,
        }));
        let r = self.post(
            || held,
            |h, ctx| {
                let Held::Atomic(b) = h else {
                    return Err(Error::inval("safe: not an atomic"));
                };
                let elems = |v: &mut Vec<u8>| {
                    [Ioc {
                        addr: v.as_mut_ptr() as usize,
                        count: v.len() / size,
                    }]
                };
                let operand = elems(&mut b.operand);
                let compare = b.compare.as_mut().map(elems);
                let result = elems(&mut b.result);
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
                // SAFETY: operands, compare values and results are owned by the
                // slot in `inflight` until the completion is reaped or the
                // endpoint has shut down; each list covers its whole buffer.
                unsafe { self.ep.post_atomic(&op) }
            },
        );
        r.map_err(|(h, e)| match h {
            Held::Atomic(b) => (
                Atomic {
                    op,
                    datatype,
                    operand: b.operand,
                    compare: b.compare,
                    fetch: a.fetch,
                },
                e,
            ),
            other => (
                Atomic {
                    op,
                    datatype,
                    operand: other.into_buf(),
                    compare: None,
                    fetch: a.fetch,
                },
                e,
            ),
        })
    }

    /// Adds `value` to the 64-bit word at `(remote_addr, key)`; the word's
    /// previous value comes back in [`Completion::Atomic`]
    /// ([`Completion::fetched_u64`]).
    pub fn fetch_add_u64(
        &self,
        dest: Addr,
        remote_addr: u64,
        key: u64,
        value: u64,
    ) -> Result<OpId> {
        let a = Atomic {
            op: atomic_op::FI_SUM,
            datatype: datatype::FI_UINT64,
            operand: value.to_ne_bytes().to_vec(),
            compare: None,
            fetch: true,
        };
        self.atomic(a, dest, remote_addr, key).map_err(|(_, e)| e)
    }

    /// Stores `swap` in the 64-bit word at `(remote_addr, key)` if it holds
    /// `compare`; the previous value comes back as in [`fetch_add_u64`](Self::fetch_add_u64).
    pub fn compare_swap_u64(
        &self,
        dest: Addr,
        remote_addr: u64,
        key: u64,
        compare: u64,
        swap: u64,
    ) -> Result<OpId> {
        let a = Atomic {
            op: atomic_op::FI_CSWAP,
            datatype: datatype::FI_UINT64,
            operand: swap.to_ne_bytes().to_vec(),
            compare: Some(compare.to_ne_bytes().to_vec()),
            fetch: true,
        };
        self.atomic(a, dest, remote_addr, key).map_err(|(_, e)| e)
    }

    fn reap(&self, e: &CqTaggedEntry, src: u64) -> Option<Completion> {
        let src = (src != FI_ADDR_NOTAVAIL).then_some(Addr(src));
        if e.flags & FI_REMOTE_WRITE != 0 && e.flags & FI_REMOTE_CQ_DATA != 0 {
            return Some(Completion::RemoteWrite {
                len: e.len,
                data: e.data,
                src,
            });
        }
        let held = self.lock().take(e.op_context.checked_sub(1)?)?;
        let id = OpId(e.op_context as u64);
        Some(match held {
            Held::Recv(buf) => Completion::Received {
                id,
                buf,
                len: e.len,
                tag: e.tag,
                data: (e.flags & FI_REMOTE_CQ_DATA != 0).then_some(e.data),
                src,
            },
            Held::Send(buf) => Completion::Sent { id, buf },
            Held::Write(buf) => Completion::Written { id, buf },
            Held::Read(buf) => Completion::Read { id, buf },
            Held::Atomic(b) => {
                let b = *b;
                Completion::Atomic {
                    id,
                    operand: b.operand,
                    compare: b.compare,
                    result: b.result,
                }
            }
        })
    }

    fn reap_err(&self) -> Result<Option<Completion>> {
        let e = self.cq.readerr()?;
        let Some(held) = e
            .op_context
            .checked_sub(1)
            .and_then(|i| self.lock().take(i))
        else {
            return Ok(None);
        };
        Ok(Some(Completion::Failed {
            id: OpId(e.op_context as u64),
            buf: held.into_buf(),
            error: Error::new(
                e.err,
                format!("operation failed (len {}, overflow {})", e.len, e.olen),
            ),
            overflow: e.olen,
        }))
    }

    /// Collects finished operations without blocking (one progress pass and
    /// up to 16 completions); returns how many were added.
    pub fn poll(&self, out: &mut Vec<Completion>) -> Result<usize> {
        self.parked.sweep();
        let mut scratch = self.scratch.borrow_mut();
        let (ents, src) = &mut *scratch;
        let before = out.len();
        match self.cq.readfrom(ents, src) {
            Ok(n) => {
                for i in 0..n {
                    // A push, not `out.extend(Option)`: the Option's copy
                    // into the vector stalled on store forwarding (about 6
                    // ns per completion in the layers bench).
                    if let Some(c) = self.reap(&ents[i], src[i]) {
                        out.push(c);
                    }
                }
            }
            Err(e) if e.is_again() => {}
            Err(e) if e.code() == errno::FI_EAVAIL => out.extend(self.reap_err()?),
            Err(e) => return Err(e),
        }
        Ok(out.len() - before)
    }

    /// Waits up to `timeout` for the next finished operation (spinning
    /// briefly, then sleeping). `FI_EAGAIN` on timeout.
    pub fn wait(&self, timeout: Duration) -> Result<Completion> {
        let deadline = std::time::Instant::now() + timeout;
        let mut ents = [CqTaggedEntry::default(); 1];
        let mut src = [FI_ADDR_NOTAVAIL; 1];
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.cq.sreadfrom(&mut ents, &mut src, Some(left)) {
                Ok(_) => {
                    if let Some(c) = self.reap(&ents[0], src[0]) {
                        return Ok(c);
                    }
                }
                Err(e) if e.code() == errno::FI_EAVAIL => {
                    if let Some(c) = self.reap_err()? {
                        return Ok(c);
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The channel's completion queue (for poll sets).
    pub(crate) fn cq(&self) -> &CompletionQueue {
        &self.cq
    }

    /// The channel's domain (a poll set opens on one).
    pub(crate) fn domain(&self) -> &Domain {
        &self.domain
    }

    /// Operations still in flight.
    pub fn in_flight(&self) -> usize {
        self.lock()
            .slots
            .iter()
            .filter(|s| matches!(s, Slot::Busy(_)))
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shm() -> Option<Info> {
        let mut h = Info::hints();
        h.caps = FI_MSG | FI_TAGGED;
        h.ep_attr.ep_type = ep_type::FI_EP_RDM;
        h.fabric_attr.prov_name = Some("shm".into());
        crate::getinfo(FI_VERSION_CURRENT, None, None, 0, Some(&h))
            .ok()
            .map(|mut v| v.remove(0))
    }

    #[test]
    fn buffers_come_back_with_their_data() {
        let info = shm().expect("shm offer");
        let a = Channel::open(&info).unwrap();
        let b = Channel::open(&info).unwrap();
        let to_b = a.insert(&b.address().unwrap()).unwrap();
        b.insert(&a.address().unwrap()).unwrap();
        let rid = b.trecv(vec![0; 100_000], 7, 0).unwrap();
        let sid = a.tsend(vec![5; 70_000], to_b, 7).unwrap();
        let mut sent = None;
        let mut got = None;
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while (sent.is_none() || got.is_none()) && std::time::Instant::now() < deadline {
            let mut out = Vec::new();
            a.poll(&mut out).unwrap();
            b.poll(&mut out).unwrap();
            for c in out {
                match c {
                    Completion::Sent { id, buf } => sent = Some((id, buf)),
                    Completion::Received {
                        id, buf, len, tag, ..
                    } => got = Some((id, buf, len, tag)),
                    Completion::Failed { error, .. } => panic!("{error}"),
                    c => panic!("unexpected {c:?}"),
                }
            }
        }
        let (id, buf) = sent.expect("send completion");
        assert_eq!((id, buf.len()), (sid, 70_000));
        let (id, buf, len, tag) = got.expect("receive completion");
        assert_eq!((id, len, tag), (rid, 70_000, 7));
        assert!(buf[..len].iter().all(|&x| x == 5));
        assert_eq!(a.in_flight() + b.in_flight(), 0);
    }

    #[test]
    fn cancelled_receive_hands_the_buffer_back() {
        let info = shm().expect("shm offer");
        let a = Channel::open(&info).unwrap();
        let id = a.recv(vec![1, 2, 3]).unwrap();
        a.cancel(id).unwrap();
        match a.wait(Duration::from_secs(5)).unwrap() {
            Completion::Failed {
                id: got,
                buf,
                error,
                ..
            } => {
                assert_eq!(got, id);
                assert_eq!(buf, vec![1, 2, 3]);
                assert_eq!(error.code(), errno::FI_ECANCELED);
            }
            c => panic!("unexpected {c:?}"),
        }
    }

    #[test]
    fn a_failed_post_hands_the_buffer_back() {
        let info = shm().expect("shm offer");
        let a = Channel::open(&info).unwrap();
        let (buf, e) = a.send(vec![9; 10], Addr(12345)).unwrap_err();
        assert_eq!(buf, vec![9; 10]);
        assert_eq!(e.code(), errno::FI_EINVAL);
    }
}
