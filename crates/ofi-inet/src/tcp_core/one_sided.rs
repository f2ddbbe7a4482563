//! One-sided operations of the endpoints running the core. As initiator: the table of
//! RMA and atomic requests in flight (context, completion flags, counter,
//! injected copies) behind the small id the protocol core carries. As
//! target: the endpoint's registered memory lent to the core ([`Target`]),
//! resolving keys, access and bounds with the core's shared helpers and
//! applying atomics under the domain's atomic lock.
//! Its unsafe blocks read and write memory through addresses that the
//! domain's region map resolved, or that the raw layer's callers lent.
#![allow(unsafe_code)]

use super::IOV_LIMIT;
use ofi_core::consts::*;
use ofi_core::error::{errno, Error, Result};
use ofi_core::object::{AtomicOp, EpBindings, RmaOp};
use ofi_core::util::atomic::{self, AtomicKind};
use ofi_core::util::iov::{copy_from_iov, iov_len, IoVec};
use ofi_core::util::matching::MAX_IOV;
use ofi_core::util::mr::{MrCache, MrMap};
use ofi_core::util::rma::{
    apply_atomic, check_durable, count_remote, persist_all, resolve_all_cached, Ioc, Resolved,
    RmaIov,
};
use ofi_core::util::slab::Slab;
use ofi_proto::tcp::{Ack, AtomicArgs, Grant, Memory, Remote, RmaReq, COUNT_AS_READ, MAX_RANGES};
use std::sync::Arc;

/// Largest atomic, in bytes of target data, one operation may carry
/// (`fi_query_atomic` answers this over the element size).
pub const ATOMIC_MAX_BYTES: usize = 64 << 10;

/// The completion level an operation asks for: its own flags, else the
/// endpoint's default (`tx_attr.op_flags`). FI_MATCH_COMPLETE waits for
/// the receive the message lands in (`Ack::Placed`); FI_DELIVERY_COMPLETE
/// and FI_TRANSMIT_COMPLETE for the peer to have the whole message, in
/// its buffer or buffered as unexpected (`Ack::Received`, fi_cq(3): the
/// application may still have to post a receive to retrieve it).
#[inline]
pub fn ack_level(op_flags: u64, default_flags: u64) -> Ack {
    const LEVELS: u64 =
        FI_INJECT_COMPLETE | FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE | FI_MATCH_COMPLETE;
    let f = if op_flags & LEVELS != 0 {
        op_flags
    } else {
        default_flags
    };
    if f & FI_MATCH_COMPLETE != 0 {
        Ack::Placed
    } else if f & (FI_DELIVERY_COMPLETE | FI_TRANSMIT_COMPLETE) != 0 {
        Ack::Received
    } else {
        Ack::None
    }
}

/// The remote accesses an endpoint with `caps` accepts: FI_REMOTE_READ and
/// FI_REMOTE_WRITE as named, both when none of the four direction bits is.
pub fn remote_access(caps: u64) -> u64 {
    if caps & (FI_RMA | FI_ATOMIC) == 0 {
        return 0;
    }
    let dirs = FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
    if caps & dirs == 0 {
        FI_REMOTE_READ | FI_REMOTE_WRITE
    } else {
        caps & (FI_REMOTE_READ | FI_REMOTE_WRITE)
    }
}

/// A grant's accesses as counted (the endpoint's, the regions') and the
/// regions it resolved.
type GrantSlot = ((u64, u64), Vec<Resolved>);

/// The endpoint's registered memory as the target of its peers' requests.
pub struct Target {
    map: Arc<MrMap>,
    /// The region resolved last.
    mrs: MrCache,
    virt: bool,
    allow: u64,
    b: EpBindings,
    grants: Slab<GrantSlot>,
    pool: Vec<Vec<Resolved>>,
}

impl Target {
    /// The memory of an endpoint enabled with `b`, if it accepts remote
    /// accesses (caps) and has a region map.
    pub fn for_endpoint(b: &EpBindings) -> Option<Target> {
        let allow = remote_access(b.info.caps);
        let map = b.mr_map.clone()?;
        (allow != 0).then(|| Target {
            map,
            mrs: MrCache::default(),
            virt: b.info.domain_attr.mr_mode & mr_mode::FI_MR_VIRT_ADDR != 0,
            allow,
            b: b.clone(),
            grants: Slab::new(),
            pool: Vec::new(),
        })
    }

    fn slot(&self, g: Grant) -> Option<&GrantSlot> {
        self.grants.get(g.0 as usize)
    }
}

impl Memory for Target {
    fn resolve(&mut self, ranges: &[RmaIov], access: u64, out: &mut [IoVec]) -> Result<Grant, i32> {
        // The permission, and what the access counts as.
        let (access, counted) = if access & COUNT_AS_READ != 0 {
            (access & !COUNT_AS_READ, FI_REMOTE_READ)
        } else {
            (access, access)
        };
        if self.allow & access != access {
            return Err(errno::FI_EACCES);
        }
        let mut v = self.pool.pop().unwrap_or_default();
        if let Err(code) =
            resolve_all_cached(&mut self.mrs, &self.map, ranges, access, self.virt, &mut v)
        {
            self.pool.push(v);
            return Err(code);
        }
        for (o, r) in out.iter_mut().zip(&v) {
            *o = IoVec {
                base: r.addr,
                len: r.len,
            };
        }
        let i = self.grants.insert(((counted, access), v));
        Ok(Grant(i as u64))
    }

    fn release(&mut self, grant: Grant, done: bool) {
        let Some(((ep_access, mr_access), mut v)) = self.grants.remove(grant.0 as usize) else {
            return;
        };
        if done {
            // The endpoint counts the access once, each region it touched once.
            for (k, r) in v.iter().enumerate() {
                if v[..k].iter().any(|p| Arc::ptr_eq(&p.mr, &r.mr)) {
                    continue;
                }
                if k == 0 {
                    count_remote(&self.b, Some(&r.mr), ep_access, mr_access);
                } else {
                    r.mr.count_remote(mr_access);
                }
            }
        }
        v.clear();
        if self.pool.len() < 64 {
            self.pool.push(v);
        }
    }

    fn live(&mut self, grant: Grant) -> bool {
        self.slot(grant)
            .is_some_and(|(_, v)| v.iter().all(|r| !r.mr.is_revoked()))
    }

    fn check_durable(&mut self, grant: Grant) -> Result<(), i32> {
        let (_, v) = self.slot(grant).ok_or(errno::FI_EINVAL)?;
        check_durable(v).map_err(|e| {
            tracing::debug!("refusing a FI_COMMIT_COMPLETE request: {e}");
            e.code()
        })
    }

    fn persist(&mut self, grant: Grant) -> Result<(), i32> {
        let (_, v) = self.slot(grant).ok_or(errno::FI_EINVAL)?;
        persist_all(v).map_err(|e| {
            tracing::warn!("{e}");
            e.code()
        })
    }

    fn read(&mut self, from: IoVec, into: &mut [u8]) {
        let n = from.len.min(into.len());
        // SAFETY: `from` lies inside a range this endpoint's region map
        // resolved for a READ (registered memory of this process, readable
        // while registered); `into` is a distinct core-owned buffer.
        unsafe { std::ptr::copy_nonoverlapping(from.base as *const u8, into.as_mut_ptr(), n) };
    }

    fn atomic(
        &mut self,
        grant: Grant,
        index: usize,
        args: &AtomicArgs,
        operand: &[u8],
        compare: &[u8],
        result: &mut [u8],
    ) -> Result<(), i32> {
        let Some(r) = self.slot(grant).and_then(|(_, v)| v.get(index)) else {
            return Err(errno::FI_EINVAL);
        };
        // SAFETY: `r` was resolved by `resolve_all_cached` for this access (remote
        // write, or remote read for FI_ATOMIC_READ) and its region is held
        // registered by the grant until `release`.
        unsafe {
            apply_atomic(
                &self.map,
                args.kind,
                args.op,
                args.datatype,
                r,
                operand,
                compare,
                result,
            )
        }
        .map_err(|e| e.code())
    }
}

/// What a one-sided request's completion reports.
#[derive(Debug)]
struct OpMeta {
    context: usize,
    flags: u64,
    completion: bool,
    /// The copied payload of an inject.
    inject: Option<Vec<u8>>,
}

/// The one-sided requests of an endpoint in flight.
#[derive(Debug)]
pub struct Ops {
    /// The provider's name, prefixing errors.
    prov: &'static str,
    /// The records, under their id less one.
    slots: Slab<OpMeta>,
    pool: Vec<Vec<u8>>,
}

fn too_many(prov: &str, what: &str, n: usize, max: usize) -> Error {
    Error::inval(format!(
        "{prov}: {n} {what} ranges exceed the limit of {max}"
    ))
}

/// Byte ranges of an element list.
fn ioc_bytes(prov: &str, l: &[Ioc], size: usize, out: &mut [IoVec; MAX_IOV]) -> Result<usize> {
    if l.len() > MAX_IOV {
        return Err(too_many(prov, "atomic buffer", l.len(), MAX_IOV));
    }
    for (o, x) in out.iter_mut().zip(l) {
        *o = IoVec {
            base: x.addr,
            len: x
                .count
                .checked_mul(size)
                .ok_or_else(|| Error::inval(format!("{prov}: atomic buffer length overflows")))?,
        };
    }
    Ok(l.len())
}

impl Ops {
    /// An empty table for an endpoint of provider `prov`.
    pub fn new(prov: &'static str) -> Ops {
        Ops {
            prov,
            slots: Slab::new(),
            pool: Vec::new(),
        }
    }

    fn insert(&mut self, m: OpMeta) -> usize {
        self.slots.insert(m) + 1
    }

    fn copy(&mut self, iov: &[IoVec]) -> Vec<u8> {
        let mut v = self.pool.pop().unwrap_or_default();
        v.clear();
        v.resize(iov_len(iov), 0);
        // SAFETY: the caller's ranges are readable for the posting call.
        unsafe { copy_from_iov(iov, 0, &mut v) };
        v
    }

    /// Registers an RMA read or write; returns the request for the core.
    ///
    /// # Safety
    /// The local ranges stay valid until the request completes (with
    /// FI_INJECT they are copied here).
    pub unsafe fn start_rma(&mut self, op: &RmaOp<'_>, selective: bool) -> Result<RmaReq> {
        if op.iov.len() > IOV_LIMIT {
            return Err(too_many(self.prov, "local", op.iov.len(), IOV_LIMIT));
        }
        if op.rma_iov.is_empty() || op.rma_iov.len() > MAX_RANGES {
            return Err(too_many(self.prov, "remote", op.rma_iov.len(), MAX_RANGES));
        }
        let mut remote = [Remote::default(); MAX_RANGES];
        for (o, r) in remote.iter_mut().zip(op.rma_iov) {
            *o = Remote {
                addr: r.addr,
                len: r.len as u64,
                key: r.key,
            };
        }
        let remote = &remote[..op.rma_iov.len()];
        let inject = op.flags & FI_INJECT != 0 && !op.dir.is_read();
        let copy = inject.then(|| self.copy(op.iov));
        let copied;
        let local: &[IoVec] = match &copy {
            Some(v) => {
                copied = [IoVec {
                    base: v.as_ptr() as usize,
                    len: v.len(),
                }];
                &copied
            }
            None => op.iov,
        };
        let mut req = if op.dir.is_read() {
            RmaReq::read(local, remote, 0)
        } else {
            RmaReq::write(local, remote, 0)
        };
        if !op.dir.is_read() && op.flags & FI_REMOTE_CQ_DATA != 0 {
            req = req.with_data(op.data);
        }
        req.fence = op.flags & FI_FENCE != 0;
        req.commit_complete = !op.dir.is_read() && op.flags & FI_COMMIT_COMPLETE != 0;
        req.context = self.insert(OpMeta {
            context: op.context,
            flags: FI_RMA | op.dir.flag(),
            completion: ofi_core::object::tx_completion(op.flags, selective),
            inject: copy,
        });
        Ok(req)
    }

    /// Registers an atomic; returns the request for the core.
    ///
    /// # Safety
    /// Operand, compare and result memory stay valid until the atomic
    /// completes (operands: with FI_INJECT they are copied here).
    pub unsafe fn start_atomic(&mut self, op: &AtomicOp<'_>, selective: bool) -> Result<RmaReq> {
        let size = atomic::datatype_size(op.datatype).ok_or_else(|| {
            Error::inval(format!("{}: unknown datatype {}", self.prov, op.datatype))
        })?;
        if op.rma_ioc.is_empty() || op.rma_ioc.len() > MAX_RANGES {
            return Err(too_many(self.prov, "remote", op.rma_ioc.len(), MAX_RANGES));
        }
        let mut remote = [Remote::default(); MAX_RANGES];
        for (o, r) in remote.iter_mut().zip(op.rma_ioc) {
            *o = Remote {
                addr: r.addr,
                len: r.count as u64,
                key: r.key,
            };
        }
        let remote = &remote[..op.rma_ioc.len()];
        let mut operand = [IoVec::default(); MAX_IOV];
        let mut compare = [IoVec::default(); MAX_IOV];
        let mut result = [IoVec::default(); MAX_IOV];
        let no = ioc_bytes(self.prov, op.operand, size, &mut operand)?;
        let nc = ioc_bytes(self.prov, op.compare, size, &mut compare)?;
        let nr = ioc_bytes(self.prov, op.result, size, &mut result)?;
        // FI_INJECT covers the input buffers of every kind (fi_atomic(3)):
        // the operands and the compare values are copied here, one after
        // the other; results still land in the caller's buffers.
        let inject = op.flags & FI_INJECT != 0;
        let (mut no, mut nc) = (no, nc);
        let copy = inject.then(|| {
            let mut inputs = [IoVec::default(); 2 * MAX_IOV];
            inputs[..no].copy_from_slice(&operand[..no]);
            inputs[no..no + nc].copy_from_slice(&compare[..nc]);
            self.copy(&inputs[..no + nc])
        });
        if let Some(v) = &copy {
            let op_len = iov_len(&operand[..no]);
            let base = v.as_ptr() as usize;
            if no > 0 {
                operand[0] = IoVec { base, len: op_len };
                no = 1;
            }
            if nc > 0 {
                compare[0] = IoVec {
                    base: base + op_len,
                    len: v.len() - op_len,
                };
                nc = 1;
            }
        }
        let args = AtomicArgs {
            kind: op.kind,
            op: op.op,
            datatype: op.datatype,
        };
        let mut req = RmaReq::atomic(
            args,
            &operand[..no],
            &compare[..nc],
            &result[..nr],
            remote,
            0,
        );
        if op.flags & FI_REMOTE_CQ_DATA != 0 {
            req = req.with_data(op.data);
        }
        req.fence = op.flags & FI_FENCE != 0;
        req.commit_complete = op.flags & FI_COMMIT_COMPLETE != 0;
        let read = op.kind != AtomicKind::Basic;
        req.context = self.insert(OpMeta {
            context: op.context,
            flags: FI_ATOMIC | if read { FI_READ } else { FI_WRITE },
            completion: ofi_core::object::tx_completion(op.flags, selective),
            inject: copy,
        });
        Ok(req)
    }

    #[inline]
    fn finish(&mut self, id: usize) -> Option<OpMeta> {
        self.slots.remove(id.checked_sub(1)?)
    }

    /// Completes request `id` (the core's RmaComplete / RmaError) into the
    /// transmit CQ and the read or write counter.
    #[inline]
    pub fn complete(&mut self, b: &EpBindings, id: usize, err: Option<i32>) {
        let Some(m) = self.finish(id) else {
            return;
        };
        b.tx_done(m.context, m.flags, m.completion, err);
        if let Some(v) = m.inject {
            if self.pool.len() < 64 {
                self.pool.push(v);
            }
        }
    }

    /// Forgets a request the core refused.
    pub fn abandon(&mut self, req: &RmaReq) {
        if let Some(m) = self.finish(req.context) {
            if let Some(v) = m.inject {
                self.pool.push(v);
            }
        }
    }
}

/// `fi_query_atomic` for the endpoints running the core.
pub fn query_atomic(kind: AtomicKind, op: u32, datatype: u32) -> Result<usize> {
    atomic::query(kind, op, datatype, ATOMIC_MAX_BYTES)
}

/// Maps a core refusal of a request by an endpoint of provider `prov` to
/// an error.
pub fn refused(prov: &str, e: i32) -> Error {
    Error::new(e, format!("{prov}: the connection refused the request"))
}
