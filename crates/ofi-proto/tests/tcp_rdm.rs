//! RDM: several connections of one endpoint share one matcher; messages
//! from different peers interleave while each peer's order holds; a
//! hostile peer is cut off without disturbing the others; crossing
//! connections (both sides connect at once) resolve to exactly one, in
//! every order of arrival, with no message lost or reordered.

#![allow(clippy::needless_range_loop)] // indices name sides, peers and sequence numbers

mod common;

use common::*;
use ofi_base::consts::*;
use ofi_base::error::errno;
use ofi_base::iov::IoVec;
use ofi_proto::tcp::{
    decide_hello, reject, Config, ConnId, Event, Existing, HelloDecision, RecvReq, Req, RxConfig,
    SendReq,
};
use std::collections::HashMap;

fn cfg() -> Config {
    Config {
        eager_max: 512,
        data_chunk: 700,
        ..Config::default()
    }
}

/// Message content that names its sender and sequence number.
fn content(src: usize, seq: usize, len: usize) -> Vec<u8> {
    let mut v = pattern((src * 1000 + seq) as u64, len.max(2));
    v[0] = src as u8;
    v[1] = seq as u8;
    v.truncate(len);
    v
}

/// Sides 0 (A) and 1 (B) both connect to side 2 (C): links 0 and 1.
fn three(seed: u64, rx_cfg: RxConfig) -> World {
    let mut w = World::new(seed, cfg());
    w.add_side(b"A", RxConfig::default());
    w.add_side(b"B", RxConfig::default());
    w.add_side(b"C", rx_cfg);
    w.connect(0, 2, b"");
    w.connect(1, 2, b"");
    w.run();
    w
}

#[test]
fn peers_interleave_and_each_keeps_its_order() {
    for seed in 0..16 {
        let mut w = three(seed, RxConfig::default());
        let mut rng = XorShift::new(seed);
        let per_peer = 25;
        // Same tag for everything: matching order decides who gets what.
        for src in 0..2 {
            for seq in 0..per_peer {
                let n = if rng.chance(4) {
                    rng.range(513, 3000)
                } else {
                    rng.range(2, 512)
                };
                let s = w.sides[src].mem.alloc(n);
                w.sides[src].mem.put(s.base, &content(src, seq, n));
                w.sides[src]
                    .send(0, SendReq::tagged(&[s], 42, seq))
                    .unwrap();
            }
        }
        // Receives: half posted now, half after some traffic (unexpected).
        let mut bufs = Vec::new();
        for i in 0..per_peer {
            let r = w.sides[2].mem.alloc(3000);
            w.sides[2].post(RecvReq::tagged(&[r], 42, 0, i)).unwrap();
            bufs.push(r);
        }
        for _ in 0..50 {
            let l = rng.below(2);
            let end = rng.below(2);
            let lim = rng.range(1, 2000);
            w.tx(l, end, lim);
            w.rx(l, end, lim);
        }
        for i in per_peer..2 * per_peer {
            let r = w.sides[2].mem.alloc(3000);
            w.sides[2].post(RecvReq::tagged(&[r], 42, 0, i)).unwrap();
            bufs.push(r);
        }
        w.run();
        // Who landed where.
        let mut seen: [Vec<(usize, usize)>; 2] = [Vec::new(), Vec::new()];
        for (i, r) in bufs.iter().enumerate() {
            let d = w.sides[2].done(i);
            let got = w.sides[2].mem.get(IoVec {
                base: r.base,
                len: d.len,
            });
            let (src, seq) = (got[0] as usize, got[1] as usize);
            assert_eq!(d.src, src as u64, "source is the connection's peer");
            assert_eq!(got, &content(src, seq, d.len)[..]);
            seen[src].push((i, seq));
        }
        for (src, s) in seen.iter().enumerate() {
            assert_eq!(s.len(), per_peer);
            // In posting order of the receives, each peer's sequence rises.
            let seqs: Vec<usize> = s.iter().map(|&(_, q)| q).collect();
            assert_eq!(
                seqs,
                (0..per_peer).collect::<Vec<_>>(),
                "peer {src} reordered"
            );
        }
        // Both peers interleaved (not one after the other) for most seeds.
        assert_eq!(w.sides[0].sends_done().len(), per_peer);
        assert_eq!(w.sides[1].sends_done().len(), per_peer);
    }
}

#[test]
fn directed_receives_pick_their_peer() {
    let mut w = three(3, RxConfig::default());
    let ra = w.sides[2].mem.alloc(100);
    let rb = w.sides[2].mem.alloc(100);
    w.sides[2].post(RecvReq::msg(&[rb], 1).from_src(1)).unwrap();
    w.sides[2].post(RecvReq::msg(&[ra], 0).from_src(0)).unwrap();
    for src in 0..2 {
        let s = w.sides[src].mem.alloc(50);
        w.sides[src].mem.put(s.base, &content(src, 0, 50));
        w.sides[src].send(0, SendReq::msg(&[s], 0)).unwrap();
    }
    w.run();
    assert_eq!(w.sides[2].done(0).src, 0);
    assert_eq!(w.sides[2].mem.get(ra)[0], 0);
    assert_eq!(w.sides[2].done(1).src, 1);
    assert_eq!(w.sides[2].mem.get(rb)[0], 1);
}

#[test]
fn a_hostile_peer_is_cut_off_and_the_others_are_unaffected() {
    for seed in 0..8 {
        let mut w = three(seed, RxConfig::default());
        // A: one complete unexpected eager message, one unexpected RTS,
        // and a rendezvous that will be bound to a receive.
        for (seq, n, tag) in [(0usize, 100usize, 1u64), (1, 2000, 2), (2, 5000, 3)] {
            let s = w.sides[0].mem.alloc(n);
            w.sides[0].mem.put(s.base, &content(0, seq, n));
            w.sides[0].send(0, SendReq::tagged(&[s], tag, seq)).unwrap();
        }
        w.run();
        let r3 = w.sides[2].mem.alloc(5000);
        w.sides[2].post(RecvReq::tagged(&[r3], 3, 0, 30)).unwrap();
        // Let the CTS out and a little DATA in, then A turns hostile.
        w.tx(0, 1, usize::MAX);
        deliver_all(&mut w, 0, 0);
        w.tx(0, 0, 40 + 700); // the first DATA frame, whole
        deliver_all(&mut w, 0, 1);
        assert!(w.links[0].pipes[1].is_empty());
        assert_eq!(w.sides[2].stats.payload_bytes, 700);
        w.links[0].pipes[1].extend([0x6fu8, 1, 200, 0, 0, 0, 0, 0]);
        w.links[0].pipes[1].extend([0u8; 32]);
        // Meanwhile B sends.
        for seq in 0..10 {
            let n = 300 * seq + 1;
            let s = w.sides[1].mem.alloc(n);
            w.sides[1].mem.put(s.base, &content(1, seq, n));
            w.sides[1].send(0, SendReq::tagged(&[s], 9, seq)).unwrap();
        }
        let mut rb = Vec::new();
        for seq in 0..10 {
            let r = w.sides[2].mem.alloc(3000);
            w.sides[2]
                .post(RecvReq::tagged(&[r], 9, 0, 100 + seq))
                .unwrap();
            rb.push(r);
        }
        // Drive everything except A's side (it is gone rogue).
        for _ in 0..200 {
            for (l, end) in [(0, 1), (1, 0), (1, 1)] {
                w.tx(l, end, usize::MAX);
                w.rx(l, end, usize::MAX);
            }
        }
        let c = &w.sides[2];
        assert!(c
            .conn_events
            .iter()
            .any(|(id, e)| *id == 0 && matches!(e, Event::ProtocolError(_))));
        assert!(c.conns[0].is_closed() && !c.conns[1].is_closed());
        // The receive bound to A's rendezvous failed; B's all completed.
        assert!(
            matches!(c.rx_events_for(30)[..], [Event::RecvError { err, .. }] if *err == errno::FI_EIO)
        );
        for seq in 0..10 {
            let d = c.done(100 + seq);
            assert_eq!(d.src, 1);
            assert_eq!(
                c.mem.get(IoVec {
                    base: rb[seq].base,
                    len: d.len
                }),
                &content(1, seq, d.len)[..]
            );
        }
        // A's complete eager message is still deliverable; its RTS is gone.
        let side = &mut w.sides[2];
        let r1 = side.mem.alloc(100);
        side.post(RecvReq::tagged(&[r1], 1, 0, 10)).unwrap();
        assert_eq!(side.done(10).len, 100);
        assert_eq!(side.mem.get(r1), &content(0, 0, 100)[..]);
        let r2 = side.mem.alloc(2000);
        side.post(RecvReq::tagged(&[r2], 2, 0, 20)).unwrap();
        assert!(side.try_done(20).is_none());
        assert_eq!(side.rx.queues().unexpected_len(true), 0);
        assert_eq!(side.rx.unexpected_bytes(), 0);
    }
}

#[test]
fn a_claimed_rendezvous_of_a_dead_peer_fails_its_claim() {
    let mut w = three(4, RxConfig::default());
    let s = w.sides[0].mem.alloc(2000);
    w.sides[0].send(0, SendReq::tagged(&[s], 5, 0)).unwrap();
    w.run();
    w.sides[2]
        .post(RecvReq::tagged(&[], 5, 0, 50).with_flags(FI_PEEK | FI_CLAIM))
        .unwrap();
    assert_eq!(w.sides[2].done(50).len, 2000);
    w.cut(0, 1, errno::FI_ECONNRESET);
    let r = w.sides[2].mem.alloc(2000);
    w.sides[2]
        .post(RecvReq::tagged(&[r], 5, 0, 50).with_flags(FI_CLAIM))
        .unwrap();
    assert!(matches!(
        w.sides[2].rx_events.last(),
        Some(Event::RecvError { context: 50, err, .. }) if *err == errno::FI_ECONNRESET
    ));
}

#[test]
fn sending_to_oneself() {
    let mut w = World::new(5, cfg());
    w.add_side(b"self", RxConfig::default());
    let (_, c, _) = w.connect(0, 0, b"");
    assert_eq!(
        decide_hello(b"self", b"self", Existing::Outgoing),
        HelloDecision::Accept
    );
    let s = w.sides[0].mem.alloc_pattern(1500, 1);
    w.sides[0].send(c, SendReq::msg(&[s], 1)).unwrap();
    let r = w.sides[0].mem.alloc(1500);
    w.sides[0].post(RecvReq::msg(&[r], 2)).unwrap();
    w.run();
    assert_eq!(w.sides[0].done(2).src, 0);
    assert_eq!(w.sides[0].mem.get(r), &pattern(1, 1500)[..]);
}

// ---- simultaneous connect ------------------------------------------------------

/// A minimal RDM driver for one side: routes sends per peer, resolves
/// crossing connections with `decide_hello`.
#[derive(Default)]
struct Rdm {
    route: HashMap<usize, ConnId>,
    outgoing: HashMap<usize, ConnId>,
    stash: HashMap<usize, Vec<Req>>,
    cursor: usize,
}

fn side_of(w: &World, addr: &[u8]) -> usize {
    w.sides
        .iter()
        .position(|s| s.addr == addr)
        .expect("known address")
}

fn rdm_send(w: &mut World, rdm: &mut [Rdm], x: usize, peer: usize, req: SendReq) {
    if let Some(&c) = rdm[x].route.get(&peer) {
        if !w.sides[x].conns[c as usize].is_closed() {
            w.sides[x].send(c, req).unwrap();
            return;
        }
        rdm[x].stash.entry(peer).or_default().push(Req::Send(req));
        return;
    }
    let (_, c, _) = w.connect(x, peer, b"");
    rdm[x].route.insert(peer, c);
    rdm[x].outgoing.insert(peer, c);
    w.sides[x].send(c, req).unwrap();
}

/// Applies the driver's decisions to new connection events; true if any.
fn rdm_handle(w: &mut World, rdm: &mut [Rdm]) -> bool {
    let mut any = false;
    for x in 0..w.sides.len() {
        while rdm[x].cursor < w.sides[x].conn_events.len() {
            let (cid, e) = w.sides[x].conn_events[rdm[x].cursor].clone();
            rdm[x].cursor += 1;
            any = true;
            match e {
                Event::ConnRequest { peer_addr, .. } => {
                    let peer = side_of(w, &peer_addr);
                    let my = w.sides[x].addr.clone();
                    let out = rdm[x].outgoing.get(&peer).copied();
                    let existing = match out {
                        Some(o) if !w.sides[x].conns[o as usize].is_closed() => Existing::Outgoing,
                        _ => Existing::None,
                    };
                    match decide_hello(&my, &peer_addr, existing) {
                        HelloDecision::RejectSimultaneous => {
                            w.sides[x].conns[cid as usize]
                                .reject_with(reject::SIMULTANEOUS, b"")
                                .unwrap();
                        }
                        d => {
                            let conns = &mut w.sides[x].conns;
                            conns[cid as usize].set_peer(peer as u64);
                            conns[cid as usize].accept(b"").unwrap();
                            let mut moved = Vec::new();
                            if d == HelloDecision::AcceptRetireOutgoing {
                                moved = conns[out.unwrap() as usize].take_queued_sends();
                            }
                            moved.extend(rdm[x].stash.remove(&peer).unwrap_or_default());
                            for s in moved {
                                conns[cid as usize].queue(s).unwrap();
                            }
                            rdm[x].route.insert(peer, cid);
                        }
                    }
                }
                Event::Rejected { reason, .. } => {
                    assert_eq!(reason, reject::SIMULTANEOUS);
                    let peer = w.sides[x].conns[cid as usize].peer() as usize;
                    let sends = w.sides[x].conns[cid as usize].take_queued_sends();
                    match rdm[x].route.get(&peer).copied() {
                        Some(c) if c != cid && !w.sides[x].conns[c as usize].is_closed() => {
                            for s in sends {
                                w.sides[x].conns[c as usize].queue(s).unwrap();
                            }
                        }
                        _ => rdm[x].stash.entry(peer).or_default().extend(sends),
                    }
                }
                _ => {}
            }
        }
    }
    any
}

fn settle_tx(w: &mut World) {
    loop {
        let mut m = 0;
        for l in 0..w.links.len() {
            for end in 0..2 {
                m += w.tx(l, end, usize::MAX);
            }
        }
        if m == 0 {
            break;
        }
    }
}

fn deliver_all(w: &mut World, l: usize, end: usize) {
    while w.rx(l, end, usize::MAX) > 0 {}
}

#[test]
fn simultaneous_connect_resolves_in_every_order_of_arrival() {
    // Steps: 0 = X's HELLO reaches Y, 1 = Y's answer reaches X,
    //        2 = Y's HELLO reaches X, 3 = X's answer reaches Y.
    let mut orders = Vec::new();
    for a in 0..4 {
        for b in 0..4 {
            for c in 0..4 {
                for d in 0..4 {
                    let o = [a, b, c, d];
                    let mut s = o.to_vec();
                    s.sort();
                    s.dedup();
                    let pos = |x| o.iter().position(|&y| y == x).unwrap();
                    if s.len() == 4 && pos(0) < pos(1) && pos(2) < pos(3) {
                        orders.push(o);
                    }
                }
            }
        }
    }
    assert_eq!(orders.len(), 6);
    for addrs in [[b"A", b"B"], [b"B", b"A"]] {
        for order in &orders {
            for seed in 0..4 {
                let what = format!("addresses {:?} order {order:?} seed {seed}", addrs);
                let mut w = World::new(seed, cfg());
                w.add_side(addrs[0], RxConfig::default());
                w.add_side(addrs[1], RxConfig::default());
                for s in w.sides.iter_mut() {
                    s.auto_accept = None;
                }
                let mut rdm = vec![Rdm::default(), Rdm::default()];
                // Both sides send three messages to each other at once.
                let sizes = [10usize, 2000, 0];
                for x in 0..2 {
                    for (seq, &n) in sizes.iter().enumerate() {
                        let s = w.sides[x].mem.alloc(n);
                        w.sides[x].mem.put(s.base, &content(x, seq, n));
                        rdm_send(&mut w, &mut rdm, x, 1 - x, SendReq::tagged(&[s], 1, seq));
                    }
                }
                let mut bufs = [Vec::new(), Vec::new()];
                for x in 0..2 {
                    for seq in 0..sizes.len() {
                        let r = w.sides[x].mem.alloc(2000);
                        w.sides[x].post(RecvReq::tagged(&[r], 1, 0, seq)).unwrap();
                        bufs[x].push(r);
                    }
                }
                // Link 0: X(0) -> Y(1); link 1: Y -> X. End 1 is the acceptor.
                settle_tx(&mut w);
                for &step in order {
                    let (l, end) = match step {
                        0 => (0, 1),
                        1 => (0, 0),
                        2 => (1, 1),
                        _ => (1, 0),
                    };
                    deliver_all(&mut w, l, end);
                    rdm_handle(&mut w, &mut rdm);
                    settle_tx(&mut w);
                }
                loop {
                    w.run();
                    if !rdm_handle(&mut w, &mut rdm) {
                        break;
                    }
                }
                // Exactly one connection survives: the one the lower
                // address initiated.
                let low = if addrs[0] < addrs[1] { 0 } else { 1 };
                let live: Vec<(usize, usize)> = (0..2)
                    .flat_map(|x| (0..2).map(move |c| (x, c)))
                    .filter(|&(x, c)| !w.sides[x].conns[c].is_closed())
                    .collect();
                let winner_link = low; // link i was initiated by side i
                let (s0, c0) = w.links[winner_link].ends[0];
                let (s1, c1) = w.links[winner_link].ends[1];
                let mut want = vec![(s0, c0 as usize), (s1, c1 as usize)];
                want.sort();
                assert_eq!(live, want, "{what}");
                // Everything arrived, in order, with the right source.
                for x in 0..2 {
                    let peer = 1 - x;
                    for (seq, &n) in sizes.iter().enumerate() {
                        let d = w.sides[x].done(seq);
                        assert_eq!(d.len, n, "{what}");
                        assert_eq!(d.src, peer as u64, "{what}");
                        assert_eq!(
                            w.sides[x].mem.get(IoVec {
                                base: bufs[x][seq].base,
                                len: n
                            }),
                            &content(peer, seq, n)[..],
                            "{what}"
                        );
                    }
                    let mut done = w.sides[x].sends_done();
                    done.sort();
                    assert_eq!(done, vec![0, 1, 2], "{what}");
                    assert!(w.sides[x].send_errors().is_empty(), "{what}");
                }
            }
        }
    }
}

/// The unexpected-byte budget is shared, but a connection holding nothing
/// may always park one message: a peer flooding the endpoint with messages
/// nobody receives yet cannot stop another peer's stream, whose next
/// message a posted receive waits for behind one unexpected message.
#[test]
fn a_flooding_peer_cannot_stop_another_peers_stream() {
    for seed in 0..8 {
        let limit = 2000;
        let mut w = three(
            seed,
            RxConfig {
                max_unexpected_bytes: limit,
                ..RxConfig::default()
            },
        );
        // A floods C with 20 × 400 B that no receive matches yet.
        for seq in 0..20 {
            let s = w.sides[0].mem.alloc(400);
            w.sides[0].mem.put(s.base, &content(0, seq, 400));
            w.sides[0].send(0, SendReq::tagged(&[s], 1, seq)).unwrap();
        }
        w.run();
        assert!(w.sides[2].rx.unexpected_bytes() >= limit - 400);
        assert!(w.sides[2].stats.blocked > 0, "A must be held back");
        // B sends an unexpected message, then the one C waits for.
        for (seq, tag) in [(0, 2), (1, 3)] {
            let s = w.sides[1].mem.alloc(300);
            w.sides[1].mem.put(s.base, &content(1, seq, 300));
            w.sides[1].send(0, SendReq::tagged(&[s], tag, seq)).unwrap();
        }
        let r = w.sides[2].mem.alloc(300);
        w.sides[2].post(RecvReq::tagged(&[r], 3, 0, 100)).unwrap();
        w.run();
        let d = w.sides[2].done(100);
        assert_eq!((d.src, d.len), (1, 300));
        assert_eq!(w.sides[2].mem.get(r), &content(1, 1, 300)[..]);
        // Memory stays bounded: the limit plus B's one parked message.
        assert!(w.sides[2].rx.unexpected_bytes() <= limit + 300);
        assert_eq!(w.sides[2].rx.held_by(1), 300);
        // Receiving everything drains A's flood in order, then B's first.
        for seq in 0..20 {
            let r = w.sides[2].mem.alloc(400);
            w.sides[2]
                .post(RecvReq::tagged(&[r], 1, 0, 200 + seq))
                .unwrap();
            w.run();
            assert_eq!(w.sides[2].mem.get(r), &content(0, seq, 400)[..]);
        }
        let r = w.sides[2].mem.alloc(300);
        w.sides[2].post(RecvReq::tagged(&[r], 2, 0, 300)).unwrap();
        w.run();
        assert_eq!(w.sides[2].mem.get(r), &content(1, 0, 300)[..]);
        assert_eq!(w.sides[2].rx.unexpected_bytes(), 0);
        assert_eq!(w.sides[0].sends_done().len(), 20);
        assert_eq!(w.sides[1].sends_done().len(), 2);
    }
}

/// A flooding peer holds the whole budget (alone, it could take it); then
/// another peer's unexpected messages still get their fair share (half the
/// budget with two holding) instead of one message at most, so its stream
/// goes on to the message a posted receive waits for.
#[test]
fn unexpected_room_is_shared_fairly_per_peer() {
    for seed in 0..8 {
        let limit = 2000;
        let mut w = three(
            seed,
            RxConfig {
                max_unexpected_bytes: limit,
                ..RxConfig::default()
            },
        );
        for seq in 0..20 {
            let s = w.sides[0].mem.alloc(400);
            w.sides[0].mem.put(s.base, &content(0, seq, 400));
            w.sides[0].send(0, SendReq::tagged(&[s], 1, seq)).unwrap();
        }
        w.run();
        assert!(
            w.sides[2].rx.held_by(0) >= limit - 400,
            "A filled the budget"
        );
        // B: two unexpected eager messages (500 + 300 B, within half the
        // budget), then the one C waits for.
        for (seq, tag, n) in [(0, 2, 500), (1, 2, 300), (2, 3, 100)] {
            let s = w.sides[1].mem.alloc(n);
            w.sides[1].mem.put(s.base, &content(1, seq, n));
            w.sides[1].send(0, SendReq::tagged(&[s], tag, seq)).unwrap();
        }
        let r = w.sides[2].mem.alloc(100);
        w.sides[2].post(RecvReq::tagged(&[r], 3, 0, 100)).unwrap();
        w.run();
        assert_eq!(w.sides[2].done(100).len, 100, "seed {seed}");
        assert_eq!(w.sides[2].mem.get(r), &content(1, 2, 100)[..]);
        assert_eq!(w.sides[2].rx.held_by(1), 800);
        // A gets nothing more while over its share.
        assert!(w.sides[2].rx.unexpected_bytes() <= 2 * limit);
        for (seq, n) in [(0usize, 500usize), (1, 300)] {
            let r = w.sides[2].mem.alloc(n);
            w.sides[2]
                .post(RecvReq::tagged(&[r], 2, 0, 200 + seq))
                .unwrap();
            w.run();
            assert_eq!(w.sides[2].mem.get(r), &content(1, seq, n)[..]);
        }
    }
}

/// A rendezvous reply queued behind unread eager data: C sends B a
/// rendezvous message while B's stream to C holds more unexpected bytes
/// than B's fair share (A flooded the budget). C awaits B's CTS on that
/// connection, so it reads on past B's eager messages (up to the whole
/// budget for that connection) and the send completes: no deadlock.
#[test]
fn a_rendezvous_reply_behind_unread_eager_data_is_read() {
    for seed in 0..8 {
        let limit = 2000;
        let mut w = three(
            seed,
            RxConfig {
                max_unexpected_bytes: limit,
                ..RxConfig::default()
            },
        );
        for seq in 0..20 {
            let s = w.sides[0].mem.alloc(400);
            w.sides[0].mem.put(s.base, &content(0, seq, 400));
            w.sides[0].send(0, SendReq::tagged(&[s], 1, seq)).unwrap();
        }
        w.run();
        // B: three unexpected 500 B messages (more than half the budget).
        for seq in 0..3 {
            let s = w.sides[1].mem.alloc(500);
            w.sides[1].mem.put(s.base, &content(1, seq, 500));
            w.sides[1].send(0, SendReq::tagged(&[s], 2, seq)).unwrap();
        }
        w.run();
        // C sends B a rendezvous message (B's receive is posted); B's CTS
        // goes out behind its three messages.
        let big = 50_000;
        let rb = w.sides[1].mem.alloc(big);
        w.sides[1].post(RecvReq::tagged(&[rb], 9, 0, 77)).unwrap();
        let s = w.sides[2].mem.alloc(big);
        w.sides[2].mem.put(s.base, &content(2, 0, big));
        w.sides[2].send(1, SendReq::tagged(&[s], 9, 55)).unwrap();
        w.run();
        assert_eq!(
            w.sides[2].sends_done(),
            [55],
            "seed {seed}: C's send stalled"
        );
        assert_eq!(w.sides[1].done(77).len, big);
        assert_eq!(w.sides[1].mem.get(rb), &content(2, 0, big)[..]);
        assert_eq!(w.sides[2].rx.held_by(1), 1500);
        for seq in 0..3 {
            let r = w.sides[2].mem.alloc(500);
            w.sides[2]
                .post(RecvReq::tagged(&[r], 2, 0, 300 + seq))
                .unwrap();
            w.run();
            assert_eq!(w.sides[2].mem.get(r), &content(1, seq, 500)[..]);
        }
    }
}
