//! The collectives' board: lanes in an endpoint's segment where its owner
//! publishes the inputs of a collective group's small operations and the
//! group's other members, on the same node, read them (the shared-memory
//! path of `ofi_core`'s collectives; the protocol is
//! `ofi_proto::coll::board`).
//!
//! A lane holds a group's name (0: free), the number of operations its
//! owner published, and two data slots used in turn (operation `k`'s input
//! is in slot `k % 2`). Only the owner writes its lanes; readers load the
//! count with Acquire and then the slot's words. Every field is an atomic,
//! so a reader racing a writer (or a hostile peer scribbling) reads stale
//! or garbled values, never undefined behaviour; what it reads is only ever
//! the writer's own published data.

use std::sync::atomic::{AtomicU64, Ordering};

/// Lanes per segment: groups with a board lane at once per endpoint.
pub const LANES: usize = 32;
/// Bytes of input one operation may publish in a lane.
pub const LANE_BYTES: usize = 256;
const WORDS: usize = LANE_BYTES / 8;

/// One group's lane.
#[repr(C, align(128))]
pub struct Lane {
    /// The owner's operations published so far (operation `k` sets `k`).
    seq: AtomicU64,
    _pad0: [u8; 56],
    /// The group's name; 0 while free.
    name: AtomicU64,
    _pad1: [u8; 56],
    /// Two slots of input words, used in turn.
    slots: [[AtomicU64; WORDS]; 2],
}

/// Bytes a lane takes.
pub const LANE_SIZE: usize = std::mem::size_of::<Lane>();
const _: () = assert!(LANE_SIZE == 128 + 2 * LANE_BYTES);

impl Lane {
    /// The owner: takes the lane for group `name` (non-zero) when it is
    /// free; its count starts at 0.
    pub fn claim(&self, name: u64) -> bool {
        debug_assert!(name != 0);
        if self
            .name
            .compare_exchange(0, name, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        self.seq.store(0, Ordering::Release);
        true
    }

    /// The owner: gives the lane back.
    pub fn release(&self) {
        self.seq.store(0, Ordering::Relaxed);
        self.name.store(0, Ordering::Release);
    }

    /// The group name the lane holds (0: free).
    pub fn name(&self) -> u64 {
        self.name.load(Ordering::Acquire)
    }

    /// The owner: publishes operation `seq`'s input (`data` is cut at
    /// [`LANE_BYTES`]), then the count. SeqCst, so that a publisher that
    /// then looks at a member's sleep flag and a member that raised it and
    /// then looks at the count cannot both miss (see `wake`).
    pub fn publish(&self, seq: u64, data: &[u8]) {
        let slot = &self.slots[(seq & 1) as usize];
        for (w, chunk) in slot.iter().zip(data.chunks(8)) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            w.store(u64::from_ne_bytes(b), Ordering::Relaxed);
        }
        self.seq.store(seq, Ordering::SeqCst);
    }

    /// Operations the owner published so far.
    #[inline]
    pub fn seq(&self) -> u64 {
        self.seq.load(Ordering::Acquire)
    }

    /// Reads `out.len()` bytes of operation `seq`'s input from byte
    /// `offset` (what lies past [`LANE_BYTES`] reads as zeros). Read after
    /// [`seq`](Self::seq) showed `seq` published.
    pub fn read(&self, seq: u64, offset: usize, out: &mut [u8]) {
        let slot = &self.slots[(seq & 1) as usize];
        let mut at = offset;
        let mut done = 0;
        while done < out.len() {
            let (w, inw) = (at / 8, at % 8);
            let take = (8 - inw).min(out.len() - done);
            let word = slot.get(w).map_or(0, |w| w.load(Ordering::Relaxed));
            out[done..done + take].copy_from_slice(&word.to_ne_bytes()[inw..inw + take]);
            done += take;
            at += take;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lane() -> Box<Lane> {
        Box::new(Lane {
            seq: AtomicU64::new(0),
            _pad0: [0; 56],
            name: AtomicU64::new(0),
            _pad1: [0; 56],
            slots: [const { [const { AtomicU64::new(0) }; WORDS] }; 2],
        })
    }

    #[test]
    fn claims_once_and_reads_back_what_was_published() {
        let l = lane();
        assert!(l.claim(7));
        assert!(!l.claim(8), "a held lane is not claimed again");
        assert_eq!(l.name(), 7);
        let data: Vec<u8> = (0..37u8).collect();
        l.publish(1, &data);
        l.publish(2, &[9; 5]);
        assert_eq!(l.seq(), 2);
        let mut out = vec![0u8; 37];
        l.read(1, 0, &mut out);
        assert_eq!(out, data, "slot 1 keeps operation 1 while 2 is in slot 0");
        let mut part = [0u8; 10];
        l.read(1, 13, &mut part);
        assert_eq!(
            &part[..],
            &data[13..23],
            "unaligned offsets read the right bytes"
        );
        let mut tail = [0xffu8; 4];
        l.read(2, LANE_BYTES - 2, &mut tail);
        assert_eq!(tail, [0, 0, 0, 0], "past the lane reads zeros");
        l.release();
        assert_eq!(l.name(), 0);
        assert!(l.claim(8));
        assert_eq!(l.seq(), 0, "a new claim starts counting again");
    }
}
