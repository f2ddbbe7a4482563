//! Random operation sequences against a reference model.
//!
//! `exact`: after every operation the simulated network runs until quiet
//! (with random splits of every read and write), so the model can say
//! exactly what each receive, peek, claim, cancel and multi-receive must
//! end up with; the events and the bytes in memory must agree.
//!
//! `interleaved`: sends, receives and partial progress interleave freely
//! (with a small unexpected budget, so connections park); the model then
//! only knows what must hold in any timing: every message lands exactly
//! once and intact, and matching respects order (of two messages that
//! could go to either of two receives, the earlier message takes the
//! earlier receive).

#![allow(clippy::needless_range_loop)] // indices name sides, peers and sequence numbers

mod common;

use common::*;
use ofi_base::consts::*;
use ofi_base::iov::IoVec;
use ofi_proto::tcp::{Config, Event, RecvDone, RecvReq, RxConfig, SendReq};
use proptest::prelude::*;

const EAGER: usize = 300;
const MIN_MULTI: usize = 64;

fn cfg() -> Config {
    Config {
        eager_max: EAGER,
        data_chunk: 250,
        ..Config::default()
    }
}

fn size() -> impl Strategy<Value = usize> {
    prop_oneof![
        Just(0usize),
        Just(1),
        Just(EAGER - 1),
        Just(EAGER),
        Just(EAGER + 1),
        1usize..EAGER,
        EAGER..3000,
    ]
}

#[derive(Clone, Debug)]
enum Op {
    Send {
        tagged: bool,
        tag: u64,
        len: usize,
        data: Option<u64>,
    },
    Recv {
        tagged: bool,
        tag: u64,
        ignore: u64,
        cap: usize,
        other_src: bool,
    },
    Multi {
        cap: usize,
    },
    Peek {
        tag: u64,
        claim: bool,
        discard: bool,
    },
    Claim {
        pick: usize,
        discard: bool,
        cap: usize,
    },
    Cancel {
        pick: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (any::<bool>(), 0u64..3, size(), proptest::option::of(any::<u64>()))
            .prop_map(|(tagged, tag, len, data)| Op::Send { tagged, tag, len, data }),
        4 => (any::<bool>(), 0u64..3, prop_oneof![Just(0u64), Just(1), Just(3)], 0usize..3200, proptest::bool::weighted(0.1))
            .prop_map(|(tagged, tag, ignore, cap, other_src)| Op::Recv { tagged, tag, ignore, cap, other_src }),
        1 => (0usize..5000).prop_map(|cap| Op::Multi { cap }),
        1 => (0u64..3, any::<bool>(), any::<bool>()).prop_map(|(tag, claim, discard)| Op::Peek { tag, claim, discard }),
        1 => (any::<usize>(), any::<bool>(), 0usize..3200).prop_map(|(pick, discard, cap)| Op::Claim { pick, discard, cap }),
        1 => any::<usize>().prop_map(|pick| Op::Cancel { pick }),
    ]
}

#[derive(Clone, Debug)]
struct MMsg {
    id: usize,
    tagged: bool,
    tag: u64,
    data: Option<u64>,
    bytes: Vec<u8>,
    claimed: Option<usize>,
}

#[derive(Clone, Debug)]
struct MRecv {
    ctx: usize,
    tagged: bool,
    tag: u64,
    ignore: u64,
    buf: IoVec,
    src: u64,
    multi: bool,
    consumed: usize,
}

impl MRecv {
    fn accepts(&self, m: &MMsg) -> bool {
        self.src == 0
            && self.tagged == m.tagged
            && (!m.tagged || (m.tag | self.ignore) == (self.tag | self.ignore))
    }
}

/// What the model expects for a context, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Want {
    /// Message `id` placed at `offset` in the buffer.
    Recv {
        id: usize,
        offset: usize,
        len: usize,
        trunc: usize,
        last_multi: bool,
        tag: u64,
        data: Option<u64>,
    },
    PeekFound {
        len: usize,
        tag: u64,
    },
    PeekNone,
    Canceled {
        multi_release: bool,
    },
}

#[derive(Default)]
struct Model {
    posted: [Vec<MRecv>; 2],
    unexpected: [Vec<MMsg>; 2],
    msgs: Vec<MMsg>,
    wants: Vec<(usize, Want)>,
    /// Messages that must be delivered somewhere eventually (sent, not discarded).
    dropped: Vec<usize>,
}

impl Model {
    /// A message arrives (the network ran until quiet).
    fn arrive(&mut self, m: MMsg) {
        let q = usize::from(m.tagged);
        if let Some(i) = self.posted[q].iter().position(|r| r.accepts(&m)) {
            let r = &mut self.posted[q][i];
            let len = m.bytes.len();
            if r.multi {
                let off = r.consumed;
                let cap = r.buf.len - off;
                r.consumed += len.min(cap);
                let release = r.buf.len - r.consumed < MIN_MULTI;
                let ctx = r.ctx;
                if release {
                    self.posted[q].remove(i);
                }
                self.wants.push((
                    ctx,
                    Want::Recv {
                        id: m.id,
                        offset: off,
                        len: len.min(cap),
                        trunc: len - len.min(cap),
                        last_multi: release,
                        tag: m.tag,
                        data: m.data,
                    },
                ));
            } else {
                let r = self.posted[q].remove(i);
                let got = len.min(r.buf.len);
                self.wants.push((
                    r.ctx,
                    Want::Recv {
                        id: m.id,
                        offset: 0,
                        len: got,
                        trunc: len - got,
                        last_multi: false,
                        tag: m.tag,
                        data: m.data,
                    },
                ));
            }
            return;
        }
        self.unexpected[q].push(m);
    }

    fn post(&mut self, r: MRecv) {
        let q = usize::from(r.tagged);
        if r.multi {
            let mut r = r;
            while let Some(i) = self.unexpected[q]
                .iter()
                .position(|m| m.claimed.is_none() && r.accepts(m))
            {
                let m = self.unexpected[q].remove(i);
                let len = m.bytes.len();
                let off = r.consumed;
                let cap = r.buf.len - off;
                r.consumed += len.min(cap);
                let release = r.buf.len - r.consumed < MIN_MULTI;
                self.wants.push((
                    r.ctx,
                    Want::Recv {
                        id: m.id,
                        offset: off,
                        len: len.min(cap),
                        trunc: len - len.min(cap),
                        last_multi: release,
                        tag: m.tag,
                        data: m.data,
                    },
                ));
                if release {
                    return;
                }
            }
            self.posted[q].push(r);
            return;
        }
        if let Some(i) = self.unexpected[q]
            .iter()
            .position(|m| m.claimed.is_none() && r.accepts(m))
        {
            let m = self.unexpected[q].remove(i);
            let len = m.bytes.len();
            let got = len.min(r.buf.len);
            self.wants.push((
                r.ctx,
                Want::Recv {
                    id: m.id,
                    offset: 0,
                    len: got,
                    trunc: len - got,
                    last_multi: false,
                    tag: m.tag,
                    data: m.data,
                },
            ));
            return;
        }
        self.posted[q].push(r);
    }
}

/// The model's view of a receive-side event (peek results and claim
/// discards have no buffer address; real receives always have one).
fn event_want(e: &Event, buf_of: &dyn Fn(usize) -> Option<IoVec>) -> Option<(usize, Want)> {
    Some(match e {
        Event::RecvComplete(RecvDone {
            context,
            len,
            buf: 0,
            tag,
            ..
        }) => (
            *context,
            Want::PeekFound {
                len: *len,
                tag: *tag,
            },
        ),
        Event::RecvComplete(RecvDone {
            context,
            flags,
            len,
            buf,
            truncated_by,
            tag,
            data,
            ..
        }) => (
            *context,
            Want::Recv {
                id: usize::MAX,
                offset: buf.wrapping_sub(buf_of(*context).map_or(0, |b| b.base)),
                len: *len,
                trunc: *truncated_by,
                last_multi: flags & FI_MULTI_RECV != 0,
                tag: *tag,
                data: (flags & FI_REMOTE_CQ_DATA != 0).then_some(*data),
            },
        ),
        Event::RecvError { context, err, .. } if *err == ofi_base::error::errno::FI_ENOMSG => {
            (*context, Want::PeekNone)
        }
        Event::RecvCanceled { context, flags, .. } => (
            *context,
            Want::Canceled {
                multi_release: flags & FI_MULTI_RECV != 0,
            },
        ),
        _ => return None,
    })
}

fn run_exact(seed: u64, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut w = World::pair(seed, cfg(), RxConfig::default());
    w.sides[1].rx.set_min_multi_recv(MIN_MULTI);
    let mut model = Model::default();
    let mut next_ctx = 1000usize;
    let mut bufs: Vec<(usize, IoVec)> = Vec::new();
    let mut claims: Vec<usize> = Vec::new();
    let mut multi_ctxs: Vec<usize> = Vec::new();
    for op in ops {
        match op {
            Op::Send {
                tagged,
                tag,
                len,
                data,
            } => {
                let id = model.msgs.len();
                let s = w.sides[0]
                    .mem
                    .alloc_pattern(len, id as u64 + seed.wrapping_mul(7919));
                let mut req = if tagged {
                    SendReq::tagged(&[s], tag, id)
                } else {
                    SendReq::msg(&[s], id)
                };
                if let Some(d) = data {
                    req = req.with_data(d);
                }
                w.sides[0].send(0, req).unwrap();
                let m = MMsg {
                    id,
                    tagged,
                    tag: if tagged { tag } else { 0 },
                    data,
                    bytes: w.sides[0].mem.get(s).to_vec(),
                    claimed: None,
                };
                model.msgs.push(m.clone());
                w.run();
                model.arrive(m);
            }
            Op::Recv {
                tagged,
                tag,
                ignore,
                cap,
                other_src,
            } => {
                let ctx = next_ctx;
                next_ctx += 1;
                let buf = w.sides[1].mem.alloc(cap);
                bufs.push((ctx, buf));
                let src = if other_src { 5 } else { 0 };
                let req = if tagged {
                    RecvReq::tagged(&[buf], tag, ignore, ctx)
                } else {
                    RecvReq::msg(&[buf], ctx)
                };
                w.sides[1]
                    .post(req.from_src(if other_src { 5 } else { FI_ADDR_UNSPEC }))
                    .unwrap();
                model.post(MRecv {
                    ctx,
                    tagged,
                    tag: if tagged { tag } else { 0 },
                    ignore: if tagged { ignore } else { 0 },
                    buf,
                    src,
                    multi: false,
                    consumed: 0,
                });
            }
            Op::Multi { cap } => {
                let ctx = next_ctx;
                next_ctx += 1;
                let buf = w.sides[1].mem.alloc(cap);
                bufs.push((ctx, buf));
                multi_ctxs.push(ctx);
                w.sides[1]
                    .post(RecvReq::msg(&[buf], ctx).with_flags(FI_MULTI_RECV))
                    .unwrap();
                model.post(MRecv {
                    ctx,
                    tagged: false,
                    tag: 0,
                    ignore: 0,
                    buf,
                    src: 0,
                    multi: true,
                    consumed: 0,
                });
            }
            Op::Peek {
                tag,
                claim,
                discard,
            } => {
                let ctx = next_ctx;
                next_ctx += 1;
                let mut flags = FI_PEEK;
                if claim {
                    flags |= FI_CLAIM;
                }
                if discard {
                    flags |= FI_DISCARD;
                }
                w.sides[1]
                    .post(RecvReq::tagged(&[], tag, 0, ctx).with_flags(flags))
                    .unwrap();
                let q = &mut model.unexpected[1];
                match q.iter().position(|m| m.claimed.is_none() && m.tag == tag) {
                    None => model.wants.push((ctx, Want::PeekNone)),
                    Some(i) => {
                        model.wants.push((
                            ctx,
                            Want::PeekFound {
                                len: q[i].bytes.len(),
                                tag,
                            },
                        ));
                        if discard {
                            let m = q.remove(i);
                            model.dropped.push(m.id);
                        } else if claim {
                            q[i].claimed = Some(ctx);
                            claims.push(ctx);
                        }
                    }
                }
            }
            Op::Claim { pick, discard, cap } => {
                if claims.is_empty() {
                    continue;
                }
                let ctx = claims.remove(pick % claims.len());
                let buf = w.sides[1].mem.alloc(cap);
                bufs.push((ctx, buf));
                let mut flags = FI_CLAIM;
                if discard {
                    flags |= FI_DISCARD;
                }
                w.sides[1]
                    .post(RecvReq::tagged(&[buf], 0, 0, ctx).with_flags(flags))
                    .unwrap();
                let q = &mut model.unexpected[1];
                let i = q.iter().position(|m| m.claimed == Some(ctx)).unwrap();
                let m = q.remove(i);
                if discard {
                    model
                        .wants
                        .push((ctx, Want::PeekFound { len: 0, tag: m.tag }));
                    model.dropped.push(m.id);
                } else {
                    let len = m.bytes.len();
                    let got = len.min(cap);
                    model.wants.push((
                        ctx,
                        Want::Recv {
                            id: m.id,
                            offset: 0,
                            len: got,
                            trunc: len - got,
                            last_multi: false,
                            tag: m.tag,
                            data: m.data,
                        },
                    ));
                }
            }
            Op::Cancel { pick } => {
                let posted: Vec<(usize, usize, bool, usize)> = model
                    .posted
                    .iter()
                    .enumerate()
                    .flat_map(|(q, v)| {
                        v.iter()
                            .enumerate()
                            .map(move |(i, r)| (q, i, r.multi, r.ctx))
                    })
                    .collect();
                if posted.is_empty() {
                    prop_assert!(w.sides[1].rx.cancel(1).is_err());
                    continue;
                }
                let (q, i, multi, ctx) = posted[pick % posted.len()];
                w.sides[1].rx.cancel(ctx).unwrap();
                w.sides[1].pump();
                model.posted[q].remove(i);
                model.wants.push((
                    ctx,
                    Want::Canceled {
                        multi_release: multi,
                    },
                ));
            }
        }
        w.run();
    }
    // Compare the events, per context, in order.
    let buf_of = |ctx: usize| bufs.iter().find(|(c, _)| *c == ctx).map(|(_, b)| *b);
    let mut got: Vec<(usize, Want)> = w.sides[1]
        .rx_events
        .iter()
        .filter_map(|e| event_want(e, &buf_of))
        .collect();
    let mut want = model.wants.clone();
    // Message ids are not visible in events: check bytes, then blank them.
    for (ctx, wnt) in want.iter_mut() {
        if let Want::Recv {
            id, offset, len, ..
        } = wnt
        {
            let b = buf_of(*ctx).unwrap();
            let mem = w.sides[1].mem.get(IoVec {
                base: b.base + *offset,
                len: *len,
            });
            prop_assert_eq!(
                mem,
                &model.msgs[*id].bytes[..*len],
                "bytes of message {} in receive {}",
                id,
                ctx
            );
            *id = usize::MAX;
        }
    }
    // A multi-receive buffer's messages may complete out of placement
    // order (a rendezvous completes after an eager message placed behind
    // it): the buffer's last completion in time, and only it, carries
    // FI_MULTI_RECV; the model knows whether the buffer was released.
    let released = |v: &[(usize, Want)], ctx: usize| {
        v.iter().any(|(c, w)| {
            *c == ctx
                && matches!(
                    w,
                    Want::Recv {
                        last_multi: true,
                        ..
                    } | Want::Canceled {
                        multi_release: true
                    }
                )
        })
    };
    for &ctx in &multi_ctxs {
        prop_assert_eq!(
            released(&got, ctx),
            released(&want, ctx),
            "multi-receive {} release",
            ctx
        );
        let mine: Vec<&Want> = got
            .iter()
            .filter(|(c, _)| *c == ctx)
            .map(|(_, w)| w)
            .collect();
        for (i, w) in mine.iter().enumerate() {
            let flagged = matches!(
                w,
                Want::Recv {
                    last_multi: true,
                    ..
                } | Want::Canceled {
                    multi_release: true
                }
            );
            prop_assert!(
                !flagged || i + 1 == mine.len(),
                "FI_MULTI_RECV before the last completion of {}",
                ctx
            );
        }
    }
    let key = |(c, w): &(usize, Want)| {
        let off = match w {
            Want::Recv { offset, .. } if multi_ctxs.contains(c) => *offset,
            _ => 0,
        };
        (*c, off)
    };
    for v in [&mut got, &mut want] {
        for (c, w) in v.iter_mut() {
            if multi_ctxs.contains(c) {
                if let Want::Recv { last_multi, .. } = w {
                    *last_multi = false;
                }
                if let Want::Canceled { multi_release } = w {
                    *multi_release = false;
                }
            }
        }
        v.sort_by_key(key);
    }
    prop_assert_eq!(got, want);
    // Data and tags of completed receives.
    for e in &w.sides[1].rx_events {
        if let Event::RecvComplete(d) = e {
            prop_assert!(d.copy.is_none(), "copies are done by the harness");
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(512), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn exact(seed: u64, ops in proptest::collection::vec(op(), 1..40)) {
        run_exact(seed, ops)?;
    }
}

// ---- interleaved --------------------------------------------------------------------

#[derive(Clone, Debug)]
enum IOp {
    Send { tagged: bool, tag: u64, len: usize },
    Recv { tagged: bool, tag: u64, ignore: u64 },
    Step { n: usize },
}

fn iop() -> impl Strategy<Value = IOp> {
    prop_oneof![
        (any::<bool>(), 0u64..3, 2usize..2000).prop_map(|(tagged, tag, len)| IOp::Send {
            tagged,
            tag,
            len
        }),
        (
            any::<bool>(),
            0u64..3,
            prop_oneof![Just(0u64), Just(1), Just(3)]
        )
            .prop_map(|(tagged, tag, ignore)| IOp::Recv {
                tagged,
                tag,
                ignore
            }),
        (1usize..30).prop_map(|n| IOp::Step { n }),
    ]
}

fn run_interleaved(seed: u64, budget: usize, ops: Vec<IOp>) -> Result<(), TestCaseError> {
    let mut w = World::pair(
        seed,
        cfg(),
        RxConfig {
            max_unexpected_bytes: budget,
            ..RxConfig::default()
        },
    );
    const CAP: usize = 2000;
    let mut msgs: Vec<(bool, u64, usize)> = Vec::new();
    // (ctx, tagged, tag, ignore, buf), in posting order = ctx order
    let mut recvs: Vec<(bool, u64, u64, IoVec)> = Vec::new();
    let mut rng = XorShift::new(seed);
    let post = |w: &mut World,
                recvs: &mut Vec<(bool, u64, u64, IoVec)>,
                tagged: bool,
                tag: u64,
                ignore: u64| {
        let buf = w.sides[1].mem.alloc(CAP);
        let ctx = recvs.len();
        let req = if tagged {
            RecvReq::tagged(&[buf], tag, ignore, ctx)
        } else {
            RecvReq::msg(&[buf], ctx)
        };
        w.sides[1].post(req).unwrap();
        recvs.push((
            tagged,
            if tagged { tag } else { 0 },
            if tagged { ignore } else { 0 },
            buf,
        ));
    };
    for op in ops {
        match op {
            IOp::Send { tagged, tag, len } => {
                let id = msgs.len();
                let s = w.sides[0].mem.alloc_pattern(len, id as u64);
                w.sides[0].mem.put(s.base, &[id as u8, (id >> 8) as u8]);
                let req = if tagged {
                    SendReq::tagged(&[s], tag, id)
                } else {
                    SendReq::msg(&[s], id)
                };
                w.sides[0].send(0, req).unwrap();
                msgs.push((tagged, if tagged { tag } else { 0 }, len));
            }
            IOp::Recv {
                tagged,
                tag,
                ignore,
            } => post(&mut w, &mut recvs, tagged, tag, ignore),
            IOp::Step { n } => {
                for _ in 0..n {
                    let end = rng.below(2);
                    let lim = rng.range(1, 700);
                    if rng.chance(2) {
                        w.tx(0, end, lim);
                    } else {
                        w.rx(0, end, lim);
                    }
                }
            }
        }
    }
    w.run();
    // Catch-all receives for whatever is left, then run.
    for _ in 0..msgs.len() {
        post(&mut w, &mut recvs, true, 0, u64::MAX);
        post(&mut w, &mut recvs, false, 0, 0);
    }
    w.run();
    // Where did each message land?
    let mut landed: Vec<Option<usize>> = vec![None; msgs.len()];
    for e in &w.sides[1].rx_events {
        match e {
            Event::RecvComplete(d) => {
                prop_assert_eq!(d.truncated_by, 0);
                let buf = recvs[d.context].3;
                let bytes = w.sides[1].mem.get(IoVec {
                    base: buf.base,
                    len: d.len,
                });
                let id = bytes[0] as usize | (bytes[1] as usize) << 8;
                prop_assert!(id < msgs.len());
                prop_assert!(landed[id].is_none(), "message {} delivered twice", id);
                landed[id] = Some(d.context);
                let (tagged, tag, len) = msgs[id];
                prop_assert_eq!(d.len, len);
                let mut want = pattern(id as u64, len);
                want[0] = id as u8;
                want[1] = (id >> 8) as u8;
                prop_assert_eq!(bytes, &want[..]);
                let (rt, rtag, rign, _) = recvs[d.context];
                prop_assert_eq!(rt, tagged);
                prop_assert!(!tagged || (tag | rign) == (rtag | rign));
            }
            e => prop_assert!(false, "unexpected event {:?}", e),
        }
    }
    prop_assert!(landed.iter().all(|l| l.is_some()), "lost: {:?}", landed);
    prop_assert_eq!(w.sides[0].sends_done().len(), msgs.len());
    // Order: two messages of one queue that both receives accept land in
    // posting order.
    let accepts = |r: usize, m: usize| {
        let (rt, rtag, rign, _) = recvs[r];
        let (mt, mtag, _) = msgs[m];
        rt == mt && (!mt || (mtag | rign) == (rtag | rign))
    };
    for m1 in 0..msgs.len() {
        for m2 in m1 + 1..msgs.len() {
            let (ra, rb) = (landed[m1].unwrap(), landed[m2].unwrap());
            if accepts(ra, m1) && accepts(ra, m2) && accepts(rb, m1) && accepts(rb, m2) {
                prop_assert!(
                    ra < rb,
                    "messages {} and {} landed in receives {} and {}",
                    m1,
                    m2,
                    ra,
                    rb
                );
            }
        }
    }
    prop_assert!(w.sides[1].rx.unexpected_bytes() == 0);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(512), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn interleaved(seed: u64, budget in prop_oneof![Just(1usize), Just(1500), Just(1 << 22)],
                   ops in proptest::collection::vec(iop(), 1..50)) {
        run_interleaved(seed, budget, ops)?;
    }
}

/// A rendezvous parked for budget, placed when a receive arrives, must get
/// its CTS out (found by `interleaved`).
#[test]
fn parked_rendezvous_is_answered_once_placed() {
    let ops = vec![
        IOp::Send {
            tagged: false,
            tag: 0,
            len: 2,
        },
        IOp::Send {
            tagged: false,
            tag: 0,
            len: 2,
        },
        IOp::Recv {
            tagged: false,
            tag: 0,
            ignore: 0,
        },
        IOp::Send {
            tagged: false,
            tag: 0,
            len: 301,
        },
    ];
    let r = run_interleaved(6238119845146282163, 1, ops);
    assert!(r.is_ok(), "{r:?}");
}
