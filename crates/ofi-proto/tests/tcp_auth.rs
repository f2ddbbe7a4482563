//! The auth-key handshake of the tcp core (HELLO with a nonce, CHALLENGE,
//! PROOF; see `ofi_wire::tcp`), under the simulated network with random
//! splits, and against a peer that writes forged frames: equal keys
//! connect and carry messages; different keys, a key on one side only, a
//! wrong proof, a replayed proof and an acceptor that never proves the key
//! all end the connection before a byte of traffic, with FI_EKEYREJECTED
//! for the connector's operations.

mod common;

use common::*;
use ofi_base::error::errno;
use ofi_proto::tcp::{reject, Config, Event, RecvReq, RxConfig, SendReq, State};
use ofi_wire::tcp::{
    challenge_payload, op, Header, Repr, CHALLENGE_LEN, HDR_LEN, NONCE_LEN, PROOF_LEN,
};

const SEEDS: u64 = 16;

/// Two sides "A" (client) and "B" (server) and one connection between them
/// with these keys; the client queues one 100-byte send (context 7) and
/// the server posts a receive (context 9); then the world runs.
fn attempt(seed: u64, ckey: Option<&[u8]>, skey: Option<&[u8]>) -> World {
    let mut w = World::new(seed, Config::default());
    w.add_side(b"A", RxConfig::default());
    w.add_side(b"B", RxConfig::default());
    let (_, cid, _) = w.connect_auth(0, 1, b"pd", ckey, skey);
    let src = w.sides[0].mem.alloc_pattern(100, 1);
    w.sides[0].send(cid, SendReq::msg(&[src], 7)).expect("send");
    let dst = w.sides[1].mem.alloc(100);
    w.sides[1].post(RecvReq::msg(&[dst], 9)).expect("recv");
    w.run();
    w
}

fn auth_failed(s: &Side) -> bool {
    s.has_conn_event(|e| matches!(e, Event::AuthFailed { .. }))
}

fn conn_request(s: &Side) -> bool {
    s.has_conn_event(|e| matches!(e, Event::ConnRequest { .. }))
}

#[test]
fn equal_keys_connect_and_carry_messages() {
    for seed in 0..SEEDS {
        let w = attempt(seed, Some(b"job-7"), Some(b"job-7"));
        assert!(!auth_failed(&w.sides[0]) && !auth_failed(&w.sides[1]));
        assert!(w.sides[1].has_conn_event(
            |e| matches!(e, Event::ConnRequest { peer_addr, private_data, .. } if peer_addr == b"A" && private_data == b"pd")
        ), "the server's request names the proven address and carries the CM data");
        assert_eq!(w.sides[0].sends_done(), [7], "seed {seed}");
        assert_eq!(w.sides[1].done(9).len, 100);
        assert_eq!(w.sides[0].conns[0].state(), State::Connected);
    }
}

/// Checks a refused attempt: no request reported to the server, the send
/// failed with FI_EKEYREJECTED, nothing received, both ends closed.
fn refused(w: &World, what: &str) {
    assert!(
        auth_failed(&w.sides[0]),
        "{what}: the client reports no auth failure"
    );
    assert!(
        !conn_request(&w.sides[1]),
        "{what}: the server reported a request"
    );
    assert_eq!(
        w.sides[0].send_errors(),
        [(7, errno::FI_EKEYREJECTED)],
        "{what}: the client's send"
    );
    assert!(
        w.sides[1].try_done(9).is_none(),
        "{what}: a message arrived"
    );
    assert!(w.sides[0].conns[0].is_closed(), "{what}: client still open");
}

#[test]
fn different_keys_or_a_key_on_one_side_are_refused() {
    for seed in 0..SEEDS {
        // The acceptor proves first, so the connector detects the
        // mismatch, never sends a proof of its own and closes (the
        // acceptor then reads the end of the stream).
        let w = attempt(seed, Some(b"job-7"), Some(b"job-8"));
        refused(&w, "different keys");
        assert_eq!(w.sides[1].conns[0].state(), State::Authenticating);
        let w = attempt(seed, Some(b"job-7"), None);
        refused(&w, "client key only");
        assert!(auth_failed(&w.sides[1]));
        assert!(
            w.sides[1].conns[0].is_closed(),
            "the acceptor wrote REJECT and closed"
        );
        assert!(w.sides[0].has_conn_event(
            |e| matches!(e, Event::Rejected { reason, .. } if *reason == reject::AUTH)
        ));
        let w = attempt(seed, None, Some(b"job-8"));
        refused(&w, "server key only");
        assert!(auth_failed(&w.sides[1]));
        assert!(
            w.sides[1].conns[0].is_closed(),
            "the acceptor wrote REJECT and closed"
        );
    }
}

// ------------------------------------------------------------- forged peers

fn frame(r: Repr, payload: &[u8]) -> Vec<u8> {
    let mut b = r.to_bytes().to_vec();
    b.extend_from_slice(payload);
    b
}

fn hello(addr: &[u8], nonce: Option<[u8; NONCE_LEN]>) -> Vec<u8> {
    let mut p = addr.to_vec();
    if let Some(n) = nonce {
        p.extend_from_slice(&n);
    }
    frame(
        Repr {
            op: op::HELLO,
            len: p.len() as u64,
            data: addr.len() as u64,
            id: if nonce.is_some() { NONCE_LEN as u64 } else { 0 },
            ..Default::default()
        },
        &p,
    )
}

/// The frames in `bytes`: (header, payload).
fn frames(mut bytes: &[u8]) -> Vec<(Repr, Vec<u8>)> {
    let mut out = Vec::new();
    while bytes.len() >= HDR_LEN {
        let r = Repr::parse(&Header::new_unchecked(bytes), 1 << 20).expect("a frame");
        let end = HDR_LEN + r.len as usize;
        out.push((r, bytes[HDR_LEN..end].to_vec()));
        bytes = &bytes[end..];
    }
    out
}

/// A server side with `key` and one incoming connection fed by hand:
/// (world, link).
fn server_with(key: &[u8]) -> (World, usize) {
    let mut w = World::new(3, Config::default());
    w.add_side(b"X", RxConfig::default());
    w.add_side(b"B", RxConfig::default());
    let (l, _, _) = w.connect_auth(0, 1, b"", None, Some(key));
    // The client end is driven by hand: drop what its own conn queued.
    w.links[l].pipes[1].clear();
    (w, l)
}

/// Feeds `bytes` to the server end and collects what it writes back.
fn exchange(w: &mut World, l: usize, bytes: &[u8]) -> Vec<(Repr, Vec<u8>)> {
    w.links[l].pipes[1].extend(bytes.iter().copied());
    for _ in 0..64 {
        w.rx(l, 1, usize::MAX);
        w.tx(l, 1, usize::MAX);
    }
    let out: Vec<u8> = w.links[l].pipes[0].drain(..).collect();
    frames(&out)
}

#[test]
fn a_forged_hello_without_the_key_is_refused() {
    let (mut w, l) = server_with(b"secret");
    // Claims another endpoint's address ("A"), with a nonce, then answers
    // the challenge with a made-up proof.
    let back = exchange(&mut w, l, &hello(b"A", Some([5; NONCE_LEN])));
    assert_eq!(
        back.len(),
        1,
        "the server answers a HELLO with CHALLENGE only"
    );
    assert_eq!(back[0].0.op, op::CHALLENGE);
    assert_eq!(back[0].1.len(), CHALLENGE_LEN);
    assert!(!conn_request(&w.sides[1]), "a request before the proof");
    let forged = frame(
        Repr {
            op: op::PROOF,
            len: PROOF_LEN as u64,
            ..Default::default()
        },
        &[0x42; PROOF_LEN],
    );
    let back = exchange(&mut w, l, &forged);
    assert_eq!(back.len(), 1);
    assert_eq!((back[0].0.op, back[0].0.data), (op::REJECT, reject::AUTH));
    assert!(auth_failed(&w.sides[1]));
    assert!(!conn_request(&w.sides[1]));
    assert!(w.sides[1].conns[0].is_closed());

    // Without a nonce at all: refused at once.
    let (mut w, l) = server_with(b"secret");
    let back = exchange(&mut w, l, &hello(b"A", None));
    assert_eq!((back[0].0.op, back[0].0.data), (op::REJECT, reject::AUTH));
    assert!(!conn_request(&w.sides[1]));

    // Traffic instead of the proof: a protocol error, no request.
    let (mut w, l) = server_with(b"secret");
    exchange(&mut w, l, &hello(b"A", Some([5; NONCE_LEN])));
    let msg = frame(
        Repr {
            op: op::MSG,
            len: 3,
            id: 3,
            ..Default::default()
        },
        b"hey",
    );
    exchange(&mut w, l, &msg);
    assert!(!conn_request(&w.sides[1]));
    assert!(w.sides[1].conns[0].is_closed());
    assert!(w.sides[1].rx_events.is_empty(), "a message was delivered");
}

#[test]
fn a_replayed_proof_is_refused() {
    // Record a legitimate exchange's HELLO and PROOF (client key = server
    // key), then replay them to a server with the same key: its nonce is
    // new, so the recorded proof does not check.
    let key = b"secret".as_slice();
    let mut w = World::new(9, Config::default());
    w.add_side(b"A", RxConfig::default());
    w.add_side(b"B", RxConfig::default());
    let (l, _, _) = w.connect_auth(0, 1, b"", Some(key), Some(key));
    let mut recorded = Vec::new();
    for _ in 0..64 {
        let before = w.links[l].pipes[1].len();
        w.tx(l, 0, usize::MAX);
        recorded.extend(w.links[l].pipes[1].iter().skip(before).copied());
        w.rx(l, 1, usize::MAX);
        w.tx(l, 1, usize::MAX);
        w.rx(l, 0, usize::MAX);
    }
    let sent = frames(&recorded);
    assert_eq!(
        sent.iter().map(|(r, _)| r.op).collect::<Vec<_>>(),
        [op::HELLO, op::PROOF],
        "the client's handshake frames"
    );
    assert!(
        conn_request(&w.sides[1]),
        "the legitimate exchange succeeded"
    );
    let (mut w2, l2) = server_with(key);
    let mut replay = Vec::new();
    for (r, p) in &sent {
        replay.extend(frame(*r, p));
    }
    let back = exchange(&mut w2, l2, &replay);
    assert!(back
        .iter()
        .any(|(r, _)| r.op == op::REJECT && r.data == reject::AUTH));
    assert!(!conn_request(&w2.sides[1]), "a replayed proof was accepted");
}

#[test]
fn a_connector_refuses_an_acceptor_that_does_not_prove_the_key() {
    for (what, answer) in [
        ("wrong proof", 0u8),
        ("ACCEPT without CHALLENGE", 1),
        ("CHALLENGE to a connector without a key", 2),
    ] {
        let mut w = World::new(4, Config::default());
        w.add_side(b"A", RxConfig::default());
        w.add_side(b"Z", RxConfig::default());
        let ckey: Option<&[u8]> = if answer == 2 { None } else { Some(b"secret") };
        let (l, cid, _) = w.connect_auth(0, 1, b"", ckey, None);
        let src = w.sides[0].mem.alloc_pattern(10, 1);
        w.sides[0].send(cid, SendReq::msg(&[src], 7)).expect("send");
        w.tx(l, 0, usize::MAX);
        let hello: Vec<u8> = w.links[l].pipes[1].drain(..).collect();
        let h = frames(&hello);
        assert_eq!(h[0].0.op, op::HELLO);
        let reply = match answer {
            1 => frame(
                Repr {
                    op: op::ACCEPT,
                    ..Default::default()
                },
                &[],
            ),
            _ => frame(
                Repr {
                    op: op::CHALLENGE,
                    len: CHALLENGE_LEN as u64,
                    ..Default::default()
                },
                &challenge_payload(&[1; NONCE_LEN], &[2; PROOF_LEN]),
            ),
        };
        w.links[l].pipes[0].extend(reply);
        for _ in 0..16 {
            w.rx(l, 0, usize::MAX);
            w.tx(l, 0, usize::MAX);
        }
        assert!(auth_failed(&w.sides[0]), "{what}: no auth failure");
        assert_eq!(
            w.sides[0].send_errors(),
            [(7, errno::FI_EKEYREJECTED)],
            "{what}"
        );
        assert!(w.sides[0].conns[0].is_closed(), "{what}");
        let out: Vec<u8> = w.links[l].pipes[1].drain(..).collect();
        assert!(
            frames(&out).iter().all(|(r, _)| r.op != op::PROOF),
            "{what}: the connector proved its key to an unproven acceptor"
        );
    }
}

#[test]
fn the_proofs_bind_the_claimed_address() {
    // A man in the middle that rewrites the claimed address of a HELLO
    // (keeping the nonce) cannot complete: the acceptor's proof covers the
    // rewritten address, which the connector does not claim.
    let key = b"secret".as_slice();
    let mut w = World::new(5, Config::default());
    w.add_side(b"A", RxConfig::default());
    w.add_side(b"B", RxConfig::default());
    let (l, cid, _) = w.connect_auth(0, 1, b"", Some(key), Some(key));
    let src = w.sides[0].mem.alloc_pattern(10, 1);
    w.sides[0].send(cid, SendReq::msg(&[src], 7)).expect("send");
    w.tx(l, 0, usize::MAX);
    let bytes: Vec<u8> = w.links[l].pipes[1].drain(..).collect();
    let (r, p) = frames(&bytes).remove(0);
    let mut nonce = [0u8; NONCE_LEN];
    nonce.copy_from_slice(&p[r.data as usize..r.data as usize + NONCE_LEN]);
    w.links[l].pipes[1].extend(hello(b"C", Some(nonce)));
    w.run();
    assert!(auth_failed(&w.sides[0]));
    assert_eq!(w.sides[0].send_errors(), [(7, errno::FI_EKEYREJECTED)]);
    assert!(
        !conn_request(&w.sides[1]),
        "the rewritten address was accepted"
    );
}
