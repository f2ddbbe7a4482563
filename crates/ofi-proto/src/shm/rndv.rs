//! Both sides of a rendezvous, as machines. The sender's ([`Sends`]): a
//! large send waits for its receiver's answer (ACK with a status: complete
//! or fail), or is told to push its data through the ring (NACK: the
//! receiver cannot copy across processes), in DATA chunks of at most one
//! entry's room, as room in the receiver's ring allows; a peer's death
//! fails exactly its sends. The receiver's ([`Reassembly`]): a receive
//! that answered NACK takes DATA chunks by offset, refuses any that reach
//! past the message or cover bytes already there, and completes exactly
//! when every byte arrived.
//!
//! Events in ([`Sends::on_ack`], [`Sends::on_nack`], [`Sends::peer_dead`],
//! [`Reassembly::on_data`]), actions out (the operation to complete or
//! fail, the chunks to push through the `emit` callback of
//! [`Sends::run_pushes`], the chunk to place through the `place` callback
//! of [`Reassembly::on_data`]); no shared memory, clocks or threads. The
//! operation `T` is the driver's (its buffers, context and peer handle);
//! the machines only hold it.

use super::{OpTable, PeerId};
use std::collections::{BTreeMap, VecDeque};

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

/// Most separate runs of bytes a reassembly holds. An honest sender
/// pushes in order (one run); a hostile one cannot make the receiver keep
/// a list as long as the message.
pub const MAX_RUNS: usize = 64;

/// Why a DATA chunk was refused: it is dropped, and the receive is left
/// as it was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BadChunk {
    /// No receive waits for this sender's cookie.
    Unknown,
    /// The chunk is empty or reaches past the message's end.
    OutOfRange,
    /// The chunk covers bytes that already arrived (a duplicate, or an
    /// overlap).
    Overlap,
    /// The chunk would leave the message in more than [`MAX_RUNS`] pieces.
    Fragmented,
}

impl std::fmt::Display for BadChunk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BadChunk::Unknown => "DATA for no pending receive",
            BadChunk::OutOfRange => "DATA empty or past the message's end",
            BadChunk::Overlap => "DATA over bytes already received",
            BadChunk::Fragmented => "DATA too scattered",
        })
    }
}

/// What [`Reassembly::start`] made of a receive.
#[derive(Debug, PartialEq, Eq)]
pub enum Started<T> {
    /// It waits for its chunks.
    Waiting,
    /// An empty message: nothing to wait for, complete it now.
    Complete(T),
    /// The sender already has a receive waiting under this cookie: refused,
    /// the operation back.
    Duplicate(T),
}

struct Recv<T> {
    sender: PeerId,
    cookie: u64,
    total: usize,
    /// Runs of bytes received: start to end, disjoint and not touching.
    runs: BTreeMap<usize, usize>,
    received: usize,
    op: T,
}

/// Receives filled by DATA chunks (the receiver answered NACK), keyed by
/// sender and cookie.
pub struct Reassembly<T> {
    recvs: Vec<Recv<T>>,
}

impl<T> Default for Reassembly<T> {
    fn default() -> Self {
        Reassembly { recvs: Vec::new() }
    }
}

impl<T> std::fmt::Debug for Reassembly<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reassembly")
            .field("receives", &self.recvs.len())
            .finish()
    }
}

impl<T> Reassembly<T> {
    /// A receive of the `total`-byte message `cookie` of `sender` now
    /// waits for its chunks.
    pub fn start(&mut self, sender: PeerId, cookie: u64, total: usize, op: T) -> Started<T> {
        if self
            .recvs
            .iter()
            .any(|r| r.sender == sender && r.cookie == cookie)
        {
            return Started::Duplicate(op);
        }
        if total == 0 {
            return Started::Complete(op);
        }
        self.recvs.push(Recv {
            sender,
            cookie,
            total,
            runs: BTreeMap::new(),
            received: 0,
            op,
        });
        Started::Waiting
    }

    /// A DATA chunk of `len` bytes at `offset` of message `cookie` from
    /// `from`. Accepted, `place` puts its bytes into the receive; the
    /// receive comes back once every byte of the message arrived.
    /// Refused (the receive untouched): unknown, out of range, over bytes
    /// already received, or too scattered.
    pub fn on_data(
        &mut self,
        from: PeerId,
        cookie: u64,
        offset: usize,
        len: usize,
        place: impl FnOnce(&mut T),
    ) -> Result<Option<T>, BadChunk> {
        let i = self
            .recvs
            .iter()
            .position(|r| r.sender == from && r.cookie == cookie)
            .ok_or(BadChunk::Unknown)?;
        let r = &mut self.recvs[i];
        let end = offset
            .checked_add(len)
            .filter(|&e| len > 0 && e <= r.total)
            .ok_or(BadChunk::OutOfRange)?;
        let before = r.runs.range(..=offset).next_back().map(|(&s, &e)| (s, e));
        let after = r.runs.range(offset + 1..).next().map(|(&s, &e)| (s, e));
        if before.is_some_and(|(_, e)| e > offset) || after.is_some_and(|(s, _)| s < end) {
            return Err(BadChunk::Overlap);
        }
        let join_before = before.filter(|&(_, e)| e == offset);
        let join_after = after.filter(|&(s, _)| s == end);
        let runs = r.runs.len() + 1
            - usize::from(join_before.is_some())
            - usize::from(join_after.is_some());
        if runs > MAX_RUNS {
            return Err(BadChunk::Fragmented);
        }
        place(&mut r.op);
        let start = join_before.map_or(offset, |(s, _)| s);
        let stop = match join_after {
            Some((s, e)) => {
                r.runs.remove(&s);
                e
            }
            None => end,
        };
        r.runs.insert(start, stop);
        r.received += len;
        if r.received < r.total {
            return Ok(None);
        }
        Ok(Some(self.recvs.swap_remove(i).op))
    }

    /// `peer` is dead: its receives end, each with the caller's error.
    pub fn peer_dead(&mut self, peer: PeerId, out: &mut Vec<T>) {
        let mut i = 0;
        while i < self.recvs.len() {
            if self.recvs[i].sender == peer {
                out.push(self.recvs.swap_remove(i).op);
            } else {
                i += 1;
            }
        }
    }

    /// True when a receive from `peer` waits.
    pub fn waits_on(&self, peer: PeerId) -> bool {
        self.recvs.iter().any(|r| r.sender == peer)
    }

    /// True when a waiting receive's operation satisfies `f`.
    pub fn any(&self, mut f: impl FnMut(&T) -> bool) -> bool {
        self.recvs.iter().any(|r| f(&r.op))
    }

    /// Bytes received so far of message `cookie` from `from`.
    pub fn received(&self, from: PeerId, cookie: u64) -> Option<usize> {
        self.recvs
            .iter()
            .find(|r| r.sender == from && r.cookie == cookie)
            .map(|r| r.received)
    }

    /// True when no receive waits.
    pub fn is_empty(&self) -> bool {
        self.recvs.is_empty()
    }

    /// Receives waiting.
    pub fn len(&self) -> usize {
        self.recvs.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `(offset, len)` chunks of message 5 from peer 1 (10 bytes);
    /// the outcome of each.
    fn feed(r: &mut Reassembly<Vec<u8>>, chunks: &[(usize, usize)]) -> Vec<Result<bool, BadChunk>> {
        chunks
            .iter()
            .map(|&(off, len)| {
                r.on_data(1, 5, off, len, |b| {
                    for (i, x) in b[off..off + len].iter_mut().enumerate() {
                        *x = (off + i) as u8;
                    }
                })
                .map(|done| done.is_some())
            })
            .collect()
    }

    #[test]
    fn chunks_in_any_order_complete_exactly_once() {
        let mut r = Reassembly::default();
        assert_eq!(r.start(1, 5, 10, vec![0xffu8; 10]), Started::Waiting);
        let got = feed(&mut r, &[(6, 4), (0, 3), (3, 3)]);
        assert_eq!(got, [Ok(false), Ok(false), Ok(true)]);
        assert!(r.is_empty());
        assert_eq!(feed(&mut r, &[(0, 1)]), [Err(BadChunk::Unknown)]);
    }

    #[test]
    fn a_duplicate_or_overlapping_chunk_never_completes_a_receive_early() {
        let mut r = Reassembly::default();
        r.start(1, 5, 10, vec![0u8; 10]);
        let got = feed(
            &mut r,
            &[(0, 4), (0, 4), (2, 4), (3, 1), (8, 2), (7, 2), (4, 4)],
        );
        use BadChunk::*;
        assert_eq!(
            got,
            [
                Ok(false),
                Err(Overlap),
                Err(Overlap),
                Err(Overlap),
                Ok(false),
                Err(Overlap),
                Ok(true)
            ]
        );
    }

    #[test]
    fn chunks_out_of_the_message_are_refused() {
        let mut r = Reassembly::default();
        r.start(1, 5, 10, vec![0u8; 10]);
        use BadChunk::*;
        assert_eq!(
            feed(&mut r, &[(8, 3), (10, 1), (0, 0)]),
            [Err(OutOfRange), Err(OutOfRange), Err(OutOfRange)]
        );
        let huge = r.on_data(1, 5, usize::MAX, 2, |_| panic!("placed"));
        assert_eq!(huge, Err(OutOfRange));
        assert_eq!(r.on_data(2, 5, 0, 1, |_| panic!("placed")), Err(Unknown));
        assert_eq!(r.received(1, 5), Some(0), "untouched");
    }

    #[test]
    fn scattered_chunks_are_bounded() {
        let mut r = Reassembly::default();
        r.start(1, 5, 4 * MAX_RUNS, ());
        for i in 0..MAX_RUNS {
            assert_eq!(r.on_data(1, 5, 4 * i, 1, |_| ()), Ok(None));
        }
        assert_eq!(
            r.on_data(1, 5, 2, 1, |_| ()),
            Err(BadChunk::Fragmented),
            "a new run past the bound"
        );
        assert_eq!(r.on_data(1, 5, 1, 1, |_| ()), Ok(None), "a run that grows");
    }

    #[test]
    fn empty_duplicate_and_dead_receives() {
        let mut r = Reassembly::default();
        assert_eq!(r.start(1, 5, 0, 'e'), Started::Complete('e'));
        assert_eq!(r.start(1, 5, 8, 'a'), Started::Waiting);
        assert_eq!(r.start(1, 5, 8, 'b'), Started::Duplicate('b'));
        assert_eq!(r.start(2, 5, 8, 'c'), Started::Waiting);
        let mut out = Vec::new();
        r.peer_dead(1, &mut out);
        assert_eq!(out, ['a']);
        assert!(!r.waits_on(1) && r.waits_on(2));
        assert_eq!(r.len(), 1);
    }

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
