//! Loom model of the sleep handshake (`ofi_shmem::wake`): a consumer that
//! decides to sleep is always woken by a producer that published an entry
//! it did not see (the doorbell is rung), whatever the interleaving.
//! Run with `RUSTFLAGS="--cfg loom" cargo test -p ofi-shmem --test loom_wake --release`.
#![cfg(loom)]

use loom::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use loom::sync::Arc;
use ofi_shmem::wake;

struct Shared {
    sleeping: AtomicU32,
    /// The entry's stamp (what `ready` reads).
    stamped: AtomicBool,
    /// The doorbell.
    rung: AtomicBool,
}

#[test]
fn a_sleeper_never_misses_an_entry() {
    loom::model(|| {
        let s = Arc::new(Shared {
            sleeping: AtomicU32::new(0),
            stamped: AtomicBool::new(false),
            rung: AtomicBool::new(false),
        });
        let p = s.clone();
        let producer = loom::thread::spawn(move || {
            // Publish the entry (the ring's release of the stamp), then ring
            // if the consumer may be asleep.
            p.stamped.store(true, Ordering::Release);
            if wake::must_ring(&p.sleeping) {
                p.rung.store(true, Ordering::Relaxed);
            }
        });
        let sleeps = wake::arm(&s.sleeping, || s.stamped.load(Ordering::Acquire));
        producer.join().unwrap();
        if sleeps {
            assert!(
                s.rung.load(Ordering::Relaxed),
                "the consumer slept on an entry and nobody rang"
            );
        }
        wake::disarm(&s.sleeping);
        assert_eq!(s.sleeping.load(Ordering::Relaxed), 0);
    });
}
