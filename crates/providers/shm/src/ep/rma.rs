//! One-sided operations over shm, initiator side: RMA writes and reads and
//! atomics, executed by the target against its registered regions
//! (`rma_target.rs`).
//!
//! The initiator puts a request in the target's ring. The target checks
//! every remote range (key, access, bounds) before touching memory, then:
//! - RMA_WRITE: copies the inline data into place (small writes, chunks);
//! - RMA_PULL: copies the initiator's buffer straight into place with one
//!   process_vm_readv (large writes: one copy);
//! - RMA_READ: answers inline (small) or copies straight into the
//!   initiator's buffer with process_vm_writev (large);
//! - ATOMIC: applies the operation under the domain's atomic lock.
//!
//! and answers with RMA_RESP (status, and any read or fetched bytes). When
//! the kernel refuses cross-process copies, writes are pushed and reads
//! answered in ring-sized chunks instead.
//!
//! The completion rule: an operation completes at the initiator when its
//! target's final answer arrives, and a target answers a write only once
//! its last byte is in place (with FI_COMMIT_COMPLETE: on stable storage),
//! counted (FI_RMA_EVENT) and its FI_REMOTE_CQ_DATA entry written; a
//! refusal is answered before a byte moves. So every write is
//! delivery-complete, which is also transmit-complete, and every violation
//! comes back as an error completion. A write does not complete when its
//! request enters the target's ring: the target has not accepted the data
//! then, only received it. It may still refuse it (a key unknown, or
//! revoked by the region's close since the initiator learnt it; access or
//! bounds wrong), and an initiator that had already reported success could
//! not report that error any more. No initiator can know the target will
//! accept: the target's regions live in its process, and a region's close
//! races with every entry in the ring. The common write costs one request
//! entry with its data inline and one answer entry, and keeps nothing but
//! its context while it waits.
//!
//! A target executes the requests of its ring in order, so operations from
//! one initiator are processed in the order issued (reads answered in
//! chunks hold the ring until they finish).

use super::state::in_flight_to;
use super::{Inner, ShmEndpoint, INLINE_MAX};
use crate::addr::ShmAddr;
use crate::peer::Peer;
use crate::IOV_LIMIT;
use ofi_core::consts::*;
use ofi_core::error::{errno, Error, Result};
use ofi_core::object::{AtomicOp, RmaOp};
use ofi_core::util::atomic::{self, AtomicKind};
use ofi_core::util::iov::{copy_from_iov, copy_to_iov, iov_len, IoVec};
use ofi_core::util::matching::MAX_IOV;
use ofi_core::util::rma::{Ioc, Resolved, RmaIov};
use ofi_proto::shm::path::{write_path, WritePath};
use ofi_proto::shm::{status_code, Answer, AtomicReq, OneSidedIn, Stray};
use ofi_wire::shm::{
    flag, op, put_range, put_ranges, Entry, Repr, WireRange, LOCAL_LEN, MAX_RANGES, RANGE_LEN,
};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Largest operand list of one atomic, in bytes (operands and compare
/// values travel inline in one ring entry, results come back in one).
pub(crate) const ATOMIC_MAX_BYTES: usize = 1024;

/// Room for inline write data after `n` remote ranges.
fn write_room(n: usize) -> usize {
    INLINE_MAX - n * RANGE_LEN
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Write,
    Read,
    Atomic,
}

/// An operation waiting for its target's answer: what its completion
/// reports, and (all but a write that travelled whole in its request) the
/// ranges and state its answer acts on.
pub(super) struct PendingRma {
    pub(super) peer: Arc<Peer>,
    kind: Kind,
    completion: bool,
    context: usize,
    flags: u64,
    /// `None` for a write whose data went inline in its request: its
    /// answer only completes it.
    body: Option<Box<RmaBody>>,
}

/// The part of a pending operation that reads, atomics and writes pulled
/// or pushed in chunks keep (taken from the endpoint's spares and given
/// back when the operation ends).
#[derive(Default)]
pub(super) struct RmaBody {
    /// Write source, read destination, or atomic result ranges.
    local: [IoVec; MAX_IOV],
    cnt: usize,
    remote: [WireRange; MAX_RANGES],
    nr: usize,
    len: usize,
    /// Bytes a chunked write has pushed so far.
    pushed: usize,
    /// FI_INJECT data that does not fit one entry.
    owned: Option<Box<[u8]>>,
    data: u64,
    cq_data: bool,
    /// FI_COMMIT_COMPLETE: every entry of the write carries flag::COMMIT.
    commit: bool,
}

/// Bodies kept for reuse at most.
const SPARE_BODIES: usize = 64;

impl PendingRma {
    /// True for an RMA read (the target may still write into our memory).
    pub(super) fn is_read(&self) -> bool {
        self.kind == Kind::Read
    }
}

/// A read answered in chunks through the initiator's ring.
pub(super) struct ReadPush {
    pub(super) to: u64,
    pub(super) cookie: u64,
    pub(super) src: [IoVec; MAX_RANGES],
    pub(super) n: usize,
    pub(super) offset: usize,
    pub(super) len: usize,
    /// Keeps the regions registered while the chunks go out.
    pub(super) _mrs: Vec<Resolved>,
}

fn wire_ranges(rma_iov: &[RmaIov]) -> ([WireRange; MAX_RANGES], usize) {
    let mut out = [WireRange::default(); MAX_RANGES];
    for (o, r) in out.iter_mut().zip(rma_iov) {
        *o = WireRange {
            addr: r.addr,
            len: r.len as u64,
            key: r.key,
        };
    }
    (out, rma_iov.len().min(MAX_RANGES))
}

fn locals(iov: &[IoVec]) -> ([(u64, u64); MAX_RANGES], usize) {
    let mut out = [(0, 0); MAX_RANGES];
    for (o, v) in out.iter_mut().zip(iov) {
        *o = (v.base as u64, v.len as u64);
    }
    (out, iov.len().min(MAX_RANGES))
}

impl ShmEndpoint {
    /// True while sends or one-sided operations of this endpoint are in flight.
    pub(super) fn outstanding(&self, g: &Inner) -> bool {
        !g.sends.is_empty() || !g.rmas.is_empty()
    }

    /// Whether a transmit operation to fi_addr `dest` may start now: a
    /// fenced one waits for everything before it to the same peer
    /// (fi_msg(3), fi_rma(3): operations to other peers do not hold it),
    /// and nothing overtakes a write still being pushed in chunks
    /// (FI_ORDER_WAW and co). `FI_EAGAIN` otherwise.
    #[inline]
    pub(super) fn admit(&self, g: &Inner, flags: u64, dest: u64) -> Result<()> {
        if !g.rma_pushes.is_empty() {
            return Err(Error::again());
        }
        if flags & FI_FENCE != 0 && self.outstanding(g) {
            return self.fenced(g, dest);
        }
        Ok(())
    }

    /// A fenced operation while others are in flight: `FI_EAGAIN` while
    /// any to the peer behind `dest` is.
    #[cold]
    #[inline(never)]
    fn fenced(&self, g: &Inner, dest: u64) -> Result<()> {
        // The peer behind dest (all of them when it does not resolve:
        // the operation then fails on its own).
        let id = g.b.av.as_ref().and_then(|av| {
            let bytes = av.lookup(dest).ok()?;
            ShmAddr::parse(&bytes).ok().map(|a| a.id())
        });
        let held = match id {
            Some(id) => in_flight_to(&g.sends, &g.rmas, id),
            None => true,
        };
        if held {
            return Err(Error::again());
        }
        Ok(())
    }

    #[inline]
    fn alloc_rma(&self, g: &mut Inner, p: PendingRma) -> u64 {
        self.busy.store(true, Ordering::Relaxed);
        g.rmas.insert(p)
    }

    /// A body for an operation that keeps one (a spare when there is one).
    fn body(g: &mut Inner) -> Box<RmaBody> {
        match g.spare.bodies.pop() {
            Some(mut b) => {
                b.owned = None;
                b.pushed = 0;
                b
            }
            None => Box::default(),
        }
    }

    #[inline]
    fn take_rma(&self, g: &mut Inner, cookie: u64) -> Option<PendingRma> {
        let p = g.rmas.take(cookie)?;
        if !g.rma_pushes.is_empty() {
            g.rma_pushes.retain(|c| *c != cookie);
        }
        Some(p)
    }

    /// Completes a one-sided operation at the initiator (`err` 0: success).
    pub(super) fn rma_done(&self, g: &Inner, p: &PendingRma, err: i32) {
        g.b.tx_done(p.context, p.flags, p.completion, (err != 0).then_some(err));
    }

    /// Takes operation `cookie` out, completes it (`err` 0: success) and
    /// keeps its body for reuse.
    fn finish(&self, g: &mut Inner, cookie: u64, err: i32) {
        let Some(p) = self.take_rma(g, cookie) else {
            return;
        };
        self.rma_done(g, &p, err);
        if let Some(mut b) = p.body {
            if g.spare.bodies.len() < SPARE_BODIES {
                b.owned = None;
                g.spare.bodies.push(b);
            }
        }
    }

    /// Why a one-sided operation is refused before it starts.
    #[cold]
    #[inline(never)]
    fn rma_refused(&self, o: &RmaOp<'_>) -> Error {
        if let Err(e) = self.check_enabled("one-sided operation") {
            return e;
        }
        Error::inval(format!(
            "shm: {} local / {} remote ranges exceed the limit of {IOV_LIMIT}",
            o.iov.len(),
            o.rma_iov.len()
        ))
    }

    /// Posts an RMA read or write. A write whose data fits its request
    /// entry (the common one) goes out here; the rest takes
    /// [`rma_general`](Self::rma_general).
    ///
    /// # Safety
    /// As `EndpointOps::post_rma`.
    #[inline]
    pub(super) unsafe fn rma_inner(&self, o: &RmaOp<'_>) -> Result<()> {
        if !self.enabled.load(Ordering::Relaxed)
            || o.iov.len() > IOV_LIMIT
            || o.rma_iov.len() > MAX_RANGES
            || o.rma_iov.is_empty()
        {
            return Err(self.rma_refused(o));
        }
        let len = iov_len(o.iov);
        let mut g = self.lock();
        self.admit(&g, o.flags, o.addr)?;
        let peer = self.usable_peer(&mut g, o.addr)?;
        self.gate(&mut g, &peer)?;
        let completion = g.b.tx_completion(o.flags);
        if o.dir.is_read() || len > write_room(o.rma_iov.len()) {
            // SAFETY: post_rma's contract, passed on unchanged.
            return unsafe { self.rma_general(&mut g, peer, o, len, completion) };
        }
        // The whole write inline in one RMA_WRITE entry; the target's
        // answer completes it (nothing else to keep).
        let cq_data = o.flags & FI_REMOTE_CQ_DATA != 0;
        let commit = o.flags & FI_COMMIT_COMPLETE != 0;
        let cookie = self.alloc_rma(
            &mut g,
            PendingRma {
                peer: peer.clone(),
                kind: Kind::Write,
                completion,
                context: o.context,
                flags: FI_RMA | FI_WRITE,
                body: None,
            },
        );
        let r = Repr {
            op: op::RMA_WRITE,
            flags: flag::LAST
                | if commit { flag::COMMIT } else { 0 }
                | if cq_data { flag::CQ_DATA } else { 0 },
            iov_cnt: o.rma_iov.len() as u8,
            len: len as u32,
            src: self.me.id(),
            tag: len as u64,
            data: if cq_data { o.data } else { 0 },
            total: 0,
            cookie,
        };
        let pushed = peer.seg.msg_ring().push_with(&peer.cached_head, |b| {
            let mut e = Entry::new_unchecked(b);
            let pl = e.payload_mut();
            let mut at = 0;
            for x in o.rma_iov {
                put_range(
                    &mut pl[at..at + RANGE_LEN],
                    WireRange {
                        addr: x.addr,
                        len: x.len as u64,
                        key: x.key,
                    },
                );
                at += RANGE_LEN;
            }
            // SAFETY: post_rma's caller keeps the iov readable for this call.
            unsafe { copy_from_iov(o.iov, 0, &mut pl[at..at + len]) };
            r.emit(&mut e);
        });
        if pushed.is_err() {
            self.take_rma(&mut g, cookie);
            return Err(self.ring_full(&mut g, &peer));
        }
        peer.notify();
        Ok(())
    }

    /// Posts a read, or a write too large for its request entry (pulled by
    /// the target, or pushed in chunks).
    ///
    /// # Safety
    /// As `EndpointOps::post_rma`.
    #[inline(never)]
    unsafe fn rma_general(
        &self,
        g: &mut Inner,
        peer: Arc<Peer>,
        o: &RmaOp<'_>,
        len: usize,
        completion: bool,
    ) -> Result<()> {
        let inject = o.flags & FI_INJECT != 0;
        let (remote, nr) = wire_ranges(o.rma_iov);
        let cq_data = o.flags & FI_REMOTE_CQ_DATA != 0 && !o.dir.is_read();
        let commit = o.flags & FI_COMMIT_COMPLETE != 0 && !o.dir.is_read();
        let commit_flag = if commit { flag::COMMIT } else { 0 };
        let mut b = Self::body(g);
        b.local = [IoVec::default(); MAX_IOV];
        b.local[..o.iov.len()].copy_from_slice(o.iov);
        b.cnt = o.iov.len();
        b.remote = remote;
        b.nr = nr;
        b.len = len;
        b.data = o.data;
        b.cq_data = cq_data;
        b.commit = commit;
        let room = write_room(nr);
        let cma_usable = !self.cfg.disable_cma && peer.cma_ok.load(Ordering::Relaxed);
        let path = write_path(len, room, cma_usable, inject);
        let chunked = !o.dir.is_read() && path == WritePath::Chunked;
        if inject && len > room {
            let mut v = vec![0u8; len];
            // SAFETY: post_rma's caller keeps the iov readable for this call.
            unsafe { copy_from_iov(o.iov, 0, &mut v) };
            b.owned = Some(v.into_boxed_slice());
        }
        let cookie = self.alloc_rma(
            g,
            PendingRma {
                peer: peer.clone(),
                kind: if o.dir.is_read() {
                    Kind::Read
                } else {
                    Kind::Write
                },
                completion,
                context: o.context,
                flags: FI_RMA | o.dir.flag(),
                body: Some(b),
            },
        );
        if chunked {
            g.rma_pushes.push_back(cookie);
            self.run_rma_pushes(g);
            return Ok(());
        }
        let (lr, nl) = locals(o.iov);
        let nl = if len > 0 { nl } else { 0 };
        let r = Repr {
            op: if o.dir.is_read() {
                op::RMA_READ
            } else {
                op::RMA_PULL
            },
            flags: commit_flag | if cq_data { flag::CQ_DATA } else { 0 },
            iov_cnt: nr as u8 | (nl as u8) << 4,
            src: self.me.id(),
            tag: len as u64,
            data: if cq_data { o.data } else { 0 },
            cookie,
            ..Default::default()
        };
        let pushed = peer.seg.msg_ring().push_with(&peer.cached_head, |b| {
            let mut e = Entry::new_unchecked(b);
            put_ranges(e.payload_mut(), &remote[..nr], &lr[..nl]);
            r.emit(&mut e);
        });
        if pushed.is_err() {
            self.take_rma(g, cookie);
            return Err(self.ring_full(g, &peer));
        }
        peer.notify();
        Ok(())
    }

    /// Posts an atomic: operands (and compare values) inline, results back
    /// in the answer.
    ///
    /// # Safety
    /// As `EndpointOps::post_atomic`.
    pub(super) unsafe fn atomic_inner(&self, o: &AtomicOp<'_>) -> Result<()> {
        self.check_enabled("one-sided operation")?;
        let size = atomic::datatype_size(o.datatype)
            .ok_or_else(|| Error::inval(format!("shm: unknown datatype {}", o.datatype)))?;
        if o.rma_ioc.len() > MAX_RANGES || o.result.len() > MAX_IOV {
            return Err(Error::inval("shm: too many atomic ranges"));
        }
        let count: usize = o.rma_ioc.iter().map(|r| r.count).sum();
        let bytes = count * size;
        let with_operand = !o.operand.is_empty();
        let with_compare = o.kind == AtomicKind::Compare;
        let inline = bytes * (usize::from(with_operand) + usize::from(with_compare));
        if bytes > ATOMIC_MAX_BYTES || o.rma_ioc.len() * RANGE_LEN + inline > INLINE_MAX {
            return Err(Error::new(
                errno::FI_EMSGSIZE,
                format!("shm: an atomic of {bytes} bytes exceeds {ATOMIC_MAX_BYTES}"),
            ));
        }
        let mut g = self.lock();
        self.admit(&g, o.flags, o.addr)?;
        let peer = self.usable_peer(&mut g, o.addr)?;
        self.gate(&mut g, &peer)?;
        let completion = g.b.tx_completion(o.flags);
        let mut remote = [WireRange::default(); MAX_RANGES];
        for (w, r) in remote.iter_mut().zip(o.rma_ioc) {
            *w = WireRange {
                addr: r.addr,
                len: r.count as u64,
                key: r.key,
            };
        }
        let nr = o.rma_ioc.len();
        let fetch = o.kind != AtomicKind::Basic;
        let mut b = Self::body(&mut g);
        b.local = [IoVec::default(); MAX_IOV];
        for (l, r) in b.local.iter_mut().zip(o.result) {
            *l = IoVec {
                base: r.addr,
                len: r.count * size,
            };
        }
        b.cnt = if fetch { o.result.len() } else { 0 };
        b.remote = remote;
        b.nr = nr;
        b.len = if fetch { bytes } else { 0 };
        b.data = 0;
        b.cq_data = false;
        b.commit = false;
        let cookie = self.alloc_rma(
            &mut g,
            PendingRma {
                peer: peer.clone(),
                kind: Kind::Atomic,
                completion,
                context: o.context,
                flags: FI_ATOMIC | if fetch { FI_READ } else { FI_WRITE },
                body: Some(b),
            },
        );
        let r = Repr {
            op: op::ATOMIC,
            flags: flag::LAST
                | if o.flags & FI_COMMIT_COMPLETE != 0 {
                    flag::COMMIT
                } else {
                    0
                },
            iov_cnt: nr as u8,
            len: inline as u32,
            src: self.me.id(),
            tag: AtomicReq::tag(o.kind, o.op, o.datatype),
            total: count as u64,
            cookie,
            ..Default::default()
        };
        let to_iov = |l: &[Ioc]| -> ([IoVec; MAX_IOV], usize) {
            let mut v = [IoVec::default(); MAX_IOV];
            for (d, s) in v.iter_mut().zip(l) {
                *d = IoVec {
                    base: s.addr,
                    len: s.count * size,
                };
            }
            (v, l.len().min(MAX_IOV))
        };
        let (ov, on) = to_iov(o.operand);
        let (cv, cn) = to_iov(o.compare);
        let pushed = peer.seg.msg_ring().push_with(&peer.cached_head, |b| {
            let mut e = Entry::new_unchecked(b);
            let pl = e.payload_mut();
            let mut at = put_ranges(pl, &remote[..nr], &[]);
            if with_operand {
                // SAFETY: post_atomic's caller keeps the operands readable.
                unsafe { copy_from_iov(&ov[..on], 0, &mut pl[at..at + bytes]) };
                at += bytes;
            }
            if with_compare {
                // SAFETY: post_atomic's caller keeps the compare values
                // readable for this call.
                unsafe { copy_from_iov(&cv[..cn], 0, &mut pl[at..at + bytes]) };
            }
            r.emit(&mut e);
        });
        if pushed.is_err() {
            self.take_rma(&mut g, cookie);
            return Err(self.ring_full(&mut g, &peer));
        }
        peer.notify();
        Ok(())
    }

    /// Pushes write chunks (initiator) and read-answer chunks (target)
    /// until the rings fill.
    pub(super) fn run_rma_pushes(&self, g: &mut Inner) {
        while let Some(&cookie) = g.rma_pushes.front() {
            let me = self.me.id();
            let Some((peer, Some(p))) = g
                .rmas
                .get_mut(cookie)
                .map(|p| (&p.peer, p.body.as_deref_mut()))
            else {
                g.rma_pushes.pop_front();
                continue;
            };
            let room = write_room(p.nr);
            let mut stalled = false;
            while p.pushed < p.len || (p.len == 0 && p.pushed == 0) {
                let n = (p.len - p.pushed).min(room);
                let last = p.pushed + n == p.len;
                let r = Repr {
                    op: op::RMA_WRITE,
                    flags: if last { flag::LAST } else { 0 }
                        | if last && p.cq_data { flag::CQ_DATA } else { 0 }
                        | if p.commit { flag::COMMIT } else { 0 },
                    iov_cnt: p.nr as u8,
                    len: n as u32,
                    src: me,
                    tag: p.len as u64,
                    data: if last && p.cq_data { p.data } else { 0 },
                    total: p.pushed as u64,
                    cookie,
                };
                let at0 = p.pushed;
                let ok = peer.seg.msg_ring().push_with(&peer.cached_head, |b| {
                    let mut e = Entry::new_unchecked(b);
                    let pl = e.payload_mut();
                    let at = put_ranges(pl, &p.remote[..p.nr], &[]);
                    match &p.owned {
                        Some(v) => pl[at..at + n].copy_from_slice(&v[at0..at0 + n]),
                        // SAFETY: post_rma's caller keeps the source valid
                        // until the write completes.
                        None => unsafe {
                            copy_from_iov(&p.local[..p.cnt], at0, &mut pl[at..at + n]);
                        },
                    }
                    r.emit(&mut e);
                });
                if ok.is_err() {
                    stalled = true;
                    break;
                }
                peer.notify();
                p.pushed += n;
                if p.len == 0 {
                    p.pushed = 1;
                }
            }
            if stalled {
                break;
            }
            g.rma_pushes.pop_front();
        }
        while let Some(rp) = g.read_pushes.front_mut() {
            let to = rp.to;
            let peer = match self.peer_by_id(g, to) {
                Ok(p) => p,
                Err(_) => {
                    g.read_pushes.pop_front();
                    continue;
                }
            };
            let rp = g.read_pushes.front_mut().expect("front checked above");
            let mut stalled = false;
            while rp.offset < rp.len {
                let n = (rp.len - rp.offset).min(INLINE_MAX);
                let last = rp.offset + n == rp.len;
                let r = Repr {
                    op: op::RMA_RESP,
                    flags: if last { flag::LAST } else { 0 },
                    len: n as u32,
                    src: self.me.id(),
                    total: rp.offset as u64,
                    cookie: rp.cookie,
                    ..Default::default()
                };
                let off = rp.offset;
                let ok = peer.seg.msg_ring().push_with(&peer.cached_head, |b| {
                    let mut e = Entry::new_unchecked(b);
                    // SAFETY: the ranges were resolved against regions kept
                    // registered by `_mrs`.
                    unsafe { copy_from_iov(&rp.src[..rp.n], off, &mut e.payload_mut()[..n]) };
                    r.emit(&mut e);
                });
                if ok.is_err() {
                    stalled = !peer.dead();
                    if !stalled {
                        rp.offset = rp.len;
                    }
                    break;
                }
                peer.notify();
                rp.offset += n;
            }
            if stalled {
                break;
            }
            g.read_pushes.pop_front();
        }
    }

    /// A one-sided request or answer read from the ring (on an endpoint
    /// with an auth key, only from a sender that proved it).
    #[inline]
    pub(super) fn one_sided_entry(&self, g: &mut Inner, x: OneSidedIn<'_>) {
        let from = match &x {
            OneSidedIn::Request(r) => r.repr.src,
            OneSidedIn::Answer(a) => a.from,
        };
        if self.keyed && !self.admit_sender(g, from) {
            return;
        }
        tracing::trace!(entry = ?x, "shm: entry");
        match x {
            OneSidedIn::Request(req) => self.rma_target(g, &req),
            OneSidedIn::Answer(a) => self.rma_answer(g, &a),
        }
    }

    /// Initiator side: an answer from a target (only the operation's
    /// target may answer it).
    #[inline]
    pub(super) fn rma_answer(&self, g: &mut Inner, a: &Answer<'_>) {
        let Answer {
            from,
            cookie,
            status,
            push,
            last,
            offset: at,
            bytes,
        } = *a;
        let p = match g.rmas.answered(cookie, from, |p| p.peer.addr.id()) {
            Ok(p) => p,
            Err(why) => return stray(cookie, from, why),
        };
        // The common answer: a write (or an atomic without results) done.
        if !push && status == 0 && bytes.is_empty() && last {
            return self.finish(g, cookie, 0);
        }
        if push {
            if p.kind == Kind::Write && p.body.as_deref().is_some_and(|b| b.pushed == 0) {
                // The target cannot pull: push the write in chunks.
                p.peer.cma_ok.store(false, Ordering::Relaxed);
                g.rma_pushes.push_back(cookie);
                self.busy.store(true, Ordering::Relaxed);
                return;
            }
            return self.finish(g, cookie, errno::FI_EIO);
        }
        if status != 0 {
            return self.finish(g, cookie, status_code(status));
        }
        if !bytes.is_empty() {
            let fits = |b: &RmaBody| at.checked_add(bytes.len()).is_some_and(|e| e <= b.len);
            let dest = match p.body.as_deref() {
                Some(b) if p.kind != Kind::Write && fits(b) => b,
                _ => {
                    tracing::warn!(cookie, "shm: answer bytes outside the operation");
                    return self.finish(g, cookie, errno::FI_EIO);
                }
            };
            // SAFETY: the read or result buffer stays valid and unaliased
            // until the operation completes (post_rma / post_atomic contract).
            unsafe { copy_to_iov(&dest.local[..dest.cnt], at, bytes) };
        }
        if last {
            self.finish(g, cookie, 0);
        }
    }

    /// The source of a pending write the target pulls (for a CTS): peer,
    /// local ranges and length.
    pub(super) fn rma_source(
        &self,
        g: &mut Inner,
        cookie: u64,
    ) -> Option<(Arc<Peer>, [IoVec; MAX_IOV], usize, usize)> {
        let p = g.rmas.get_mut(cookie)?;
        let b = p.body.as_deref()?;
        (p.kind == Kind::Write && b.owned.is_none())
            .then(|| (p.peer.clone(), b.local, b.cnt, b.len))
    }
}

/// An answer that names no operation of its sender: dropped.
#[cold]
#[inline(never)]
fn stray(cookie: u64, from: u64, why: Stray) {
    if why == Stray::Unknown {
        tracing::debug!(cookie, from, reason = %why, "shm: dropping a one-sided answer");
    } else {
        tracing::warn!(cookie, from, reason = %why, "shm: dropping a one-sided answer");
    }
}

const _: () = assert!(MAX_RANGES * RANGE_LEN + MAX_RANGES * LOCAL_LEN <= INLINE_MAX);
const _: () = assert!(MAX_RANGES * RANGE_LEN + 2 * ATOMIC_MAX_BYTES <= INLINE_MAX);
