//! A bounded multi-producer multi-consumer ring of fixed-size slots.
//!
//! Each slot carries a sequence number: a producer may fill slot `pos` when
//! its sequence equals `pos`, and publishes it by storing `pos + 1`; a
//! consumer may read it when the sequence equals `pos + 1`, and frees it by
//! storing `pos + capacity`. Producers and consumers claim positions with a
//! CAS on `tail` and `head`. The algorithm is written once against [`Slots`]
//! and runs over shared memory in production and over loom cells in the
//! model tests.

use crate::sync::{spin, AtomicU64, Ordering};

/// Bound on retries against a slot whose sequence does not move: a dead or
/// hostile peer must not make a push or pop spin forever.
const MAX_RETRIES: u32 = 1 << 16;

/// Storage a ring runs over.
pub trait Slots {
    /// Number of slots (a power of two).
    fn capacity(&self) -> u64;
    /// Next position to fill.
    fn tail(&self) -> &AtomicU64;
    /// Next position to read.
    fn head(&self) -> &AtomicU64;
    /// The sequence word of slot `idx`.
    fn seq(&self, idx: u64) -> &AtomicU64;
    /// Runs `f` on the payload of slot `idx` with its byte length.
    ///
    /// # Safety
    /// The caller must own slot `idx` (claimed and not yet released).
    unsafe fn with_payload<R>(&self, idx: u64, f: impl FnOnce(*mut u8, usize) -> R) -> R;
}

/// Why a push failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PushError {
    /// Every slot is in use.
    Full,
}

/// Initialises slot sequences (the ring's owner, before anyone else maps it).
pub fn init<S: Slots>(s: &S) {
    for i in 0..s.capacity() {
        s.seq(i).store(i, Ordering::Relaxed);
    }
    s.tail().store(0, Ordering::Relaxed);
    s.head().store(0, Ordering::Release);
}

/// Claims a slot, lets `fill` write its payload, and publishes it.
#[inline]
pub fn push<S: Slots, R>(s: &S, fill: impl FnOnce(*mut u8, usize) -> R) -> Result<R, PushError> {
    let mask = s.capacity() - 1;
    let mut pos = s.tail().load(Ordering::Relaxed);
    let mut tries = 0;
    loop {
        // SYNC POINT: acquires the consumer's release of this slot.
        let seq = s.seq(pos & mask).load(Ordering::Acquire);
        let dif = seq.wrapping_sub(pos) as i64;
        if dif == 0 {
            match s.tail().compare_exchange_weak(
                pos,
                pos.wrapping_add(1),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(p) => pos = p,
            }
        } else if dif < 0 {
            return Err(PushError::Full);
        } else {
            tries += 1;
            if tries > MAX_RETRIES {
                return Err(PushError::Full);
            }
            spin();
            pos = s.tail().load(Ordering::Relaxed);
        }
    }
    // SAFETY: the CAS above gave this producer exclusive ownership of the slot
    // until it publishes the sequence below.
    let r = unsafe { s.with_payload(pos & mask, fill) };
    // SYNC POINT: releases the payload to the consumer that acquires seq == pos + 1.
    s.seq(pos & mask)
        .store(pos.wrapping_add(1), Ordering::Release);
    Ok(r)
}

/// Takes the oldest published slot, lets `read` see its payload, and frees it.
#[inline]
pub fn pop<S: Slots, R>(s: &S, read: impl FnOnce(*mut u8, usize) -> R) -> Option<R> {
    let mask = s.capacity() - 1;
    let mut pos = s.head().load(Ordering::Relaxed);
    let mut tries = 0;
    loop {
        // SYNC POINT: acquires the producer's release of this slot.
        let seq = s.seq(pos & mask).load(Ordering::Acquire);
        let dif = seq.wrapping_sub(pos.wrapping_add(1)) as i64;
        if dif == 0 {
            match s.head().compare_exchange_weak(
                pos,
                pos.wrapping_add(1),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(p) => pos = p,
            }
        } else if dif < 0 {
            return None;
        } else {
            tries += 1;
            if tries > MAX_RETRIES {
                return None;
            }
            spin();
            pos = s.head().load(Ordering::Relaxed);
        }
    }
    // SAFETY: the CAS above gave this consumer exclusive ownership of the slot
    // until it releases the sequence below.
    let r = unsafe { s.with_payload(pos & mask, read) };
    // SYNC POINT: releases the slot to the producer that acquires seq == pos + capacity.
    s.seq(pos & mask)
        .store(pos.wrapping_add(mask + 1), Ordering::Release);
    Some(r)
}

/// `pop` for a ring with one consumer at a time: the same protocol without
/// the read-modify-write on `head`.
///
/// # Safety
/// No other thread or process may pop from this ring concurrently (the
/// caller serialises consumers, e.g. under the owner's lock).
#[inline]
pub unsafe fn pop_exclusive<S: Slots, R>(
    s: &S,
    read: impl FnOnce(*mut u8, usize) -> R,
) -> Option<R> {
    let mask = s.capacity() - 1;
    let pos = s.head().load(Ordering::Relaxed);
    // SYNC POINT: acquires the producer's release of this slot.
    if s.seq(pos & mask).load(Ordering::Acquire) != pos.wrapping_add(1) {
        return None;
    }
    s.head().store(pos.wrapping_add(1), Ordering::Relaxed);
    // SAFETY: the slot is published and, with no concurrent consumer, ours
    // until we release its sequence below.
    let r = unsafe { s.with_payload(pos & mask, read) };
    // SYNC POINT: releases the slot to the producer that acquires seq == pos + capacity.
    s.seq(pos & mask)
        .store(pos.wrapping_add(mask + 1), Ordering::Release);
    Some(r)
}

/// True when the next slot to read is published (a cheap emptiness probe).
#[inline]
pub fn ready<S: Slots>(s: &S) -> bool {
    let mask = s.capacity() - 1;
    let pos = s.head().load(Ordering::Relaxed);
    s.seq(pos & mask).load(Ordering::Acquire) == pos.wrapping_add(1)
}

/// Slots claimed by producers that are published or still being filled.
pub fn occupancy<S: Slots>(s: &S) -> u64 {
    s.tail()
        .load(Ordering::Relaxed)
        .wrapping_sub(s.head().load(Ordering::Relaxed))
}
