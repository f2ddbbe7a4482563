//! A bounded multi-producer multi-consumer ring of fixed-size slots.
//!
//! Each slot carries a sequence number: a producer may fill slot `pos` when
//! its sequence equals `pos`, and publishes it by storing `pos + 1`; a
//! consumer may read it when the sequence equals `pos + 1`, and frees it by
//! storing `pos + capacity`. Producers and consumers claim positions with a
//! CAS on `tail` and `head`. The algorithm is written once against [`Slots`]
//! and runs over shared memory in production and over loom cells in the
//! model tests.
#![allow(unsafe_code)]

use crate::sync::{spin, AtomicU64, Ordering};

/// Bound on retries against a slot whose sequence does not move: a dead or
/// hostile peer must not make a push or pop spin forever.
const MAX_RETRIES: u32 = 1 << 16;

/// Storage a ring runs over.
///
/// # Safety
/// Implementors promise that `capacity` is a power of two and never
/// changes; that `seq(idx)` returns, for every `idx` (masked into
/// `0..capacity`), the same atomic each time and a different one for each
/// slot; and that `with_payload(idx, f)` passes `f` a pointer to `len`
/// writable bytes belonging to slot `idx` alone. The ring functions rely on
/// these promises to hand a payload to one owner at a time.
pub unsafe trait Slots {
    /// Number of slots (a power of two).
    fn capacity(&self) -> u64;
    /// Next position to fill.
    fn tail(&self) -> &AtomicU64;
    /// Next position to read.
    fn head(&self) -> &AtomicU64;
    /// The sequence word of slot `idx & (capacity - 1)`: any index is in
    /// bounds.
    fn seq(&self, idx: u64) -> &AtomicU64;
    /// Runs `f` on the payload of slot `idx` with its byte length.
    ///
    /// # Safety
    /// `idx < capacity`, and the caller owns slot `idx` (claimed and not
    /// yet released), so nobody else reads or writes the payload meanwhile.
    unsafe fn with_payload<R>(&self, idx: u64, f: impl FnOnce(*mut u8, usize) -> R) -> R;
}

/// Why a push failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PushError {
    /// Every slot is in use.
    Full,
}

/// Initialises slot sequences (the ring's owner, before anyone else maps it).
///
/// # Safety
/// Nobody else uses the ring yet: resetting the sequences of a live ring
/// would hand one slot to two owners.
pub unsafe fn init<S: Slots>(s: &S) {
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
    // SAFETY: the index is masked below the capacity; the CAS above gave this
    // producer exclusive ownership of the slot until it publishes the
    // sequence below.
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
    // SAFETY: the index is masked below the capacity; the CAS above gave this
    // consumer exclusive ownership of the slot until it releases the
    // sequence below.
    let r = unsafe { s.with_payload(pos & mask, read) };
    // SYNC POINT: releases the slot to the producer that acquires seq == pos + capacity.
    s.seq(pos & mask)
        .store(pos.wrapping_add(mask + 1), Ordering::Release);
    Some(r)
}

// ---- The message-ring variant: many producers, one consumer that never
// writes slot lines. Producers stamp a slot with `pos + 1` once filled; the
// consumer keeps its read position privately and publishes it in `head`
// now and then, and producers only claim positions below `head + capacity`.
// A slot's cache line is thus written by producers only, and read by the
// consumer: one transfer per message instead of the two a freeing store
// would add.

/// Claims a position (below the published head plus capacity), lets `fill`
/// write the slot and stamps it. `cached_head` is the producer's last view
/// of the consumer's published head (see [`Consumer::publish`]); it is
/// refreshed only when the ring looks full.
#[inline]
pub fn push_mpsc<S: Slots, R>(
    s: &S,
    cached_head: &AtomicU64,
    fill: impl FnOnce(*mut u8, usize) -> R,
) -> Result<R, PushError> {
    let cap = s.capacity();
    let mut pos = s.tail().load(Ordering::Relaxed);
    let mut tries = 0;
    loop {
        if pos.wrapping_sub(cached_head.load(Ordering::Relaxed)) >= cap {
            // SYNC POINT: acquires the consumer's release of `head`: every
            // slot below it has been read and may be overwritten.
            let h = s.head().load(Ordering::Acquire);
            cached_head.fetch_max(h, Ordering::Relaxed);
            if pos.wrapping_sub(h) >= cap {
                return Err(PushError::Full);
            }
        }
        match s.tail().compare_exchange_weak(
            pos,
            pos.wrapping_add(1),
            Ordering::Relaxed,
            Ordering::Relaxed,
        ) {
            Ok(_) => break,
            Err(p) => {
                pos = p;
                tries += 1;
                if tries > MAX_RETRIES {
                    return Err(PushError::Full);
                }
                spin();
            }
        }
    }
    let idx = pos & (cap - 1);
    // SAFETY: idx is masked below the capacity; the CAS gave this producer
    // position `pos`, and the head check proved the consumer is done with the slot's previous lap.
    let r = unsafe { s.with_payload(idx, fill) };
    // SYNC POINT: releases the payload to the consumer's acquire of the stamp.
    s.seq(idx).store(pos.wrapping_add(1), Ordering::Release);
    Ok(r)
}

/// The consumer of a message ring (many producers, one consumer): its
/// private read position and the position it last published. Holding the
/// one `Consumer` of a ring is the right to read that ring's stamped slots,
/// and `&mut self` keeps reads one at a time.
#[derive(Debug)]
pub struct Consumer {
    pos: u64,
    published: u64,
}

impl Consumer {
    /// The consumer of a fresh ring (position 0).
    ///
    /// # Safety
    /// At most one `Consumer` exists per ring, and it is only ever used with
    /// that ring: two consumers would read (and release) the same slot.
    pub unsafe fn new() -> Consumer {
        Consumer {
            pos: 0,
            published: 0,
        }
    }

    /// Takes the entry at this consumer's position, if stamped, and
    /// advances. Call [`Consumer::publish`] to let producers reuse slots.
    #[inline]
    pub fn pop<S: Slots, R>(&mut self, s: &S, read: impl FnOnce(*mut u8, usize) -> R) -> Option<R> {
        let pos = self.pos;
        let idx = pos & (s.capacity() - 1);
        // SYNC POINT: acquires the producer's release of the stamp.
        if s.seq(idx).load(Ordering::Acquire) != pos.wrapping_add(1) {
            return None;
        }
        // SAFETY: idx is masked below the capacity; the stamp says the
        // producer is done, and the slot stays this (only) consumer's until a
        // published head passes it.
        let r = unsafe { s.with_payload(idx, read) };
        self.pos = pos.wrapping_add(1);
        Some(r)
    }

    /// Publishes the position: slots below it may be refilled. A store only
    /// when it moved (producers read the line only when the ring looks full).
    #[inline]
    pub fn publish<S: Slots>(&mut self, s: &S) {
        if self.pos != self.published {
            // SYNC POINT: releases the consumer's reads of every slot below
            // the position to producers' acquire of `head`.
            s.head().store(self.pos, Ordering::Release);
            self.published = self.pos;
        }
    }

    /// True when the entry at this consumer's position is stamped.
    #[inline]
    pub fn ready<S: Slots>(&self, s: &S) -> bool {
        ready_at(s, self.pos)
    }

    /// The read position (entries consumed so far).
    #[inline]
    pub fn position(&self) -> u64 {
        self.pos
    }
}

/// The positions producers have claimed so far: every entry a producer
/// pushed before an event that this thread has since observed (with
/// acquire) lies below it.
#[inline]
pub fn claimed<S: Slots>(s: &S) -> u64 {
    // SYNC POINT: acquires the producers' claims (their CAS on `tail`)
    // ordered before whatever release this thread acquired before calling.
    s.tail().load(Ordering::Acquire)
}

/// True when the message-ring entry at position `pos` is stamped (a read
/// of its sequence word only: an idle probe any thread may make).
#[inline]
pub fn ready_at<S: Slots>(s: &S, pos: u64) -> bool {
    s.seq(pos & (s.capacity() - 1)).load(Ordering::Acquire) == pos.wrapping_add(1)
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
