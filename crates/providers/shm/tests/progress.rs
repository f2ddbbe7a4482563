//! FI_PROGRESS_MANUAL on shm (issue 16 item 10): asked for, it is what the
//! offer says for both control and data, and it is what happens: a
//! receiving endpoint whose application makes no call on it gets nothing
//! (its buffers untouched, the sender's rendezvous send not completed),
//! however long the sender keeps going; its first CQ read delivers.
#![allow(unsafe_code)]

mod common;

use common::ofi::getinfo;
use common::rdm::*;
use ofi_core::consts::*;
use ofi_core::Info;
use std::time::{Duration, Instant};

const BIG: usize = 1 << 20;

fn manual_offer() -> Info {
    let mut h = Info::hints();
    h.caps = FI_TAGGED;
    h.ep_attr.ep_type = ep_type::FI_EP_RDM;
    h.fabric_attr.prov_name = Some("shm".into());
    h.domain_attr.control_progress = progress::FI_PROGRESS_MANUAL;
    h.domain_attr.data_progress = progress::FI_PROGRESS_MANUAL;
    getinfo(FI_VERSION_CURRENT, None, None, 0, Some(&h))
        .expect("shm offer")
        .remove(0)
}

#[test]
fn manual_progress_is_advertised_when_asked() {
    let o = manual_offer();
    assert_eq!(o.domain_attr.control_progress, progress::FI_PROGRESS_MANUAL);
    assert_eq!(o.domain_attr.data_progress, progress::FI_PROGRESS_MANUAL);
    // Asked for nothing: what shm does by default.
    let mut h = Info::hints();
    h.fabric_attr.prov_name = Some("shm".into());
    let d = getinfo(FI_VERSION_CURRENT, None, None, 0, Some(&h))
        .unwrap()
        .remove(0);
    assert_eq!(d.domain_attr.data_progress, progress::FI_PROGRESS_MANUAL);
}

#[test]
fn nothing_progresses_without_the_receivers_calls() {
    let info = manual_offer();
    let a = Rdm::open(&info, 1);
    let b = Rdm::open(&info, 2);
    let fb = a.av.insert_one(&b.ep.getname().unwrap()).unwrap();
    let mut small = [0u8; 8];
    let mut big = vec![0u8; BIG];
    let data: Vec<u8> = (0..BIG).map(|i| (i % 251) as u8 + 1).collect();
    // SAFETY: the buffers outlive the receives and the send, awaited below.
    unsafe {
        b.ep.trecv(small.as_mut_ptr(), 8, FI_ADDR_UNSPEC, 1, 0, 0xb1)
            .unwrap();
        b.ep.trecv(big.as_mut_ptr(), BIG, FI_ADDR_UNSPEC, 2, 0, 0xb2)
            .unwrap();
    }
    a.ep.tinject(b"8 bytes!", fb, 1).unwrap();
    // SAFETY: data (BIG bytes) outlives the send, whose completion is
    // awaited below.
    unsafe { a.ep.tsend(data.as_ptr(), BIG, fb, 2, 0xa2) }.unwrap();
    // The sender keeps making progress for a while; the receiver's
    // application makes no call on b.
    let mut sa = Vec::new();
    let until = Instant::now() + Duration::from_millis(300);
    while Instant::now() < until {
        poll(&a.cq, &mut sa);
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(sa.is_empty(), "the rendezvous send completed: {sa:?}");
    assert_eq!(
        small, [0u8; 8],
        "the small receive was filled without a call"
    );
    assert!(
        big.iter().all(|&x| x == 0),
        "the large receive was written without a call"
    );
    // The receiver's first calls deliver both.
    let mut sb = Vec::new();
    let e = ok(
        wait_ctx(&b.cq, &mut sb, 0xb1, Duration::from_secs(20), "small"),
        "small",
    );
    assert_eq!((e.len, &small), (8, b"8 bytes!"));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !sb.iter().any(|d| d.ctx() == 0xb2) || !sa.iter().any(|d| d.ctx() == 0xa2) {
        assert!(
            Instant::now() < deadline,
            "the large message did not arrive"
        );
        poll(&a.cq, &mut sa);
        poll(&b.cq, &mut sb);
    }
    assert!(big == data, "the large message arrived changed");
}
