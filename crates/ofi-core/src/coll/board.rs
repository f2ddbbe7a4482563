//! A provider's shared-memory board for collectives: lanes that an
//! endpoint's group members on the same node read straight from each
//! other's memory (shm's segments), so a small collective costs one store
//! and a cache-line read per member instead of rounds of messages. The
//! protocol is [`ofi_proto::coll::board`]; the layer
//! (its `engine`) runs a group on the board when its provider offers
//! one for all the members and every member agreed at the join, and sends
//! the operations that do not fit a lane as frames.

use crate::error::Result;
use std::sync::Arc;

/// An endpoint's board (`EndpointOps::coll_board`).
pub trait CollBoard: Send + Sync {
    /// Whether a group of these members (their addresses, in rank order)
    /// can run on boards: a function of the addresses alone, so that every
    /// member answers the same (whether it then gets a lane is agreed at
    /// the join).
    fn candidate(&self, members: &[Arc<[u8]>]) -> bool;
    /// Claims a lane of this endpoint's board for group `name` (non-zero):
    /// its index, the count the group starts from (a lane's count only
    /// grows) and the lane; None when every lane is taken or resting.
    fn claim(&self, name: u64) -> Option<(u32, u64, Arc<dyn BoardLane>)>;
    /// The board of the member at address `addr`, mapped.
    fn peer(&self, addr: &[u8]) -> Result<Arc<dyn BoardPeer>>;
}

/// Another member's board, as this endpoint reads it.
pub trait BoardPeer: Send + Sync {
    /// Its lane `idx` (None: out of range).
    fn lane(&self, idx: u32) -> Option<Arc<dyn BoardLane>>;
    /// The positive `FI_E*` cause once its endpoint closed or its process
    /// exited (may take a system call: look rarely).
    fn gone(&self) -> Option<i32>;
    /// Wakes it if it sleeps waiting for its queues (after publishing).
    fn wake(&self);
}

/// One lane (a published count, two data slots).
pub trait BoardLane: Send + Sync {
    /// Operations its owner published.
    fn seq(&self) -> u64;
    /// Bytes of operation `seq`'s input from `offset`; false when the
    /// owner overwrote them before the read ended.
    fn read(&self, seq: u64, offset: usize, out: &mut [u8]) -> bool;
    /// The owner: publishes operation `seq`'s input.
    fn publish(&self, seq: u64, data: &[u8]);
    /// The owner: gives the lane back.
    fn release(&self);
}
