//! FI_MORE: sends and RMA posted with the flag wait in their connection
//! and leave together with the next post made without it (in one
//! `sendmsg`), or at the sender's next progress call; order is kept. A
//! sender that never calls again after a FI_MORE post would leave its
//! bytes behind, so the tests check both ways out, and that nothing
//! leaves before.
#![allow(unsafe_code)]

mod common;

use common::{loopback_offer, readable, Rdm};
use ofi_core::consts::*;
use ofi_core::object::{RmaDir, RmaOp, SendOp};
use ofi_core::util::cq::CqEntry;
use ofi_core::util::iov::IoVec;
use ofi_core::util::mr::MrAttr;
use ofi_core::util::rma::RmaIov;
use ofi_core::Info;
use std::time::{Duration, Instant};

fn offer() -> Info {
    let mut h = Info::hints();
    h.caps = FI_MSG | FI_RMA;
    h.ep_attr.ep_type = ep_type::FI_EP_RDM;
    h.fabric_attr.prov_name = Some("tcp".into());
    h.addr_format = addr_format::FI_SOCKADDR_IN;
    h.domain_attr.mr_mode =
        mr_mode::FI_MR_VIRT_ADDR | mr_mode::FI_MR_PROV_KEY | mr_mode::FI_MR_ALLOCATED;
    loopback_offer(&h)
}

/// Posts an 8-byte send of `msg` to `dest` with `flags`.
fn send(a: &Rdm, msg: &[u8; 8], dest: u64, ctx: usize, flags: u64) {
    let iov = [IoVec {
        base: msg.as_ptr() as usize,
        len: msg.len(),
    }];
    let op = SendOp {
        iov: &iov,
        desc: &[],
        dest,
        tag: 0,
        data: 0,
        context: ctx,
        flags: FI_COMPLETION | flags,
        tagged: false,
    };
    // SAFETY: the callers' messages outlive the sends (they wait for them).
    unsafe { a.ep.post_send(&op) }.expect("post_send");
}

/// Receive contexts completed on `ep`'s CQ within `d`, driving only `ep`
/// (and `also`, when given).
fn completions(ep: &Rdm, also: Option<&Rdm>, d: Duration, want: usize) -> Vec<usize> {
    let mut got = Vec::new();
    let end = Instant::now() + d;
    let mut e = [CqEntry::default(); 8];
    while Instant::now() < end && got.len() < want {
        match ep.cq.read(&mut e) {
            Ok(n) => got.extend(e[..n].iter().map(|x| x.op_context)),
            Err(err) => assert!(err.is_again(), "cq read: {err}"),
        }
        if let Some(o) = also {
            o.ep.progress();
        }
    }
    got
}

/// Two endpoints in their own domains, connected by a first round trip.
fn pair() -> (Rdm, Rdm, u64) {
    let info = offer();
    let a = Rdm::open(&info);
    let b = Rdm::open(&info);
    let fb = a.av.insert_one(&b.ep.getname().unwrap()).unwrap();
    let mut r = [0u8; 8];
    // SAFETY: r outlives the receive, which completes below.
    unsafe { b.ep.recv(r.as_mut_ptr(), 8, FI_ADDR_UNSPEC, 900) }.unwrap();
    send(&a, b"connect!", fb, 901, 0);
    let got = completions(&b, Some(&a), Duration::from_secs(10), 1);
    assert_eq!(got, [900], "the first message arrives");
    assert_eq!(&r, b"connect!");
    let sent = completions(&a, Some(&b), Duration::from_secs(10), 1);
    assert_eq!(sent, [901], "the first send completes");
    (a, b, fb)
}

#[test]
fn held_sends_leave_with_the_next_plain_post_in_order() {
    let (a, b, fb) = pair();
    let mut r = [[0u8; 8]; 3];
    for (i, slot) in r.iter_mut().enumerate() {
        // SAFETY: r outlives the receives, which complete below.
        unsafe { b.ep.recv(slot.as_mut_ptr(), 8, FI_ADDR_UNSPEC, 10 + i) }.unwrap();
    }
    send(&a, b"first...", fb, 1, FI_MORE);
    send(&a, b"second..", fb, 2, FI_MORE);
    // a makes no call: what it holds stays with it.
    let early = completions(&b, None, Duration::from_millis(200), 1);
    assert!(early.is_empty(), "held sends arrived early: {early:?}");
    send(&a, b"third...", fb, 3, 0);
    let got = completions(&b, Some(&a), Duration::from_secs(10), 3);
    assert_eq!(got, [10, 11, 12], "all three arrive, in order");
    assert_eq!(&r, &[*b"first...", *b"second..", *b"third..."]);
    let mut sent = completions(&a, None, Duration::from_secs(10), 3);
    sent.sort_unstable();
    assert_eq!(sent, [1, 2, 3], "the sends complete");
}

#[test]
fn a_held_send_leaves_at_the_next_progress_call() {
    let (a, b, fb) = pair();
    let mut r = [0u8; 8];
    // SAFETY: r outlives the receive, which completes below.
    unsafe { b.ep.recv(r.as_mut_ptr(), 8, FI_ADDR_UNSPEC, 20) }.unwrap();
    send(&a, b"lonely..", fb, 5, FI_MORE);
    let early = completions(&b, None, Duration::from_millis(200), 1);
    assert!(early.is_empty(), "a held send arrived early: {early:?}");
    // Reading a's CQ drives a: the send leaves without another post.
    let got = completions(&b, Some(&a), Duration::from_secs(10), 1);
    assert_eq!(got, [20]);
    assert_eq!(&r, b"lonely..");
}

#[test]
fn a_held_write_lands_before_the_message_that_follows_it() {
    let (a, b, fb) = pair();
    let mut region = vec![0u8; 4096];
    // SAFETY: `region` outlives the registration (dropped at the end).
    let mr = unsafe {
        b.domain.mr_reg(&MrAttr {
            iov: vec![(region.as_mut_ptr() as usize, region.len())],
            access: FI_REMOTE_WRITE,
            requested_key: 0,
            offset: 0,
        })
    }
    .expect("mr_reg");
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
    let iov = [IoVec {
        base: data.as_ptr() as usize,
        len: data.len(),
    }];
    let rma = [RmaIov {
        addr: region.as_ptr() as u64,
        len: data.len(),
        key: mr.key(),
    }];
    let op = RmaOp {
        iov: &iov,
        desc: &[],
        addr: fb,
        rma_iov: &rma,
        data: 0,
        context: 30,
        flags: FI_COMPLETION | FI_MORE,
        dir: RmaDir::Write,
    };
    let mut r = [0u8; 8];
    // SAFETY: r outlives the receive, `data` the write; both complete below.
    unsafe {
        b.ep.recv(r.as_mut_ptr(), 8, FI_ADDR_UNSPEC, 31).unwrap();
        a.ep.post_rma(&op).expect("post_rma");
    }
    let early = completions(&b, None, Duration::from_millis(200), 1);
    assert!(early.is_empty(), "unexpected completions: {early:?}");
    assert!(region.iter().all(|&x| x == 0), "a held write landed early");
    send(&a, b"written!", fb, 32, 0);
    let got = completions(&b, Some(&a), Duration::from_secs(10), 1);
    assert_eq!(got, [31]);
    assert_eq!(&r, b"written!");
    assert!(region == data, "the write landed before its message");
    let mut done = completions(&a, Some(&b), Duration::from_secs(10), 2);
    done.sort_unstable();
    assert_eq!(done, [30, 32], "the write and the send complete");
    drop(mr);
}

#[test]
fn a_waiter_does_not_sleep_on_held_bytes() {
    let (a, b, fb) = pair();
    let fd = a.cq.wait_fd().expect("a wait fd");
    for round in 0..4usize {
        // A sleep on the wait fd first: the socket goes back in the poller,
        // watched for reading only.
        a.cq.trywait().expect("nothing pending: a may sleep");
        assert!(!readable(fd, 20), "nothing to wake a yet");
        let mut buf = [0u8; 8];
        // SAFETY: buf outlives the receive, which completes below.
        unsafe { b.ep.recv(buf.as_mut_ptr(), 8, FI_ADDR_UNSPEC, 40 + round) }.unwrap();
        send(&a, b"sleeper.", fb, 50 + round, FI_MORE);
        // About to sleep with a send held back: trywait must refuse (so the
        // waiter drives it out), or the fd must wake it.
        match a.cq.trywait() {
            Err(e) => assert!(e.is_again(), "trywait: {e}"),
            Ok(()) => assert!(readable(fd, 2000), "a waiter slept on held bytes"),
        }
        let got = completions(&b, Some(&a), Duration::from_secs(10), 1);
        assert_eq!(got, [40 + round]);
        assert_eq!(&buf, b"sleeper.");
        let sent = completions(&a, None, Duration::from_secs(10), 1);
        assert_eq!(sent, [50 + round]);
    }
}
