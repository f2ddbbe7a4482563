//! The collectives over a shared-memory board, sans-IO: one member's side
//! of a group whose members all live on one node and each own a lane
//! (`ofi_shmem::board`) the others can read. A member publishes an
//! operation's input in its own lane and completes the operation once
//! every member published it, reading the inputs it needs straight from
//! their lanes: one store and one cache line read per member where the
//! messages of [`GroupCore`](super::GroupCore) take `log2 n` rounds of
//! sends, matching and completions. It carries operations whose input at
//! every member fits a lane ([`carries`]); the driver sends the others as
//! frames (the same decision at every member, so both kinds interleave in
//! one group).
//!
//! **Slots in turn.** A lane has two data slots: operation `k`'s input is
//! in slot `k % 2`. A member publishes operation `k + 1` only once its
//! operation `k` completed, and completes `k` only once every member
//! published `k`; so when a member overwrites slot `k % 2` with operation
//! `k + 2`, every member has published `k + 1`, hence completed `k`, hence
//! read all it needed of operation `k`. Every operation is a full
//! synchronization of the group, as a barrier is.
//!
//! **Same bits everywhere.** Reductions combine in rank order (member 0's
//! input the target, then each higher rank's the operand), with the
//! atomic engine, so every member computes the same bits.
//!
//! The driver gives the lanes ([`Lanes`]), polls ([`BoardCore::poll`])
//! while operations run, and reports members declared dead
//! ([`BoardCore::lost`]); the group's core never waits for a member by
//! itself, as it never sees the clock.

use super::algo::{blocks, check_root, Reduction};
use super::{CollError, Event, Op};
use ofi_base::atomic::{self, AtomicKind};
use std::collections::VecDeque;

/// Bytes of input one member may publish for one operation (the lane's
/// data slot).
pub const LANE_BYTES: usize = 256;

/// Most members of a group that runs on a board: past it, every member
/// reading every lane costs more than the messages' rounds.
pub const MAX_MEMBERS: u32 = 64;

/// The lanes of a group's members, as one member sees them.
pub trait Lanes {
    /// Operations member `rank` published so far (this member's own too).
    fn seq(&self, rank: u32) -> u64;
    /// `out.len()` bytes of member `rank`'s input of operation `seq`, from
    /// byte `offset` of it; false when the member overwrote them before
    /// the read ended (it ran two operations ahead: it misbehaves).
    fn read(&self, rank: u32, seq: u64, offset: usize, out: &mut [u8]) -> bool;
    /// Publishes this member's input of operation `seq`.
    fn publish(&self, seq: u64, data: &[u8]);
}

/// True when a group of `size` members runs an operation whose largest
/// input at any member is `input_max` bytes on a board. Every member must
/// reach the same answer: `input_max` is what the operation's count gives
/// for the member that publishes most (a scatter's root: `n` blocks).
pub fn carries(size: u32, input_max: usize) -> bool {
    size <= MAX_MEMBERS && input_max <= LANE_BYTES
}

/// One member's side of a group's board: see the [module](self) docs.
#[derive(Debug)]
pub struct BoardCore {
    rank: u32,
    size: u32,
    /// Operations this member published.
    published: u64,
    /// The operation published and not complete, with its token.
    running: Option<(Op, u64)>,
    /// Members known to have published the running operation: ranks
    /// below it are not looked at again.
    seen: u32,
    /// Operations started and not published yet, in order.
    queue: VecDeque<(Op, u64)>,
    events: VecDeque<Event>,
    broken: Option<CollError>,
}

impl BoardCore {
    /// The core of the member of rank `rank` in a group of `size`.
    pub fn new(rank: u32, size: u32) -> Result<BoardCore, CollError> {
        if size == 0 || rank >= size || size > MAX_MEMBERS {
            return Err(CollError::Invalid(format!(
                "a board group of {size} members (at most {MAX_MEMBERS}) has no rank {rank}"
            )));
        }
        Ok(BoardCore {
            rank,
            size,
            published: 0,
            running: None,
            seen: 0,
            queue: VecDeque::new(),
            events: VecDeque::new(),
            broken: None,
        })
    }

    /// Starts an operation; its outcome comes from
    /// [`poll_event`](Self::poll_event) with `token`. Refused, with
    /// nothing started, when the arguments are wrong, the input does not
    /// fit a lane, or the group is unusable.
    pub fn start(&mut self, op: Op, token: u64, lanes: &impl Lanes) -> Result<(), CollError> {
        if let Some(e) = &self.broken {
            return Err(e.clone());
        }
        self.check(&op)?;
        self.queue.push_back((op, token));
        self.poll(lanes);
        Ok(())
    }

    /// The messages' checks (roots, lengths, reductions), so the same calls
    /// fail the same way on either path, and the lane's size.
    fn check(&self, op: &Op) -> Result<(), CollError> {
        let n = self.size as usize;
        match op {
            Op::Join | Op::Barrier => return Ok(()),
            Op::Broadcast { root, .. } => {
                check_root("fi_broadcast", *root, n)?;
            }
            Op::Allreduce { op, datatype, data } => {
                Reduction::new("fi_allreduce", *op, *datatype, data.len())?;
            }
            Op::Allgather { .. } => {}
            Op::ReduceScatter { op, datatype, data } => {
                let red = Reduction::new("fi_reduce_scatter", *op, *datatype, data.len())?;
                let b = blocks("fi_reduce_scatter", data.len(), n)?;
                if !b.is_multiple_of(red.size()) {
                    return Err(CollError::Invalid(format!(
                        "fi_reduce_scatter: blocks of {b} bytes are not whole elements"
                    )));
                }
            }
            Op::Alltoall { data } => {
                blocks("fi_alltoall", data.len(), n)?;
            }
            Op::Reduce {
                root,
                op,
                datatype,
                data,
            } => {
                check_root("fi_reduce", *root, n)?;
                Reduction::new("fi_reduce", *op, *datatype, data.len())?;
            }
            Op::Scatter { root, block, data } => {
                let root = check_root("fi_scatter", *root, n)?;
                if root == self.rank as usize && Some(data.len()) != block.checked_mul(n) {
                    return Err(CollError::Invalid(format!(
                        "fi_scatter: the root passes {} bytes for {n} blocks of {block}",
                        data.len()
                    )));
                }
            }
            Op::Gather { root, .. } => {
                check_root("fi_gather", *root, n)?;
            }
        }
        let len = input(op).len();
        if len > LANE_BYTES {
            return Err(CollError::TooLarge(format!(
                "{len} bytes of input do not fit a board lane of {LANE_BYTES}"
            )));
        }
        Ok(())
    }

    /// True while operations run or wait to be published.
    #[inline]
    pub fn busy(&self) -> bool {
        self.running.is_some() || !self.queue.is_empty()
    }

    /// True when [`poll`](Self::poll) has something to do: every member
    /// published the running operation, or one waits to be published.
    pub fn ready(&self, lanes: &impl Lanes) -> bool {
        if self.running.is_none() {
            return !self.queue.is_empty();
        }
        (self.seen..self.size).all(|r| r == self.rank || lanes.seq(r) >= self.published)
    }

    /// Looks at the lanes: completes the running operation once every
    /// member published it, and publishes the next. True when an
    /// operation completed.
    pub fn poll(&mut self, lanes: &impl Lanes) -> bool {
        let mut any = false;
        loop {
            if self.running.is_none() {
                let Some((op, token)) = self.queue.pop_front() else {
                    return any;
                };
                self.published += 1;
                lanes.publish(self.published, input(&op));
                self.running = Some((op, token));
                self.seen = 0;
            }
            let k = self.published;
            while self.seen < self.size {
                if self.seen != self.rank && lanes.seq(self.seen) < k {
                    return any;
                }
                self.seen += 1;
            }
            let (op, token) = self.running.take().expect("running");
            let ev = match self.result(&op, k, lanes) {
                Ok(result) => Event::Done { token, result },
                Err(error) => Event::Failed { token, error },
            };
            self.events.push_back(ev);
            any = true;
        }
    }

    /// What completed or failed, in order.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Fails the running and waiting operations with `error`; the group
    /// refuses new ones.
    pub fn fail(&mut self, error: CollError) {
        if let Some((_, token)) = self.running.take() {
            self.events.push_back(Event::Failed {
                token,
                error: error.clone(),
            });
        }
        for (_, token) in self.queue.drain(..) {
            self.events.push_back(Event::Failed {
                token,
                error: error.clone(),
            });
        }
        if self.broken.is_none() {
            self.broken = Some(error);
        }
    }

    /// Member `rank` is gone (the cause's positive `FI_E*` number).
    pub fn lost(&mut self, rank: u32, errno: i32) {
        self.fail(CollError::Lost { rank, errno });
    }

    /// The group's error once it is unusable.
    pub fn broken(&self) -> Option<&CollError> {
        self.broken.as_ref()
    }

    /// The output of operation `k`, every member's input published.
    fn result(&self, op: &Op, k: u64, lanes: &impl Lanes) -> Result<Vec<u8>, CollError> {
        let (me, n) = (self.rank, self.size);
        // Member `r`'s bytes `[off, off + len)` of operation k.
        let fetch = |r: u32, off: usize, out: &mut [u8]| -> Result<(), CollError> {
            if r == me {
                let mine = input(op);
                out.copy_from_slice(&mine[off..off + out.len()]);
                Ok(())
            } else if lanes.read(r, k, off, out) {
                Ok(())
            } else {
                Err(CollError::Peer {
                    rank: r,
                    why: "its input was overwritten before it was read".into(),
                })
            }
        };
        let reduce = |op_: u32, dt: u32, off: usize, len: usize| -> Result<Vec<u8>, CollError> {
            let mut acc = vec![0u8; len];
            fetch(0, off, &mut acc)?;
            let mut operand = vec![0u8; len];
            for r in 1..n {
                fetch(r, off, &mut operand)?;
                atomic::apply(AtomicKind::Basic, op_, dt, &mut acc, &operand, &[], &mut [])
                    .map_err(|e| CollError::Invalid(e.message().to_string()))?;
            }
            Ok(acc)
        };
        let concat = |off: usize, len: usize| -> Result<Vec<u8>, CollError> {
            let mut out = vec![0u8; len * n as usize];
            for (r, chunk) in out.chunks_mut(len.max(1)).enumerate().take(n as usize) {
                if len > 0 {
                    fetch(r as u32, off, chunk)?;
                }
            }
            Ok(out)
        };
        Ok(match op {
            Op::Join | Op::Barrier => Vec::new(),
            Op::Broadcast { root, data } => {
                let mut out = vec![0u8; data.len()];
                fetch(*root, 0, &mut out)?;
                out
            }
            Op::Allreduce { op, datatype, data } => reduce(*op, *datatype, 0, data.len())?,
            Op::Reduce {
                root,
                op,
                datatype,
                data,
            } => {
                if *root == me {
                    reduce(*op, *datatype, 0, data.len())?
                } else {
                    Vec::new()
                }
            }
            Op::Allgather { data } => concat(0, data.len())?,
            Op::Gather { root, data } => {
                if *root == me {
                    concat(0, data.len())?
                } else {
                    Vec::new()
                }
            }
            Op::Alltoall { data } => {
                let block = data.len() / n as usize;
                concat(me as usize * block, block)?
            }
            Op::ReduceScatter { op, datatype, data } => {
                let block = data.len() / n as usize;
                reduce(*op, *datatype, me as usize * block, block)?
            }
            Op::Scatter { root, block, .. } => {
                let mut out = vec![0u8; *block];
                fetch(*root, me as usize * block, &mut out)?;
                out
            }
        })
    }
}

/// The bytes a member publishes for `op`.
fn input(op: &Op) -> &[u8] {
    match op {
        Op::Join | Op::Barrier => &[],
        Op::Broadcast { data, .. }
        | Op::Allreduce { data, .. }
        | Op::Allgather { data }
        | Op::ReduceScatter { data, .. }
        | Op::Alltoall { data }
        | Op::Reduce { data, .. }
        | Op::Scatter { data, .. }
        | Op::Gather { data, .. } => data,
    }
}
