//! The atomic engine's hot path: one u64 fetch-add through
//! `ofi_core::util::atomic::apply`, as a target executes a peer's
//! FI_UINT64 FI_SUM fetch atomic. Reports the median nanoseconds per call
//! over several batches.
//!
//! `cargo bench -p ofi-core --bench atomic`

use ofi_core::consts::atomic_op::FI_SUM;
use ofi_core::consts::datatype::FI_UINT64;
use ofi_core::util::atomic::{apply, AtomicKind};
use std::hint::black_box;
use std::time::Instant;

const CALLS: u32 = 5_000_000;
const BATCHES: usize = 7;

fn main() {
    let mut target = 0u64.to_ne_bytes();
    let operand = 1u64.to_ne_bytes();
    let mut result = [0u8; 8];
    let mut per_call = Vec::with_capacity(BATCHES);
    for _ in 0..BATCHES {
        let start = Instant::now();
        for _ in 0..CALLS {
            apply(
                black_box(AtomicKind::Fetch),
                black_box(FI_SUM),
                black_box(FI_UINT64),
                &mut target,
                black_box(&operand),
                &[],
                &mut result,
            )
            .expect("a u64 fetch-add is supported");
            black_box(&mut target);
        }
        per_call.push(start.elapsed().as_secs_f64() * 1e9 / f64::from(CALLS));
    }
    assert_eq!(
        u64::from_ne_bytes(target),
        u64::from(CALLS) * BATCHES as u64,
        "the fetch-adds did not add up"
    );
    per_call.sort_by(f64::total_cmp);
    println!(
        "fetch-add of one u64 through apply: {:.2} ns per call (median of {BATCHES} batches of {CALLS}; min {:.2}, max {:.2})",
        per_call[BATCHES / 2],
        per_call[0],
        per_call[BATCHES - 1]
    );
}
