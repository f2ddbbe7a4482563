//! One-sided operations: the remote-range types of the RMA and atomic calls
//! (defined in `ofi_base::rma`, re-exported here), and the target side
//! every provider shares: resolving a remote access against the domain's
//! registered regions (key, access rights, bounds), counting remote
//! events, and applying atomics to local memory.
//!
//! A provider receives a request naming `(key, addr, len)`; it calls
//! [`resolve`] and either gets the local address to move data to or from,
//! or an error it reports back to the initiator. Nothing is written before
//! every range of a request has been resolved.
#![allow(unsafe_code)]

pub use ofi_base::rma::{Ioc, RmaIoc, RmaIov};

use super::atomic::{self, AtomicKind};
use super::cntr::CntrCore;
use super::mr::{MrCache, MrCore, MrMap};
use crate::consts::*;
use crate::error::{errno, Error, Result};
use crate::object::EpBindings;
use std::sync::Arc;

/// A remote access resolved to local memory.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The region (kept alive while the access runs).
    pub mr: Arc<MrCore>,
    /// Local start address.
    pub addr: usize,
    /// Length in bytes.
    pub len: usize,
}

/// Resolves a remote access at the target: the key must name a registered
/// region (`FI_EKEYREJECTED`), the region must grant `access`
/// (FI_REMOTE_READ or FI_REMOTE_WRITE; `FI_EACCES`) and the range must lie
/// inside it (`FI_EACCES`). `virt`: the domain uses FI_MR_VIRT_ADDR.
pub fn resolve(
    map: &MrMap,
    key: u64,
    addr: u64,
    len: usize,
    access: u64,
    virt: bool,
) -> Result<Resolved> {
    let mr = map.lookup(key).ok_or_else(|| {
        Error::new(
            errno::FI_EKEYREJECTED,
            format!("no region is registered under key {key:#x}"),
        )
    })?;
    let local = mr.check(addr, len, access, virt)?;
    Ok(Resolved {
        mr,
        addr: local,
        len,
    })
}

/// [`resolve`] as a target's data path takes it: `Err` is the FI_E*
/// number alone, which is all the target answers a peer with (a bad
/// request costs no formatting).
#[inline]
pub fn resolve_code(
    map: &MrMap,
    key: u64,
    addr: u64,
    len: usize,
    access: u64,
    virt: bool,
) -> std::result::Result<Resolved, i32> {
    let mr = map.lookup(key).ok_or(errno::FI_EKEYREJECTED)?;
    let local = mr.locate(addr, len, access, virt)?;
    Ok(Resolved {
        mr,
        addr: local,
        len,
    })
}

/// [`resolve_code`] through `cache` (the region resolved last skips the
/// map).
#[inline]
pub fn resolve_cached(
    cache: &mut MrCache,
    map: &MrMap,
    key: u64,
    addr: u64,
    len: usize,
    access: u64,
    virt: bool,
) -> std::result::Result<Resolved, i32> {
    let mr = cache.lookup(map, key).ok_or(errno::FI_EKEYREJECTED)?;
    let local = mr.locate(addr, len, access, virt)?;
    Ok(Resolved {
        mr,
        addr: local,
        len,
    })
}

/// Resolves every range of a request, all or nothing, into `out` (cleared
/// first; left empty on failure). `Err` is the FI_E* number to answer with.
pub fn resolve_all(
    map: &MrMap,
    ranges: &[RmaIov],
    access: u64,
    virt: bool,
    out: &mut Vec<Resolved>,
) -> std::result::Result<(), i32> {
    resolve_all_cached(&mut MrCache::default(), map, ranges, access, virt, out)
}

/// [`resolve_all`] through `cache` (a request into the region resolved
/// last skips the map).
#[inline]
pub fn resolve_all_cached(
    cache: &mut MrCache,
    map: &MrMap,
    ranges: &[RmaIov],
    access: u64,
    virt: bool,
    out: &mut Vec<Resolved>,
) -> std::result::Result<(), i32> {
    out.clear();
    for r in ranges {
        match resolve_cached(cache, map, r.key, r.addr, r.len, access, virt) {
            Ok(x) => out.push(x),
            Err(e) => {
                out.clear();
                return Err(e);
            }
        }
    }
    Ok(())
}

/// FI_COMMIT_COMPLETE at the target, before anything is written: every
/// resolved range's region can be made durable (`FI_EOPNOTSUPP` naming
/// why not otherwise: the request is refused and memory stays untouched).
pub fn check_durable(res: &[Resolved]) -> Result<()> {
    res.iter().try_for_each(|r| r.mr.durable())
}

/// FI_COMMIT_COMPLETE at the target, after the data landed and before the
/// answer: every resolved range is on stable storage when this returns.
pub fn persist_all(res: &[Resolved]) -> Result<()> {
    res.iter().try_for_each(|r| r.mr.persist(r.addr, r.len))
}

/// Counts a completed remote access at the target: the endpoint's
/// FI_REMOTE_READ / FI_REMOTE_WRITE counter by `ep_access` (fi_endpoint(3):
/// a fetching or comparing atomic counts as a read) and the region's bound
/// counter by `mr_access` (fi_mr(3): an atomic that modifies the region
/// counts as a write) (FI_RMA_EVENT). Each is FI_REMOTE_READ or
/// FI_REMOTE_WRITE.
#[inline]
pub fn count_remote(b: &EpBindings, mr: Option<&MrCore>, ep_access: u64, mr_access: u64) {
    let access = ep_access;
    let c = if access & FI_REMOTE_WRITE != 0 {
        &b.rem_write_cntr
    } else {
        &b.rem_read_cntr
    };
    if let Some(c) = c {
        c.add(1);
    }
    if let Some(mr) = mr {
        mr.count_remote(mr_access);
    }
}

/// Validates an atomic's shape before anything is sent: op and datatype
/// defined for this call family, buffers of equal element counts.
pub fn check_atomic_shape(
    kind: AtomicKind,
    op: u32,
    dt: u32,
    operand: usize,
    compare: usize,
    result: usize,
    remote: usize,
) -> Result<usize> {
    if !atomic::valid(kind, op, dt) {
        return Err(Error::new(
            errno::FI_EOPNOTSUPP,
            format!(
                "atomic: {} on {} is not defined for this call",
                enum_name(ATOMIC_OP_NAMES, op).unwrap_or("unknown op"),
                enum_name(DATATYPE_NAMES, dt).unwrap_or("unknown datatype")
            ),
        ));
    }
    let need_operand = !(kind == AtomicKind::Fetch && op == atomic_op::FI_ATOMIC_READ);
    if need_operand && operand != remote {
        return Err(Error::inval(format!(
            "atomic: {operand} operand elements for {remote} remote elements"
        )));
    }
    if kind == AtomicKind::Compare && compare != remote {
        return Err(Error::inval(format!(
            "atomic: {compare} compare elements for {remote} remote elements"
        )));
    }
    if kind != AtomicKind::Basic && result != remote {
        return Err(Error::inval(format!(
            "atomic: {result} result elements for {remote} remote elements"
        )));
    }
    if remote == 0 {
        return Err(Error::inval("atomic: no elements"));
    }
    Ok(remote)
}

/// Applies an atomic to resolved local memory under the region map's
/// atomic lock, so that atomics from every initiator on one target word are
/// serialised. `result` receives the original values (fetch and compare).
///
/// # Safety
/// `target` must have been returned by [`resolve`] for FI_REMOTE_WRITE (or
/// FI_REMOTE_READ for FI_ATOMIC_READ) and its region must still be registered.
#[allow(clippy::too_many_arguments)]
pub unsafe fn apply_atomic(
    map: &MrMap,
    kind: AtomicKind,
    op: u32,
    dt: u32,
    target: &Resolved,
    operand: &[u8],
    compare: &[u8],
    result: &mut [u8],
) -> Result<()> {
    let _g = map.atomic_lock();
    // SAFETY: the caller guarantees the resolved range is registered memory
    // of this process, valid for reads and writes for `len` bytes; the
    // atomic lock keeps other fabric atomics off it meanwhile.
    let t = unsafe { std::slice::from_raw_parts_mut(target.addr as *mut u8, target.len) };
    atomic::apply(kind, op, dt, t, operand, compare, result)
}

/// The counter a region counts remote accesses into (FI_RMA_EVENT).
#[derive(Debug, Clone)]
pub struct MrEvents {
    /// The bound counter.
    pub cntr: Arc<CntrCore>,
    /// FI_REMOTE_READ and/or FI_REMOTE_WRITE.
    pub flags: u64,
}
