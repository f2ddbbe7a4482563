//! The udp provider's reliability core: sessions between endpoints over
//! datagrams ([`Sessions`]: handshake, epochs, auth key, dead peers) and,
//! in each session, a reliable ordered byte stream both ways ([`Channel`]:
//! packet numbers, selective acknowledgements, RTT-estimated retransmission
//! with backoff, congestion and receive windows, duplicate suppression,
//! segmentation of the stream into datagrams and reassembly in order).
//!
//! Sans-IO like the other cores: datagrams and the time go in
//! ([`Sessions::on_datagram`], [`Sessions::handle_timeout`]), datagrams to
//! send, the next deadline and events come out ([`Sessions::poll_ctrl`],
//! [`Channel::poll_transmit`], [`Sessions::poll_timeout`],
//! [`Sessions::poll_event`]). No sockets, clocks, threads or randomness
//! (nonces come from a function the driver gives).
//!
//! **Why a byte stream.** RDM endpoints over udp run the tcp provider's
//! protocol core (`ofi_proto::tcp`: framing, tag matching with
//! peek/claim/discard, multi-receive, rendezvous, RMA and atomics executed
//! at the target) over one channel per peer, instead of new message
//! semantics written for datagrams: the semantics the conformance suite
//! proves on tcp hold on udp by construction, and the reliability layer
//! stays small enough to test to exhaustion. What datagrams change is kept
//! where it pays: a packet's payload that arrives in order is handed to the
//! consumer straight from the datagram (one copy, into the matched receive
//! buffer), the producer's bytes are named by stream offset so a large
//! send's data goes from the user's buffer to the socket without a copy,
//! and acknowledgements ride on data going the other way.
//!
//! A driver loop, in outline:
//!
//! ```text
//! // incoming
//! match sessions.on_datagram(now, src, &buf[..n]) {
//!     Incoming::Data { peer, recv: Recv::Deliver } => {
//!         let rest = consume(&buf[HDR_LEN..n]);          // e.g. into a receive buffer
//!         sessions.channel(peer).unwrap().hold(rest);
//!     }
//!     _ => {}
//! }
//! // held bytes: while !chan.held().is_empty() { let k = consume(chan.held()); chan.consume(k) }
//! // outgoing
//! while let Some((to, bytes)) = sessions.poll_ctrl() { send_to(to, bytes) }
//! for peer in up peers {
//!     chan.set_stream_end(end_of_my_stream);
//!     while let Some(range) = chan.poll_transmit(now, &mut hdr) {
//!         send_to(addr, [hdr, bytes of my stream in range]);
//!     }
//!     forget_stream_bytes_below(chan.acked());
//! }
//! // time and events
//! if now >= sessions.poll_timeout() { sessions.handle_timeout(now) }
//! while let Some(e) = sessions.poll_event() { /* Up, Down { cause }, Refused */ }
//! ```

mod chan;
mod hash;
mod rdm;
mod ring;
mod rtt;
mod session;
mod table;

pub use chan::{ChanConfig, ChanStats, Channel, Drop, Recv};
pub use hash::{FastHasher, FastMap, FastState};
pub use rdm::{Part, Rdm, RdmConfig, RdmEvent, UserMem, MAX_PARTS};
pub use rtt::Rtt;
pub use session::{
    closing_answer, reset_packet, Drops, Incoming, PeerId, SessionConfig, SessionEvent, Sessions,
};
