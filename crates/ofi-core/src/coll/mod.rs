//! Collectives (`fi_collective(3)`) over any provider's RDM endpoint, once,
//! in the core: the sans-IO group cores of [`ofi_proto::coll`] driven over
//! the endpoint's own tagged messages. Every RDM offer with tagged
//! messages therefore offers FI_COLLECTIVE ([`offer`]); the application
//! sees AV sets ([`crate::object::AvSet`]), `fi_join_collective`, the
//! operations and `fi_query_collective` on the raw layer's objects
//! ([`crate::object::CollOp`]).
//!
//! **Only for who asks.** An offer carries FI_COLLECTIVE when the hints
//! ask for it ([`offer`]); an endpoint opened with it gets the collective
//! side (`relay::CollSide`) between it and its provider. Endpoints opened
//! without it call their provider directly, with all 64 tag bits and not
//! one instruction more per operation.
//!
//! **A tag space applications cannot reach.** The frames of a collective
//! travel as tagged messages whose tag has bit 63 set ([`guard::COLL_TAG`]),
//! on the application's own endpoint, in the same tagged queue as its
//! messages. A reserved range alone would not keep them apart: an
//! application's receive with every ignore bit set matches any tag, a
//! collective frame's included, and an application's send could land in
//! a collective's receive. So on an endpoint opened with FI_COLLECTIVE
//! the core keeps bit 63 on both sides of the line (`guard::Guarded`,
//! the provider's endpoint as every application call reaches it: the raw
//! layer, the C ABI, the safe and async layers, triggered operations): a
//! receive's ignore mask never covers bit 63 (an ignore with bit 63 set
//! has it cleared, and the receive's tag bit 63 with it: a wildcard
//! receive still takes every application message and no collective
//! frame); a receive or send whose tag sets bit 63 without ignoring it is
//! refused (`FI_EINVAL`). The collectives' own receives match bit 63
//! exactly, so they never take an application message. Such an
//! endpoint's applications have 63 tag bits.
//!
//! **Completions the application never sees.** The collectives' sends and
//! receives are the endpoint's operations, so the provider completes them
//! with the application's. On an endpoint opened with FI_COLLECTIVE the
//! provider completes into relay queues (`relay`), one per application
//! queue; reading or waiting on the application's queue drives the
//! relays, which hand the layer the entries whose contexts are addresses
//! inside a block it owns and never hands out (no application context,
//! its own memory or a small number, can be one) and pass the others on
//! in order. The provider's counters do count the collectives' frames (a
//! counter has no context to tell them apart by): an application that
//! counts sends on an endpoint that runs collectives sees them counted.
//!
//! **Progress.** The relays are progress sources of the application's
//! completion queues and of the endpoint's event queue, after the
//! provider's endpoint: reading either (or waiting on it) drives the
//! provider, whose completions the relays sort, then the collectives, which
//! post the next frames and write the operations' completions (the
//! caller's context, `FI_COLLECTIVE`) into the transmit queue and
//! FI_JOIN_COMPLETE into the event queue. A relay's wake-up fd is in the
//! application queue's wait set, so a blocking read wakes for a provider
//! that completes from its own thread.
//!
//! **Dead members.** A frame to a member that fails, or a peer death the
//! provider reports on the endpoint's event queue (which a join requires;
//! the layer watches its error entries, [`crate::util::tap::EqWatch`]),
//! fails every running operation of every group the member belongs to with
//! the cause's error, and the groups refuse new ones: no operation waits
//! for a dead member.
//!
//! **Naming a group.** Members agree on a group's name without talking:
//! it is a hash of its members' addresses, in order, and of how many
//! groups of the same members this endpoint joined before (members join
//! the groups they share in the same order, as the man page asks of a
//! collective's calls). Frames name the group, so several groups run at
//! once on one endpoint; frames of a group not joined yet wait, within a
//! bound and for at most a minute, for the join.
//!
//! **Members on one node** skip the messages for small operations: when
//! the provider has a shared-memory board ([`board`]; shm, and hybrid for
//! groups of one node) and every member agreed at the join, an operation
//! whose input fits a lane (256 bytes) is published in the member's lane
//! and completes once every member published it, read straight from the
//! lanes (`ofi_proto::coll::board`). Larger operations go as frames in the
//! same group. `FI_COLL_BOARD=0` at a member keeps its groups on frames.

pub mod board;
pub(crate) mod engine;
pub mod guard;
pub mod offer;
pub(crate) mod relay;

pub use guard::COLL_TAG;

/// The high bits of every collective group's address (`fi_mc_addr` of a
/// joined group; the low bits number it): far from any fi_addr an AV
/// gives and from an AV set's address.
pub const GROUP_ADDR_TAG: u64 = 0xc011 << 48;

/// Most members a group may have (`fi_collective_attr.max_members`).
pub const MAX_MEMBERS: usize = 1 << 16;

/// Largest message of one operation (bytes): what the core copies in and
/// out; a count past it is `FI_EMSGSIZE`.
pub const MESSAGE_MAX: usize = 1 << 30;
