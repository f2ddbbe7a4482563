//! A hostile peer writes malformed entries straight into an shm endpoint's
//! ring: each is dropped with a logged reason, nothing panics, and the next
//! well-formed message arrives intact.
#![allow(unsafe_code)]

mod common;
use common::forge::Pair;
use common::ofi;

use ofi::consts::*;
use ofi::*;
use ofi_wire::shm::{flag, op, Entry, Repr};
use std::time::{Duration, Instant};

#[test]
fn malformed_ring_entries_are_dropped_and_the_endpoint_survives() {
    let Pair {
        cq,
        a,
        b,
        fb,
        seg,
        cached,
        ..
    } = Pair::new();
    let hostile = [
        Repr {
            op: 99,
            ..Default::default()
        },
        Repr {
            op: op::INLINE,
            len: 60_000,
            total: 60_000,
            ..Default::default()
        },
        Repr {
            op: op::INLINE,
            len: 4,
            total: 9,
            ..Default::default()
        },
        Repr {
            op: op::BOUNCE,
            total: 100,
            cookie: 1 << 40,
            ..Default::default()
        },
        Repr {
            op: op::BOUNCE,
            total: 1 << 30,
            cookie: 0,
            ..Default::default()
        },
        Repr {
            op: op::RTS,
            iov_cnt: 0,
            total: 1 << 20,
            ..Default::default()
        },
        Repr {
            op: op::RTS,
            iov_cnt: 200,
            total: 1 << 20,
            ..Default::default()
        },
        Repr {
            op: op::ACK,
            cookie: 0xdead_beef,
            ..Default::default()
        },
        Repr {
            op: op::NACK,
            cookie: 0x1234_5678_9abc,
            ..Default::default()
        },
        Repr {
            op: op::DATA,
            len: 16,
            total: 0,
            cookie: 77,
            ..Default::default()
        },
        Repr {
            op: op::CTS,
            tag: 1 << 33,
            data: 5,
            cookie: 3,
            ..Default::default()
        },
        Repr {
            op: op::INLINE,
            flags: 0x80,
            len: 1,
            total: 1,
            ..Default::default()
        },
    ];
    // The ring may hold fewer entries than there are (FI_SHM_RING_SLOTS):
    // when it is full, b reads (and drops) what it holds before the next.
    let deadline = Instant::now() + Duration::from_secs(10);
    for r in hostile {
        while seg
            .msg_ring()
            .push_with(&cached, |buf| r.emit(&mut Entry::new_unchecked(buf)))
            .is_err()
        {
            assert!(Instant::now() < deadline, "b never made room in its ring");
            b.progress();
        }
    }
    // Let b chew through them with nothing posted.
    for _ in 0..10 {
        b.progress();
    }
    let mut rx = vec![0u8; 64];
    let msg = b"still alive";
    // SAFETY: rx and msg outlive the operations; we wait for both completions.
    unsafe {
        b.recv(rx.as_mut_ptr(), rx.len(), FI_ADDR_UNSPEC, 1)
            .unwrap();
        a.send(msg.as_ptr(), msg.len(), fb, 2).unwrap();
    }
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while got.len() < 2 && Instant::now() < deadline {
        let mut e = [CqTaggedEntry::default(); 4];
        match cq.read(&mut e) {
            Ok(n) => got.extend_from_slice(&e[..n]),
            Err(e) if e.is_again() => {}
            Err(e) => panic!("unexpected error: {e}: {:?}", cq.readerr()),
        }
    }
    let r = got
        .iter()
        .find(|e| e.op_context == 1)
        .expect("the good message arrives");
    assert_eq!(r.len, msg.len());
    assert_eq!(&rx[..msg.len()], msg);
}

/// Another endpoint of the node guesses the cookie of `a`'s pending read
/// (cookies are sequential) and answers it with bytes of its own: the
/// answer is dropped, and the read ends with its target's real answer.
#[test]
fn a_forged_answer_does_not_complete_a_read() {
    let p = Pair::new();
    let mut buf = [0u8; 4];
    // SAFETY: buf outlives the read; we wait for its completion.
    unsafe { p.a.read(buf.as_mut_ptr(), buf.len(), p.fb, 0, 1234, 3) }.unwrap();
    // The first cookie of a's one-sided table: generation 1 (with the
    // table's mark), slot 0.
    let cookie = 0x8000_0001u64 << 32;
    p.inject_a(
        &Repr {
            op: op::RMA_RESP,
            flags: flag::LAST,
            len: 4,
            src: (u64::from(p.b_pid) << 32) | 0xdead,
            cookie,
            ..Default::default()
        },
        b"evil",
    );
    for _ in 0..10 {
        p.a.progress();
    }
    let mut e = [CqTaggedEntry::default(); 1];
    let early = p.cq.read(&mut e);
    assert!(
        early.as_ref().is_err_and(|e| e.is_again()),
        "the forged answer completed the read: {early:?}"
    );
    // b never registered key 1234: its answer fails the read.
    let err = p.wait(3).expect_err("b refuses the key");
    assert_eq!(err.err, errno::FI_EKEYREJECTED);
    assert_ne!(&buf, b"evil");
}
