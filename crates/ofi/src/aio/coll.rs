//! Collectives on an async [`Channel`]: [`Channel::join`] is a future
//! that resolves once every member joined (it sleeps on the event
//! queue's fd), and each operation over the [`Group`] is an [`Op`]
//! owning its buffers, as in the safe layer ([`crate::safe::Collective`]).

use super::cm::next_event;
use super::{Channel, Op};
use crate::consts::coll_op::*;
use crate::consts::*;
use crate::safe::buf::Held;
use crate::safe::coll::prepare;
use crate::safe::{Addr, Collective, Group};
use crate::{errno, AvSetAttr, CollOp, Error, IoBufMut, Result};
use std::sync::atomic::Ordering;

impl Channel {
    /// Joins the group of `members` (peers of this channel's address
    /// vector, in rank order, this channel's own address among them);
    /// resolves once every member has joined. The channel must be an RDM
    /// one opened from an offer with FI_COLLECTIVE; members join the
    /// groups they share in the same order.
    pub async fn join(&self, members: &[Addr]) -> Result<Group> {
        let (Some(av), Some((eq, fd))) = (&self.inner._av, &self.inner._eq) else {
            return Err(Error::new(
                errno::FI_ENOSYS,
                "join: collectives need an RDM channel opened from an offer with FI_COLLECTIVE",
            ));
        };
        let set = av.av_set(&AvSetAttr::default())?;
        for m in members {
            set.insert(m.0)?;
        }
        let context = self.inner.joins.fetch_add(1, Ordering::Relaxed) + 1;
        let mc = self.with_ep(|ep| ep.join_collective(set.addr(), &set, 0, 0, context))?;
        loop {
            let ev = next_event(eq, fd, "join").await?;
            if ev.event == eq_event::FI_JOIN_COMPLETE && ev.context == context {
                break;
            }
        }
        Group::new(mc, set, members)
    }

    /// Posts a collective whose input and output live in `c`.
    fn coll(&self, g: &Group, kind: u32, root: Option<Addr>, mut c: Collective) -> Op<Collective> {
        let op = match prepare(g, kind, root, &mut c) {
            Ok(op) => op,
            Err(e) => return Op::failed(self.inner.clone(), Held::new(c), e),
        };
        self.post(Held::new(c), false, |ep, ctx| {
            let op = CollOp { context: ctx, ..op };
            // SAFETY: the input and output are the Collective's vectors
            // (heap memory that does not move with it), owned by the future
            // or the table until the completion is recorded or the endpoint
            // has closed; the input is read now, the output sized by
            // `prepare` for what the operation writes.
            unsafe { ep.collective(&op) }
        })
    }

    /// `fi_barrier`: resolves once every member entered it.
    pub fn barrier(&self, g: &Group) -> Op<()> {
        let addr = g.addr();
        self.post(Held::new(()), false, |ep, ctx| ep.barrier(addr, 0, ctx))
    }

    /// `fi_broadcast`: `root`'s bytes into every member's `buf` (the same
    /// length at each).
    pub fn broadcast<B: IoBufMut>(&self, g: &Group, buf: B, root: Addr) -> Op<B> {
        let mut buf = Held::new(buf);
        let m = buf.as_mut();
        let (at, len) = (m.as_mut_ptr(), m.len());
        let addr = g.addr();
        self.post(buf, false, |ep, ctx| {
            // SAFETY: `at` is the buffer's memory (which does not move with
            // it: IoBufMut's contract), owned by the future or the table
            // until the completion is recorded or the endpoint has closed.
            unsafe { ep.broadcast(at, len, addr, root.0, datatype::FI_UINT8, 0, ctx) }
        })
    }

    /// `fi_allreduce` (see [`crate::safe::Channel::allreduce`]).
    pub fn allreduce(&self, g: &Group, c: Collective) -> Op<Collective> {
        self.coll(g, FI_ALLREDUCE, None, c)
    }

    /// `fi_allgather` (see [`crate::safe::Channel::allgather`]).
    pub fn allgather(&self, g: &Group, c: Collective) -> Op<Collective> {
        self.coll(g, FI_ALLGATHER, None, c)
    }

    /// `fi_reduce_scatter` (see [`crate::safe::Channel::reduce_scatter`]).
    pub fn reduce_scatter(&self, g: &Group, c: Collective) -> Op<Collective> {
        self.coll(g, FI_REDUCE_SCATTER, None, c)
    }

    /// `fi_alltoall` (see [`crate::safe::Channel::alltoall`]).
    pub fn alltoall(&self, g: &Group, c: Collective) -> Op<Collective> {
        self.coll(g, FI_ALLTOALL, None, c)
    }

    /// `fi_reduce` (see [`crate::safe::Channel::reduce`]).
    pub fn reduce(&self, g: &Group, c: Collective, root: Addr) -> Op<Collective> {
        self.coll(g, FI_REDUCE, Some(root), c)
    }

    /// `fi_scatter` (see [`crate::safe::Channel::scatter`]).
    pub fn scatter(&self, g: &Group, c: Collective, root: Addr) -> Op<Collective> {
        self.coll(g, FI_SCATTER, Some(root), c)
    }

    /// `fi_gather` (see [`crate::safe::Channel::gather`]).
    pub fn gather(&self, g: &Group, c: Collective, root: Addr) -> Op<Collective> {
        self.coll(g, FI_GATHER, Some(root), c)
    }
}
