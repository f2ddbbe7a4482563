//! One connection (one TCP stream): framing, connection management, eager
//! and rendezvous sends, and receives that land in place.
//!
//! The driver owns the socket. To send it asks [`Conn::poll_transmit`] for
//! the bytes to write next — frame headers in a core-owned buffer and user
//! ranges by address — writes what it can and reports [`Conn::on_written`].
//! To receive it asks [`Conn::recv_target`] where the next bytes go — the
//! header buffer, a receive's own buffer, a core buffer for an unexpected
//! message, or nowhere (bytes to drop) — reads into it and reports
//! [`Conn::on_read`]. Partial progress may stop at any byte.

use super::event::{Event, ProtoError};
use super::one_sided::{Ack, Grant, Req};
use super::rx::{clip, Bound, Meta, Pending, Rx, RTS_COST};
use super::ConnId;
use ofi_core::error::errno;
use ofi_core::util::auth::{AuthKey, Nonce};
use ofi_core::util::iov::{iov_len, IoVec};
use ofi_core::util::matching::MAX_IOV;
use ofi_wire::tcp::{
    challenge_payload, flag, op, parse_challenge, parse_rts_payload, reject, rts_payload,
    split_hello, Header, Repr, HDR_LEN, NONCE_LEN, RTS_PAYLOAD_LEN,
};
use std::collections::{HashMap, VecDeque};

mod rma;

/// The first transcript part of the acceptor's proof of the auth key.
const ACCEPTOR: &[u8] = b"ofi-tcp-v1 acceptor";
/// The first transcript part of the connector's proof.
const CONNECTOR: &[u8] = b"ofi-tcp-v1 connector";

/// A connection's side of the auth-key handshake (see `ofi_wire::tcp`).
#[derive(Debug)]
struct Auth {
    key: AuthKey,
    /// Our nonce (the connector's `Nc`, the acceptor's `Ns`).
    mine: Nonce,
    /// The peer's nonce (acceptor: from the HELLO).
    theirs: Nonce,
    /// The address the HELLO claims (sent by the connector, read by the
    /// acceptor): bound to the connection by both proofs.
    claimed: Vec<u8>,
    /// Connector: the acceptor proved the key (CHALLENGE checked).
    proven: bool,
    /// Acceptor: the HELLO's CM data and protocol flags, reported once the
    /// connector's PROOF checks.
    held: Option<(Vec<u8>, u64)>,
}

/// Per-connection tunables. Both ends must agree that each side's
/// `eager_max` and `data_chunk` fit in the other's `max_frame`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Largest message sent eagerly (inline after its header); larger ones
    /// use rendezvous (RTS, CTS, DATA).
    pub eager_max: usize,
    /// Largest DATA frame sent; rendezvous payloads are split into frames of
    /// this size so that control frames and small messages interleave.
    pub data_chunk: usize,
    /// Largest payload accepted in any incoming frame.
    pub max_frame: usize,
    /// Largest CM private data, sent or accepted.
    pub max_cm_data: usize,
    /// Largest address carried in HELLO.
    pub max_addr_len: usize,
    /// Largest message sent or accepted.
    pub max_msg_size: usize,
    /// Protocol flags sent in HELLO and ACCEPT.
    pub proto_flags: u64,
    /// Most ranges one [`Transmit`] holds (the driver's writev limit).
    pub max_tx_slices: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            eager_max: 16 << 10,
            data_chunk: 256 << 10,
            max_frame: 1 << 20,
            max_cm_data: 256,
            max_addr_len: 128,
            max_msg_size: isize::MAX as usize,
            proto_flags: 0,
            max_tx_slices: 64,
        }
    }
}

/// A send as the driver queues it. The ranges stay valid until the send
/// completes (the raw layer's promise); the core only passes them back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendReq {
    /// Source ranges.
    pub iov: [IoVec; MAX_IOV],
    /// Entries of `iov` in use.
    pub iov_cnt: usize,
    /// Tagged message.
    pub tagged: bool,
    /// Tag (tagged).
    pub tag: u64,
    /// Remote CQ data (with `cq_data`).
    pub data: u64,
    /// Carry `data` to the receiver's completion.
    pub cq_data: bool,
    /// The caller's context.
    pub context: usize,
    /// When the send completes (acknowledged by the peer or not).
    pub ack: Ack,
    /// FI_FENCE: start only once every earlier operation of this connection
    /// has completed.
    pub fence: bool,
}

impl SendReq {
    /// An untagged send.
    pub fn msg(iov: &[IoVec], context: usize) -> Self {
        let n = iov.len().min(MAX_IOV);
        let mut r = SendReq {
            iov_cnt: iov.len(),
            context,
            ..Default::default()
        };
        r.iov[..n].copy_from_slice(&iov[..n]);
        r
    }
    /// A tagged send.
    pub fn tagged(iov: &[IoVec], tag: u64, context: usize) -> Self {
        let mut r = SendReq::msg(iov, context);
        r.tagged = true;
        r.tag = tag;
        r
    }
    /// Adds remote CQ data.
    pub fn with_data(mut self, data: u64) -> Self {
        self.data = data;
        self.cq_data = true;
        self
    }
    /// Completes only once the peer acknowledges it.
    pub fn with_ack(mut self, ack: Ack) -> Self {
        self.ack = ack;
        self
    }
    /// Sets FI_FENCE.
    pub fn fenced(mut self) -> Self {
        self.fence = true;
        self
    }
    /// The ranges.
    pub fn iov(&self) -> &[IoVec] {
        &self.iov[..self.iov_cnt.min(MAX_IOV)]
    }
}

/// Connection state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Client: HELLO queued or sent, waiting for ACCEPT or REJECT.
    Connecting,
    /// Server: waiting for the connector's HELLO.
    AwaitingHello,
    /// Server: an authenticating HELLO received and CHALLENGE sent; the
    /// connector's PROOF is awaited.
    Authenticating,
    /// Server: HELLO received (and, with an auth key, the PROOF checked);
    /// the driver calls `accept` or `reject`.
    Requested,
    /// Messages flow.
    Connected,
    /// A final frame (SHUTDOWN, REJECT) is being written.
    Closing,
    /// Done: close the socket.
    Closed,
}

/// Where the driver puts the next bytes it reads.
#[derive(Debug, PartialEq, Eq)]
pub enum Target<'a> {
    /// The core's header buffer (what is left of it).
    Header(&'a mut [u8]),
    /// A receive's buffer, clipped to the bytes this frame still has for it.
    Payload(&'a [IoVec]),
    /// A core-owned buffer (unexpected eager payload, control payload).
    Buffer(&'a mut [u8]),
    /// Read and drop this many bytes (truncated tail of a message).
    Discard(usize),
    /// Read nothing now: no receive and no room for unexpected bytes. The
    /// connection is woken through [`Rx::next_wakeup`] when that changes.
    Blocked,
    /// Read nothing more: the connection is finished.
    Closed,
}

/// One range to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxSlice<'a> {
    /// Core-owned bytes (headers and control payloads).
    Bytes(&'a [u8]),
    /// User memory (a send's payload).
    Iov(IoVec),
}

impl TxSlice<'_> {
    /// Length in bytes.
    pub fn len(&self) -> usize {
        match self {
            TxSlice::Bytes(b) => b.len(),
            TxSlice::Iov(v) => v.len,
        }
    }
    /// True if empty (never produced by the core).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What to write next, in order: a view into the connection valid until
/// its next call.
#[derive(Clone, Copy, Debug)]
pub struct Transmit<'a> {
    stage: &'a [u8],
    segs: &'a VecDeque<Seg>,
    off: usize,
    held: &'a rma::Held,
}

impl<'a> Transmit<'a> {
    /// Nothing to write.
    pub fn is_empty(&self) -> bool {
        self.segs.is_empty()
    }
    /// Bytes to write.
    pub fn len(&self) -> usize {
        self.segs.iter().map(|s| s.len).sum::<usize>() - self.off
    }
    /// Number of ranges.
    pub fn slice_count(&self) -> usize {
        self.segs.len()
    }
    /// The ranges, in order.
    pub fn iter(&self) -> impl Iterator<Item = TxSlice<'a>> + 'a {
        let stage = self.stage;
        let held = self.held;
        let first = self.off;
        self.segs.iter().enumerate().map(move |(i, s)| {
            let o = if i == 0 { first } else { 0 };
            match s.kind {
                SegKind::Staged(start) => TxSlice::Bytes(&stage[start + o..start + s.len]),
                SegKind::Held { seq, start } => {
                    TxSlice::Bytes(&held.get(seq)[start + o..start + s.len])
                }
                SegKind::User(base) | SegKind::Mem(base) => TxSlice::Iov(IoVec {
                    base: base.wrapping_add(o),
                    len: s.len - o,
                }),
            }
        })
    }
}

/// What happens when a segment's last byte is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Done {
    Nothing,
    Send(usize),
    Accepted,
    Finished,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SegKind {
    /// Offset into the stage buffer.
    Staged(usize),
    /// User address (the caller's own buffer).
    User(usize),
    /// Registered memory answering a peer's READ: copied into the stage
    /// before a later frame of this connection may change it.
    Mem(usize),
    /// Bytes of an answer the core holds (captured READ data, an atomic's
    /// result): `seq` names the buffer in `held`, `start` the offset in it.
    /// Sent from there, not copied into the stage.
    Held { seq: u64, start: usize },
}

/// A range committed to the stream: once its frame started, it is written
/// to the end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Seg {
    kind: SegKind,
    len: usize,
    done: Done,
}

#[derive(Debug)]
struct Ctrl {
    repr: Repr,
    payload: Vec<u8>,
    done: Done,
}

/// A rendezvous send: waiting for CTS, then streaming `want` bytes.
#[derive(Debug)]
struct TxRndv {
    id: u64,
    req: SendReq,
    /// Completes on the peer's acknowledgement, not on the last byte.
    acked: bool,
    len: usize,
    want: usize,
    off: usize,
}

/// A message header that was read, before its payload.
#[derive(Clone, Copy, Debug)]
struct Incoming {
    meta: Meta,
    size: usize,
    /// The sender's rendezvous id (RTS), or `None` (MSG).
    rndv: Option<u64>,
}

#[derive(Debug)]
enum RxState {
    Header {
        got: usize,
    },
    /// Payload of HELLO, ACCEPT, REJECT or RTS.
    Ctrl {
        repr: Repr,
        buf: Vec<u8>,
        got: usize,
    },
    /// A message waiting for a receive or for unexpected-byte budget.
    Parked(Incoming),
    /// MSG payload landing in a receive.
    Direct(Bound),
    /// Unexpected MSG payload into a core buffer.
    Buffer {
        inc: Incoming,
        buf: Vec<u8>,
        got: usize,
    },
    /// DATA payload of rendezvous `id`.
    Data {
        id: u64,
        left: usize,
    },
    /// WRITE or DATA payload of the peer's write in progress (`wr`).
    WriteData {
        left: usize,
    },
    /// RESP or RESP_DATA payload answering our request `id`.
    Answer {
        id: u64,
        left: usize,
    },
    Discard {
        left: usize,
    },
    Closed,
}

/// Largest payload a send may have to take the fast path
/// ([`Conn::frame_now`]).
pub const FAST_MAX: usize = 256;

/// Bytes of staged headers above which no new frame is staged until the
/// window drains.
const STAGE_SOFT_MAX: usize = 8 << 10;

/// Most ranges one frame stages: a header and, for an atomic, its operand
/// and compare ranges.
const SLICES_PER_FRAME: usize = 2 + 2 * MAX_IOV;

/// One connection's protocol state.
#[derive(Debug)]
pub struct Conn {
    id: ConnId,
    peer: u64,
    cfg: Config,
    state: State,
    events: VecDeque<Event>,
    // transmit
    stage: Vec<u8>,
    segs: VecDeque<Seg>,
    seg_off: usize,
    ctrl: VecDeque<Ctrl>,
    sendq: VecDeque<Req>,
    await_cts: Vec<TxRndv>,
    streams: VecDeque<TxRndv>,
    /// Rendezvous and request ids (one counter: an id names one operation).
    next_id: u64,
    last_was_data: bool,
    /// Our requests (and acknowledged sends) waiting for their answer.
    outstanding: HashMap<u64, rma::Outgoing>,
    /// Our WRITE whose data is still being staged.
    wstream: Option<rma::WStream>,
    /// Answers to the peer's requests, to stage.
    resps: VecDeque<rma::RespOut>,
    /// Buffers of answers copied out of registered memory, kept for the
    /// next copy (a capture of a 128 KiB answer otherwise allocates fresh
    /// pages, faults them in and unmaps them again).
    spare: Vec<Vec<u8>>,
    /// Answer bytes still referring to registered memory.
    mem_refs: usize,
    /// Answer buffers that segments send from (`SegKind::Held`).
    held: rma::Held,
    /// READ grants whose answers still refer to their memory, in answer
    /// order, with the bytes each has left to write.
    read_grants: VecDeque<(Grant, usize)>,
    /// READ grants whose bytes are all out, to release.
    reads_done: Vec<Grant>,
    // receive
    hdr: [u8; HDR_LEN],
    rstate: RxState,
    rndv_rx: Vec<(u64, Bound)>,
    /// The peer's WRITE whose data is landing.
    wr: Option<rma::WriteIn>,
    scratch: [IoVec; MAX_IOV],
    /// The auth-key handshake, when this endpoint has a key.
    auth: Option<Box<Auth>>,
}

impl Conn {
    fn new(id: ConnId, peer: u64, cfg: Config, state: State) -> Self {
        let mut cfg = cfg;
        cfg.max_tx_slices = cfg.max_tx_slices.max(SLICES_PER_FRAME);
        cfg.data_chunk = cfg.data_chunk.max(1);
        Conn {
            id,
            peer,
            cfg,
            state,
            events: VecDeque::new(),
            stage: Vec::with_capacity(1024),
            segs: VecDeque::with_capacity(cfg.max_tx_slices),
            seg_off: 0,
            ctrl: VecDeque::new(),
            sendq: VecDeque::new(),
            await_cts: Vec::new(),
            streams: VecDeque::new(),
            next_id: 1,
            last_was_data: false,
            outstanding: HashMap::new(),
            wstream: None,
            resps: VecDeque::new(),
            spare: Vec::new(),
            mem_refs: 0,
            held: rma::Held::default(),
            read_grants: VecDeque::new(),
            reads_done: Vec::new(),
            hdr: [0; HDR_LEN],
            rstate: RxState::Header { got: 0 },
            rndv_rx: Vec::new(),
            wr: None,
            scratch: [IoVec::default(); MAX_IOV],
            auth: None,
        }
    }

    /// Makes the handshake prove possession of `key` both ways, `nonce`
    /// being this side's fresh random nonce (the driver takes it from the
    /// system's random source: the core has none). A connector's HELLO
    /// then carries the nonce; an acceptor answers it with CHALLENGE and
    /// reports [`Event::ConnRequest`] only once the connector's PROOF
    /// checks. Endpoints without a key call nothing. A connection that
    /// fails the handshake emits [`Event::AuthFailed`]; its operations fail
    /// with `FI_EKEYREJECTED`.
    pub fn with_auth(mut self, key: AuthKey, nonce: Nonce) -> Conn {
        let mut a = Auth {
            key,
            mine: nonce,
            theirs: [0; NONCE_LEN],
            claimed: Vec::new(),
            proven: false,
            held: None,
        };
        if self.state == State::Connecting {
            if let Some(hello) = self.ctrl.iter_mut().find(|c| c.repr.op == op::HELLO) {
                let alen = hello.repr.data as usize;
                a.claimed = hello.payload[..alen].to_vec();
                let tail = hello.payload.split_off(alen);
                hello.payload.extend_from_slice(&nonce);
                hello.payload.extend_from_slice(&tail);
                hello.repr.id = NONCE_LEN as u64;
                hello.repr.len = hello.payload.len() as u64;
            }
        }
        self.auth = Some(Box::new(a));
        self
    }

    /// True when this connection authenticates its peer (it has a key).
    pub fn authenticates(&self) -> bool {
        self.auth.is_some()
    }

    /// Client side: a connection to `peer` whose first frame is HELLO with
    /// this endpoint's address and the CM private data. `FI_EINVAL` if
    /// either is longer than the configuration allows.
    pub fn connect(
        id: ConnId,
        peer: u64,
        cfg: Config,
        my_addr: &[u8],
        private_data: &[u8],
    ) -> Result<Conn, i32> {
        if my_addr.len() > cfg.max_addr_len || private_data.len() > cfg.max_cm_data {
            return Err(errno::FI_EINVAL);
        }
        let mut c = Conn::new(id, peer, cfg, State::Connecting);
        let mut payload = Vec::with_capacity(my_addr.len() + private_data.len());
        payload.extend_from_slice(my_addr);
        payload.extend_from_slice(private_data);
        c.ctrl.push_back(Ctrl {
            repr: Repr {
                op: op::HELLO,
                len: payload.len() as u64,
                tag: cfg.proto_flags,
                data: my_addr.len() as u64,
                ..Default::default()
            },
            payload,
            done: Done::Nothing,
        });
        Ok(c)
    }

    /// Server side: an accepted socket whose peer will send HELLO. `peer`
    /// may be `FI_ADDR_NOTAVAIL` until [`set_peer`](Self::set_peer).
    pub fn incoming(id: ConnId, peer: u64, cfg: Config) -> Conn {
        Conn::new(id, peer, cfg, State::AwaitingHello)
    }

    /// A connection whose handshake happened below it: both ends already
    /// know each other (the udp provider's sessions authenticate and name
    /// the peer), so messages flow from the first byte, both ways, with no
    /// HELLO or ACCEPT.
    pub fn established(id: ConnId, peer: u64, cfg: Config) -> Conn {
        Conn::new(id, peer, cfg, State::Connected)
    }

    /// The driver's id for this connection.
    pub fn id(&self) -> ConnId {
        self.id
    }
    /// The peer's fi_addr: the source of every message received here.
    pub fn peer(&self) -> u64 {
        self.peer
    }
    /// Sets the peer's fi_addr (server side, once the HELLO named it).
    pub fn set_peer(&mut self, fi_addr: u64) {
        self.peer = fi_addr;
    }
    /// The state.
    pub fn state(&self) -> State {
        self.state
    }
    /// The tunables.
    pub fn config(&self) -> &Config {
        &self.cfg
    }
    /// True once nothing more will be read or written: close the socket.
    pub fn is_closed(&self) -> bool {
        self.state == State::Closed
    }
    /// True if `poll_transmit` has (or may stage) something to write.
    pub fn wants_transmit(&self) -> bool {
        !self.segs.is_empty()
            || !self.ctrl.is_empty()
            || !self.resps.is_empty()
            || (self.state == State::Connected
                && (self.can_commit() || !self.streams.is_empty() || self.wstream.is_some()))
    }

    /// Operations of this connection started and not complete: sends not
    /// written (or not acknowledged), rendezvous, requests not answered.
    pub fn in_flight(&self) -> usize {
        self.segs
            .iter()
            .filter(|s| matches!(s.done, Done::Send(_)))
            .count()
            + self.await_cts.iter().filter(|t| !t.acked).count()
            + self.streams.iter().filter(|t| !t.acked).count()
            + self.outstanding.len()
    }

    /// True while this connection waits for bytes of the peer to finish
    /// something started: a frame partly read, or a rendezvous whose data
    /// has not all arrived (transports that cannot see a peer die, as udp,
    /// keep probing it meanwhile).
    pub fn awaits_peer(&self) -> bool {
        !self.rndv_rx.is_empty()
            || !matches!(
                self.rstate,
                RxState::Header { got: 0 } | RxState::Parked(_) | RxState::Closed
            )
    }

    /// The next queued operation may start: it is not fenced, or nothing
    /// before it is still in flight.
    fn can_commit(&self) -> bool {
        match self.sendq.front() {
            None => false,
            Some(r) => !r.fence() || self.in_flight() == 0,
        }
    }

    /// The next connection event or send completion.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    // ---- connection management ------------------------------------------

    /// Server side: accepts the request with private data. Sends queued
    /// here go after the ACCEPT frame. `FI_EOPBADSTATE` unless a HELLO is
    /// waiting for an answer; `FI_EINVAL` if the data is too long.
    pub fn accept(&mut self, private_data: &[u8]) -> Result<(), i32> {
        if self.state != State::Requested {
            return Err(errno::FI_EOPBADSTATE);
        }
        if private_data.len() > self.cfg.max_cm_data {
            return Err(errno::FI_EINVAL);
        }
        self.ctrl.push_back(Ctrl {
            repr: Repr {
                op: op::ACCEPT,
                len: private_data.len() as u64,
                tag: self.cfg.proto_flags,
                ..Default::default()
            },
            payload: private_data.to_vec(),
            done: Done::Accepted,
        });
        self.state = State::Connected;
        Ok(())
    }

    /// Server side: rejects the request with private data (reason
    /// `reject::USER`); the connection closes once REJECT is written.
    pub fn reject(&mut self, private_data: &[u8]) -> Result<(), i32> {
        self.reject_with(reject::USER, private_data)
    }

    /// Rejects with a reason code (`reject::SIMULTANEOUS` for the loser of
    /// two crossing connections, see [`decide_hello`](super::decide_hello)).
    /// Queued sends are failed (`FI_ECONNABORTED`) for `USER`, kept for
    /// [`take_queued_sends`](Self::take_queued_sends) otherwise.
    pub fn reject_with(&mut self, reason: u64, private_data: &[u8]) -> Result<(), i32> {
        if self.state != State::Requested {
            return Err(errno::FI_EOPBADSTATE);
        }
        if private_data.len() > self.cfg.max_cm_data {
            return Err(errno::FI_EINVAL);
        }
        self.ctrl.push_back(Ctrl {
            repr: Repr {
                op: op::REJECT,
                len: private_data.len() as u64,
                data: reason,
                ..Default::default()
            },
            payload: private_data.to_vec(),
            done: Done::Finished,
        });
        if reason == reject::USER {
            self.fail_queued(errno::FI_ECONNABORTED);
        }
        self.state = State::Closing;
        self.rstate = RxState::Closed;
        Ok(())
    }

    /// Ends the connection: frames already started are finished, then
    /// SHUTDOWN is written and the connection closes. Every send and
    /// receive of this connection that has not completed fails with
    /// `FI_ECANCELED` (receives still posted in the [`Rx`] stay posted).
    pub fn shutdown(&mut self, rx: &mut Rx) {
        match self.state {
            State::Closing | State::Closed => {}
            State::Connected => {
                self.fail_queued(errno::FI_ECANCELED);
                self.fail_receives(rx, errno::FI_ECANCELED);
                self.ctrl.clear();
                self.resps.clear();
                self.ctrl.push_back(Ctrl {
                    repr: Repr {
                        op: op::SHUTDOWN,
                        ..Default::default()
                    },
                    payload: Vec::new(),
                    done: Done::Finished,
                });
                self.state = State::Closing;
            }
            _ => self.fail_all(rx, errno::FI_ECANCELED),
        }
    }

    /// The stream ended (read returned 0). Pending operations fail with
    /// `FI_ECONNRESET` (`FI_ECONNREFUSED` while connecting) and
    /// [`Event::ConnectionLost`] is emitted, unless the connection had
    /// already ended in an orderly way.
    pub fn on_eof(&mut self, rx: &mut Rx) {
        let err = if self.state == State::Connecting {
            errno::FI_ECONNREFUSED
        } else {
            errno::FI_ECONNRESET
        };
        self.lost(rx, err);
    }

    /// The socket failed with `err` (an FI_E* number): every pending
    /// operation fails with it.
    pub fn on_error(&mut self, err: i32, rx: &mut Rx) {
        self.lost(rx, err);
    }

    fn lost(&mut self, rx: &mut Rx, err: i32) {
        match self.state {
            State::Closed => {}
            State::Closing => self.fail_all(rx, err),
            _ => {
                self.fail_all(rx, err);
                self.events.push_back(Event::ConnectionLost { err });
            }
        }
    }

    /// Operations queued but not started (they wait while connecting).
    /// After a `reject::SIMULTANEOUS` they belong on the surviving connection.
    pub fn take_queued_sends(&mut self) -> Vec<Req> {
        self.sendq.drain(..).collect()
    }

    /// Queues a send or a one-sided request (as [`queue_send`](Self::queue_send)
    /// and [`queue_rma`](Self::queue_rma)).
    pub fn queue(&mut self, r: Req) -> Result<(), i32> {
        match r {
            Req::Send(s) => self.queue_send(s),
            Req::Rma(x) => self.queue_rma(x),
        }
    }

    // ---- sending ---------------------------------------------------------

    /// Queues a send. Sends go out in order; one of at most `eager_max`
    /// bytes goes inline, a larger one by rendezvous. `FI_EINVAL` for more
    /// than [`MAX_IOV`] ranges, `FI_EMSGSIZE` above `max_msg_size`,
    /// `FI_ENOTCONN` once the connection is closing.
    pub fn queue_send(&mut self, req: SendReq) -> Result<(), i32> {
        if req.iov_cnt > MAX_IOV {
            return Err(errno::FI_EINVAL);
        }
        if matches!(self.state, State::Closing | State::Closed) {
            return Err(errno::FI_ENOTCONN);
        }
        if iov_len(req.iov()) > self.cfg.max_msg_size {
            return Err(errno::FI_EMSGSIZE);
        }
        self.sendq.push_back(Req::Send(req));
        Ok(())
    }

    /// The fast path of a small eager send: when the connection is up and
    /// has nothing staged, queued or in rendezvous ahead of it (so stream
    /// order is what the queue would give), the send asks for no
    /// acknowledgement and no fence, and its payload is at most
    /// [`FAST_MAX`] bytes, writes the frame's header into `hdr` and returns
    /// the frame's length (header and payload). The driver appends the
    /// payload, writes the frame at once and reports how much went out with
    /// [`frame_written`](Self::frame_written). `None`: queue it with
    /// [`queue_send`](Self::queue_send) instead.
    pub fn frame_now(&self, req: &SendReq, hdr: &mut [u8; HDR_LEN]) -> Option<usize> {
        if self.state != State::Connected
            || !self.segs.is_empty()
            || !self.ctrl.is_empty()
            || !self.resps.is_empty()
            || !self.sendq.is_empty()
            || !self.streams.is_empty()
            || self.wstream.is_some()
            || req.ack != Ack::None
            || req.fence
            || req.iov_cnt > MAX_IOV
        {
            return None;
        }
        let len = iov_len(req.iov());
        if len > FAST_MAX || len > self.cfg.eager_max {
            return None;
        }
        let r = Repr {
            op: op::MSG,
            flags: if req.tagged { flag::TAGGED } else { 0 }
                | if req.cq_data { flag::CQ_DATA } else { 0 },
            len: len as u64,
            tag: if req.tagged { req.tag } else { 0 },
            data: if req.cq_data { req.data } else { 0 },
            id: len as u64,
        };
        *hdr = r.to_bytes();
        Some(HDR_LEN + len)
    }

    /// `n` bytes of `frame`, built by [`frame_now`](Self::frame_now), were
    /// written. True when that was all of it: the send is complete and no
    /// event will follow. Otherwise the rest is copied into the stage to go
    /// out first, and [`Event::SendComplete`] with `context` follows once
    /// it is written.
    pub fn frame_written(&mut self, frame: &[u8], n: usize, context: usize) -> bool {
        if n >= frame.len() {
            return true;
        }
        self.stage.clear();
        self.seg_off = 0;
        self.stage.extend_from_slice(&frame[n..]);
        self.segs.push_back(Seg {
            kind: SegKind::Staged(0),
            len: frame.len() - n,
            done: Done::Send(context),
        });
        false
    }

    /// What to write next. Write a prefix of it (writev) and report the
    /// count with [`on_written`](Self::on_written) before calling again.
    /// Takes the `Rx` to pick up rendezvous that receives matched (CTS).
    pub fn poll_transmit(&mut self, rx: &mut Rx) -> Transmit<'_> {
        self.absorb(rx);
        self.release_reads(rx, false);
        if self.segs.is_empty() {
            self.stage.clear();
            self.seg_off = 0;
        } else if self.stage.len() >= STAGE_SOFT_MAX / 2 {
            self.compact_stage();
        }
        self.fill();
        Transmit {
            stage: &self.stage,
            segs: &self.segs,
            off: self.seg_off,
            held: &self.held,
        }
    }

    /// What [`poll_transmit`](Self::poll_transmit) returned last, staging
    /// nothing new: for a driver that reads the bytes again later (a
    /// datagram sent again before the peer acknowledged it) and reports
    /// them written only then.
    pub fn transmit_view(&self) -> Transmit<'_> {
        Transmit {
            stage: &self.stage,
            segs: &self.segs,
            off: self.seg_off,
            held: &self.held,
        }
    }

    /// `n` bytes of the last [`Transmit`] were written. Completes the sends
    /// whose last byte that was.
    pub fn on_written(&mut self, n: usize) {
        let mut n = n;
        while n > 0 {
            let Some(s) = self.segs.front().copied() else {
                break;
            };
            let left = s.len - self.seg_off;
            if n < left {
                self.seg_off += n;
                break;
            }
            n -= left;
            self.seg_off = 0;
            self.segs.pop_front();
            match s.kind {
                SegKind::Mem(_) => {
                    self.mem_refs = self.mem_refs.saturating_sub(s.len);
                    self.reads_written(s.len);
                }
                SegKind::Held { seq, start } => self.held_written(seq, start + s.len),
                SegKind::Staged(_) | SegKind::User(_) => {}
            }
            self.fire(s.done);
        }
        if self.segs.is_empty() {
            self.stage.clear();
            self.seg_off = 0;
        }
    }

    fn fire(&mut self, d: Done) {
        match d {
            Done::Nothing => {}
            Done::Send(context) => self.events.push_back(Event::SendComplete { context }),
            Done::Accepted => self.events.push_back(Event::Connected {
                private_data: Vec::new(),
            }),
            Done::Finished => {
                self.state = State::Closed;
                self.rstate = RxState::Closed;
            }
        }
    }

    /// Stages frames until the window is full: control frames first, then
    /// answers to the peer's requests, then the rest of a WRITE being sent
    /// (nothing else of ours goes between its frames), then alternately the
    /// next queued operation and the next rendezvous DATA chunk.
    fn fill(&mut self) {
        loop {
            if !self.segs.is_empty()
                && (self.segs.len() + SLICES_PER_FRAME > self.cfg.max_tx_slices
                    || self.stage.len() >= STAGE_SOFT_MAX)
            {
                break;
            }
            if let Some(c) = self.ctrl.pop_front() {
                self.stage_frame(&c.repr, &c.payload, c.done);
                continue;
            }
            if !self.resps.is_empty() {
                self.stage_answer();
                continue;
            }
            if self.state != State::Connected {
                break;
            }
            if self.wstream.is_some() {
                self.stage_write_chunk();
                continue;
            }
            let data = !self.streams.is_empty();
            let send = self.can_commit();
            if data && (!send || !self.last_was_data) {
                self.commit_chunk();
                self.last_was_data = true;
            } else if send {
                match self.sendq.pop_front() {
                    Some(Req::Send(r)) => self.commit_send(r),
                    Some(Req::Rma(r)) => self.commit_rma(r),
                    None => {}
                }
                self.last_was_data = false;
            } else {
                break;
            }
        }
    }

    /// Drops staged bytes already written, so a connection that never
    /// drains its window completely keeps staging new frames. The lowest
    /// start of a staged segment is where the bytes still needed begin: not
    /// the first staged segment's, because a READ answer captured out of
    /// memory is copied to the end of the stage while segments behind it
    /// point lower.
    fn compact_stage(&mut self) {
        let first = self
            .segs
            .iter()
            .filter_map(|s| match s.kind {
                SegKind::Staged(start) => Some(start),
                SegKind::User(_) | SegKind::Mem(_) | SegKind::Held { .. } => None,
            })
            .min();
        let cut = first.unwrap_or(self.stage.len());
        if cut == 0 {
            return;
        }
        self.stage.drain(..cut);
        for s in self.segs.iter_mut() {
            if let SegKind::Staged(start) = &mut s.kind {
                *start -= cut;
            }
        }
    }

    fn stage_frame(&mut self, r: &Repr, payload: &[u8], done: Done) {
        let start = self.stage.len();
        self.stage.extend_from_slice(&r.to_bytes());
        self.stage.extend_from_slice(payload);
        self.segs.push_back(Seg {
            kind: SegKind::Staged(start),
            len: HDR_LEN + payload.len(),
            done,
        });
    }

    /// Appends user ranges; the last one completes the send `done` (the
    /// frame's header does when there are none).
    fn push_user(&mut self, ranges: &[IoVec], done: Done) {
        let n = ranges.len();
        if n == 0 {
            if let Some(last) = self.segs.back_mut() {
                last.done = done;
            }
            return;
        }
        for (i, v) in ranges.iter().enumerate() {
            self.segs.push_back(Seg {
                kind: SegKind::User(v.base),
                len: v.len,
                done: if i + 1 == n { done } else { Done::Nothing },
            });
        }
    }

    /// A fresh rendezvous or request id.
    fn new_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    fn commit_send(&mut self, req: SendReq) {
        let len = iov_len(req.iov());
        let ack = match req.ack {
            Ack::None => 0,
            Ack::Received => flag::ACK,
            Ack::Placed => flag::ACK_PLACED,
        };
        let flags = if req.tagged { flag::TAGGED } else { 0 }
            | if req.cq_data { flag::CQ_DATA } else { 0 }
            | ack;
        let tag = if req.tagged { req.tag } else { 0 };
        let data = if req.cq_data { req.data } else { 0 };
        if len <= self.cfg.eager_max {
            let mut r = Repr {
                op: op::MSG,
                flags,
                len: len as u64,
                tag,
                data,
                id: len as u64,
            };
            let done = if ack != 0 {
                r.id = self.new_id();
                self.await_answer(r.id, req.context, true, &[], 0);
                Done::Nothing
            } else {
                Done::Send(req.context)
            };
            if len == 0 {
                self.stage_frame(&r, &[], done);
                return;
            }
            self.stage_frame(&r, &[], Done::Nothing);
            let mut out = [IoVec::default(); MAX_IOV];
            let n = clip(req.iov(), 0, len, &mut out);
            self.push_user(&out[..n], done);
            return;
        }
        let id = self.new_id();
        if ack != 0 {
            self.await_answer(id, req.context, true, &[], 0);
        }
        let r = Repr {
            op: op::RTS,
            flags,
            len: RTS_PAYLOAD_LEN as u64,
            tag,
            data,
            id,
        };
        self.stage_frame(&r, &rts_payload(len as u64), Done::Nothing);
        self.await_cts.push(TxRndv {
            id,
            req,
            acked: ack != 0,
            len,
            want: 0,
            off: 0,
        });
    }

    fn commit_chunk(&mut self) {
        let Some(s) = self.streams.front_mut() else {
            return;
        };
        let chunk = self.cfg.data_chunk.min(s.want - s.off);
        let (id, off, req, acked) = (s.id, s.off, s.req, s.acked);
        s.off += chunk;
        let last = s.off == s.want;
        if last {
            self.streams.pop_front();
        }
        let r = Repr {
            op: op::DATA,
            len: chunk as u64,
            id,
            ..Default::default()
        };
        self.stage_frame(&r, &[], Done::Nothing);
        let mut out = [IoVec::default(); MAX_IOV];
        let n = clip(req.iov(), off, chunk, &mut out);
        let done = if last && !acked {
            Done::Send(req.context)
        } else {
            Done::Nothing
        };
        self.push_user(&out[..n], done);
    }

    /// Rendezvous that `post_recv` matched for this connection: CTS them;
    /// messages the `Rx` placed whose senders wait: acknowledge them.
    fn absorb(&mut self, rx: &mut Rx) {
        if !rx.owes_frames() {
            return;
        }
        while let Some(id) = rx.take_ack(self.id) {
            if self.state == State::Connected {
                self.answer(id, 0, rma::RespSrc::None, 0);
            }
        }
        while let Some(m) = rx.take_matched(self.id) {
            if self.state != State::Connected {
                if let Some(b) = m.bound {
                    rx.fail(&b, errno::FI_ECONNRESET);
                }
                continue;
            }
            match m.bound {
                Some(b) => {
                    if !self.bind_rndv(m.id, b, rx) {
                        return;
                    }
                }
                None => self.queue_cts(m.id, 0),
            }
        }
    }

    fn queue_cts(&mut self, id: u64, want: usize) {
        self.ctrl.push_back(Ctrl {
            repr: Repr {
                op: op::CTS,
                data: want as u64,
                id,
                ..Default::default()
            },
            payload: Vec::new(),
            done: Done::Nothing,
        });
    }

    /// A receive takes rendezvous `id`: ask for its bytes. False (and the
    /// connection closed) if the peer reused a live id.
    fn bind_rndv(&mut self, id: u64, b: Bound, rx: &mut Rx) -> bool {
        if self.rndv_rx.iter().any(|(i, _)| *i == id) {
            rx.fail(&b, errno::FI_EIO);
            self.protocol_error(rx, ProtoError::Violation("rendezvous id reused"));
            return false;
        }
        self.queue_cts(id, b.want);
        if b.want == 0 {
            rx.finish(&b, None);
        } else {
            self.rndv_rx.push((id, b));
        }
        true
    }

    // ---- receiving -------------------------------------------------------

    /// Where the next bytes read from the socket go. Takes the `Rx` to
    /// place a message that was waiting for a receive or for budget.
    pub fn recv_target(&mut self, rx: &mut Rx) -> Target<'_> {
        self.absorb(rx);
        if let RxState::Parked(inc) = self.rstate {
            if !self.place(inc, rx) {
                rx.block(self.id);
                return Target::Blocked;
            }
        }
        match &mut self.rstate {
            RxState::Header { got } => Target::Header(&mut self.hdr[*got..]),
            RxState::Ctrl { buf, got, .. } | RxState::Buffer { buf, got, .. } => {
                Target::Buffer(&mut buf[*got..])
            }
            RxState::Direct(b) => {
                let n = b.clip(usize::MAX, &mut self.scratch);
                Target::Payload(&self.scratch[..n])
            }
            RxState::Data { id, left } => {
                match self.rndv_rx.iter().find(|(i, _)| *i == *id) {
                    Some((_, b)) => {
                        let n = b.clip(*left, &mut self.scratch);
                        Target::Payload(&self.scratch[..n])
                    }
                    // Unreachable: DATA headers are checked against rndv_rx.
                    None => Target::Discard(*left),
                }
            }
            RxState::WriteData { left } => {
                Self::check_write_live(&mut self.wr, rx);
                let n = match &self.wr {
                    Some(w) if w.status == 0 => {
                        clip(&w.iov[..w.cnt], w.got, *left, &mut self.scratch)
                    }
                    _ => 0,
                };
                if n == 0 {
                    // Refused (or nothing to land): drop the data.
                    Target::Discard(*left)
                } else {
                    Target::Payload(&self.scratch[..n])
                }
            }
            RxState::Answer { id, left } => {
                let n = match self.outstanding.get(id) {
                    Some(o) => clip(&o.dest[..o.cnt], o.got, *left, &mut self.scratch),
                    None => 0,
                };
                if n == 0 {
                    Target::Discard(*left)
                } else {
                    Target::Payload(&self.scratch[..n])
                }
            }
            RxState::Discard { left } => Target::Discard(*left),
            RxState::Parked(_) => Target::Blocked,
            RxState::Closed => Target::Closed,
        }
    }

    /// `n` bytes were read into the last [`Target`].
    pub fn on_read(&mut self, n: usize, rx: &mut Rx) {
        if n == 0 {
            return;
        }
        let st = std::mem::replace(&mut self.rstate, RxState::Closed);
        self.rstate = match st {
            RxState::Header { got } => {
                let got = got.saturating_add(n).min(HDR_LEN);
                if got < HDR_LEN {
                    RxState::Header { got }
                } else {
                    self.on_header(rx);
                    return;
                }
            }
            RxState::Ctrl { repr, buf, got } => {
                let got = got.saturating_add(n).min(buf.len());
                if got < buf.len() {
                    RxState::Ctrl { repr, buf, got }
                } else {
                    self.rstate = RxState::Header { got: 0 };
                    self.on_ctrl(repr, buf, rx);
                    return;
                }
            }
            RxState::Buffer { inc, buf, got } => {
                let got = got.saturating_add(n).min(buf.len());
                if got < buf.len() {
                    RxState::Buffer { inc, buf, got }
                } else {
                    self.on_buffered(inc, buf, rx);
                    RxState::Header { got: 0 }
                }
            }
            RxState::Direct(mut b) => {
                b.got = b.got.saturating_add(n).min(b.want);
                if b.got < b.want {
                    RxState::Direct(b)
                } else {
                    rx.finish(&b, None);
                    after_payload(b.total - b.want)
                }
            }
            RxState::Data { id, left } => {
                let n = n.min(left);
                let left = left - n;
                if let Some(i) = self.rndv_rx.iter().position(|(x, _)| *x == id) {
                    let b = &mut self.rndv_rx[i].1;
                    b.got = b.got.saturating_add(n).min(b.want);
                    if b.got == b.want {
                        let (_, b) = self.rndv_rx.swap_remove(i);
                        rx.finish(&b, None);
                    }
                }
                if left > 0 {
                    RxState::Data { id, left }
                } else {
                    RxState::Header { got: 0 }
                }
            }
            RxState::WriteData { left } => {
                let n = n.min(left);
                let left = left - n;
                let complete = match &mut self.wr {
                    Some(w) => {
                        w.got = w.got.saturating_add(n).min(w.total);
                        w.got == w.total
                    }
                    None => false,
                };
                if complete {
                    self.finish_write(rx);
                }
                if left > 0 {
                    RxState::WriteData { left }
                } else {
                    RxState::Header { got: 0 }
                }
            }
            RxState::Answer { id, left } => {
                let n = n.min(left);
                let left = left - n;
                let complete = match self.outstanding.get_mut(&id) {
                    Some(o) => {
                        o.got = o.got.saturating_add(n).min(o.want);
                        o.got == o.want
                    }
                    None => false,
                };
                if complete {
                    self.answered(id, 0);
                }
                if left > 0 {
                    RxState::Answer { id, left }
                } else {
                    RxState::Header { got: 0 }
                }
            }
            RxState::Discard { left } => after_payload(left.saturating_sub(n)),
            st @ (RxState::Parked(_) | RxState::Closed) => st,
        };
    }

    fn meta(&self, r: &Repr) -> Meta {
        let tagged = r.flags & flag::TAGGED != 0;
        Meta {
            tagged,
            tag: if tagged { r.tag } else { 0 },
            data: r.data,
            cq_data: r.flags & flag::CQ_DATA != 0,
            src: self.peer,
            conn: self.id,
            ack: (r.flags & (flag::ACK | flag::ACK_PLACED) != 0).then_some(r.id),
            placed: r.flags & flag::ACK_PLACED != 0,
        }
    }

    fn on_header(&mut self, rx: &mut Rx) {
        let r = match Repr::parse(
            &Header::new_unchecked(&self.hdr[..]),
            self.cfg.max_frame as u64,
        ) {
            Ok(r) => r,
            Err(e) => return self.protocol_error(rx, ProtoError::Wire(e)),
        };
        self.rstate = RxState::Header { got: 0 };
        let connected = self.state == State::Connected;
        let violation = match r.op {
            op::HELLO if self.state != State::AwaitingHello => Some("HELLO out of place"),
            op::HELLO
                if r.data > self.cfg.max_addr_len as u64
                    || r.len - r.data - r.id > self.cfg.max_cm_data as u64 =>
            {
                Some("HELLO longer than allowed")
            }
            op::CHALLENGE if self.state != State::Connecting => Some("CHALLENGE out of place"),
            op::PROOF if self.state != State::Authenticating => Some("PROOF out of place"),
            op::ACCEPT | op::REJECT if self.state != State::Connecting => {
                Some("ACCEPT or REJECT out of place")
            }
            op::ACCEPT | op::REJECT if r.len > self.cfg.max_cm_data as u64 => {
                Some("private data longer than allowed")
            }
            op::MSG
            | op::RTS
            | op::CTS
            | op::DATA
            | op::WRITE
            | op::READ
            | op::ATOMIC
            | op::RESP
            | op::RESP_DATA
                if !connected =>
            {
                Some("traffic before the connection is up")
            }
            op::SHUTDOWN if !connected => Some("SHUTDOWN before the connection is up"),
            _ => match &self.wr {
                // A WRITE's data comes back to back: only frames that
                // execute nothing here may come between.
                Some(w)
                    if !(matches!(r.op, op::CTS | op::RESP | op::RESP_DATA | op::SHUTDOWN)
                        || (r.op == op::DATA && r.id == w.id)) =>
                {
                    Some("a frame inside a WRITE's data")
                }
                _ => None,
            },
        };
        if let Some(v) = violation {
            return self.protocol_error(rx, ProtoError::Violation(v));
        }
        if matches!(r.op, op::MSG | op::DATA | op::WRITE | op::ATOMIC) {
            // This frame may change memory a READ answer still refers to.
            self.capture(rx);
        }
        match r.op {
            op::WRITE => {
                // The descriptor first; the data lands after it is resolved.
                let buf = rx.alloc_buf((r.len - r.tag) as usize);
                self.rstate = RxState::Ctrl {
                    repr: r,
                    buf,
                    got: 0,
                };
            }
            op::READ | op::ATOMIC => {
                let buf = rx.alloc_buf(r.len as usize);
                self.rstate = RxState::Ctrl {
                    repr: r,
                    buf,
                    got: 0,
                };
            }
            op::RESP => self.on_resp(&r, rx),
            op::RESP_DATA => self.on_resp_data(&r, rx),
            op::DATA if self.wr.is_some() => {
                let room = self.wr.as_ref().map_or(0, |w| w.total - w.got);
                if r.len > room as u64 {
                    return self.protocol_error(
                        rx,
                        ProtoError::Violation("DATA beyond the WRITE's length"),
                    );
                }
                self.rstate = RxState::WriteData {
                    left: r.len as usize,
                };
            }
            op::HELLO | op::ACCEPT | op::REJECT | op::RTS | op::CHALLENGE | op::PROOF => {
                let buf = rx.alloc_buf(r.len as usize);
                if buf.is_empty() {
                    self.on_ctrl(r, buf, rx);
                } else {
                    self.rstate = RxState::Ctrl {
                        repr: r,
                        buf,
                        got: 0,
                    };
                }
            }
            op::MSG => {
                let inc = Incoming {
                    meta: self.meta(&r),
                    size: r.len as usize,
                    rndv: None,
                };
                self.place(inc, rx);
            }
            op::CTS => self.on_cts(&r, rx),
            op::DATA => {
                let room = self
                    .rndv_rx
                    .iter()
                    .find(|(i, _)| *i == r.id)
                    .map(|(_, b)| b.remaining());
                match room {
                    None => self.protocol_error(
                        rx,
                        ProtoError::Violation("DATA for an unknown rendezvous"),
                    ),
                    Some(room) if r.len > room as u64 => self.protocol_error(
                        rx,
                        ProtoError::Violation("DATA beyond the length asked for"),
                    ),
                    Some(_) => {
                        self.rstate = RxState::Data {
                            id: r.id,
                            left: r.len as usize,
                        }
                    }
                }
            }
            op::SHUTDOWN => {
                self.events.push_back(Event::PeerShutdown);
                self.fail_all(rx, errno::FI_ECONNRESET);
            }
            _ => self.protocol_error(rx, ProtoError::Wire(ofi_wire::WireError::UnknownOp(r.op))),
        }
    }

    fn on_ctrl(&mut self, r: Repr, buf: Vec<u8>, rx: &mut Rx) {
        match r.op {
            op::HELLO => {
                let Some((addr, nonce, pd)) = split_hello(&buf, r.data, r.id) else {
                    return self.protocol_error(rx, ProtoError::Violation("HELLO parts"));
                };
                let (addr, nonce, pd) = (addr.to_vec(), nonce.to_vec(), pd.to_vec());
                rx.recycle(buf);
                match self.auth.as_deref_mut() {
                    None if nonce.is_empty() => {
                        self.events.push_back(Event::ConnRequest {
                            peer_addr: addr,
                            private_data: pd,
                            proto_flags: r.tag,
                        });
                        self.state = State::Requested;
                    }
                    None => {
                        self.refuse_auth("the connector has an auth key, this endpoint has none")
                    }
                    Some(_) if nonce.is_empty() => {
                        self.refuse_auth("the connector has no auth key, this endpoint has one")
                    }
                    Some(a) => {
                        a.theirs.copy_from_slice(&nonce);
                        let proof = a.key.mac(&[ACCEPTOR, &addr, &a.theirs, &a.mine]);
                        let payload = challenge_payload(&a.mine, &proof).to_vec();
                        a.claimed = addr;
                        a.held = Some((pd, r.tag));
                        self.ctrl.push_back(Ctrl {
                            repr: Repr {
                                op: op::CHALLENGE,
                                len: payload.len() as u64,
                                ..Default::default()
                            },
                            payload,
                            done: Done::Nothing,
                        });
                        self.state = State::Authenticating;
                    }
                }
            }
            op::PROOF => {
                let ok = self.auth.as_deref_mut().and_then(|a| {
                    a.key
                        .verify(&[CONNECTOR, &a.claimed, &a.theirs, &a.mine], &buf)
                        .then(|| (a.claimed.clone(), a.held.take().unwrap_or_default()))
                });
                rx.recycle(buf);
                match ok {
                    Some((peer_addr, (private_data, proto_flags))) => {
                        self.events.push_back(Event::ConnRequest {
                            peer_addr,
                            private_data,
                            proto_flags,
                        });
                        self.state = State::Requested;
                    }
                    None => self.refuse_auth("the connector's proof of the auth key is wrong"),
                }
            }
            op::CHALLENGE => {
                let checked = match (self.auth.as_deref_mut(), parse_challenge(&buf)) {
                    (None, _) => Err("the acceptor has an auth key, this endpoint has none"),
                    (Some(a), _) if a.proven => Err("a second CHALLENGE"),
                    (Some(a), Some((ns, proof))) => {
                        if a.key.verify(&[ACCEPTOR, &a.claimed, &a.mine, &ns], &proof) {
                            a.proven = true;
                            Ok(a.key.mac(&[CONNECTOR, &a.claimed, &a.mine, &ns]))
                        } else {
                            Err("the acceptor's proof of the auth key is wrong")
                        }
                    }
                    (Some(_), None) => Err("CHALLENGE payload"),
                };
                rx.recycle(buf);
                match checked {
                    Ok(proof) => self.ctrl.push_back(Ctrl {
                        repr: Repr {
                            op: op::PROOF,
                            len: proof.len() as u64,
                            ..Default::default()
                        },
                        payload: proof.to_vec(),
                        done: Done::Nothing,
                    }),
                    Err(why) => self.auth_failed(rx, why),
                }
            }
            op::ACCEPT => {
                if self.auth.as_deref().is_some_and(|a| !a.proven) {
                    rx.recycle(buf);
                    return self
                        .auth_failed(rx, "the acceptor accepted without proving the auth key");
                }
                self.state = State::Connected;
                self.events
                    .push_back(Event::Connected { private_data: buf });
            }
            op::REJECT => {
                self.events.push_back(Event::Rejected {
                    private_data: buf,
                    reason: r.data,
                });
                if r.data == reject::AUTH {
                    self.events.push_back(Event::AuthFailed {
                        why: "the acceptor refused this endpoint's auth key (the keys differ)",
                    });
                    self.fail_queued(errno::FI_EKEYREJECTED);
                } else if r.data != reject::SIMULTANEOUS {
                    self.fail_queued(errno::FI_ECONNREFUSED);
                }
                self.close_now();
            }
            op::RTS => {
                let size = parse_rts_payload(&buf).unwrap_or(u64::MAX);
                rx.recycle(buf);
                if size > self.cfg.max_msg_size as u64 {
                    return self.protocol_error(
                        rx,
                        ProtoError::Violation("RTS for a message above the maximum size"),
                    );
                }
                let inc = Incoming {
                    meta: self.meta(&r),
                    size: size as usize,
                    rndv: Some(r.id),
                };
                self.place(inc, rx);
            }
            op::WRITE | op::READ | op::ATOMIC => self.on_request(r, buf, rx),
            _ => {}
        }
    }

    /// Matches a message to a posted receive, or queues it as unexpected,
    /// or parks it (false) when the unexpected budget is spent.
    fn place(&mut self, inc: Incoming, rx: &mut Rx) -> bool {
        self.rstate = RxState::Header { got: 0 };
        if let Some(b) = rx.match_posted(&inc.meta, inc.size) {
            match inc.rndv {
                None if b.want == 0 => {
                    rx.finish(&b, None);
                    self.rstate = after_payload(b.total);
                }
                None => self.rstate = RxState::Direct(b),
                Some(id) => {
                    self.bind_rndv(id, b, rx);
                }
            }
            return true;
        }
        let cost = if inc.rndv.is_some() {
            RTS_COST
        } else {
            inc.size
        };
        let awaiting = !self.await_cts.is_empty() || !self.outstanding.is_empty();
        if !rx.has_room(self.id, cost, awaiting) {
            self.rstate = RxState::Parked(inc);
            return false;
        }
        rx.charge(self.id, cost);
        match inc.rndv {
            Some(id) => rx.push_unexpected(
                &inc.meta,
                inc.size,
                Pending::Rndv {
                    conn: self.id,
                    id,
                    acked: inc.meta.ack.is_some(),
                },
            ),
            None if inc.size == 0 => {
                let p = self.unexpected_eager(&inc.meta, Vec::new(), rx);
                rx.push_unexpected(&inc.meta, 0, p)
            }
            None => {
                let buf = rx.alloc_buf(inc.size);
                self.rstate = RxState::Buffer { inc, buf, got: 0 };
            }
        }
        true
    }

    /// An unexpected eager payload is complete. A receive posted while it
    /// arrived takes it now (it was not visible to matching before);
    /// otherwise it joins the unexpected queue.
    fn on_buffered(&mut self, inc: Incoming, buf: Vec<u8>, rx: &mut Rx) {
        match rx.match_posted(&inc.meta, inc.size) {
            Some(b) => {
                rx.uncharge(self.id, inc.size);
                rx.finish_with_copy(b, buf);
            }
            None => {
                let p = self.unexpected_eager(&inc.meta, buf, rx);
                rx.push_unexpected(&inc.meta, inc.size, p)
            }
        }
    }

    /// An eager message waits for a receive: a sender waiting for receipt
    /// is acknowledged now, one waiting for placement when it is placed.
    fn unexpected_eager(&mut self, meta: &Meta, bytes: Vec<u8>, rx: &mut Rx) -> Pending {
        match meta.ack {
            Some(id) if meta.placed => Pending::EagerAcked {
                bytes,
                conn: self.id,
                id,
            },
            Some(id) => {
                rx.queue_ack(self.id, id);
                Pending::Eager {
                    bytes,
                    conn: self.id,
                }
            }
            None => Pending::Eager {
                bytes,
                conn: self.id,
            },
        }
    }

    fn on_cts(&mut self, r: &Repr, rx: &mut Rx) {
        let Some(i) = self.await_cts.iter().position(|t| t.id == r.id) else {
            return self.protocol_error(rx, ProtoError::Violation("CTS for an unknown rendezvous"));
        };
        if r.data > self.await_cts[i].len as u64 {
            return self.protocol_error(
                rx,
                ProtoError::Violation("CTS asks for more than the message holds"),
            );
        }
        let mut t = self.await_cts.swap_remove(i);
        t.want = r.data as usize;
        if t.want == 0 {
            if !t.acked {
                self.events.push_back(Event::SendComplete {
                    context: t.req.context,
                });
            }
        } else {
            self.streams.push_back(t);
        }
    }

    // ---- failure -----------------------------------------------------------

    /// Acceptor: the connector did not prove the key: REJECT it with
    /// `reject::AUTH` and close once that is written.
    fn refuse_auth(&mut self, why: &'static str) {
        self.events.push_back(Event::AuthFailed { why });
        self.ctrl.clear();
        self.ctrl.push_back(Ctrl {
            repr: Repr {
                op: op::REJECT,
                data: reject::AUTH,
                ..Default::default()
            },
            payload: Vec::new(),
            done: Done::Finished,
        });
        self.state = State::Closing;
        self.rstate = RxState::Closed;
    }

    /// Connector: the acceptor did not prove the key: every operation of
    /// the connection fails with `FI_EKEYREJECTED` and it closes.
    fn auth_failed(&mut self, rx: &mut Rx, why: &'static str) {
        self.events.push_back(Event::AuthFailed { why });
        self.fail_all(rx, errno::FI_EKEYREJECTED);
    }

    fn protocol_error(&mut self, rx: &mut Rx, e: ProtoError) {
        self.events.push_back(Event::ProtocolError(e));
        self.fail_all(rx, errno::FI_EIO);
    }

    /// Fails operations not yet written whole, and requests not answered.
    fn fail_queued(&mut self, err: i32) {
        let queued: Vec<(usize, bool)> = self
            .sendq
            .drain(..)
            .map(|r| (r.context(), r.is_send()))
            .chain(
                self.await_cts
                    .drain(..)
                    .filter(|t| !t.acked)
                    .map(|t| (t.req.context, true)),
            )
            .chain(
                self.streams
                    .drain(..)
                    .filter(|t| !t.acked)
                    .map(|t| (t.req.context, true)),
            )
            .collect();
        for (context, send) in queued {
            self.events.push_back(if send {
                Event::SendError { context, err }
            } else {
                Event::RmaError { context, err }
            });
        }
        self.wstream = None;
        let mut waiting: Vec<(u64, rma::Outgoing)> = self.outstanding.drain().collect();
        waiting.sort_by_key(|(id, _)| *id);
        for (_, o) in waiting {
            self.events.push_back(o.failed(err));
        }
    }

    /// Fails every receive this connection holds and drops its unexpected
    /// rendezvous from the `Rx`.
    fn fail_receives(&mut self, rx: &mut Rx, err: i32) {
        if let Some(w) = self.wr.take() {
            if let (Some(g), Some(m)) = (w.grant, rx.memory()) {
                m.release(g, false);
            }
        }
        self.release_reads(rx, true);
        match std::mem::replace(&mut self.rstate, RxState::Closed) {
            RxState::Direct(b) => rx.fail(&b, err),
            RxState::Buffer { inc, buf, .. } => {
                rx.uncharge(self.id, inc.size);
                rx.recycle(buf);
            }
            _ => {}
        }
        for (_, b) in std::mem::take(&mut self.rndv_rx) {
            rx.fail(&b, err);
        }
        rx.purge_conn(self.id, err);
    }

    /// Fails everything, sends already committed included, and closes.
    fn fail_all(&mut self, rx: &mut Rx, err: i32) {
        for s in std::mem::take(&mut self.segs) {
            if let Done::Send(context) = s.done {
                self.events.push_back(Event::SendError { context, err });
            }
        }
        self.fail_queued(err);
        self.fail_receives(rx, err);
        self.close_now();
    }

    fn close_now(&mut self) {
        self.segs.clear();
        self.stage.clear();
        self.seg_off = 0;
        self.ctrl.clear();
        self.resps.clear();
        self.mem_refs = 0;
        self.held.clear();
        self.wstream = None;
        self.state = State::Closed;
        self.rstate = RxState::Closed;
    }
}

/// After a message's useful bytes: drop `tail` bytes, then the next header.
fn after_payload(tail: usize) -> RxState {
    if tail > 0 {
        RxState::Discard { left: tail }
    } else {
        RxState::Header { got: 0 }
    }
}
