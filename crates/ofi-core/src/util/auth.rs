//! Authorization keys: the key type, MACs and comparison live in
//! `ofi_base::auth` (the protocol cores use them) and are re-exported
//! here; this module adds what needs the rest of ofi-core or the
//! operating system: the key an [`Info`] names, and fresh nonces from the
//! system's random source.

pub use ofi_base::auth::{ct_eq, AuthKey, KeySource, Nonce, Tag, MAC_LEN, MAX_KEY_LEN, NONCE_LEN};

use crate::error::{errno, Error, Result};
use crate::info::Info;

impl KeySource for Info {
    fn ep_auth_key(&self) -> Option<&[u8]> {
        self.ep_attr.auth_key.as_deref()
    }
    fn domain_auth_key(&self) -> Option<&[u8]> {
        self.domain_attr.auth_key.as_deref()
    }
}

/// A fresh nonce from the operating system's random source; an error
/// (never a weaker fallback) when it fails.
pub fn nonce() -> Result<Nonce> {
    let mut n = [0u8; NONCE_LEN];
    getrandom::fill(&mut n).map_err(|e| {
        Error::new(
            errno::FI_EIO,
            format!("the system's random source failed ({e}): no nonce for the handshake"),
        )
    })?;
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_endpoint_key_wins_over_the_domain_key_and_empty_is_none() {
        let mut i = Info::default();
        assert_eq!(AuthKey::of(&i).unwrap(), None);
        i.domain_attr.auth_key = Some(b"dom".to_vec());
        assert_eq!(AuthKey::of(&i).unwrap().unwrap().len(), 3);
        i.ep_attr.auth_key = Some(Vec::new());
        assert_eq!(AuthKey::of(&i).unwrap().unwrap().len(), 3, "empty ep key");
        i.ep_attr.auth_key = Some(b"endpoint".to_vec());
        assert_eq!(AuthKey::of(&i).unwrap().unwrap().len(), 8);
        i.ep_attr.auth_key = Some(vec![1; MAX_KEY_LEN + 1]);
        assert_eq!(
            AuthKey::of(&i).unwrap_err().code(),
            errno::FI_EINVAL,
            "an absurd key length"
        );
        assert_eq!(
            format!("{:?}", AuthKey::new(b"secret").unwrap().unwrap()),
            "AuthKey(6 bytes)"
        );
    }

    #[test]
    fn nonces_differ_and_ct_eq_compares() {
        assert_ne!(nonce().unwrap(), nonce().unwrap());
        assert!(ct_eq(b"abc", b"abc"));
        assert!(!ct_eq(b"abc", b"abd"));
        assert!(!ct_eq(b"abc", b"ab"));
    }
}
