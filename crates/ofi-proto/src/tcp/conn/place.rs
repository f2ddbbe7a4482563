//! The receive side of a connection: where the next bytes read go, frame
//! headers and control payloads (the handshake's HELLO, CHALLENGE, PROOF,
//! ACCEPT and REJECT, RTS and CTS), and the placement of each message in a
//! posted receive or, when none matches, as unexpected.

use super::tx::{Ctrl, Done};
use super::{Conn, State, ACCEPTOR, CONNECTOR};
use crate::tcp::event::{Event, ProtoError};
use crate::tcp::rx::{clip, Bound, Meta, Pending, Rx, RTS_COST};
use ofi_base::error::errno;
use ofi_base::iov::IoVec;
use ofi_wire::tcp::{
    challenge_payload, flag, op, parse_challenge, parse_rts_payload, reject, split_hello, Header,
    Repr, HDR_LEN,
};

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

/// A message header that was read, before its payload.
#[derive(Clone, Copy, Debug)]
pub(super) struct Incoming {
    meta: Meta,
    pub(super) size: usize,
    /// The sender's rendezvous id (RTS), or `None` (MSG).
    rndv: Option<u64>,
}

#[derive(Debug)]
pub(super) enum RxState {
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

impl Conn {
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
}

/// After a message's useful bytes: drop `tail` bytes, then the next header.
fn after_payload(tail: usize) -> RxState {
    if tail > 0 {
        RxState::Discard { left: tail }
    } else {
        RxState::Header { got: 0 }
    }
}
