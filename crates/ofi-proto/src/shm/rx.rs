//! The receive side's matching state: posted receives, unexpected
//! messages and their budget, multi-receive buffers.

use ofi_base::consts::FI_MULTI_RECV;
use ofi_base::matching::{MatchQueues, PostedRecv, Unexpected};

/// A posted receive a message takes.
#[derive(Clone, Copy, Debug, Default)]
pub struct Claimed {
    /// The receive (a copy, for a multi-receive buffer that stays posted).
    pub recv: PostedRecv,
    /// Where the message goes in its buffer (multi-receive offset).
    pub offset: usize,
    /// Room for the message there.
    pub room: usize,
    /// `FI_MULTI_RECV` when this message ends a multi-receive buffer.
    pub flags: u64,
}

/// Posted receives and unexpected messages (payloads of type `P`).
#[derive(Debug)]
pub struct RxState<P> {
    /// The match queues.
    pub mq: MatchQueues<P>,
    unexpected: usize,
    max_unexpected: usize,
    /// FI_OPT_MIN_MULTI_RECV.
    pub min_multi_recv: usize,
}

impl<P> RxState<P> {
    /// Queues of `depth` entries; at most `max_unexpected` unexpected
    /// messages are held before the endpoint stops reading its ring.
    pub fn new(depth: usize, max_unexpected: usize) -> Self {
        RxState {
            mq: MatchQueues::new(depth),
            unexpected: 0,
            max_unexpected: max_unexpected.max(1),
            min_multi_recv: 0,
        }
    }

    /// True while the unexpected budget allows reading more entries.
    #[inline]
    pub fn may_read(&self) -> bool {
        self.unexpected < self.max_unexpected
    }

    /// Unexpected messages held.
    pub fn unexpected(&self) -> usize {
        self.unexpected
    }

    /// Holds a message no receive matched.
    pub fn hold(&mut self, tagged: bool, u: Unexpected<P>) {
        self.unexpected += 1;
        self.mq.push_unexpected(tagged, u);
    }

    /// Takes unexpected message `i` (from a find).
    pub fn take_unexpected(&mut self, tagged: bool, i: usize) -> Option<Unexpected<P>> {
        let u = self.mq.take_unexpected(tagged, i)?;
        self.unexpected = self.unexpected.saturating_sub(1);
        Some(u)
    }

    /// Takes posted receive `i` for a message of `total` bytes: a plain
    /// receive leaves the queue; a multi-receive buffer gives up room and
    /// leaves once less than the minimum remains.
    pub fn claim_posted(&mut self, tagged: bool, i: usize, total: usize) -> Claimed {
        let min = self.min_multi_recv;
        let Some(r) = self.mq.posted_mut(tagged, i) else {
            return Claimed::default();
        };
        if r.flags & FI_MULTI_RECV == 0 {
            let recv = self.mq.take_posted(tagged, i).unwrap_or_default();
            return Claimed {
                recv,
                offset: 0,
                room: recv.len,
                flags: 0,
            };
        }
        let (offset, room, done) = consume_multi(r, total, min);
        let recv = *r;
        if done {
            self.mq.take_posted(tagged, i);
        }
        Claimed {
            recv,
            offset,
            room,
            flags: if done { FI_MULTI_RECV } else { 0 },
        }
    }
}

/// Gives a message of `total` bytes its place in multi-receive buffer `r`:
/// returns its offset, its room, and whether the buffer is now done (less
/// than `min` bytes left, at least one).
pub fn consume_multi(r: &mut PostedRecv, total: usize, min: usize) -> (usize, usize, bool) {
    let off = r.consumed;
    let room = r.len - off;
    r.consumed += total.min(room);
    (off, room, r.len - r.consumed < min.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ofi_base::consts::FI_ADDR_UNSPEC;

    fn multi(len: usize) -> PostedRecv {
        PostedRecv {
            iov_cnt: 1,
            len,
            src: FI_ADDR_UNSPEC,
            flags: FI_MULTI_RECV,
            context: 5,
            ..Default::default()
        }
    }

    #[test]
    fn a_multi_receive_buffer_fills_then_leaves() {
        let mut rx = RxState::<()>::new(8, 4);
        rx.min_multi_recv = 100;
        rx.mq.post(false, multi(1000));
        let a = rx.claim_posted(false, 0, 400);
        assert_eq!((a.offset, a.room, a.flags), (0, 1000, 0));
        let b = rx.claim_posted(false, 0, 550);
        assert_eq!((b.offset, b.room), (400, 600));
        assert_eq!(b.flags, FI_MULTI_RECV, "50 left < 100: the buffer is done");
        assert_eq!(rx.mq.posted_len(false), 0);
    }

    #[test]
    fn a_plain_receive_leaves_at_once() {
        let mut rx = RxState::<()>::new(8, 4);
        rx.mq.post(
            true,
            PostedRecv {
                len: 64,
                ..Default::default()
            },
        );
        let c = rx.claim_posted(true, 0, 100);
        assert_eq!((c.offset, c.room, c.flags), (0, 64, 0));
        assert_eq!(rx.mq.posted_len(true), 0);
        assert_eq!(rx.claim_posted(true, 0, 1).room, 0, "nothing posted");
    }

    #[test]
    fn the_unexpected_budget_stops_reading() {
        let mut rx = RxState::<u32>::new(8, 2);
        let u = |p| Unexpected {
            src: 1,
            tag: 0,
            data: 0,
            flags: 0,
            len: 1,
            claimed: None,
            payload: p,
        };
        assert!(rx.may_read());
        rx.hold(false, u(1));
        rx.hold(false, u(2));
        assert!(!rx.may_read(), "budget spent");
        assert_eq!(rx.take_unexpected(false, 0).map(|x| x.payload), Some(1));
        assert!(rx.may_read());
        assert_eq!(rx.unexpected(), 1);
    }
}
