//! Peer liveness and closing: operations whose peer died or closed fail
//! (checked every [`LIVENESS_PERIOD`] while any are pending, the core's
//! tables selecting exactly that peer's operations); a closing endpoint
//! waits (bounded) for reads a live target may still be writing, then
//! answers every message and request still queued for it.

use super::{Inner, ShmEndpoint, LIVENESS_PERIOD};
use ofi_core::error::errno;
use ofi_core::object::EpBindings;
use ofi_proto::shm::{ack, entry, rma_answer, Owed};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// How long a closing endpoint waits for reads a live target answers.
const SETTLE_READS: Duration = Duration::from_secs(5);

impl ShmEndpoint {
    /// Fails pending operations whose peer has died (sends and receives
    /// being pushed) or died or closed (one-sided operations).
    pub(super) fn check_liveness(&self, g: &mut Inner) {
        if g.sends.is_empty() && g.reasm.is_empty() && g.rmas.is_empty() {
            return;
        }
        let now = Instant::now();
        if now.duration_since(g.last_check) < LIVENESS_PERIOD {
            return;
        }
        g.last_check = now;
        let mut dead = Vec::new();
        g.sends.take_where(|s| s.peer.dead(), &mut dead);
        self.rma_liveness(g);
        for (cookie, s) in dead {
            g.pushes.retain(|p| p.cookie != cookie);
            tracing::warn!(
                pid = s.peer.addr.pid,
                "shm: peer died with a send in flight"
            );
            self.tx_error(g, s.context, s.flags, errno::FI_EIO);
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

    /// Pending one-sided operations whose target died complete with FI_EIO.
    fn rma_liveness(&self, g: &mut Inner) {
        let mut dead = Vec::new();
        g.rmas
            .take_where(|p| p.peer.dead() || p.peer.closed(), &mut dead);
        for (cookie, p) in dead {
            g.rma_pushes.retain(|c| *c != cookie);
            tracing::warn!(
                pid = p.peer.addr.pid,
                "shm: target gone with a one-sided operation in flight"
            );
            self.rma_done(g, &p, errno::FI_EIO);
        }
    }

    /// Before the endpoint closes: drives progress until no read is waiting
    /// for a target that may still copy into this process's memory (the
    /// target is alive and has not closed), for at most five seconds.
    fn settle_reads(&self, g: &mut Inner) {
        let waiting = |g: &Inner| {
            g.rmas
                .any(|p| p.is_read() && !p.peer.dead() && !p.peer.closed())
        };
        let deadline = Instant::now() + SETTLE_READS;
        while waiting(g) && Instant::now() < deadline {
            self.progress_locked(g);
            std::hint::spin_loop();
        }
        if waiting(g) {
            tracing::warn!("shm: closing with reads still unanswered by a live target");
        }
    }

    /// Closes the endpoint: no more operations; peers learn it from the
    /// segment's `closed` flag, and every large message or request still
    /// queued for it is answered with FI_ECONNRESET.
    pub(super) fn close_endpoint(&self) {
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
        g.sends.clear();
        g.b = EpBindings::default();
    }
}
