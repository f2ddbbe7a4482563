//! The NBD server side of the gateway: the wire format ([`wire`]), the
//! handshake ([`handshake`]), the transmission-phase request checks
//! ([`request`]) and the splitting of requests larger than a session
//! carries ([`split`]), all sans-IO.

pub mod handshake;
pub mod request;
pub mod split;
pub mod wire;

pub use handshake::{Export, Handshake, Negotiated, Outcome};
pub use request::{Decoded, Forward};

/// Fuzz entry: the bytes are a client's whole side of a connection (the
/// handshake, then requests with their payloads), fed in chunks whose
/// sizes come from the first byte. Never panics; every reply is well formed.
pub fn fuzz(data: &[u8]) {
    let Some((&step, data)) = data.split_first() else {
        return;
    };
    let step = step as usize % 64 + 1;
    let export = Export {
        size: 1 << 20,
        read_only: step.is_multiple_of(5),
        flush: true,
        trim: !step.is_multiple_of(3),
        zeroes: true,
        min_block: 1,
        preferred_block: 4096,
        max_payload: 64 << 10,
    };
    let given = if step.is_multiple_of(7) {
        Err("down".into())
    } else {
        Ok(export)
    };
    // Half the time the export is learnt when the client first needs it.
    let mut later = None;
    let mut h = if step.is_multiple_of(2) {
        later = Some(given);
        Handshake::deferred()
    } else {
        Handshake::new(given)
    };
    let mut out = Vec::new();
    let mut buf: Vec<u8> = Vec::new();
    let mut pos = 0;
    let mut transmission = None;
    while pos < data.len() && transmission.is_none() {
        let end = (pos + step).min(data.len());
        buf.extend_from_slice(&data[pos..end]);
        pos = end;
        let (n, o) = h.input(&buf, &mut out);
        assert!(n <= buf.len());
        buf.drain(..n);
        match o {
            Outcome::NeedExport => {
                // Asked once, and answered at once from the same bytes.
                let e = later.take().expect("the export is needed twice");
                h.provide(e);
                let (n, o) = h.input(&buf, &mut out);
                assert!(o != Outcome::NeedExport);
                buf.drain(..n);
                match o {
                    Outcome::Transmission(neg) => transmission = Some(neg),
                    Outcome::Close(_) => return,
                    _ => {}
                }
            }
            Outcome::Continue => {}
            Outcome::Transmission(neg) => transmission = Some(neg),
            Outcome::Close(_) => return,
        }
    }
    if transmission.is_none() {
        return;
    }
    buf.extend_from_slice(&data[pos..]);
    let mut at = 0;
    while buf.len() >= at + wire::REQUEST_LEN {
        match request::decode(&buf[at..], &export) {
            Err(_) => return,
            Ok(d) => {
                at += wire::REQUEST_LEN;
                let skip = match d {
                    Decoded::Forward {
                        fwd: Forward::Write { offset, len, .. },
                        ..
                    } => {
                        assert!(offset + len as u64 <= export.size && len <= split::MAX_REQUEST);
                        assert!(!export.read_only);
                        len
                    }
                    Decoded::Forward {
                        fwd: Forward::Read { offset, len },
                        ..
                    } => {
                        assert!(offset + len as u64 <= export.size && len <= split::MAX_REQUEST);
                        0
                    }
                    Decoded::Ok { skip, .. } | Decoded::Error { skip, .. } => skip,
                    Decoded::Forward { .. } => 0,
                    Decoded::Disconnect => return,
                };
                at = at.saturating_add(skip as usize);
            }
        }
    }
}
