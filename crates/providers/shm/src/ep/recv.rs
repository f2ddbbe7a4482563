//! Receives: posting (with FI_PEEK, FI_CLAIM, FI_DISCARD and multi-receive
//! buffers), matching arriving messages against posted receives through the
//! core's [`RxState`](ofi_proto::shm::RxState), holding unexpected ones,
//! delivering inline and bounce-buffer bytes, and reassembling DATA pushes.

use super::{rx_flags, Inner, Meta, Payload, ShmEndpoint};
use crate::IOV_LIMIT;
use ofi_core::consts::*;
use ofi_core::error::{errno, Error, Result};
use ofi_core::object::RecvOp;
use ofi_core::util::cq::CqTaggedEntry;
use ofi_core::util::iov::{copy_to_iov, iov_len, IoVec};
use ofi_core::util::matching::{PostedRecv, SharedRecvQueue, Unexpected, MAX_IOV};
use ofi_proto::shm::entry::MsgMeta;
use ofi_proto::shm::{ack, consume_multi, Body};

/// Inline payload vectors kept for reuse.
const POOL_MAX: usize = 256;

/// A receive's destination as `deliver` takes it.
pub(super) struct Dest<'a> {
    pub(super) iov: &'a [IoVec],
    /// Multi-receive offset.
    pub(super) off: usize,
    /// Room at `off`.
    pub(super) cap: usize,
    pub(super) context: usize,
    /// Completion flags beyond the message's own (FI_MULTI_RECV).
    pub(super) flags: u64,
    pub(super) completion: bool,
}

impl ShmEndpoint {
    /// Offers a whole untagged message to the bound receive hook (a
    /// composing provider that matches for this endpoint) when no earlier
    /// untagged message is held here or still arriving (matched, its bytes
    /// pushed in pieces): true when the hook took it. The hook's provider
    /// sees the messages in the order they came.
    pub(super) fn hooked(&self, g: &Inner, m: &Meta, bytes: &[u8]) -> bool {
        match &g.b.rx_hook {
            Some(h)
                if !m.tagged
                    && g.rx.mq.unexpected_len(false) == 0
                    && (g.reasm.is_empty() || !g.reasm.any(|x| !x.meta.tagged)) =>
            {
                h.arrived(
                    m.src_addr,
                    m.cq_data.then_some(m.data),
                    &bytes[..m.total.min(bytes.len())],
                )
            }
            _ => false,
        }
    }

    /// The common delivery, on its own: a whole inline message from the
    /// last sender into a plain posted receive (no multi-receive buffer,
    /// no receive hook, no source address to resolve). False, with nothing
    /// done, when anything else applies: [`incoming`](Self::incoming)
    /// takes the message then.
    #[inline]
    pub(super) fn take_inline(&self, g: &mut Inner, m: &MsgMeta, bytes: &[u8]) -> bool {
        if g.need_src || g.b.rx_hook.is_some() {
            return false;
        }
        let Some(i) = g.rx.mq.find_posted(m.tagged, FI_ADDR_NOTAVAIL, m.tag) else {
            return false;
        };
        let Some(r) = g.rx.mq.posted_mut(m.tagged, i) else {
            return false;
        };
        if r.flags & FI_MULTI_RECV != 0 || r.len < m.total {
            return false;
        }
        // SAFETY: post_recv's caller keeps the receive iov valid until completion.
        let n = unsafe { copy_to_iov(r.iov(), 0, bytes) };
        let (context, flags, buf) = (r.context, r.flags, r.iov().first().map_or(0, |v| v.base));
        g.rx.mq.drop_posted(m.tagged, i);
        if flags & FI_COMPLETION != 0 || !g.b.rx_selective {
            if let Some(cq) = &g.b.rx_cq {
                cq.push(
                    CqTaggedEntry {
                        op_context: context,
                        flags: FI_RECV
                            | if m.tagged { FI_TAGGED } else { FI_MSG }
                            | if m.cq_data { FI_REMOTE_CQ_DATA } else { 0 },
                        len: n,
                        buf,
                        data: m.data,
                        tag: m.tag,
                    },
                    FI_ADDR_NOTAVAIL,
                );
            }
        }
        if let Some(c) = &g.b.recv_cntr {
            c.add(1);
        }
        true
    }

    /// A message arrived: match a posted receive or hold it as unexpected
    /// (on an endpoint bound to a shared receive context, the progress
    /// pass then offers held messages to the context: `offer_held`).
    pub(super) fn incoming(&self, g: &mut Inner, from: u64, m: Meta, body: Body<'_>) {
        let Some(i) = g.rx.mq.find_posted(m.tagged, m.src_addr, m.tag) else {
            let payload = match body {
                Body::Inline(b) => {
                    let mut v = g.pool.pop().unwrap_or_default();
                    v.clear();
                    v.extend_from_slice(&b[..m.total.min(b.len())]);
                    Payload::Inline(v)
                }
                Body::Bounce(idx) => Payload::Bounce(idx),
                Body::Rts { cookie, iov, cnt } => Payload::Rts {
                    sender: from,
                    cookie,
                    iov,
                    cnt,
                },
            };
            g.rx.hold(
                m.tagged,
                Unexpected {
                    src: m.src_addr,
                    tag: m.tag,
                    data: m.data,
                    flags: if m.cq_data { FI_REMOTE_CQ_DATA } else { 0 },
                    len: m.total,
                    claimed: None,
                    payload,
                },
            );
            return;
        };
        let c = g.rx.claim_posted(m.tagged, i, m.total);
        let completion = c.recv.flags & FI_COMPLETION != 0 || !g.b.rx_selective;
        let flags = if c.recv.flags & FI_MULTI_RECV != 0 {
            let base = c.recv.iov[0].base;
            self.multi_enter(g, c.recv.context, base, c.flags & FI_MULTI_RECV != 0)
        } else {
            c.flags
        };
        let dest = Dest {
            iov: &c.recv.iov[..c.recv.iov_cnt],
            off: c.offset,
            cap: c.room,
            context: c.recv.context,
            flags,
            completion,
        };
        self.deliver(g, &dest, m, from, body);
    }

    /// Copies a message into a receive and completes it (or starts the
    /// cross-process copy of a rendezvous).
    pub(super) fn deliver(&self, g: &mut Inner, d: &Dest<'_>, m: Meta, from: u64, body: Body<'_>) {
        let buf = d.iov.first().map_or(0, |v| v.base + d.off);
        let cq_flags = d.flags | rx_flags(&m);
        let want = m.total.min(d.cap);
        match body {
            Body::Inline(bytes) => {
                // SAFETY: post_recv's caller keeps the receive iov valid until completion.
                let n = unsafe { copy_to_iov(d.iov, d.off, &bytes[..want.min(bytes.len())]) };
                self.rx_complete(g, d.context, cq_flags, &m, n, buf, d.completion);
            }
            Body::Bounce(idx) => {
                // Dropping the token frees the buffer.
                let n = self.seg.take_bounce(idx).map(|b| {
                    let b = b.as_slice();
                    let w = want.min(b.len());
                    // SAFETY: post_recv's caller keeps the receive iov valid until completion.
                    unsafe { copy_to_iov(d.iov, d.off, &b[..w]) }
                });
                match n {
                    Some(n) => self.rx_complete(g, d.context, cq_flags, &m, n, buf, d.completion),
                    None => self.rx_error(g, d.context, cq_flags, errno::FI_EIO, m.tag),
                }
            }
            Body::Rts { cookie, iov, cnt } => {
                self.deliver_rts(g, d, m, from, cookie, &iov[..cnt as usize], cq_flags)
            }
        }
    }

    /// Delivers a held message's payload (recycling an inline vector).
    fn deliver_payload(&self, g: &mut Inner, d: &Dest<'_>, m: Meta, p: Payload) {
        match p {
            Payload::Inline(v) => {
                self.deliver(g, d, m, 0, Body::Inline(&v));
                if g.pool.len() < POOL_MAX {
                    g.pool.push(v);
                }
            }
            Payload::Bounce(idx) => self.deliver(g, d, m, 0, Body::Bounce(idx)),
            Payload::Rts {
                sender,
                cookie,
                iov,
                cnt,
            } => self.deliver(g, d, m, sender, Body::Rts { cookie, iov, cnt }),
        }
    }

    /// A chunk of a rendezvous message pushed through the ring.
    pub(super) fn data_chunk(
        &self,
        g: &mut Inner,
        from: u64,
        cookie: u64,
        at: usize,
        bytes: &[u8],
    ) {
        // The core accepts each byte of the message once, in range; the
        // part past the receive's room is dropped here.
        let placed = g.reasm.on_data(from, cookie, at, bytes.len(), |x| {
            if at < x.cap {
                let n = bytes.len().min(x.cap - at);
                // SAFETY: post_recv's caller keeps the receive iov valid until completion.
                unsafe { copy_to_iov(&x.iov[..x.cnt], x.offset + at, &bytes[..n]) };
            }
        });
        match placed {
            Ok(None) => {}
            Ok(Some(x)) => {
                self.rx_complete(
                    g,
                    x.context,
                    x.cq_flags,
                    &x.meta,
                    x.meta.total.min(x.cap),
                    x.buf,
                    x.completion,
                );
                self.send_ctrl(g, from, ack(self.me.id(), cookie, 0));
            }
            Err(why) => {
                tracing::warn!(from, cookie, offset = at, reason = %why, "shm: dropping a DATA entry");
            }
        }
    }

    /// Frees what an unexpected message holds without delivering it; a
    /// large message's sender is told `status` (0: consumed, or an FI_E* code).
    pub(super) fn release(&self, g: &mut Inner, p: Payload, status: i32) {
        match p {
            Payload::Inline(v) => {
                if g.pool.len() < POOL_MAX {
                    g.pool.push(v);
                }
            }
            // Taking the buffer and dropping the token frees it.
            Payload::Bounce(idx) => drop(self.seg.take_bounce(idx)),
            Payload::Rts { sender, cookie, .. } => {
                self.send_ctrl(g, sender, ack(self.me.id(), cookie, status))
            }
        }
    }

    /// The fields of a held message as `deliver` takes them.
    fn meta_of(tagged: bool, u: &Unexpected<Payload>) -> Meta {
        Meta {
            tagged,
            tag: u.tag,
            data: u.data,
            cq_data: u.flags & FI_REMOTE_CQ_DATA != 0,
            total: u.len,
            src_addr: u.src,
        }
    }

    /// After a progress pass that left messages held, on an endpoint bound
    /// to a shared receive context (see `ofi_core::util::srx`): offers
    /// them to the context when receives were posted there or messages
    /// were held since the last offer. Messages arriving at such an
    /// endpoint that none of its own receives takes are held first and
    /// placed from here, oldest first (an inline message is copied twice;
    /// the dispatch of ring entries stays as it is without shared
    /// contexts).
    #[inline(never)]
    pub(super) fn offer_held(&self, g: &mut Inner) {
        let held = g.rx.unexpected();
        let Some(x) = g.b.srx.as_ref() else {
            return;
        };
        if x.srx.generation() != x.seen || held != x.held {
            self.rescan_shared(g);
        }
    }

    /// Offers the held messages, oldest first, to the shared receive
    /// context: each one a receive there accepts is delivered into it.
    pub(super) fn rescan_shared(&self, g: &mut Inner) {
        let Some(x) = g.b.srx.as_mut() else {
            return;
        };
        x.seen = x.srx.generation();
        let x = x.clone();
        for tagged in [false, true] {
            let mut i = 0;
            while let Some(u) = g.rx.mq.unexpected_mut(tagged, i) {
                if u.claimed.is_some() {
                    i += 1;
                    continue;
                }
                let Some(r) = x.srx.take(x.member, tagged, u.src, u.tag) else {
                    i += 1;
                    continue;
                };
                let Some(u) = g.rx.take_unexpected(tagged, i) else {
                    break;
                };
                let completion = r.flags & FI_COMPLETION != 0 || !g.b.rx_selective;
                let d = Dest {
                    iov: r.iov(),
                    off: 0,
                    cap: r.len,
                    context: r.context,
                    flags: 0,
                    completion,
                };
                self.deliver_payload(g, &d, Self::meta_of(tagged, &u), u.payload);
            }
        }
        let held = g.rx.unexpected();
        if let Some(x) = g.b.srx.as_mut() {
            x.held = held;
        }
    }

    /// Delivers an unexpected message into a receive.
    fn deliver_unexpected(
        &self,
        g: &mut Inner,
        u: Unexpected<Payload>,
        tagged: bool,
        recv: &RecvOp<'_>,
        completion: bool,
    ) {
        let m = Self::meta_of(tagged, &u);
        let d = Dest {
            iov: recv.iov,
            off: 0,
            cap: iov_len(recv.iov),
            context: recv.context,
            flags: recv.flags & FI_MULTI_RECV,
            completion,
        };
        self.deliver_payload(g, &d, m, u.payload);
    }

    /// Posts a receive. The common one (no peek, claim, discard or
    /// multi-receive buffer, no message already waiting in its queue, no
    /// dead peer to check) is queued here; everything else takes
    /// [`recv_general`](Self::recv_general).
    #[inline]
    pub(super) fn recv_inner(&self, op: &RecvOp<'_>) -> Result<()> {
        let need = if op.tagged { FI_TAGGED } else { FI_MSG };
        if op.flags & (FI_PEEK | FI_CLAIM | FI_DISCARD | FI_MULTI_RECV) == 0
            && op.iov.len() <= IOV_LIMIT
            && self.caps & need != 0
            && self.enabled.load(std::sync::atomic::Ordering::Relaxed)
        {
            let mut g = self.lock();
            if g.rx.mq.unexpected_len(op.tagged) == 0 && g.dead.is_empty() {
                let src = if self.caps & FI_DIRECTED_RECV != 0 {
                    op.src
                } else {
                    FI_ADDR_UNSPEC
                };
                let completion = op.flags & FI_COMPLETION != 0 || !g.b.rx_selective;
                let mut posted = PostedRecv {
                    iov: [IoVec::default(); MAX_IOV],
                    iov_cnt: op.iov.len(),
                    len: iov_len(op.iov),
                    src,
                    tag: op.tag,
                    ignore: if op.tagged { op.ignore } else { 0 },
                    context: op.context,
                    flags: op.flags | if completion { FI_COMPLETION } else { 0 },
                    consumed: 0,
                };
                posted.iov[..op.iov.len()].copy_from_slice(op.iov);
                g.rx.mq.post(op.tagged, posted);
                return Ok(());
            }
        }
        self.recv_general(op)
    }

    /// Every receive the common path did not take.
    #[inline(never)]
    fn recv_general(&self, op: &RecvOp<'_>) -> Result<()> {
        self.check_enabled("receive")?;
        if op.iov.len() > IOV_LIMIT {
            return Err(Error::inval(format!(
                "shm: {} iov entries exceed the limit of {IOV_LIMIT}",
                op.iov.len()
            )));
        }
        let need = if op.tagged { FI_TAGGED } else { FI_MSG };
        if self.caps & need == 0 {
            return Err(Error::new(
                errno::FI_EOPNOTSUPP,
                "shm: the endpoint was opened without this capability",
            ));
        }
        if op.flags & FI_MULTI_RECV != 0 && (op.iov.len() != 1 || op.tagged) {
            return Err(Error::inval("shm: FI_MULTI_RECV takes one untagged buffer"));
        }
        let tagged = op.tagged;
        let ignore = if tagged { op.ignore } else { u64::MAX };
        let mut g = self.lock();
        let src = if self.caps & FI_DIRECTED_RECV != 0 {
            op.src
        } else {
            FI_ADDR_UNSPEC
        };
        let completion = op.flags & FI_COMPLETION != 0 || !g.b.rx_selective;
        let peek = op.flags & FI_PEEK != 0;
        let claim = op.flags & FI_CLAIM != 0;
        let discard = op.flags & FI_DISCARD != 0;
        if (peek || claim || discard) && !tagged {
            return Err(Error::new(
                errno::FI_EBADFLAGS,
                "shm: FI_PEEK / FI_CLAIM / FI_DISCARD apply to tagged receives",
            ));
        }
        if peek {
            return self.peek(&mut g, op, src, ignore, claim, discard);
        }
        if claim {
            let i = g.rx.mq.find_claimed(true, op.context).ok_or_else(|| {
                Error::inval("shm: FI_CLAIM names a context that claimed no message")
            })?;
            let u = g.rx.take_unexpected(true, i).expect("index from find");
            if discard {
                let (tag, src_addr) = (u.tag, u.src);
                self.release(&mut g, u.payload, 0);
                if let Some(cq) = &g.b.rx_cq {
                    cq.push(
                        CqTaggedEntry {
                            op_context: op.context,
                            flags: FI_RECV | FI_TAGGED,
                            tag,
                            ..Default::default()
                        },
                        src_addr,
                    );
                }
            } else {
                self.deliver_unexpected(&mut g, u, true, op, completion);
            }
            return Ok(());
        }
        // Entries still in the ring are newer than every unexpected message,
        // so they match after this receive is posted: no need to poll here
        // (touching the slot the sender is filling would cost a transfer).
        if op.flags & FI_MULTI_RECV != 0 {
            return self.post_multi(&mut g, op, src, completion);
        }
        if let Some(i) = g.rx.mq.find_unexpected(tagged, src, op.tag, ignore) {
            let u = g.rx.take_unexpected(tagged, i).expect("index from find");
            self.deliver_unexpected(&mut g, u, tagged, op, completion);
            return Ok(());
        }
        if let Some(err) = g.dead.dead(src) {
            // Directed at a peer declared dead: what it sent before it died
            // was matched above; nothing more will come.
            let fl = FI_RECV | if tagged { FI_TAGGED } else { FI_MSG };
            self.rx_error(&g, op.context, fl, err, op.tag);
            return Ok(());
        }
        let mut posted = PostedRecv {
            iov: [IoVec::default(); MAX_IOV],
            iov_cnt: op.iov.len(),
            len: iov_len(op.iov),
            src,
            tag: op.tag,
            ignore: if tagged { op.ignore } else { 0 },
            context: op.context,
            flags: op.flags | if completion { FI_COMPLETION } else { 0 },
            consumed: 0,
        };
        posted.iov[..op.iov.len()].copy_from_slice(op.iov);
        g.rx.mq.post(tagged, posted);
        Ok(())
    }

    /// FI_PEEK (with FI_CLAIM or FI_DISCARD): reports the first matching
    /// unexpected message, or FI_ENOMSG.
    fn peek(
        &self,
        g: &mut Inner,
        op: &RecvOp<'_>,
        src: u64,
        ignore: u64,
        claim: bool,
        discard: bool,
    ) -> Result<()> {
        self.progress_locked(g);
        let Some(i) = g.rx.mq.find_unexpected(true, src, op.tag, ignore) else {
            self.rx_error(g, op.context, FI_RECV | FI_TAGGED, errno::FI_ENOMSG, op.tag);
            return Ok(());
        };
        let (len, tag, data, fl, src_addr) = {
            let u = g.rx.mq.unexpected_mut(true, i).expect("index from find");
            (u.len, u.tag, u.data, u.flags, u.src)
        };
        if discard {
            if let Some(u) = g.rx.take_unexpected(true, i) {
                self.release(g, u.payload, 0);
            }
        } else if claim {
            if let Some(u) = g.rx.mq.unexpected_mut(true, i) {
                u.claimed = Some(op.context);
            }
        }
        if let Some(cq) = &g.b.rx_cq {
            cq.push(
                CqTaggedEntry {
                    op_context: op.context,
                    flags: FI_RECV | FI_TAGGED | (fl & FI_REMOTE_CQ_DATA),
                    len,
                    buf: 0,
                    data,
                    tag,
                },
                src_addr,
            );
        }
        Ok(())
    }

    /// A multi-receive buffer: filled from unexpected messages first, then
    /// posted while room remains.
    fn post_multi(&self, g: &mut Inner, op: &RecvOp<'_>, src: u64, completion: bool) -> Result<()> {
        let mut posted = PostedRecv {
            iov: [IoVec::default(); MAX_IOV],
            iov_cnt: 1,
            len: iov_len(op.iov),
            src,
            tag: 0,
            ignore: 0,
            context: op.context,
            flags: op.flags,
            consumed: 0,
        };
        posted.iov[0] = op.iov[0];
        let min = g.rx.min_multi_recv;
        while let Some(i) = g.rx.mq.find_unexpected(false, src, 0, u64::MAX) {
            let u = g.rx.take_unexpected(false, i).expect("index from find");
            let (off, cap, done) = consume_multi(&mut posted, u.len, min);
            let m = Meta {
                tag: 0,
                ..Self::meta_of(false, &u)
            };
            let iov = [posted.iov[0]];
            let d = Dest {
                iov: &iov,
                off,
                cap,
                context: op.context,
                flags: self.multi_enter(g, op.context, posted.iov[0].base, done),
                completion,
            };
            self.deliver_payload(g, &d, m, u.payload);
            if done {
                return Ok(());
            }
        }
        if let Some(err) = g.dead.dead(src) {
            let fl = FI_RECV | FI_MSG | FI_MULTI_RECV;
            self.rx_error(g, op.context, fl, err, 0);
            return Ok(());
        }
        g.rx.mq.post(false, posted);
        Ok(())
    }
}
