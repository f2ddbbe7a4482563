//! A hostile sender whose RTS announces more bytes than its ranges hold,
//! on the cross-process copy path: the receive fails instead of completing
//! with bytes that never arrived. Its own process: it takes the copy back
//! when the environment disables it (FI_SHM_DISABLE_CMA, process-wide);
//! the pushed path's hostile senders are data_pushes.rs and
//! silent_pusher.rs.
#![allow(unsafe_code)]

mod common;
use common::forge::Pair;
use common::ofi;

use ofi::consts::*;
use ofi::errno;

/// A sender whose RTS announces more bytes than its ranges hold: the
/// receiver's cooperative copy comes up short in every chunk past the
/// ranges' end, and the receive fails (FI_EIO) instead of completing with
/// bytes that never arrived.
#[test]
fn a_rendezvous_copied_short_fails_the_receive() {
    // The cross-process copy is this test's subject: it runs even where
    // the environment disables it for the rest of the suite (the
    // constrained-shm stage); FI_SHM_RING_SLOTS still applies.
    std::env::remove_var("FI_SHM_DISABLE_CMA");
    let p = Pair::new();
    let total = 1usize << 20;
    // The sender's memory: 200 KiB, a part of the 1 MiB the RTS announces
    // (the first 128 KiB chunk is whole, the second short, the rest empty).
    let src: Vec<u8> = (0..200 << 10).map(|i| (i % 251) as u8).collect();
    let mut rx = vec![0u8; total];
    // SAFETY: rx outlives the receive; we wait for its completion.
    unsafe { p.b.recv(rx.as_mut_ptr(), rx.len(), FI_ADDR_UNSPEC, 7) }.unwrap();
    p.inject_rts(total as u64, 0x55, (src.as_ptr() as u64, src.len() as u64));
    for _ in 0..10 {
        p.b.progress();
    }
    match p.wait(7) {
        Ok(e) => panic!("a receive completed with {} bytes never sent", e.len),
        Err(e) => assert_eq!(e.err, errno::FI_EIO),
    }
    assert_eq!(&rx[..64 << 10], &src[..64 << 10], "the whole chunk landed");
}
