//! The board collectives' core over simulated lanes: members start and
//! poll in a seeded random order, several operations queued at once (so a
//! fast member publishes into a slot a slow one may still need, if the
//! core let it), every operation at group sizes 1 to 9 against results
//! computed here, and what makes a group fail.

use ofi_base::atomic::{self, AtomicKind};
use ofi_base::consts::atomic_op::*;
use ofi_base::consts::datatype::*;
use ofi_base::error::errno;
use ofi_proto::coll::board::{carries, Lanes, LANE_BYTES, MAX_MEMBERS};
use ofi_proto::coll::{BoardCore, CollError, Event, Op};
use std::cell::{Cell, RefCell};

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// Every member's lane: the count and the two slots, as a segment holds
/// them (a publish overwrites the slot).
struct Board {
    seq: Vec<Cell<u64>>,
    slots: Vec<RefCell<[Vec<u8>; 2]>>,
}

impl Board {
    fn new(n: usize) -> Board {
        Board {
            seq: (0..n).map(|_| Cell::new(0)).collect(),
            slots: (0..n).map(|_| RefCell::new([vec![], vec![]])).collect(),
        }
    }
}

/// One member's view of the board.
struct View<'a> {
    b: &'a Board,
    me: usize,
}

impl Lanes for View<'_> {
    fn seq(&self, rank: u32) -> u64 {
        self.b.seq[rank as usize].get()
    }
    fn read(&self, rank: u32, seq: u64, offset: usize, out: &mut [u8]) -> bool {
        let s = self.b.slots[rank as usize].borrow();
        let src = &s[(seq % 2) as usize];
        for (i, o) in out.iter_mut().enumerate() {
            *o = src.get(offset + i).copied().unwrap_or(0);
        }
        // The core never lets a member run two operations ahead of a
        // reader: what it reads is still there.
        assert!(
            self.b.seq[rank as usize].get() < seq + 2,
            "slot {seq} overwritten"
        );
        true
    }
    fn publish(&self, seq: u64, data: &[u8]) {
        assert_eq!(seq, self.b.seq[self.me].get() + 1, "published in order");
        self.b.slots[self.me].borrow_mut()[(seq % 2) as usize] = data.to_vec();
        self.b.seq[self.me].set(seq);
    }
}

/// Runs `ops[m]` at every member `m` (the same operations in the same
/// order at every member), starting and polling in a seeded random order;
/// returns each member's results in operation order.
fn run(ops: Vec<Vec<Op>>, seed: u64) -> Vec<Vec<Vec<u8>>> {
    let n = ops.len();
    let board = Board::new(n);
    let mut cores: Vec<BoardCore> = (0..n)
        .map(|r| BoardCore::new(r as u32, n as u32).unwrap())
        .collect();
    let mut next = vec![0usize; n];
    let count = ops[0].len();
    let mut results: Vec<Vec<Option<Vec<u8>>>> = vec![vec![None; count]; n];
    let mut rng = Rng::new(seed);
    let mut done = 0;
    let mut steps = 0;
    while done < n * count {
        steps += 1;
        assert!(
            steps < 1_000_000,
            "the group made no progress (seed {seed})"
        );
        let m = rng.below(n);
        let view = View { b: &board, me: m };
        if next[m] < count && rng.below(3) != 0 {
            let op = ops[m][next[m]].clone();
            cores[m].start(op, next[m] as u64, &view).unwrap();
            next[m] += 1;
        } else {
            cores[m].poll(&view);
        }
        while let Some(e) = cores[m].poll_event() {
            match e {
                Event::Done { token, result } => {
                    assert!(results[m][token as usize].is_none());
                    results[m][token as usize] = Some(result);
                    done += 1;
                }
                Event::Failed { error, .. } => panic!("failed: {error}"),
            }
        }
    }
    results
        .into_iter()
        .map(|r| r.into_iter().map(Option::unwrap).collect())
        .collect()
}

fn u64s(v: &[u64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

/// `data[0] (op) data[1] (op) ...` in rank order, by the atomic engine.
fn fold_all(op: u32, dt: u32, data: &[Vec<u8>]) -> Vec<u8> {
    let mut acc = data[0].clone();
    for d in &data[1..] {
        atomic::apply(AtomicKind::Basic, op, dt, &mut acc, d, &[], &mut []).unwrap();
    }
    acc
}

#[test]
fn barrier_completes_only_once_every_member_published() {
    for n in 1..=5usize {
        let board = Board::new(n);
        let mut cores: Vec<BoardCore> = (0..n)
            .map(|r| BoardCore::new(r as u32, n as u32).unwrap())
            .collect();
        for m in 0..n {
            for c in cores.iter_mut().take(m) {
                c.poll(&View { b: &board, me: 0 });
                assert!(
                    c.poll_event().is_none(),
                    "n {n}: done before member {m} entered"
                );
            }
            let view = View { b: &board, me: m };
            cores[m].start(Op::Barrier, 1, &view).unwrap();
        }
        for (m, c) in cores.iter_mut().enumerate() {
            c.poll(&View { b: &board, me: m });
            assert_eq!(
                c.poll_event(),
                Some(Event::Done {
                    token: 1,
                    result: vec![]
                })
            );
            assert!(!c.busy());
        }
    }
}

#[test]
fn every_operation_at_sizes_1_to_9_with_operations_queued() {
    for n in 1..=9usize {
        for seed in 0..4u64 {
            let mut rng = Rng::new(seed * 100 + n as u64);
            let root = rng.below(n) as u32;
            let inputs: Vec<Vec<u64>> = (0..n)
                .map(|_| (0..2 * n).map(|_| rng.next() >> 8).collect())
                .collect();
            let block = 16;
            let scatter_src = rng.bytes(block * n);
            let bcast = rng.bytes(24);
            let ops: Vec<Vec<Op>> = (0..n)
                .map(|m| {
                    let mine = u64s(&inputs[m]);
                    vec![
                        Op::Barrier,
                        Op::Broadcast {
                            root,
                            data: if m as u32 == root {
                                bcast.clone()
                            } else {
                                vec![0xee; bcast.len()]
                            },
                        },
                        Op::Allreduce {
                            op: FI_SUM,
                            datatype: FI_UINT64,
                            data: mine[..16].to_vec(),
                        },
                        Op::Allgather {
                            data: mine[..8].to_vec(),
                        },
                        Op::Alltoall { data: mine.clone() },
                        Op::ReduceScatter {
                            op: FI_MAX,
                            datatype: FI_UINT64,
                            data: mine.clone(),
                        },
                        Op::Reduce {
                            root,
                            op: FI_BXOR,
                            datatype: FI_UINT64,
                            data: mine[..8].to_vec(),
                        },
                        Op::Scatter {
                            root,
                            block,
                            data: if m as u32 == root {
                                scatter_src.clone()
                            } else {
                                vec![]
                            },
                        },
                        Op::Gather {
                            root,
                            data: mine[8..16].to_vec(),
                        },
                        Op::Barrier,
                    ]
                })
                .collect();
            let res = run(ops, seed);
            for (m, r) in res.iter().enumerate() {
                let at = |i: usize| u64s(&inputs[i]);
                assert!(r[0].is_empty());
                assert_eq!(r[1], bcast, "n {n} member {m}: broadcast");
                let sums: Vec<Vec<u8>> = (0..n).map(|i| at(i)[..16].to_vec()).collect();
                assert_eq!(r[2], fold_all(FI_SUM, FI_UINT64, &sums), "allreduce");
                let gathered: Vec<u8> = (0..n).flat_map(|i| at(i)[..8].to_vec()).collect();
                assert_eq!(r[3], gathered, "allgather");
                let mine_blocks: Vec<u8> = (0..n)
                    .flat_map(|i| at(i)[m * 16..m * 16 + 16].to_vec())
                    .collect();
                assert_eq!(r[4], mine_blocks, "alltoall");
                let blocks: Vec<Vec<u8>> = (0..n)
                    .map(|i| at(i)[m * 16..m * 16 + 16].to_vec())
                    .collect();
                assert_eq!(r[5], fold_all(FI_MAX, FI_UINT64, &blocks), "reduce-scatter");
                if m as u32 == root {
                    let firsts: Vec<Vec<u8>> = (0..n).map(|i| at(i)[..8].to_vec()).collect();
                    assert_eq!(r[6], fold_all(FI_BXOR, FI_UINT64, &firsts), "reduce");
                    let g: Vec<u8> = (0..n).flat_map(|i| at(i)[8..16].to_vec()).collect();
                    assert_eq!(r[8], g, "gather");
                } else {
                    assert!(r[6].is_empty() && r[8].is_empty());
                }
                assert_eq!(r[7], scatter_src[m * block..(m + 1) * block], "scatter");
            }
        }
    }
}

#[test]
fn floating_point_sums_give_every_member_the_same_bits() {
    let n = 7;
    let mut rng = Rng::new(9);
    let inputs: Vec<Vec<u8>> = (0..n)
        .map(|_| {
            (0..8)
                .flat_map(|_| ((rng.next() >> 11) as f64 / 3.0e9 - 1000.0).to_ne_bytes())
                .collect()
        })
        .collect();
    let ops: Vec<Vec<Op>> = (0..n)
        .map(|m| {
            (0..6)
                .map(|_| Op::Allreduce {
                    op: FI_SUM,
                    datatype: FI_DOUBLE,
                    data: inputs[m].clone(),
                })
                .collect()
        })
        .collect();
    let res = run(ops, 3);
    let expect = fold_all(FI_SUM, FI_DOUBLE, &inputs);
    for r in &res {
        for x in r {
            assert_eq!(*x, expect);
        }
    }
}

#[test]
fn what_fits_a_lane_is_the_same_decision_at_every_member() {
    assert!(carries(2, 0));
    assert!(carries(MAX_MEMBERS, LANE_BYTES));
    assert!(!carries(2, LANE_BYTES + 1));
    assert!(!carries(MAX_MEMBERS + 1, 8));
    assert!(BoardCore::new(0, MAX_MEMBERS + 1).is_err());
    assert!(BoardCore::new(2, 2).is_err());
}

#[test]
fn bad_input_is_refused_with_nothing_started() {
    let board = Board::new(2);
    let view = View { b: &board, me: 0 };
    let mut c = BoardCore::new(0, 2).unwrap();
    let e = c
        .start(
            Op::Allgather {
                data: vec![0; LANE_BYTES + 8],
            },
            1,
            &view,
        )
        .unwrap_err();
    assert_eq!(e.errno(), errno::FI_EMSGSIZE);
    let e = c
        .start(
            Op::Broadcast {
                root: 5,
                data: vec![1],
            },
            2,
            &view,
        )
        .unwrap_err();
    assert_eq!(e.errno(), errno::FI_EINVAL);
    let e = c
        .start(
            Op::Allreduce {
                op: FI_CSWAP,
                datatype: FI_UINT32,
                data: vec![0; 8],
            },
            3,
            &view,
        )
        .unwrap_err();
    assert_eq!(e.errno(), errno::FI_EOPNOTSUPP);
    assert!(!c.busy());
    assert_eq!(board.seq[0].get(), 0, "nothing was published");
}

#[test]
fn a_lost_member_fails_the_running_and_queued_operations_and_later_starts() {
    let board = Board::new(3);
    let view = View { b: &board, me: 0 };
    let mut c = BoardCore::new(0, 3).unwrap();
    c.start(Op::Barrier, 1, &view).unwrap();
    c.start(Op::Barrier, 2, &view).unwrap();
    assert_eq!(board.seq[0].get(), 1, "the second waits for the first");
    assert!(c.poll_event().is_none());
    c.lost(2, errno::FI_ECONNRESET);
    let lost = CollError::Lost {
        rank: 2,
        errno: errno::FI_ECONNRESET,
    };
    assert_eq!(
        c.poll_event(),
        Some(Event::Failed {
            token: 1,
            error: lost.clone()
        })
    );
    assert_eq!(
        c.poll_event(),
        Some(Event::Failed {
            token: 2,
            error: lost.clone()
        })
    );
    assert_eq!(c.start(Op::Barrier, 3, &view), Err(lost));
    assert!(!c.busy());
}
