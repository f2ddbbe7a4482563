//! Multicast groups (`fi_join`, `fi_mc_addr`, closing an `fid_mc`): an
//! endpoint that supports them (a DGRAM endpoint with FI_MULTICAST) joins a
//! group by its address; the group's fi_addr is a send destination; the
//! join is reported on the endpoint's event queue as FI_JOIN_COMPLETE;
//! closing the group leaves it.

use super::Endpoint;
use crate::consts::eq_event;
use crate::error::{errno, Error, Result};
use crate::provider::McOps;
use crate::util::eq::EqEvent;

/// A multicast group an endpoint joined (`struct fid_mc`).
pub struct Multicast {
    ops: Box<dyn McOps>,
}

impl std::fmt::Debug for Multicast {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Multicast")
            .field("fi_addr", &self.ops.fi_addr())
            .finish()
    }
}

impl Multicast {
    /// A group whose provider side (or the core's collective layer) is `ops`.
    pub(super) fn new(ops: Box<dyn McOps>) -> Multicast {
        Multicast { ops }
    }
    /// The address that sends to the group (`fi_mc_addr`).
    pub fn fi_addr(&self) -> u64 {
        self.ops.fi_addr()
    }
    /// This endpoint's rank, when the group is a collective one
    /// (`fi_join_collective`: its place in the AV set).
    pub fn rank(&self) -> Option<usize> {
        self.ops.rank()
    }
    /// Leaves the group (`fi_close`); dropping it does the same.
    pub fn close(self) -> super::CloseResult<Self> {
        Ok(())
    }
}

impl Endpoint {
    /// Joins the multicast group at `addr` (`fi_join`): `flags` FI_SEND
    /// and/or FI_RECV (0: both). On success FI_JOIN_COMPLETE, with `fid`
    /// as its fid and `context` as its context, goes to the bound event
    /// queue (when one is). The endpoint must be enabled.
    pub fn join(&self, addr: &[u8], flags: u64, fid: usize, context: usize) -> Result<Multicast> {
        let eq = {
            let s = self.state();
            if !s.enabled {
                return Err(Error::new(
                    errno::FI_EOPBADSTATE,
                    "join: enable the endpoint first",
                ));
            }
            s.b.eq.clone()
        };
        let ops = self.ops.join(addr, flags)?;
        if let Some(eq) = eq {
            eq.push(EqEvent {
                event: eq_event::FI_JOIN_COMPLETE,
                fid,
                context,
                ..Default::default()
            });
        }
        Ok(Multicast { ops })
    }
}
