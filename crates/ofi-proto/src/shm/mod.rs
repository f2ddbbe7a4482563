//! The shm provider's protocol core: what an entry of a peer's ring means
//! and what the endpoint does about it, with no shared memory, system
//! calls or clocks. The provider (`ofi-prov-shm`) is its driver: it owns
//! the segment, the rings, the doorbells and the cross-process copies, and
//! asks the core at each step.
//!
//! - [`entry`]: decodes and validates every entry kind into an
//!   [`Incoming`] (the handler the `shm_entry` fuzz target drives).
//! - [`path`]: the decisions: how a send travels (inline, bounce buffer,
//!   rendezvous), how a rendezvous is copied (single copy, cooperative
//!   copy, pushed through the ring when the kernel refuses), how a
//!   one-sided write travels, and what a failed copy becomes.
//! - [`request`]: one-sided requests checked before any byte moves
//!   ([`AtomicReq`]: an ATOMIC's operation, datatype, count and operands).
//! - [`OpTable`]: operations waiting for a peer's answer, named by
//!   generation cookies so a stale or forged answer finds nothing; a
//!   peer's death fails exactly its operations ([`OpTable::take_where`]);
//!   an answer counts only from the operation's peer ([`OpTable::answered`]).
//! - [`rndv`]: the sender's side of a rendezvous ([`rndv::Sends`]):
//!   waiting for the receiver's ACK, pushing DATA chunks after its NACK as
//!   ring room allows, failing a dead peer's sends; and the receiver's
//!   ([`rndv::Reassembly`]): DATA chunks taken by offset, each byte once,
//!   complete when every byte arrived.
//! - [`CtrlQueue`]: control entries (ACK, NACK, CTS, one-sided answers)
//!   sent at once or queued in order while the peer's ring is full.
//! - [`RxState`]: receive matching and the unexpected-message budget (the
//!   endpoint stops reading its ring once the budget is spent: senders see
//!   a full ring, the shm form of credits).
//! - [`auth`]: the exchange that proves two endpoints hold the same auth
//!   key (HELLO, CHALLENGE, PROOF, REJECT) and the record of who did.
//! - [`liveness`]: when a peer counts as dead (its process gone, its
//!   endpoint closed, or silent while waited on for the peer timeout).
//!
//! The protocol, in outline: a message of at most one entry's inline room
//! travels in the entry (INLINE); up to a bounce buffer's size it travels in
//! a buffer of the receiver's segment named by the entry (BOUNCE); larger,
//! or with FI_DELIVERY_COMPLETE, the entry names the sender's memory (RTS)
//! and the receiver copies it across processes, alone or with the sender's
//! help (CTS), then answers ACK (with a status). A receiver the kernel does
//! not let copy answers NACK and the sender pushes the data as DATA
//! entries. One-sided requests (RMA_WRITE, RMA_PULL, RMA_READ, ATOMIC) are
//! checked and executed by the target, which answers RMA_RESP.

pub mod auth;
mod ctrl;
pub mod entry;
pub mod liveness;
mod ops;
pub mod path;
pub mod request;
pub mod rndv;
mod rx;

pub use ctrl::{ack, cts, nack, rma_answer, CtrlQueue, Push};
pub use entry::{
    decode, is_auth, is_request, one_sided, owed, sender, Answer, Body, Dropped, Incoming, Limits,
    MsgMeta, OneSided, OneSidedIn, Owed,
};
pub use ops::{OpTable, Stray};
pub use request::AtomicReq;
pub use rx::{consume_multi, Claimed, RxState};

/// A peer endpoint's id as entries carry it (`pid << 32 | index`).
pub type PeerId = u64;

/// An FI_E* number carried in an ACK or RMA_RESP `data` field, or FI_EIO
/// for a value that is not one (a peer cannot make us report nonsense).
pub fn status_code(v: u64) -> i32 {
    match i32::try_from(v) {
        Ok(c) if c > 0 && c < 1024 => c,
        _ => ofi_base::error::errno::FI_EIO,
    }
}
