//! Hostile input for the tcp frame header: any bytes either parse into a
//! header whose lengths are possible for its opcode, or are rejected;
//! nothing panics; emit then parse gives the header back.

use ofi_wire::tcp::{flag, op, parse_rts_payload, Header, Repr, HDR_LEN, MAGIC, RTS_PAYLOAD_LEN};
use proptest::prelude::*;

fn check_accepted(r: &Repr, max: u64) -> Result<(), TestCaseError> {
    prop_assert!((1..=op::MAX).contains(&r.op));
    prop_assert!(r.len <= max);
    prop_assert_eq!(r.flags & !flag::ALL, 0);
    match r.op {
        op::MSG => prop_assert_eq!(r.id, r.len),
        op::RTS => prop_assert_eq!(r.len, RTS_PAYLOAD_LEN as u64),
        op::CTS | op::SHUTDOWN => prop_assert_eq!(r.len, 0),
        op::DATA => prop_assert!(r.len > 0),
        op::HELLO => prop_assert!(r.data <= r.len),
        _ => {}
    }
    if r.op != op::MSG && r.op != op::RTS {
        prop_assert_eq!(r.flags, 0);
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
    fn near_valid_headers_never_panic(opc in 0u8..12, flags: u8, reserved in prop_oneof![Just(0u32), any::<u32>()],
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
    fn emit_then_parse_roundtrips(opc in 1u8..=op::MAX, flags in 0u8..=flag::ALL, len in 0u64..4096, tag: u64, data: u64, id: u64) {
        let flags = if opc == op::MSG || opc == op::RTS { flags } else { 0 };
        let len = match opc {
            op::RTS => RTS_PAYLOAD_LEN as u64,
            op::CTS | op::SHUTDOWN => 0,
            op::DATA => len.max(1),
            _ => len,
        };
        let id = if opc == op::MSG { len } else { id };
        let data = if opc == op::HELLO { data % (len + 1) } else { data };
        let r = Repr { op: opc, flags, len, tag, data, id };
        let b = r.to_bytes();
        prop_assert_eq!(Repr::parse(&Header::new_unchecked(&b[..]), 4096), Ok(r));
    }
}
