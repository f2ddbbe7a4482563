//! One-sided requests this side makes, on a connection: the initiator's
//! side (checking and queueing RMA and atomic requests, staging WRITE,
//! READ and ATOMIC frames and WRITE data, landing the answers), in stream
//! order with sends.

use super::place::RxState;
use super::tx::Done;
use super::{Conn, State};
use crate::tcp::event::{Event, ProtoError};
use crate::tcp::one_sided::{AtomicArgs, Remote, RmaKind, RmaReq, MAX_RANGES};
use crate::tcp::rx::{clip, Rx};
use ofi_base::atomic::{self, AtomicKind};
use ofi_base::consts::atomic_op;
use ofi_base::error::errno;
use ofi_base::iov::{iov_len, IoVec};
use ofi_base::matching::MAX_IOV;
use ofi_wire::tcp::{desc_len, flag, kind, op, DescRepr, Range, Repr, RmaDesc};

/// One of our requests (or an acknowledged send) waiting for its answer.
#[derive(Debug)]
pub(super) struct Outgoing {
    context: usize,
    /// A message (SendComplete) rather than a one-sided request.
    send: bool,
    /// Where the answer lands.
    pub(super) dest: [IoVec; MAX_IOV],
    pub(super) cnt: usize,
    /// Answer length on success.
    pub(super) want: usize,
    /// Answer bytes landed.
    pub(super) got: usize,
    /// RESP seen (RESP_DATA may follow).
    answered: bool,
}

impl Outgoing {
    /// The completion event of a failure.
    pub(super) fn failed(&self, err: i32) -> Event {
        if self.send {
            Event::SendError {
                context: self.context,
                err,
            }
        } else {
            Event::RmaError {
                context: self.context,
                err,
            }
        }
    }
}

/// Our WRITE whose data is still being staged in DATA frames.
#[derive(Debug)]
pub(super) struct WStream {
    id: u64,
    src: [IoVec; MAX_IOV],
    cnt: usize,
    off: usize,
    total: usize,
}

fn wire_kind(k: AtomicKind) -> u8 {
    match k {
        AtomicKind::Basic => kind::ATOMIC,
        AtomicKind::Fetch => kind::FETCH,
        AtomicKind::Compare => kind::COMPARE,
    }
}

/// Operand and compare bytes an atomic of `bytes` target bytes carries.
pub(super) fn operand_bytes(a: &AtomicArgs, bytes: usize) -> (usize, usize) {
    let operand = if a.kind == AtomicKind::Fetch && a.op == atomic_op::FI_ATOMIC_READ {
        0
    } else {
        bytes
    };
    let compare = if a.kind == AtomicKind::Compare {
        bytes
    } else {
        0
    };
    (operand, compare)
}

impl Conn {
    /// Queues a one-sided request, in order with sends. `FI_EINVAL` for
    /// more ranges than fit or lengths that disagree (remote and local, or
    /// an atomic's buffers and its element count), `FI_EOPNOTSUPP` for an
    /// atomic that is not defined, `FI_EMSGSIZE` above `max_msg_size` (an
    /// atomic: above `max_frame`), `FI_ENOTCONN` once closing.
    pub fn queue_rma(&mut self, req: RmaReq) -> Result<(), i32> {
        if req.local_cnt > MAX_IOV
            || req.compare_cnt > MAX_IOV
            || req.result_cnt > MAX_IOV
            || req.remote_cnt == 0
            || req.remote_cnt > MAX_RANGES
        {
            return Err(errno::FI_EINVAL);
        }
        if matches!(self.state, State::Closing | State::Closed) {
            return Err(errno::FI_ENOTCONN);
        }
        let remote = req
            .remote()
            .iter()
            .try_fold(0u64, |a, r| a.checked_add(r.len))
            .ok_or(errno::FI_EINVAL)?;
        match req.kind {
            RmaKind::Write | RmaKind::Read => {
                if remote != iov_len(req.local()) as u64 {
                    return Err(errno::FI_EINVAL);
                }
                if remote > self.cfg.max_msg_size as u64 {
                    return Err(errno::FI_EMSGSIZE);
                }
            }
            RmaKind::Atomic(a) => {
                if a.op > u8::MAX as u32 || a.datatype > u8::MAX as u32 {
                    return Err(errno::FI_EINVAL);
                }
                let size = atomic::datatype_size(a.datatype).ok_or(errno::FI_EINVAL)?;
                if !atomic::valid(a.kind, a.op, a.datatype) {
                    return Err(errno::FI_EOPNOTSUPP);
                }
                let bytes = remote
                    .checked_mul(size as u64)
                    .filter(|b| *b <= self.cfg.max_frame as u64)
                    .ok_or(errno::FI_EMSGSIZE)? as usize;
                let (ob, cb) = operand_bytes(&a, bytes);
                let rb = if a.kind == AtomicKind::Basic {
                    0
                } else {
                    bytes
                };
                if iov_len(req.local()) != ob
                    || iov_len(req.compare()) != cb
                    || iov_len(req.result()) != rb
                {
                    return Err(errno::FI_EINVAL);
                }
                if desc_len(req.remote_cnt) + ob + cb > self.cfg.max_frame {
                    return Err(errno::FI_EMSGSIZE);
                }
            }
        }
        self.sendq.push_back(super::Req::Rma(req));
        Ok(())
    }

    /// Records that request `id` waits for an answer landing in `dest`.
    pub(super) fn await_answer(
        &mut self,
        id: u64,
        context: usize,
        send: bool,
        dest: &[IoVec],
        want: usize,
    ) {
        let mut d = [IoVec::default(); MAX_IOV];
        let cnt = dest.len().min(MAX_IOV);
        d[..cnt].copy_from_slice(&dest[..cnt]);
        self.outstanding.insert(
            id,
            Outgoing {
                context,
                send,
                dest: d,
                cnt,
                want,
                got: 0,
                answered: false,
            },
        );
    }

    pub(super) fn commit_rma(&mut self, req: RmaReq) {
        let id = self.new_id();
        let mut d = DescRepr {
            count: req.remote_cnt.min(MAX_RANGES),
            ..Default::default()
        };
        for (w, r) in d.ranges.iter_mut().zip(req.remote()) {
            let Remote { addr, len, key } = *r;
            *w = Range { addr, len, key };
        }
        let dlen = d.len();
        let mut desc = [0u8; desc_len(MAX_RANGES)];
        let cq = if req.cq_data { flag::CQ_DATA } else { 0 };
        let commit = if req.commit_complete { flag::COMMIT } else { 0 };
        let data = if req.cq_data { req.data } else { 0 };
        let mut out = [IoVec::default(); MAX_IOV];
        match req.kind {
            RmaKind::Write => {
                d.emit(&mut RmaDesc::new_unchecked(&mut desc[..dlen]));
                let total = iov_len(req.local());
                let first = total.min(self.cfg.data_chunk.saturating_sub(dlen));
                let r = Repr {
                    op: op::WRITE,
                    flags: cq | commit,
                    len: (dlen + first) as u64,
                    tag: first as u64,
                    data,
                    id,
                };
                self.stage_frame(&r, &desc[..dlen], Done::Nothing);
                let n = clip(req.local(), 0, first, &mut out);
                self.push_user(&out[..n], Done::Nothing);
                if total > first {
                    self.wstream = Some(WStream {
                        id,
                        src: req.local,
                        cnt: req.local_cnt.min(MAX_IOV),
                        off: first,
                        total,
                    });
                }
                self.await_answer(id, req.context, false, &[], 0);
            }
            RmaKind::Read => {
                d.emit(&mut RmaDesc::new_unchecked(&mut desc[..dlen]));
                let r = Repr {
                    op: op::READ,
                    len: dlen as u64,
                    id,
                    ..Default::default()
                };
                self.stage_frame(&r, &desc[..dlen], Done::Nothing);
                let want = iov_len(req.local());
                self.await_answer(id, req.context, false, req.local(), want);
            }
            RmaKind::Atomic(a) => {
                d.kind = wire_kind(a.kind);
                d.op = a.op as u8;
                d.datatype = a.datatype as u8;
                d.emit(&mut RmaDesc::new_unchecked(&mut desc[..dlen]));
                let ob = iov_len(req.local());
                let cb = iov_len(req.compare());
                let r = Repr {
                    op: op::ATOMIC,
                    flags: cq | commit,
                    len: (dlen + ob + cb) as u64,
                    tag: (ob + cb) as u64,
                    data,
                    id,
                };
                self.stage_frame(&r, &desc[..dlen], Done::Nothing);
                let n = clip(req.local(), 0, ob, &mut out);
                self.push_user(&out[..n], Done::Nothing);
                let n = clip(req.compare(), 0, cb, &mut out);
                self.push_user(&out[..n], Done::Nothing);
                let want = iov_len(req.result());
                self.await_answer(id, req.context, false, req.result(), want);
            }
        }
    }

    /// Stages the next DATA frame of the WRITE being sent.
    pub(super) fn stage_write_chunk(&mut self) {
        let Some(w) = self.wstream.as_mut() else {
            return;
        };
        let chunk = self.cfg.data_chunk.min(w.total - w.off);
        let (id, off, src, cnt) = (w.id, w.off, w.src, w.cnt);
        w.off += chunk;
        if w.off == w.total {
            self.wstream = None;
        }
        let r = Repr {
            op: op::DATA,
            len: chunk as u64,
            id,
            ..Default::default()
        };
        self.stage_frame(&r, &[], Done::Nothing);
        let mut out = [IoVec::default(); MAX_IOV];
        let n = clip(&src[..cnt], off, chunk, &mut out);
        self.push_user(&out[..n], Done::Nothing);
    }

    /// Request `id` is answered: complete it (`status` 0) or fail it.
    pub(super) fn answered(&mut self, id: u64, status: i32) {
        let Some(o) = self.outstanding.remove(&id) else {
            return;
        };
        let ev = match (status, o.send) {
            (0, true) => Event::SendComplete { context: o.context },
            (0, false) => Event::RmaComplete { context: o.context },
            (e, _) => o.failed(e),
        };
        self.events.push_back(ev);
    }

    pub(super) fn on_resp(&mut self, r: &Repr, rx: &mut Rx) {
        let Some(o) = self.outstanding.get_mut(&r.id) else {
            return self
                .protocol_error(rx, ProtoError::Violation("an answer to an unknown request"));
        };
        if o.answered {
            return self.protocol_error(rx, ProtoError::Violation("a second answer to a request"));
        }
        o.answered = true;
        if r.data != 0 {
            // A refusal: nothing was executed, nothing follows.
            return self.answered(r.id, r.data as i32);
        }
        if r.tag != o.want as u64 {
            return self.protocol_error(
                rx,
                ProtoError::Violation("an answer whose length differs from the request"),
            );
        }
        if o.want == 0 {
            self.answered(r.id, 0);
        } else if r.len > 0 {
            self.rstate = RxState::Answer {
                id: r.id,
                left: r.len as usize,
            };
        }
    }

    pub(super) fn on_resp_data(&mut self, r: &Repr, rx: &mut Rx) {
        let room = match self.outstanding.get(&r.id) {
            Some(o) if o.answered => o.want - o.got,
            _ => {
                return self.protocol_error(
                    rx,
                    ProtoError::Violation("RESP_DATA for no answer in progress"),
                )
            }
        };
        if r.len > room as u64 {
            return self.protocol_error(
                rx,
                ProtoError::Violation("RESP_DATA beyond the answer's length"),
            );
        }
        self.rstate = RxState::Answer {
            id: r.id,
            left: r.len as usize,
        };
    }
}
