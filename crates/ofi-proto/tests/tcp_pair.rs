//! Two connections over a simulated stream: connection management, eager
//! and rendezvous messages, truncation, unexpected messages, peek / claim /
//! discard, multi-receive, cancel and backpressure, each under random
//! splits of every read and write.

#![allow(clippy::needless_range_loop)] // indices name sides, peers and sequence numbers

mod common;

use common::*;
use ofi_base::consts::*;
use ofi_base::error::errno;
use ofi_base::iov::IoVec;
use ofi_proto::tcp::{reject, Config, Event, RecvReq, RxConfig, SendReq, State};

const SEEDS: u64 = 12;

fn small_cfg() -> Config {
    Config {
        eager_max: 1024,
        data_chunk: 1500,
        ..Config::default()
    }
}

// ---- connection management ------------------------------------------------

#[test]
fn connect_accept_with_private_data() {
    for seed in 0..SEEDS {
        let mut w = World::new(seed, Config::default());
        w.add_side(b"client-addr", RxConfig::default());
        w.add_side(b"server-addr", RxConfig::default());
        w.sides[1].auto_accept = None;
        let (_, c, s) = w.connect(0, 1, b"hello, server");
        w.run();
        assert_eq!(
            w.sides[1].conn_events,
            vec![(
                s,
                Event::ConnRequest {
                    peer_addr: b"client-addr".to_vec(),
                    private_data: b"hello, server".to_vec(),
                    proto_flags: 0,
                }
            )]
        );
        assert_eq!(w.conn(1, s).state(), State::Requested);
        assert_eq!(w.conn(0, c).state(), State::Connecting);
        w.conn(1, s).accept(b"welcome").unwrap();
        w.run();
        assert_eq!(
            w.sides[0].conn_events,
            vec![(
                c,
                Event::Connected {
                    private_data: b"welcome".to_vec()
                }
            )]
        );
        assert!(w.sides[1].has_conn_event(|e| matches!(e, Event::Connected { .. })));
        assert_eq!(w.conn(0, c).state(), State::Connected);
        assert_eq!(w.conn(1, s).state(), State::Connected);
    }
}

#[test]
fn sends_queued_while_connecting_go_after_accept() {
    for seed in 0..SEEDS {
        let mut w = World::new(seed, small_cfg());
        w.add_side(b"A", RxConfig::default());
        w.add_side(b"B", RxConfig::default());
        let (_, c, _) = w.connect(0, 1, b"");
        let bufs: Vec<IoVec> = (0..3)
            .map(|i| w.sides[0].mem.alloc_pattern(500 * i + 10, i as u64))
            .collect();
        for (i, b) in bufs.iter().enumerate() {
            w.sides[0].send(c, SendReq::msg(&[*b], i)).unwrap();
        }
        let rbufs: Vec<IoVec> = (0..3).map(|_| w.sides[1].mem.alloc(4096)).collect();
        for (i, b) in rbufs.iter().enumerate() {
            w.sides[1].post(RecvReq::msg(&[*b], 100 + i)).unwrap();
        }
        w.run();
        assert_eq!(w.sides[0].sends_done(), vec![0, 1, 2]);
        for i in 0..3 {
            let d = w.sides[1].done(100 + i);
            assert_eq!(d.len, bufs[i].len);
            assert_eq!(d.src, 0);
            let got = &w.sides[1].mem.get(rbufs[i])[..d.len];
            assert_eq!(got, w.sides[0].mem.get(bufs[i]));
        }
    }
}

#[test]
fn reject_with_private_data_fails_queued_sends() {
    for seed in 0..SEEDS {
        let mut w = World::new(seed, Config::default());
        w.add_side(b"A", RxConfig::default());
        w.add_side(b"B", RxConfig::default());
        w.sides[1].auto_accept = None;
        let (_, c, s) = w.connect(0, 1, b"let me in");
        let b = w.sides[0].mem.alloc_pattern(10, 1);
        w.sides[0].send(c, SendReq::msg(&[b], 7)).unwrap();
        w.run();
        w.conn(1, s).reject(b"go away").unwrap();
        w.run();
        assert!(w.sides[0].has_conn_event(|e| *e
            == Event::Rejected {
                private_data: b"go away".to_vec(),
                reason: reject::USER
            }));
        assert_eq!(w.sides[0].send_errors(), vec![(7, errno::FI_ECONNREFUSED)]);
        assert!(w.conn(0, c).is_closed());
        assert!(w.conn(1, s).is_closed());
        assert_eq!(
            w.conn(0, c).queue_send(SendReq::msg(&[b], 8)),
            Err(errno::FI_ENOTCONN)
        );
    }
}

#[test]
fn accept_and_reject_only_answer_a_request() {
    let mut w = World::pair(1, Config::default(), RxConfig::default());
    assert_eq!(w.conn(1, 0).accept(b""), Err(errno::FI_EOPBADSTATE));
    assert_eq!(w.conn(0, 0).reject(b""), Err(errno::FI_EOPBADSTATE));
    let too_long = vec![0u8; Config::default().max_cm_data + 1];
    assert!(ofi_proto::tcp::Conn::connect(9, 0, Config::default(), b"A", &too_long).is_err());
}

#[test]
fn shutdown_is_seen_by_the_peer() {
    for seed in 0..SEEDS {
        let mut w = World::pair(seed, small_cfg(), RxConfig::default());
        // A message in flight before the shutdown is delivered first.
        let b = w.sides[0].mem.alloc_pattern(100, 3);
        w.sides[0].send(0, SendReq::msg(&[b], 1)).unwrap();
        let r = w.sides[1].mem.alloc(100);
        w.sides[1].post(RecvReq::msg(&[r], 2)).unwrap();
        w.tx(0, 0, usize::MAX);
        let side = &mut w.sides[0];
        side.conns[0].shutdown(&mut side.rx);
        // A receive posted on the server stays posted; one bound to the
        // connection is not involved here.
        w.run();
        assert_eq!(w.sides[0].sends_done(), vec![1]);
        assert_eq!(w.sides[1].done(2).len, 100);
        assert!(w.sides[1].has_conn_event(|e| *e == Event::PeerShutdown));
        assert!(w.conn(0, 0).is_closed());
        assert!(w.conn(1, 0).is_closed());
    }
}

// ---- eager ------------------------------------------------------------------

fn eager_sizes(cfg: &Config, rng: &mut XorShift) -> Vec<usize> {
    let m = cfg.eager_max;
    let mut v = vec![0, 1, 2, 7, 39, 40, 41, 80, m - 1, m];
    for _ in 0..10 {
        v.push(rng.range(0, m));
    }
    v
}

#[test]
fn eager_messages_of_many_sizes_land_in_place() {
    for seed in 0..SEEDS {
        let cfg = small_cfg();
        let mut w = World::pair(seed, cfg, RxConfig::default());
        let mut rng = XorShift::new(seed);
        let sizes = eager_sizes(&cfg, &mut rng);
        let mut sent = Vec::new();
        let mut recv = Vec::new();
        for (i, &n) in sizes.iter().enumerate() {
            // Receives posted first, with a split iov; tags distinct.
            let a = w.sides[1].mem.alloc(n / 3);
            let b = w.sides[1].mem.alloc(n - n / 3 + 5);
            w.sides[1]
                .post(RecvReq::tagged(&[a, b], i as u64, 0, 1000 + i))
                .unwrap();
            recv.push((a, b));
            let s1 = w.sides[0].mem.alloc_pattern(n / 2, seed * 100 + i as u64);
            let s2 = w.sides[0]
                .mem
                .alloc_pattern(n - n / 2, seed * 100 + 50 + i as u64);
            w.sides[0]
                .send(
                    0,
                    SendReq::tagged(&[s1, s2], i as u64, i).with_data(i as u64 * 3),
                )
                .unwrap();
            sent.push(w.sides[0].mem.gather(&[s1, s2]));
        }
        w.run();
        assert_eq!(
            w.sides[0].sends_done(),
            (0..sizes.len()).collect::<Vec<_>>()
        );
        for (i, &n) in sizes.iter().enumerate() {
            let d = w.sides[1].done(1000 + i);
            assert_eq!(d.len, n);
            assert_eq!(d.tag, i as u64);
            assert_eq!(d.data, i as u64 * 3);
            assert_eq!(d.flags, FI_RECV | FI_TAGGED | FI_REMOTE_CQ_DATA);
            assert_eq!(d.truncated_by, 0);
            assert!(d.copy.is_none());
            let (a, b) = recv[i];
            let got = w.sides[1].mem.gather(&[a, b]);
            assert_eq!(&got[..n], &sent[i][..]);
            assert!(got[n..].iter().all(|&x| x == FRESH));
            assert!(w.sides[1].mem.guards_intact(a) && w.sides[1].mem.guards_intact(b));
        }
        let st = w.sides[1].stats;
        assert_eq!(st.copied_bytes, 0);
        assert_eq!(st.payload_bytes, sizes.iter().sum::<usize>());
    }
}

/// The fast path ([`Conn::frame_now`]) mixed with queued sends: small
/// sends are written at once when nothing is ahead of them, cut at every
/// split by a short write (the rest staged), and otherwise queued; the
/// receiver sees every message whole, in posting order, and each send
/// completes once (a whole fast write needs no event; a cut one, one event).
#[test]
fn fast_path_sends_keep_order_at_every_split() {
    use ofi_proto::tcp::{Ack, FAST_MAX};
    let mut cut_writes = 0;
    for seed in 0..SEEDS {
        let cfg = small_cfg();
        let mut w = World::pair(seed, cfg, RxConfig::default());
        let mut rng = XorShift::new(seed ^ 0x5eed);
        let n = 40;
        let mut sent = Vec::new();
        let mut rbufs = Vec::new();
        let mut fast_whole = Vec::new();
        let mut queued = Vec::new();
        for i in 0..n {
            let len = match rng.below(4) {
                0 => 0,
                1 => rng.range(1, FAST_MAX),
                2 => FAST_MAX,
                // Eager (in-order completion); rendezvous would complete
                // after later eager messages.
                _ => rng.range(FAST_MAX + 1, cfg.eager_max),
            };
            let r = w.sides[1].mem.alloc(len.max(1));
            w.sides[1]
                .post(RecvReq::tagged(&[r], i as u64, 0, 1000 + i))
                .unwrap();
            rbufs.push(r);
            let b = w.sides[0].mem.alloc_pattern(len, seed * 1000 + i as u64);
            sent.push(w.sides[0].mem.gather(&[b]));
            let mut req = SendReq::tagged(&[b], i as u64, i);
            if rng.chance(8) {
                req = req.with_ack(Ack::Received);
            }
            // Often the whole frame; otherwise any room from nothing on
            // (every split).
            let room = if rng.chance(2) {
                usize::MAX
            } else {
                rng.range(0, ofi_wire::tcp::HDR_LEN + len + 1)
            };
            match w.send_now(0, 0, req, room) {
                Some(true) => fast_whole.push(i),
                Some(false) => cut_writes += 1,
                None => {
                    assert!(
                        len > FAST_MAX || req.ack != Ack::None || w.conn(0, 0).wants_transmit(),
                        "send {i} of {len} B with nothing ahead refused the fast path"
                    );
                    w.sides[0].send(0, req).unwrap();
                    queued.push(i);
                }
            }
            if rng.chance(3) {
                w.run();
            }
        }
        w.run();
        for i in 0..n {
            let d = w.sides[1].done(1000 + i);
            assert_eq!(d.len, sent[i].len(), "message {i}");
            assert_eq!(d.tag, i as u64);
            assert_eq!(
                &w.sides[1].mem.get(rbufs[i])[..d.len],
                &sent[i][..],
                "message {i}"
            );
        }
        assert_eq!(
            w.sides[1].recvs_done(),
            (1000..1000 + n).collect::<Vec<_>>(),
            "seed {seed}"
        );
        // Every send completes exactly once: fast whole ones at once (no
        // event), the others by event.
        let mut done = w.sides[0].sends_done();
        done.extend(&fast_whole);
        done.sort_unstable();
        assert_eq!(done, (0..n).collect::<Vec<_>>(), "seed {seed}");
        assert!(
            !fast_whole.is_empty() && !queued.is_empty(),
            "seed {seed}: both paths taken"
        );
    }
    assert!(cut_writes > SEEDS, "short fast writes: {cut_writes}");
}

#[test]
fn bytewise_splits() {
    let cfg = small_cfg();
    let mut w = World::pair(3, cfg, RxConfig::default());
    w.splits = Splits::Bytewise;
    let sizes = [0, 1, 100, 1024, 1025, 5000];
    for (i, &n) in sizes.iter().enumerate() {
        let r = w.sides[1].mem.alloc(n);
        w.sides[1].post(RecvReq::msg(&[r], i)).unwrap();
        let s = w.sides[0].mem.alloc_pattern(n, i as u64);
        w.sides[0].send(0, SendReq::msg(&[s], i)).unwrap();
    }
    w.run();
    for (i, &n) in sizes.iter().enumerate() {
        let d = w.sides[1].done(i);
        assert_eq!(d.len, n);
        assert_eq!(
            w.sides[1].mem.get(IoVec {
                base: d.buf,
                len: n
            }),
            &pattern(i as u64, n)[..]
        );
    }
}

// ---- rendezvous ---------------------------------------------------------------

#[test]
fn rendezvous_payload_lands_in_the_posted_buffer() {
    for seed in 0..SEEDS {
        let mut rng = XorShift::new(seed);
        let cfg = Config {
            eager_max: 1024,
            data_chunk: rng.range(100, 70_000),
            ..Config::default()
        };
        let mut w = World::pair(seed, cfg, RxConfig::default());
        let sizes = [1025, 4096, 65_536 + 3, 300_001, rng.range(1025, 200_000)];
        let mut rb = Vec::new();
        let mut sent = Vec::new();
        for (i, &n) in sizes.iter().enumerate() {
            let a = w.sides[1].mem.alloc(n / 2);
            let b = w.sides[1].mem.alloc(n - n / 2);
            w.sides[1]
                .post(RecvReq::tagged(&[a, b], 5, 0, 100 + i))
                .unwrap();
            rb.push([a, b]);
        }
        for (i, &n) in sizes.iter().enumerate() {
            // Three source ranges of odd sizes: DATA chunks cross them.
            let (a, b) = (n / 3 + 1, n / 5 + 7);
            let s1 = w.sides[0].mem.alloc_pattern(a, seed ^ i as u64);
            let s2 = w.sides[0].mem.alloc_pattern(b, seed ^ i as u64 ^ 0xf0);
            let s3 = w.sides[0]
                .mem
                .alloc_pattern(n - a - b, seed ^ i as u64 ^ 0xf00);
            w.sides[0]
                .send(0, SendReq::tagged(&[s1, s2, s3], 5, i))
                .unwrap();
            sent.push(w.sides[0].mem.gather(&[s1, s2, s3]));
        }
        w.run();
        assert_eq!(w.sides[0].sends_done().len(), sizes.len());
        for (i, &n) in sizes.iter().enumerate() {
            let d = w.sides[1].done(100 + i);
            assert_eq!((d.len, d.truncated_by), (n, 0));
            assert!(d.copy.is_none(), "rendezvous data must not be copied");
            assert_eq!(w.sides[1].mem.gather(&rb[i]), sent[i]);
        }
        let st = w.sides[1].stats;
        assert_eq!(st.copied_bytes, 0);
        assert_eq!(st.payload_bytes, sizes.iter().sum::<usize>());
        // Only RTS size words went through core buffers.
        assert_eq!(st.buffer_bytes, 8 * sizes.len());
        // Completions in posting order (same tag: matched in order).
        assert_eq!(
            w.sides[1].recvs_done(),
            (100..100 + sizes.len()).collect::<Vec<_>>()
        );
    }
}

#[test]
fn small_messages_overtake_nothing_but_interleave_with_data() {
    // A big rendezvous then small eager messages: matching order is send
    // order; the small ones are not stuck behind the whole payload.
    let cfg = Config {
        eager_max: 256,
        data_chunk: 1000,
        ..Config::default()
    };
    let mut w = World::pair(9, cfg, RxConfig::default());
    w.splits = Splits::Whole;
    let big = w.sides[0].mem.alloc_pattern(100_000, 1);
    w.sides[0].send(0, SendReq::msg(&[big], 0)).unwrap();
    let rbig = w.sides[1].mem.alloc(100_000);
    w.sides[1].post(RecvReq::msg(&[rbig], 100)).unwrap();
    for i in 1..=5 {
        let s = w.sides[0].mem.alloc_pattern(10, i);
        w.sides[0].send(0, SendReq::msg(&[s], i as usize)).unwrap();
        let r = w.sides[1].mem.alloc(10);
        w.sides[1]
            .post(RecvReq::msg(&[r], 100 + i as usize))
            .unwrap();
    }
    w.run();
    // Matching order is posting order.
    for i in 0..=5usize {
        let d = w.sides[1].done(100 + i);
        assert_eq!(d.len, if i == 0 { 100_000 } else { 10 });
        assert_eq!(
            w.sides[1].mem.get(IoVec {
                base: d.buf,
                len: d.len
            }),
            &pattern(if i == 0 { 1 } else { i as u64 }, d.len)[..]
        );
    }
    // The small sends completed before the big one.
    let done = w.sides[0].sends_done();
    assert_eq!(*done.last().unwrap(), 0, "{done:?}");
}

// ---- truncation -------------------------------------------------------------------

#[test]
fn truncation_keeps_the_stream_in_sync() {
    for seed in 0..SEEDS {
        let cfg = small_cfg();
        let mut w = World::pair(seed, cfg, RxConfig::default());
        // (message size, receive size): eager and rendezvous, to zero room too.
        let cases = [
            (100, 10),
            (1024, 1),
            (1024, 0),
            (5000, 100),
            (5000, 1024),
            (70_000, 0),
            (70_000, 69_999),
        ];
        for (i, &(n, cap)) in cases.iter().enumerate() {
            let r = w.sides[1].mem.alloc(cap);
            w.sides[1].post(RecvReq::msg(&[r], 100 + 2 * i)).unwrap();
            let r2 = w.sides[1].mem.alloc(64);
            w.sides[1].post(RecvReq::msg(&[r2], 101 + 2 * i)).unwrap();
            let s = w.sides[0].mem.alloc_pattern(n, i as u64);
            w.sides[0].send(0, SendReq::msg(&[s], 2 * i)).unwrap();
            let s2 = w.sides[0].mem.alloc_pattern(64, 1000 + i as u64);
            w.sides[0].send(0, SendReq::msg(&[s2], 2 * i + 1)).unwrap();
        }
        w.run();
        assert_eq!(
            w.sides[0].sends_done().len(),
            2 * cases.len(),
            "truncated sends complete"
        );
        for (i, &(n, cap)) in cases.iter().enumerate() {
            let d = w.sides[1].done(100 + 2 * i);
            assert_eq!(d.len, cap);
            assert_eq!(d.truncated_by, n - cap);
            assert_eq!(
                w.sides[1].mem.get(IoVec {
                    base: d.buf,
                    len: cap
                }),
                &pattern(i as u64, n)[..cap]
            );
            // The next message is intact.
            let d2 = w.sides[1].done(101 + 2 * i);
            assert_eq!((d2.len, d2.truncated_by), (64, 0));
            assert_eq!(
                w.sides[1].mem.get(IoVec {
                    base: d2.buf,
                    len: 64
                }),
                &pattern(1000 + i as u64, 64)[..]
            );
        }
        assert_eq!(w.sides[1].stats.copied_bytes, 0);
    }
}

// ---- unexpected ---------------------------------------------------------------------

#[test]
fn unexpected_eager_then_receive() {
    for seed in 0..SEEDS {
        let cfg = small_cfg();
        let mut w = World::pair(seed, cfg, RxConfig::default());
        let sizes = [0usize, 1, 500, 1024];
        for (i, &n) in sizes.iter().enumerate() {
            let s = w.sides[0].mem.alloc_pattern(n, i as u64);
            w.sides[0]
                .send(0, SendReq::tagged(&[s], 7, i).with_data(99))
                .unwrap();
        }
        w.run();
        assert_eq!(w.sides[0].sends_done().len(), sizes.len());
        assert!(w.sides[1].rx_events.is_empty());
        assert_eq!(w.sides[1].rx.queues().unexpected_len(true), sizes.len());
        assert_eq!(w.sides[1].rx.unexpected_bytes(), 1525);
        for (i, &n) in sizes.iter().enumerate() {
            let r = w.sides[1].mem.alloc(n + 3);
            w.sides[1]
                .post(RecvReq::tagged(&[r], 7, 0, 100 + i))
                .unwrap();
            let d = w.sides[1].done(100 + i);
            assert_eq!((d.len, d.tag, d.data, d.src), (n, 7, 99, 0));
            assert_eq!(d.flags, FI_RECV | FI_TAGGED | FI_REMOTE_CQ_DATA);
            assert_eq!(&w.sides[1].mem.get(r)[..n], &pattern(i as u64, n)[..]);
        }
        assert_eq!(w.sides[1].stats.copied_bytes, 1525);
        assert_eq!(w.sides[1].rx.unexpected_bytes(), 0);
    }
}

#[test]
fn unexpected_rendezvous_then_receive_lands_in_place() {
    for seed in 0..SEEDS {
        let cfg = small_cfg();
        let mut w = World::pair(seed, cfg, RxConfig::default());
        let sizes = [1025usize, 9000, 100_000];
        for (i, &n) in sizes.iter().enumerate() {
            let s = w.sides[0].mem.alloc_pattern(n, i as u64);
            w.sides[0]
                .send(0, SendReq::tagged(&[s], i as u64, i))
                .unwrap();
        }
        w.run();
        // The RTS frames arrived; the payloads are still with the sender.
        assert!(w.sides[0].sends_done().is_empty());
        assert_eq!(w.sides[1].rx.queues().unexpected_len(true), 3);
        assert_eq!(w.sides[1].stats.payload_bytes, 0);
        // Receive them in reverse order.
        for (i, &n) in sizes.iter().enumerate().rev() {
            let r = w.sides[1].mem.alloc(n);
            w.sides[1]
                .post(RecvReq::tagged(&[r], i as u64, 0, 100 + i))
                .unwrap();
            w.run();
            let d = w.sides[1].done(100 + i);
            assert_eq!(d.len, n);
            assert!(d.copy.is_none());
            assert_eq!(w.sides[1].mem.get(r), &pattern(i as u64, n)[..]);
            assert!(w.sides[0].sends_done().contains(&i));
        }
        assert_eq!(w.sides[1].stats.copied_bytes, 0);
        assert_eq!(w.sides[1].stats.payload_bytes, sizes.iter().sum::<usize>());
        assert_eq!(w.sides[1].rx.unexpected_bytes(), 0);
    }
}

#[test]
fn receive_posted_while_an_unexpected_payload_arrives_takes_it_in_order() {
    let cfg = small_cfg();
    for seed in 0..SEEDS {
        let mut w = World::pair(seed, cfg, RxConfig::default());
        w.splits = Splits::Bytewise;
        let s1 = w.sides[0].mem.alloc_pattern(1000, 1);
        let s2 = w.sides[0].mem.alloc_pattern(1000, 2);
        w.sides[0].send(0, SendReq::msg(&[s1], 1)).unwrap();
        w.sides[0].send(0, SendReq::msg(&[s2], 2)).unwrap();
        w.tx(0, 0, usize::MAX);
        w.tx(0, 0, usize::MAX);
        // Read the first header and part of the payload: unexpected.
        let k = 40 + 1 + (seed as usize * 37) % 998;
        let mut got = 0;
        while got < k {
            got += w.rx(0, 1, k - got);
        }
        let r1 = w.sides[1].mem.alloc(1000);
        let r2 = w.sides[1].mem.alloc(1000);
        w.sides[1].post(RecvReq::msg(&[r1], 10)).unwrap();
        w.sides[1].post(RecvReq::msg(&[r2], 20)).unwrap();
        w.run();
        // The first message goes to the first receive.
        assert_eq!(w.sides[1].mem.get(r1), &pattern(1, 1000)[..]);
        assert_eq!(w.sides[1].mem.get(r2), &pattern(2, 1000)[..]);
        assert_eq!(w.sides[1].recvs_done(), vec![10, 20]);
    }
}

// ---- peek / claim / discard ------------------------------------------------------------

#[test]
fn peek_claim_discard() {
    for seed in 0..SEEDS {
        let cfg = small_cfg();
        let mut w = World::pair(seed, cfg, RxConfig::default());
        // tags 1,2,3 eager; 4,5,6 rendezvous
        let sizes = [10usize, 20, 30, 2000, 3000, 4000];
        for (i, &n) in sizes.iter().enumerate() {
            let s = w.sides[0].mem.alloc_pattern(n, i as u64);
            w.sides[0]
                .send(
                    0,
                    SendReq::tagged(&[s], i as u64 + 1, i).with_data(i as u64),
                )
                .unwrap();
        }
        w.run();
        let side = &mut w.sides[1];
        // Peek for something absent.
        side.post(RecvReq::tagged(&[], 77, 0, 1).with_flags(FI_PEEK))
            .unwrap();
        assert_eq!(
            side.rx_events_for(1),
            vec![&Event::RecvError {
                context: 1,
                err: errno::FI_ENOMSG,
                flags: FI_RECV | FI_TAGGED,
                tag: 77
            }]
        );
        for (tag, ctx_base) in [(1u64, 10usize), (4, 40)] {
            let n = sizes[tag as usize - 1];
            // Plain peek: reports, leaves the message.
            side.post(RecvReq::tagged(&[], tag, 0, ctx_base).with_flags(FI_PEEK))
                .unwrap();
            let d = side.done(ctx_base);
            assert_eq!((d.len, d.tag, d.data, d.buf), (n, tag, tag - 1, 0));
            assert_eq!(d.flags, FI_RECV | FI_TAGGED | FI_REMOTE_CQ_DATA);
            // Peek + claim: reserved for this context.
            side.post(RecvReq::tagged(&[], tag, 0, ctx_base + 1).with_flags(FI_PEEK | FI_CLAIM))
                .unwrap();
            assert_eq!(side.done(ctx_base + 1).len, n);
            // A plain receive no longer sees it (it stays posted).
            let other = side.mem.alloc(n);
            side.post(RecvReq::tagged(&[other], tag, 0, ctx_base + 2))
                .unwrap();
            assert!(side.try_done(ctx_base + 2).is_none());
            side.rx.cancel(ctx_base + 2).unwrap();
            // Nor does another peek.
            side.post(RecvReq::tagged(&[], tag, 0, ctx_base + 3).with_flags(FI_PEEK))
                .unwrap();
            assert!(
                matches!(side.rx_events_for(ctx_base + 3)[0], Event::RecvError { err, .. } if *err == errno::FI_ENOMSG)
            );
            // FI_CLAIM with the claiming context receives it.
            let r = side.mem.alloc(n);
            side.post(RecvReq::tagged(&[r], tag, 0, ctx_base + 1).with_flags(FI_CLAIM))
                .unwrap();
        }
        // Peek + discard of tag 2 (eager) and tag 5 (rendezvous).
        side.post(RecvReq::tagged(&[], 2, 0, 20).with_flags(FI_PEEK | FI_DISCARD))
            .unwrap();
        assert_eq!(side.done(20).len, 20);
        side.post(RecvReq::tagged(&[], 5, 0, 50).with_flags(FI_PEEK | FI_DISCARD))
            .unwrap();
        assert_eq!(side.done(50).len, 3000);
        // Claim then discard: tag 3 and 6.
        for (tag, ctx) in [(3u64, 30usize), (6, 60)] {
            side.post(RecvReq::tagged(&[], tag, 0, ctx).with_flags(FI_PEEK | FI_CLAIM))
                .unwrap();
            side.post(RecvReq::tagged(&[], tag, 0, ctx).with_flags(FI_CLAIM | FI_DISCARD))
                .unwrap();
        }
        w.run();
        let side = &w.sides[1];
        // Claimed receives got their data (context reused: the last completion).
        for (tag, ctx) in [(1u64, 11usize), (4, 41)] {
            let n = sizes[tag as usize - 1];
            let last = side
                .rx_events
                .iter()
                .rev()
                .find_map(|e| match e {
                    Event::RecvComplete(d) if d.context == ctx => Some(d.clone()),
                    _ => None,
                })
                .unwrap();
            assert_eq!(last.len, n);
            assert_eq!(
                side.mem.get(IoVec {
                    base: last.buf,
                    len: n
                }),
                &pattern(tag - 1, n)[..]
            );
        }
        // Everything left the unexpected queue; every send completed,
        // including the discarded rendezvous sends.
        assert_eq!(side.rx.queues().unexpected_len(true), 0);
        assert_eq!(side.rx.unexpected_bytes(), 0);
        let mut done = w.sides[0].sends_done();
        done.sort();
        assert_eq!(done, vec![0, 1, 2, 3, 4, 5]);
        // Discarded rendezvous payloads never crossed the wire.
        assert_eq!(w.sides[1].stats.payload_bytes, 2000);
    }
}

// ---- multi-receive ----------------------------------------------------------------------

#[test]
fn multi_receive_packs_messages_and_releases_once() {
    for seed in 0..SEEDS {
        let cfg = small_cfg();
        let mut w = World::pair(seed, cfg, RxConfig::default());
        w.sides[1].rx.set_min_multi_recv(100);
        let buf = w.sides[1].mem.alloc(4000);
        // Two unexpected messages first, then the buffer, then more.
        let sizes = [300usize, 700, 2000, 900, 500, 50];
        for (i, &n) in sizes.iter().take(2).enumerate() {
            let s = w.sides[0].mem.alloc_pattern(n, i as u64);
            w.sides[0].send(0, SendReq::msg(&[s], i)).unwrap();
        }
        w.run();
        w.sides[1]
            .post(RecvReq::msg(&[buf], 9).with_flags(FI_MULTI_RECV))
            .unwrap();
        for (i, &n) in sizes.iter().enumerate().skip(2) {
            let s = w.sides[0].mem.alloc_pattern(n, i as u64);
            w.sides[0].send(0, SendReq::msg(&[s], i)).unwrap();
        }
        w.run();
        let side = &w.sides[1];
        let dones: Vec<_> = side
            .rx_events
            .iter()
            .map(|e| match e {
                Event::RecvComplete(d) => d.clone(),
                e => panic!("{e:?}"),
            })
            .collect();
        // 300 + 700 + 2000 + 900 = 3900: 100 left, not below the minimum;
        // the 500-byte message is truncated to 100 and releases the buffer;
        // the 50-byte one stays unexpected.
        assert_eq!(dones.len(), 5);
        // The 2000-byte message is a rendezvous: it completes after the
        // 900-byte one placed behind it. Only the last completion in time
        // releases the buffer.
        for (i, d) in dones.iter().enumerate() {
            assert_eq!(
                d.flags & FI_MULTI_RECV != 0,
                i == 4,
                "only the last completion releases"
            );
        }
        let mut dones = dones;
        dones.sort_by_key(|d| d.buf);
        let mut off = 0;
        for (i, d) in dones.iter().enumerate() {
            assert_eq!(d.context, 9);
            assert_eq!(d.buf, buf.base + off);
            let want = sizes[i].min(4000 - off);
            assert_eq!(d.len, want);
            assert_eq!(d.truncated_by, sizes[i] - want);
            assert_eq!(
                side.mem.get(IoVec {
                    base: d.buf,
                    len: want
                }),
                &pattern(i as u64, sizes[i])[..want]
            );
            off += want;
        }
        assert_eq!(side.rx.queues().unexpected_len(false), 1);
    }
}

#[test]
fn multi_receive_release_waits_for_a_rendezvous_in_flight() {
    let cfg = small_cfg();
    for seed in 0..SEEDS {
        let mut w = World::pair(seed, cfg, RxConfig::default());
        let buf = w.sides[1].mem.alloc(10_000);
        w.sides[1].rx.set_min_multi_recv(2000);
        w.sides[1]
            .post(RecvReq::msg(&[buf], 9).with_flags(FI_MULTI_RECV))
            .unwrap();
        // A rendezvous that takes 7000 bytes, then an eager one that
        // releases the buffer while the first is still streaming.
        let big = w.sides[0].mem.alloc_pattern(7000, 1);
        let small = w.sides[0].mem.alloc_pattern(1020, 2);
        w.sides[0].send(0, SendReq::msg(&[big], 1)).unwrap();
        w.sides[0].send(0, SendReq::msg(&[small], 2)).unwrap();
        w.run();
        let side = &w.sides[1];
        let flags: Vec<(usize, bool)> = side
            .rx_events
            .iter()
            .map(|e| match e {
                Event::RecvComplete(d) => (d.len, d.flags & FI_MULTI_RECV != 0),
                e => panic!("{e:?}"),
            })
            .collect();
        assert_eq!(flags.len(), 2);
        // Whatever completes last carries FI_MULTI_RECV, only it.
        assert!(flags[1].1 && !flags[0].1, "{flags:?}");
        assert_eq!(
            side.mem.get(IoVec {
                base: buf.base,
                len: 7000
            }),
            &pattern(1, 7000)[..]
        );
        assert_eq!(
            side.mem.get(IoVec {
                base: buf.base + 7000,
                len: 1020
            }),
            &pattern(2, 1020)[..]
        );
    }
}

// ---- cancel ---------------------------------------------------------------------------------

#[test]
fn cancel_removes_a_posted_receive() {
    let mut w = World::pair(4, small_cfg(), RxConfig::default());
    let r1 = w.sides[1].mem.alloc(100);
    let r2 = w.sides[1].mem.alloc(100);
    w.sides[1].post(RecvReq::tagged(&[r1], 1, 0, 10)).unwrap();
    w.sides[1].post(RecvReq::tagged(&[r2], 1, 0, 20)).unwrap();
    w.sides[1].rx.cancel(10).unwrap();
    w.sides[1].pump();
    assert_eq!(
        w.sides[1].rx_events_for(10),
        vec![&Event::RecvCanceled {
            context: 10,
            flags: FI_RECV | FI_TAGGED,
            tag: 1
        }]
    );
    assert_eq!(w.sides[1].rx.cancel(10), Err(errno::FI_ENOENT));
    let s = w.sides[0].mem.alloc_pattern(50, 1);
    w.sides[0].send(0, SendReq::tagged(&[s], 1, 1)).unwrap();
    w.run();
    assert_eq!(w.sides[1].done(20).len, 50);
    assert!(w.sides[1].mem.get(r1).iter().all(|&b| b == FRESH));
    // A multi-receive buffer cancelled with no message in flight ends
    // with FI_MULTI_RECV on the cancel.
    let m = w.sides[1].mem.alloc(100);
    w.sides[1]
        .post(RecvReq::msg(&[m], 30).with_flags(FI_MULTI_RECV))
        .unwrap();
    w.sides[1].rx.cancel(30).unwrap();
    w.sides[1].pump();
    assert_eq!(
        w.sides[1].rx_events_for(30),
        vec![&Event::RecvCanceled {
            context: 30,
            flags: FI_RECV | FI_MSG | FI_MULTI_RECV,
            tag: 0
        }]
    );
    // A receive already matched to a rendezvous in progress is not cancellable.
    let big = w.sides[0].mem.alloc_pattern(50_000, 2);
    w.sides[0].send(0, SendReq::msg(&[big], 2)).unwrap();
    let r = w.sides[1].mem.alloc(50_000);
    w.sides[1].post(RecvReq::msg(&[r], 40)).unwrap();
    for _ in 0..3 {
        w.tx(0, 0, usize::MAX);
        w.rx(0, 1, usize::MAX);
        w.tx(0, 1, usize::MAX);
        w.rx(0, 0, usize::MAX);
    }
    assert!(w.sides[1].try_done(40).is_none());
    assert_eq!(w.sides[1].rx.cancel(40), Err(errno::FI_ENOENT));
    w.run();
    assert_eq!(w.sides[1].done(40).len, 50_000);
}

// ---- backpressure ---------------------------------------------------------------------------

#[test]
fn backpressure_stops_reading_and_resumes_without_loss() {
    for seed in 0..SEEDS {
        let cfg = small_cfg();
        let limit = 5000;
        let mut w = World::pair(
            seed,
            cfg,
            RxConfig {
                max_unexpected_bytes: limit,
                ..RxConfig::default()
            },
        );
        let count = 60;
        let mut rng = XorShift::new(seed);
        let sizes: Vec<usize> = (0..count).map(|_| rng.range(0, 1024)).collect();
        let total: usize = sizes.iter().sum();
        for (i, &n) in sizes.iter().enumerate() {
            let s = w.sides[0].mem.alloc_pattern(n, i as u64);
            w.sides[0].send(0, SendReq::msg(&[s], i)).unwrap();
        }
        w.run();
        // The receiver stopped: unexpected bytes within the limit (plus
        // at most one message), the rest waits in the pipe.
        let held = w.sides[1].rx.unexpected_bytes();
        assert!(held <= limit, "{held} > {limit}");
        assert!(w.sides[1].stats.blocked > 0);
        assert!(w.in_flight(0) > 0, "the sender must be held back");
        assert!(total > limit);
        // Receive everything, a few at a time; order must hold.
        let mut rbufs = Vec::new();
        for i in 0..count {
            let r = w.sides[1].mem.alloc(1024);
            w.sides[1].post(RecvReq::msg(&[r], 1000 + i)).unwrap();
            rbufs.push(r);
            if i % 7 == 0 {
                w.run();
                assert!(w.sides[1].rx.unexpected_bytes() <= limit);
            }
        }
        w.run();
        assert!(w.sides[1].wakeups > 0);
        assert_eq!(
            w.sides[1].recvs_done(),
            (1000..1000 + count).collect::<Vec<_>>()
        );
        for (i, &n) in sizes.iter().enumerate() {
            let d = w.sides[1].done(1000 + i);
            assert_eq!(d.len, n);
            assert_eq!(
                &w.sides[1].mem.get(rbufs[i])[..n],
                &pattern(i as u64, n)[..]
            );
        }
        assert_eq!(w.sides[0].sends_done().len(), count);
        assert_eq!(w.sides[1].rx.unexpected_bytes(), 0);
    }
}

#[test]
fn backpressure_also_bounds_unexpected_rendezvous_requests() {
    let cfg = Config {
        eager_max: 16,
        ..small_cfg()
    };
    let mut w = World::pair(
        5,
        cfg,
        RxConfig {
            max_unexpected_bytes: 10 * ofi_proto::tcp::RTS_COST,
            ..RxConfig::default()
        },
    );
    for i in 0..50 {
        let s = w.sides[0].mem.alloc_pattern(100, i);
        w.sides[0].send(0, SendReq::msg(&[s], i as usize)).unwrap();
    }
    w.run();
    assert_eq!(w.sides[1].rx.queues().unexpected_len(false), 10);
    for i in 0..50 {
        let r = w.sides[1].mem.alloc(100);
        w.sides[1].post(RecvReq::msg(&[r], 100 + i)).unwrap();
    }
    w.run();
    for i in 0..50 {
        let d = w.sides[1].done(100 + i);
        assert_eq!(
            w.sides[1].mem.get(IoVec {
                base: d.buf,
                len: 100
            }),
            &pattern(i as u64, 100)[..]
        );
    }
}

#[test]
fn directed_receive_matches_only_its_source() {
    let mut w = World::pair(6, small_cfg(), RxConfig::default());
    let r = w.sides[1].mem.alloc(10);
    // Side 1's peer on conn 0 is fi_addr 0: a receive for source 5 waits.
    w.sides[1]
        .post(RecvReq::tagged(&[r], 1, 0, 10).from_src(5))
        .unwrap();
    let r2 = w.sides[1].mem.alloc(10);
    w.sides[1]
        .post(RecvReq::tagged(&[r2], 1, 0, 20).from_src(0))
        .unwrap();
    let s = w.sides[0].mem.alloc_pattern(10, 1);
    w.sides[0].send(0, SendReq::tagged(&[s], 1, 1)).unwrap();
    w.run();
    assert!(w.sides[1].try_done(10).is_none());
    assert_eq!(w.sides[1].done(20).src, 0);
}

#[test]
fn a_window_that_never_drains_keeps_moving() {
    // Writes of a few bytes at a time while sends keep coming: the staged
    // headers are compacted instead of growing or stalling.
    let mut w = World::pair(8, small_cfg(), RxConfig::default());
    let count = 400;
    let mut rb = Vec::new();
    for i in 0..count {
        let r = w.sides[1].mem.alloc(20);
        w.sides[1].post(RecvReq::msg(&[r], 1000 + i)).unwrap();
        rb.push(r);
    }
    let mut rng = XorShift::new(8);
    let mut queued = 0;
    while queued < count || w.sides[0].sends_done().len() < count {
        if queued < count {
            for _ in 0..rng.range(1, 5).min(count - queued) {
                let n = rng.range(0, 20);
                let s = w.sides[0].mem.alloc_pattern(n, queued as u64);
                w.sides[0].send(0, SendReq::msg(&[s], queued)).unwrap();
                queued += 1;
            }
        }
        w.tx(0, 0, rng.range(1, 30));
        while w.rx(0, 1, usize::MAX) > 0 {}
    }
    for i in 0..count {
        let d = w.sides[1].done(1000 + i);
        assert_eq!(
            w.sides[1].mem.get(IoVec {
                base: d.buf,
                len: d.len
            }),
            &pattern(i as u64, d.len)[..]
        );
    }
}
