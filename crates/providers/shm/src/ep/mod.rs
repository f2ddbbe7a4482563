//! The shm RDM endpoint: sends into peers' rings, receives from its own,
//! matches, copies and completes.
//!
//! The raw layer's memory contract (iov ranges stay valid until completion,
//! promised by the `unsafe` post calls) is what the few `unsafe` blocks here
//! rely on; each names it.
#![allow(unsafe_code)]

use crate::addr::ShmAddr;
use crate::peer::Peer;
use crate::{Config, INJECT_SIZE, IOV_LIMIT};
use ofi_core::consts::*;
use ofi_core::error::{errno, Error, Result};
use ofi_core::info::Info;
use ofi_core::object::{AtomicOp, EpBindings, RecvOp, RmaOp, SendOp};
use ofi_core::provider::{EndpointOps, Progress};
use ofi_core::util::atomic::{self, AtomicKind};
use ofi_core::util::cq::{CqErrEntry, CqTaggedEntry};
use ofi_core::util::iov::{copy_from_iov, copy_to_iov, iov_len, IoVec};
use ofi_core::util::lock::{SpinGuard, SpinLock};
use ofi_core::util::matching::{MatchQueues, PostedRecv, Unexpected, MAX_IOV};
use ofi_shm::cma::{self, Range};
use ofi_shm::doorbell::Bell;
use ofi_shm::proc;
use ofi_shm::segment::{
    bell_path, reclaim_stale, segment_path, Geometry, MsgConsumer, Segment, XferLayout, XFER_DESCS,
};
use ofi_wire::shm::{flag, op, Entry, Repr, HDR_LEN, MAX_RTS_IOV};
use std::collections::{HashMap, VecDeque};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Once};
use std::time::{Duration, Instant};

/// Bytes per ring slot: an 8-byte sequence, the 48-byte header, 4104 inline bytes.
const SLOT_SIZE: usize = 4160;
/// Largest message carried inline.
pub const INLINE_MAX: usize = SLOT_SIZE - 8 - HDR_LEN;
/// Entries handled per progress call.
const BUDGET: usize = 64;
/// How often pending operations check their peers' liveness.
const LIVENESS_PERIOD: Duration = Duration::from_millis(20);

const _: () = assert!(INLINE_MAX >= INJECT_SIZE);
const _: () = assert!(MAX_RTS_IOV >= IOV_LIMIT && MAX_IOV >= IOV_LIMIT);

mod rma;

static NEXT_IDX: AtomicU32 = AtomicU32::new(0);
static RECLAIM: Once = Once::new();

/// Where an incoming message's bytes are.
enum Src<'a> {
    Inline(&'a [u8]),
    Bounce(u64),
    Rts {
        sender: u64,
        cookie: u64,
        iov: [(u64, u64); MAX_RTS_IOV],
        cnt: u8,
    },
}

/// An unexpected message's bytes, held until a receive matches it.
#[derive(Debug)]
enum Payload {
    Inline(Vec<u8>),
    Bounce(u64),
    Rts {
        sender: u64,
        cookie: u64,
        iov: [(u64, u64); MAX_RTS_IOV],
        cnt: u8,
    },
}

/// What the receiver needs to know about a message.
#[derive(Clone, Copy, Debug)]
struct Meta {
    tagged: bool,
    tag: u64,
    data: u64,
    cq_data: bool,
    total: usize,
    src_addr: u64,
}

/// A send waiting for the receiver's ACK (large messages).
struct PendingSend {
    peer: Arc<Peer>,
    iov: [IoVec; MAX_IOV],
    cnt: usize,
    len: usize,
    context: usize,
    flags: u64,
    completion: bool,
    gen: u32,
}

/// A receive being filled by DATA entries (the no-CMA fallback).
struct Reasm {
    sender: u64,
    cookie: u64,
    iov: [IoVec; MAX_IOV],
    cnt: usize,
    offset: usize,
    cap: usize,
    received: usize,
    meta: Meta,
    context: usize,
    cq_flags: u64,
    completion: bool,
    buf: usize,
}

/// A send being pushed through the receiver's ring after a NACK.
struct Push {
    slot: u32,
    offset: usize,
}

/// A queued control entry: destination, header, and any payload bytes.
type Ctrl = (u64, Repr, Option<Box<[u8]>>);

struct Inner {
    b: EpBindings,
    need_src: bool,
    av_gen: u64,
    peers: Vec<Option<Arc<Peer>>>,
    by_id: HashMap<u64, Arc<Peer>>,
    src_cache: HashMap<u64, u64>,
    src_gen: u64,
    mq: MatchQueues<Payload>,
    unexpected: usize,
    sends: Vec<Option<PendingSend>>,
    free_sends: Vec<u32>,
    next_gen: u32,
    pushes: VecDeque<Push>,
    reasm: Vec<Reasm>,
    ctrl: VecDeque<Ctrl>,
    /// One-sided operations waiting for their target's answer.
    rmas: Vec<Option<rma::PendingRma>>,
    free_rmas: Vec<u32>,
    /// Writes pushed through the target's ring in chunks (cookies).
    rma_pushes: VecDeque<u64>,
    /// Reads answered through the initiator's ring in chunks (no CMA).
    read_pushes: VecDeque<rma::ReadPush>,
    pool: Vec<Vec<u8>>,
    min_multi_recv: usize,
    last_check: Instant,
    xfer_free: Vec<u32>,
    xfer_gen: u32,
    /// The one consumer of the endpoint's ring (taken out while a pass
    /// reads entries).
    rx: Option<MsgConsumer>,
}

/// An shm RDM endpoint.
pub struct ShmEndpoint {
    me: ShmAddr,
    seg: Segment,
    bell: Bell,
    cfg: Config,
    caps: u64,
    enabled: AtomicBool,
    /// The ring position as of the last locked pass: an idle poll checks the
    /// slot there without taking the lock.
    head_hint: AtomicU64,
    /// Work other than the ring waits (control entries, pushes, large sends,
    /// reassemblies): progress must take the lock even when the ring is idle.
    busy: AtomicBool,
    inner: SpinLock<Inner>,
}

impl std::fmt::Debug for ShmEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShmEndpoint").field("me", &self.me).finish()
    }
}

fn tx_flags(tagged: bool) -> u64 {
    FI_SEND | if tagged { FI_TAGGED } else { FI_MSG }
}

fn rx_flags(m: &Meta) -> u64 {
    FI_RECV
        | if m.tagged { FI_TAGGED } else { FI_MSG }
        | if m.cq_data { FI_REMOTE_CQ_DATA } else { 0 }
}

fn status_code(v: u64) -> i32 {
    match i32::try_from(v) {
        Ok(c) if c > 0 && c < 1024 => c,
        _ => errno::FI_EIO,
    }
}

impl ShmEndpoint {
    /// Creates the endpoint's segment and doorbell (mode 0600), reclaiming
    /// stale segments of dead processes first (once per process).
    pub fn open(cfg: Config, info: &Info) -> Result<ShmEndpoint> {
        let uid = proc::uid();
        RECLAIM.call_once(|| {
            let n = reclaim_stale(uid);
            if n > 0 {
                tracing::info!(removed = n, "reclaimed stale shm segments");
            }
        });
        let me = ShmAddr {
            pid: std::process::id(),
            idx: NEXT_IDX.fetch_add(1, Ordering::Relaxed),
        };
        let geo = Geometry {
            ring_slots: cfg.ring_slots,
            slot_size: SLOT_SIZE,
            pool_bufs: cfg.bounce_bufs.max(1),
            pool_buf_size: cfg.bounce_size,
        };
        let (seg, rx) = Segment::create(&segment_path(uid, me.pid, me.idx), geo)
            .map_err(|e| Error::os(e, "shm: creating the endpoint segment"))?;
        let bell = Bell::create(&bell_path(uid, me.pid, me.idx))
            .map_err(|e| Error::os(e, "shm: creating the doorbell"))?;
        let depth = info.rx_attr.size.max(64);
        Ok(ShmEndpoint {
            me,
            seg,
            bell,
            caps: if info.caps == 0 {
                crate::offer().caps
            } else {
                info.caps
            },
            inner: SpinLock::new(Inner {
                b: EpBindings::default(),
                need_src: false,
                av_gen: u64::MAX,
                peers: Vec::new(),
                by_id: HashMap::new(),
                src_cache: HashMap::new(),
                src_gen: u64::MAX,
                mq: MatchQueues::new(depth),
                unexpected: 0,
                sends: Vec::with_capacity(64),
                free_sends: Vec::with_capacity(64),
                next_gen: 1,
                pushes: VecDeque::new(),
                reasm: Vec::new(),
                ctrl: VecDeque::new(),
                rmas: Vec::new(),
                free_rmas: Vec::new(),
                rma_pushes: VecDeque::new(),
                read_pushes: VecDeque::new(),
                pool: Vec::new(),
                min_multi_recv: 0,
                last_check: Instant::now(),
                xfer_free: (0..XFER_DESCS as u32).rev().collect(),
                xfer_gen: 0,
                rx: Some(rx),
            }),
            cfg,
            enabled: AtomicBool::new(false),
            head_hint: AtomicU64::new(0),
            busy: AtomicBool::new(false),
        })
    }

    #[inline]
    fn lock(&self) -> SpinGuard<'_, Inner> {
        self.inner.lock()
    }

    // ---- completions -------------------------------------------------

    fn tx_complete(&self, g: &Inner, context: usize, flags: u64, completion: bool) {
        g.b.tx_done(context, flags, completion, None);
    }

    fn tx_error(&self, g: &Inner, context: usize, flags: u64, err: i32) {
        g.b.tx_done(context, flags, true, Some(err));
    }

    #[allow(clippy::too_many_arguments)]
    fn rx_complete(
        &self,
        g: &Inner,
        context: usize,
        flags: u64,
        m: &Meta,
        got: usize,
        buf: usize,
        completion: bool,
    ) {
        if got < m.total {
            if let Some(cq) = &g.b.rx_cq {
                cq.push_err(
                    CqErrEntry {
                        op_context: context,
                        flags,
                        len: got,
                        buf,
                        data: m.data,
                        tag: m.tag,
                        olen: m.total - got,
                        err: errno::FI_ETRUNC,
                        prov_errno: errno::FI_ETRUNC,
                        ..Default::default()
                    },
                    m.src_addr,
                );
            }
            if let Some(c) = &g.b.recv_cntr {
                c.add_err(1);
            }
            return;
        }
        if completion || flags & FI_MULTI_RECV != 0 {
            if let Some(cq) = &g.b.rx_cq {
                cq.push(
                    CqTaggedEntry {
                        op_context: context,
                        flags,
                        len: got,
                        buf,
                        data: m.data,
                        tag: m.tag,
                    },
                    m.src_addr,
                );
            }
        }
        if let Some(c) = &g.b.recv_cntr {
            c.add(1);
        }
    }

    fn rx_error(&self, g: &Inner, context: usize, flags: u64, err: i32, tag: u64) {
        if let Some(cq) = &g.b.rx_cq {
            cq.push_err(
                CqErrEntry {
                    op_context: context,
                    flags,
                    err,
                    prov_errno: err,
                    tag,
                    ..Default::default()
                },
                FI_ADDR_NOTAVAIL,
            );
        }
        if let Some(c) = &g.b.recv_cntr {
            c.add_err(1);
        }
    }

    // ---- peers -----------------------------------------------------

    fn peer_by_id(&self, g: &mut Inner, id: u64) -> Result<Arc<Peer>> {
        if let Some(p) = g.by_id.get(&id) {
            return Ok(p.clone());
        }
        let p = Arc::new(Peer::open(ShmAddr::from_id(id))?);
        g.by_id.insert(id, p.clone());
        Ok(p)
    }

    #[inline]
    fn peer_for(&self, g: &mut Inner, dest: u64) -> Result<Arc<Peer>> {
        let av =
            g.b.av
                .as_ref()
                .ok_or_else(|| Error::new(errno::FI_ENOAV, "shm: no address vector bound"))?;
        let gen = av.generation();
        if gen != g.av_gen {
            g.peers.clear();
            g.av_gen = gen;
        }
        if let Some(Some(p)) = g.peers.get(dest as usize) {
            return Ok(p.clone());
        }
        let bytes = av.lookup(dest).map_err(|_| {
            Error::inval(format!(
                "shm: destination fi_addr {dest} is not in the address vector"
            ))
        })?;
        let addr = ShmAddr::parse(&bytes)?;
        let p = self.peer_by_id(g, addr.id())?;
        let i = dest as usize;
        if i < 1 << 24 {
            if g.peers.len() <= i {
                g.peers.resize(i + 1, None);
            }
            g.peers[i] = Some(p.clone());
        }
        Ok(p)
    }

    /// The peer behind `dest`, refused with `FI_ECONNRESET` (and forgotten)
    /// when its endpoint has closed.
    fn usable_peer(&self, g: &mut Inner, dest: u64) -> Result<Arc<Peer>> {
        let peer = self.peer_for(g, dest)?;
        if peer.closed() {
            g.peers.clear();
            g.by_id.remove(&peer.addr.id());
            return Err(Error::new(
                errno::FI_ECONNRESET,
                format!(
                    "shm: peer endpoint {}.{} has closed",
                    peer.addr.pid, peer.addr.idx
                ),
            ));
        }
        Ok(peer)
    }

    /// `FI_EOPBADSTATE` unless the endpoint is enabled; `what` names the call.
    #[inline]
    fn check_enabled(&self, what: &str) -> Result<()> {
        if !self.enabled.load(Ordering::Relaxed) {
            return Err(Error::new(
                errno::FI_EOPBADSTATE,
                format!("shm: {what} on an endpoint that is not enabled"),
            ));
        }
        Ok(())
    }

    fn src_addr(&self, g: &mut Inner, id: u64) -> u64 {
        if !g.need_src {
            return FI_ADDR_NOTAVAIL;
        }
        let Some(av) = g.b.av.clone() else {
            return FI_ADDR_NOTAVAIL;
        };
        let gen = av.generation();
        if gen != g.src_gen {
            g.src_cache.clear();
            g.src_gen = gen;
        }
        if let Some(a) = g.src_cache.get(&id) {
            return *a;
        }
        match av.reverse(&ShmAddr::from_id(id).to_bytes()) {
            Some(a) => {
                g.src_cache.insert(id, a);
                a
            }
            None => FI_ADDR_NOTAVAIL,
        }
    }

    fn ring_full(&self, peer: &Peer) -> Error {
        if peer.dead() {
            Error::new(
                errno::FI_EIO,
                format!("shm: peer {}.{} has exited", peer.addr.pid, peer.addr.idx),
            )
        } else {
            Error::again()
        }
    }

    /// Sends a control entry now, or queues it until the peer's ring has room.
    fn send_ctrl(&self, g: &mut Inner, to: u64, r: Repr) {
        self.send_ctrl_with(g, to, r, &[]);
    }

    /// Sends a control entry carrying `payload` (at most an entry's inline
    /// capacity), or queues it with a copy of the payload.
    fn send_ctrl_with(&self, g: &mut Inner, to: u64, r: Repr, payload: &[u8]) {
        if g.ctrl.is_empty() && self.try_ctrl(g, to, &r, payload) {
            return;
        }
        let copy = (!payload.is_empty()).then(|| payload.to_vec().into_boxed_slice());
        g.ctrl.push_back((to, r, copy));
        self.busy.store(true, Ordering::Relaxed);
    }

    fn try_ctrl(&self, g: &mut Inner, to: u64, r: &Repr, payload: &[u8]) -> bool {
        let peer = match self.peer_by_id(g, to) {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!(error = %e, "shm: control entry dropped, peer unreachable");
                return true;
            }
        };
        let ok = peer
            .seg
            .msg_ring()
            .push_with(&peer.cached_head, |b| {
                let mut e = Entry::new_unchecked(b);
                e.payload_mut()[..payload.len()].copy_from_slice(payload);
                r.emit(&mut e);
            })
            .is_ok();
        if ok {
            peer.notify();
            return true;
        }
        peer.dead()
    }

    fn flush_ctrl(&self, g: &mut Inner) {
        while let Some((to, r, p)) = g.ctrl.pop_front() {
            if !self.try_ctrl(g, to, &r, p.as_deref().unwrap_or(&[])) {
                g.ctrl.push_front((to, r, p));
                break;
            }
        }
    }

    // ---- sending ---------------------------------------------------

    fn alloc_send(&self, g: &mut Inner, s: PendingSend) -> u64 {
        self.busy.store(true, Ordering::Relaxed);
        let gen = s.gen;
        let idx = match g.free_sends.pop() {
            Some(i) => {
                g.sends[i as usize] = Some(s);
                i
            }
            None => {
                g.sends.push(Some(s));
                (g.sends.len() - 1) as u32
            }
        };
        (u64::from(gen) << 32) | u64::from(idx)
    }

    fn take_send(&self, g: &mut Inner, cookie: u64) -> Option<PendingSend> {
        let idx = cookie as u32;
        let gen = (cookie >> 32) as u32;
        let slot = g.sends.get_mut(idx as usize)?;
        if slot.as_ref().is_some_and(|s| s.gen == gen) {
            let s = slot.take();
            g.free_sends.push(idx);
            g.pushes.retain(|p| p.slot != idx);
            return s;
        }
        None
    }

    /// The header fields every send carries.
    #[inline]
    fn header(&self, op: &SendOp<'_>, len: usize) -> Repr {
        let cq_data = op.flags & FI_REMOTE_CQ_DATA != 0;
        Repr {
            flags: if op.tagged { flag::TAGGED } else { 0 }
                | if cq_data { flag::CQ_DATA } else { 0 },
            src: self.me.id(),
            tag: op.tag,
            data: if cq_data { op.data } else { 0 },
            total: len as u64,
            ..Default::default()
        }
    }

    /// Sends a message inline in one ring entry and completes it.
    #[inline]
    fn push_inline(
        &self,
        g: &Inner,
        peer: &Peer,
        op: &SendOp<'_>,
        len: usize,
        completion: bool,
    ) -> Result<()> {
        let mut r = self.header(op, len);
        r.op = op::INLINE;
        r.len = len as u32;
        let pushed = peer.seg.msg_ring().push_with(&peer.cached_head, |b| {
            let mut e = Entry::new_unchecked(b);
            // The receiver polls the slot's first cache line (sequence,
            // header, first 8 data bytes): fill the rest first and that line
            // last, so it changes hands once.
            let head = len.min(8);
            let p = e.payload_mut();
            // SAFETY: post_send's caller keeps the iov readable for this call.
            unsafe { copy_from_iov(op.iov, head, &mut p[head..len]) };
            // SAFETY: as above.
            unsafe { copy_from_iov(op.iov, 0, &mut p[..head]) };
            r.emit(&mut e);
        });
        if pushed.is_err() {
            return Err(self.ring_full(peer));
        }
        peer.notify();
        self.tx_complete(g, op.context, tx_flags(op.tagged), completion);
        Ok(())
    }

    fn send_inner(&self, op: &SendOp<'_>) -> Result<()> {
        self.check_enabled("send")?;
        if op.iov.len() > IOV_LIMIT {
            return Err(Error::inval(format!(
                "shm: {} iov entries exceed the limit of {IOV_LIMIT}",
                op.iov.len()
            )));
        }
        let need = if op.tagged { FI_TAGGED } else { FI_MSG };
        if self.caps & need == 0 {
            return Err(Error::new(
                errno::FI_EOPNOTSUPP,
                "shm: the endpoint was opened without this capability",
            ));
        }
        let len = iov_len(op.iov);
        let inject = op.flags & FI_INJECT != 0;
        if inject && len > INJECT_SIZE {
            return Err(Error::new(
                errno::FI_EMSGSIZE,
                format!("shm: inject of {len} bytes exceeds inject_size {INJECT_SIZE}"),
            ));
        }
        let mut g = self.lock();
        self.admit(&g, op.flags)?;
        let completion = g.b.tx_completion(op.flags);
        // FI_DELIVERY_COMPLETE: only the receiver's ACK, sent once the data
        // is in the matched buffer, may complete the send — the RTS path.
        let deliver = !inject && (op.flags | g.b.info.tx_attr.op_flags) & FI_DELIVERY_COMPLETE != 0;
        if len <= INLINE_MAX && !deliver {
            // Fast path: a cached peer, borrowed without touching its refcount.
            let cached =
                g.b.av
                    .as_ref()
                    .is_some_and(|av| av.generation() == g.av_gen);
            if let Some(Some(peer)) = g.peers.get(op.dest as usize).filter(|_| cached) {
                if !peer.closed() {
                    return self.push_inline(&g, peer, op, len, completion);
                }
            }
        }
        let peer = self.usable_peer(&mut g, op.dest)?;
        if len <= INLINE_MAX && !deliver {
            return self.push_inline(&g, &peer, op, len, completion);
        }
        let mut r = self.header(op, len);
        if len <= self.cfg.bounce_size && !deliver {
            if let Some(mut buf) = peer.seg.alloc_bounce() {
                let bytes = buf.as_mut_slice();
                let l = len.min(bytes.len());
                // SAFETY: post_send's caller keeps the iov readable for this call.
                let copied = unsafe { copy_from_iov(op.iov, 0, &mut bytes[..l]) };
                if copied == len {
                    r.op = op::BOUNCE;
                    r.cookie = buf.index();
                    if peer
                        .seg
                        .msg_ring()
                        .push_with(&peer.cached_head, |b| r.emit(&mut Entry::new_unchecked(b)))
                        .is_ok()
                    {
                        buf.hand_over();
                        peer.notify();
                        self.tx_complete(&g, op.context, tx_flags(op.tagged), completion);
                        return Ok(());
                    }
                    drop(buf);
                    return Err(self.ring_full(&peer));
                }
            }
        }
        // Large (or no bounce buffer free): the receiver copies from us.
        let mut iov = [IoVec::default(); MAX_IOV];
        iov[..op.iov.len()].copy_from_slice(op.iov);
        let gen = g.next_gen;
        g.next_gen = g.next_gen.wrapping_add(1).max(1);
        let cookie = self.alloc_send(
            &mut g,
            PendingSend {
                peer: peer.clone(),
                iov,
                cnt: op.iov.len(),
                len,
                context: op.context,
                flags: tx_flags(op.tagged),
                completion,
                gen,
            },
        );
        r.op = op::RTS;
        r.iov_cnt = op.iov.len().max(1) as u8;
        r.cookie = cookie;
        let pushed = peer.seg.msg_ring().push_with(&peer.cached_head, |b| {
            let mut e = Entry::new_unchecked(b);
            r.emit(&mut e);
            let p = e.payload_mut();
            for (i, v) in op.iov.iter().enumerate() {
                p[i * 16..i * 16 + 8].copy_from_slice(&(v.base as u64).to_le_bytes());
                p[i * 16 + 8..i * 16 + 16].copy_from_slice(&(v.len as u64).to_le_bytes());
            }
            if op.iov.is_empty() {
                p[..16].fill(0);
            }
        });
        if pushed.is_err() {
            self.take_send(&mut g, cookie);
            return Err(self.ring_full(&peer));
        }
        peer.notify();
        Ok(())
    }

    /// Pushes DATA entries of sends whose receiver cannot copy across processes.
    fn run_pushes(&self, g: &mut Inner) {
        let mut i = 0;
        while i < g.pushes.len() {
            let Push { slot, mut offset } = g.pushes[i];
            let Some(s) = g.sends.get(slot as usize).and_then(|s| s.as_ref()) else {
                g.pushes.remove(i);
                continue;
            };
            let (peer, len, cookie) = (
                s.peer.clone(),
                s.len,
                (u64::from(s.gen) << 32) | u64::from(slot),
            );
            let iov = s.iov;
            let cnt = s.cnt;
            let mut pushed_any = false;
            while offset < len {
                let n = (len - offset).min(INLINE_MAX);
                let r = Repr {
                    op: op::DATA,
                    len: n as u32,
                    src: self.me.id(),
                    total: offset as u64,
                    cookie,
                    ..Default::default()
                };
                let ok = peer
                    .seg
                    .msg_ring()
                    .push_with(&peer.cached_head, |b| {
                        let mut e = Entry::new_unchecked(b);
                        r.emit(&mut e);
                        // SAFETY: a pending send's iov stays valid until it completes.
                        unsafe { copy_from_iov(&iov[..cnt], offset, &mut e.payload_mut()[..n]) };
                    })
                    .is_ok();
                if !ok {
                    break;
                }
                pushed_any = true;
                offset += n;
            }
            if pushed_any {
                peer.notify();
            }
            if offset >= len {
                g.pushes.remove(i);
            } else {
                g.pushes[i].offset = offset;
                i += 1;
            }
        }
    }

    // ---- receiving -------------------------------------------------

    /// Copies a message into a receive and completes it (or starts the
    /// cross-process copy / fallback). `off` is the multi-receive offset.
    #[allow(clippy::too_many_arguments)]
    fn deliver(
        &self,
        g: &mut Inner,
        iov: &[IoVec],
        off: usize,
        cap: usize,
        m: Meta,
        src: Src<'_>,
        context: usize,
        mut cq_flags: u64,
        completion: bool,
    ) {
        let buf = iov.first().map_or(0, |v| v.base + off);
        cq_flags |= rx_flags(&m);
        let want = m.total.min(cap);
        match src {
            Src::Inline(bytes) => {
                // SAFETY: post_recv's caller keeps the receive iov valid until completion.
                let n = unsafe { copy_to_iov(iov, off, &bytes[..want.min(bytes.len())]) };
                self.rx_complete(g, context, cq_flags, &m, n, buf, completion);
            }
            Src::Bounce(idx) => {
                // Dropping the token frees the buffer.
                let n = self.seg.take_bounce(idx).map(|b| {
                    let b = b.as_slice();
                    let w = want.min(b.len());
                    // SAFETY: post_recv's caller keeps the receive iov valid until completion.
                    unsafe { copy_to_iov(iov, off, &b[..w]) }
                });
                match n {
                    Some(n) => self.rx_complete(g, context, cq_flags, &m, n, buf, completion),
                    None => self.rx_error(g, context, cq_flags, errno::FI_EIO, m.tag),
                }
            }
            Src::Rts {
                sender,
                cookie,
                iov: riov,
                cnt,
            } => {
                let remote: Vec<Range> = riov[..cnt as usize]
                    .iter()
                    .map(|&(a, l)| Range {
                        base: a as usize,
                        len: l as usize,
                    })
                    .collect();
                let local = clip(iov, off, want);
                let coop = !self.cfg.disable_cma
                    && self.cfg.coop_threshold > 0
                    && want >= self.cfg.coop_threshold;
                if coop {
                    if let Some(res) = self.coop_read(g, sender, cookie, &local, &remote, want) {
                        match res {
                            Ok(n) => self.rx_complete(g, context, cq_flags, &m, n, buf, completion),
                            Err(code) => self.rx_error(g, context, cq_flags, code, m.tag),
                        }
                        let status = res.err().map_or(0, |c| c as u64);
                        self.send_ctrl(
                            g,
                            sender,
                            Repr {
                                op: op::ACK,
                                src: self.me.id(),
                                cookie,
                                data: status,
                                ..Default::default()
                            },
                        );
                        return;
                    }
                }
                let res = if self.cfg.disable_cma {
                    Err(std::io::Error::from_raw_os_error(libc_eperm()))
                } else {
                    // SAFETY: post_recv's caller keeps the receive iov writable until completion.
                    unsafe { cma::read_from(ShmAddr::from_id(sender).pid, &local, &remote) }
                };
                match res {
                    Ok(n) => {
                        self.rx_complete(g, context, cq_flags, &m, n.min(want), buf, completion);
                        self.send_ctrl(
                            g,
                            sender,
                            Repr {
                                op: op::ACK,
                                src: self.me.id(),
                                cookie,
                                ..Default::default()
                            },
                        );
                    }
                    Err(e) if matches!(e.raw_os_error(), Some(c) if c == libc_eperm() || c == libc_enosys()) =>
                    {
                        if let Ok(p) = self.peer_by_id(g, sender) {
                            p.cma_ok.store(false, Ordering::Relaxed);
                        }
                        let mut v = [IoVec::default(); MAX_IOV];
                        v[..iov.len().min(MAX_IOV)].copy_from_slice(&iov[..iov.len().min(MAX_IOV)]);
                        self.busy.store(true, Ordering::Relaxed);
                        g.reasm.push(Reasm {
                            sender,
                            cookie,
                            iov: v,
                            cnt: iov.len().min(MAX_IOV),
                            offset: off,
                            cap,
                            received: 0,
                            meta: m,
                            context,
                            cq_flags,
                            completion,
                            buf,
                        });
                        self.send_ctrl(
                            g,
                            sender,
                            Repr {
                                op: op::NACK,
                                src: self.me.id(),
                                cookie,
                                ..Default::default()
                            },
                        );
                    }
                    Err(e) => {
                        let code = match e.raw_os_error() {
                            Some(c) if c == libc_efault() => errno::FI_EFAULT,
                            _ => errno::FI_EIO,
                        };
                        tracing::debug!(error = %e, "shm: cross-process copy failed");
                        self.rx_error(g, context, cq_flags, code, m.tag);
                        self.send_ctrl(
                            g,
                            sender,
                            Repr {
                                op: op::ACK,
                                src: self.me.id(),
                                cookie,
                                data: code as u64,
                                ..Default::default()
                            },
                        );
                    }
                }
            }
        }
    }

    /// Copies a large message with the sender's help: chunk 0 first (which
    /// proves the kernel allows it), then a CTS invites the sender to claim
    /// chunks and write them while this side reads the others. None when a
    /// cooperative copy could not start (no descriptor, copies refused).
    fn coop_read(
        &self,
        g: &mut Inner,
        sender: u64,
        cookie: u64,
        local: &[Range],
        remote: &[Range],
        want: usize,
    ) -> Option<std::result::Result<usize, i32>> {
        let pid = ShmAddr::from_id(sender).pid;
        let chunk = (want / 8)
            .clamp(32 << 10, self.cfg.coop_chunk.max(32 << 10))
            .next_multiple_of(4096);
        let n = want.div_ceil(chunk) as u64;
        let peer = self.peer_by_id(g, sender).ok()?;
        // Until a copy from this peer has worked, do chunk 0 alone first: a
        // refusal then falls back cleanly, before the sender is involved.
        let first = if peer.cma_proven.load(Ordering::Relaxed) {
            0
        } else {
            if let Err(e) = copy_chunk(pid, local, remote, 0, chunk, want, false) {
                return match e.raw_os_error() {
                    Some(c) if c == libc_eperm() || c == libc_enosys() => None,
                    _ => Some(Err(errno::FI_EIO)),
                };
            }
            peer.cma_proven.store(true, Ordering::Relaxed);
            1
        };
        if n == first {
            return Some(Ok(want));
        }
        let di = g.xfer_free.pop()?;
        let d = self.seg.xfer(u64::from(di))?;
        g.xfer_gen = g.xfer_gen.wrapping_add(1).max(1);
        let gen = u64::from(g.xfer_gen);
        let mut layout = XferLayout {
            nchunks: n,
            chunk,
            total: want,
            ranges_cnt: local.len().min(4),
            ..Default::default()
        };
        for (o, r) in layout.ranges.iter_mut().zip(local) {
            *o = (r.base, r.len);
        }
        d.publish(g.xfer_gen, &layout, first);
        self.send_ctrl(
            g,
            sender,
            Repr {
                op: op::CTS,
                src: self.me.id(),
                cookie,
                tag: u64::from(di),
                data: gen,
                ..Default::default()
            },
        );
        while let Some(c) = d.claim(gen, n) {
            let r = copy_chunk(pid, local, remote, c as usize, chunk, want, false);
            d.chunk_done(r.err().map(|e| e.raw_os_error().unwrap_or(5)));
        }
        // Wait for the chunks the sender claimed; it is copying them now.
        let start = Instant::now();
        let mut last = start;
        while !d.finished(n) {
            std::hint::spin_loop();
            let now = Instant::now();
            if now.duration_since(last) > Duration::from_millis(5) {
                last = now;
                let dead = self.peer_by_id(g, sender).map(|p| p.dead()).unwrap_or(true);
                if dead || now.duration_since(start) > Duration::from_secs(30) {
                    d.fail(errno::FI_EIO);
                    break;
                }
            }
        }
        // Retire the generation so no stale claim can succeed, then reuse.
        let failed = d.retire();
        g.xfer_free.push(di);
        match failed {
            0 => Some(Ok(want)),
            14 => Some(Err(errno::FI_EFAULT)),
            _ => Some(Err(errno::FI_EIO)),
        }
    }

    /// The sender's half of a cooperative copy: claim chunks and write them
    /// into the receiver's buffer until none are left.
    fn coop_write(&self, g: &mut Inner, r: &Repr) {
        let idx = r.cookie as u32;
        // The CTS names a pending send, or a one-sided write the target pulls.
        let found = g
            .sends
            .get(idx as usize)
            .and_then(|s| s.as_ref())
            .filter(|s| s.gen == (r.cookie >> 32) as u32)
            .map(|s| (s.peer.clone(), s.iov, s.cnt, s.len))
            .or_else(|| self.rma_source(g, r.cookie));
        let Some((peer, iov, cnt_local, len)) = found else {
            return;
        };
        let Some(d) = peer.seg.xfer(r.tag) else {
            tracing::warn!(
                index = r.tag,
                "shm: CTS names an invalid transfer descriptor"
            );
            return;
        };
        let gen = r.data;
        let layout = d.layout();
        let (n, chunk, total) = (layout.nchunks, layout.chunk, layout.total);
        if chunk == 0 || total > len || n != total.div_ceil(chunk) as u64 {
            tracing::warn!("shm: CTS describes an impossible transfer");
            return;
        }
        let remote: Vec<Range> = layout
            .ranges()
            .iter()
            .map(|&(base, len)| Range { base, len })
            .collect();
        let local: Vec<Range> = iov[..cnt_local]
            .iter()
            .map(|v| Range {
                base: v.base,
                len: v.len,
            })
            .collect();
        let pid = peer.addr.pid;
        while let Some(c) = d.claim(gen, n) {
            let r = copy_chunk(pid, &local, &remote, c as usize, chunk, total, true);
            d.chunk_done(r.err().map(|e| e.raw_os_error().unwrap_or(5)));
        }
    }

    /// A message arrived: match a posted receive or queue it as unexpected.
    fn incoming(&self, g: &mut Inner, m: Meta, src: Src<'_>) {
        let found = g.mq.find_posted(m.tagged, m.src_addr, m.tag);
        let Some(i) = found else {
            let payload = match src {
                Src::Inline(b) => {
                    let mut v = g.pool.pop().unwrap_or_default();
                    v.clear();
                    v.extend_from_slice(&b[..m.total.min(b.len())]);
                    Payload::Inline(v)
                }
                Src::Bounce(idx) => Payload::Bounce(idx),
                Src::Rts {
                    sender,
                    cookie,
                    iov,
                    cnt,
                } => Payload::Rts {
                    sender,
                    cookie,
                    iov,
                    cnt,
                },
            };
            g.unexpected += 1;
            g.mq.push_unexpected(
                m.tagged,
                Unexpected {
                    src: m.src_addr,
                    tag: m.tag,
                    data: m.data,
                    flags: if m.cq_data { FI_REMOTE_CQ_DATA } else { 0 },
                    len: m.total,
                    claimed: None,
                    payload,
                },
            );
            return;
        };
        let (recv, off, cap, extra) = self.claim_posted(g, m.tagged, i, m.total);
        let completion = recv.flags & FI_COMPLETION != 0 || !g.b.rx_selective;
        self.deliver(
            g,
            &recv.iov[..recv.iov_cnt],
            off,
            cap,
            m,
            src,
            recv.context,
            extra,
            completion,
        );
    }

    /// Takes a posted receive for a message of `total` bytes: a plain receive
    /// leaves the queue; a multi-receive buffer gives up space and leaves
    /// once less than the minimum remains. Returns the receive, the offset
    /// and room for this message, and extra completion flags.
    fn claim_posted(
        &self,
        g: &mut Inner,
        tagged: bool,
        i: usize,
        total: usize,
    ) -> (PostedRecv, usize, usize, u64) {
        let min = g.min_multi_recv;
        let Some(r) = g.mq.posted_mut(tagged, i) else {
            return (PostedRecv::default(), 0, 0, 0);
        };
        if r.flags & FI_MULTI_RECV == 0 {
            let r = g.mq.take_posted(tagged, i).unwrap_or_default();
            return (r, 0, r.len, 0);
        }
        let off = r.consumed;
        let cap = r.len - off;
        r.consumed += total.min(cap);
        let left = r.len - r.consumed;
        let copy = *r;
        if left < min.max(1) {
            g.mq.take_posted(tagged, i);
            (copy, off, cap, FI_MULTI_RECV)
        } else {
            (copy, off, cap, 0)
        }
    }

    fn handle(&self, g: &mut Inner, b: &mut [u8]) {
        let e = Entry::new_unchecked(&*b);
        let r = match Repr::parse(&e) {
            Ok(r) => r,
            Err(err) => {
                tracing::warn!(error = %err, "shm: dropping a malformed ring entry");
                return;
            }
        };
        tracing::trace!(
            op = r.op,
            len = r.len,
            total = r.total,
            cookie = r.cookie,
            "shm: entry"
        );
        match r.op {
            op::INLINE | op::BOUNCE | op::RTS => {
                let src_addr = self.src_addr(g, r.src);
                let m = Meta {
                    tagged: r.flags & flag::TAGGED != 0,
                    tag: r.tag,
                    data: r.data,
                    cq_data: r.flags & flag::CQ_DATA != 0,
                    total: r.total as usize,
                    src_addr,
                };
                match r.op {
                    op::INLINE => self.incoming(g, m, Src::Inline(&e.payload()[..r.len as usize])),
                    op::BOUNCE => {
                        if r.cookie >= self.seg.geometry().pool_bufs as u64
                            || m.total > self.cfg.bounce_size
                        {
                            tracing::warn!(
                                index = r.cookie,
                                "shm: dropping an entry naming an invalid bounce buffer"
                            );
                            return;
                        }
                        self.incoming(g, m, Src::Bounce(r.cookie))
                    }
                    _ => self.incoming(
                        g,
                        m,
                        Src::Rts {
                            sender: r.src,
                            cookie: r.cookie,
                            iov: r.rts_iov(&e),
                            cnt: r.iov_cnt,
                        },
                    ),
                }
            }
            op::ACK => {
                if let Some(s) = self.take_send(g, r.cookie) {
                    if r.data == 0 {
                        self.tx_complete(g, s.context, s.flags, s.completion);
                    } else {
                        self.tx_error(g, s.context, s.flags, status_code(r.data));
                    }
                }
            }
            op::NACK => {
                let idx = r.cookie as u32;
                if g.sends
                    .get(idx as usize)
                    .and_then(|s| s.as_ref())
                    .is_some_and(|s| s.gen == (r.cookie >> 32) as u32)
                {
                    self.busy.store(true, Ordering::Relaxed);
                    g.pushes.push_back(Push {
                        slot: idx,
                        offset: 0,
                    });
                }
            }
            op::DATA => self.data_chunk(g, &r, &e.payload()[..r.len as usize]),
            op::CTS => self.coop_write(g, &r),
            op::RMA_WRITE | op::RMA_PULL | op::RMA_READ | op::ATOMIC => self.rma_target(g, &r, &e),
            op::RMA_RESP => self.rma_answer(g, &r, &e.payload()[..r.len as usize]),
            _ => {}
        }
    }

    fn data_chunk(&self, g: &mut Inner, r: &Repr, bytes: &[u8]) {
        let Some(i) = g
            .reasm
            .iter()
            .position(|x| x.sender == r.src && x.cookie == r.cookie)
        else {
            tracing::warn!("shm: DATA entry for no pending receive");
            return;
        };
        let x = &mut g.reasm[i];
        let at = r.total as usize;
        if at < x.cap {
            let n = bytes.len().min(x.cap - at);
            // SAFETY: post_recv's caller keeps the receive iov valid until completion.
            unsafe { copy_to_iov(&x.iov[..x.cnt], x.offset + at, &bytes[..n]) };
        }
        x.received += bytes.len();
        if x.received >= x.meta.total {
            let x = g.reasm.swap_remove(i);
            self.rx_complete(
                g,
                x.context,
                x.cq_flags,
                &x.meta,
                x.meta.total.min(x.cap),
                x.buf,
                x.completion,
            );
            self.send_ctrl(
                g,
                x.sender,
                Repr {
                    op: op::ACK,
                    src: self.me.id(),
                    cookie: x.cookie,
                    ..Default::default()
                },
            );
        }
    }

    fn poll_ring(&self, g: &mut Inner) {
        let Some(mut rx) = g.rx.take() else {
            return;
        };
        for _ in 0..BUDGET {
            // Reads answered in chunks hold the ring: later requests of the
            // same initiator must not overtake them (FI_ORDER_WAR).
            if g.unexpected >= self.cfg.max_unexpected || !g.read_pushes.is_empty() {
                break;
            }
            if rx.pop_with(&self.seg, |b| self.handle(g, b)).is_none() {
                break;
            }
        }
        // Hand consumed slots back to producers: a store to a line only this
        // side writes (producers read it only when the ring looks full).
        rx.publish(&self.seg);
        g.rx = Some(rx);
    }

    fn check_liveness(&self, g: &mut Inner) {
        if g.sends.len() == g.free_sends.len()
            && g.reasm.is_empty()
            && g.rmas.len() == g.free_rmas.len()
        {
            return;
        }
        let now = Instant::now();
        if now.duration_since(g.last_check) < LIVENESS_PERIOD {
            return;
        }
        g.last_check = now;
        let dead: Vec<u64> = g
            .sends
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                s.as_ref()
                    .filter(|s| s.peer.dead())
                    .map(|s| (u64::from(s.gen) << 32) | i as u64)
            })
            .collect();
        self.rma_liveness(g);
        for cookie in dead {
            if let Some(s) = self.take_send(g, cookie) {
                tracing::warn!(
                    pid = s.peer.addr.pid,
                    "shm: peer died with a send in flight"
                );
                self.tx_error(g, s.context, s.flags, errno::FI_EIO);
            }
        }
        let mut i = 0;
        while i < g.reasm.len() {
            let sender = g.reasm[i].sender;
            let dead = self.peer_by_id(g, sender).map(|p| p.dead()).unwrap_or(true);
            if dead {
                let x = g.reasm.swap_remove(i);
                self.rx_error(g, x.context, x.cq_flags, errno::FI_EIO, x.meta.tag);
            } else {
                i += 1;
            }
        }
    }

    fn progress_locked(&self, g: &mut Inner) {
        if !g.ctrl.is_empty() {
            self.flush_ctrl(g);
        }
        if !g.pushes.is_empty() {
            self.run_pushes(g);
        }
        if !g.rma_pushes.is_empty() || !g.read_pushes.is_empty() {
            self.run_rma_pushes(g);
        }
        self.poll_ring(g);
        self.check_liveness(g);
        if let Some(rx) = &g.rx {
            self.head_hint.store(rx.position(), Ordering::Relaxed);
        }
        let busy = !g.ctrl.is_empty()
            || !g.pushes.is_empty()
            || g.rmas.len() != g.free_rmas.len()
            || !g.read_pushes.is_empty()
            || !g.reasm.is_empty()
            || g.sends.len() != g.free_sends.len();
        self.busy.store(busy, Ordering::Relaxed);
    }

    /// Frees what an unexpected message holds without delivering it.
    /// Frees what an unexpected message holds without delivering it; a
    /// large message's sender is told `status` (0: consumed, or an FI_E* code).
    fn release(&self, g: &mut Inner, p: Payload, status: i32) {
        match p {
            Payload::Inline(v) => {
                if g.pool.len() < 256 {
                    g.pool.push(v);
                }
            }
            // Taking the buffer and dropping the token frees it.
            Payload::Bounce(idx) => drop(self.seg.take_bounce(idx)),
            Payload::Rts { sender, cookie, .. } => self.send_ctrl(
                g,
                sender,
                Repr {
                    op: op::ACK,
                    src: self.me.id(),
                    cookie,
                    data: status as u64,
                    ..Default::default()
                },
            ),
        }
    }

    fn take_unexpected(
        &self,
        g: &mut Inner,
        tagged: bool,
        i: usize,
    ) -> Option<Unexpected<Payload>> {
        let u = g.mq.take_unexpected(tagged, i)?;
        g.unexpected = g.unexpected.saturating_sub(1);
        Some(u)
    }

    /// Delivers an unexpected message into a receive.
    fn deliver_unexpected(
        &self,
        g: &mut Inner,
        u: Unexpected<Payload>,
        tagged: bool,
        recv: &RecvOp<'_>,
        completion: bool,
    ) {
        let m = Meta {
            tagged,
            tag: u.tag,
            data: u.data,
            cq_data: u.flags & FI_REMOTE_CQ_DATA != 0,
            total: u.len,
            src_addr: u.src,
        };
        let cap = iov_len(recv.iov);
        let extra = if recv.flags & FI_MULTI_RECV != 0 {
            FI_MULTI_RECV
        } else {
            0
        };
        match u.payload {
            Payload::Inline(v) => {
                self.deliver(
                    g,
                    recv.iov,
                    0,
                    cap,
                    m,
                    Src::Inline(&v),
                    recv.context,
                    extra,
                    completion,
                );
                if g.pool.len() < 256 {
                    g.pool.push(v);
                }
            }
            Payload::Bounce(idx) => self.deliver(
                g,
                recv.iov,
                0,
                cap,
                m,
                Src::Bounce(idx),
                recv.context,
                extra,
                completion,
            ),
            Payload::Rts {
                sender,
                cookie,
                iov,
                cnt,
            } => self.deliver(
                g,
                recv.iov,
                0,
                cap,
                m,
                Src::Rts {
                    sender,
                    cookie,
                    iov,
                    cnt,
                },
                recv.context,
                extra,
                completion,
            ),
        }
    }

    fn recv_inner(&self, op: &RecvOp<'_>) -> Result<()> {
        self.check_enabled("receive")?;
        if op.iov.len() > IOV_LIMIT {
            return Err(Error::inval(format!(
                "shm: {} iov entries exceed the limit of {IOV_LIMIT}",
                op.iov.len()
            )));
        }
        let need = if op.tagged { FI_TAGGED } else { FI_MSG };
        if self.caps & need == 0 {
            return Err(Error::new(
                errno::FI_EOPNOTSUPP,
                "shm: the endpoint was opened without this capability",
            ));
        }
        if op.flags & FI_MULTI_RECV != 0 && (op.iov.len() != 1 || op.tagged) {
            return Err(Error::inval("shm: FI_MULTI_RECV takes one untagged buffer"));
        }
        let tagged = op.tagged;
        let ignore = if tagged { op.ignore } else { u64::MAX };
        let mut g = self.lock();
        let src = if self.caps & FI_DIRECTED_RECV != 0 {
            op.src
        } else {
            FI_ADDR_UNSPEC
        };
        let completion = op.flags & FI_COMPLETION != 0 || !g.b.rx_selective;
        let peek = op.flags & FI_PEEK != 0;
        let claim = op.flags & FI_CLAIM != 0;
        let discard = op.flags & FI_DISCARD != 0;
        if (peek || claim || discard) && !tagged {
            return Err(Error::new(
                errno::FI_EBADFLAGS,
                "shm: FI_PEEK / FI_CLAIM / FI_DISCARD apply to tagged receives",
            ));
        }
        if peek {
            self.progress_locked(&mut g);
            let Some(i) = g.mq.find_unexpected(true, src, op.tag, ignore) else {
                self.rx_error(
                    &g,
                    op.context,
                    FI_RECV | FI_TAGGED,
                    errno::FI_ENOMSG,
                    op.tag,
                );
                return Ok(());
            };
            let (len, tag, data, fl) = {
                let u = g.mq.unexpected_mut(true, i).expect("index from find");
                (u.len, u.tag, u.data, u.flags)
            };
            let src_addr =
                g.mq.unexpected_mut(true, i)
                    .map_or(FI_ADDR_NOTAVAIL, |u| u.src);
            if discard {
                if let Some(u) = self.take_unexpected(&mut g, true, i) {
                    self.release(&mut g, u.payload, 0);
                }
            } else if claim {
                if let Some(u) = g.mq.unexpected_mut(true, i) {
                    u.claimed = Some(op.context);
                }
            }
            if let Some(cq) = &g.b.rx_cq {
                cq.push(
                    CqTaggedEntry {
                        op_context: op.context,
                        flags: FI_RECV | FI_TAGGED | (fl & FI_REMOTE_CQ_DATA),
                        len,
                        buf: 0,
                        data,
                        tag,
                    },
                    src_addr,
                );
            }
            return Ok(());
        }
        if claim {
            let i = g.mq.find_claimed(true, op.context).ok_or_else(|| {
                Error::inval("shm: FI_CLAIM names a context that claimed no message")
            })?;
            let u = self
                .take_unexpected(&mut g, true, i)
                .expect("index from find");
            if discard {
                let (tag, src_addr) = (u.tag, u.src);
                self.release(&mut g, u.payload, 0);
                if let Some(cq) = &g.b.rx_cq {
                    cq.push(
                        CqTaggedEntry {
                            op_context: op.context,
                            flags: FI_RECV | FI_TAGGED,
                            tag,
                            ..Default::default()
                        },
                        src_addr,
                    );
                }
            } else {
                self.deliver_unexpected(&mut g, u, true, op, completion);
            }
            return Ok(());
        }
        // Entries still in the ring are newer than every unexpected message,
        // so they match after this receive is posted: no need to poll here
        // (touching the slot the sender is filling would cost a transfer).
        if op.flags & FI_MULTI_RECV != 0 {
            // Fill the multi-receive buffer from unexpected messages first.
            let mut posted = PostedRecv {
                iov: [IoVec::default(); MAX_IOV],
                iov_cnt: 1,
                len: iov_len(op.iov),
                src,
                tag: 0,
                ignore: 0,
                context: op.context,
                flags: op.flags,
                consumed: 0,
            };
            posted.iov[0] = op.iov[0];
            let min = g.min_multi_recv.max(1);
            while let Some(i) = g.mq.find_unexpected(false, src, 0, u64::MAX) {
                let u = self
                    .take_unexpected(&mut g, false, i)
                    .expect("index from find");
                let off = posted.consumed;
                let cap = posted.len - off;
                posted.consumed += u.len.min(cap);
                let done = posted.len - posted.consumed < min;
                let m = Meta {
                    tagged: false,
                    tag: 0,
                    data: u.data,
                    cq_data: u.flags & FI_REMOTE_CQ_DATA != 0,
                    total: u.len,
                    src_addr: u.src,
                };
                let extra = if done { FI_MULTI_RECV } else { 0 };
                let iov = [posted.iov[0]];
                match u.payload {
                    Payload::Inline(v) => {
                        self.deliver(
                            &mut g,
                            &iov,
                            off,
                            cap,
                            m,
                            Src::Inline(&v),
                            op.context,
                            extra,
                            completion,
                        );
                        g.pool.push(v);
                    }
                    Payload::Bounce(idx) => self.deliver(
                        &mut g,
                        &iov,
                        off,
                        cap,
                        m,
                        Src::Bounce(idx),
                        op.context,
                        extra,
                        completion,
                    ),
                    Payload::Rts {
                        sender,
                        cookie,
                        iov: r,
                        cnt,
                    } => self.deliver(
                        &mut g,
                        &iov,
                        off,
                        cap,
                        m,
                        Src::Rts {
                            sender,
                            cookie,
                            iov: r,
                            cnt,
                        },
                        op.context,
                        extra,
                        completion,
                    ),
                }
                if done {
                    return Ok(());
                }
            }
            g.mq.post(false, posted);
            return Ok(());
        }
        if let Some(i) = g.mq.find_unexpected(tagged, src, op.tag, ignore) {
            let u = self
                .take_unexpected(&mut g, tagged, i)
                .expect("index from find");
            self.deliver_unexpected(&mut g, u, tagged, op, completion);
            return Ok(());
        }
        let mut posted = PostedRecv {
            iov: [IoVec::default(); MAX_IOV],
            iov_cnt: op.iov.len(),
            len: iov_len(op.iov),
            src,
            tag: op.tag,
            ignore: if tagged { op.ignore } else { 0 },
            context: op.context,
            flags: op.flags | if completion { FI_COMPLETION } else { 0 },
            consumed: 0,
        };
        posted.iov[..op.iov.len()].copy_from_slice(op.iov);
        g.mq.post(tagged, posted);
        Ok(())
    }
}

/// The part `[off, off + want)` of a list of (address, length) ranges.
fn clip_ranges(
    r: impl IntoIterator<Item = (usize, usize)>,
    mut off: usize,
    mut want: usize,
) -> Vec<Range> {
    let mut out = Vec::new();
    for (base, len) in r {
        if want == 0 {
            break;
        }
        if off >= len {
            off -= len;
            continue;
        }
        let n = (len - off).min(want);
        out.push(Range {
            base: base + off,
            len: n,
        });
        want -= n;
        off = 0;
    }
    out
}

/// [`clip_ranges`] over an iov list.
fn clip(iov: &[IoVec], off: usize, want: usize) -> Vec<Range> {
    clip_ranges(iov.iter().map(|v| (v.base, v.len)), off, want)
}

/// Copies chunk `c` of a transfer between `local` (this process) and
/// `remote` (process `pid`): a write when `write`, else a read.
fn copy_chunk(
    pid: u32,
    local: &[Range],
    remote: &[Range],
    c: usize,
    chunk: usize,
    total: usize,
    write: bool,
) -> std::io::Result<usize> {
    let off = c * chunk;
    let len = chunk.min(total.saturating_sub(off));
    let l = clip_ranges(local.iter().map(|x| (x.base, x.len)), off, len);
    let r = clip_ranges(remote.iter().map(|x| (x.base, x.len)), off, len);
    if write {
        // SAFETY: `local` is a pending send's iov, readable until it completes.
        unsafe { cma::write_to(pid, &l, &r) }
    } else {
        // SAFETY: `local` is a matched receive's iov, writable until it completes.
        unsafe { cma::read_from(pid, &l, &r) }
    }
}

fn libc_eperm() -> i32 {
    1
}
fn libc_enosys() -> i32 {
    38
}
fn libc_efault() -> i32 {
    14
}

impl Progress for ShmEndpoint {
    #[inline]
    fn progress(&self) {
        if !self.enabled.load(Ordering::Relaxed) {
            return;
        }
        // Idle: nothing stamped at our position and no other work waiting.
        if !self.busy.load(Ordering::Relaxed)
            && !self
                .seg
                .msg_ring()
                .ready(self.head_hint.load(Ordering::Relaxed))
        {
            return;
        }
        // Another thread already progressing this endpoint is as good as us.
        let Some(mut g) = self.inner.try_lock() else {
            return;
        };
        self.progress_locked(&mut g);
    }
    fn arm(&self) -> bool {
        let g = self.lock();
        self.seg.sleep_arm(|| {
            g.rx.as_ref().is_some_and(|rx| rx.ready(&self.seg))
                || !g.ctrl.is_empty()
                || !g.pushes.is_empty()
                || !g.rma_pushes.is_empty()
                || !g.read_pushes.is_empty()
        })
    }
    fn disarm(&self) {
        self.seg.sleep_disarm();
        self.bell.drain();
    }
    fn wait_fd(&self) -> Option<RawFd> {
        Some(self.bell.fd())
    }
}

impl EndpointOps for ShmEndpoint {
    fn enable(&self, b: EpBindings) -> Result<()> {
        let mut g = self.lock();
        g.need_src = self.caps & (FI_SOURCE | FI_DIRECTED_RECV) != 0;
        g.b = b;
        drop(g);
        self.enabled.store(true, Ordering::Release);
        Ok(())
    }
    fn getname(&self) -> Result<Vec<u8>> {
        Ok(self.me.to_bytes())
    }
    unsafe fn post_send(&self, op: &SendOp<'_>) -> Result<()> {
        self.send_inner(op)
    }
    unsafe fn post_recv(&self, op: &RecvOp<'_>) -> Result<()> {
        self.recv_inner(op)
    }
    unsafe fn post_rma(&self, op: &RmaOp<'_>) -> Result<()> {
        // SAFETY: forwarded caller contract.
        unsafe { self.rma_inner(op) }
    }
    unsafe fn post_atomic(&self, op: &AtomicOp<'_>) -> Result<()> {
        // SAFETY: forwarded caller contract.
        unsafe { self.atomic_inner(op) }
    }
    fn query_atomic(&self, kind: AtomicKind, op: u32, datatype: u32) -> Result<usize> {
        atomic::query(kind, op, datatype, rma::ATOMIC_MAX_BYTES)
    }
    fn cancel(&self, context: usize) -> Result<()> {
        let mut g = self.lock();
        match g.mq.cancel(context) {
            Some((tagged, r)) => {
                let fl =
                    FI_RECV | if tagged { FI_TAGGED } else { FI_MSG } | (r.flags & FI_MULTI_RECV);
                self.rx_error(&g, context, fl, errno::FI_ECANCELED, r.tag);
                Ok(())
            }
            None => Err(Error::new(
                errno::FI_ENOENT,
                "shm: no posted receive has this context",
            )),
        }
    }
    fn setopt(&self, name: i32, value: usize) -> Result<()> {
        match name {
            opt::FI_OPT_MIN_MULTI_RECV => {
                self.lock().min_multi_recv = value;
                Ok(())
            }
            _ => Err(Error::new(
                errno::FI_ENOPROTOOPT,
                format!("shm: option {name} is not supported"),
            )),
        }
    }
    fn getopt(&self, name: i32) -> Result<usize> {
        match name {
            opt::FI_OPT_MIN_MULTI_RECV => Ok(self.lock().min_multi_recv),
            _ => Err(Error::new(
                errno::FI_ENOPROTOOPT,
                format!("shm: option {name} is not supported"),
            )),
        }
    }
    fn close(&self) {
        self.enabled.store(false, Ordering::Release);
        // Targets answer large reads by writing straight into this
        // process's memory: wait (bounded) for those answers before the
        // buffers can be freed and reused.
        {
            let mut g = self.lock();
            self.settle_reads(&mut g);
        }
        // SYNC POINT: peers' liveness checks and sends acquire `closed`.
        self.seg.header().closed.store(1, Ordering::Release);
        let mut g = self.lock();
        let (_, unexp) = g.mq.drain_all();
        for u in unexp {
            self.release(&mut g, u.payload, errno::FI_ECONNRESET);
        }
        // Large messages still in the ring: tell their senders, so no send
        // waits for an ACK that will never come.
        let mut rx = g.rx.take();
        for _ in 0..self.cfg.ring_slots {
            let Some(rx) = rx.as_mut() else { break };
            let rts = rx.pop_with(&self.seg, |b| {
                let e = Entry::new_unchecked(&*b);
                Repr::parse(&e).ok().filter(|r| {
                    r.op == op::RTS
                        || rma::is_request(r.op)
                            && (r.op != op::RMA_WRITE || r.flags & flag::LAST != 0)
                })
            });
            match rts {
                None => break,
                Some(Some(r)) => {
                    let answer = if r.op == op::RTS {
                        Repr {
                            op: op::ACK,
                            src: self.me.id(),
                            cookie: r.cookie,
                            data: errno::FI_ECONNRESET as u64,
                            ..Default::default()
                        }
                    } else {
                        rma::answer(self.me.id(), r.cookie, errno::FI_ECONNRESET)
                    };
                    self.send_ctrl(&mut g, r.src, answer)
                }
                Some(None) => {}
            }
        }
        self.flush_ctrl(&mut g);
        g.peers.clear();
        g.by_id.clear();
        g.sends.clear();
        g.b = EpBindings::default();
    }
}
