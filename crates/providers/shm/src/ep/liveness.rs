//! Peer liveness and closing. Every [`LIVENESS_PERIOD`] (looked at every
//! `IDLE_LOOK`th idle progress call, every `BUSY_LOOK`th locked pass,
//! every pass while operations are pending, and before sleeping) the
//! endpoint beats and looks at each mapped peer; the core's
//! [`Liveness`] says when one is dead: its process exited or its endpoint
//! closed (`FI_ECONNRESET`), or it stayed silent for the peer timeout
//! while this endpoint waited on it, for an answer or for the rest of a
//! message it pushes (`FI_ETIMEDOUT`). A dead peer is
//! declared once through `ofi_core::util::peer` (the EQ report naming it)
//! and everything that waits on it fails with the cause's number: sends,
//! one-sided operations, receives being pushed by it, directed receives.
//! A closing endpoint waits for reads a live target may still be writing
//! (until each is answered or its target is known dead), then answers
//! every message and request still queued for it.

use super::state::in_flight_to;
use super::{Inner, ShmEndpoint, BUSY_LOOK, LIVENESS_PERIOD};
use crate::addr::ShmAddr;
use ofi_core::consts::*;
use ofi_core::error::errno;
use ofi_core::object::EpBindings;
use ofi_core::util::peer::{Cause, PeerDown};
use ofi_proto::shm::liveness::{Liveness, Wait};
use ofi_proto::shm::{ack, entry, rma_answer, Owed};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// How often a closing endpoint that still waits for reads says so.
const SETTLE_WARN: Duration = Duration::from_secs(5);
/// How long it spins before it sleeps between looks.
const SETTLE_SPIN: Duration = Duration::from_millis(100);

impl ShmEndpoint {
    /// After a locked pass: the liveness check when it is due (the clock
    /// is read every pass while operations are pending, else every
    /// [`BUSY_LOOK`]th pass).
    pub(super) fn look_at_peers(&self, g: &mut Inner) {
        if g.settling {
            return;
        }
        let pending = !g.sends.is_empty() || !g.rmas.is_empty() || !g.reasm.is_empty();
        g.passes = g.passes.wrapping_add(1);
        if !pending && g.passes & (BUSY_LOOK - 1) != 0 {
            return;
        }
        self.liveness_due(g);
    }

    /// Runs the liveness check if [`LIVENESS_PERIOD`] has passed.
    pub(super) fn liveness_due(&self, g: &mut Inner) {
        let now = Instant::now();
        if now < g.next_check {
            return;
        }
        g.next_check = now + LIVENESS_PERIOD;
        self.check_liveness(g, now);
    }

    /// A message came from `from`, not the last sender: watch it from
    /// the next liveness check on (a peer that only sends to this endpoint
    /// is watched as well as one it sends to).
    pub(super) fn saw_sender(&self, g: &mut Inner, from: u64) {
        g.last_from = from;
        if !g.by_id.contains_key(&from) && !g.senders.contains(&from) {
            g.senders.push(from);
        }
    }

    /// Beats, maps the senders noted since the last look (one that cannot
    /// be mapped is gone), then looks at every mapped peer and declares the
    /// dead ones.
    fn check_liveness(&self, g: &mut Inner, now: Instant) {
        self.seg.pulse();
        for id in std::mem::take(&mut g.senders) {
            let gone = self
                .peer_by_id(g, id)
                .is_err_and(|e| e.code() == errno::FI_ECONNREFUSED);
            if gone && self.dead_id(g, id).is_none() {
                self.peer_down(g, id, Cause::Reset, false);
            }
        }
        if g.by_id.is_empty() {
            return;
        }
        let bound = self.cfg.peer_timeout;
        let mut gone = Vec::new();
        {
            let Inner {
                by_id,
                live,
                sends,
                rmas,
                ctrl,
                read_pushes,
                reasm,
                ..
            } = &mut *g;
            for (&id, p) in by_id.iter() {
                let wait = if reasm.waits_on(id) {
                    Wait::Pushing
                } else if in_flight_to(sends, rmas, id)
                    || ctrl.holds_for(id)
                    || read_pushes.iter().any(|r| r.to == id)
                {
                    Wait::Reading
                } else {
                    Wait::Nothing
                };
                let seen = p.seen();
                let l = live.entry(id).or_insert_with(|| Liveness::new(now));
                if let Some(cause) = l.observe(&seen, wait, now, bound) {
                    // Its endpoint said it closed: an orderly end.
                    gone.push((id, cause, seen.closed));
                }
            }
        }
        for (id, cause, closed) in gone {
            self.peer_down(g, id, cause, closed);
        }
    }

    /// The fi_addr the AV holds for peer `id` (`FI_ADDR_NOTAVAIL` if none).
    fn fi_addr_of(&self, g: &Inner, id: u64) -> u64 {
        g.b.av
            .as_ref()
            .and_then(|av| av.reverse(&ShmAddr::from_id(id).to_bytes()))
            .unwrap_or(FI_ADDR_NOTAVAIL)
    }

    /// Declares peer `id` dead for `cause`: reported once (the EQ entry
    /// naming it), forgotten (a later operation maps it afresh, which
    /// fails while nothing lives at its address), and everything waiting
    /// on it fails with the cause's number. `closed`: the peer closed its
    /// endpoint in an orderly way (logged as such, at info level).
    pub(super) fn peer_down(&self, g: &mut Inner, id: u64, cause: Cause, closed: bool) {
        // What the peer pushed before it closed or exited is in the ring
        // below the positions claimed now: read it first, so answers and
        // messages that came before the close count before it.
        self.read_before_death(g);
        let addr = ShmAddr::from_id(id);
        let fi_addr = self.fi_addr_of(g, id);
        let err = cause.errno();
        let down = PeerDown {
            fi_addr,
            addr: addr.to_bytes(),
            cause,
        };
        g.dead.declare(&g.b, &down, &addr.to_string(), closed);
        g.dead_ids.retain(|(i, _)| *i != id);
        g.dead_ids.push((id, err));
        g.by_id.remove(&id);
        g.live.remove(&id);
        g.senders.retain(|s| *s != id);
        if g.last_from == id {
            g.last_from = 0;
        }
        if g.last_trusted == id {
            g.last_trusted = 0;
        }
        if let Some(a) = g.auth.as_mut() {
            a.forget(id);
        }
        g.proofs.retain(|o| o.to != id);
        for slot in g.peers.iter_mut() {
            if slot.as_ref().is_some_and(|p| p.addr.id() == id) {
                *slot = None;
            }
        }
        let mut sends = Vec::new();
        g.sends.peer_dead(id, &mut sends);
        for s in sends {
            self.tx_error(g, s.context, s.flags, err);
        }
        let mut rmas = Vec::new();
        g.rmas.take_where(|p| p.peer.addr.id() == id, &mut rmas);
        for (cookie, p) in rmas {
            g.rma_pushes.retain(|c| *c != cookie);
            self.rma_done(g, &p, err);
        }
        let mut recvs = Vec::new();
        g.reasm.peer_dead(id, &mut recvs);
        for x in recvs {
            self.rx_error(g, x.context, x.cq_flags, err, x.meta.tag);
        }
        g.ctrl.forget(id);
        g.read_pushes.retain(|r| r.to != id);
        if fi_addr != FI_ADDR_NOTAVAIL {
            for tagged in [false, true] {
                while let Some(r) = g.rx.mq.take_posted_from(tagged, fi_addr) {
                    let flags = FI_RECV
                        | if tagged { FI_TAGGED } else { FI_MSG }
                        | (r.flags & FI_MULTI_RECV);
                    self.rx_error(g, r.context, flags, err, r.tag);
                }
            }
        }
    }

    /// Reads the ring up to the positions producers have claimed now (what
    /// a peer seen closed or exited pushed before that), as far as it goes:
    /// a pass that reads nothing (the unexpected budget is spent, a read
    /// answer holds the ring, an entry is not stamped yet) ends it. Does
    /// nothing while a pass already reads the ring (this runs inside it).
    fn read_before_death(&self, g: &mut Inner) {
        let upto = self.seg.msg_ring().claimed();
        loop {
            let Some(at) = g.ring.as_ref().map(|r| r.position()) else {
                return;
            };
            // Positions wrap: `at` has reached `upto` when the distance
            // from `upto` forward is under half the range.
            if at.wrapping_sub(upto) < 1 << 63 {
                return;
            }
            self.poll_ring(g);
            if g.ring.as_ref().map(|r| r.position()) == Some(at) {
                return;
            }
        }
    }

    /// The error number a rendezvous from peer `id` fails with when that
    /// peer was declared dead.
    pub(super) fn dead_id(&self, g: &Inner, id: u64) -> Option<i32> {
        g.dead_ids.iter().find(|(i, _)| *i == id).map(|(_, e)| *e)
    }

    /// Peer `id` was mapped afresh (a live endpoint at its address): a
    /// death declared earlier is lifted.
    pub(super) fn peer_revived(&self, g: &mut Inner, id: u64) {
        if g.dead_ids.iter().any(|(i, _)| *i == id) {
            g.dead_ids.retain(|(i, _)| *i != id);
            let fi_addr = self.fi_addr_of(g, id);
            g.dead.revive(fi_addr, &ShmAddr::from_id(id).to_bytes());
        }
    }

    /// Before the endpoint closes: drives progress until no read is waiting
    /// for a target that may still copy into this process's memory. Such a
    /// target writes the bytes straight into the read's buffer, which the
    /// application may free once the endpoint is closed: the wait lasts
    /// until every such read is answered or its target is known dead (its
    /// process exited or its endpoint closed), never a set time. A silent
    /// target is not a dead one, so no liveness timeout is declared
    /// meanwhile; the wait is logged every [`SETTLE_WARN`].
    fn settle_reads(&self, g: &mut Inner) {
        let waiting = |g: &Inner| {
            g.rmas
                .any(|p| p.is_read() && !p.peer.dead() && !p.peer.closed())
        };
        if !waiting(g) {
            return;
        }
        g.settling = true;
        let start = Instant::now();
        let mut warn_at = start + SETTLE_WARN;
        while waiting(g) {
            self.progress_locked(g);
            let now = Instant::now();
            if now >= warn_at {
                warn_at = now + SETTLE_WARN;
                tracing::warn!(
                    waited_s = now.duration_since(start).as_secs(),
                    "shm: closing waits for reads a live target has not answered \
                     (it may still write into their buffers)"
                );
            }
            if now.duration_since(start) < SETTLE_SPIN {
                std::hint::spin_loop();
            } else {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        g.settling = false;
    }

    /// Closes the endpoint: no more operations; peers learn it from the
    /// segment's `closed` flag, and every large message or request still
    /// queued for it is answered with FI_ECONNRESET.
    pub(super) fn close_endpoint(&self) {
        self.enabled.store(false, Ordering::Release);
        // Targets answer large reads by writing straight into this
        // process's memory: wait for those answers (or the targets' death) before the
        // buffers can be freed and reused.
        {
            let mut g = self.lock();
            self.settle_reads(&mut g);
        }
        // SYNC POINT: peers' liveness checks and sends acquire `closed`.
        self.seg.header().closed.store(1, Ordering::Release);
        // The name is free for another endpoint now.
        drop(self.named().claim.take());
        let mut g = self.lock();
        let (_, unexp) = g.rx.mq.drain_all();
        for u in unexp {
            self.release(&mut g, u.payload, errno::FI_ECONNRESET);
        }
        // Large messages still in the ring: tell their senders, so no send
        // waits for an ACK that will never come.
        let me = self.me.id();
        let mut ring = g.ring.take();
        for _ in 0..self.cfg.ring_slots {
            let Some(ring) = ring.as_mut() else { break };
            match ring.pop_with(&self.seg, |b| entry::owed(b)) {
                None => break,
                Some(Some(Owed::Ack { to, cookie })) => {
                    self.send_ctrl(&mut g, to, ack(me, cookie, errno::FI_ECONNRESET))
                }
                Some(Some(Owed::Answer { to, cookie })) => {
                    self.send_ctrl(&mut g, to, rma_answer(me, cookie, errno::FI_ECONNRESET))
                }
                Some(None) => {}
            }
        }
        self.flush_ctrl(&mut g);
        g.peers.clear();
        g.by_id.clear();
        g.live.clear();
        g.sends.drain();
        g.dead.clear();
        g.dead_ids.clear();
        g.b = EpBindings::default();
    }
}
