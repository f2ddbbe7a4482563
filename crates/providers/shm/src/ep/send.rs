//! The send paths, as the core's [`send_path`] picks them: inline in one
//! ring entry, through a bounce buffer of the receiver's segment, or as a
//! rendezvous (RTS) the receiver copies; and the DATA pushes of a
//! rendezvous whose receiver cannot copy across processes (after its NACK).

use super::{tx_flags, Inner, PendingSend, ShmEndpoint, INLINE_MAX};
use crate::peer::Peer;
use crate::{INJECT_SIZE, IOV_LIMIT};
use ofi_core::consts::*;
use ofi_core::error::{errno, Error, Result};
use ofi_core::object::SendOp;
use ofi_core::util::iov::{copy_from_iov, iov_len, IoVec};
use ofi_core::util::lock::SpinGuard;
use ofi_core::util::matching::MAX_IOV;
use ofi_proto::shm::path::{send_path, SendPath};
use ofi_wire::shm::{flag, op, Entry, Repr};
use std::sync::atomic::Ordering;

impl ShmEndpoint {
    /// Registers a rendezvous send; returns its cookie.
    fn alloc_send(&self, g: &mut Inner, s: PendingSend) -> u64 {
        self.busy.store(true, Ordering::Relaxed);
        g.sends.start(s.peer.addr.id(), s.len, s)
    }

    /// The header fields every send carries.
    #[inline]
    fn header(&self, op: &SendOp<'_>, len: usize) -> Repr {
        let cq_data = op.flags & FI_REMOTE_CQ_DATA != 0;
        Repr {
            flags: if op.tagged { flag::TAGGED } else { 0 }
                | if cq_data { flag::CQ_DATA } else { 0 },
            src: self.me.id(),
            tag: op.tag,
            data: if cq_data { op.data } else { 0 },
            total: len as u64,
            ..Default::default()
        }
    }

    /// Sends a message inline in one ring entry and completes it; false
    /// (nothing sent) when the peer's ring is full.
    #[inline(always)]
    fn push_inline(
        &self,
        g: &Inner,
        peer: &Peer,
        op: &SendOp<'_>,
        len: usize,
        completion: bool,
    ) -> bool {
        let mut r = self.header(op, len);
        r.op = op::INLINE;
        r.len = len as u32;
        let pushed = peer.seg.msg_ring().push_with(&peer.cached_head, |b| {
            let mut e = Entry::new_unchecked(b);
            // The receiver polls the slot's first cache line (sequence,
            // header, first 8 data bytes): fill the rest first and that line
            // last, so it changes hands once.
            let p = &mut e.payload_mut()[..len];
            if let [v] = op.iov {
                let head = len.min(8);
                if len > head {
                    // SAFETY: post_send's caller keeps the iov readable for
                    // this call; bytes head..len of the range are read.
                    unsafe { copy_from_iov(op.iov, head, &mut p[head..]) };
                }
                // SAFETY: the first `head` bytes of the same range.
                unsafe { copy_from_iov(std::slice::from_ref(v), 0, &mut p[..head]) };
            } else {
                // Several ranges (a composing provider's prefix and payload):
                // each in turn.
                let mut at = 0;
                for v in op.iov {
                    // SAFETY: post_send's caller keeps every range of the
                    // iov readable for this call; at + v.len <= len, the
                    // ranges' total.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            v.base as *const u8,
                            p[at..at + v.len].as_mut_ptr(),
                            v.len,
                        )
                    };
                    at += v.len;
                }
            }
            r.emit(&mut e);
        });
        if pushed.is_err() {
            return false;
        }
        peer.notify();
        self.tx_complete(g, op.context, tx_flags(op.tagged), completion);
        true
    }

    /// Why a send is refused before it starts (not enabled, too many
    /// ranges, no capability, an inject over the inject size).
    #[cold]
    #[inline(never)]
    fn send_refused(&self, op: &SendOp<'_>, len: usize) -> Error {
        if !self.enabled.load(Ordering::Relaxed) {
            return Error::new(
                errno::FI_EOPBADSTATE,
                "shm: send on an endpoint that is not enabled",
            );
        }
        if op.iov.len() > IOV_LIMIT {
            return Error::inval(format!(
                "shm: {} iov entries exceed the limit of {IOV_LIMIT}",
                op.iov.len()
            ));
        }
        if len > INJECT_SIZE {
            return Error::new(
                errno::FI_EMSGSIZE,
                format!("shm: inject of {len} bytes exceeds inject_size {INJECT_SIZE}"),
            );
        }
        Error::new(
            errno::FI_EOPNOTSUPP,
            "shm: the endpoint was opened without this capability",
        )
    }

    /// Posts a send. The common one (inline, to a peer already mapped, with
    /// nothing it must wait for or vouch beyond the copy) goes out here;
    /// everything else takes [`send_general`](Self::send_general).
    #[inline]
    pub(super) fn send_inner(&self, op: &SendOp<'_>) -> Result<()> {
        let need = if op.tagged { FI_TAGGED } else { FI_MSG };
        let len = iov_len(op.iov);
        let inject = op.flags & FI_INJECT != 0;
        if !self.enabled.load(Ordering::Relaxed)
            || op.iov.len() > IOV_LIMIT
            || self.caps & need == 0
            || (inject && len > INJECT_SIZE)
        {
            return Err(self.send_refused(op, len));
        }
        let g = self.lock();
        let waits = op.flags & FI_FENCE != 0 || !g.rma_pushes.is_empty();
        let delivery = !inject
            && (op.flags | g.b.info.tx_attr.op_flags) & (FI_DELIVERY_COMPLETE | FI_MATCH_COMPLETE)
                != 0;
        if len <= INLINE_MAX && !waits && !delivery {
            let cached =
                g.b.av
                    .as_ref()
                    .is_some_and(|av| av.generation() == g.av_gen);
            if let Some(Some(peer)) = g.peers.get(op.dest as usize).filter(|_| cached) {
                if !peer.closed()
                    && (!self.keyed || peer.trusted.load(Ordering::Relaxed))
                    && self.push_inline(&g, peer, op, len, g.b.tx_completion(op.flags))
                {
                    return Ok(());
                }
            }
        }
        self.send_general(g, op, len)
    }

    /// Every send the common path did not take: fenced ones, those to a
    /// peer not yet mapped (or whose ring is full), bounce-buffer and
    /// rendezvous sends.
    #[inline(never)]
    fn send_general(&self, mut g: SpinGuard<'_, Inner>, op: &SendOp<'_>, len: usize) -> Result<()> {
        let inject = op.flags & FI_INJECT != 0;
        self.admit(&g, op.flags, op.dest)?;
        let completion = g.b.tx_completion(op.flags);
        // FI_MATCH_COMPLETE, and FI_DELIVERY_COMPLETE for now: completed
        // by the receiver's ACK once the data is in the matched buffer.
        let delivery = (op.flags | g.b.info.tx_attr.op_flags)
            & (FI_DELIVERY_COMPLETE | FI_MATCH_COMPLETE)
            != 0;
        let path = send_path(len, inject, delivery, &self.send_limits);
        if path == SendPath::Inline {
            // Fast path: a cached peer, borrowed without touching its refcount.
            let cached =
                g.b.av
                    .as_ref()
                    .is_some_and(|av| av.generation() == g.av_gen);
            if let Some(Some(peer)) = g.peers.get(op.dest as usize).filter(|_| cached) {
                if !peer.closed()
                    && (!self.keyed || peer.trusted.load(Ordering::Relaxed))
                    && self.push_inline(&g, peer, op, len, completion)
                {
                    return Ok(());
                }
            }
        }
        let peer = self.usable_peer(&mut g, op.dest)?;
        self.gate(&mut g, &peer)?;
        if path == SendPath::Inline {
            if self.push_inline(&g, &peer, op, len, completion) {
                return Ok(());
            }
            return Err(self.ring_full(&mut g, &peer));
        }
        let mut r = self.header(op, len);
        if path == SendPath::Bounce {
            // Without a free buffer (or with a peer's smaller than this
            // message): the rendezvous below.
            if let Some(mut buf) = peer.seg.alloc_bounce() {
                let bytes = buf.as_mut_slice();
                let l = len.min(bytes.len());
                // SAFETY: post_send's caller keeps the iov readable for this call.
                let copied = unsafe { copy_from_iov(op.iov, 0, &mut bytes[..l]) };
                if copied == len {
                    r.op = op::BOUNCE;
                    r.cookie = buf.index();
                    if peer
                        .seg
                        .msg_ring()
                        .push_with(&peer.cached_head, |b| r.emit(&mut Entry::new_unchecked(b)))
                        .is_ok()
                    {
                        buf.hand_over();
                        peer.notify();
                        self.tx_complete(&g, op.context, tx_flags(op.tagged), completion);
                        return Ok(());
                    }
                    drop(buf);
                    return Err(self.ring_full(&mut g, &peer));
                }
            }
        }
        // Rendezvous: the receiver copies from us and answers ACK or NACK.
        let mut iov = [IoVec::default(); MAX_IOV];
        iov[..op.iov.len()].copy_from_slice(op.iov);
        let cookie = self.alloc_send(
            &mut g,
            PendingSend {
                peer: peer.clone(),
                iov,
                cnt: op.iov.len(),
                len,
                context: op.context,
                flags: tx_flags(op.tagged),
                completion,
            },
        );
        r.op = op::RTS;
        r.iov_cnt = op.iov.len().max(1) as u8;
        r.cookie = cookie;
        let pushed = peer.seg.msg_ring().push_with(&peer.cached_head, |b| {
            let mut e = Entry::new_unchecked(b);
            r.emit(&mut e);
            let p = e.payload_mut();
            for (i, v) in op.iov.iter().enumerate() {
                p[i * 16..i * 16 + 8].copy_from_slice(&(v.base as u64).to_le_bytes());
                p[i * 16 + 8..i * 16 + 16].copy_from_slice(&(v.len as u64).to_le_bytes());
            }
            if op.iov.is_empty() {
                p[..16].fill(0);
            }
        });
        if pushed.is_err() {
            g.sends.cancel(cookie);
            return Err(self.ring_full(&mut g, &peer));
        }
        peer.notify();
        Ok(())
    }

    /// Pushes DATA entries of sends whose receiver cannot copy across
    /// processes, as the core's [`Sends::run_pushes`](ofi_proto::shm::rndv::Sends::run_pushes)
    /// plans them (each peer rung once per pass).
    pub(super) fn run_pushes(&self, g: &mut Inner) {
        let me = self.me.id();
        let mut rung: Option<std::sync::Arc<Peer>> = None;
        g.sends.run_pushes(INLINE_MAX, |s, _, c| {
            let r = Repr {
                op: op::DATA,
                len: c.len as u32,
                src: me,
                total: c.offset as u64,
                cookie: c.cookie,
                ..Default::default()
            };
            let ok = s
                .peer
                .seg
                .msg_ring()
                .push_with(&s.peer.cached_head, |b| {
                    let mut e = Entry::new_unchecked(b);
                    r.emit(&mut e);
                    // SAFETY: a pending send's iov stays valid until it completes.
                    unsafe {
                        copy_from_iov(&s.iov[..s.cnt], c.offset, &mut e.payload_mut()[..c.len])
                    };
                })
                .is_ok();
            if ok
                && !rung
                    .as_ref()
                    .is_some_and(|p| std::sync::Arc::ptr_eq(p, &s.peer))
            {
                if let Some(p) = rung.replace(s.peer.clone()) {
                    p.notify();
                }
            }
            ok
        });
        if let Some(p) = rung {
            p.notify();
        }
    }
}
