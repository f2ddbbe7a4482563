//! The tcp provider: MSG endpoints with connection management and native
//! RDM endpoints, over TCP sockets on any network device. RMA and atomics
//! are executed by the target against its registered regions, in the order
//! requests arrive on a connection ([`MSG_ORDER`]).
//!
//! Offers: one fabric per interface subnet (as libfabric's tcp provider
//! offers them), RDM and MSG on each, non-loopback first. The endpoints run
//! the sans-IO protocol core of `ofi_proto::tcp`; what they share with
//! udp's (socket addresses, the interface walk, the provider, fabric and
//! domain objects, the core's driver half) is `ofi-inet`'s. The `ofi`
//! facade registers the provider ([`register`]), and the conformance suite
//! runs against its offers.

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
use ofi_core::provider::{EndpointOps, GetinfoRequest, PassiveEndpointOps};
pub use ofi_inet::addr;
use ofi_inet::offers::{iface, Place, Walk};
use ofi_inet::provider::{Domain, Inet, InetProvider};
use ofi_inet::tcp_core::attrs;
pub use ofi_inet::tcp_core::one_sided::ATOMIC_MAX_BYTES;
pub use ofi_inet::tcp_core::{INJECT_SIZE, IOV_LIMIT, RMA_IOV_LIMIT};
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

/// The tcp provider, as the core's registry holds it.
pub type TcpProvider = InetProvider<Tcp>;

/// What makes the tcp provider (see [`TcpProvider`]).
#[derive(Debug)]
pub struct Tcp;

impl Inet for Tcp {
    const NAME: &'static str = NAME;
    const VERSION: u32 = VERSION;
    type Config = TcpConfig;
    type Shared = domain::Shared;

    fn config() -> Result<TcpConfig> {
        TcpConfig::from_env()
    }
    fn context_sizes(cfg: &TcpConfig) -> (usize, usize) {
        (cfg.tx_size, cfg.rx_size)
    }
    fn tunables() -> Vec<Tunable> {
        tunables()
    }
    fn offers(req: &GetinfoRequest<'_>) -> Result<Vec<Info>> {
        offers(req)
    }
    fn open_shared(cfg: &TcpConfig) -> Result<Arc<domain::Shared>> {
        domain::Shared::new(cfg.poll_recv)
    }
    fn start_auto_progress(shared: &Arc<domain::Shared>) -> Result<()> {
        shared.start_auto_progress()
    }
    fn endpoint(d: &Domain<Tcp>, info: &Info) -> Result<Arc<dyn EndpointOps>> {
        let (cfg, shared) = (d.cfg, d.shared.clone());
        match info.ep_attr.ep_type {
            ep_type::FI_EP_MSG => Ok(joined(
                d,
                msg::TcpMsgEp::open(cfg, info, shared, d.key(info)?)?,
            )),
            ep_type::FI_EP_RDM => Ok(joined(
                d,
                rdm::TcpRdmEp::open(cfg, info, shared, d.key(info)?)?,
            )),
            t => Err(Error::nosys(format!(
                "tcp: endpoint type {t} is not supported (FI_EP_MSG and FI_EP_RDM are)"
            ))),
        }
    }
    fn passive_ep(cfg: &TcpConfig, info: &Info) -> Result<Arc<dyn PassiveEndpointOps>> {
        Ok(Arc::new(pep::TcpPep::open(*cfg, info)?))
    }
}

/// Endpoint `ep`, made a member of domain `d` (driven by its progress).
fn joined<E: domain::Member + EndpointOps + 'static>(
    d: &Domain<Tcp>,
    ep: E,
) -> Arc<dyn EndpointOps> {
    let ep = Arc::new(ep);
    d.shared
        .join(Arc::downgrade(&ep) as std::sync::Weak<dyn domain::Member>);
    ep
}

/// Registers tcp with the core (idempotent).
pub fn register() -> Result<()> {
    ofi_inet::provider::register::<Tcp>()
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

/// The ordering that holds between two operations on one connection (see
/// `ofi_inet::tcp_core::attrs::MSG_ORDER`).
pub const MSG_ORDER: u64 = attrs::MSG_ORDER;

/// The offer of an endpoint of type `ep` (RDM or MSG) at place `p`.
fn base_offer(ep: u32, p: &Place) -> Info {
    let rdm = ep == ep_type::FI_EP_RDM;
    let mut o = p.offer(NAME, VERSION);
    attrs::fill(
        &mut o,
        if rdm {
            attrs::RDM_CAPS
        } else {
            attrs::MSG_CAPS
        },
    );
    o.ep_attr.ep_type = ep;
    o.ep_attr.protocol = protocol::FI_PROTO_SOCK_TCP;
    o.ep_attr.mem_tag_format = if rdm { 0xaaaa_aaaa_aaaa_aaaa } else { 0 };
    // Shared receive and transmit contexts (ofi_core::util::srx and stx),
    // as many as endpoints.
    o.domain_attr.max_ep_srx_ctx = o.domain_attr.ep_cnt;
    o.domain_attr.max_ep_stx_ctx = o.domain_attr.ep_cnt;
    o
}

/// The offers for a request: RDM and MSG on every interface subnet whose
/// address family fits, best first (non-loopback before loopback); with a
/// destination node, only subnets that can reach it.
pub fn offers(req: &GetinfoRequest<'_>) -> Result<Vec<Info>> {
    offers_on(req, &iface(tunables()))
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
            .map(|ep| base_offer(ep, p))
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
