//! Rendezvous copies across processes: the receiver of an RTS reads the
//! sender's memory with process_vm_readv, alone or (large copies) together
//! with the sender, which writes chunks it claims in the receiver's
//! transfer descriptor after a CTS. The core picks the copy
//! ([`rts_copy`]) and says what a copy came to ([`copy_result`]: a short
//! copy is a failure); a refusal by the kernel falls back to a NACK and
//! DATA pushes.

use super::recv::Dest;
use super::{Inner, Meta, Reasm, ShmEndpoint};
use crate::addr::ShmAddr;
use crate::peer::Peer;
use ofi_core::error::errno;
use ofi_core::util::iov::IoVec;
use ofi_core::util::matching::MAX_IOV;
use ofi_proto::shm::liveness::CopyWait;
use ofi_proto::shm::path::{
    coop_chunks, coop_layout_ok, coop_outcome, coop_span, copy_result, rts_copy, CopyError, RtsCopy,
};
use ofi_proto::shm::rndv::Started;
use ofi_proto::shm::{ack, cts, nack};
use ofi_shmem::cma::{self, Range};
use ofi_shmem::segment::XferLayout;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often a receiver waiting for the chunks its sender claimed looks
/// at the sender's liveness (it gives up when the sender dies, or when no
/// chunk finishes within the peer timeout).
const COOP_CHECK: Duration = Duration::from_millis(5);

impl ShmEndpoint {
    /// Copies an RTS message from `sender`'s ranges `riov` into a receive
    /// and completes it, answering ACK; or falls back to DATA pushes (NACK).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn deliver_rts(
        &self,
        g: &mut Inner,
        d: &Dest<'_>,
        m: Meta,
        sender: u64,
        cookie: u64,
        riov: &[(u64, u64)],
        cq_flags: u64,
    ) {
        let buf = d.iov.first().map_or(0, |v| v.base + d.off);
        let want = m.total.min(d.cap);
        let remote: Vec<Range> = riov
            .iter()
            .map(|&(a, l)| Range {
                base: a as usize,
                len: l as usize,
            })
            .collect();
        let local = clip(d.iov, d.off, want);
        let me = self.me.id();
        if let Some(err) = self.dead_id(g, sender) {
            // Its sender was declared dead: its memory is gone.
            self.rx_error(g, d.context, cq_flags, err, m.tag);
            return;
        }
        // The receiver always tries: a refusal seen in the other direction
        // (this peer copying into us) says nothing about this one.
        let plan = rts_copy(want, false, &self.copy_cfg);
        if plan == RtsCopy::Coop {
            if let Some(res) = self.coop_read(g, sender, cookie, &local, &remote, want) {
                let res = res.map_err(|code| self.copy_failed(g, sender, code));
                match res {
                    Ok(n) => self.rx_complete(g, d.context, cq_flags, &m, n, buf, d.completion),
                    Err(code) => self.rx_error(g, d.context, cq_flags, code, m.tag),
                }
                self.send_ctrl(g, sender, ack(me, cookie, res.err().unwrap_or(0)));
                return;
            }
        }
        let res = if plan == RtsCopy::Push {
            Err(CopyError::Refused)
        } else {
            // SAFETY: post_recv's caller keeps the receive iov writable until completion.
            let moved = unsafe { cma::read_from(ShmAddr::from_id(sender).pid, &local, &remote) };
            if let Err(e) = &moved {
                tracing::debug!(error = %e, "shm: cross-process copy failed");
            }
            copy_result(want, moved.map_err(|e| e.raw_os_error()))
        };
        match res {
            Ok(()) => {
                self.rx_complete(g, d.context, cq_flags, &m, want, buf, d.completion);
                self.send_ctrl(g, sender, ack(me, cookie, 0));
            }
            Err(CopyError::Refused) => {
                if let Ok(p) = self.peer_by_id(g, sender) {
                    p.cma_ok.store(false, Ordering::Relaxed);
                }
                let n = d.iov.len().min(MAX_IOV);
                let mut v = [IoVec::default(); MAX_IOV];
                v[..n].copy_from_slice(&d.iov[..n]);
                let x = Reasm {
                    iov: v,
                    cnt: n,
                    offset: d.off,
                    cap: d.cap,
                    meta: m,
                    context: d.context,
                    cq_flags,
                    completion: d.completion,
                    buf,
                };
                match g.reasm.start(sender, cookie, m.total, x) {
                    Started::Waiting => {
                        self.busy.store(true, Ordering::Relaxed);
                        self.send_ctrl(g, sender, nack(me, cookie));
                    }
                    Started::Complete(_) => {
                        self.rx_complete(g, d.context, cq_flags, &m, 0, buf, d.completion);
                        self.send_ctrl(g, sender, ack(me, cookie, 0));
                    }
                    Started::Duplicate(_) => {
                        tracing::warn!(
                            sender,
                            cookie,
                            "shm: RTS reuses the cookie of a message being pushed"
                        );
                        self.rx_error(g, d.context, cq_flags, errno::FI_EIO, m.tag);
                    }
                }
            }
            Err(CopyError::Failed(code)) => {
                let code = self.copy_failed(g, sender, code);
                self.rx_error(g, d.context, cq_flags, code, m.tag);
                self.send_ctrl(g, sender, ack(me, cookie, code));
            }
        }
    }

    /// The error number of a copy from `sender` that failed with `code`:
    /// when the sender died under it, the cause's (and it is declared).
    fn copy_failed(&self, g: &mut Inner, sender: u64, code: i32) -> i32 {
        match g.by_id.get(&sender).cloned() {
            Some(p) if p.dead() => self.gone(g, &p).code(),
            Some(_) => code,
            None => self.dead_id(g, sender).unwrap_or(code),
        }
    }

    /// Copies a large message with the sender's help: chunk 0 first (which
    /// proves the kernel allows it), then a CTS invites the sender to claim
    /// chunks and write them while this side reads the others. None when a
    /// cooperative copy could not start (no descriptor, copies refused).
    pub(super) fn coop_read(
        &self,
        g: &mut Inner,
        sender: u64,
        cookie: u64,
        local: &[Range],
        remote: &[Range],
        want: usize,
    ) -> Option<std::result::Result<usize, i32>> {
        let pid = ShmAddr::from_id(sender).pid;
        let (chunk, n) = coop_chunks(want, self.cfg.coop_chunk);
        let peer = self.peer_by_id(g, sender).ok()?;
        // Until a copy from this peer has worked, do chunk 0 alone first: a
        // refusal then falls back cleanly, before the sender is involved.
        let first = if peer.cma_proven.load(Ordering::Relaxed) {
            0
        } else {
            if let Err(e) = copy_chunk(pid, local, remote, 0, chunk, want, false) {
                return match e {
                    CopyError::Refused => None,
                    CopyError::Failed(code) => Some(Err(code)),
                };
            }
            peer.cma_proven.store(true, Ordering::Relaxed);
            1
        };
        if n == first {
            return Some(Ok(want));
        }
        let di = g.xfer_free.pop()?;
        let Some(d) = self.seg.xfer(u64::from(di)) else {
            g.xfer_free.push(di);
            return None;
        };
        g.xfer_gen = g.xfer_gen.wrapping_add(1).max(1);
        let gen = u64::from(g.xfer_gen);
        let mut layout = XferLayout {
            nchunks: n,
            chunk,
            total: want,
            ranges_cnt: local.len().min(4),
            ..Default::default()
        };
        for (o, r) in layout.ranges.iter_mut().zip(local) {
            *o = (r.base, r.len);
        }
        d.publish(g.xfer_gen, &layout, first);
        self.send_ctrl(g, sender, cts(self.me.id(), cookie, u64::from(di), gen));
        while let Some(c) = d.claim(gen, n) {
            let r = copy_chunk(pid, local, remote, c, chunk, want, false);
            d.chunk_done(gen, r.err().map(CopyError::code));
        }
        // Wait for the chunks the sender claimed; it is copying them now.
        let start = Instant::now();
        let mut last = start;
        let mut wait = CopyWait::new(d.chunks_done(), start);
        let mut gave_up = None;
        while !d.finished(gen, n) {
            std::hint::spin_loop();
            let now = Instant::now();
            if now.duration_since(last) > COOP_CHECK {
                last = now;
                let exited = peer.dead();
                if let Some(cause) =
                    wait.observe(d.chunks_done(), exited, now, self.cfg.peer_timeout)
                {
                    d.fail(gen, cause.errno());
                    gave_up = Some(cause);
                    break;
                }
            }
        }
        // Retire the generation so no stale claim can succeed, then reuse.
        let failed = d.retire(gen);
        g.xfer_free.push(di);
        if let Some(cause) = gave_up {
            self.peer_down(g, sender, cause, false);
            return Some(Err(cause.errno()));
        }
        Some(coop_outcome(failed).map(|()| want))
    }

    /// The sender's half of a cooperative copy (a CTS arrived): claim chunks
    /// of descriptor `desc` and write them into the receiver's buffer until
    /// none are left.
    pub(super) fn coop_write(&self, g: &mut Inner, cookie: u64, desc: u64, gen: u64) {
        // The CTS names a pending send, or a one-sided write the target pulls.
        let found: Option<(Arc<Peer>, [IoVec; MAX_IOV], usize, usize)> = g
            .sends
            .get(cookie)
            .map(|s| (s.peer.clone(), s.iov, s.cnt, s.len))
            .or_else(|| self.rma_source(g, cookie));
        let Some((peer, iov, cnt_local, len)) = found else {
            return;
        };
        let Some(d) = peer.seg.xfer(desc) else {
            tracing::warn!(
                index = desc,
                "shm: CTS names an invalid transfer descriptor"
            );
            return;
        };
        let layout = d.layout();
        let (n, chunk, total) = (layout.nchunks, layout.chunk, layout.total);
        if !coop_layout_ok(n, chunk, total, len) {
            tracing::warn!("shm: CTS describes an impossible transfer");
            return;
        }
        let remote: Vec<Range> = layout
            .ranges()
            .iter()
            .map(|&(base, len)| Range { base, len })
            .collect();
        let local: Vec<Range> = iov[..cnt_local]
            .iter()
            .map(|v| Range {
                base: v.base,
                len: v.len,
            })
            .collect();
        let pid = peer.addr.pid;
        while let Some(c) = d.claim(gen, n) {
            let r = copy_chunk(pid, &local, &remote, c, chunk, total, true);
            d.chunk_done(gen, r.err().map(CopyError::code));
        }
    }
}

/// The part `[off, off + want)` of a list of (address, length) ranges.
fn clip_ranges(
    r: impl IntoIterator<Item = (usize, usize)>,
    mut off: usize,
    mut want: usize,
) -> Vec<Range> {
    let mut out = Vec::new();
    for (base, len) in r {
        if want == 0 {
            break;
        }
        if off >= len {
            off -= len;
            continue;
        }
        let n = (len - off).min(want);
        out.push(Range {
            base: base + off,
            len: n,
        });
        want -= n;
        off = 0;
    }
    out
}

/// [`clip_ranges`] over an iov list.
fn clip(iov: &[IoVec], off: usize, want: usize) -> Vec<Range> {
    clip_ranges(iov.iter().map(|v| (v.base, v.len)), off, want)
}

/// Copies chunk `c` of a transfer between `local` (this process) and
/// `remote` (process `pid`): a write when `write`, else a read. A chunk
/// the ranges cover only in part (a short copy) is a failure.
fn copy_chunk(
    pid: u32,
    local: &[Range],
    remote: &[Range],
    c: u64,
    chunk: usize,
    total: usize,
    write: bool,
) -> Result<(), CopyError> {
    let (off, len) = coop_span(c, chunk, total);
    let l = clip_ranges(local.iter().map(|x| (x.base, x.len)), off, len);
    let r = clip_ranges(remote.iter().map(|x| (x.base, x.len)), off, len);
    let moved = if write {
        // SAFETY: `local` is a pending send's iov, readable until it completes.
        unsafe { cma::write_to(pid, &l, &r) }
    } else {
        // SAFETY: `local` is a matched receive's iov, writable until it completes.
        unsafe { cma::read_from(pid, &l, &r) }
    };
    // One line for a chunk that did not move whole: the system's error, or
    // a short copy.
    let os = moved.as_ref().err().map(ToString::to_string);
    let res = copy_result(len, moved.map_err(|e| e.raw_os_error()));
    if res.is_err() {
        let why = os.as_deref().unwrap_or("short copy");
        tracing::debug!(
            chunk = c,
            len,
            error = why,
            "shm: chunk of a cooperative copy failed"
        );
    }
    res
}
