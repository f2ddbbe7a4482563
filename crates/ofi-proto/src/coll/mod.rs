//! The collectives' core (`fi_collective(3)`): one member's side of the
//! operations of one collective group, sans-IO. The driver (ofi-core's
//! collective layer) starts operations with their input bytes
//! ([`GroupCore::start`]), hands in the frames other members sent
//! ([`GroupCore::on_frame`]), sends the frames the core gives
//! ([`GroupCore::poll_transmit`]) and reports what completed
//! ([`GroupCore::poll_event`]). No sockets, no clocks, no threads: the same
//! core runs over any provider's messages and under the simulated group of
//! `tests/coll_sim.rs`.
//!
//! **Ordering.** Every member starts a group's operations in the same
//! order (as MPI requires of a communicator's collectives); the `n`-th
//! operation a member starts is operation `seq = n` everywhere (the join's
//! own exchange is `seq` 0), and frames name it. Several may run at once;
//! frames of an operation a member has not started yet wait (bounded by
//! [`Limits`], beyond which the driver stops taking frames: [`Fed`])
//! until it does. Operations complete in any order.
//!
//! **Algorithms** (chosen by size and group, for any group size, powers of
//! two or not):
//!
//! | operation | algorithm |
//! |---|---|
//! | barrier, join | dissemination: `ceil(log2 n)` rounds |
//! | broadcast | binomial tree from the root |
//! | allreduce | recursive doubling; from [`Limits::rabenseifner_min`] bytes (and at least one element per block), Rabenseifner's reduce-scatter by recursive halving then allgather by recursive doubling; both fold a group that is not a power of two into one first (MPICH's scheme) |
//! | allgather | ring |
//! | reduce-scatter | ring |
//! | alltoall | pairwise exchange |
//! | scatter, gather, reduce | binomial tree from / to the root |
//!
//! **Reductions** use the atomic engine ([`ofi_base::atomic`]), with the
//! operations and datatypes `fi_atomic` takes. Allreduce combines in one
//! fixed tree whatever the algorithm, the lower ranks' partial result as
//! the target and the higher ranks' as the operand, so every member gets
//! the same bits (floating point included), and `FI_ATOMIC_WRITE` leaves
//! the highest rank's values. Reduce combines in the tree rooted at the
//! root in rank order from the root; reduce-scatter along the ring.
//!
//! **Counts** are per member, as in MPI and libfabric's own collectives:
//! allgather and gather return `n` times the input, scatter's root gives
//! `n` blocks and each member gets one, reduce-scatter and alltoall take
//! `n` blocks and give one block (reduce-scatter) or `n` blocks
//! (alltoall).

mod algo;
pub mod board;
mod group;

pub use board::BoardCore;
pub use group::GroupCore;

use ofi_base::error::errno;

/// An operation a member starts, with its input bytes (native-endian
/// elements of the datatype the driver checked).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// The join's exchange: a barrier that is operation 0 of the group.
    Join,
    /// `fi_barrier`: completes once every member has entered it.
    Barrier,
    /// `fi_broadcast`: the root's `data` to every member; the others
    /// pass `len` bytes whose content is ignored.
    Broadcast {
        /// The sending member's rank.
        root: u32,
        /// The root's bytes; at the others, as many bytes.
        data: Vec<u8>,
    },
    /// `fi_allreduce`: every member's `data` combined elementwise.
    Allreduce {
        /// `enum fi_op`.
        op: u32,
        /// `enum fi_datatype`.
        datatype: u32,
        /// This member's elements.
        data: Vec<u8>,
    },
    /// `fi_allgather`: every member's `data` (the same length at each),
    /// in rank order.
    Allgather {
        /// This member's block.
        data: Vec<u8>,
    },
    /// `fi_reduce_scatter`: `data` is `n` blocks; member `i` gets block `i`
    /// of the combination.
    ReduceScatter {
        /// `enum fi_op`.
        op: u32,
        /// `enum fi_datatype`.
        datatype: u32,
        /// This member's `n` blocks.
        data: Vec<u8>,
    },
    /// `fi_alltoall`: `data` is `n` blocks; member `i` gets block `i` of
    /// every member, in rank order.
    Alltoall {
        /// This member's `n` blocks.
        data: Vec<u8>,
    },
    /// `fi_reduce`: the combination of every member's `data`, at the root.
    Reduce {
        /// The receiving member's rank.
        root: u32,
        /// `enum fi_op`.
        op: u32,
        /// `enum fi_datatype`.
        datatype: u32,
        /// This member's elements.
        data: Vec<u8>,
    },
    /// `fi_scatter`: the root's `data` is `n` blocks of `block` bytes;
    /// member `i` gets block `i`.
    Scatter {
        /// The sending member's rank.
        root: u32,
        /// Bytes each member gets.
        block: usize,
        /// The root's `n` blocks (empty at the others).
        data: Vec<u8>,
    },
    /// `fi_gather`: every member's `data` (the same length at each), in
    /// rank order, at the root.
    Gather {
        /// The receiving member's rank.
        root: u32,
        /// This member's block.
        data: Vec<u8>,
    },
}

impl Op {
    /// The frame kind ([`ofi_wire::coll::kind`]) of this operation.
    pub fn kind(&self) -> u8 {
        use ofi_wire::coll::kind;
        match self {
            Op::Join => kind::JOIN,
            Op::Barrier => kind::BARRIER,
            Op::Broadcast { .. } => kind::BROADCAST,
            Op::Allreduce { .. } => kind::ALLREDUCE,
            Op::Allgather { .. } => kind::ALLGATHER,
            Op::ReduceScatter { .. } => kind::REDUCE_SCATTER,
            Op::Alltoall { .. } => kind::ALLTOALL,
            Op::Reduce { .. } => kind::REDUCE,
            Op::Scatter { .. } => kind::SCATTER,
            Op::Gather { .. } => kind::GATHER,
        }
    }
}

/// What became of a frame handed to [`GroupCore::on_frame`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fed {
    /// Taken (or dropped, once the group is unusable).
    Taken,
    /// Not taken: it belongs to an operation this member has not started,
    /// and the frames held for those reached [`Limits::early_bytes`]. Hand
    /// it in again after this member starts its next operation; until
    /// then the driver takes no more frames from the network.
    Later,
}

/// A frame to send: to the member of rank `to`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// The receiving member's rank.
    pub to: u32,
    /// Header ([`ofi_wire::coll`]) and payload.
    pub frame: Vec<u8>,
}

/// What happened to a started operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// It completed; `result` holds its output bytes (empty for barrier,
    /// join, and reduce and gather at members other than the root).
    Done {
        /// The token it was started with.
        token: u64,
        /// Its output.
        result: Vec<u8>,
    },
    /// It failed.
    Failed {
        /// The token it was started with.
        token: u64,
        /// Why.
        error: CollError,
    },
}

/// Why an operation cannot start or did not complete, grouped by who is
/// at fault.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CollError {
    /// The caller's arguments are wrong (a root outside the group,
    /// lengths that do not divide): `FI_EINVAL`.
    Invalid(String),
    /// The operation and datatype do not combine: `FI_EOPNOTSUPP`.
    Unsupported(String),
    /// The data is larger than a collective carries: `FI_EMSGSIZE`.
    TooLarge(String),
    /// A member sent what does not fit the operation (the members do not
    /// run the same operations with the same counts, or one misbehaved):
    /// `FI_EIO`. The group is unusable afterwards.
    Peer {
        /// The sender's rank.
        rank: u32,
        /// What did not fit.
        why: String,
    },
    /// A member is gone (its provider declared it dead, or a frame to it
    /// failed): the positive `FI_E*` number of the cause. The group is
    /// unusable afterwards.
    Lost {
        /// Its rank.
        rank: u32,
        /// The cause's error number.
        errno: i32,
    },
    /// This member left the group (closed it) with the operation running:
    /// `FI_ECANCELED`.
    Closed,
}

impl CollError {
    /// The positive `FI_E*` number an application sees.
    pub fn errno(&self) -> i32 {
        match self {
            CollError::Invalid(_) => errno::FI_EINVAL,
            CollError::Unsupported(_) => errno::FI_EOPNOTSUPP,
            CollError::TooLarge(_) => errno::FI_EMSGSIZE,
            CollError::Peer { .. } => errno::FI_EIO,
            CollError::Lost { errno, .. } => *errno,
            CollError::Closed => errno::FI_ECANCELED,
        }
    }
}

impl std::fmt::Display for CollError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CollError::Invalid(m) | CollError::Unsupported(m) | CollError::TooLarge(m) => {
                f.write_str(m)
            }
            CollError::Peer { rank, why } => write!(f, "member {rank}: {why}"),
            CollError::Lost { rank, errno } => {
                write!(f, "member {rank} is gone (error {errno})")
            }
            CollError::Closed => f.write_str("the group was closed"),
        }
    }
}

impl std::error::Error for CollError {}

/// Bounds of one group's core.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest payload of one frame (a message is cut into frames of at
    /// most this many bytes).
    pub frame_max: usize,
    /// Operation numbers ahead of this member's next one that frames may
    /// name; a frame naming one further on (or behind: operation numbers
    /// compare modulo 2^32) is a peer's fault.
    pub early_ops: u32,
    /// Bytes (headers included) of frames of operations not started yet
    /// that a group holds; past it, frames wait ([`Fed::Later`]).
    pub early_bytes: usize,
    /// Allreduces of at least this many bytes take Rabenseifner's
    /// algorithm (when every block gets an element).
    pub rabenseifner_min: usize,
    /// Largest message of one step (and so of one operation's data).
    pub message_max: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            frame_max: 16 * 1024 - ofi_wire::coll::HDR_LEN,
            early_ops: 1 << 31,
            early_bytes: 64 << 20,
            rabenseifner_min: 8 * 1024,
            message_max: u32::MAX as usize,
        }
    }
}
