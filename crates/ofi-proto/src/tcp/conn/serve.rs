//! One-sided requests from the peer, on a connection: the target's side
//! (resolving ranges, landing WRITE data in place, serving READs, applying
//! atomics, answering with RESP), in stream order.

use super::place::RxState;
use super::rma::operand_bytes;
use super::tx::{Done, Seg, SegKind};
use super::Conn;
use crate::tcp::event::{Event, ProtoError};
use crate::tcp::one_sided::{AtomicArgs, Grant, MAX_RANGES};
use crate::tcp::rx::{clip, Rx};
use ofi_base::atomic::{self, AtomicKind};
use ofi_base::consts::{
    atomic_op, enum_name, ATOMIC_OP_NAMES, FI_ATOMIC, FI_REMOTE_CQ_DATA, FI_REMOTE_READ,
    FI_REMOTE_WRITE, FI_RMA,
};
use ofi_base::error::errno;
use ofi_base::iov::IoVec;
use ofi_base::matching::MAX_IOV;
use ofi_base::rma::RmaIov;
use ofi_wire::tcp::{flag, kind, op, DescRepr, Repr, RmaDesc};

use std::collections::VecDeque;

const _: () = assert!(MAX_RANGES <= MAX_IOV);

/// Answer buffers a connection keeps for reuse.
const SPARE_MAX: usize = 8;

/// Answers with fewer core-held bytes than this are copied into the stage
/// with their header (one slice); larger ones are sent from their buffer.
const HELD_MIN: usize = 2048;

/// Answer buffers that segments send from, oldest first. Answers are
/// staged one after another and written in order, so buffers are
/// released from the front.
#[derive(Debug, Default)]
pub(super) struct Held {
    bufs: VecDeque<Vec<u8>>,
    /// Sequence number of `bufs[0]`.
    first: u64,
}

impl Held {
    /// Keeps `b`; its sequence number.
    fn push(&mut self, b: Vec<u8>) -> u64 {
        self.bufs.push_back(b);
        self.first + self.bufs.len() as u64 - 1
    }

    /// The buffer `seq` (a segment's, so still held).
    pub(super) fn get(&self, seq: u64) -> &[u8] {
        &self.bufs[(seq - self.first) as usize]
    }

    /// Drops every buffer up to and including `seq`, handing each to `f`.
    fn release_through(&mut self, seq: u64, mut f: impl FnMut(Vec<u8>)) {
        while self.first <= seq {
            let Some(b) = self.bufs.pop_front() else {
                break;
            };
            self.first += 1;
            f(b);
        }
    }

    /// Drops every buffer (the connection is closed).
    pub(super) fn clear(&mut self) {
        self.first += self.bufs.len() as u64;
        self.bufs.clear();
    }
}

/// Where the bytes of an answer come from.
#[derive(Debug)]
pub(super) enum RespSrc {
    None,
    /// Core-owned bytes; `base` is the answer offset of `bytes[0]`.
    Bytes {
        bytes: Vec<u8>,
        base: usize,
    },
    /// Core-owned bytes moved to `Conn::held` when the answer's first
    /// frame was staged; `base` as for `Bytes`.
    Held {
        seq: u64,
        base: usize,
    },
    /// Registered memory (READ data).
    Mem {
        iov: [IoVec; MAX_IOV],
        cnt: usize,
    },
}

/// An answer to one of the peer's requests, staged a frame at a time.
#[derive(Debug)]
pub(super) struct RespOut {
    id: u64,
    status: i32,
    total: usize,
    sent: usize,
    started: bool,
    src: RespSrc,
}

/// The peer's WRITE whose data is landing.
#[derive(Debug)]
pub(super) struct WriteIn {
    pub(super) id: u64,
    pub(super) total: usize,
    pub(super) got: usize,
    /// 0, or the FI_E* answer (the data is then dropped).
    pub(super) status: i32,
    pub(super) grant: Option<Grant>,
    pub(super) iov: [IoVec; MAX_IOV],
    pub(super) cnt: usize,
    cq_data: Option<u64>,
    /// FI_COMMIT_COMPLETE: persisted before the answer.
    commit: bool,
}

/// Byte ranges of a descriptor whose lengths count `size`-byte units, and
/// their total; a violation if anything overflows or exceeds `max`.
fn byte_ranges(
    d: &DescRepr,
    size: usize,
    max: usize,
) -> Result<([RmaIov; MAX_RANGES], usize), &'static str> {
    let mut out = [RmaIov::default(); MAX_RANGES];
    let mut total = 0u64;
    for (o, r) in out.iter_mut().zip(d.ranges()) {
        let len = r
            .len
            .checked_mul(size as u64)
            .ok_or("a range length overflows")?;
        total = total
            .checked_add(len)
            .ok_or("the request length overflows")?;
        if total > max as u64 {
            return Err("a request longer than the maximum");
        }
        *o = RmaIov {
            addr: r.addr,
            len: len as usize,
            key: r.key,
        };
    }
    Ok((out, total as usize))
}

impl Conn {
    /// Queues the answer to the peer's request `id`.
    pub(super) fn answer(&mut self, id: u64, status: i32, src: RespSrc, total: usize) {
        self.resps.push_back(RespOut {
            id,
            status,
            total,
            sent: 0,
            started: false,
            src,
        });
    }

    /// Stages the next frame of the first answer.
    pub(super) fn stage_answer(&mut self) {
        let Some(mut a) = self.resps.pop_front() else {
            return;
        };
        let chunk = (a.total - a.sent).min(self.cfg.data_chunk);
        let r = if a.started {
            Repr {
                op: op::RESP_DATA,
                len: chunk as u64,
                id: a.id,
                ..Default::default()
            }
        } else {
            Repr {
                op: op::RESP,
                len: chunk as u64,
                tag: a.total as u64,
                data: a.status as u64,
                id: a.id,
                ..Default::default()
            }
        };
        a.started = true;
        let at = a.sent;
        a.sent += chunk;
        if matches!(&a.src, RespSrc::Bytes { bytes, .. } if bytes.len() >= HELD_MIN) {
            if let RespSrc::Bytes { bytes, base } = std::mem::replace(&mut a.src, RespSrc::None) {
                let seq = self.held.push(bytes);
                a.src = RespSrc::Held { seq, base };
            }
        }
        match &a.src {
            RespSrc::None => self.stage_frame(&r, &[], Done::Nothing),
            RespSrc::Bytes { bytes, base } => {
                let from = at - base;
                self.stage_frame(&r, &bytes[from..from + chunk], Done::Nothing);
            }
            RespSrc::Held { seq, base } => {
                self.stage_frame(&r, &[], Done::Nothing);
                if chunk > 0 {
                    self.segs.push_back(Seg {
                        kind: SegKind::Held {
                            seq: *seq,
                            start: at - base,
                        },
                        len: chunk,
                        done: Done::Nothing,
                    });
                }
            }
            RespSrc::Mem { iov, cnt } => {
                self.stage_frame(&r, &[], Done::Nothing);
                let mut out = [IoVec::default(); MAX_IOV];
                let n = clip(&iov[..*cnt], at, chunk, &mut out);
                for v in &out[..n] {
                    self.segs.push_back(Seg {
                        kind: SegKind::Mem(v.base),
                        len: v.len,
                        done: Done::Nothing,
                    });
                }
            }
        }
        if a.sent < a.total {
            self.resps.push_front(a);
        } else if let RespSrc::Bytes { bytes, .. } = a.src {
            if self.spare.len() < SPARE_MAX {
                self.spare.push(bytes);
            }
        }
    }

    /// A held answer buffer's bytes up to `end` are written: once that is
    /// all of it, the buffer (and any before it) goes back to the spares.
    pub(super) fn held_written(&mut self, seq: u64, end: usize) {
        if end < self.held.get(seq).len() {
            return;
        }
        let spare = &mut self.spare;
        self.held.release_through(seq, |b| {
            if spare.len() < SPARE_MAX {
                spare.push(b);
            }
        });
    }

    /// Before a frame that may change memory: copies the READ data still
    /// waiting to be written out of registered memory, so the answer holds
    /// what the memory held when the READ was executed.
    pub(super) fn capture(&mut self, rx: &mut Rx) {
        if self.mem_refs == 0 {
            return;
        }
        self.mem_refs = 0;
        self.capture_memory(rx);
        // Nothing refers to the READs' memory any more.
        self.release_reads(rx, true);
    }

    fn capture_memory(&mut self, rx: &mut Rx) {
        let Some(m) = rx.memory() else {
            return;
        };
        for s in self.segs.iter_mut() {
            if let SegKind::Mem(base) = s.kind {
                let start = self.stage.len();
                self.stage.resize(start + s.len, 0);
                m.read(IoVec { base, len: s.len }, &mut self.stage[start..]);
                s.kind = SegKind::Staged(start);
            }
        }
        for a in self.resps.iter_mut() {
            if let RespSrc::Mem { iov, cnt } = a.src {
                let left = a.total - a.sent;
                // A reused buffer is overwritten, not zeroed first.
                let mut bytes = self.spare.pop().unwrap_or_default();
                bytes.truncate(left);
                bytes.resize(left, 0);
                let mut parts = [IoVec::default(); MAX_IOV];
                let n = clip(&iov[..cnt], a.sent, left, &mut parts);
                let mut at = 0;
                for p in &parts[..n] {
                    m.read(*p, &mut bytes[at..at + p.len]);
                    at += p.len;
                }
                // Nothing of an earlier answer may go out with this one.
                bytes[at.min(left)..].fill(0);
                a.src = RespSrc::Bytes {
                    bytes,
                    base: a.sent,
                };
            }
        }
    }

    /// A WRITE, READ or ATOMIC frame's descriptor (and, for ATOMIC, its
    /// operands) has been read.
    pub(super) fn on_request(&mut self, r: Repr, buf: Vec<u8>, rx: &mut Rx) {
        let dlen = (r.len - r.tag) as usize;
        let d = match DescRepr::parse(&RmaDesc::new_unchecked(&buf[..dlen.min(buf.len())]), r.op) {
            Ok(d) => d,
            Err(e) => {
                rx.recycle(buf);
                return self.protocol_error(rx, ProtoError::Wire(e));
            }
        };
        match r.op {
            op::WRITE => self.start_write(&r, &d, rx),
            op::READ => self.serve_read(&r, &d, rx),
            _ => self.serve_atomic(&r, &d, &buf[dlen..], rx),
        }
        rx.recycle(buf);
    }

    fn start_write(&mut self, r: &Repr, d: &DescRepr, rx: &mut Rx) {
        let (ranges, total) = match byte_ranges(d, 1, self.cfg.max_msg_size) {
            Ok(x) => x,
            Err(v) => return self.protocol_error(rx, ProtoError::Violation(v)),
        };
        if r.tag > total as u64 {
            return self.protocol_error(
                rx,
                ProtoError::Violation("a WRITE carrying more than its ranges hold"),
            );
        }
        let mut iov = [IoVec::default(); MAX_IOV];
        let commit = r.flags & flag::COMMIT != 0;
        let (status, grant) = match rx.memory() {
            None => (errno::FI_EOPNOTSUPP, None),
            Some(m) => match m.resolve(&ranges[..d.count], FI_REMOTE_WRITE, &mut iov[..d.count]) {
                Ok(g) => match m.check_durable_if(commit, g) {
                    Ok(()) => (0, Some(g)),
                    Err(e) => {
                        // Refused before a byte lands: the data is dropped.
                        m.release(g, false);
                        (e, None)
                    }
                },
                Err(e) => (e, None),
            },
        };
        self.wr = Some(WriteIn {
            id: r.id,
            total,
            got: 0,
            status,
            grant,
            iov,
            cnt: d.count,
            cq_data: (r.flags & flag::CQ_DATA != 0).then_some(r.data),
            commit,
        });
        if r.tag > 0 {
            self.rstate = RxState::WriteData {
                left: r.tag as usize,
            };
        } else if total == 0 {
            self.finish_write(rx);
        }
    }

    /// `n` bytes of READ answers taken from memory were written: the
    /// grants whose bytes are all out move to `reads_done`.
    pub(super) fn reads_written(&mut self, mut n: usize) {
        while n > 0 {
            let Some((g, left)) = self.read_grants.front_mut() else {
                return;
            };
            let k = n.min(*left);
            *left -= k;
            n -= k;
            if *left == 0 {
                let g = *g;
                self.read_grants.pop_front();
                self.reads_done.push(g);
            }
        }
    }

    /// Releases the READ grants whose answers are out (`all`: every READ
    /// grant, when nothing refers to their memory any more).
    pub(super) fn release_reads(&mut self, rx: &mut Rx, all: bool) {
        let nothing = self.reads_done.is_empty() && (!all || self.read_grants.is_empty());
        if nothing {
            return;
        }
        let Some(m) = rx.memory() else {
            return;
        };
        for g in self.reads_done.drain(..) {
            m.release(g, true);
        }
        if all {
            for (g, _) in self.read_grants.drain(..) {
                m.release(g, true);
            }
        }
    }

    /// Before a chunk of a WRITE lands: if its region is being closed, the
    /// grant goes now and the rest of the data is discarded.
    pub(super) fn check_write_live(wr: &mut Option<WriteIn>, rx: &mut Rx) {
        let Some(w) = wr.as_mut() else {
            return;
        };
        let (Some(g), Some(m)) = (w.grant, rx.memory()) else {
            return;
        };
        if w.status == 0 && !m.live(g) {
            m.release(g, false);
            w.grant = None;
            w.status = errno::FI_EKEYREJECTED;
        }
    }

    /// The peer's WRITE has all its data: count it, report its CQ data,
    /// answer.
    pub(super) fn finish_write(&mut self, rx: &mut Rx) {
        let Some(mut w) = self.wr.take() else {
            return;
        };
        if let (Some(g), Some(m)) = (w.grant, rx.memory()) {
            if w.commit && w.status == 0 {
                if let Err(e) = m.persist(g) {
                    w.status = e;
                }
            }
            m.release(g, w.status == 0);
        }
        if w.status == 0 {
            if let Some(data) = w.cq_data {
                rx.push_event(Event::RemoteCqData {
                    flags: FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA,
                    len: w.total,
                    data,
                    src: self.peer,
                });
            }
        }
        self.answer(w.id, w.status, RespSrc::None, 0);
    }

    fn serve_read(&mut self, r: &Repr, d: &DescRepr, rx: &mut Rx) {
        let (ranges, total) = match byte_ranges(d, 1, self.cfg.max_msg_size) {
            Ok(x) => x,
            Err(v) => return self.protocol_error(rx, ProtoError::Violation(v)),
        };
        let mut iov = [IoVec::default(); MAX_IOV];
        let res = match rx.memory() {
            None => Err(errno::FI_EOPNOTSUPP),
            Some(m) => m.resolve(&ranges[..d.count], FI_REMOTE_READ, &mut iov[..d.count]),
        };
        match res {
            Ok(g) => {
                // Held until the answer's bytes are out (or captured).
                if total == 0 {
                    self.reads_done.push(g);
                } else {
                    self.read_grants.push_back((g, total));
                }
                self.mem_refs += total;
                let cnt = d.count;
                self.answer(r.id, 0, RespSrc::Mem { iov, cnt }, total);
            }
            Err(e) => self.answer(r.id, e, RespSrc::None, 0),
        }
    }

    fn serve_atomic(&mut self, r: &Repr, d: &DescRepr, payload: &[u8], rx: &mut Rx) {
        let (o, dt) = (u32::from(d.op), u32::from(d.datatype));
        let size = match atomic::datatype_size(dt) {
            Some(s) if enum_name(ATOMIC_OP_NAMES, o).is_some() => s,
            _ => {
                return self.protocol_error(
                    rx,
                    ProtoError::Violation("an unknown atomic operation or datatype"),
                )
            }
        };
        let k = match d.kind {
            kind::ATOMIC => AtomicKind::Basic,
            kind::FETCH => AtomicKind::Fetch,
            _ => AtomicKind::Compare,
        };
        let args = AtomicArgs {
            kind: k,
            op: o,
            datatype: dt,
        };
        let (ranges, total) = match byte_ranges(d, size, self.cfg.max_frame) {
            Ok(x) => x,
            Err(v) => return self.protocol_error(rx, ProtoError::Violation(v)),
        };
        let (ob, cb) = operand_bytes(&args, total);
        if payload.len() != ob + cb {
            return self.protocol_error(
                rx,
                ProtoError::Violation("ATOMIC operands disagree with its ranges"),
            );
        }
        let (operand, compare) = payload.split_at(ob);
        let mut result = if k == AtomicKind::Basic {
            Vec::new()
        } else {
            rx.alloc_buf(total)
        };
        let access = if o == atomic_op::FI_ATOMIC_READ {
            FI_REMOTE_READ
        } else if k == AtomicKind::Basic {
            FI_REMOTE_WRITE
        } else {
            // A fetch or compare writes, and counts as a read.
            FI_REMOTE_WRITE | crate::tcp::COUNT_AS_READ
        };
        let mut iov = [IoVec::default(); MAX_IOV];
        let status = if !atomic::valid(k, o, dt) {
            errno::FI_EOPNOTSUPP
        } else {
            match rx.memory() {
                None => errno::FI_EOPNOTSUPP,
                Some(m) => match m.resolve(&ranges[..d.count], access, &mut iov[..d.count]) {
                    Err(e) => e,
                    Ok(g) => {
                        let commit = r.flags & flag::COMMIT != 0;
                        let mut at = 0;
                        let mut st = m.check_durable_if(commit, g).err().unwrap_or(0);
                        // A refused request applies nothing.
                        let ranges = if st == 0 { &ranges[..d.count] } else { &[][..] };
                        for (i, rg) in ranges.iter().enumerate() {
                            let span = at..at + rg.len;
                            let opnd = if ob > 0 { &operand[span.clone()] } else { &[] };
                            let cmp = if cb > 0 { &compare[span.clone()] } else { &[] };
                            let res: &mut [u8] = if result.is_empty() {
                                &mut []
                            } else {
                                &mut result[span]
                            };
                            if let Err(e) = m.atomic(g, i, &args, opnd, cmp, res) {
                                st = e;
                                break;
                            }
                            at += rg.len;
                        }
                        if commit && st == 0 {
                            st = m.persist(g).err().unwrap_or(0);
                        }
                        m.release(g, st == 0);
                        st
                    }
                },
            }
        };
        if status == 0 && r.flags & flag::CQ_DATA != 0 {
            rx.push_event(Event::RemoteCqData {
                flags: FI_ATOMIC | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA,
                len: total,
                data: r.data,
                src: self.peer,
            });
        }
        if status == 0 && k != AtomicKind::Basic {
            let n = result.len();
            self.answer(
                r.id,
                0,
                RespSrc::Bytes {
                    bytes: result,
                    base: 0,
                },
                n,
            );
        } else {
            rx.recycle(result);
            self.answer(r.id, status, RespSrc::None, 0);
        }
    }
}
