//! The tcp provider's protocol core: frames on one TCP stream per
//! connection ([`ofi_wire::tcp`]), connection management with private data,
//! eager and rendezvous messages, tag matching shared by all connections of
//! an endpoint, receives that land in place, bounded unexpected memory.
//!
//! One-sided requests (RMA writes and reads, atomics) travel on the same
//! connections; the target executes them in stream order against the
//! endpoint's registered memory, which the driver lends as a [`Memory`]
//! (see [`one_sided`](self::RmaReq) for the ordering rules).
//!
//! Two objects, both owned by the driver:
//! - [`Rx`], one per endpoint: posted receives, unexpected messages, receive
//!   completions. `post_recv`, `cancel` and the peek family live here.
//! - [`Conn`], one per connection: sends, the read/write state of the
//!   stream, connection events. Calls that may match or complete a receive
//!   take `&mut Rx`.
//!
//! A driver loop, in outline (`sock` is the connection's socket):
//!
//! ```text
//! // writing (also whenever conn.wants_transmit(): reading can queue a CTS)
//! let t = conn.poll_transmit(&mut rx);
//! if !t.is_empty() { let n = writev(sock, t.iter()); conn.on_written(n); }
//! // reading
//! loop {
//!     let n = match conn.recv_target(&mut rx) {
//!         Target::Header(b) | Target::Buffer(b) => read(sock, b),
//!         Target::Payload(iov) => readv(sock, iov),      // the receive's own memory
//!         Target::Discard(n) => read(sock, &mut scratch[..n.min(scratch.len())]),
//!         Target::Blocked | Target::Closed => break,
//!     };
//!     if n == 0 { conn.on_eof(&mut rx); break }       // (or on_error on failure)
//!     conn.on_read(n, &mut rx);
//! }
//! // events
//! while let Some(e) = conn.poll_event() { /* tx CQ, EQ; ProtocolError: close */ }
//! while let Some(e) = rx.poll_event() {
//!     // RecvComplete with `copy`: copy_to_iov(copy.iov(), copy.offset, &copy.bytes) first
//! }
//! while let Some(id) = rx.next_wakeup() { /* drive connection `id` again */ }
//! if conn.is_closed() { /* close the socket */ }
//! ```

mod conn;
mod crossing;
mod event;
mod one_sided;
mod rx;

pub use conn::{Config, Conn, SendReq, State, Target, Transmit, TxSlice, FAST_MAX};
pub use crossing::{decide_hello, Existing, HelloDecision};
pub use event::{CopyOut, Event, ProtoError, RecvDone};
pub use ofi_wire::tcp::reject;
pub use one_sided::{
    Ack, AtomicArgs, Grant, Memory, Remote, Req, RmaKind, RmaReq, COUNT_AS_READ, MAX_RANGES,
};
pub use rx::{Pending, RecvReq, Rx, RxConfig, RTS_COST};

/// The driver's name for a connection, unique among the connections that
/// share one [`Rx`].
pub type ConnId = u64;
