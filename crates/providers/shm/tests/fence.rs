//! FI_FENCE waits for the operations posted before it to the same peer
//! endpoint (fi_msg(3), fi_rma(3)), not for those to other peers: a
//! rendezvous send to a peer that has posted no receive must not hold a
//! fenced send to another peer (it returned -FI_EAGAIN for as long as the
//! first peer posted nothing), while a fenced send to that same peer does
//! wait for it.
#![allow(unsafe_code)]

mod common;

use common::rdm::*;
use ofi_core::consts::*;
use ofi_core::object::SendOp;
use ofi_core::util::iov::IoVec;
use std::time::{Duration, Instant};

/// Larger than a bounce buffer: a rendezvous, held until b posts a receive.
const BIG: usize = 1 << 20;

fn fenced(ep: &ofi_core::Endpoint, data: &[u8], dest: u64, context: usize) -> ofi_core::Result<()> {
    let iov = [IoVec::from_slice(data)];
    let op = SendOp {
        iov: &iov,
        desc: &[],
        dest,
        tag: 7,
        data: 0,
        context,
        flags: FI_COMPLETION | FI_FENCE,
        tagged: true,
    };
    // SAFETY: data outlives the send, which completes before the test ends.
    unsafe { ep.post_send(&op) }
}

#[test]
fn a_fence_waits_for_its_own_peer_only() {
    let info = shm_offer(FI_TAGGED, None);
    let a = Rdm::open(&info, 1);
    let b = Rdm::open(&info, 2);
    let c = Rdm::open(&info, 3);
    let fb = a.av.insert_one(&b.ep.getname().unwrap()).unwrap();
    let fc = a.av.insert_one(&c.ep.getname().unwrap()).unwrap();
    let big: Vec<u8> = (0..BIG).map(|i| (i % 249) as u8).collect();
    // SAFETY: big outlives the send, awaited below.
    unsafe { a.ep.tsend(big.as_ptr(), BIG, fb, 1, 0xa1) }.unwrap();
    let mut sa = Vec::new();
    for _ in 0..50 {
        poll(&a.cq, &mut sa);
        b.ep.progress();
    }
    assert!(sa.is_empty(), "the rendezvous completed with no receive");

    // To another peer: admitted at once, and completes.
    fenced(&a.ep, b"to c....", fc, 0xa2).expect("a fenced send to another peer is admitted");
    let mut rc = [0u8; 8];
    // SAFETY: rc outlives the receive, awaited below.
    unsafe { c.ep.trecv(rc.as_mut_ptr(), 8, FI_ADDR_UNSPEC, 7, 0, 0xc1) }.unwrap();
    let mut sc = Vec::new();
    ok(
        wait_ctx(&c.cq, &mut sc, 0xc1, Duration::from_secs(10), "c's receive"),
        "c's receive",
    );
    assert_eq!(&rc, b"to c....");

    // To the same peer: held while the rendezvous is.
    let r = fenced(&a.ep, b"to b....", fb, 0xa3);
    assert!(
        r.as_ref().is_err_and(|e| e.is_again()),
        "a fenced send to the peer with a send in flight must wait: {r:?}"
    );
    let mut rb = vec![0u8; BIG];
    // SAFETY: rb outlives the receive, awaited below.
    unsafe { b.ep.trecv(rb.as_mut_ptr(), BIG, FI_ADDR_UNSPEC, 1, 0, 0xb1) }.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut sb = Vec::new();
    while !sa.iter().any(|d| d.ctx() == 0xa1) {
        assert!(Instant::now() < deadline, "the rendezvous did not complete");
        poll(&a.cq, &mut sa);
        poll(&b.cq, &mut sb);
    }
    assert!(rb == big, "the large message arrived changed");
    fenced(&a.ep, b"to b....", fb, 0xa3).expect("admitted once the rendezvous completed");
}
