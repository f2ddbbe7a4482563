//! The hybrid endpoint: routes each operation to the inner endpoint of the
//! peer's path, drains both inner CQs in its progress, and matches every
//! arriving message in one engine (see the crate documentation).

// The raw layer's contract (caller memory valid until completion) is
// forwarded to the inner endpoints: unsafe calls, no unsafe memory access.
#![allow(unsafe_code)]

mod fast;
mod recv;

use crate::addr::HybridAddr;
use crate::wire::{self, Header};
use crate::Config;
use ofi_core::consts::*;
use ofi_core::error::{errno, Error, Result};
use ofi_core::info::Info;
use ofi_core::object::{tx_completion, AtomicOp, EpBindings, RecvOp, RmaOp, SendOp};
use ofi_core::provider::{AddrOps, EndpointOps, Progress, RxHook};
use ofi_core::util::atomic::AtomicKind;
use ofi_core::util::av::{AvAttr, AvCore};
use ofi_core::util::cq::{CqAttr, CqCore, CqErrEntry, CqTaggedEntry};
use ofi_core::util::eq::{EqAttr, EqCore};
use ofi_core::util::iov::{copy_from_iov, iov_len, IoVec};
use ofi_core::util::lock::{SpinGuard, SpinLock};
use ofi_core::util::matching::{MatchQueues, MAX_IOV};
use ofi_core::util::peer::PeerDown;
use ofi_core::util::wait::{ReadyWatch, WaitFd};
use std::collections::HashMap;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Instant;

/// Path index of shm (peers on this node).
pub(crate) const SHM: usize = 0;
/// Path index of tcp (the others).
pub(crate) const TCP: usize = 1;
/// An idle tcp path is polled at most this often (microseconds) when it
/// has no readiness watch (the watch thread could not be started).
const IDLE_POLL_US: u128 = 50;
/// A watched idle tcp path is polled at least this often anyway
/// (microseconds): a bound on the delay should a wake-up ever be missed.
const WATCHED_POLL_US: u128 = 10_000;
/// Progress calls an idle tcp path stays busy once woken (or when it could
/// not be watched because it had work pending) before it is armed again.
const REARM_AFTER: u32 = 256;
/// Progress calls between two readings of the clock.
const CLOCK_EVERY: u32 = 64;
/// Calls a path stays busy after it delivered something.
const RECENT: u32 = 4096;
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

/// A held (unexpected) message's payload.
#[derive(Debug)]
pub(crate) enum Payload {
    /// Eager bytes, copied out of the bounce buffer.
    Eager(Vec<u8>),
    /// A rendezvous: the payload waits in the inner endpoint as a tagged
    /// message from `inner_src` with tag `cookie`.
    Rts {
        path: usize,
        inner_src: u64,
        cookie: u64,
    },
}

/// A transmit-side operation in flight on an inner endpoint.
struct TxRec {
    context: usize,
    /// Completion flags reported to the application (None: the inner
    /// completion's own, for RMA and atomics).
    flags: Option<u64>,
    completion: bool,
    /// A rendezvous header: its completion is not the application's; a
    /// failure fails the payload's record (index).
    header_of: Option<usize>,
    /// Set when the header of this payload failed.
    failed: Option<i32>,
}

/// A receive waiting for a rendezvous payload.
pub(crate) struct RxRec {
    context: usize,
    flags: u64,
    tag: u64,
    data: u64,
    buf: usize,
    src: u64,
    completion: bool,
    discard: bool,
}

/// A slab: stable indices, reused.
struct Slab<T> {
    v: Vec<Option<T>>,
    free: Vec<usize>,
}

impl<T> Slab<T> {
    fn new() -> Self {
        Slab {
            v: Vec::new(),
            free: Vec::new(),
        }
    }
    fn insert(&mut self, t: T) -> usize {
        match self.free.pop() {
            Some(i) => {
                self.v[i] = Some(t);
                i
            }
            None => {
                self.v.push(Some(t));
                self.v.len() - 1
            }
        }
    }
    fn take(&mut self, i: usize) -> Option<T> {
        let t = self.v.get_mut(i)?.take();
        if t.is_some() {
            self.free.push(i);
        }
        t
    }
    fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        self.v.get_mut(i)?.as_mut()
    }
}

/// A peer's path and its inner fi_addr.
#[derive(Clone, Copy, Debug)]
struct Route {
    path: usize,
    inner: u64,
}

pub(crate) struct State {
    b: EpBindings,
    /// AV inserts and generation mirrored so far.
    seen: (u64, u64),
    /// Outer fi_addr -> route.
    routes: Vec<Option<Route>>,
    /// Per path: inner fi_addr (an index of the inner AV, a table) ->
    /// outer fi_addr (FI_ADDR_NOTAVAIL where none).
    rev: [Vec<u64>; 2],
    /// Per path: inner address bytes -> inner fi_addr (one insert each).
    inner_addrs: [HashMap<Vec<u8>, u64>; 2],
    pub(crate) mq: MatchQueues<Payload>,
    tx: Slab<TxRec>,
    rx: Slab<RxRec>,
    /// Headers of sends in flight, by tx index (stable boxes, reused).
    /// Per tx slot: the header (and, when the caller's iov list leaves no
    /// entry for it, the payload) of a send in flight. Each inner Vec's heap
    /// buffer stays put while its send is in flight (it is only resized
    /// when the slot is reused).
    hdrs: Vec<Vec<u8>>,
    /// Vectors for held eager payloads, reused.
    pool: Vec<Vec<u8>>,
    /// Header and payload of an injected send whose iov list leaves no
    /// entry for the header (reused).
    spill: Vec<u8>,
    bounce: [Vec<Box<[u8]>>; 2],
    next_cookie: u64,
    /// Inner operations in flight per path (sends, RMA, atomics,
    /// rendezvous receives).
    outstanding: [usize; 2],
    /// Progress calls left before a path that delivered counts as idle.
    recent: [u32; 2],
    /// When each path was last polled (as of the last clock reading).
    polled: [Instant; 2],
    /// The idle tcp path is armed (its sockets in its poller) and watched:
    /// it is polled only once the watch fires (or every WATCHED_POLL_US).
    watching: bool,
    /// Some unexpected message may hold a pending source (see
    /// [`pending_src`]): the AV sync looks for them.
    held_pending: bool,
    /// Peers declared dead (fi_addr, address, errno): a receive directed at
    /// one fails at once. A message from the peer revives it; an AV
    /// removal keeps only the marks whose entry still names their address.
    dead: Vec<(u64, Vec<u8>, i32)>,
}

/// What the endpoints of one hybrid domain share. The inner tcp endpoints
/// of a domain progress together (one's progress accepts connections for
/// all), so before a hybrid endpoint drives its inner endpoints, every
/// endpoint of the domain mirrors the AV entries added since: a peer's
/// connection then finds the peer's address in the inner AV, and its
/// messages carry their source.
pub(crate) struct Siblings {
    /// Addresses the domain's AVs accepted (counted by the address ops).
    inserts: Arc<AtomicU64>,
    /// `inserts` as of the last time every endpoint mirrored its AV.
    mirrored: AtomicU64,
    eps: Mutex<Vec<Weak<HybridEp>>>,
    /// Readiness watches of the inner endpoints' wait fds, one per fd (the
    /// inner endpoints of a domain share theirs), alive while an endpoint
    /// holds one.
    watches: Mutex<Vec<(RawFd, Weak<ReadyWatch>)>>,
}

impl Siblings {
    /// The endpoints' shared state, counting the inserts `inserts` counts.
    pub(crate) fn new(inserts: Arc<AtomicU64>) -> Arc<Siblings> {
        Arc::new(Siblings {
            inserts,
            mirrored: AtomicU64::new(0),
            eps: Mutex::new(Vec::new()),
            watches: Mutex::new(Vec::new()),
        })
    }

    /// The watch of wait fd `fd`: the one an endpoint of the domain holds,
    /// or a new one.
    fn watch(&self, fd: RawFd) -> Result<Arc<ReadyWatch>> {
        let mut v = self.watches.lock().unwrap_or_else(|e| e.into_inner());
        v.retain(|(_, w)| w.strong_count() > 0);
        if let Some(w) = v
            .iter()
            .find(|(f, _)| *f == fd)
            .and_then(|(_, w)| w.upgrade())
        {
            return Ok(w);
        }
        let w = Arc::new(ReadyWatch::new(fd, "ofi-hybrid-watch")?);
        v.push((fd, Arc::downgrade(&w)));
        Ok(w)
    }

    fn join(&self, ep: &Arc<HybridEp>) {
        let mut v = self.eps.lock().unwrap_or_else(|e| e.into_inner());
        v.retain(|w| w.strong_count() > 0);
        v.push(Arc::downgrade(ep));
    }

    /// Every endpoint mirrors its AV, when an address was added since the
    /// last time. Takes one endpoint's lock at a time: call it holding none.
    fn mirror(&self) {
        let n = self.inserts.load(Ordering::Acquire);
        if n == self.mirrored.load(Ordering::Acquire) {
            return;
        }
        let eps: Vec<Arc<HybridEp>> = self
            .eps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        for ep in eps {
            let mut st = ep.lock();
            ep.sync_av(&mut st);
        }
        self.mirrored.store(n, Ordering::Release);
    }
}

/// The hybrid endpoint.
pub(crate) struct HybridEp {
    /// Readiness of the tcp path's wait fd, watched by a thread while the
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
    /// shm routes for sends that take no lock.
    shm_routes: fast::ShmRoutes,
    /// The bindings, for sends that take no lock (set once, at enable).
    bound: OnceLock<EpBindings>,
    /// Progress calls so far (a hint: updated without a lock).
    tick: AtomicU32,
    /// True while nothing is in flight on tcp and nothing arrived there
    /// lately: progress then polls it only every IDLE_POLL_US.
    tcp_idle: AtomicBool,
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
            .min(paths[TCP].info.tx_attr.inject_size)
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
            shm_routes: fast::ShmRoutes::new(),
            bound: OnceLock::new(),
            tick: AtomicU32::new(0),
            tcp_idle: AtomicBool::new(false),
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
                next_cookie: cookie_base(),
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

    /// Mirrors new outer AV entries into the inner AVs (when the AV
    /// changed since last time).
    pub(super) fn sync_av(&self, st: &mut State) {
        // Two loads when nothing changed (every posted receive asks): the
        // AV is cloned only for a sync.
        let Some(gen) = st.b.av.as_ref().map(|av| av.generation()) else {
            return;
        };
        let now = (self.siblings.inserts.load(Ordering::Acquire), gen);
        if now == st.seen {
            return;
        }
        let Some(av) = st.b.av.clone() else { return };
        if now.1 != st.seen.1 {
            // Something was removed: routes, and the names inner senders
            // go by, are rebuilt from what remains (a removed peer's index
            // may name another peer now).
            st.routes.clear();
            self.shm_routes.clear();
            for rev in st.rev.iter_mut() {
                rev.fill(FI_ADDR_NOTAVAIL);
            }
            st.dead
                .retain(|(fi, raw, _)| av.lookup(*fi).is_ok_and(|a| a[..] == raw[..]));
        }
        st.seen = now;
        for (fi, raw) in av.entries() {
            let i = fi as usize;
            if st.routes.get(i).is_some_and(|r| r.is_some()) {
                continue;
            }
            let a = match HybridAddr::decode(&raw) {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(fi_addr = fi, error = %e, "hybrid: AV entry skipped");
                    continue;
                }
            };
            let path = if HybridAddr::same_node(a.node, self.node) {
                SHM
            } else {
                TCP
            };
            let inner_raw = if path == SHM { a.shm } else { a.tcp };
            let inner = match st.inner_addrs[path].get(&inner_raw) {
                Some(&x) => x,
                None => {
                    // Learned already (its messages came first), or new.
                    let x = match self.paths[path].av.find(&inner_raw) {
                        Some(x) => x,
                        None => {
                            let mut out = [FI_ADDR_NOTAVAIL];
                            match self.paths[path].av.insert(&[&inner_raw], &mut out) {
                                Ok(1) => {}
                                _ => {
                                    tracing::warn!(
                                        fi_addr = fi,
                                        path = PATH_NAMES[path],
                                        "hybrid: the inner AV refused the peer's address"
                                    );
                                    continue;
                                }
                            }
                            out[0]
                        }
                    };
                    st.inner_addrs[path].insert(inner_raw, x);
                    x
                }
            };
            if st.routes.len() <= i {
                st.routes.resize(i + 1, None);
            }
            st.routes[i] = Some(Route { path, inner });
            if path == SHM {
                self.shm_routes.set(fi, inner);
            }
            let rev = &mut st.rev[path];
            if let Ok(k) = usize::try_from(inner) {
                if rev.len() <= k {
                    rev.resize(k + 1, FI_ADDR_NOTAVAIL);
                }
                // An address inserted more than once goes by its primary
                // entry, as FI_SOURCE reports it.
                rev[k] = av.primary(fi).unwrap_or(fi);
            }
        }
        self.shm_routes.publish(now.1);
        if st.held_pending {
            Self::resolve_pending(st);
        }
    }

    /// Gives held messages whose sender the AV now names that sender's
    /// fi_addr (see [`pending_src`]).
    fn resolve_pending(st: &mut State) {
        let mut left = false;
        let State { mq, rev, .. } = st;
        for tagged in [false, true] {
            for u in mq.unexpected_iter_mut(tagged) {
                if let Some((path, inner)) = pending_parts(u.src) {
                    match rev.get(path).and_then(|r| r.get(inner as usize)) {
                        Some(&o) if o != FI_ADDR_NOTAVAIL => u.src = o,
                        _ => left = true,
                    }
                }
            }
        }
        st.held_pending = left;
    }

    fn route(&self, st: &mut State, dest: u64) -> Result<Route> {
        if let Some(Some(r)) = st.routes.get(dest as usize) {
            if st
                .b
                .av
                .as_ref()
                .is_some_and(|av| av.generation() == st.seen.1)
            {
                return Ok(*r);
            }
        }
        self.sync_av(st);
        match st.routes.get(dest as usize) {
            Some(Some(r)) => Ok(*r),
            _ => Err(Error::inval(format!(
                "hybrid: fi_addr {dest} is not in the AV"
            ))),
        }
    }

    /// The outer fi_addr of a message's inner source; for a sender the
    /// inner AV learned but the application's AV does not name yet, a
    /// pending source ([`pending_src`]); FI_ADDR_NOTAVAIL when unknown.
    fn outer_src(&self, st: &mut State, path: usize, inner: u64) -> u64 {
        if inner == FI_ADDR_NOTAVAIL || inner == FI_ADDR_UNSPEC {
            return FI_ADDR_NOTAVAIL;
        }
        let k = inner as usize;
        match st.rev[path].get(k) {
            Some(&o) if o != FI_ADDR_NOTAVAIL => o,
            _ => {
                self.sync_av(st);
                match st.rev[path].get(k) {
                    Some(&o) if o != FI_ADDR_NOTAVAIL => o,
                    _ if inner <= 0xFFFF_FFFF => pending_src(path, inner),
                    _ => FI_ADDR_NOTAVAIL,
                }
            }
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
        if let Err(e) = unsafe { self.paths[path].ep.post_recv(&op) } {
            tracing::warn!(path = PATH_NAMES[path], error = %e, "hybrid: bounce receive not posted");
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

    /// One more inner operation in flight on `path` (tcp is then polled
    /// on every progress call).
    fn in_flight(&self, st: &mut State, path: usize) {
        st.outstanding[path] += 1;
        if path == TCP {
            self.tcp_idle.store(false, Ordering::Relaxed);
        }
    }

    fn tx_take(st: &mut State, path: usize, i: usize) -> Option<TxRec> {
        let r = st.tx.take(i);
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
        let r = st.rx.take(i);
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

    /// True when `op` (of `len` bytes) goes as a shm inject: eager, not
    /// delivery-complete, and what goes (its short prefix and payload)
    /// within shm's inject size.
    fn injectable(&self, op: &SendOp<'_>, len: usize) -> bool {
        Self::prefix_len(op) + len <= self.shm_inject
            && len <= self.eager_max
            && (op.flags & FI_INJECT != 0
                || op.flags & (FI_DELIVERY_COMPLETE | FI_MATCH_COMPLETE) == 0)
    }

    /// The length of `op`'s prefix as a short message (see [`wire::SHORT`]):
    /// 0 when it goes bare.
    fn prefix_len(op: &SendOp<'_>) -> usize {
        wire::short_marker(op.tagged, op.flags & FI_REMOTE_CQ_DATA != 0).1
    }

    /// Sends `op` (`len` bytes, [`injectable`](Self::injectable)) to inner
    /// shm address `dest` as an inject (shm copies it before it returns;
    /// no inner completion) and completes it now, as a short message (see
    /// [`wire::SHORT`]). `spill` takes prefix and payload when the iov list
    /// leaves no entry for the prefix (None: the caller made sure it does,
    /// or the send is bare).
    fn send_injected(
        &self,
        b: &EpBindings,
        op: &SendOp<'_>,
        dest: u64,
        len: usize,
        spill: Option<&mut Vec<u8>>,
    ) -> Result<()> {
        let completion = tx_completion(op.flags, b.tx_selective);
        let uflags = FI_SEND | if op.tagged { FI_TAGGED } else { FI_MSG };
        let fence = op.flags & FI_FENCE;
        let mut pb = [0u8; 16];
        let data = (op.flags & FI_REMOTE_CQ_DATA != 0).then_some(op.data);
        let (marker, n) = wire::short_prefix(op.tagged, op.tag, data, &mut pb);
        let mut iov = [IoVec::default(); MAX_IOV + 1];
        let cnt = if n == 0 {
            // Bare: the payload alone.
            iov[..op.iov.len()].copy_from_slice(op.iov);
            op.iov.len()
        } else {
            match spill {
                Some(buf) if op.iov.len() >= MAX_IOV => {
                    // No entry left for the prefix: copy the payload behind it.
                    buf.clear();
                    buf.extend_from_slice(&pb[..n]);
                    buf.resize(n + len, 0);
                    // SAFETY: the caller keeps the iov valid for this call.
                    unsafe { copy_from_iov(op.iov, 0, &mut buf[n..]) };
                    iov[0] = IoVec::from_slice(&buf[..]);
                    1
                }
                _ => {
                    iov[0] = IoVec::from_slice(&pb[..n]);
                    iov[1..=op.iov.len()].copy_from_slice(op.iov);
                    op.iov.len() + 1
                }
            }
        };
        let inner = SendOp {
            iov: &iov[..cnt],
            desc: &[],
            dest,
            tag: 0,
            data: marker,
            context: 0,
            flags: FI_INJECT | OFI_INJECT_CALL | FI_REMOTE_CQ_DATA | fence,
            tagged: false,
        };
        // SAFETY: an inject reads the ranges during the call only: the
        // prefix and spill buffer live through it, and the caller keeps its
        // iov valid for it.
        unsafe { self.paths[SHM].ep.post_send(&inner) }?;
        b.tx_done(op.context, uflags, completion, None);
        Ok(())
    }

    /// Takes what the inner CQ of `path` holds; returns how many entries.
    fn drain(&self, st: &mut State, path: usize) -> usize {
        if !self.paths[path].cq.has_events() {
            return 0;
        }
        let mut got = 0;
        let mut ents = [CqTaggedEntry::default(); 4];
        let mut srcs = [FI_ADDR_NOTAVAIL; 4];
        // Bounded: each round takes what is queued now.
        for _ in 0..64 {
            match self.paths[path].cq.readfrom(&mut ents, &mut srcs) {
                Ok(n) => {
                    for k in 0..n {
                        self.on_ok(st, path, &ents[k], srcs[k], &mut got);
                    }
                    if n < ents.len() {
                        return got;
                    }
                }
                Err(e) if e.code() == errno::FI_EAVAIL => match self.paths[path].cq.readerr() {
                    Ok(err) => self.on_err(st, path, &err, &mut got),
                    Err(_) => return got,
                },
                Err(_) => return got,
            }
        }
        got
    }

    fn on_ok(&self, st: &mut State, path: usize, e: &CqTaggedEntry, src: u64, got: &mut usize) {
        let (kind, _, idx) = unctx(e.op_context);
        *got += 1;
        // Remote CQ data of an RMA write lands in the application's CQ.
        if e.flags & FI_REMOTE_CQ_DATA != 0 && e.flags & (FI_RMA | FI_ATOMIC) != 0 {
            let src = visible_src(self.outer_src(st, path, src));
            if let Some(cq) = &st.b.rx_cq {
                cq.push(
                    CqTaggedEntry {
                        op_context: 0,
                        ..*e
                    },
                    src,
                );
            }
            if kind == K_BOUNCE && e.flags & FI_RECV != 0 {
                self.post_bounce(st, path, idx);
            }
            return;
        }
        match kind {
            K_BOUNCE => {
                let outer = self.outer_src(st, path, src);
                let short = (e.flags & FI_REMOTE_CQ_DATA != 0).then_some(e.data);
                self.arrived(st, path, idx, e.len, src, outer, short);
                self.post_bounce(st, path, idx);
            }
            K_TX => {
                if let Some(rec) = Self::tx_take(st, path, idx) {
                    if rec.header_of.is_none() {
                        Self::tx_end(st, &rec, e.flags, None);
                    }
                }
            }
            K_RX => {
                if let Some(r) = Self::rx_take(st, path, idx) {
                    self.rts_done(st, r, e.len, None);
                }
            }
            _ => tracing::warn!(context = e.op_context, "hybrid: completion of no operation"),
        }
    }

    fn on_err(&self, st: &mut State, path: usize, e: &CqErrEntry, got: &mut usize) {
        let (kind, _, idx) = unctx(e.op_context);
        *got += 1;
        match kind {
            K_BOUNCE => {
                if e.err != errno::FI_ECANCELED {
                    tracing::warn!(
                        path = PATH_NAMES[path],
                        err = e.err,
                        "hybrid: bounce receive failed; message dropped"
                    );
                    self.post_bounce(st, path, idx);
                }
            }
            K_TX => {
                if let Some(rec) = Self::tx_take(st, path, idx) {
                    match rec.header_of {
                        Some(p) => {
                            if let Some(pay) = st.tx.get_mut(p) {
                                pay.failed = Some(e.err);
                            }
                        }
                        None => Self::tx_end(st, &rec, e.flags, Some(e.err)),
                    }
                }
            }
            K_RX => {
                if let Some(r) = Self::rx_take(st, path, idx) {
                    self.rts_done(st, r, e.len, Some((e.err, e.olen)));
                }
            }
            _ => tracing::warn!(
                context = e.op_context,
                err = e.err,
                "hybrid: error of no operation"
            ),
        }
    }

    /// The inner endpoint of `path` declared peers dead: its own pending
    /// operations fail through its CQ; here the application's directed
    /// receives from those peers fail and its EQ hears of each, named by
    /// its outer fi_addr. Peers on the other path are not touched.
    fn peers_down(&self, st: &mut State, path: usize) {
        for _ in 0..64 {
            let Ok(e) = self.paths[path].eq.readerr() else {
                return;
            };
            let Some(down) = PeerDown::from_eq_error(&e) else {
                continue;
            };
            let outer = visible_src(self.outer_src(st, path, down.fi_addr));
            let err = down.cause.errno();
            tracing::info!(
                fi_addr = outer,
                path = PATH_NAMES[path],
                cause = down.cause.describe(),
                "hybrid: peer declared dead"
            );
            if outer != FI_ADDR_NOTAVAIL {
                for tagged in [false, true] {
                    while let Some(r) = st.mq.take_posted_from(tagged, outer) {
                        let fl = FI_RECV | if tagged { FI_TAGGED } else { FI_MSG };
                        Self::rx_error(st, r.context, fl, err, r.tag, 0, 0);
                    }
                }
                let raw = st.b.av.as_ref().and_then(|av| av.lookup(outer).ok());
                if let Some(raw) = raw {
                    if !st.dead.iter().any(|d| d.0 == outer) {
                        st.dead.push((outer, raw.to_vec(), err));
                    }
                }
            }
            if let Some(eq) = &st.b.eq {
                // Named as the application knows the peer: its fi_addr and
                // hybrid address.
                let raw = st.b.av.as_ref().and_then(|av| av.lookup(outer).ok());
                eq.push_err(ofi_core::util::eq::EqError {
                    fid: st.b.fid,
                    data: outer,
                    err_data: raw.map_or(e.err_data.clone(), |a| a.to_vec()),
                    ..e
                });
            }
        }
    }

    /// A message arrived in bounce buffer `idx` of `path`; `short`: the
    /// inner CQ data that came with it (see [`wire::SHORT`]).
    #[allow(clippy::too_many_arguments)]
    fn arrived(
        &self,
        st: &mut State,
        path: usize,
        idx: usize,
        len: usize,
        inner_src: u64,
        src: u64,
        short: Option<u64>,
    ) {
        if !st.dead.is_empty() {
            // The peer speaks again: it is alive.
            st.dead.retain(|d| d.0 != src);
        }
        // Out of the state while it is read, so matching may borrow both.
        let buf = std::mem::take(&mut st.bounce[path][idx]);
        let bytes = &buf[..len.min(buf.len())];
        match short {
            Some(m) => match wire::parse_short(m, bytes) {
                Some((h, body)) => self.incoming(st, h, src, body, Payload::Eager(Vec::new())),
                None => tracing::warn!(
                    path = PATH_NAMES[path],
                    marker = m,
                    len = bytes.len(),
                    "hybrid: malformed short message dropped"
                ),
            },
            None => self.message(st, path, inner_src, src, bytes),
        }
        st.bounce[path][idx] = buf;
    }

    /// A message (header and payload in `bytes`) from outer `src` (inner
    /// `inner_src`) arrived through `path`: match it or hold it.
    fn message(&self, st: &mut State, path: usize, inner_src: u64, src: u64, bytes: &[u8]) {
        let h = match Header::parse(bytes) {
            Ok(h) => h,
            Err(e) => {
                tracing::warn!(path = PATH_NAMES[path], error = %e, "hybrid: malformed message dropped");
                return;
            }
        };
        let body = &bytes[wire::LEN..];
        if !h.rts && h.len as usize != body.len() {
            tracing::warn!(
                path = PATH_NAMES[path],
                "hybrid: eager message length disagrees with its header; dropped"
            );
            return;
        }
        let payload = if h.rts {
            Payload::Rts {
                path,
                inner_src,
                cookie: h.cookie,
            }
        } else {
            // Copied only when held; matched messages are delivered
            // straight from `bytes`.
            Payload::Eager(Vec::new())
        };
        self.incoming(st, h, src, body, payload);
    }
}

/// The receive hook bound to the inner shm endpoint: small eager messages
/// are matched (or held) as they come out of shm's ring, with no bounce
/// receive, inner completion or second copy. It holds what it needs (the
/// state and the inner CQs), not the endpoint: no reference cycle and no
/// reference count to take per message.
struct Hook {
    st: Arc<SpinLock<State>>,
    cqs: [Arc<CqCore>; 2],
}

impl std::fmt::Debug for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("hybrid receive hook")
    }
}

impl RxHook for Hook {
    /// Taken unless something that arrived earlier still waits in an inner
    /// CQ, the state is busy (another thread, or this one up the stack),
    /// the sender is not mirrored yet, or it is not a whole eager message:
    /// those take the bounce receives.
    fn arrived(&self, inner_src: u64, data: Option<u64>, bytes: &[u8]) -> bool {
        if self.cqs.iter().any(|c| c.has_events()) {
            return false;
        }
        let (h, body) = match data {
            Some(m) => match wire::parse_short(m, bytes) {
                Some(x) => x,
                None => return false,
            },
            None => match Header::parse(bytes) {
                Ok(h) if !h.rts && h.len == (bytes.len() - wire::LEN) as u64 => {
                    (h, &bytes[wire::LEN..])
                }
                _ => return false,
            },
        };
        let Some(mut st) = self.st.try_lock() else {
            return false;
        };
        let src = if inner_src == FI_ADDR_NOTAVAIL {
            FI_ADDR_NOTAVAIL
        } else {
            match st.rev[SHM].get(inner_src as usize) {
                Some(&o) if o != FI_ADDR_NOTAVAIL => o,
                _ => return false,
            }
        };
        HybridEp::incoming_eager(&mut st, h, src, body);
        st.recent[SHM] = RECENT;
        true
    }
}

impl HybridEp {
    /// Polls the tcp path if it is due, and says whether it did. A busy
    /// path (operations in flight, or arrivals lately) is polled on every
    /// pass; an idle one only once its readiness watch fires, operations
    /// are posted on it, or WATCHED_POLL_US passed (IDLE_POLL_US without a
    /// watch): its poll costs system calls, which local traffic should not
    /// pay each time.
    fn poll_tcp(&self, st: &mut State, now: Option<Instant>) -> bool {
        let elapsed = |st: &State, us: u128| {
            now.is_some_and(|t| t.duration_since(st.polled[TCP]).as_micros() >= us)
        };
        if st.watching {
            let epoch = self.watch.get().map_or(0, |w| w.epoch());
            let woken = epoch != self.seen.load(Ordering::Relaxed);
            if woken {
                // Firings from now on are new to this endpoint.
                self.seen.store(epoch, Ordering::Relaxed);
            }
            if !woken && st.outstanding[TCP] == 0 && !elapsed(st, WATCHED_POLL_US) {
                return false;
            }
            self.paths[TCP].ep.disarm();
            st.watching = false;
            // Woken, the path stays busy a while (traffic tends to come in
            // runs), and the watch is not re-armed on every pass; the
            // periodic poll re-arms at once if it finds nothing.
            if woken {
                st.recent[TCP] = st.recent[TCP].max(REARM_AFTER);
            }
        } else if st.outstanding[TCP] == 0
            && st.recent[TCP] == 0
            && self.watch.get().is_none()
            && !elapsed(st, IDLE_POLL_US)
        {
            return false;
        }
        if let Some(t) = now {
            st.polled[TCP] = t;
        }
        self.paths[TCP].ep.progress();
        true
    }

    /// The tcp path went idle: arms it (its sockets go into its poller,
    /// whose fd the watch thread sleeps on) and re-arms the watch, unless
    /// it has work pending, in which case it stays busy a while longer.
    fn watch_tcp(&self, st: &mut State) {
        let Some(w) = self.watch.get() else { return };
        if self.paths[TCP].ep.arm() {
            match w.rearm() {
                Ok(()) => {
                    st.watching = true;
                    return;
                }
                Err(e) => tracing::debug!(error = %e, "hybrid: re-arming the tcp watch"),
            }
        }
        self.paths[TCP].ep.disarm();
        st.recent[TCP] = REARM_AFTER;
    }
}

impl Progress for HybridEp {
    fn progress(&self) {
        if !self.enabled.load(Ordering::Acquire) {
            return;
        }
        self.siblings.mirror();
        // shm is polled on every call (no system call), with the state
        // unlocked: the small messages it offers the hook take the lock.
        self.paths[SHM].ep.progress();
        let tick = self.tick.load(Ordering::Relaxed);
        self.tick.store(tick.wrapping_add(1), Ordering::Relaxed);
        // The clock is read every CLOCK_EVERY calls (and for the first).
        let due = tick.is_multiple_of(CLOCK_EVERY);
        // Nothing else to do (the usual pass of a local exchange): no lock.
        // Inner EQs are looked at on the next due pass.
        if !due
            && self.tcp_idle.load(Ordering::Relaxed)
            && self
                .watch
                .get()
                .is_none_or(|w| w.epoch() == self.seen.load(Ordering::Relaxed))
            && !self.paths[SHM].cq.has_events()
            && !self.paths[TCP].cq.has_events()
        {
            return;
        }
        let now = due.then(Instant::now);
        let mut st = self.lock();
        for path in [SHM, TCP] {
            if path == TCP && !self.poll_tcp(&mut st, now) && !self.paths[TCP].cq.has_events() {
                continue;
            }
            // What a peer sent before it died is matched before its death
            // fails the receives directed at it (as shm does).
            if self.drain(&mut st, path) > 0 {
                st.recent[path] = RECENT;
            } else {
                st.recent[path] = st.recent[path].saturating_sub(1);
            }
            if self.paths[path].eq.has_events() {
                self.peers_down(&mut st, path);
            }
        }
        let idle = st.outstanding[TCP] == 0 && st.recent[TCP] == 0;
        if idle && !st.watching {
            self.watch_tcp(&mut st);
        }
        self.tcp_idle.store(
            st.outstanding[TCP] == 0 && st.recent[TCP] == 0,
            Ordering::Relaxed,
        );
    }
    fn arm(&self) -> bool {
        let a = self.paths[SHM].ep.arm();
        let b = self.paths[TCP].ep.arm();
        a && b && self.paths.iter().all(|p| !p.cq.has_events())
    }
    fn disarm(&self) {
        for p in &self.paths {
            p.ep.disarm();
        }
    }
    fn wait_fd(&self) -> Option<RawFd> {
        self.wait
            .get_or_init(|| {
                let w = WaitFd::new().ok()?;
                for p in &self.paths {
                    if let Some(fd) = p.ep.wait_fd() {
                        w.add(fd).ok()?;
                    }
                }
                Some(w)
            })
            .as_ref()
            .and_then(|w| w.expose().ok())
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
                        cqs: [self.paths[SHM].cq.clone(), self.paths[TCP].cq.clone()],
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
        for path in [SHM, TCP] {
            st.bounce[path] = (0..self.bounce_bufs)
                .map(|_| vec![0u8; size].into_boxed_slice())
                .collect();
            for i in 0..self.bounce_bufs {
                self.post_bounce(&mut st, path, i);
            }
        }
        self.sync_av(&mut st);
        // The tcp path is watched from a thread while idle, so local traffic
        // never pays its system calls; without a watch it is polled every
        // IDLE_POLL_US instead.
        if let Some(fd) = self.paths[TCP].ep.wait_fd() {
            match self.siblings.watch(fd) {
                Ok(w) => {
                    self.seen.store(w.epoch(), Ordering::Relaxed);
                    let _ = self.watch.set(w);
                }
                Err(e) => tracing::warn!(
                    error = %e,
                    "hybrid: no readiness watch for the tcp path; polling it every {IDLE_POLL_US} usec while idle"
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
            tcp: self.paths[TCP].ep.getname()?,
        }
        .encode()
    }

    unsafe fn post_send(&self, op: &SendOp<'_>) -> Result<()> {
        self.check_enabled("send")?;
        if op.iov.len() > MAX_IOV {
            return Err(Error::inval(format!(
                "hybrid: {} iov entries exceed the limit of {MAX_IOV}",
                op.iov.len()
            )));
        }
        let need = if op.tagged { FI_TAGGED } else { FI_MSG };
        if self.caps & need == 0 {
            return Err(Error::new(
                errno::FI_EOPNOTSUPP,
                "hybrid: the endpoint was opened without this capability",
            ));
        }
        let len = iov_len(op.iov);
        if op.flags & FI_INJECT != 0 && len > self.inject_max {
            return Err(Error::new(
                errno::FI_EMSGSIZE,
                format!(
                    "hybrid: inject of {len} bytes exceeds inject_size {}",
                    self.inject_max
                ),
            ));
        }
        // shm copies a message this small into the peer's ring (or a bounce
        // buffer of the peer's segment) before it returns, and completes it
        // then: injected, it completes here with no inner completion to
        // read. To a peer whose shm route is known, with no hybrid lock.
        let inject = self.injectable(op, len);
        if inject && (op.iov.len() < MAX_IOV || Self::prefix_len(op) == 0) {
            if let Some(b) = self.bound.get() {
                let gen = b.av.as_ref().map(|av| av.generation());
                if let Some(dest) = gen.and_then(|g| self.shm_routes.get(op.dest, g)) {
                    return self.send_injected(b, op, dest, len, None);
                }
            }
        }
        let mut st = self.lock();
        let r = self.route(&mut st, op.dest)?;
        if inject && r.path == SHM {
            let State { b, spill, .. } = &mut *st;
            return self.send_injected(b, op, r.inner, len, Some(spill));
        }
        let completion = tx_completion(op.flags, st.b.tx_selective);
        let uflags = FI_SEND | if op.tagged { FI_TAGGED } else { FI_MSG };
        // Match complete (and, for now, delivery complete) means placed in
        // the matched receive: only the rendezvous payload, received
        // straight into it, can tell.
        let dc =
            op.flags & FI_INJECT == 0 && op.flags & (FI_DELIVERY_COMPLETE | FI_MATCH_COMPLETE) != 0;
        let rts = len > self.eager_max || dc;
        let keep = FI_INJECT | FI_FENCE | FI_TRANSMIT_COMPLETE | FI_INJECT_COMPLETE;
        // The inner send of such a message waits for its match too.
        let level = if dc {
            FI_MATCH_COMPLETE
        } else {
            op.flags & (FI_DELIVERY_COMPLETE | FI_MATCH_COMPLETE)
        };
        let iflags = (op.flags & keep) | level | FI_COMPLETION;
        let h = send_header(op, len, rts);
        let rec = TxRec {
            context: op.context,
            flags: Some(uflags),
            completion,
            header_of: None,
            failed: None,
        };
        let ep = &self.paths[r.path].ep;
        if !h.rts {
            let i = self.tx_slot(&mut st, r.path, rec);
            let mut hb = [0u8; wire::LEN];
            h.emit(&mut hb);
            let buf = &mut st.hdrs[i];
            buf.clear();
            buf.extend_from_slice(&hb);
            let mut iov = [IoVec::default(); MAX_IOV];
            let cnt = if op.iov.len() < MAX_IOV {
                iov[1..=op.iov.len()].copy_from_slice(op.iov);
                op.iov.len() + 1
            } else {
                // No entry left for the header: copy the payload behind it.
                buf.resize(wire::LEN + len, 0);
                // SAFETY: the caller keeps the iov valid for this call.
                unsafe { copy_from_iov(op.iov, 0, &mut buf[wire::LEN..]) };
                1
            };
            iov[0] = IoVec::from_slice(&st.hdrs[i][..]);
            let inner = SendOp {
                iov: &iov[..cnt],
                desc: &[],
                dest: r.inner,
                tag: 0,
                data: 0,
                context: ctx(K_TX, r.path, i),
                flags: iflags,
                tagged: false,
            };
            // SAFETY: the header box lives until the inner completion; the
            // caller's iov promise is forwarded unchanged.
            if let Err(e) = unsafe { ep.post_send(&inner) } {
                Self::tx_take(&mut st, r.path, i);
                return Err(e);
            }
            // A send the inner endpoint completed at once completes now.
            if self.paths[r.path].cq.has_events() {
                self.drain(&mut st, r.path);
            }
            return Ok(());
        }
        let cookie = st.next_cookie;
        st.next_cookie += 1;
        let p = self.tx_slot(&mut st, r.path, rec);
        let hi = self.tx_slot(
            &mut st,
            r.path,
            TxRec {
                context: 0,
                flags: None,
                completion: false,
                header_of: Some(p),
                failed: None,
            },
        );
        let mut hb = [0u8; wire::LEN];
        Header { cookie, ..h }.emit(&mut hb);
        st.hdrs[hi].clear();
        st.hdrs[hi].extend_from_slice(&hb);
        let hiov = [IoVec::from_slice(&st.hdrs[hi][..])];
        let head = SendOp {
            iov: &hiov,
            desc: &[],
            dest: r.inner,
            tag: 0,
            data: 0,
            context: ctx(K_TX, r.path, hi),
            flags: FI_COMPLETION | (op.flags & FI_FENCE),
            tagged: false,
        };
        // SAFETY: the header box lives until the inner completion.
        if let Err(e) = unsafe { ep.post_send(&head) } {
            Self::tx_take(&mut st, r.path, hi);
            Self::tx_take(&mut st, r.path, p);
            return Err(e);
        }
        let payload = SendOp {
            iov: op.iov,
            desc: op.desc,
            dest: r.inner,
            tag: cookie,
            data: 0,
            context: ctx(K_TX, r.path, p),
            flags: iflags & !FI_INJECT,
            tagged: true,
        };
        // SAFETY: forwarded caller contract (the iov stays valid until the
        // operation completes).
        if let Err(e) = unsafe { ep.post_send(&payload) } {
            // The header is on its way: fail the operation through its
            // completion rather than the call.
            tracing::warn!(error = %e, "hybrid: rendezvous payload not posted");
            if let Some(x) = Self::tx_take(&mut st, r.path, p) {
                Self::tx_end(&st, &x, 0, Some(e.code()));
            }
        }
        Ok(())
    }

    unsafe fn post_recv(&self, op: &RecvOp<'_>) -> Result<()> {
        self.check_enabled("receive")?;
        self.recv_inner(op)
    }

    unsafe fn post_rma(&self, op: &RmaOp<'_>) -> Result<()> {
        self.check_enabled("RMA")?;
        let mut st = self.lock();
        let r = self.route(&mut st, op.addr)?;
        let completion = tx_completion(op.flags, st.b.tx_selective);
        let flags = FI_RMA | if op.read { FI_READ } else { FI_WRITE };
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
        // SAFETY: forwarded caller contract.
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
        // SAFETY: forwarded caller contract.
        if let Err(e) = unsafe { self.paths[r.path].ep.post_atomic(&inner) } {
            Self::tx_take(&mut st, r.path, i);
            return Err(e);
        }
        Ok(())
    }

    fn query_atomic(&self, kind: AtomicKind, op: u32, datatype: u32) -> Result<usize> {
        let a = self.paths[SHM].ep.query_atomic(kind, op, datatype)?;
        let b = self.paths[TCP].ep.query_atomic(kind, op, datatype)?;
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
        self.paths[TCP].ep.setopt(name, value)
    }

    fn getopt(&self, name: i32) -> Result<usize> {
        self.paths[SHM].ep.getopt(name)
    }

    fn close(&self) {
        self.enabled.store(false, Ordering::Release);
        for p in &self.paths {
            p.ep.close();
        }
    }
}

/// The header of a send of `len` bytes (`rts`: its payload goes apart, as
/// an inner tagged message; the cookie is set when one is chosen).
fn send_header(op: &SendOp<'_>, len: usize, rts: bool) -> Header {
    Header {
        rts,
        tagged: op.tagged,
        has_data: op.flags & FI_REMOTE_CQ_DATA != 0,
        tag: op.tag,
        data: op.data,
        len: len as u64,
        cookie: 0,
    }
}
