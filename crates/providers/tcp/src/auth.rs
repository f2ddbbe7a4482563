//! The auth key of a tcp endpoint (`ofi_core::util::auth`) and the arming
//! of its connections: each handshake gets a fresh nonce from the system's
//! random source and proves the key both ways (see `ofi_wire::tcp`).

use ofi_core::error::Result;
use ofi_core::info::Info;
use ofi_core::util::auth::{nonce, AuthKey};
use ofi_proto::tcp::Conn;

/// The key an endpoint opened with `info` uses in a domain whose key is
/// `domain`: its own `ep_attr.auth_key` when set and not empty, else the
/// domain's (libfabric's rule); `None`: no key.
pub fn endpoint_key(info: &Info, domain: &Option<AuthKey>) -> Result<Option<AuthKey>> {
    match info.ep_attr.auth_key.as_deref() {
        Some(k) if !k.is_empty() => AuthKey::new(k),
        _ => Ok(domain.clone()),
    }
}

/// `conn` set to prove `key` (when there is one) with a fresh nonce; an
/// error when the random source fails (never a weaker nonce).
pub fn arm(conn: Conn, key: &Option<AuthKey>) -> Result<Conn> {
    match key {
        None => Ok(conn),
        Some(k) => Ok(conn.with_auth(k.clone(), nonce()?)),
    }
}
