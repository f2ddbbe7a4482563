//! Reading the endpoint's ring and acting on each entry the core decodes;
//! control answers (ACK, NACK, CTS, one-sided answers) through the core's
//! queue, pushed into peers' rings.

use super::{Inner, Meta, ShmEndpoint, BUDGET};
use ofi_proto::shm::entry::MsgMeta;
use ofi_proto::shm::{entry, Answer, Body, CtrlQueue, Incoming};
use ofi_wire::shm::{Entry, Repr};
use std::sync::atomic::Ordering;

impl ShmEndpoint {
    /// Reads up to [`BUDGET`] entries, while the unexpected budget allows
    /// and no read answer holds the ring, then lets producers reuse the
    /// slots read.
    pub(super) fn poll_ring(&self, g: &mut Inner) {
        let Some(mut ring) = g.ring.take() else {
            return;
        };
        for _ in 0..BUDGET {
            // Reads answered in chunks hold the ring: later requests of the
            // same initiator must not overtake them (FI_ORDER_WAR).
            if !g.rx.may_read() || !g.read_pushes.is_empty() {
                break;
            }
            if ring.pop_with(&self.seg, |b| self.handle(g, b)).is_none() {
                break;
            }
        }
        // Hand consumed slots back to producers: a store to a line only this
        // side writes (producers read it only when the ring looks full).
        ring.publish(&self.seg);
        g.ring = Some(ring);
    }

    /// Acts on one entry of the ring.
    #[inline]
    fn handle(&self, g: &mut Inner, b: &mut [u8]) {
        // The common entry first: a whole message inline.
        if let Some((meta, bytes)) = entry::inline_msg(b) {
            tracing::trace!(?meta, "shm: inline entry");
            if self.keyed && !self.admit_sender(g, meta.from) {
                return;
            }
            if meta.from == g.last_from && self.take_inline(g, &meta, bytes) {
                return;
            }
            self.message(g, meta, Body::Inline(bytes));
            return;
        }
        self.handle_other(g, b);
    }

    /// A two-sided message: noted, matched (or offered to the receive
    /// hook) and delivered, or held as unexpected.
    fn message(&self, g: &mut Inner, meta: MsgMeta, body: Body<'_>) {
        if meta.from != g.last_from {
            self.saw_sender(g, meta.from);
        }
        let m = Meta {
            tagged: meta.tagged,
            tag: meta.tag,
            data: meta.data,
            cq_data: meta.cq_data,
            total: meta.total,
            src_addr: self.src_addr(g, meta.from),
        };
        if let Body::Inline(b) = &body {
            if self.hooked(g, &m, b) {
                return;
            }
        }
        self.incoming(g, meta.from, m, body);
    }

    /// Every entry but an inline message.
    #[inline(never)]
    fn handle_other(&self, g: &mut Inner, b: &mut [u8]) {
        // One-sided requests and answers: decoded on their own.
        if let Some(x) = entry::one_sided(b) {
            return self.one_sided_entry(g, x);
        }
        let inc = match entry::decode(b, &self.limits) {
            Ok(i) => i,
            Err(why) => {
                tracing::warn!(reason = %why, "shm: dropping a ring entry");
                return;
            }
        };
        tracing::trace!(entry = ?inc, "shm: entry");
        if matches!(
            inc,
            Incoming::Hello { .. }
                | Incoming::Challenge { .. }
                | Incoming::Proof { .. }
                | Incoming::Reject { .. }
        ) {
            self.auth_entry(g, inc);
            return;
        }
        if self.keyed {
            // Nothing but the exchange from a sender that has not proven
            // the key.
            let from = entry::sender(b).unwrap_or(0);
            if !self.admit_sender(g, from) {
                return;
            }
        }
        match inc {
            Incoming::Msg { meta, body } => self.message(g, meta, body),
            Incoming::Ack { cookie, status } => {
                let from = entry::sender(b).unwrap_or(0);
                if let Some((s, status)) = g.sends.on_ack(cookie, from, status) {
                    match status {
                        Ok(()) => self.tx_complete(g, s.context, s.flags, s.completion),
                        Err(code) => self.tx_error(g, s.context, s.flags, code),
                    }
                }
            }
            Incoming::Nack { cookie } => {
                let from = entry::sender(b).unwrap_or(0);
                if g.sends.on_nack(cookie, from) {
                    self.busy.store(true, Ordering::Relaxed);
                }
            }
            Incoming::Data {
                from,
                cookie,
                offset,
                bytes,
            } => {
                if from != g.last_from {
                    self.saw_sender(g, from);
                }
                self.data_chunk(g, from, cookie, offset, bytes)
            }
            Incoming::Cts { cookie, desc, gen } => self.coop_write(g, cookie, desc, gen),
            Incoming::Request(req) => self.rma_target(g, &req),
            Incoming::Answer {
                from,
                cookie,
                status,
                push,
                last,
                offset,
                bytes,
            } => self.rma_answer(
                g,
                &Answer {
                    from,
                    cookie,
                    status,
                    push,
                    last,
                    offset,
                    bytes,
                },
            ),
            Incoming::Hello { .. }
            | Incoming::Challenge { .. }
            | Incoming::Proof { .. }
            | Incoming::Reject { .. } => {}
        }
    }

    /// Sends a control entry now, or queues it until the peer's ring has room.
    pub(super) fn send_ctrl(&self, g: &mut Inner, to: u64, r: Repr) {
        self.send_ctrl_with(g, to, r, &[]);
    }

    /// Sends a control entry carrying `payload` (at most an entry's inline
    /// capacity), or queues it with a copy of the payload.
    pub(super) fn send_ctrl_with(&self, g: &mut Inner, to: u64, r: Repr, payload: &[u8]) {
        let mut ctrl = std::mem::take(&mut g.ctrl);
        if ctrl.send(to, r, payload, |to, r, p| self.try_ctrl(g, to, r, p)) {
            self.busy.store(true, Ordering::Relaxed);
        }
        g.ctrl = ctrl;
    }

    /// Pushes queued control entries until a ring is full.
    pub(super) fn flush_ctrl(&self, g: &mut Inner) {
        let mut ctrl: CtrlQueue = std::mem::take(&mut g.ctrl);
        ctrl.flush(|to, r, p| self.try_ctrl(g, to, r, p));
        g.ctrl = ctrl;
    }

    /// One push of a control entry: done when pushed or the peer is gone.
    pub(super) fn try_ctrl(
        &self,
        g: &mut Inner,
        to: u64,
        r: &Repr,
        payload: &[u8],
    ) -> ofi_proto::shm::Push {
        use ofi_proto::shm::Push as P;
        let peer = match self.peer_by_id(g, to) {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!(error = %e, "shm: control entry dropped, peer unreachable");
                return P::Done;
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
            return P::Done;
        }
        if peer.dead() {
            P::Done
        } else {
            P::Full
        }
    }
}
