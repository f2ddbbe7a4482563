//! Hostile input for the tcp frame header and the one-sided range
//! descriptor: any bytes either parse into a header (descriptor) whose
//! lengths are possible for its opcode, or are rejected; nothing panics;
//! emit then parse gives the header (descriptor) back.

use ofi_wire::tcp::{
    desc_len, desc_ranges, flag, kind, op, parse_rts_payload, DescRepr, Header, Range, Repr,
    RmaDesc, CHALLENGE_LEN, HDR_LEN, MAGIC, MAX_RANGES, MAX_STATUS, NONCE_LEN, PROOF_LEN,
    RTS_PAYLOAD_LEN,
};
use proptest::prelude::*;

fn check_accepted(r: &Repr, max: u64) -> Result<(), TestCaseError> {
    prop_assert!((1..=op::MAX).contains(&r.op));
    prop_assert!(r.len <= max);
    prop_assert_eq!(r.flags & !flag::ALL, 0);
    prop_assert_eq!(r.flags & !flag::allowed(r.op), 0);
    let acked = r.flags & (flag::ACK | flag::ACK_PLACED) != 0;
    prop_assert!(r.flags & (flag::ACK | flag::ACK_PLACED) != flag::ACK | flag::ACK_PLACED);
    match r.op {
        op::MSG if !acked => prop_assert_eq!(r.id, r.len),
        op::RTS => prop_assert_eq!(r.len, RTS_PAYLOAD_LEN as u64),
        op::CTS | op::SHUTDOWN => prop_assert_eq!(r.len, 0),
        op::DATA | op::RESP_DATA => prop_assert!(r.len > 0),
        op::HELLO => {
            prop_assert!(r.id == 0 || r.id == NONCE_LEN as u64);
            prop_assert!(r.data + r.id <= r.len);
        }
        op::CHALLENGE => prop_assert_eq!(r.len, CHALLENGE_LEN as u64),
        op::PROOF => prop_assert_eq!(r.len, PROOF_LEN as u64),
        op::WRITE | op::ATOMIC => {
            prop_assert!(r.tag <= r.len);
            prop_assert!(desc_ranges(r.len - r.tag).is_some());
        }
        op::READ => {
            prop_assert_eq!(r.tag, 0);
            prop_assert!(desc_ranges(r.len).is_some());
        }
        op::RESP => {
            prop_assert!(r.data <= MAX_STATUS);
            prop_assert!(r.len <= r.tag);
            if r.data != 0 {
                prop_assert_eq!((r.len, r.tag), (0, 0));
            }
        }
        _ => {}
    }
    Ok(())
}

fn check_desc(d: &DescRepr, frame_op: u8, len: usize) -> Result<(), TestCaseError> {
    prop_assert!((1..=MAX_RANGES).contains(&d.count));
    prop_assert_eq!(desc_len(d.count), len);
    if frame_op == op::ATOMIC {
        prop_assert!((kind::ATOMIC..=kind::COMPARE).contains(&d.kind));
    } else {
        prop_assert_eq!((d.kind, d.op, d.datatype), (kind::RMA, 0, 0));
    }
    Ok(())
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..128), max in any::<u64>()) {
        let h = Header::new_unchecked(&bytes[..]);
        if let Ok(r) = Repr::parse(&h, max) {
            prop_assert!(bytes.len() >= HDR_LEN);
            check_accepted(&r, max)?;
            let _ = parse_rts_payload(h.payload());
        }
    }

    /// Mostly-valid headers (right magic and version) so that the per-op
    /// checks, not the magic check, do the rejecting.
    #[test]
    fn near_valid_headers_never_panic(opc in 0u8..18, flags: u8, reserved in prop_oneof![Just(0u32), any::<u32>()],
                                      len in prop_oneof![0u64..64, any::<u64>()], tag: u64, data in prop_oneof![0u64..64, any::<u64>()],
                                      id in prop_oneof![0u64..64, any::<u64>()], max in prop_oneof![Just(1u64 << 20), 0u64..64]) {
        let mut b = [0u8; HDR_LEN];
        let mut h = Header::new_unchecked(&mut b[..]);
        h.set_magic(MAGIC);
        h.set_version(1);
        h.set_op(opc);
        h.set_flags(flags);
        h.set_reserved(reserved);
        h.set_len(len);
        h.set_tag(tag);
        h.set_data(data);
        h.set_id(id);
        if let Ok(r) = Repr::parse(&Header::new_unchecked(&b[..]), max) {
            prop_assert_eq!(reserved, 0);
            check_accepted(&r, max)?;
        }
    }

    #[test]
    fn emit_then_parse_roundtrips(opc in 1u8..=op::MAX, flags in 0u8..=flag::ALL, len in 0u64..4096, tag: u64, data: u64, id: u64, n in 1usize..=MAX_RANGES) {
        let mut flags = flags & flag::allowed(opc);
        if flags & flag::ACK != 0 {
            flags &= !flag::ACK_PLACED;
        }
        let acked = flags & (flag::ACK | flag::ACK_PLACED) != 0;
        let len = match opc {
            op::RTS => RTS_PAYLOAD_LEN as u64,
            op::CHALLENGE => CHALLENGE_LEN as u64,
            op::PROOF => PROOF_LEN as u64,
            op::HELLO => len.max(NONCE_LEN as u64),
            op::CTS | op::SHUTDOWN => 0,
            op::DATA | op::RESP_DATA => len.max(1),
            op::READ => desc_len(n) as u64,
            op::WRITE | op::ATOMIC => desc_len(n) as u64 + len,
            _ => len,
        };
        let tag = match opc {
            op::READ => 0,
            op::WRITE | op::ATOMIC => len - desc_len(n) as u64,
            op::RESP => len + tag % 64,
            _ => tag,
        };
        let id = match opc {
            op::MSG if !acked => len,
            op::HELLO => [0, NONCE_LEN as u64][(id % 2) as usize],
            _ => id,
        };
        let data = match opc {
            op::HELLO => data % (len - id + 1),
            op::RESP => 0,
            _ => data,
        };
        let r = Repr { op: opc, flags, len, tag, data, id };
        let b = r.to_bytes();
        prop_assert_eq!(Repr::parse(&Header::new_unchecked(&b[..]), 8192), Ok(r));
    }

    /// Any bytes as a descriptor of a WRITE, READ or ATOMIC frame.
    #[test]
    fn arbitrary_descriptors_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..128), pick in 0usize..4) {
        let frame_op = [op::WRITE, op::READ, op::ATOMIC, op::MSG][pick];
        let d = RmaDesc::new_unchecked(&bytes[..]);
        let _ = d.check_len();
        if let Ok(r) = DescRepr::parse(&d, frame_op) {
            check_desc(&r, frame_op, bytes.len())?;
            let mut out = Vec::new();
            r.append_to(&mut out);
            prop_assert_eq!(out, bytes);
        }
    }

    /// Near-valid descriptors: right length for their count, fields fuzzed.
    #[test]
    fn near_valid_descriptors(count in 0u8..7, k in 0u8..6, o: u8, dt: u8, reserved in prop_oneof![Just(0u32), any::<u32>()],
                              ranges in proptest::collection::vec((any::<u64>(), any::<u64>(), any::<u64>()), 6), pick in 0usize..3) {
        let frame_op = [op::WRITE, op::READ, op::ATOMIC][pick];
        let n = (count as usize).min(6);
        let mut b = vec![0u8; desc_len(n)];
        let mut d = RmaDesc::new_unchecked(&mut b[..]);
        d.set_count(count);
        d.set_kind(k);
        d.set_op(o);
        d.set_datatype(dt);
        d.set_reserved(reserved);
        for (i, &(addr, len, key)) in ranges.iter().take(n).enumerate() {
            d.set_range(i, &Range { addr, len, key });
        }
        if let Ok(r) = DescRepr::parse(&RmaDesc::new_unchecked(&b[..]), frame_op) {
            prop_assert_eq!(reserved, 0);
            check_desc(&r, frame_op, b.len())?;
            for (i, x) in r.ranges().iter().enumerate() {
                prop_assert_eq!(*x, Range { addr: ranges[i].0, len: ranges[i].1, key: ranges[i].2 });
            }
        }
    }
}
