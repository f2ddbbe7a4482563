//! shm's board for collectives ([`ofi_core::coll::board`]): the lanes of
//! the endpoint's own segment, and other members' segments mapped for
//! reading theirs (a mapping of its own, apart from the endpoint's peers:
//! the board reads lanes and rings doorbells, nothing else).

use crate::addr::ShmAddr;
use crate::peer::Peer;
use ofi_core::coll::board::{BoardLane, BoardPeer, CollBoard};
use ofi_core::error::{errno, Result};
use ofi_shmem::board::LANES;
use ofi_shmem::segment::Segment;
use std::sync::Arc;

/// An endpoint's board.
pub(crate) struct ShmBoard {
    pub(crate) seg: Arc<Segment>,
    pub(crate) keyed: bool,
}

impl CollBoard for ShmBoard {
    fn candidate(&self, members: &[Arc<[u8]>]) -> bool {
        // Every shm endpoint has a board: a group of shm addresses may run
        // on boards.
        members.iter().all(|m| ShmAddr::parse(m).is_ok())
    }

    fn claim(&self, name: u64) -> Option<(u32, u64, Arc<dyn BoardLane>)> {
        (0..LANES).find_map(|i| {
            let base = self.seg.lane(i)?.claim(name)?;
            let l: Arc<dyn BoardLane> = Arc::new(Lane {
                seg: self.seg.clone(),
                idx: i,
            });
            Some((i as u32, base, l))
        })
    }

    fn peer(&self, addr: &[u8]) -> Result<Arc<dyn BoardPeer>> {
        let a = ShmAddr::parse(addr)?;
        Ok(Arc::new(PeerBoard(Arc::new(Peer::open(a, self.keyed)?))))
    }
}

/// A lane of a mapped segment (the endpoint's own, or a member's).
struct Lane {
    seg: Arc<Segment>,
    idx: usize,
}

impl Lane {
    #[inline]
    fn lane(&self) -> Option<&ofi_shmem::board::Lane> {
        self.seg.lane(self.idx)
    }
}

impl BoardLane for Lane {
    #[inline]
    fn seq(&self) -> u64 {
        self.lane().map_or(0, |l| l.seq())
    }
    fn read(&self, seq: u64, offset: usize, out: &mut [u8]) -> bool {
        self.lane().is_some_and(|l| l.read(seq, offset, out))
    }
    fn publish(&self, seq: u64, data: &[u8]) {
        if let Some(l) = self.lane() {
            l.publish(seq, data);
        }
    }
    fn release(&self) {
        if let Some(l) = self.lane() {
            l.release();
        }
    }
}

/// Another member's board.
struct PeerBoard(Arc<Peer>);

impl BoardPeer for PeerBoard {
    fn lane(&self, idx: u32) -> Option<Arc<dyn BoardLane>> {
        let idx = idx as usize;
        self.0.seg.lane(idx)?;
        Some(Arc::new(PeerLane {
            peer: self.0.clone(),
            idx,
        }))
    }
    fn gone(&self) -> Option<i32> {
        self.0.dead().then_some(errno::FI_ECONNRESET)
    }
    fn wake(&self) {
        self.0.notify();
    }
}

/// A member's lane: reads only (publishing and releasing are its owner's).
struct PeerLane {
    peer: Arc<Peer>,
    idx: usize,
}

impl BoardLane for PeerLane {
    #[inline]
    fn seq(&self) -> u64 {
        self.peer.seg.lane(self.idx).map_or(0, |l| l.seq())
    }
    fn read(&self, seq: u64, offset: usize, out: &mut [u8]) -> bool {
        self.peer
            .seg
            .lane(self.idx)
            .is_some_and(|l| l.read(seq, offset, out))
    }
    fn publish(&self, _seq: u64, _data: &[u8]) {}
    fn release(&self) {}
}
