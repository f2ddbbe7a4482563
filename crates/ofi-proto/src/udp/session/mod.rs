//! Sessions: which peer (remote address) has a live session with this
//! endpoint, how sessions are made (the handshake of `ofi_wire::udp`,
//! authenticated with the auth key when there is one), how a restarted peer
//! is told from the one before it (epochs), and when a peer is given up.
//!
//! One [`Sessions`] table per endpoint. The driver feeds it every datagram
//! ([`Sessions::on_datagram`], with the source address) and the time
//! ([`Sessions::handle_timeout`] at [`Sessions::poll_timeout`]), sends what
//! [`Sessions::poll_ctrl`] gives (handshake, RESET and REFUSE datagrams),
//! and drives each live session's [`Channel`] for data. Events say when a
//! session comes up and when a peer's session ends:
//!
//! - [`SessionEvent::Up`]: a session is up; data may flow.
//! - [`SessionEvent::Down`]: the session ended (or never came up) for a
//!   [`Cause`]: `TimedOut` when the peer did not answer within the peer
//!   timeout (handshake, unacknowledged data, awaited answers), `Reset`
//!   when it answered with RESET (it restarted, or closed its endpoint:
//!   then `closed`, from the RESET's [`flag::CLOSED`]) or
//!   when it made a new session in place of the old one. `renewed` says the
//!   new session comes from the same peer endpoint (same epoch) and the old
//!   one carried nothing, so nothing was lost; a new epoch is a new peer.
//! - [`SessionEvent::Refused`]: the handshake failed on the auth key.
//! - [`SessionEvent::Expired`]: the session ended idle, both sides
//!   agreeing; nothing was lost and nothing is reported. A session quiet
//!   for [`SessionConfig::idle_timeout`] (or the least recently active
//!   quiet one, when a new peer needs room under
//!   [`SessionConfig::max_peers`]) is asked to end with a RESET flagged
//!   IDLE; the peer agrees (a plain RESET) when it sent nothing the asker
//!   lacks and its owner has nothing tied to the session
//!   ([`SessionEvent::CloseAsked`], answered with
//!   [`Sessions::answer_close`]), or refuses (an ACK flagged IDLE). No new
//!   data goes while the asker waits for the answer, so nothing is sent
//!   on a session the other side let go (unless a refusal arrives later
//!   than the idle bound, and cancels a later request the peer agreed to).
//!
//! Nothing a datagram says changes a live session unless it is part of it
//! (its session name) or completes an authenticated handshake: a HELLO
//! alone, replayed or spoofed, leaves the live session as it is.

use super::chan::{earliest, ChanConfig, Channel, Recv};
use super::hash::FastMap;
use super::table::Slab;
use ofi_base::auth::{AuthKey, Nonce};
use ofi_base::peer::Cause;
use ofi_wire::udp::{
    flag, kind, peek_kind, session_id, Handshake, Packet, Repr, HDR_LEN, NONCE_LEN,
};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

mod incoming;
mod timers;

/// A peer's name within one [`Sessions`] table.
pub type PeerId = u64;

/// The first transcript part of a HELLO_ACK's MAC.
const LABEL_ACK: &[u8] = b"ofi-udp-v1 hello-ack";
/// The first transcript part of a CONFIRM's MAC.
const LABEL_CONFIRM: &[u8] = b"ofi-udp-v1 confirm";

/// Tunables of a session table.
#[derive(Clone, Debug)]
pub struct SessionConfig {
    /// This endpoint's epoch: random, chosen when it opens.
    pub epoch: u64,
    /// This endpoint's address (bound into the handshake's MACs).
    pub my_addr: Vec<u8>,
    /// The auth key every handshake proves (`None`: none).
    pub key: Option<AuthKey>,
    /// Largest datagram this endpoint accepts.
    pub max_datagram: usize,
    /// Channel tunables (`max_payload` is set per session).
    pub chan: ChanConfig,
    /// Peers held in a handshake they started and have not finished.
    pub max_half_open: usize,
    /// A session that carried nothing either way for this long ends, by
    /// agreement of both sides (see [`Sessions`]); the next message to or
    /// from the peer makes a new one.
    pub idle_timeout: Duration,
    /// Most peers with a live session or a handshake of ours under way.
    pub max_peers: usize,
}

/// What happened to a peer's session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SessionEvent {
    /// A session with `peer` is up.
    Up {
        /// The peer.
        peer: PeerId,
        /// Its endpoint's epoch.
        epoch: u64,
    },
    /// The peer's session ended, or the one asked for never came up.
    Down {
        /// The peer.
        peer: PeerId,
        /// Why.
        cause: Cause,
        /// The same peer endpoint made a new session in place of an idle
        /// one: nothing was lost.
        renewed: bool,
        /// The peer closed its endpoint in an orderly way (its RESET said
        /// so): no fault, though what waited on it fails all the same.
        closed: bool,
    },
    /// A handshake failed on the auth key (the keys differ, or one side
    /// has none).
    Refused {
        /// The peer.
        peer: PeerId,
        /// What went wrong, for the log.
        why: &'static str,
    },
    /// The session ended idle, both sides agreeing (or the peer silent
    /// through the ending): nothing was lost, nothing is reported. The
    /// owner lets go of what it kept for the peer; a peer that only a
    /// stranger's handshake brought (not asked for with
    /// [`Sessions::peer`]) is forgotten and its id names nothing any more.
    Expired {
        /// The peer.
        peer: PeerId,
    },
    /// The peer asks to end its session, idle on both sides as far as
    /// this table sees: the owner answers with [`Sessions::answer_close`]
    /// (agreeing when nothing of its own is tied to the session).
    CloseAsked {
        /// The peer.
        peer: PeerId,
    },
}

/// What [`Sessions::on_datagram`] made of a datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Incoming {
    /// An in-session packet, handed to the peer's channel with this result
    /// (with [`Recv::Deliver`] the payload, after [`HDR_LEN`], is next in
    /// the stream).
    Data {
        /// The peer.
        peer: PeerId,
        /// What the channel did.
        recv: Recv,
    },
    /// A handshake or control packet, dealt with.
    Control,
    /// Dropped, for this reason (counted).
    Dropped(&'static str),
}

/// Counters of dropped datagrams.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Drops {
    /// Not a datagram of this protocol, or malformed.
    pub malformed: u64,
    /// Of a session this endpoint does not know (answered with RESET).
    pub unknown_session: u64,
    /// Handshake packets that answer nothing current (stale or replayed).
    pub stale: u64,
    /// Handshakes failing the auth key.
    pub auth: u64,
    /// Dropped by a channel (duplicate, beyond the window, bad ack).
    pub channel: u64,
    /// Handshakes of new peers held back at [`SessionConfig::max_peers`].
    pub full: u64,
}

#[derive(Debug)]
struct Hello {
    mine: Nonce,
    started: Instant,
    next_at: Instant,
    rto: Duration,
}

#[derive(Debug)]
struct Answered {
    mine: Nonce,
    theirs: Nonce,
    since: Instant,
}

/// An idle session this side asked to end.
#[derive(Debug)]
struct Closing {
    since: Instant,
    next_at: Instant,
    rto: Duration,
    /// The peer's packets we have (the request's `ack`).
    ack: u64,
    /// A new session is wanted once this one ended.
    reconnect: bool,
}

#[derive(Debug)]
struct Up {
    mine: Nonce,
    theirs: Nonce,
    epoch: u64,
    chan: Channel,
    /// This side asked to end the session and waits for the answer (no
    /// new data goes meanwhile).
    closing: Option<Closing>,
    /// The last request to end it that ended without an answer here:
    /// (when, the peer's packets we had, our packets sent). A plain RESET
    /// that comes late for it, with nothing exchanged since, is that
    /// answer.
    asked: Option<(Instant, u64, u64)>,
    /// Heard an in-session packet from the peer (it has the session).
    confirmed: bool,
    since: Instant,
    confirm_at: Option<Instant>,
    confirm_rto: Duration,
}

#[derive(Debug)]
struct Peer {
    /// Its place in the order peers were made (a tie-break among equals).
    born: u64,
    addr: Vec<u8>,
    hello: Option<Hello>,
    answered: Option<Answered>,
    up: Option<Up>,
    /// The layer above knows this peer's id (it asked for the peer, or a
    /// session with it came up): the entry stays. One made by a stranger's
    /// HELLO alone goes when that HELLO's answer expires.
    held: bool,
    /// The layer above asked for this peer by address ([`Sessions::peer`]):
    /// the entry stays after its session expired.
    pinned: bool,
}

impl Peer {
    fn half_open(&self) -> bool {
        self.up.is_none() && self.hello.is_none() && self.answered.is_some()
    }
}

/// The session table of one endpoint (see the module documentation).
pub struct Sessions {
    cfg: SessionConfig,
    nonces: Box<dyn FnMut() -> Nonce + Send>,
    peers: Slab<Peer>,
    by_addr: FastMap<Vec<u8>, PeerId>,
    /// The peer of the last in-session packet (0: none).
    last_in: PeerId,
    /// Peers made so far (each one's `born`).
    next_id: u64,
    events: VecDeque<SessionEvent>,
    ctrl: VecDeque<(Vec<u8>, Vec<u8>)>,
    drops: Drops,
    /// A new peer waits for room (since when): an idle session is to end.
    room_at: Option<Instant>,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions")
            .field("epoch", &self.cfg.epoch)
            .field("peers", &self.peers.len())
            .finish()
    }
}

impl Sessions {
    /// A table for an endpoint; `nonces` gives a fresh random nonce per
    /// call (the driver's system random source; the core has none).
    pub fn new(cfg: SessionConfig, nonces: Box<dyn FnMut() -> Nonce + Send>) -> Sessions {
        let mut cfg = cfg;
        cfg.max_datagram = cfg.max_datagram.clamp(HDR_LEN + 1, u32::MAX as usize);
        cfg.max_half_open = cfg.max_half_open.max(1);
        cfg.max_peers = cfg.max_peers.max(1);
        // As the channel does: handshake packets too go at least eight
        // times within the dead bound (sessions are made again after an
        // idle end, so a handshake must ride out loss as data does).
        cfg.chan.max_rto = cfg
            .chan
            .max_rto
            .min(cfg.chan.peer_timeout / 8)
            .max(cfg.chan.min_rto);
        Sessions {
            cfg,
            nonces,
            peers: Slab::default(),
            by_addr: FastMap::default(),
            next_id: 1,
            last_in: 0,
            events: VecDeque::new(),
            ctrl: VecDeque::new(),
            drops: Drops::default(),
            room_at: None,
        }
    }

    /// The tunables.
    pub fn config(&self) -> &SessionConfig {
        &self.cfg
    }
    /// Dropped-datagram counters.
    pub fn drops(&self) -> Drops {
        self.drops
    }

    /// The peer at `addr`, made on first use. The id names that peer for
    /// as long as the table lives.
    pub fn peer(&mut self, addr: &[u8]) -> PeerId {
        let id = self.entry(addr);
        if let Some(p) = self.peers.get_mut(id) {
            p.held = true;
            p.pinned = true;
        }
        id
    }

    /// The entry of the peer at `addr`, made (not held) on first use.
    fn entry(&mut self, addr: &[u8]) -> PeerId {
        if let Some(id) = self.by_addr.get(addr) {
            return *id;
        }
        let born = self.next_id;
        self.next_id += 1;
        let id = self.peers.insert(Peer {
            born,
            addr: addr.to_vec(),
            hello: None,
            answered: None,
            up: None,
            held: false,
            pinned: false,
        });
        self.by_addr.insert(addr.to_vec(), id);
        id
    }

    /// The peer at `addr`, if known.
    pub fn find(&self, addr: &[u8]) -> Option<PeerId> {
        self.by_addr.get(addr).copied()
    }

    /// A peer's address.
    pub fn addr(&self, peer: PeerId) -> Option<&[u8]> {
        self.peers.get(peer).map(|p| p.addr.as_slice())
    }

    /// True when `peer` has a live session that carries data (not one
    /// this side is ending).
    pub fn is_up(&self, peer: PeerId) -> bool {
        self.peers
            .get(peer)
            .and_then(|p| p.up.as_ref())
            .is_some_and(|u| u.closing.is_none())
    }

    /// True when a session with `peer` would exceed
    /// [`SessionConfig::max_peers`]: it has none (and no handshake of ours
    /// under way) and the table is at the bound. See
    /// [`make_room`](Self::make_room).
    pub fn at_bound(&self, peer: PeerId) -> bool {
        let new = self
            .peers
            .get(peer)
            .is_none_or(|p| p.up.is_none() && p.hello.is_none());
        new && self.live() >= self.cfg.max_peers
    }

    /// A new peer waits for room: the next [`handle_timeout_with`]
    /// (due at once) ends the least recently active idle session the owner
    /// lets go.
    ///
    /// [`handle_timeout_with`]: Self::handle_timeout_with
    pub fn make_room(&mut self, now: Instant) {
        self.room_at.get_or_insert(now);
    }

    /// The epoch of `peer`'s endpoint, when a session is up.
    pub fn epoch_of(&self, peer: PeerId) -> Option<u64> {
        self.peers.get(peer)?.up.as_ref().map(|u| u.epoch)
    }

    /// The channel of `peer`'s live session.
    pub fn channel(&mut self, peer: PeerId) -> Option<&mut Channel> {
        self.peers.get_mut(peer)?.up.as_mut().map(|u| &mut u.chan)
    }

    /// The channel of `peer`'s live session and the peer's address, when
    /// it carries data (not while this side is ending it).
    #[inline]
    pub fn channel_and_addr(&mut self, peer: PeerId) -> Option<(&mut Channel, &[u8])> {
        let p = self.peers.get_mut(peer)?;
        let u = p.up.as_mut().filter(|u| u.closing.is_none())?;
        Some((&mut u.chan, &p.addr))
    }

    /// True when events wait.
    pub fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    /// Peers with a live session or a handshake of ours under way (what
    /// [`SessionConfig::max_peers`] bounds).
    pub fn live(&self) -> usize {
        self.peers
            .values()
            .filter(|p| p.up.is_some() || p.hello.is_some())
            .count()
    }

    /// Peers known to the table in any state.
    pub fn known(&self) -> usize {
        self.peers.len()
    }

    /// The peers with a live session that carries data (not one this
    /// side is ending).
    pub fn up_peers(&self) -> impl Iterator<Item = PeerId> + '_ {
        self.peers
            .iter()
            .filter(|(_, p)| p.up.as_ref().is_some_and(|u| u.closing.is_none()))
            .map(|(id, _)| id)
    }

    /// Asks for a session with `peer`: starts a handshake unless one is up
    /// or under way (one this side is ending is made again once it ended).
    pub fn connect(&mut self, now: Instant, peer: PeerId) {
        let Some(p) = self.peers.get_mut(peer) else {
            return;
        };
        if let Some(c) = p.up.as_mut().and_then(|u| u.closing.as_mut()) {
            c.reconnect = true;
            return;
        }
        if p.up.is_some() || p.hello.is_some() {
            return;
        }
        // Crossing handshakes converge when each side uses one nonce for both.
        let mine = match &p.answered {
            Some(a) => a.mine,
            None => (self.nonces)(),
        };
        let rto = self.cfg.chan.initial_rto;
        if let Some(p) = self.peers.get_mut(peer) {
            p.hello = Some(Hello {
                mine,
                started: now,
                next_at: now + rto,
                rto,
            });
        }
        self.send_hs(peer, kind::HELLO, &mine, &[0; NONCE_LEN], 0);
    }

    /// Answers the peer's request to end its idle session
    /// ([`SessionEvent::CloseAsked`]): `agree` when nothing of the owner's
    /// is tied to it. Agreeing ends the session here at once
    /// ([`SessionEvent::Expired`] follows) and tells the peer; refusing
    /// tells the peer to keep it.
    pub fn answer_close(&mut self, now: Instant, peer: PeerId, agree: bool) {
        let Some(p) = self.peers.get_mut(peer) else {
            return;
        };
        let Some(u) = p.up.as_mut() else {
            return;
        };
        if !agree || !u.chan.quiet() {
            u.chan.refuse_idle();
            return;
        }
        let r = reset_packet(u.chan.session(), false).to_vec();
        self.ctrl.push_back((p.addr.clone(), r));
        self.expire(now, peer);
    }

    /// `peer` has no session nor handshake any more and the layer above no
    /// longer keeps its id: a peer it never asked for by address is
    /// forgotten.
    pub fn release(&mut self, peer: PeerId) {
        if self.peers.get(peer).is_some_and(|p| {
            !p.pinned && p.up.is_none() && p.hello.is_none() && p.answered.is_none()
        }) {
            self.forget(peer);
        }
    }

    /// Forgets `peer`'s session without telling it (the owner gave it up).
    pub fn drop_session(&mut self, peer: PeerId) {
        if let Some(p) = self.peers.get_mut(peer) {
            p.up = None;
            p.hello = None;
        }
    }

    /// The network reported that nothing listens at `addr` (an ICMP port
    /// unreachable for a datagram sent there: the peer's endpoint is gone).
    /// A handshake in flight fails now with `Refused` instead of at the
    /// dead bound; a live session ends with `Reset`, as a RESET would end
    /// it. Like any ICMP message the report is not authenticated: an
    /// attacker who can forge ICMP to this host can end sessions, as one
    /// who can inject a TCP RST can end tcp connections.
    pub fn on_port_unreachable(&mut self, addr: &[u8]) {
        let Some(id) = self.find(addr) else {
            return;
        };
        let Some(p) = self.peers.get_mut(id) else {
            return;
        };
        if p.up.is_some() {
            self.down(id, Cause::Reset, false, false);
        } else if p.hello.take().is_some() {
            self.events.push_back(SessionEvent::Down {
                peer: id,
                cause: Cause::Refused,
                renewed: false,
                closed: false,
            });
        }
    }

    /// Ends `peer`'s session and tells it so (a RESET): the owner found the
    /// session's stream broken.
    pub fn reset(&mut self, peer: PeerId) {
        let Some(p) = self.peers.get_mut(peer) else {
            return;
        };
        p.hello = None;
        if let Some(u) = p.up.take() {
            let r = reset_packet(u.chan.session(), false).to_vec();
            self.ctrl.push_back((p.addr.clone(), r));
        }
    }

    /// The datagrams telling every peer with a live session that it ends
    /// (the endpoint closes): an acknowledgement of what arrived, so the
    /// peer's operations on it complete, then a RESET. The table forgets
    /// the sessions.
    pub fn shutdown(&mut self) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        for p in self.peers.values_mut() {
            if let Some(mut u) = p.up.take() {
                let mut h = [0u8; HDR_LEN];
                u.chan.final_ack(&mut h);
                out.push((p.addr.clone(), h.to_vec()));
                out.push((
                    p.addr.clone(),
                    reset_packet(u.chan.session(), true).to_vec(),
                ));
            }
            p.hello = None;
            p.answered = None;
        }
        out
    }

    /// The next handshake or control datagram to send: (destination address, bytes).
    pub fn poll_ctrl(&mut self) -> Option<(Vec<u8>, Vec<u8>)> {
        self.ctrl.pop_front()
    }

    /// True when control datagrams wait.
    pub fn has_ctrl(&self) -> bool {
        !self.ctrl.is_empty()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<SessionEvent> {
        self.events.pop_front()
    }
}

/// This side no longer asks to end `u`'s session (the peer still uses
/// it): the request is remembered, for an answer that comes late.
#[cold]
fn keep_open(u: &mut Up, now: Instant) {
    if let Some(c) = u.closing.take() {
        u.asked = Some((c.since, c.ack, u.chan.snd_nxt()));
    }
    u.chan.touch(now);
}

/// The parts of a handshake MAC, as the sender computes them.
#[allow(clippy::too_many_arguments)]
fn transcript(
    label: &[u8],
    from: &[u8],
    to: &[u8],
    from_epoch: u64,
    to_epoch: u64,
    from_nonce: &Nonce,
    to_nonce: &Nonce,
    max_datagram: u32,
    window: u32,
) -> [Vec<u8>; 9] {
    [
        label.to_vec(),
        from.to_vec(),
        to.to_vec(),
        from_epoch.to_le_bytes().to_vec(),
        to_epoch.to_le_bytes().to_vec(),
        from_nonce.to_vec(),
        to_nonce.to_vec(),
        max_datagram.to_le_bytes().to_vec(),
        window.to_le_bytes().to_vec(),
    ]
}

/// A RESET of `session`; `closed`: the sender closes its endpoint (flag
/// [`flag::CLOSED`]), rather than not knowing the session.
pub fn reset_packet(session: u64, closed: bool) -> [u8; HDR_LEN] {
    Repr {
        kind: kind::RESET,
        flags: if closed { flag::CLOSED } else { 0 },
        session,
        ..Default::default()
    }
    .to_bytes()
}

/// What a closing endpoint answers to a datagram still waiting in its
/// socket: a HELLO gets a REFUSE flagged [`flag::CLOSED`] (its sender's
/// operations then fail with `FI_ECONNREFUSED` at once instead of at the
/// dead bound); anything else gets nothing (live sessions get their RESET
/// from [`Sessions::shutdown`]).
pub fn closing_answer(datagram: &[u8]) -> Option<Vec<u8>> {
    let p = Packet::new_checked(datagram).ok()?;
    let r = Repr::parse(&p).ok()?;
    if r.kind != kind::HELLO {
        return None;
    }
    let hs = Handshake::parse(&r, p.payload()).ok()?;
    let mut v = Repr {
        kind: kind::REFUSE,
        flags: flag::CLOSED,
        ..Default::default()
    }
    .to_bytes()
    .to_vec();
    v.extend_from_slice(&hs.nonce);
    Some(v)
}

/// A request to end the idle `session`, having `ack` of the peer's packets
/// (a RESET flagged [`flag::IDLE`]).
fn idle_packet(session: u64, ack: u64) -> [u8; HDR_LEN] {
    Repr {
        kind: kind::RESET,
        flags: flag::IDLE,
        session,
        ack,
        ..Default::default()
    }
    .to_bytes()
}

/// A REFUSE of the handshake that carried `nonce`.
fn refuse_packet(nonce: &Nonce) -> Vec<u8> {
    let mut v = Repr {
        kind: kind::REFUSE,
        ..Default::default()
    }
    .to_bytes()
    .to_vec();
    v.extend_from_slice(nonce);
    v
}
