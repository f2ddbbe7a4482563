//! Connections of an MSG channel: one completion queue, domain and event
//! queue serve every connected endpoint the channel makes ([`connect`]) or
//! accepts from its passive endpoint ([`listen`], [`accept`]). Each
//! connection is named by an [`Addr`] that posts take as their peer, as
//! an RDM channel's posts take an address-vector entry; connection events
//! come from [`cm_event`].
//!
//! [`connect`]: super::Channel::connect
//! [`listen`]: super::Channel::listen
//! [`accept`]: super::Channel::accept
//! [`cm_event`]: super::Channel::cm_event

use super::Addr;
use crate::consts::eq_event;
use crate::{errno, EqEvent, Error, EventQueue, Info, PassiveEndpoint, Result};
use crate::{Endpoint, EqError};
use std::cell::RefCell;

/// A connection request that reached a listening channel: accept it
/// ([`Channel::accept`](super::Channel::accept)) or reject it.
pub struct ConnRequest {
    pub(super) info: Box<Info>,
    /// The private data the connecting peer sent with its request.
    pub data: Vec<u8>,
}

impl std::fmt::Debug for ConnRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnRequest")
            .field("data", &self.data)
            .finish()
    }
}

impl ConnRequest {
    /// The offer the accepting endpoint opens with (it names the peer in
    /// `dest_addr` when the provider knows it).
    pub fn info(&self) -> &Info {
        &self.info
    }
}

/// A connection event of an MSG channel.
#[derive(Debug)]
pub enum CmEvent {
    /// A peer asks to connect (listening channels).
    Request(ConnRequest),
    /// A connection is up; `data` is the peer's private data (what it
    /// passed to accept, for the connecting side).
    Connected {
        /// The connection.
        conn: Addr,
        /// Private data from the peer.
        data: Vec<u8>,
    },
    /// The peer shut the connection down (or it broke after it was up);
    /// its posted operations end with errors.
    Shutdown {
        /// The connection.
        conn: Addr,
    },
    /// A connection attempt failed (refused, unreachable, rejected key),
    /// or a passive endpoint reported an error (`conn` None).
    Failed {
        /// The connection, if the error is about one.
        conn: Option<Addr>,
        /// Why (`FI_ECONNREFUSED`, `FI_ETIMEDOUT` …).
        error: Error,
        /// Private data of a rejection.
        data: Vec<u8>,
    },
}

struct Slot {
    ep: Option<Endpoint>,
    gen: u32,
}

/// The endpoints of an MSG channel. Field order is drop order: the
/// connections close, then the passive endpoint, then the queue.
pub(super) struct Conns {
    slots: RefCell<Vec<Slot>>,
    pep: RefCell<Option<PassiveEndpoint>>,
    pub(super) eq: EventQueue,
    pub(super) info: Info,
}

/// The index and generation an address names.
fn split(a: Addr) -> (usize, u32) {
    ((a.0 & 0xffff_ffff) as usize, (a.0 >> 32) as u32)
}

impl Conns {
    pub(super) fn new(info: Info, eq: EventQueue) -> Conns {
        Conns {
            slots: RefCell::new(Vec::new()),
            pep: RefCell::new(None),
            eq,
            info,
        }
    }

    /// Runs `f` on the endpoint of connection `a`.
    #[inline(always)]
    pub(super) fn with<R>(&self, a: Addr, f: impl FnOnce(&Endpoint) -> Result<R>) -> Result<R> {
        let (i, gen) = split(a);
        let slots = self.slots.borrow();
        match slots.get(i) {
            Some(Slot {
                ep: Some(ep),
                gen: g,
            }) if *g == gen => f(ep),
            _ => Err(no_conn(a)),
        }
    }

    /// A free slot's address (its generation moved on from the last use).
    pub(super) fn reserve(&self) -> Addr {
        let mut slots = self.slots.borrow_mut();
        let i = match slots.iter().position(|s| s.ep.is_none()) {
            Some(i) => i,
            None => {
                slots.push(Slot { ep: None, gen: 0 });
                slots.len() - 1
            }
        };
        let s = &mut slots[i];
        // Generation 0 is never used: no address is 0, none is FI_ADDR_UNSPEC.
        s.gen = match s.gen.wrapping_add(1) {
            0 | u32::MAX => 1,
            g => g,
        };
        Addr(u64::from(s.gen) << 32 | i as u64)
    }

    /// Puts an enabled endpoint into the slot `a` names.
    pub(super) fn install(&self, a: Addr, ep: Endpoint) {
        let (i, _) = split(a);
        if let Some(s) = self.slots.borrow_mut().get_mut(i) {
            s.ep = Some(ep);
        }
    }

    /// Takes connection `a`'s endpoint out.
    pub(super) fn remove(&self, a: Addr) -> Result<Endpoint> {
        let (i, gen) = split(a);
        let mut slots = self.slots.borrow_mut();
        match slots.get_mut(i) {
            Some(s) if s.gen == gen && s.ep.is_some() => s.ep.take().ok_or_else(|| no_conn(a)),
            _ => Err(no_conn(a)),
        }
    }

    /// Connections open.
    pub(super) fn count(&self) -> usize {
        self.slots
            .borrow()
            .iter()
            .filter(|s| s.ep.is_some())
            .count()
    }

    pub(super) fn set_pep(&self, pep: PassiveEndpoint) -> Result<()> {
        let mut p = self.pep.borrow_mut();
        if p.is_some() {
            return Err(Error::inval("listen: the channel listens already"));
        }
        *p = Some(pep);
        Ok(())
    }

    pub(super) fn with_pep<R>(&self, f: impl FnOnce(&PassiveEndpoint) -> Result<R>) -> Result<R> {
        match self.pep.borrow().as_ref() {
            Some(p) => f(p),
            None => Err(Error::new(
                errno::FI_EOPBADSTATE,
                "the MSG channel does not listen (call listen first)",
            )),
        }
    }

    /// What an event queue read gave, as a connection event (None: nothing
    /// to report yet).
    pub(super) fn event(&self, r: Result<EqEvent>) -> Result<Option<CmEvent>> {
        let ev = match r {
            Ok(ev) => ev,
            Err(e) if e.code() == errno::FI_EAVAIL => return self.error().map(Some),
            Err(e) if e.is_again() || e.code() == errno::FI_ETIMEDOUT => return Ok(None),
            Err(e) => return Err(e),
        };
        let conn = Addr(ev.fid as u64);
        Ok(match ev.event {
            eq_event::FI_CONNREQ => ev.info.map(|info| {
                CmEvent::Request(ConnRequest {
                    info,
                    data: ev.cm_data,
                })
            }),
            eq_event::FI_CONNECTED => Some(CmEvent::Connected {
                conn,
                data: ev.cm_data,
            }),
            eq_event::FI_SHUTDOWN => Some(CmEvent::Shutdown { conn }),
            // Other events (address resolution, joins) do not concern
            // connections.
            _ => None,
        })
    }

    fn error(&self) -> Result<CmEvent> {
        let EqError {
            fid, err, err_data, ..
        } = self.eq.readerr()?;
        let conn = (fid != 0).then_some(Addr(fid as u64));
        let what = match err {
            errno::FI_ECONNREFUSED => "the peer refused the connection",
            errno::FI_EKEYREJECTED => "the peer rejected the authentication key",
            _ => "the connection failed",
        };
        Ok(CmEvent::Failed {
            conn,
            error: Error::new(err, what),
            data: err_data,
        })
    }
}

fn no_conn(a: Addr) -> Error {
    Error::new(
        errno::FI_ENOTCONN,
        format!("MSG channel: no connection {:#x}", a.0),
    )
}
