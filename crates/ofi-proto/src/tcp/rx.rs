//! The receive side of an endpoint: posted receives and unexpected messages
//! (a [`MatchQueues<Pending>`]) plus what the matcher cannot hold by itself —
//! the unexpected-byte budget, multi-receive bookkeeping, rendezvous matched
//! on behalf of a connection, and the receive completion queue.
//!
//! One `Rx` serves every connection of an endpoint: a MSG endpoint has one
//! connection, an RDM endpoint has one per peer and they all match against
//! the same queues. Connection calls that can match or complete a receive
//! take `&mut Rx`; the driver owns both and lends the `Rx` to whichever
//! connection it is driving.
//!
//! Receiving follows libfabric (and the shm provider): receives match in
//! posting order, messages in arrival order; `FI_PEEK` / `FI_CLAIM` /
//! `FI_DISCARD` on tagged receives; `FI_MULTI_RECV` on one untagged buffer;
//! directed receive through the receive's source address; cancel by
//! context. Messages that arrive before their receive wait as unexpected:
//! an eager message with its bytes (counted against
//! [`RxConfig::max_unexpected_bytes`]), a rendezvous message as its RTS only.
//! The budget is per endpoint and shared fairly per connection (see
//! `has_room` in `feed`); the stopping is per connection.

use super::event::{Event, RecvDone};
use super::one_sided::Memory;
use super::ConnId;
use ofi_base::consts::{
    FI_CLAIM, FI_DISCARD, FI_MSG, FI_MULTI_RECV, FI_PEEK, FI_RECV, FI_REMOTE_CQ_DATA, FI_TAGGED,
};
use ofi_base::error::errno;
use ofi_base::iov::{iov_len, IoVec};
use ofi_base::matching::{MatchQueues, PostedRecv, SharedRecvQueue, MAX_IOV};
use std::collections::VecDeque;
use std::sync::Arc;

mod bound;
mod feed;

pub(crate) use bound::{clip, Bound, MatchedRts, Meta};

/// Budget charged for an unexpected rendezvous request (it holds no payload,
/// but a flood of them must still meet backpressure).
pub const RTS_COST: usize = 64;

/// Receive-side tunables of an endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RxConfig {
    /// Unexpected bytes held before connections stop reading (backpressure).
    pub max_unexpected_bytes: usize,
    /// `FI_OPT_MIN_MULTI_RECV`: a multi-receive buffer is released once less
    /// than this much room is left (at least 1).
    pub min_multi_recv: usize,
    /// Initial capacity of each queue.
    pub depth: usize,
}

impl Default for RxConfig {
    fn default() -> Self {
        RxConfig {
            max_unexpected_bytes: 4 << 20,
            min_multi_recv: 0,
            depth: 64,
        }
    }
}

/// What an unexpected message holds while it waits for a receive.
#[derive(Debug, PartialEq, Eq)]
pub enum Pending {
    /// An eager message's whole payload.
    Eager {
        /// The whole payload.
        bytes: Vec<u8>,
        /// The connection it came on (whose budget it is charged to).
        conn: ConnId,
    },
    /// An eager message whose sender waits for an acknowledgement once it
    /// is placed (`FI_MATCH_COMPLETE`).
    EagerAcked {
        /// The whole payload.
        bytes: Vec<u8>,
        /// The connection it came on.
        conn: ConnId,
        /// The sender's request id.
        id: u64,
    },
    /// A rendezvous request: the payload stays with the sender until a
    /// receive matches and the connection sends CTS.
    Rndv {
        /// The connection the RTS came on.
        conn: ConnId,
        /// The sender's rendezvous id.
        id: u64,
        /// The sender waits for an acknowledgement once it is placed.
        acked: bool,
    },
    /// A claimed (`FI_PEEK | FI_CLAIM`) rendezvous whose connection died:
    /// the claiming receive completes with an error.
    Lost,
}

/// A receive as the driver posts it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecvReq {
    /// Destination ranges.
    pub iov: [IoVec; MAX_IOV],
    /// Entries of `iov` in use.
    pub iov_cnt: usize,
    /// Tagged queue (else the message queue).
    pub tagged: bool,
    /// Tag (tagged).
    pub tag: u64,
    /// Ignore bits (tagged).
    pub ignore: u64,
    /// Accepted source fi_addr, `FI_ADDR_UNSPEC` for any (directed receive).
    pub src: u64,
    /// The caller's context.
    pub context: usize,
    /// `FI_PEEK`, `FI_CLAIM`, `FI_DISCARD`, `FI_MULTI_RECV`, `FI_COMPLETION` …
    pub flags: u64,
}

impl RecvReq {
    /// A message-queue receive from any source.
    pub fn msg(iov: &[IoVec], context: usize) -> Self {
        let mut r = RecvReq {
            src: ofi_base::consts::FI_ADDR_UNSPEC,
            context,
            ..Default::default()
        };
        r.set_iov(iov);
        r
    }
    /// A tagged receive from any source.
    pub fn tagged(iov: &[IoVec], tag: u64, ignore: u64, context: usize) -> Self {
        let mut r = RecvReq::msg(iov, context);
        r.tagged = true;
        r.tag = tag;
        r.ignore = ignore;
        r
    }
    /// Restricts the source (directed receive).
    pub fn from_src(mut self, src: u64) -> Self {
        self.src = src;
        self
    }
    /// Sets operation flags.
    pub fn with_flags(mut self, flags: u64) -> Self {
        self.flags = flags;
        self
    }
    /// Sets the ranges (at most [`MAX_IOV`]; more make `post_recv` fail).
    pub fn set_iov(&mut self, iov: &[IoVec]) {
        let n = iov.len().min(MAX_IOV);
        self.iov = [IoVec::default(); MAX_IOV];
        self.iov[..n].copy_from_slice(&iov[..n]);
        self.iov_cnt = iov.len();
    }
    fn posted(&self) -> PostedRecv {
        let cnt = self.iov_cnt.min(MAX_IOV);
        PostedRecv {
            iov: self.iov,
            iov_cnt: cnt,
            len: iov_len(&self.iov[..cnt]),
            src: self.src,
            tag: self.tag,
            ignore: if self.tagged { self.ignore } else { 0 },
            context: self.context,
            flags: self.flags,
            consumed: 0,
        }
    }
}

#[derive(Debug)]
struct MultiState {
    context: usize,
    /// Messages placed or being placed that have not completed.
    inflight: usize,
    /// No more messages will be placed.
    released: bool,
}

/// The shared receive context an endpoint is bound to: its receives serve
/// messages none of the endpoint's own receives takes.
#[derive(Debug)]
struct SharedSlot {
    q: Arc<dyn SharedRecvQueue>,
    /// This endpoint's number with the context.
    member: usize,
    /// The context's generation when the unexpected messages were last
    /// offered to it.
    seen: u64,
}

/// The endpoint's registered memory, if it is an RMA target.
struct MemSlot(Option<Box<dyn Memory>>);

impl std::fmt::Debug for MemSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Memory" } else { "None" })
    }
}

/// The receive side of an endpoint (see the module documentation).
#[derive(Debug)]
pub struct Rx {
    mq: MatchQueues<Pending>,
    cfg: RxConfig,
    unexpected_bytes: usize,
    /// Unexpected bytes held per connection (only connections holding some).
    held: Vec<(ConnId, usize)>,
    events: VecDeque<Event>,
    matched: Vec<MatchedRts>,
    wake: VecDeque<ConnId>,
    blocked: Vec<ConnId>,
    multi: Vec<MultiState>,
    pool: Vec<Vec<u8>>,
    memory: MemSlot,
    acks: Vec<(ConnId, u64)>,
    shared: Option<SharedSlot>,
}

const POOL_MAX: usize = 64;

impl Rx {
    /// Empty queues.
    pub fn new(cfg: RxConfig) -> Self {
        Rx {
            mq: MatchQueues::new(cfg.depth),
            cfg,
            unexpected_bytes: 0,
            held: Vec::new(),
            events: VecDeque::new(),
            matched: Vec::new(),
            wake: VecDeque::new(),
            blocked: Vec::new(),
            multi: Vec::new(),
            pool: Vec::new(),
            memory: MemSlot(None),
            acks: Vec::new(),
            shared: None,
        }
    }

    /// Binds the endpoint to a shared receive context, as its member
    /// number `member`: a message that none of the endpoint's own
    /// receives takes goes to the context's oldest receive that accepts
    /// it, and waits as unexpected (within the same budget) while there
    /// is none. Receives then complete on this endpoint, as its own do.
    pub fn set_shared(&mut self, q: Arc<dyn SharedRecvQueue>, member: usize) {
        self.shared = Some(SharedSlot {
            seen: q.generation(),
            q,
            member,
        });
    }

    /// Offers the unexpected messages, oldest first, to the shared receive
    /// context (after a receive was posted to it): each one a receive
    /// there accepts is placed into it. True if any was.
    pub fn rescan_shared(&mut self) -> bool {
        let Some(slot) = self.shared.as_mut() else {
            return false;
        };
        slot.seen = slot.q.generation();
        let (q, member) = (slot.q.clone(), slot.member);
        let mut any = false;
        for tagged in [false, true] {
            let mut i = 0;
            while let Some(u) = self.mq.unexpected_mut(tagged, i) {
                if u.claimed.is_some() || matches!(u.payload, Pending::Lost) {
                    i += 1;
                    continue;
                }
                let Some(p) = q.take(member, tagged, u.src, u.tag) else {
                    i += 1;
                    continue;
                };
                let Some(u) = self.mq.take_unexpected(tagged, i) else {
                    break;
                };
                let b = Bound::new(&p, 0, p.len, u.len, Meta::of(&u, tagged), false);
                self.deliver(u.payload, b);
                any = true;
            }
        }
        any
    }

    /// A message none of the endpoint's own receives takes: the shared
    /// context's oldest receive that accepts it, if the endpoint is bound
    /// to one. Older unexpected messages of its queue are offered first
    /// when receives were posted since they last were (they keep their
    /// turn).
    #[inline(never)]
    pub(crate) fn match_shared(&mut self, meta: &Meta, total: usize) -> Option<Bound> {
        let slot = self.shared.as_ref()?;
        if slot.q.generation() != slot.seen && self.mq.unexpected_len(meta.tagged) > 0 {
            self.rescan_shared();
        }
        let slot = self.shared.as_ref()?;
        let p = slot.q.take(slot.member, meta.tagged, meta.src, meta.tag)?;
        Some(Bound::new(&p, 0, p.len, total, *meta, false))
    }

    /// Makes the endpoint a target of one-sided requests: peers' writes,
    /// reads and atomics run against `memory` (`None`: they are refused
    /// with `FI_EOPNOTSUPP`).
    pub fn set_memory(&mut self, memory: Option<Box<dyn Memory>>) {
        self.memory = MemSlot(memory);
    }

    /// The target memory, if any.
    pub(crate) fn memory(&mut self) -> Option<&mut (dyn Memory + 'static)> {
        self.memory.0.as_deref_mut()
    }

    /// Queues a receive-side event (remote CQ data).
    pub(crate) fn push_event(&mut self, e: Event) {
        self.events.push_back(e);
    }

    /// Acknowledges request `id` of the sender on `conn` (its message was
    /// received or placed); the connection sends RESP when next driven.
    pub(crate) fn queue_ack(&mut self, conn: ConnId, id: u64) {
        self.acks.push((conn, id));
        self.wake(conn);
    }

    /// The next acknowledgement `conn` has to send.
    pub(crate) fn take_ack(&mut self, conn: ConnId) -> Option<u64> {
        let i = self.acks.iter().position(|(c, _)| *c == conn)?;
        Some(self.acks.remove(i).1)
    }

    /// The tunables.
    pub fn config(&self) -> &RxConfig {
        &self.cfg
    }

    /// Sets `FI_OPT_MIN_MULTI_RECV`.
    pub fn set_min_multi_recv(&mut self, n: usize) {
        self.cfg.min_multi_recv = n;
    }

    /// The matcher (read-only: for inspection and tests).
    pub fn queues(&self) -> &MatchQueues<Pending> {
        &self.mq
    }

    /// Unexpected bytes held now (eager payloads, being read or waiting,
    /// plus [`RTS_COST`] per unexpected rendezvous).
    pub fn unexpected_bytes(&self) -> usize {
        self.unexpected_bytes
    }

    /// The next receive completion.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// True when a receive completion waits for [`poll_event`](Self::poll_event).
    pub fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    /// A connection that has work since it was last driven: a rendezvous
    /// to answer with CTS, or a message it parked that may now be placed.
    /// Drive it (`poll_transmit`, `recv_target`) when this names it.
    pub fn next_wakeup(&mut self) -> Option<ConnId> {
        self.wake.pop_front()
    }

    /// True when [`next_wakeup`](Self::next_wakeup) would name a connection.
    pub fn has_wakeups(&self) -> bool {
        !self.wake.is_empty()
    }

    /// True when some connection has something to send on the receive
    /// side's behalf (an acknowledgement, the CTS of a matched rendezvous).
    pub fn owes_frames(&self) -> bool {
        !self.acks.is_empty() || !self.matched.is_empty()
    }

    /// True when something here still needs connection `conn`: an
    /// acknowledgement or CTS it owes, a message it parked waiting for a
    /// wakeup, an unexpected rendezvous or acknowledged eager message of
    /// its sender. (Plain unexpected eager messages need nothing more of
    /// it.) A connection something refers to must not be let go quietly.
    pub fn refers_to(&mut self, conn: ConnId) -> bool {
        if self.acks.iter().any(|(c, _)| *c == conn)
            || self.matched.iter().any(|m| m.conn == conn)
            || self.blocked.contains(&conn)
            || self.wake.contains(&conn)
        {
            return true;
        }
        [false, true].into_iter().any(|tagged| {
            self.mq.unexpected_iter_mut(tagged).any(|u| {
                matches!(
                    u.payload,
                    Pending::Rndv { conn: c, .. } | Pending::EagerAcked { conn: c, .. } if c == conn
                )
            })
        })
    }

    /// Gives back a [`CopyOut`](super::CopyOut) buffer for reuse.
    pub fn recycle(&mut self, mut v: Vec<u8>) {
        if self.pool.len() < POOL_MAX && v.capacity() > 0 {
            v.clear();
            self.pool.push(v);
        }
    }

    /// Posts a receive (or peeks, claims, discards). Completions, including
    /// the error completion of a peek that finds nothing (`FI_ENOMSG`), come
    /// from [`poll_event`](Self::poll_event). Returns an FI_E* number for
    /// invalid requests: too many iov entries, `FI_MULTI_RECV` on anything
    /// but one untagged buffer (`FI_EINVAL`), peek flags on an untagged
    /// receive or `FI_DISCARD` alone (`FI_EBADFLAGS`), `FI_CLAIM` naming a
    /// context that claimed nothing (`FI_EINVAL`).
    pub fn post_recv(&mut self, req: &RecvReq) -> Result<(), i32> {
        if req.iov_cnt > MAX_IOV {
            return Err(errno::FI_EINVAL);
        }
        let multi = req.flags & FI_MULTI_RECV != 0;
        if multi && (req.iov_cnt != 1 || req.tagged) {
            return Err(errno::FI_EINVAL);
        }
        let peek = req.flags & FI_PEEK != 0;
        let claim = req.flags & FI_CLAIM != 0;
        let discard = req.flags & FI_DISCARD != 0;
        if (peek || claim || discard) && !req.tagged {
            return Err(errno::FI_EBADFLAGS);
        }
        if discard && !peek && !claim {
            return Err(errno::FI_EBADFLAGS);
        }
        let tagged = req.tagged;
        let ignore = if tagged { req.ignore } else { u64::MAX };
        if peek {
            self.peek(req, ignore, claim, discard);
            return Ok(());
        }
        if claim {
            let i = self
                .mq
                .find_claimed(true, req.context)
                .ok_or(errno::FI_EINVAL)?;
            let Some(u) = self.mq.take_unexpected(true, i) else {
                return Err(errno::FI_EINVAL);
            };
            if discard {
                let meta = Meta::of(&u, true);
                self.release(u.payload);
                self.events.push_back(Event::RecvComplete(RecvDone {
                    context: req.context,
                    flags: FI_RECV | FI_TAGGED,
                    len: 0,
                    buf: 0,
                    tag: meta.tag,
                    data: 0,
                    src: meta.src,
                    truncated_by: 0,
                    posted_flags: req.flags,
                    copy: None,
                }));
            } else {
                let p = req.posted();
                let b = Bound::new(&p, 0, p.len, u.len, Meta::of(&u, true), false);
                self.deliver(u.payload, b);
            }
            return Ok(());
        }
        // A new receive may take a message a connection parked.
        self.wake_blocked();
        if multi {
            self.post_multi(req);
            return Ok(());
        }
        if let Some(i) = self.mq.find_unexpected(tagged, req.src, req.tag, ignore) {
            if let Some(u) = self.mq.take_unexpected(tagged, i) {
                let p = req.posted();
                let b = Bound::new(&p, 0, p.len, u.len, Meta::of(&u, tagged), false);
                self.deliver(u.payload, b);
                return Ok(());
            }
        }
        self.mq.post(tagged, req.posted());
        Ok(())
    }

    fn peek(&mut self, req: &RecvReq, ignore: u64, claim: bool, discard: bool) {
        let Some(i) = self.mq.find_unexpected(true, req.src, req.tag, ignore) else {
            self.events.push_back(Event::RecvError {
                context: req.context,
                err: errno::FI_ENOMSG,
                flags: FI_RECV | FI_TAGGED,
                tag: req.tag,
            });
            return;
        };
        let Some(u) = self.mq.unexpected_mut(true, i) else {
            return;
        };
        let done = RecvDone {
            context: req.context,
            flags: FI_RECV | FI_TAGGED | (u.flags & FI_REMOTE_CQ_DATA),
            len: u.len,
            buf: 0,
            tag: u.tag,
            data: u.data,
            src: u.src,
            truncated_by: 0,
            posted_flags: req.flags,
            copy: None,
        };
        if discard {
            if let Some(u) = self.mq.take_unexpected(true, i) {
                self.release(u.payload);
            }
        } else if claim {
            u.claimed = Some(req.context);
        }
        self.events.push_back(Event::RecvComplete(done));
    }

    /// A multi-receive buffer takes unexpected messages first, then waits.
    fn post_multi(&mut self, req: &RecvReq) {
        let mut posted = req.posted();
        let min = self.cfg.min_multi_recv.max(1);
        while let Some(i) = self.mq.find_unexpected(false, req.src, 0, u64::MAX) {
            let Some(u) = self.mq.take_unexpected(false, i) else {
                break;
            };
            let off = posted.consumed;
            let cap = posted.len - off;
            posted.consumed += u.len.min(cap);
            let done = posted.len - posted.consumed < min;
            self.multi_claim(req.context, done);
            let b = Bound::new(&posted, off, cap, u.len, Meta::of(&u, false), true);
            self.deliver(u.payload, b);
            if done {
                return;
            }
        }
        self.mq.post(false, posted);
    }

    /// Cancels the posted receive with this context (`FI_ENOENT` if none is
    /// posted: receives already matched to a message cannot be cancelled).
    pub fn cancel(&mut self, context: usize) -> Result<(), i32> {
        let (tagged, r) = self.mq.cancel(context).ok_or(errno::FI_ENOENT)?;
        let mut flags = FI_RECV | if tagged { FI_TAGGED } else { FI_MSG };
        if r.flags & FI_MULTI_RECV != 0 && self.multi_retire(context) {
            flags |= FI_MULTI_RECV;
        }
        self.events.push_back(Event::RecvCanceled {
            context,
            flags,
            tag: r.tag,
        });
        Ok(())
    }

    /// Every posted receive fails with `err` (nothing more will arrive:
    /// the only peer of an MSG endpoint is gone); unexpected messages
    /// already whole stay, for receives posted later.
    pub fn fail_posted(&mut self, err: i32) {
        for tagged in [false, true] {
            while let Some(r) = self.mq.take_posted(tagged, 0) {
                let mut flags = FI_RECV | if tagged { FI_TAGGED } else { FI_MSG };
                if r.flags & FI_MULTI_RECV != 0 && self.multi_retire(r.context) {
                    flags |= FI_MULTI_RECV;
                }
                self.events.push_back(Event::RecvError {
                    context: r.context,
                    err,
                    flags,
                    tag: r.tag,
                });
            }
        }
    }

    /// Endpoint close: every posted receive and every receive matched to a
    /// rendezvous not yet picked up fails with `err`; unexpected messages
    /// are dropped. (Receives a connection is filling fail when the driver
    /// closes that connection.)
    pub fn close(&mut self, err: i32) {
        self.fail_posted(err);
        for tagged in [false, true] {
            while let Some(u) = self.mq.take_unexpected(tagged, 0) {
                if let Pending::Eager { bytes: v, .. } | Pending::EagerAcked { bytes: v, .. } =
                    u.payload
                {
                    self.recycle(v);
                }
            }
        }
        self.unexpected_bytes = 0;
        self.held.clear();
        self.acks.clear();
        for m in std::mem::take(&mut self.matched) {
            if let Some(b) = m.bound {
                self.fail(&b, err);
            }
        }
        self.blocked.clear();
        self.wake.clear();
    }

    /// The peer at `src` was declared dead (see `ofi_base::peer`):
    /// every receive posted for that source alone fails with `err`;
    /// receives from any source stay posted. Returns how many failed.
    pub fn fail_directed(&mut self, src: u64, err: i32) -> usize {
        let mut n = 0;
        for tagged in [false, true] {
            while let Some(r) = self.mq.take_posted_from(tagged, src) {
                let mut flags = FI_RECV | if tagged { FI_TAGGED } else { FI_MSG };
                if r.flags & FI_MULTI_RECV != 0 && self.multi_retire(r.context) {
                    flags |= FI_MULTI_RECV;
                }
                self.events.push_back(Event::RecvError {
                    context: r.context,
                    err,
                    flags,
                    tag: r.tag,
                });
                n += 1;
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_skips_offset_and_empty_entries() {
        let iov = [
            IoVec { base: 100, len: 4 },
            IoVec { base: 200, len: 0 },
            IoVec { base: 300, len: 10 },
        ];
        let mut out = [IoVec::default(); MAX_IOV];
        let n = clip(&iov, 2, 5, &mut out);
        assert_eq!(
            &out[..n],
            &[IoVec { base: 102, len: 2 }, IoVec { base: 300, len: 3 }]
        );
        assert_eq!(clip(&iov, 14, 5, &mut out), 0);
        assert_eq!(clip(&iov, 0, 0, &mut out), 0);
    }

    #[test]
    fn a_dead_peer_fails_only_the_receives_directed_at_it() {
        let mut rx = Rx::new(RxConfig::default());
        let v = [IoVec { base: 8, len: 8 }];
        rx.post_recv(&RecvReq::tagged(&v, 1, 0, 10).from_src(7))
            .unwrap();
        rx.post_recv(&RecvReq::msg(&v, 11)).unwrap();
        rx.post_recv(&RecvReq::msg(&v, 12).from_src(7)).unwrap();
        rx.post_recv(&RecvReq::msg(&v, 13).from_src(8)).unwrap();
        assert_eq!(rx.fail_directed(7, errno::FI_ECONNRESET), 2);
        let mut failed = Vec::new();
        while let Some(e) = rx.poll_event() {
            match e {
                Event::RecvError { context, err, .. } => {
                    assert_eq!(err, errno::FI_ECONNRESET);
                    failed.push(context);
                }
                e => panic!("unexpected {e:?}"),
            }
        }
        failed.sort_unstable();
        assert_eq!(failed, [10, 12]);
        assert_eq!(rx.queues().posted_len(false), 2, "11 and 13 stay posted");
        assert_eq!(rx.fail_directed(7, errno::FI_ECONNRESET), 0);
    }

    #[test]
    fn invalid_requests_are_refused() {
        let mut rx = Rx::new(RxConfig::default());
        let v = [IoVec { base: 8, len: 8 }; 2];
        assert_eq!(
            rx.post_recv(&RecvReq::tagged(&v[..1], 0, 0, 1).with_flags(FI_MULTI_RECV)),
            Err(errno::FI_EINVAL)
        );
        assert_eq!(
            rx.post_recv(&RecvReq::msg(&v, 1).with_flags(FI_MULTI_RECV)),
            Err(errno::FI_EINVAL)
        );
        assert_eq!(
            rx.post_recv(&RecvReq::msg(&v, 1).with_flags(FI_PEEK)),
            Err(errno::FI_EBADFLAGS)
        );
        assert_eq!(
            rx.post_recv(&RecvReq::tagged(&v, 0, 0, 1).with_flags(FI_DISCARD)),
            Err(errno::FI_EBADFLAGS)
        );
        assert_eq!(
            rx.post_recv(&RecvReq::tagged(&v, 0, 0, 1).with_flags(FI_CLAIM)),
            Err(errno::FI_EINVAL)
        );
        let mut r = RecvReq::msg(&v, 1);
        r.iov_cnt = 5;
        assert_eq!(rx.post_recv(&r), Err(errno::FI_EINVAL));
        assert_eq!(rx.cancel(1), Err(errno::FI_ENOENT));
        assert!(rx.poll_event().is_none());
    }
}
