//! The interfaces a getinfo request fits: where an offer binds (one place
//! per interface subnet, non-loopback first), filtered by the request's
//! source, destination, address format and the provider's `FI_<PROV>_IFACE`;
//! and the fields every offer of a place gets from the request.

use crate::addr;
use ofi_core::config::Tunable;
use ofi_core::consts::*;
use ofi_core::error::{Error, Result};
use ofi_core::info::{DomainAttr, FabricAttr, Info};
use ofi_core::provider::GetinfoRequest;
use ofi_core::util::netif;
use std::net::{IpAddr, SocketAddr};

/// The interface a provider's `FI_<PROV>_IFACE` names, from its tunables
/// (empty: every interface).
pub fn iface(tunables: Vec<Tunable>) -> String {
    tunables
        .into_iter()
        .find(|t| t.name == "iface")
        .map(|t| t.get_str().trim().to_string())
        .unwrap_or_default()
}

/// Where offers of one interface subnet bind.
#[derive(Clone, Debug)]
pub struct Place {
    /// The address an endpoint binds (the request's port, else 0).
    pub bind: SocketAddr,
    /// The fabric's name: the interface's subnet.
    pub fabric: String,
    /// The domain's name: the interface's name.
    pub domain: String,
    /// Where the endpoint sends or connects, when the request names it.
    pub dest: Option<SocketAddr>,
}

impl Place {
    /// An offer of provider `prov` (version `version`) binding here: what
    /// every offer says alike ([`Info::offer`]), with what every endpoint
    /// over IP sockets offers: its address; a domain named after the
    /// interface (manual progress, the object counts) in a fabric named
    /// after its subnet. The provider fills in its endpoint.
    pub fn offer(&self, prov: &str, version: u32) -> Info {
        let o = Info::offer(prov, version);
        Info {
            addr_format: addr::format_of(&self.bind),
            src_addr: Some(addr::encode(&self.bind)),
            domain_attr: DomainAttr {
                name: Some(self.domain.clone()),
                control_progress: progress::FI_PROGRESS_MANUAL,
                data_progress: progress::FI_PROGRESS_MANUAL,
                cq_cnt: 256,
                ep_cnt: 8192,
                tx_ctx_cnt: 8192,
                rx_ctx_cnt: 8192,
                cntr_cnt: 1024,
                caps: FI_LOCAL_COMM | FI_REMOTE_COMM,
                ..o.domain_attr
            },
            fabric_attr: FabricAttr {
                name: Some(self.fabric.clone()),
                ..o.fabric_attr
            },
            ..o
        }
    }
}

/// How the offers of a provider are walked.
#[derive(Clone, Copy, Debug)]
pub struct Walk<'a> {
    /// The provider's name (error prefixes, `FI_<NAME>_IFACE`).
    pub prov: &'a str,
    /// Offer only this interface (by name) unless the request names a
    /// source address; empty: every interface that is up.
    pub iface: &'a str,
    /// A multicast destination is reachable from every interface.
    pub multicast: bool,
}

impl Walk<'_> {
    /// The offers for `req`: `make` gives the offers of one place (best
    /// first); each gets the request's progress model, destination and API
    /// version. A request no interface fits is refused with FI_ENODATA
    /// naming what it asked for.
    pub fn offers(
        &self,
        req: &GetinfoRequest<'_>,
        mut make: impl FnMut(&Place) -> Vec<Info>,
    ) -> Result<Vec<Info>> {
        let prov = self.prov;
        let hints = req.hints;
        let hinted = hints.map_or(0, |h| h.addr_format);
        if !matches!(
            hinted,
            addr_format::FI_FORMAT_UNSPEC
                | addr_format::FI_SOCKADDR
                | addr_format::FI_SOCKADDR_IN
                | addr_format::FI_SOCKADDR_IN6
        ) {
            return Err(Error::nodata(format!(
                "{prov}: address format {hinted} is not FI_SOCKADDR, FI_SOCKADDR_IN or FI_SOCKADDR_IN6"
            )));
        }
        // FI_SOCKADDR leaves the family open: offers of either.
        let want_fmt = Some(hinted).filter(|f| *f != 0 && *f != addr_format::FI_SOCKADDR);
        let numeric = req.flags & FI_NUMERICHOST != 0;
        let source = req.flags & FI_SOURCE != 0;
        // Where the endpoint binds, and where it sends or connects.
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
                // A service alone names the local port to bind.
                src = Some(addr::resolve(None, req.service, want_fmt, numeric)?[0]);
            }
        }
        let iface = self.iface;
        let mut ifs = netif::interfaces()
            .map_err(|e| Error::os(e, &format!("{prov}: listing interfaces")))?;
        ifs.retain(|i| i.up);
        let named_source = src.is_some_and(|s| !s.ip().is_unspecified());
        if !iface.is_empty() && !named_source {
            ifs.retain(|i| i.name == iface);
            if ifs.is_empty() {
                return Err(Error::nodata(format!(
                    "{prov}: {}={iface} names no interface that is up",
                    self.iface_var()
                )));
            }
        }
        ifs.sort_by_key(|i| i.loopback);
        // A destination outside every local subnet is reached through a
        // router: the kernel's route to it names the interface (the source
        // address it would pick), as for any socket that connects there.
        let routed = dest
            .filter(|d| !d.ip().is_multicast() && !ifs.iter().any(|i| i.contains(&d.ip())))
            .and_then(route_source);
        let auto = hints.is_some_and(|h| {
            h.domain_attr.data_progress == progress::FI_PROGRESS_AUTO
                || h.domain_attr.control_progress == progress::FI_PROGRESS_AUTO
        });
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
                    || (self.multicast && d.ip().is_multicast())
                    || routed == Some(ifa.addr);
                if !same_family || !reaches {
                    continue;
                }
            }
            let place = Place {
                bind: SocketAddr::new(ifa.addr, src.map_or(0, |s| s.port())),
                fabric: ifa.subnet(),
                domain: ifa.name.clone(),
                dest,
            };
            for mut o in make(&place) {
                if auto {
                    // Both models are supported; an application that asks
                    // for auto progress gets a domain with a progress thread.
                    o.domain_attr.data_progress = progress::FI_PROGRESS_AUTO;
                    o.domain_attr.control_progress = progress::FI_PROGRESS_AUTO;
                }
                o.dest_addr = dest.map(|d| addr::encode(&d));
                o.fabric_attr.api_version = req.version;
                out.push(o);
            }
        }
        if out.is_empty() {
            return Err(Error::nodata(self.no_fit(
                src,
                dest,
                want_fmt,
                named_source,
            )));
        }
        Ok(out)
    }

    /// The provider's interface variable: FI_<NAME>_IFACE.
    fn iface_var(&self) -> String {
        format!("FI_{}_IFACE", self.prov.to_ascii_uppercase())
    }

    /// Why no interface fits a getinfo request: what it asked for (the
    /// source, the destination, the address format, the interface variable)
    /// in one message.
    fn no_fit(
        &self,
        src: Option<SocketAddr>,
        dest: Option<SocketAddr>,
        fmt: Option<u32>,
        named_source: bool,
    ) -> String {
        let prov = self.prov;
        let mut asked = Vec::new();
        if let Some(s) = src.filter(|s| !s.ip().is_unspecified()) {
            asked.push(format!("source {}", s.ip()));
        }
        if let Some(d) = dest {
            asked.push(format!("destination {d}"));
        }
        match fmt {
            Some(addr_format::FI_SOCKADDR_IN) => asked.push("FI_SOCKADDR_IN".into()),
            Some(addr_format::FI_SOCKADDR_IN6) => asked.push("FI_SOCKADDR_IN6".into()),
            _ => {}
        }
        if !self.iface.is_empty() && !named_source {
            asked.push(format!("{}={}", self.iface_var(), self.iface));
        }
        if asked.is_empty() {
            format!("{prov}: no interface that is up has an address")
        } else {
            format!(
                "{prov}: no interface that is up fits the request ({}): a source must be one of \
                 its addresses, a destination in its subnet or reached by a route through it",
                asked.join(", ")
            )
        }
    }
}

/// The local address the kernel's routing table picks for sending to
/// `dest` (None when no route reaches it). A UDP socket connected to the
/// destination learns it; connecting a datagram socket sends nothing.
fn route_source(dest: SocketAddr) -> Option<IpAddr> {
    let any: SocketAddr = match dest {
        SocketAddr::V4(_) => (std::net::Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let s = std::net::UdpSocket::bind(any).ok()?;
    // Port 0 is no destination for connect(); the route does not depend
    // on the port.
    let mut to = dest;
    if to.port() == 0 {
        to.set_port(9);
    }
    s.connect(to).ok()?;
    s.local_addr().ok().map(|a| a.ip())
}
