//! The shm RDM endpoint: the driver of the shm protocol core
//! (`ofi_proto::shm`). It owns the segment, the ring's consumer, the
//! doorbell and the peers' mappings, and does the copies; the core decodes
//! entries, picks each operation's path and keeps the tables of pending
//! operations, control answers and unexpected messages.
//!
//! One file per concern: this one (the endpoint, completions, progress and
//! the `EndpointOps` calls), [`state`](self::state) (its state under the
//! lock and the records of messages and operations in flight),
//! [`peers`](self::peers) (finding and caching peers), [`send`](self::send)
//! (the send paths), [`recv`](self::recv) (receives, matching and
//! delivery), [`copy`](self::copy) (rendezvous copies across processes),
//! [`control`](self::control) (reading the ring, dispatching entries,
//! control answers), [`liveness`](self::liveness) (dead peers, closing),
//! [`rma`](self::rma) and [`rma_target`](self::rma_target) (one-sided
//! operations, initiator and target).
//!
//! The raw layer's memory contract (iov ranges stay valid until completion,
//! promised by the `unsafe` post calls) is what the few `unsafe` blocks here
//! rely on; each names it.
#![allow(unsafe_code)]

use crate::addr::ShmAddr;
use crate::{Config, INJECT_SIZE, IOV_LIMIT};
use ofi_core::consts::*;
use ofi_core::error::{errno, Error, Result};
use ofi_core::info::Info;
use ofi_core::object::{AtomicOp, EpBindings, RecvOp, RmaOp, SendOp};
use ofi_core::provider::{EndpointOps, Progress};
use ofi_core::util::atomic::{self, AtomicKind};
use ofi_core::util::auth::AuthKey;
use ofi_core::util::cq::{CqErrEntry, CqTaggedEntry};
use ofi_core::util::lock::{SpinGuard, SpinLock};
use ofi_core::util::matching::MAX_IOV;
use ofi_core::util::peer::DeadPeers;
use ofi_proto::shm::path::{CopyConfig, SendLimits};
use ofi_proto::shm::rndv::{Reassembly, Sends};
use ofi_proto::shm::{CtrlQueue, Limits, OpTable, RxState};
use ofi_shmem::doorbell::Bell;
use ofi_shmem::proc;
use ofi_shmem::segment::XFER_DESCS;
use ofi_shmem::segment::{bell_path, reclaim_stale, segment_path, Geometry, Segment};
use ofi_wire::shm::{HDR_LEN, MAX_RTS_IOV};
use std::collections::{HashMap, VecDeque};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::sync::Once;
use std::time::{Duration, Instant};

mod auth;
mod control;
mod copy;
mod liveness;
mod peers;
mod recv;
mod rma;
pub(crate) use rma::ATOMIC_MAX_BYTES;
mod rma_target;
mod send;
mod state;

use state::{Inner, Meta, MultiLanding, Payload, PendingSend, Reasm};

/// Bytes per ring slot: an 8-byte sequence, the 48-byte header, 4104 inline bytes.
const SLOT_SIZE: usize = 4160;
/// A completion flag private to this provider (no libfabric flag uses
/// the bit): the message belongs to a multi-receive buffer, whose release
/// is decided when it completes ([`ShmEndpoint::multi_leave`] removes it).
const MULTI_MEMBER: u64 = 1 << 61;
/// Largest message carried inline.
pub const INLINE_MAX: usize = SLOT_SIZE - 8 - HDR_LEN;
/// Entries handled per progress call.
const BUDGET: usize = 64;
/// How often the endpoint looks at its peers' liveness (and beats).
const LIVENESS_PERIOD: Duration = Duration::from_millis(20);
/// Idle progress calls between two looks at the clock (a power of two).
const IDLE_LOOK: u32 = 64;
/// Locked passes without pending operations between two looks at the
/// clock (a power of two).
const BUSY_LOOK: u32 = 64;

const _: () = assert!(INLINE_MAX >= INJECT_SIZE);
const _: () = assert!(MAX_RTS_IOV >= IOV_LIMIT && MAX_IOV >= IOV_LIMIT);

static NEXT_IDX: AtomicU32 = AtomicU32::new(0);
static RECLAIM: Once = Once::new();

/// An shm RDM endpoint.
pub struct ShmEndpoint {
    me: ShmAddr,
    /// The name this endpoint holds (from its source address or
    /// `setname`) and the address `getname` gives for it; released at close.
    name: std::sync::Mutex<Named>,
    seg: Arc<Segment>,
    bell: Bell,
    cfg: Config,
    caps: u64,
    /// The core's view of this endpoint's limits and copy settings.
    limits: Limits,
    send_limits: SendLimits,
    copy_cfg: CopyConfig,
    enabled: AtomicBool,
    /// The endpoint has an auth key: peers prove it before anything else.
    keyed: bool,
    /// The ring position as of the last locked pass: an idle poll checks the
    /// slot there without taking the lock.
    head_hint: AtomicU64,
    /// Work other than the ring waits (control entries, pushes, large sends,
    /// reassemblies): progress must take the lock even when the ring is idle.
    busy: AtomicBool,
    /// Idle progress calls (every [`IDLE_LOOK`]th looks at the clock).
    idle: AtomicU32,
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

/// The name an endpoint holds and the address its `getname` gives.
#[derive(Debug)]
struct Named {
    /// The alias held, if any.
    claim: Option<ofi_shmem::name::NameClaim>,
    /// What `getname` returns: the source address it was named by, or the
    /// native address.
    addr: Vec<u8>,
}

/// The name an endpoint with source address `src` holds, and the address
/// its `getname` gives (fi_shm(7)): `fi_shm://PID` (this process) or a
/// native address names nothing (the endpoint is `me`); any other address
/// names the endpoint by the part after `prefix://`. A name a live
/// endpoint holds is `FI_EADDRINUSE`, except under the `fi_shm://` prefix,
/// which fi_shm(7) calls not unique: that endpoint stays unnamed.
fn claim_name(uid: u32, me: ShmAddr, src: &[u8]) -> Result<Named> {
    use crate::addr::{str_bytes, Target};
    let unnamed = || Named {
        claim: None,
        addr: me.to_bytes(),
    };
    let name = match Target::of(src)? {
        Target::Native(_) => return Ok(unnamed()),
        Target::Name(n) => n,
    };
    let end = src.iter().position(|&c| c == 0).unwrap_or(src.len());
    let text = String::from_utf8_lossy(&src[..end]).into_owned();
    match ofi_shmem::name::NameClaim::claim(uid, &name, me.pid, me.idx) {
        Ok(c) => Ok(Named {
            claim: Some(c),
            addr: str_bytes(&text),
        }),
        Err(e)
            if e.kind() == std::io::ErrorKind::AddrInUse
                && text.starts_with(crate::addr::SCHEME) =>
        {
            tracing::debug!("shm: {text} is held by another endpoint; {me} stays unnamed");
            Ok(unnamed())
        }
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => Err(Error::new(
            errno::FI_EADDRINUSE,
            format!("shm: source address {text}: {e}"),
        )),
        Err(e) => Err(Error::os(e, "shm: naming the endpoint")),
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
        let key = AuthKey::of(info)?;
        let keyed = key.is_some();
        let (seg, ring) = Segment::create(&segment_path(uid, me.pid, me.idx), geo, keyed)
            .map_err(|e| Error::os(e, "shm: creating the endpoint segment"))?;
        let bell = Bell::create(&bell_path(uid, me.pid, me.idx))
            .map_err(|e| Error::os(e, "shm: creating the doorbell"))?;
        let name = match &info.src_addr {
            Some(src) => claim_name(uid, me, src)?,
            None => Named {
                claim: None,
                addr: me.to_bytes(),
            },
        };
        let depth = info.rx_attr.size.max(64);
        Ok(ShmEndpoint {
            me,
            name: std::sync::Mutex::new(name),
            bell,
            caps: if info.caps == 0 {
                crate::offer().caps
            } else {
                info.caps
            },
            limits: Limits {
                bounce_bufs: seg.geometry().pool_bufs as u64,
                bounce_size: cfg.bounce_size,
            },
            send_limits: SendLimits {
                inline_max: INLINE_MAX,
                bounce_size: cfg.bounce_size,
            },
            copy_cfg: CopyConfig {
                disable_cma: cfg.disable_cma,
                coop_threshold: cfg.coop_threshold,
                coop_chunk: cfg.coop_chunk,
            },
            seg: Arc::new(seg),
            inner: SpinLock::new(Inner {
                b: EpBindings::default(),
                need_src: false,
                av_gen: u64::MAX,
                peers: Vec::new(),
                by_id: Default::default(),
                src_cache: HashMap::new(),
                src_last: (0, FI_ADDR_NOTAVAIL),
                src_gen: u64::MAX,
                rx: RxState::new(depth, cfg.max_unexpected),
                sends: Sends::default(),
                reasm: Reassembly::default(),
                multi: std::sync::Mutex::new(HashMap::new()),
                ctrl: CtrlQueue::new(),
                rmas: OpTable::new(1),
                rma_pushes: VecDeque::new(),
                read_pushes: VecDeque::new(),
                spare: Default::default(),
                pool: Vec::new(),
                dead: DeadPeers::default(),
                dead_ids: Vec::new(),
                live: HashMap::new(),
                last_from: 0,
                senders: Vec::new(),
                auth: key.map(|k| ofi_proto::shm::auth::Auth::new(k, me.id())),
                last_trusted: 0,
                proofs: Vec::new(),
                refused: Vec::new(),
                next_check: Instant::now(),
                passes: 0,
                settling: false,
                xfer_free: (0..XFER_DESCS as u32).rev().collect(),
                xfer_gen: 0,
                ring: Some(ring),
            }),
            cfg,
            enabled: AtomicBool::new(false),
            keyed,
            head_hint: AtomicU64::new(0),
            busy: AtomicBool::new(false),
            idle: AtomicU32::new(0),
        })
    }

    /// The endpoint's name (a poisoned lock still holds a valid name).
    fn named(&self) -> std::sync::MutexGuard<'_, Named> {
        self.name.lock().unwrap_or_else(|e| e.into_inner())
    }

    #[inline]
    fn lock(&self) -> SpinGuard<'_, Inner> {
        self.inner.lock()
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

    // ---- completions -------------------------------------------------

    #[inline(always)]
    fn tx_complete(&self, g: &Inner, context: usize, flags: u64, completion: bool) {
        g.b.tx_done(context, flags, completion, None);
    }

    fn tx_error(&self, g: &Inner, context: usize, flags: u64, err: i32) {
        g.b.tx_done(context, flags, true, Some(err));
    }

    /// A message claimed a place in the multi-receive buffer at `base`
    /// posted with `context` (`done`: the buffer is released with it):
    /// counts it as landing, and returns the completion flags it carries
    /// until it completes (the marker [`MULTI_MEMBER`], not yet
    /// FI_MULTI_RECV). Another buffer of the same context with messages
    /// landing: this one is not tracked, its release goes on the message
    /// that claims its last room.
    fn multi_enter(&self, g: &Inner, context: usize, base: usize, done: bool) -> u64 {
        let mut t = g.multi.lock().unwrap_or_else(|e| e.into_inner());
        let e = t.entry(context).or_insert(MultiLanding {
            base,
            ..MultiLanding::default()
        });
        if e.base != base {
            return if done { FI_MULTI_RECV } else { 0 };
        }
        e.landing += 1;
        e.released |= done;
        MULTI_MEMBER
    }

    /// A message of a multi-receive buffer completes (or fails): the flags
    /// its entry carries. The last one to finish after the buffer's
    /// release carries FI_MULTI_RECV.
    fn multi_leave(&self, g: &Inner, context: usize, flags: u64) -> u64 {
        if flags & MULTI_MEMBER == 0 {
            return flags;
        }
        let flags = flags & !MULTI_MEMBER;
        let mut t = g.multi.lock().unwrap_or_else(|e| e.into_inner());
        let Some(e) = t.get_mut(&context) else {
            return flags;
        };
        e.landing = e.landing.saturating_sub(1);
        if e.landing > 0 {
            return flags;
        }
        let released = e.released;
        t.remove(&context);
        if released {
            flags | FI_MULTI_RECV
        } else {
            flags
        }
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
        let flags = self.multi_leave(g, context, flags);
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
        let flags = self.multi_leave(g, context, flags);
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

    // ---- progress ----------------------------------------------------

    fn progress_locked(&self, g: &mut Inner) {
        if !g.ctrl.is_empty() {
            self.flush_ctrl(g);
        }
        if !g.proofs.is_empty() {
            self.push_proofs(g);
        }
        if g.sends.pushing() {
            self.run_pushes(g);
        }
        if !g.rma_pushes.is_empty() || !g.read_pushes.is_empty() {
            self.run_rma_pushes(g);
        }
        self.poll_ring(g);
        if g.b.srx.is_some() && g.rx.unexpected() != 0 {
            self.offer_held(g);
        }
        self.look_at_peers(g);
        if let Some(ring) = &g.ring {
            self.head_hint.store(ring.position(), Ordering::Relaxed);
        }
        let busy = !g.ctrl.is_empty()
            || !g.proofs.is_empty()
            || g.sends.pushing()
            || !g.rmas.is_empty()
            || !g.read_pushes.is_empty()
            || !g.reasm.is_empty()
            || !g.sends.is_empty();
        self.busy.store(busy, Ordering::Relaxed);
    }
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
            // Now and then, the liveness check (a dead peer is noticed
            // while this endpoint only waits).
            let n = self.idle.load(Ordering::Relaxed).wrapping_add(1);
            self.idle.store(n, Ordering::Relaxed);
            if n & (IDLE_LOOK - 1) == 0 {
                if let Some(mut g) = self.inner.try_lock() {
                    self.liveness_due(&mut g);
                }
            }
            return;
        }
        // Another thread already progressing this endpoint is as good as us.
        let Some(mut g) = self.inner.try_lock() else {
            return;
        };
        self.progress_locked(&mut g);
    }
    fn arm(&self) -> bool {
        let mut g = self.lock();
        // A sleeper looks at its peers between sleeps (the waits sleep in
        // slices), so a death is reported while it waits.
        self.liveness_due(&mut g);
        self.seg.sleep_arm(|| {
            g.ring.as_ref().is_some_and(|r| r.ready(&self.seg))
                || !g.ctrl.is_empty()
                || g.sends.pushing()
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
        // Receives of a shared context may be directed: its members
        // resolve every sender.
        g.need_src = self.caps & (FI_SOURCE | FI_DIRECTED_RECV) != 0 || b.srx.is_some();
        g.b = b;
        drop(g);
        self.enabled.store(true, Ordering::Release);
        Ok(())
    }
    fn getname(&self) -> Result<Vec<u8>> {
        Ok(self.named().addr.clone())
    }
    /// Names the endpoint `addr` as if it had been opened with that source
    /// address (`claim_name`); the old name is released once the new one
    /// is held (a failed call leaves it). Before `enable` only.
    fn setname(&self, addr: &[u8]) -> Result<()> {
        let target = crate::addr::Target::of(addr)?;
        if self.enabled.load(Ordering::Acquire) {
            return Err(Error::new(
                errno::FI_EOPBADSTATE,
                "shm: setname on an enabled endpoint",
            ));
        }
        let mut named = self.named();
        // Renaming to the name it holds: let go first, else it is in use.
        if let crate::addr::Target::Name(n) = &target {
            if named.claim.as_ref().is_some_and(|c| c.name() == n) {
                named.claim = None;
                named.addr = self.me.to_bytes();
            }
        }
        *named = claim_name(proc::uid(), self.me, addr)?;
        Ok(())
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
    fn srx_posted(&self) {
        let mut g = self.lock();
        self.rescan_shared(&mut g);
    }
    fn cancel(&self, context: usize) -> Result<()> {
        let mut g = self.lock();
        match g.rx.mq.cancel(context) {
            Some((tagged, r)) => {
                // A multi-receive buffer with messages still landing is
                // released by the last of them, not by this entry.
                let mut release = r.flags & FI_MULTI_RECV;
                if release != 0 {
                    let mut t = g.multi.lock().unwrap_or_else(|e| e.into_inner());
                    if let Some(e) = t.get_mut(&context).filter(|e| e.base == r.iov[0].base) {
                        e.released = true;
                        release = 0;
                    }
                }
                let fl = FI_RECV | if tagged { FI_TAGGED } else { FI_MSG } | release;
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
                self.lock().rx.min_multi_recv = value;
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
            opt::FI_OPT_MIN_MULTI_RECV => Ok(self.lock().rx.min_multi_recv),
            _ => Err(Error::new(
                errno::FI_ENOPROTOOPT,
                format!("shm: option {name} is not supported"),
            )),
        }
    }
    fn coll_board(&self) -> Option<Arc<dyn ofi_core::coll::board::CollBoard>> {
        Some(Arc::new(crate::board::ShmBoard {
            seg: self.seg.clone(),
            keyed: self.keyed,
        }))
    }

    fn close(&self) {
        self.close_endpoint();
    }
}
