//! The transmit side of a connection: the sends the driver queues, the
//! window of frames staged for the stream (control frames, answers, eager
//! sends, rendezvous DATA chunks) and the view the driver writes from.

use super::place::RxState;
use super::serve;
use super::{Conn, State};
use crate::tcp::event::{Event, ProtoError};
use crate::tcp::one_sided::{Ack, Req};
use crate::tcp::rx::{clip, Bound, Rx};
use ofi_base::error::errno;
use ofi_base::iov::{iov_len, IoVec};
use ofi_base::matching::MAX_IOV;
use ofi_wire::tcp::{flag, op, rts_payload, Repr, HDR_LEN, RTS_PAYLOAD_LEN};
use std::collections::VecDeque;

/// A send as the driver queues it. The ranges stay valid until the send
/// completes (the raw layer's promise); the core only passes them back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendReq {
    /// Source ranges.
    pub iov: [IoVec; MAX_IOV],
    /// Entries of `iov` in use.
    pub iov_cnt: usize,
    /// Tagged message.
    pub tagged: bool,
    /// Tag (tagged).
    pub tag: u64,
    /// Remote CQ data (with `cq_data`).
    pub data: u64,
    /// Carry `data` to the receiver's completion.
    pub cq_data: bool,
    /// The caller's context.
    pub context: usize,
    /// When the send completes (acknowledged by the peer or not).
    pub ack: Ack,
    /// FI_FENCE: start only once every earlier operation of this connection
    /// has completed.
    pub fence: bool,
}

impl SendReq {
    /// An untagged send.
    pub fn msg(iov: &[IoVec], context: usize) -> Self {
        let n = iov.len().min(MAX_IOV);
        let mut r = SendReq {
            iov_cnt: iov.len(),
            context,
            ..Default::default()
        };
        r.iov[..n].copy_from_slice(&iov[..n]);
        r
    }
    /// A tagged send.
    pub fn tagged(iov: &[IoVec], tag: u64, context: usize) -> Self {
        let mut r = SendReq::msg(iov, context);
        r.tagged = true;
        r.tag = tag;
        r
    }
    /// Adds remote CQ data.
    pub fn with_data(mut self, data: u64) -> Self {
        self.data = data;
        self.cq_data = true;
        self
    }
    /// Completes only once the peer acknowledges it.
    pub fn with_ack(mut self, ack: Ack) -> Self {
        self.ack = ack;
        self
    }
    /// Sets FI_FENCE.
    pub fn fenced(mut self) -> Self {
        self.fence = true;
        self
    }
    /// The ranges.
    pub fn iov(&self) -> &[IoVec] {
        &self.iov[..self.iov_cnt.min(MAX_IOV)]
    }
}

/// One range to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxSlice<'a> {
    /// Core-owned bytes (headers and control payloads).
    Bytes(&'a [u8]),
    /// User memory (a send's payload).
    Iov(IoVec),
}

impl TxSlice<'_> {
    /// Length in bytes.
    pub fn len(&self) -> usize {
        match self {
            TxSlice::Bytes(b) => b.len(),
            TxSlice::Iov(v) => v.len,
        }
    }
    /// True if empty (never produced by the core).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What to write next, in order: a view into the connection valid until
/// its next call.
#[derive(Clone, Copy, Debug)]
pub struct Transmit<'a> {
    stage: &'a [u8],
    segs: &'a VecDeque<Seg>,
    off: usize,
    held: &'a serve::Held,
}

impl<'a> Transmit<'a> {
    /// Nothing to write.
    pub fn is_empty(&self) -> bool {
        self.segs.is_empty()
    }
    /// Bytes to write.
    pub fn len(&self) -> usize {
        self.segs.iter().map(|s| s.len).sum::<usize>() - self.off
    }
    /// Number of ranges.
    pub fn slice_count(&self) -> usize {
        self.segs.len()
    }
    /// The ranges, in order.
    pub fn iter(&self) -> impl Iterator<Item = TxSlice<'a>> + 'a {
        let stage = self.stage;
        let held = self.held;
        let first = self.off;
        self.segs.iter().enumerate().map(move |(i, s)| {
            let o = if i == 0 { first } else { 0 };
            match s.kind {
                SegKind::Staged(start) => TxSlice::Bytes(&stage[start + o..start + s.len]),
                SegKind::Held { seq, start } => {
                    TxSlice::Bytes(&held.get(seq)[start + o..start + s.len])
                }
                SegKind::User(base) | SegKind::Mem(base) => TxSlice::Iov(IoVec {
                    base: base.wrapping_add(o),
                    len: s.len - o,
                }),
            }
        })
    }
}

/// What happens when a segment's last byte is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Done {
    Nothing,
    Send(usize),
    Accepted,
    Finished,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SegKind {
    /// Offset into the stage buffer.
    Staged(usize),
    /// User address (the caller's own buffer).
    User(usize),
    /// Registered memory answering a peer's READ: copied into the stage
    /// before a later frame of this connection may change it.
    Mem(usize),
    /// Bytes of an answer the core holds (captured READ data, an atomic's
    /// result): `seq` names the buffer in `held`, `start` the offset in it.
    /// Sent from there, not copied into the stage.
    Held { seq: u64, start: usize },
}

/// A range committed to the stream: once its frame started, it is written
/// to the end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Seg {
    pub(super) kind: SegKind,
    pub(super) len: usize,
    pub(super) done: Done,
}

#[derive(Debug)]
pub(super) struct Ctrl {
    pub(super) repr: Repr,
    pub(super) payload: Vec<u8>,
    pub(super) done: Done,
}

/// A rendezvous send: waiting for CTS, then streaming `want` bytes.
#[derive(Debug)]
pub(super) struct TxRndv {
    pub(super) id: u64,
    pub(super) req: SendReq,
    /// Completes on the peer's acknowledgement, not on the last byte.
    pub(super) acked: bool,
    pub(super) len: usize,
    pub(super) want: usize,
    pub(super) off: usize,
}

/// Largest payload a send may have to take the fast path
/// ([`Conn::frame_now`]).
pub const FAST_MAX: usize = 256;

/// Bytes of staged headers above which no new frame is staged until the
/// window drains.
const STAGE_SOFT_MAX: usize = 8 << 10;

/// Most ranges one frame stages: a header and, for an atomic, its operand
/// and compare ranges.
pub(super) const SLICES_PER_FRAME: usize = 2 + 2 * MAX_IOV;

impl Conn {
    /// Queues a send. Sends go out in order; one of at most `eager_max`
    /// bytes goes inline, a larger one by rendezvous. `FI_EINVAL` for more
    /// than [`MAX_IOV`] ranges, `FI_EMSGSIZE` above `max_msg_size`,
    /// `FI_ENOTCONN` once the connection is closing.
    pub fn queue_send(&mut self, req: SendReq) -> Result<(), i32> {
        if req.iov_cnt > MAX_IOV {
            return Err(errno::FI_EINVAL);
        }
        if matches!(self.state, State::Closing | State::Closed) {
            return Err(errno::FI_ENOTCONN);
        }
        if iov_len(req.iov()) > self.cfg.max_msg_size {
            return Err(errno::FI_EMSGSIZE);
        }
        self.sendq.push_back(Req::Send(req));
        Ok(())
    }

    /// The fast path of a small eager send: when the connection is up and
    /// has nothing staged, queued or in rendezvous ahead of it (so stream
    /// order is what the queue would give), the send asks for no
    /// acknowledgement and no fence, and its payload is at most
    /// [`FAST_MAX`] bytes, writes the frame's header into `hdr` and returns
    /// the frame's length (header and payload). The driver appends the
    /// payload, writes the frame at once and reports how much went out with
    /// [`frame_written`](Self::frame_written). `None`: queue it with
    /// [`queue_send`](Self::queue_send) instead.
    pub fn frame_now(&self, req: &SendReq, hdr: &mut [u8; HDR_LEN]) -> Option<usize> {
        if self.state != State::Connected
            || !self.segs.is_empty()
            || !self.ctrl.is_empty()
            || !self.resps.is_empty()
            || !self.sendq.is_empty()
            || !self.streams.is_empty()
            || self.wstream.is_some()
            || req.ack != Ack::None
            || req.fence
            || req.iov_cnt > MAX_IOV
        {
            return None;
        }
        let len = iov_len(req.iov());
        if len > FAST_MAX || len > self.cfg.eager_max {
            return None;
        }
        let r = Repr {
            op: op::MSG,
            flags: if req.tagged { flag::TAGGED } else { 0 }
                | if req.cq_data { flag::CQ_DATA } else { 0 },
            len: len as u64,
            tag: if req.tagged { req.tag } else { 0 },
            data: if req.cq_data { req.data } else { 0 },
            id: len as u64,
        };
        *hdr = r.to_bytes();
        Some(HDR_LEN + len)
    }

    /// `n` bytes of `frame`, built by [`frame_now`](Self::frame_now), were
    /// written. True when that was all of it: the send is complete and no
    /// event will follow. Otherwise the rest is copied into the stage to go
    /// out first, and [`Event::SendComplete`] with `context` follows once
    /// it is written.
    pub fn frame_written(&mut self, frame: &[u8], n: usize, context: usize) -> bool {
        if n >= frame.len() {
            return true;
        }
        self.stage.clear();
        self.seg_off = 0;
        self.stage.extend_from_slice(&frame[n..]);
        self.segs.push_back(Seg {
            kind: SegKind::Staged(0),
            len: frame.len() - n,
            done: Done::Send(context),
        });
        false
    }

    /// What to write next. Write a prefix of it (writev) and report the
    /// count with [`on_written`](Self::on_written) before calling again.
    /// Takes the `Rx` to pick up rendezvous that receives matched (CTS).
    pub fn poll_transmit(&mut self, rx: &mut Rx) -> Transmit<'_> {
        self.absorb(rx);
        self.release_reads(rx, false);
        if self.segs.is_empty() {
            self.stage.clear();
            self.seg_off = 0;
        } else if self.stage.len() >= STAGE_SOFT_MAX / 2 {
            self.compact_stage();
        }
        self.fill();
        Transmit {
            stage: &self.stage,
            segs: &self.segs,
            off: self.seg_off,
            held: &self.held,
        }
    }

    /// What [`poll_transmit`](Self::poll_transmit) returned last, staging
    /// nothing new: for a driver that reads the bytes again later (a
    /// datagram sent again before the peer acknowledged it) and reports
    /// them written only then.
    pub fn transmit_view(&self) -> Transmit<'_> {
        Transmit {
            stage: &self.stage,
            segs: &self.segs,
            off: self.seg_off,
            held: &self.held,
        }
    }

    /// `n` bytes of the last [`Transmit`] were written. Completes the sends
    /// whose last byte that was.
    pub fn on_written(&mut self, n: usize) {
        let mut n = n;
        while n > 0 {
            let Some(s) = self.segs.front().copied() else {
                break;
            };
            let left = s.len - self.seg_off;
            if n < left {
                self.seg_off += n;
                break;
            }
            n -= left;
            self.seg_off = 0;
            self.segs.pop_front();
            match s.kind {
                SegKind::Mem(_) => {
                    self.mem_refs = self.mem_refs.saturating_sub(s.len);
                    self.reads_written(s.len);
                }
                SegKind::Held { seq, start } => self.held_written(seq, start + s.len),
                SegKind::Staged(_) | SegKind::User(_) => {}
            }
            self.fire(s.done);
        }
        if self.segs.is_empty() {
            self.stage.clear();
            self.seg_off = 0;
        }
    }

    fn fire(&mut self, d: Done) {
        match d {
            Done::Nothing => {}
            Done::Send(context) => self.events.push_back(Event::SendComplete { context }),
            Done::Accepted => self.events.push_back(Event::Connected {
                private_data: Vec::new(),
            }),
            Done::Finished => {
                self.state = State::Closed;
                self.rstate = RxState::Closed;
            }
        }
    }

    /// Stages frames until the window is full: control frames first, then
    /// answers to the peer's requests, then the rest of a WRITE being sent
    /// (nothing else of ours goes between its frames), then alternately the
    /// next queued operation and the next rendezvous DATA chunk.
    fn fill(&mut self) {
        loop {
            if !self.segs.is_empty()
                && (self.segs.len() + SLICES_PER_FRAME > self.cfg.max_tx_slices
                    || self.stage.len() >= STAGE_SOFT_MAX)
            {
                break;
            }
            if let Some(c) = self.ctrl.pop_front() {
                self.stage_frame(&c.repr, &c.payload, c.done);
                continue;
            }
            if !self.resps.is_empty() {
                self.stage_answer();
                continue;
            }
            if self.state != State::Connected {
                break;
            }
            if self.wstream.is_some() {
                self.stage_write_chunk();
                continue;
            }
            let data = !self.streams.is_empty();
            let send = self.can_commit();
            if data && (!send || !self.last_was_data) {
                self.commit_chunk();
                self.last_was_data = true;
            } else if send {
                match self.sendq.pop_front() {
                    Some(Req::Send(r)) => self.commit_send(r),
                    Some(Req::Rma(r)) => self.commit_rma(r),
                    None => {}
                }
                self.last_was_data = false;
            } else {
                break;
            }
        }
    }

    /// Drops staged bytes already written, so a connection that never
    /// drains its window completely keeps staging new frames. The lowest
    /// start of a staged segment is where the bytes still needed begin: not
    /// the first staged segment's, because a READ answer captured out of
    /// memory is copied to the end of the stage while segments behind it
    /// point lower.
    fn compact_stage(&mut self) {
        let first = self
            .segs
            .iter()
            .filter_map(|s| match s.kind {
                SegKind::Staged(start) => Some(start),
                SegKind::User(_) | SegKind::Mem(_) | SegKind::Held { .. } => None,
            })
            .min();
        let cut = first.unwrap_or(self.stage.len());
        if cut == 0 {
            return;
        }
        self.stage.drain(..cut);
        for s in self.segs.iter_mut() {
            if let SegKind::Staged(start) = &mut s.kind {
                *start -= cut;
            }
        }
    }

    pub(super) fn stage_frame(&mut self, r: &Repr, payload: &[u8], done: Done) {
        let start = self.stage.len();
        self.stage.extend_from_slice(&r.to_bytes());
        self.stage.extend_from_slice(payload);
        self.segs.push_back(Seg {
            kind: SegKind::Staged(start),
            len: HDR_LEN + payload.len(),
            done,
        });
    }

    /// Appends user ranges; the last one completes the send `done` (the
    /// frame's header does when there are none).
    pub(super) fn push_user(&mut self, ranges: &[IoVec], done: Done) {
        let n = ranges.len();
        if n == 0 {
            if let Some(last) = self.segs.back_mut() {
                last.done = done;
            }
            return;
        }
        for (i, v) in ranges.iter().enumerate() {
            self.segs.push_back(Seg {
                kind: SegKind::User(v.base),
                len: v.len,
                done: if i + 1 == n { done } else { Done::Nothing },
            });
        }
    }

    /// A fresh rendezvous or request id.
    pub(super) fn new_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    fn commit_send(&mut self, req: SendReq) {
        let len = iov_len(req.iov());
        let ack = match req.ack {
            Ack::None => 0,
            Ack::Received => flag::ACK,
            Ack::Placed => flag::ACK_PLACED,
        };
        let flags = if req.tagged { flag::TAGGED } else { 0 }
            | if req.cq_data { flag::CQ_DATA } else { 0 }
            | ack;
        let tag = if req.tagged { req.tag } else { 0 };
        let data = if req.cq_data { req.data } else { 0 };
        if len <= self.cfg.eager_max {
            let mut r = Repr {
                op: op::MSG,
                flags,
                len: len as u64,
                tag,
                data,
                id: len as u64,
            };
            let done = if ack != 0 {
                r.id = self.new_id();
                self.await_answer(r.id, req.context, true, &[], 0);
                Done::Nothing
            } else {
                Done::Send(req.context)
            };
            if len == 0 {
                self.stage_frame(&r, &[], done);
                return;
            }
            self.stage_frame(&r, &[], Done::Nothing);
            let mut out = [IoVec::default(); MAX_IOV];
            let n = clip(req.iov(), 0, len, &mut out);
            self.push_user(&out[..n], done);
            return;
        }
        let id = self.new_id();
        if ack != 0 {
            self.await_answer(id, req.context, true, &[], 0);
        }
        let r = Repr {
            op: op::RTS,
            flags,
            len: RTS_PAYLOAD_LEN as u64,
            tag,
            data,
            id,
        };
        self.stage_frame(&r, &rts_payload(len as u64), Done::Nothing);
        self.await_cts.push(TxRndv {
            id,
            req,
            acked: ack != 0,
            len,
            want: 0,
            off: 0,
        });
    }

    fn commit_chunk(&mut self) {
        let Some(s) = self.streams.front_mut() else {
            return;
        };
        let chunk = self.cfg.data_chunk.min(s.want - s.off);
        let (id, off, req, acked) = (s.id, s.off, s.req, s.acked);
        s.off += chunk;
        let last = s.off == s.want;
        if last {
            self.streams.pop_front();
        }
        let r = Repr {
            op: op::DATA,
            len: chunk as u64,
            id,
            ..Default::default()
        };
        self.stage_frame(&r, &[], Done::Nothing);
        let mut out = [IoVec::default(); MAX_IOV];
        let n = clip(req.iov(), off, chunk, &mut out);
        let done = if last && !acked {
            Done::Send(req.context)
        } else {
            Done::Nothing
        };
        self.push_user(&out[..n], done);
    }

    /// Rendezvous that `post_recv` matched for this connection: CTS them;
    /// messages the `Rx` placed whose senders wait: acknowledge them.
    pub(super) fn absorb(&mut self, rx: &mut Rx) {
        if !rx.owes_frames() {
            return;
        }
        while let Some(id) = rx.take_ack(self.id) {
            if self.state == State::Connected {
                self.answer(id, 0, serve::RespSrc::None, 0);
            }
        }
        while let Some(m) = rx.take_matched(self.id) {
            if self.state != State::Connected {
                if let Some(b) = m.bound {
                    rx.fail(&b, errno::FI_ECONNRESET);
                }
                continue;
            }
            match m.bound {
                Some(b) => {
                    if !self.bind_rndv(m.id, b, rx) {
                        return;
                    }
                }
                None => self.queue_cts(m.id, 0),
            }
        }
    }

    fn queue_cts(&mut self, id: u64, want: usize) {
        self.ctrl.push_back(Ctrl {
            repr: Repr {
                op: op::CTS,
                data: want as u64,
                id,
                ..Default::default()
            },
            payload: Vec::new(),
            done: Done::Nothing,
        });
    }

    /// A receive takes rendezvous `id`: ask for its bytes. False (and the
    /// connection closed) if the peer reused a live id.
    pub(super) fn bind_rndv(&mut self, id: u64, b: Bound, rx: &mut Rx) -> bool {
        if self.rndv_rx.iter().any(|(i, _)| *i == id) {
            rx.fail(&b, errno::FI_EIO);
            self.protocol_error(rx, ProtoError::Violation("rendezvous id reused"));
            return false;
        }
        self.queue_cts(id, b.want);
        if b.want == 0 {
            rx.finish(&b, None);
        } else {
            self.rndv_rx.push((id, b));
        }
        true
    }
}
