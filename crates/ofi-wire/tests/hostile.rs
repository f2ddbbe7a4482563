//! Hostile input: any bytes either parse into a header whose lengths fit
//! the entry, or are rejected; nothing panics.

use ofi_wire::shm::{op, Entry, Repr, HDR_LEN, MAX_RTS_IOV};
use proptest::prelude::*;

proptest! {
    #[test]
    fn arbitrary_entries_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let e = Entry::new_unchecked(&bytes[..]);
        if let Ok(r) = Repr::parse(&e) {
            prop_assert!(bytes.len() >= HDR_LEN);
            let cap = bytes.len() - HDR_LEN;
            prop_assert!(r.op >= 1 && r.op <= op::MAX);
            if r.op == op::INLINE || r.op == op::DATA {
                prop_assert!(r.len as usize <= cap);
            }
            if r.op == op::RTS {
                prop_assert!((1..=MAX_RTS_IOV).contains(&(r.iov_cnt as usize)));
                let _ = r.rts_iov(&e);
            }
            if matches!(r.op, op::RMA_WRITE | op::RMA_PULL | op::RMA_READ | op::ATOMIC) {
                // A parsed one-sided request's lists and inline data fit the entry.
                let rg = r.ranges(&e).expect("parse checked the ranges");
                prop_assert!((1..=4).contains(&rg.n_remote));
                let data = if r.op == op::RMA_WRITE || r.op == op::ATOMIC { r.len as usize } else { 0 };
                prop_assert!(rg.data_at + data <= cap);
            }
            if r.op == op::RMA_RESP {
                prop_assert!(r.len as usize <= cap);
            }
        }
    }

    #[test]
    fn emit_then_parse_roundtrips(opc in 1u8..=op::CTS, flags in 0u8..4, len in 0u32..64, src: u64, tag: u64, data: u64, cookie: u64) {
        let mut buf = [0u8; HDR_LEN + 64];
        let iov_cnt = if opc == op::RTS { 1 } else { 0 };
        let total = if opc == op::INLINE { u64::from(len) } else { 12345 };
        let r = Repr { op: opc, flags, iov_cnt, len, src, tag, data, total, cookie };
        r.emit(&mut Entry::new_unchecked(&mut buf[..]));
        prop_assert_eq!(Repr::parse(&Entry::new_unchecked(&buf[..])).unwrap(), r);
    }
}
