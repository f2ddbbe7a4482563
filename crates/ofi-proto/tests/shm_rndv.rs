//! The rendezvous sender machine (`ofi_proto::shm::rndv::Sends`) in a
//! simulated pair: A's large sends go to B as RTS entries over a bounded
//! ring; B answers each with ACK (it copied) or NACK (it cannot copy
//! across processes); after a NACK A pushes DATA chunks as room in B's
//! ring allows, B drains its ring at its own pace, reassembles and
//! answers ACK. A random schedule of drains, duplicate and forged answers
//! and a peer death must end with every send completed exactly once, with
//! the bytes intact, or failed exactly once (the dead peer's).
//!
//! The receiver's reassembly (`ofi_proto::shm::rndv::Reassembly`) alone:
//! honest chunks in any order among duplicates, overlaps and chunks out of
//! range, held to a model of which bytes arrived.

use ofi_proto::shm::rndv::{BadChunk, Reassembly, Sends, Started, MAX_RUNS};
use ofi_proto::shm::{ack, decode, nack, Incoming, Limits, PeerId, Push};
use ofi_wire::shm::{op, Entry, Repr, HDR_LEN};
use proptest::prelude::*;
use std::collections::{HashMap, VecDeque};

const SLOT: usize = 4160 - 8;
const ROOM: usize = SLOT - HDR_LEN;
const LIM: Limits = Limits {
    bounce_bufs: 64,
    bounce_size: 32768,
};
const A: PeerId = (100 << 32) | 1;
const B: PeerId = (200 << 32) | 1;
const C: PeerId = (300 << 32) | 1;

struct Ring {
    slots: VecDeque<Vec<u8>>,
    cap: usize,
}

impl Ring {
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
}

/// A send as the driver keeps it: its id and its bytes.
struct Op {
    id: usize,
    to: PeerId,
    bytes: Vec<u8>,
}

#[derive(Clone, Debug)]
enum Step {
    /// A pushes what it can.
    Push,
    /// B reads up to n entries of its ring.
    Drain(usize),
    /// An answer from C naming one of A's sends to B (by index), or a
    /// cookie that names nothing.
    Forged(bool, usize, u64),
    /// B's first answers (to the RTSes) reach A.
    Answers,
    /// A send to C (another peer) starts; C dies later.
    ToC,
    /// C dies.
    CDies,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => Just(Step::Push),
        4 => (1usize..6).prop_map(Step::Drain),
        1 => (any::<bool>(), any::<usize>(), any::<u64>()).prop_map(|(a, i, c)| Step::Forged(a, i, c)),
        1 => Just(Step::Answers),
        1 => Just(Step::ToC),
        1 => Just(Step::CDies),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn every_send_ends_once_with_its_bytes(
        lens in proptest::collection::vec(1usize..4 * ROOM, 1..6),
        nacked in proptest::collection::vec(any::<bool>(), 6),
        cap in 1usize..5,
        steps in proptest::collection::vec(step(), 0..60),
    ) {
        let mut a: Sends<Op> = Sends::default();
        let mut ring_b = Ring { slots: VecDeque::new(), cap };
        let mut to_a: VecDeque<Vec<u8>> = VecDeque::new();
        let mut first: VecDeque<Vec<u8>> = VecDeque::new();
        let mut ended: HashMap<usize, Result<(), i32>> = HashMap::new();
        let mut reasm: HashMap<u64, (usize, Vec<u8>)> = HashMap::new();
        let mut sent: HashMap<usize, Vec<u8>> = HashMap::new();
        let mut next = 0usize;
        let mut cookies = Vec::new();
        // A starts its sends to B; B decides at once (the RTS) whether it
        // copies (ACK) or asks for pushes (NACK).
        for (i, &len) in lens.iter().enumerate() {
            let bytes: Vec<u8> = (0..len).map(|k| (k * 31 + i) as u8).collect();
            sent.insert(next, bytes.clone());
            let c = a.start(B, len, Op { id: next, to: B, bytes });
            cookies.push(c);
            next += 1;
            let mut b = vec![0u8; SLOT];
            if nacked[i] {
                nack(B, c).emit(&mut Entry::new_unchecked(&mut b[..]));
                reasm.insert(c, (0, vec![0u8; len]));
            } else {
                ack(B, c, 0).emit(&mut Entry::new_unchecked(&mut b[..]));
            }
            first.push_back(b);
        }
        let mut c_alive = true;
        let deliver = |a: &mut Sends<Op>, to_a: &mut VecDeque<Vec<u8>>, ended: &mut HashMap<usize, Result<(), i32>>| {
            while let Some(e) = to_a.pop_front() {
                let from = ofi_proto::shm::sender(&e).unwrap();
                match decode(&e, &LIM).unwrap() {
                    Incoming::Ack { cookie, status } => {
                        if let Some((op, st)) = a.on_ack(cookie, from, status) {
                            assert!(ended.insert(op.id, st).is_none(), "send {} ended twice", op.id);
                        }
                    }
                    Incoming::Nack { cookie } => {
                        a.on_nack(cookie, from);
                    }
                    other => panic!("A got {other:?}"),
                }
            }
        };
        let run = |s: &Step, a: &mut Sends<Op>, ring_b: &mut Ring, to_a: &mut VecDeque<Vec<u8>>,
                       ended: &mut HashMap<usize, Result<(), i32>>, reasm: &mut HashMap<u64, (usize, Vec<u8>)>| {
            match s {
                Step::Push => {
                    deliver(a, to_a, ended);
                    a.run_pushes(ROOM, |op, peer, ch| {
                        assert_eq!(peer, op.to);
                        assert!(ch.len <= ROOM && ch.len > 0);
                        let r = Repr { op: op::DATA, len: ch.len as u32, src: A, total: ch.offset as u64, cookie: ch.cookie, ..Default::default() };
                        ring_b.push(&r, &op.bytes[ch.offset..ch.offset + ch.len]) == Push::Done
                    });
                }
                Step::Drain(n) => {
                    for _ in 0..*n {
                        let Some(e) = ring_b.slots.pop_front() else { break };
                        let Ok(Incoming::Data { cookie, offset, bytes, .. }) = decode(&e, &LIM) else { panic!("DATA") };
                        let (got, buf) = reasm.get_mut(&cookie).expect("DATA of a NACKed send");
                        assert_eq!(offset, *got, "chunks arrive in order");
                        buf[offset..offset + bytes.len()].copy_from_slice(bytes);
                        *got += bytes.len();
                        if *got == buf.len() {
                            let mut b = vec![0u8; SLOT];
                            ack(B, cookie, 0).emit(&mut Entry::new_unchecked(&mut b[..]));
                            to_a.push_back(b);
                        }
                    }
                }
                Step::Forged(is_ack, i, junk) => {
                    // From C, naming one of B's sends or nothing: neither an
                    // ACK nor a NACK of another peer's send changes it.
                    for cookie in [cookies[i % cookies.len()], *junk] {
                        let mut b = vec![0u8; SLOT];
                        if *is_ack {
                            ack(C, cookie, 5).emit(&mut Entry::new_unchecked(&mut b[..]));
                        } else {
                            nack(C, cookie).emit(&mut Entry::new_unchecked(&mut b[..]));
                        }
                        to_a.push_back(b);
                    }
                }
                Step::ToC | Step::CDies | Step::Answers => {}
            }
        };
        let mut c_sends = Vec::new();
        for s in &steps {
            match s {
                Step::ToC if c_alive => {
                    a.start(C, 10, Op { id: next, to: C, bytes: vec![1; 10] });
                    c_sends.push(next);
                    next += 1;
                }
                Step::Answers => to_a.extend(first.drain(..)),
                Step::CDies if c_alive => {
                    c_alive = false;
                    let mut out = Vec::new();
                    a.peer_dead(C, &mut out);
                    let mut ids: Vec<usize> = out.iter().map(|o| o.id).collect();
                    ids.sort();
                    prop_assert_eq!(&ids, &c_sends, "exactly C's sends fail");
                    for o in out {
                        prop_assert!(ended.insert(o.id, Err(104)).is_none());
                    }
                }
                s => run(s, &mut a, &mut ring_b, &mut to_a, &mut ended, &mut reasm),
            }
        }
        // Then run to the end: B drains everything, A pushes.
        to_a.extend(first.drain(..));
        for _ in 0..(lens.iter().sum::<usize>() / ROOM + 10) * 2 {
            run(&Step::Push, &mut a, &mut ring_b, &mut to_a, &mut ended, &mut reasm);
            run(&Step::Drain(cap), &mut a, &mut ring_b, &mut to_a, &mut ended, &mut reasm);
        }
        deliver(&mut a, &mut to_a, &mut ended);
        for id in 0..lens.len() {
            prop_assert_eq!(ended.get(&id), Some(&Ok(())), "send {} to B", id);
        }
        for (c, (got, buf)) in &reasm {
            prop_assert_eq!(*got, buf.len(), "send {} fully pushed", c);
        }
        for (id, bytes) in &sent {
            if let Some((_, buf)) = reasm.values().find(|(_, b)| b == bytes) {
                prop_assert_eq!(buf, bytes, "send {}", id);
            }
        }
        prop_assert_eq!(a.len(), if c_alive { c_sends.len() } else { 0 });
        prop_assert!(!a.pushing());
    }
}

/// A message's length and chunks to feed: one tiling of the message (in
/// pieces cut anywhere) and arbitrary chunks (duplicates, overlaps, out of
/// range, empty), shuffled together.
fn chunk_schedule() -> impl Strategy<Value = (usize, Vec<(usize, usize)>)> {
    (
        1usize..3000,
        proptest::collection::vec(1usize..3000, 0..12),
        proptest::collection::vec((0usize..3200, 0usize..900), 0..40),
    )
        .prop_flat_map(|(total, cuts, junk)| {
            let mut at: Vec<usize> = cuts.into_iter().map(|c| c % total).collect();
            at.extend([0, total]);
            at.sort_unstable();
            at.dedup();
            let mut chunks: Vec<(usize, usize)> =
                at.windows(2).map(|w| (w[0], w[1] - w[0])).collect();
            chunks.extend(junk);
            (Just(total), Just(chunks).prop_shuffle())
        })
}

proptest! {
    #[test]
    fn reassembly_takes_each_byte_once((total, chunks) in chunk_schedule()) {
        let msg: Vec<u8> = (0..total).map(|i| (i * 13 + 7) as u8).collect();
        let mut r: Reassembly<Vec<u8>> = Reassembly::default();
        prop_assert_eq!(r.start(A, 9, total, vec![0u8; total]), Started::Waiting);
        let mut have = vec![false; total];
        let mut done: Option<Vec<u8>> = None;
        for (off, len) in chunks {
            let want = if done.is_some() {
                Err(BadChunk::Unknown)
            } else if len == 0 || off + len > total {
                Err(BadChunk::OutOfRange)
            } else if have[off..off + len].iter().any(|&h| h) {
                Err(BadChunk::Overlap)
            } else {
                let mut next = have.clone();
                next[off..off + len].iter_mut().for_each(|h| *h = true);
                let runs = next.iter().enumerate().filter(|&(i, &h)| h && (i == 0 || !next[i - 1])).count();
                if runs > MAX_RUNS {
                    Err(BadChunk::Fragmented)
                } else {
                    have = next;
                    Ok(have.iter().all(|&h| h))
                }
            };
            let got = r.on_data(A, 9, off, len, |b| b[off..off + len].copy_from_slice(&msg[off..off + len]));
            match got {
                Ok(Some(buf)) => {
                    prop_assert_eq!(want, Ok(true), "completed at ({}, {})", off, len);
                    done = Some(buf);
                }
                Ok(None) => prop_assert_eq!(want, Ok(false), "accepted ({}, {})", off, len),
                Err(why) => prop_assert_eq!(want, Err(why), "refused ({}, {})", off, len),
            }
        }
        match done {
            Some(buf) => {
                prop_assert!(buf == msg, "the bytes differ");
                prop_assert!(r.is_empty());
            }
            None => {
                prop_assert!(!have.iter().all(|&h| h), "every byte came and nothing completed");
                prop_assert_eq!(r.received(A, 9), Some(have.iter().filter(|&&h| h).count()));
            }
        }
    }
}
