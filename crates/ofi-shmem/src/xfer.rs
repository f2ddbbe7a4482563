//! Cooperative large-message copies: the receiver publishes a transfer in
//! a descriptor of its segment, and both processes claim chunks of it and
//! copy them across (the receiver reading, the sender writing) until all
//! are done. Every field is atomic; the claim protocol is written against
//! the atomics shim so loom checks it as it runs in production
//! (`tests/loom_xfer.rs`).
//!
//! A claim is a CAS of `generation << 32 | next chunk` against the
//! generation the sender was told in its CTS: once the receiver retires the
//! generation ([`XferDesc::retire`]), a late or stale claim fails, so a
//! chunk is copied by exactly one side, and never after the receiver
//! stopped waiting for it. The count of finished chunks and the first
//! failure carry the generation too: a copier that claimed a chunk, then
//! stalled past the receiver's patience (declared dead by silence) and
//! finished it after the descriptor was reused, neither counts its chunk
//! toward the new transfer nor fails it.

use crate::sync::{AtomicU64, Ordering};

/// Most receiver ranges a descriptor holds.
pub const XFER_RANGES: usize = 4;

/// A cooperative transfer descriptor (128 bytes, in the receiver's segment).
#[repr(C)]
#[derive(Debug, Default)]
pub struct XferDesc {
    /// `generation << 32 | next chunk`; generation 0 is "no transfer".
    claim: AtomicU64,
    /// `generation << 32 | chunks finished` (by either side).
    done: AtomicU64,
    /// `generation << 32 | first error number a copier met` (0 when none).
    failed: AtomicU64,
    /// Number of chunks.
    nchunks: AtomicU64,
    /// Bytes per chunk.
    chunk: AtomicU64,
    /// Bytes to copy.
    total: AtomicU64,
    /// Receiver ranges in use.
    recv_cnt: AtomicU64,
    _pad: AtomicU64,
    /// Receiver buffer ranges (address, length) in the receiver's address space.
    recv_iov: [[AtomicU64; 2]; XFER_RANGES],
}

#[cfg(not(loom))]
const _: () = assert!(std::mem::size_of::<XferDesc>() == 128);

/// A published transfer as the sender reads it from the descriptor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XferLayout {
    /// Number of chunks.
    pub nchunks: u64,
    /// Bytes per chunk.
    pub chunk: usize,
    /// Bytes to copy.
    pub total: usize,
    /// Receiver ranges (address, length); the first `ranges_cnt` are valid.
    pub ranges: [(usize, usize); XFER_RANGES],
    /// Ranges in use (at most [`XFER_RANGES`]).
    pub ranges_cnt: usize,
}

impl XferLayout {
    /// The receiver ranges in use.
    pub fn ranges(&self) -> &[(usize, usize)] {
        &self.ranges[..self.ranges_cnt.min(XFER_RANGES)]
    }
}

impl XferDesc {
    /// Receiver: publishes a transfer of generation `gen` (non-zero) whose
    /// first `first` chunks are already copied. Claims of `gen` succeed
    /// from here on.
    pub fn publish(&self, gen: u32, layout: &XferLayout, first: u64) {
        self.total.store(layout.total as u64, Ordering::Relaxed);
        self.chunk.store(layout.chunk as u64, Ordering::Relaxed);
        self.nchunks.store(layout.nchunks, Ordering::Relaxed);
        let tag = u64::from(gen) << 32;
        self.done.store(tag | first, Ordering::Relaxed);
        self.failed.store(tag, Ordering::Relaxed);
        let ranges = layout.ranges();
        self.recv_cnt.store(ranges.len() as u64, Ordering::Relaxed);
        for (slot, &(base, len)) in self.recv_iov.iter().zip(ranges) {
            slot[0].store(base as u64, Ordering::Relaxed);
            slot[1].store(len as u64, Ordering::Relaxed);
        }
        // SYNC POINT: publishes the fields above to the claimers' acquire of `claim`.
        self.claim
            .store((u64::from(gen) << 32) | first, Ordering::Release);
    }

    /// Sender: the transfer as published. A hostile receiver can write
    /// anything here: check it against what the sender knows before
    /// claiming.
    pub fn layout(&self) -> XferLayout {
        // SYNC POINT: acquires the receiver's release in `publish`.
        let _ = self.claim.load(Ordering::Acquire);
        let mut l = XferLayout {
            nchunks: self.nchunks.load(Ordering::Relaxed),
            chunk: self.chunk.load(Ordering::Relaxed) as usize,
            total: self.total.load(Ordering::Relaxed) as usize,
            ranges_cnt: (self.recv_cnt.load(Ordering::Relaxed) as usize).min(XFER_RANGES),
            ..Default::default()
        };
        for (o, r) in l.ranges.iter_mut().zip(&self.recv_iov) {
            *o = (
                r[0].load(Ordering::Relaxed) as usize,
                r[1].load(Ordering::Relaxed) as usize,
            );
        }
        l
    }

    /// Either side: claims the next of `n` chunks of generation `gen`;
    /// None when all are claimed or the generation is over.
    pub fn claim(&self, gen: u64, n: u64) -> Option<u64> {
        // SYNC POINT: acquires the receiver's release of the descriptor.
        let mut cur = self.claim.load(Ordering::Acquire);
        loop {
            if cur >> 32 != gen || gen == 0 || cur & 0xffff_ffff >= n {
                return None;
            }
            match self.claim.compare_exchange_weak(
                cur,
                cur + 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some(cur & 0xffff_ffff),
                Err(x) => cur = x,
            }
        }
    }

    /// Either side: a chunk claimed in generation `gen` is finished; `err`
    /// is the error number its copy met (the first one is kept). Counts
    /// only while `gen` is the descriptor's transfer: a chunk finished
    /// after the receiver retired it (and maybe reused the descriptor)
    /// counts toward nothing.
    pub fn chunk_done(&self, gen: u64, err: Option<i32>) {
        if let Some(e) = err {
            self.fail(gen, e);
        }
        let mut cur = self.done.load(Ordering::Relaxed);
        while cur >> 32 == gen {
            // SYNC POINT: releases this chunk's bytes to the receiver's
            // acquire in `finished`.
            match self
                .done
                .compare_exchange_weak(cur, cur + 1, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(x) => cur = x,
            }
        }
    }

    /// Records a failure of generation `gen`'s transfer (the first one
    /// wins; another generation's is ignored).
    pub fn fail(&self, gen: u64, err: i32) {
        let tag = gen << 32;
        let _ = self.failed.compare_exchange(
            tag,
            tag | u64::from(err.unsigned_abs()).clamp(1, 0xffff_ffff),
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
    }

    /// Receiver: true once `n` chunks of generation `gen` are finished,
    /// and the copies of every one of them are visible.
    pub fn finished(&self, gen: u64, n: u64) -> bool {
        // SYNC POINT: acquires the copiers' release in `chunk_done`.
        let d = self.done.load(Ordering::Acquire);
        d >> 32 == gen && d & 0xffff_ffff >= n
    }

    /// Chunks finished so far (the receiver watches it move while it waits
    /// for the chunks its peer claimed).
    pub fn chunks_done(&self) -> u64 {
        self.done.load(Ordering::Relaxed) & 0xffff_ffff
    }

    /// Receiver: ends generation `gen` (no claim succeeds after this) and
    /// returns the first error number its copiers met, 0 when none.
    pub fn retire(&self, gen: u64) -> u64 {
        self.claim.store(0, Ordering::Release);
        let f = self.failed.load(Ordering::Acquire);
        if f >> 32 == gen {
            f & 0xffff_ffff
        } else {
            0
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// `n` chunks (the claim protocol reads nothing else).
    fn layout(n: u64) -> XferLayout {
        XferLayout {
            nchunks: n,
            ..Default::default()
        }
    }

    /// A copier claims a chunk of transfer 5, stalls until the receiver
    /// gave up and reused the descriptor for transfer 6, then finishes:
    /// neither its chunk nor its failure may count toward transfer 6
    /// (the receiver would complete a receive whose chunk never landed).
    #[test]
    fn a_late_chunk_counts_toward_no_later_transfer() {
        let d = XferDesc::default();
        d.publish(5, &layout(2), 0);
        assert_eq!(d.claim(5, 2), Some(0));
        assert!(!d.finished(5, 2));
        assert_eq!(d.retire(5), 0);
        d.publish(6, &layout(1), 0);
        d.chunk_done(5, None);
        d.chunk_done(5, Some(-14));
        assert_eq!(d.chunks_done(), 0);
        assert!(!d.finished(6, 1), "a late chunk finished the new transfer");
        assert_eq!(d.claim(6, 1), Some(0));
        d.chunk_done(6, None);
        assert!(d.finished(6, 1));
        assert_eq!(d.retire(6), 0, "a late failure failed the new transfer");
    }

    #[test]
    fn the_first_failure_of_a_transfer_is_kept() {
        let d = XferDesc::default();
        d.publish(9, &layout(3), 1);
        assert_eq!(d.claim(9, 3), Some(1));
        d.chunk_done(9, Some(-14));
        assert_eq!(d.claim(9, 3), Some(2));
        d.chunk_done(9, Some(-1));
        assert!(d.finished(9, 3));
        assert_eq!(d.retire(9), 14);
    }
}
