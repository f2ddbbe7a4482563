//! The endpoint's state under its lock ([`State`]) and the records it keeps
//! of messages and operations in flight: held payloads, transmit-side
//! operations on an inner endpoint, receives waiting for a rendezvous
//! payload.

use super::peers::Route;
use ofi_core::object::EpBindings;
use ofi_core::util::cq::{CqErrEntry, CqTaggedEntry};
use ofi_core::util::iov::IoVec;
use ofi_core::util::matching::{MatchQueues, MAX_IOV};
use ofi_core::util::slab::Slab;
use std::collections::{HashMap, VecDeque};
use std::time::Instant;

/// A held (unexpected) message's payload.
#[derive(Debug)]
pub(crate) enum Payload {
    /// Eager bytes, copied out of the bounce buffer.
    Eager(Vec<u8>),
    /// A rendezvous: the payload waits in the inner endpoint as a tagged
    /// message from `inner_src` with tag `cookie`.
    Rts {
        path: usize,
        inner_src: u64,
        cookie: u64,
    },
}

/// A transmit-side operation in flight on an inner endpoint.
pub(super) struct TxRec {
    pub(super) context: usize,
    /// Completion flags reported to the application (None: the inner
    /// completion's own, for RMA and atomics).
    pub(super) flags: Option<u64>,
    pub(super) completion: bool,
    /// A rendezvous header: its completion is not the application's; a
    /// failure fails the payload's record (index).
    pub(super) header_of: Option<usize>,
    /// Set when the header of this payload failed.
    pub(super) failed: Option<i32>,
}

/// A rendezvous payload whose header went out but which the inner
/// endpoint refused for now (FI_EAGAIN): posted again, in order, by
/// progress (its operation completes only once it is sent).
#[derive(Clone, Copy, Debug)]
pub(super) struct Deferred {
    /// The payload's transmit record (on the path it is queued for).
    pub(super) slot: usize,
    pub(super) dest: u64,
    pub(super) cookie: u64,
    /// The caller's ranges (valid until the send completes), or the copy
    /// of an inject's payload in `hdrs[slot]`.
    pub(super) iov: [IoVec; MAX_IOV],
    pub(super) cnt: usize,
    pub(super) desc: [u64; MAX_IOV],
    pub(super) ndesc: usize,
    pub(super) flags: u64,
}

/// A bounce receive's completion taken out of turn (see [`Bounces`]).
pub(super) enum Parked {
    Ok(CqTaggedEntry, u64),
    Err(CqErrEntry),
}

/// The order of one path's bounce receives. The inner endpoint matches
/// them in the order they were posted, which is the order its messages
/// arrived in, but may complete them in another: one taken by a message
/// whose bytes still come in pieces (shm without cross-process copies)
/// completes after those matched behind it. Their completions are taken
/// in posting order; one that comes early waits in `parked`.
#[derive(Default)]
pub(super) struct Bounces {
    /// Per bounce receive: its place in the posting order.
    pub(super) seq: Vec<u64>,
    /// The place the next bounce receive posted takes.
    pub(super) posted: u64,
    /// The place of the completion to take next.
    pub(super) next: u64,
    /// Completions that came before their turn (at most one per bounce
    /// receive).
    pub(super) parked: Vec<Parked>,
}

/// A receive waiting for a rendezvous payload.
pub(crate) struct RxRec {
    pub(super) context: usize,
    pub(super) flags: u64,
    pub(super) tag: u64,
    pub(super) data: u64,
    pub(super) buf: usize,
    pub(super) src: u64,
    pub(super) completion: bool,
    pub(super) discard: bool,
}

/// What the endpoint keeps under its lock (shared with the receive hook).
pub(crate) struct State {
    pub(super) b: EpBindings,
    /// AV inserts and generation mirrored so far.
    pub(super) seen: (u64, u64),
    /// Outer fi_addr -> route.
    pub(super) routes: Vec<Option<Route>>,
    /// Per path: inner fi_addr (an index of the inner AV, a table) ->
    /// outer fi_addr (FI_ADDR_NOTAVAIL where none).
    pub(super) rev: [Vec<u64>; 2],
    /// Per path: inner address bytes -> inner fi_addr (one insert each).
    pub(super) inner_addrs: [HashMap<Vec<u8>, u64>; 2],
    pub(crate) mq: MatchQueues<Payload>,
    pub(super) tx: Slab<TxRec>,
    pub(super) rx: Slab<RxRec>,
    /// Headers of sends in flight, by tx index (stable boxes, reused).
    /// Per tx slot: the header (and, when the caller's iov list leaves no
    /// entry for it, the payload) of a send in flight. Each inner Vec's heap
    /// buffer stays put while its send is in flight (it is only resized
    /// when the slot is reused).
    pub(super) hdrs: Vec<Vec<u8>>,
    /// Vectors for held eager payloads, reused.
    pub(super) pool: Vec<Vec<u8>>,
    /// Header and payload of an injected send whose iov list leaves no
    /// entry for the header (reused).
    pub(super) spill: Vec<u8>,
    pub(super) bounce: [Vec<Box<[u8]>>; 2],
    /// Per path: the posting order of the bounce receives.
    pub(super) order: [Bounces; 2],
    pub(super) next_cookie: u64,
    /// Per path: rendezvous payloads refused for now, oldest first.
    pub(super) deferred: [VecDeque<Deferred>; 2],
    /// Inner operations in flight per path (sends, RMA, atomics,
    /// rendezvous receives).
    pub(super) outstanding: [usize; 2],
    /// Progress calls left before a path that delivered counts as idle.
    pub(super) recent: [u32; 2],
    /// When each path was last polled (as of the last clock reading).
    pub(super) polled: [Instant; 2],
    /// The idle network path is armed (its sockets in its poller) and watched:
    /// it is polled only once the watch fires (or every WATCHED_POLL_US).
    pub(super) watching: bool,
    /// Some unexpected message may hold a pending source (see
    /// [`pending_src`](super::pending_src)): the AV sync looks for them.
    pub(super) held_pending: bool,
    /// Peers declared dead (fi_addr, address, errno): a receive directed at
    /// one fails at once. A message from the peer revives it; an AV
    /// removal keeps only the marks whose entry still names their address.
    pub(super) dead: Vec<(u64, Vec<u8>, i32)>,
}
