//! Progress: drains both inner CQs (completions of inner operations,
//! arrivals in bounce buffers), takes small shm messages in the receive
//! hook as they leave shm's ring, and polls the network path only when it
//! is due (an idle one is watched from a thread instead).

use super::{
    unctx, visible_src, HybridEp, Parked, State, K_BOUNCE, K_RX, K_TX, NET, PATH_NAMES, SHM,
};
use crate::wire::{self, Header};
use ofi_core::consts::*;
use ofi_core::error::errno;
use ofi_core::provider::{Progress, RxHook};
use ofi_core::util::cq::{CqCore, CqErrEntry, CqTaggedEntry};
use ofi_core::util::lock::SpinLock;
use ofi_core::util::wait::WaitFd;
use std::os::fd::RawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

/// An idle network path is polled at most this often (microseconds) when
/// it has no readiness watch (the watch thread could not be started).
pub(super) const IDLE_POLL_US: u128 = 50;
/// A watched idle network path is polled at least this often anyway
/// (microseconds): a bound on the delay should a wake-up ever be missed.
const WATCHED_POLL_US: u128 = 10_000;
/// Progress calls an idle network path stays busy once woken (or when it
/// could not be watched because it had work pending) before it is armed
/// again.
const REARM_AFTER: u32 = 256;
/// Progress calls between two readings of the clock.
const CLOCK_EVERY: u32 = 64;
/// Calls a path stays busy after it delivered something.
const RECENT: u32 = 4096;

impl HybridEp {
    /// Takes what the inner CQ of `path` holds; returns how many entries.
    pub(super) fn drain(&self, st: &mut State, path: usize) -> usize {
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
        if kind == K_BOUNCE && !Self::in_turn(st, path, idx) {
            st.order[path].parked.push(Parked::Ok(*e, src));
            return;
        }
        self.on_ok_now(st, path, e, src);
        if kind == K_BOUNCE && !st.order[path].parked.is_empty() {
            self.unpark(st, path);
        }
    }

    /// True when bounce receive `idx` of `path` is the next in posting
    /// order (see [`Bounces`](super::state::Bounces)), which it then
    /// leaves: its completion is taken now.
    #[inline(always)]
    fn in_turn(st: &mut State, path: usize, idx: usize) -> bool {
        let o = &mut st.order[path];
        if o.seq.get(idx) != Some(&o.next) {
            return false;
        }
        o.next += 1;
        true
    }

    /// Takes the parked bounce completions of `path` whose turn came.
    #[cold]
    #[inline(never)]
    fn unpark(&self, st: &mut State, path: usize) {
        while !st.order[path].parked.is_empty() {
            let o = &st.order[path];
            let turn = |p: &Parked| {
                let c = match p {
                    Parked::Ok(e, _) => e.op_context,
                    Parked::Err(e) => e.op_context,
                };
                o.seq.get(unctx(c).2) == Some(&o.next)
            };
            let Some(i) = o.parked.iter().position(turn) else {
                return;
            };
            st.order[path].next += 1;
            match st.order[path].parked.swap_remove(i) {
                Parked::Ok(e, src) => self.on_ok_now(st, path, &e, src),
                Parked::Err(e) => self.on_err_now(st, path, &e),
            }
        }
    }

    /// A successful inner completion, in its turn.
    #[inline(always)]
    fn on_ok_now(&self, st: &mut State, path: usize, e: &CqTaggedEntry, src: u64) {
        let (kind, _, idx) = unctx(e.op_context);
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
        if kind == K_BOUNCE && !Self::in_turn(st, path, idx) {
            st.order[path].parked.push(Parked::Err(*e));
            return;
        }
        self.on_err_now(st, path, e);
        if kind == K_BOUNCE && !st.order[path].parked.is_empty() {
            self.unpark(st, path);
        }
    }

    /// An inner error completion, in its turn.
    fn on_err_now(&self, st: &mut State, path: usize, e: &CqErrEntry) {
        let (kind, _, idx) = unctx(e.op_context);
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

    /// Polls the network path if it is due, and says whether it did. A busy
    /// path (operations in flight, or arrivals lately) is polled on every
    /// pass; an idle one only once its readiness watch fires, operations
    /// are posted on it, or WATCHED_POLL_US passed (IDLE_POLL_US without a
    /// watch): its poll costs system calls, which local traffic should not
    /// pay each time.
    fn poll_net(&self, st: &mut State, now: Option<Instant>) -> bool {
        let elapsed = |st: &State, us: u128| {
            now.is_some_and(|t| t.duration_since(st.polled[NET]).as_micros() >= us)
        };
        if st.watching {
            let epoch = self.watch.get().map_or(0, |w| w.epoch());
            let woken = epoch != self.seen.load(Ordering::Relaxed);
            if woken {
                // Firings from now on are new to this endpoint.
                self.seen.store(epoch, Ordering::Relaxed);
            }
            if !woken && st.outstanding[NET] == 0 && !elapsed(st, WATCHED_POLL_US) {
                return false;
            }
            self.paths[NET].ep.disarm();
            st.watching = false;
            // Woken, the path stays busy a while (traffic tends to come in
            // runs), and the watch is not re-armed on every pass; the
            // periodic poll re-arms at once if it finds nothing.
            if woken {
                st.recent[NET] = st.recent[NET].max(REARM_AFTER);
            }
        } else if st.outstanding[NET] == 0
            && st.recent[NET] == 0
            && self.watch.get().is_none()
            && !elapsed(st, IDLE_POLL_US)
        {
            return false;
        }
        if let Some(t) = now {
            st.polled[NET] = t;
        }
        self.paths[NET].ep.progress();
        true
    }

    /// The network path went idle: arms it (its sockets go into its
    /// poller, whose fd the watch thread sleeps on) and re-arms the watch,
    /// unless it has work pending, in which case it stays busy a while
    /// longer.
    fn watch_net(&self, st: &mut State) {
        let Some(w) = self.watch.get() else { return };
        if self.paths[NET].ep.arm() {
            match w.rearm() {
                Ok(()) => {
                    st.watching = true;
                    return;
                }
                Err(e) => tracing::debug!(error = %e, "hybrid: re-arming the network path's watch"),
            }
        }
        self.paths[NET].ep.disarm();
        st.recent[NET] = REARM_AFTER;
    }
}

/// The receive hook bound to the inner shm endpoint: small eager messages
/// are matched (or held) as they come out of shm's ring, with no bounce
/// receive, inner completion or second copy. It holds what it needs (the
/// state and the inner CQs), not the endpoint: no reference cycle and no
/// reference count to take per message.
pub(super) struct Hook {
    pub(super) st: Arc<SpinLock<State>>,
    pub(super) cqs: [Arc<CqCore>; 2],
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
    /// those take the bounce receives. shm offers nothing while an earlier
    /// message is held or still arriving there, so no bounce completion is
    /// parked (see [`Bounces`](super::state::Bounces)) when this runs: one
    /// is parked only while an earlier bounce receive's message still
    /// arrives in pieces, or its completion waits in the CQ.
    fn arrived(&self, inner_src: u64, data: Option<u64>, bytes: &[u8]) -> bool {
        if self.cqs[SHM].has_events() || self.cqs[NET].has_events() {
            return false;
        }
        let Some(m) = data else {
            return self.whole_eager(inner_src, bytes);
        };
        match wire::parse_short(m, bytes) {
            Some((h, body)) => self.take(inner_src, h, body),
            None => false,
        }
    }
}

impl Hook {
    /// Matches (or holds) an eager message from inner shm address
    /// `inner_src` unless the state is busy or the sender is not mirrored
    /// yet.
    #[inline(always)]
    fn take(&self, inner_src: u64, h: Header, body: &[u8]) -> bool {
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

    /// A whole eager message behind a full header (one too large for a
    /// short message's prefix).
    #[inline(never)]
    fn whole_eager(&self, inner_src: u64, bytes: &[u8]) -> bool {
        match Header::parse(bytes) {
            Ok(h) if !h.rts && h.len == (bytes.len() - wire::LEN) as u64 => {
                self.take(inner_src, h, &bytes[wire::LEN..])
            }
            _ => false,
        }
    }
}

impl HybridEp {
    /// The progress pass that takes the lock: inner completions and events,
    /// the network path when due, its watch.
    #[inline(never)]
    fn progress_locked(&self, now: Option<Instant>) {
        let mut st = self.lock();
        if self.deferring.load(Ordering::Relaxed) {
            self.flush_deferred(&mut st);
        }
        for path in [SHM, NET] {
            if path == NET && !self.poll_net(&mut st, now) && !self.paths[NET].cq.has_events() {
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
        let idle = st.outstanding[NET] == 0 && st.recent[NET] == 0;
        if idle && !st.watching {
            self.watch_net(&mut st);
        }
        self.net_idle.store(
            st.outstanding[NET] == 0 && st.recent[NET] == 0,
            Ordering::Relaxed,
        );
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
            && self.net_idle.load(Ordering::Relaxed)
            && !self.deferring.load(Ordering::Relaxed)
            && self
                .watch
                .get()
                .is_none_or(|w| w.epoch() == self.seen.load(Ordering::Relaxed))
            && !self.paths[SHM].cq.has_events()
            && !self.paths[NET].cq.has_events()
        {
            return;
        }
        self.progress_locked(due.then(Instant::now));
    }
    fn arm(&self) -> bool {
        let a = self.paths[SHM].ep.arm();
        let b = self.paths[NET].ep.arm();
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
