//! Peer death: the one way every provider turns a dead or unreachable peer
//! into errors, so that no operation and no application waits for it
//! forever.
//!
//! A provider *declares* a peer dead when it has evidence: tcp when a
//! connection ends without an orderly close (the peer's process died or
//! its socket was reset), when keepalive or `TCP_USER_TIMEOUT` gives up,
//! when a handshake does not finish within the bound, or when a connection
//! attempt is refused or finds no route; shm when the process owning the
//! peer's segment is gone. Declaring it means, in this order:
//!
//! 1. every operation pending toward the peer (sends, RMA, atomics, queued
//!    or in flight) completes with an error entry whose `err` is the
//!    cause's number ([`Cause::errno`]): the provider does this, it owns
//!    those operations;
//! 2. every directed receive posted for the peer (its source is the peer's
//!    fi_addr) completes with the same error
//!    ([`MatchQueues::take_posted_from`](super::matching::MatchQueues::take_posted_from));
//!    a directed receive posted while the peer is marked dead completes at
//!    once ([`DeadPeers::dead`]); undirected receives stay posted;
//! 3. the endpoint's event queue, when one is bound, gets one error entry
//!    naming the peer ([`PeerDown::eq_error`]): `fid` is the endpoint's
//!    context, `data` the peer's fi_addr (`FI_ADDR_NOTAVAIL` when it is not
//!    in the address vector), `err` and `prov_errno` the cause's number and
//!    `err_data` the peer's raw address (`fi_av_straddr` prints it). An
//!    application with only undirected receives posted learns of the death
//!    there; [`PeerDown::from_eq_error`] reads such an entry back.
//!
//! A peer is reported once per death ([`DeadPeers::declare`] is false for
//! a peer already marked); the mark lifts when the provider completes a new
//! handshake with it ([`DeadPeers::revive`]): a restarted peer at the same
//! address is a live peer again.
//!
//! The causes and their numbers (chosen so an application can tell them
//! apart; nothing else produces them on an RDM endpoint's event queue):
//!
//! | cause | err | meaning |
//! |---|---|---|
//! | [`Cause::Reset`] | `FI_ECONNRESET` | the connection ended without an orderly close: the process died or closed its endpoint |
//! | [`Cause::TimedOut`] | `FI_ETIMEDOUT` | no answer within the bound ([`TIMEOUT_NAME`]) |
//! | [`Cause::Refused`] | `FI_ECONNREFUSED` | nothing accepts connections at its address: the process is not running |
//! | [`Cause::Unreachable`] | `FI_EHOSTUNREACH` | the network has no route to it |
//! | [`Cause::Broken`] | `FI_EIO` | it broke the protocol and was disconnected |
//!
//! The bound after which a silent peer is declared dead is each provider's
//! tunable `FI_<PROV>_PEER_TIMEOUT_MS` ([`timeout_tunable`], listed by
//! `ofi info -e`).

pub use ofi_base::peer::Cause;

use super::eq::EqError;
use crate::config::Tunable;
use crate::consts::FI_ADDR_NOTAVAIL;
use crate::object::EpBindings;
use std::time::Duration;

/// The name of the tunable holding the bound (`FI_<PROV>_PEER_TIMEOUT_MS`).
pub const TIMEOUT_NAME: &str = "peer_timeout_ms";

/// The default bound: a silent peer is declared dead after 5 s.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// The bound's tunable for provider `prov` (every provider declares it
/// with this helper so the name, default and help agree).
pub fn timeout_tunable(prov: &'static str) -> Tunable {
    Tunable::size(
        prov,
        TIMEOUT_NAME,
        DEFAULT_TIMEOUT.as_millis() as usize,
        "Milliseconds after which a peer that does not answer (a connection attempt or handshake that does not finish, data left unacknowledged, keepalive probes unanswered) is declared dead: its pending operations and directed receives fail and the endpoint's EQ reports it (see README, Security and failure model)",
    )
}

/// Reads the bound from a provider's tunables; 0 is refused naming the
/// variable (a peer needs some time to answer).
pub fn timeout_from(tunables: &[Tunable]) -> crate::error::Result<Duration> {
    let t = tunables
        .iter()
        .find(|t| t.name == TIMEOUT_NAME)
        .ok_or_else(|| crate::error::Error::inval("the provider declares no peer timeout"))?;
    let ms = t.get_nonzero_size("a peer needs some time to answer")?;
    Ok(Duration::from_millis(ms as u64))
}

/// A peer the provider declared dead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerDown {
    /// Its fi_addr in the endpoint's address vector (`FI_ADDR_NOTAVAIL`
    /// when it is not there).
    pub fi_addr: u64,
    /// Its raw address (the bytes `fi_getname` gave on its side).
    pub addr: Vec<u8>,
    /// Why.
    pub cause: Cause,
}

impl PeerDown {
    /// The event-queue error entry that reports this death on the endpoint
    /// whose context is `fid`.
    pub fn eq_error(&self, fid: usize) -> EqError {
        EqError {
            fid,
            context: 0,
            data: self.fi_addr,
            err: self.cause.errno(),
            prov_errno: self.cause.errno(),
            err_data: self.addr.clone(),
        }
    }

    /// Reads a death report back from an event-queue error entry; `None`
    /// for an entry that is not one (its number is no [`Cause`]'s).
    pub fn from_eq_error(e: &EqError) -> Option<PeerDown> {
        let cause = Cause::of_errno(e.err).filter(|c| c.errno() == e.err)?;
        (e.prov_errno == e.err).then(|| PeerDown {
            fi_addr: e.data,
            addr: e.err_data.clone(),
            cause,
        })
    }
}

#[derive(Clone, Debug)]
struct Dead {
    fi_addr: u64,
    addr: Vec<u8>,
    cause: Cause,
}

/// An endpoint's record of the peers it declared dead (usually none or a
/// few: a list, searched only on a death, a revival or a directed receive
/// while it is not empty).
#[derive(Clone, Debug, Default)]
pub struct DeadPeers {
    list: Vec<Dead>,
}

impl DeadPeers {
    /// Declares `down` dead: the first time (the peer was not marked), logs
    /// one line naming it, pushes the error entry to the endpoint's event
    /// queue (if one is bound) and returns true; false when it is marked
    /// already (report once per death). The caller fails the peer's
    /// pending operations and directed receives with `down.cause.errno()`
    /// either way. `closed`: the peer closed its endpoint in an orderly way
    /// (it said so before it went): the same report, logged at info level,
    /// since a clean exit (an MPI rank's finalize) is no fault; otherwise a
    /// warning.
    pub fn declare(&mut self, b: &EpBindings, down: &PeerDown, name: &str, closed: bool) -> bool {
        let known = |d: &Dead| {
            (!down.addr.is_empty() && d.addr == down.addr)
                || (down.fi_addr != FI_ADDR_NOTAVAIL && d.fi_addr == down.fi_addr)
        };
        if self.list.iter().any(known) {
            return false;
        }
        if closed {
            tracing::info!(
                peer = name,
                fi_addr = down.fi_addr,
                err = down.cause.errno(),
                "peer closed its endpoint"
            );
        } else {
            tracing::warn!(
                peer = name,
                fi_addr = down.fi_addr,
                err = down.cause.errno(),
                "peer declared dead: {}",
                down.cause.describe()
            );
        }
        self.list.push(Dead {
            fi_addr: down.fi_addr,
            addr: down.addr.clone(),
            cause: down.cause,
        });
        if let Some(eq) = &b.eq {
            eq.push_err(down.eq_error(b.fid));
        }
        true
    }

    /// The peer at `addr` (and `fi_addr`, when known) answered again: it is
    /// live, and a later death is reported anew.
    pub fn revive(&mut self, fi_addr: u64, addr: &[u8]) {
        if self.list.is_empty() {
            return;
        }
        self.list.retain(|d| {
            !((!addr.is_empty() && d.addr == addr)
                || (fi_addr != FI_ADDR_NOTAVAIL && d.fi_addr == fi_addr))
        });
    }

    /// The error a directed receive from `fi_addr` fails with at once when
    /// that peer is marked dead.
    #[inline]
    pub fn dead(&self, fi_addr: u64) -> Option<i32> {
        if self.list.is_empty() || fi_addr == FI_ADDR_NOTAVAIL {
            return None;
        }
        self.list
            .iter()
            .find(|d| d.fi_addr == fi_addr)
            .map(|d| d.cause.errno())
    }

    /// True when no peer is marked.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Forgets every mark (endpoint close).
    pub fn clear(&mut self) {
        self.list.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::errno;
    use crate::util::eq::{EqAttr, EqCore};
    use std::sync::Arc;

    fn bindings() -> (EpBindings, Arc<EqCore>) {
        let eq = EqCore::new(&EqAttr::default()).unwrap();
        let b = EpBindings {
            eq: Some(eq.clone()),
            fid: 0x77,
            ..Default::default()
        };
        (b, eq)
    }

    #[test]
    fn a_death_is_reported_once_naming_the_peer_until_it_revives() {
        let (b, eq) = bindings();
        let mut d = DeadPeers::default();
        let down = PeerDown {
            fi_addr: 3,
            addr: vec![1, 2, 3],
            cause: Cause::Reset,
        };
        assert!(d.declare(&b, &down, "p", false));
        assert!(
            !d.declare(&b, &down, "p", false),
            "a second report of one death"
        );
        let e = eq.readerr().unwrap();
        assert_eq!(
            (e.fid, e.data, e.err, e.err_data.as_slice()),
            (0x77, 3, errno::FI_ECONNRESET, &[1u8, 2, 3][..])
        );
        assert_eq!(PeerDown::from_eq_error(&e), Some(down.clone()));
        assert!(eq.readerr().is_err(), "one entry per death");
        assert_eq!(d.dead(3), Some(errno::FI_ECONNRESET));
        assert_eq!(d.dead(4), None);
        d.revive(FI_ADDR_NOTAVAIL, &[1, 2, 3]);
        assert_eq!(d.dead(3), None);
        assert!(
            d.declare(&b, &down, "p", false),
            "a new death after a revival"
        );
    }

    #[test]
    fn causes_map_to_distinct_numbers_and_back() {
        for c in [
            Cause::Reset,
            Cause::TimedOut,
            Cause::Refused,
            Cause::Unreachable,
            Cause::Broken,
        ] {
            assert_eq!(Cause::of_errno(c.errno()), Some(c));
        }
        assert_eq!(Cause::of_errno(errno::FI_ECANCELED), None);
        assert_eq!(
            Cause::of_errno(errno::FI_ENETDOWN),
            Some(Cause::Unreachable)
        );
        let other = EqError {
            err: errno::FI_ECANCELED,
            prov_errno: errno::FI_ECANCELED,
            ..Default::default()
        };
        assert_eq!(PeerDown::from_eq_error(&other), None);
    }
}
