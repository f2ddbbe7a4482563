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
        // Auto progress where the provider has it (tcp): the peer's RMA
        // into this side's buffers moves while the driver sleeps, instead
        // of waiting for its next poll.
        let auto = progress::FI_PROGRESS_AUTO;
        self.offer_with(FI_MSG | FI_RMA | FI_SOURCE, auto)
            .or_else(|_| self.offer_with(FI_MSG | FI_RMA | FI_SOURCE, 0))
            .or_else(|_| self.offer_with(FI_MSG | FI_RMA, 0))
    }

    fn offer_with(&self, caps: u64, data_progress: u32) -> Result<Info> {
        let mut hints = Info::hints();
        hints.caps = caps;
        hints.domain_attr.data_progress = data_progress;
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
