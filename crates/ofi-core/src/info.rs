//! `Info` and its attributes: what a provider offers, and what hints ask for.
//!
//! Field meanings and numeric values follow `fi_getinfo(3)`. In hints, zero
//! (or `None`) means "unspecified".

use crate::consts::*;
use crate::typed::{AddrFormat, Caps, EpType, Mode, MrMode, Progress, Threading, UnknownValue};
use std::fmt::{self, Write as _};

/// Transmit context attributes (`struct fi_tx_attr`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TxAttr {
    /// Capabilities of the transmit context.
    pub caps: u64,
    /// Modes required.
    pub mode: u64,
    /// Default operation flags.
    pub op_flags: u64,
    /// Message ordering guaranteed.
    pub msg_order: u64,
    /// Completion ordering.
    pub comp_order: u64,
    /// Largest message sent with FI_INJECT.
    pub inject_size: usize,
    /// Queue depth.
    pub size: usize,
    /// Largest iov count.
    pub iov_limit: usize,
    /// Largest RMA iov count.
    pub rma_iov_limit: usize,
    /// Traffic class.
    pub tclass: u32,
}

/// Receive context attributes (`struct fi_rx_attr`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RxAttr {
    /// Capabilities of the receive context.
    pub caps: u64,
    /// Modes required.
    pub mode: u64,
    /// Default operation flags.
    pub op_flags: u64,
    /// Message ordering guaranteed.
    pub msg_order: u64,
    /// Completion ordering.
    pub comp_order: u64,
    /// Buffered receive space.
    pub total_buffered_recv: usize,
    /// Queue depth.
    pub size: usize,
    /// Largest iov count.
    pub iov_limit: usize,
}

/// Endpoint attributes (`struct fi_ep_attr`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EpAttr {
    /// Endpoint type (`ep_type::*`).
    pub ep_type: u32,
    /// Protocol (`protocol::*`).
    pub protocol: u32,
    /// Protocol version.
    pub protocol_version: u32,
    /// Largest message.
    pub max_msg_size: usize,
    /// Prefix space.
    pub msg_prefix_size: usize,
    /// Read-after-write ordering size.
    pub max_order_raw_size: usize,
    /// Write-after-read ordering size.
    pub max_order_war_size: usize,
    /// Write-after-write ordering size.
    pub max_order_waw_size: usize,
    /// Tag format.
    pub mem_tag_format: u64,
    /// Transmit contexts.
    pub tx_ctx_cnt: usize,
    /// Receive contexts.
    pub rx_ctx_cnt: usize,
    /// Authorization key.
    pub auth_key: Option<Vec<u8>>,
}

/// Domain attributes (`struct fi_domain_attr`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DomainAttr {
    /// Domain name.
    pub name: Option<String>,
    /// Threading model (`threading::*`).
    pub threading: u32,
    /// Control progress (`progress::*`).
    pub control_progress: u32,
    /// Data progress (`progress::*`).
    pub data_progress: u32,
    /// Resource management.
    pub resource_mgmt: u32,
    /// AV type (`av_type::*`).
    pub av_type: u32,
    /// MR mode bits (`mr_mode::*`).
    pub mr_mode: u32,
    /// Key size.
    pub mr_key_size: usize,
    /// Remote CQ data size.
    pub cq_data_size: usize,
    /// CQ count.
    pub cq_cnt: usize,
    /// Endpoint count.
    pub ep_cnt: usize,
    /// Transmit context count.
    pub tx_ctx_cnt: usize,
    /// Receive context count.
    pub rx_ctx_cnt: usize,
    /// Transmit contexts per endpoint.
    pub max_ep_tx_ctx: usize,
    /// Receive contexts per endpoint.
    pub max_ep_rx_ctx: usize,
    /// Shared transmit contexts per endpoint.
    pub max_ep_stx_ctx: usize,
    /// Shared receive contexts per endpoint.
    pub max_ep_srx_ctx: usize,
    /// Counter count.
    pub cntr_cnt: usize,
    /// Largest iov in one registration.
    pub mr_iov_limit: usize,
    /// Domain capabilities.
    pub caps: u64,
    /// Domain modes.
    pub mode: u64,
    /// Authorization key.
    pub auth_key: Option<Vec<u8>>,
    /// Provider error data size.
    pub max_err_data: usize,
    /// Largest number of regions.
    pub mr_cnt: usize,
    /// Traffic class.
    pub tclass: u32,
}

/// Fabric attributes (`struct fi_fabric_attr`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FabricAttr {
    /// Fabric name.
    pub name: Option<String>,
    /// Provider name; in hints, an FI_PROVIDER-style list (`shm`, `shm,tcp`, `^tcp`).
    pub prov_name: Option<String>,
    /// Provider version.
    pub prov_version: u32,
    /// API version.
    pub api_version: u32,
}

/// A pending connection request (`fi_info.handle` of an FI_CONNREQ event):
/// passed back to open the accepting endpoint, or to reject the request.
#[derive(Clone)]
pub struct ConnHandle(pub std::sync::Arc<dyn std::any::Any + Send + Sync>);

impl PartialEq for ConnHandle {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for ConnHandle {}

impl std::fmt::Debug for ConnHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ConnHandle({:p})", std::sync::Arc::as_ptr(&self.0))
    }
}

/// One provider offer (`struct fi_info`), or hints when passed to getinfo.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Info {
    /// Capabilities.
    pub caps: u64,
    /// Modes the application supports (hints) or the provider requires (offer).
    pub mode: u64,
    /// Address format (`addr_format::*`).
    pub addr_format: u32,
    /// Source address.
    pub src_addr: Option<Vec<u8>>,
    /// Destination address.
    pub dest_addr: Option<Vec<u8>>,
    /// The connection request this offer answers (FI_CONNREQ), if any.
    pub handle: Option<ConnHandle>,
    /// Transmit attributes.
    pub tx_attr: TxAttr,
    /// Receive attributes.
    pub rx_attr: RxAttr,
    /// Endpoint attributes.
    pub ep_attr: EpAttr,
    /// Domain attributes.
    pub domain_attr: DomainAttr,
    /// Fabric attributes.
    pub fabric_attr: FabricAttr,
}

impl DomainAttr {
    /// The memory-registration modes in force for `mr_mode`: FI_MR_BASIC
    /// is FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY and
    /// FI_MR_SCALABLE none of them (`fi_mr(3)`). Applications keep the old
    /// names in their offers; providers and regions act on these bits.
    pub fn mr_mode_in_force(&self) -> u32 {
        use crate::consts::mr_mode::*;
        let m = self.mr_mode;
        if m & FI_MR_BASIC != 0 {
            (m & !FI_MR_BASIC) | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY
        } else {
            m & !FI_MR_SCALABLE
        }
    }
}

/// The capabilities of an offer that its transmit attributes carry
/// (`tx_attr.caps` is the offer's `caps` masked with these): the
/// operations an endpoint starts, and what qualifies them.
pub const TX_CAPS: u64 = FI_MSG
    | FI_TAGGED
    | FI_SEND
    | FI_MULTICAST
    | FI_RMA
    | FI_ATOMIC
    | FI_READ
    | FI_WRITE
    | FI_TRIGGER
    | FI_FENCE;

/// The capabilities of an offer that its receive attributes carry
/// (`rx_attr.caps` is the offer's `caps` masked with these): what an
/// endpoint receives, and what peers may do to its memory.
pub const RX_CAPS: u64 = FI_MSG
    | FI_TAGGED
    | FI_RECV
    | FI_MULTI_RECV
    | FI_SOURCE
    | FI_DIRECTED_RECV
    | FI_MULTICAST
    | FI_RMA
    | FI_ATOMIC
    | FI_REMOTE_READ
    | FI_REMOTE_WRITE
    | FI_RMA_EVENT;

impl Info {
    /// What every offer of a provider built on the core's objects says
    /// alike: provider `prov` at `version`, for the current API, in a
    /// fabric and a domain named after it; endpoints with one transmit and
    /// one receive context (protocol version 1); a thread-safe domain with
    /// resource management, either AV type, and 8 bytes of CQ data, as the
    /// core's objects provide. The provider fills in the rest: the
    /// capabilities ([`with_caps`](Self::with_caps)), addresses, the
    /// context attributes, the endpoint's type and sizes, progress,
    /// memory registration and object counts.
    pub fn offer(prov: &str, version: u32) -> Info {
        Info {
            ep_attr: EpAttr {
                protocol_version: 1,
                tx_ctx_cnt: 1,
                rx_ctx_cnt: 1,
                ..Default::default()
            },
            domain_attr: DomainAttr {
                name: Some(prov.into()),
                threading: threading::FI_THREAD_SAFE,
                resource_mgmt: resource_mgmt::FI_RM_ENABLED,
                av_type: av_type::FI_AV_UNSPEC,
                cq_data_size: 8,
                max_ep_tx_ctx: 1,
                max_ep_rx_ctx: 1,
                ..Default::default()
            },
            fabric_attr: FabricAttr {
                name: Some(prov.into()),
                prov_name: Some(prov.into()),
                prov_version: version,
                api_version: FI_VERSION_CURRENT,
            },
            ..Default::default()
        }
    }

    /// This offer with capabilities `caps`, and the part of them each
    /// context carries in its attributes ([`TX_CAPS`], [`RX_CAPS`]).
    pub fn with_caps(mut self, caps: u64) -> Info {
        self.caps = caps;
        self.tx_attr.caps = caps & TX_CAPS;
        self.rx_attr.caps = caps & RX_CAPS;
        self
    }

    /// A copy with the memory-registration modes in force (see
    /// [`DomainAttr::mr_mode_in_force`]): what objects opened with this
    /// offer hand to providers.
    pub fn in_force(&self) -> Info {
        let mut i = self.clone();
        i.domain_attr.mr_mode = self.domain_attr.mr_mode_in_force();
        i
    }

    /// Empty hints: everything unspecified.
    pub fn hints() -> Self {
        Self::default()
    }
    /// The provider name of an offer.
    pub fn provider(&self) -> &str {
        self.fabric_attr.prov_name.as_deref().unwrap_or("")
    }

    /// The capabilities as a typed set (unnamed bits kept).
    pub fn caps(&self) -> Caps {
        Caps::from_bits_retain(self.caps)
    }

    /// The modes as a typed set (unnamed bits kept).
    pub fn mode(&self) -> Mode {
        Mode::from_bits_retain(self.mode)
    }

    /// The endpoint type; a number ofi does not know is refused.
    pub fn ep_type(&self) -> Result<EpType, UnknownValue> {
        EpType::try_from(self.ep_attr.ep_type)
    }

    /// The address format; a number ofi does not know is refused.
    pub fn addr_format(&self) -> Result<AddrFormat, UnknownValue> {
        AddrFormat::try_from(self.addr_format)
    }

    /// The domain's threading model.
    pub fn threading(&self) -> Result<Threading, UnknownValue> {
        Threading::try_from(self.domain_attr.threading)
    }

    /// The domain's data progress model (who drives transfers).
    pub fn progress(&self) -> Result<Progress, UnknownValue> {
        Progress::try_from(self.domain_attr.data_progress)
    }

    /// The domain's memory-registration modes as a typed set.
    pub fn mr_mode(&self) -> MrMode {
        MrMode::from_bits_retain(self.domain_attr.mr_mode)
    }

    /// The one-offer summary `ofi info` prints without `-v` (the verbose
    /// form is this `Info`'s own `Display`).
    pub fn summary(&self) -> Summary<'_> {
        Summary(self)
    }
}

/// An offer's short form, as `fi_info` lists offers (see [`Info::summary`]).
#[derive(Clone, Copy, Debug)]
pub struct Summary<'a>(&'a Info);

impl fmt::Display for Summary<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let info = self.0;
        writeln!(f, "provider: {}", info.provider())?;
        writeln!(
            f,
            "    fabric: {}",
            info.fabric_attr.name.as_deref().unwrap_or("(null)")
        )?;
        writeln!(
            f,
            "    domain: {}",
            info.domain_attr.name.as_deref().unwrap_or("(null)")
        )?;
        writeln!(
            f,
            "    version: {}",
            version_str(info.fabric_attr.prov_version)
        )?;
        writeln!(
            f,
            "    type: {}",
            enum_str(EP_TYPE_NAMES, info.ep_attr.ep_type)
        )?;
        writeln!(
            f,
            "    protocol: {}",
            enum_str(PROTOCOL_NAMES, info.ep_attr.protocol)
        )
    }
}

/// Formats an address by its format, the way `fi_info` prints it.
pub fn addr_to_string(format: u32, addr: &[u8]) -> String {
    match format {
        addr_format::FI_ADDR_STR => {
            let end = addr.iter().position(|&b| b == 0).unwrap_or(addr.len());
            String::from_utf8_lossy(&addr[..end]).into_owned()
        }
        addr_format::FI_SOCKADDR_IN if addr.len() >= 8 => {
            let port = u16::from_be_bytes([addr[2], addr[3]]);
            format!(
                "fi_sockaddr_in://{}.{}.{}.{}:{}",
                addr[4], addr[5], addr[6], addr[7], port
            )
        }
        addr_format::FI_SOCKADDR_IN6 if addr.len() >= 24 => {
            let port = u16::from_be_bytes([addr[2], addr[3]]);
            let mut o = [0u8; 16];
            o.copy_from_slice(&addr[8..24]);
            format!(
                "fi_sockaddr_in6://[{}]:{}",
                std::net::Ipv6Addr::from(o),
                port
            )
        }
        _ => {
            let mut s = String::from("fi_addr_unspec://");
            for b in addr {
                let _ = write!(s, "{b:02x}");
            }
            s
        }
    }
}

fn version_str(v: u32) -> String {
    format!("{}.{}", v >> 16, v & 0xffff)
}

fn enum_str(table: &[(u32, &'static str)], v: u32) -> String {
    enum_name(table, v)
        .map(str::to_owned)
        .unwrap_or_else(|| format!("Unknown ({v})"))
}

/// msg_order as libfabric prints it: no bits, no names (FI_ORDER_NONE is
/// named only for comp_order).
fn msg_order_str(v: u64) -> String {
    if v == order::FI_ORDER_NONE {
        bits_to_string(ORDER_NAMES, v)
    } else {
        order_str(v)
    }
}

fn order_str(v: u64) -> String {
    if v == order::FI_ORDER_NONE {
        "[ FI_ORDER_NONE ]".into()
    } else if v & order::FI_ORDER_STRICT == order::FI_ORDER_STRICT && v == order::FI_ORDER_STRICT {
        "[ FI_ORDER_STRICT ]".into()
    } else {
        bits_to_string(ORDER_NAMES, v)
    }
}

impl fmt::Display for TxAttr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "    fi_tx_attr:")?;
        writeln!(f, "        caps: {}", bits_to_string(CAP_NAMES, self.caps))?;
        writeln!(f, "        mode: {}", bits_to_string(MODE_NAMES, self.mode))?;
        writeln!(
            f,
            "        op_flags: {}",
            bits_to_string(OP_FLAG_NAMES, self.op_flags)
        )?;
        writeln!(f, "        msg_order: {}", msg_order_str(self.msg_order))?;
        writeln!(f, "        comp_order: {}", order_str(self.comp_order))?;
        writeln!(f, "        inject_size: {}", self.inject_size)?;
        writeln!(f, "        size: {}", self.size)?;
        writeln!(f, "        iov_limit: {}", self.iov_limit)?;
        writeln!(f, "        rma_iov_limit: {}", self.rma_iov_limit)?;
        writeln!(f, "        tclass: {:#x}", self.tclass)
    }
}

impl fmt::Display for RxAttr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "    fi_rx_attr:")?;
        writeln!(f, "        caps: {}", bits_to_string(CAP_NAMES, self.caps))?;
        writeln!(f, "        mode: {}", bits_to_string(MODE_NAMES, self.mode))?;
        writeln!(
            f,
            "        op_flags: {}",
            bits_to_string(OP_FLAG_NAMES, self.op_flags)
        )?;
        writeln!(f, "        msg_order: {}", msg_order_str(self.msg_order))?;
        writeln!(f, "        comp_order: {}", order_str(self.comp_order))?;
        writeln!(
            f,
            "        total_buffered_recv: {}",
            self.total_buffered_recv
        )?;
        writeln!(f, "        size: {}", self.size)?;
        writeln!(f, "        iov_limit: {}", self.iov_limit)
    }
}

impl fmt::Display for EpAttr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "    fi_ep_attr:")?;
        writeln!(f, "        type: {}", enum_str(EP_TYPE_NAMES, self.ep_type))?;
        writeln!(
            f,
            "        protocol: {}",
            enum_str(PROTOCOL_NAMES, self.protocol)
        )?;
        writeln!(f, "        protocol_version: {}", self.protocol_version)?;
        writeln!(f, "        max_msg_size: {}", self.max_msg_size)?;
        writeln!(f, "        msg_prefix_size: {}", self.msg_prefix_size)?;
        writeln!(f, "        max_order_raw_size: {}", self.max_order_raw_size)?;
        writeln!(f, "        max_order_war_size: {}", self.max_order_war_size)?;
        writeln!(f, "        max_order_waw_size: {}", self.max_order_waw_size)?;
        writeln!(f, "        mem_tag_format: {:#018x}", self.mem_tag_format)?;
        writeln!(f, "        tx_ctx_cnt: {}", self.tx_ctx_cnt)?;
        writeln!(f, "        rx_ctx_cnt: {}", self.rx_ctx_cnt)?;
        writeln!(
            f,
            "        auth_key_size: {}",
            self.auth_key.as_ref().map_or(0, Vec::len)
        )
    }
}

impl fmt::Display for DomainAttr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "    fi_domain_attr:")?;
        writeln!(f, "        domain: 0x0")?;
        writeln!(
            f,
            "        name: {}",
            self.name.as_deref().unwrap_or("(null)")
        )?;
        writeln!(
            f,
            "        threading: {}",
            enum_str(THREADING_NAMES, self.threading)
        )?;
        writeln!(
            f,
            "        control_progress: {}",
            enum_str(PROGRESS_NAMES, self.control_progress)
        )?;
        writeln!(
            f,
            "        data_progress: {}",
            enum_str(PROGRESS_NAMES, self.data_progress)
        )?;
        writeln!(
            f,
            "        resource_mgmt: {}",
            enum_str(RM_NAMES, self.resource_mgmt)
        )?;
        writeln!(
            f,
            "        av_type: {}",
            enum_str(AV_TYPE_NAMES, self.av_type)
        )?;
        writeln!(
            f,
            "        mr_mode: {}",
            bits_to_string(MR_MODE_NAMES, u64::from(self.mr_mode))
        )?;
        writeln!(f, "        mr_key_size: {}", self.mr_key_size)?;
        writeln!(f, "        cq_data_size: {}", self.cq_data_size)?;
        writeln!(f, "        cq_cnt: {}", self.cq_cnt)?;
        writeln!(f, "        ep_cnt: {}", self.ep_cnt)?;
        writeln!(f, "        tx_ctx_cnt: {}", self.tx_ctx_cnt)?;
        writeln!(f, "        rx_ctx_cnt: {}", self.rx_ctx_cnt)?;
        writeln!(f, "        max_ep_tx_ctx: {}", self.max_ep_tx_ctx)?;
        writeln!(f, "        max_ep_rx_ctx: {}", self.max_ep_rx_ctx)?;
        writeln!(f, "        max_ep_stx_ctx: {}", self.max_ep_stx_ctx)?;
        writeln!(f, "        max_ep_srx_ctx: {}", self.max_ep_srx_ctx)?;
        writeln!(f, "        cntr_cnt: {}", self.cntr_cnt)?;
        writeln!(f, "        mr_iov_limit: {}", self.mr_iov_limit)?;
        writeln!(f, "        caps: {}", bits_to_string(CAP_NAMES, self.caps))?;
        writeln!(f, "        mode: {}", bits_to_string(MODE_NAMES, self.mode))?;
        writeln!(
            f,
            "        auth_key_size: {}",
            self.auth_key.as_ref().map_or(0, Vec::len)
        )?;
        writeln!(f, "        max_err_data: {}", self.max_err_data)?;
        writeln!(f, "        mr_cnt: {}", self.mr_cnt)?;
        writeln!(f, "        tclass: {:#x}", self.tclass)
    }
}

impl fmt::Display for FabricAttr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "    fi_fabric_attr:")?;
        writeln!(
            f,
            "        name: {}",
            self.name.as_deref().unwrap_or("(null)")
        )?;
        writeln!(
            f,
            "        prov_name: {}",
            self.prov_name.as_deref().unwrap_or("(null)")
        )?;
        writeln!(
            f,
            "        prov_version: {}",
            version_str(self.prov_version)
        )?;
        writeln!(f, "        api_version: {}", version_str(self.api_version))
    }
}

impl fmt::Display for Info {
    /// The verbose form `fi_info -v` prints (`fi_tostr(info, FI_TYPE_INFO)`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "fi_info:")?;
        writeln!(f, "    caps: {}", bits_to_string(CAP_NAMES, self.caps))?;
        writeln!(f, "    mode: {}", bits_to_string(MODE_NAMES, self.mode))?;
        writeln!(
            f,
            "    addr_format: {}",
            enum_str(ADDR_FORMAT_NAMES, self.addr_format)
        )?;
        writeln!(
            f,
            "    src_addrlen: {}",
            self.src_addr.as_ref().map_or(0, Vec::len)
        )?;
        writeln!(
            f,
            "    dest_addrlen: {}",
            self.dest_addr.as_ref().map_or(0, Vec::len)
        )?;
        match &self.src_addr {
            Some(a) => writeln!(f, "    src_addr: {}", addr_to_string(self.addr_format, a))?,
            None => writeln!(f, "    src_addr: (null)")?,
        }
        match &self.dest_addr {
            Some(a) => writeln!(f, "    dest_addr: {}", addr_to_string(self.addr_format, a))?,
            None => writeln!(f, "    dest_addr: (null)")?,
        }
        match &self.handle {
            Some(h) => writeln!(f, "    handle: {:p}", std::sync::Arc::as_ptr(&h.0))?,
            None => writeln!(f, "    handle: (nil)")?,
        }
        write!(f, "{}", self.tx_attr)?;
        write!(f, "{}", self.rx_attr)?;
        write!(f, "{}", self.ep_attr)?;
        write!(f, "{}", self.domain_attr)?;
        write!(f, "{}", self.fabric_attr)?;
        writeln!(f, "    nic: (nil)")
    }
}

/// The short summary `fi_info` prints per offer (as [`Info::summary`]).
pub fn short_summary(info: &Info) -> String {
    info.summary().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_context_carries_its_side_of_the_caps() {
        let o = Info::offer("p", fi_version(1, 2)).with_caps(
            FI_MSG | FI_SEND | FI_RECV | FI_RMA | FI_REMOTE_WRITE | FI_SOURCE | FI_LOCAL_COMM,
        );
        assert_eq!(o.tx_attr.caps, FI_MSG | FI_SEND | FI_RMA);
        assert_eq!(
            o.rx_attr.caps,
            FI_MSG | FI_RECV | FI_RMA | FI_REMOTE_WRITE | FI_SOURCE
        );
        assert_eq!(o.provider(), "p");
        assert_eq!(o.fabric_attr.prov_version, fi_version(1, 2));
        assert_eq!(o.domain_attr.name.as_deref(), Some("p"));
    }
}
