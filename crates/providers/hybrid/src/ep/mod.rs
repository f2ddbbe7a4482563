//! The hybrid endpoint: routes each operation to the inner endpoint of the
//! peer's path, drains both inner CQs in its progress, and matches every
//! arriving message in one engine (see the crate documentation).
//!
//! One file per concern: this one (the endpoint, its inner operations'
//! bookkeeping and the `EndpointOps` calls), [`state`] (its state under
//! the lock and the records of operations in flight), [`peers`] (the AV
//! mirrored into the inner AVs), [`send`] (the send paths), [`recv`]
//! (receives, arrivals and matching), [`progress`] (draining the inner
//! CQs, the shm receive hook, polling the network path), [`liveness`]
//! (dead peers) and [`fast`] (shm routes read with no lock).

// The raw layer's contract (caller memory valid until completion) is
// forwarded to the inner endpoints: unsafe calls, no unsafe memory access.
#![allow(unsafe_code)]

mod board;
mod fast;
mod liveness;
mod peers;
mod progress;
mod recv;
mod send;
mod state;

pub(crate) use peers::Siblings;
use progress::{Hook, IDLE_POLL_US};
use state::{Deferred, Parked, Payload, RxRec, State, TxRec};

use crate::addr::HybridAddr;
use crate::wire;
use crate::Config;
use ofi_core::consts::*;
use ofi_core::error::{errno, Error, Result};
use ofi_core::info::Info;
use ofi_core::object::{tx_completion, AtomicOp, EpBindings, RecvOp, RmaOp, SendOp};
use ofi_core::provider::{AddrOps, EndpointOps, RxHook};
use ofi_core::util::atomic::AtomicKind;
use ofi_core::util::av::{AvAttr, AvCore};
use ofi_core::util::cq::{CqAttr, CqCore};
use ofi_core::util::eq::{EqAttr, EqCore};
use ofi_core::util::iov::IoVec;
use ofi_core::util::lock::{SpinGuard, SpinLock};
use ofi_core::util::matching::MatchQueues;
use ofi_core::util::slab::Slab;
use ofi_core::util::wait::{ReadyWatch, WaitFd};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// Path index of shm (peers on this node).
pub(crate) const SHM: usize = 0;
/// Path index of the network path (peers on other nodes: tcp, or udp
/// under FI_HYBRID_NET=udp).
pub(crate) const NET: usize = 1;
const PATH_NAMES: [&str; 2] = ["shm", "net"];
/// Peers an inner AV learns from their first message before the
/// application's AV names them (see [`pending_src`]).
const LEARN_MAX: usize = 4096;
/// The source of a message held while its sender is not yet in the
/// application's AV: this prefix, the path in bits 32..48 and the inner
/// fi_addr below. A directed receive never names it (outer fi_addrs are
/// table indices); the AV sync replaces it with the sender's fi_addr once
/// the application inserts the sender, so receives directed at the sender
/// then take its messages that arrived first; a completion reports it as
/// FI_ADDR_NOTAVAIL.
const PENDING: u64 = 0xFFFE_0000_0000_0000;
const PENDING_MASK: u64 = 0xFFFF_0000_0000_0000;

/// The held source for a message from inner fi_addr `inner` on `path`
/// whose sender the application's AV does not name yet.
pub(crate) fn pending_src(path: usize, inner: u64) -> u64 {
    PENDING | ((path as u64) << 32) | (inner & 0xFFFF_FFFF)
}

/// Whether `src` is a held source (see [`pending_src`]): its path and
/// inner fi_addr.
pub(crate) fn pending_parts(src: u64) -> Option<(usize, u64)> {
    (src & PENDING_MASK == PENDING).then_some((((src >> 32) & 0xFFFF) as usize, src & 0xFFFF_FFFF))
}

/// The source a completion reports: a held source is FI_ADDR_NOTAVAIL.
pub(crate) fn visible_src(src: u64) -> u64 {
    if pending_parts(src).is_some() {
        FI_ADDR_NOTAVAIL
    } else {
        src
    }
}

// Inner operation contexts: (index << 3) | (path << 2) | kind.
const K_BOUNCE: usize = 1;
const K_TX: usize = 2;
const K_RX: usize = 3;

fn ctx(kind: usize, path: usize, idx: usize) -> usize {
    (idx << 3) | (path << 2) | kind
}

/// Rendezvous cookies start at a random 32-bit prefix, so that two senders'
/// cookies differ even where the receiver cannot tell their sources apart.
fn cookie_base() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let h = crate::node::fnv1a(&[&t.to_le_bytes(), &std::process::id().to_le_bytes()]);
    (h << 32) | 1
}

fn unctx(c: usize) -> (usize, usize, usize) {
    (c & 3, (c >> 2) & 1, c >> 3)
}

/// One inner endpoint and what the hybrid endpoint owns for it.
struct Path {
    ep: Arc<dyn EndpointOps>,
    cq: Arc<CqCore>,
    /// Where the inner endpoint reports dead peers.
    eq: Arc<EqCore>,
    av: Arc<AvCore>,
    info: Info,
}

/// The hybrid endpoint.
pub(crate) struct HybridEp {
    /// Readiness of the network path's wait fd, watched by a thread while the
    /// path is idle (declared before `paths`: dropped while its fd is open).
    /// (Shared by the domain's endpoints whose inner endpoints have the
    /// same wait fd: one thread per domain, not per endpoint.)
    watch: OnceLock<Arc<ReadyWatch>>,
    /// The watch's epoch this endpoint last acted on.
    seen: AtomicU64,
    paths: [Path; 2],
    node: u64,
    eager_max: usize,
    bounce_bufs: usize,
    caps: u64,
    /// shm's inject size: sends whose header and payload fit go injected.
    shm_inject: usize,
    /// The inject size the offer advertises (both paths', less a header).
    inject_max: usize,
    /// Sends up to this size are eager and fit shm's inject size behind
    /// any short prefix (see [`wire::SHORT`]).
    fast_max: usize,
    /// shm routes for sends that take no lock.
    shm_routes: fast::ShmRoutes,
    /// The bindings, for sends that take no lock (set once, at enable).
    bound: OnceLock<EpBindings>,
    /// Progress calls so far (a hint: updated without a lock).
    tick: AtomicU32,
    /// True while nothing is in flight on the network path and nothing
    /// arrived there lately: progress then polls it only every IDLE_POLL_US.
    net_idle: AtomicBool,
    /// True while a rendezvous payload waits to be posted again (see
    /// [`state::Deferred`]): progress then takes the lock.
    deferring: AtomicBool,
    siblings: Arc<Siblings>,
    enabled: AtomicBool,
    /// The state (shared with the receive hook given to shm).
    st: Arc<SpinLock<State>>,
    wait: OnceLock<Option<WaitFd>>,
}

impl HybridEp {
    /// Wraps the two inner endpoints (not yet enabled).
    pub(crate) fn open(
        cfg: &Config,
        info: &Info,
        eps: [Arc<dyn EndpointOps>; 2],
        addr: [Arc<dyn AddrOps>; 2],
        infos: [Info; 2],
        siblings: Arc<Siblings>,
    ) -> Result<Arc<HybridEp>> {
        let [e0, e1] = eps;
        let [a0, a1] = addr;
        let [i0, i1] = infos;
        let cq_attr = CqAttr {
            size: 0,
            format: cq_format::FI_CQ_FORMAT_TAGGED,
            wait_obj: wait_obj::FI_WAIT_NONE,
        };
        let av_attr = AvAttr {
            av_type: av_type::FI_AV_TABLE,
            count: 0,
        };
        let path = |ep, a, info| -> Result<Path> {
            Ok(Path {
                ep,
                cq: CqCore::new(&cq_attr)?,
                eq: EqCore::new(&EqAttr {
                    size: 0,
                    wait_obj: wait_obj::FI_WAIT_NONE,
                })?,
                av: AvCore::new(&av_attr, a)?,
                info,
            })
        };
        let caps = if info.caps == 0 {
            crate::offer(
                &crate::inners(info.fabric_attr.api_version.max(fi_version(1, 5)), cfg.net)?,
                0,
            )
            .caps
        } else {
            info.caps
        };
        let paths = [path(e0, a0, i0)?, path(e1, a1, i1)?];
        // The inner AVs are private: they learn a sender from its first
        // message, so that message can be attributed once the application
        // inserts the sender (it may send before this side inserted it).
        for p in &paths {
            p.av.set_learning(LEARN_MAX);
        }
        let shm_inject = paths[SHM].info.tx_attr.inject_size;
        let inject_max = shm_inject
            .min(paths[NET].info.tx_attr.inject_size)
            .saturating_sub(wire::LEN);
        let ep = Arc::new(HybridEp {
            watch: OnceLock::new(),
            seen: AtomicU64::new(0),
            paths,
            node: if cfg.per_endpoint {
                crate::node::endpoint_node()
            } else {
                cfg.node
            },
            eager_max: cfg.eager_max,
            bounce_bufs: cfg.bounce_bufs,
            caps,
            shm_inject,
            inject_max,
            fast_max: shm_inject.saturating_sub(16).min(cfg.eager_max),
            shm_routes: fast::ShmRoutes::new(),
            bound: OnceLock::new(),
            tick: AtomicU32::new(0),
            net_idle: AtomicBool::new(false),
            deferring: AtomicBool::new(false),
            siblings,
            enabled: AtomicBool::new(false),
            st: Arc::new(SpinLock::new(State {
                b: EpBindings::default(),
                seen: (u64::MAX, u64::MAX),
                routes: Vec::new(),
                rev: [Vec::new(), Vec::new()],
                inner_addrs: [HashMap::new(), HashMap::new()],
                mq: MatchQueues::new(64),
                tx: Slab::new(),
                rx: Slab::new(),
                hdrs: Vec::new(),
                pool: Vec::new(),
                spill: Vec::new(),
                bounce: [Vec::new(), Vec::new()],
                order: Default::default(),
                next_cookie: cookie_base(),
                deferred: [VecDeque::new(), VecDeque::new()],
                outstanding: [0; 2],
                recent: [0; 2],
                polled: [Instant::now(); 2],
                watching: false,
                held_pending: false,
                dead: Vec::new(),
            })),
            wait: OnceLock::new(),
        });
        ep.siblings.join(&ep);
        Ok(ep)
    }

    fn lock(&self) -> SpinGuard<'_, State> {
        self.st.lock()
    }

    fn check_enabled(&self, what: &str) -> Result<()> {
        if self.enabled.load(Ordering::Acquire) {
            Ok(())
        } else {
            Err(Error::new(
                errno::FI_EOPBADSTATE,
                format!("hybrid: {what} on an endpoint that is not enabled"),
            ))
        }
    }

    fn post_bounce(&self, st: &mut State, path: usize, idx: usize) {
        let b = &mut st.bounce[path][idx];
        let iov = [IoVec::from_mut(b)];
        let op = RecvOp {
            iov: &iov,
            desc: &[],
            src: FI_ADDR_UNSPEC,
            tag: 0,
            ignore: 0,
            context: ctx(K_BOUNCE, path, idx),
            flags: FI_COMPLETION,
            tagged: false,
        };
        // SAFETY: the bounce buffer is a boxed slice owned by this endpoint
        // and freed only after the inner endpoint closed.
        match unsafe { self.paths[path].ep.post_recv(&op) } {
            Ok(()) => {
                let o = &mut st.order[path];
                o.seq[idx] = o.posted;
                o.posted += 1;
            }
            Err(e) => {
                tracing::warn!(path = PATH_NAMES[path], error = %e, "hybrid: bounce receive not posted")
            }
        }
    }

    fn tx_slot(&self, st: &mut State, path: usize, rec: TxRec) -> usize {
        self.in_flight(st, path);
        let i = st.tx.insert(rec);
        while st.hdrs.len() <= i {
            st.hdrs.push(Vec::with_capacity(wire::LEN));
        }
        i
    }

    /// One more inner operation in flight on `path` (the network path is
    /// then polled on every progress call).
    fn in_flight(&self, st: &mut State, path: usize) {
        st.outstanding[path] += 1;
        if path == NET {
            self.net_idle.store(false, Ordering::Relaxed);
        }
    }

    fn tx_take(st: &mut State, path: usize, i: usize) -> Option<TxRec> {
        let r = st.tx.remove(i);
        if r.is_some() {
            st.outstanding[path] -= 1;
        }
        r
    }

    pub(super) fn rx_slot(&self, st: &mut State, path: usize, rec: RxRec) -> usize {
        self.in_flight(st, path);
        st.rx.insert(rec)
    }

    pub(super) fn rx_take(st: &mut State, path: usize, i: usize) -> Option<RxRec> {
        let r = st.rx.remove(i);
        if r.is_some() {
            st.outstanding[path] -= 1;
        }
        r
    }

    /// Reports a transmit-side operation's end to the application.
    fn tx_end(st: &State, rec: &TxRec, inner_flags: u64, err: Option<i32>) {
        let flags = rec.flags.unwrap_or(inner_flags);
        st.b.tx_done(rec.context, flags, rec.completion, err.or(rec.failed));
    }
}

impl EndpointOps for HybridEp {
    fn enable(&self, b: EpBindings) -> Result<()> {
        let mut st = self.lock();
        for (path, p) in self.paths.iter().enumerate() {
            let inner = EpBindings {
                tx_cq: Some(p.cq.clone()),
                rx_cq: Some(p.cq.clone()),
                av: Some(p.av.clone()),
                eq: Some(p.eq.clone()),
                rem_read_cntr: b.rem_read_cntr.clone(),
                rem_write_cntr: b.rem_write_cntr.clone(),
                mr_map: b.mr_map.clone(),
                fid: b.fid,
                info: p.info.clone(),
                rx_hook: (path == SHM).then(|| {
                    Arc::new(Hook {
                        st: self.st.clone(),
                        cqs: [self.paths[SHM].cq.clone(), self.paths[NET].cq.clone()],
                    }) as Arc<dyn RxHook>
                }),
                ..Default::default()
            };
            p.ep.enable(inner).map_err(|e| {
                Error::new(
                    e.code(),
                    format!(
                        "hybrid: enabling the {} endpoint: {}",
                        PATH_NAMES[path],
                        e.message()
                    ),
                )
            })?;
        }
        let _ = self.bound.set(b.clone());
        st.b = b;
        let size = wire::LEN + self.eager_max;
        for path in [SHM, NET] {
            st.bounce[path] = (0..self.bounce_bufs)
                .map(|_| vec![0u8; size].into_boxed_slice())
                .collect();
            st.order[path].seq = vec![0; self.bounce_bufs];
            for i in 0..self.bounce_bufs {
                self.post_bounce(&mut st, path, i);
            }
        }
        self.sync_av(&mut st);
        // The network path is watched from a thread while idle, so local
        // traffic never pays its system calls; without a watch it is polled
        // every IDLE_POLL_US instead.
        if let Some(fd) = self.paths[NET].ep.wait_fd() {
            match self.siblings.watch(fd) {
                Ok(w) => {
                    self.seen.store(w.epoch(), Ordering::Relaxed);
                    let _ = self.watch.set(w);
                }
                Err(e) => tracing::warn!(
                    error = %e,
                    "hybrid: no readiness watch for the network path; polling it every {IDLE_POLL_US} usec while idle"
                ),
            }
        }
        self.enabled.store(true, Ordering::Release);
        Ok(())
    }

    fn getname(&self) -> Result<Vec<u8>> {
        HybridAddr {
            node: self.node,
            shm: self.paths[SHM].ep.getname()?,
            net: self.paths[NET].ep.getname()?,
        }
        .encode()
    }

    unsafe fn post_send(&self, op: &SendOp<'_>) -> Result<()> {
        self.send_inner(op)
    }

    unsafe fn post_recv(&self, op: &RecvOp<'_>) -> Result<()> {
        self.recv_inner(op)
    }

    unsafe fn post_rma(&self, op: &RmaOp<'_>) -> Result<()> {
        self.check_enabled("RMA")?;
        let mut st = self.lock();
        let r = self.route(&mut st, op.addr)?;
        let completion = tx_completion(op.flags, st.b.tx_selective);
        let flags = FI_RMA | op.dir.flag();
        let i = self.tx_slot(
            &mut st,
            r.path,
            TxRec {
                context: op.context,
                flags: Some(flags),
                completion,
                header_of: None,
                failed: None,
            },
        );
        let inner = RmaOp {
            addr: r.inner,
            context: ctx(K_TX, r.path, i),
            flags: (op.flags & !OFI_INJECT_CALL) | FI_COMPLETION,
            ..*op
        };
        // SAFETY: post_rma's caller keeps the local iov valid until this
        // operation completes (through the call with FI_INJECT, which the
        // inner operation keeps, so it too reads them during the call
        // only). It completes only through the inner completion of record
        // `i`, so the inner endpoint uses the iov only while it is valid.
        if let Err(e) = unsafe { self.paths[r.path].ep.post_rma(&inner) } {
            Self::tx_take(&mut st, r.path, i);
            return Err(e);
        }
        Ok(())
    }

    unsafe fn post_atomic(&self, op: &AtomicOp<'_>) -> Result<()> {
        self.check_enabled("atomic")?;
        let mut st = self.lock();
        let r = self.route(&mut st, op.addr)?;
        let completion = tx_completion(op.flags, st.b.tx_selective);
        let flags = FI_ATOMIC
            | match op.kind {
                AtomicKind::Basic => FI_WRITE,
                _ => FI_READ,
            };
        let i = self.tx_slot(
            &mut st,
            r.path,
            TxRec {
                context: op.context,
                flags: Some(flags),
                completion,
                header_of: None,
                failed: None,
            },
        );
        let inner = AtomicOp {
            addr: r.inner,
            context: ctx(K_TX, r.path, i),
            flags: (op.flags & !OFI_INJECT_CALL) | FI_COMPLETION,
            ..*op
        };
        // SAFETY: post_atomic's caller keeps the operand, compare and
        // result memory valid until this operation completes (through the
        // call with FI_INJECT, which the inner operation keeps). It
        // completes only through the inner completion of record `i`, so
        // the inner endpoint uses that memory only while it is valid.
        if let Err(e) = unsafe { self.paths[r.path].ep.post_atomic(&inner) } {
            Self::tx_take(&mut st, r.path, i);
            return Err(e);
        }
        Ok(())
    }

    fn query_atomic(&self, kind: AtomicKind, op: u32, datatype: u32) -> Result<usize> {
        let a = self.paths[SHM].ep.query_atomic(kind, op, datatype)?;
        let b = self.paths[NET].ep.query_atomic(kind, op, datatype)?;
        Ok(a.min(b))
    }

    fn cancel(&self, context: usize) -> Result<()> {
        let mut st = self.lock();
        match st.mq.cancel(context) {
            Some((tagged, r)) => {
                let fl = FI_RECV | if tagged { FI_TAGGED } else { FI_MSG };
                Self::rx_error(&st, context, fl, errno::FI_ECANCELED, r.tag, 0, 0);
                Ok(())
            }
            None => Err(Error::new(
                errno::FI_ENOENT,
                "hybrid: no posted receive has this context",
            )),
        }
    }

    fn setopt(&self, name: i32, value: usize) -> Result<()> {
        self.paths[SHM].ep.setopt(name, value)?;
        self.paths[NET].ep.setopt(name, value)
    }

    fn getopt(&self, name: i32) -> Result<usize> {
        self.paths[SHM].ep.getopt(name)
    }

    fn coll_board(&self) -> Option<Arc<dyn ofi_core::coll::board::CollBoard>> {
        let shm = self.paths[SHM].ep.coll_board()?;
        Some(Arc::new(board::HybridBoard {
            shm,
            node: self.node as u32,
        }))
    }

    fn close(&self) {
        self.enabled.store(false, Ordering::Release);
        for p in &self.paths {
            p.ep.close();
        }
    }
}
