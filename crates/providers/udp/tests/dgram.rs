//! DGRAM endpoints over loopback: messages and tagged messages with source
//! addresses, remote CQ data, inject and iov; messages that arrive before
//! their receive; truncation; the size limit of one datagram; and auth
//! keys (endpoints of different keys exchange nothing).
#![allow(unsafe_code)]

mod common;

use common::*;
use ofi_core::consts::*;
use ofi_core::error::errno;
use ofi_core::object::{RecvOp, SendOp};
use ofi_core::util::iov::IoVec;
use ofi_core::Info;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(10);

fn dgram() -> Info {
    let mut i = offer(ep_type::FI_EP_DGRAM, "127.0.0.1");
    i.caps |= FI_TAGGED | FI_SOURCE;
    i
}

fn pair(info: &Info) -> (Ep, Ep, u64, u64) {
    let a = Ep::open_ctx(info, 0xa);
    let b = Ep::open_ctx(info, 0xb);
    let to_b = a.insert(&b);
    let to_a = b.insert(&a);
    (a, b, to_a, to_b)
}

/// Posts a receive of `buf` on `ep`.
fn recv(ep: &Ep, buf: &mut [u8], tagged: Option<(u64, u64)>, ctx: usize) {
    let iov = [IoVec {
        base: buf.as_mut_ptr() as usize,
        len: buf.len(),
    }];
    let op = RecvOp {
        iov: &iov,
        desc: &[],
        src: FI_ADDR_UNSPEC,
        tag: tagged.map_or(0, |t| t.0),
        ignore: tagged.map_or(0, |t| t.1),
        context: ctx,
        flags: FI_COMPLETION,
        tagged: tagged.is_some(),
    };
    // SAFETY: the buffers outlive the receive (each test waits for it).
    unsafe { ep.ep.post_recv(&op) }.expect("post_recv");
}

fn send(
    ep: &Ep,
    iov: &[IoVec],
    dest: u64,
    tag: Option<u64>,
    data: Option<u64>,
    ctx: usize,
) -> ofi_core::error::Result<()> {
    let op = SendOp {
        iov,
        desc: &[],
        dest,
        tag: tag.unwrap_or(0),
        data: data.unwrap_or(0),
        context: ctx,
        flags: FI_COMPLETION | if data.is_some() { FI_REMOTE_CQ_DATA } else { 0 },
        tagged: tag.is_some(),
    };
    // SAFETY: the ranges are readable for the call (DGRAM sends go at once).
    unsafe { ep.ep.post_send(&op) }
}

fn readfrom(ep: &Ep, timeout: Duration) -> Option<(Done, u64)> {
    let deadline = Instant::now() + timeout;
    let mut e = [ofi_core::util::cq::CqTaggedEntry::default(); 1];
    let mut src = [0u64; 1];
    loop {
        match ep.cq.readfrom(&mut e, &mut src) {
            Ok(1) => return Some((Done::Ok(e[0]), src[0])),
            Err(x) if x.code() == errno::FI_EAVAIL => {
                return Some((Done::Err(ep.cq.readerr().expect("readerr")), 0))
            }
            _ if Instant::now() >= deadline => return None,
            _ => std::thread::yield_now(),
        }
    }
}

#[test]
fn messages_and_tagged_messages_carry_source_data_and_iov() {
    let (a, b, to_a, to_b) = pair(&dgram());
    let mut rb = vec![0u8; 100];
    recv(&b, &mut rb, None, 1);
    let mut p1 = pattern(1, 30);
    let p2 = pattern(2, 20);
    let iov = [IoVec::from_slice(&p1), IoVec::from_slice(&p2)];
    send(&a, &iov, to_b, None, Some(0xdada), 7).unwrap();
    let (d, _) = readfrom(&a, T).expect("send completion");
    assert_eq!(ok(d, "send").op_context, 7);
    let (d, src) = readfrom(&b, T).expect("receive completion");
    let e = ok(d, "recv");
    assert_eq!((e.op_context, e.len, e.data), (1, 50, 0xdada));
    assert!(e.flags & FI_REMOTE_CQ_DATA != 0 && e.flags & FI_MSG != 0);
    assert_eq!(src, to_a, "FI_SOURCE names the sender");
    p1.extend_from_slice(&p2);
    assert_eq!(&rb[..50], &p1[..]);

    // Tagged: the receive for tag 5 takes the second message, not the first.
    let mut t5 = vec![0u8; 64];
    let mut any = vec![0u8; 64];
    recv(&b, &mut t5, Some((5, 0)), 2);
    let m4 = pattern(4, 10);
    let m5 = pattern(5, 11);
    send(&a, &[IoVec::from_slice(&m4)], to_b, Some(4), None, 8).unwrap();
    send(&a, &[IoVec::from_slice(&m5)], to_b, Some(5), None, 9).unwrap();
    let (d, _) = readfrom(&b, T).expect("tagged completion");
    let e = ok(d, "tagged recv");
    assert_eq!((e.op_context, e.tag, e.len), (2, 5, 11));
    assert_eq!(&t5[..11], &m5[..]);
    // Tag 4 waited as unexpected: a receive ignoring the low bits takes it.
    recv(&b, &mut any, Some((0, 0xf)), 3);
    let (d, _) = readfrom(&b, T).expect("unexpected tagged");
    let e = ok(d, "unexpected");
    assert_eq!((e.op_context, e.tag, e.len), (3, 4, 10));
    assert_eq!(&any[..10], &m4[..]);
    // Inject: no completion, the buffer reusable at once.
    let mut ib = vec![0u8; 16];
    recv(&b, &mut ib, None, 4);
    let mut inj = pattern(6, 16);
    a.ep.inject(&inj, to_b).unwrap();
    inj.fill(0);
    let (d, _) = readfrom(&b, T).expect("inject arrives");
    assert_eq!(ok(d, "inject").len, 16);
    assert_eq!(ib, pattern(6, 16));
}

#[test]
fn a_message_larger_than_its_receive_is_truncated_and_one_beyond_a_datagram_refused() {
    let info = dgram();
    let max = info.ep_attr.max_msg_size;
    let (a, b, _to_a, to_b) = pair(&info);
    let mut small = vec![0u8; 8];
    recv(&b, &mut small, None, 1);
    let m = pattern(3, 100);
    send(&a, &[IoVec::from_slice(&m)], to_b, None, None, 2).unwrap();
    let (d, _) = readfrom(&b, T).expect("completion");
    match d {
        Done::Err(e) => {
            assert_eq!((e.err, e.olen, e.len), (errno::FI_ETRUNC, 92, 8));
            assert_eq!(&small[..], &m[..8]);
        }
        Done::Ok(e) => panic!("a truncated message completed: {e:?}"),
    }
    // One datagram's worth goes; one byte more is refused at once.
    let big = pattern(9, max);
    let mut rb = vec![0u8; max];
    recv(&b, &mut rb, None, 3);
    send(&a, &[IoVec::from_slice(&big)], to_b, None, None, 4).unwrap();
    let (d, _) = readfrom(&b, T).expect("completion of the largest message");
    assert_eq!(ok(d, "largest").len, max);
    assert_eq!(rb, big);
    let over = vec![0u8; max + 1];
    let e = send(&a, &[IoVec::from_slice(&over)], to_b, None, None, 5).unwrap_err();
    assert_eq!(e.code(), errno::FI_EMSGSIZE);
}

#[test]
fn endpoints_of_different_keys_exchange_nothing() {
    let keyed = |k: &[u8]| {
        let mut i = dgram();
        i.ep_attr.auth_key = Some(k.to_vec());
        i
    };
    // Same key: delivered.
    let (a, b, _, to_b) = pair(&keyed(b"job-1"));
    let mut rb = vec![0u8; 32];
    recv(&b, &mut rb, None, 1);
    let m = pattern(1, 32);
    send(&a, &[IoVec::from_slice(&m)], to_b, None, None, 2).unwrap();
    let (d, _) = readfrom(&b, T).expect("same key");
    assert_eq!(ok(d, "same key").len, 32);
    assert_eq!(rb, m);
    // Other key, or none: the datagram is dropped; the receive waits.
    for (ka, kb) in [
        (Some(&b"job-1"[..]), Some(&b"job-2"[..])),
        (Some(b"job-1"), None),
        (None, Some(b"job-2")),
    ] {
        let ia = ka.map_or_else(dgram, keyed);
        let ib = kb.map_or_else(dgram, keyed);
        let a = Ep::open(&ia);
        let b = Ep::open(&ib);
        let to_b = a.insert(&b);
        let mut rb = vec![0u8; 32];
        recv(&b, &mut rb, None, 1);
        for i in 0..8 {
            send(&a, &[IoVec::from_slice(&m)], to_b, None, None, 10 + i).unwrap();
        }
        assert!(
            readfrom(&b, Duration::from_millis(300)).is_none(),
            "keys {ka:?} / {kb:?}: a datagram crossed"
        );
        assert_eq!(rb, vec![0u8; 32], "bytes landed");
        b.ep.cancel(1).unwrap();
    }
}

#[test]
fn empty_unexpected_datagrams_are_bounded_too() {
    let info = dgram();
    let (a, b, _to_a, to_b) = pair(&info);
    // Empty tagged datagrams that no receive takes, paced so that b keeps
    // up: each costs its entry, so past the bound the oldest are dropped
    // (they used to count nothing and were all kept).
    const N: u64 = 40_000;
    // A receive none of them matches: b reads its socket while one is
    // posted, keeping what no receive takes as unexpected.
    let mut other = [0u8; 1];
    recv(&b, &mut other, Some((u64::MAX, 0)), 3);
    let mut e = [ofi_core::util::cq::CqTaggedEntry::default(); 64];
    let mut src = [0u64; 64];
    for t in 0..N {
        send(&a, &[], to_b, Some(t), None, 0).expect("send");
        if t % 32 == 31 {
            while matches!(a.cq.readfrom(&mut e, &mut src), Ok(n) if n > 0) {}
            // Drives b, which has nothing to complete.
            let _ = b.cq.readfrom(&mut e, &mut src);
        }
    }
    let _ = b.cq.readfrom(&mut e, &mut src);
    let mut last = [0u8; 1];
    recv(&b, &mut last, Some((N - 1, 0)), 1);
    let Some((Done::Ok(c), _)) = readfrom(&b, T) else {
        panic!("the newest unexpected datagram was not kept");
    };
    assert_eq!((c.op_context, c.tag, c.len), (1, N - 1, 0));
    let mut first = [0u8; 1];
    for t in 0..16 {
        recv(&b, &mut first, Some((t, 0)), 2);
    }
    assert!(
        readfrom(&b, Duration::from_millis(300)).is_none(),
        "the oldest empty datagrams were kept past the bound"
    );
}
