//! Connection loss at every byte offset of the stream, in both directions:
//! every pending operation completes (successfully or with an error),
//! none hangs. Malformed frames from a hostile peer close the connection
//! with a protocol error and fail only that connection's operations.

#![allow(clippy::needless_range_loop)] // indices name sides, peers and sequence numbers

mod common;

use common::*;
use ofi_base::error::errno;
use ofi_proto::tcp::{Config, Event, ProtoError, RecvReq, RxConfig, SendReq, Target};
use ofi_wire::tcp::{op, rts_payload, Repr, HDR_LEN};
use ofi_wire::WireError;
use proptest::prelude::*;

fn cfg() -> Config {
    Config {
        eager_max: 256,
        data_chunk: 300,
        ..Config::default()
    }
}

struct Scenario {
    /// (side, send context, message bytes)
    sends: Vec<(usize, usize, Vec<u8>)>,
    /// (side, receive context, buffer)
    recvs: Vec<(usize, usize, ofi_base::iov::IoVec)>,
}

/// Traffic both ways: eager and rendezvous, expected and unexpected,
/// truncated, zero-length.
fn scenario(w: &mut World) -> Scenario {
    let mut sc = Scenario {
        sends: Vec::new(),
        recvs: Vec::new(),
    };
    // side 1 receives: tag 0 (eager 100), tag 1 (rendezvous 1000, into
    // 1000), tag 2 (rendezvous 700 truncated to 500), tag 9 (never sent).
    for (ctx, tag, cap) in [
        (100usize, 0u64, 100usize),
        (101, 1, 1000),
        (102, 2, 500),
        (109, 9, 10),
    ] {
        let r = w.sides[1].mem.alloc(cap);
        w.sides[1].post(RecvReq::tagged(&[r], tag, 0, ctx)).unwrap();
        sc.recvs.push((1, ctx, r));
    }
    // side 0 receives tag 7 from side 1.
    let r = w.sides[0].mem.alloc(64);
    w.sides[0].post(RecvReq::tagged(&[r], 7, 0, 200)).unwrap();
    sc.recvs.push((0, 200, r));
    // side 0 sends tags 0..=5: 3 (eager 40) and 4 (rendezvous 900) are
    // unexpected, 5 is empty and unexpected.
    for (ctx, tag, n) in [
        (0usize, 0u64, 100usize),
        (1, 1, 1000),
        (2, 2, 700),
        (3, 3, 40),
        (4, 4, 900),
        (5, 5, 0),
    ] {
        let s = w.sides[0].mem.alloc_pattern(n, ctx as u64);
        w.sides[0].send(0, SendReq::tagged(&[s], tag, ctx)).unwrap();
        sc.sends.push((0, ctx, pattern(ctx as u64, n)));
    }
    // side 1 sends tag 7 (eager) and tag 8 (rendezvous, unexpected).
    for (ctx, tag, n) in [(10usize, 7u64, 64usize), (11, 8, 600)] {
        let s = w.sides[1].mem.alloc_pattern(n, ctx as u64);
        w.sides[1].send(0, SendReq::tagged(&[s], tag, ctx)).unwrap();
        sc.sends.push((1, ctx, pattern(ctx as u64, n)));
    }
    sc
}

/// Every send has exactly one terminal event; every receive at most one,
/// and the ones without are still posted; completed receives hold the
/// right bytes. Then closing the endpoints' receive sides leaves nothing.
fn check_nothing_hangs(w: &mut World, sc: &Scenario, what: &str) {
    for (side, ctx, _) in &sc.sends {
        let n = w.sides[*side]
            .conn_events
            .iter()
            .filter(|(_, e)| {
                matches!(e, Event::SendComplete { context } | Event::SendError { context, .. } if context == ctx)
            })
            .count();
        assert_eq!(
            n, 1,
            "{what}: send {ctx} on side {side}: {:?}",
            w.sides[*side].conn_events
        );
    }
    for (side, ctx, buf) in &sc.recvs {
        let evs = w.sides[*side].rx_events_for(*ctx);
        assert!(evs.len() <= 1, "{what}: receive {ctx}: {evs:?}");
        if let Some(Event::RecvComplete(d)) = evs.first() {
            let msg = &sc
                .sends
                .iter()
                .find(|(s, c, _)| *s != *side && (*c == *ctx - 100 || (*ctx == 200 && *c == 10)))
                .unwrap()
                .2;
            assert_eq!(
                w.sides[*side].mem.get(*buf)[..d.len],
                msg[..d.len],
                "{what}: receive {ctx}"
            );
        }
    }
    for s in 0..2 {
        let side = &mut w.sides[s];
        side.rx.close(errno::FI_ECANCELED);
        side.pump();
        assert_eq!(side.rx.unexpected_bytes(), 0);
    }
    for (side, ctx, _) in &sc.recvs {
        let evs = w.sides[*side].rx_events_for(*ctx);
        assert_eq!(evs.len(), 1, "{what}: receive {ctx} after close: {evs:?}");
    }
}

fn fresh(seed: u64) -> (World, Scenario) {
    let mut w = World::pair(seed, cfg(), RxConfig::default());
    let sc = scenario(&mut w);
    (w, sc)
}

#[test]
fn reference_run_completes_everything() {
    let (mut w, sc) = fresh(1);
    w.run();
    // Unexpected messages (tags 3, 4, 5, 8) stay; everything else completes.
    let mut done = w.sides[0].sends_done();
    done.sort();
    assert_eq!(done, vec![0, 1, 2, 3, 5]);
    assert_eq!(w.sides[1].sends_done(), vec![10]);
    let d = w.sides[1].done(102);
    assert_eq!((d.len, d.truncated_by), (500, 200));
    // An orderly shutdown ends the sends still waiting for a receive.
    let side = &mut w.sides[1];
    side.conns[0].shutdown(&mut side.rx);
    w.run();
    assert!(w.sides[0].has_conn_event(|e| *e == Event::PeerShutdown));
    assert_eq!(w.sides[0].send_errors(), vec![(4, errno::FI_ECONNRESET)]);
    assert_eq!(w.sides[1].send_errors(), vec![(11, errno::FI_ECANCELED)]);
    check_nothing_hangs(&mut w, &sc, "reference");
}

#[test]
fn loss_at_every_byte_offset_in_each_direction() {
    // Byte counts of a full run, per direction.
    let (mut w, _) = fresh(2);
    w.run();
    let total = [w.sides[1].stats.written, w.sides[0].stats.written];
    assert!(total[1] > 2000, "{total:?}");
    for toward in 0..2 {
        for k in 0..=total[toward] + 1 {
            let seed = k as u64 * 31 + toward as u64;
            let (mut w, sc) = fresh(seed);
            w.links[0].limit[toward] = Some(k);
            w.run();
            let eof_end = k % 2;
            w.cut(0, eof_end, errno::FI_ECONNRESET);
            let what = format!("cut after {k} bytes toward side {toward}");
            for s in 0..2 {
                let conn = &mut w.sides[s].conns[0];
                assert!(conn.is_closed(), "{what}");
                let side = &mut w.sides[s];
                assert_eq!(side.conns[0].recv_target(&mut side.rx), Target::Closed);
            }
            check_nothing_hangs(&mut w, &sc, &what);
        }
    }
}

#[test]
fn loss_before_accept_fails_queued_sends() {
    let mut w = World::new(3, cfg());
    w.add_side(b"A", RxConfig::default());
    w.add_side(b"B", RxConfig::default());
    w.sides[1].auto_accept = None;
    let (l, c, _) = w.connect(0, 1, b"pd");
    let s = w.sides[0].mem.alloc_pattern(10, 1);
    w.sides[0].send(c, SendReq::msg(&[s], 1)).unwrap();
    w.run();
    w.cut(l, 0, errno::FI_ECONNRESET);
    assert_eq!(w.sides[0].send_errors(), vec![(1, errno::FI_ECONNREFUSED)]);
    assert!(w.sides[0].has_conn_event(|e| *e
        == Event::ConnectionLost {
            err: errno::FI_ECONNREFUSED
        }));
}

// ---- hostile peer ------------------------------------------------------------

fn frame(r: Repr) -> Vec<u8> {
    r.to_bytes().to_vec()
}

fn patched(r: Repr, at: usize, v: u8) -> Vec<u8> {
    let mut b = r.to_bytes();
    b[at] = v;
    b.to_vec()
}

/// A connected pair where side 1 has: a rendezvous send waiting for CTS
/// (context 1), a posted receive nothing matches (context 50), and — when
/// `bound` — a receive matched to a rendezvous the "peer" announced
/// (context 51, id 77, 5000 bytes). Side 0 is the hostile peer: the test
/// writes raw bytes for it and never drives it.
fn victim(bound: bool, cfg: Config) -> World {
    let mut w = World::pair(7, cfg, RxConfig::default());
    let s = w.sides[1].mem.alloc_pattern(3000, 1);
    w.sides[1].send(0, SendReq::msg(&[s], 1)).unwrap();
    let r = w.sides[1].mem.alloc(10);
    w.sides[1].post(RecvReq::tagged(&[r], 99, 0, 50)).unwrap();
    if bound {
        let mut b = frame(Repr {
            op: op::RTS,
            flags: 1,
            len: 8,
            tag: 3,
            id: 77,
            ..Default::default()
        });
        b.extend_from_slice(&rts_payload(5000));
        w.links[0].pipes[1].extend(b);
        let r = w.sides[1].mem.alloc(5000);
        w.sides[1].post(RecvReq::tagged(&[r], 3, 0, 51)).unwrap();
    }
    drive_victim(&mut w);
    w
}

fn drive_victim(w: &mut World) {
    loop {
        let m = w.rx(0, 1, usize::MAX) + w.tx(0, 1, usize::MAX);
        if m == 0 {
            break;
        }
    }
}

fn assert_closed_by_protocol_error(w: &mut World, bound: bool, what: &str) -> ProtoError {
    let side = &mut w.sides[1];
    let err = side
        .conn_events
        .iter()
        .find_map(|(_, e)| match e {
            Event::ProtocolError(p) => Some(*p),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{what}: no protocol error: {:?}", side.conn_events));
    assert!(side.conns[0].is_closed(), "{what}");
    assert_eq!(
        side.conns[0].recv_target(&mut side.rx),
        Target::Closed,
        "{what}"
    );
    assert!(
        side.conns[0].poll_transmit(&mut side.rx).is_empty(),
        "{what}"
    );
    assert_eq!(side.send_errors(), vec![(1, errno::FI_EIO)], "{what}");
    if bound {
        assert!(
            matches!(side.rx_events_for(51)[..], [Event::RecvError { err, .. }] if *err == errno::FI_EIO),
            "{what}: {:?}",
            side.rx_events
        );
    }
    // The unrelated posted receive is untouched.
    assert!(side.rx_events_for(50).is_empty(), "{what}");
    assert_eq!(side.rx.queues().posted_len(true), 1, "{what}");
    err
}

#[test]
fn malformed_frames_close_the_connection() {
    let msg = Repr {
        op: op::MSG,
        len: 4,
        id: 4,
        ..Default::default()
    };
    let cases: Vec<(&str, Vec<u8>, Option<ProtoError>)> = vec![
        (
            "bad magic",
            patched(msg, 0, 0x00),
            Some(ProtoError::Wire(WireError::Malformed("bad magic"))),
        ),
        (
            "bad version",
            patched(msg, 1, 9),
            Some(ProtoError::Wire(WireError::Malformed(
                "unsupported version",
            ))),
        ),
        (
            "unknown op",
            patched(msg, 2, 42),
            Some(ProtoError::Wire(WireError::UnknownOp(42))),
        ),
        (
            "op zero",
            patched(msg, 2, 0),
            Some(ProtoError::Wire(WireError::UnknownOp(0))),
        ),
        ("unknown flag", patched(msg, 3, 0x10), None),
        ("reserved", patched(msg, 5, 1), None),
        (
            "MSG above max_frame",
            frame(Repr {
                op: op::MSG,
                len: 1 << 40,
                id: 1 << 40,
                ..Default::default()
            }),
            None,
        ),
        (
            "MSG length mismatch",
            frame(Repr {
                op: op::MSG,
                len: 4,
                id: 5,
                ..Default::default()
            }),
            None,
        ),
        (
            "RTS of 7 bytes",
            frame(Repr {
                op: op::RTS,
                len: 7,
                ..Default::default()
            }),
            None,
        ),
        (
            "CTS with payload",
            frame(Repr {
                op: op::CTS,
                len: 1,
                ..Default::default()
            }),
            None,
        ),
        (
            "flags on CTS",
            frame(Repr {
                op: op::CTS,
                flags: 1,
                ..Default::default()
            }),
            None,
        ),
        (
            "CTS for an unknown rendezvous",
            frame(Repr {
                op: op::CTS,
                id: 12345,
                data: 1,
                ..Default::default()
            }),
            Some(ProtoError::Violation("CTS for an unknown rendezvous")),
        ),
        (
            "CTS asking too much",
            frame(Repr {
                op: op::CTS,
                id: 1,
                data: 3001,
                ..Default::default()
            }),
            Some(ProtoError::Violation(
                "CTS asks for more than the message holds",
            )),
        ),
        (
            "DATA for an unknown rendezvous",
            frame(Repr {
                op: op::DATA,
                id: 5,
                len: 10,
                ..Default::default()
            }),
            Some(ProtoError::Violation("DATA for an unknown rendezvous")),
        ),
        (
            "HELLO when connected",
            frame(Repr {
                op: op::HELLO,
                ..Default::default()
            }),
            None,
        ),
        (
            "ACCEPT when connected",
            frame(Repr {
                op: op::ACCEPT,
                ..Default::default()
            }),
            None,
        ),
        (
            "REJECT when connected",
            frame(Repr {
                op: op::REJECT,
                ..Default::default()
            }),
            None,
        ),
    ];
    for (what, bytes, want) in cases {
        for bound in [false, true] {
            let mut w = victim(bound, cfg());
            w.links[0].pipes[1].extend(bytes.iter().copied());
            w.links[0].pipes[1].extend([0u8; 100]); // trailing junk is never read
            drive_victim(&mut w);
            let got = assert_closed_by_protocol_error(&mut w, bound, what);
            if let Some(want) = want {
                assert_eq!(got, want, "{what}");
            }
        }
    }
}

#[test]
fn rendezvous_violations_close_the_connection() {
    // DATA longer than the CTS asked for.
    let mut w = victim(true, cfg());
    w.links[0].pipes[1].extend(frame(Repr {
        op: op::DATA,
        id: 77,
        len: 5001,
        ..Default::default()
    }));
    drive_victim(&mut w);
    assert_eq!(
        assert_closed_by_protocol_error(&mut w, true, "long DATA"),
        ProtoError::Violation("DATA beyond the length asked for")
    );
    // Part of the DATA arrives, then garbage: the receive fails, the
    // bytes that did land stay where they are.
    let mut w = victim(true, cfg());
    let mut b = frame(Repr {
        op: op::DATA,
        id: 77,
        len: 100,
        ..Default::default()
    });
    b.extend([7u8; 100]);
    b.extend(patched(
        Repr {
            op: op::DATA,
            id: 77,
            len: 100,
            ..Default::default()
        },
        0,
        1,
    ));
    w.links[0].pipes[1].extend(b);
    drive_victim(&mut w);
    assert_closed_by_protocol_error(&mut w, true, "garbage after DATA");
    // An RTS above the maximum message size.
    let mut w = victim(
        false,
        Config {
            max_msg_size: 4096,
            ..cfg()
        },
    );
    let mut b = frame(Repr {
        op: op::RTS,
        len: 8,
        id: 3,
        ..Default::default()
    });
    b.extend_from_slice(&rts_payload(4097));
    w.links[0].pipes[1].extend(b);
    drive_victim(&mut w);
    assert_eq!(
        assert_closed_by_protocol_error(&mut w, false, "huge RTS"),
        ProtoError::Violation("RTS for a message above the maximum size")
    );
    // A reused rendezvous id while the first is in flight.
    let mut w = victim(true, cfg());
    let mut b = frame(Repr {
        op: op::RTS,
        flags: 1,
        len: 8,
        tag: 3,
        id: 77,
        ..Default::default()
    });
    b.extend_from_slice(&rts_payload(10));
    w.links[0].pipes[1].extend(b);
    let r = w.sides[1].mem.alloc(10);
    w.sides[1].post(RecvReq::tagged(&[r], 3, 0, 52)).unwrap();
    drive_victim(&mut w);
    assert_closed_by_protocol_error(&mut w, true, "reused id");
}

#[test]
fn a_header_split_anywhere_is_the_same_header() {
    // A valid MSG delivered one byte at a time, then a malformed one
    // delivered in two pieces at every split point.
    for split in 1..HDR_LEN {
        let mut w = victim(false, cfg());
        let r = w.sides[1].mem.alloc(4);
        w.sides[1].post(RecvReq::msg(&[r], 60)).unwrap();
        let mut b = frame(Repr {
            op: op::MSG,
            len: 4,
            id: 4,
            ..Default::default()
        });
        b.extend(b"abcd");
        b.extend(patched(
            Repr {
                op: op::SHUTDOWN,
                ..Default::default()
            },
            2,
            99,
        ));
        let (x, y) = b.split_at(HDR_LEN + 4 + split);
        w.links[0].pipes[1].extend(x.iter().copied());
        for _ in 0..HDR_LEN + 8 {
            w.rx(0, 1, 1);
        }
        assert_eq!(w.sides[1].done(60).len, 4);
        assert!(!w.sides[1].conns[0].is_closed());
        w.links[0].pipes[1].extend(y.iter().copied());
        drive_victim(&mut w);
        assert_eq!(
            assert_closed_by_protocol_error(&mut w, false, "split"),
            ProtoError::Wire(WireError::UnknownOp(99))
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(512), failure_persistence: None, ..ProptestConfig::default() })]

    /// Arbitrary bytes, optionally behind a valid header prefix, at a
    /// server waiting for HELLO and at a connected endpoint: no panic; the
    /// connection either keeps going or closes with a protocol error and
    /// fails its operations.
    #[test]
    fn arbitrary_streams_never_panic(
        junk in proptest::collection::vec(any::<u8>(), 0..600),
        prefix in 0usize..4,
        connected: bool,
        seed: u64,
    ) {
        let mut w = if connected {
            victim(seed % 2 == 0, cfg())
        } else {
            let mut w = World::new(seed, cfg());
            w.add_side(b"A", RxConfig::default());
            w.add_side(b"B", RxConfig::default());
            w.connect(0, 1, b"");
            w
        };
        let r = w.sides[1].mem.alloc(300);
        w.sides[1].post(RecvReq::msg(&[r], 70)).unwrap();
        let mut bytes = match prefix {
            1 => frame(Repr { op: op::MSG, len: junk.len() as u64, id: junk.len() as u64, ..Default::default() }),
            2 => frame(Repr { op: op::HELLO, len: junk.len() as u64, data: (junk.len() / 2) as u64, ..Default::default() }),
            3 => frame(Repr { op: op::DATA, id: 77, len: junk.len().max(1) as u64, ..Default::default() }),
            _ => Vec::new(),
        };
        bytes.extend(junk);
        w.links[0].pipes[1].extend(bytes);
        let mut rng = XorShift::new(seed);
        for _ in 0..2000 {
            let lim = rng.range(1, 64);
            let m = w.rx(0, 1, lim) + w.tx(0, 1, lim);
            if m == 0 && w.links[0].pipes[1].is_empty() {
                break;
            }
        }
        let side = &mut w.sides[1];
        let failed = side.conn_events.iter().any(|(_, e)| matches!(e, Event::ProtocolError(_)));
        if failed {
            prop_assert!(side.conns[0].is_closed());
            prop_assert_eq!(side.conns[0].recv_target(&mut side.rx), Target::Closed);
        }
        prop_assert!(side.rx.unexpected_bytes() <= RxConfig::default().max_unexpected_bytes + cfg().max_frame);
        for e in &side.rx_events {
            if let Event::RecvComplete(d) = e {
                prop_assert!(d.len <= 300 || d.context != 70);
            }
        }
    }
}
