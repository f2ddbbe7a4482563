//! Choosing the fabric offer both sides open: an RDM endpoint, or MSG
//! (connected) endpoints, with messages and RMA from the provider asked
//! for.

use ofi::consts::*;
use ofi::{Info, Result};
use std::net::SocketAddr;

/// Endpoint type of the data path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum EpKind {
    /// Reliable datagrams (one endpoint serves every initiator).
    #[default]
    Rdm,
    /// Connected endpoints: the target listens on a passive endpoint and
    /// accepts one connection per initiator, which is also how each side
    /// learns of the other's death (no control connection).
    Msg,
}

impl std::str::FromStr for EpKind {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<EpKind, String> {
        match s {
            "rdm" => Ok(EpKind::Rdm),
            "msg" => Ok(EpKind::Msg),
            e => Err(format!("unknown endpoint type '{e}' (rdm|msg)")),
        }
    }
}

/// Which fabric to use.
#[derive(Clone, Debug, Default)]
pub struct NetOptions {
    /// Provider name (`shm`, `tcp`, …); the best offer when None.
    pub provider: Option<String>,
    /// Endpoint type.
    pub ep: EpKind,
    /// Local address the endpoint should use (tcp: the interface), if any.
    pub node: Option<String>,
}

impl NetOptions {
    /// The first offer with FI_MSG and FI_RMA for these options: an RDM
    /// offer, or with [`EpKind::Msg`] an MSG offer to connect from.
    pub fn offer(&self) -> Result<Info> {
        if self.ep == EpKind::Msg {
            return self.msg_offer(self.node.as_deref(), None, false);
        }
        // FI_SOURCE when the provider has it: the target then knows each
        // capsule's sender by its address, not only by what it claims.
        // Manual progress (the provider's default): the drivers poll the
        // channel on every pass and sleep on its fd, which the provider
        // makes readable when a socket is; an auto progress thread would
        // add a thread hand-off to every message (measured on tcp: 2 to 4
        // times the CPU time per request, and lower IOPS).
        self.offer_with(FI_MSG | FI_RMA | FI_SOURCE)
            .or_else(|_| self.offer_with(FI_MSG | FI_RMA))
    }

    /// An MSG offer with FI_MSG and FI_RMA for `node` and `service`: with
    /// `source`, the address a target listens on (`src_addr`); without,
    /// the target to connect to (`dest_addr`).
    pub fn msg_offer(
        &self,
        node: Option<&str>,
        service: Option<&str>,
        source: bool,
    ) -> Result<Info> {
        let flags = if source { FI_SOURCE } else { 0 };
        let which = match &self.provider {
            Some(p) => format!("provider {p}"),
            None => "any provider".to_string(),
        };
        self.first(ep_type::FI_EP_MSG, FI_MSG | FI_RMA, node, service, flags)
            .map_err(|e| match e.code() {
                ofi::errno::FI_ENODATA => ofi::Error::nodata(format!(
                    "storage: {which} has no MSG (connected) offer with FI_MSG and FI_RMA \
                     (use -e rdm, or a provider with MSG endpoints such as tcp)"
                )),
                _ => e,
            })
    }

    fn offer_with(&self, caps: u64) -> Result<Info> {
        let flags = if self.node.is_some() { FI_SOURCE } else { 0 };
        self.first(ep_type::FI_EP_RDM, caps, self.node.as_deref(), None, flags)
    }

    /// getinfo's first offer of `ep` endpoints with `caps` from the
    /// provider asked for (FI_ENODATA when there is none).
    fn first(
        &self,
        ep: u32,
        caps: u64,
        node: Option<&str>,
        service: Option<&str>,
        flags: u64,
    ) -> Result<Info> {
        let mut hints = Info::hints();
        hints.caps = caps;
        hints.mode = FI_CONTEXT | FI_CONTEXT2;
        hints.ep_attr.ep_type = ep;
        hints.fabric_attr.prov_name = self.provider.clone();
        ofi::getinfo(FI_VERSION_CURRENT, node, service, flags, Some(&hints))?
            .into_iter()
            .next()
            .ok_or_else(|| ofi::Error::nodata("storage: no offer with FI_MSG and FI_RMA"))
    }
}

/// The socket address in a `struct sockaddr_in` / `sockaddr_in6` fabric
/// address (FI_SOCKADDR, FI_SOCKADDR_IN, FI_SOCKADDR_IN6: family in host
/// order, port in network order), if it is one.
pub fn sockaddr(b: &[u8]) -> Option<SocketAddr> {
    let family = u16::from_ne_bytes([*b.first()?, *b.get(1)?]);
    let port = u16::from_be_bytes([*b.get(2)?, *b.get(3)?]);
    match family {
        2 => {
            let ip: [u8; 4] = b.get(4..8)?.try_into().ok()?;
            Some(SocketAddr::from((ip, port)))
        }
        10 => {
            let ip: [u8; 16] = b.get(8..24)?.try_into().ok()?;
            Some(SocketAddr::from((ip, port)))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockaddrs_decode() {
        let mut v4 = vec![0u8; 16];
        v4[..2].copy_from_slice(&2u16.to_ne_bytes());
        v4[2..4].copy_from_slice(&9230u16.to_be_bytes());
        v4[4..8].copy_from_slice(&[127, 0, 0, 1]);
        assert_eq!(sockaddr(&v4), "127.0.0.1:9230".parse().ok());
        let mut v6 = vec![0u8; 28];
        v6[..2].copy_from_slice(&10u16.to_ne_bytes());
        v6[2..4].copy_from_slice(&80u16.to_be_bytes());
        v6[23] = 1;
        assert_eq!(sockaddr(&v6), "[::1]:80".parse().ok());
        assert_eq!(sockaddr(&v4[..6]), None);
        assert_eq!(sockaddr(b"shm-name"), None);
    }
}
