//! The sender's side of a rendezvous, as a machine: a large send waits
//! for its receiver's answer (ACK with a status: complete or fail), or is
//! told to push its data through the ring (NACK: the receiver cannot copy
//! across processes), in DATA chunks of at most one entry's room, as room
//! in the receiver's ring allows; a peer's death fails exactly its sends.
//!
//! Events in ([`Sends::on_ack`], [`Sends::on_nack`], [`Sends::peer_dead`]),
//! actions out (the operation to complete or fail, the chunks to push
//! through the `emit` callback of [`Sends::run_pushes`]); no shared memory,
//! clocks or threads. The operation `T` is the driver's (its buffers,
//! context and peer handle); the machine only holds it.

use super::{OpTable, PeerId};
use std::collections::VecDeque;

/// One DATA entry to push: `len` bytes of send `cookie` from `offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// The send's cookie (the receiver's reassembly key).
    pub cookie: u64,
    /// Offset of the chunk in the message.
    pub offset: usize,
    /// Bytes in the chunk.
    pub len: usize,
}

struct Pending<T> {
    peer: PeerId,
    len: usize,
    /// Bytes pushed so far, once the receiver asked for pushes.
    pushed: Option<usize>,
    op: T,
}

/// Rendezvous sends waiting for their receiver, and those being pushed.
pub struct Sends<T> {
    table: OpTable<Pending<T>>,
    /// Sends being pushed, in the order their NACKs came.
    pushes: VecDeque<u64>,
}

impl<T> Default for Sends<T> {
    fn default() -> Self {
        Sends {
            table: OpTable::new(0),
            pushes: VecDeque::new(),
        }
    }
}

impl<T> std::fmt::Debug for Sends<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sends")
            .field("pending", &self.table.len())
            .field("pushing", &self.pushes.len())
            .finish()
    }
}

impl<T> Sends<T> {
    /// Registers a send of `len` bytes to `peer`; its cookie, which the
    /// RTS carries and the answers name.
    pub fn start(&mut self, peer: PeerId, len: usize, op: T) -> u64 {
        self.table.insert(Pending {
            peer,
            len,
            pushed: None,
            op,
        })
    }

    /// The receiver's ACK for `cookie` (from `from`): the send ends
    /// (`status` is its outcome). A stale or forged cookie, or an answer
    /// from another peer than the send's, is nothing.
    pub fn on_ack(
        &mut self,
        cookie: u64,
        from: PeerId,
        status: Result<(), i32>,
    ) -> Option<(T, Result<(), i32>)> {
        if self.table.get(cookie)?.peer != from {
            return None;
        }
        let p = self.table.take(cookie)?;
        if p.pushed.is_some() {
            self.pushes.retain(|c| *c != cookie);
        }
        Some((p.op, status))
    }

    /// The receiver's NACK for `cookie` (from `from`): the send is pushed
    /// from its start. True when that began now; a NACK for an unknown
    /// send, from another peer than the send's, or for a send already
    /// being pushed changes nothing.
    pub fn on_nack(&mut self, cookie: u64, from: PeerId) -> bool {
        match self.table.get_mut(cookie) {
            Some(p) if p.peer == from && p.pushed.is_none() => {
                p.pushed = Some(0);
                self.pushes.push_back(cookie);
                true
            }
            _ => false,
        }
    }

    /// `peer` is dead: its sends end, each with the caller's error.
    pub fn peer_dead(&mut self, peer: PeerId, out: &mut Vec<T>) {
        let mut gone = Vec::new();
        self.table.take_where(|p| p.peer == peer, &mut gone);
        for (cookie, p) in gone {
            if p.pushed.is_some() {
                self.pushes.retain(|c| *c != cookie);
            }
            out.push(p.op);
        }
    }

    /// Pushes what can be pushed: for each send being pushed, in order,
    /// chunks of at most `room` bytes go to `emit` (with the send's
    /// operation and peer) until it refuses one (that peer's ring is full:
    /// the send resumes there next time). A send whose last chunk went
    /// stays until its ACK. True while pushes remain.
    pub fn run_pushes(
        &mut self,
        room: usize,
        mut emit: impl FnMut(&T, PeerId, Chunk) -> bool,
    ) -> bool {
        let room = room.max(1);
        let mut i = 0;
        while i < self.pushes.len() {
            let cookie = self.pushes[i];
            let Some(p) = self.table.get_mut(cookie) else {
                self.pushes.remove(i);
                continue;
            };
            let mut at = p.pushed.unwrap_or(0);
            while at < p.len {
                let c = Chunk {
                    cookie,
                    offset: at,
                    len: (p.len - at).min(room),
                };
                if !emit(&p.op, p.peer, c) {
                    break;
                }
                at += c.len;
            }
            p.pushed = Some(at);
            if at >= p.len {
                self.pushes.remove(i);
            } else {
                i += 1;
            }
        }
        !self.pushes.is_empty()
    }

    /// Withdraws a send whose RTS could not be posted; its operation.
    pub fn cancel(&mut self, cookie: u64) -> Option<T> {
        let p = self.table.take(cookie)?;
        if p.pushed.is_some() {
            self.pushes.retain(|c| *c != cookie);
        }
        Some(p.op)
    }

    /// True when a send to `peer` waits (the liveness check watches it).
    pub fn waits_on(&self, peer: PeerId) -> bool {
        self.table.any(|p| p.peer == peer)
    }

    /// The operation behind `cookie`, if it is still pending.
    pub fn get(&self, cookie: u64) -> Option<&T> {
        self.table.get(cookie).map(|p| &p.op)
    }

    /// True when no send waits.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// True while sends are being pushed.
    pub fn pushing(&self) -> bool {
        !self.pushes.is_empty()
    }

    /// Sends waiting.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Forgets every send (endpoint close), returning their operations.
    pub fn drain(&mut self) -> Vec<T> {
        let mut all = Vec::new();
        self.table.take_where(|_| true, &mut all);
        self.pushes.clear();
        all.into_iter().map(|(_, p)| p.op).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ack_ends_a_send_once() {
        let mut s = Sends::default();
        let c = s.start(7, 100, "op");
        assert_eq!(s.on_ack(c, 8, Ok(())), None, "an ACK from another peer");
        assert_eq!(s.on_ack(c, 7, Ok(())), Some(("op", Ok(()))));
        assert_eq!(s.on_ack(c, 7, Ok(())), None);
        assert!(s.is_empty());
    }

    #[test]
    fn nack_pushes_in_chunks_resuming_where_the_ring_was_full() {
        let mut s = Sends::default();
        let c = s.start(7, 10, ());
        assert!(!s.on_nack(c, 8), "a NACK from another peer");
        assert!(s.on_nack(c, 7));
        assert!(!s.on_nack(c, 7), "a second NACK");
        let mut got = Vec::new();
        let mut budget = 2;
        assert!(s.run_pushes(4, |_, _, ch| {
            budget -= 1;
            if budget < 0 {
                return false;
            }
            got.push(ch);
            true
        }));
        assert!(!s.run_pushes(4, |_, _, ch| {
            got.push(ch);
            true
        }));
        let offs: Vec<_> = got.iter().map(|c| (c.offset, c.len)).collect();
        assert_eq!(offs, [(0, 4), (4, 4), (8, 2)]);
        assert_eq!(s.len(), 1, "the send waits for its ACK");
        assert!(s.on_ack(c, 7, Err(5)).is_some());
    }

    #[test]
    fn a_dead_peer_fails_exactly_its_sends() {
        let mut s = Sends::default();
        let a = s.start(1, 10, 'a');
        let _b = s.start(2, 10, 'b');
        s.on_nack(a, 1);
        let mut out = Vec::new();
        s.peer_dead(1, &mut out);
        assert_eq!(out, ['a']);
        assert!(!s.pushing());
        assert_eq!(s.len(), 1);
        assert_eq!(s.drain(), ['b']);
    }
}
