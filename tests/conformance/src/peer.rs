//! A [`Peer`]: one endpoint of this process that talks to an endpoint in
//! another process, joined once the two have exchanged names ([`Joined`]).

use crate::fixtures::{connreq, enabled_endpoint, eq_wait, listen, open_domain, open_endpoint};
use crate::fixtures::{tagged_cq, Cm, A_CTX, B_CTX};
use crate::{require, require_pairable, Skip, TIMEOUT};
use ofi::consts::*;
use ofi::{AddressVector, CompletionQueue, Domain, Endpoint, Fabric, Info};
use std::time::Instant;

/// One endpoint of this process that talks to one endpoint in another
/// process, before the two know each other: its [`name`](Self::name) goes
/// to the other side, and [`join`](Self::join) with the other side's name
/// makes a [`Joined`]. RDM: the name is the endpoint's address, joining
/// inserts the other's into the AV. MSG: the name is a listener's address;
/// on joining, the side whose name sorts first connects to the other's
/// listener and the other accepts.
pub struct Peer {
    ep: Option<Endpoint>,
    cq: CompletionQueue,
    cm: Option<Cm>,
    av: Option<AddressVector>,
    domain: Domain,
    fabric: Fabric,
    info: Info,
    name: Vec<u8>,
}

/// An endpoint joined with its peer in another process.
pub struct Joined {
    /// The endpoint.
    pub ep: Endpoint,
    /// Its CQ (transmit and receive).
    pub cq: CompletionQueue,
    /// Destination of sends to the peer: its fi_addr (RDM) or
    /// FI_ADDR_UNSPEC (MSG).
    pub peer: u64,
    /// The connection's listener and event queue (MSG only).
    pub cm: Option<Cm>,
    /// The AV holding the peer (not for MSG).
    pub av: Option<AddressVector>,
    /// The domain.
    pub domain: Domain,
    /// The fabric.
    pub fabric: Fabric,
}

impl Peer {
    /// Opens the endpoint (RDM) or the listener (MSG); skips unless the
    /// offer has `caps` and one of those endpoint types.
    pub fn open(info: &Info, caps: u64, wait: u32) -> Result<Peer, Skip> {
        require(info, caps)?;
        require_pairable(info)?;
        let (fabric, domain, av) = open_domain(info);
        let cq = tagged_cq(&domain, wait);
        let (ep, cm, name) = match &av {
            Some(av) => {
                let ep = open_endpoint(&domain, info, &cq, av);
                let name = ep.getname().unwrap_or_else(|e| panic!("getname: {e}"));
                (Some(ep), None, name)
            }
            None => {
                let cm = listen(&fabric, info);
                let name = cm
                    .pep
                    .getname()
                    .unwrap_or_else(|e| panic!("listener getname: {e}"));
                (None, Some(cm), name)
            }
        };
        Ok(Peer {
            ep,
            cq,
            cm,
            av,
            domain,
            fabric,
            info: info.clone(),
            name,
        })
    }

    /// The address to give the other side.
    pub fn name(&self) -> &[u8] {
        &self.name
    }

    /// Joins with the other side's name (for MSG both sides must be
    /// joining at the same time; bounded by [`TIMEOUT`]).
    pub fn join(self, theirs: &[u8]) -> Joined {
        let Peer {
            ep,
            cq,
            cm,
            av,
            domain,
            fabric,
            info,
            name,
        } = self;
        let bind = |ep: &Endpoint| {
            ep.bind_cq(&cq, FI_TRANSMIT | FI_RECV)
                .unwrap_or_else(|e| panic!("bind cq: {e}"));
        };
        let (ep, peer) = match (ep, &av, &cm) {
            (Some(ep), Some(av), _) => {
                let peer = av
                    .insert_one(theirs)
                    .unwrap_or_else(|e| panic!("av insert of the peer: {e}"));
                (ep, peer)
            }
            (None, None, Some(cm)) => {
                let deadline = Instant::now() + TIMEOUT;
                let (ep, ctx, what) = if name.as_slice() < theirs {
                    let ep = enabled_endpoint(&domain, &info, A_CTX, None, Some(&cm.eq), bind);
                    ep.connect(theirs, &[])
                        .unwrap_or_else(|e| panic!("connect to the peer: {e}"));
                    (ep, A_CTX, "connect")
                } else {
                    let rinfo = connreq(cm, deadline);
                    let ep = enabled_endpoint(&domain, &rinfo, B_CTX, None, Some(&cm.eq), bind);
                    ep.accept(&[])
                        .unwrap_or_else(|e| panic!("accept the peer: {e}"));
                    (ep, B_CTX, "accept")
                };
                let ev = eq_wait(
                    &cm.eq,
                    deadline,
                    &format!("{what}: waiting for FI_CONNECTED"),
                );
                assert_eq!(
                    (ev.event, ev.fid),
                    (eq_event::FI_CONNECTED, ctx),
                    "{what}: expected FI_CONNECTED"
                );
                (ep, FI_ADDR_UNSPEC)
            }
            _ => unreachable!("Peer::open makes an endpoint with an AV or a listener"),
        };
        Joined {
            ep,
            cq,
            peer,
            cm,
            av,
            domain,
            fabric,
        }
    }
}
