//! A multi-receive buffer is released (FI_MULTI_RECV, fi_cq(3): "consumed
//! and released") by the last of its messages to complete, not by the
//! one that claimed its last room: with cross-process copies refused
//! (FI_SHM_DISABLE_CMA) an earlier large message still lands by DATA
//! pushes after a later small one has completed, and the release used to
//! go on the small one while the buffer was still being written. Its own
//! process: the environment is process-wide.
#![allow(unsafe_code)]

mod common;

use common::rdm::*;
use ofi_core::consts::*;
use ofi_core::object::RecvOp;
use ofi_core::util::iov::IoVec;
use std::time::{Duration, Instant};

const BUF: usize = 64 << 10;
/// Over a bounce buffer: a rendezvous, its data pushed in chunks.
const LARGE: usize = 40_000;
/// Under a bounce buffer: delivered as it is read.
const SMALL: usize = 20_000;

#[test]
fn the_last_message_to_land_releases_a_multi_receive_buffer() {
    std::env::set_var("FI_SHM_DISABLE_CMA", "1");
    let info = shm_offer(FI_MSG | FI_MULTI_RECV, None);
    let a = Rdm::open(&info, 1);
    let b = Rdm::open(&info, 2);
    let fb = a.av.insert_one(&b.ep.getname().unwrap()).unwrap();
    // Less than this left: the buffer is done (4 KiB remain after both).
    b.ep.setopt(opt::FI_OPT_MIN_MULTI_RECV, 8192).unwrap();
    let mut buf = vec![0u8; BUF];
    let iov = [IoVec {
        base: buf.as_mut_ptr() as usize,
        len: BUF,
    }];
    let op = RecvOp {
        iov: &iov,
        desc: &[],
        src: FI_ADDR_UNSPEC,
        tag: 0,
        ignore: 0,
        context: 0xb0,
        flags: FI_MULTI_RECV | FI_COMPLETION,
        tagged: false,
    };
    // SAFETY: buf outlives the receive, whose release is awaited below.
    unsafe { b.ep.post_recv(&op) }.unwrap();
    let large: Vec<u8> = (0..LARGE).map(|i| (i % 241) as u8 + 1).collect();
    let small: Vec<u8> = (0..SMALL).map(|i| (i % 239) as u8 + 1).collect();
    // SAFETY: both outlive their sends, awaited below.
    unsafe {
        a.ep.send(large.as_ptr(), LARGE, fb, 0xa1).unwrap();
        a.ep.send(small.as_ptr(), SMALL, fb, 0xa2).unwrap();
    }
    let (mut sa, mut sb) = (Vec::new(), Vec::new());
    let deadline = Instant::now() + Duration::from_secs(20);
    while sb.len() < 2 || sa.len() < 2 {
        assert!(
            Instant::now() < deadline,
            "not all completed: a {sa:?}, b {sb:?}"
        );
        poll(&a.cq, &mut sa);
        poll(&b.cq, &mut sb);
    }
    let got: Vec<CqTaggedEntryView> = sb
        .into_iter()
        .map(|d| {
            let e = ok(d, "a message into the multi-receive buffer");
            CqTaggedEntryView {
                len: e.len,
                off: e.buf - buf.as_ptr() as usize,
                released: e.flags & FI_MULTI_RECV != 0,
            }
        })
        .collect();
    let released: Vec<&CqTaggedEntryView> = got.iter().filter(|e| e.released).collect();
    assert_eq!(released.len(), 1, "one release: {got:?}");
    assert!(
        got.last().is_some_and(|e| e.released),
        "the release comes with the last completion: {got:?}"
    );
    let large_at = got
        .iter()
        .find(|e| e.len == LARGE)
        .expect("the large message")
        .off;
    let small_at = got
        .iter()
        .find(|e| e.len == SMALL)
        .expect("the small message")
        .off;
    assert!(
        buf[large_at..large_at + LARGE] == large[..],
        "the large message"
    );
    assert!(
        buf[small_at..small_at + SMALL] == small[..],
        "the small message"
    );
}

#[derive(Debug)]
struct CqTaggedEntryView {
    len: usize,
    off: usize,
    released: bool,
}
