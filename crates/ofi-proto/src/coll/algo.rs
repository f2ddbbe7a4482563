//! The algorithms, one step machine each: an algorithm sends what it can,
//! takes the messages it waits for when they are whole, and ends with its
//! result. Steps are numbered so that one member never sends another two
//! messages of one operation under the same step.

use super::group::Key;
use super::{CollError, Limits, Op, Transmit};
use crate::udp::FastMap;
use ofi_base::atomic::{self, AtomicKind};
use ofi_base::consts::{enum_name, ATOMIC_OP_NAMES, DATATYPE_NAMES};
use ofi_wire::coll::Repr;
use std::collections::VecDeque;

/// Steps of the fold of a group that is not a power of two.
const STEP_FOLD: u32 = 0;
/// The folded members' results going back.
const STEP_UNFOLD: u32 = 1;
/// Recursive doubling and halving: `STEP_ROUNDS + round`.
const STEP_ROUNDS: u32 = 2;
/// Rabenseifner's allgather: `STEP_GATHER + level`.
const STEP_GATHER: u32 = 0x100;

/// What an algorithm works with: who it is, where frames go, the whole
/// messages that arrived.
pub(super) struct Ctx<'a> {
    pub(super) rank: usize,
    pub(super) size: usize,
    /// The header of this operation's frames (step, total and offset set
    /// per frame).
    pub(super) hdr: Repr,
    pub(super) frame_max: usize,
    pub(super) out: &'a mut VecDeque<Transmit>,
    pub(super) inbox: &'a mut FastMap<Key, Vec<u8>>,
}

impl Ctx<'_> {
    /// Sends `data` as the message of `step` to rank `to`, cut into frames.
    fn send(&mut self, to: usize, step: u32, data: &[u8]) {
        let mut h = self.hdr;
        h.step = step;
        h.total = data.len() as u32;
        if data.is_empty() {
            h.offset = 0;
            self.out.push_back(Transmit {
                to: to as u32,
                frame: h.frame(&[]),
            });
            return;
        }
        for (i, chunk) in data.chunks(self.frame_max).enumerate() {
            h.offset = (i * self.frame_max) as u32;
            self.out.push_back(Transmit {
                to: to as u32,
                frame: h.frame(chunk),
            });
        }
    }

    /// The message of `step` from rank `from`, once whole; it must be
    /// `len` bytes long.
    fn take(&mut self, from: usize, step: u32, len: usize) -> Result<Option<Vec<u8>>, CollError> {
        let Some(m) = self.inbox.remove(&(step, from as u32)) else {
            return Ok(None);
        };
        if m.len() != len {
            return Err(CollError::Peer {
                rank: from as u32,
                why: format!(
                    "sent {} bytes at step {step} where {len} belong (do the members pass the same count?)",
                    m.len()
                ),
            });
        }
        Ok(Some(m))
    }
}

/// How elements combine: an operation and datatype the atomic engine runs.
#[derive(Clone, Copy, Debug)]
pub(super) struct Reduction {
    op: u32,
    datatype: u32,
}

impl Reduction {
    /// Checks the combination; `what` names the call for the error.
    pub(super) fn new(
        what: &str,
        op: u32,
        datatype: u32,
        len: usize,
    ) -> Result<Reduction, CollError> {
        if !atomic::valid(AtomicKind::Basic, op, datatype) {
            let op_name = enum_name(ATOMIC_OP_NAMES, op)
                .map(str::to_owned)
                .unwrap_or_else(|| format!("operation {op}"));
            let dt_name = enum_name(DATATYPE_NAMES, datatype)
                .map(str::to_owned)
                .unwrap_or_else(|| format!("datatype {datatype}"));
            return Err(CollError::Unsupported(format!(
                "{what} does not support {op_name} on {dt_name}"
            )));
        }
        let es = atomic::datatype_size(datatype).unwrap_or(1);
        if !len.is_multiple_of(es) {
            return Err(CollError::Invalid(format!(
                "{what}: {len} bytes are not whole {es}-byte elements"
            )));
        }
        Ok(Reduction { op, datatype })
    }

    /// `target = target (op) operand`, elementwise.
    fn fold(&self, target: &mut [u8], operand: &[u8]) -> Result<(), CollError> {
        atomic::apply(
            AtomicKind::Basic,
            self.op,
            self.datatype,
            target,
            operand,
            &[],
            &mut [],
        )
        .map_err(|e| CollError::Invalid(e.message().to_string()))
    }

    /// `lower (op) higher`, into a new buffer taken from `lower`.
    fn combine(&self, mut lower: Vec<u8>, higher: &[u8]) -> Result<Vec<u8>, CollError> {
        self.fold(&mut lower, higher)?;
        Ok(lower)
    }

    /// Element size in bytes.
    pub(super) fn size(&self) -> usize {
        atomic::datatype_size(self.datatype).unwrap_or(1)
    }
}

/// The lowest set bit of `v` (`v` > 0).
fn lowbit(v: usize) -> usize {
    v & v.wrapping_neg()
}

/// The mask above a binomial tree node's children: its lowest set bit
/// (the root: the power of two at or above the group size).
fn tree_top(vr: usize, n: usize) -> usize {
    if vr == 0 {
        n.next_power_of_two()
    } else {
        lowbit(vr)
    }
}

/// The members of a binomial subtree rooted at relative rank `vr`.
fn tree_span(vr: usize, n: usize) -> usize {
    if vr == 0 {
        n
    } else {
        lowbit(vr).min(n - vr)
    }
}

/// The parent of relative rank `vr` (> 0) in a binomial tree, as a
/// relative rank.
fn tree_parent(vr: usize) -> usize {
    vr & (vr - 1)
}

/// True when relative rank `c` is a child of relative rank `vr` in a
/// binomial tree of `n` members.
fn tree_child(vr: usize, c: usize, n: usize) -> bool {
    c > vr && c < n && (c - vr).is_power_of_two() && c - vr < tree_top(vr, n)
}

/// Rounds of recursive doubling or halving among `pof2` members.
fn rounds(pof2: usize) -> u32 {
    pof2.trailing_zeros()
}

/// A group folded to a power of two (MPICH's scheme): the first `2 * rem`
/// members pair up, the even one of each pair handing its data to the odd
/// one, which stands for both.
#[derive(Clone, Copy, Debug)]
struct Fold {
    pof2: usize,
    rem: usize,
}

impl Fold {
    fn new(n: usize) -> Fold {
        let pof2 = if n.is_power_of_two() {
            n
        } else {
            n.next_power_of_two() / 2
        };
        Fold {
            pof2,
            rem: n - pof2,
        }
    }
    /// The rank among the `pof2`, or None for a member that hands its data on.
    fn newrank(&self, r: usize) -> Option<usize> {
        if r < 2 * self.rem {
            (r % 2 == 1).then_some(r / 2)
        } else {
            Some(r - self.rem)
        }
    }
    /// The member standing for `newrank`.
    fn real(&self, newrank: usize) -> usize {
        if newrank < self.rem {
            newrank * 2 + 1
        } else {
            newrank + self.rem
        }
    }
}

/// Where a folding allreduce stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Fold,
    Rounds,
    Gather,
    Unfold,
}

/// Dissemination barrier (and the join): in round `k` each member
/// signals `rank + 2^k` and waits for `rank - 2^k`.
#[derive(Debug)]
pub(super) struct Dissem {
    round: u32,
    sent: bool,
}

impl Dissem {
    fn advance(&mut self, cx: &mut Ctx<'_>) -> Result<Option<Vec<u8>>, CollError> {
        let n = cx.size;
        loop {
            let dist = 1usize << self.round;
            if dist >= n {
                return Ok(Some(Vec::new()));
            }
            if !self.sent {
                cx.send((cx.rank + dist) % n, self.round, &[]);
                self.sent = true;
            }
            let from = (cx.rank + n - dist) % n;
            if cx.take(from, self.round, 0)?.is_none() {
                return Ok(None);
            }
            self.round += 1;
            self.sent = false;
        }
    }
}

/// Binomial-tree broadcast from the root.
#[derive(Debug)]
pub(super) struct Bcast {
    root: usize,
    data: Vec<u8>,
    have: bool,
}

impl Bcast {
    fn advance(&mut self, cx: &mut Ctx<'_>) -> Result<Option<Vec<u8>>, CollError> {
        let n = cx.size;
        let vr = (cx.rank + n - self.root) % n;
        if !self.have {
            let parent = ((vr & (vr - 1)) + self.root) % n;
            match cx.take(parent, 0, self.data.len())? {
                Some(d) => self.data = d,
                None => return Ok(None),
            }
            self.have = true;
        }
        let mut mask = tree_top(vr, n) >> 1;
        while mask > 0 {
            if vr + mask < n {
                cx.send((vr + mask + self.root) % n, 0, &self.data);
            }
            mask >>= 1;
        }
        Ok(Some(std::mem::take(&mut self.data)))
    }
}

/// Allreduce by recursive doubling, or by Rabenseifner's reduce-scatter
/// (recursive halving) and allgather (recursive doubling), after folding
/// the group to a power of two.
#[derive(Debug)]
pub(super) struct Allreduce {
    red: Reduction,
    acc: Vec<u8>,
    fold: Fold,
    phase: Phase,
    sent: bool,
    /// The round (doubling or halving) under way.
    round: usize,
    /// Rabenseifner: the block ranges held before each halving round.
    ranges: Vec<(usize, usize)>,
    /// Rabenseifner: the blocks this member holds (None: doubling).
    blocks: Option<(usize, usize)>,
    /// Rabenseifner's algorithm runs.
    raben: bool,
}

impl Allreduce {
    fn new(red: Reduction, data: Vec<u8>, n: usize, limits: &Limits) -> Allreduce {
        let fold = Fold::new(n);
        let elems = data.len() / red.size();
        let raben = fold.pof2 >= 2 && data.len() >= limits.rabenseifner_min && elems >= fold.pof2;
        Allreduce {
            red,
            acc: data,
            fold,
            phase: Phase::Fold,
            sent: false,
            round: 0,
            ranges: Vec::new(),
            blocks: raben.then_some((0, fold.pof2)),
            raben,
        }
    }

    /// Whether `(step, from)` names a message this member takes.
    fn accepts(&self, r: usize, step: u32, from: usize) -> bool {
        let f = self.fold;
        match step {
            STEP_FOLD => r < 2 * f.rem && r % 2 == 1 && from == r - 1,
            STEP_UNFOLD => r < 2 * f.rem && r.is_multiple_of(2) && from == r + 1,
            _ => {
                let Some(me) = f.newrank(r) else {
                    return false;
                };
                let k = if (STEP_ROUNDS..STEP_ROUNDS + 64).contains(&step) {
                    step - STEP_ROUNDS
                } else if self.raben && (STEP_GATHER..STEP_GATHER + 64).contains(&step) {
                    step - STEP_GATHER
                } else {
                    return false;
                };
                k < rounds(f.pof2) && from == f.real(me ^ (1 << k))
            }
        }
    }

    /// Bytes `[start, end)` of the blocks `[lo, hi)`: the elements split
    /// into `pof2` blocks, the first ones one element longer.
    fn bytes(&self, (lo, hi): (usize, usize)) -> std::ops::Range<usize> {
        let es = self.red.size();
        let elems = self.acc.len() / es;
        let (base, extra) = (elems / self.fold.pof2, elems % self.fold.pof2);
        let disp = |b: usize| (b * base + b.min(extra)) * es;
        disp(lo)..disp(hi)
    }

    fn advance(&mut self, cx: &mut Ctx<'_>) -> Result<Option<Vec<u8>>, CollError> {
        let r = cx.rank;
        let len = self.acc.len();
        loop {
            match self.phase {
                Phase::Fold => {
                    if r >= 2 * self.fold.rem {
                        self.phase = Phase::Rounds;
                    } else if r.is_multiple_of(2) {
                        cx.send(r + 1, STEP_FOLD, &self.acc);
                        self.phase = Phase::Unfold;
                    } else {
                        let Some(m) = cx.take(r - 1, STEP_FOLD, len)? else {
                            return Ok(None);
                        };
                        self.acc = self.red.combine(m, &self.acc)?;
                        self.phase = Phase::Rounds;
                    }
                }
                Phase::Rounds => {
                    let me = self.fold.newrank(r).unwrap_or(0);
                    let mask = 1usize << self.round;
                    if mask >= self.fold.pof2 {
                        self.phase = if self.blocks.is_some() {
                            Phase::Gather
                        } else {
                            Phase::Unfold
                        };
                        continue;
                    }
                    let partner_new = me ^ mask;
                    let partner = self.fold.real(partner_new);
                    let step = STEP_ROUNDS + self.round as u32;
                    let lower = partner < r;
                    match self.blocks {
                        None => {
                            if !self.sent {
                                cx.send(partner, step, &self.acc);
                                self.sent = true;
                            }
                            let Some(m) = cx.take(partner, step, len)? else {
                                return Ok(None);
                            };
                            self.acc = if lower {
                                self.red.combine(m, &self.acc)?
                            } else {
                                let mut acc = std::mem::take(&mut self.acc);
                                self.red.fold(&mut acc, &m)?;
                                acc
                            };
                        }
                        Some((lo, hi)) => {
                            let mid = lo + (hi - lo) / 2;
                            let (keep, give) = if me < partner_new {
                                ((lo, mid), (mid, hi))
                            } else {
                                ((mid, hi), (lo, mid))
                            };
                            let kb = self.bytes(keep);
                            if !self.sent {
                                let gb = self.bytes(give);
                                cx.send(partner, step, &self.acc[gb]);
                                self.sent = true;
                            }
                            let Some(m) = cx.take(partner, step, kb.len())? else {
                                return Ok(None);
                            };
                            if lower {
                                let t = self.red.combine(m, &self.acc[kb.clone()])?;
                                self.acc[kb].copy_from_slice(&t);
                            } else {
                                self.red.fold(&mut self.acc[kb], &m)?;
                            }
                            self.ranges.push((lo, hi));
                            self.blocks = Some(keep);
                        }
                    }
                    self.round += 1;
                    self.sent = false;
                }
                Phase::Gather => {
                    let Some(&parent) = self.ranges.last() else {
                        self.phase = Phase::Unfold;
                        continue;
                    };
                    let level = self.ranges.len() - 1;
                    let me = self.fold.newrank(r).unwrap_or(0);
                    let partner = self.fold.real(me ^ (1 << level));
                    let cur = self.blocks.unwrap_or(parent);
                    let other = if cur.0 == parent.0 {
                        (cur.1, parent.1)
                    } else {
                        (parent.0, cur.0)
                    };
                    let step = STEP_GATHER + level as u32;
                    if !self.sent {
                        let cb = self.bytes(cur);
                        cx.send(partner, step, &self.acc[cb]);
                        self.sent = true;
                    }
                    let ob = self.bytes(other);
                    let Some(m) = cx.take(partner, step, ob.len())? else {
                        return Ok(None);
                    };
                    self.acc[ob].copy_from_slice(&m);
                    self.blocks = Some(parent);
                    self.ranges.pop();
                    self.sent = false;
                }
                Phase::Unfold => {
                    if r >= 2 * self.fold.rem {
                        return Ok(Some(std::mem::take(&mut self.acc)));
                    }
                    if r % 2 == 1 {
                        cx.send(r - 1, STEP_UNFOLD, &self.acc);
                        return Ok(Some(std::mem::take(&mut self.acc)));
                    }
                    return cx.take(r + 1, STEP_UNFOLD, len);
                }
            }
        }
    }
}

/// Ring allgather: in step `s` each member passes block `rank - s` to its
/// right and takes block `rank - s - 1` from its left.
#[derive(Debug)]
pub(super) struct RingGather {
    block: usize,
    out: Vec<u8>,
    step: usize,
    sent: bool,
}

impl RingGather {
    fn advance(&mut self, cx: &mut Ctx<'_>) -> Result<Option<Vec<u8>>, CollError> {
        let (n, r, b) = (cx.size, cx.rank, self.block);
        while self.step + 1 < n {
            let s = self.step;
            if !self.sent {
                let i = (r + n - s) % n;
                cx.send((r + 1) % n, s as u32, &self.out[i * b..(i + 1) * b]);
                self.sent = true;
            }
            let Some(m) = cx.take((r + n - 1) % n, s as u32, b)? else {
                return Ok(None);
            };
            let i = (r + 2 * n - s - 1) % n;
            self.out[i * b..(i + 1) * b].copy_from_slice(&m);
            self.step += 1;
            self.sent = false;
        }
        Ok(Some(std::mem::take(&mut self.out)))
    }
}

/// Ring reduce-scatter: in step `s` each member passes its partial block
/// `rank - s - 1` to its right and combines the partial block `rank - s -
/// 2` from its left with its own (the left's as the target); after `n - 1`
/// steps it holds block `rank`, whole.
#[derive(Debug)]
pub(super) struct RingReduceScatter {
    red: Reduction,
    input: Vec<u8>,
    acc: Vec<u8>,
    step: usize,
    sent: bool,
}

impl RingReduceScatter {
    fn advance(&mut self, cx: &mut Ctx<'_>) -> Result<Option<Vec<u8>>, CollError> {
        let (n, r) = (cx.size, cx.rank);
        let b = self.input.len() / n;
        if n == 1 {
            return Ok(Some(std::mem::take(&mut self.input)));
        }
        while self.step + 1 < n {
            let s = self.step;
            if !self.sent {
                if s == 0 {
                    let i = (r + n - 1) % n;
                    cx.send((r + 1) % n, 0, &self.input[i * b..(i + 1) * b]);
                } else {
                    cx.send((r + 1) % n, s as u32, &self.acc);
                }
                self.sent = true;
            }
            let Some(m) = cx.take((r + n - 1) % n, s as u32, b)? else {
                return Ok(None);
            };
            let i = (r + 2 * n - s - 2) % n;
            self.acc = self.red.combine(m, &self.input[i * b..(i + 1) * b])?;
            self.step += 1;
            self.sent = false;
        }
        Ok(Some(std::mem::take(&mut self.acc)))
    }
}

/// Pairwise alltoall: each member sends block `rank + s` to member
/// `rank + s` for `s` in `1..n`, and takes its block from every other.
#[derive(Debug)]
pub(super) struct Pairwise {
    input: Vec<u8>,
    out: Vec<u8>,
    sent: bool,
    got: Vec<bool>,
}

impl Pairwise {
    fn advance(&mut self, cx: &mut Ctx<'_>) -> Result<Option<Vec<u8>>, CollError> {
        let (n, r) = (cx.size, cx.rank);
        let b = self.input.len() / n;
        if !self.sent {
            self.out[r * b..(r + 1) * b].copy_from_slice(&self.input[r * b..(r + 1) * b]);
            for s in 1..n {
                let to = (r + s) % n;
                cx.send(to, 0, &self.input[to * b..(to + 1) * b]);
            }
            self.sent = true;
            self.got[r] = true;
        }
        for s in 1..n {
            let from = (r + n - s) % n;
            if self.got[from] {
                continue;
            }
            if let Some(m) = cx.take(from, 0, b)? {
                self.out[from * b..(from + 1) * b].copy_from_slice(&m);
                self.got[from] = true;
            }
        }
        if self.got.iter().all(|g| *g) {
            return Ok(Some(std::mem::take(&mut self.out)));
        }
        Ok(None)
    }
}

/// Binomial-tree scatter: a member takes its subtree's blocks from its
/// parent and hands each child its subtree's.
#[derive(Debug)]
pub(super) struct Scatter {
    root: usize,
    block: usize,
    /// The subtree's blocks, in relative rank order from this member.
    sub: Vec<u8>,
    have: bool,
}

impl Scatter {
    fn advance(&mut self, cx: &mut Ctx<'_>) -> Result<Option<Vec<u8>>, CollError> {
        let n = cx.size;
        let b = self.block;
        let vr = (cx.rank + n - self.root) % n;
        if !self.have {
            let parent = ((vr & (vr - 1)) + self.root) % n;
            match cx.take(parent, 0, tree_span(vr, n) * b)? {
                Some(d) => self.sub = d,
                None => return Ok(None),
            }
            self.have = true;
        }
        let mut mask = tree_top(vr, n) >> 1;
        while mask > 0 {
            let c = vr + mask;
            if c < n {
                let span = mask.min(n - c);
                cx.send(
                    (c + self.root) % n,
                    0,
                    &self.sub[mask * b..(mask + span) * b],
                );
            }
            mask >>= 1;
        }
        self.sub.truncate(b);
        Ok(Some(std::mem::take(&mut self.sub)))
    }
}

/// Binomial-tree gather: a member takes its children's subtrees' blocks
/// and hands its own subtree's to its parent.
#[derive(Debug)]
pub(super) struct Gather {
    root: usize,
    block: usize,
    sub: Vec<u8>,
    /// The next child to take from (its offset in relative ranks).
    mask: usize,
}

impl Gather {
    fn advance(&mut self, cx: &mut Ctx<'_>) -> Result<Option<Vec<u8>>, CollError> {
        let n = cx.size;
        let b = self.block;
        let vr = (cx.rank + n - self.root) % n;
        let top = tree_top(vr, n);
        while self.mask < top {
            let c = vr + self.mask;
            if c < n {
                let span = self.mask.min(n - c);
                let Some(m) = cx.take((c + self.root) % n, 0, span * b)? else {
                    return Ok(None);
                };
                self.sub[self.mask * b..(self.mask + span) * b].copy_from_slice(&m);
            }
            self.mask <<= 1;
        }
        if vr != 0 {
            cx.send(((vr & (vr - 1)) + self.root) % n, 0, &self.sub);
            return Ok(Some(Vec::new()));
        }
        let mut out = vec![0u8; n * b];
        for i in 0..n {
            let at = (i + self.root) % n;
            out[at * b..(at + 1) * b].copy_from_slice(&self.sub[i * b..(i + 1) * b]);
        }
        Ok(Some(out))
    }
}

/// Binomial-tree reduce: a member combines its children's partial results
/// into its own (its own as the target) and hands the result to its parent.
#[derive(Debug)]
pub(super) struct Reduce {
    root: usize,
    red: Reduction,
    acc: Vec<u8>,
    mask: usize,
}

impl Reduce {
    fn advance(&mut self, cx: &mut Ctx<'_>) -> Result<Option<Vec<u8>>, CollError> {
        let n = cx.size;
        let vr = (cx.rank + n - self.root) % n;
        let top = tree_top(vr, n);
        while self.mask < top {
            let c = vr + self.mask;
            if c < n {
                let Some(m) = cx.take((c + self.root) % n, 0, self.acc.len())? else {
                    return Ok(None);
                };
                self.red.fold(&mut self.acc, &m)?;
            }
            self.mask <<= 1;
        }
        if vr != 0 {
            cx.send(((vr & (vr - 1)) + self.root) % n, 0, &self.acc);
            return Ok(Some(Vec::new()));
        }
        Ok(Some(std::mem::take(&mut self.acc)))
    }
}

/// One operation's algorithm.
#[derive(Debug)]
pub(super) enum Algo {
    Dissem(Dissem),
    Bcast(Bcast),
    Allreduce(Allreduce),
    RingGather(RingGather),
    RingReduceScatter(RingReduceScatter),
    Pairwise(Pairwise),
    Scatter(Scatter),
    Gather(Gather),
    Reduce(Reduce),
}

/// `Invalid` unless `root` is a member.
pub(super) fn check_root(what: &str, root: u32, n: usize) -> Result<usize, CollError> {
    if (root as usize) < n {
        Ok(root as usize)
    } else {
        Err(CollError::Invalid(format!(
            "{what}: root rank {root} is not in a group of {n}"
        )))
    }
}

/// `Invalid` unless `len` splits into `n` equal blocks.
pub(super) fn blocks(what: &str, len: usize, n: usize) -> Result<usize, CollError> {
    if len.is_multiple_of(n) {
        Ok(len / n)
    } else {
        Err(CollError::Invalid(format!(
            "{what}: {len} bytes do not split into {n} equal blocks"
        )))
    }
}

impl Algo {
    /// The algorithm running `op` at `rank` of `size` members, and the
    /// longest message it can take; checks the arguments.
    pub(super) fn new(
        op: Op,
        rank: u32,
        size: u32,
        limits: &Limits,
    ) -> Result<(Algo, usize), CollError> {
        let n = size as usize;
        let me = rank as usize;
        let (algo, max_in, max_out) = match op {
            Op::Join | Op::Barrier => (
                Algo::Dissem(Dissem {
                    round: 0,
                    sent: false,
                }),
                0,
                0,
            ),
            Op::Broadcast { root, data } => {
                let root = check_root("fi_broadcast", root, n)?;
                let len = data.len();
                let a = Algo::Bcast(Bcast {
                    root,
                    have: root == me,
                    data,
                });
                (a, len, len)
            }
            Op::Allreduce { op, datatype, data } => {
                let red = Reduction::new("fi_allreduce", op, datatype, data.len())?;
                let len = data.len();
                (
                    Algo::Allreduce(Allreduce::new(red, data, n, limits)),
                    len,
                    len,
                )
            }
            Op::Allgather { data } => {
                let b = data.len();
                let total = b.checked_mul(n).ok_or_else(|| too_large("fi_allgather"))?;
                let mut out = vec![0u8; total];
                out[me * b..(me + 1) * b].copy_from_slice(&data);
                (
                    Algo::RingGather(RingGather {
                        block: b,
                        out,
                        step: 0,
                        sent: false,
                    }),
                    b,
                    total,
                )
            }
            Op::ReduceScatter { op, datatype, data } => {
                let red = Reduction::new("fi_reduce_scatter", op, datatype, data.len())?;
                let b = blocks("fi_reduce_scatter", data.len(), n)?;
                if !b.is_multiple_of(red.size()) {
                    return Err(CollError::Invalid(format!(
                        "fi_reduce_scatter: blocks of {b} bytes are not whole elements"
                    )));
                }
                let len = data.len();
                (
                    Algo::RingReduceScatter(RingReduceScatter {
                        red,
                        input: data,
                        acc: Vec::new(),
                        step: 0,
                        sent: false,
                    }),
                    len,
                    b,
                )
            }
            Op::Alltoall { data } => {
                blocks("fi_alltoall", data.len(), n)?;
                let len = data.len();
                (
                    Algo::Pairwise(Pairwise {
                        out: vec![0u8; len],
                        input: data,
                        sent: false,
                        got: vec![false; n],
                    }),
                    len,
                    len,
                )
            }
            Op::Reduce {
                root,
                op,
                datatype,
                data,
            } => {
                let root = check_root("fi_reduce", root, n)?;
                let red = Reduction::new("fi_reduce", op, datatype, data.len())?;
                let len = data.len();
                (
                    Algo::Reduce(Reduce {
                        root,
                        red,
                        acc: data,
                        mask: 1,
                    }),
                    len,
                    len,
                )
            }
            Op::Scatter { root, block, data } => {
                let root = check_root("fi_scatter", root, n)?;
                let total = block
                    .checked_mul(n)
                    .ok_or_else(|| too_large("fi_scatter"))?;
                let sub = if root == me {
                    if data.len() != total {
                        return Err(CollError::Invalid(format!(
                            "fi_scatter: the root passes {} bytes for {n} blocks of {block}",
                            data.len()
                        )));
                    }
                    // In relative rank order from the root.
                    let mut s = vec![0u8; total];
                    for i in 0..n {
                        let from = (i + root) % n;
                        s[i * block..(i + 1) * block]
                            .copy_from_slice(&data[from * block..(from + 1) * block]);
                    }
                    s
                } else {
                    Vec::new()
                };
                (
                    Algo::Scatter(Scatter {
                        root,
                        block,
                        sub,
                        have: root == me,
                    }),
                    total,
                    block,
                )
            }
            Op::Gather { root, data } => {
                let root = check_root("fi_gather", root, n)?;
                let b = data.len();
                let total = b.checked_mul(n).ok_or_else(|| too_large("fi_gather"))?;
                let vr = (me + n - root) % n;
                let mut sub = vec![0u8; tree_span(vr, n) * b];
                sub[..b].copy_from_slice(&data);
                (
                    Algo::Gather(Gather {
                        root,
                        block: b,
                        sub,
                        mask: 1,
                    }),
                    b,
                    total,
                )
            }
        };
        let max = max_in.max(max_out);
        if max > limits.message_max {
            return Err(CollError::TooLarge(format!(
                "{max} bytes exceed the {} a collective carries",
                limits.message_max
            )));
        }
        Ok((algo, max))
    }

    /// Whether the member of rank `rank` of `n` running this algorithm
    /// ever takes a message of `step` from rank `from` (a peer's message
    /// that it never takes is the peer's fault: so nothing a peer sends
    /// is held beyond what the operation takes).
    pub(super) fn accepts(&self, rank: usize, n: usize, step: u32, from: usize) -> bool {
        let rel = |root: usize| ((rank + n - root) % n, (from + n - root) % n);
        match self {
            Algo::Dissem(_) => {
                step < usize::BITS
                    && (1usize << step) < n
                    && from == (rank + n - (1usize << step) % n) % n
            }
            Algo::Bcast(a) => {
                let (vr, vf) = rel(a.root);
                step == 0 && vr != 0 && vf == tree_parent(vr)
            }
            Algo::Scatter(a) => {
                let (vr, vf) = rel(a.root);
                step == 0 && vr != 0 && vf == tree_parent(vr)
            }
            Algo::Gather(a) => {
                let (vr, vf) = rel(a.root);
                step == 0 && tree_child(vr, vf, n)
            }
            Algo::Reduce(a) => {
                let (vr, vf) = rel(a.root);
                step == 0 && tree_child(vr, vf, n)
            }
            Algo::Allreduce(a) => a.accepts(rank, step, from),
            Algo::RingGather(_) | Algo::RingReduceScatter(_) => {
                (step as usize) + 1 < n && from == (rank + n - 1) % n
            }
            Algo::Pairwise(_) => step == 0 && from != rank,
        }
    }

    /// Sends what it can, takes what arrived; the result once done.
    pub(super) fn advance(&mut self, cx: &mut Ctx<'_>) -> Result<Option<Vec<u8>>, CollError> {
        match self {
            Algo::Dissem(a) => a.advance(cx),
            Algo::Bcast(a) => a.advance(cx),
            Algo::Allreduce(a) => a.advance(cx),
            Algo::RingGather(a) => a.advance(cx),
            Algo::RingReduceScatter(a) => a.advance(cx),
            Algo::Pairwise(a) => a.advance(cx),
            Algo::Scatter(a) => a.advance(cx),
            Algo::Gather(a) => a.advance(cx),
            Algo::Reduce(a) => a.advance(cx),
        }
    }
}

fn too_large(what: &str) -> CollError {
    CollError::TooLarge(format!("{what}: the result would not fit in memory"))
}
