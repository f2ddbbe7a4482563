//! Without libFuzzer: replays `fuzz/seeds/<target>/*` and any saved
//! `fuzz/artifacts/<target>/*` (crash regressions) through the target
//! functions, and checks that the tcp_conn_stream harness really reaches the
//! states it is meant to fuzz (HELLO answered, eager and rendezvous payloads
//! landing in posted receives, CTS answered, protocol errors).
//!
//!   cd fuzz && cargo test
//!   cd fuzz && cargo test -- --ignored write_seeds   # regenerates fuzz/seeds

use ofi_fuzz::{
    auth_stream, capi_args, coll_group, conn_stream, hybrid_wire, sessions_run, shm_entry,
    shm_handler, storage_capsule, storage_cores, storage_nbd, tcp_conn_stream, tcp_header,
    udp_packet, udp_sessions,
};
use ofi_wire::{shm, tcp, udp};
use std::path::Path;

type Target = fn(&[u8]);
const TARGETS: [(&str, Target); 12] = [
    ("coll_group", coll_group),
    ("hybrid_wire", hybrid_wire),
    ("storage_capsule", storage_capsule),
    ("storage_cores", storage_cores),
    ("storage_nbd", storage_nbd),
    ("udp_packet", udp_packet),
    ("udp_sessions", udp_sessions),
    ("shm_entry", shm_entry),
    ("shm_handler", shm_handler),
    ("tcp_header", tcp_header),
    ("tcp_conn_stream", tcp_conn_stream),
    ("capi_args", capi_args),
];

fn frame(op: u8, flags: u8, tag: u64, data: u64, id: u64, payload: &[u8]) -> Vec<u8> {
    let r = tcp::Repr {
        op,
        flags,
        len: payload.len() as u64,
        tag,
        data,
        id,
    };
    let mut v = r.to_bytes().to_vec();
    v.extend_from_slice(payload);
    v
}

fn hello() -> Vec<u8> {
    frame(tcp::op::HELLO, 0, 0, 8, 0, b"fuzzer:1pd!")
}

fn msg(tag: Option<u64>, payload: &[u8]) -> Vec<u8> {
    let flags = if tag.is_some() { tcp::flag::TAGGED } else { 0 };
    frame(
        tcp::op::MSG,
        flags,
        tag.unwrap_or(0),
        0,
        payload.len() as u64,
        payload,
    )
}

fn rts(tag: u64, id: u64, size: u64) -> Vec<u8> {
    frame(
        tcp::op::RTS,
        tcp::flag::TAGGED,
        tag,
        0,
        id,
        &tcp::rts_payload(size),
    )
}

fn input(ctl: u8, seed: u8, parts: &[Vec<u8>]) -> Vec<u8> {
    let mut v = vec![ctl, seed];
    for p in parts {
        v.extend_from_slice(p);
    }
    v
}

/// ctl bits: see `ofi_fuzz::tcp_conn_stream`.
const RAW_END_NOTHING: u8 = 0x60;

/// Hand-made inputs worth starting from, per target.
fn seeds() -> Vec<(&'static str, &'static str, Vec<u8>)> {
    let mut out = Vec::new();
    // shm: an inline entry and an RTS with two iovs.
    let mut e = vec![0u8; shm::HDR_LEN + 32];
    let r = shm::Repr {
        op: shm::op::INLINE,
        flags: shm::flag::TAGGED,
        len: 8,
        total: 8,
        tag: 7,
        ..Default::default()
    };
    r.emit(&mut shm::Entry::new_unchecked(&mut e[..]));
    out.push(("shm_entry", "inline", e.clone()));
    let r = shm::Repr {
        op: shm::op::RTS,
        iov_cnt: 2,
        total: 1 << 20,
        ..Default::default()
    };
    r.emit(&mut shm::Entry::new_unchecked(&mut e[..]));
    e[shm::HDR_LEN..shm::HDR_LEN + 8].copy_from_slice(&0x7f00_0000_1000u64.to_le_bytes());
    e[shm::HDR_LEN + 8..shm::HDR_LEN + 16].copy_from_slice(&4096u64.to_le_bytes());
    out.push(("shm_entry", "rts", e.clone()));
    // shm handler: limits, then length-prefixed entries: an inline message,
    // the RTS, an ACK of the first pending send, a final answer of the first
    // pending one-sided operation, the same ACK again (completes nothing).
    let entry = |r: shm::Repr| {
        let mut b = vec![0u8; shm::HDR_LEN + 16];
        r.emit(&mut shm::Entry::new_unchecked(&mut b[..]));
        b
    };
    let ack = entry(shm::Repr {
        op: shm::op::ACK,
        cookie: 1 << 32,
        ..Default::default()
    });
    let answer = entry(shm::Repr {
        op: shm::op::RMA_RESP,
        flags: shm::flag::LAST,
        cookie: (1u64 << 63) | (1 << 32),
        ..Default::default()
    });
    let mut h = vec![0x13u8];
    for x in [&out[0].2, &e, &ack, &answer, &ack] {
        h.push(x.len() as u8);
        h.extend_from_slice(x);
    }
    out.push(("shm_handler", "sequence", h));
    // tcp headers: one of each kind.
    out.push(("tcp_header", "msg", msg(Some(0xdead_beef), b"pingpong")));
    out.push(("tcp_header", "rts", rts(7, 3, 1 << 20)));
    out.push(("tcp_header", "hello", hello()));
    out.push(("tcp_header", "cts", frame(tcp::op::CTS, 0, 0, 4096, 3, b"")));
    // connection streams.
    out.push((
        "tcp_conn_stream",
        "eager",
        input(
            0,
            3,
            &[hello(), msg(None, b"pingpong"), msg(Some(1), b"tagged!")],
        ),
    ));
    out.push((
        "tcp_conn_stream",
        "rndv",
        input(
            RAW_END_NOTHING,
            1,
            &[
                hello(),
                rts(1, 3, 1000),
                frame(tcp::op::DATA, 0, 0, 0, 3, &[0x5a; 64]),
            ],
        ),
    ));
    out.push((
        "tcp_conn_stream",
        "cts",
        input(
            0x10 | RAW_END_NOTHING,
            9,
            &[hello(), frame(tcp::op::CTS, 0, 0, 3117, 1, b"")],
        ),
    ));
    out.push((
        "tcp_conn_stream",
        "unexpected",
        input(
            0x08,
            0,
            &[
                hello(),
                msg(Some(9), &[1; 90]),
                msg(Some(9), &[2; 90]),
                rts(2, 4, 5000),
            ],
        ),
    ));
    out.push((
        "tcp_conn_stream",
        "shutdown",
        input(
            0x40,
            0,
            &[hello(), frame(tcp::op::SHUTDOWN, 0, 0, 0, 0, b"")],
        ),
    ));
    // The handshake with an auth key (auth_stream reads the same input):
    // a valid acceptor exchange then a message, a connector with the
    // wrong key, garbage after a HELLO.
    out.push((
        "tcp_conn_stream",
        "auth_acceptor",
        input(0x03, 4, &[msg(None, b"after-auth")]),
    ));
    out.push(("tcp_conn_stream", "auth_wrong_key", input(0x06, 4, &[])));
    out.push((
        "tcp_conn_stream",
        "auth_garbage",
        input(0x01, 4, &[frame(tcp::op::PROOF, 0, 0, 0, 0, &[7; 32])]),
    ));
    // Structured mode (ctl bit 7): HELLO prepended, then descriptors
    // [kind, flags, len lo, len hi, tag, a lo, a hi, b, payload...].
    out.push((
        "tcp_conn_stream",
        "structured",
        vec![
            0x81, 5, 4, 1, 8, 0, 1, 0, 0, 0, b'a', b'b', b'c', b'd', b'e', b'f', b'g', b'h',
        ],
    ));
    // udp: a DATA packet, a HELLO with its handshake, a DGRAM message.
    let data = udp::Repr {
        kind: udp::kind::DATA,
        window: 4096,
        session: 7,
        seq: 3,
        ack: 1,
        sack: 2,
        ..Default::default()
    };
    let mut d = data.to_bytes().to_vec();
    d.extend_from_slice(b"payload");
    out.push(("udp_packet", "data", d));
    let hello = udp::Repr {
        kind: udp::kind::HELLO,
        ..Default::default()
    };
    let mut h = hello.to_bytes().to_vec();
    udp::Handshake {
        epoch: 5,
        max_datagram: 1500,
        window: 1 << 20,
        nonce: [9; udp::NONCE_LEN],
        echo: [0; udp::NONCE_LEN],
        mac: None,
    }
    .emit(&mut h);
    out.push(("udp_packet", "hello", h));
    let mut g = udp::DgramRepr {
        flags: udp::dflag::TAGGED,
        tag: 3,
        data: 0,
        len: 5,
    }
    .to_bytes()
    .to_vec();
    g.extend_from_slice(b"hello");
    out.push(("udp_packet", "dgram", g));
    out.push(("udp_sessions", "exchange", udp_exchange(0, false)));
    out.push(("udp_sessions", "exchange_keyed", udp_exchange(1, false)));
    out.push(("udp_sessions", "restart", udp_exchange(0, true)));
    // hybrid: a rendezvous header, and an address with a string and a
    // base64url part.
    let h = ofi_prov_hybrid::wire::Header {
        rts: true,
        tagged: true,
        has_data: true,
        tag: 0x1122,
        data: 7,
        len: 1 << 20,
        cookie: 3,
    };
    let mut hb = [0u8; ofi_prov_hybrid::wire::LEN];
    h.emit(&mut hb);
    out.push(("hybrid_wire", "header", [&[0u8][..], &hb].concat()));
    let a = ofi_prov_hybrid::addr::HybridAddr {
        node: 0x1234_5678,
        shm: b"fi_shm://42.0\0".to_vec(),
        net: vec![2, 0, 0x1f, 0x90, 127, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0],
    };
    out.push((
        "hybrid_wire",
        "addr",
        [&[1u8][..], &a.encode().unwrap()].concat(),
    ));
    // Collectives (see `ofi_fuzz::coll_group`): a member of rank 1 of 3
    // starts a barrier and an allreduce, then takes structured frames
    // (round 0 from rank 0; an allreduce frame), a raw golden frame, and
    // a loss.
    let raw = ofi_wire::coll::Repr {
        kind: ofi_wire::coll::kind::BARRIER,
        from: 2,
        group: 0x5eed,
        seq: 0,
        step: 1,
        total: 0,
        offset: 0,
    }
    .frame(&[]);
    let mut c = vec![2, 1, 0x3f, 0, 0, 0, 0, 0, 0, 2, 0, 2, 0];
    c.extend([2, 0, 0, 0, 0, 0, 0]);
    c.extend([3, 3, 0, 1, 0, 8, 0, 8, 1, 1, 1, 1, 1, 1, 1, 1]);
    c.push(1);
    c.push(raw.len() as u8);
    c.extend(&raw);
    c.extend([4, 2]);
    out.push(("coll_group", "barrier_allreduce", c));
    // C ABI scripts (see `ofi_fuzz::capi_args`): op byte, then arguments.
    let mut junk = vec![4, 0, 1, 0, 1, 200];
    junk.extend([0xA5; 200]);
    out.push(("capi_args", "av_junk", junk));
    let names = b"hello\0fi_shm://1.0\012345\0";
    let mut strs = vec![4, 0, 3, 1, 1, names.len() as u8];
    strs.extend_from_slice(names);
    out.push(("capi_args", "av_strings", strs));
    let mut sa = vec![4, 1, 2, 0, 1, 32];
    for _ in 0..2 {
        sa.extend([2, 0, 0x1f, 0x90, 127, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0]);
    }
    out.push(("capi_args", "av_tcp", sa));
    let mut calls = vec![0, 1];
    calls.extend([0x3f; 64]);
    calls.extend([2, 0, 0, 0, 0]);
    calls.extend([3, 0, 0x7f, 0xff, 0xff, 0xff]);
    calls.extend([7, 0, 1, b'1', 4, b'4', b'2', b'4', b'2']);
    calls.extend([8, 0, 1, 0, 2, 2]);
    out.push(("capi_args", "calls", calls));
    out
}

fn replay_dir(dir: &Path, f: Target) -> usize {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut n = 0;
    for e in rd.flatten() {
        if e.path().is_file() {
            let data = std::fs::read(e.path()).unwrap();
            eprintln!("replaying {}", e.path().display());
            f(&data);
            n += 1;
        }
    }
    n
}

#[test]
fn replay_seeds_and_artifacts() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (name, f) in TARGETS {
        let seeds = replay_dir(&root.join("seeds").join(name), f);
        assert!(seeds > 0, "no seeds for {name}");
        replay_dir(&root.join("artifacts").join(name), f);
    }
    for (name, _, data) in seeds() {
        let f = TARGETS.iter().find(|t| t.0 == name).unwrap().1;
        f(&data);
    }
}

#[test]
fn harness_lands_eager_messages_in_place() {
    let s = input(
        0,
        3,
        &[hello(), msg(None, b"pingpong"), msg(Some(1), b"tagged!")],
    );
    let r = conn_stream(&s);
    assert_eq!(r.conn_requests, 1, "{r:?}");
    assert_eq!(r.protocol_error, 0, "{r:?}");
    assert_eq!(r.unread, 0, "{r:?}");
    assert_eq!(r.payload, 8 + 7, "{r:?}");
    assert!(r.recv_complete >= 2, "{r:?}");
    assert!(r.written >= tcp::HDR_LEN, "ACCEPT not written: {r:?}");
}

#[test]
fn harness_reaches_rendezvous_receive() {
    // Tag 1 matches the 64-byte tagged receive: CTS asks for 64 bytes.
    let s = input(
        RAW_END_NOTHING,
        1,
        &[
            hello(),
            rts(1, 3, 1000),
            frame(tcp::op::DATA, 0, 0, 0, 3, &[0x5a; 64]),
        ],
    );
    let r = conn_stream(&s);
    assert_eq!(r.protocol_error, 0, "{r:?}");
    assert_eq!(r.payload, 64, "{r:?}");
    assert!(r.written >= 2 * tcp::HDR_LEN, "ACCEPT + CTS: {r:?}");
    assert_eq!(r.unread, 0, "{r:?}");
}

#[test]
fn harness_answers_cts_for_its_sends() {
    // Sends queued: 40 B eager (context 1), then 3077 + 40 B rendezvous
    // (context 2, id 1); the peer's CTS asks for all of it.
    let s = input(
        0x10 | RAW_END_NOTHING,
        9,
        &[hello(), frame(tcp::op::CTS, 0, 0, 3117, 1, b"")],
    );
    let r = conn_stream(&s);
    assert_eq!(r.protocol_error, 0, "{r:?}");
    assert_eq!(r.send_complete, 2, "{r:?}");
    assert!(r.written >= 3117 + 40, "{r:?}");
}

#[test]
fn harness_sees_protocol_errors() {
    let s = input(0, 0, &[hello(), vec![0xff; 80]]);
    let r = conn_stream(&s);
    assert_eq!(r.protocol_error, 1, "{r:?}");
    assert!(r.unread > 0, "{r:?}");
}

/// A `udp_sessions` input: `a` connects and streams to `b` over a clean
/// network, both transmit and deliver in turns, `b` reads; with `restart`,
/// `b` restarts halfway and the exchange goes on.
fn udp_exchange(ctl: u8, restart: bool) -> Vec<u8> {
    let mut v = vec![ctl];
    for round in 0..40 {
        if restart && round == 20 {
            v.push(0x18);
        }
        // a asks for a session (a no-op while one is up) and produces.
        v.extend_from_slice(&[0x00, 8, 0x06]);
        for _ in 0..6 {
            v.extend_from_slice(&[0x12, 0x03, 0x02, 0x03]);
        }
        v.extend_from_slice(&[0x05, 0x40, 0x00, 0x17, 0xff, 0x17, 0xff]);
    }
    v
}

#[test]
fn udp_harness_brings_sessions_up_and_moves_checked_bytes() {
    for keyed in [0u8, 1] {
        let r = sessions_run(&udp_exchange(keyed, false));
        assert_eq!(r.ups, 2, "keyed {keyed}: {r:?}");
        assert!(r.got > 256, "keyed {keyed}: {r:?}");
    }
    let r = sessions_run(&udp_exchange(0, true));
    assert!(
        r.ups >= 4 && r.downs >= 1,
        "a restart ends a session: {r:?}"
    );
    assert!(r.got > 256, "{r:?}");
}

#[test]
fn structured_mode_builds_frames() {
    let r = conn_stream(&[
        0x81 | RAW_END_NOTHING,
        5,
        4,
        1,
        8,
        0,
        1,
        0,
        0,
        0,
        1,
        2,
        3,
        4,
        5,
        6,
        7,
        8,
    ]);
    assert_eq!(r.conn_requests, 1, "{r:?}");
    assert_eq!(r.protocol_error, 0, "{r:?}");
    assert!(r.recv_complete >= 1, "{r:?}");
}

#[test]
fn auth_harness_reaches_both_sides_and_refusals() {
    let op = |o: u8| usize::from(o);
    // Acceptor, valid handshake, then a message: request, CHALLENGE, ACCEPT.
    let r = auth_stream(&input(0x03, 4, &[msg(None, b"after-auth")]));
    assert_eq!(
        (r.conn_requests, r.auth_failed, r.protocol_error),
        (1, 0, 0),
        "{r:?}"
    );
    assert_eq!(r.written_ops[op(tcp::op::CHALLENGE)], 1, "{r:?}");
    assert_eq!(r.written_ops[op(tcp::op::ACCEPT)], 1, "{r:?}");
    // Connector, valid handshake: HELLO, PROOF, Connected.
    let r = auth_stream(&input(0x02, 4, &[]));
    assert_eq!((r.connected, r.auth_failed), (1, 0), "{r:?}");
    assert_eq!(r.written_ops[op(tcp::op::HELLO)], 1, "{r:?}");
    assert_eq!(r.written_ops[op(tcp::op::PROOF)], 1, "{r:?}");
    // The harness's side with another key: refused on both sides.
    let r = auth_stream(&input(0x07, 4, &[]));
    assert_eq!((r.conn_requests, r.auth_failed), (0, 1), "{r:?}");
    assert_eq!(r.written_ops[op(tcp::op::REJECT)], 1, "{r:?}");
    let r = auth_stream(&input(0x06, 4, &[]));
    assert_eq!((r.connected, r.auth_failed), (0, 1), "{r:?}");
    assert_eq!(
        r.written_ops[op(tcp::op::PROOF)],
        0,
        "proof sent to an unproven acceptor"
    );
    // A made-up proof after a HELLO of its own.
    let mut hello = b"fuzzer:9".to_vec();
    hello.extend_from_slice(&[1; tcp::NONCE_LEN]);
    let r = auth_stream(&input(
        0x01,
        4,
        &[
            frame(tcp::op::HELLO, 0, 0, 8, tcp::NONCE_LEN as u64, &hello),
            frame(tcp::op::PROOF, 0, 0, 0, 0, &[7; 32]),
        ],
    ));
    assert_eq!((r.conn_requests, r.auth_failed), (0, 1), "{r:?}");
}

#[test]
#[ignore = "writes fuzz/seeds; run by hand"]
fn write_seeds() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds");
    for (target, name, data) in seeds() {
        let dir = root.join(target);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(name), data).unwrap();
    }
}
