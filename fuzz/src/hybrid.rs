//! The hybrid provider's decoders: the 40-byte header a hybrid message
//! carries, the short messages' marker and prefix (`ofi_prov_hybrid::wire`)
//! and the `fi_hyb://` address an application inserts into the AV
//! (`ofi_prov_hybrid::addr`).

use ofi_prov_hybrid::addr::HybridAddr;
use ofi_prov_hybrid::wire::{parse_short, short_prefix, Header, LEN};

/// The first byte picks the decoder; the rest is its input. An accepted
/// header re-emits to the same bytes (its reserved bytes zeroed); an
/// accepted short message (marker: the input's first 8 bytes) re-emits its
/// prefix to the same bytes and its payload is the rest; an accepted
/// address encodes to one that decodes to the same address.
pub fn hybrid_wire(data: &[u8]) {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    if which % 3 == 2 {
        let Some((m, bytes)) = rest.split_first_chunk::<8>() else {
            return;
        };
        let Some((h, body)) = parse_short(u64::from_le_bytes(*m), bytes) else {
            return;
        };
        let mut pb = [0u8; 16];
        let data = h.has_data.then_some(h.data);
        let (marker, n) = short_prefix(h.tagged, h.tag, data, &mut pb);
        assert_eq!(
            marker,
            u64::from_le_bytes(*m),
            "short marker re-emitted differently"
        );
        assert_eq!(&pb[..n], &bytes[..n], "short prefix re-emitted differently");
        assert_eq!(body, &bytes[n..], "short payload");
        assert_eq!(h.len as usize, body.len());
        assert!(!h.rts);
    } else if which & 1 == 0 {
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
