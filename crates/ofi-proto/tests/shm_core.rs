//! The shm protocol core through its public API: entries travel between
//! two endpoints over a simulated bounded ring (no shared memory), and the
//! core's decisions and tables are checked on every path and failure the
//! provider meets: an inline message, a rendezvous answered ACK, a peer
//! that dies between RTS and copy, a NACK and the DATA pushes after it, a
//! full ring holding control answers, copies the kernel refuses. Property
//! tests hold the op table and the control queue to simple models.

use ofi_base::error::errno;
use ofi_proto::shm::path::{
    copy_error, rts_copy, send_path, write_path, CopyConfig, CopyError, RtsCopy, SendLimits,
    SendPath, WritePath,
};
use ofi_proto::shm::{
    ack, decode, nack, rma_answer, Body, CtrlQueue, Incoming, Limits, OpTable, PeerId, Push, Stray,
};
use ofi_wire::shm::{flag, op, Entry, Repr, HDR_LEN, MAX_RTS_IOV};
use proptest::prelude::*;
use std::collections::{HashMap, VecDeque};

const SLOT: usize = 4160 - 8;
const INLINE_MAX: usize = SLOT - HDR_LEN;
const LIM: Limits = Limits {
    bounce_bufs: 64,
    bounce_size: 32768,
};
const SEND: SendLimits = SendLimits {
    inline_max: INLINE_MAX,
    bounce_size: 32768,
};
const COPY: CopyConfig = CopyConfig {
    disable_cma: false,
    coop_threshold: 65536,
    coop_chunk: 131072,
};
const A: PeerId = (100 << 32) | 1;
const B: PeerId = (200 << 32) | 1;

/// A bounded ring of slots, as a peer's segment holds one.
struct Ring {
    slots: VecDeque<Vec<u8>>,
    cap: usize,
}

impl Ring {
    fn new(cap: usize) -> Self {
        Ring {
            slots: VecDeque::new(),
            cap,
        }
    }
    fn push(&mut self, r: &Repr, payload: &[u8]) -> Push {
        if self.slots.len() == self.cap {
            return Push::Full;
        }
        let mut b = vec![0u8; SLOT];
        b[HDR_LEN..HDR_LEN + payload.len()].copy_from_slice(payload);
        r.emit(&mut Entry::new_unchecked(&mut b[..]));
        self.slots.push_back(b);
        Push::Done
    }
    fn pop(&mut self) -> Option<Vec<u8>> {
        self.slots.pop_front()
    }
}

/// A pending rendezvous send as a driver keeps it.
#[derive(Debug, PartialEq)]
struct Send {
    to: PeerId,
    len: usize,
    context: usize,
}

fn rts(from: PeerId, cookie: u64, len: usize) -> (Repr, Vec<u8>) {
    let r = Repr {
        op: op::RTS,
        iov_cnt: 1,
        src: from,
        total: len as u64,
        cookie,
        ..Default::default()
    };
    let mut p = vec![0u8; 16];
    p[..8].copy_from_slice(&0x7f00_0000_0000u64.to_le_bytes());
    p[8..].copy_from_slice(&(len as u64).to_le_bytes());
    (r, p)
}

#[test]
fn an_inline_message_arrives_whole() {
    assert_eq!(send_path(11, false, false, &SEND), SendPath::Inline);
    let mut ring = Ring::new(4);
    let r = Repr {
        op: op::INLINE,
        flags: flag::TAGGED,
        src: A,
        tag: 3,
        len: 11,
        total: 11,
        ..Default::default()
    };
    assert_eq!(ring.push(&r, b"hello world"), Push::Done);
    let slot = ring.pop().unwrap();
    match decode(&slot, &LIM) {
        Ok(Incoming::Msg { meta, body }) => {
            assert_eq!((meta.from, meta.tag, meta.total), (A, 3, 11));
            assert_eq!(body, Body::Inline(b"hello world"));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_rendezvous_completes_once_on_its_ack() {
    let len = 1 << 20;
    assert_eq!(send_path(len, false, false, &SEND), SendPath::Rendezvous);
    let mut sends = OpTable::new(0);
    let cookie = sends.insert(Send {
        to: B,
        len,
        context: 9,
    });
    let (mut to_b, mut to_a) = (Ring::new(4), Ring::new(4));
    let (r, p) = rts(A, cookie, len);
    to_b.push(&r, &p);
    // B: an RTS naming A's memory; a large copy is shared with A.
    let slot = to_b.pop().unwrap();
    let Ok(Incoming::Msg {
        meta,
        body: Body::Rts {
            cookie: c,
            iov,
            cnt,
        },
    }) = decode(&slot, &LIM)
    else {
        panic!("an RTS")
    };
    assert_eq!((meta.from, c, cnt), (A, cookie, 1));
    assert_eq!(iov[0], (0x7f00_0000_0000, len as u64));
    assert_eq!(rts_copy(meta.total, false, &COPY), RtsCopy::Coop);
    to_a.push(&ack(B, c, 0), &[]);
    // A: the ACK completes the send; a duplicate completes nothing.
    to_a.push(&ack(B, c, 0), &[]);
    let mut done = Vec::new();
    while let Some(slot) = to_a.pop() {
        if let Ok(Incoming::Ack { cookie, status }) = decode(&slot, &LIM) {
            if let Some(s) = sends.take(cookie) {
                done.push((s.context, status));
            }
        }
    }
    assert_eq!(done, vec![(9, Ok(()))]);
    assert!(sends.is_empty());
}

#[test]
fn a_peer_that_dies_between_rts_and_copy_fails_exactly_its_sends() {
    let mut sends = OpTable::new(0);
    let to_b = sends.insert(Send {
        to: B,
        len: 1 << 20,
        context: 1,
    });
    let other = sends.insert(Send {
        to: 77,
        len: 1 << 20,
        context: 2,
    });
    // The sender: B died before copying. Liveness selects B's sends only.
    let mut dead = Vec::new();
    sends.take_where(|s| s.to == B, &mut dead);
    assert_eq!(dead.len(), 1);
    assert_eq!((dead[0].0, dead[0].1.context), (to_b, 1));
    assert!(sends.get(other).is_some(), "another peer's send stays");
    // An ACK that still arrives (written before B died) finds nothing.
    let mut ring = Ring::new(2);
    ring.push(&ack(B, to_b, 0), &[]);
    let Ok(Incoming::Ack { cookie, .. }) = decode(&ring.pop().unwrap(), &LIM) else {
        panic!("an ACK")
    };
    assert!(sends.take(cookie).is_none(), "a send completes once");
    // The receiver's side: the sender died before the copy (ESRCH): the
    // receive fails with FI_EIO and the ACK carries it.
    assert_eq!(copy_error(Some(3)), CopyError::Failed(errno::FI_EIO));
    ring.push(&ack(B, other, errno::FI_EIO), &[]);
    let Ok(Incoming::Ack { status, .. }) = decode(&ring.pop().unwrap(), &LIM) else {
        panic!("an ACK")
    };
    assert_eq!(status, Err(errno::FI_EIO));
}

#[test]
fn a_refused_copy_becomes_a_nack_and_data_pushes() {
    let len = 3 * INLINE_MAX + 100;
    let mut sends = OpTable::new(0);
    let cookie = sends.insert(Send {
        to: B,
        len,
        context: 4,
    });
    // B: the kernel refuses the copy (EPERM): NACK.
    assert_eq!(copy_error(Some(1)), CopyError::Refused);
    let mut to_a = Ring::new(8);
    to_a.push(&nack(B, cookie), &[]);
    let Ok(Incoming::Nack { cookie: c }) = decode(&to_a.pop().unwrap(), &LIM) else {
        panic!("a NACK")
    };
    let s = sends.get(c).expect("the NACK names the pending send");
    // A pushes the message as DATA entries; B reassembles it.
    let msg: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
    let mut to_b = Ring::new(8);
    let mut off = 0;
    while off < s.len {
        let n = (s.len - off).min(INLINE_MAX);
        let r = Repr {
            op: op::DATA,
            len: n as u32,
            src: A,
            total: off as u64,
            cookie: c,
            ..Default::default()
        };
        assert_eq!(to_b.push(&r, &msg[off..off + n]), Push::Done);
        off += n;
    }
    let mut got = vec![0u8; len];
    let mut received = 0;
    while let Some(slot) = to_b.pop() {
        let Ok(Incoming::Data {
            from,
            cookie,
            offset,
            bytes,
        }) = decode(&slot, &LIM)
        else {
            panic!("DATA")
        };
        assert_eq!((from, cookie), (A, c));
        got[offset..offset + bytes.len()].copy_from_slice(bytes);
        received += bytes.len();
    }
    assert_eq!(received, len);
    assert_eq!(got, msg);
    // Then B's ACK completes the send.
    assert!(sends.take(c).is_some());
}

#[test]
fn refused_copies_pick_the_ring_paths() {
    // A peer that refused: rendezvous copies and pulled writes are pushed.
    assert_eq!(rts_copy(1 << 20, true, &COPY), RtsCopy::Push);
    let off = CopyConfig {
        disable_cma: true,
        ..COPY
    };
    assert_eq!(rts_copy(1 << 20, false, &off), RtsCopy::Push);
    assert_eq!(write_path(1 << 20, 4000, false, false), WritePath::Chunked);
    // A target that cannot pull answers PUSH; the initiator sees it.
    let mut ring = Ring::new(2);
    let mut a = rma_answer(B, 5, 0);
    a.flags |= flag::PUSH;
    ring.push(&a, &[]);
    let Ok(Incoming::Answer { push, last, .. }) = decode(&ring.pop().unwrap(), &LIM) else {
        panic!("an answer")
    };
    assert!(push && last);
}

/// A one-sided operation as a driver keeps it: the target it went to.
#[derive(Debug, PartialEq)]
struct Rma {
    to: PeerId,
    context: usize,
}

#[test]
fn only_the_target_may_answer_a_one_sided_operation() {
    // A's read went to B; C, a third endpoint on the node, guesses the
    // cookie (they are sequential) and answers first.
    const C: PeerId = (300 << 32) | 1;
    let mut rmas = OpTable::new(1);
    let cookie = rmas.insert(Rma { to: B, context: 9 });
    let mut to_a = Ring::new(4);
    let mut forged = rma_answer(C, cookie, 0);
    forged.len = 4;
    to_a.push(&forged, b"evil");
    to_a.push(&rma_answer(B, cookie, 0), &[]);
    let mut done = Vec::new();
    let mut dropped = Vec::new();
    while let Some(slot) = to_a.pop() {
        let Ok(Incoming::Answer {
            from,
            cookie,
            last,
            bytes,
            ..
        }) = decode(&slot, &LIM)
        else {
            panic!("an answer")
        };
        match rmas.answered(cookie, from, |r: &Rma| r.to) {
            Ok(r) => {
                assert!(bytes.is_empty(), "the forged bytes were taken");
                let context = r.context;
                if last {
                    rmas.take(cookie);
                    done.push((from, context));
                }
            }
            Err(why) => dropped.push((from, why)),
        }
    }
    assert_eq!(dropped, [(C, Stray::WrongPeer { to: B })]);
    assert_eq!(done, [(B, 9)], "completed once, by its target");
    assert!(rmas.is_empty());
}

#[test]
fn a_full_ring_holds_control_answers_in_order() {
    let mut ring = Ring::new(2);
    let mut q = CtrlQueue::new();
    for c in 0..5u64 {
        q.send(A, ack(B, c, 0), &[], |_, r, p| ring.push(r, p));
    }
    assert_eq!(ring.slots.len(), 2, "the ring filled");
    assert_eq!(q.len(), 3, "the rest waits");
    let mut seen = Vec::new();
    while !q.is_empty() {
        while let Some(s) = ring.pop() {
            let Ok(Incoming::Ack { cookie, .. }) = decode(&s, &LIM) else {
                panic!()
            };
            seen.push(cookie);
        }
        q.flush(|_, r, p| ring.push(r, p));
    }
    while let Some(s) = ring.pop() {
        let Ok(Incoming::Ack { cookie, .. }) = decode(&s, &LIM) else {
            panic!()
        };
        seen.push(cookie);
    }
    assert_eq!(seen, vec![0, 1, 2, 3, 4], "in order, none lost");
}

#[test]
fn an_rts_names_at_most_its_ranges() {
    let (mut r, p) = rts(A, 1, 100);
    r.iov_cnt = MAX_RTS_IOV as u8 + 1;
    let mut ring = Ring::new(1);
    ring.push(&r, &p);
    assert!(decode(&ring.pop().unwrap(), &LIM).is_err());
}

#[derive(Debug, Clone)]
enum TableOp {
    Insert,
    Take(usize),
    TakeStale(usize),
    Fail(u8),
}

fn table_op() -> impl Strategy<Value = TableOp> {
    prop_oneof![
        3 => Just(TableOp::Insert),
        2 => any::<usize>().prop_map(TableOp::Take),
        1 => any::<usize>().prop_map(TableOp::TakeStale),
        1 => (0u8..4).prop_map(TableOp::Fail),
    ]
}

proptest! {
    /// The op table against a map: every live cookie finds its operation,
    /// taken cookies never come back, a peer's failure takes exactly its
    /// operations.
    #[test]
    fn op_table_matches_a_map(ops in proptest::collection::vec(table_op(), 1..200)) {
        let mut t = OpTable::new(0);
        let mut model: HashMap<u64, (u8, u32)> = HashMap::new();
        let mut taken: Vec<u64> = Vec::new();
        let mut n = 0u32;
        for o in ops {
            match o {
                TableOp::Insert => {
                    let peer = (n % 4) as u8;
                    let c = t.insert((peer, n));
                    prop_assert!(!model.contains_key(&c), "cookie reused while live");
                    model.insert(c, (peer, n));
                    n += 1;
                }
                TableOp::Take(i) => {
                    let keys: Vec<u64> = model.keys().copied().collect();
                    if !keys.is_empty() {
                        let c = keys[i % keys.len()];
                        prop_assert_eq!(t.take(c), model.remove(&c));
                        taken.push(c);
                    }
                }
                TableOp::TakeStale(i) => {
                    if !taken.is_empty() {
                        let c = taken[i % taken.len()];
                        if !model.contains_key(&c) {
                            prop_assert_eq!(t.take(c), None);
                        }
                    }
                }
                TableOp::Fail(p) => {
                    let mut out = Vec::new();
                    t.take_where(|v| v.0 == p, &mut out);
                    let mut want: Vec<u64> =
                        model.iter().filter(|(_, v)| v.0 == p).map(|(c, _)| *c).collect();
                    want.sort();
                    let mut got: Vec<u64> = out.iter().map(|x| x.0).collect();
                    got.sort();
                    prop_assert_eq!(&got, &want);
                    for c in got {
                        model.remove(&c);
                        taken.push(c);
                    }
                }
            }
            prop_assert_eq!(t.len(), model.len());
            for (c, v) in &model {
                prop_assert_eq!(t.get(*c), Some(v));
            }
        }
    }

    /// The control queue against a ring that fills and drains at random:
    /// every answer arrives once, in order.
    #[test]
    fn control_answers_arrive_once_in_order(
        steps in proptest::collection::vec((any::<bool>(), 0usize..3), 1..100),
        cap in 1usize..4,
    ) {
        let mut ring = Ring::new(cap);
        let mut q = CtrlQueue::new();
        let mut next = 0u64;
        let mut seen = Vec::new();
        for (send, drain) in steps {
            // The ring drains (the peer reads), then a new answer comes
            // before the queue is flushed: it must not overtake the queue.
            for _ in 0..drain {
                if let Some(s) = ring.pop() {
                    if let Ok(Incoming::Ack { cookie, .. }) = decode(&s, &LIM) {
                        seen.push(cookie);
                    }
                }
            }
            if send {
                q.send(A, ack(B, next, 0), &[], |_, r, p| ring.push(r, p));
                next += 1;
            }
            q.flush(|_, r, p| ring.push(r, p));
        }
        while !q.is_empty() || !ring.slots.is_empty() {
            while let Some(s) = ring.pop() {
                if let Ok(Incoming::Ack { cookie, .. }) = decode(&s, &LIM) {
                    seen.push(cookie);
                }
            }
            q.flush(|_, r, p| ring.push(r, p));
        }
        prop_assert_eq!(seen, (0..next).collect::<Vec<_>>());
    }
}
