//! The tcp provider: MSG endpoints with connection management and native
//! RDM endpoints, over TCP sockets on any network device. RMA and atomics
//! are executed by the target against its registered regions, in the order
//! requests arrive on a connection ([`MSG_ORDER`]).
//!
//! Work in progress: discovery (one fabric per interface subnet, as
//! libfabric's tcp provider offers them) and addressing are here; the
//! endpoints are built on the sans-IO protocol core in `ofi-proto`. The
//! provider is not registered with the `ofi` facade until its endpoints
//! pass the conformance suite.

#![deny(unsafe_code)]

mod auth;
mod domain;
mod gate;
mod link;
mod msg;
mod pep;
mod rdm;
mod sys;

use ofi_core::config::Tunable;
use ofi_core::consts::*;
use ofi_core::error::{Error, Result};
use ofi_core::info::*;
use ofi_core::provider::{
    AddrOps, DomainOps, EndpointOps, FabricOps, GetinfoRequest, PassiveEndpointOps, Provider,
};
pub use ofi_prov_inet::addr;
use ofi_prov_inet::offers::Walk;
pub use ofi_prov_inet::tcp_core::one_sided::ATOMIC_MAX_BYTES;
pub use ofi_prov_inet::tcp_core::{INJECT_SIZE, IOV_LIMIT, RMA_IOV_LIMIT};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// Settings read from the FI_TCP_* tunables.
#[derive(Clone, Copy, Debug)]
pub struct TcpConfig {
    /// Protocol settings shared by every connection.
    pub proto: ofi_proto::tcp::Config,
    /// Unexpected bytes an endpoint buffers before backpressure.
    pub max_unexpected_bytes: usize,
    /// The bound after which a peer that does not answer is declared dead
    /// (FI_TCP_PEER_TIMEOUT_MS): a connection attempt and its handshake
    /// must finish within it, and it sets every connection's
    /// TCP_USER_TIMEOUT and keepalive (see `ofi_core::util::peer`).
    pub peer_timeout: Duration,
    /// Bounds on incoming connections in their handshake
    /// (FI_TCP_MAX_HALF_OPEN, FI_TCP_HANDSHAKE_TIMEOUT_MS).
    pub limits: gate::Limits,
    /// Single-connection endpoints poll with `recv` instead of epoll.
    pub poll_recv: bool,
    /// Ports a listening socket bound to port 0 takes its port from
    /// (FI_TCP_PORT_LOW_RANGE..=FI_TCP_PORT_HIGH_RANGE); `None`: any.
    pub port_range: Option<(u16, u16)>,
    /// Default transmit and receive context sizes (FI_TCP_TX_SIZE,
    /// FI_TCP_RX_SIZE), what offers advertise.
    pub tx_size: usize,
    /// See `tx_size`.
    pub rx_size: usize,
}

impl TcpConfig {
    /// Reads the tunables; a malformed value is an error naming the variable.
    pub fn from_env() -> Result<TcpConfig> {
        let t = tunables();
        let get = |n: &str| t.iter().find(|x| x.name == n).expect("declared tunable");
        let proto = ofi_proto::tcp::Config {
            eager_max: get("eager_max").get_size()?.clamp(0, 1 << 20),
            ..Default::default()
        };
        let port = |n: &str| -> Result<u16> {
            let v = get(n).get_size()?;
            u16::try_from(v).map_err(|_| {
                Error::inval(format!("{}={v} is not a port (0 to 65535)", get(n).var()))
            })
        };
        let (low, high) = (port("port_low_range")?, port("port_high_range")?);
        let port_range = match (low, high) {
            (0, 0) => None,
            (l, h) if l == 0 || h == 0 || l > h => {
                return Err(Error::inval(format!(
                    "FI_TCP_PORT_LOW_RANGE={l} and FI_TCP_PORT_HIGH_RANGE={h} do not make a range of ports (set both, low <= high)"
                )))
            }
            (l, h) => Some((l, h)),
        };
        let ctx = "a context holds at least one operation";
        Ok(TcpConfig {
            proto,
            max_unexpected_bytes: get("max_unexpected_bytes").get_size()?,
            peer_timeout: ofi_core::util::peer::timeout_from(&t)?,
            limits: gate::Limits {
                max_half_open: get("max_half_open")
                    .get_nonzero_size("an endpoint must admit one connection at a time")?,
                handshake_timeout: Duration::from_millis(
                    get("handshake_timeout_ms")
                        .get_nonzero_size("a connector needs some time to send its HELLO")?
                        as u64,
                ),
            },
            poll_recv: get("poll_recv").get_bool()?,
            port_range,
            tx_size: get("tx_size").get_nonzero_size(ctx)?,
            rx_size: get("rx_size").get_nonzero_size(ctx)?,
        })
    }
}

/// The tcp provider.
#[derive(Debug, Default)]
pub struct TcpProvider;

impl Provider for TcpProvider {
    fn name(&self) -> &str {
        NAME
    }
    fn version(&self) -> u32 {
        VERSION
    }
    fn getinfo(&self, req: &GetinfoRequest<'_>) -> Result<Vec<Info>> {
        let cfg = TcpConfig::from_env()?;
        let mut v = offers(req)?;
        for o in v.iter_mut() {
            o.tx_attr.size = cfg.tx_size;
            o.rx_attr.size = cfg.rx_size;
        }
        Ok(v)
    }
    fn fabric(&self, _attr: &FabricAttr) -> Result<Arc<dyn FabricOps>> {
        Ok(Arc::new(TcpFabric {
            cfg: TcpConfig::from_env()?,
        }))
    }
    fn tunables(&self) -> Vec<Tunable> {
        tunables()
    }
}

struct TcpFabric {
    cfg: TcpConfig,
}

impl FabricOps for TcpFabric {
    fn domain(&self, info: &Info) -> Result<Arc<dyn DomainOps>> {
        if info.provider() != NAME {
            return Err(Error::new(
                ofi_core::error::errno::FI_EDOMAIN,
                format!("info is for provider '{}', not tcp", info.provider()),
            ));
        }
        let shared = domain::Shared::new(self.cfg.poll_recv)?;
        if info.domain_attr.data_progress == progress::FI_PROGRESS_AUTO {
            shared.start_auto_progress()?;
        }
        Ok(Arc::new(TcpDomain {
            cfg: self.cfg,
            shared,
            key: ofi_core::util::auth::AuthKey::new(
                info.domain_attr.auth_key.as_deref().unwrap_or(&[]),
            )?,
        }))
    }
    fn passive_ep(&self, info: &Info) -> Result<Arc<dyn PassiveEndpointOps>> {
        Ok(Arc::new(pep::TcpPep::open(self.cfg, info)?))
    }
}

struct TcpDomain {
    cfg: TcpConfig,
    shared: Arc<domain::Shared>,
    /// The domain's auth key: its endpoints' default.
    key: Option<ofi_core::util::auth::AuthKey>,
}

impl DomainOps for TcpDomain {
    fn endpoint(&self, info: &Info) -> Result<Arc<dyn EndpointOps>> {
        match info.ep_attr.ep_type {
            ep_type::FI_EP_MSG => {
                let key = auth::endpoint_key(info, &self.key)?;
                let ep = Arc::new(msg::TcpMsgEp::open(
                    self.cfg,
                    info,
                    self.shared.clone(),
                    key,
                )?);
                let weak: std::sync::Weak<dyn domain::Member> = Arc::downgrade(&ep) as _;
                self.shared.join(weak);
                Ok(ep)
            }
            ep_type::FI_EP_RDM => {
                let key = auth::endpoint_key(info, &self.key)?;
                let ep = Arc::new(rdm::TcpRdmEp::open(
                    self.cfg,
                    info,
                    self.shared.clone(),
                    key,
                )?);
                let weak: std::sync::Weak<dyn domain::Member> = Arc::downgrade(&ep) as _;
                self.shared.join(weak);
                Ok(ep)
            }
            t => Err(Error::nosys(format!(
                "tcp: endpoint type {t} is not supported (FI_EP_MSG and FI_EP_RDM are)"
            ))),
        }
    }
    fn addr_ops(&self) -> Arc<dyn AddrOps> {
        Arc::new(addr::SockAddrOps)
    }
    fn query_atomic(
        &self,
        kind: ofi_core::util::atomic::AtomicKind,
        op: u32,
        datatype: u32,
    ) -> Result<usize> {
        ofi_prov_inet::tcp_core::one_sided::query_atomic(kind, op, datatype)
    }
}

/// Registers tcp with the core (idempotent).
pub fn register() -> Result<()> {
    if ofi_core::registry::is_registered(NAME) {
        return Ok(());
    }
    match ofi_core::registry::register(Arc::new(TcpProvider), 50) {
        Err(e) if e.code() == ofi_core::error::errno::FI_EALREADY => Ok(()),
        r => r,
    }
}

/// Provider name.
pub const NAME: &str = "tcp";
/// Provider version.
pub const VERSION: u32 = fi_version(0, 1);

/// The provider's tunables.
pub fn tunables() -> Vec<Tunable> {
    vec![
        Tunable::size(NAME, "eager_max", 16384, "Messages up to this size are sent eagerly; larger ones by rendezvous"),
        Tunable::size(NAME, "max_unexpected_bytes", 4 << 20, "Unexpected eager bytes an endpoint buffers before a connection bringing more is left unread (backpressure), shared fairly: each peer holding some may hold its share (this divided by their number), a peer holding none may always park one message, and a peer this endpoint awaits a reply from may hold up to all of it (its reply is read even behind unread data)"),
        Tunable::boolean(NAME, "poll_recv", true, "An endpoint alone in its domain with at most one connection polls that socket with recv rather than asking epoll first: one system call less per message received (0: every poll asks epoll first)"),
        Tunable::size(NAME, "port_low_range", 0, "Lowest port a listening socket (passive endpoint, RDM endpoint) takes when its address names no port; 0 with FI_TCP_PORT_HIGH_RANGE 0: any port the system picks"),
        Tunable::size(NAME, "port_high_range", 0, "Highest port of that range (see FI_TCP_PORT_LOW_RANGE)"),
        Tunable::size(NAME, "tx_size", 1024, "Default transmit context size the offers advertise"),
        Tunable::size(NAME, "rx_size", 1024, "Default receive context size the offers advertise (and the depth of posted receives an endpoint keeps room for)"),
        Tunable::text(NAME, "iface", "", "Offer only this network interface (by name, e.g. eth0 or lo) when the request names no source address; empty offers every interface that is up"),
        ofi_core::util::peer::timeout_tunable(NAME),
        Tunable::size(NAME, "max_half_open", 256, "Incoming connections an RDM or passive endpoint holds in their handshake (no HELLO yet, or not yet authenticated) at once; past it the oldest is dropped (and logged)"),
        Tunable::size(NAME, "handshake_timeout_ms", 10000, "Milliseconds an incoming connection has to finish its handshake (HELLO, and with an auth key the proof) before it is dropped (and logged)"),
    ]
}

/// The ordering that holds between two operations on one connection. The
/// target executes requests in stream order: a WRITE's data is placed, an
/// atomic applied and a READ's data captured before the next frame is read,
/// and a message is matched when it arrives; so reads and writes are
/// ordered among themselves (RAR, RAW, WAR, WAW) and sends after them
/// (SAR, SAW), and sends among themselves (SAS). Writes and reads after a
/// send are not ordered (no WAS, RAS): a send that waits for a receive as
/// unexpected, or whose data follows its rendezvous, lands after them.
pub const MSG_ORDER: u64 = order::FI_ORDER_RAR
    | order::FI_ORDER_RAW
    | order::FI_ORDER_WAR
    | order::FI_ORDER_WAW
    | order::FI_ORDER_SAR
    | order::FI_ORDER_SAW
    | order::FI_ORDER_SAS;

fn base_offer(ep: u32, sa: &SocketAddr, fabric: &str, domain: &str) -> Info {
    let rdm = ep == ep_type::FI_EP_RDM;
    let one_sided = FI_RMA
        | FI_ATOMIC
        | FI_READ
        | FI_WRITE
        | FI_REMOTE_READ
        | FI_REMOTE_WRITE
        | FI_RMA_EVENT
        | FI_RMA_PMEM
        | FI_TRIGGER
        | FI_FENCE;
    let mut caps =
        FI_MSG | FI_SEND | FI_RECV | FI_MULTI_RECV | FI_LOCAL_COMM | FI_REMOTE_COMM | one_sided;
    if rdm {
        caps |= FI_TAGGED | FI_SOURCE | FI_DIRECTED_RECV;
    }
    Info {
        caps,
        addr_format: addr::format_of(sa),
        src_addr: Some(addr::encode(sa)),
        tx_attr: TxAttr {
            caps: caps
                & (FI_MSG
                    | FI_TAGGED
                    | FI_SEND
                    | FI_RMA
                    | FI_ATOMIC
                    | FI_READ
                    | FI_WRITE
                    | FI_TRIGGER
                    | FI_FENCE),
            op_flags: FI_INJECT_COMPLETE,
            msg_order: MSG_ORDER,
            comp_order: order::FI_ORDER_NONE,
            inject_size: INJECT_SIZE,
            size: 1024,
            iov_limit: IOV_LIMIT,
            rma_iov_limit: RMA_IOV_LIMIT,
            ..Default::default()
        },
        rx_attr: RxAttr {
            caps: caps
                & (FI_MSG
                    | FI_TAGGED
                    | FI_RECV
                    | FI_MULTI_RECV
                    | FI_SOURCE
                    | FI_DIRECTED_RECV
                    | FI_RMA
                    | FI_ATOMIC
                    | FI_REMOTE_READ
                    | FI_REMOTE_WRITE
                    | FI_RMA_EVENT),
            msg_order: MSG_ORDER,
            comp_order: order::FI_ORDER_NONE,
            size: 1024,
            iov_limit: IOV_LIMIT,
            ..Default::default()
        },
        ep_attr: EpAttr {
            ep_type: ep,
            protocol: protocol::FI_PROTO_SOCK_TCP,
            protocol_version: 1,
            max_msg_size: usize::MAX >> 1,
            max_order_raw_size: usize::MAX >> 1,
            max_order_war_size: usize::MAX >> 1,
            max_order_waw_size: usize::MAX >> 1,
            mem_tag_format: if rdm { 0xaaaa_aaaa_aaaa_aaaa } else { 0 },
            tx_ctx_cnt: 1,
            rx_ctx_cnt: 1,
            ..Default::default()
        },
        domain_attr: DomainAttr {
            name: Some(domain.to_string()),
            threading: threading::FI_THREAD_SAFE,
            control_progress: progress::FI_PROGRESS_MANUAL,
            data_progress: progress::FI_PROGRESS_MANUAL,
            resource_mgmt: resource_mgmt::FI_RM_ENABLED,
            av_type: av_type::FI_AV_UNSPEC,
            mr_mode: mr_mode::FI_MR_VIRT_ADDR | mr_mode::FI_MR_PROV_KEY | mr_mode::FI_MR_ALLOCATED,
            mr_key_size: 8,
            cq_data_size: 8,
            cq_cnt: 256,
            ep_cnt: 8192,
            tx_ctx_cnt: 8192,
            rx_ctx_cnt: 8192,
            max_ep_tx_ctx: 1,
            max_ep_rx_ctx: 1,
            cntr_cnt: 1024,
            mr_iov_limit: IOV_LIMIT,
            caps: FI_LOCAL_COMM | FI_REMOTE_COMM,
            mr_cnt: 65536,
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

/// The offers for a request: RDM and MSG on every interface subnet whose
/// address family fits, best first (non-loopback before loopback); with a
/// destination node, only subnets that can reach it.
pub fn offers(req: &GetinfoRequest<'_>) -> Result<Vec<Info>> {
    let iface = tunables()
        .into_iter()
        .find(|t| t.name == "iface")
        .map(|t| t.get_str())
        .unwrap_or_default();
    offers_on(req, iface.trim())
}

/// [`offers`] restricted to the interface named `iface` (FI_TCP_IFACE;
/// empty: every interface) unless the request names a source address.
fn offers_on(req: &GetinfoRequest<'_>, iface: &str) -> Result<Vec<Info>> {
    let walk = Walk {
        prov: NAME,
        iface,
        multicast: false,
    };
    walk.offers(req, |p| {
        [ep_type::FI_EP_RDM, ep_type::FI_EP_MSG]
            .into_iter()
            .map(|ep| base_offer(ep, &p.bind, &p.fabric, &p.domain))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req<'a>(
        node: Option<&'a str>,
        service: Option<&'a str>,
        flags: u64,
        hints: Option<&'a Info>,
    ) -> GetinfoRequest<'a> {
        GetinfoRequest {
            version: FI_VERSION_CURRENT,
            node,
            service,
            flags,
            hints,
        }
    }

    #[test]
    fn loopback_offers_both_endpoint_types_per_subnet() {
        let o = offers(&req(None, None, 0, None)).unwrap();
        let lo: Vec<&Info> = o
            .iter()
            .filter(|i| i.domain_attr.name.as_deref() == Some("lo"))
            .collect();
        assert!(lo.iter().any(|i| i.ep_attr.ep_type == ep_type::FI_EP_RDM
            && i.addr_format == addr_format::FI_SOCKADDR_IN));
        assert!(lo.iter().any(|i| i.ep_attr.ep_type == ep_type::FI_EP_MSG));
        let v4 = lo
            .iter()
            .find(|i| i.addr_format == addr_format::FI_SOCKADDR_IN)
            .unwrap();
        assert!(v4
            .fabric_attr
            .name
            .as_deref()
            .unwrap()
            .starts_with("127.0.0.0/"));
    }

    #[test]
    fn node_and_service_pick_the_destination_or_the_source() {
        let o = offers(&req(Some("127.0.0.1"), Some("4000"), 0, None)).unwrap();
        assert!(o
            .iter()
            .all(|i| i.domain_attr.name.as_deref() == Some("lo")));
        let d = addr::decode(o[0].dest_addr.as_ref().unwrap()).unwrap();
        assert_eq!(d, "127.0.0.1:4000".parse().unwrap());
        let s = offers(&req(Some("127.0.0.1"), Some("4001"), FI_SOURCE, None)).unwrap();
        assert_eq!(
            addr::decode(s[0].src_addr.as_ref().unwrap()).unwrap(),
            "127.0.0.1:4001".parse().unwrap()
        );
        assert!(s[0].dest_addr.is_none());
    }

    #[test]
    fn iface_keeps_one_interface_unless_a_source_is_named() {
        let lo = offers_on(&req(None, None, 0, None), "lo").unwrap();
        assert!(!lo.is_empty());
        assert!(lo
            .iter()
            .all(|i| i.domain_attr.name.as_deref() == Some("lo")));
        let e = offers_on(&req(None, None, 0, None), "no-such-if0").unwrap_err();
        assert_eq!(e.code(), ofi_core::error::errno::FI_ENODATA);
        assert!(e.to_string().contains("no-such-if0"), "{e}");
        // A named source address wins over the variable.
        let s = offers_on(
            &req(Some("127.0.0.1"), Some("4001"), FI_SOURCE, None),
            "no-such-if0",
        )
        .unwrap();
        assert_eq!(s[0].domain_attr.name.as_deref(), Some("lo"));
    }

    #[test]
    fn a_request_no_interface_fits_is_refused_naming_what_it_asked() {
        // 10.255.255.1 is in no subnet of lo: nothing to connect from.
        let e = offers_on(&req(Some("10.255.255.1"), Some("4000"), 0, None), "lo").unwrap_err();
        assert_eq!(e.code(), ofi_core::error::errno::FI_ENODATA);
        let msg = e.to_string();
        assert!(msg.contains("destination 10.255.255.1:4000"), "{msg}");
        assert!(msg.contains("FI_TCP_IFACE=lo"), "{msg}");
        // A source that is no local address (TEST-NET-2; nothing is sent).
        let e = offers(&req(Some("198.51.100.254"), Some("4001"), FI_SOURCE, None)).unwrap_err();
        assert!(e.to_string().contains("source 198.51.100.254"), "{e}");
    }

    #[test]
    fn address_format_hint_filters() {
        let mut h = Info::hints();
        h.addr_format = addr_format::FI_SOCKADDR_IN6;
        if let Ok(o) = offers(&req(None, None, 0, Some(&h))) {
            assert!(o
                .iter()
                .all(|i| i.addr_format == addr_format::FI_SOCKADDR_IN6));
        }
        h.addr_format = addr_format::FI_ADDR_STR;
        assert_eq!(
            offers(&req(None, None, 0, Some(&h))).unwrap_err().code(),
            ofi_core::error::errno::FI_ENODATA
        );
    }
}
