//! Hostile input for the udp datagram decoders: any bytes parse into a
//! header that re-emits to the same bytes and whose lengths fit, or are
//! rejected; nothing panics.

use ofi_wire::udp::{
    dflag, kind, Dgram, DgramRepr, Handshake, Packet, Repr, DGRAM_HDR_LEN, HDR_LEN, MAC_LEN,
};
use proptest::prelude::*;

proptest! {
    #[test]
    fn arbitrary_datagrams_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let p = Packet::new_unchecked(&bytes[..]);
        if let Ok(r) = Repr::parse(&p) {
            prop_assert_eq!(&r.to_bytes()[..], &bytes[..HDR_LEN]);
            prop_assert!((1..=kind::MAX_PACKET).contains(&r.kind));
            if let Ok(h) = Handshake::parse(&r, p.payload()) {
                let mut out = Vec::new();
                h.emit(&mut out);
                prop_assert_eq!(&out[..], p.payload());
            }
        }
        if let Ok(d) = DgramRepr::parse(&Dgram::new_unchecked(&bytes[..])) {
            let mac = if d.flags & dflag::MAC != 0 { MAC_LEN } else { 0 };
            prop_assert_eq!(DGRAM_HDR_LEN + d.len + mac, bytes.len());
        }
    }

    #[test]
    fn in_session_packets_roundtrip(ack_now: bool, window: u32, session in 1u64.., seq in 0u64..1 << 62,
                                    ack in 0u64..1 << 62, sack: u64, payload in proptest::collection::vec(any::<u8>(), 1..64)) {
        for k in [kind::DATA, kind::ACK] {
            let r = Repr {
                kind: k,
                flags: if ack_now { ofi_wire::udp::flag::ACK_NOW } else { 0 },
                window,
                session,
                seq: if k == kind::DATA { seq } else { 0 },
                ack,
                sack,
            };
            let mut b = r.to_bytes().to_vec();
            if k == kind::DATA {
                b.extend_from_slice(&payload);
            }
            prop_assert_eq!(Repr::parse(&Packet::new_unchecked(&b[..])), Ok(r));
        }
    }
}
