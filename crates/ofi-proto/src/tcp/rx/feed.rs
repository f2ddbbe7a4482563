//! What connections call on the [`Rx`] as messages arrive: matching a
//! message to a posted receive, the unexpected-byte budget and the
//! connections stopped by it, completing and failing receives, the purge
//! of a dead connection, and multi-receive bookkeeping.

use super::{Bound, MatchedRts, Meta, MultiState, Pending, Rx, RTS_COST};
use crate::tcp::event::{CopyOut, Event, RecvDone};
use crate::tcp::ConnId;
use ofi_base::consts::{FI_MULTI_RECV, FI_REMOTE_CQ_DATA};
use ofi_base::error::errno;
use ofi_base::matching::Unexpected;

impl Rx {
    /// Takes the first posted receive that accepts `meta` for a message of
    /// `total` bytes (a multi-receive buffer gives up room).
    pub(crate) fn match_posted(&mut self, meta: &Meta, total: usize) -> Option<Bound> {
        let Some(i) = self.mq.find_posted(meta.tagged, meta.src, meta.tag) else {
            // Not bound to a shared receive context: unexpected, at once.
            self.shared.as_ref()?;
            return self.match_shared(meta, total);
        };
        let min = self.cfg.min_multi_recv.max(1);
        let r = self.mq.posted_mut(meta.tagged, i)?;
        if r.flags & FI_MULTI_RECV == 0 {
            let r = self.mq.take_posted(meta.tagged, i)?;
            return Some(Bound::new(&r, 0, r.len, total, *meta, false));
        }
        let off = r.consumed.min(r.len);
        let cap = r.len - off;
        r.consumed = off + total.min(cap);
        let done = r.len - r.consumed < min;
        let copy = *r;
        if done {
            self.mq.take_posted(meta.tagged, i);
        }
        self.multi_claim(copy.context, done);
        Some(Bound::new(&copy, off, cap, total, *meta, true))
    }

    /// True if `cost` more unexpected bytes from `conn` fit. The budget is
    /// shared fairly among the connections holding unexpected bytes:
    ///
    /// - a connection that holds nothing may always park one message (a
    ///   limit below the eager size cannot stall, and one peer's flood
    ///   cannot stop another's next message);
    /// - otherwise it may hold up to its fair share, the budget divided by
    ///   the number of connections holding bytes, while all of them hold at
    ///   most twice the budget: a peer that flooded the endpoint while it
    ///   was alone keeps what it took but gets nothing more until the
    ///   others had their share, and the others get theirs;
    /// - a connection that this endpoint awaits an answer from
    ///   (`awaiting`: a CTS for its rendezvous, the answer to an RMA
    ///   request or an acknowledgement) may hold up to the whole budget by
    ///   itself, so the reply behind that peer's unread eager data is read.
    ///
    /// Memory stays bounded: twice the budget, plus one message per
    /// connection, plus the budget for each connection awaited.
    pub(crate) fn has_room(&self, conn: ConnId, cost: usize, awaiting: bool) -> bool {
        let held = self.held_by(conn);
        if held == 0 {
            return true;
        }
        let max = self.cfg.max_unexpected_bytes;
        let want = held.saturating_add(cost);
        let share = max / self.held.len().max(1);
        (want <= share && self.unexpected_bytes.saturating_add(cost) <= max.saturating_mul(2))
            || (awaiting && want <= max)
    }

    /// Unexpected bytes `conn`'s messages hold.
    pub fn held_by(&self, conn: ConnId) -> usize {
        self.held.iter().find(|h| h.0 == conn).map_or(0, |h| h.1)
    }

    pub(crate) fn charge(&mut self, conn: ConnId, cost: usize) {
        self.unexpected_bytes = self.unexpected_bytes.saturating_add(cost);
        match self.held.iter_mut().find(|h| h.0 == conn) {
            Some(h) => h.1 = h.1.saturating_add(cost),
            None => self.held.push((conn, cost)),
        }
    }

    fn release_charge(&mut self, conn: ConnId, cost: usize) {
        self.unexpected_bytes = self.unexpected_bytes.saturating_sub(cost);
        if let Some(i) = self.held.iter().position(|h| h.0 == conn) {
            self.held[i].1 = self.held[i].1.saturating_sub(cost);
            if self.held[i].1 == 0 {
                self.held.swap_remove(i);
            }
        }
    }

    pub(crate) fn uncharge(&mut self, conn: ConnId, cost: usize) {
        self.release_charge(conn, cost);
        self.wake_blocked();
    }

    /// A zeroed buffer of `n` bytes, from the pool when possible.
    pub(crate) fn alloc_buf(&mut self, n: usize) -> Vec<u8> {
        let mut v = self.pool.pop().unwrap_or_default();
        v.clear();
        v.resize(n, 0);
        v
    }

    pub(crate) fn push_unexpected(&mut self, meta: &Meta, len: usize, payload: Pending) {
        self.mq.push_unexpected(
            meta.tagged,
            Unexpected {
                src: meta.src,
                tag: meta.tag,
                data: meta.data,
                flags: if meta.cq_data { FI_REMOTE_CQ_DATA } else { 0 },
                len,
                claimed: None,
                payload,
            },
        );
    }

    /// Records that `conn` stopped reading for want of budget or a receive.
    pub(crate) fn block(&mut self, conn: ConnId) {
        if !self.blocked.contains(&conn) {
            self.blocked.push(conn);
        }
    }

    pub(super) fn wake(&mut self, conn: ConnId) {
        if !self.wake.contains(&conn) {
            self.wake.push_back(conn);
        }
    }

    pub(super) fn wake_blocked(&mut self) {
        while let Some(c) = self.blocked.pop() {
            self.wake(c);
        }
    }

    /// The next rendezvous `post_recv` matched for `conn`.
    pub(crate) fn take_matched(&mut self, conn: ConnId) -> Option<MatchedRts> {
        let i = self.matched.iter().position(|m| m.conn == conn)?;
        Some(self.matched.remove(i))
    }

    /// Completes a receive with `b.got` bytes placed (and acknowledges the
    /// message if its sender waits for that).
    pub(crate) fn finish(&mut self, b: &Bound, copy: Option<CopyOut>) {
        if let Some(id) = b.meta.ack {
            self.queue_ack(b.meta.conn, id);
        }
        let mut flags = b.meta.cq_flags();
        if b.multi && self.multi_done(b.context) {
            flags |= FI_MULTI_RECV;
        }
        self.events.push_back(Event::RecvComplete(RecvDone {
            context: b.context,
            flags,
            len: b.got,
            buf: b.first_addr(),
            tag: b.meta.tag,
            data: b.meta.data,
            src: b.meta.src,
            truncated_by: b.total - b.got,
            posted_flags: b.posted_flags,
            copy,
        }));
    }

    /// Completes a receive whose bytes the driver copies from `bytes`.
    pub(crate) fn finish_with_copy(&mut self, mut b: Bound, mut bytes: Vec<u8>) {
        bytes.truncate(b.want);
        b.got = bytes.len();
        let copy = CopyOut {
            iov: b.iov,
            iov_cnt: b.iov_cnt,
            offset: b.off,
            bytes,
        };
        self.finish(&b, Some(copy));
    }

    /// Fails a receive that was matched to a message.
    pub(crate) fn fail(&mut self, b: &Bound, err: i32) {
        let mut flags = b.meta.cq_flags();
        if b.multi && self.multi_done(b.context) {
            flags |= FI_MULTI_RECV;
        }
        self.events.push_back(Event::RecvError {
            context: b.context,
            err,
            flags,
            tag: b.meta.tag,
        });
    }

    /// A connection died: its unexpected rendezvous requests can never be
    /// served (unclaimed ones vanish, claimed ones turn [`Pending::Lost`]),
    /// and receives matched to them fail with `err`. Its unexpected eager
    /// messages are whole and stay deliverable.
    pub(crate) fn purge_conn(&mut self, conn: ConnId, err: i32) {
        for tagged in [false, true] {
            let mut i = self.mq.unexpected_len(tagged);
            while i > 0 {
                i -= 1;
                let Some(u) = self.mq.unexpected_mut(tagged, i) else {
                    continue;
                };
                if matches!(&u.payload, Pending::EagerAcked { conn: c, .. } if *c == conn) {
                    // Whole and deliverable; nobody is left to acknowledge.
                    if let Pending::EagerAcked { bytes, .. } =
                        std::mem::replace(&mut u.payload, Pending::Lost)
                    {
                        u.payload = Pending::Eager { bytes, conn };
                    }
                    continue;
                }
                if !matches!(u.payload, Pending::Rndv { conn: c, .. } if c == conn) {
                    continue;
                }
                if u.claimed.is_some() {
                    u.payload = Pending::Lost;
                } else {
                    self.mq.take_unexpected(tagged, i);
                }
                self.release_charge(conn, RTS_COST);
            }
        }
        while let Some(m) = self.take_matched(conn) {
            if let Some(b) = m.bound {
                self.fail(&b, err);
            }
        }
        self.blocked.retain(|&c| c != conn);
        self.wake.retain(|&c| c != conn);
        self.acks.retain(|&(c, _)| c != conn);
        self.wake_blocked();
    }

    /// Places an unexpected message into a receive.
    pub(super) fn deliver(&mut self, p: Pending, mut b: Bound) {
        match p {
            Pending::Eager { bytes, conn } => {
                self.uncharge(conn, bytes.len());
                self.finish_with_copy(b, bytes);
            }
            Pending::EagerAcked { bytes, conn, id } => {
                self.uncharge(conn, bytes.len());
                b.meta.conn = conn;
                b.meta.ack = Some(id);
                self.finish_with_copy(b, bytes);
            }
            Pending::Rndv { conn, id, acked } => {
                self.uncharge(conn, RTS_COST);
                if acked {
                    b.meta.conn = conn;
                    b.meta.ack = Some(id);
                }
                let bound = if b.want == 0 {
                    self.finish(&b, None);
                    None
                } else {
                    Some(b)
                };
                self.matched.push(MatchedRts { conn, id, bound });
                self.wake(conn);
            }
            Pending::Lost => self.fail(&b, errno::FI_ECONNRESET),
        }
    }

    /// Frees an unexpected message nobody will receive (`FI_DISCARD`); a
    /// rendezvous sender is told to send nothing.
    pub(super) fn release(&mut self, p: Pending) {
        match p {
            Pending::Eager { bytes, conn } => {
                self.uncharge(conn, bytes.len());
                self.recycle(bytes);
            }
            Pending::EagerAcked { bytes, conn, id } => {
                self.uncharge(conn, bytes.len());
                self.recycle(bytes);
                self.queue_ack(conn, id);
            }
            Pending::Rndv { conn, id, acked } => {
                self.uncharge(conn, RTS_COST);
                if acked {
                    self.queue_ack(conn, id);
                }
                self.matched.push(MatchedRts {
                    conn,
                    id,
                    bound: None,
                });
                self.wake(conn);
            }
            Pending::Lost => {}
        }
    }

    pub(super) fn multi_claim(&mut self, context: usize, releases: bool) {
        match self.multi.iter_mut().find(|m| m.context == context) {
            Some(m) => {
                m.inflight += 1;
                m.released |= releases;
            }
            None => self.multi.push(MultiState {
                context,
                inflight: 1,
                released: releases,
            }),
        }
    }

    /// A multi-receive buffer leaves the posted queue with no message
    /// (cancel, close); true if that is its last completion (else the last
    /// message still landing in it carries `FI_MULTI_RECV`).
    pub(super) fn multi_retire(&mut self, context: usize) -> bool {
        match self.multi.iter().position(|m| m.context == context) {
            Some(i) if self.multi[i].inflight > 0 => {
                self.multi[i].released = true;
                false
            }
            Some(i) => {
                self.multi.swap_remove(i);
                true
            }
            None => true,
        }
    }

    /// One message of a multi-receive buffer completed; true if it is the
    /// buffer's last completion.
    fn multi_done(&mut self, context: usize) -> bool {
        let Some(i) = self.multi.iter().position(|m| m.context == context) else {
            return false;
        };
        let m = &mut self.multi[i];
        m.inflight = m.inflight.saturating_sub(1);
        if m.released && m.inflight == 0 {
            self.multi.swap_remove(i);
            return true;
        }
        false
    }
}
