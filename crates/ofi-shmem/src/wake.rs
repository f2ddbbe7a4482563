//! The sleep handshake between a ring's consumer and its producers
//! (Dekker's pattern): the consumer raises `sleeping` and then looks for
//! work; a producer publishes its entry and then looks at `sleeping`. The
//! two SeqCst fences make sure one of them sees the other, so a consumer
//! never sleeps on an entry whose producer did not ring its doorbell.
//! Model-checked in `tests/loom_wake.rs`.

use crate::sync::{fence, AtomicU32, Ordering};

/// Consumer: announces it is about to sleep, then checks for work with
/// `pending`. True when it may sleep (its doorbell will be rung for any
/// entry published from now on). Call [`disarm`] after waking, whatever
/// this returned.
#[inline]
pub fn arm(sleeping: &AtomicU32, pending: impl FnOnce() -> bool) -> bool {
    sleeping.fetch_add(1, Ordering::SeqCst);
    // SYNC POINT: pairs with the fence in `must_ring` (Dekker).
    fence(Ordering::SeqCst);
    !pending()
}

/// Consumer: no longer asleep.
#[inline]
pub fn disarm(sleeping: &AtomicU32) {
    sleeping.fetch_sub(1, Ordering::SeqCst);
}

/// Producer, after publishing an entry: true when the consumer may be
/// asleep and its doorbell must be rung.
#[inline]
pub fn must_ring(sleeping: &AtomicU32) -> bool {
    // SYNC POINT: pairs with the fence in `arm` (Dekker): either the
    // consumer sees our entry, or we see it asleep.
    fence(Ordering::SeqCst);
    sleeping.load(Ordering::Relaxed) != 0
}
