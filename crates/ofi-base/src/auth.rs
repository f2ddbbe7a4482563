//! Authorization keys (`domain_attr.auth_key`, `ep_attr.auth_key`): the
//! key an endpoint uses, and the pieces of a challenge-response that proves
//! a peer holds the same key without sending it: HMAC-SHA256 over a
//! length-prefixed transcript and a constant-time comparison. The nonces
//! come from the operating system's random source, which the sans-IO
//! cores do not touch: ofi-core's `util::auth::nonce` draws them.
//! Providers build their handshakes from these (tcp: `ofi_proto::tcp`'s
//! HELLO / CHALLENGE / PROOF); endpoints whose keys differ cannot exchange
//! a byte.
//!
//! The key an endpoint uses is its `ep_attr.auth_key` when that is set and
//! not empty, else its domain's `domain_attr.auth_key` (libfabric's rule);
//! an empty or absent key means no key. A peer with a key and a peer
//! without one differ too.

use crate::error::{Error, Result};
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Bytes of a nonce.
pub const NONCE_LEN: usize = 32;
/// Bytes of a message authentication code (HMAC-SHA256).
pub const MAC_LEN: usize = 32;
/// Longest key accepted (a job key is a few dozen bytes; this refuses
/// garbage lengths from a C caller).
pub const MAX_KEY_LEN: usize = 4096;

/// Where an endpoint's key is chosen from: its `ep_attr.auth_key` and its
/// domain's `domain_attr.auth_key` (ofi-core's `Info` is one).
pub trait KeySource {
    /// `ep_attr.auth_key`, if set.
    fn ep_auth_key(&self) -> Option<&[u8]>;
    /// `domain_attr.auth_key`, if set.
    fn domain_auth_key(&self) -> Option<&[u8]>;
}

/// A nonce: fresh random bytes for one handshake.
pub type Nonce = [u8; NONCE_LEN];
/// A message authentication code.
pub type Tag = [u8; MAC_LEN];

/// An authorization key. Its bytes are never printed and are overwritten
/// when it is dropped.
#[derive(Clone, PartialEq, Eq)]
pub struct AuthKey(Box<[u8]>);

impl std::fmt::Debug for AuthKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AuthKey({} bytes)", self.0.len())
    }
}

impl Drop for AuthKey {
    fn drop(&mut self) {
        self.0.fill(0);
        std::hint::black_box(&self.0);
    }
}

impl AuthKey {
    /// A key from its bytes; `None` for an empty one (no key).
    /// `FI_EINVAL` above [`MAX_KEY_LEN`] bytes.
    pub fn new(bytes: &[u8]) -> Result<Option<AuthKey>> {
        if bytes.len() > MAX_KEY_LEN {
            return Err(Error::inval(format!(
                "auth_key of {} bytes exceeds the {MAX_KEY_LEN} bytes accepted",
                bytes.len()
            )));
        }
        Ok((!bytes.is_empty()).then(|| AuthKey(bytes.into())))
    }

    /// The key an endpoint opened with `info` uses: `ep_attr.auth_key` if
    /// set and not empty, else `domain_attr.auth_key`; `None`: no key.
    pub fn of<S: KeySource + ?Sized>(info: &S) -> Result<Option<AuthKey>> {
        match info.ep_auth_key() {
            Some(k) if !k.is_empty() => AuthKey::new(k),
            _ => AuthKey::new(info.domain_auth_key().unwrap_or(&[])),
        }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Always false: an empty key is no key ([`AuthKey::new`]).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// HMAC-SHA256 of the transcript `parts` under this key. Each part is
    /// preceded by its length (8 bytes, little-endian), so no two
    /// different transcripts hash the same bytes. The first part should
    /// name the protocol and the role of the prover, so a proof cannot be
    /// reflected or replayed in another protocol.
    pub fn mac(&self, parts: &[&[u8]]) -> Tag {
        let out = self.hmac(parts).finalize().into_bytes();
        let mut t = [0u8; MAC_LEN];
        t.copy_from_slice(&out);
        t
    }

    /// True when `tag` is the [`mac`](Self::mac) of `parts`, compared in
    /// constant time (a wrong tag of the right length takes as long as a
    /// right one).
    pub fn verify(&self, parts: &[&[u8]], tag: &[u8]) -> bool {
        self.hmac(parts).verify_slice(tag).is_ok()
    }

    fn hmac(&self, parts: &[&[u8]]) -> Hmac<Sha256> {
        // HMAC takes keys of any length.
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC accepts every key length"));
        for p in parts {
            m.update(&(p.len() as u64).to_le_bytes());
            m.update(p);
        }
        m
    }
}

/// Constant-time equality of two byte strings (lengths are not secret).
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let d = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(d) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_depend_on_key_and_every_part_and_their_boundaries() {
        let k = AuthKey::new(b"job-42").unwrap().unwrap();
        let other = AuthKey::new(b"job-43").unwrap().unwrap();
        let t = k.mac(&[b"role", b"addr", b"nonce"]);
        assert!(k.verify(&[b"role", b"addr", b"nonce"], &t));
        assert!(!other.verify(&[b"role", b"addr", b"nonce"], &t));
        assert!(!k.verify(&[b"role", b"addr", b"nonce2"], &t));
        assert!(
            !k.verify(&[b"rol", b"eaddr", b"nonce"], &t),
            "part boundaries"
        );
        assert!(!k.verify(&[b"role", b"addr", b"nonce"], &t[..31]));
        // RFC 4231 test case 2 (HMAC-SHA256, key "Jefe"), through the
        // unprefixed core, pins the algorithm.
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(b"Jefe").unwrap();
        m.update(b"what do ya want for nothing?");
        assert_eq!(
            m.finalize().into_bytes()[..4],
            [0x5b, 0xdc, 0xc1, 0x46],
            "HMAC-SHA256 known answer"
        );
    }
}
