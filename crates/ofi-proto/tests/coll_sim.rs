//! The collectives' core in a simulated group: every member's core over
//! an in-memory network that delivers frames in a seeded random order
//! (across members, operations and steps; one member's frames to another
//! may overtake each other too), with frames cut small so messages come
//! in pieces. Every operation and algorithm at group sizes 1 to 9, against
//! results computed here; operations started late, several at once, two
//! groups on one member; and what makes a group fail.

use ofi_base::atomic::{self, AtomicKind};
use ofi_base::consts::atomic_op::*;
use ofi_base::consts::datatype::*;
use ofi_base::error::errno;
use ofi_proto::coll::{CollError, Event, Fed, GroupCore, Limits, Op};
use ofi_wire::coll::{Frame, Repr, HDR_LEN};
use std::collections::HashMap;

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

/// Limits that cut messages into many frames and take Rabenseifner's
/// allreduce from 64 bytes.
fn small() -> Limits {
    Limits {
        frame_max: 7,
        rabenseifner_min: 64,
        ..Limits::default()
    }
}

/// `n` members, each with cores of one or more groups, over a network
/// that delivers frames in random order.
struct Sim {
    /// cores[member][group]
    cores: Vec<Vec<GroupCore>>,
    /// Frames in flight: (to, bytes).
    net: Vec<(usize, Vec<u8>)>,
    rng: Rng,
    /// Outcomes by member and token.
    out: Vec<HashMap<u64, Result<Vec<u8>, CollError>>>,
    /// Frame errors a member's core returned.
    frame_errors: Vec<Vec<CollError>>,
    /// Every step a frame named.
    steps: std::collections::BTreeSet<u32>,
    /// Frames a member did not take yet (`Fed::Later`), by member: sent
    /// again after its next start.
    later: Vec<Vec<Vec<u8>>>,
}

impl Sim {
    fn new(n: usize, groups: &[u64], limits: Limits, seed: u64) -> Sim {
        Sim {
            cores: (0..n)
                .map(|r| {
                    groups
                        .iter()
                        .map(|&g| GroupCore::new(g, r as u32, n as u32, limits).unwrap())
                        .collect()
                })
                .collect(),
            net: Vec::new(),
            rng: Rng::new(seed),
            out: vec![HashMap::new(); n],
            frame_errors: vec![Vec::new(); n],
            steps: Default::default(),
            later: vec![Vec::new(); n],
        }
    }

    fn n(&self) -> usize {
        self.cores.len()
    }

    fn start(&mut self, member: usize, group: usize, op: Op, token: u64) {
        self.cores[member][group].start(op, token).unwrap();
        for f in std::mem::take(&mut self.later[member]) {
            self.net.push((member, f));
        }
        self.collect();
    }

    /// Moves frames and events out of every core.
    fn collect(&mut self) {
        for (m, cores) in self.cores.iter_mut().enumerate() {
            for c in cores.iter_mut() {
                while let Some(t) = c.poll_transmit() {
                    assert_ne!(t.to as usize, m, "a member sent itself a frame");
                    self.net.push((t.to as usize, t.frame));
                }
                while let Some(e) = c.poll_event() {
                    let (token, r) = match e {
                        Event::Done { token, result } => (token, Ok(result)),
                        Event::Failed { token, error } => (token, Err(error)),
                    };
                    assert!(
                        self.out[m].insert(token, r).is_none(),
                        "token {token} reported twice at {m}"
                    );
                }
            }
        }
    }

    /// Delivers frames in random order until none is in flight.
    fn run(&mut self) {
        self.collect();
        while !self.net.is_empty() {
            let i = self.rng.below(self.net.len());
            let (to, f) = self.net.swap_remove(i);
            let r = Repr::parse(&Frame::new_checked(&f[..]).unwrap()).unwrap();
            self.steps.insert(r.step);
            let g = self.cores[to]
                .iter()
                .position(|c| c.id() == r.group)
                .expect("a frame of a group the member has");
            match self.cores[to][g].on_frame(&r, &f[HDR_LEN..]) {
                Ok(Fed::Taken) => {}
                Ok(Fed::Later) => self.later[to].push(f),
                Err(e) => self.frame_errors[to].push(e),
            }
            self.collect();
        }
    }

    /// Every member's result of `token`, which must have succeeded.
    fn results(&self, token: u64) -> Vec<Vec<u8>> {
        (0..self.n())
            .map(|m| match self.out[m].get(&token) {
                Some(Ok(v)) => v.clone(),
                Some(Err(e)) => panic!("member {m}: token {token} failed: {e}"),
                None => panic!("member {m}: token {token} did not complete"),
            })
            .collect()
    }
}

/// Runs one operation (built per member by `op`) at every member of a
/// group of `n`, started in a random order, and returns the results.
fn run_one(n: usize, seed: u64, limits: Limits, op: impl Fn(usize) -> Op) -> Vec<Vec<u8>> {
    run_steps(n, seed, limits, op).0
}

/// [`run_one`], also giving every step a frame named.
fn run_steps(
    n: usize,
    seed: u64,
    limits: Limits,
    op: impl Fn(usize) -> Op,
) -> (Vec<Vec<u8>>, std::collections::BTreeSet<u32>) {
    let mut sim = Sim::new(n, &[0x5eed], limits, seed);
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        order.swap(i, sim.rng.below(i + 1));
    }
    for (k, &m) in order.iter().enumerate() {
        sim.start(m, 0, op(m), 7);
        // Deliver some frames before the next member starts.
        if k % 2 == 0 {
            sim.run();
        }
    }
    sim.run();
    (sim.results(7), sim.steps)
}

/// Folds the members' data left to right with the atomic engine.
fn fold_all(op: u32, dt: u32, data: &[Vec<u8>]) -> Vec<u8> {
    let mut acc = data[0].clone();
    for d in &data[1..] {
        atomic::apply(AtomicKind::Basic, op, dt, &mut acc, d, &[], &mut []).unwrap();
    }
    acc
}

// ---- element values -----------------------------------------------------------

/// The bytes of a long double (x86 80-bit, in 16 bytes) holding `v`.
fn f80(v: i64) -> [u8; 16] {
    let mut b = [0u8; 16];
    if v == 0 {
        return b;
    }
    let mag = v.unsigned_abs();
    let top = 63 - mag.leading_zeros();
    let mant = mag << (63 - top);
    let exp = (16383 + top as u16) | if v < 0 { 0x8000 } else { 0 };
    b[..8].copy_from_slice(&mant.to_le_bytes());
    b[8..10].copy_from_slice(&exp.to_le_bytes());
    b
}

/// One element of `dt` with the small integer value `v` (every part of a
/// complex value), so that sums and products stay exact in any order.
fn elem(dt: u32, v: i64) -> Vec<u8> {
    match dt {
        FI_INT8 | FI_UINT8 => vec![v as u8],
        FI_INT16 | FI_UINT16 => (v as u16).to_le_bytes().to_vec(),
        FI_INT32 | FI_UINT32 => (v as u32).to_le_bytes().to_vec(),
        FI_INT64 | FI_UINT64 => (v as u64).to_le_bytes().to_vec(),
        FI_INT128 | FI_UINT128 => (v as u128).to_le_bytes().to_vec(),
        FI_FLOAT => (v as f32).to_le_bytes().to_vec(),
        FI_DOUBLE => (v as f64).to_le_bytes().to_vec(),
        FI_LONG_DOUBLE => f80(v).to_vec(),
        FI_FLOAT_COMPLEX => [elem(FI_FLOAT, v), elem(FI_FLOAT, v - 1)].concat(),
        FI_DOUBLE_COMPLEX => [elem(FI_DOUBLE, v), elem(FI_DOUBLE, v + 1)].concat(),
        FI_LONG_DOUBLE_COMPLEX => [elem(FI_LONG_DOUBLE, v), elem(FI_LONG_DOUBLE, -v)].concat(),
        _ => unreachable!("datatype {dt}"),
    }
}

/// `count` elements of `dt` from values in `0..=2` (products of nine
/// members stay small and exact).
fn elems(rng: &mut Rng, dt: u32, count: usize) -> Vec<u8> {
    (0..count)
        .flat_map(|_| elem(dt, rng.below(3) as i64))
        .collect()
}

const DATATYPES: [u32; 16] = [
    FI_INT8,
    FI_UINT8,
    FI_INT16,
    FI_UINT16,
    FI_INT32,
    FI_UINT32,
    FI_INT64,
    FI_UINT64,
    FI_FLOAT,
    FI_DOUBLE,
    FI_FLOAT_COMPLEX,
    FI_DOUBLE_COMPLEX,
    FI_LONG_DOUBLE,
    FI_LONG_DOUBLE_COMPLEX,
    FI_INT128,
    FI_UINT128,
];

const REDUCTIONS: [u32; 11] = [
    FI_MIN,
    FI_MAX,
    FI_SUM,
    FI_PROD,
    FI_LOR,
    FI_LAND,
    FI_BOR,
    FI_BAND,
    FI_LXOR,
    FI_BXOR,
    FI_ATOMIC_WRITE,
];

/// The expected combination: the fold in rank order (the values keep
/// every supported operation exact and order-free, but for the sign of a
/// zero: see [`canon`]), except that FI_ATOMIC_WRITE keeps the highest
/// rank's values.
fn expect(op: u32, dt: u32, data: &[Vec<u8>]) -> Vec<u8> {
    if op == FI_ATOMIC_WRITE {
        return data[data.len() - 1].clone();
    }
    canon(dt, fold_all(op, dt, data))
}

/// Floating-point values with every negative zero made positive: which
/// zero a complex product ends with depends on the order it is computed
/// in (`0 * -1` against `-1 * 0` as a partial sum's first term).
fn canon(dt: u32, mut v: Vec<u8>) -> Vec<u8> {
    let (part, sign_byte) = match dt {
        FI_FLOAT | FI_FLOAT_COMPLEX => (4, 3),
        FI_DOUBLE | FI_DOUBLE_COMPLEX => (8, 7),
        FI_LONG_DOUBLE | FI_LONG_DOUBLE_COMPLEX => (16, 9),
        _ => return v,
    };
    let value_len = if part == 16 { 10 } else { part };
    for p in v.chunks_mut(part) {
        if p[..value_len]
            .iter()
            .enumerate()
            .all(|(i, b)| *b == 0 || (i == sign_byte && *b == 0x80))
        {
            p[sign_byte] = 0;
        }
    }
    v
}

// ---- the operations -------------------------------------------------------------

#[test]
fn barrier_completes_only_once_every_member_entered() {
    for n in 1..=9 {
        for seed in 0..3 {
            let mut sim = Sim::new(n, &[1], small(), seed);
            for m in 0..n - 1 {
                sim.start(m, 0, Op::Barrier, 1);
            }
            sim.run();
            for m in 0..n {
                assert!(
                    sim.out[m].is_empty(),
                    "n {n}: member {m} left the barrier before the last entered"
                );
            }
            sim.start(n - 1, 0, Op::Barrier, 1);
            sim.run();
            assert!(sim.results(1).iter().all(Vec::is_empty));
        }
    }
}

#[test]
fn broadcast_from_every_root() {
    for n in 1..=9 {
        for root in 0..n {
            for len in [0, 1, 8, 61] {
                let data = Rng::new(len as u64).bytes(len);
                let got = run_one(n, (n * 31 + root) as u64, small(), |m| Op::Broadcast {
                    root: root as u32,
                    data: if m == root {
                        data.clone()
                    } else {
                        vec![0; len]
                    },
                });
                assert!(
                    got.iter().all(|g| *g == data),
                    "n {n} root {root} len {len}"
                );
            }
        }
    }
}

#[test]
fn allreduce_sums_by_doubling_and_by_rabenseifner() {
    for n in 1..=9 {
        // 5 elements: doubling (under rabenseifner_min); 40: Rabenseifner
        // (at least one element per block); 200: both, with uneven blocks.
        for count in [0usize, 1, 5, 40, 203] {
            let mut rng = Rng::new((n * 1000 + count) as u64);
            let data: Vec<Vec<u8>> = (0..n)
                .map(|_| {
                    (0..count)
                        .flat_map(|_| (rng.next() as u32).to_le_bytes())
                        .collect()
                })
                .collect();
            let want = fold_all(FI_SUM, FI_UINT32, &data);
            let (got, steps) = run_steps(n, count as u64, small(), |m| Op::Allreduce {
                op: FI_SUM,
                datatype: FI_UINT32,
                data: data[m].clone(),
            });
            // Rabenseifner's allgather steps are numbered from 0x100.
            let pof2 = if n.is_power_of_two() {
                n
            } else {
                n.next_power_of_two() / 2
            };
            let raben = pof2 >= 2 && count * 4 >= 64 && count >= pof2;
            assert_eq!(
                steps.iter().any(|s| *s >= 0x100),
                raben,
                "n {n} count {count}: Rabenseifner taken or not"
            );
            for (m, g) in got.iter().enumerate() {
                assert_eq!(*g, want, "n {n} count {count}: member {m}");
            }
        }
    }
}

#[test]
fn allreduce_every_op_and_datatype() {
    for n in [2usize, 3, 5, 8] {
        for dt in DATATYPES {
            for op in REDUCTIONS {
                if !atomic::valid(AtomicKind::Basic, op, dt) {
                    continue;
                }
                let es = atomic::datatype_size(dt).unwrap();
                // Some counts fold to doubling, some to Rabenseifner.
                for count in [3, 64 / es + n] {
                    let mut rng = Rng::new((n as u64) << 32 | u64::from(op) << 16 | u64::from(dt));
                    let data: Vec<Vec<u8>> = (0..n).map(|_| elems(&mut rng, dt, count)).collect();
                    let want = expect(op, dt, &data);
                    let got = run_one(n, count as u64, small(), |m| Op::Allreduce {
                        op,
                        datatype: dt,
                        data: data[m].clone(),
                    });
                    for (m, g) in got.iter().enumerate() {
                        assert_eq!(
                            canon(dt, g.clone()),
                            want,
                            "n {n} op {op} dt {dt} count {count}: member {m}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn allreduce_gives_every_member_the_same_bits() {
    // Floating-point sums of random values depend on the order: every
    // member must still get the same bits, by either algorithm.
    for n in 2..=9 {
        for count in [3usize, 100] {
            let mut rng = Rng::new(n as u64 * 77 + count as u64);
            let data: Vec<Vec<u8>> = (0..n)
                .map(|_| {
                    (0..count)
                        .flat_map(|_| ((rng.next() as f64) / 3.7e15).to_le_bytes())
                        .collect()
                })
                .collect();
            let got = run_one(n, 5, small(), |m| Op::Allreduce {
                op: FI_SUM,
                datatype: FI_DOUBLE,
                data: data[m].clone(),
            });
            assert!(got.iter().all(|g| *g == got[0]), "n {n} count {count}");
        }
    }
}

#[test]
fn allgather_in_rank_order() {
    for n in 1..=9 {
        for len in [0usize, 3, 20] {
            let data: Vec<Vec<u8>> = (0..n).map(|m| Rng::new(m as u64 + 9).bytes(len)).collect();
            let want = data.concat();
            let got = run_one(n, len as u64, small(), |m| Op::Allgather {
                data: data[m].clone(),
            });
            assert!(got.iter().all(|g| *g == want), "n {n} len {len}");
        }
    }
}

#[test]
fn reduce_scatter_gives_each_member_its_block() {
    for n in 1..=9 {
        for per in [0usize, 1, 6] {
            let mut rng = Rng::new(n as u64 * 13 + per as u64);
            let data: Vec<Vec<u8>> = (0..n).map(|_| elems(&mut rng, FI_INT64, per * n)).collect();
            let whole = fold_all(FI_SUM, FI_INT64, &data);
            let got = run_one(n, per as u64, small(), |m| Op::ReduceScatter {
                op: FI_SUM,
                datatype: FI_INT64,
                data: data[m].clone(),
            });
            let b = per * 8;
            for (m, g) in got.iter().enumerate() {
                assert_eq!(*g, whole[m * b..(m + 1) * b], "n {n} per {per}: member {m}");
            }
        }
    }
}

#[test]
fn alltoall_transposes_the_blocks() {
    for n in 1..=9 {
        for b in [0usize, 1, 9] {
            let data: Vec<Vec<u8>> = (0..n)
                .map(|m| Rng::new(m as u64 * 3 + 1).bytes(n * b))
                .collect();
            let got = run_one(n, b as u64, small(), |m| Op::Alltoall {
                data: data[m].clone(),
            });
            for (m, g) in got.iter().enumerate() {
                let want: Vec<u8> = (0..n)
                    .flat_map(|j| data[j][m * b..(m + 1) * b].to_vec())
                    .collect();
                assert_eq!(*g, want, "n {n} b {b}: member {m}");
            }
        }
    }
}

#[test]
fn scatter_gather_and_reduce_from_every_root() {
    for n in 1..=9 {
        for root in 0..n {
            let b = 5;
            let whole = Rng::new((n * 10 + root) as u64).bytes(n * b);
            let got = run_one(n, root as u64, small(), |m| Op::Scatter {
                root: root as u32,
                block: b,
                data: if m == root { whole.clone() } else { Vec::new() },
            });
            for (m, g) in got.iter().enumerate() {
                assert_eq!(
                    *g,
                    whole[m * b..(m + 1) * b],
                    "scatter n {n} root {root}: {m}"
                );
            }

            let got = run_one(n, root as u64 + 50, small(), |m| Op::Gather {
                root: root as u32,
                data: whole[m * b..(m + 1) * b].to_vec(),
            });
            for (m, g) in got.iter().enumerate() {
                let want = if m == root { whole.clone() } else { Vec::new() };
                assert_eq!(*g, want, "gather n {n} root {root}: {m}");
            }

            let mut rng = Rng::new(root as u64);
            let data: Vec<Vec<u8>> = (0..n).map(|_| elems(&mut rng, FI_DOUBLE, 4)).collect();
            let got = run_one(n, root as u64 + 90, small(), |m| Op::Reduce {
                root: root as u32,
                op: FI_PROD,
                datatype: FI_DOUBLE,
                data: data[m].clone(),
            });
            for (m, g) in got.iter().enumerate() {
                let want = if m == root {
                    fold_all(FI_PROD, FI_DOUBLE, &data)
                } else {
                    Vec::new()
                };
                assert_eq!(*g, want, "reduce n {n} root {root}: {m}");
            }
        }
    }
}

#[test]
fn frames_as_large_as_a_message_give_the_same_results() {
    let data: Vec<Vec<u8>> = (0..6)
        .map(|m| elems(&mut Rng::new(m), FI_INT32, 300))
        .collect();
    let want = fold_all(FI_SUM, FI_INT32, &data);
    for limits in [Limits::default(), small()] {
        let got = run_one(6, 1, limits, |m| Op::Allreduce {
            op: FI_SUM,
            datatype: FI_INT32,
            data: data[m].clone(),
        });
        assert!(got.iter().all(|g| *g == want));
    }
}

// ---- several operations, two groups ------------------------------------------------

#[test]
fn several_operations_in_flight_started_at_different_times() {
    for n in [2usize, 3, 7] {
        for seed in 0..4 {
            let mut sim = Sim::new(n, &[10], small(), seed);
            let data: Vec<Vec<u8>> = (0..n)
                .map(|m| elems(&mut Rng::new(m as u64), FI_UINT16, 9))
                .collect();
            let ops = |m: usize| {
                vec![
                    Op::Barrier,
                    Op::Allreduce {
                        op: FI_BXOR,
                        datatype: FI_UINT16,
                        data: data[m].clone(),
                    },
                    Op::Broadcast {
                        root: (n - 1) as u32,
                        data: data[m].clone(),
                    },
                    Op::Allgather {
                        data: data[m].clone(),
                    },
                ]
            };
            // Member 0 starts all four and runs ahead; the others start
            // them in turn, frames flowing in between.
            for (t, op) in ops(0).into_iter().enumerate() {
                sim.start(0, 0, op, t as u64);
            }
            sim.run();
            for m in 1..n {
                for (t, op) in ops(m).into_iter().enumerate() {
                    sim.start(m, 0, op, t as u64);
                    sim.run();
                }
            }
            sim.run();
            assert!(sim.results(0).iter().all(Vec::is_empty));
            let x = fold_all(FI_BXOR, FI_UINT16, &data);
            assert!(sim.results(1).iter().all(|g| *g == x));
            assert!(sim.results(2).iter().all(|g| *g == data[n - 1]));
            assert!(sim.results(3).iter().all(|g| *g == data.concat()));
        }
    }
}

#[test]
fn two_groups_on_the_same_members_run_at_once() {
    let n = 5;
    let mut sim = Sim::new(n, &[0xa, 0xb], small(), 3);
    for m in 0..n {
        sim.start(
            m,
            0,
            Op::Allgather {
                data: vec![m as u8; 3],
            },
            100,
        );
        sim.start(
            m,
            1,
            Op::Allgather {
                data: vec![0x80 | m as u8; 2],
            },
            200,
        );
        sim.start(m, 1, Op::Barrier, 201);
        sim.start(m, 0, Op::Barrier, 101);
    }
    sim.run();
    let a: Vec<u8> = (0..n).flat_map(|m| vec![m as u8; 3]).collect();
    let b: Vec<u8> = (0..n).flat_map(|m| vec![0x80 | m as u8; 2]).collect();
    assert!(sim.results(100).iter().all(|g| *g == a));
    assert!(sim.results(200).iter().all(|g| *g == b));
    sim.results(101);
    sim.results(201);
}

// ---- failures ------------------------------------------------------------------------

#[test]
fn a_lost_member_fails_every_running_operation_and_later_starts() {
    let n = 4;
    let mut sim = Sim::new(n, &[7], small(), 1);
    for m in 0..n - 1 {
        sim.start(m, 0, Op::Barrier, 1);
        sim.start(
            m,
            0,
            Op::Allreduce {
                op: FI_SUM,
                datatype: FI_INT8,
                data: vec![1],
            },
            2,
        );
    }
    sim.run();
    for m in 0..n - 1 {
        sim.cores[m][0].lost(3, errno::FI_ECONNRESET);
    }
    sim.collect();
    for m in 0..n - 1 {
        for t in [1, 2] {
            assert_eq!(
                sim.out[m][&t],
                Err(CollError::Lost {
                    rank: 3,
                    errno: errno::FI_ECONNRESET
                }),
                "member {m} token {t}"
            );
        }
        let e = sim.cores[m][0].start(Op::Barrier, 3).unwrap_err();
        assert_eq!(e.errno(), errno::FI_ECONNRESET);
    }
}

#[test]
fn members_that_disagree_fail_the_group_with_a_peer_error() {
    // Different operations at the same number.
    let mut sim = Sim::new(2, &[1], small(), 0);
    sim.start(0, 0, Op::Barrier, 1);
    sim.start(1, 0, Op::Allgather { data: vec![1] }, 1);
    sim.run();
    let e = sim
        .out
        .iter()
        .flat_map(|o| o.values())
        .find_map(|r| r.clone().err());
    assert!(matches!(e, Some(CollError::Peer { .. })), "{e:?}");
    assert_eq!(e.unwrap().errno(), errno::FI_EIO);

    // Different counts.
    let mut sim = Sim::new(3, &[1], small(), 0);
    for (m, len) in [(0, 8), (1, 8), (2, 16)] {
        sim.start(
            m,
            0,
            Op::Allreduce {
                op: FI_SUM,
                datatype: FI_INT64,
                data: vec![0; len],
            },
            1,
        );
    }
    sim.run();
    let failed: Vec<_> = sim
        .out
        .iter()
        .filter_map(|o| o.get(&1))
        .filter(|r| r.is_err())
        .collect();
    assert!(!failed.is_empty());
    for f in failed {
        match f {
            Err(CollError::Peer { why, .. }) => assert!(why.contains("same count"), "{why}"),
            // Told by the member that saw it.
            Err(CollError::Lost { errno: e, .. }) => assert_eq!(*e, errno::FI_EIO),
            other => panic!("{other:?}"),
        }
    }
    // Every member's operation failed: the one that saw the mismatch told
    // the others.
    assert!(sim.out.iter().all(|o| matches!(o.get(&1), Some(Err(_)))));
}

#[test]
fn a_member_that_sees_a_loss_tells_the_others() {
    // Member 3 never enters the barrier; only member 0 (which waits for
    // it in the first round) learns that it is gone. Members 1 and 2,
    // which wait for member 0, must fail too.
    for n in [3usize, 4, 6, 9] {
        let gone = n - 1;
        let mut sim = Sim::new(n, &[5], small(), n as u64);
        for m in 0..gone {
            sim.start(m, 0, Op::Barrier, 1);
        }
        sim.run();
        assert!(sim.out.iter().all(|o| o.is_empty()));
        sim.cores[0][0].lost(gone as u32, errno::FI_ECONNRESET);
        // The aborts to the lost member go nowhere.
        sim.collect();
        sim.net.retain(|(to, _)| *to != gone);
        sim.run();
        for m in 0..gone {
            assert_eq!(
                sim.out[m].get(&1),
                Some(&Err(CollError::Lost {
                    rank: gone as u32,
                    errno: errno::FI_ECONNRESET
                })),
                "n {n}: member {m}"
            );
        }
    }
}

#[test]
fn frames_that_do_not_fit_are_refused() {
    let limits = Limits {
        early_ops: 2,
        early_bytes: 40,
        ..small()
    };
    let frame = |seq: u32, from: u32, group: u64, payload: usize| {
        let r = Repr {
            kind: ofi_wire::coll::kind::BARRIER,
            from,
            group,
            seq,
            step: 0,
            total: payload as u32,
            offset: 0,
        };
        (r, vec![0u8; payload])
    };
    let fresh = || GroupCore::new(9, 0, 3, limits).unwrap();
    for (what, (r, p)) in [
        ("another group", frame(0, 1, 8, 0)),
        ("from itself", frame(0, 0, 9, 0)),
        ("from no member", frame(0, 3, 9, 0)),
        ("too far ahead", frame(2, 1, 9, 0)),
        ("too many bytes held", frame(1, 1, 9, 41)),
    ] {
        let mut g = fresh();
        assert!(
            matches!(g.on_frame(&r, &p), Err(CollError::Peer { .. })),
            "{what}"
        );
        assert!(g.broken().is_some(), "{what}");
    }
    // A frame of an operation that ended.
    let mut g = fresh();
    let (r, p) = frame(1, 1, 9, 0);
    g.on_frame(&r, &p).unwrap();
    // A barrier message longer than a barrier's (0 bytes).
    g.start(Op::Barrier, 0).unwrap();
    let (r, p) = frame(0, 2, 9, 4);
    assert!(g.on_frame(&r, &p).is_err());
    assert!(matches!(
        g.poll_event(),
        Some(Event::Failed {
            token: 0,
            error: CollError::Peer { rank: 2, .. }
        })
    ));
}

#[test]
fn messages_an_operation_never_takes_are_refused_and_empty_frames_bounded() {
    let frame = |kind: u8, seq: u32, from: u32, step: u32, payload: usize| {
        let r = Repr {
            kind,
            from,
            group: 9,
            seq,
            step,
            total: payload as u32,
            offset: 0,
        };
        (r, vec![0u8; payload])
    };
    let barrier = ofi_wire::coll::kind::BARRIER;
    let allreduce = ofi_wire::coll::kind::ALLREDUCE;
    // Rank 0 of 4 in a barrier takes round k from rank -2^k only.
    for (from, step) in [(1, 0), (2, 0), (3, 1), (2, 2), (1, 7), (3, u32::MAX)] {
        let mut g = GroupCore::new(9, 0, 4, Limits::default()).unwrap();
        g.start(Op::Barrier, 1).unwrap();
        let (r, p) = frame(barrier, 0, from, step, 0);
        assert!(
            matches!(g.on_frame(&r, &p), Err(CollError::Peer { rank, .. }) if rank == from),
            "barrier step {step} from {from}"
        );
    }
    for (from, step) in [(3, 0), (2, 1)] {
        let mut g = GroupCore::new(9, 0, 4, Limits::default()).unwrap();
        g.start(Op::Barrier, 1).unwrap();
        let (r, p) = frame(barrier, 0, from, step, 0);
        g.on_frame(&r, &p).unwrap();
        assert!(g.broken().is_none());
    }
    // A small allreduce runs recursive doubling: no Rabenseifner steps,
    // no fold in a power-of-two group, rounds only with its partners.
    for (from, step) in [(1, 0x100), (1, 0), (1, 1), (2, 2), (1, 4)] {
        let mut g = GroupCore::new(9, 0, 4, Limits::default()).unwrap();
        let data = vec![0u8; 8];
        g.start(
            Op::Allreduce {
                op: FI_SUM,
                datatype: FI_UINT64,
                data,
            },
            1,
        )
        .unwrap();
        let (r, p) = frame(allreduce, 0, from, step, 8);
        assert!(
            g.on_frame(&r, &p).is_err(),
            "allreduce step {step:#x} from {from}"
        );
    }
    // Frames of operations not started yet cost their header: empty ones
    // are bounded too. Past the bound a frame waits (Later) until this
    // member starts an operation that takes held frames out.
    let limits = Limits {
        early_bytes: 3 * ofi_wire::coll::HDR_LEN,
        ..Limits::default()
    };
    let mut g = GroupCore::new(9, 0, 4, limits).unwrap();
    for seq in 1..4 {
        let (r, p) = frame(barrier, seq, 3, 0, 0);
        assert_eq!(g.on_frame(&r, &p), Ok(Fed::Taken));
    }
    let (r4, p4) = frame(barrier, 4, 3, 0, 0);
    assert_eq!(g.on_frame(&r4, &p4), Ok(Fed::Later));
    g.start(Op::Barrier, 0).unwrap();
    assert_eq!(g.on_frame(&r4, &p4), Ok(Fed::Later));
    g.start(Op::Barrier, 1).unwrap();
    assert_eq!(g.on_frame(&r4, &p4), Ok(Fed::Taken));
    assert!(g.broken().is_none());
    // A frame that could never be held is the sender's fault.
    let (r, p) = frame(allreduce, 9, 3, 2, 3 * ofi_wire::coll::HDR_LEN);
    assert!(matches!(
        g.on_frame(&r, &p),
        Err(CollError::Peer { rank: 3, .. })
    ));
}

/// A broadcast's root runs ahead of the others by many operations (its
/// broadcasts complete when sent): the others' held frames reach their
/// bound, frames wait instead of failing the group, and every broadcast
/// arrives in order.
#[test]
fn a_root_far_ahead_waits_instead_of_failing_the_group() {
    let limits = Limits {
        early_bytes: 4 * (ofi_wire::coll::HDR_LEN + 8),
        ..small()
    };
    let n = 3;
    let ops = 40u64;
    let mut sim = Sim::new(n, &[0x5eed], limits, 11);
    let bcast = |k: u64, root: bool| Op::Broadcast {
        root: 0,
        data: if root {
            k.to_le_bytes().to_vec()
        } else {
            vec![0; 8]
        },
    };
    for k in 0..ops {
        sim.start(0, 0, bcast(k, true), k);
    }
    sim.run();
    assert!(
        sim.later.iter().any(|l| !l.is_empty()),
        "the others never held frames back"
    );
    for k in 0..ops {
        for m in 1..n {
            sim.start(m, 0, bcast(k, false), k);
        }
        sim.run();
    }
    for k in 0..ops {
        for r in sim.results(k) {
            assert_eq!(r, k.to_le_bytes());
        }
    }
    assert!(
        sim.frame_errors.iter().all(Vec::is_empty),
        "{:?}",
        sim.frame_errors
    );
}

#[test]
fn bad_arguments_are_refused_at_start() {
    let mut g = GroupCore::new(1, 0, 3, Limits::default()).unwrap();
    let cases = [
        (
            Op::Broadcast {
                root: 3,
                data: vec![],
            },
            errno::FI_EINVAL,
        ),
        (
            Op::Allreduce {
                op: 99,
                datatype: FI_INT8,
                data: vec![0],
            },
            errno::FI_EOPNOTSUPP,
        ),
        (
            Op::Allreduce {
                op: FI_BOR,
                datatype: FI_DOUBLE,
                data: vec![0; 8],
            },
            errno::FI_EOPNOTSUPP,
        ),
        (
            Op::Allreduce {
                op: FI_SUM,
                datatype: 300,
                data: vec![0; 8],
            },
            errno::FI_EOPNOTSUPP,
        ),
        (
            Op::Allreduce {
                op: FI_SUM,
                datatype: FI_INT32,
                data: vec![0; 6],
            },
            errno::FI_EINVAL,
        ),
        (Op::Alltoall { data: vec![0; 4] }, errno::FI_EINVAL),
        (
            Op::ReduceScatter {
                op: FI_SUM,
                datatype: FI_INT32,
                data: vec![0; 6],
            },
            errno::FI_EINVAL,
        ),
        (
            Op::Scatter {
                root: 0,
                block: 2,
                data: vec![0; 5],
            },
            errno::FI_EINVAL,
        ),
        (
            Op::Gather {
                root: 7,
                data: vec![],
            },
            errno::FI_EINVAL,
        ),
    ];
    for (op, want) in cases {
        let e = g.start(op.clone(), 0).unwrap_err();
        assert_eq!(e.errno(), want, "{op:?}: {e}");
    }
    assert_eq!(g.next_seq(), 0, "a refused start takes no number");
    let mut g = GroupCore::new(
        1,
        0,
        3,
        Limits {
            message_max: 100,
            ..Limits::default()
        },
    )
    .unwrap();
    let e = g.start(Op::Allgather { data: vec![0; 40] }, 0).unwrap_err();
    assert_eq!(e.errno(), errno::FI_EMSGSIZE, "{e}");
    assert!(GroupCore::new(1, 3, 3, Limits::default()).is_err());
}
