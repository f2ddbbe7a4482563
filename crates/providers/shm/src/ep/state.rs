//! The endpoint's state under its lock ([`Inner`]) and the records it
//! keeps of messages and operations in flight: held unexpected payloads,
//! message metadata, rendezvous sends waiting for their ACK, receives
//! filled by DATA pushes.

use super::rma;
use crate::peer::Peer;
use ofi_core::object::EpBindings;
use ofi_core::util::iov::IoVec;
use ofi_core::util::matching::MAX_IOV;
use ofi_core::util::mr::MrCache;
use ofi_core::util::peer::DeadPeers;
use ofi_core::util::rma::Resolved;
use ofi_proto::shm::liveness::Liveness;
use ofi_proto::shm::rndv::{Reassembly, Sends};
use ofi_proto::shm::{CtrlQueue, OpTable, RxState};
use ofi_shmem::segment::MsgConsumer;
use ofi_wire::shm::MAX_RTS_IOV;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

/// An unexpected message's bytes, held until a receive matches it.
#[derive(Debug)]
pub(super) enum Payload {
    Inline(Vec<u8>),
    Bounce(u64),
    Rts {
        sender: u64,
        cookie: u64,
        iov: [(u64, u64); MAX_RTS_IOV],
        cnt: u8,
    },
}

/// What the receiver needs to know about a message.
#[derive(Clone, Copy, Debug)]
pub(super) struct Meta {
    pub(super) tagged: bool,
    pub(super) tag: u64,
    pub(super) data: u64,
    pub(super) cq_data: bool,
    pub(super) total: usize,
    pub(super) src_addr: u64,
}

/// A send waiting for the receiver's ACK (large messages).
pub(super) struct PendingSend {
    pub(super) peer: Arc<Peer>,
    pub(super) iov: [IoVec; MAX_IOV],
    pub(super) cnt: usize,
    pub(super) len: usize,
    pub(super) context: usize,
    pub(super) flags: u64,
    pub(super) completion: bool,
}

/// A receive being filled by DATA entries (the no-CMA fallback); the
/// core's [`Reassembly`] holds it and counts its bytes.
pub(super) struct Reasm {
    pub(super) iov: [IoVec; MAX_IOV],
    pub(super) cnt: usize,
    pub(super) offset: usize,
    pub(super) cap: usize,
    pub(super) meta: Meta,
    pub(super) context: usize,
    pub(super) cq_flags: u64,
    pub(super) completion: bool,
    pub(super) buf: usize,
}

/// True while sends or one-sided operations to peer `id` are in flight
/// (what a fence to it waits for, and what makes its silence count).
pub(super) fn in_flight_to(
    sends: &Sends<PendingSend>,
    rmas: &OpTable<rma::PendingRma>,
    id: u64,
) -> bool {
    sends.waits_on(id) || rmas.any(|r| r.peer.addr.id() == id)
}

/// The peers mapped by id, with the one looked up last beside the map: a
/// run of entries from one peer (requests and answers of a one-sided
/// stream, the endpoint talking to itself) skips the map's hash.
#[derive(Debug, Default)]
pub(super) struct PeerMap {
    map: HashMap<u64, Arc<Peer>>,
    last: Option<(u64, Arc<Peer>)>,
}

impl std::ops::Deref for PeerMap {
    type Target = HashMap<u64, Arc<Peer>>;
    fn deref(&self) -> &Self::Target {
        &self.map
    }
}

impl PeerMap {
    /// The peer mapped for `id`.
    #[inline]
    pub(super) fn get(&self, id: &u64) -> Option<&Arc<Peer>> {
        match &self.last {
            Some((k, p)) if k == id => Some(p),
            _ => self.map.get(id),
        }
    }
    /// The peer mapped for `id`, which the next look-ups find first.
    #[inline]
    pub(super) fn find(&mut self, id: u64) -> Option<&Arc<Peer>> {
        if !matches!(&self.last, Some((k, _)) if *k == id) {
            let p = self.map.get(&id)?.clone();
            self.last = Some((id, p));
        }
        self.last.as_ref().map(|(_, p)| p)
    }
    /// Maps `id` to `p`.
    pub(super) fn insert(&mut self, id: u64, p: Arc<Peer>) -> Option<Arc<Peer>> {
        self.last = Some((id, p.clone()));
        self.map.insert(id, p)
    }
    /// Forgets `id`.
    pub(super) fn remove(&mut self, id: &u64) -> Option<Arc<Peer>> {
        if matches!(&self.last, Some((k, _)) if k == id) {
            self.last = None;
        }
        self.map.remove(id)
    }
    /// Forgets every peer.
    pub(super) fn clear(&mut self) {
        self.last = None;
        self.map.clear();
    }
}

/// What the one-sided paths reuse, so that they allocate nothing once
/// warm: the bodies of operations in flight, the list a request's ranges
/// resolve into at the target, and the region resolved last.
#[derive(Default)]
pub(super) struct RmaSpare {
    /// Boxed: a body moves into an operation and back as a pointer.
    #[allow(clippy::vec_box)]
    pub(super) bodies: Vec<Box<rma::RmaBody>>,
    pub(super) resolved: Vec<Resolved>,
    pub(super) mrs: MrCache,
}

/// A multi-receive buffer's messages still landing.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct MultiLanding {
    /// The buffer's start (two buffers may share a context).
    pub(super) base: usize,
    pub(super) landing: usize,
    pub(super) released: bool,
}

/// The endpoint's state, under its lock.
pub(super) struct Inner {
    pub(super) b: EpBindings,
    /// Multi-receive buffers with messages still landing, by context:
    /// how many, and whether the buffer is released (its last message
    /// claimed). The release (FI_MULTI_RECV) goes on the last of them to
    /// complete, whatever order they finish in.
    pub(super) multi: std::sync::Mutex<HashMap<usize, MultiLanding>>,
    pub(super) need_src: bool,
    pub(super) av_gen: u64,
    pub(super) peers: Vec<Option<Arc<Peer>>>,
    pub(super) by_id: PeerMap,
    pub(super) src_cache: HashMap<u64, u64>,
    /// The last sender `src_addr` resolved and its fi_addr (0: none): a run
    /// of messages from one sender skips the map.
    pub(super) src_last: (u64, u64),
    pub(super) src_gen: u64,
    /// Posted receives, unexpected messages and their budget (core).
    pub(super) rx: RxState<Payload>,
    /// Rendezvous sends waiting for an ACK or being pushed (core).
    pub(super) sends: Sends<PendingSend>,
    /// Receives filled by DATA pushes (core).
    pub(super) reasm: Reassembly<Reasm>,
    /// Control answers waiting for room (core).
    pub(super) ctrl: CtrlQueue,
    /// One-sided operations waiting for their target's answer (core).
    pub(super) rmas: OpTable<rma::PendingRma>,
    /// Writes pushed through the target's ring in chunks (cookies).
    pub(super) rma_pushes: VecDeque<u64>,
    /// Reads answered through the initiator's ring in chunks (no CMA).
    pub(super) read_pushes: VecDeque<rma::ReadPush>,
    /// What the one-sided paths reuse.
    pub(super) spare: RmaSpare,
    pub(super) pool: Vec<Vec<u8>>,
    /// Peers declared dead (`ofi_core::util::peer`): reported once, their
    /// directed receives refused.
    pub(super) dead: DeadPeers,
    /// The ids of those peers with their error numbers (a held rendezvous
    /// from one fails with it).
    pub(super) dead_ids: Vec<(u64, i32)>,
    /// What the liveness check remembers of each mapped peer (core).
    pub(super) live: HashMap<u64, Liveness>,
    /// The sender of the last message read (0: none): a sender seen anew
    /// is noted, so the liveness check watches it too.
    pub(super) last_from: u64,
    /// Senders noted and not yet mapped.
    pub(super) senders: Vec<u64>,
    /// The endpoint's auth key and what each peer proved (core); `None`
    /// without a key.
    pub(super) auth: Option<ofi_proto::shm::auth::Auth>,
    /// The last sender found trusted (0: none): its next entries skip the
    /// lookup.
    pub(super) last_trusted: u64,
    /// PROOFs owed to peers whose rings were full.
    pub(super) proofs: Vec<ofi_proto::shm::auth::Out>,
    /// Senders refused (logged and answered REJECT once each; bounded).
    pub(super) refused: Vec<u64>,
    /// When the liveness check runs next.
    pub(super) next_check: Instant,
    /// Locked passes since the last look at the clock.
    pub(super) passes: u32,
    /// Closing: waiting for reads a live target may still answer (no
    /// liveness check meanwhile: a silent target is not a dead one).
    pub(super) settling: bool,
    pub(super) xfer_free: Vec<u32>,
    pub(super) xfer_gen: u32,
    /// The one consumer of the endpoint's ring (taken out while a pass
    /// reads entries).
    pub(super) ring: Option<MsgConsumer>,
}
