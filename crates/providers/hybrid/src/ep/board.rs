//! hybrid's board for collectives: shm's, for groups whose members all
//! run on this node (their addresses name this node), reached through
//! the shm part of each member's address.

use crate::addr::HybridAddr;
use ofi_core::coll::board::{BoardLane, BoardPeer, CollBoard};
use ofi_core::error::Result;
use std::sync::Arc;

/// The shm path's board, for members of this node.
pub(super) struct HybridBoard {
    pub(super) shm: Arc<dyn CollBoard>,
    /// This endpoint's node (32 bits are carried in addresses).
    pub(super) node: u32,
}

impl CollBoard for HybridBoard {
    fn candidate(&self, members: &[Arc<[u8]>]) -> bool {
        // Every member decides the same: all on one node (each compares
        // with its own, which is every member's then), or not.
        let mut shm = Vec::with_capacity(members.len());
        for m in members {
            match HybridAddr::decode(m) {
                Ok(a) if a.node as u32 == self.node => shm.push(Arc::from(a.shm)),
                _ => return false,
            }
        }
        self.shm.candidate(&shm)
    }

    fn claim(&self, name: u64) -> Option<(u32, u64, Arc<dyn BoardLane>)> {
        self.shm.claim(name)
    }

    fn peer(&self, addr: &[u8]) -> Result<Arc<dyn BoardPeer>> {
        self.shm.peer(&HybridAddr::decode(addr)?.shm)
    }
}
