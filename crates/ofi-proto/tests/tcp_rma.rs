//! One-sided requests under the simulated network: writes and reads of
//! many sizes and range lists at every split of the stream, virtual and
//! offset addressing, refusals that leave target memory untouched,
//! execution in stream order (a READ answer is captured before a later
//! WRITE changes the memory), atomics from several initiators, FI_FENCE,
//! acknowledged sends, connection loss at every offset, and hostile frames.

#![allow(clippy::needless_range_loop)] // indices name sides and ranges

mod common;

use common::*;
use ofi_base::atomic::AtomicKind;
use ofi_base::consts::atomic_op::*;
use ofi_base::consts::datatype::*;
use ofi_base::consts::*;
use ofi_base::error::errno;
use ofi_base::iov::IoVec;
use ofi_proto::tcp::{
    Ack, AtomicArgs, Config, Event, ProtoError, RecvReq, Remote, RmaReq, RxConfig, SendReq,
};
use ofi_wire::tcp::{kind, op, DescRepr, Range, Repr, MAX_RANGES};
use ofi_wire::WireError;
use std::sync::{Arc, Mutex};

const RW: u64 = FI_REMOTE_READ | FI_REMOTE_WRITE;
const REGION: usize = 8192;

fn cfg() -> Config {
    Config {
        eager_max: 256,
        data_chunk: 300,
        ..Config::default()
    }
}

/// Side 0 initiates; side 1 is a target with four regions: keys 0x11 and
/// 0x22 (read-write), 0x33 (remote read only), 0x44 (remote write only).
fn setup(seed: u64, virt: bool) -> (World, Arc<Mutex<SimTarget>>, Vec<SimRegion>) {
    let mut w = World::pair(seed, cfg(), RxConfig::default());
    let t = w.sides[1].make_target(virt);
    let regions = {
        let mut g = t.lock().unwrap();
        let mut v = vec![
            g.register(0x11, REGION, 11, RW),
            g.register(0x22, REGION, 22, RW),
            g.register(0x33, 64, 33, FI_REMOTE_READ),
            g.register(0x44, 64, 44, FI_REMOTE_WRITE),
        ];
        // Offset addressing: each region starts at its own requested offset.
        for (i, r) in v.iter_mut().enumerate() {
            r.offset = (i as u64) << 20;
        }
        g.regions = v.clone();
        v
    };
    (w, t, regions)
}

fn remote(t: &Arc<Mutex<SimTarget>>, r: &SimRegion, off: usize, len: usize) -> Remote {
    Remote {
        addr: t.lock().unwrap().addr(r, off),
        len: len as u64,
        key: r.key,
    }
}

/// Splits `len` bytes at random into `parts` ranges.
fn cuts(rng: &mut XorShift, len: usize, parts: usize) -> Vec<usize> {
    let mut c: Vec<usize> = (0..parts - 1).map(|_| rng.range(0, len)).collect();
    c.push(0);
    c.push(len);
    c.sort_unstable();
    c.windows(2).map(|p| p[1] - p[0]).collect()
}

/// Local ranges of the given lengths (each its own allocation).
fn local(w: &mut World, side: usize, lens: &[usize], data: Option<&[u8]>) -> Vec<IoVec> {
    let mut at = 0;
    let mut out = Vec::new();
    for &n in lens {
        let v = w.sides[side].mem.alloc(n);
        if let Some(d) = data {
            w.sides[side].mem.put(v.base, &d[at..at + n]);
        }
        w.sides[side].posted_regions.push(v);
        at += n;
        out.push(v);
    }
    out
}

fn region_bytes(t: &Arc<Mutex<SimTarget>>, r: &SimRegion) -> Vec<u8> {
    t.lock().unwrap().mem.get(r.buf).to_vec()
}

/// What the model says a region holds.
fn model(r: &SimRegion, seed: u64) -> Vec<u8> {
    let _ = r;
    pattern(seed, r.buf.len)
}

#[test]
fn writes_and_reads_land_in_place_at_every_split() {
    let sizes = [0usize, 1, 7, 100, 199, 300, 301, 1000, 5000];
    for seed in 0..24u64 {
        let virt = seed.is_multiple_of(2);
        let (mut w, t, regions) = setup(seed, virt);
        let mut rng = XorShift::new(seed * 31 + 7);
        let mut want = [model(&regions[0], 11), model(&regions[1], 22)];
        let mut ops = Vec::new();
        let mut written = 0;
        for (i, &n) in sizes.iter().enumerate() {
            let data = pattern(1000 + seed * 100 + i as u64, n);
            let lparts = rng.range(1, 4);
            let l = local(&mut w, 0, &cuts(&mut rng, n, lparts), Some(&data));
            let rparts = rng.range(1, MAX_RANGES);
            let mut rem = Vec::new();
            let mut at = 0;
            for len in cuts(&mut rng, n, rparts) {
                let which = rng.below(2);
                let off = rng.range(0, REGION - len);
                rem.push((which, off, len, at));
                at += len;
            }
            // Ranges of one request must not overlap for the model to hold.
            let overlap = rem.iter().enumerate().any(|(a, x)| {
                rem.iter()
                    .skip(a + 1)
                    .any(|y| x.0 == y.0 && x.1 < y.1 + y.2 && y.1 < x.1 + x.2 && x.2 > 0 && y.2 > 0)
            });
            if overlap {
                continue;
            }
            let rv: Vec<Remote> = rem
                .iter()
                .map(|&(k, off, len, _)| remote(&t, &regions[k], off, len))
                .collect();
            for &(k, off, len, at) in &rem {
                want[k][off..off + len].copy_from_slice(&data[at..at + len]);
            }
            let ctx = 10 + i;
            w.conn(0, 0).queue_rma(RmaReq::write(&l, &rv, ctx)).unwrap();
            written += n;
            ops.push((ctx, rv, n));
        }
        w.run();
        for (ctx, _, _) in &ops {
            assert_eq!(
                w.sides[0].rma_result(*ctx),
                Some(Ok(())),
                "seed {seed} write {ctx}"
            );
        }
        assert_eq!(region_bytes(&t, &regions[0]), want[0], "seed {seed}");
        assert_eq!(region_bytes(&t, &regions[1]), want[1], "seed {seed}");
        {
            let g = t.lock().unwrap();
            assert!(g.mem.guards_intact(regions[0].buf) && g.mem.guards_intact(regions[1].buf));
            assert_eq!(g.remote_writes, ops.len());
        }
        // Write data landed straight in registered memory.
        assert!(w.sides[1].stats.payload_bytes >= written, "seed {seed}");
        // Read every range back, into differently split local buffers.
        for (ctx, rv, n) in &ops {
            let lparts = rng.range(1, 4);
            let l = local(&mut w, 0, &cuts(&mut rng, *n, lparts), None);
            w.conn(0, 0)
                .queue_rma(RmaReq::read(&l, rv, 100 + ctx))
                .unwrap();
            w.run();
            assert_eq!(w.sides[0].rma_result(100 + ctx), Some(Ok(())));
            let got = w.sides[0].mem.gather(&l);
            let mut expect = Vec::new();
            for r in rv {
                let reg = regions.iter().find(|x| x.key == r.key).unwrap();
                let start = if virt {
                    r.addr as usize - reg.buf.base
                } else {
                    (r.addr - reg.offset) as usize
                };
                let k = if reg.key == 0x11 { 0 } else { 1 };
                expect.extend_from_slice(&want[k][start..start + r.len as usize]);
            }
            assert_eq!(got, expect, "seed {seed} read {ctx}");
            for v in &l {
                assert!(w.sides[0].mem.guards_intact(*v));
            }
        }
        assert_eq!(t.lock().unwrap().remote_reads, ops.len());
    }
}

#[test]
fn bytewise_splits() {
    let (mut w, t, regions) = setup(3, true);
    w.splits = Splits::Bytewise;
    let data = pattern(5, 700);
    let l = local(&mut w, 0, &[300, 400], Some(&data));
    let rv = [
        remote(&t, &regions[0], 10, 350),
        remote(&t, &regions[1], 20, 350),
    ];
    w.conn(0, 0).queue_rma(RmaReq::write(&l, &rv, 1)).unwrap();
    let back = local(&mut w, 0, &[700], None);
    w.conn(0, 0).queue_rma(RmaReq::read(&back, &rv, 2)).unwrap();
    w.run();
    assert_eq!(w.sides[0].rma_result(1), Some(Ok(())));
    assert_eq!(w.sides[0].rma_result(2), Some(Ok(())));
    assert_eq!(w.sides[0].mem.gather(&back), data);
}

/// Every refusal is answered with its error, leaves every byte of target
/// memory as it was, and the connection keeps working.
#[test]
fn refusals_leave_memory_untouched() {
    for virt in [true, false] {
        let (mut w, t, regions) = setup(9, virt);
        let before: Vec<Vec<u8>> = regions.iter().map(|r| region_bytes(&t, r)).collect();
        let r0 = &regions[0];
        let big = pattern(77, REGION + 1);
        let addr0 = t.lock().unwrap().addr(r0, 0);
        let bad_key = Remote {
            addr: addr0,
            len: 8,
            key: 0x99,
        };
        let cases: Vec<(&str, bool, Remote, i32)> = vec![
            ("unknown key", false, bad_key, errno::FI_EKEYREJECTED),
            ("unknown key (read)", true, bad_key, errno::FI_EKEYREJECTED),
            (
                "write without FI_REMOTE_WRITE",
                false,
                remote(&t, &regions[2], 0, 8),
                errno::FI_EACCES,
            ),
            (
                "read without FI_REMOTE_READ",
                true,
                remote(&t, &regions[3], 0, 8),
                errno::FI_EACCES,
            ),
            (
                "one byte past the end",
                false,
                remote(&t, r0, REGION - 7, 8),
                errno::FI_EACCES,
            ),
            (
                "one byte before the start",
                false,
                Remote {
                    addr: addr0.wrapping_sub(1),
                    len: 8,
                    key: r0.key,
                },
                errno::FI_EACCES,
            ),
            (
                "longer than the region",
                false,
                remote(&t, r0, 0, REGION + 1),
                errno::FI_EACCES,
            ),
            (
                "address plus length overflows",
                false,
                Remote {
                    addr: u64::MAX - 3,
                    len: 8,
                    key: r0.key,
                },
                errno::FI_EACCES,
            ),
            (
                "read one byte past the end",
                true,
                remote(&t, r0, REGION - 7, 8),
                errno::FI_EACCES,
            ),
        ];
        for (i, (what, read, rem, err)) in cases.into_iter().enumerate() {
            let n = rem.len as usize;
            let l = local(&mut w, 0, &[n], Some(&big[..n]));
            let req = if read {
                RmaReq::read(&l, &[rem], i)
            } else {
                RmaReq::write(&l, &[rem], i)
            };
            w.conn(0, 0).queue_rma(req).unwrap();
            w.run();
            assert_eq!(w.sides[0].rma_result(i), Some(Err(err)), "{what}");
            if read {
                assert_eq!(w.sides[0].mem.get(l[0]), &big[..n], "{what}: local buffer");
            }
            for (r, b) in regions.iter().zip(&before) {
                assert_eq!(&region_bytes(&t, r), b, "{what}: region {:#x}", r.key);
            }
        }
        // A request whose second range is bad writes nothing at all.
        let l = local(&mut w, 0, &[16], Some(&big[..16]));
        let rv = [remote(&t, r0, 0, 8), bad_key];
        w.conn(0, 0).queue_rma(RmaReq::write(&l, &rv, 50)).unwrap();
        w.run();
        assert_eq!(w.sides[0].rma_result(50), Some(Err(errno::FI_EKEYREJECTED)));
        assert_eq!(region_bytes(&t, r0), before[0]);
        // Still working.
        let l = local(&mut w, 0, &[8], Some(b"still ok"));
        let rv = [remote(&t, r0, 8, 8)];
        w.conn(0, 0).queue_rma(RmaReq::write(&l, &rv, 60)).unwrap();
        w.run();
        assert_eq!(w.sides[0].rma_result(60), Some(Ok(())));
        assert_eq!(&region_bytes(&t, r0)[8..16], b"still ok");
        assert!(!w.sides[1].has_conn_event(|e| matches!(e, Event::ProtocolError(_))));
    }
}

#[test]
fn writedata_delivers_remote_cq_data_without_a_receive() {
    let (mut w, t, regions) = setup(4, true);
    let r = w.sides[1].mem.alloc(64);
    w.sides[1].post(RecvReq::msg(&[r], 900)).unwrap();
    let l = local(&mut w, 0, &[40], Some(&pattern(8, 40)));
    let rv = [remote(&t, &regions[0], 0, 40)];
    w.conn(0, 0)
        .queue_rma(RmaReq::write(&l, &rv, 1).with_data(0xfeed))
        .unwrap();
    // A refused writedata delivers nothing.
    let rv_bad = [remote(&t, &regions[2], 0, 40)];
    w.conn(0, 0)
        .queue_rma(RmaReq::write(&l, &rv_bad, 2).with_data(0xbad))
        .unwrap();
    w.run();
    assert_eq!(w.sides[0].rma_result(1), Some(Ok(())));
    assert_eq!(w.sides[0].rma_result(2), Some(Err(errno::FI_EACCES)));
    assert_eq!(
        w.sides[1].remote_cq(),
        vec![(FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA, 40, 0xfeed, 0)]
    );
    assert!(w.sides[1].try_done(900).is_none());
    assert_eq!(w.sides[1].rx.queues().posted_len(false), 1);
}

/// Drives only what the initiator sends and what the target reads, so the
/// target's answers stay unwritten.
fn deliver_requests(w: &mut World) {
    loop {
        let m = w.tx(0, 0, usize::MAX) + w.rx(0, 1, usize::MAX);
        if m == 0 {
            break;
        }
    }
}

#[test]
fn a_read_sees_memory_as_it_was_when_executed() {
    // 64 bytes: one frame, copied into the stage with its header; 2000: a
    // few frames, still copied; 8000: the captured bytes are sent from
    // their own buffer, a frame at a time.
    for n in [64, 2000, 8000] {
        let (mut w, t, regions) = setup(5, true);
        let old = region_bytes(&t, &regions[0])[..n].to_vec();
        let rv = [remote(&t, &regions[0], 0, n)];
        let back = local(&mut w, 0, &[n], None);
        let newer = pattern(99, n);
        let l = local(&mut w, 0, &[n], Some(&newer));
        let back2 = local(&mut w, 0, &[n], None);
        w.conn(0, 0).queue_rma(RmaReq::read(&back, &rv, 1)).unwrap();
        w.conn(0, 0).queue_rma(RmaReq::write(&l, &rv, 2)).unwrap();
        w.conn(0, 0)
            .queue_rma(RmaReq::read(&back2, &rv, 3))
            .unwrap();
        deliver_requests(&mut w);
        // The WRITE executed while the first READ's answer was unwritten.
        assert_eq!(&region_bytes(&t, &regions[0])[..n], &newer[..]);
        assert!(t.lock().unwrap().copies > 0);
        w.run();
        for c in 1..=3 {
            assert_eq!(w.sides[0].rma_result(c), Some(Ok(())));
        }
        assert_eq!(
            w.sides[0].mem.get(back[0]),
            &old[..],
            "read after write reordered"
        );
        assert_eq!(w.sides[0].mem.get(back2[0]), &newer[..]);
    }
}

/// Several READ answers captured at once, each sent from its own held
/// buffer: every READ gets the bytes of its own range as they were, round
/// after round (the buffers are released in order and reused).
#[test]
fn captured_answers_keep_their_own_bytes() {
    let (mut w, t, regions) = setup(6, true);
    let n = 2500;
    for round in 0..3u8 {
        let olds: Vec<Vec<u8>> = (0..3)
            .map(|i| region_bytes(&t, &regions[0])[i * n..(i + 1) * n].to_vec())
            .collect();
        let mut backs = Vec::new();
        for i in 0..3 {
            let rv = [remote(&t, &regions[0], i * n, n)];
            let back = local(&mut w, 0, &[n], None);
            let ctx = 10 * u64::from(round) + i as u64 + 1;
            w.conn(0, 0)
                .queue_rma(RmaReq::read(&back, &rv, ctx as usize))
                .unwrap();
            backs.push((ctx, back));
        }
        // One WRITE over all three ranges, executed while the answers wait.
        let newer = pattern(50 + u64::from(round), 3 * n);
        let l = local(&mut w, 0, &[3 * n], Some(&newer));
        let rv = [remote(&t, &regions[0], 0, 3 * n)];
        let wctx = 10 * u64::from(round) + 9;
        w.conn(0, 0)
            .queue_rma(RmaReq::write(&l, &rv, wctx as usize))
            .unwrap();
        deliver_requests(&mut w);
        assert_eq!(&region_bytes(&t, &regions[0])[..3 * n], &newer[..]);
        w.run();
        assert_eq!(w.sides[0].rma_result(wctx as usize), Some(Ok(())));
        for (i, (ctx, back)) in backs.iter().enumerate() {
            assert_eq!(w.sides[0].rma_result(*ctx as usize), Some(Ok(())));
            assert_eq!(
                w.sides[0].mem.get(back[0]),
                &olds[i][..],
                "round {round}: READ {i} got other bytes"
            );
        }
    }
}

/// READs and WRITEs on one region, interleaved at random, with the
/// target's answers left unwritten for random stretches (so answers are
/// captured, small ones into the stage, larger ones into held buffers,
/// some partly written already): every READ returns the region as it was
/// at its place in the request stream.
#[test]
fn interleaved_reads_and_writes_read_what_the_stream_order_says() {
    let mut captured = 0;
    for seed in 0..64u64 {
        let (mut w, t, regions) = setup(100 + seed, seed % 2 == 0);
        let mut rng = XorShift::new(seed * 7919 + 3);
        let mut want = region_bytes(&t, &regions[0]);
        let mut reads = Vec::new();
        let mut ctx = 1000;
        for _batch in 0..6 {
            for _ in 0..rng.range(1, 6) {
                ctx += 1;
                let len = match rng.below(3) {
                    0 => rng.range(1, 300),
                    1 => rng.range(300, 2048),
                    _ => rng.range(2048, 6000),
                };
                let off = rng.range(0, REGION - len);
                let rv = [remote(&t, &regions[0], off, len)];
                if rng.chance(2) {
                    let l = local(&mut w, 0, &[len], None);
                    w.conn(0, 0).queue_rma(RmaReq::read(&l, &rv, ctx)).unwrap();
                    reads.push((ctx, l, want[off..off + len].to_vec()));
                } else {
                    let data = pattern(seed * 1000 + ctx as u64, len);
                    let l = local(&mut w, 0, &[len], Some(&data));
                    w.conn(0, 0).queue_rma(RmaReq::write(&l, &rv, ctx)).unwrap();
                    want[off..off + len].copy_from_slice(&data);
                }
            }
            match rng.below(3) {
                // Requests reach the target; its answers wait.
                0 => deliver_requests(&mut w),
                // Some of everything moves.
                1 => {
                    for _ in 0..rng.range(1, 20) {
                        let lim = rng.range(1, 5000);
                        w.tx(0, rng.below(2), lim);
                        w.rx(0, rng.below(2), lim);
                    }
                }
                _ => w.run(),
            }
        }
        w.run();
        assert_eq!(region_bytes(&t, &regions[0]), want, "seed {seed}");
        for (c, l, expect) in &reads {
            assert_eq!(
                w.sides[0].rma_result(*c),
                Some(Ok(())),
                "seed {seed} read {c}"
            );
            assert!(
                w.sides[0].mem.gather(l) == *expect,
                "seed {seed}: read {c} did not see the region as of its place in the stream"
            );
        }
        captured += t.lock().unwrap().copies;
    }
    // The schedule did make the core capture answers out of memory.
    assert!(captured > 0);
}

/// A READ's grant is held until its answer's bytes have left (the driver
/// sends them straight from the registered memory), so closing the region
/// waits for them; then it is released.
#[test]
fn a_read_holds_its_grant_until_the_answer_is_out() {
    let (mut w, t, regions) = setup(8, true);
    let n = 2000;
    let rv = [remote(&t, &regions[0], 0, n)];
    let back = local(&mut w, 0, &[n], None);
    w.conn(0, 0).queue_rma(RmaReq::read(&back, &rv, 1)).unwrap();
    deliver_requests(&mut w);
    assert_eq!(
        t.lock().unwrap().grants_held(),
        1,
        "the READ's grant was released before its answer was written"
    );
    w.run();
    assert_eq!(w.sides[0].rma_result(1), Some(Ok(())));
    let g = t.lock().unwrap();
    assert_eq!((g.grants_held(), g.remote_reads), (0, 1));
    assert_eq!(
        w.sides[0].mem.get(back[0]),
        &region_bytes_of(&g, &regions[0])[..n]
    );
}

fn region_bytes_of(g: &SimTarget, r: &SimRegion) -> Vec<u8> {
    g.mem.get(r.buf).to_vec()
}

/// A region closed while a WRITE's data is still arriving: the rest of the
/// data is discarded, the grant released, the initiator told
/// FI_EKEYREJECTED.
#[test]
fn a_write_stops_landing_once_its_region_is_revoked() {
    let (mut w, t, regions) = setup(9, true);
    let n = 5000;
    let data = pattern(77, n);
    let l = local(&mut w, 0, &[n], Some(&data));
    let rv = [remote(&t, &regions[0], 0, n)];
    w.conn(0, 0).queue_rma(RmaReq::write(&l, &rv, 1)).unwrap();
    // Bytes a few at a time until the WRITE is resolved and some of its
    // data has landed.
    let mut moved = 0;
    while t.lock().unwrap().grants_held() == 0 || moved < 1200 {
        let m = w.tx(0, 0, usize::MAX) + w.rx(0, 1, 100);
        assert!(m > 0, "the WRITE stalled after {moved} bytes");
        moved += m;
    }
    assert_eq!(t.lock().unwrap().grants_held(), 1, "the WRITE is landing");
    t.lock().unwrap().revoked.push(regions[0].key);
    let before = region_bytes(&t, &regions[0]);
    w.run();
    assert_eq!(
        region_bytes(&t, &regions[0]),
        before,
        "data landed after the region was revoked"
    );
    assert_eq!(w.sides[0].rma_result(1), Some(Err(errno::FI_EKEYREJECTED)));
    let g = t.lock().unwrap();
    assert_eq!((g.grants_held(), g.released_undone), (0, 1));
}

#[test]
fn a_send_after_a_write_finds_the_data_placed() {
    let (mut w, t, regions) = setup(6, true);
    let data = pattern(3, 1000);
    let l = local(&mut w, 0, &[1000], Some(&data));
    let rv = [remote(&t, &regions[0], 0, 1000)];
    w.conn(0, 0).queue_rma(RmaReq::write(&l, &rv, 1)).unwrap();
    let s = w.sides[0].mem.alloc_pattern(4, 0);
    w.sides[0].send(0, SendReq::msg(&[s], 2)).unwrap();
    // The target checks its memory when the message completes.
    let r = w.sides[1].mem.alloc(4);
    w.sides[1].post(RecvReq::msg(&[r], 7)).unwrap();
    loop {
        let moved = w.tx(0, 0, 97) + w.rx(0, 1, 89) + w.tx(0, 1, 1000) + w.rx(0, 0, 1000);
        if w.sides[1].try_done(7).is_some() {
            assert_eq!(&region_bytes(&t, &regions[0])[..1000], &data[..]);
            break;
        }
        assert!(moved > 0, "stalled");
    }
}

fn u64s(v: &[u8]) -> Vec<u64> {
    v.chunks(8)
        .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
        .collect()
}

fn fetch(op: u32, dt: u32) -> AtomicArgs {
    AtomicArgs {
        kind: AtomicKind::Fetch,
        op,
        datatype: dt,
    }
}

#[test]
fn atomics_apply_and_return_original_values() {
    let (mut w, t, regions) = setup(8, false);
    let r0 = regions[0];
    let init: Vec<u8> = [10u64, 20, 30, 40]
        .iter()
        .flat_map(|x| x.to_ne_bytes())
        .collect();
    t.lock().unwrap().mem.put(r0.buf.base, &init);
    // fetch-add 5 on elements 0 and 2 (two ranges).
    let opnd = local(
        &mut w,
        0,
        &[16],
        Some(&[5u64.to_ne_bytes(), 5u64.to_ne_bytes()].concat()),
    );
    let res = local(&mut w, 0, &[8, 8], None);
    let rv = [remote(&t, &r0, 0, 1), remote(&t, &r0, 16, 1)];
    w.conn(0, 0)
        .queue_rma(RmaReq::atomic(
            fetch(FI_SUM, FI_UINT64),
            &opnd,
            &[],
            &res,
            &rv,
            1,
        ))
        .unwrap();
    // cswap element 1: compare 20 (matches) -> 99; then compare 20 again (fails).
    for (ctx, cmp) in [(2usize, 20u64), (3, 20)] {
        let o = local(&mut w, 0, &[8], Some(&99u64.to_ne_bytes()));
        let c = local(&mut w, 0, &[8], Some(&cmp.to_ne_bytes()));
        let r = local(&mut w, 0, &[8], None);
        let args = AtomicArgs {
            kind: AtomicKind::Compare,
            op: FI_CSWAP,
            datatype: FI_UINT64,
        };
        w.conn(0, 0)
            .queue_rma(RmaReq::atomic(
                args,
                &o,
                &c,
                &r,
                &[remote(&t, &r0, 8, 1)],
                ctx,
            ))
            .unwrap();
        w.run();
        assert_eq!(w.sides[0].rma_result(ctx), Some(Ok(())));
        assert_eq!(
            u64s(w.sides[0].mem.get(r[0])),
            [if ctx == 2 { 20 } else { 99 }]
        );
    }
    // Atomic read of all four, on a region that only grants remote read.
    let ro = regions[2];
    t.lock().unwrap().mem.put(ro.buf.base, &7u64.to_ne_bytes());
    let r_ro = local(&mut w, 0, &[8], None);
    w.conn(0, 0)
        .queue_rma(RmaReq::atomic(
            fetch(FI_ATOMIC_READ, FI_UINT64),
            &[],
            &[],
            &r_ro,
            &[remote(&t, &ro, 0, 1)],
            4,
        ))
        .unwrap();
    // ... where a sum is refused.
    let o = local(&mut w, 0, &[8], Some(&1u64.to_ne_bytes()));
    let r_no = local(&mut w, 0, &[8], Some(&[0xee; 8]));
    w.conn(0, 0)
        .queue_rma(RmaReq::atomic(
            fetch(FI_SUM, FI_UINT64),
            &o,
            &[],
            &r_no,
            &[remote(&t, &ro, 0, 1)],
            5,
        ))
        .unwrap();
    // A basic bitwise or on two u32s.
    let o = local(&mut w, 0, &[8], Some(&[0x0f, 0, 0, 0, 0xf0, 0, 0, 0]));
    let basic = AtomicArgs {
        kind: AtomicKind::Basic,
        op: FI_BOR,
        datatype: FI_UINT32,
    };
    w.conn(0, 0)
        .queue_rma(RmaReq::atomic(
            basic,
            &o,
            &[],
            &[],
            &[remote(&t, &regions[1], 0, 2)],
            6,
        ))
        .unwrap();
    w.run();
    assert_eq!(w.sides[0].rma_result(1), Some(Ok(())));
    assert_eq!(u64s(&w.sides[0].mem.gather(&res)), [10, 30]);
    assert_eq!(w.sides[0].rma_result(4), Some(Ok(())));
    assert_eq!(u64s(w.sides[0].mem.get(r_ro[0])), [7]);
    assert_eq!(w.sides[0].rma_result(5), Some(Err(errno::FI_EACCES)));
    assert_eq!(w.sides[0].mem.get(r_no[0]), &[0xee; 8]);
    assert_eq!(w.sides[0].rma_result(6), Some(Ok(())));
    let m = region_bytes(&t, &r0);
    assert_eq!(u64s(&m[..32]), [15, 99, 35, 40]);
    let r1 = region_bytes(&t, &regions[1]);
    let before = pattern(22, 8);
    assert_eq!(r1[0], before[0] | 0x0f);
    assert_eq!(r1[4], before[4] | 0xf0);
    assert_eq!(&r1[1..4], &before[1..4]);
    // Shapes the core refuses before anything is sent.
    let bad = RmaReq::atomic(
        AtomicArgs {
            kind: AtomicKind::Basic,
            op: FI_BOR,
            datatype: FI_DOUBLE,
        },
        &o,
        &[],
        &[],
        &[remote(&t, &r0, 0, 1)],
        7,
    );
    assert_eq!(w.conn(0, 0).queue_rma(bad), Err(errno::FI_EOPNOTSUPP));
    let short = RmaReq::atomic(
        fetch(FI_SUM, FI_UINT64),
        &o,
        &[],
        &[],
        &[remote(&t, &r0, 0, 1)],
        8,
    );
    assert_eq!(w.conn(0, 0).queue_rma(short), Err(errno::FI_EINVAL));
}

/// Four initiators, 1000 fetch-adds of 1 each on one target word: the word
/// ends at 4000 and every original value 0..4000 is seen exactly once.
#[test]
fn fetch_adds_from_four_initiators_are_atomic() {
    let mut w = World::new(12, cfg());
    let target = w.add_side(b"T", RxConfig::default());
    let t = w.sides[target].make_target(true);
    let word = {
        let mut g = t.lock().unwrap();
        let r = g.register(0x55, 8, 0, RW);
        g.mem.put(r.buf.base, &0u64.to_ne_bytes());
        r
    };
    let mut inits = Vec::new();
    for i in 0..4 {
        let s = w.add_side(format!("I{i}").as_bytes(), RxConfig::default());
        let (_, c, _) = w.connect(s, target, b"");
        inits.push((s, c));
    }
    w.run();
    let one = 1u64.to_ne_bytes();
    let rv = [Remote {
        addr: word.buf.base as u64,
        len: 1,
        key: 0x55,
    }];
    let mut results = Vec::new();
    for k in 0..1000usize {
        for &(s, c) in &inits {
            let o = w.sides[s].mem.alloc(8);
            w.sides[s].mem.put(o.base, &one);
            let r = w.sides[s].mem.alloc(8);
            w.sides[s].posted_regions.push(r);
            let ctx = k;
            w.sides[s].conns[c as usize]
                .queue_rma(RmaReq::atomic(
                    fetch(FI_SUM, FI_UINT64),
                    &[o],
                    &[],
                    &[r],
                    &rv,
                    ctx,
                ))
                .unwrap();
            results.push((s, ctx, r));
        }
        if k % 100 == 99 {
            w.run();
        }
    }
    w.run();
    let mut seen: Vec<u64> = results
        .iter()
        .map(|&(s, ctx, r)| {
            assert_eq!(w.sides[s].rma_result(ctx), Some(Ok(())));
            u64s(w.sides[s].mem.get(r))[0]
        })
        .collect();
    seen.sort_unstable();
    assert_eq!(seen, (0..4000).collect::<Vec<u64>>());
    assert_eq!(u64s(t.lock().unwrap().mem.get(word.buf)), [4000]);
}

/// A READ into a local buffer, then a WRITE of that buffer: with FI_FENCE
/// the WRITE starts only after the READ completed, so it carries what the
/// READ brought; without it the WRITE is on the wire first.
#[test]
fn fence_holds_an_operation_until_earlier_ones_complete() {
    for fenced in [false, true] {
        let (mut w, t, regions) = setup(10, true);
        let a = remote(&t, &regions[0], 0, 500);
        let b = remote(&t, &regions[1], 0, 500);
        let l = local(&mut w, 0, &[500], Some(&[0u8; 500]));
        w.conn(0, 0).queue_rma(RmaReq::read(&l, &[a], 1)).unwrap();
        let wr = RmaReq::write(&l, &[b], 2);
        w.conn(0, 0)
            .queue_rma(if fenced { wr.fenced() } else { wr })
            .unwrap();
        if fenced {
            // Held: only the READ is in flight and nothing more is staged.
            w.tx(0, 0, usize::MAX);
            assert_eq!(w.conn(0, 0).in_flight(), 1);
            assert!(!w.conn(0, 0).wants_transmit());
        }
        w.run();
        assert_eq!(w.sides[0].rma_result(1), Some(Ok(())));
        assert_eq!(w.sides[0].rma_result(2), Some(Ok(())));
        let got = region_bytes(&t, &regions[1])[..500].to_vec();
        let a_bytes = pattern(11, 500);
        if fenced {
            assert_eq!(got, a_bytes);
        } else {
            assert_eq!(got, vec![0u8; 500]);
        }
    }
}

#[test]
fn acknowledged_sends_complete_when_the_peer_has_them() {
    for (ack, size) in [
        (Ack::Received, 40),
        (Ack::Placed, 40),
        (Ack::Received, 0),
        (Ack::Placed, 1000),
        (Ack::Received, 1000),
    ] {
        let mut w = World::pair(2, cfg(), RxConfig::default());
        let s = w.sides[0].mem.alloc_pattern(size, 1);
        w.sides[0]
            .send(0, SendReq::msg(&[s], 1).with_ack(ack))
            .unwrap();
        w.run();
        // Unexpected at the peer: received, not placed.
        let rendezvous = size > cfg().eager_max;
        let early = ack == Ack::Received && !rendezvous;
        assert_eq!(
            w.sides[0].sends_done(),
            if early { vec![1] } else { vec![] },
            "{ack:?} {size}"
        );
        let r = w.sides[1].mem.alloc(size);
        w.sides[1].post(RecvReq::msg(&[r], 5)).unwrap();
        w.run();
        assert_eq!(w.sides[0].sends_done(), vec![1], "{ack:?} {size}");
        assert_eq!(w.sides[1].mem.get(r), &pattern(1, size)[..]);
        // Expected at the peer: completes once placed.
        let r = w.sides[1].mem.alloc(size);
        w.sides[1].post(RecvReq::msg(&[r], 6)).unwrap();
        w.sides[0]
            .send(0, SendReq::msg(&[s], 2).with_ack(ack))
            .unwrap();
        w.run();
        assert_eq!(w.sides[0].sends_done(), vec![1, 2]);
        assert!(w.sides[0].send_errors().is_empty());
    }
}

/// Connection loss at every offset of a mixed one-sided stream: every
/// request ends exactly once, every grant the target took is released.
#[test]
fn connection_loss_at_every_offset_ends_every_request() {
    let mut total = None;
    let mut at = 0usize;
    loop {
        let (mut w, t, regions) = setup(13, at.is_multiple_of(2));
        let data = pattern(4, 900);
        let l = local(&mut w, 0, &[900], Some(&data));
        let rv = [remote(&t, &regions[0], 100, 900)];
        w.conn(0, 0).queue_rma(RmaReq::write(&l, &rv, 1)).unwrap();
        let back = local(&mut w, 0, &[900], None);
        w.conn(0, 0).queue_rma(RmaReq::read(&back, &rv, 2)).unwrap();
        let o = local(&mut w, 0, &[8], Some(&3u64.to_ne_bytes()));
        let r = local(&mut w, 0, &[8], None);
        w.conn(0, 0)
            .queue_rma(RmaReq::atomic(
                fetch(FI_SUM, FI_UINT64),
                &o,
                &[],
                &r,
                &[remote(&t, &regions[1], 0, 1)],
                3,
            ))
            .unwrap();
        w.conn(0, 0)
            .queue_rma(RmaReq::write(&l, &rv, 4).with_data(1))
            .unwrap();
        match total {
            None => {
                w.run();
                total = Some(w.sides[0].stats.written + w.sides[1].stats.written);
                for c in 1..=4 {
                    assert_eq!(w.sides[0].rma_result(c), Some(Ok(())));
                }
            }
            Some(n) => {
                if at >= n {
                    break;
                }
                // Deliver `at` bytes in total, then cut.
                w.links[0].limit = [Some(at / 2), Some(at - at / 2)];
                w.run();
                w.cut(0, at % 2, errno::FI_ECONNRESET);
                for c in 1..=4 {
                    let ends = w.sides[0]
                        .conn_events
                        .iter()
                        .filter(|(_, e)| {
                            matches!(e, Event::RmaComplete { context } | Event::RmaError { context, .. } if *context == c)
                        })
                        .count();
                    assert_eq!(ends, 1, "cut at {at}: request {c}");
                }
            }
        }
        let g = t.lock().unwrap();
        assert!(g.mem.guards_intact(regions[0].buf));
        drop(g);
        // Every grant was released (SimMemory panics on unknown ones; none may be left).
        assert!(
            format!("{:?}", t.lock().unwrap()).contains("grants: {}"),
            "cut at {at}"
        );
        at += 37;
    }
}

// ---- hostile frames ----------------------------------------------------------

fn frame(r: Repr, payload: &[u8]) -> Vec<u8> {
    let mut v = r.to_bytes().to_vec();
    v.extend_from_slice(payload);
    v
}

fn desc(k: u8, o: u8, dt: u8, ranges: &[Range]) -> Vec<u8> {
    let mut d = DescRepr {
        kind: k,
        op: o,
        datatype: dt,
        count: ranges.len(),
        ..Default::default()
    };
    d.ranges[..ranges.len()].copy_from_slice(ranges);
    let mut v = Vec::new();
    d.append_to(&mut v);
    v
}

fn request(o: u8, d: &[u8], after: &[u8], id: u64) -> Vec<u8> {
    let mut p = d.to_vec();
    p.extend_from_slice(after);
    frame(
        Repr {
            op: o,
            len: p.len() as u64,
            tag: after.len() as u64,
            id,
            ..Default::default()
        },
        &p,
    )
}

#[test]
fn hostile_requests_close_the_connection_and_write_nothing() {
    let good = |t: &Arc<Mutex<SimTarget>>, r: &SimRegion| Range {
        addr: t.lock().unwrap().addr(r, 0),
        len: 8,
        key: r.key,
    };
    type Case = (&'static str, fn(Range) -> Vec<u8>, Option<ProtoError>);
    let v = |m| Some(ProtoError::Violation(m));
    let cases: Vec<Case> = vec![
        (
            "five ranges",
            |g| {
                let mut d = desc(kind::RMA, 0, 0, &[g; 4]);
                d[0] = 5;
                d.extend_from_slice(&[0; 24]);
                request(op::WRITE, &d, &[], 1)
            },
            Some(ProtoError::Wire(WireError::Malformed(
                "request without a whole range descriptor",
            ))),
        ),
        (
            "range count disagrees with the descriptor length",
            |g| {
                let mut d = desc(kind::RMA, 0, 0, &[g; 2]);
                d[0] = 1;
                request(op::READ, &d, &[], 1)
            },
            Some(ProtoError::Wire(WireError::Malformed(
                "descriptor length disagrees with its range count",
            ))),
        ),
        (
            "lengths that overflow",
            |g| {
                let big = Range { len: u64::MAX, ..g };
                request(op::READ, &desc(kind::RMA, 0, 0, &[big, big]), &[], 1)
            },
            v("a request longer than the maximum"),
        ),
        (
            "a read above the maximum size",
            |g| {
                let big = Range {
                    len: u64::MAX / 2 + 1,
                    ..g
                };
                request(op::READ, &desc(kind::RMA, 0, 0, &[big]), &[], 1)
            },
            v("a request longer than the maximum"),
        ),
        (
            "a WRITE carrying more than its ranges",
            |g| request(op::WRITE, &desc(kind::RMA, 0, 0, &[g]), &[1; 9], 1),
            v("a WRITE carrying more than its ranges hold"),
        ),
        (
            "an unknown atomic operation",
            |g| {
                request(
                    op::ATOMIC,
                    &desc(kind::ATOMIC, 99, FI_UINT64 as u8, &[Range { len: 1, ..g }]),
                    &[0; 8],
                    1,
                )
            },
            v("an unknown atomic operation or datatype"),
        ),
        (
            "an unknown datatype",
            |g| {
                request(
                    op::ATOMIC,
                    &desc(kind::ATOMIC, FI_SUM as u8, 200, &[Range { len: 1, ..g }]),
                    &[0; 8],
                    1,
                )
            },
            v("an unknown atomic operation or datatype"),
        ),
        (
            "operands that disagree with the ranges",
            |g| {
                request(
                    op::ATOMIC,
                    &desc(
                        kind::ATOMIC,
                        FI_SUM as u8,
                        FI_UINT64 as u8,
                        &[Range { len: 2, ..g }],
                    ),
                    &[0; 8],
                    1,
                )
            },
            v("ATOMIC operands disagree with its ranges"),
        ),
        (
            "an atomic element count that overflows",
            |g| {
                request(
                    op::ATOMIC,
                    &desc(
                        kind::FETCH,
                        FI_ATOMIC_READ as u8,
                        FI_UINT64 as u8,
                        &[Range {
                            len: u64::MAX / 4,
                            ..g
                        }],
                    ),
                    &[],
                    1,
                )
            },
            v("a range length overflows"),
        ),
        (
            "atomic fields on a read",
            |g| request(op::READ, &desc(kind::FETCH, FI_SUM as u8, 0, &[g]), &[], 1),
            Some(ProtoError::Wire(WireError::Malformed(
                "atomic fields in an RMA descriptor",
            ))),
        ),
        (
            "an answer to an unknown request",
            |_| {
                frame(
                    Repr {
                        op: op::RESP,
                        id: 4242,
                        ..Default::default()
                    },
                    &[],
                )
            },
            v("an answer to an unknown request"),
        ),
        (
            "RESP_DATA for nothing",
            |_| {
                frame(
                    Repr {
                        op: op::RESP_DATA,
                        len: 3,
                        id: 1,
                        ..Default::default()
                    },
                    &[1, 2, 3],
                )
            },
            v("RESP_DATA for no answer in progress"),
        ),
        (
            "DATA beyond a write",
            |g| {
                let mut b = request(op::WRITE, &desc(kind::RMA, 0, 0, &[g]), &[1; 4], 7);
                b.extend(frame(
                    Repr {
                        op: op::DATA,
                        len: 5,
                        id: 7,
                        ..Default::default()
                    },
                    &[2; 5],
                ));
                b
            },
            v("DATA beyond the WRITE's length"),
        ),
        (
            "a message inside a write's data",
            |g| {
                let mut b = request(op::WRITE, &desc(kind::RMA, 0, 0, &[g]), &[1; 4], 7);
                b.extend(frame(
                    Repr {
                        op: op::MSG,
                        len: 1,
                        id: 1,
                        ..Default::default()
                    },
                    &[2],
                ));
                b
            },
            v("a frame inside a WRITE's data"),
        ),
    ];
    for (what, make, want) in cases {
        let (mut w, t, regions) = setup(21, true);
        let before: Vec<Vec<u8>> = regions.iter().map(|r| region_bytes(&t, r)).collect();
        let bytes = make(good(&t, &regions[0]));
        w.links[0].pipes[1].extend(bytes);
        for _ in 0..4 {
            w.rx(0, 1, usize::MAX);
            w.tx(0, 1, usize::MAX);
        }
        let err = w.sides[1]
            .conn_events
            .iter()
            .find_map(|(_, e)| match e {
                Event::ProtocolError(p) => Some(*p),
                _ => None,
            })
            .unwrap_or_else(|| panic!("{what}: no protocol error: {:?}", w.sides[1].conn_events));
        if let Some(want) = want {
            assert_eq!(err, want, "{what}");
        }
        assert!(w.sides[1].conns[0].is_closed(), "{what}");
        // A WRITE whose later frames break the protocol has placed what its
        // valid first frame carried (4 bytes it was entitled to), no more.
        let mut expect = before.clone();
        if what.contains("a write") && !what.contains("carrying") {
            expect[0][..4].copy_from_slice(&[1; 4]);
        }
        for (r, b) in regions.iter().zip(&expect) {
            assert!(
                &region_bytes(&t, r) == b,
                "{what}: region {:#x} changed",
                r.key
            );
        }
        assert!(
            format!("{:?}", t.lock().unwrap()).contains("grants: {}"),
            "{what}"
        );
    }
}

/// Requests queued before the connection is up go out after ACCEPT.
#[test]
fn requests_wait_for_the_connection() {
    let mut w = World::new(1, cfg());
    w.add_side(b"A", RxConfig::default());
    w.add_side(b"B", RxConfig::default());
    let t = w.sides[1].make_target(true);
    let r = t.lock().unwrap().register(0x11, 64, 1, RW);
    w.connect(0, 1, b"");
    let l = local(&mut w, 0, &[16], None);
    let rv = [Remote {
        addr: r.buf.base as u64,
        len: 16,
        key: 0x11,
    }];
    w.conn(0, 0).queue_rma(RmaReq::read(&l, &rv, 1)).unwrap();
    w.run();
    assert_eq!(w.sides[0].rma_result(1), Some(Ok(())));
    assert_eq!(w.sides[0].mem.get(l[0]), &pattern(1, 16)[..]);
    // Without target memory, requests are refused, not dropped.
    let mut w2 = World::pair(1, cfg(), RxConfig::default());
    let l = local(&mut w2, 0, &[16], None);
    w2.conn(0, 0).queue_rma(RmaReq::read(&l, &rv, 1)).unwrap();
    w2.run();
    assert_eq!(w2.sides[0].rma_result(1), Some(Err(errno::FI_EOPNOTSUPP)));
}

/// FI_COMMIT_COMPLETE: a write or atomic into durable memory is persisted,
/// with all its bytes in place, before the initiator sees success; one into
/// memory the target cannot make durable is refused before a byte lands;
/// a failed write-back fails the request.
#[test]
fn commit_complete_persists_before_success_and_refuses_volatile_memory() {
    for virt in [true, false] {
        let (mut w, t, regions) = setup(12, virt);
        let (durable, volatile) = (regions[0], regions[1]);
        t.lock().unwrap().durable.push(durable.key);
        let before = region_bytes(&t, &volatile);

        // A write of many DATA chunks, in two ranges, into durable memory.
        let data = pattern(5, 5000);
        let l = local(&mut w, 0, &[5000], Some(&data));
        let rv = [
            remote(&t, &durable, 100, 3000),
            remote(&t, &durable, 4000, 2000),
        ];
        let req = RmaReq::write(&l, &rv, 1).commit_complete();
        w.conn(0, 0).queue_rma(req).unwrap();
        w.run();
        assert_eq!(w.sides[0].rma_result(1), Some(Ok(())));
        {
            let g = t.lock().unwrap();
            assert_eq!(g.persisted.len(), 2, "both ranges persisted");
            assert_eq!(
                g.persisted[0].1,
                data[..3000],
                "persisted after every byte landed"
            );
            assert_eq!(g.persisted[1].1, data[3000..]);
        }
        let got = region_bytes(&t, &durable);
        assert_eq!(got[100..3100], data[..3000]);
        assert_eq!(got[4000..6000], data[3000..]);

        // Into memory that cannot be made durable: refused, nothing lands.
        let l = local(&mut w, 0, &[700], Some(&data[..700]));
        let req = RmaReq::write(&l, &[remote(&t, &volatile, 0, 700)], 2).commit_complete();
        w.conn(0, 0).queue_rma(req).unwrap();
        w.run();
        assert_eq!(w.sides[0].rma_result(2), Some(Err(errno::FI_EOPNOTSUPP)));
        assert_eq!(region_bytes(&t, &volatile), before);
        // A request spanning both kinds is refused whole.
        let l = local(&mut w, 0, &[16], Some(&data[..16]));
        let rv = [remote(&t, &durable, 0, 8), remote(&t, &volatile, 0, 8)];
        w.conn(0, 0)
            .queue_rma(RmaReq::write(&l, &rv, 3).commit_complete())
            .unwrap();
        w.run();
        assert_eq!(w.sides[0].rma_result(3), Some(Err(errno::FI_EOPNOTSUPP)));
        assert_eq!(region_bytes(&t, &volatile), before);
        assert_eq!(region_bytes(&t, &durable)[..8], got[..8]);
        // Without the flag the same memory takes the write, unpersisted.
        let l = local(&mut w, 0, &[8], Some(b"volatile"));
        let req = RmaReq::write(&l, &[remote(&t, &volatile, 0, 8)], 4);
        w.conn(0, 0).queue_rma(req).unwrap();
        w.run();
        assert_eq!(w.sides[0].rma_result(4), Some(Ok(())));
        assert_eq!(&region_bytes(&t, &volatile)[..8], b"volatile");
        assert_eq!(t.lock().unwrap().persisted.len(), 2);

        // Atomics: persisted after they apply; refused on volatile memory.
        t.lock()
            .unwrap()
            .mem
            .put(durable.buf.base + 64, &40u64.to_ne_bytes());
        t.lock()
            .unwrap()
            .mem
            .put(volatile.buf.base + 64, &40u64.to_ne_bytes());
        for (ctx, r, want) in [
            (5usize, &durable, Ok(())),
            (6, &volatile, Err(errno::FI_EOPNOTSUPP)),
        ] {
            let o = local(&mut w, 0, &[8], Some(&2u64.to_ne_bytes()));
            let res = local(&mut w, 0, &[8], None);
            let req = RmaReq::atomic(
                fetch(FI_SUM, FI_UINT64),
                &o,
                &[],
                &res,
                &[remote(&t, r, 64, 1)],
                ctx,
            )
            .commit_complete();
            w.conn(0, 0).queue_rma(req).unwrap();
            w.run();
            assert_eq!(w.sides[0].rma_result(ctx), Some(want));
        }
        {
            let g = t.lock().unwrap();
            assert_eq!(
                u64s(g.mem.get(IoVec {
                    base: durable.buf.base + 64,
                    len: 8
                })),
                [42]
            );
            assert_eq!(
                u64s(g.mem.get(IoVec {
                    base: volatile.buf.base + 64,
                    len: 8
                })),
                [40]
            );
            assert_eq!(g.persisted.len(), 3);
            assert_eq!(u64s(&g.persisted[2].1), [42]);
        }

        // A write-back that fails fails the request (FI_EIO), and the
        // connection goes on.
        t.lock().unwrap().fail_persist = Some(errno::FI_EIO);
        let l = local(&mut w, 0, &[8], Some(b"not kept"));
        let req = RmaReq::write(&l, &[remote(&t, &durable, 0, 8)], 7).commit_complete();
        w.conn(0, 0).queue_rma(req).unwrap();
        w.run();
        assert_eq!(w.sides[0].rma_result(7), Some(Err(errno::FI_EIO)));
        t.lock().unwrap().fail_persist = None;
        let l = local(&mut w, 0, &[8], Some(b"kept now"));
        let req = RmaReq::write(&l, &[remote(&t, &durable, 0, 8)], 8).commit_complete();
        w.conn(0, 0).queue_rma(req).unwrap();
        w.run();
        assert_eq!(w.sides[0].rma_result(8), Some(Ok(())));
        assert_eq!(t.lock().unwrap().persisted.last().unwrap().1, b"kept now");
        assert_eq!(t.lock().unwrap().grants_held(), 0);
        assert!(!w.sides[1].has_conn_event(|e| matches!(e, Event::ProtocolError(_))));
    }
}
