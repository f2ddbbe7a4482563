//! Collectives on the raw layer (`man fi_collective`): joining a group of
//! an AV set's members (`fi_join_collective`), the operations over a
//! joined group ([`CollOp`]: barrier, broadcast, allreduce, allgather,
//! reduce-scatter, alltoall, reduce, scatter, gather) and
//! `fi_query_collective`. The core's collective layer ([`crate::coll`])
//! runs them over the endpoint's tagged messages, on every provider.
//!
//! Counts are per member, as libfabric's own collectives take them:
//! allgather's and gather's results, scatter's input at the root, and
//! reduce-scatter's and alltoall's inputs (alltoall's result too) hold one
//! block of `count` elements per member, in rank order (the AV set's
//! order).
// The operations are unsafe fns: the caller's memory is named by address
// and read at the call, written at completion.
#![allow(unsafe_code)]

use super::av_set::AvSet;
use super::mc::Multicast;
use super::{Domain, Endpoint};
use crate::coll::engine::{Bound, CollEp};
use crate::coll::{MAX_MEMBERS, MESSAGE_MAX};
use crate::consts::coll_op::*;
use crate::consts::*;
use crate::error::{errno, Error, Result};
use crate::provider::McOps;
use crate::util::atomic::{self, AtomicKind};
use std::sync::{Arc, Weak};

/// A collective operation as the raw layer takes it (the arguments of
/// `fi_barrier2` … `fi_gather`). Memory is named by address: `buf` is
/// read when the operation is posted (broadcast: read at the root, written
/// elsewhere at completion), `result` written at completion.
#[derive(Clone, Copy, Debug, Default)]
pub struct CollOp {
    /// `enum fi_collective_op` (`coll_op::FI_BARRIER` …).
    pub coll: u32,
    /// The input (broadcast: the data, in and out).
    pub buf: usize,
    /// Elements per member.
    pub count: usize,
    /// Where the output goes.
    pub result: usize,
    /// The group (`fi_mc_addr` of the joined group).
    pub coll_addr: u64,
    /// The root (an fi_addr of a member) of broadcast, reduce, scatter
    /// and gather.
    pub root_addr: u64,
    /// `enum fi_datatype`.
    pub datatype: u32,
    /// `enum fi_op` of reductions.
    pub op: u32,
    /// Operation flags.
    pub flags: u64,
    /// The caller's context, in the completion.
    pub context: usize,
}

/// What `fi_query_collective` answers (`struct fi_collective_attr`, with
/// `datatype_attr` flattened).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CollAttr {
    /// In: `enum fi_op` (`FI_NOOP` for collectives that move data only).
    pub op: u32,
    /// In: `enum fi_datatype` (`FI_VOID` for a barrier).
    pub datatype: u32,
    /// Out: the largest count one operation takes (`datatype_attr.count`).
    pub count: usize,
    /// Out: the datatype's size (`datatype_attr.size`).
    pub size: usize,
    /// Out: the most members a group may have.
    pub max_members: usize,
    /// Mode bits (0).
    pub mode: u64,
}

/// A joined group as a multicast group: its address, and leaving on drop.
struct CollGroup {
    layer: Weak<CollEp>,
    addr: u64,
    rank: usize,
}

impl McOps for CollGroup {
    fn fi_addr(&self) -> u64 {
        self.addr
    }
    fn rank(&self) -> Option<usize> {
        Some(self.rank)
    }
}

impl Drop for CollGroup {
    fn drop(&mut self) {
        if let Some(l) = self.layer.upgrade() {
            l.leave(self.addr);
        }
    }
}

impl Endpoint {
    /// `fi_join_collective`: joins the group of `set`'s members (this
    /// endpoint among them, ranked in the set's order). `coll_addr` is the
    /// set's address ([`AvSet::addr`]), a group this endpoint joined whose
    /// members include the set's, or `FI_ADDR_NOTAVAIL` when the
    /// application manages the membership (the join then completes at
    /// once, without traffic). FI_JOIN_COMPLETE, with `fid` and `context`,
    /// goes to the endpoint's event queue once every member joined; a
    /// failed join is an error entry there. The endpoint must be an
    /// enabled RDM endpoint opened with FI_COLLECTIVE, bound to an event
    /// queue and to completion queues for both directions, with the set's
    /// address vector.
    pub fn join_collective(
        &self,
        coll_addr: u64,
        set: &AvSet,
        flags: u64,
        fid: usize,
        context: usize,
    ) -> Result<Multicast> {
        if self.info.caps & FI_COLLECTIVE == 0 {
            return Err(Error::nosys(
                "fi_join_collective: the endpoint was not opened with FI_COLLECTIVE",
            ));
        }
        let known = FI_COLLECTIVE | FI_SEND | FI_RECV;
        if flags & !known != 0 {
            return Err(Error::new(
                errno::FI_EBADFLAGS,
                format!("fi_join_collective: flags {:#x}", flags & !known),
            ));
        }
        let layer = self.coll_layer()?;
        if !Arc::ptr_eq(set.av(), layer.av()) {
            return Err(Error::inval(
                "fi_join_collective: the AV set is of another address vector than the endpoint's",
            ));
        }
        let members = set.members();
        if members.is_empty() {
            return Err(Error::inval("fi_join_collective: the AV set is empty"));
        }
        let app_managed = coll_addr == FI_ADDR_NOTAVAIL;
        if !app_managed && coll_addr != set.addr() {
            let Some((_, parent)) = layer.members(coll_addr) else {
                return Err(Error::inval(format!(
                    "fi_join_collective: coll_addr {coll_addr:#x} is neither the set's address nor a group this endpoint joined"
                )));
            };
            let av = set.av();
            if let Some(m) = members
                .iter()
                .find(|m| !parent.contains(&av.primary(**m).unwrap_or(**m)))
            {
                return Err(Error::inval(format!(
                    "fi_join_collective: fi_addr {m} is not a member of the group coll_addr names"
                )));
            }
        }
        let av = set.av();
        let me = self.ops.getname()?;
        let own = av.find(&me).ok_or_else(|| {
            Error::inval(
                "fi_join_collective: this endpoint's own address is not in the address vector",
            )
        })?;
        let rank = members
            .iter()
            .position(|m| av.primary(*m) == Some(own))
            .ok_or_else(|| {
                Error::inval("fi_join_collective: this endpoint is not a member of the AV set")
            })?;
        let addr = layer.join(&members, rank, app_managed, set.flags(), fid, context)?;
        Ok(Multicast::new(Box::new(CollGroup {
            layer: Arc::downgrade(&layer),
            addr,
            rank,
        })))
    }

    /// The endpoint's collective layer, started at its first join.
    fn coll_layer(&self) -> Result<Arc<CollEp>> {
        let Some(side) = &self.coll else {
            return Err(Error::nosys(
                "fi_join_collective: the endpoint was not opened with FI_COLLECTIVE",
            ));
        };
        if let Some(l) = side.layer.get() {
            return Ok(l.clone());
        }
        let b = {
            let s = self.state();
            if !s.enabled {
                return Err(Error::new(
                    errno::FI_EOPBADSTATE,
                    "fi_join_collective: enable the endpoint first",
                ));
            }
            if self.info.ep_attr.ep_type != ep_type::FI_EP_RDM {
                return Err(Error::nosys(
                    "fi_join_collective: collectives run on RDM endpoints",
                ));
            }
            let Some(eq) = s.b.eq.clone() else {
                return Err(Error::new(
                    errno::FI_ENOEQ,
                    "fi_join_collective: no event queue is bound (FI_JOIN_COMPLETE goes there)",
                ));
            };
            let (Some(tx_cq), Some(rx_cq)) = (s.b.tx_cq.clone(), s.b.rx_cq.clone()) else {
                return Err(Error::new(
                    errno::FI_ENOCQ,
                    "fi_join_collective: collectives need completion queues bound for FI_TRANSMIT and FI_RECV",
                ));
            };
            let Some(av) = s.b.av.clone() else {
                return Err(Error::new(errno::FI_ENOAV, "fi_join_collective: no AV"));
            };
            let _ = rx_cq;
            Bound {
                ops: side.raw.clone(),
                av,
                tx_cq,
                eq,
                ep_fid: s.b.fid,
                inject_size: self.info.tx_attr.inject_size,
            }
        };
        let made = CollEp::start(b)?;
        match side.layer.set(made.clone()) {
            Ok(()) => {
                made.begin();
                Ok(made)
            }
            Err(_) => {
                // Another thread's join started one first: that one stays.
                side.layer.get().cloned().ok_or_else(|| {
                    Error::new(errno::FI_EOTHER, "the collective layer did not start")
                })
            }
        }
    }

    /// Posts a collective operation (the general form of `fi_barrier` …
    /// `fi_gather`): it completes in the transmit CQ with `op.context` and
    /// `FI_COLLECTIVE`, or with an error entry. Refused at once: a group
    /// this endpoint did not join (`FI_EINVAL`), a root that is not a
    /// member, an unknown collective or datatype (`FI_EINVAL`), an
    /// operation and datatype that do not combine (`FI_EOPNOTSUPP`), a
    /// count past what a collective carries (`FI_EMSGSIZE`), a group whose
    /// member is gone (its cause).
    ///
    /// # Safety
    /// `op.buf` is readable for the operation's input now; `op.result` (a
    /// broadcast's `op.buf`) is writable for its output until the
    /// operation completes.
    pub unsafe fn collective(&self, op: &CollOp) -> Result<()> {
        let Some(l) = self.coll.as_ref().and_then(|c| c.layer.get()) else {
            return Err(Error::inval(format!(
                "coll_addr {:#x}: this endpoint joined no collective group",
                op.coll_addr
            )));
        };
        // SAFETY: this fn's contract is `post`'s.
        unsafe { l.post(op) }
    }

    /// `fi_barrier2` (`fi_barrier` with flags 0).
    pub fn barrier(&self, coll_addr: u64, flags: u64, context: usize) -> Result<()> {
        let op = CollOp {
            coll: FI_BARRIER,
            coll_addr,
            flags,
            context,
            ..Default::default()
        };
        // SAFETY: a barrier names no memory.
        unsafe { self.collective(&op) }
    }

    /// `fi_broadcast`: `count` elements of `datatype` at `buf`, the root's
    /// sent, the others' written at completion.
    ///
    /// # Safety
    /// `buf` is valid for the elements until the operation completes.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn broadcast(
        &self,
        buf: *mut u8,
        count: usize,
        coll_addr: u64,
        root_addr: u64,
        datatype: u32,
        flags: u64,
        context: usize,
    ) -> Result<()> {
        let op = CollOp {
            coll: FI_BROADCAST,
            buf: buf as usize,
            count,
            coll_addr,
            root_addr,
            datatype,
            flags,
            context,
            ..Default::default()
        };
        // SAFETY: the caller's contract.
        unsafe { self.collective(&op) }
    }

    /// `fi_allreduce`: every member's `count` elements at `buf` combined
    /// with `op` into `result`.
    ///
    /// # Safety
    /// `buf` is readable now; `result` writable until completion.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn allreduce(
        &self,
        buf: *const u8,
        count: usize,
        result: *mut u8,
        coll_addr: u64,
        datatype: u32,
        op: u32,
        flags: u64,
        context: usize,
    ) -> Result<()> {
        let c = CollOp {
            coll: FI_ALLREDUCE,
            buf: buf as usize,
            count,
            result: result as usize,
            coll_addr,
            datatype,
            op,
            flags,
            context,
            ..Default::default()
        };
        // SAFETY: the caller's contract.
        unsafe { self.collective(&c) }
    }

    /// `fi_allgather`: every member's `count` elements, in rank order,
    /// into `result`.
    ///
    /// # Safety
    /// `buf` is readable now; `result` writable until completion.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn allgather(
        &self,
        buf: *const u8,
        count: usize,
        result: *mut u8,
        coll_addr: u64,
        datatype: u32,
        flags: u64,
        context: usize,
    ) -> Result<()> {
        let c = CollOp {
            coll: FI_ALLGATHER,
            buf: buf as usize,
            count,
            result: result as usize,
            coll_addr,
            datatype,
            flags,
            context,
            ..Default::default()
        };
        // SAFETY: the caller's contract.
        unsafe { self.collective(&c) }
    }

    /// `fi_reduce_scatter`: every member's `count` elements per member at
    /// `buf` combined with `op`; this member's block into `result`.
    ///
    /// # Safety
    /// `buf` is readable now; `result` writable until completion.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn reduce_scatter(
        &self,
        buf: *const u8,
        count: usize,
        result: *mut u8,
        coll_addr: u64,
        datatype: u32,
        op: u32,
        flags: u64,
        context: usize,
    ) -> Result<()> {
        let c = CollOp {
            coll: FI_REDUCE_SCATTER,
            buf: buf as usize,
            count,
            result: result as usize,
            coll_addr,
            datatype,
            op,
            flags,
            context,
            ..Default::default()
        };
        // SAFETY: the caller's contract.
        unsafe { self.collective(&c) }
    }

    /// `fi_alltoall`: block `i` of `count` elements at `buf` to member
    /// `i`; member `i`'s block for this one at block `i` of `result`.
    ///
    /// # Safety
    /// `buf` is readable now; `result` writable until completion.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn alltoall(
        &self,
        buf: *const u8,
        count: usize,
        result: *mut u8,
        coll_addr: u64,
        datatype: u32,
        flags: u64,
        context: usize,
    ) -> Result<()> {
        let c = CollOp {
            coll: FI_ALLTOALL,
            buf: buf as usize,
            count,
            result: result as usize,
            coll_addr,
            datatype,
            flags,
            context,
            ..Default::default()
        };
        // SAFETY: the caller's contract.
        unsafe { self.collective(&c) }
    }

    /// `fi_reduce`, `fi_scatter` and `fi_gather`: the rooted collectives
    /// (`coll` one of the three; `op` is the reduce's).
    ///
    /// # Safety
    /// `buf` is readable now; `result` writable until completion (at the
    /// root for reduce and gather).
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn rooted(
        &self,
        coll: u32,
        buf: *const u8,
        count: usize,
        result: *mut u8,
        coll_addr: u64,
        root_addr: u64,
        datatype: u32,
        op: u32,
        flags: u64,
        context: usize,
    ) -> Result<()> {
        if !matches!(coll, FI_REDUCE | FI_SCATTER | FI_GATHER) {
            return Err(Error::inval(format!(
                "collective {coll} is not fi_reduce, fi_scatter or fi_gather"
            )));
        }
        let c = CollOp {
            coll,
            buf: buf as usize,
            count,
            result: result as usize,
            coll_addr,
            root_addr,
            datatype,
            op,
            flags,
            context,
        };
        // SAFETY: the caller's contract.
        unsafe { self.collective(&c) }
    }

    /// `fi_query_collective` on the endpoint's domain: see
    /// [`Domain::query_collective`].
    pub fn query_collective(&self, coll: u32, attr: &mut CollAttr, flags: u64) -> Result<()> {
        query(&self.info, coll, attr, flags)
    }

    /// Called as the endpoint closes: the collective layer leaves its
    /// queues and cancels its receives.
    pub(super) fn close_collectives(&self) {
        if let Some(l) = self.coll.as_ref().and_then(|c| c.layer.get()) {
            l.shutdown();
        }
    }
}

impl Domain {
    /// `fi_query_collective`: whether the domain's endpoints run collective
    /// `coll` with `attr.op` and `attr.datatype`, and its limits
    /// (`attr.count`, `attr.size`, `attr.max_members`). A barrier takes
    /// `FI_NOOP` on `FI_VOID` (both are ignored); a reduction (allreduce,
    /// reduce-scatter, reduce) the operations and datatypes `fi_atomic`
    /// takes (else `FI_EOPNOTSUPP`); the others any datatype but `FI_VOID`
    /// (their `op` is ignored). A domain whose offer has no collectives is
    /// `FI_ENOSYS`.
    pub fn query_collective(&self, coll: u32, attr: &mut CollAttr, flags: u64) -> Result<()> {
        query(&self.info, coll, attr, flags)
    }
}

fn query(info: &crate::info::Info, coll: u32, attr: &mut CollAttr, flags: u64) -> Result<()> {
    let _ = flags;
    if !crate::coll::offer::supports(info) {
        return Err(Error::nosys(
            "fi_query_collective: the domain's offer runs no collectives (RDM endpoints with tagged messages do)",
        ));
    }
    let unsupported =
        |what: &str| Error::new(errno::FI_EOPNOTSUPP, format!("fi_query_collective: {what}"));
    let size = match coll {
        FI_BARRIER => 0,
        FI_ALLREDUCE | FI_REDUCE_SCATTER | FI_REDUCE => {
            if !atomic::valid(AtomicKind::Basic, attr.op, attr.datatype) {
                return Err(unsupported(&format!(
                    "collective {coll} does not combine operation {} on datatype {}",
                    attr.op, attr.datatype
                )));
            }
            atomic::datatype_size(attr.datatype).unwrap_or(1)
        }
        FI_BROADCAST | FI_ALLTOALL | FI_ALLGATHER | FI_SCATTER | FI_GATHER => {
            atomic::datatype_size(attr.datatype).ok_or_else(|| {
                unsupported(&format!(
                    "collective {coll} moves no datatype {}",
                    attr.datatype
                ))
            })?
        }
        c => {
            return Err(Error::inval(format!(
                "fi_query_collective: {c} is not an enum fi_collective_op"
            )))
        }
    };
    attr.size = size;
    attr.count = MESSAGE_MAX.checked_div(size).unwrap_or(0);
    attr.max_members = MAX_MEMBERS;
    attr.mode = 0;
    Ok(())
}
