//! Opening socket-addressed endpoints with the ofi-core API: the offer of a
//! provider bound to a node, and one endpoint with its own fabric, domain,
//! tagged-format CQ, AV and EQ.

use crate::cq::tagged_cq;
use ofi_core::consts::*;
use ofi_core::object::*;
use ofi_core::util::av::AvAttr;
use ofi_core::util::cq::CqAttr;
use ofi_core::Info;

/// getinfo for `prov`'s offers of `ep_type` with FI_MSG bound to `node`
/// (FI_SOURCE, any port; FI_SOCKADDR_IN6 when `node` is an IPv6 address,
/// else FI_SOCKADDR_IN), its error as it comes. The provider is registered
/// by the caller.
pub fn request_of(prov: &str, ep_type: u32, node: &str) -> ofi_core::error::Result<Vec<Info>> {
    let mut h = Info::hints();
    h.caps = FI_MSG;
    h.ep_attr.ep_type = ep_type;
    h.fabric_attr.prov_name = Some(prov.into());
    h.addr_format = if node.contains(':') {
        addr_format::FI_SOCKADDR_IN6
    } else {
        addr_format::FI_SOCKADDR_IN
    };
    ofi_core::getinfo(
        FI_VERSION_CURRENT,
        Some(node),
        Some("0"),
        FI_SOURCE,
        Some(&h),
    )
}

/// `prov`'s offer of `ep_type` bound to `node` (FI_SOURCE, any port);
/// panics when there is none or it is bound elsewhere.
pub fn offer_of(prov: &str, ep_type: u32, node: &str) -> Info {
    let v = request_of(prov, ep_type, node)
        .unwrap_or_else(|e| panic!("getinfo {prov} node={node} FI_SOURCE: {e}"));
    let o = v
        .into_iter()
        .find(|i| i.provider() == prov)
        .unwrap_or_else(|| panic!("getinfo returned no {prov} offer for {node}"));
    let src = ofi_inet::addr::decode(o.src_addr.as_deref().expect("offer has src_addr"))
        .expect("offer's src_addr decodes");
    assert_eq!(
        src.ip().to_string(),
        node,
        "offer for node {node} is bound to {src}"
    );
    o
}

/// One endpoint with its own fabric, domain, CQ (transmit and receive), AV
/// and EQ. Fields drop in declaration order: the endpoint first.
pub struct Ep {
    /// The endpoint.
    pub ep: Endpoint,
    /// Its address vector.
    pub av: AddressVector,
    /// Its completion queue (transmit and receive).
    pub cq: CompletionQueue,
    /// Its event queue (joins and peer deaths are reported there).
    pub eq: EventQueue,
    /// Its domain.
    pub domain: Domain,
    /// Its fabric.
    pub fabric: Fabric,
}

impl Ep {
    /// Opens and enables an endpoint on `info` (tagged-format CQ).
    pub fn open(info: &Info) -> Ep {
        Ep::open_full(info, &tagged_cq(), 0)
    }

    /// As [`open`](Self::open), with these CQ attributes.
    pub fn open_with(info: &Info, cq: &CqAttr) -> Ep {
        Ep::open_full(info, cq, 0)
    }

    /// As [`open`](Self::open), the endpoint's context (its EQ reports'
    /// fid) being `ctx`.
    pub fn open_ctx(info: &Info, ctx: usize) -> Ep {
        Ep::open_full(info, &tagged_cq(), ctx)
    }

    fn open_full(info: &Info, cq: &CqAttr, ctx: usize) -> Ep {
        let fabric = Fabric::open(&info.fabric_attr).expect("fabric");
        let domain = fabric.domain(info).expect("domain");
        let cq = domain.cq(cq).expect("cq");
        let av = domain.av(&AvAttr::default()).expect("av");
        let eq = fabric.eq(&Default::default()).expect("eq");
        let ep = domain.endpoint_with_context(info, ctx).expect("endpoint");
        ep.bind_cq(&cq, FI_TRANSMIT | FI_RECV).expect("bind cq");
        ep.bind_av(&av).expect("bind av");
        ep.bind_eq(&eq).expect("bind eq");
        ep.enable().expect("enable");
        Ep {
            ep,
            av,
            cq,
            eq,
            domain,
            fabric,
        }
    }

    /// The endpoint's address as a socket address (for messages).
    pub fn sockaddr(&self) -> std::net::SocketAddr {
        ofi_inet::addr::decode(&self.ep.getname().expect("getname")).expect("decode")
    }

    /// Inserts `other`'s address into this endpoint's AV.
    pub fn insert(&self, other: &Ep) -> u64 {
        self.av
            .insert_one(&other.ep.getname().expect("getname"))
            .expect("av insert")
    }
}
