//! The arming of a tcp endpoint's connections with its auth key
//! (`ofi_core::util::auth`; which key an endpoint uses is
//! `ofi_inet::provider::endpoint_key`'s rule): each handshake gets a
//! fresh nonce from the system's random source and proves the key both
//! ways (see `ofi_wire::tcp`).

use ofi_core::error::Result;
use ofi_core::util::auth::{nonce, AuthKey};
use ofi_proto::tcp::Conn;

/// `conn` set to prove `key` (when there is one) with a fresh nonce; an
/// error when the random source fails (never a weaker nonce).
pub fn arm(conn: Conn, key: &Option<AuthKey>) -> Result<Conn> {
    match key {
        None => Ok(conn),
        Some(k) => Ok(conn.with_auth(k.clone(), nonce()?)),
    }
}
