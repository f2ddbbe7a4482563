//! The udp provider: datagram fabrics, first-class.
//!
//! - **DGRAM endpoints** (`dgram.rs`): one UDP datagram per message, with
//!   tags, remote CQ data, source addresses, inject and multicast
//!   (`fi_join`); `max_msg_size` is what one datagram carries on the path
//!   (the interface's MTU; about 64 KiB on loopback).
//! - **RDM endpoints**: reliable, ordered messages, tagged matching, RMA
//!   and atomics over the reliability core of `ofi_proto::udp` (sessions
//!   with epochs and the auth key, a reliable byte stream per peer) carrying
//!   the tcp provider's protocol core (`ofi_proto::tcp`).
//!
//! Offers: one fabric per interface subnet (as tcp), RDM and DGRAM on
//! each, non-loopback first.

#![deny(unsafe_code)]

mod dgram;
mod domain;
mod rdm;
mod sys;

use ofi_core::config::Tunable;
use ofi_core::consts::*;
use ofi_core::error::{Error, Result};
use ofi_core::info::*;
use ofi_core::provider::{EndpointOps, GetinfoRequest};
pub use ofi_inet::addr;
use ofi_inet::offers::{iface, Place, Walk};
use ofi_inet::provider::{Domain, Inet, InetProvider};
use ofi_inet::tcp_core::attrs;
pub use ofi_inet::tcp_core::one_sided::ATOMIC_MAX_BYTES;
pub use ofi_inet::tcp_core::{INJECT_SIZE, RMA_IOV_LIMIT};
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
    /// Largest datagram RDM endpoints send (0: what the path carries).
    pub max_datagram: usize,
    /// RDM receive window per peer, in bytes (within the socket buffer).
    pub window: usize,
    /// RDM messages up to this size go eagerly, larger by rendezvous.
    pub eager_max: usize,
    /// RDM unexpected bytes buffered per endpoint before backpressure.
    pub max_unexpected_bytes: usize,
    /// RDM user ranges up to this size are copied when staged (their sends
    /// complete at once); larger ones are sent from the user's buffer.
    pub copy_max: usize,
    /// The bound after which a silent peer is dead (FI_UDP_PEER_TIMEOUT_MS).
    pub peer_timeout: Duration,
    /// RDM sessions idle this long end (FI_UDP_IDLE_TIMEOUT_MS).
    pub idle_timeout: Duration,
    /// Most peers with a live RDM session per endpoint.
    pub max_peers: usize,
    /// Bytes of copies of completed sends an RDM endpoint keeps until
    /// acknowledged, over all its peers.
    pub copy_budget: usize,
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
            max_datagram: get("max_datagram").get_size()?,
            window: get("window").get_nonzero_size("a peer must be able to send something")?,
            eager_max: get("eager_max").get_size()?.clamp(0, 1 << 20),
            max_unexpected_bytes: get("max_unexpected_bytes").get_size()?,
            copy_max: get("copy_max").get_size()?,
            peer_timeout: ofi_core::util::peer::timeout_from(&t)?,
            idle_timeout: Duration::from_millis(
                get("idle_timeout_ms")
                    .get_nonzero_size("an idle session must end some time after")?
                    as u64,
            ),
            max_peers: get("max_peers").get_nonzero_size("an endpoint needs at least one peer")?,
            copy_budget: get("copy_budget").get_size()?,
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
        Tunable::size(NAME, "max_datagram", 0, "Largest datagram an RDM endpoint sends; 0: the largest the interface carries unfragmented (loopback: 64 KiB)"),
        Tunable::size(NAME, "window", 4 << 20, "Bytes an RDM endpoint lets each peer send ahead of what it consumed (its receive window; at most half the socket buffer granted)"),
        Tunable::size(NAME, "eager_max", 16384, "RDM messages up to this size are sent eagerly; larger ones by rendezvous (they land in the matched receive buffer)"),
        Tunable::size(NAME, "max_unexpected_bytes", 4 << 20, "Unexpected eager bytes an RDM endpoint buffers before a peer bringing more is held back (its window closes)"),
        Tunable::size(NAME, "copy_max", 4096, "RDM send payloads (and pieces of them) up to this size are copied when staged and their sends complete at once; larger ones go from the user's buffer and complete when the peer acknowledges them"),
        Tunable::size(NAME, "tx_size", 1024, "Default transmit context size the offers advertise; an RDM endpoint answers FI_EAGAIN to a post while this many of its operations are not complete"),
        Tunable::size(NAME, "copy_budget", 16 << 20, "Bytes of copies of completed RDM sends (see FI_UDP_COPY_MAX) an endpoint keeps until its peers acknowledge them, over all peers (each peer at most FI_UDP_WINDOW); beyond it sends complete only when acknowledged"),
        Tunable::size(NAME, "idle_timeout_ms", 60_000, "Milliseconds after which an RDM session that carried nothing either way ends, by agreement of both sides, freeing its state; the next message to or from the peer makes a new session (not 0)"),
        Tunable::size(NAME, "max_peers", 1024, "Most peers an RDM endpoint keeps a live session with; at the bound the least recently active idle session ends to make room, a new peer's handshake waits, and a send to a new peer answers FI_EAGAIN (not 0)"),
        Tunable::size(NAME, "rx_size", 1024, "Default receive context size the offers advertise"),
        peer_timeout_tunable(),
    ]
}

/// The udp provider, as the core's registry holds it.
pub type UdpProvider = InetProvider<Udp>;

/// What makes the udp provider (see [`UdpProvider`]).
#[derive(Debug)]
pub struct Udp;

impl Inet for Udp {
    const NAME: &'static str = NAME;
    const VERSION: u32 = VERSION;
    type Config = UdpConfig;
    type Shared = domain::Shared;

    fn config() -> Result<UdpConfig> {
        UdpConfig::from_env()
    }
    fn context_sizes(cfg: &UdpConfig) -> (usize, usize) {
        (cfg.tx_size, cfg.rx_size)
    }
    fn tunables() -> Vec<Tunable> {
        tunables()
    }
    fn offers(req: &GetinfoRequest<'_>) -> Result<Vec<Info>> {
        offers(req)
    }
    fn open_shared(_cfg: &UdpConfig) -> Result<Arc<domain::Shared>> {
        domain::Shared::new()
    }
    fn start_auto_progress(shared: &Arc<domain::Shared>) -> Result<()> {
        shared.start_auto_progress()
    }
    fn endpoint(d: &Domain<Udp>, info: &Info) -> Result<Arc<dyn EndpointOps>> {
        let (cfg, shared, key) = (&d.cfg, d.shared.clone(), d.key(info)?);
        match info.ep_attr.ep_type {
            ep_type::FI_EP_DGRAM => Ok(joined(d, dgram::DgramEp::open(cfg, info, shared, key)?)),
            ep_type::FI_EP_RDM => Ok(joined(d, rdm::RdmEp::open(cfg, info, shared, key)?)),
            t => Err(Error::nosys(format!(
                "udp: endpoint type {t} is not supported (FI_EP_DGRAM and FI_EP_RDM are)"
            ))),
        }
    }
}

/// Endpoint `ep`, made a member of domain `d` (driven by its progress).
fn joined<E: domain::Member + EndpointOps + 'static>(
    d: &Domain<Udp>,
    ep: Arc<E>,
) -> Arc<dyn EndpointOps> {
    d.shared
        .join(Arc::downgrade(&ep) as std::sync::Weak<dyn domain::Member>);
    ep
}

/// Registers udp with the core (idempotent).
pub fn register() -> Result<()> {
    ofi_inet::provider::register::<Udp>()
}

/// The dead bound's default: 3 s. A datagram provider hears nothing when
/// a peer process dies (no reset as tcp gets), so the bound is the signal;
/// 3 s leaves room for eight backed-off probes (the channel caps its
/// timeout at an eighth of the bound) and keeps a death noticed well
/// within the 5 s the other providers are held to.
pub const PEER_TIMEOUT_MS: usize = 3000;

fn peer_timeout_tunable() -> Tunable {
    let mut t = ofi_core::util::peer::timeout_tunable(NAME);
    t.default = PEER_TIMEOUT_MS.to_string();
    t
}

/// Most iov entries per operation.
pub const IOV_LIMIT: usize = dgram::IOV_LIMIT;

/// The largest datagram an RDM endpoint on interface `ifname` sends: the
/// tunable when set (within what UDP carries), else one unfragmented
/// datagram of the interface's MTU.
pub fn rdm_datagram(ifname: &str, v6: bool, tunable: usize) -> usize {
    let path = sys::udp_payload_max(sys::if_mtu(ifname).unwrap_or(1500), v6);
    let want = if tunable == 0 { path } else { tunable };
    want.clamp(ofi_wire::udp::HDR_LEN + 64, ofi_wire::udp::MAX_DATAGRAM)
}

/// The ordering that holds between two operations to one peer: the same
/// as tcp's (the same protocol core runs over one ordered stream per peer;
/// see `ofi_inet::tcp_core::attrs::MSG_ORDER`).
pub const MSG_ORDER: u64 = attrs::MSG_ORDER;

/// The RDM offer at place `p`: the DGRAM offer's place, domain and tag
/// format, with what the protocol core offers.
fn rdm_offer(p: &Place) -> Info {
    let mut o = dgram_offer(p);
    attrs::fill(&mut o, attrs::RDM_CAPS);
    o.ep_attr.ep_type = ep_type::FI_EP_RDM;
    o.ep_attr.protocol = protocol::FI_PROTO_UDP;
    // Shared receive and transmit contexts (ofi_core::util::srx and stx;
    // the RDM endpoints run tcp's receive core), as many as endpoints.
    o.domain_attr.max_ep_srx_ctx = o.domain_attr.ep_cnt;
    o.domain_attr.max_ep_stx_ctx = o.domain_attr.ep_cnt;
    o
}

/// The largest message a DGRAM endpoint on interface `ifname` sends: one
/// datagram of the interface's MTU (loopback: 64 KiB), less the header
/// and room for a MAC.
pub fn dgram_max(ifname: &str, v6: bool) -> usize {
    let mtu = sys::if_mtu(ifname).unwrap_or(1500);
    sys::udp_payload_max(mtu, v6)
        .saturating_sub(ofi_wire::udp::DGRAM_HDR_LEN + ofi_wire::udp::MAC_LEN)
}

/// The DGRAM offer at place `p`.
fn dgram_offer(p: &Place) -> Info {
    let caps = FI_MSG
        | FI_TAGGED
        | FI_SEND
        | FI_RECV
        | FI_SOURCE
        | FI_DIRECTED_RECV
        | FI_MULTICAST
        | FI_LOCAL_COMM
        | FI_REMOTE_COMM;
    let max = dgram_max(&p.domain, p.bind.is_ipv6());
    let mut o = p.offer(NAME, VERSION);
    o.caps = caps;
    o.tx_attr = TxAttr {
        caps: caps & TX_CAPS,
        op_flags: FI_INJECT_COMPLETE,
        msg_order: order::FI_ORDER_NONE,
        comp_order: order::FI_ORDER_NONE,
        inject_size: max,
        size: 1024,
        iov_limit: IOV_LIMIT,
        rma_iov_limit: 0,
        ..Default::default()
    };
    o.rx_attr = RxAttr {
        caps: caps & RX_CAPS,
        msg_order: order::FI_ORDER_NONE,
        comp_order: order::FI_ORDER_NONE,
        size: 1024,
        iov_limit: IOV_LIMIT,
        ..Default::default()
    };
    o.ep_attr.ep_type = ep_type::FI_EP_DGRAM;
    o.ep_attr.protocol = protocol::FI_PROTO_UDP;
    o.ep_attr.max_msg_size = max;
    o.ep_attr.mem_tag_format = 0xaaaa_aaaa_aaaa_aaaa;
    o
}

/// The offers for a request: on every interface subnet whose address
/// family fits, best first (non-loopback before loopback); with a
/// destination node, only subnets that can reach it.
pub fn offers(req: &GetinfoRequest<'_>) -> Result<Vec<Info>> {
    offers_on(req, &iface(tunables()))
}

fn offers_on(req: &GetinfoRequest<'_>, iface: &str) -> Result<Vec<Info>> {
    let walk = Walk {
        prov: NAME,
        iface,
        multicast: true,
    };
    walk.offers(req, |p| {
        let mut v = Vec::with_capacity(2);
        // A multicast group is a DGRAM destination only.
        if !p.dest.is_some_and(|d| d.ip().is_multicast()) {
            v.push(rdm_offer(p));
        }
        v.push(dgram_offer(p));
        v
    })
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
                    && i.ep_attr.ep_type == ep_type::FI_EP_DGRAM
            })
            .expect("a loopback offer");
        assert_eq!(lo.ep_attr.ep_type, ep_type::FI_EP_DGRAM);
        assert!(lo.caps & FI_MULTICAST != 0);
        let rdm = o
            .iter()
            .find(|i| {
                i.domain_attr.name.as_deref() == Some("lo")
                    && i.ep_attr.ep_type == ep_type::FI_EP_RDM
            })
            .expect("an RDM offer on loopback");
        assert!(rdm.caps & (FI_TAGGED | FI_RMA | FI_ATOMIC) == FI_TAGGED | FI_RMA | FI_ATOMIC);
        // Loopback's MTU is 64 KiB: one datagram carries about that much.
        let max = lo.ep_attr.max_msg_size;
        assert!(max > 60_000 && max < 65_507, "{max}");
        assert_eq!(lo.tx_attr.inject_size, max);
    }

    #[test]
    fn sockaddr_hint_takes_either_family_and_a_misfit_names_what_it_asked() {
        // FI_SOCKADDR (a sockaddr whose family tells) is met by IN offers
        // (and IN6 ones where the host has IPv6).
        let mut h = Info::hints();
        h.addr_format = addr_format::FI_SOCKADDR;
        let r = GetinfoRequest {
            hints: Some(&h),
            ..req(None, None, 0)
        };
        let o = offers_on(&r, "lo").unwrap();
        assert!(o
            .iter()
            .any(|i| i.addr_format == addr_format::FI_SOCKADDR_IN));
        // 10.255.255.1 is in no subnet of lo.
        let e = offers_on(&req(Some("10.255.255.1"), Some("4000"), 0), "lo").unwrap_err();
        assert_eq!(e.code(), ofi_core::error::errno::FI_ENODATA);
        let msg = e.to_string();
        assert!(msg.contains("destination 10.255.255.1:4000"), "{msg}");
        assert!(msg.contains("FI_UDP_IFACE=lo"), "{msg}");
    }

    #[test]
    fn udp_payload_follows_the_mtu() {
        assert_eq!(sys::udp_payload_max(1500, false), 1472);
        assert_eq!(sys::udp_payload_max(1500, true), 1452);
        assert_eq!(sys::udp_payload_max(65536, false), 65507);
    }
}
