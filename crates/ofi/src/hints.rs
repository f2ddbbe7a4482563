//! The hints builder: what an application asks of a provider, typed.
//!
//! ```no_run
//! use ofi::{Caps, EpType, Hints};
//! let offers = Hints::new()
//!     .caps(Caps::MSG | Caps::TAGGED)
//!     .ep_type(EpType::Rdm)
//!     .provider("shm")
//!     .getinfo()?;
//! for offer in &offers {
//!     print!("{}", offer.summary());
//! }
//! # Ok::<(), ofi::Error>(())
//! ```
//!
//! Each setter fills the raw [`Info`] field the C ABI reads (libfabric's
//! numbers underneath); [`Hints::info`] gives that `Info` for calls that
//! take one, and [`Hints::raw`] reaches fields without a setter.

use crate::consts::{FI_SOURCE, FI_VERSION_CURRENT};
use crate::{
    AddrFormat, AvType, Caps, EpType, Info, Mode, MrMode, MsgOrder, OpFlags, Progress, Result,
    Threading,
};

/// Hints for [`getinfo`](Hints::getinfo), built field by field with typed
/// values; unset fields mean "any".
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[must_use]
pub struct Hints {
    info: Info,
    node: Option<String>,
    service: Option<String>,
    flags: u64,
    version: Option<u32>,
}

impl Hints {
    /// Empty hints: every offer matches.
    pub fn new() -> Hints {
        Hints::default()
    }

    /// Capabilities the application needs (`fi_info.caps`).
    pub fn caps(mut self, caps: Caps) -> Hints {
        self.info.caps = caps.bits();
        self
    }

    /// Modes the application supports (`fi_info.mode`).
    pub fn mode(mut self, mode: Mode) -> Hints {
        self.info.mode = mode.bits();
        self
    }

    /// Endpoint type (`ep_attr.type`).
    pub fn ep_type(mut self, t: EpType) -> Hints {
        self.info.ep_attr.ep_type = t.into();
        self
    }

    /// Address format (`fi_info.addr_format`).
    pub fn addr_format(mut self, f: AddrFormat) -> Hints {
        self.info.addr_format = f.into();
        self
    }

    /// Provider name, or an FI_PROVIDER-style list (`shm`, `shm,tcp`, `^tcp`).
    pub fn provider(mut self, name: impl Into<String>) -> Hints {
        self.info.fabric_attr.prov_name = Some(name.into());
        self
    }

    /// Fabric name (`fabric_attr.name`).
    pub fn fabric(mut self, name: impl Into<String>) -> Hints {
        self.info.fabric_attr.name = Some(name.into());
        self
    }

    /// Domain name (`domain_attr.name`).
    pub fn domain(mut self, name: impl Into<String>) -> Hints {
        self.info.domain_attr.name = Some(name.into());
        self
    }

    /// Threading model (`domain_attr.threading`).
    pub fn threading(mut self, t: Threading) -> Hints {
        self.info.domain_attr.threading = t.into();
        self
    }

    /// Progress model for both data and control (`domain_attr.*_progress`).
    pub fn progress(mut self, p: Progress) -> Hints {
        self.info.domain_attr.data_progress = p.into();
        self.info.domain_attr.control_progress = p.into();
        self
    }

    /// Memory-registration modes the application supports (`domain_attr.mr_mode`).
    pub fn mr_mode(mut self, m: MrMode) -> Hints {
        self.info.domain_attr.mr_mode = m.bits();
        self
    }

    /// Address vector type (`domain_attr.av_type`).
    pub fn av_type(mut self, t: AvType) -> Hints {
        self.info.domain_attr.av_type = t.into();
        self
    }

    /// Default transmit operation flags (`tx_attr.op_flags`), e.g. a
    /// completion level such as [`OpFlags::DELIVERY_COMPLETE`].
    pub fn tx_op_flags(mut self, f: OpFlags) -> Hints {
        self.info.tx_attr.op_flags = f.bits();
        self
    }

    /// Default receive operation flags (`rx_attr.op_flags`).
    pub fn rx_op_flags(mut self, f: OpFlags) -> Hints {
        self.info.rx_attr.op_flags = f.bits();
        self
    }

    /// Message ordering needed on both sides (`tx_attr` and `rx_attr.msg_order`).
    pub fn msg_order(mut self, o: MsgOrder) -> Hints {
        self.info.tx_attr.msg_order = o.bits();
        self.info.rx_attr.msg_order = o.bits();
        self
    }

    /// Authorisation key endpoints must share (`ep_attr.auth_key`).
    pub fn auth_key(mut self, key: impl Into<Vec<u8>>) -> Hints {
        self.info.ep_attr.auth_key = Some(key.into());
        self
    }

    /// The node (host name or address) to reach or, with
    /// [`source`](Self::source), to bind.
    pub fn node(mut self, node: impl Into<String>) -> Hints {
        self.node = Some(node.into());
        self
    }

    /// The service (port).
    pub fn service(mut self, service: impl Into<String>) -> Hints {
        self.service = Some(service.into());
        self
    }

    /// Node and service name the local address to listen on (FI_SOURCE),
    /// not a peer.
    pub fn source(mut self, yes: bool) -> Hints {
        if yes {
            self.flags |= FI_SOURCE;
        } else {
            self.flags &= !FI_SOURCE;
        }
        self
    }

    /// The API version asked for (default: the one ofi implements).
    pub fn version(mut self, v: u32) -> Hints {
        self.version = Some(v);
        self
    }

    /// The raw hints, as `fi_getinfo` takes them.
    pub fn info(&self) -> &Info {
        &self.info
    }

    /// The raw hints, for fields without a typed setter.
    pub fn raw(&mut self) -> &mut Info {
        &mut self.info
    }

    /// Every offer satisfying the hints, best first (`fi_getinfo`);
    /// `FI_ENODATA` when none does.
    pub fn getinfo(&self) -> Result<Vec<Info>> {
        crate::getinfo(
            self.version.unwrap_or(FI_VERSION_CURRENT),
            self.node.as_deref(),
            self.service.as_deref(),
            self.flags,
            Some(&self.info),
        )
    }

    /// The best offer.
    pub fn first(&self) -> Result<Info> {
        let mut v = self.getinfo()?;
        if v.is_empty() {
            return Err(crate::Error::nodata("getinfo: no offer matches the hints"));
        }
        Ok(v.swap_remove(0))
    }
}

impl From<Hints> for Info {
    fn from(h: Hints) -> Info {
        h.info
    }
}

impl From<Info> for Hints {
    /// Starts from raw hints (or an offer, to ask for one like it).
    fn from(info: Info) -> Hints {
        Hints {
            info,
            ..Hints::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consts::*;

    #[test]
    fn setters_fill_the_raw_fields_with_libfabric_numbers() {
        let h = Hints::new()
            .caps(Caps::MSG | Caps::RMA)
            .mode(Mode::CONTEXT)
            .ep_type(EpType::Msg)
            .addr_format(AddrFormat::SockaddrIn)
            .provider("tcp")
            .threading(Threading::Domain)
            .progress(Progress::Manual)
            .mr_mode(MrMode::VIRT_ADDR | MrMode::PROV_KEY)
            .tx_op_flags(OpFlags::DELIVERY_COMPLETE)
            .msg_order(MsgOrder::SAS);
        let i = h.info();
        assert_eq!(i.caps, FI_MSG | FI_RMA);
        assert_eq!(i.mode, FI_CONTEXT);
        assert_eq!(i.ep_attr.ep_type, ep_type::FI_EP_MSG);
        assert_eq!(i.addr_format, addr_format::FI_SOCKADDR_IN);
        assert_eq!(i.fabric_attr.prov_name.as_deref(), Some("tcp"));
        assert_eq!(i.domain_attr.threading, threading::FI_THREAD_DOMAIN);
        assert_eq!(i.domain_attr.data_progress, progress::FI_PROGRESS_MANUAL);
        assert_eq!(i.domain_attr.control_progress, progress::FI_PROGRESS_MANUAL);
        assert_eq!(
            i.domain_attr.mr_mode,
            mr_mode::FI_MR_VIRT_ADDR | mr_mode::FI_MR_PROV_KEY
        );
        assert_eq!(i.tx_attr.op_flags, FI_DELIVERY_COMPLETE);
        assert_eq!(i.rx_attr.msg_order, order::FI_ORDER_SAS);
        // Typed back from the raw fields.
        assert_eq!(i.caps(), Caps::MSG | Caps::RMA);
        assert_eq!(i.ep_type(), Ok(EpType::Msg));
    }

    #[test]
    fn getinfo_answers_the_typed_hints() {
        let offers = Hints::new()
            .caps(Caps::TAGGED)
            .ep_type(EpType::Rdm)
            .provider("shm")
            .getinfo()
            .expect("shm offers");
        assert!(!offers.is_empty());
        for o in &offers {
            assert_eq!(o.provider(), "shm");
            assert!(o.caps().contains(Caps::TAGGED));
            assert_eq!(o.ep_type(), Ok(EpType::Rdm));
            let s = o.summary().to_string();
            assert!(s.starts_with("provider: shm\n"), "{s}");
            assert!(s.contains("type: FI_EP_RDM"), "{s}");
        }
        // No provider does what nobody offers.
        let e = Hints::new().provider("nosuch").first().unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::NotFound);
    }
}
