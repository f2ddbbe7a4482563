//! A receive filled by DATA pushes (FI_SHM_DISABLE_CMA: no cross-process
//! copy) takes each byte of the message once: a duplicated chunk from its
//! sender is dropped instead of counting twice and completing the receive
//! before the rest arrived. Its own process: the environment is
//! process-wide.
#![allow(unsafe_code)]

mod common;
use common::forge::Pair;
use common::ofi;

use ofi::consts::*;
use ofi_wire::shm::{op, Repr};

#[test]
fn a_duplicated_data_chunk_does_not_complete_a_receive_early() {
    std::env::set_var("FI_SHM_DISABLE_CMA", "1");
    let p = Pair::new();
    let total = 8000usize;
    let msg: Vec<u8> = (0..total).map(|i| (i % 253) as u8).collect();
    let mut rx = vec![0u8; total];
    // SAFETY: rx outlives the receive; we wait for its completion.
    unsafe { p.b.recv(rx.as_mut_ptr(), rx.len(), FI_ADDR_UNSPEC, 5) }.unwrap();
    // An RTS from a (its ranges never read: b cannot copy, it answers NACK).
    let cookie = 0x42;
    p.inject_rts(total as u64, cookie, (0, total as u64));
    let data = |off: usize, len: usize| {
        p.inject(
            &Repr {
                op: op::DATA,
                len: len as u32,
                src: p.a_id,
                total: off as u64,
                cookie,
                ..Default::default()
            },
            &msg[off..off + len],
        );
    };
    for _ in 0..4 {
        p.b.progress();
    }
    // The first half, twice: as many bytes as the message.
    data(0, total / 2);
    data(0, total / 2);
    for _ in 0..4 {
        p.b.progress();
    }
    let mut e = [ofi::CqTaggedEntry::default(); 1];
    let early = p.cq.read(&mut e);
    assert!(
        early.as_ref().is_err_and(|e| e.is_again()),
        "the receive completed on half its bytes: {early:?}"
    );
    data(total / 2, total / 2);
    let done = p.wait(5).expect("the receive completes");
    assert_eq!(done.len, total);
    assert!(rx == msg, "the bytes differ");
}
