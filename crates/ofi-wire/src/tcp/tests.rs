//! Golden-byte tests of the tcp frame header and the one-sided range
//! descriptor: construct, deconstruct, truncation and every rejection.

use super::*;

const MAX: u64 = 1 << 20;

static GOLDEN_MSG: [u8; 48] = [
    0x6f, 0x01, 0x04, 0x03, 0x00, 0x00, 0x00,
    0x00, // magic, v1, MSG, TAGGED|CQ_DATA, reserved
    0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // len 8
    0xef, 0xbe, 0xad, 0xde, 0x00, 0x00, 0x00, 0x00, // tag 0xdeadbeef
    0x2a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // data 42
    0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // id = total 8
    b'p', b'i', b'n', b'g', b'p', b'o', b'n', b'g',
];

fn golden_msg() -> Repr {
    Repr {
        op: op::MSG,
        flags: flag::TAGGED | flag::CQ_DATA,
        len: 8,
        tag: 0xdead_beef,
        data: 42,
        id: 8,
    }
}

static GOLDEN_RTS: [u8; 48] = [
    0x6f, 0x01, 0x05, 0x01, 0x00, 0x00, 0x00, 0x00, // magic, v1, RTS, TAGGED
    0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // len 8 (the size word)
    0x07, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // tag 7
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // data 0
    0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // rendezvous id 3
    0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, // message size 1 MiB
];

fn golden_rts() -> Repr {
    Repr {
        op: op::RTS,
        flags: flag::TAGGED,
        len: 8,
        tag: 7,
        data: 0,
        id: 3,
    }
}

static GOLDEN_HELLO: [u8; 49] = [
    0x6f, 0x01, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, // magic, v1, HELLO
    0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // len 9
    0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // protocol flags 1
    0x06, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // address: 6 bytes
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // id 0
    0x0a, 0x00, 0x00, 0x01, 0x1f, 0x90, // 10.0.0.1:8080
    b'h', b'i', b'!', // private data
];

fn golden_hello() -> Repr {
    Repr {
        op: op::HELLO,
        flags: 0,
        len: 9,
        tag: 1,
        data: 6,
        id: 0,
    }
}

#[test]
fn test_deconstruct() {
    let h = Header::new_checked(&GOLDEN_MSG[..]).unwrap();
    assert_eq!(h.magic(), MAGIC);
    assert_eq!(h.version(), VERSION);
    assert_eq!(Repr::parse(&h, MAX).unwrap(), golden_msg());
    assert_eq!(h.payload(), b"pingpong");

    let h = Header::new_checked(&GOLDEN_RTS[..]).unwrap();
    assert_eq!(Repr::parse(&h, MAX).unwrap(), golden_rts());
    assert_eq!(parse_rts_payload(h.payload()), Some(1 << 20));

    let h = Header::new_checked(&GOLDEN_HELLO[..]).unwrap();
    let r = Repr::parse(&h, MAX).unwrap();
    assert_eq!(r, golden_hello());
    let (addr, pd) = h.payload().split_at(r.data as usize);
    assert_eq!(addr, &[10, 0, 0, 1, 0x1f, 0x90]);
    assert_eq!(pd, b"hi!");
}

#[test]
fn test_construct() {
    let mut buf = [0xffu8; 48];
    let mut h = Header::new_unchecked(&mut buf[..]);
    golden_msg().emit(&mut h);
    h.payload_mut().copy_from_slice(b"pingpong");
    assert_eq!(buf, GOLDEN_MSG);

    let mut buf = [0xffu8; 48];
    let mut h = Header::new_unchecked(&mut buf[..]);
    golden_rts().emit(&mut h);
    h.payload_mut().copy_from_slice(&rts_payload(1 << 20));
    assert_eq!(buf, GOLDEN_RTS);

    let mut buf = [0xffu8; 49];
    buf[..HDR_LEN].copy_from_slice(&golden_hello().to_bytes());
    buf[HDR_LEN..HDR_LEN + 6].copy_from_slice(&[10, 0, 0, 1, 0x1f, 0x90]);
    buf[HDR_LEN + 6..].copy_from_slice(b"hi!");
    assert_eq!(buf, GOLDEN_HELLO);
}

#[test]
fn test_truncated() {
    assert_eq!(
        Header::new_checked(&GOLDEN_MSG[..HDR_LEN - 1]).unwrap_err(),
        WireError::Truncated
    );
    assert_eq!(
        Repr::parse(&Header::new_unchecked(&GOLDEN_MSG[..10]), MAX),
        Err(WireError::Truncated)
    );
    // A header alone is enough: the payload follows on the stream.
    assert!(Repr::parse(&Header::new_unchecked(&GOLDEN_MSG[..HDR_LEN]), MAX).is_ok());
    assert_eq!(parse_rts_payload(&[0; 7]), None);
}

fn parse_with(r: Repr, patch: impl FnOnce(&mut [u8; HDR_LEN])) -> Result<Repr, WireError> {
    let mut b = r.to_bytes();
    patch(&mut b);
    Repr::parse(&Header::new_unchecked(&b[..]), MAX)
}

fn malformed(res: Result<Repr, WireError>) -> bool {
    matches!(res, Err(WireError::Malformed(_)))
}

#[test]
fn test_rejects_bad_magic_version_reserved() {
    assert!(malformed(parse_with(golden_msg(), |b| b[0] = 0x6e)));
    assert!(malformed(parse_with(golden_msg(), |b| b[1] = 2)));
    assert!(malformed(parse_with(golden_msg(), |b| b[1] = 0)));
    for i in 4..8 {
        assert!(malformed(parse_with(golden_msg(), |b| b[i] = 1)));
    }
}

#[test]
fn test_rejects_unknown_op_and_flags() {
    assert_eq!(
        parse_with(golden_msg(), |b| b[2] = 0),
        Err(WireError::UnknownOp(0))
    );
    assert_eq!(
        parse_with(golden_msg(), |b| b[2] = 16),
        Err(WireError::UnknownOp(16))
    );
    assert!(malformed(parse_with(golden_msg(), |b| b[3] = 0x10)));
    assert!(malformed(parse_with(golden_msg(), |b| b[3] = 0x80)));
    // Both acknowledgement levels at once.
    assert!(malformed(parse_with(golden_msg(), |b| b[3] = 0x0c)));
    // Flags only where they mean something.
    for (o, f) in [
        (op::WRITE, flag::TAGGED),
        (op::ATOMIC, flag::ACK),
        (op::READ, flag::CQ_DATA),
        (op::RESP, flag::CQ_DATA),
        (op::DATA, flag::ACK),
    ] {
        let r = Repr {
            op: o,
            flags: f,
            len: desc_len(1) as u64,
            ..Default::default()
        };
        assert!(malformed(Repr::parse(
            &Header::new_unchecked(&r.to_bytes()[..]),
            MAX
        )));
    }
    let cts = Repr {
        op: op::CTS,
        flags: flag::TAGGED,
        ..Default::default()
    };
    assert!(malformed(Repr::parse(
        &Header::new_unchecked(&cts.to_bytes()[..]),
        MAX
    )));
}

#[test]
fn test_rejects_impossible_lengths() {
    let check = |r: Repr| malformed(Repr::parse(&Header::new_unchecked(&r.to_bytes()[..]), MAX));
    // MSG whose total differs from its payload.
    assert!(check(Repr {
        op: op::MSG,
        len: 8,
        id: 9,
        ..Default::default()
    }));
    // RTS must carry exactly the 8-byte size.
    for len in [0, 7, 9, 16] {
        assert!(check(Repr {
            op: op::RTS,
            len,
            ..Default::default()
        }));
    }
    // CTS and SHUTDOWN carry nothing.
    assert!(check(Repr {
        op: op::CTS,
        len: 1,
        ..Default::default()
    }));
    assert!(check(Repr {
        op: op::SHUTDOWN,
        len: 4,
        ..Default::default()
    }));
    // DATA carries something.
    assert!(check(Repr {
        op: op::DATA,
        len: 0,
        ..Default::default()
    }));
    // HELLO address longer than its payload.
    assert!(check(Repr {
        op: op::HELLO,
        len: 4,
        data: 5,
        ..Default::default()
    }));
    // Anything above the reader's maximum.
    assert!(check(Repr {
        op: op::MSG,
        len: MAX + 1,
        id: MAX + 1,
        ..Default::default()
    }));
    assert!(check(Repr {
        op: op::ACCEPT,
        len: u64::MAX,
        ..Default::default()
    }));
    // The maximum itself is fine.
    assert!(!check(Repr {
        op: op::DATA,
        len: MAX,
        ..Default::default()
    }));
}

#[test]
fn test_every_op_roundtrips() {
    for o in 1..=op::MAX {
        let r = Repr {
            op: o,
            flags: flag::allowed(o) & !flag::ACK_PLACED,
            len: match o {
                op::RTS => 8,
                op::CHALLENGE => CHALLENGE_LEN as u64,
                op::PROOF => PROOF_LEN as u64,
                op::CTS | op::SHUTDOWN => 0,
                op::READ => desc_len(2) as u64,
                op::WRITE | op::ATOMIC => desc_len(1) as u64 + 5,
                _ => 5,
            },
            tag: match o {
                op::READ => 0,
                op::WRITE | op::ATOMIC => 5,
                op::RESP => 11,
                _ => 11,
            },
            data: match o {
                op::HELLO => 2,
                op::RESP => 0,
                _ => 13,
            },
            id: match o {
                op::MSG => 5,
                op::HELLO => 0,
                _ => 17,
            },
        };
        let b = r.to_bytes();
        assert_eq!(Repr::parse(&Header::new_unchecked(&b[..]), MAX), Ok(r));
    }
}

// An authenticating HELLO: address 10.0.0.1:8080, nonce 0x11 * 32,
// private data "hi".
fn golden_auth_hello() -> Vec<u8> {
    let mut b = vec![
        0x6f, 0x01, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, // magic, v1, HELLO
        0x28, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // len 40 = 6 + 32 + 2
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // protocol flags 0
        0x06, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // address: 6 bytes
        0x20, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // nonce: 32 bytes
        0x0a, 0x00, 0x00, 0x01, 0x1f, 0x90, // 10.0.0.1:8080
    ];
    b.extend_from_slice(&[0x11; 32]);
    b.extend_from_slice(b"hi");
    b
}

static GOLDEN_PROOF_HDR: [u8; 40] = [
    0x6f, 0x01, 0x0f, 0x00, 0x00, 0x00, 0x00, 0x00, // magic, v1, PROOF
    0x20, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // len 32
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // tag 0
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // data 0
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // id 0
];

static GOLDEN_CHALLENGE_HDR: [u8; 40] = [
    0x6f, 0x01, 0x0e, 0x00, 0x00, 0x00, 0x00, 0x00, // magic, v1, CHALLENGE
    0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // len 64
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // tag 0
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // data 0
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // id 0
];

#[test]
fn test_auth_frames_golden() {
    let g = golden_auth_hello();
    let h = Header::new_checked(&g[..]).unwrap();
    let r = Repr::parse(&h, MAX).unwrap();
    let want = Repr {
        op: op::HELLO,
        flags: 0,
        len: 40,
        tag: 0,
        data: 6,
        id: NONCE_LEN as u64,
    };
    assert_eq!(r, want);
    let (addr, nonce, pd) = split_hello(h.payload(), r.data, r.id).unwrap();
    assert_eq!(addr, &[10, 0, 0, 1, 0x1f, 0x90]);
    assert_eq!(nonce, &[0x11; 32]);
    assert_eq!(pd, b"hi");
    let mut built = want.to_bytes().to_vec();
    built.extend_from_slice(&[10, 0, 0, 1, 0x1f, 0x90]);
    built.extend_from_slice(&[0x11; 32]);
    built.extend_from_slice(b"hi");
    assert_eq!(built, g);

    let ch = Repr {
        op: op::CHALLENGE,
        len: CHALLENGE_LEN as u64,
        ..Default::default()
    };
    assert_eq!(ch.to_bytes(), GOLDEN_CHALLENGE_HDR);
    assert_eq!(
        Repr::parse(&Header::new_unchecked(&GOLDEN_CHALLENGE_HDR[..]), MAX),
        Ok(ch)
    );
    let body = challenge_payload(&[0x22; 32], &[0x33; 32]);
    assert_eq!(&body[..32], &[0x22; 32]);
    assert_eq!(&body[32..], &[0x33; 32]);
    assert_eq!(parse_challenge(&body), Some(([0x22; 32], [0x33; 32])));
    assert_eq!(parse_challenge(&body[..63]), None);

    let pr = Repr {
        op: op::PROOF,
        len: PROOF_LEN as u64,
        ..Default::default()
    };
    assert_eq!(pr.to_bytes(), GOLDEN_PROOF_HDR);
    assert_eq!(
        Repr::parse(&Header::new_unchecked(&GOLDEN_PROOF_HDR[..]), MAX),
        Ok(pr)
    );
}

#[test]
fn test_rejects_bad_auth_frames() {
    let check = |r: Repr| malformed(Repr::parse(&Header::new_unchecked(&r.to_bytes()[..]), MAX));
    // A nonce of another length, and address + nonce beyond the payload.
    for (len, data, id) in [(40, 6, 16), (40, 6, 33), (37, 6, 32), (40, u64::MAX, 32)] {
        assert!(
            check(Repr {
                op: op::HELLO,
                len,
                data,
                id,
                ..Default::default()
            }),
            "HELLO len {len} data {data} id {id}"
        );
    }
    for len in [0, 32, 63, 65] {
        assert!(check(Repr {
            op: op::CHALLENGE,
            len,
            ..Default::default()
        }));
    }
    for len in [0, 31, 33, 64] {
        assert!(check(Repr {
            op: op::PROOF,
            len,
            ..Default::default()
        }));
    }
    assert!(check(Repr {
        op: op::PROOF,
        flags: flag::TAGGED,
        len: 32,
        ..Default::default()
    }));
    assert_eq!(split_hello(&[0; 10], 6, 32), None);
    assert_eq!(split_hello(&[0; 10], u64::MAX, 0), None);
}

// A WRITE of 6 bytes to one range, with remote CQ data 9, request id 5.
static GOLDEN_WRITE: [u8; 78] = [
    0x6f, 0x01, 0x09, 0x02, 0x00, 0x00, 0x00, 0x00, // magic, v1, WRITE, CQ_DATA
    0x26, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // len 38 = 32 + 6
    0x06, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // tag: 6 data bytes follow the descriptor
    0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // remote CQ data 9
    0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // request id 5
    0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // 1 range, RMA, op 0, datatype 0
    0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // addr 0x1000
    0x06, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // len 6
    0xbb, 0xaa, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // key 0xaabb
    b'r', b'e', b'm', b'o', b't', b'e',
];

fn golden_write() -> (Repr, DescRepr) {
    let mut d = DescRepr {
        kind: kind::RMA,
        count: 1,
        ..Default::default()
    };
    d.ranges[0] = Range {
        addr: 0x1000,
        len: 6,
        key: 0xaabb,
    };
    (
        Repr {
            op: op::WRITE,
            flags: flag::CQ_DATA,
            len: 38,
            tag: 6,
            data: 9,
            id: 5,
        },
        d,
    )
}

// A fetching FI_SUM (op 2) on FI_UINT64 (datatype 7) of 2 elements in
// two ranges, 16 operand bytes, request id 3.
static GOLDEN_ATOMIC: [u8; 120] = [
    0x6f, 0x01, 0x0b, 0x00, 0x00, 0x00, 0x00, 0x00, // magic, v1, ATOMIC
    0x48, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // len 72 = 56 + 16
    0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // tag: 16 operand bytes
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // data 0
    0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // request id 3
    0x02, 0x02, 0x02, 0x07, 0x00, 0x00, 0x00, 0x00, // 2 ranges, FETCH, FI_SUM, FI_UINT64
    0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // offset 8
    0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // 1 element
    0x07, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // key 7
    0x20, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // offset 32
    0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // 1 element
    0x07, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // key 7
    0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // operand 1
    0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // operand 2
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // (not part of the frame)
];

static GOLDEN_RESP: [u8; 40] = [
    0x6f, 0x01, 0x0c, 0x00, 0x00, 0x00, 0x00, 0x00, // magic, v1, RESP
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // len 0
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // answer length 0
    0x0d, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // status 13 (FI_EACCES)
    0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // request id 5
];

#[test]
fn test_one_sided_golden() {
    let (wr, wd) = golden_write();
    let h = Header::new_checked(&GOLDEN_WRITE[..]).unwrap();
    assert_eq!(Repr::parse(&h, MAX).unwrap(), wr);
    let dlen = (wr.len - wr.tag) as usize;
    assert_eq!(desc_ranges(dlen as u64), Some(1));
    let d = RmaDesc::new_checked(&h.payload()[..dlen]).unwrap();
    assert_eq!(DescRepr::parse(&d, op::WRITE).unwrap(), wd);
    assert_eq!(&h.payload()[dlen..], b"remote");
    let mut out = wr.to_bytes().to_vec();
    wd.append_to(&mut out);
    out.extend_from_slice(b"remote");
    assert_eq!(out, GOLDEN_WRITE);

    let frame = &GOLDEN_ATOMIC[..HDR_LEN + 72];
    let h = Header::new_checked(frame).unwrap();
    let r = Repr::parse(&h, MAX).unwrap();
    assert_eq!((r.op, r.len, r.tag, r.id), (op::ATOMIC, 72, 16, 3));
    let d = RmaDesc::new_checked(&h.payload()[..56]).unwrap();
    let a = DescRepr::parse(&d, op::ATOMIC).unwrap();
    assert_eq!((a.kind, a.op, a.datatype, a.count), (kind::FETCH, 2, 7, 2));
    assert_eq!(
        a.ranges(),
        &[
            Range {
                addr: 8,
                len: 1,
                key: 7
            },
            Range {
                addr: 32,
                len: 1,
                key: 7
            }
        ]
    );
    let mut out = r.to_bytes().to_vec();
    a.append_to(&mut out);
    out.extend_from_slice(&1u64.to_le_bytes());
    out.extend_from_slice(&2u64.to_le_bytes());
    assert_eq!(out, frame);

    let h = Header::new_checked(&GOLDEN_RESP[..]).unwrap();
    let r = Repr::parse(&h, MAX).unwrap();
    assert_eq!((r.op, r.data, r.id), (op::RESP, 13, 5));
    assert_eq!(r.to_bytes(), GOLDEN_RESP);
}

#[test]
fn test_rejects_impossible_requests() {
    let check = |r: Repr| malformed(Repr::parse(&Header::new_unchecked(&r.to_bytes()[..]), MAX));
    // Descriptor lengths: 8 + 24n for n in 1..=4 only.
    for dl in [0u64, 7, 8, 31, 33, 8 + 24 * 5] {
        assert!(check(Repr {
            op: op::READ,
            len: dl,
            ..Default::default()
        }));
        assert!(check(Repr {
            op: op::WRITE,
            len: dl + 3,
            tag: 3,
            ..Default::default()
        }));
    }
    // More bytes after the descriptor than the frame holds.
    assert!(check(Repr {
        op: op::ATOMIC,
        len: 32,
        tag: 33,
        ..Default::default()
    }));
    // READ carries nothing after its descriptor.
    assert!(check(Repr {
        op: op::READ,
        len: 32,
        tag: 1,
        ..Default::default()
    }));
    // A failed RESP carries nothing; status in range; no more than its answer.
    assert!(check(Repr {
        op: op::RESP,
        len: 1,
        tag: 1,
        data: 13,
        ..Default::default()
    }));
    assert!(check(Repr {
        op: op::RESP,
        data: MAX_STATUS + 1,
        ..Default::default()
    }));
    assert!(check(Repr {
        op: op::RESP,
        len: 2,
        tag: 1,
        ..Default::default()
    }));
    assert!(check(Repr {
        op: op::RESP_DATA,
        ..Default::default()
    }));
    // An acknowledged MSG's id is its request id, not its length.
    assert!(!check(Repr {
        op: op::MSG,
        flags: flag::ACK,
        len: 3,
        id: 99,
        ..Default::default()
    }));
}

#[test]
fn test_rejects_bad_descriptors() {
    let (_, wd) = golden_write();
    let mut good = Vec::new();
    wd.append_to(&mut good);
    let parse = |b: &[u8], o: u8| DescRepr::parse(&RmaDesc::new_unchecked(b), o);
    assert!(parse(&good, op::WRITE).is_ok());
    assert!(parse(&good, op::READ).is_ok());
    // An RMA descriptor on an ATOMIC frame, and atomic fields on RMA.
    assert!(parse(&good, op::ATOMIC).is_err());
    let mut b = good.clone();
    b[2] = 1;
    assert!(parse(&b, op::WRITE).is_err());
    // Counts: 0, more than the maximum, more than the buffer holds.
    for c in [0u8, 5, 2] {
        let mut b = good.clone();
        b[0] = c;
        assert!(parse(&b, op::WRITE).is_err());
    }
    assert_eq!(parse(&good[..31], op::WRITE), Err(WireError::Truncated));
    assert_eq!(parse(&good[..4], op::WRITE), Err(WireError::Truncated));
    // Trailing bytes, reserved bits, unknown atomic kinds.
    let mut b = good.clone();
    b.push(0);
    assert!(parse(&b, op::WRITE).is_err());
    let mut b = good.clone();
    b[6] = 1;
    assert!(parse(&b, op::WRITE).is_err());
    let mut b = good.clone();
    b[1] = 4;
    assert!(parse(&b, op::ATOMIC).is_err());
    b[1] = kind::COMPARE;
    assert!(parse(&b, op::ATOMIC).is_ok());
    assert!(parse(&good, op::MSG).is_err());
}
