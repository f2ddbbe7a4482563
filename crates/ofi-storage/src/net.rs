//! Choosing the fabric offer both sides open: an RDM (or MSG) endpoint
//! with messages and RMA from the provider asked for.

use ofi::consts::*;
use ofi::{Info, Result};

/// Endpoint type of the data path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum EpKind {
    /// Reliable datagrams (one endpoint serves every initiator).
    #[default]
    Rdm,
    /// Connected endpoints.
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
    /// The first offer with FI_MSG and FI_RMA for these options.
    pub fn offer(&self) -> Result<Info> {
        if self.ep == EpKind::Msg {
            return Err(ofi::Error::new(
                ofi::errno::FI_EOPNOTSUPP,
                "storage: MSG endpoints are not supported yet (use -e rdm)",
            ));
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

    fn offer_with(&self, caps: u64) -> Result<Info> {
        let mut hints = Info::hints();
        hints.caps = caps;
        hints.mode = FI_CONTEXT | FI_CONTEXT2;
        hints.ep_attr.ep_type = ep_type::FI_EP_RDM;
        hints.fabric_attr.prov_name = self.provider.clone();
        let flags = if self.node.is_some() { FI_SOURCE } else { 0 };
        let infos = ofi::getinfo(
            FI_VERSION_CURRENT,
            self.node.as_deref(),
            None,
            flags,
            Some(&hints),
        )?;
        infos
            .into_iter()
            .next()
            .ok_or_else(|| ofi::Error::nodata("storage: no offer with FI_MSG and FI_RMA"))
    }
}
