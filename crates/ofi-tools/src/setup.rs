//! Opening an endpoint from the flags (`-p -e -d`) and connecting it to the
//! peer at the other end of the control channel, for RDM and MSG endpoints.

use crate::args::Args;
use crate::control::Oob;
use ofi::consts::*;
use ofi::errno;
use ofi::{AvAttr, CqAttr, Endpoint, Info};
use std::net::IpAddr;
use std::time::Duration;

/// What the tool needs from an offer.
#[derive(Clone, Copy, Debug)]
pub struct Want {
    /// Primary capabilities (FI_MSG, FI_TAGGED, FI_RMA, FI_ATOMIC).
    pub caps: u64,
    /// Memory registration modes the tool handles (0: any).
    pub mr_mode: u32,
}

/// An endpoint connected to the peer, with the objects it depends on.
pub struct Ctx {
    /// The endpoint (bound to `cq` for both directions).
    pub ep: Endpoint,
    /// The completion queue (FI_CQ_FORMAT_CONTEXT).
    pub cq: ofi::CompletionQueue,
    /// The peer's address (0 on MSG endpoints).
    pub peer: u64,
    /// The largest inject of the offer.
    pub inject: usize,
    /// Wait for completions with blocking reads (`--block`).
    pub block: bool,
    /// The peer's address as `fi_av_straddr` prints it (for messages).
    pub peer_name: String,
    _av: Option<ofi::AddressVector>,
    /// The endpoint's event queue: connection events (MSG) and the
    /// provider's reports of the peer's death (both types).
    eq: ofi::EventQueue,
    _pep: Option<ofi::PassiveEndpoint>,
    /// The domain (for memory registration).
    pub domain: ofi::Domain,
    _fabric: ofi::Fabric,
}

impl Ctx {
    /// The first error completion waiting on the CQ, as a message (naming
    /// the peer when the error says it is gone).
    pub fn cq_error(&self) -> String {
        match self.cq.readerr() {
            Ok(err) => {
                let what = format!(
                    "completion error: {} ({}), context {:#x}, len {}, olen {}",
                    ofi::error::strerror(err.err),
                    err.err,
                    err.op_context,
                    err.len,
                    err.olen
                );
                match ofi::Cause::of_errno(err.err) {
                    Some(c) => {
                        format!("peer {} is gone ({}): {what}", self.peer_name, c.describe())
                    }
                    None => what,
                }
            }
            Err(e) => format!("fi_cq_readerr: {e}"),
        }
    }

    /// A call that failed at once (`what`: its name), as a message naming
    /// the peer when the error says it is gone: a send to a dead peer may
    /// fail when posted, before its death reaches the event queue.
    pub fn post_error(&self, what: &str, e: &ofi::error::Error) -> String {
        match ofi::Cause::of_errno(e.code()) {
            Some(c) => format!(
                "peer {} is gone ({}): {what}: {e}",
                self.peer_name,
                c.describe()
            ),
            None => format!("{what}: {e}"),
        }
    }

    /// Reads what the event queue holds about the peer: an error naming it
    /// when the provider reported its death (or, on MSG, the connection's
    /// end); other events are ignored.
    pub fn check_peer(&self) -> Result<(), String> {
        match self.eq.read() {
            Ok(ev) if ev.event == eq_event::FI_SHUTDOWN => Err(format!(
                "peer {} ended the connection (FI_SHUTDOWN)",
                self.peer_name
            )),
            Ok(_) => Ok(()),
            Err(e) if e.code() == errno::FI_EAVAIL => {
                let er = self
                    .eq
                    .readerr()
                    .map_err(|e| format!("fi_eq_readerr: {e}"))?;
                Err(match ofi::PeerDown::from_eq_error(&er) {
                    Some(d) => format!(
                        "peer {} died: {} ({}): {}",
                        self.peer_name,
                        ofi::error::strerror(er.err),
                        er.err,
                        d.cause.describe()
                    ),
                    None => format!(
                        "peer {}: event queue error {} ({})",
                        self.peer_name,
                        ofi::error::strerror(er.err),
                        er.err
                    ),
                })
            }
            Err(_) => Ok(()),
        }
    }
}

/// A capability set by name, the way fi_info prints one (`FI_RMA`).
pub fn caps_name(caps: u64) -> String {
    let s = bits_to_string(CAP_NAMES, caps);
    s.trim_start_matches("[ ")
        .trim_end_matches(" ]")
        .replace(", ", "|")
}

/// The hints the flags describe.
fn hints(a: &Args, want: &Want) -> Result<Info, String> {
    let mut hints = Info::hints();
    hints.caps = want.caps;
    hints.mode = FI_CONTEXT | FI_CONTEXT2;
    hints.domain_attr.mr_mode = want.mr_mode;
    hints.ep_attr.ep_type = match a.get("e").unwrap_or("rdm") {
        "rdm" => ep_type::FI_EP_RDM,
        "msg" => ep_type::FI_EP_MSG,
        "dgram" => ep_type::FI_EP_DGRAM,
        e => return Err(format!("unknown endpoint type '{e}' (msg|rdm|dgram)")),
    };
    if let Some(p) = a.get("p") {
        hints.fabric_attr.prov_name = Some(p.to_string());
    }
    if let Some(d) = a.get("d") {
        hints.domain_attr.name = Some(d.to_string());
    }
    Ok(hints)
}

/// The first offer for the flags, on the control connection's interface
/// (`local`, with FI_SOURCE), so that the data path takes the same route as
/// the control channel (loopback for local runs).
fn offer(a: &Args, want: &Want, local: Option<IpAddr>) -> Result<Info, String> {
    let hints = hints(a, want)?;
    let node = local.map(|ip| ip.to_string());
    let flags = if node.is_some() { FI_SOURCE } else { 0 };
    let infos = ofi::getinfo(
        FI_VERSION_CURRENT,
        node.as_deref(),
        None,
        flags,
        Some(&hints),
    )
    .map_err(|e| {
        if e.code() == errno::FI_ENODATA {
            format!(
                "no {} offer{} has {} (fi_getinfo: {e})",
                enum_name(EP_TYPE_NAMES, hints.ep_attr.ep_type).unwrap_or("?"),
                a.get("p")
                    .map(|p| format!(" from provider '{p}'"))
                    .unwrap_or_default(),
                caps_name(want.caps)
            )
        } else {
            format!("fi_getinfo: {e}")
        }
    })?;
    infos.into_iter().next().ok_or_else(|| "no offer".into())
}

fn cq_attr(block: bool) -> CqAttr {
    CqAttr {
        size: 0,
        format: cq_format::FI_CQ_FORMAT_CONTEXT,
        wait_obj: if block {
            wait_obj::FI_WAIT_FD
        } else {
            wait_obj::FI_WAIT_NONE
        },
    }
}

/// Opens the endpoint for the flags and connects it to the peer on the
/// other end of the control channel: RDM endpoints swap addresses over it
/// and insert each other in an AV; MSG endpoints connect (the server listens
/// on a passive endpoint whose address goes over the control channel).
pub fn open(
    a: &Args,
    want: &Want,
    local: Option<IpAddr>,
    oob: &mut Oob,
    client: bool,
) -> Result<(Info, Ctx), String> {
    let info = offer(a, want, local)?;
    let fabric = ofi::Fabric::open(&info.fabric_attr).map_err(|e| format!("fi_fabric: {e}"))?;
    let domain = fabric
        .domain(&info)
        .map_err(|e| format!("fi_domain: {e}"))?;
    let block = a.has("block");
    let cq = domain
        .cq(&cq_attr(block))
        .map_err(|e| format!("fi_cq_open: {e}"))?;
    // An endpoint bound to the CQ and to an AV or an EQ, enabled.
    let endpoint = |info: &Info,
                    av: Option<&ofi::AddressVector>,
                    eq: Option<&ofi::EventQueue>|
     -> Result<Endpoint, String> {
        let ep = domain
            .endpoint(info)
            .map_err(|e| format!("fi_endpoint: {e}"))?;
        ep.bind_cq(&cq, FI_TRANSMIT | FI_RECV)
            .map_err(|e| format!("fi_ep_bind: {e}"))?;
        if let Some(av) = av {
            ep.bind_av(av).map_err(|e| format!("fi_ep_bind: {e}"))?;
        }
        if let Some(eq) = eq {
            ep.bind_eq(eq).map_err(|e| format!("fi_ep_bind: {e}"))?;
        }
        ep.enable().map_err(|e| format!("fi_enable: {e}"))?;
        Ok(ep)
    };
    let eq = fabric
        .eq(&Default::default())
        .map_err(|e| format!("fi_eq_open: {e}"))?;
    let av = domain
        .av(&AvAttr::default())
        .map_err(|e| format!("fi_av_open: {e}"))?;
    let (ep, peer, pep, peer_name) = if info.ep_attr.ep_type != ep_type::FI_EP_MSG {
        // The EQ hears of the peer's death (an RDM endpoint has no
        // connection events).
        let ep = endpoint(&info, Some(&av), Some(&eq))?;
        let me = ep.getname().map_err(|e| format!("fi_getname: {e}"))?;
        oob.send(&me)?;
        let theirs = oob.recv()?;
        let peer = av
            .insert_one(&theirs)
            .map_err(|e| format!("fi_av_insert: {e}"))?;
        (ep, peer, None, av.straddr(&theirs))
    } else {
        let (ep, pep, what) = if client {
            let server = oob.recv()?;
            let ep = endpoint(&info, None, Some(&eq))?;
            ep.connect(&server, &[])
                .map_err(|e| format!("fi_connect: {e}"))?;
            (ep, None, "fi_connect")
        } else {
            let pep = fabric
                .passive_ep(&info, 0)
                .map_err(|e| format!("fi_passive_ep: {e}"))?;
            pep.bind_eq(&eq).map_err(|e| format!("fi_pep_bind: {e}"))?;
            pep.listen().map_err(|e| format!("fi_listen: {e}"))?;
            let name = pep.getname().map_err(|e| format!("fi_getname: {e}"))?;
            oob.send(&name)?;
            let req = eq_wait(&eq, "fi_listen")?;
            let rinfo = match (req.event, req.info) {
                (eq_event::FI_CONNREQ, Some(i)) => *i,
                (e, _) => return Err(format!("fi_listen: unexpected event {e}")),
            };
            let ep = endpoint(&rinfo, None, Some(&eq))?;
            ep.accept(&[]).map_err(|e| format!("fi_accept: {e}"))?;
            (ep, Some(pep), "fi_accept")
        };
        let ev = eq_wait(&eq, what)?;
        if ev.event != eq_event::FI_CONNECTED {
            return Err(format!("{what}: unexpected event {}", ev.event));
        }
        let name = ep
            .getpeer()
            .map(|a| av.straddr(&a))
            .unwrap_or_else(|_| "(unknown)".into());
        (ep, 0, pep, name)
    };
    let ctx = Ctx {
        ep,
        cq,
        peer,
        inject: info.tx_attr.inject_size,
        block,
        peer_name,
        _av: Some(av),
        eq,
        _pep: pep,
        domain,
        _fabric: fabric,
    };
    Ok((info, ctx))
}

/// Waits for one event on the EQ (connection management is slow: 30 s).
fn eq_wait(eq: &ofi::EventQueue, what: &str) -> Result<ofi::EqEvent, String> {
    match eq.sread(Some(Duration::from_secs(30))) {
        Ok(e) => Ok(e),
        Err(e) if e.code() == errno::FI_EAVAIL => {
            let err = eq.readerr().map_err(|e| e.to_string())?;
            Err(format!(
                "{what}: {} ({})",
                ofi::error::strerror(err.err),
                err.err
            ))
        }
        Err(e) => Err(format!("{what}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_print_by_name() {
        assert_eq!(caps_name(FI_RMA), "FI_RMA");
        assert_eq!(caps_name(FI_MSG | FI_TAGGED), "FI_MSG|FI_TAGGED");
    }
}
