//! Collectives on a [`Channel`] (`fi_collective(3)`): a [`Group`] joined
//! from peers of the channel's address vector, and the operations over
//! it, each owning its buffers ([`Collective`], or a broadcast's buffer)
//! until it completes.
//!
//! The channel must be an RDM one opened from an offer with
//! FI_COLLECTIVE (ask for [`Caps::COLLECTIVE`](crate::Caps) in the
//! hints). Every member runs a group's operations in the same order, as
//! MPI asks of a communicator's; counts are per member, as
//! [`ofi_core::object::CollOp`] describes.

use super::buf::Held;
use super::{Addr, Channel, Eps, PostError, Posted};
use crate::consts::coll_op::*;
use crate::consts::*;
use crate::{errno, AvSet, AvSetAttr, CollOp, Error, IoBufMut, Multicast, Result};
use ofi_core::util::atomic::datatype_size;
use std::time::{Duration, Instant};

/// A collective group this channel joined ([`Channel::join`]); dropping it
/// leaves the group (operations still running fail with `FI_ECANCELED`).
pub struct Group {
    // Leaves before the set goes.
    mc: Multicast,
    _set: AvSet,
    members: Vec<Addr>,
    rank: usize,
}

impl std::fmt::Debug for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Group")
            .field("addr", &self.mc.fi_addr())
            .field("rank", &self.rank)
            .field("members", &self.members)
            .finish()
    }
}

impl Group {
    /// A joined group: the core's, the set it was joined from (of
    /// `members`, in order).
    pub(crate) fn new(mc: Multicast, set: AvSet, members: &[Addr]) -> Result<Group> {
        let rank = mc
            .rank()
            .ok_or_else(|| Error::inval("join: the group has no rank for this channel"))?;
        Ok(Group {
            mc,
            _set: set,
            members: members.to_vec(),
            rank,
        })
    }

    /// The members, in rank order.
    pub fn members(&self) -> &[Addr] {
        &self.members
    }

    /// This channel's rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of members.
    pub fn size(&self) -> usize {
        self.members.len()
    }

    /// The group's address (`fi_mc_addr`).
    pub fn addr(&self) -> u64 {
        self.mc.fi_addr()
    }
}

/// A collective's buffers: its `input` is read when it is posted, its
/// `output` written when it completes (sized by the call: see each one).
/// Elements are native-endian values of `datatype`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Collective {
    /// `enum fi_datatype` (`datatype::FI_UINT64` …).
    pub datatype: u32,
    /// `enum fi_op` of the reductions (`atomic_op::FI_SUM` …).
    pub op: u32,
    /// This member's elements.
    pub input: Vec<u8>,
    /// The result.
    pub output: Vec<u8>,
}

impl Collective {
    /// A reduction's buffers: `op` on `input` of `datatype`.
    pub fn reduce(op: u32, datatype: u32, input: Vec<u8>) -> Collective {
        Collective {
            datatype,
            op,
            input,
            output: Vec::new(),
        }
    }

    /// A data movement's buffers: `input` of `datatype`.
    pub fn data(datatype: u32, input: Vec<u8>) -> Collective {
        Collective {
            datatype,
            op: FI_NOOP,
            input,
            output: Vec::new(),
        }
    }
}

impl Channel {
    /// Joins the group of `members` (peers of this channel's address
    /// vector, in rank order, this channel's own address among them) and
    /// waits, up to `timeout`, until every member has joined
    /// (FI_JOIN_COMPLETE); drives the channel meanwhile. Members join the
    /// groups they share in the same order.
    pub fn join(&self, members: &[Addr], timeout: Duration) -> Result<Group> {
        let (Eps::One(ep), Some(av), Some(eq)) = (&self.ep, &self.av, &self.eq) else {
            return Err(Error::new(
                errno::FI_ENOSYS,
                "join: collectives need an RDM channel opened from an offer with FI_COLLECTIVE",
            ));
        };
        let set = av.av_set(&AvSetAttr::default())?;
        for m in members {
            set.insert(m.0)?;
        }
        let context = self.joins.get() + 1;
        self.joins.set(context);
        let mc = ep.join_collective(set.addr(), &set, 0, 0, context)?;
        let deadline = Instant::now() + timeout;
        loop {
            match eq.read() {
                Ok(ev) if ev.event == eq_event::FI_JOIN_COMPLETE && ev.context == context => break,
                Ok(_) => {}
                Err(e) if e.code() == errno::FI_EAVAIL => {
                    let err = eq.readerr()?;
                    if err.context == context {
                        return Err(Error::new(err.err, "join: the group failed to form"));
                    }
                }
                Err(e) if e.is_again() => {
                    if Instant::now() >= deadline {
                        return Err(Error::new(
                            errno::FI_ETIMEDOUT,
                            "join: not every member joined in time",
                        ));
                    }
                    self.poll()?;
                }
                Err(e) => return Err(e),
            }
        }
        Group::new(mc, set, members)
    }

    /// Posts a collective whose input and output live in `c`.
    fn coll(
        &self,
        g: &Group,
        kind: u32,
        root: Option<Addr>,
        mut c: Collective,
    ) -> Posted<'_, Collective> {
        let op = match prepare(g, kind, root, &mut c) {
            Ok(op) => op,
            Err(error) => return Err(PostError { buf: c, error }),
        };
        self.post(Held::new(c), false, Addr(FI_ADDR_NOTAVAIL), |ctx| {
            let op = CollOp { context: ctx, ..op };
            self.with_ep(Addr(FI_ADDR_NOTAVAIL), |ep| {
                // SAFETY: the input and output are the Collective's vectors
                // (heap memory that does not move with it), owned by the
                // handle or the table until the completion is reaped or the
                // endpoint has shut down; the input is read now, the output
                // sized by `prepare` for what the operation writes.
                unsafe { ep.collective(&op) }
            })
        })
    }

    /// `fi_barrier`: completes once every member entered it.
    pub fn barrier(&self, g: &Group) -> Posted<'_, ()> {
        let addr = g.addr();
        self.post(Held::new(()), false, Addr(FI_ADDR_NOTAVAIL), |ctx| {
            self.with_ep(Addr(FI_ADDR_NOTAVAIL), |ep| ep.barrier(addr, 0, ctx))
        })
    }

    /// `fi_broadcast`: `root`'s bytes into every member's `buf` (the same
    /// length at each).
    pub fn broadcast<B: IoBufMut>(&self, g: &Group, buf: B, root: Addr) -> Posted<'_, B> {
        let mut buf = Held::new(buf);
        let m = buf.as_mut();
        let (at, len) = (m.as_mut_ptr(), m.len());
        let addr = g.addr();
        self.post(buf, false, Addr(FI_ADDR_NOTAVAIL), |ctx| {
            self.with_ep(Addr(FI_ADDR_NOTAVAIL), |ep| {
                // SAFETY: `at` is the buffer's memory (which does not move
                // with it: IoBufMut's contract), owned by the handle or the
                // table until the completion is reaped or the endpoint has
                // shut down.
                unsafe { ep.broadcast(at, len, addr, root.0, datatype::FI_UINT8, 0, ctx) }
            })
        })
    }

    /// `fi_allreduce`: every member's `input` combined with `c.op`;
    /// `output` gets as many bytes.
    pub fn allreduce(&self, g: &Group, c: Collective) -> Posted<'_, Collective> {
        self.coll(g, FI_ALLREDUCE, None, c)
    }

    /// `fi_allgather`: every member's `input` (the same length at each) in
    /// rank order into `output`.
    pub fn allgather(&self, g: &Group, c: Collective) -> Posted<'_, Collective> {
        self.coll(g, FI_ALLGATHER, None, c)
    }

    /// `fi_reduce_scatter`: `input` is one block per member; `output` gets
    /// this member's block of the combination.
    pub fn reduce_scatter(&self, g: &Group, c: Collective) -> Posted<'_, Collective> {
        self.coll(g, FI_REDUCE_SCATTER, None, c)
    }

    /// `fi_alltoall`: block `i` of `input` to member `i`; member `i`'s
    /// block for this one at block `i` of `output`.
    pub fn alltoall(&self, g: &Group, c: Collective) -> Posted<'_, Collective> {
        self.coll(g, FI_ALLTOALL, None, c)
    }

    /// `fi_reduce`: the combination of every member's `input`, into
    /// `root`'s `output` (empty at the others).
    pub fn reduce(&self, g: &Group, c: Collective, root: Addr) -> Posted<'_, Collective> {
        self.coll(g, FI_REDUCE, Some(root), c)
    }

    /// `fi_scatter`: `root`'s `input` is one block per member; every
    /// member's `output`, sized by the caller to one block, gets its own.
    pub fn scatter(&self, g: &Group, c: Collective, root: Addr) -> Posted<'_, Collective> {
        self.coll(g, FI_SCATTER, Some(root), c)
    }

    /// `fi_gather`: every member's `input` in rank order into `root`'s
    /// `output` (empty at the others).
    pub fn gather(&self, g: &Group, c: Collective, root: Addr) -> Posted<'_, Collective> {
        self.coll(g, FI_GATHER, Some(root), c)
    }
}

/// Sizes `c.output` for collective `kind` over `g` (see each call) and
/// describes the operation (its context 0): the input must be whole
/// elements of a known datatype.
pub(crate) fn prepare(
    g: &Group,
    kind: u32,
    root: Option<Addr>,
    c: &mut Collective,
) -> Result<CollOp> {
    let n = g.size();
    let Some(size) = datatype_size(c.datatype) else {
        return Err(Error::inval(format!(
            "collective: unknown datatype {}",
            c.datatype
        )));
    };
    if !c.input.len().is_multiple_of(size) {
        return Err(Error::inval(format!(
            "collective: {} input bytes are not whole {size}-byte elements",
            c.input.len()
        )));
    }
    // The root by its place in the group, as the core finds it (a peer
    // named by another fi_addr than the group's is refused: the core
    // would take it for the member while the sizes here would not).
    let at_root = match root {
        None => false,
        Some(r) => match g.members.iter().position(|m| *m == r) {
            Some(i) => i == g.rank,
            None => {
                return Err(Error::inval(format!(
                    "collective: root {} is not one of the group's members",
                    r.0
                )))
            }
        },
    };
    // Elements per member, and the output's length.
    let (count, out) = match kind {
        FI_ALLREDUCE => (c.input.len() / size, c.input.len()),
        FI_ALLGATHER => (c.input.len() / size, c.input.len() * n),
        FI_REDUCE_SCATTER => (c.input.len() / size / n, c.input.len() / n),
        FI_ALLTOALL => (c.input.len() / size / n, c.input.len()),
        FI_REDUCE => (
            c.input.len() / size,
            if at_root { c.input.len() } else { 0 },
        ),
        FI_GATHER => (
            c.input.len() / size,
            if at_root { c.input.len() * n } else { 0 },
        ),
        // Scatter: the caller sizes `output` to its block, the root's
        // input holds every member's.
        _ => {
            let count = c.output.len() / size;
            if at_root && c.input.len() != count * size * n {
                return Err(Error::inval(format!(
                    "fi_scatter: the root's {} input bytes are not {n} blocks of {} bytes",
                    c.input.len(),
                    count * size
                )));
            }
            (count, c.output.len())
        }
    };
    c.output.clear();
    c.output.resize(out, 0);
    Ok(CollOp {
        coll: kind,
        buf: c.input.as_ptr() as usize,
        count,
        result: c.output.as_mut_ptr() as usize,
        coll_addr: g.addr(),
        root_addr: root.map_or(FI_ADDR_NOTAVAIL, |r| r.0),
        datatype: c.datatype,
        op: c.op,
        flags: 0,
        context: 0,
    })
}
