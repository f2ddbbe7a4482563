//! Receives: posting (with FI_PEEK, FI_CLAIM, FI_DISCARD), matching
//! arrivals from either path in one engine, holding unexpected messages,
//! and delivering eager bytes or starting a rendezvous payload's receive.

// The raw layer's contract (caller memory valid until completion) is
// forwarded to the inner endpoints: unsafe calls, no unsafe memory access.
#![allow(unsafe_code)]

use super::{ctx, pending_parts, visible_src, HybridEp, Payload, RxRec, State, K_RX, PATH_NAMES};
use crate::wire::{self, Header};
use ofi_core::consts::*;
use ofi_core::error::{errno, Error, Result};
use ofi_core::object::RecvOp;
use ofi_core::provider::Progress;
use ofi_core::util::cq::{CqErrEntry, CqTaggedEntry};
use ofi_core::util::iov::{copy_to_iov, iov_len, IoVec};
use ofi_core::util::matching::{PostedRecv, Unexpected, MAX_IOV};
use std::sync::atomic::Ordering;

/// Held-payload vectors kept for reuse.
const POOL_MAX: usize = 256;

/// Where a message goes.
struct Dest<'a> {
    iov: &'a [IoVec],
    context: usize,
    completion: bool,
    discard: bool,
}

/// The message's fields a completion reports.
#[derive(Clone, Copy)]
struct Meta {
    tagged: bool,
    tag: u64,
    data: u64,
    has_data: bool,
    len: usize,
    src: u64,
}

impl<'a> Dest<'a> {
    /// A matched posted receive as a destination.
    fn posted(r: &'a PostedRecv) -> Dest<'a> {
        Dest {
            iov: r.iov(),
            context: r.context,
            completion: r.flags & FI_COMPLETION != 0,
            discard: false,
        }
    }
}

impl Meta {
    /// A message's fields, from its header.
    fn of(h: &Header, src: u64) -> Meta {
        Meta {
            tagged: h.tagged,
            tag: h.tag,
            data: h.data,
            has_data: h.has_data,
            len: h.len as usize,
            src,
        }
    }

    fn flags(&self) -> u64 {
        FI_RECV
            | if self.tagged { FI_TAGGED } else { FI_MSG }
            | if self.has_data { FI_REMOTE_CQ_DATA } else { 0 }
    }
}

impl HybridEp {
    /// Pushes a receive-side error completion and counts it.
    pub(super) fn rx_error(
        st: &State,
        context: usize,
        flags: u64,
        err: i32,
        tag: u64,
        len: usize,
        olen: usize,
    ) {
        if let Some(cq) = &st.b.rx_cq {
            cq.push_err(
                CqErrEntry {
                    op_context: context,
                    flags,
                    len,
                    tag,
                    olen,
                    err,
                    prov_errno: err,
                    ..Default::default()
                },
                FI_ADDR_NOTAVAIL,
            );
        }
        if let Some(c) = &st.b.recv_cntr {
            c.add_err(1);
        }
    }

    /// A receive finished: `got` bytes of `m.len` landed at `buf`.
    fn rx_done(st: &State, context: usize, m: &Meta, got: usize, buf: usize, completion: bool) {
        if got < m.len {
            if let Some(cq) = &st.b.rx_cq {
                cq.push_err(
                    CqErrEntry {
                        op_context: context,
                        flags: m.flags(),
                        len: got,
                        buf,
                        data: m.data,
                        tag: m.tag,
                        olen: m.len - got,
                        err: errno::FI_ETRUNC,
                        prov_errno: errno::FI_ETRUNC,
                        ..Default::default()
                    },
                    visible_src(m.src),
                );
            }
            if let Some(c) = &st.b.recv_cntr {
                c.add_err(1);
            }
            return;
        }
        if completion {
            if let Some(cq) = &st.b.rx_cq {
                cq.push(
                    CqTaggedEntry {
                        op_context: context,
                        flags: m.flags(),
                        len: got,
                        buf,
                        data: if m.has_data { m.data } else { 0 },
                        tag: if m.tagged { m.tag } else { 0 },
                    },
                    visible_src(m.src),
                );
            }
        }
        if let Some(c) = &st.b.recv_cntr {
            c.add(1);
        }
    }

    /// A message (header `h`, from outer `src`, eager bytes `body`)
    /// arrived: match it or hold it.
    pub(super) fn incoming(
        &self,
        st: &mut State,
        h: Header,
        src: u64,
        body: &[u8],
        payload: Payload,
    ) {
        if let Payload::Eager(_) = payload {
            return Self::incoming_eager(st, h, src, body);
        }
        match st.mq.find_posted(h.tagged, src, h.tag) {
            Some(i) => {
                let Some(r) = st.mq.take_posted(h.tagged, i) else {
                    return;
                };
                let d = Dest::posted(&r);
                self.deliver(st, &d, Meta::of(&h, src), payload);
            }
            None => Self::hold(st, &h, src, payload),
        }
    }

    /// An eager message arrived: copied into the matching receive, or held.
    /// The common case (the oldest posted receive takes it whole) is read
    /// in place and completed here; any other takes
    /// [`incoming_eager_general`](Self::incoming_eager_general).
    #[inline(always)]
    pub(super) fn incoming_eager(st: &mut State, h: Header, src: u64, body: &[u8]) {
        let body = &body[..(h.len as usize).min(body.len())];
        let whole = body.len() as u64 == h.len;
        let Some(r) = st.mq.posted_mut(h.tagged, 0) else {
            return Self::incoming_eager_general(st, h, src, body);
        };
        let takes = if h.tagged {
            r.matches(src, h.tag)
        } else {
            r.src == FI_ADDR_UNSPEC || r.src == src
        };
        if !(takes && whole && r.len >= body.len()) {
            return Self::incoming_eager_general(st, h, src, body);
        }
        // SAFETY: post_recv's caller keeps the receive iov valid until completion.
        let n = unsafe { copy_to_iov(r.iov(), 0, body) };
        let (context, flags, buf) = (r.context, r.flags, r.iov().first().map_or(0, |v| v.base));
        st.mq.drop_posted(h.tagged, 0);
        if flags & FI_COMPLETION != 0 {
            if let Some(cq) = &st.b.rx_cq {
                cq.push(
                    CqTaggedEntry {
                        op_context: context,
                        flags: FI_RECV
                            | if h.tagged { FI_TAGGED } else { FI_MSG }
                            | if h.has_data { FI_REMOTE_CQ_DATA } else { 0 },
                        len: n,
                        buf,
                        data: if h.has_data { h.data } else { 0 },
                        tag: if h.tagged { h.tag } else { 0 },
                    },
                    visible_src(src),
                );
            }
        }
        if let Some(c) = &st.b.recv_cntr {
            c.add(1);
        }
    }

    /// [`incoming_eager`](Self::incoming_eager) for a message that no
    /// posted receive takes whole: truncated into the matching receive, or
    /// held.
    #[inline(never)]
    fn incoming_eager_general(st: &mut State, h: Header, src: u64, body: &[u8]) {
        let m = Meta::of(&h, src);
        match st.mq.find_posted(h.tagged, src, h.tag) {
            Some(i) => {
                let Some(r) = st.mq.take_posted(h.tagged, i) else {
                    return;
                };
                Self::deliver_eager(st, &Dest::posted(&r), &m, body);
            }
            None => {
                let mut v = st.pool.pop().unwrap_or_default();
                v.clear();
                v.extend_from_slice(body);
                Self::hold(st, &h, src, Payload::Eager(v));
            }
        }
    }

    /// Holds an unexpected message until a receive takes it.
    fn hold(st: &mut State, h: &Header, src: u64, payload: Payload) {
        st.held_pending |= pending_parts(src).is_some();
        st.mq.push_unexpected(
            h.tagged,
            Unexpected {
                src,
                tag: h.tag,
                data: h.data,
                flags: if h.has_data { FI_REMOTE_CQ_DATA } else { 0 },
                len: h.len as usize,
                claimed: None,
                payload,
            },
        );
    }

    fn deliver_eager(st: &State, d: &Dest<'_>, m: &Meta, bytes: &[u8]) {
        let cap = iov_len(d.iov);
        let n = bytes.len().min(cap);
        // SAFETY: post_recv's caller keeps the receive iov valid until completion.
        let got = unsafe { copy_to_iov(d.iov, 0, &bytes[..n]) };
        let buf = d.iov.first().map_or(0, |v| v.base);
        Self::rx_done(st, d.context, m, got, buf, d.completion);
    }

    /// Delivers a message (held or just matched) into a receive.
    fn deliver(&self, st: &mut State, d: &Dest<'_>, m: Meta, p: Payload) {
        match p {
            Payload::Eager(v) => {
                if d.discard {
                    Self::discarded(st, d.context, &m);
                } else {
                    Self::deliver_eager(st, d, &m, &v);
                }
                if st.pool.len() < POOL_MAX {
                    st.pool.push(v);
                }
            }
            Payload::Rts {
                path,
                inner_src,
                cookie,
            } => {
                let rec = RxRec {
                    context: d.context,
                    flags: m.flags(),
                    tag: m.tag,
                    data: m.data,
                    buf: d.iov.first().map_or(0, |v| v.base),
                    src: m.src,
                    completion: d.completion,
                    discard: d.discard,
                };
                let i = self.rx_slot(st, path, rec);
                let iov: &[IoVec] = if d.discard { &[] } else { d.iov };
                let op = RecvOp {
                    iov,
                    desc: &[],
                    src: inner_src,
                    tag: cookie,
                    ignore: 0,
                    context: ctx(K_RX, path, i),
                    flags: FI_COMPLETION,
                    tagged: true,
                };
                // SAFETY: post_recv's caller keeps the receive iov valid
                // until completion; the inner receive completes before it.
                if let Err(e) = unsafe { self.paths[path].ep.post_recv(&op) } {
                    tracing::warn!(error = %e, "hybrid: rendezvous receive not posted");
                    Self::rx_take(st, path, i);
                    Self::rx_error(st, d.context, m.flags(), e.code(), m.tag, 0, m.len);
                }
            }
        }
    }

    /// A rendezvous payload's inner receive ended (`err`: its error and olen).
    pub(super) fn rts_done(&self, st: &State, r: RxRec, got: usize, err: Option<(i32, usize)>) {
        let m = Meta {
            tagged: r.flags & FI_TAGGED != 0,
            tag: r.tag,
            data: r.data,
            has_data: r.flags & FI_REMOTE_CQ_DATA != 0,
            len: got + err.map_or(0, |e| e.1),
            src: r.src,
        };
        if r.discard {
            // Dropped by FI_PEEK | FI_DISCARD (reported then) or discarded
            // by an FI_CLAIM | FI_DISCARD receive (reported now).
            if r.completion {
                Self::discarded(st, r.context, &m);
            }
            return;
        }
        match err {
            None | Some((errno::FI_ETRUNC, _)) => {
                Self::rx_done(st, r.context, &m, got, r.buf, r.completion)
            }
            Some((e, _)) => Self::rx_error(st, r.context, m.flags(), e, m.tag, got, 0),
        }
    }

    fn discarded(st: &State, context: usize, m: &Meta) {
        if let Some(cq) = &st.b.rx_cq {
            cq.push(
                CqTaggedEntry {
                    op_context: context,
                    flags: FI_RECV | FI_TAGGED,
                    tag: m.tag,
                    ..Default::default()
                },
                visible_src(m.src),
            );
        }
    }

    /// Posts a receive. The common one (no peek, claim, discard or
    /// multi-receive buffer, no message held in its queue, no peer marked
    /// dead) is queued here; everything else takes
    /// [`recv_general`](Self::recv_general).
    #[inline(always)]
    pub(super) fn recv_inner(&self, op: &RecvOp<'_>) -> Result<()> {
        let need = if op.tagged { FI_TAGGED } else { FI_MSG };
        if op.flags & (FI_PEEK | FI_CLAIM | FI_DISCARD | FI_MULTI_RECV) == 0
            && op.iov.len() <= MAX_IOV
            && self.caps & need != 0
            && self.enabled.load(Ordering::Acquire)
        {
            let mut st = self.lock();
            // With nothing held in its queue, no message waits for a
            // sender the AV names since the last look (the general path
            // syncs the AV for those).
            if st.mq.unexpected_len(op.tagged) == 0 && st.dead.is_empty() {
                let src = if self.caps & FI_DIRECTED_RECV != 0 {
                    op.src
                } else {
                    FI_ADDR_UNSPEC
                };
                let src = if src == FI_ADDR_UNSPEC {
                    src
                } else {
                    Self::primary(&st, src)
                };
                let completion = op.flags & FI_COMPLETION != 0 || !st.b.rx_selective;
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
                st.mq.post(op.tagged, posted);
                return Ok(());
            }
        }
        self.recv_general(op)
    }

    /// The entry of the AV that messages from `src`'s address carry (a
    /// receive directed at any entry of an address inserted more than once
    /// takes what its sender sends).
    fn primary(st: &State, src: u64) -> u64 {
        st.b.av
            .as_ref()
            .and_then(|av| av.primary(src))
            .unwrap_or(src)
    }

    /// Every receive the common path did not take.
    #[inline(never)]
    fn recv_general(&self, op: &RecvOp<'_>) -> Result<()> {
        self.check_enabled("receive")?;
        if op.iov.len() > MAX_IOV {
            return Err(Error::inval(format!(
                "hybrid: {} iov entries exceed the limit of {MAX_IOV}",
                op.iov.len()
            )));
        }
        let need = if op.tagged { FI_TAGGED } else { FI_MSG };
        if self.caps & need == 0 {
            return Err(Error::new(
                errno::FI_EOPNOTSUPP,
                "hybrid: the endpoint was opened without this capability",
            ));
        }
        if op.flags & FI_MULTI_RECV != 0 {
            return Err(Error::new(
                errno::FI_EOPNOTSUPP,
                "hybrid: FI_MULTI_RECV is not supported",
            ));
        }
        let (peek, claim, discard) = (
            op.flags & FI_PEEK != 0,
            op.flags & FI_CLAIM != 0,
            op.flags & FI_DISCARD != 0,
        );
        if (peek || claim || discard) && !op.tagged {
            return Err(Error::new(
                errno::FI_EBADFLAGS,
                "hybrid: FI_PEEK / FI_CLAIM / FI_DISCARD apply to tagged receives",
            ));
        }
        let tagged = op.tagged;
        let ignore = if tagged { op.ignore } else { u64::MAX };
        let src = if self.caps & FI_DIRECTED_RECV != 0 {
            op.src
        } else {
            FI_ADDR_UNSPEC
        };
        if peek {
            // Messages still inside the inner endpoints count as arrived.
            self.progress();
        }
        let mut st = self.lock();
        // Senders the application inserted since the last look: their held
        // messages now carry their fi_addr, for a receive directed at one.
        self.sync_av(&mut st);
        // A receive directed at any entry of an address inserted more than
        // once takes what its sender sends (messages carry the primary).
        let src = if src == FI_ADDR_UNSPEC {
            src
        } else {
            Self::primary(&st, src)
        };
        let completion = op.flags & FI_COMPLETION != 0 || !st.b.rx_selective;
        let d = Dest {
            iov: op.iov,
            context: op.context,
            completion,
            discard,
        };
        if peek {
            let Some(i) = st.mq.find_unexpected(true, src, op.tag, ignore) else {
                Self::rx_error(
                    &st,
                    op.context,
                    FI_RECV | FI_TAGGED,
                    errno::FI_ENOMSG,
                    op.tag,
                    0,
                    0,
                );
                return Ok(());
            };
            let Some(u) = st.mq.unexpected_mut(true, i) else {
                return Ok(());
            };
            let (len, tag, data, fl, usrc) = (u.len, u.tag, u.data, u.flags, u.src);
            if claim && !discard {
                u.claimed = Some(op.context);
            }
            if discard {
                if let Some(u) = st.mq.take_unexpected(true, i) {
                    self.drop_held(&mut st, u.payload, tag, usrc);
                }
            }
            if let Some(cq) = &st.b.rx_cq {
                cq.push(
                    CqTaggedEntry {
                        op_context: op.context,
                        flags: FI_RECV | FI_TAGGED | (fl & FI_REMOTE_CQ_DATA),
                        len,
                        buf: 0,
                        data,
                        tag,
                    },
                    visible_src(usrc),
                );
            }
            return Ok(());
        }
        let found = if claim {
            Some(st.mq.find_claimed(true, op.context).ok_or_else(|| {
                Error::inval("hybrid: FI_CLAIM names a context that claimed no message")
            })?)
        } else {
            st.mq.find_unexpected(tagged, src, op.tag, ignore)
        };
        if let Some(i) = found {
            let Some(u) = st.mq.take_unexpected(tagged, i) else {
                return Ok(());
            };
            let m = Meta {
                tagged,
                tag: u.tag,
                data: u.data,
                has_data: u.flags & FI_REMOTE_CQ_DATA != 0,
                len: u.len,
                src: u.src,
            };
            self.deliver(&mut st, &d, m, u.payload);
            return Ok(());
        }
        if let Some(&(_, _, err)) = st.dead.iter().find(|x| src != FI_ADDR_UNSPEC && x.0 == src) {
            // Directed at a peer declared dead: what it sent before it
            // died was matched above; nothing more will come.
            let fl = FI_RECV | if tagged { FI_TAGGED } else { FI_MSG };
            Self::rx_error(&st, op.context, fl, err, op.tag, 0, 0);
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
        st.mq.post(tagged, posted);
        Ok(())
    }

    /// Drops a held message (FI_PEEK | FI_DISCARD): a rendezvous payload is
    /// received into nothing so the inner endpoint lets it go.
    fn drop_held(&self, st: &mut State, p: Payload, tag: u64, src: u64) {
        if let Payload::Rts {
            path,
            inner_src,
            cookie,
        } = p
        {
            let rec = RxRec {
                context: 0,
                flags: FI_RECV | FI_TAGGED,
                tag,
                data: 0,
                buf: 0,
                src,
                completion: false,
                discard: true,
            };
            let i = self.rx_slot(st, path, rec);
            let op = RecvOp {
                iov: &[],
                desc: &[],
                src: inner_src,
                tag: cookie,
                ignore: 0,
                context: ctx(K_RX, path, i),
                flags: FI_COMPLETION,
                tagged: true,
            };
            // SAFETY: an empty iov names no memory.
            if unsafe { self.paths[path].ep.post_recv(&op) }.is_err() {
                Self::rx_take(st, path, i);
            }
        }
    }

    /// A message arrived in bounce buffer `idx` of `path`; `short`: the
    /// inner CQ data that came with it (see [`wire::SHORT`]).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn arrived(
        &self,
        st: &mut State,
        path: usize,
        idx: usize,
        len: usize,
        inner_src: u64,
        src: u64,
        short: Option<u64>,
    ) {
        if !st.dead.is_empty() {
            // The peer speaks again: it is alive.
            st.dead.retain(|d| d.0 != src);
        }
        // Out of the state while it is read, so matching may borrow both.
        let buf = std::mem::take(&mut st.bounce[path][idx]);
        let bytes = &buf[..len.min(buf.len())];
        match short {
            Some(m) => match wire::parse_short(m, bytes) {
                Some((h, body)) => self.incoming(st, h, src, body, Payload::Eager(Vec::new())),
                None => tracing::warn!(
                    path = PATH_NAMES[path],
                    marker = m,
                    len = bytes.len(),
                    "hybrid: malformed short message dropped"
                ),
            },
            None => self.message(st, path, inner_src, src, bytes),
        }
        st.bounce[path][idx] = buf;
    }

    /// A message (header and payload in `bytes`) from outer `src` (inner
    /// `inner_src`) arrived through `path`: match it or hold it.
    fn message(&self, st: &mut State, path: usize, inner_src: u64, src: u64, bytes: &[u8]) {
        let h = match Header::parse(bytes) {
            Ok(h) => h,
            Err(e) => {
                tracing::warn!(path = PATH_NAMES[path], error = %e, "hybrid: malformed message dropped");
                return;
            }
        };
        let body = &bytes[wire::LEN..];
        if !h.rts && h.len as usize != body.len() {
            tracing::warn!(
                path = PATH_NAMES[path],
                "hybrid: eager message length disagrees with its header; dropped"
            );
            return;
        }
        let payload = if h.rts {
            Payload::Rts {
                path,
                inner_src,
                cookie: h.cookie,
            }
        } else {
            // Copied only when held; matched messages are delivered
            // straight from `bytes`.
            Payload::Eager(Vec::new())
        };
        self.incoming(st, h, src, body, payload);
    }
}
