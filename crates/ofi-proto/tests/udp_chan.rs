//! The udp reliability channel under a simulated network (seeded,
//! deterministic, virtual time): loss, duplication, reordering and
//! corruption from 0 to 20 %, records streamed both ways and checked to
//! arrive exactly once, in order and intact (10^6 of them over the runs),
//! large messages reassembled, the receive window holding against a
//! consumer that stops reading, and the dead bound.

mod udp_common;

use ofi_proto::udp::{ChanConfig, Channel, Recv};
use ofi_wire::udp::{Packet, Repr, HDR_LEN};
use std::time::{Duration, Instant};
use udp_common::*;

const A: &[u8] = b"side-a";
const B: &[u8] = b"side-b";
const SESSION: u64 = 0x5e55_1011;

struct Side {
    addr: &'static [u8],
    chan: Channel,
    prod: Producer,
    cons: Consumer,
    paused_until: Option<Instant>,
    max_held: usize,
}

/// What a run saw.
#[derive(Debug, Default)]
struct Report {
    records: [u64; 2],
    retransmitted: u64,
    duplicates: u64,
    steps: u64,
    virtual_time: Duration,
}

struct Opts {
    seed: u64,
    faults: Faults,
    records: u64,
    max_len: u64,
    cfg: ChanConfig,
    /// Per-mille chance per step that a consumer stops reading a while.
    pauses: u32,
    /// Raw bytes A streams to B after its records (a large message).
    raw: Vec<u8>,
}

fn cfg(mss: usize, window: u32) -> ChanConfig {
    ChanConfig {
        max_payload: mss,
        window,
        peer_timeout: Duration::from_secs(600),
        ..Default::default()
    }
}

fn run(o: Opts) -> Report {
    let mut net = Net::new(o.seed, o.faults);
    let t0 = net.now;
    let mut rng = Rng::new(o.seed ^ 0xabcdef);
    let mk = |addr| Side {
        addr,
        chan: Channel::new(o.cfg, SESSION, o.cfg.window, t0),
        prod: Producer::new(o.records),
        cons: Consumer::default(),
        paused_until: None,
        max_held: 0,
    };
    let mut sides = [mk(A), mk(B)];
    let raw_len = o.raw.len() as u64;
    let mut raw_pushed = false;
    let mut raw_got: Vec<u8> = Vec::new();
    let mut rep = Report::default();
    let limit = 50_000_000u64;
    let mut hdr = [0u8; HDR_LEN];
    loop {
        rep.steps += 1;
        assert!(rep.steps < limit, "no end after {limit} steps: {rep:?}");
        let mut busy = false;
        // Produce and transmit.
        for (i, s) in sides.iter_mut().enumerate() {
            s.prod.fill(&mut rng, o.max_len, 256 << 10);
            if i == 0 && !raw_pushed && s.prod.records == s.prod.total {
                s.prod.push_raw(&o.raw);
                raw_pushed = true;
            }
            s.chan.set_stream_end(s.prod.end());
            let to = if i == 0 { B } else { A };
            let mut n = 0;
            while n < 64 {
                let Some(r) = s.chan.poll_transmit(net.now, &mut hdr) else {
                    break;
                };
                let mut d = hdr.to_vec();
                d.extend(s.prod.gather(r));
                net.send(s.addr, to, &d);
                n += 1;
            }
            busy |= n == 64;
            s.prod.ack_to(s.chan.acked());
            assert!(
                s.prod.kept() <= (256 << 10) + o.raw.len() + 1024,
                "the producer keeps more than it wrote ahead"
            );
        }
        // Deliver what is due.
        while let Some((_, to, bytes)) = net.deliver() {
            // What arrives may open a window: transmit again before time moves.
            busy = true;
            let i = usize::from(to.as_slice() == B);
            let s = &mut sides[i];
            let p = Packet::new_checked(&bytes[..])
                .expect("the checksum let a damaged datagram through");
            let r = Repr::parse(&p).expect("a packet the channel sent parses");
            let payload = p.payload();
            if s.chan.on_packet(net.now, &r, payload) == Recv::Deliver {
                let paused = s.paused_until.is_some_and(|t| t > net.now);
                let k = if paused {
                    0
                } else if rng.per_mille(300) {
                    rng.below(payload.len() as u64 + 1) as usize
                } else {
                    payload.len()
                };
                take(i, s, &payload[..k], raw_len, &mut raw_got);
                s.chan.hold(&payload[k..]);
            }
        }
        // Consumers read what is held, unless paused.
        for (i, s) in sides.iter_mut().enumerate() {
            s.max_held = s.max_held.max(s.chan.held_len());
            let limit = s.chan.config().window as usize + s.chan.config().max_payload;
            assert!(
                s.chan.held_len() <= limit,
                "side {i} holds {} bytes, beyond its window {limit}: the sender flooded it",
                s.chan.held_len()
            );
            if s.paused_until.is_some_and(|t| t > net.now) {
                continue;
            }
            s.paused_until = None;
            for _ in 0..1024 {
                let h = s.chan.held();
                if h.is_empty() {
                    break;
                }
                let k = 1 + rng.below(h.len() as u64) as usize;
                let chunk = h[..k].to_vec();
                take(i, s, &chunk, raw_len, &mut raw_got);
                s.chan.consume(k);
            }
            if rng.per_mille(o.pauses) {
                s.paused_until = Some(net.now + Duration::from_micros(rng.below(5000)));
            }
        }
        // Timers.
        for s in sides.iter_mut() {
            if s.chan.poll_timeout().is_some_and(|t| t <= net.now) {
                s.chan.handle_timeout(net.now);
                // Timers may make packets to send before time moves.
                busy = true;
            }
            assert!(
                !s.chan.is_dead(),
                "a live peer declared dead at {:?} step {}",
                net.now - t0,
                rep.steps
            );
        }
        let done = sides.iter().all(|s| s.cons.records == o.records)
            && raw_got.len() as u64 == raw_len
            && sides.iter().all(|s| !s.chan.busy());
        if done {
            break;
        }
        if busy {
            continue;
        }
        // Advance virtual time to the next event.
        let next = [
            net.next_at(),
            sides[0].chan.poll_timeout(),
            sides[1].chan.poll_timeout(),
            sides[0].paused_until,
            sides[1].paused_until,
        ]
        .into_iter()
        .flatten()
        .min();
        match next {
            Some(t) if t > net.now => net.now = t,
            Some(_) => {}
            None => panic!(
                "stalled: nothing in flight, no timer, records {:?}/{}, raw {}/{}",
                [sides[0].cons.records, sides[1].cons.records],
                o.records,
                raw_got.len(),
                raw_len
            ),
        }
    }
    assert_eq!(raw_got, o.raw, "the large message arrived damaged");
    for s in &sides {
        assert!(
            s.chan.is_idle(),
            "a channel keeps bytes after the streams ended (duplicates parked?): {} held",
            s.chan.held_len()
        );
        rep.retransmitted += s.chan.stats().retransmitted;
        rep.duplicates += s.chan.stats().duplicates;
    }
    rep.records = [sides[0].cons.records, sides[1].cons.records];
    rep.virtual_time = net.now - t0;
    rep
}

/// Consumer input of side `i`: B reads A's stream, which ends with the
/// raw message after the records.
fn take(i: usize, s: &mut Side, b: &[u8], raw_len: u64, raw: &mut Vec<u8>) {
    if i == 0 || raw_len == 0 {
        s.cons.take(b);
        return;
    }
    let mut used = 0;
    while used < b.len() && s.cons.records < s.prod.total {
        s.cons.take(&b[used..used + 1]);
        used += 1;
    }
    raw.extend_from_slice(&b[used..]);
}

#[test]
fn a_million_records_arrive_exactly_once_in_order_under_faults() {
    // (seed, faults per mille): clean, then each fault alone and all
    // together, up to 20 %. Records go both ways.
    let runs: [(u64, Faults); 5] = [
        (1, Faults::default()),
        (2, Faults::all(50)),
        (
            3,
            Faults {
                loss: 200,
                dup: 0,
                reorder: 0,
                corrupt: 0,
            },
        ),
        (
            4,
            Faults {
                loss: 0,
                dup: 200,
                reorder: 200,
                corrupt: 200,
            },
        ),
        (5, Faults::all(200)),
    ];
    let per_side = 100_000;
    let mut total = 0;
    for (seed, f) in runs {
        let r = run(Opts {
            seed,
            faults: f,
            records: per_side,
            max_len: 48,
            cfg: cfg(512, 256 << 10),
            pauses: 2,
            raw: Vec::new(),
        });
        assert_eq!(r.records, [per_side, per_side], "seed {seed}");
        if f.loss > 0 {
            assert!(
                r.retransmitted > 0,
                "seed {seed}: loss without retransmission"
            );
        }
        if f.dup > 0 {
            assert!(r.duplicates > 0, "seed {seed}: duplicates went unnoticed");
        }
        total += r.records[0] + r.records[1];
        eprintln!("seed {seed} {f:?}: {r:?}");
    }
    assert!(total >= 1_000_000);
}

#[test]
fn large_messages_are_reassembled_intact() {
    // 4 MiB with small packets under every fault at 20 %, and 8 MiB in
    // large datagrams with loss and reordering.
    for (seed, mss, len, f) in [
        (11, 1400usize, 4usize << 20, Faults::all(200)),
        (
            12,
            64_000,
            8 << 20,
            Faults {
                loss: 100,
                dup: 20,
                reorder: 100,
                corrupt: 20,
            },
        ),
    ] {
        let raw: Vec<u8> = pattern(seed, len).collect();
        let r = run(Opts {
            seed,
            faults: f,
            records: 10,
            max_len: 16,
            cfg: cfg(mss, 2 << 20),
            pauses: 0,
            raw,
        });
        assert_eq!(r.records, [10, 10]);
        assert!(r.retransmitted > 0);
    }
}

#[test]
fn a_consumer_that_stops_reading_stops_the_sender() {
    let t0 = Instant::now();
    let c = cfg(1000, 64 << 10);
    let mut a = Channel::new(c, SESSION, c.window, t0);
    let mut b = Channel::new(c, SESSION, c.window, t0);
    let mut prod = Producer::new(0);
    let big: Vec<u8> = pattern(9, 1 << 20).collect();
    prod.push_raw(&big);
    a.set_stream_end(prod.end());
    let mut now = t0;
    let mut hdr = [0u8; HDR_LEN];
    // B never reads: it holds, and its window closes.
    for _ in 0..2000 {
        now += Duration::from_micros(100);
        let mut to_b = Vec::new();
        while let Some(r) = a.poll_transmit(now, &mut hdr) {
            let mut d = hdr.to_vec();
            d.extend(prod.gather(r));
            to_b.push(d);
        }
        for d in &to_b {
            let p = Packet::new_checked(&d[..]).unwrap();
            if b.on_packet(now, &Repr::parse(&p).unwrap(), p.payload()) == Recv::Deliver {
                b.hold(p.payload());
            }
        }
        while let Some(r) = b.poll_transmit(now, &mut hdr) {
            assert!(r.is_empty(), "B has nothing to send but acknowledgements");
            let p = Packet::new_checked(&hdr[..]).unwrap();
            a.on_packet(now, &Repr::parse(&p).unwrap(), &[]);
        }
        for ch in [&mut a, &mut b] {
            if ch.poll_timeout().is_some_and(|t| t <= now) {
                ch.handle_timeout(now);
            }
        }
        prod.ack_to(a.acked());
        assert!(
            b.held_len() <= (64 << 10) + 1000,
            "B flooded: {}",
            b.held_len()
        );
    }
    assert!(a.acked() <= (64 << 10) + 1000, "A went past B's window");
    assert!(!a.is_dead(), "a peer answering probes is alive");
    // B reads everything: the rest flows.
    let mut got = Vec::new();
    for _ in 0..100_000 {
        now += Duration::from_micros(100);
        while !b.held().is_empty() {
            let h = b.held().to_vec();
            got.extend_from_slice(&h);
            b.consume(h.len());
        }
        if got.len() == big.len() {
            break;
        }
        let mut to_b = Vec::new();
        while let Some(r) = a.poll_transmit(now, &mut hdr) {
            let mut d = hdr.to_vec();
            d.extend(prod.gather(r));
            to_b.push(d);
        }
        for d in &to_b {
            let p = Packet::new_checked(&d[..]).unwrap();
            if b.on_packet(now, &Repr::parse(&p).unwrap(), p.payload()) == Recv::Deliver {
                got.extend_from_slice(p.payload());
                b.hold(&[]);
            }
        }
        while let Some(_r) = b.poll_transmit(now, &mut hdr) {
            let p = Packet::new_checked(&hdr[..]).unwrap();
            a.on_packet(now, &Repr::parse(&p).unwrap(), &[]);
        }
        for ch in [&mut a, &mut b] {
            if ch.poll_timeout().is_some_and(|t| t <= now) {
                ch.handle_timeout(now);
            }
        }
        prod.ack_to(a.acked());
    }
    assert_eq!(got, big);
}

#[test]
fn a_silent_peer_is_dead_after_the_bound_while_waited_for_or_owed_acknowledgements() {
    let t0 = Instant::now();
    let mut c = cfg(1000, 64 << 10);
    c.peer_timeout = Duration::from_secs(2);
    let mut a = Channel::new(c, SESSION, c.window, t0);
    let mut hdr = [0u8; HDR_LEN];
    // Idle: no deadline at all, however long.
    assert_eq!(a.poll_timeout(), None);
    a.handle_timeout(t0 + Duration::from_secs(3600));
    assert!(!a.is_dead());
    // Data sent at t1 into a cut link, nobody waiting on it (the
    // operations it carried completed when copied): sent again, at most
    // max_rto apart, and the peer dead exactly at the bound all the same.
    let t1 = t0 + Duration::from_secs(3600);
    a.set_stream_end(5000);
    let mut sent = 0;
    while a.poll_transmit(t1, &mut hdr).is_some() {
        sent += 1;
    }
    assert!(sent > 0);
    let mut now = t1;
    let mut retx = 0;
    let mut last = t1;
    while !a.is_dead() {
        let t = a.poll_timeout().expect("unacknowledged data keeps a timer");
        assert!(t >= now);
        now = t;
        a.handle_timeout(now);
        while a.poll_transmit(now, &mut hdr).is_some() {
            retx += 1;
            assert!(
                now - last <= c.peer_timeout / 8,
                "retransmissions too far apart"
            );
            last = now;
        }
        assert!(now <= t1 + c.peer_timeout, "not dead at the bound");
    }
    assert_eq!(now, t1 + c.peer_timeout, "dead before the bound");
    assert!(retx >= 7, "{retx}");
    assert!(
        a.poll_transmit(now, &mut hdr).is_none(),
        "a dead channel sends"
    );
    // A peer that answers keeps it alive as long as it takes, even when
    // it acknowledges nothing (its window closed: it holds what it has).
    let mut a = Channel::new(c, SESSION, c.window, t0);
    let mut b = Channel::new(c, SESSION, 1000, t0);
    a.set_stream_end(200_000);
    let mut now = t0;
    let stream: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
    while now < t0 + Duration::from_secs(60) {
        loop {
            let mut moved = false;
            while let Some(r) = a.poll_transmit(now, &mut hdr) {
                moved = true;
                let payload = &stream[r.start as usize..r.end as usize];
                let mut d = hdr.to_vec();
                d.extend_from_slice(payload);
                let p = Packet::new_checked(&d[..]).unwrap();
                let repr = Repr::parse(&p).unwrap();
                if b.on_packet(now, &repr, payload) == Recv::Deliver {
                    // b's consumer takes nothing: all of it is held.
                    b.hold(payload);
                }
            }
            while let Some(_r) = b.poll_transmit(now, &mut hdr) {
                moved = true;
                let p = Packet::new_checked(&hdr[..]).unwrap();
                let repr = Repr::parse(&p).unwrap();
                a.on_packet(now, &repr, &[]);
            }
            if !moved {
                break;
            }
        }
        assert!(
            !a.is_dead(),
            "a peer answering probes declared dead at {:?}: {:?} {:?} held {}",
            now - t0,
            a.stats(),
            b.stats(),
            b.held_len()
        );
        let next = [a.poll_timeout(), b.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
            .expect("a timer");
        now = next.max(now);
        a.handle_timeout(now);
        b.handle_timeout(now);
    }
    assert!(a.busy(), "b took everything");
    assert!(b.held_len() > 0);
    // Waiting with nothing unacknowledged: probes, then dead at the bound.
    let mut w = Channel::new(c, SESSION, c.window, t0);
    w.set_waiting(t0, true);
    let mut now = t0;
    let mut probes = 0;
    while !w.is_dead() {
        now = w.poll_timeout().unwrap();
        w.handle_timeout(now);
        while w.poll_transmit(now, &mut hdr).is_some() {
            probes += 1;
        }
    }
    assert_eq!(now, t0 + c.peer_timeout);
    assert!(probes >= 2, "a waiting channel probes its peer: {probes}");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: 24,
        failure_persistence: None,
        ..Default::default()
    })]

    /// Any seed, any mix of the four faults up to 20 % each, any packet
    /// size and window: every record arrives exactly once, in order and
    /// intact, and a raw tail (a large message) is reassembled.
    #[test]
    fn any_fault_mix_delivers_exactly_once_in_order(
        seed in 0u64..u64::MAX,
        loss in 0u32..=200,
        dup in 0u32..=200,
        reorder in 0u32..=200,
        corrupt in 0u32..=200,
        mss in 64usize..=9000,
        window_kib in 16u32..=512,
        raw_len in 0usize..=300_000,
    ) {
        let raw: Vec<u8> = pattern(seed, raw_len).collect();
        let r = run(Opts {
            seed,
            faults: Faults { loss, dup, reorder, corrupt },
            records: 2000,
            max_len: 200,
            cfg: cfg(mss, (window_kib << 10).max(mss as u32 * 4)),
            pauses: 5,
            raw,
        });
        proptest::prop_assert_eq!(r.records, [2000, 2000]);
    }
}
