//! The collectives' frames (`ofi_wire::coll`) and one member's group core
//! (`ofi_proto::coll::GroupCore`) fed what a hostile member of its group
//! sends, between operations the member starts.

use ofi_core::consts::atomic_op::{FI_BOR, FI_MAX, FI_SUM};
use ofi_core::consts::datatype::{FI_DOUBLE, FI_INT8, FI_UINT32};
use ofi_proto::coll::{Event, GroupCore, Limits, Op};
use ofi_wire::coll::{kind, Frame, Repr};
use std::collections::HashMap;

/// The input as a stream of bytes (zeros once it ends).
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }
    fn take(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.0.len());
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        a
    }
}

/// The group's name in every frame the harness makes.
const GROUP: u64 = 0x5eed;

/// An operation for a member of rank `rank` of `n`, picked by the input:
/// mostly well-formed (whole elements, blocks that split), some not.
fn op(b: &mut Bytes<'_>, rank: u32, n: u32) -> Op {
    let which = b.byte();
    let root = u32::from(b.byte()) % (n + 1);
    let elems = usize::from(b.byte() % 9);
    let (opn, dt) = match b.byte() % 4 {
        0 => (FI_SUM, FI_UINT32),
        1 => (FI_MAX, FI_DOUBLE),
        2 => (FI_BOR, FI_INT8),
        _ => (FI_BOR, FI_DOUBLE),
    };
    let es = if dt == FI_INT8 {
        1
    } else {
        4 * (1 + (dt == FI_DOUBLE) as usize)
    };
    let blocks = elems * es * n as usize;
    match which % 10 {
        0 => Op::Barrier,
        1 => Op::Broadcast {
            root,
            data: vec![7; elems * es],
        },
        2 => Op::Allreduce {
            op: opn,
            datatype: dt,
            data: vec![1; elems * es],
        },
        3 => Op::Allgather {
            data: vec![rank as u8; elems],
        },
        4 => Op::ReduceScatter {
            op: opn,
            datatype: dt,
            data: vec![2; blocks],
        },
        5 => Op::Alltoall {
            data: vec![3; blocks],
        },
        6 => Op::Reduce {
            root,
            op: opn,
            datatype: dt,
            data: vec![4; elems * es],
        },
        7 => Op::Scatter {
            root,
            block: elems,
            data: if root == rank {
                vec![5; elems * n as usize]
            } else {
                Vec::new()
            },
        },
        8 => Op::Gather {
            root,
            data: vec![6; elems],
        },
        _ => Op::Allreduce {
            op: opn,
            datatype: dt,
            data: vec![1; elems * es + usize::from(which >> 7)],
        },
    }
}

/// A frame whose header fields the input picks within small ranges (so
/// the fuzzer reaches the core's checks without finding the magic first).
fn structured(b: &mut Bytes<'_>, n: u32) -> Vec<u8> {
    let kind = 1 + b.byte() % kind::MAX;
    let from = u32::from(b.byte()) % (n + 1);
    let seq = u32::from(b.byte() % 6);
    let s = b.byte();
    let step = if s & 0x80 != 0 {
        0x100 + u32::from(s & 7)
    } else {
        u32::from(s % 12)
    };
    let total = u32::from(b.byte()) % 80;
    let offset = if total == 0 {
        0
    } else {
        u32::from(b.byte()) % total
    };
    let len = (usize::from(b.byte()) % 40).min((total - offset) as usize);
    let len = if total > 0 { len.max(1) } else { 0 };
    let mut payload = b.take(len).to_vec();
    payload.resize(len, 0xee);
    let r = Repr {
        kind,
        from,
        group: GROUP,
        seq,
        step,
        total,
        offset,
    };
    if kind == kind::ABORT {
        // An abort's message is its whole frame: rank and error number.
        let a = ofi_wire::coll::Abort {
            rank: u32::from(b.byte()) % (n + 1),
            errno: 1 + u32::from(b.byte()),
        };
        let r = Repr {
            seq: 0,
            step: 0,
            total: 8,
            offset: 0,
            ..r
        };
        return r.frame(&a.to_bytes());
    }
    r.frame(&payload)
}

/// Input: the group's size and this member's rank, its limits, then
/// commands: start an operation, hand in a frame (raw bytes or built from
/// picked fields), report a member lost. Checks: no panic; every frame the
/// core sends parses, is this member's and goes to another member; each
/// started operation is reported at most once, and once the group is
/// unusable every started operation has been reported.
pub fn coll_group(data: &[u8]) {
    let mut b = Bytes(data);
    let n = 1 + u32::from(b.byte() % 9);
    let rank = u32::from(b.byte()) % n;
    let l = b.byte();
    let limits = Limits {
        frame_max: 1 + usize::from(l & 15) * 4,
        early_ops: 1 + u32::from(l >> 4),
        early_bytes: 2048,
        rabenseifner_min: 16,
        message_max: 4096,
    };
    let mut g = GroupCore::new(GROUP, rank, n, limits).expect("a valid group");
    // Token -> reported yet.
    let mut ops: HashMap<u64, bool> = HashMap::new();
    let mut token = 0u64;
    for _ in 0..512 {
        if b.0.is_empty() {
            break;
        }
        match b.byte() % 5 {
            0 => {
                let o = op(&mut b, rank, n);
                token += 1;
                if g.start(o, token).is_ok() {
                    ops.insert(token, false);
                }
            }
            1 => {
                let len = usize::from(b.byte());
                let raw = b.take(len).to_vec();
                if let Ok(f) = Frame::new_checked(&raw[..]) {
                    if let Ok(r) = Repr::parse(&f) {
                        let _ = g.on_frame(&r, f.payload());
                    }
                }
            }
            2 | 3 => {
                let raw = structured(&mut b, n);
                let f = Frame::new_checked(&raw[..]).expect("a whole header");
                let r = Repr::parse(&f).expect("a structured frame parses");
                let _ = g.on_frame(&r, f.payload());
            }
            _ => {
                let who = u32::from(b.byte()) % n;
                if who != rank {
                    g.lost(who, 104);
                }
            }
        }
        while let Some(t) = g.poll_transmit() {
            assert!(t.to < n && t.to != rank, "a frame to {} of {n}", t.to);
            let f = Frame::new_checked(&t.frame[..]).expect("a sent frame has a header");
            let r = Repr::parse(&f).expect("a sent frame parses");
            assert_eq!((r.from, r.group), (rank, GROUP));
            assert!(f.payload().len() <= limits.frame_max.max(8));
        }
        while let Some(e) = g.poll_event() {
            let t = match e {
                Event::Done { token, .. } | Event::Failed { token, .. } => token,
            };
            let seen = ops.get_mut(&t).expect("an event for an operation started");
            assert!(!*seen, "operation {t} reported twice");
            *seen = true;
        }
        if g.broken().is_some() {
            assert_eq!(g.running(), 0, "a broken group still runs operations");
            assert!(
                ops.values().all(|r| *r),
                "a started operation never reported"
            );
        }
    }
}
