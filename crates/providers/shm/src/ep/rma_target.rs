//! One-sided operations over shm, target side: a request from a peer's
//! ring is checked (key, access, bounds) against the domain's registered
//! regions before any byte moves, executed, and answered (RMA_RESP).
//!
//! - RMA_WRITE: copies the inline data into place (small writes, chunks);
//! - RMA_PULL: copies the initiator's buffer straight into place with one
//!   process_vm_readv, or with the initiator's help for large writes;
//! - RMA_READ: answers inline (small) or copies straight into the
//!   initiator's buffer with process_vm_writev (large), or in chunks;
//! - ATOMIC: applies the operation under the domain's atomic lock.

use super::rma::{ReadPush, ATOMIC_MAX_BYTES};
use super::state::RmaSpare;
use super::{Inner, ShmEndpoint, INLINE_MAX};
use crate::addr::ShmAddr;
use ofi_core::consts::*;
use ofi_core::error::errno;
use ofi_core::object::EpBindings;
use ofi_core::util::atomic::AtomicKind;
use ofi_core::util::cq::CqTaggedEntry;
use ofi_core::util::iov::{copy_from_iov, copy_to_iov, IoVec};
use ofi_core::util::mr::{MrCache, MrMap};
use ofi_core::util::rma::{self as core_rma, Resolved};
use ofi_proto::shm::path::{copy_result, read_answer, rts_copy, CopyError, ReadAnswer, RtsCopy};
use ofi_proto::shm::rma_answer as answer;
use ofi_proto::shm::{AtomicReq, OneSided};
use ofi_shmem::cma::{self, Range};
use ofi_wire::shm::{flag, op, Entry, RangeList, Repr, MAX_RANGES};
use std::sync::atomic::Ordering;
use std::sync::Arc;

fn resolved_iov(res: &[Resolved]) -> ([IoVec; MAX_RANGES], usize) {
    let mut out = [IoVec::default(); MAX_RANGES];
    for (o, r) in out.iter_mut().zip(res) {
        *o = IoVec {
            base: r.addr,
            len: r.len,
        };
    }
    (out, res.len().min(MAX_RANGES))
}

/// Resolves a request's remote ranges (lengths in `elem`-byte elements)
/// against the domain's regions into `out`, all or nothing; `Err` is the
/// FI_E* number to answer with.
#[inline]
fn resolve_request(
    mrs: &mut MrCache,
    map: &MrMap,
    list: &RangeList<'_>,
    elem: usize,
    access: u64,
    virt: bool,
    out: &mut Vec<Resolved>,
) -> std::result::Result<(), i32> {
    out.clear();
    for r in list.remotes() {
        let x = usize::try_from(r.len)
            .ok()
            .and_then(|l| l.checked_mul(elem))
            .ok_or(errno::FI_EINVAL)
            .and_then(|len| core_rma::resolve_cached(mrs, map, r.key, r.addr, len, access, virt));
        match x {
            Ok(x) => out.push(x),
            Err(code) => {
                out.clear();
                return Err(code);
            }
        }
    }
    Ok(())
}

/// The target's resolved ranges and the initiator's ranges of a request,
/// as the cross-process copy takes them.
fn cma_ranges(res: &[Resolved], list: &RangeList<'_>) -> (Vec<Range>, Vec<Range>) {
    let local = res
        .iter()
        .map(|x| Range {
            base: x.addr,
            len: x.len,
        })
        .collect();
    let remote = list
        .locals()
        .map(|(a, l)| Range {
            base: a as usize,
            len: l as usize,
        })
        .collect();
    (local, remote)
}

/// Counts a remote access: the endpoint by `ep_access`, each region
/// touched by `mr_access` (see `core_rma::count_remote`).
#[inline]
fn count_target(b: &EpBindings, res: &[Resolved], ep_access: u64, mr_access: u64) {
    for (i, x) in res.iter().enumerate() {
        // One event per operation for the endpoint, one per region touched.
        if i == 0 {
            core_rma::count_remote(b, Some(&x.mr), ep_access, mr_access);
        } else if !res[..i].iter().any(|y| Arc::ptr_eq(&y.mr, &x.mr)) {
            x.mr.count_remote(mr_access);
        }
    }
}

impl ShmEndpoint {
    /// Target side: checks and executes a one-sided request, then answers.
    #[inline]
    pub(super) fn rma_target(&self, g: &mut Inner, req: &OneSided<'_>) {
        let r = &req.repr;
        let list = req.list();
        if r.op == op::RMA_WRITE {
            return self.write_target(g, r, &list);
        }
        self.rma_target_other(g, r, &list);
    }

    /// Answers a request: at once when no answer waits before it and the
    /// initiator's ring has room, else through the control queue.
    #[inline]
    fn reply(&self, g: &mut Inner, to: u64, a: Repr, payload: &[u8]) {
        if g.ctrl.is_empty() {
            if let Some(peer) = g.by_id.find(to) {
                let pushed = peer.seg.msg_ring().push_with(&peer.cached_head, |b| {
                    let mut e = Entry::new_unchecked(b);
                    e.payload_mut()[..payload.len()].copy_from_slice(payload);
                    a.emit(&mut e);
                });
                if pushed.is_ok() {
                    peer.notify();
                    return;
                }
            }
        }
        self.send_ctrl_with(g, to, a, payload);
    }

    /// RMA_WRITE: a whole write, or a chunk of one, with its data inline.
    /// Answered on failure, and after its last byte.
    #[inline]
    fn write_target(&self, g: &mut Inner, r: &Repr, list: &RangeList<'_>) {
        let last = r.flags & flag::LAST != 0;
        let src_addr = if last && r.flags & flag::CQ_DATA != 0 {
            self.src_addr(g, r.src)
        } else {
            FI_ADDR_NOTAVAIL
        };
        let status = self.apply_write(&g.b, &mut g.spare, r, list, src_addr);
        if let Some(code) = status {
            self.reply(g, r.src, answer(self.me.id(), r.cookie, code), &[]);
        }
    }

    /// Checks and applies an RMA_WRITE (its resolved ranges in the spare
    /// list, emptied again); `Some` status to answer with (0: the write is
    /// complete), `None` after a chunk that is not the last.
    #[inline]
    fn apply_write(
        &self,
        b: &EpBindings,
        spare: &mut RmaSpare,
        r: &Repr,
        list: &RangeList<'_>,
        src_addr: u64,
    ) -> Option<i32> {
        let Some(map) = b.mr_map.as_deref() else {
            return Some(errno::FI_EKEYREJECTED);
        };
        let virt = b.info.domain_attr.mr_mode & mr_mode::FI_MR_VIRT_ADDR != 0;
        let res = &mut spare.resolved;
        if let Err(code) = resolve_request(&mut spare.mrs, map, list, 1, FI_REMOTE_WRITE, virt, res)
        {
            return Some(code);
        }
        let status = self.place_write(b, r, list, res, src_addr);
        res.clear();
        status
    }

    /// Places an RMA_WRITE's data into its resolved ranges `res`.
    #[inline]
    fn place_write(
        &self,
        b: &EpBindings,
        r: &Repr,
        list: &RangeList<'_>,
        res: &[Resolved],
        src_addr: u64,
    ) -> Option<i32> {
        let commit = r.flags & flag::COMMIT != 0;
        if commit {
            // Refused before a byte lands.
            if let Err(e) = core_rma::check_durable(res) {
                tracing::debug!("shm: refusing a FI_COMMIT_COMPLETE write: {e}");
                return Some(e.code());
            }
        }
        // `parse` checked the data against the entry and the chunk against
        // the write's length, which the ranges hold.
        let Some(data) = list.data(r.len as usize) else {
            return Some(errno::FI_EINVAL);
        };
        let (dst, nd) = resolved_iov(res);
        // SAFETY: resolved ranges are registered memory of this process,
        // kept registered by `res` for this call; the chunk lies inside the
        // write (checked by parse).
        unsafe { copy_to_iov(&dst[..nd], r.total as usize, data) };
        if r.flags & flag::LAST == 0 {
            return None;
        }
        self.write_landed(b, r, res, src_addr)
    }

    /// The last byte of a write landed in `res`: made durable
    /// (FI_COMMIT_COMPLETE), counted, its CQ data delivered; the status to
    /// answer with.
    #[inline]
    fn write_landed(
        &self,
        b: &EpBindings,
        r: &Repr,
        res: &[Resolved],
        src_addr: u64,
    ) -> Option<i32> {
        if r.flags & flag::COMMIT != 0 {
            if let Err(e) = core_rma::persist_all(res) {
                tracing::warn!("shm: {e}");
                return Some(e.code());
            }
        }
        count_target(b, res, FI_REMOTE_WRITE, FI_REMOTE_WRITE);
        if r.flags & flag::CQ_DATA != 0 {
            if let Some(cq) = &b.rx_cq {
                cq.push(
                    CqTaggedEntry {
                        flags: FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA,
                        len: r.tag as usize,
                        data: r.data,
                        ..Default::default()
                    },
                    src_addr,
                );
            }
        }
        Some(0)
    }

    /// Every request but an RMA_WRITE: reads, pulled writes, atomics.
    #[inline(never)]
    fn rma_target_other(&self, g: &mut Inner, r: &Repr, list: &RangeList<'_>) {
        let me = self.me.id();
        let Some(map) = g.b.mr_map.clone() else {
            self.send_ctrl(g, r.src, answer(me, r.cookie, errno::FI_EKEYREJECTED));
            return;
        };
        let virt = g.b.info.domain_attr.mr_mode & mr_mode::FI_MR_VIRT_ADDR != 0;
        let mut res = Vec::new();
        match r.op {
            op::ATOMIC => self.atomic_target(g, r, list, &map, virt),
            op::RMA_READ => {
                if let Err(code) = resolve_request(
                    &mut g.spare.mrs,
                    &map,
                    list,
                    1,
                    FI_REMOTE_READ,
                    virt,
                    &mut res,
                ) {
                    self.send_ctrl(g, r.src, answer(me, r.cookie, code));
                    return;
                }
                let len = r.tag as usize;
                let (src, ns) = resolved_iov(&res);
                // An initiator that has closed (or died) may have freed the
                // buffer: never write into it.
                if self
                    .peer_by_id(g, r.src)
                    .is_ok_and(|p| p.closed() || p.dead())
                {
                    self.send_ctrl(g, r.src, answer(me, r.cookie, errno::FI_ECONNRESET));
                    return;
                }
                let cma = !self.cfg.disable_cma
                    && self
                        .peer_by_id(g, r.src)
                        .is_ok_and(|p| p.cma_ok.load(Ordering::Relaxed));
                let plan = read_answer(len, INLINE_MAX, cma);
                if plan == ReadAnswer::Inline {
                    let mut buf = [0u8; INLINE_MAX];
                    // SAFETY: resolved ranges are registered memory of this
                    // process, kept registered by `res` for this call.
                    unsafe { copy_from_iov(&src[..ns], 0, &mut buf[..len]) };
                    count_target(&g.b, &res, FI_REMOTE_READ, FI_REMOTE_READ);
                    let mut a = answer(me, r.cookie, 0);
                    a.len = len as u32;
                    self.send_ctrl_with(g, r.src, a, &buf[..len]);
                    return;
                }
                if plan == ReadAnswer::Write {
                    let (local, remote) = cma_ranges(&res, list);
                    let pid = ShmAddr::from_id(r.src).pid;
                    // SAFETY: the local ranges are resolved, registered memory.
                    let moved = unsafe { cma::write_to(pid, &local, &remote) };
                    match copy_result(len, moved.map_err(|e| e.raw_os_error())) {
                        Ok(()) => {
                            count_target(&g.b, &res, FI_REMOTE_READ, FI_REMOTE_READ);
                            self.send_ctrl(g, r.src, answer(me, r.cookie, 0));
                            return;
                        }
                        Err(CopyError::Refused) => {
                            if let Ok(p) = self.peer_by_id(g, r.src) {
                                p.cma_ok.store(false, Ordering::Relaxed);
                            }
                        }
                        Err(CopyError::Failed(code)) => {
                            tracing::debug!(code, "shm: read answer copy failed");
                            self.send_ctrl(g, r.src, answer(me, r.cookie, code));
                            return;
                        }
                    }
                }
                count_target(&g.b, &res, FI_REMOTE_READ, FI_REMOTE_READ);
                self.busy.store(true, Ordering::Relaxed);
                g.read_pushes.push_back(ReadPush {
                    to: r.src,
                    cookie: r.cookie,
                    src,
                    n: ns,
                    offset: 0,
                    len,
                    _mrs: res,
                });
            }
            _ => {
                // RMA_PULL: the write's data stays in the initiator's memory.
                if let Err(code) = resolve_request(
                    &mut g.spare.mrs,
                    &map,
                    list,
                    1,
                    FI_REMOTE_WRITE,
                    virt,
                    &mut res,
                ) {
                    self.send_ctrl(g, r.src, answer(me, r.cookie, code));
                    return;
                }
                if r.flags & flag::COMMIT != 0 {
                    // Refused before a byte lands.
                    if let Err(e) = core_rma::check_durable(&res) {
                        tracing::debug!("shm: refusing a FI_COMMIT_COMPLETE write: {e}");
                        self.send_ctrl(g, r.src, answer(me, r.cookie, e.code()));
                        return;
                    }
                }
                let len = r.tag as usize;
                let peer_ok = self.peer_by_id(g, r.src).ok();
                let refused = peer_ok
                    .as_ref()
                    .is_some_and(|p| !p.cma_ok.load(Ordering::Relaxed));
                let plan = rts_copy(len, refused, &self.copy_cfg);
                if plan == RtsCopy::Push {
                    let mut a = answer(me, r.cookie, 0);
                    a.flags |= flag::PUSH;
                    self.send_ctrl(g, r.src, a);
                    return;
                }
                let (local, remote) = cma_ranges(&res, list);
                let pid = ShmAddr::from_id(r.src).pid;
                let copied = if plan == RtsCopy::Coop {
                    // Large: the initiator copies half, chunk by chunk,
                    // into the ranges resolved here (each byte once).
                    match self.coop_read(g, r.src, r.cookie, &local, &remote, len) {
                        None => Err(CopyError::Refused),
                        Some(Ok(n)) => copy_result(len, Ok(n)),
                        Some(Err(code)) => Err(CopyError::Failed(code)),
                    }
                } else {
                    // SAFETY: the local ranges are resolved, registered memory.
                    let moved = unsafe { cma::read_from(pid, &local, &remote) };
                    copy_result(len, moved.map_err(|e| e.raw_os_error()))
                };
                match copied {
                    Ok(()) => {}
                    Err(CopyError::Refused) => {
                        if let Some(p) = peer_ok {
                            p.cma_ok.store(false, Ordering::Relaxed);
                        }
                        let mut a = answer(me, r.cookie, 0);
                        a.flags |= flag::PUSH;
                        self.send_ctrl(g, r.src, a);
                        return;
                    }
                    Err(CopyError::Failed(code)) => {
                        tracing::debug!(code, "shm: pulling a write failed");
                        self.send_ctrl(g, r.src, answer(me, r.cookie, code));
                        return;
                    }
                }
                let src_addr = if r.flags & flag::CQ_DATA != 0 {
                    self.src_addr(g, r.src)
                } else {
                    FI_ADDR_NOTAVAIL
                };
                if let Some(code) = self.write_landed(&g.b, r, &res, src_addr) {
                    self.send_ctrl(g, r.src, answer(me, r.cookie, code));
                }
            }
        }
    }

    fn atomic_target<'a>(
        &self,
        g: &mut Inner,
        r: &Repr,
        list: &RangeList<'a>,
        map: &Arc<MrMap>,
        virt: bool,
    ) {
        let me = self.me.id();
        let fail =
            |s: &Self, g: &mut Inner, code: i32| s.send_ctrl(g, r.src, answer(me, r.cookie, code));
        let payload = list.payload();
        let rg = list.to_ranges();
        // Kind, operation, datatype, count and operands, checked by the core.
        let req = match AtomicReq::decode(r, &rg, payload, ATOMIC_MAX_BYTES) {
            Ok(q) => q,
            Err(code) => {
                tracing::debug!(code, "shm: refusing an atomic request");
                fail(self, g, code);
                return;
            }
        };
        let access = req.access();
        let mut res = Vec::new();
        if let Err(code) = resolve_request(
            &mut g.spare.mrs,
            map,
            list,
            req.size,
            access,
            virt,
            &mut res,
        ) {
            fail(self, g, code);
            return;
        }
        let commit = r.flags & flag::COMMIT != 0;
        if commit {
            if let Err(e) = core_rma::check_durable(&res) {
                tracing::debug!("shm: refusing a FI_COMMIT_COMPLETE atomic: {e}");
                fail(self, g, e.code());
                return;
            }
        }
        let (kind, aop, dt) = (req.kind, req.op, req.datatype);
        let mut out = [0u8; ATOMIC_MAX_BYTES];
        let mut off = 0;
        for x in &res {
            let l = x.len;
            // The ranges hold exactly the request's elements (checked by
            // the core), so each part lies inside the operands.
            let part = |v: Option<&'a [u8]>| v.map_or(Some(&[][..]), |v| v.get(off..off + l));
            let (Some(o), Some(c)) = (part(req.operand), part(req.compare)) else {
                fail(self, g, errno::FI_EINVAL);
                return;
            };
            let rs = if kind == AtomicKind::Basic {
                Some(&mut [][..])
            } else {
                out.get_mut(off..off + l)
            };
            let Some(rs) = rs else {
                fail(self, g, errno::FI_EMSGSIZE);
                return;
            };
            // SAFETY: `x` was resolved against a region registered in this
            // domain (still held by `res`).
            if let Err(err) = unsafe { core_rma::apply_atomic(map, kind, aop, dt, x, o, c, rs) } {
                fail(self, g, err.code());
                return;
            }
            off += l;
        }
        if commit {
            if let Err(e) = core_rma::persist_all(&res) {
                tracing::warn!("shm: {e}");
                fail(self, g, e.code());
                return;
            }
        }
        // The endpoint counts as fi_endpoint(3) says (a fetch or compare
        // on the remote read counter, a base atomic on the write one); the
        // regions by the access (an atomic that modifies them is a write,
        // fi_mr(3)).
        let counted = if kind == AtomicKind::Basic {
            FI_REMOTE_WRITE
        } else {
            FI_REMOTE_READ
        };
        count_target(&g.b, &res, counted, access);
        let mut a = answer(me, r.cookie, 0);
        let back = req.answer_len();
        a.len = back as u32;
        self.send_ctrl_with(g, r.src, a, &out[..back]);
    }
}
