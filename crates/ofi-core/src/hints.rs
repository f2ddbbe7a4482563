//! Hint validation and matching: which offers satisfy an application's hints.
//!
//! Validation rejects hints that are malformed (an unknown enum value, an
//! unknown flag bit, an inconsistent sub-attribute) with `FI_EINVAL` naming
//! the field. Matching is a pure function of one offer and the hints; it
//! returns the offer narrowed to what was asked, or the first field that
//! cannot be satisfied.

use crate::consts::*;
use crate::error::{Error, Result};
use crate::info::Info;

/// Every capability bit libfabric 1.17 defines.
const KNOWN_CAPS: u64 = FI_PRIMARY_CAPS | FI_SECONDARY_CAPS | FI_REMOTE_CQ_DATA;
/// Every mode bit libfabric 1.17 defines.
const KNOWN_MODES: u64 = FI_CONTEXT
    | FI_MSG_PREFIX
    | FI_ASYNC_IOV
    | FI_RX_CQ_DATA
    | FI_LOCAL_MR
    | FI_NOTIFY_FLAGS_ONLY
    | FI_RESTRICTED_COMP
    | FI_CONTEXT2
    | FI_BUFFERED_RECV;
/// Every operation flag meaningful in tx/rx `op_flags`.
const KNOWN_OP_FLAGS: u64 = FI_MULTI_RECV
    | FI_REMOTE_CQ_DATA
    | FI_MORE
    | FI_PEEK
    | FI_TRIGGER
    | FI_FENCE
    | FI_COMPLETION
    | FI_INJECT
    | FI_INJECT_COMPLETE
    | FI_TRANSMIT_COMPLETE
    | FI_DELIVERY_COMPLETE
    | FI_COMMIT_COMPLETE
    | FI_MATCH_COMPLETE;
const KNOWN_MR_MODE: u32 = (1 << 12) - 1;
const KNOWN_ORDER: u64 = order::FI_ORDER_STRICT | order::FI_ORDER_DATA | (0xff << 32);

fn check_enum(field: &str, v: u32, max: u32) -> Result<()> {
    if v > max && v & (1 << 31) == 0 {
        return Err(Error::inval(format!(
            "hints: {field} = {v} is not a valid value (0..={max})"
        )));
    }
    Ok(())
}

fn check_bits(field: &str, v: u64, known: u64) -> Result<()> {
    let unknown = v & !known & !(0xf << 60);
    if unknown != 0 {
        return Err(Error::inval(format!(
            "hints: {field} has unknown bits {unknown:#x}"
        )));
    }
    Ok(())
}

/// Checks the requested API version.
pub fn validate_version(version: u32) -> Result<()> {
    let (major, minor) = (version >> 16, version & 0xffff);
    if major != 1 {
        return Err(Error::new(
            crate::error::errno::FI_ENOSYS,
            format!("API version {major}.{minor} is not supported (1.x only)"),
        ));
    }
    if version > FI_VERSION_CURRENT {
        return Err(Error::new(
            crate::error::errno::FI_ENOSYS,
            format!("API version {major}.{minor} is newer than this library's 1.17"),
        ));
    }
    Ok(())
}

/// Rejects malformed hints with `FI_EINVAL` naming the offending field.
pub fn validate_hints(h: &Info) -> Result<()> {
    check_bits("caps", h.caps, KNOWN_CAPS)?;
    check_bits("mode", h.mode, KNOWN_MODES)?;
    // addr_format is not checked: a format this library does not know
    // (a newer libfabric's, a provider's own) is one no provider offers,
    // which matching answers with FI_ENODATA, as libfabric does.
    check_bits("tx_attr.caps", h.tx_attr.caps, KNOWN_CAPS)?;
    check_bits("rx_attr.caps", h.rx_attr.caps, KNOWN_CAPS)?;
    check_bits("tx_attr.mode", h.tx_attr.mode, KNOWN_MODES)?;
    check_bits("rx_attr.mode", h.rx_attr.mode, KNOWN_MODES)?;
    check_bits("tx_attr.op_flags", h.tx_attr.op_flags, KNOWN_OP_FLAGS)?;
    check_bits("rx_attr.op_flags", h.rx_attr.op_flags, KNOWN_OP_FLAGS)?;
    check_bits("tx_attr.msg_order", h.tx_attr.msg_order, KNOWN_ORDER)?;
    check_bits("rx_attr.msg_order", h.rx_attr.msg_order, KNOWN_ORDER)?;
    if h.caps != 0 {
        if h.tx_attr.caps & !h.caps & FI_PRIMARY_CAPS != 0 {
            return Err(Error::inval(
                "hints: tx_attr.caps asks for capabilities that caps does not include",
            ));
        }
        if h.rx_attr.caps & !h.caps & FI_PRIMARY_CAPS != 0 {
            return Err(Error::inval(
                "hints: rx_attr.caps asks for capabilities that caps does not include",
            ));
        }
    }
    check_enum("ep_attr.type", h.ep_attr.ep_type, ep_type::FI_EP_SOCK_DGRAM)?;
    let d = &h.domain_attr;
    check_enum(
        "domain_attr.threading",
        d.threading,
        threading::FI_THREAD_ENDPOINT,
    )?;
    check_enum(
        "domain_attr.control_progress",
        d.control_progress,
        progress::FI_PROGRESS_MANUAL,
    )?;
    check_enum(
        "domain_attr.data_progress",
        d.data_progress,
        progress::FI_PROGRESS_MANUAL,
    )?;
    check_enum(
        "domain_attr.resource_mgmt",
        d.resource_mgmt,
        resource_mgmt::FI_RM_ENABLED,
    )?;
    check_enum("domain_attr.av_type", d.av_type, av_type::FI_AV_TABLE)?;
    if d.mr_mode & !KNOWN_MR_MODE != 0 {
        return Err(Error::inval(format!(
            "hints: domain_attr.mr_mode has unknown bits {:#x}",
            d.mr_mode & !KNOWN_MR_MODE
        )));
    }
    check_bits("domain_attr.caps", d.caps, KNOWN_CAPS)?;
    check_bits("domain_attr.mode", d.mode, KNOWN_MODES)?;
    if let Some(list) = &h.fabric_attr.prov_name {
        ProviderFilter::parse(list)?;
    }
    for (field, key) in [
        ("ep_attr.auth_key", &h.ep_attr.auth_key),
        ("domain_attr.auth_key", &d.auth_key),
    ] {
        if let Some(k) = key {
            if k.is_empty() {
                return Err(Error::inval(format!("hints: {field} is empty")));
            }
        }
    }
    Ok(())
}

/// Checks getinfo's `node` before any provider is asked: with a socket
/// address format (or none) in the hints, it must resolve as a host
/// (numerically under FI_NUMERICHOST). One that does not is `FI_ENODATA`
/// at once for every provider (none can reach it), instead of offers whose
/// first use fails or hangs. A URI-like node (`fi_shm://name`,
/// `fi_sockaddr_in://…`) is an FI_ADDR_STR address: the providers' matter.
pub fn check_node(node: Option<&str>, flags: u64, hints: Option<&Info>) -> Result<()> {
    let Some(node) = node else {
        return Ok(());
    };
    let format = hints.map_or(addr_format::FI_FORMAT_UNSPEC, |h| h.addr_format);
    let socket_format = matches!(
        format,
        addr_format::FI_FORMAT_UNSPEC
            | addr_format::FI_SOCKADDR
            | addr_format::FI_SOCKADDR_IN
            | addr_format::FI_SOCKADDR_IN6
    );
    if !socket_format || node.contains("://") || node.parse::<std::net::IpAddr>().is_ok() {
        return Ok(());
    }
    let resolves = flags & FI_NUMERICHOST == 0
        && std::net::ToSocketAddrs::to_socket_addrs(&(node, 0))
            .is_ok_and(|mut a| a.next().is_some());
    if resolves {
        return Ok(());
    }
    Err(Error::new(
        crate::error::errno::FI_ENODATA,
        if flags & FI_NUMERICHOST != 0 {
            format!("node '{node}' is not a numeric address (FI_NUMERICHOST)")
        } else {
            format!("node '{node}' does not resolve to an address")
        },
    ))
}

/// An FI_PROVIDER-style list: `shm,tcp` (include) or `^tcp,udp` (exclude).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderFilter {
    exclude: bool,
    names: Vec<String>,
}

impl ProviderFilter {
    /// Parses a list; an empty element is an error.
    pub fn parse(text: &str) -> Result<Self> {
        let t = text.trim();
        let (exclude, rest) = match t.strip_prefix('^') {
            Some(r) => (true, r),
            None => (false, t),
        };
        let mut names = Vec::new();
        for n in rest.split(',') {
            let n = n.trim();
            if n.is_empty() {
                return Err(Error::inval(format!(
                    "provider list '{text}' has an empty name"
                )));
            }
            names.push(n.to_ascii_lowercase());
        }
        Ok(ProviderFilter { exclude, names })
    }
    /// True when a provider (possibly layered, `a;b`) passes the filter,
    /// for some of its offers: a layered name over an RDM utility
    /// (`tcp;ofi_rxm`) lets the core provider in (for its RDM offers,
    /// [`allows_offer`](Self::allows_offer)) and excludes none of it.
    pub fn allows(&self, prov_name: &str) -> bool {
        let lower = prov_name.to_ascii_lowercase();
        if self.exclude {
            !self.names.iter().any(|n| hit(n, &lower) == Hit::Any)
        } else {
            self.names.iter().any(|n| hit(n, &lower) != Hit::No)
        }
    }

    /// True when an offer of `prov_name` with endpoint type `ep_type`
    /// passes the filter: as [`allows`](Self::allows), but a layered name
    /// over an RDM utility names only the core provider's RDM offers.
    pub fn allows_offer(&self, prov_name: &str, ep_type: u32) -> bool {
        let lower = prov_name.to_ascii_lowercase();
        let rdm = ep_type == crate::consts::ep_type::FI_EP_RDM;
        let named = self.names.iter().any(|n| match hit(n, &lower) {
            Hit::No => false,
            Hit::Any => true,
            Hit::RdmOnly => rdm,
        });
        named != self.exclude
    }
}

/// Utility providers libfabric layers over a core provider to make RDM
/// endpoints (`tcp;ofi_rxm`, `udp;ofi_rxd`). ofi's providers offer RDM
/// endpoints themselves, so such a layered name asks for the core
/// provider's RDM offers.
const RDM_UTILS: [&str; 2] = ["ofi_rxm", "ofi_rxd"];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hit {
    No,
    /// Every offer of the provider.
    Any,
    /// Its RDM offers.
    RdmOnly,
}

/// How filter name `n` (lower case) names provider `prov` (lower case,
/// possibly layered).
fn hit(n: &str, prov: &str) -> Hit {
    let is = |name: &str| name == prov || prov.split(';').any(|c| c == name);
    if is(n) {
        return Hit::Any;
    }
    match n.split_once(';') {
        Some((core, util)) if RDM_UTILS.contains(&util) && is(core) => Hit::RdmOnly,
        _ => Hit::No,
    }
}

fn le(field: &'static str, want: usize, have: usize) -> Result<(), &'static str> {
    if want != 0 && want > have {
        Err(field)
    } else {
        Ok(())
    }
}

fn subset(field: &'static str, want: u64, have: u64) -> Result<(), &'static str> {
    if want & !have != 0 {
        Err(field)
    } else {
        Ok(())
    }
}

fn pick<T: Copy + PartialEq + Default>(hint: T, offer: T) -> T {
    if hint != T::default() {
        hint
    } else {
        offer
    }
}

/// Whether an offer's address format satisfies the hinted one: unspecified
/// takes any; FI_SOCKADDR (a sockaddr whose family tells) takes
/// FI_SOCKADDR_IN and FI_SOCKADDR_IN6 offers too (fi_getinfo(3)).
pub fn addr_format_fits(want: u32, have: u32) -> bool {
    use addr_format::*;
    want == FI_FORMAT_UNSPEC
        || want == have
        || (want == FI_SOCKADDR && matches!(have, FI_SOCKADDR_IN | FI_SOCKADDR_IN6))
}

/// Implied capabilities: asking for FI_MSG means send and receive, etc.
pub fn expand_caps(caps: u64) -> u64 {
    let mut c = caps;
    if c & (FI_MSG | FI_TAGGED | FI_ATOMIC | FI_RMA) != 0 && c & (FI_SEND | FI_RECV) == 0 {
        if c & (FI_MSG | FI_TAGGED) != 0 {
            c |= FI_SEND | FI_RECV;
        }
        if c & (FI_RMA | FI_ATOMIC) != 0
            && c & (FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE) == 0
        {
            c |= FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
        }
    }
    c
}

/// FI_VERSION(1, 5): from this API version on `mr_mode` is a set of bits;
/// before, the enum FI_MR_UNSPEC / FI_MR_BASIC / FI_MR_SCALABLE.
pub const MR_BITS_API: u32 = fi_version(1, 5);

/// The `mr_mode` an offer answers with, for the hinted one (None: no hints)
/// at API `version`, or the field's name when the offer needs modes the
/// hints do not allow (`fi_domain(3)`: an offer may only require modes the
/// application said it supports).
///
/// FI_MR_VIRT_ADDR, FI_MR_PROV_KEY and FI_MR_ALLOCATED are what an offer
/// prefers, not what it needs (the core's regions also do offsets and user
/// keys): they stay only where the hints allow them. The old modes are kept
/// as given (`fi_mr(3)`): FI_MR_BASIC (those three) or FI_MR_SCALABLE
/// (none), alone; both, or one mixed with new bits, match nothing. Before
/// API 1.5 the hint is the old enum and FI_MR_UNSPEC answers FI_MR_BASIC, as
/// libfabric does; no hints at all leave a newer API's offer as it is.
pub fn offer_mr_mode(version: u32, hinted: Option<u32>, offer: u32) -> Result<u32, &'static str> {
    use mr_mode::*;
    let optional = FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_ALLOCATED;
    let legacy = FI_MR_BASIC | FI_MR_SCALABLE;
    let need = offer & !legacy & !optional;
    let old_api = version < MR_BITS_API;
    let h = match hinted {
        Some(h) => h,
        None if old_api => 0,
        None => return Ok(offer),
    };
    let old = h & legacy;
    if old == legacy {
        return Err("domain_attr.mr_mode");
    }
    if old_api || old != 0 {
        // One of the old modes, which cannot express what an offer needs
        // beyond them; new bits beside them are a contradiction.
        if need != 0 || (!old_api && h & !legacy != 0) {
            return Err("domain_attr.mr_mode");
        }
        return Ok(if old == FI_MR_SCALABLE {
            FI_MR_SCALABLE
        } else {
            FI_MR_BASIC
        });
    }
    if need & !h != 0 {
        return Err("domain_attr.mr_mode");
    }
    Ok(need | (offer & optional & h))
}

/// Matches one offer against hints. On success, returns the offer narrowed
/// to the hints (requested caps, queue sizes, threading, AV type); on
/// failure, the name of the first field that cannot be satisfied.
pub fn match_offer(offer: &Info, h: &Info) -> Result<Info, &'static str> {
    match_offer_for(offer, h, FI_VERSION_CURRENT)
}

/// [`match_offer`] for an application of API `version` (which decides how
/// `mr_mode` reads: see [`offer_mr_mode`]).
pub fn match_offer_for(offer: &Info, h: &Info, version: u32) -> Result<Info, &'static str> {
    let mut out = offer.clone();
    if h.caps != 0 {
        let want = h.caps & !FI_SECONDARY_CAPS;
        subset("caps", want, offer.caps)?;
        subset(
            "caps",
            h.caps & FI_SECONDARY_CAPS & !(FI_RMA_EVENT | FI_SOURCE_ERR),
            offer.caps,
        )?;
        let asked = expand_caps(h.caps);
        out.caps = (asked & offer.caps) | (offer.caps & FI_SECONDARY_CAPS & asked);
        let opclass = FI_MSG | FI_TAGGED | FI_RMA | FI_ATOMIC;
        if h.caps & opclass == 0 {
            out.caps |= offer.caps & opclass;
            out.caps |= offer.caps
                & (FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE);
        }
    }
    subset("mode", offer.mode, h.mode)?;
    if !addr_format_fits(h.addr_format, offer.addr_format) {
        return Err("addr_format");
    }
    if let Some(p) = &h.fabric_attr.prov_name {
        let filt = ProviderFilter::parse(p).map_err(|_| "fabric_attr.prov_name")?;
        if !filt.allows_offer(offer.provider(), offer.ep_attr.ep_type) {
            return Err("fabric_attr.prov_name");
        }
    }
    if let Some(n) = &h.fabric_attr.name {
        if Some(n) != offer.fabric_attr.name.as_ref() {
            return Err("fabric_attr.name");
        }
    }
    if h.fabric_attr.prov_version != 0
        && h.fabric_attr.prov_version != offer.fabric_attr.prov_version
    {
        return Err("fabric_attr.prov_version");
    }
    // Endpoint.
    let (he, oe) = (&h.ep_attr, &offer.ep_attr);
    if he.ep_type != 0 && he.ep_type != oe.ep_type {
        return Err("ep_attr.type");
    }
    if he.protocol != 0 && he.protocol != oe.protocol {
        return Err("ep_attr.protocol");
    }
    le("ep_attr.max_msg_size", he.max_msg_size, oe.max_msg_size)?;
    le(
        "ep_attr.msg_prefix_size",
        he.msg_prefix_size,
        oe.msg_prefix_size,
    )?;
    le(
        "ep_attr.max_order_raw_size",
        he.max_order_raw_size,
        oe.max_order_raw_size,
    )?;
    le(
        "ep_attr.max_order_war_size",
        he.max_order_war_size,
        oe.max_order_war_size,
    )?;
    le(
        "ep_attr.max_order_waw_size",
        he.max_order_waw_size,
        oe.max_order_waw_size,
    )?;
    // FI_SHARED_CONTEXT asks for a shared context, which the domain must
    // offer (max_ep_stx_ctx / max_ep_srx_ctx); the offer then says so.
    if he.tx_ctx_cnt == FI_SHARED_CONTEXT {
        if offer.domain_attr.max_ep_stx_ctx == 0 {
            return Err("ep_attr.tx_ctx_cnt (FI_SHARED_CONTEXT)");
        }
        out.ep_attr.tx_ctx_cnt = FI_SHARED_CONTEXT;
    } else {
        le("ep_attr.tx_ctx_cnt", he.tx_ctx_cnt, oe.tx_ctx_cnt)?;
    }
    if he.rx_ctx_cnt == FI_SHARED_CONTEXT {
        if offer.domain_attr.max_ep_srx_ctx == 0 {
            return Err("ep_attr.rx_ctx_cnt (FI_SHARED_CONTEXT)");
        }
        out.ep_attr.rx_ctx_cnt = FI_SHARED_CONTEXT;
    } else {
        le("ep_attr.rx_ctx_cnt", he.rx_ctx_cnt, oe.rx_ctx_cnt)?;
    }
    if he.mem_tag_format != 0 {
        let offered_bits = if oe.mem_tag_format == 0 {
            64
        } else {
            oe.mem_tag_format.count_ones()
        };
        if he.mem_tag_format.count_ones() > offered_bits {
            return Err("ep_attr.mem_tag_format");
        }
        out.ep_attr.mem_tag_format = he.mem_tag_format;
    }
    if he.auth_key.is_some() {
        out.ep_attr.auth_key = he.auth_key.clone();
    }
    // Transmit.
    let (ht, ot) = (&h.tx_attr, &offer.tx_attr);
    subset("tx_attr.caps", ht.caps, ot.caps)?;
    subset("tx_attr.msg_order", ht.msg_order, ot.msg_order)?;
    subset("tx_attr.comp_order", ht.comp_order, ot.comp_order)?;
    subset(
        "tx_attr.op_flags",
        ht.op_flags,
        ot.op_flags | KNOWN_OP_FLAGS & !(FI_COMMIT_COMPLETE | FI_MATCH_COMPLETE | FI_TRIGGER),
    )?;
    le("tx_attr.inject_size", ht.inject_size, ot.inject_size)?;
    le("tx_attr.size", ht.size, ot.size)?;
    le("tx_attr.iov_limit", ht.iov_limit, ot.iov_limit)?;
    le("tx_attr.rma_iov_limit", ht.rma_iov_limit, ot.rma_iov_limit)?;
    out.tx_attr.size = pick(ht.size, ot.size);
    out.tx_attr.op_flags = ht.op_flags;
    out.tx_attr.caps = if ht.caps != 0 {
        ht.caps
    } else {
        ot.caps & (out.caps | !FI_PRIMARY_CAPS)
    };
    // Receive.
    let (hr, or) = (&h.rx_attr, &offer.rx_attr);
    subset("rx_attr.caps", hr.caps, or.caps)?;
    subset("rx_attr.msg_order", hr.msg_order, or.msg_order)?;
    subset("rx_attr.comp_order", hr.comp_order, or.comp_order)?;
    subset(
        "rx_attr.op_flags",
        hr.op_flags,
        or.op_flags | FI_MULTI_RECV | FI_COMPLETION,
    )?;
    le(
        "rx_attr.total_buffered_recv",
        hr.total_buffered_recv,
        or.total_buffered_recv.max(1),
    )?;
    le("rx_attr.size", hr.size, or.size)?;
    le("rx_attr.iov_limit", hr.iov_limit, or.iov_limit)?;
    out.rx_attr.size = pick(hr.size, or.size);
    out.rx_attr.op_flags = hr.op_flags;
    out.rx_attr.caps = if hr.caps != 0 {
        hr.caps
    } else {
        or.caps & (out.caps | !FI_PRIMARY_CAPS)
    };
    // Domain.
    let (hd, od) = (&h.domain_attr, &offer.domain_attr);
    if let Some(n) = &hd.name {
        if Some(n) != od.name.as_ref() {
            return Err("domain_attr.name");
        }
    }
    if hd.threading != 0 {
        // A thread-safe provider satisfies every model; otherwise exact.
        if od.threading != threading::FI_THREAD_SAFE && od.threading != hd.threading {
            return Err("domain_attr.threading");
        }
        out.domain_attr.threading = hd.threading;
    }
    // An application written for manual progress also runs on auto progress.
    for (field, hv, ov) in [
        (
            "domain_attr.control_progress",
            hd.control_progress,
            od.control_progress,
        ),
        (
            "domain_attr.data_progress",
            hd.data_progress,
            od.data_progress,
        ),
    ] {
        if hv == progress::FI_PROGRESS_AUTO && ov != progress::FI_PROGRESS_AUTO {
            return Err(field);
        }
    }
    if hd.resource_mgmt == resource_mgmt::FI_RM_ENABLED
        && od.resource_mgmt != resource_mgmt::FI_RM_ENABLED
    {
        return Err("domain_attr.resource_mgmt");
    }
    if hd.av_type != 0 {
        if od.av_type != 0 && od.av_type != hd.av_type {
            return Err("domain_attr.av_type");
        }
        out.domain_attr.av_type = hd.av_type;
    }
    out.domain_attr.mr_mode = offer_mr_mode(version, Some(hd.mr_mode), od.mr_mode)?;
    le("domain_attr.mr_key_size", hd.mr_key_size, od.mr_key_size)?;
    le("domain_attr.cq_data_size", hd.cq_data_size, od.cq_data_size)?;
    le("domain_attr.cq_cnt", hd.cq_cnt, od.cq_cnt)?;
    le("domain_attr.ep_cnt", hd.ep_cnt, od.ep_cnt)?;
    le("domain_attr.tx_ctx_cnt", hd.tx_ctx_cnt, od.tx_ctx_cnt)?;
    le("domain_attr.rx_ctx_cnt", hd.rx_ctx_cnt, od.rx_ctx_cnt)?;
    le(
        "domain_attr.max_ep_tx_ctx",
        hd.max_ep_tx_ctx,
        od.max_ep_tx_ctx,
    )?;
    le(
        "domain_attr.max_ep_rx_ctx",
        hd.max_ep_rx_ctx,
        od.max_ep_rx_ctx,
    )?;
    le(
        "domain_attr.max_ep_stx_ctx",
        hd.max_ep_stx_ctx,
        od.max_ep_stx_ctx,
    )?;
    le(
        "domain_attr.max_ep_srx_ctx",
        hd.max_ep_srx_ctx,
        od.max_ep_srx_ctx,
    )?;
    le("domain_attr.cntr_cnt", hd.cntr_cnt, od.cntr_cnt)?;
    le("domain_attr.mr_iov_limit", hd.mr_iov_limit, od.mr_iov_limit)?;
    le("domain_attr.mr_cnt", hd.mr_cnt, od.mr_cnt)?;
    subset(
        "domain_attr.caps",
        hd.caps,
        od.caps | FI_LOCAL_COMM | FI_REMOTE_COMM,
    )?;
    if hd.caps & FI_REMOTE_COMM != 0 && offer.caps & FI_REMOTE_COMM == 0 {
        return Err("domain_attr.caps");
    }
    if hd.auth_key.is_some() {
        out.domain_attr.auth_key = hd.auth_key.clone();
    }
    if h.src_addr.is_some() {
        out.src_addr = h.src_addr.clone();
    }
    if h.dest_addr.is_some() {
        out.dest_addr = h.dest_addr.clone();
    }
    Ok(out)
}
