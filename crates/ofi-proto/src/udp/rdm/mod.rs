//! The RDM endpoint core over datagrams: the tcp provider's protocol core
//! ([`tcp::Conn`] per peer, one [`tcp::Rx`] per endpoint) carried by the
//! reliable stream of each peer's session ([`Sessions`], [`Channel`]).
//!
//! **Sending.** Each peer's [`tcp::Conn`] stages frames as it does over a
//! socket. Its transmit is read from the front: a core-owned range (frame
//! headers, control payloads) or a user range of at most
//! [`RdmConfig::copy_max`] bytes is copied into the peer's outbox and
//! reported written at once, so small sends complete as soon as they are
//! staged (as over tcp, where the kernel takes them); a larger user range
//! (the payload of a large message or RMA write) stays where it is and the
//! datagrams that carry it are gathered straight from the user's buffer,
//! each time one is sent; it is reported written (and its send completes)
//! once the peer acknowledges it. So a large message's bytes leave the
//! sender without a user-space copy.
//!
//! **Receiving.** A packet's payload that is next in the stream goes from
//! the datagram straight into whatever the connection's receive side asks
//! for ([`tcp::Target`]): a matched receive's buffer, a header, an
//! unexpected message's buffer. What it cannot take now (no receive, the
//! unexpected budget spent) is held by the channel, whose window then
//! closes: a receiver that does not post receives stops its senders.
//!
//! **Peers.** A session that ends for a [`Cause`] fails every operation of
//! its connection with the cause's number and is reported as
//! [`RdmEvent::PeerDown`] (the driver declares the peer dead, fails the
//! receives directed at it and reports it on the EQ), unless the same peer
//! endpoint renewed an idle session with nothing in flight here. A refused
//! handshake (auth key) fails the connection's operations with
//! `FI_EKEYREJECTED`. A peer that breaks the protocol has its session reset.

use super::chan::{Channel, Recv};
use super::hash::FastMap;
use super::ring::ByteRing;
use super::session::{Incoming, PeerId, SessionConfig, SessionEvent, Sessions};
use super::table::ById;
use crate::tcp::{self, Conn, ConnId, Req, Rx, SendReq, Target, Transmit, TxSlice};
use ofi_base::auth::Nonce;
use ofi_base::consts::FI_ADDR_NOTAVAIL;
use ofi_base::error::errno;
use ofi_base::iov::IoVec;
use ofi_base::peer::Cause;
use ofi_wire::tcp::HDR_LEN as FRAME_HDR_LEN;
use ofi_wire::udp::HDR_LEN;
use std::collections::VecDeque;
use std::time::Instant;

mod peers;

/// The driver's copies between the core and user memory (the core never
/// touches user memory itself).
pub trait UserMem {
    /// Copies `src` into the ranges `iov`, in order; returns the bytes copied.
    fn write(&mut self, iov: &[IoVec], src: &[u8]) -> usize;
    /// Copies `into.len()` bytes from the user range starting at `from.base`.
    fn read(&mut self, from: IoVec, into: &mut [u8]);
}

/// One range of an outgoing datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part<'a> {
    /// Core-owned bytes.
    Bytes(&'a [u8]),
    /// User memory (a large send's payload), valid until its send completes.
    Iov(IoVec),
}

impl Part<'_> {
    /// Bytes.
    pub fn len(&self) -> usize {
        match self {
            Part::Bytes(b) => b.len(),
            Part::Iov(v) => v.len,
        }
    }
    /// True if empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Most parts one datagram is made of (the rest of a datagram that would
/// need more is copied into one).
pub const MAX_PARTS: usize = 12;

/// Tunables of an RDM endpoint.
#[derive(Clone, Debug)]
pub struct RdmConfig {
    /// The protocol core's settings (eager limit, chunking, frame limits).
    pub proto: tcp::Config,
    /// The receive side's settings (unexpected budget, queue depth).
    pub rx: tcp::RxConfig,
    /// The sessions' settings (epoch, address, key, datagram size, channel).
    pub session: SessionConfig,
    /// User ranges up to this size are copied when staged; larger ones are
    /// sent from the user's buffer and complete when acknowledged.
    pub copy_max: usize,
    /// Most operations queued and not complete ([`Rdm::queue`] answers
    /// `FI_EAGAIN` beyond it): the endpoint's `tx_size`.
    pub tx_size: usize,
    /// Most bytes of copies one peer has not acknowledged; beyond it sends
    /// to that peer go from the user's buffer and complete when
    /// acknowledged.
    pub copy_budget: usize,
    /// The same bound over every peer of the endpoint.
    pub copy_total: usize,
}

/// What the core tells its driver (receive completions come from
/// [`Rdm::rx`]'s `poll_event`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RdmEvent {
    /// A connection event: send and one-sided completions and errors.
    Op(tcp::Event),
    /// A session with the peer is up (a peer marked dead is live again).
    PeerUp {
        /// Its fi_addr (`FI_ADDR_NOTAVAIL` when not in the AV).
        fi_addr: u64,
        /// Its address.
        addr: Vec<u8>,
    },
    /// The peer's session ended: its operations failed with `cause`'s
    /// number; declare it dead.
    PeerDown {
        /// Its fi_addr.
        fi_addr: u64,
        /// Its address.
        addr: Vec<u8>,
        /// Why.
        cause: Cause,
        /// The peer closed its endpoint in an orderly way (log it as
        /// such, not as a fault).
        closed: bool,
    },
    /// A handshake failed on the auth key: the peer's operations failed
    /// with `FI_EKEYREJECTED` (a refused peer, not a dead one).
    Refused {
        /// Its fi_addr.
        fi_addr: u64,
        /// Its address.
        addr: Vec<u8>,
        /// What went wrong.
        why: &'static str,
    },
    /// The session with the peer ended idle, both sides agreeing (for
    /// the debug log): nothing was lost; the next message makes a new one.
    Expired {
        /// Its address.
        addr: Vec<u8>,
    },
    /// A datagram was dropped (for the debug log).
    Dropped {
        /// Why.
        why: &'static str,
    },
    /// The peer broke the protocol: its session was reset.
    Broken {
        /// Its address.
        addr: Vec<u8>,
        /// What it did.
        why: String,
    },
}

/// Feeds stream bytes to a connection; returns how many it took (all of
/// them when it is closed: nothing more is read).
fn feed(conn: &mut Conn, rx: &mut Rx, mut b: &[u8], mem: &mut dyn UserMem) -> usize {
    let total = b.len();
    while !b.is_empty() {
        let n = match conn.recv_target(rx) {
            Target::Header(t) | Target::Buffer(t) => {
                let n = t.len().min(b.len());
                t[..n].copy_from_slice(&b[..n]);
                n
            }
            Target::Payload(iov) => {
                let want: usize = iov.iter().map(|v| v.len).sum();
                let n = want.min(b.len());
                mem.write(iov, &b[..n])
            }
            Target::Discard(n) => n.min(b.len()),
            Target::Blocked => break,
            Target::Closed => return total,
        };
        if n == 0 {
            break;
        }
        conn.on_read(n, rx);
        b = &b[n..];
    }
    total - b.len()
}

/// A peer's protocol state.
struct Link {
    fi_addr: u64,
    conn: Option<Conn>,
    /// Copies of stream bytes reported written and not yet acknowledged:
    /// stream offsets `acked..reported`.
    ring: ByteRing,
    acked: u64,
    reported: u64,
}

/// Bytes of copy capacity reserved per link at most: acknowledgements
/// that come late (a loaded receiver) let copies pile up, and the first
/// time that happens must not allocate on the hot path.
const RING_RESERVED: usize = 64 << 10;

impl Link {
    /// A link whose copy ring holds `reserve` bytes without growing.
    fn new(fi_addr: u64, reserve: usize) -> Link {
        Link {
            fi_addr,
            conn: None,
            ring: ByteRing::with_capacity(reserve.min(RING_RESERVED)),
            acked: 0,
            reported: 0,
        }
    }
    /// A new session starts a new stream. Returns the bytes of copies
    /// dropped.
    #[must_use]
    fn reset_stream(&mut self) -> usize {
        let n = self.ring.len();
        self.ring.clear();
        self.acked = 0;
        self.reported = 0;
        n
    }
    /// The peer has every byte below `acked`: forgets their copies. Returns
    /// how many bytes beyond the copies that reaches (sent from user
    /// memory in place): the caller reports them written.
    #[inline]
    fn forget_acked(&mut self, acked: u64) -> usize {
        if acked <= self.acked {
            return 0;
        }
        let copied = acked.min(self.reported) - self.acked;
        self.ring.drain_front(copied as usize);
        self.acked = acked;
        if acked > self.reported {
            let n = acked - self.reported;
            self.reported = acked;
            return n as usize;
        }
        0
    }
}

/// Appends a copy of the user range `v` to `ring` (read straight into it).
fn copy_in(ring: &mut ByteRing, v: IoVec, mem: &mut dyn UserMem) {
    ring.append_with(v.len, |a, b| {
        mem.read(
            IoVec {
                base: v.base,
                len: a.len(),
            },
            a,
        );
        if !b.is_empty() {
            mem.read(
                IoVec {
                    base: v.base + a.len(),
                    len: b.len(),
                },
                b,
            );
        }
    });
}

/// Moves a connection's events to `events`; the reason when it broke the
/// protocol.
fn take_conn_events(link: &mut Link, events: &mut VecDeque<RdmEvent>) -> Option<String> {
    let conn = link.conn.as_mut()?;
    let mut broken = None;
    while let Some(e) = conn.poll_event() {
        match e {
            tcp::Event::ProtocolError(p) => broken = Some(p.to_string()),
            e => events.push_back(RdmEvent::Op(e)),
        }
    }
    broken
}

/// Hands `ch`'s held stream bytes to `conn` while it takes them.
fn drain_held_into(ch: &mut Channel, conn: &mut Conn, rx: &mut Rx, mem: &mut dyn UserMem) {
    for _ in 0..4096 {
        let h = ch.held();
        if h.is_empty() {
            break;
        }
        let n = feed(conn, rx, h, mem);
        ch.consume(n);
        if n == 0 {
            break;
        }
    }
}

/// Sends the datagrams `ch` has ready now to `addr`: each a header and
/// the stream range the channel names, gathered from `link`'s copies and,
/// beyond them, from `view` (the connection's transmit, in place). True
/// when the channel has nothing more to send now; false when the bound on
/// one call stopped it.
#[allow(clippy::too_many_arguments)]
fn emit(
    ch: &mut Channel,
    addr: &[u8],
    link: &Link,
    view: Option<&Transmit<'_>>,
    now: Instant,
    hdr: &mut [u8; HDR_LEN],
    flat: &mut Vec<u8>,
    mem: &mut dyn UserMem,
    send: &mut dyn FnMut(&[u8], &[Part<'_>]),
) -> bool {
    for i in 0..256 {
        // After a packet, one more goes only if the channel has something
        // (an acknowledgement or probe rides on the packet just sent).
        if i > 0 && !ch.wants_transmit() {
            return true;
        }
        let Some(r) = ch.poll_transmit(now, hdr) else {
            return true;
        };
        let mut parts: [Part<'_>; MAX_PARTS] = [Part::Bytes(&[]); MAX_PARTS];
        parts[0] = Part::Bytes(&hdr[..]);
        let mut np = 1;
        let mut need = 0usize;
        // From the outbox copies.
        if r.start < link.reported {
            let a = (r.start - link.acked) as usize;
            let b = (r.end.min(link.reported) - link.acked) as usize;
            let (x, y) = link.ring.as_slices();
            for (s, off) in [(x, 0usize), (y, x.len())] {
                let lo = a.max(off);
                let hi = b.min(off + s.len());
                if lo < hi {
                    parts[np] = Part::Bytes(&s[lo - off..hi - off]);
                    np += 1;
                }
            }
        }
        // From the connection's transmit, in place.
        if r.end > link.reported {
            let skip = r.start.max(link.reported) - link.reported;
            let mut left = (r.end - r.start.max(link.reported)) as usize;
            let mut skip = skip as usize;
            if let Some(t) = view {
                for s in t.iter() {
                    if left == 0 {
                        break;
                    }
                    let l = s.len();
                    if skip >= l {
                        skip -= l;
                        continue;
                    }
                    let take = (l - skip).min(left);
                    let p = match s {
                        TxSlice::Bytes(b) => Part::Bytes(&b[skip..skip + take]),
                        TxSlice::Iov(v) => Part::Iov(IoVec {
                            base: v.base + skip,
                            len: take,
                        }),
                    };
                    skip = 0;
                    left -= take;
                    if np < MAX_PARTS - 1 {
                        parts[np] = p;
                        np += 1;
                    } else {
                        // Too many pieces for one datagram: flatten the rest.
                        need += 1;
                        let at = flat.len();
                        flat.resize(at + take, 0);
                        match p {
                            Part::Bytes(b) => flat[at..].copy_from_slice(b),
                            Part::Iov(v) => mem.read(v, &mut flat[at..]),
                        }
                    }
                }
            }
        }
        if need > 0 {
            parts[np] = Part::Bytes(flat);
            np += 1;
        }
        send(addr, &parts[..np]);
        flat.clear();
    }
    false
}

/// The RDM endpoint core (see the module documentation).
pub struct Rdm {
    cfg: RdmConfig,
    sessions: Sessions,
    rx: Rx,
    links: ById<Link>,
    by_conn: FastMap<ConnId, PeerId>,
    next_conn: ConnId,
    events: VecDeque<RdmEvent>,
    hdr: [u8; HDR_LEN],
    /// Up peers of one transmit pass (kept to not allocate each pass).
    peers: Vec<PeerId>,
    flat: Vec<u8>,
    /// Something since the last transmit pass may have given it work
    /// (see [`Rdm::wants_transmit`]).
    dirty: bool,
    /// Operations queued and not complete (their completion events not
    /// yet taken): at most [`RdmConfig::tx_size`].
    pending: usize,
    /// Bytes of copies over every link (at most [`RdmConfig::copy_total`]
    /// and one piece).
    copied: usize,
}

impl std::fmt::Debug for Rdm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rdm")
            .field("peers", &self.links.len())
            .finish()
    }
}

impl Rdm {
    /// An endpoint core; `nonces` gives fresh random nonces (the driver's
    /// system random source).
    pub fn new(cfg: RdmConfig, nonces: Box<dyn FnMut() -> Nonce + Send>) -> Rdm {
        Rdm {
            sessions: Sessions::new(cfg.session.clone(), nonces),
            rx: Rx::new(cfg.rx),
            links: ById::default(),
            by_conn: FastMap::default(),
            next_conn: 1,
            // Reserved: a burst of drops or completions after a stall must
            // not allocate on the hot path.
            events: VecDeque::with_capacity(256),
            hdr: [0; HDR_LEN],
            peers: Vec::new(),
            flat: Vec::new(),
            dirty: false,
            pending: 0,
            copied: 0,
            cfg,
        }
    }

    /// The receive side: post, cancel, peek; its `poll_event` gives the
    /// receive completions.
    pub fn rx(&mut self) -> &mut Rx {
        &mut self.rx
    }

    /// The session table (counters, channels' statistics).
    pub fn sessions(&self) -> &Sessions {
        &self.sessions
    }

    /// The next event.
    #[inline]
    pub fn poll_event(&mut self) -> Option<RdmEvent> {
        let e = self.events.pop_front()?;
        if let RdmEvent::Op(
            tcp::Event::SendComplete { .. }
            | tcp::Event::SendError { .. }
            | tcp::Event::RmaComplete { .. }
            | tcp::Event::RmaError { .. },
        ) = e
        {
            self.pending = self.pending.saturating_sub(1);
        }
        Some(e)
    }

    /// Peers this core keeps protocol state for (a link: connection and
    /// copies), live or not.
    pub fn links(&self) -> usize {
        self.links.len()
    }

    /// Bytes of copies held for peers that have not acknowledged them.
    pub fn copied(&self) -> usize {
        self.copied
    }

    /// Operations queued and not complete (their completion events not
    /// yet taken with [`poll_event`](Self::poll_event)).
    pub fn pending(&self) -> usize {
        self.pending
    }

    /// True when events wait.
    pub fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    /// True when something completed for the application: events wait
    /// here or receive completions at [`Rdm::rx`]. A driver reading a
    /// burst of datagrams may stop at the first that does this, so that
    /// the completion is reported without a further read.
    pub fn completes(&self) -> bool {
        !self.events.is_empty() || self.rx.has_events()
    }

    fn new_conn(&mut self, peer: PeerId, fi_addr: u64) -> Conn {
        let id = self.next_conn;
        self.next_conn += 1;
        self.by_conn.insert(id, peer);
        Conn::established(id, fi_addr, self.cfg.proto)
    }

    /// The id of the peer at `addr`, for [`queue_to`](Self::queue_to) and
    /// [`send_now`](Self::send_now): it names that peer for as long as
    /// this core lives (a driver may keep it with the address).
    pub fn peer(&mut self, addr: &[u8]) -> PeerId {
        self.sessions.peer(addr)
    }

    /// Queues a send or one-sided request to the peer at `addr` (`fi_addr`
    /// in the AV), starting a session with it when there is none.
    /// `FI_EAGAIN` while [`RdmConfig::tx_size`] operations are queued and
    /// not complete, or when the peer has no session and as many peers
    /// have one as [`SessionConfig::max_peers`] allows (an idle one is
    /// then asked to end): flow control, post it again after progress.
    pub fn queue(&mut self, now: Instant, fi_addr: u64, addr: &[u8], req: Req) -> Result<(), i32> {
        let peer = self.sessions.peer(addr);
        self.queue_to(now, fi_addr, peer, req)
    }

    /// [`queue`](Self::queue) to the peer named by [`peer`](Self::peer).
    pub fn queue_to(
        &mut self,
        now: Instant,
        fi_addr: u64,
        peer: PeerId,
        req: Req,
    ) -> Result<(), i32> {
        if self.pending >= self.cfg.tx_size {
            return Err(errno::FI_EAGAIN);
        }
        let up = self.sessions.is_up(peer);
        if !up && self.sessions.at_bound(peer) {
            // As many live peers as allowed: an idle one ends to make room.
            self.sessions.make_room(now);
            self.dirty = true;
            return Err(errno::FI_EAGAIN);
        }
        let reserve = self.cfg.session.chan.window as usize;
        let link = self
            .links
            .get_or_insert_with(peer, || Link::new(fi_addr, reserve));
        link.fi_addr = fi_addr;
        if link.conn.as_ref().is_none_or(|c| c.is_closed()) {
            let id = self.next_conn;
            self.next_conn += 1;
            self.by_conn.insert(id, peer);
            link.conn = Some(Conn::established(id, fi_addr, self.cfg.proto));
            if !up {
                self.copied = self.copied.saturating_sub(link.reset_stream());
            }
        }
        let conn = link.conn.as_mut().expect("just made");
        conn.set_peer(fi_addr);
        conn.queue(req)?;
        self.pending += 1;
        self.dirty = true;
        if !up {
            self.sessions.connect(now, peer);
        }
        Ok(())
    }

    /// The fast path of a small eager send ([`Conn::frame_now`]) to a peer
    /// whose session is up and whose connection has nothing staged or
    /// queued ahead of it: the frame goes into the peer's outbox (a copy,
    /// as any send of at most [`RdmConfig::copy_max`] bytes) and its
    /// datagrams out through `send` at once, with no request queued and no
    /// event to follow. `peer` is [`peer`](Self::peer)'s id of its address. `Some(more)`: the send is complete; `more` as
    /// [`poll_transmit`](Self::poll_transmit) returns it. `None`: queue it
    /// with [`queue`](Self::queue) instead.
    #[allow(clippy::too_many_arguments)]
    pub fn send_now(
        &mut self,
        now: Instant,
        fi_addr: u64,
        peer: PeerId,
        req: &SendReq,
        mem: &mut dyn UserMem,
        send: &mut dyn FnMut(&[u8], &[Part<'_>]),
    ) -> Option<bool> {
        let link = self.links.get_mut(peer)?;
        let conn = link.conn.as_mut()?;
        let (ch, to) = self.sessions.channel_and_addr(peer)?;
        let mut hdr = [0u8; FRAME_HDR_LEN];
        let total = conn.frame_now(req, &mut hdr)?;
        let len = total - FRAME_HDR_LEN;
        if len > self.cfg.copy_max
            || ch.acked() > link.reported
            || link.ring.len() >= self.cfg.copy_budget
            || self.copied >= self.cfg.copy_total
        {
            return None;
        }
        link.fi_addr = fi_addr;
        conn.set_peer(fi_addr);
        // The whole frame is taken here (frame_written would have nothing
        // to keep): the send is complete.
        let before = link.ring.len();
        link.forget_acked(ch.acked());
        link.ring.extend(&hdr);
        for v in req.iov() {
            if v.len > 0 {
                copy_in(&mut link.ring, *v, mem);
            }
        }
        self.copied = (self.copied + link.ring.len()).saturating_sub(before);
        link.reported += total as u64;
        // Nothing is staged in the connection: the stream ends at the copies.
        ch.set_stream_end(link.reported);
        ch.set_prompt(link.reported);
        let sent_all = emit(
            ch,
            to,
            link,
            None,
            now,
            &mut self.hdr,
            &mut self.flat,
            mem,
            send,
        );
        Some(!sent_all)
    }

    /// True when [`poll_transmit`](Self::poll_transmit) may have work that
    /// no timer and no call of the driver's own brought: a datagram taken
    /// since the last pass that asks for an answer, frees the windows,
    /// acknowledges bytes sent in place, or made the connection stage
    /// something; a request queued; a session event. A datagram that only
    /// brings data (its acknowledgement waits for the delayed-ack timer or
    /// for data going back) leaves it false.
    pub fn wants_transmit(&self) -> bool {
        self.dirty || self.sessions.has_ctrl()
    }

    /// Takes one datagram from `from`. `resolve` names the fi_addr of a
    /// peer address (`FI_ADDR_NOTAVAIL` when it is not in the AV).
    pub fn on_datagram(
        &mut self,
        now: Instant,
        from: &[u8],
        bytes: &[u8],
        mem: &mut dyn UserMem,
        resolve: &mut dyn FnMut(&[u8]) -> u64,
    ) {
        let inc = self.sessions.on_datagram(now, from, bytes);
        if self.sessions.has_events() {
            self.session_events(now, resolve);
        }
        match inc {
            Incoming::Data { peer, recv } => {
                let quiet = self.on_data(now, peer, recv, &bytes[HDR_LEN..], mem);
                self.dirty |= !quiet;
            }
            // A run of the same drop (duplicates after a spurious
            // retransmission) is one event; the counters keep the rest.
            Incoming::Dropped(why) => {
                self.dirty = true;
                if !matches!(self.events.back(), Some(RdmEvent::Dropped { why: w }) if *w == why) {
                    self.events.push_back(RdmEvent::Dropped { why });
                }
            }
            Incoming::Control => self.dirty = true,
        }
        if self.rx.has_wakeups() {
            self.wakeups(mem);
        }
    }

    /// Hands an in-session packet's payload (with [`Recv::Deliver`]) and
    /// then what its channel holds to the peer's connection. True when that
    /// left nothing to send before a timer runs out (the driver may skip
    /// its transmit pass).
    fn on_data(
        &mut self,
        now: Instant,
        peer: PeerId,
        recv: Recv,
        payload: &[u8],
        mem: &mut dyn UserMem,
    ) -> bool {
        let Some(ch) = self.sessions.channel(peer) else {
            return false;
        };
        let Some(link) = self.links.get_mut(peer).filter(|l| l.conn.is_some()) else {
            // No connection takes the bytes: they are dropped.
            if recv == Recv::Deliver {
                ch.hold(&[]);
            }
            return false;
        };
        let mut broken = None;
        if let Some(conn) = link.conn.as_mut() {
            if recv != Recv::Ack {
                if recv == Recv::Deliver {
                    let n = feed(conn, &mut self.rx, payload, mem);
                    ch.hold(&payload[n..]);
                }
                drain_held_into(ch, conn, &mut self.rx, mem);
            }
            ch.set_waiting(now, conn.in_flight() > 0 || conn.awaits_peer());
        }
        if recv != Recv::Ack {
            broken = take_conn_events(link, &mut self.events);
        }
        if let Some(why) = broken {
            self.broken(peer, why);
            return false;
        }
        let busy = ch.wants_transmit()
            || ch.acked() > link.reported
            || link.conn.as_ref().is_some_and(|c| c.wants_transmit())
            || self.rx.owes_frames();
        !busy && !self.sessions.has_ctrl()
    }

    /// Hands held stream bytes of `peer` to its connection while it takes them.
    fn drain_held(&mut self, peer: PeerId, mem: &mut dyn UserMem) {
        if let (Some(ch), Some(conn)) = (
            self.sessions.channel(peer),
            self.links.get_mut(peer).and_then(|l| l.conn.as_mut()),
        ) {
            drain_held_into(ch, conn, &mut self.rx, mem);
        }
        self.conn_events(peer);
    }

    /// Receives blocked connections may go on (a receive was posted).
    pub fn wakeups(&mut self, mem: &mut dyn UserMem) {
        for _ in 0..1024 {
            let Some(id) = self.rx.next_wakeup() else {
                return;
            };
            self.dirty = true;
            if let Some(&peer) = self.by_conn.get(&id) {
                self.drain_held(peer, mem);
            }
        }
    }

    /// Sends what every peer has to send (handshakes, frames, acknowledgements,
    /// retransmissions): `send(destination, parts)` puts one datagram on
    /// the wire at once.
    ///
    /// Returns true when a bound on the work of one call left something
    /// that could be sent now: call again. Otherwise nothing more goes out
    /// until a datagram arrives ([`on_datagram`](Self::on_datagram)), a
    /// timer is due ([`poll_timeout`](Self::poll_timeout)), an operation is
    /// queued or the receive side has something to say
    /// (`rx().has_wakeups()`, `rx().owes_frames()`): a driver may skip the
    /// call until then.
    pub fn poll_transmit(
        &mut self,
        now: Instant,
        mem: &mut dyn UserMem,
        send: &mut dyn FnMut(&[u8], &[Part<'_>]),
    ) -> bool {
        self.dirty = false;
        while let Some((to, bytes)) = self.sessions.poll_ctrl() {
            send(&to, &[Part::Bytes(&bytes)]);
        }
        let mut peers = std::mem::take(&mut self.peers);
        peers.clear();
        peers.extend(self.sessions.up_peers());
        let mut more = false;
        for &peer in &peers {
            more |= self.pump(peer, now, mem, send);
        }
        self.peers = peers;
        // A reset queued while pumping.
        while let Some((to, bytes)) = self.sessions.poll_ctrl() {
            send(&to, &[Part::Bytes(&bytes)]);
        }
        more
    }

    /// Sends what `peer` has to send; true when a bound stopped it early.
    fn pump(
        &mut self,
        peer: PeerId,
        now: Instant,
        mem: &mut dyn UserMem,
        send: &mut dyn FnMut(&[u8], &[Part<'_>]),
    ) -> bool {
        let copy_max = self.cfg.copy_max;
        let reserve = self.cfg.session.chan.window as usize;
        // Up with nothing to say yet: acknowledgements still go.
        let link = self
            .links
            .get_or_insert_with(peer, || Link::new(FI_ADDR_NOTAVAIL, reserve));
        let Some((ch, addr)) = self.sessions.channel_and_addr(peer) else {
            return false;
        };
        let mut capped = false;
        // Copies of the other peers, and the most this one may hold.
        let others = self.copied.saturating_sub(link.ring.len());
        let room = self
            .cfg
            .copy_budget
            .min(self.cfg.copy_total.saturating_sub(others));
        // 1. What the peer acknowledged: forget copies, report the rest.
        let reached = link.forget_acked(ch.acked());
        if reached > 0 {
            if let Some(c) = link.conn.as_mut() {
                c.on_written(reached);
            }
        }
        // 2. Stage frames; copy and report small pieces at the front. (A
        // connection that has nothing to stage, was told of nothing written
        // and owes the receive side nothing is not asked.)
        if let Some(conn) = link.conn.as_mut() {
            if reached > 0 || conn.wants_transmit() || self.rx.owes_frames() {
                capped = true;
                for _ in 0..64 {
                    let t = conn.poll_transmit(&mut self.rx);
                    let mut n = 0;
                    for s in t.iter() {
                        // Beyond the budgets the rest goes from where it
                        // is and completes when acknowledged.
                        if link.ring.len() >= room {
                            break;
                        }
                        match s {
                            TxSlice::Bytes(b) => link.ring.extend(b),
                            TxSlice::Iov(v) if v.len <= copy_max => copy_in(&mut link.ring, v, mem),
                            TxSlice::Iov(_) => break,
                        }
                        n += s.len();
                    }
                    if n == 0 {
                        capped = false;
                        break;
                    }
                    conn.on_written(n);
                    link.reported += n as u64;
                }
            }
            ch.set_waiting(now, conn.in_flight() > 0 || conn.awaits_peer());
        }
        self.copied = others + link.ring.len();
        let view = link.conn.as_ref().map(|c| c.transmit_view());
        let end = link.reported + view.as_ref().map_or(0, |t| t.len() as u64);
        ch.set_stream_end(end);
        // Bytes beyond the copies complete their operations only when
        // acknowledged: the last packet asks for that at once.
        ch.set_prompt(link.reported);
        // 3. Datagrams.
        let sent_all = emit(
            ch,
            addr,
            link,
            view.as_ref(),
            now,
            &mut self.hdr,
            &mut self.flat,
            mem,
            send,
        );
        if let Some(why) = take_conn_events(link, &mut self.events) {
            self.broken(peer, why);
        }
        capped || !sent_all
    }

    /// Nothing listens at `addr` any more (the driver saw an ICMP port
    /// unreachable for a datagram sent there): see
    /// [`Sessions::on_port_unreachable`]. What waits for the peer fails now.
    pub fn on_port_unreachable(
        &mut self,
        now: Instant,
        addr: &[u8],
        resolve: &mut dyn FnMut(&[u8]) -> u64,
    ) {
        self.sessions.on_port_unreachable(addr);
        self.dirty = true;
        self.session_events(now, resolve);
    }

    /// The earliest time [`handle_timeout`](Self::handle_timeout) has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.sessions.poll_timeout()
    }

    /// Runs the timers due at `now` (sessions that end report their peers).
    pub fn handle_timeout(&mut self, now: Instant, resolve: &mut dyn FnMut(&[u8]) -> u64) {
        let Rdm {
            sessions,
            links,
            rx,
            ..
        } = self;
        sessions.handle_timeout_with(now, &mut |peer| {
            links
                .get(peer)
                .and_then(|l| l.conn.as_ref())
                .is_none_or(|c| c.is_quiet() && !rx.refers_to(c.id()))
        });
        self.dirty = true;
        self.session_events(now, resolve);
    }

    /// The counters of `peer`'s session, if up.
    pub fn stats(&mut self, peer: super::PeerId) -> Option<super::ChanStats> {
        self.sessions.channel(peer).map(|c| c.stats())
    }

    /// The channel of the session with the peer at `addr`, if up.
    pub fn channel(&mut self, addr: &[u8]) -> Option<&mut Channel> {
        let p = self.sessions.find(addr)?;
        self.sessions.channel(p)
    }

    /// Looks up every peer's fi_addr again (the AV changed: an address was
    /// removed, and its index may since name another peer): a peer whose
    /// address went is `FI_ADDR_NOTAVAIL` (its messages no longer carry
    /// the index, nor does its death fail the index's new owner), and one
    /// whose address came back has its index.
    pub fn refresh(&mut self, resolve: &mut dyn FnMut(&[u8]) -> u64) {
        for (peer, link) in self.links.iter_mut() {
            let Some(addr) = self.sessions.addr(peer) else {
                continue;
            };
            let fa = resolve(addr);
            if fa != link.fi_addr {
                link.fi_addr = fa;
                if let Some(c) = link.conn.as_mut() {
                    c.set_peer(fa);
                }
            }
        }
    }

    /// The endpoint closes: every operation fails with `FI_ECANCELED`, the
    /// receive side closes, and the RESETs that tell live peers go out
    /// through `send`.
    pub fn close(&mut self, send: &mut dyn FnMut(&[u8], &[Part<'_>])) {
        for link in self.links.values_mut() {
            if let Some(mut c) = link.conn.take() {
                c.on_error(errno::FI_ECANCELED, &mut self.rx);
                while let Some(e) = c.poll_event() {
                    if !matches!(e, tcp::Event::ConnectionLost { .. }) {
                        self.events.push_back(RdmEvent::Op(e));
                    }
                }
            }
        }
        self.rx.close(errno::FI_ECANCELED);
        for (to, bytes) in self.sessions.shutdown() {
            send(&to, &[Part::Bytes(&bytes)]);
        }
        self.links.clear();
        self.by_conn.clear();
        self.copied = 0;
    }
}
