//! The hybrid provider's decoders: the 40-byte header every hybrid message
//! carries (`ofi_prov_hybrid::wire`) and the `fi_hyb://` address an
//! application inserts into the AV (`ofi_prov_hybrid::addr`).

use ofi_prov_hybrid::addr::HybridAddr;
use ofi_prov_hybrid::wire::{Header, LEN};

/// The first byte picks the decoder; the rest is its input. An accepted
/// header re-emits to the same bytes (its reserved bytes zeroed), and an
/// accepted address encodes to one that decodes to the same address.
pub fn hybrid_wire(data: &[u8]) {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    if which & 1 == 0 {
        let Ok(h) = Header::parse(rest) else {
            return;
        };
        assert!(
            rest.len() >= LEN,
            "a header accepted from {} bytes",
            rest.len()
        );
        let mut out = [0u8; LEN];
        h.emit(&mut out);
        let mut want = [0u8; LEN];
        want.copy_from_slice(&rest[..LEN]);
        want[2..8].fill(0);
        assert_eq!(out, want, "header re-emitted differently");
        assert_eq!(Header::parse(&out).ok(), Some(h));
    } else {
        let Ok(a) = HybridAddr::decode(rest) else {
            return;
        };
        let again = a.encode().expect("a decoded address encodes");
        assert_eq!(
            HybridAddr::decode(&again).ok(),
            Some(a),
            "address round trip"
        );
    }
}
