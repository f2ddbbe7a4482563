//! The send paths: small sends to a peer on this node as a shm inject,
//! completed at once (with no hybrid lock when its shm route is known);
//! the others eager (header and payload in one inner message) or as a
//! rendezvous (a header, then the payload as an inner tagged message the
//! receiver posts once the header matched).

// The raw layer's contract (caller memory valid until completion) is
// forwarded to the inner endpoints: unsafe calls, no unsafe memory access.
#![allow(unsafe_code)]

use super::{ctx, Deferred, HybridEp, State, TxRec, K_TX, NET, SHM};
use crate::wire::{self, Header};
use ofi_core::consts::*;
use ofi_core::error::{errno, Error, Result};
use ofi_core::object::{tx_completion, EpBindings, SendOp};
use ofi_core::util::iov::{copy_from_iov, iov_len, IoVec};
use ofi_core::util::matching::MAX_IOV;
use std::sync::atomic::Ordering;

/// Rendezvous payloads that may wait per path for the inner endpoint to
/// take them (see [`Deferred`]); a rendezvous send beyond that is refused
/// with FI_EAGAIN before anything goes out.
const DEFERRED_MAX: usize = 256;

impl HybridEp {
    /// True when `op` (of `len` bytes) goes as a shm inject: eager, not
    /// delivery-complete, and what goes (its short prefix and payload)
    /// within shm's inject size.
    fn injectable(&self, op: &SendOp<'_>, len: usize) -> bool {
        Self::prefix_len(op) + len <= self.shm_inject
            && len <= self.eager_max
            && (op.flags & FI_INJECT != 0
                || op.flags & (FI_DELIVERY_COMPLETE | FI_MATCH_COMPLETE) == 0)
    }

    /// The length of `op`'s prefix as a short message (see [`wire::SHORT`]):
    /// 0 when it goes bare.
    fn prefix_len(op: &SendOp<'_>) -> usize {
        wire::short_marker(op.tagged, op.flags & FI_REMOTE_CQ_DATA != 0).1
    }

    /// Sends `op` (`len` bytes, [`injectable`](Self::injectable)) to inner
    /// shm address `dest` as an inject (shm copies it before it returns;
    /// no inner completion) and completes it now, as a short message (see
    /// [`wire::SHORT`]). `spill` takes prefix and payload when the iov list
    /// leaves no entry for the prefix (None: the caller made sure it does,
    /// or the send is bare).
    #[inline(always)]
    fn send_injected(
        &self,
        b: &EpBindings,
        op: &SendOp<'_>,
        dest: u64,
        len: usize,
        spill: Option<&mut Vec<u8>>,
    ) -> Result<()> {
        let mut pb = [0u8; 16];
        let data = (op.flags & FI_REMOTE_CQ_DATA != 0).then_some(op.data);
        let (marker, n) = wire::short_prefix(op.tagged, op.tag, data, &mut pb);
        let pre = IoVec::from_slice(&pb[..n]);
        if let ([v], None) = (op.iov, &spill) {
            // One range (the common send): the prefix, if any, and it.
            let two = [pre, *v];
            return self.post_short(b, op, dest, marker, &two[usize::from(n == 0)..]);
        }
        let mut iov = [IoVec::default(); MAX_IOV + 1];
        let cnt = match spill {
            Some(buf) if n != 0 && op.iov.len() >= MAX_IOV => {
                // No entry left for the prefix: copy the payload behind it.
                buf.clear();
                buf.extend_from_slice(&pb[..n]);
                buf.resize(n + len, 0);
                // SAFETY: the caller keeps the iov valid for this call.
                unsafe { copy_from_iov(op.iov, 0, &mut buf[n..]) };
                iov[0] = IoVec::from_slice(&buf[..]);
                1
            }
            _ => {
                // The prefix (none when bare), then the payload's ranges.
                let at = usize::from(n != 0);
                iov[0] = pre;
                iov[at..at + op.iov.len()].copy_from_slice(op.iov);
                at + op.iov.len()
            }
        };
        self.post_short(b, op, dest, marker, &iov[..cnt])
    }

    /// Posts the inner inject of a short message (ranges `iov`, marked
    /// `marker`) and completes `op`.
    #[inline(always)]
    fn post_short(
        &self,
        b: &EpBindings,
        op: &SendOp<'_>,
        dest: u64,
        marker: u64,
        iov: &[IoVec],
    ) -> Result<()> {
        let inner = SendOp {
            iov,
            desc: &[],
            dest,
            tag: 0,
            data: marker,
            context: 0,
            flags: FI_INJECT | OFI_INJECT_CALL | FI_REMOTE_CQ_DATA | (op.flags & FI_FENCE),
            tagged: false,
        };
        // SAFETY: an inject reads the ranges during the call only: the
        // prefix and spill buffer live through it, and the caller keeps its
        // iov valid for it.
        unsafe { self.paths[SHM].ep.post_send(&inner) }?;
        let uflags = FI_SEND | if op.tagged { FI_TAGGED } else { FI_MSG };
        b.tx_done(
            op.context,
            uflags,
            tx_completion(op.flags, b.tx_selective),
            None,
        );
        Ok(())
    }

    /// Posts a send (the body of `post_send`, whose caller keeps the iov
    /// valid until the send completes, or through the call with FI_INJECT).
    /// The common one (small, to a peer on this node whose shm route is
    /// known, with room for its prefix in the iov list) goes out here as a
    /// shm inject, with no hybrid lock; everything else takes
    /// [`send_general`](Self::send_general).
    #[inline(always)]
    pub(super) fn send_inner(&self, op: &SendOp<'_>) -> Result<()> {
        let len = iov_len(op.iov);
        let need = if op.tagged { FI_TAGGED } else { FI_MSG };
        // Within `fast_max`, any prefix fits shm's inject size and the
        // message is eager.
        let sized = if op.flags & FI_INJECT != 0 {
            len <= self.inject_max
        } else {
            op.flags & (FI_DELIVERY_COMPLETE | FI_MATCH_COMPLETE) == 0
        };
        if op.iov.len() < MAX_IOV
            && len <= self.fast_max
            && sized
            && self.caps & need != 0
            && self.enabled.load(Ordering::Acquire)
        {
            if let Some(b) = self.bound.get() {
                let gen = b.av.as_ref().map_or(u64::MAX, |av| av.generation());
                if let Some(dest) = self.shm_routes.get(op.dest, gen) {
                    return self.send_injected(b, op, dest, len, None);
                }
            }
        }
        self.send_general(op, len)
    }

    /// Every send the common path did not take: refused ones, those to a
    /// peer whose shm route is not published, to peers on other nodes,
    /// larger ones (eager through a bounce receive, or rendezvous).
    #[inline(never)]
    fn send_general(&self, op: &SendOp<'_>, len: usize) -> Result<()> {
        self.check_enabled("send")?;
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
        if op.flags & FI_INJECT != 0 && len > self.inject_max {
            return Err(Error::new(
                errno::FI_EMSGSIZE,
                format!(
                    "hybrid: inject of {len} bytes exceeds inject_size {}",
                    self.inject_max
                ),
            ));
        }
        // shm copies a message this small into the peer's ring (or a bounce
        // buffer of the peer's segment) before it returns, and completes it
        // then: injected, it completes here with no inner completion to
        // read.
        let inject = self.injectable(op, len);
        let mut st = self.lock();
        let r = self.route(&mut st, op.dest)?;
        if inject && r.path == SHM {
            let State { b, spill, .. } = &mut *st;
            return self.send_injected(b, op, r.inner, len, Some(spill));
        }
        let completion = tx_completion(op.flags, st.b.tx_selective);
        let uflags = FI_SEND | if op.tagged { FI_TAGGED } else { FI_MSG };
        // Match complete (and, for now, delivery complete) means placed in
        // the matched receive: only the rendezvous payload, received
        // straight into it, can tell.
        let dc =
            op.flags & FI_INJECT == 0 && op.flags & (FI_DELIVERY_COMPLETE | FI_MATCH_COMPLETE) != 0;
        let rts = len > self.eager_max || dc;
        let keep = FI_INJECT | FI_FENCE | FI_TRANSMIT_COMPLETE | FI_INJECT_COMPLETE;
        // The inner send of such a message waits for its match too.
        let level = if dc {
            FI_MATCH_COMPLETE
        } else {
            op.flags & (FI_DELIVERY_COMPLETE | FI_MATCH_COMPLETE)
        };
        let iflags = (op.flags & keep) | level | FI_COMPLETION;
        let h = send_header(op, len, rts);
        let rec = TxRec {
            context: op.context,
            flags: Some(uflags),
            completion,
            header_of: None,
            failed: None,
        };
        let ep = &self.paths[r.path].ep;
        if !h.rts {
            let i = self.tx_slot(&mut st, r.path, rec);
            let mut hb = [0u8; wire::LEN];
            h.emit(&mut hb);
            let buf = &mut st.hdrs[i];
            buf.clear();
            buf.extend_from_slice(&hb);
            let mut iov = [IoVec::default(); MAX_IOV];
            let cnt = if op.iov.len() < MAX_IOV {
                iov[1..=op.iov.len()].copy_from_slice(op.iov);
                op.iov.len() + 1
            } else {
                // No entry left for the header: copy the payload behind it.
                buf.resize(wire::LEN + len, 0);
                // SAFETY: the caller keeps the iov valid for this call.
                unsafe { copy_from_iov(op.iov, 0, &mut buf[wire::LEN..]) };
                1
            };
            iov[0] = IoVec::from_slice(&st.hdrs[i][..]);
            let inner = SendOp {
                iov: &iov[..cnt],
                desc: &[],
                dest: r.inner,
                tag: 0,
                data: 0,
                context: ctx(K_TX, r.path, i),
                flags: iflags,
                tagged: false,
            };
            // SAFETY: the header's vector (`hdrs[i]`) stays put until the
            // inner completion frees slot `i`; post_send's caller keeps
            // `op.iov` valid until this send completes (through the call
            // with FI_INJECT, which the inner send keeps), and it completes
            // only through the inner completion of record `i`.
            if let Err(e) = unsafe { ep.post_send(&inner) } {
                Self::tx_take(&mut st, r.path, i);
                return Err(e);
            }
            // A send the inner endpoint completed at once completes now.
            if self.paths[r.path].cq.has_events() {
                self.drain(&mut st, r.path);
            }
            return Ok(());
        }
        self.send_rendezvous(&mut st, op, r.path, r.inner, h, rec, iflags & !FI_INJECT)
    }

    /// Sends `op` as a rendezvous on `path` to inner address `dest`: the
    /// header `h`, then the payload as an inner tagged send (`flags`)
    /// whose tag is a fresh cookie. Both go or neither does: a refused
    /// header fails the call; a payload the inner endpoint refuses for now
    /// (FI_EAGAIN) waits in [`Deferred`] and is posted again by progress,
    /// unless DEFERRED_MAX payloads wait already (the call then returns
    /// FI_EAGAIN before anything is sent).
    #[allow(clippy::too_many_arguments)]
    fn send_rendezvous(
        &self,
        st: &mut State,
        op: &SendOp<'_>,
        path: usize,
        dest: u64,
        h: Header,
        rec: TxRec,
        flags: u64,
    ) -> Result<()> {
        if !st.deferred[path].is_empty() {
            self.flush_deferred(st);
            if st.deferred[path].len() >= DEFERRED_MAX {
                return Err(Error::again());
            }
        }
        let cookie = st.next_cookie;
        st.next_cookie += 1;
        let p = self.tx_slot(st, path, rec);
        let hi = self.tx_slot(
            st,
            path,
            TxRec {
                context: 0,
                flags: None,
                completion: false,
                header_of: Some(p),
                failed: None,
            },
        );
        let mut d = Deferred {
            slot: p,
            dest,
            cookie,
            iov: [IoVec::default(); MAX_IOV],
            cnt: op.iov.len(),
            desc: [0; MAX_IOV],
            ndesc: op.desc.len().min(MAX_IOV),
            flags,
        };
        if op.flags & FI_INJECT != 0 {
            // The caller's memory is promised for this call only, and the
            // inner endpoint may read the payload later: it goes from a
            // copy, which stays put until the payload's completion frees
            // slot `p`.
            let len = iov_len(op.iov);
            let buf = &mut st.hdrs[p];
            buf.clear();
            buf.resize(len, 0);
            // SAFETY: the caller keeps the iov valid for this call.
            unsafe { copy_from_iov(op.iov, 0, buf) };
            d.iov[0] = IoVec::from_slice(buf);
            d.cnt = 1;
            d.ndesc = 0;
        } else {
            d.iov[..op.iov.len()].copy_from_slice(op.iov);
            d.desc[..d.ndesc].copy_from_slice(&op.desc[..d.ndesc]);
        }
        let mut hb = [0u8; wire::LEN];
        Header { cookie, ..h }.emit(&mut hb);
        st.hdrs[hi].clear();
        st.hdrs[hi].extend_from_slice(&hb);
        let hiov = [IoVec::from_slice(&st.hdrs[hi][..])];
        let head = SendOp {
            iov: &hiov,
            desc: &[],
            dest,
            tag: 0,
            data: 0,
            context: ctx(K_TX, path, hi),
            flags: FI_COMPLETION | (op.flags & FI_FENCE),
            tagged: false,
        };
        // SAFETY: the header's vector (`hdrs[hi]`) stays put until the
        // inner completion frees slot `hi`.
        if let Err(e) = unsafe { self.paths[path].ep.post_send(&head) } {
            Self::tx_take(st, path, hi);
            Self::tx_take(st, path, p);
            return Err(e);
        }
        st.deferred[path].push_back(d);
        self.flush_deferred(st);
        Ok(())
    }

    /// Posts the rendezvous payloads that wait (see [`Deferred`]), oldest
    /// first on each path, until the inner endpoint refuses one for now.
    /// A payload refused for good fails its operation through its
    /// completion (its header is on its way).
    pub(super) fn flush_deferred(&self, st: &mut State) {
        for path in [SHM, NET] {
            while let Some(d) = st.deferred[path].front().copied() {
                let payload = SendOp {
                    iov: &d.iov[..d.cnt],
                    desc: &d.desc[..d.ndesc],
                    dest: d.dest,
                    tag: d.cookie,
                    data: 0,
                    context: ctx(K_TX, path, d.slot),
                    flags: d.flags,
                    tagged: true,
                };
                // SAFETY: the ranges are the caller's, which post_send's
                // caller keeps valid until the send completes, or the copy
                // of an inject's payload in `hdrs[d.slot]`, which stays put
                // until then; the send completes only through this
                // payload's inner completion (record `d.slot`, read in
                // `drain`), so the inner endpoint reads them only while
                // they are valid.
                match unsafe { self.paths[path].ep.post_send(&payload) } {
                    Ok(()) => {}
                    Err(e) if e.is_again() => break,
                    Err(e) => {
                        tracing::warn!(error = %e, "hybrid: rendezvous payload not posted");
                        if let Some(x) = Self::tx_take(st, path, d.slot) {
                            Self::tx_end(st, &x, 0, Some(e.code()));
                        }
                    }
                }
                st.deferred[path].pop_front();
            }
        }
        let waiting = st.deferred.iter().any(|q| !q.is_empty());
        self.deferring.store(waiting, Ordering::Relaxed);
    }
}

/// The header of a send of `len` bytes (`rts`: its payload goes apart, as
/// an inner tagged message; the cookie is set when one is chosen).
fn send_header(op: &SendOp<'_>, len: usize, rts: bool) -> Header {
    Header {
        rts,
        tagged: op.tagged,
        has_data: op.flags & FI_REMOTE_CQ_DATA != 0,
        tag: op.tag,
        data: op.data,
        len: len as u64,
        cookie: 0,
    }
}
