//! Peers of the endpoint: found by fi_addr through the AV (cached per AV
//! generation) or by the id an entry carries, mapped once, forgotten once
//! their endpoint closes; and the reverse lookup of a sender's fi_addr.

use super::{Inner, ShmEndpoint};
use crate::addr::ShmAddr;
use crate::peer::Peer;
use ofi_core::consts::FI_ADDR_NOTAVAIL;
use ofi_core::error::{errno, Error, Result};
use ofi_core::util::peer::Cause;
use ofi_proto::shm::liveness::Liveness;
use std::sync::Arc;
use std::time::Instant;

impl ShmEndpoint {
    pub(super) fn peer_by_id(&self, g: &mut Inner, id: u64) -> Result<Arc<Peer>> {
        if let Some(p) = g.by_id.get(&id) {
            return Ok(p.clone());
        }
        let p = Arc::new(Peer::open(ShmAddr::from_id(id), self.keyed)?);
        g.by_id.insert(id, p.clone());
        // Its liveness record is made here, with the mapping, rather than
        // at the first look: the look runs on the data path, which does
        // not allocate.
        g.live
            .entry(id)
            .or_insert_with(|| Liveness::new(Instant::now()));
        self.peer_revived(g, id);
        Ok(p)
    }

    #[inline]
    pub(super) fn peer_for(&self, g: &mut Inner, dest: u64) -> Result<Arc<Peer>> {
        let av =
            g.b.av
                .as_ref()
                .ok_or_else(|| Error::new(errno::FI_ENOAV, "shm: no address vector bound"))?;
        let gen = av.generation();
        if gen != g.av_gen {
            g.peers.clear();
            g.av_gen = gen;
        }
        if let Some(Some(p)) = g.peers.get(dest as usize) {
            return Ok(p.clone());
        }
        let bytes = av.lookup(dest).map_err(|_| {
            Error::inval(format!(
                "shm: destination fi_addr {dest} is not in the address vector"
            ))
        })?;
        let addr = ShmAddr::parse(&bytes)?;
        let p = match self.peer_by_id(g, addr.id()) {
            Ok(p) => p,
            Err(e) => return Err(self.unmappable(g, addr.id(), e)),
        };
        let i = dest as usize;
        if i < 1 << 24 {
            if g.peers.len() <= i {
                g.peers.resize(i + 1, None);
            }
            g.peers[i] = Some(p.clone());
        }
        Ok(p)
    }

    /// A peer in the AV that cannot be mapped because nothing lives at its
    /// address any more (its process exited or its endpoint closed before
    /// this endpoint first reached it): noted for the next liveness look,
    /// which declares it dead once (the EQ report, receives directed at it
    /// fail) as it does a peer that died while mapped. Returns `e`.
    #[cold]
    #[inline(never)]
    fn unmappable(&self, g: &mut Inner, id: u64, e: Error) -> Error {
        if e.code() == errno::FI_ECONNREFUSED
            && self.dead_id(g, id).is_none()
            && !g.senders.contains(&id)
        {
            g.senders.push(id);
        }
        e
    }

    /// The peer behind `dest`; one whose endpoint has closed is declared
    /// dead and refused with `FI_ECONNRESET`.
    pub(super) fn usable_peer(&self, g: &mut Inner, dest: u64) -> Result<Arc<Peer>> {
        let peer = self.peer_for(g, dest)?;
        if peer.closed() {
            return Err(self.gone(g, &peer));
        }
        Ok(peer)
    }

    /// Declares `peer` dead (its endpoint closed or its process exited:
    /// `FI_ECONNRESET`) and returns the error an operation toward it
    /// fails with.
    pub(super) fn gone(&self, g: &mut Inner, peer: &Peer) -> Error {
        let cause = Cause::Reset;
        self.peer_down(g, peer.addr.id(), cause, peer.closed());
        Error::new(
            cause.errno(),
            format!("shm: peer {} is gone: {}", peer.addr, cause.describe()),
        )
    }

    /// The fi_addr of sender `id` (FI_ADDR_NOTAVAIL without FI_SOURCE or
    /// when the AV does not hold it).
    pub(super) fn src_addr(&self, g: &mut Inner, id: u64) -> u64 {
        if !g.need_src {
            return FI_ADDR_NOTAVAIL;
        }
        let Some(gen) = g.b.av.as_ref().map(|av| av.generation()) else {
            return FI_ADDR_NOTAVAIL;
        };
        if gen != g.src_gen {
            g.src_cache.clear();
            g.src_last = (0, FI_ADDR_NOTAVAIL);
            g.src_gen = gen;
        }
        if g.src_last.0 == id && id != 0 {
            return g.src_last.1;
        }
        let a = match g.src_cache.get(&id) {
            Some(a) => *a,
            None => {
                let Some(a) =
                    g.b.av
                        .as_ref()
                        .and_then(|av| av.reverse_or_learn(&ShmAddr::from_id(id).to_bytes()))
                else {
                    return FI_ADDR_NOTAVAIL;
                };
                g.src_cache.insert(id, a);
                a
            }
        };
        g.src_last = (id, a);
        a
    }

    /// The error of a push that found `peer`'s ring full: FI_EAGAIN while
    /// it lives; once it has exited or closed it is declared dead and the
    /// error is the cause's.
    pub(super) fn ring_full(&self, g: &mut Inner, peer: &Peer) -> Error {
        if peer.dead() {
            self.gone(g, peer)
        } else {
            Error::again()
        }
    }
}
