//! udp sessions under a simulated network: handshakes (crossing, lossy,
//! with and without auth keys), streams carried exactly once, refused keys,
//! a restarted peer told from the one before (epochs), the dead bound, a
//! link that comes back, and hostile datagrams (replays, spoofed RESETs,
//! unknown sessions, a HELLO flood) that change nothing they must not.

mod udp_common;

use ofi_base::auth::{AuthKey, Nonce};
use ofi_base::peer::Cause;
use ofi_proto::udp::{ChanConfig, Incoming, PeerId, Recv, SessionConfig, SessionEvent, Sessions};
use ofi_wire::udp::{kind, session_id, Handshake, Packet, Repr, HDR_LEN, NONCE_LEN};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use udp_common::*;

const TIMEOUT: Duration = Duration::from_secs(2);

struct Node {
    addr: Vec<u8>,
    s: Sessions,
    /// Per peer: what this node streams to it and what it reads from it.
    streams: HashMap<PeerId, (Producer, Consumer)>,
    events: Vec<(Duration, SessionEvent)>,
    records: u64,
    /// The owner refuses to let idle sessions end.
    keep: bool,
}

fn nonces(seed: u64) -> Box<dyn FnMut() -> Nonce + Send> {
    let mut rng = Rng::new(seed);
    Box::new(move || {
        let mut n = [0u8; NONCE_LEN];
        for c in n.chunks_mut(8) {
            c.copy_from_slice(&rng.next_u64().to_le_bytes());
        }
        n
    })
}

fn node(addr: &str, epoch: u64, key: Option<&[u8]>, records: u64) -> Node {
    node_with_nonces(addr, epoch, key, records, epoch)
}

/// As [`node`], sessions ending after `idle` without traffic.
fn idle_node(addr: &str, epoch: u64, records: u64, idle: Duration) -> Node {
    let mut n = node(addr, epoch, None, records);
    let mut cfg = n.s.config().clone();
    cfg.idle_timeout = idle;
    n.s = Sessions::new(cfg, nonces(epoch));
    n
}

/// As [`node`], with the handshake nonces drawn from `nonce_seed`.
fn node_with_nonces(
    addr: &str,
    epoch: u64,
    key: Option<&[u8]>,
    records: u64,
    nonce_seed: u64,
) -> Node {
    let cfg = SessionConfig {
        epoch,
        my_addr: addr.as_bytes().to_vec(),
        key: key.map(|k| AuthKey::new(k).unwrap().unwrap()),
        max_datagram: 1200,
        chan: ChanConfig {
            window: 128 << 10,
            peer_timeout: TIMEOUT,
            ..Default::default()
        },
        max_half_open: 16,
        idle_timeout: Duration::from_secs(3600),
        max_peers: 1024,
    };
    Node {
        addr: addr.as_bytes().to_vec(),
        s: Sessions::new(cfg, nonces(nonce_seed)),
        streams: HashMap::new(),
        events: Vec::new(),
        records,
        keep: false,
    }
}

struct World {
    net: Net,
    t0: Instant,
    nodes: Vec<Node>,
    rng: Rng,
}

impl World {
    fn new(seed: u64, faults: Faults, nodes: Vec<Node>) -> World {
        let net = Net::new(seed, faults);
        World {
            t0: net.now,
            net,
            nodes,
            rng: Rng::new(seed ^ 0x77),
        }
    }

    fn elapsed(&self) -> Duration {
        self.net.now - self.t0
    }

    /// Node `i` wants a session with node `j` and streams to it.
    fn connect(&mut self, i: usize, j: usize) {
        let to = self.nodes[j].addr.clone();
        let now = self.net.now;
        let n = &mut self.nodes[i];
        let p = n.s.peer(&to);
        let records = n.records;
        n.streams
            .entry(p)
            .or_insert_with(|| (Producer::new(records), Consumer::default()));
        n.s.connect(now, p);
    }

    /// One pass over every node; true if anything moved.
    fn step(&mut self) -> bool {
        let now = self.net.now;
        let mut moved = false;
        let mut hdr = [0u8; HDR_LEN];
        for n in self.nodes.iter_mut() {
            while let Some((to, bytes)) = n.s.poll_ctrl() {
                self.net.send(&n.addr, &to, &bytes);
                moved = true;
            }
            let ups: Vec<PeerId> = n.s.up_peers().collect();
            for p in ups {
                let records = n.records;
                let (prod, _) = n
                    .streams
                    .entry(p)
                    .or_insert_with(|| (Producer::new(records), Consumer::default()));
                prod.fill(&mut self.rng, 40, 64 << 10);
                let to = n.s.addr(p).unwrap().to_vec();
                let ch = n.s.channel(p).unwrap();
                ch.set_stream_end(prod.end());
                // Unacknowledged bytes stand for operations waiting on the peer.
                ch.set_waiting(now, prod.kept() > 0);
                for _ in 0..64 {
                    let Some(r) = ch.poll_transmit(now, &mut hdr) else {
                        break;
                    };
                    let mut d = hdr.to_vec();
                    d.extend(prod.gather(r));
                    self.net.send(&n.addr, &to, &d);
                    moved = true;
                }
                prod.ack_to(ch.acked());
            }
        }
        while let Some((from, to, bytes)) = self.net.deliver() {
            moved = true;
            let Some(n) = self.nodes.iter_mut().find(|n| n.addr == to) else {
                continue;
            };
            let inc = n.s.on_datagram(now, &from, &bytes);
            // Events first: a session that ended takes its streams along.
            while let Some(e) = n.s.poll_event() {
                match e {
                    SessionEvent::Down { peer, .. } | SessionEvent::Expired { peer } => {
                        n.streams.remove(&peer);
                    }
                    // Nothing of ours is tied to a session but its stream,
                    // which the table saw idle.
                    SessionEvent::CloseAsked { peer } => n.s.answer_close(now, peer, !n.keep),
                    _ => {}
                }
                n.events.push((now - self.t0, e));
            }
            if let Incoming::Data { peer, recv } = inc {
                let records = n.records;
                let (_, cons) = n
                    .streams
                    .entry(peer)
                    .or_insert_with(|| (Producer::new(records), Consumer::default()));
                if recv == Recv::Deliver {
                    cons.take(&bytes[HDR_LEN..]);
                    n.s.channel(peer).unwrap().hold(&[]);
                }
                let ch = n.s.channel(peer).unwrap();
                while !ch.held().is_empty() {
                    let k = ch.held().len();
                    cons.take(ch.held());
                    ch.consume(k);
                }
            }
        }
        let el = self.elapsed();
        for n in self.nodes.iter_mut() {
            if n.s.poll_timeout().is_some_and(|t| t <= now) {
                let keep = n.keep;
                n.s.handle_timeout_with(now, &mut |_| !keep);
                // Timers may make packets to send before time moves.
                moved = true;
            }
            while let Some(e) = n.s.poll_event() {
                if let SessionEvent::Down { peer, .. } | SessionEvent::Expired { peer } = e {
                    // A new session starts new streams.
                    n.streams.remove(&peer);
                }
                n.events.push((el, e));
            }
        }
        moved
    }

    /// Steps until `done` holds, advancing virtual time when nothing moves;
    /// panics past `limit` of virtual time.
    fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&World) -> bool) {
        let end = self.net.now + limit;
        for _ in 0..10_000_000 {
            if done(self) {
                return;
            }
            if self.step() {
                continue;
            }
            let next = self
                .nodes
                .iter()
                .filter_map(|n| n.s.poll_timeout())
                .chain(self.net.next_at())
                .min();
            match next {
                Some(t) if t > self.net.now => self.net.now = t,
                Some(_) => {}
                None => self.net.now += Duration::from_millis(1),
            }
            if self.net.now > end {
                for n in self.nodes.iter_mut() {
                    let got: Vec<(PeerId, u64, u64)> = n
                        .streams
                        .iter()
                        .map(|(p, (pr, c))| (*p, pr.records, c.records))
                        .collect();
                    eprintln!(
                        "{}: {:?} events {:?}",
                        String::from_utf8_lossy(&n.addr),
                        got,
                        n.events
                    );
                    for p in n.s.up_peers().collect::<Vec<_>>() {
                        eprintln!(
                            "  peer {p}: {:?}",
                            n.s.channel(p).map(|c| (
                                c.stats(),
                                c.acked(),
                                c.stream_end(),
                                c.held_len()
                            ))
                        );
                    }
                }
                panic!("not done within {limit:?} of virtual time");
            }
        }
        panic!("too many steps");
    }

    /// Runs for `d` of virtual time.
    fn run_for(&mut self, d: Duration) {
        let end = self.net.now + d;
        for _ in 0..10_000_000 {
            if self.step() {
                continue;
            }
            if self.net.now >= end {
                return;
            }
            let next = self
                .nodes
                .iter()
                .filter_map(|n| n.s.poll_timeout())
                .chain(self.net.next_at())
                .min()
                .unwrap_or(end)
                .min(end);
            self.net.now = next.max(self.net.now);
        }
        panic!("too many steps");
    }

    fn got(&self, i: usize, from: usize) -> u64 {
        let n = &self.nodes[i];
        n.s.find(&self.nodes[from].addr)
            .and_then(|p| n.streams.get(&p))
            .map_or(0, |(_, c)| c.records)
    }

    fn ups(&self, i: usize) -> usize {
        self.nodes[i]
            .events
            .iter()
            .filter(|(_, e)| matches!(e, SessionEvent::Up { .. }))
            .count()
    }

    /// Node `i`'s session ends: (when, cause, renewed, closed).
    fn downs(&self, i: usize) -> Vec<(Duration, Cause, bool, bool)> {
        self.nodes[i]
            .events
            .iter()
            .filter_map(|(t, e)| match e {
                SessionEvent::Down {
                    cause,
                    renewed,
                    closed,
                    ..
                } => Some((*t, *cause, *renewed, *closed)),
                _ => None,
            })
            .collect()
    }
}

#[test]
fn three_peers_with_a_key_stream_to_each_other_under_faults() {
    for (seed, f) in [(1, Faults::all(100)), (2, Faults::all(200))] {
        let key = Some(&b"job-key"[..]);
        let records = 20_000;
        let mut w = World::new(
            seed,
            f,
            vec![
                node("n0", 100, key, records),
                node("n1", 101, key, records),
                node("n2", 102, key, records),
            ],
        );
        // Everyone connects to everyone at once: handshakes cross.
        for i in 0..3 {
            for j in 0..3 {
                if i != j {
                    w.connect(i, j);
                }
            }
        }
        w.run_until(Duration::from_secs(600), |w| {
            (0..3).all(|i| (0..3).all(|j| i == j || w.got(i, j) == records))
        });
        for i in 0..3 {
            assert_eq!(w.ups(i), 2, "seed {seed}: node {i}: one session per peer");
            assert!(
                w.downs(i).is_empty(),
                "seed {seed}: node {i}: {:?}",
                w.downs(i)
            );
        }
        assert!(
            w.nodes[0].s.drops().channel > 0,
            "faults reached the channels"
        );
    }
}

#[test]
fn differing_keys_are_refused_and_nothing_comes_up() {
    for (ka, kb) in [
        (Some(&b"one"[..]), Some(&b"two"[..])),
        (Some(&b"one"[..]), None),
        (None, Some(&b"two"[..])),
    ] {
        let mut w = World::new(
            3,
            Faults::default(),
            vec![node("a", 1, ka, 10), node("b", 2, kb, 10)],
        );
        w.connect(0, 1);
        w.run_until(Duration::from_secs(1), |w| {
            w.nodes[0]
                .events
                .iter()
                .any(|(_, e)| matches!(e, SessionEvent::Refused { .. }))
        });
        w.run_for(Duration::from_secs(5));
        assert_eq!(
            w.ups(0) + w.ups(1),
            0,
            "keys {ka:?} {kb:?}: a session came up"
        );
        assert_eq!(w.got(1, 0), 0, "keys {ka:?} {kb:?}: bytes crossed");
        assert!(w.nodes[0].s.drops().auth + w.nodes[1].s.drops().auth > 0);
    }
}

#[test]
fn a_restarted_peer_is_a_new_peer() {
    // b restarts while a streams to it: a's next packets meet the new b,
    // which answers RESET; a's session ends (Reset, not renewed) and a new
    // one with the new epoch comes up when a connects again.
    let mut w = World::new(
        4,
        Faults::all(20),
        vec![node("a", 1, None, 1_000_000), node("b", 2, None, 0)],
    );
    w.connect(0, 1);
    w.run_until(Duration::from_secs(60), |w| w.got(1, 0) > 5000);
    w.nodes[1] = node("b", 3, None, 0);
    w.run_until(Duration::from_secs(10), |w| !w.downs(0).is_empty());
    let d = w.downs(0);
    assert_eq!(d.len(), 1, "one end of the old session: {d:?}");
    assert_eq!((d[0].1, d[0].2), (Cause::Reset, false));
    assert!(!d[0].3, "a restarted peer's RESET is no orderly close");
    w.connect(0, 1);
    w.run_until(Duration::from_secs(60), |w| w.got(1, 0) > 5000);
    let epochs: Vec<u64> = w.nodes[0]
        .events
        .iter()
        .filter_map(|(_, e)| match e {
            SessionEvent::Up { epoch, .. } => Some(*epoch),
            _ => None,
        })
        .collect();
    assert_eq!(epochs, vec![2, 3], "the restarted peer has a new epoch");
    // The restarted peer's stream started from its first record.
    assert!(w.got(1, 0) > 5000);

    // The other order: the restarted peer speaks first (its HELLO); the old
    // session is replaced, not continued.
    let mut w = World::new(
        5,
        Faults::default(),
        vec![node("a", 1, None, 0), node("b", 2, None, 1_000_000)],
    );
    w.connect(1, 0);
    w.run_until(Duration::from_secs(60), |w| w.got(0, 1) > 1000);
    w.nodes[1] = node("b", 9, None, 1_000_000);
    w.connect(1, 0);
    w.run_until(Duration::from_secs(60), |w| w.ups(0) == 2);
    let d = w.downs(0);
    assert_eq!(d.len(), 1);
    assert_eq!(
        (d[0].1, d[0].2),
        (Cause::Reset, false),
        "a new epoch is never a renewal"
    );

    // A restarted peer whose handshake repeats its old nonce (a broken
    // random source) is still a new peer: its epoch differs, so its HELLO
    // is not taken for the live session's, and the old stream is not
    // continued with the new one's bytes (the fuzz target udp_sessions
    // found that).
    let mut w = World::new(
        6,
        Faults::default(),
        vec![node("a", 1, None, 0), node("b", 2, None, 1_000_000)],
    );
    w.connect(1, 0);
    w.run_until(Duration::from_secs(60), |w| w.got(0, 1) > 1000);
    w.nodes[1] = node_with_nonces("b", 7, None, 1_000_000, 2);
    w.connect(1, 0);
    w.run_until(Duration::from_secs(60), |w| w.ups(0) == 2);
    let d = w.downs(0);
    assert_eq!(d.len(), 1, "the old session ends: {d:?}");
    assert_eq!((d[0].1, d[0].2), (Cause::Reset, false));
    w.run_until(Duration::from_secs(60), |w| w.got(0, 1) > 1000);
}

#[test]
fn a_peer_that_closes_says_so() {
    // b closes its endpoint while a streams to it: its shutdown datagrams
    // (a final ACK, a RESET flagged CLOSED) end a's session at once, as an
    // orderly close, not at the dead bound.
    let mut w = World::new(
        8,
        Faults::default(),
        vec![node("a", 1, None, 1_000_000), node("b", 2, None, 0)],
    );
    w.connect(0, 1);
    w.run_until(Duration::from_secs(60), |w| w.got(1, 0) > 5000);
    let t = w.elapsed();
    let b = w.nodes[1].addr.clone();
    for (to, bytes) in w.nodes[1].s.shutdown() {
        w.net.send(&b, &to, &bytes);
    }
    // Nothing answers at b's address any more.
    w.nodes[1] = node("gone", 3, None, 0);
    w.run_until(Duration::from_secs(10), |w| !w.downs(0).is_empty());
    let d = w.downs(0);
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!((d[0].1, d[0].2, d[0].3), (Cause::Reset, false, true));
    assert!(
        d[0].0 - t < Duration::from_secs(1),
        "ended by the RESET, not the dead bound: {d:?}"
    );
}

#[test]
fn a_silent_peer_is_dead_within_the_bound_and_a_link_that_comes_back_works() {
    let mut w = World::new(
        6,
        Faults::default(),
        vec![node("a", 1, None, 1_000_000), node("b", 2, None, 0)],
    );
    w.connect(0, 1);
    w.run_until(Duration::from_secs(60), |w| w.got(1, 0) > 2000);
    // The link goes down mid-transfer.
    w.net.cut = true;
    let cut_at = w.elapsed();
    w.run_until(Duration::from_secs(10), |w| !w.downs(0).is_empty());
    let d = w.downs(0);
    assert_eq!(d[0].1, Cause::TimedOut);
    assert!(
        d[0].0 <= cut_at + TIMEOUT,
        "declared {:?} after the cut, beyond the bound {TIMEOUT:?}",
        d[0].0 - cut_at
    );
    assert!(
        d[0].0 >= cut_at + TIMEOUT - Duration::from_millis(10),
        "declared dead too early"
    );
    // b waited for nothing: it is not declared dead.
    assert!(w.downs(1).is_empty());
    // The link comes back; a connects again; b's old session is replaced.
    w.net.cut = false;
    w.net.flush();
    w.connect(0, 1);
    w.run_until(Duration::from_secs(60), |w| {
        w.ups(1) == 2 && w.got(1, 0) > 2000
    });
    let d = w.downs(1);
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].1, Cause::Reset);
    // A connection attempt to nobody times out at the bound.
    let mut w = World::new(7, Faults::default(), vec![node("a", 1, None, 10)]);
    let ghost = w.nodes[0].s.peer(b"nobody");
    w.nodes[0]
        .streams
        .insert(ghost, (Producer::new(10), Consumer::default()));
    let now = w.net.now;
    w.nodes[0].s.connect(now, ghost);
    w.run_until(Duration::from_secs(10), |w| !w.downs(0).is_empty());
    let d = w.downs(0);
    assert_eq!((d[0].0, d[0].1), (TIMEOUT, Cause::TimedOut));
}

#[test]
fn a_port_unreachable_ends_a_handshake_refused_and_a_live_session_reset_at_once() {
    // A live session: the report ends it now (Reset), long before the bound.
    let mut w = World::new(
        9,
        Faults::default(),
        vec![node("a", 1, None, 1_000_000), node("b", 2, None, 0)],
    );
    w.connect(0, 1);
    w.run_until(Duration::from_secs(60), |w| w.got(1, 0) > 100);
    let at = w.elapsed();
    // Reports for addresses with no session change nothing.
    w.nodes[0].s.on_port_unreachable(b"nobody");
    w.run_for(Duration::from_millis(1));
    assert!(w.downs(0).is_empty());
    w.nodes[0].s.on_port_unreachable(b"b");
    w.run_for(Duration::from_millis(1));
    let d = w.downs(0);
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].1, Cause::Reset);
    assert!(
        d[0].0 - at < TIMEOUT / 10,
        "ended {:?} after the report",
        d[0].0 - at
    );
    // A handshake to nobody: refused at once, not timed out at the bound.
    let mut w = World::new(10, Faults::default(), vec![node("a", 1, None, 10)]);
    let ghost = w.nodes[0].s.peer(b"nobody");
    let now = w.net.now;
    w.nodes[0].s.connect(now, ghost);
    w.run_for(Duration::from_millis(5));
    w.nodes[0].s.on_port_unreachable(b"nobody");
    w.run_for(Duration::from_millis(5));
    let d = w.downs(0);
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].1, Cause::Refused);
    assert!(d[0].0 < TIMEOUT);
    // A second report finds nothing in flight.
    w.nodes[0].s.on_port_unreachable(b"nobody");
    w.run_for(Duration::from_secs(3));
    assert_eq!(w.downs(0).len(), 1);
}

#[test]
fn an_idle_session_renewed_by_the_same_peer_loses_nothing() {
    let mut w = World::new(
        8,
        Faults::default(),
        vec![node("a", 1, None, 100), node("b", 2, None, 0)],
    );
    w.connect(0, 1);
    w.run_until(Duration::from_secs(10), |w| w.got(1, 0) == 100);
    w.run_for(Duration::from_millis(100));
    // a forgets its session (as after declaring b dead) and makes a new one.
    let pb = w.nodes[0].s.find(b"b").unwrap();
    w.nodes[0].s.drop_session(pb);
    w.nodes[0].streams.remove(&pb);
    w.connect(0, 1);
    w.run_until(Duration::from_secs(10), |w| w.ups(1) == 2);
    let d = w.downs(1);
    assert_eq!(d.len(), 1);
    assert_eq!((d[0].1, d[0].2), (Cause::Reset, true), "an idle renewal");
}

/// A node's live session with the node at `peer_addr`: (its name, peer id).
fn live(n: &mut Node, peer_addr: &[u8]) -> (u64, PeerId) {
    let p = n.s.find(peer_addr).unwrap();
    (n.s.channel(p).unwrap().session(), p)
}

#[test]
fn hostile_datagrams_change_nothing_they_must_not() {
    let mut w = World::new(
        9,
        Faults::default(),
        vec![node("a", 1, Some(b"k"), 100), node("b", 2, Some(b"k"), 100)],
    );
    w.connect(0, 1);
    w.run_until(Duration::from_secs(10), |w| {
        w.got(1, 0) == 100 && w.got(0, 1) == 100
    });
    w.run_for(Duration::from_millis(50));
    let now = w.net.now;
    let (session, pb) = live(&mut w.nodes[0], b"b");
    let before = w.nodes[0].events.len();
    let a = &mut w.nodes[0].s;
    // A RESET naming another session, from b's address.
    let r = Repr {
        kind: kind::RESET,
        session: session ^ 1,
        ..Default::default()
    };
    assert!(matches!(
        a.on_datagram(now, b"b", &r.to_bytes()),
        Incoming::Dropped(_)
    ));
    // A RESET of the live session from another address.
    let r = Repr {
        kind: kind::RESET,
        session,
        ..Default::default()
    };
    assert!(matches!(
        a.on_datagram(now, b"evil", &r.to_bytes()),
        Incoming::Dropped(_)
    ));
    // DATA of an unknown session: dropped, answered with RESET.
    let d = Repr {
        kind: kind::DATA,
        session: 0x1234,
        seq: 0,
        ..Default::default()
    };
    let mut pkt = d.to_bytes().to_vec();
    pkt.push(1);
    assert!(matches!(
        a.on_datagram(now, b"b", &pkt),
        Incoming::Dropped(_)
    ));
    let (to, reset) = a.poll_ctrl().expect("a RESET answer");
    assert_eq!(to, b"b");
    assert_eq!(
        Repr::parse(&Packet::new_unchecked(&reset[..]))
            .unwrap()
            .kind,
        kind::RESET
    );
    // An acknowledgement of packets never sent, in the live session.
    let d = Repr {
        kind: kind::ACK,
        session,
        ack: 1 << 40,
        ..Default::default()
    };
    assert!(matches!(
        a.on_datagram(now, b"b", &d.to_bytes()),
        Incoming::Dropped(_)
    ));
    // A HELLO_ACK answering a nonce never sent; a CONFIRM out of nowhere.
    for k in [kind::HELLO_ACK, kind::CONFIRM] {
        let r = Repr {
            kind: k,
            flags: ofi_wire::udp::flag::AUTH,
            session: session_id(&[1; NONCE_LEN], &[2; NONCE_LEN]),
            ..Default::default()
        };
        let mut p = r.to_bytes().to_vec();
        Handshake {
            epoch: 2,
            max_datagram: 1200,
            window: 1 << 20,
            nonce: [1; NONCE_LEN],
            echo: [2; NONCE_LEN],
            mac: Some([0; 32]),
        }
        .emit(&mut p);
        assert!(
            matches!(a.on_datagram(now, b"b", &p), Incoming::Dropped(_)),
            "kind {k}"
        );
    }
    // Garbage and truncations.
    for junk in [
        &b""[..],
        b"\x75",
        b"\x75\x01\x04",
        &[0xff; 64],
        &pkt[..HDR_LEN],
    ] {
        assert!(matches!(
            a.on_datagram(now, b"b", junk),
            Incoming::Dropped(_)
        ));
    }
    // None of it touched the live session.
    assert!(a.is_up(pb));
    assert_eq!(a.channel(pb).unwrap().session(), session);
    while a.poll_ctrl().is_some() {}
    w.nodes[0].events.truncate(before);
    w.run_for(Duration::from_millis(50));
    assert_eq!(
        w.nodes[0].events.len(),
        before,
        "an event from hostile datagrams"
    );

    // A replayed HELLO of b (b's address, a new nonce): answered, but the
    // live session stays until an authenticated CONFIRM replaces it.
    let hello = Repr {
        kind: kind::HELLO,
        flags: ofi_wire::udp::flag::AUTH,
        ..Default::default()
    };
    let mut p = hello.to_bytes().to_vec();
    Handshake {
        epoch: 2,
        max_datagram: 1200,
        window: 1 << 20,
        nonce: [7; NONCE_LEN],
        echo: [0; NONCE_LEN],
        mac: None,
    }
    .emit(&mut p);
    let now = w.net.now;
    let a = &mut w.nodes[0].s;
    assert_eq!(a.on_datagram(now, b"b", &p), Incoming::Control);
    assert!(a.is_up(pb));
    assert_eq!(a.channel(pb).unwrap().session(), session);

    // A flood of HELLOs from many addresses holds at most max_half_open.
    for i in 0..1000u32 {
        let mut p = hello.to_bytes().to_vec();
        let mut n = [0u8; NONCE_LEN];
        n[..4].copy_from_slice(&i.to_le_bytes());
        Handshake {
            epoch: 5,
            max_datagram: 1200,
            window: 1 << 20,
            nonce: n,
            echo: [0; NONCE_LEN],
            mac: None,
        }
        .emit(&mut p);
        let addr = format!("flood-{i}");
        a.on_datagram(now, addr.as_bytes(), &p);
    }
    let known = (0..1000)
        .filter(|i| a.find(format!("flood-{i}").as_bytes()).is_some())
        .count();
    assert!(known <= 16, "{known} half-open peers held");
    assert!(a.is_up(pb), "the flood displaced a live session");
}

#[test]
fn a_strangers_hello_that_leads_nowhere_leaves_no_entry() {
    let mut n = node("a", 1, None, 0);
    let now = Instant::now();
    let strangers: Vec<Vec<u8>> = (0..10)
        .map(|i| format!("stranger-{i}").into_bytes())
        .collect();
    for (i, from) in strangers.iter().enumerate() {
        let mut p = Repr {
            kind: kind::HELLO,
            ..Default::default()
        }
        .to_bytes()
        .to_vec();
        Handshake {
            epoch: 7,
            max_datagram: 1200,
            window: 1 << 20,
            nonce: [i as u8 + 1; NONCE_LEN],
            echo: [0; NONCE_LEN],
            mac: None,
        }
        .emit(&mut p);
        assert!(matches!(n.s.on_datagram(now, from, &p), Incoming::Control));
        assert!(n.s.find(from).is_some(), "answered, waiting for a CONFIRM");
    }
    while n.s.poll_ctrl().is_some() {}
    // No CONFIRM comes: once the answers expire, nothing of the strangers
    // stays (forged sources used to leave an entry each, for good).
    n.s.handle_timeout(now + TIMEOUT + Duration::from_millis(1));
    for from in &strangers {
        assert!(
            n.s.find(from).is_none(),
            "{} stayed",
            String::from_utf8_lossy(from)
        );
    }
    assert_eq!(n.s.poll_timeout(), None, "timers for peers that are gone");
}

#[test]
fn an_idle_session_ends_by_agreement_and_a_forged_request_ends_nothing_in_use() {
    let idle = Duration::from_secs(5);
    let mut w = World::new(
        11,
        Faults::all(50),
        vec![
            idle_node("a", 1, 200, idle),
            idle_node("b", 2, 1_000_000, idle),
        ],
    );
    w.connect(0, 1);
    w.run_until(Duration::from_secs(30), |w| {
        w.got(1, 0) == 200 && w.got(0, 1) > 1000
    });
    let (session, pb) = live(&mut w.nodes[0], b"b");
    // b streams on: requests to end the session, forged or with a wrong
    // count, are refused and change nothing.
    let now = w.net.now;
    let pa = w.nodes[1].s.find(b"a").unwrap();
    let snd = w.nodes[1].s.channel(pa).unwrap().snd_nxt();
    for ack in [0, snd, snd + 1] {
        let ask = Repr {
            kind: kind::RESET,
            flags: ofi_wire::udp::flag::IDLE,
            session,
            ack,
            ..Default::default()
        };
        assert!(matches!(
            w.nodes[1].s.on_datagram(now, b"a", &ask.to_bytes()),
            Incoming::Control
        ));
        assert!(w.nodes[1].s.poll_event().is_none(), "asked the owner");
    }
    let got = w.got(0, 1);
    w.run_for(Duration::from_millis(100));
    assert!(w.got(0, 1) > got, "the stream stopped");
    assert!(w.nodes[1].s.is_up(pa));
    // b's stream ends (it sent what it had) but b's owner keeps the
    // session: a, idle, asks to end it and b refuses, again and again.
    w.nodes[1].keep = true;
    w.nodes[1].records = 0;
    for (p, _) in w.nodes[1].streams.values_mut() {
        p.total = p.records;
    }
    let total = w.nodes[1]
        .streams
        .values()
        .map(|(p, _)| p.records)
        .sum::<u64>();
    w.run_until(Duration::from_secs(60), |w| w.got(0, 1) >= total);
    w.run_for(idle * 3);
    let asked = |w: &World| {
        w.nodes[1]
            .events
            .iter()
            .filter(|(_, e)| matches!(e, SessionEvent::CloseAsked { .. }))
            .count()
    };
    assert!(asked(&w) >= 2, "a asked {} times", asked(&w));
    assert!(
        w.nodes[0].s.is_up(pb) && w.nodes[1].s.is_up(pa),
        "a session kept ended"
    );
    assert!(w.downs(0).is_empty() && w.downs(1).is_empty());
    // b lets go: the session ends on both sides, no death reported.
    w.nodes[1].keep = false;
    w.run_for(idle * 2);
    for i in 0..2 {
        assert_eq!(w.nodes[i].s.live(), 0, "node {i} still has a session");
        assert!(
            w.nodes[i]
                .events
                .iter()
                .any(|(_, e)| matches!(e, SessionEvent::Expired { .. })),
            "node {i}: {:?}",
            w.nodes[i].events
        );
    }
    assert!(w.downs(0).is_empty() && w.downs(1).is_empty());
    // b asked for nothing by address: it forgot a. a keeps b's entry.
    assert!(w.nodes[1].s.find(b"a").is_none());
    assert_eq!(w.nodes[0].s.find(b"b"), Some(pb));
    // A request for a session nobody knows is answered (the asker may end
    // it): a plain RESET.
    let now = w.net.now;
    let ask = Repr {
        kind: kind::RESET,
        flags: ofi_wire::udp::flag::IDLE,
        session: 0x77,
        ..Default::default()
    };
    assert!(matches!(
        w.nodes[1].s.on_datagram(now, b"x", &ask.to_bytes()),
        Incoming::Control
    ));
    let (to, bytes) = w.nodes[1].s.poll_ctrl().expect("an answer");
    assert_eq!(to, b"x");
    let r = Repr::parse(&Packet::new_checked(&bytes[..]).unwrap()).unwrap();
    assert_eq!((r.kind, r.flags, r.session), (kind::RESET, 0, 0x77));
    // a speaks again: a new session, the stream flows.
    w.nodes[0].records = 50;
    w.connect(0, 1);
    w.run_until(Duration::from_secs(30), |w| w.got(1, 0) == 50);
    assert!(w.downs(0).is_empty() && w.downs(1).is_empty());
}
