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
use super::{Inner, ShmEndpoint, INLINE_MAX};
use crate::addr::ShmAddr;
use ofi_core::consts::*;
use ofi_core::error::errno;
use ofi_core::util::atomic::AtomicKind;
use ofi_core::util::cq::CqTaggedEntry;
use ofi_core::util::iov::{copy_from_iov, copy_to_iov, IoVec};
use ofi_core::util::mr::MrMap;
use ofi_core::util::rma::{self as core_rma, Resolved, RmaIov};
use ofi_proto::shm::path::{copy_result, read_answer, rts_copy, CopyError, ReadAnswer, RtsCopy};
use ofi_proto::shm::rma_answer as answer;
use ofi_proto::shm::AtomicReq;
use ofi_shmem::cma::{self, Range};
use ofi_wire::shm::{flag, op, Ranges, Repr, MAX_RANGES};
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
/// against the domain's regions, all or nothing; `Err` is the FI_E* number
/// to answer with.
fn resolve_request(
    map: &MrMap,
    rg: &Ranges,
    elem: usize,
    access: u64,
    virt: bool,
) -> std::result::Result<Vec<Resolved>, i32> {
    let mut ranges = [RmaIov::default(); MAX_RANGES];
    for (o, r) in ranges.iter_mut().zip(rg.remote()) {
        let len = usize::try_from(r.len)
            .ok()
            .and_then(|l| l.checked_mul(elem))
            .ok_or(errno::FI_EINVAL)?;
        *o = RmaIov {
            addr: r.addr,
            len,
            key: r.key,
        };
    }
    let mut res = Vec::with_capacity(rg.n_remote);
    core_rma::resolve_all(map, &ranges[..rg.n_remote], access, virt, &mut res)
        .map_err(|e| e.code())?;
    Ok(res)
}

/// The target's resolved ranges and the initiator's ranges of a request,
/// as the cross-process copy takes them.
fn cma_ranges(res: &[Resolved], rg: &Ranges) -> (Vec<Range>, Vec<Range>) {
    let local = res
        .iter()
        .map(|x| Range {
            base: x.addr,
            len: x.len,
        })
        .collect();
    let remote = rg
        .local()
        .iter()
        .map(|&(a, l)| Range {
            base: a as usize,
            len: l as usize,
        })
        .collect();
    (local, remote)
}

impl ShmEndpoint {
    /// Target side: checks and executes a one-sided request, then answers.
    pub(super) fn rma_target(&self, g: &mut Inner, r: &Repr, rg: &Ranges, payload: &[u8]) {
        let me = self.me.id();
        let rg = *rg;
        let Some(map) = g.b.mr_map.clone() else {
            self.send_ctrl(g, r.src, answer(me, r.cookie, errno::FI_EKEYREJECTED));
            return;
        };
        let virt = g.b.info.domain_attr.mr_mode & mr_mode::FI_MR_VIRT_ADDR != 0;
        match r.op {
            op::ATOMIC => self.atomic_target(g, r, &rg, &map, virt, payload),
            op::RMA_READ => {
                let res = match resolve_request(&map, &rg, 1, FI_REMOTE_READ, virt) {
                    Ok(res) => res,
                    Err(code) => {
                        self.send_ctrl(g, r.src, answer(me, r.cookie, code));
                        return;
                    }
                };
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
                    self.count_target(g, &res, FI_REMOTE_READ, FI_REMOTE_READ);
                    let mut a = answer(me, r.cookie, 0);
                    a.len = len as u32;
                    self.send_ctrl_with(g, r.src, a, &buf[..len]);
                    return;
                }
                if plan == ReadAnswer::Write {
                    let (local, remote) = cma_ranges(&res, &rg);
                    let pid = ShmAddr::from_id(r.src).pid;
                    // SAFETY: the local ranges are resolved, registered memory.
                    let moved = unsafe { cma::write_to(pid, &local, &remote) };
                    match copy_result(len, moved.map_err(|e| e.raw_os_error())) {
                        Ok(()) => {
                            self.count_target(g, &res, FI_REMOTE_READ, FI_REMOTE_READ);
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
                self.count_target(g, &res, FI_REMOTE_READ, FI_REMOTE_READ);
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
                // RMA_WRITE (inline data or a chunk) and RMA_PULL.
                let last = r.op == op::RMA_PULL || r.flags & flag::LAST != 0;
                let res = match resolve_request(&map, &rg, 1, FI_REMOTE_WRITE, virt) {
                    Ok(res) => res,
                    Err(code) => {
                        self.send_ctrl(g, r.src, answer(me, r.cookie, code));
                        return;
                    }
                };
                let commit = r.flags & flag::COMMIT != 0;
                if commit {
                    // Refused before a byte lands.
                    if let Err(e) = core_rma::check_durable(&res) {
                        tracing::debug!("shm: refusing a FI_COMMIT_COMPLETE write: {e}");
                        self.send_ctrl(g, r.src, answer(me, r.cookie, e.code()));
                        return;
                    }
                }
                let (dst, nd) = resolved_iov(&res);
                if r.op == op::RMA_WRITE {
                    let at = rg.data_at;
                    let data = &payload[at..at + r.len as usize];
                    // SAFETY: resolved ranges are registered memory of this
                    // process; the chunk lies inside the write (checked by parse).
                    unsafe { copy_to_iov(&dst[..nd], r.total as usize, data) };
                } else {
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
                    let (local, remote) = cma_ranges(&res, &rg);
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
                }
                if last {
                    if commit {
                        if let Err(e) = core_rma::persist_all(&res) {
                            tracing::warn!("shm: {e}");
                            self.send_ctrl(g, r.src, answer(me, r.cookie, e.code()));
                            return;
                        }
                    }
                    self.count_target(g, &res, FI_REMOTE_WRITE, FI_REMOTE_WRITE);
                    if r.flags & flag::CQ_DATA != 0 {
                        let src_addr = self.src_addr(g, r.src);
                        if let Some(cq) = &g.b.rx_cq {
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
                    self.send_ctrl(g, r.src, answer(me, r.cookie, 0));
                }
            }
        }
    }

    /// Counts a remote access: the endpoint by `ep_access`, each region
    /// touched by `mr_access` (see `core_rma::count_remote`).
    fn count_target(&self, g: &Inner, res: &[Resolved], ep_access: u64, mr_access: u64) {
        for (i, x) in res.iter().enumerate() {
            // One event per operation for the endpoint, one per region touched.
            if i == 0 {
                core_rma::count_remote(&g.b, Some(&x.mr), ep_access, mr_access);
            } else if !res[..i].iter().any(|y| Arc::ptr_eq(&y.mr, &x.mr)) {
                x.mr.count_remote(mr_access);
            }
        }
    }

    fn atomic_target<'a>(
        &self,
        g: &mut Inner,
        r: &Repr,
        rg: &Ranges,
        map: &Arc<MrMap>,
        virt: bool,
        payload: &'a [u8],
    ) {
        let me = self.me.id();
        let fail =
            |s: &Self, g: &mut Inner, code: i32| s.send_ctrl(g, r.src, answer(me, r.cookie, code));
        // Kind, operation, datatype, count and operands, checked by the core.
        let req = match AtomicReq::decode(r, rg, payload, ATOMIC_MAX_BYTES) {
            Ok(q) => q,
            Err(code) => {
                tracing::debug!(code, "shm: refusing an atomic request");
                fail(self, g, code);
                return;
            }
        };
        let access = req.access();
        let res = match resolve_request(map, rg, req.size, access, virt) {
            Ok(res) => res,
            Err(code) => {
                fail(self, g, code);
                return;
            }
        };
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
        self.count_target(g, &res, counted, access);
        let mut a = answer(me, r.cookie, 0);
        let back = req.answer_len();
        a.len = back as u32;
        self.send_ctrl_with(g, r.src, a, &out[..back]);
    }
}
