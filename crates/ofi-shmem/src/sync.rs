//! Atomics shim: std atomics normally, loom's under `--cfg loom`, so the
//! ring, the cooperative-copy claims and the sleep handshake are
//! model-checked as written.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

/// Spin hint (a yield under loom so the model checker can switch threads).
#[inline]
pub(crate) fn spin() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::hint::spin_loop();
}
