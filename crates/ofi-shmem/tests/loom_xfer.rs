//! Loom models of the cooperative-copy claim protocol (`ofi_shmem::xfer`):
//! the receiver publishes a transfer, the sender joins with the generation
//! its CTS named, both claim chunks until none are left; every chunk is
//! copied exactly once, the receiver sees every copy once `finished`, and
//! a claim of a retired or stale generation copies nothing. (That a chunk
//! finished late counts toward no later transfer is a unit test in
//! `xfer.rs`: loom mis-orders a plain store against another thread's
//! read-modify-write of the same atomic, tokio-rs/loom#282, and reports
//! executions the memory model forbids.)
//! Run with `RUSTFLAGS="--cfg loom" cargo test -p ofi-shmem --test loom_xfer --release`.
#![cfg(loom)]
#![allow(unsafe_code)]

use loom::cell::UnsafeCell;
use loom::sync::Arc;
use ofi_shmem::xfer::{XferDesc, XferLayout};

/// The receiver's buffer: one cell per chunk, so loom flags any copy that
/// races with another copy or with the receiver's read.
struct Buffer {
    chunks: Vec<UnsafeCell<u8>>,
}

fn layout(n: u64) -> XferLayout {
    XferLayout {
        nchunks: n,
        chunk: 4096,
        total: 4096 * n as usize,
        ranges_cnt: 1,
        ranges: [(0x1000, 4096 * n as usize), (0, 0), (0, 0), (0, 0)],
    }
}

/// Claims and "copies" chunks (marks them with `who`) until none are left.
fn copier(d: &XferDesc, buf: &Buffer, gen: u64, n: u64, who: u8) -> u32 {
    let mut copied = 0;
    while let Some(c) = d.claim(gen, n) {
        buf.chunks[c as usize].with_mut(|p| {
            // SAFETY: loom's cell pointer, valid; exclusive use is what loom checks.
            unsafe {
                assert_eq!(*p, 0, "chunk {c} copied twice");
                *p = who;
            }
        });
        copied += 1;
        d.chunk_done(gen, None);
    }
    copied
}

#[test]
fn both_sides_copy_every_chunk_once() {
    loom::model(|| {
        let n = 3;
        let d = Arc::new(XferDesc::default());
        let buf = Arc::new(Buffer {
            chunks: (0..n).map(|_| UnsafeCell::new(0)).collect(),
        });
        // The receiver copied chunk 0 alone (the probe), then publishes.
        buf.chunks[0].with_mut(|p| {
            // SAFETY: nobody else has the buffer yet.
            unsafe { *p = 1 }
        });
        d.publish(7, &layout(n), 1);
        let (d2, b2) = (d.clone(), buf.clone());
        let sender = loom::thread::spawn(move || {
            let l = d2.layout();
            assert_eq!(l.nchunks, 3, "the sender reads the published layout");
            copier(&d2, &b2, 7, l.nchunks, 2)
        });
        let mine = copier(&d, &buf, 7, n, 1);
        while !d.finished(7, n) {
            loom::thread::yield_now();
        }
        // Every copy is visible here (loom flags a racy read).
        for c in &buf.chunks {
            // SAFETY: loom's cell pointer; loom checks the read is ordered.
            c.with(|p| assert_ne!(unsafe { *p }, 0, "a chunk was not copied"));
        }
        assert_eq!(d.retire(7), 0, "no failure");
        let theirs = sender.join().unwrap();
        assert_eq!(mine + theirs, (n - 1) as u32, "each chunk claimed once");
    });
}

#[test]
fn a_retired_or_stale_generation_claims_nothing() {
    loom::model(|| {
        let n = 2;
        let d = Arc::new(XferDesc::default());
        let buf = Arc::new(Buffer {
            chunks: (0..n).map(|_| UnsafeCell::new(0)).collect(),
        });
        d.publish(5, &layout(n), 0);
        let (d2, b2) = (d.clone(), buf.clone());
        // A late sender: its CTS may arrive after the receiver gave up.
        let late = loom::thread::spawn(move || {
            let stale = d2.claim(4, n).is_none();
            (stale, copier(&d2, &b2, 5, n, 2))
        });
        // The receiver claims one chunk, then gives up (a dead sender, a
        // timeout) and retires the generation.
        let mine = d.claim(5, n);
        if mine.is_some() {
            d.chunk_done(5, None);
        }
        let _ = d.retire(5);
        assert_eq!(d.claim(5, n), None, "nothing is claimed after retire");
        let (stale, theirs) = late.join().unwrap();
        assert!(stale, "a stale generation never claims");
        let total = theirs + u32::from(mine.is_some());
        assert!(total <= n as u32, "no chunk claimed twice");
    });
}
