//! The udp provider: datagram fabrics, first-class.
//!
//! - **DGRAM endpoints** ([`dgram`]): one UDP datagram per message, with
//!   tags, remote CQ data, source addresses, inject and multicast
//!   (`fi_join`); `max_msg_size` is what one datagram carries on the path
//!   (the interface's MTU; about 64 KiB on loopback).
//! - **RDM endpoints**: reliable, ordered messages, tagged matching, RMA
//!   and atomics over the reliability core of `ofi_proto::udp` (sessions
//!   with epochs and the auth key, a reliable byte stream per peer) carrying
//!   the tcp provider's protocol core (`ofi_proto::tcp`).
//!
//! Offers: one fabric per interface subnet (as tcp), DGRAM (and RDM) on
//! each, non-loopback first.

#![deny(unsafe_code)]

pub mod addr;
mod dgram;
mod domain;
mod sys;

use ofi_core::config::Tunable;
use ofi_core::consts::*;
use ofi_core::error::{Error, Result};
use ofi_core::info::*;
use ofi_core::provider::{AddrOps, DomainOps, EndpointOps, FabricOps, GetinfoRequest, Provider};
use ofi_core::util::auth::AuthKey;
use ofi_core::util::netif;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

/// Provider name.
pub const NAME: &str = "udp";
/// Provider version.
pub const VERSION: u32 = fi_version(0, 1);

/// Settings read from the FI_UDP_* tunables.
#[derive(Clone, Copy, Debug)]
pub struct UdpConfig {
    /// Bytes of socket receive and send buffer asked for.
    pub socket_buffer: usize,
    /// The bound after which a silent peer is dead (FI_UDP_PEER_TIMEOUT_MS).
    pub peer_timeout: Duration,
    /// Default transmit and receive context sizes.
    pub tx_size: usize,
    /// See `tx_size`.
    pub rx_size: usize,
}

impl UdpConfig {
    /// Reads the tunables; a malformed value is an error naming the variable.
    pub fn from_env() -> Result<UdpConfig> {
        let t = tunables();
        let get = |n: &str| t.iter().find(|x| x.name == n).expect("declared tunable");
        let ctx = "a context holds at least one operation";
        Ok(UdpConfig {
            socket_buffer: get("socket_buffer").get_size()?,
            peer_timeout: ofi_core::util::peer::timeout_from(&t)?,
            tx_size: get("tx_size").get_nonzero_size(ctx)?,
            rx_size: get("rx_size").get_nonzero_size(ctx)?,
        })
    }
}

/// The provider's tunables.
pub fn tunables() -> Vec<Tunable> {
    vec![
        Tunable::text(NAME, "iface", "", "Offer only this network interface (by name, e.g. eth0 or lo) when the request names no source address; empty offers every interface that is up"),
        Tunable::size(NAME, "socket_buffer", 4 << 20, "Bytes of socket receive and send buffer each endpoint asks for (beyond net.core.rmem_max only with CAP_NET_ADMIN)"),
        Tunable::size(NAME, "tx_size", 1024, "Default transmit context size the offers advertise"),
        Tunable::size(NAME, "rx_size", 1024, "Default receive context size the offers advertise"),
        ofi_core::util::peer::timeout_tunable(NAME),
    ]
}

/// The udp provider.
#[derive(Debug, Default)]
pub struct UdpProvider;

impl Provider for UdpProvider {
    fn name(&self) -> &str {
        NAME
    }
    fn version(&self) -> u32 {
        VERSION
    }
    fn getinfo(&self, req: &GetinfoRequest<'_>) -> Result<Vec<Info>> {
        let cfg = UdpConfig::from_env()?;
        let mut v = offers(req)?;
        for o in v.iter_mut() {
            o.tx_attr.size = cfg.tx_size;
            o.rx_attr.size = cfg.rx_size;
        }
        Ok(v)
    }
    fn fabric(&self, _attr: &FabricAttr) -> Result<Arc<dyn FabricOps>> {
        Ok(Arc::new(UdpFabric {
            cfg: UdpConfig::from_env()?,
        }))
    }
    fn tunables(&self) -> Vec<Tunable> {
        tunables()
    }
}

struct UdpFabric {
    cfg: UdpConfig,
}

impl FabricOps for UdpFabric {
    fn domain(&self, info: &Info) -> Result<Arc<dyn DomainOps>> {
        if info.provider() != NAME {
            return Err(Error::new(
                ofi_core::error::errno::FI_EDOMAIN,
                format!("info is for provider '{}', not udp", info.provider()),
            ));
        }
        let shared = domain::Shared::new()?;
        if info.domain_attr.data_progress == progress::FI_PROGRESS_AUTO {
            shared.start_auto_progress()?;
        }
        Ok(Arc::new(UdpDomain {
            cfg: self.cfg,
            shared,
            key: AuthKey::new(info.domain_attr.auth_key.as_deref().unwrap_or(&[]))?,
        }))
    }
}

struct UdpDomain {
    cfg: UdpConfig,
    shared: Arc<domain::Shared>,
    /// The domain's auth key: its endpoints' default.
    key: Option<AuthKey>,
}

/// The key an endpoint opened with `info` uses in a domain whose key is
/// `domain`: its own `ep_attr.auth_key` when set and not empty, else the
/// domain's; `None`: no key.
fn endpoint_key(info: &Info, domain: &Option<AuthKey>) -> Result<Option<AuthKey>> {
    match info.ep_attr.auth_key.as_deref() {
        Some(k) if !k.is_empty() => AuthKey::new(k),
        _ => Ok(domain.clone()),
    }
}

impl DomainOps for UdpDomain {
    fn endpoint(&self, info: &Info) -> Result<Arc<dyn EndpointOps>> {
        let key = endpoint_key(info, &self.key)?;
        match info.ep_attr.ep_type {
            ep_type::FI_EP_DGRAM => {
                let ep = dgram::DgramEp::open(&self.cfg, info, self.shared.clone(), key)?;
                let weak: std::sync::Weak<dyn domain::Member> = Arc::downgrade(&ep) as _;
                self.shared.join(weak);
                Ok(ep)
            }
            t => Err(Error::nosys(format!(
                "udp: endpoint type {t} is not supported (FI_EP_DGRAM is)"
            ))),
        }
    }
    fn addr_ops(&self) -> Arc<dyn AddrOps> {
        Arc::new(addr::UdpAddrOps)
    }
}

/// Registers udp with the core (idempotent).
pub fn register() -> Result<()> {
    if ofi_core::registry::is_registered(NAME) {
        return Ok(());
    }
    match ofi_core::registry::register(Arc::new(UdpProvider), 40) {
        Err(e) if e.code() == ofi_core::error::errno::FI_EALREADY => Ok(()),
        r => r,
    }
}

/// Most iov entries per operation.
pub const IOV_LIMIT: usize = dgram::IOV_LIMIT;

/// The largest message a DGRAM endpoint on interface `ifname` sends: one
/// datagram of the interface's MTU (loopback: 64 KiB), less the header
/// and room for a MAC.
pub fn dgram_max(ifname: &str, v6: bool) -> usize {
    let mtu = sys::if_mtu(ifname).unwrap_or(1500);
    sys::udp_payload_max(mtu, v6)
        .saturating_sub(ofi_wire::udp::DGRAM_HDR_LEN + ofi_wire::udp::MAC_LEN)
}

fn dgram_offer(sa: &SocketAddr, fabric: &str, ifname: &str) -> Info {
    let caps = FI_MSG
        | FI_TAGGED
        | FI_SEND
        | FI_RECV
        | FI_SOURCE
        | FI_DIRECTED_RECV
        | FI_MULTICAST
        | FI_LOCAL_COMM
        | FI_REMOTE_COMM;
    let max = dgram_max(ifname, sa.is_ipv6());
    Info {
        caps,
        addr_format: addr::format_of(sa),
        src_addr: Some(addr::encode(sa)),
        tx_attr: TxAttr {
            caps: caps & (FI_MSG | FI_TAGGED | FI_SEND | FI_MULTICAST),
            op_flags: FI_INJECT_COMPLETE,
            msg_order: order::FI_ORDER_NONE,
            comp_order: order::FI_ORDER_NONE,
            inject_size: max,
            size: 1024,
            iov_limit: IOV_LIMIT,
            rma_iov_limit: 0,
            ..Default::default()
        },
        rx_attr: RxAttr {
            caps: caps
                & (FI_MSG | FI_TAGGED | FI_RECV | FI_SOURCE | FI_DIRECTED_RECV | FI_MULTICAST),
            msg_order: order::FI_ORDER_NONE,
            comp_order: order::FI_ORDER_NONE,
            size: 1024,
            iov_limit: IOV_LIMIT,
            ..Default::default()
        },
        ep_attr: EpAttr {
            ep_type: ep_type::FI_EP_DGRAM,
            protocol: protocol::FI_PROTO_UDP,
            protocol_version: 1,
            max_msg_size: max,
            mem_tag_format: 0xaaaa_aaaa_aaaa_aaaa,
            tx_ctx_cnt: 1,
            rx_ctx_cnt: 1,
            ..Default::default()
        },
        domain_attr: DomainAttr {
            name: Some(ifname.to_string()),
            threading: threading::FI_THREAD_SAFE,
            control_progress: progress::FI_PROGRESS_MANUAL,
            data_progress: progress::FI_PROGRESS_MANUAL,
            resource_mgmt: resource_mgmt::FI_RM_ENABLED,
            av_type: av_type::FI_AV_UNSPEC,
            mr_mode: 0,
            mr_key_size: 0,
            cq_data_size: 8,
            cq_cnt: 256,
            ep_cnt: 8192,
            tx_ctx_cnt: 8192,
            rx_ctx_cnt: 8192,
            max_ep_tx_ctx: 1,
            max_ep_rx_ctx: 1,
            cntr_cnt: 1024,
            caps: FI_LOCAL_COMM | FI_REMOTE_COMM,
            ..Default::default()
        },
        fabric_attr: FabricAttr {
            name: Some(fabric.to_string()),
            prov_name: Some(NAME.into()),
            prov_version: VERSION,
            api_version: FI_VERSION_CURRENT,
        },
        ..Default::default()
    }
}

/// The offers for a request: on every interface subnet whose address
/// family fits, best first (non-loopback before loopback); with a
/// destination node, only subnets that can reach it.
pub fn offers(req: &GetinfoRequest<'_>) -> Result<Vec<Info>> {
    let iface = tunables()
        .into_iter()
        .find(|t| t.name == "iface")
        .map(|t| t.get_str())
        .unwrap_or_default();
    offers_on(req, iface.trim())
}

fn offers_on(req: &GetinfoRequest<'_>, iface: &str) -> Result<Vec<Info>> {
    let hints = req.hints;
    let want_fmt = hints.map(|h| h.addr_format).filter(|f| *f != 0);
    if let Some(f) = want_fmt {
        if f != addr_format::FI_SOCKADDR_IN && f != addr_format::FI_SOCKADDR_IN6 {
            return Err(Error::nodata(format!(
                "udp: address format {f} is not FI_SOCKADDR_IN or FI_SOCKADDR_IN6"
            )));
        }
    }
    let numeric = req.flags & FI_NUMERICHOST != 0;
    let source = req.flags & FI_SOURCE != 0;
    let mut src: Option<SocketAddr> = match hints.and_then(|h| h.src_addr.as_deref()) {
        Some(b) => Some(addr::decode(b)?),
        None => None,
    };
    let mut dest: Option<SocketAddr> = match hints.and_then(|h| h.dest_addr.as_deref()) {
        Some(b) => Some(addr::decode(b)?),
        None => None,
    };
    if req.node.is_some() || req.service.is_some() {
        if source {
            src = Some(addr::resolve(req.node, req.service, want_fmt, numeric)?[0]);
        } else if req.node.is_some() {
            dest = Some(addr::resolve(req.node, req.service, want_fmt, numeric)?[0]);
        } else {
            src = Some(addr::resolve(None, req.service, want_fmt, numeric)?[0]);
        }
    }
    let mut ifs = netif::interfaces().map_err(|e| Error::os(e, "udp: listing interfaces"))?;
    ifs.retain(|i| i.up);
    let named_source = src.is_some_and(|s| !s.ip().is_unspecified());
    if !iface.is_empty() && !named_source {
        ifs.retain(|i| i.name == iface);
        if ifs.is_empty() {
            return Err(Error::nodata(format!(
                "udp: FI_UDP_IFACE={iface} names no interface that is up"
            )));
        }
    }
    ifs.sort_by_key(|i| i.loopback);
    let mut out = Vec::new();
    for ifa in &ifs {
        let sa_fmt = match ifa.addr {
            IpAddr::V4(_) => addr_format::FI_SOCKADDR_IN,
            IpAddr::V6(_) => addr_format::FI_SOCKADDR_IN6,
        };
        if want_fmt.is_some_and(|f| f != sa_fmt) {
            continue;
        }
        if let Some(s) = src {
            if !s.ip().is_unspecified() && s.ip() != ifa.addr {
                continue;
            }
        }
        if let Some(d) = dest {
            let same_family = d.is_ipv4() == ifa.addr.is_ipv4();
            let reaches = ifa.contains(&d.ip())
                || (d.ip().is_loopback() && ifa.loopback)
                || d.ip().is_multicast();
            if !same_family || !reaches {
                continue;
            }
        }
        let port = src.map_or(0, |s| s.port());
        let bind = SocketAddr::new(ifa.addr, port);
        let auto = hints.is_some_and(|h| {
            h.domain_attr.data_progress == progress::FI_PROGRESS_AUTO
                || h.domain_attr.control_progress == progress::FI_PROGRESS_AUTO
        });
        let mut o = dgram_offer(&bind, &ifa.subnet(), &ifa.name);
        if auto {
            o.domain_attr.data_progress = progress::FI_PROGRESS_AUTO;
            o.domain_attr.control_progress = progress::FI_PROGRESS_AUTO;
        }
        o.dest_addr = dest.map(|d| addr::encode(&d));
        o.fabric_attr.api_version = req.version;
        out.push(o);
    }
    if out.is_empty() {
        return Err(Error::nodata(
            "udp: no interface that is up fits the request (source, destination, address format or FI_UDP_IFACE)",
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req<'a>(node: Option<&'a str>, service: Option<&'a str>, flags: u64) -> GetinfoRequest<'a> {
        GetinfoRequest {
            version: FI_VERSION_CURRENT,
            node,
            service,
            flags,
            hints: None,
        }
    }

    #[test]
    fn loopback_offers_dgram_with_the_path_limit() {
        let o = offers(&req(None, None, 0)).unwrap();
        let lo = o
            .iter()
            .find(|i| {
                i.domain_attr.name.as_deref() == Some("lo")
                    && i.addr_format == addr_format::FI_SOCKADDR_IN
            })
            .expect("a loopback offer");
        assert_eq!(lo.ep_attr.ep_type, ep_type::FI_EP_DGRAM);
        assert!(lo.caps & FI_MULTICAST != 0);
        // Loopback's MTU is 64 KiB: one datagram carries about that much.
        let max = lo.ep_attr.max_msg_size;
        assert!(max > 60_000 && max < 65_507, "{max}");
        assert_eq!(lo.tx_attr.inject_size, max);
    }

    #[test]
    fn udp_payload_follows_the_mtu() {
        assert_eq!(sys::udp_payload_max(1500, false), 1472);
        assert_eq!(sys::udp_payload_max(1500, true), 1452);
        assert_eq!(sys::udp_payload_max(65536, false), 65507);
    }
}
