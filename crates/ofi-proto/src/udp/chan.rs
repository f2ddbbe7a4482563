//! One session's reliable, ordered byte stream over datagrams, both ways.
//!
//! **Sending.** The producer owns the bytes: it announces how far its
//! stream goes ([`Channel::set_stream_end`]) and forgets bytes once the
//! peer has them ([`Channel::acked`]). [`Channel::poll_transmit`] writes the
//! next packet's header and names the stream range its payload is: the
//! producer gathers those bytes from wherever they live (its own copies or
//! the user's buffers) and sends header and payload as one datagram. A
//! packet keeps its number and its range when it is sent again, so the
//! receiver can tell a repeat from new data.
//!
//! **Receiving.** [`Channel::on_packet`] takes every packet of the session.
//! A DATA packet that is next in order while nothing is held comes back as
//! [`Recv::Deliver`]: the consumer takes what it can of the payload straight
//! from the datagram (into a matched receive buffer, typically) and hands
//! the rest back with [`Channel::hold`]. Packets that arrive early wait,
//! copied, until the gap before them fills; held bytes are read with
//! [`Channel::held`] and [`Channel::consume`]. Duplicates and packets beyond
//! the window are dropped and counted.
//!
//! **Acknowledgements** ride on every packet: the cumulative `ack` (every
//! packet below it arrived), 64 selective bits beyond it, and the receive
//! window (bytes the receiver can still take: its window less what it holds
//! unconsumed, so a consumer that stops reading stops the sender). A pure
//! ACK goes only when no data is going the other way in time: at once for
//! a packet out of order, a duplicate or a probe, after `ack_pkts` packets
//! or `ack_bytes` bytes, else after `ack_delay`.
//!
//! **Loss and congestion.** A packet is lost when three transmissions sent
//! after its latest one are acknowledged (it is sent again at once), or
//! when the retransmission timeout (RTT-estimated, backed off while
//! unanswered) expires (everything in flight is sent again as the window
//! allows). The congestion window starts at `initial_cwnd` packets, grows
//! by what is acknowledged until the first loss and by one packet per
//! window after, and halves on a loss (once per window).
//!
//! **Liveness.** While the owner waits for the peer (operations of its
//! outstanding on it, [`Channel::set_waiting`]) the channel probes the peer,
//! and while bytes of the stream are not acknowledged it sends them again
//! (at most `max_rto` apart); when nothing at all arrives from the peer for
//! `peer_timeout` in either case, it is dead ([`Channel::is_dead`]). So a
//! peer that acknowledges nothing is found dead even when every operation
//! its bytes carried completed when they were copied (the producer keeps
//! those copies, and could not otherwise let go of them). An idle channel
//! is never declared dead.

use super::rtt::Rtt;
use ofi_wire::udp::{flag, kind, Repr, HDR_LEN};
use std::collections::{BTreeMap, VecDeque};
use std::ops::Range;
use std::time::{Duration, Instant};

/// Tunables of a channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChanConfig {
    /// Largest payload of a DATA packet (the smaller of the two sides'
    /// largest datagram, less the header).
    pub max_payload: usize,
    /// Receive window: bytes held unconsumed or waiting out of order at most.
    pub window: u32,
    /// Retransmission timeout before the first RTT sample.
    pub initial_rto: Duration,
    /// Smallest retransmission timeout.
    pub min_rto: Duration,
    /// Largest retransmission timeout (backoff included).
    pub max_rto: Duration,
    /// Longest an acknowledgement waits for data to ride on.
    pub ack_delay: Duration,
    /// In-order packets after which an acknowledgement goes at once.
    pub ack_pkts: u32,
    /// In-order bytes after which an acknowledgement goes at once.
    pub ack_bytes: usize,
    /// Silence from a peer we wait for after which it is dead.
    pub peer_timeout: Duration,
    /// Initial congestion window, in packets.
    pub initial_cwnd: usize,
}

impl Default for ChanConfig {
    fn default() -> Self {
        ChanConfig {
            max_payload: 1400,
            window: 4 << 20,
            initial_rto: Duration::from_millis(20),
            min_rto: Duration::from_millis(5),
            max_rto: Duration::from_secs(1),
            ack_delay: Duration::from_micros(200),
            ack_pkts: 32,
            ack_bytes: 256 << 10,
            peer_timeout: Duration::from_secs(5),
            initial_cwnd: 32,
        }
    }
}

/// Transmissions acknowledged after a packet's latest one that make it lost.
const DUP_THRESH: u64 = 3;
/// Retransmission slots reserved per channel at most.
const HELD_PKTS_RESERVED: usize = 4096;
/// Bytes of held-stream capacity reserved per channel at most.
const HELD_BYTES_RESERVED: usize = 64 << 10;

/// Most packets held out of order (besides the byte window).
const MAX_OOO_PKTS: usize = 16384;
/// Fewest packets of congestion window.
const MIN_CWND_PKTS: usize = 2;

/// What [`Channel::on_packet`] did with a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recv {
    /// The payload is the next in order and nothing is held: consume it
    /// now, then call [`Channel::hold`] with what was not consumed.
    Deliver,
    /// The payload was copied and waits (out of order, or behind held bytes).
    Held,
    /// An acknowledgement (or a DATA packet whose payload was not new).
    Ack,
    /// Dropped, for the reason given (counted).
    Dropped(Drop),
}

/// Why a packet was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Drop {
    /// Not of this session.
    WrongSession,
    /// Not a DATA or ACK packet.
    NotInSession,
    /// Its payload arrived before.
    Duplicate,
    /// Beyond the receive window.
    OutOfWindow,
    /// It acknowledges packets never sent.
    BadAck,
}

impl Drop {
    /// A short description for the log.
    pub fn describe(self) -> &'static str {
        match self {
            Drop::WrongSession => "a packet of another session",
            Drop::NotInSession => "a packet that belongs to no session",
            Drop::Duplicate => "a duplicate packet",
            Drop::OutOfWindow => "a packet beyond the receive window",
            Drop::BadAck => "an acknowledgement of packets never sent",
        }
    }
}

/// Counters of a channel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChanStats {
    /// DATA packets sent for the first time.
    pub sent: u64,
    /// DATA packets sent again.
    pub retransmitted: u64,
    /// Pure acknowledgements sent.
    pub acks_sent: u64,
    /// Retransmission timeouts.
    pub timeouts: u64,
    /// Duplicate packets received.
    pub duplicates: u64,
    /// Packets dropped for the window or a bad acknowledgement.
    pub rejected: u64,
}

#[derive(Clone, Copy, Debug)]
struct Sent {
    off: u64,
    len: u32,
    /// Transmission order of its latest sending.
    order: u64,
    sent_at: Instant,
    tx_count: u32,
    acked: bool,
    /// Waiting for retransmission (not in flight).
    lost: bool,
}

/// One session's reliable stream (see the module documentation).
#[derive(Debug)]
pub struct Channel {
    cfg: ChanConfig,
    session: u64,
    rtt: Rtt,
    // ---- send
    snd_una: u64,
    snd_nxt: u64,
    sent: VecDeque<Sent>,
    retx: VecDeque<u64>,
    stream_end: u64,
    stream_next: u64,
    tx_order: u64,
    largest_acked_order: u64,
    in_flight: usize,
    cwnd: usize,
    ssthresh: usize,
    recovery_until: u64,
    peer_window: u64,
    /// Stream offset from which the last packet asks for a prompt ack.
    prompt_after: u64,
    /// Highest `ack` field seen (windows of older packets are stale).
    peer_ack_seen: u64,
    rto_at: Option<Instant>,
    probe_at: Option<Instant>,
    probe_due: bool,
    // ---- receive
    rcv_nxt: u64,
    ooo: BTreeMap<u64, Vec<u8>>,
    ooo_bytes: usize,
    held: VecDeque<u8>,
    delivering: bool,
    ack_now: bool,
    ack_at: Option<Instant>,
    ack_pending_pkts: u32,
    ack_pending_bytes: usize,
    window_sent: u32,
    pool: Vec<Vec<u8>>,
    /// The owner refuses to end the session: the next pure ACK says so.
    idle_refusal: bool,
    // ---- liveness
    last_heard: Instant,
    /// When data last went (or the owner counted activity); with
    /// `last_heard`, when the channel was last active.
    last_active: Instant,
    waiting: bool,
    need_since: Option<Instant>,
    dead: bool,
    stats: ChanStats,
}

impl Channel {
    /// A channel of session `session` (nonzero), opened at `now`, to a
    /// peer whose receive window is `peer_window` bytes (from its handshake).
    pub fn new(cfg: ChanConfig, session: u64, peer_window: u32, now: Instant) -> Channel {
        let mut cfg = cfg;
        cfg.max_payload = cfg.max_payload.clamp(1, u32::MAX as usize);
        cfg.ack_pkts = cfg.ack_pkts.max(1);
        // At least eight probes go out within the dead bound.
        cfg.max_rto = cfg.max_rto.min(cfg.peer_timeout / 8).max(cfg.min_rto);
        let mss = cfg.max_payload;
        // Sized once: retransmission and a consumer that falls behind are
        // rare, and their first occurrence must not allocate on the hot path.
        let window_pkts = (cfg.window as usize / mss + 1).min(HELD_PKTS_RESERVED);
        let held_reserved = (cfg.window as usize).min(HELD_BYTES_RESERVED);
        Channel {
            rtt: Rtt::new(cfg.initial_rto, cfg.min_rto, cfg.max_rto),
            session,
            snd_una: 0,
            snd_nxt: 0,
            sent: VecDeque::with_capacity(window_pkts),
            retx: VecDeque::with_capacity(window_pkts),
            stream_end: 0,
            stream_next: 0,
            tx_order: 0,
            largest_acked_order: 0,
            in_flight: 0,
            cwnd: mss.saturating_mul(cfg.initial_cwnd.max(MIN_CWND_PKTS)),
            ssthresh: usize::MAX,
            recovery_until: 0,
            peer_window: u64::from(peer_window),
            prompt_after: u64::MAX,
            peer_ack_seen: 0,
            rto_at: None,
            probe_at: None,
            probe_due: false,
            rcv_nxt: 0,
            ooo: BTreeMap::new(),
            ooo_bytes: 0,
            held: VecDeque::with_capacity(held_reserved),
            delivering: false,
            ack_now: false,
            ack_at: None,
            ack_pending_pkts: 0,
            ack_pending_bytes: 0,
            window_sent: 0,
            pool: Vec::new(),
            idle_refusal: false,
            last_heard: now,
            last_active: now,
            waiting: false,
            need_since: None,
            dead: false,
            stats: ChanStats::default(),
            cfg,
        }
    }

    /// The session this channel carries.
    pub fn session(&self) -> u64 {
        self.session
    }
    /// The tunables.
    pub fn config(&self) -> &ChanConfig {
        &self.cfg
    }
    /// Counters.
    pub fn stats(&self) -> ChanStats {
        self.stats
    }
    /// The smoothed round-trip time, once measured.
    pub fn srtt(&self) -> Option<Duration> {
        self.rtt.srtt()
    }

    // ---- send side ----------------------------------------------------

    /// The producer's stream now ends at `end` (it only grows).
    pub fn set_stream_end(&mut self, end: u64) {
        self.stream_end = self.stream_end.max(end);
    }
    /// Where the producer's stream ends.
    pub fn stream_end(&self) -> u64 {
        self.stream_end
    }
    /// Stream offset below which every byte has reached the peer: the
    /// producer may forget those bytes.
    pub fn acked(&self) -> u64 {
        self.sent.front().map_or(self.stream_next, |s| s.off)
    }
    /// True while some sent byte is not acknowledged or some byte is not sent.
    pub fn busy(&self) -> bool {
        !self.sent.is_empty() || self.stream_next < self.stream_end
    }
    /// True when [`poll_transmit`](Self::poll_transmit) would send
    /// something now without a timer running out: an acknowledgement asked
    /// for, a probe, a retransmission, or bytes not yet sent (which the
    /// windows may still hold back). A driver that saw a packet may skip
    /// its transmit pass while this is false (and its own side has
    /// nothing new).
    #[inline]
    pub fn wants_transmit(&self) -> bool {
        !self.dead
            && (self.ack_now
                || self.probe_due
                || !self.retx.is_empty()
                || self.stream_next < self.stream_end)
    }
    /// True when the channel carries nothing at all: nothing to send or
    /// acknowledge, nothing held or out of order.
    pub fn is_idle(&self) -> bool {
        !self.busy() && self.held.is_empty() && self.ooo.is_empty() && !self.delivering
    }

    /// The owner waits for the peer (operations outstanding on it): the
    /// channel probes it and declares it dead after `peer_timeout` of
    /// silence. Unacknowledged bytes make it wait for the peer without
    /// this (they are sent again, at most `max_rto` apart, and the peer is
    /// dead after `peer_timeout` of silence).
    pub fn set_waiting(&mut self, now: Instant, waiting: bool) {
        self.waiting = waiting;
        self.update_need(now);
    }

    /// Bytes wait to be sent and the peer's window holds them back.
    fn window_blocked(&self) -> bool {
        self.stream_next < self.stream_end && self.sent.is_empty()
    }

    #[inline]
    fn update_need(&mut self, now: Instant) {
        if self.waiting {
            if self.need_since.is_none() {
                self.need_since = Some(now);
            }
            if self.probe_at.is_none() {
                self.probe_at = Some(now + self.keepalive());
            }
        } else {
            // Bytes not acknowledged (sent or not) wait for the peer too,
            // even when the operations they carried completed already.
            if !self.busy() {
                self.need_since = None;
            } else if self.need_since.is_none() {
                self.need_since = Some(now);
            }
            if !self.window_blocked() {
                self.probe_at = None;
            }
        }
    }

    /// Packets that end the stream and carry bytes at or beyond `offset`
    /// ask the peer to acknowledge at once (`ACK_NOW`): the producer
    /// completes operations on those bytes only when they are acknowledged,
    /// so their acknowledgement must not wait for the peer's next pass.
    pub fn set_prompt(&mut self, offset: u64) {
        self.prompt_after = offset;
    }

    /// Probe interval while waiting with nothing in flight.
    fn keepalive(&self) -> Duration {
        (self.cfg.peer_timeout / 4).max(self.cfg.min_rto)
    }

    /// The next packet to send: writes its header into `hdr` and returns
    /// the stream range of its payload (empty for a pure acknowledgement).
    /// `None`: nothing to send now.
    pub fn poll_transmit(&mut self, now: Instant, hdr: &mut [u8; HDR_LEN]) -> Option<Range<u64>> {
        if self.dead {
            return None;
        }
        self.update_need(now);
        // Retransmissions first.
        while let Some(&seq) = self.retx.front() {
            let i = seq.saturating_sub(self.snd_una) as usize;
            let live = seq >= self.snd_una && self.sent.get(i).is_some_and(|s| !s.acked && s.lost);
            if !live {
                self.retx.pop_front();
                continue;
            }
            if self.in_flight >= self.cwnd {
                break;
            }
            self.retx.pop_front();
            self.tx_order += 1;
            let s = &mut self.sent[i];
            s.lost = false;
            s.order = self.tx_order;
            s.sent_at = now;
            s.tx_count += 1;
            let (off, len) = (s.off, s.len);
            self.in_flight += len as usize;
            self.stats.retransmitted += 1;
            self.last_active = now;
            self.arm_rto(now);
            self.write_header(hdr, kind::DATA, seq, flag::ACK_NOW);
            return Some(off..off + u64::from(len));
        }
        // New data, as the congestion and receive windows allow.
        let avail = self.stream_end - self.stream_next;
        if avail > 0 && self.retx.is_empty() {
            let len = avail.min(self.cfg.max_payload as u64);
            let outstanding = self.stream_next - self.acked();
            let cwnd_ok = self.in_flight == 0 || self.in_flight + len as usize <= self.cwnd;
            let rwnd_ok = outstanding + len <= self.peer_window;
            if cwnd_ok && rwnd_ok {
                let seq = self.snd_nxt;
                self.snd_nxt += 1;
                self.tx_order += 1;
                self.sent.push_back(Sent {
                    off: self.stream_next,
                    len: len as u32,
                    order: self.tx_order,
                    sent_at: now,
                    tx_count: 1,
                    acked: false,
                    lost: false,
                });
                let off = self.stream_next;
                self.stream_next += len;
                self.in_flight += len as usize;
                self.stats.sent += 1;
                self.last_active = now;
                self.arm_rto(now);
                let prompt =
                    self.stream_next == self.stream_end && self.stream_next > self.prompt_after;
                self.write_header(hdr, kind::DATA, seq, if prompt { flag::ACK_NOW } else { 0 });
                return Some(off..off + len);
            }
            if !rwnd_ok && self.sent.is_empty() && self.probe_at.is_none() {
                // The peer's window is closed: probe it until it opens.
                self.probe_at = Some(now + self.rtt.rto());
            }
        }
        if self.probe_due {
            self.probe_due = false;
            self.stats.acks_sent += 1;
            self.write_header(hdr, kind::ACK, 0, flag::ACK_NOW);
            let at = self.acked();
            return Some(at..at);
        }
        let ack_due = self.ack_now || self.ack_at.is_some_and(|t| t <= now);
        if ack_due {
            self.stats.acks_sent += 1;
            let f = if self.idle_refusal {
                self.idle_refusal = false;
                flag::IDLE
            } else {
                0
            };
            self.write_header(hdr, kind::ACK, 0, f);
            let at = self.acked();
            return Some(at..at);
        }
        None
    }

    fn arm_rto(&mut self, now: Instant) {
        if self.rto_at.is_none() {
            self.rto_at = Some(now + self.rtt.rto());
        }
    }

    /// The receive window offered now.
    fn offer(&self) -> u32 {
        (self.cfg.window as usize).saturating_sub(self.held.len()) as u32
    }

    fn sack_bits(&self) -> u64 {
        if self.ooo.is_empty() {
            return 0;
        }
        let mut bits = 0u64;
        for (&seq, _) in self.ooo.range(self.rcv_nxt + 1..self.rcv_nxt + 65) {
            bits |= 1 << (seq - self.rcv_nxt - 1);
        }
        bits
    }

    fn write_header(&mut self, hdr: &mut [u8; HDR_LEN], k: u8, seq: u64, flags: u8) {
        let window = self.offer();
        let r = Repr {
            kind: k,
            flags,
            window,
            session: self.session,
            seq,
            ack: self.rcv_nxt,
            sack: self.sack_bits(),
        };
        r.write(hdr);
        self.window_sent = window;
        self.ack_now = false;
        self.ack_at = None;
        self.ack_pending_pkts = 0;
        self.ack_pending_bytes = 0;
    }

    // ---- receive side -------------------------------------------------

    /// Takes one packet of the session (parsed as `r`, with `payload`).
    /// With [`Recv::Deliver`], `payload` is the next stream bytes: consume
    /// them, then call [`hold`](Self::hold) with the rest.
    pub fn on_packet(&mut self, now: Instant, r: &Repr, payload: &[u8]) -> Recv {
        if r.session != self.session {
            return Recv::Dropped(Drop::WrongSession);
        }
        if !matches!(r.kind, kind::DATA | kind::ACK) {
            return Recv::Dropped(Drop::NotInSession);
        }
        if self.delivering {
            // The previous delivery was consumed whole.
            self.hold(&[]);
        }
        if r.ack > self.snd_nxt {
            self.stats.rejected += 1;
            return Recv::Dropped(Drop::BadAck);
        }
        self.last_heard = now;
        if let Some(t) = self.need_since.as_mut() {
            *t = now;
        }
        self.on_ack(now, r);
        if r.flags & flag::ACK_NOW != 0 {
            self.ack_now = true;
        }
        if r.kind == kind::ACK {
            return Recv::Ack;
        }
        let seq = r.seq;
        if seq < self.rcv_nxt || (!self.ooo.is_empty() && self.ooo.contains_key(&seq)) {
            self.stats.duplicates += 1;
            self.ack_now = true;
            return Recv::Dropped(Drop::Duplicate);
        }
        let len = payload.len();
        let room = (self.cfg.window as usize).saturating_sub(self.held.len() + self.ooo_bytes);
        let far = seq - self.rcv_nxt >= MAX_OOO_PKTS as u64;
        let direct = seq == self.rcv_nxt && self.held.is_empty();
        if !direct && (len > room || far || self.ooo.len() >= MAX_OOO_PKTS) {
            self.stats.rejected += 1;
            self.ack_now = true;
            return Recv::Dropped(Drop::OutOfWindow);
        }
        if seq == self.rcv_nxt {
            let filled_gap = !self.ooo.is_empty();
            self.rcv_nxt += 1;
            self.note_in_order(now, len, filled_gap);
            if direct {
                self.delivering = true;
                return Recv::Deliver;
            }
            self.held.extend(payload);
            self.promote();
            return Recv::Held;
        }
        let mut v = self.pool.pop().unwrap_or_default();
        v.clear();
        v.extend_from_slice(payload);
        self.ooo.insert(seq, v);
        self.ooo_bytes += len;
        self.ack_now = true;
        Recv::Held
    }

    fn note_in_order(&mut self, now: Instant, len: usize, filled_gap: bool) {
        self.ack_pending_pkts += 1;
        self.ack_pending_bytes += len;
        if filled_gap
            || self.ack_pending_pkts >= self.cfg.ack_pkts
            || self.ack_pending_bytes >= self.cfg.ack_bytes
        {
            self.ack_now = true;
        } else if self.ack_at.is_none() {
            self.ack_at = Some(now + self.cfg.ack_delay);
        }
    }

    /// Ends a [`Recv::Deliver`]: `rest` is the tail of its payload the
    /// consumer did not take; it is held and read first.
    pub fn hold(&mut self, rest: &[u8]) {
        self.delivering = false;
        if !rest.is_empty() {
            self.held.extend(rest);
        }
        self.promote();
    }

    /// Moves packets that are now in order from the out-of-order store to
    /// the held bytes.
    fn promote(&mut self) {
        if self.ooo.is_empty() {
            return;
        }
        while let Some(v) = self.ooo.remove(&self.rcv_nxt) {
            self.rcv_nxt += 1;
            self.ooo_bytes -= v.len();
            self.held.extend(&v);
            self.ack_pending_pkts += 1;
            self.ack_pending_bytes += v.len();
            if self.pool.len() < 64 {
                self.pool.push(v);
            }
        }
    }

    /// Held bytes, the oldest first: the first contiguous run of them.
    pub fn held(&self) -> &[u8] {
        let (a, b) = self.held.as_slices();
        if a.is_empty() {
            b
        } else {
            a
        }
    }
    /// Bytes held in all.
    pub fn held_len(&self) -> usize {
        self.held.len()
    }

    /// The consumer took `n` held bytes. When that opens the receive window
    /// enough to matter, a window update goes at once.
    pub fn consume(&mut self, n: usize) {
        let n = n.min(self.held.len());
        self.held.drain(..n);
        let offer = self.offer() as usize;
        let before = self.window_sent as usize;
        let mss = self.cfg.max_payload;
        if (before < mss && offer >= mss)
            || offer >= before + (self.cfg.window as usize / 4).max(mss)
        {
            self.ack_now = true;
        }
    }

    fn on_ack(&mut self, now: Instant, r: &Repr) {
        let stale = r.ack < self.peer_ack_seen;
        if !stale {
            self.peer_ack_seen = r.ack;
            self.peer_window = u64::from(r.window);
            if self.probe_at.is_some() && !self.waiting && self.sent.is_empty() {
                // A window update ends a zero-window probe.
                self.probe_at = None;
            }
        }
        let mut newly = 0usize;
        // The RTT is sampled from the highest packet this acknowledgement
        // names, when it is newly acknowledged and was sent once (packets
        // acknowledged only because a hole before them filled would measure
        // the recovery, not the path).
        let highest = match r.sack {
            0 => r.ack.checked_sub(1),
            bits => Some(r.ack + 64 - u64::from(bits.leading_zeros())),
        };
        let mut sample: Option<Duration> = None;
        let mut ack_one = |seq: u64, s: &mut Sent, in_flight: &mut usize, largest: &mut u64| {
            if s.acked {
                return;
            }
            s.acked = true;
            if !s.lost {
                *in_flight = in_flight.saturating_sub(s.len as usize);
            }
            *largest = (*largest).max(s.order);
            newly += s.len as usize;
            if s.tx_count == 1 && Some(seq) == highest {
                sample = Some(now.saturating_duration_since(s.sent_at));
            }
        };
        if r.ack > self.snd_una {
            let n = (r.ack - self.snd_una) as usize;
            let una = self.snd_una;
            for (i, s) in self.sent.iter_mut().take(n).enumerate() {
                ack_one(
                    una + i as u64,
                    s,
                    &mut self.in_flight,
                    &mut self.largest_acked_order,
                );
            }
        }
        let mut bits = r.sack;
        while bits != 0 {
            let i = bits.trailing_zeros() as u64;
            bits &= bits - 1;
            let seq = r.ack + 1 + i;
            if seq >= self.snd_una && seq < self.snd_nxt {
                let idx = (seq - self.snd_una) as usize;
                if let Some(s) = self.sent.get_mut(idx) {
                    ack_one(seq, s, &mut self.in_flight, &mut self.largest_acked_order);
                }
            }
        }
        let before = self.snd_una;
        while self.sent.front().is_some_and(|s| s.acked) {
            self.sent.pop_front();
            self.snd_una += 1;
        }
        if let Some(d) = sample {
            self.rtt.sample(d);
        }
        if newly > 0 {
            self.rtt.reset_backoff();
            // Congestion window growth.
            if self.cwnd < self.ssthresh {
                self.cwnd = self.cwnd.saturating_add(newly);
            } else {
                let mss = self.cfg.max_payload;
                self.cwnd = self
                    .cwnd
                    .saturating_add((mss * newly / self.cwnd.max(1)).max(1));
            }
            self.cwnd = self.cwnd.min(self.cfg.window.max(1) as usize * 2);
            self.detect_losses();
            // Progress restarts the retransmission timer.
            self.rto_at =
                (self.in_flight > 0 || !self.sent.is_empty()).then(|| now + self.rtt.rto());
        }
        if self.snd_una != before && self.sent.is_empty() && self.retx.is_empty() {
            self.rto_at = None;
        }
    }

    fn detect_losses(&mut self) {
        let mut lost_any = false;
        for (i, s) in self.sent.iter_mut().enumerate() {
            if s.acked || s.lost || s.order + DUP_THRESH > self.largest_acked_order {
                continue;
            }
            s.lost = true;
            self.in_flight = self.in_flight.saturating_sub(s.len as usize);
            self.retx.push_back(self.snd_una + i as u64);
            lost_any = true;
        }
        if lost_any {
            self.on_congestion();
        }
    }

    fn on_congestion(&mut self) {
        // Once per window of data.
        if self.snd_una < self.recovery_until {
            return;
        }
        self.recovery_until = self.snd_nxt;
        let mss = self.cfg.max_payload;
        self.ssthresh = (self.cwnd / 2).max(MIN_CWND_PKTS * mss);
        self.cwnd = self.ssthresh;
    }

    // ---- timers -------------------------------------------------------

    /// The earliest time [`handle_timeout`](Self::handle_timeout) has work.
    #[inline]
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.dead {
            return None;
        }
        let mut at = self.rto_at;
        for t in [self.probe_at, self.ack_at] {
            at = earliest(at, t);
        }
        match self.need_since {
            Some(t) => earliest(at, Some(t + self.cfg.peer_timeout)),
            None => at,
        }
    }

    /// Runs the timers due at `now`: retransmission, probes, delayed
    /// acknowledgements, the dead bound.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.dead {
            return;
        }
        self.update_need(now);
        if let Some(since) = self.need_since {
            if now >= since + self.cfg.peer_timeout {
                self.dead = true;
                return;
            }
        }
        if self.rto_at.is_some_and(|t| t <= now) {
            self.rto_at = None;
            if !self.sent.is_empty() {
                self.stats.timeouts += 1;
                self.rtt.back_off();
                let mut any = false;
                for (i, s) in self.sent.iter_mut().enumerate() {
                    if !s.acked && !s.lost {
                        s.lost = true;
                        self.retx.push_back(self.snd_una + i as u64);
                        any = true;
                    }
                }
                // The oldest first, each once.
                self.retx.make_contiguous().sort_unstable();
                let mut prev = None;
                self.retx.retain(|&n| prev.replace(n) != Some(n));
                self.in_flight = 0;
                if any {
                    let mss = self.cfg.max_payload;
                    self.ssthresh = (self.cwnd / 2).max(MIN_CWND_PKTS * mss);
                    self.cwnd = MIN_CWND_PKTS * mss;
                    self.recovery_until = self.snd_nxt;
                }
                self.arm_rto(now);
            }
        }
        if self.probe_at.is_some_and(|t| t <= now) {
            self.probe_at = None;
            let blocked = self.window_blocked();
            if self.waiting || blocked {
                self.probe_due = true;
                let every = if blocked {
                    self.rtt.back_off();
                    self.rtt.rto()
                } else {
                    self.keepalive()
                };
                self.probe_at = Some(now + every);
            }
        }
    }

    /// True once the peer stayed silent for `peer_timeout` while the channel
    /// waited for it.
    pub fn is_dead(&self) -> bool {
        self.dead
    }

    /// When the channel last heard from the peer.
    pub fn last_heard(&self) -> Instant {
        self.last_heard
    }

    /// When a packet of the peer last arrived or data last went to it.
    pub fn last_active(&self) -> Instant {
        self.last_active.max(self.last_heard)
    }

    /// Counts `now` as activity (the owner keeps the session a while more).
    pub fn touch(&mut self, now: Instant) {
        self.last_active = self.last_active.max(now);
    }

    /// True when neither side owes the other anything on this channel:
    /// idle ([`is_idle`](Self::is_idle)), nobody waits on the peer, no
    /// acknowledgement or probe to send. The session may end (see
    /// `Sessions`) when its owner agrees.
    pub fn quiet(&self) -> bool {
        !self.waiting
            && !self.dead
            && self.is_idle()
            && !self.ack_now
            && self.ack_at.is_none()
            && !self.probe_due
    }

    /// Packets of the peer received in order (the acknowledgement sent).
    pub fn rcv_nxt(&self) -> u64 {
        self.rcv_nxt
    }

    /// DATA packets sent (the next one's number).
    pub fn snd_nxt(&self) -> u64 {
        self.snd_nxt
    }

    /// The owner refuses the peer's request to end the session: a pure
    /// ACK flagged IDLE goes at once.
    pub fn refuse_idle(&mut self) {
        self.idle_refusal = true;
        self.ack_now = true;
    }

    /// Writes a pure acknowledgement of everything received, now (the last
    /// word of a session that is ending: what arrived is not sent again).
    pub fn final_ack(&mut self, hdr: &mut [u8; HDR_LEN]) {
        self.write_header(hdr, kind::ACK, 0, 0);
    }

    /// Asks for an acknowledgement to go at once (the peer asked for one).
    pub fn ack_soon(&mut self) {
        self.ack_now = true;
    }
}

/// The earlier of two optional deadlines.
#[inline]
pub(super) fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}
