//! Control entries: the answers an endpoint owes its peers (ACK, NACK,
//! CTS, one-sided answers). Each goes out at once when the peer's ring has
//! room and nothing is queued before it, else waits in order; a peer that
//! is gone consumes its entries (the driver's push reports them done).

use super::PeerId;
use ofi_wire::shm::{flag, op, Repr};
use std::collections::VecDeque;

/// What the driver's push did with an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Push {
    /// Sent, or dropped because the peer is gone: done with it.
    Done,
    /// The peer's ring is full: try again later.
    Full,
}

/// A queued control entry: destination, header, and any payload bytes.
type Queued = (PeerId, Repr, Option<Box<[u8]>>);

/// Control entries waiting for room in their peers' rings.
#[derive(Debug, Default)]
pub struct CtrlQueue {
    q: VecDeque<Queued>,
}

impl CtrlQueue {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sends `r` (with `payload`, at most an entry's inline room) to `to`
    /// through `push`, or queues it (with a copy of the payload) behind
    /// earlier entries. True when it was queued.
    pub fn send(
        &mut self,
        to: PeerId,
        r: Repr,
        payload: &[u8],
        push: impl FnOnce(PeerId, &Repr, &[u8]) -> Push,
    ) -> bool {
        if self.q.is_empty() && push(to, &r, payload) == Push::Done {
            return false;
        }
        let copy = (!payload.is_empty()).then(|| payload.to_vec().into_boxed_slice());
        self.q.push_back((to, r, copy));
        true
    }

    /// Pushes queued entries in order until one finds its ring full.
    pub fn flush(&mut self, mut push: impl FnMut(PeerId, &Repr, &[u8]) -> Push) {
        while let Some((to, r, p)) = self.q.pop_front() {
            if push(to, &r, p.as_deref().unwrap_or(&[])) == Push::Full {
                self.q.push_front((to, r, p));
                break;
            }
        }
    }

    /// True when an entry for `to` waits (this endpoint waits on that
    /// peer's ring).
    pub fn holds_for(&self, to: PeerId) -> bool {
        self.q.iter().any(|(t, _, _)| *t == to)
    }

    /// Drops every entry waiting for `to` (a peer declared dead); returns
    /// how many.
    pub fn forget(&mut self, to: PeerId) -> usize {
        let before = self.q.len();
        self.q.retain(|(t, _, _)| *t != to);
        before - self.q.len()
    }

    /// True when nothing waits.
    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    /// Entries waiting.
    pub fn len(&self) -> usize {
        self.q.len()
    }
}

/// ACK of an RTS: `status` 0 (consumed) or an FI_E* number.
pub fn ack(me: PeerId, cookie: u64, status: i32) -> Repr {
    Repr {
        op: op::ACK,
        src: me,
        cookie,
        data: status as u64,
        ..Default::default()
    }
}

/// NACK of an RTS: push the data as DATA entries.
pub fn nack(me: PeerId, cookie: u64) -> Repr {
    Repr {
        op: op::NACK,
        src: me,
        cookie,
        ..Default::default()
    }
}

/// CTS: help copy through descriptor `desc` of generation `gen`.
pub fn cts(me: PeerId, cookie: u64, desc: u64, gen: u64) -> Repr {
    Repr {
        op: op::CTS,
        src: me,
        cookie,
        tag: desc,
        data: gen,
        ..Default::default()
    }
}

/// A final one-sided answer carrying only a status (0 or FI_E*).
pub fn rma_answer(me: PeerId, cookie: u64, status: i32) -> Repr {
    Repr {
        op: op::RMA_RESP,
        flags: flag::LAST,
        src: me,
        cookie,
        data: status as u64,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_ring_queues_in_order_and_flush_resumes() {
        let mut q = CtrlQueue::new();
        let mut sent = Vec::new();
        assert!(!q.send(1, ack(9, 1, 0), &[], |_, r, _| {
            sent.push(r.cookie);
            Push::Done
        }));
        // The ring fills: this one and every later one waits, in order,
        // even if the ring had room again for the later ones.
        assert!(q.send(1, ack(9, 2, 0), b"xy", |_, _, _| Push::Full));
        assert!(q.send(2, nack(9, 3), &[], |_, _, _| panic!("must queue behind")));
        assert_eq!(q.len(), 2);
        let mut room = 1;
        q.flush(|_, r, p| {
            if room == 0 {
                return Push::Full;
            }
            room -= 1;
            sent.push(r.cookie);
            assert_eq!(p, b"xy", "the payload was kept");
            Push::Done
        });
        assert_eq!(q.len(), 1, "stopped at the full ring");
        q.flush(|_, r, _| {
            sent.push(r.cookie);
            Push::Done
        });
        assert!(q.is_empty());
        assert_eq!(sent, vec![1, 2, 3]);
    }

    #[test]
    fn a_dead_peers_entries_are_forgotten_and_the_rest_keep_their_order() {
        let mut q = CtrlQueue::new();
        for (to, c) in [(1, 1), (2, 2), (1, 3), (3, 4)] {
            q.send(to, ack(9, c, 0), &[], |_, _, _| Push::Full);
        }
        assert!(q.holds_for(1) && q.holds_for(3) && !q.holds_for(4));
        assert_eq!(q.forget(1), 2);
        assert!(!q.holds_for(1));
        let mut sent = Vec::new();
        q.flush(|_, r, _| {
            sent.push(r.cookie);
            Push::Done
        });
        assert_eq!(sent, vec![2, 4]);
    }

    #[test]
    fn answers_carry_their_fields() {
        let a = ack(7, 42, 104);
        assert_eq!((a.op, a.src, a.cookie, a.data), (op::ACK, 7, 42, 104));
        let c = cts(7, 42, 3, 9);
        assert_eq!((c.op, c.tag, c.data), (op::CTS, 3, 9));
        let r = rma_answer(7, 42, 0);
        assert_eq!((r.op, r.flags), (op::RMA_RESP, flag::LAST));
        assert_eq!(nack(7, 42).op, op::NACK);
    }
}
