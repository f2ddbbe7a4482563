//! The storage path over shm as a host with Yama's ptrace_scope=1 runs it:
//! no cross-process copies (FI_SHM_DISABLE_CMA=1: RMA data goes through
//! the rings in chunks) and rings of two entries (FI_SHM_RING_SLOTS=2,
//! unless the environment sets another size), so the provider pushes back
//! (FI_EAGAIN) on almost every post. Backpressure is flow control: every
//! request still ends Ok with its data, never with an error or a dropped
//! session.

mod support;

use ofi_storage::VolumeOptions;
use std::sync::Once;
use std::time::{Duration, Instant};
use support::*;

static ENV: Once = Once::new();

/// Sets the variables before this binary's first fabric opens (every test
/// calls it first; the provider reads them when a fabric opens).
fn constrained() {
    ENV.call_once(|| {
        std::env::set_var("FI_SHM_DISABLE_CMA", "1");
        if std::env::var_os("FI_SHM_RING_SLOTS").is_none() {
            std::env::set_var("FI_SHM_RING_SLOTS", "2");
        }
    });
}

#[test]
fn round_trip_over_shm_without_cma_on_a_small_ring() {
    constrained();
    round_trip("shm");
}

#[test]
fn streaming_large_io_over_shm_without_cma_on_a_small_ring() {
    constrained();
    streaming_large_io("shm");
}

/// fio's `--rw=randrw --bs=1m --iodepth=32` through a volume: 1 MiB reads
/// and writes, 32 in flight, each RMA refused with FI_EAGAIN many times
/// before the provider takes it. Reads see their data (never an Ok over
/// bytes that did not arrive), writes land, nothing fails.
#[test]
fn queue_depth_32_of_1_mib_reads_and_writes_all_succeed_under_backpressure() {
    constrained();
    const MIB: usize = 1 << 20;
    const CHUNKS: u64 = 16;
    const OPS: u64 = 48;
    // Chunks 0..16 are written, 16..32 only read (their bytes are known).
    let path = tmpfile("eagain", 2 * CHUNKS * MIB as u64);
    let mut init = Vec::with_capacity(2 * CHUNKS as usize * MIB);
    for c in 0..2 * CHUNKS {
        init.extend(pattern(100 + c as u8, MIB));
    }
    std::fs::write(&path, &init).unwrap();
    let served = start(&path, "shm", false);
    let opts = VolumeOptions {
        net: net("shm"),
        queue_depth: 32,
        max_io: MIB as u32,
        ..VolumeOptions::default()
    };
    let v = ofi_storage::Volume::open(&served.addr, &opts).unwrap();
    assert_eq!(v.queue_depth(), 32);
    let deadline = Instant::now() + Duration::from_secs(120);
    let (mut next, mut done) = (0u64, 0u64);
    while done < OPS {
        assert!(Instant::now() < deadline, "{done} of {OPS} done in 120 s");
        while next < OPS && next - done < 32 {
            let c = next / 2 % CHUNKS;
            if next % 2 == 0 {
                v.submit_write(c * MIB as u64, pattern(c as u8, MIB), false, next);
            } else {
                v.submit_read((CHUNKS + c) * MIB as u64, MIB as u32, next);
            }
            next += 1;
        }
        let Some(c) = v.next(Duration::from_millis(50)) else {
            continue;
        };
        let got = c
            .result
            .unwrap_or_else(|e| panic!("request {} failed under backpressure: {e:?}", c.user));
        if c.user % 2 == 1 {
            let chunk = CHUNKS + c.user / 2 % CHUNKS;
            assert!(
                got == pattern(100 + chunk as u8, MIB),
                "read {} (chunk {chunk}) answered Ok without its data",
                c.user
            );
        }
        done += 1;
    }
    v.flush().unwrap();
    for c in 0..CHUNKS {
        let got = v.read(c * MIB as u64, MIB as u32).unwrap();
        assert!(got == pattern(c as u8, MIB), "chunk {c} read back wrong");
    }
    drop(v);
}
