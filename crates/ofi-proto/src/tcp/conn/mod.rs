//! One connection (one TCP stream): its protocol state, connection
//! management (HELLO, the auth-key handshake's setup, ACCEPT, REJECT,
//! SHUTDOWN) and what happens when it is lost or fails. Transmit lives in
//! `tx`, receive and placement in `place`, one-sided requests in `rma`.
//!
//! The driver owns the socket. To send it asks [`Conn::poll_transmit`] for
//! the bytes to write next — frame headers in a core-owned buffer and user
//! ranges by address — writes what it can and reports [`Conn::on_written`].
//! To receive it asks [`Conn::recv_target`] where the next bytes go — the
//! header buffer, a receive's own buffer, a core buffer for an unexpected
//! message, or nowhere (bytes to drop) — reads into it and reports
//! [`Conn::on_read`]. Partial progress may stop at any byte.

use super::event::{Event, ProtoError};
use super::one_sided::{Grant, Req};
use super::rx::{Bound, Rx};
use super::ConnId;
use ofi_base::auth::{AuthKey, Nonce};
use ofi_base::error::errno;
use ofi_base::iov::IoVec;
use ofi_base::matching::MAX_IOV;
use ofi_wire::tcp::{op, reject, Repr, HDR_LEN, NONCE_LEN};
use std::collections::{HashMap, VecDeque};

mod place;
mod rma;
mod serve;
mod tx;

use place::RxState;
pub use place::Target;
use tx::{Ctrl, Done, Seg, TxRndv, SLICES_PER_FRAME};
pub use tx::{SendReq, Transmit, TxSlice, FAST_MAX};

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
    resps: VecDeque<serve::RespOut>,
    /// Buffers of answers copied out of registered memory, kept for the
    /// next copy (a capture of a 128 KiB answer otherwise allocates fresh
    /// pages, faults them in and unmaps them again).
    spare: Vec<Vec<u8>>,
    /// Answer bytes still referring to registered memory.
    mem_refs: usize,
    /// Answer buffers that segments send from (`SegKind::Held`).
    held: serve::Held,
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
    wr: Option<serve::WriteIn>,
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
            held: serve::Held::default(),
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
    #[inline]
    pub fn wants_transmit(&self) -> bool {
        !self.segs.is_empty()
            || !self.ctrl.is_empty()
            || !self.resps.is_empty()
            || (self.state == State::Connected
                && (self.can_commit() || !self.streams.is_empty() || self.wstream.is_some()))
    }

    /// Operations of this connection started and not complete: sends not
    /// written (or not acknowledged), rendezvous, requests not answered.
    #[inline]
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

    /// True when nothing of this connection is tied to its stream but
    /// operations queued and not started: nothing staged, in flight or
    /// owed either way, the receive side between frames with nothing
    /// parked. Such a connection may go on over a new stream (the peer's
    /// connection being as fresh).
    pub fn is_quiet_but_queued(&self) -> bool {
        self.state == State::Connected
            && self.segs.is_empty()
            && self.ctrl.is_empty()
            && self.await_cts.is_empty()
            && self.streams.is_empty()
            && self.outstanding.is_empty()
            && self.wstream.is_none()
            && self.resps.is_empty()
            && self.read_grants.is_empty()
            && self.reads_done.is_empty()
            && self.rndv_rx.is_empty()
            && self.wr.is_none()
            && matches!(self.rstate, RxState::Header { got: 0 })
    }

    /// [`is_quiet_but_queued`](Self::is_quiet_but_queued) with nothing
    /// queued either: the connection may be let go.
    pub fn is_quiet(&self) -> bool {
        self.is_quiet_but_queued() && self.sendq.is_empty()
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
