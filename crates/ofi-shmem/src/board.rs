//! The collectives' board: lanes in an endpoint's segment where its owner
//! publishes the inputs of a collective group's small operations and the
//! group's other members, on the same node, read them (the shared-memory
//! path of `ofi_core`'s collectives; the protocol is
//! `ofi_proto::coll::board`).
//!
//! A lane holds a group's name (0: free), the number of operations its
//! owner published, and two data slots used in turn (operation `k`'s input
//! is in slot `k % 2`). The count only grows, across the groups that hold
//! the lane in turn (a group counts from the value it found: members that
//! still look at a lane its owner gave back never see it go backwards),
//! and a lane given back rests [`REST`] before it is claimed again. Only
//! the owner writes its lanes; readers load the count with Acquire, then
//! the slot's words, then the count again ([`Lane::read`]: a slot
//! overwritten meanwhile is reported, never passed on). Every field is an atomic,
//! so a reader racing a writer (or a hostile peer scribbling) reads stale
//! or garbled values, never undefined behaviour; what it reads is only ever
//! the writer's own published data.

use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long a lane given back rests before it is claimed again: the
/// group's other members may still be reading its last input.
pub const REST: Duration = Duration::from_secs(1);

/// Milliseconds since this process first looked (never 0).
fn now_ms() -> u64 {
    static BASE: OnceLock<Instant> = OnceLock::new();
    BASE.get_or_init(Instant::now).elapsed().as_millis() as u64 + 1
}

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
    /// When the owner gave it back (its own clock, ms; 0: never).
    released: AtomicU64,
    _pad1: [u8; 48],
    /// Two slots of input words, used in turn.
    slots: [[AtomicU64; WORDS]; 2],
}

/// Bytes a lane takes.
pub const LANE_SIZE: usize = std::mem::size_of::<Lane>();
const _: () = assert!(LANE_SIZE == 128 + 2 * LANE_BYTES);

impl Lane {
    /// The owner: takes the lane for group `name` (non-zero) when it is
    /// free and rested; returns the count the group starts from.
    pub fn claim(&self, name: u64) -> Option<u64> {
        debug_assert!(name != 0);
        let r = self.released.load(Ordering::Relaxed);
        if r != 0 && now_ms().saturating_sub(r) < REST.as_millis() as u64 {
            return None;
        }
        self.name
            .compare_exchange(0, name, Ordering::AcqRel, Ordering::Relaxed)
            .ok()?;
        Some(self.seq.load(Ordering::Acquire))
    }

    /// The owner: gives the lane back (its count stays).
    pub fn release(&self) {
        self.released.store(now_ms(), Ordering::Relaxed);
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
    /// [`seq`](Self::seq) showed `seq` published; false when the owner had
    /// published `seq + 2` into the same slot by the end of the read (what
    /// was read may be torn).
    pub fn read(&self, seq: u64, offset: usize, out: &mut [u8]) -> bool {
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
        // SYNC POINT: the words' loads before the count's (a seqlock's
        // reader): a count below seq + 2 now means none was overwritten.
        fence(Ordering::Acquire);
        self.seq.load(Ordering::Relaxed) < seq.wrapping_add(2)
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
            released: AtomicU64::new(0),
            _pad1: [0; 48],
            slots: [const { [const { AtomicU64::new(0) }; WORDS] }; 2],
        })
    }

    #[test]
    fn claims_once_and_reads_back_what_was_published() {
        let l = lane();
        assert_eq!(l.claim(7), Some(0));
        assert_eq!(l.claim(8), None, "a held lane is not claimed again");
        assert_eq!(l.name(), 7);
        let data: Vec<u8> = (0..37u8).collect();
        l.publish(1, &data);
        l.publish(2, &[9; 5]);
        assert_eq!(l.seq(), 2);
        let mut out = vec![0u8; 37];
        assert!(l.read(1, 0, &mut out));
        assert_eq!(out, data, "slot 1 keeps operation 1 while 2 is in slot 0");
        let mut part = [0u8; 10];
        assert!(l.read(1, 13, &mut part));
        assert_eq!(
            &part[..],
            &data[13..23],
            "unaligned offsets read the right bytes"
        );
        let mut tail = [0xffu8; 4];
        assert!(l.read(2, LANE_BYTES - 2, &mut tail));
        assert_eq!(tail, [0, 0, 0, 0], "past the lane reads zeros");
        l.publish(3, &[1]);
        assert!(
            !l.read(1, 0, &mut out),
            "operation 1's slot was overwritten by 3"
        );
        l.release();
        assert_eq!(l.name(), 0);
        assert_eq!(l.seq(), 3, "the count stays for members still looking");
        assert_eq!(l.claim(8), None, "a lane given back rests first");
        // As if rested.
        l.released.store(0, Ordering::Relaxed);
        assert_eq!(l.claim(8), Some(3), "a new group counts on from 3");
    }
}
