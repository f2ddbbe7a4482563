//! The udp provider's decoders and reliability core under arbitrary input.
//!
//! `udp_packet`: every decoder of `ofi_wire::udp` on the raw bytes; what
//! parses re-emits to the same bytes.
//!
//! `udp_sessions`: two honest session tables (`a`, `b`) joined by a
//! network the input controls (which datagram is delivered, dropped,
//! duplicated or damaged, when time passes), plus datagrams the input forges
//! and injects from the peer's or a stranger's address, a consumer that
//! reads a little or a lot, and a restart of `b`. Invariants: nothing
//! panics; a channel never holds more than its window (plus one packet);
//! nothing is acknowledged beyond what was produced; and while nothing was
//! forged, every byte delivered is the next byte the peer produced in that
//! session, once.

use ofi_core::util::auth::{AuthKey, Nonce};
use ofi_proto::udp::{ChanConfig, Incoming, PeerId, Recv, SessionConfig, SessionEvent, Sessions};
use ofi_wire::udp::{
    peek_kind, Dgram, DgramRepr, Handshake, Packet, Repr, DGRAM_HDR_LEN, HDR_LEN, MAC_LEN,
    NONCE_LEN,
};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Every decoder of `ofi_wire::udp` on arbitrary bytes.
pub fn udp_packet(data: &[u8]) {
    let _ = peek_kind(data);
    let p = Packet::new_unchecked(data);
    if let Ok(r) = Repr::parse(&p) {
        assert!(data.len() >= HDR_LEN);
        assert_eq!(
            r.to_bytes()[..],
            data[..HDR_LEN],
            "a parsed header re-emits"
        );
        if let Ok(h) = Handshake::parse(&r, p.payload()) {
            let mut out = Vec::new();
            h.emit(&mut out);
            assert_eq!(out, p.payload(), "a parsed handshake re-emits");
        }
    }
    let d = Dgram::new_unchecked(data);
    if let Ok(r) = DgramRepr::parse(&d) {
        let mac = if r.flags & ofi_wire::udp::dflag::MAC != 0 {
            MAC_LEN
        } else {
            0
        };
        assert_eq!(DGRAM_HDR_LEN + r.len + mac, data.len());
        let mut hdr = r.to_bytes();
        hdr[4..8].copy_from_slice(&data[4..8]);
        assert_eq!(hdr[..], data[..DGRAM_HDR_LEN]);
    }
}

const A: &[u8] = b"fuzz-a";
const B: &[u8] = b"fuzz-b";
const EVIL: &[u8] = b"stranger";

/// A byte cursor over the input.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(*b)
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from(self.byte()?) | u16::from(self.byte()?) << 8)
    }
    fn bytes(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.0.len());
        let (b, rest) = self.0.split_at(n);
        self.0 = rest;
        b
    }
}

fn nonces(seed: u64) -> Box<dyn FnMut() -> Nonce + Send> {
    // Odd and distinct for every seed (`seed | 1` gave epochs 2 and 3 the
    // same nonces, so a restarted side repeated its old handshake).
    let mut x = seed.wrapping_mul(2).wrapping_add(1);
    Box::new(move || {
        let mut n = [0u8; NONCE_LEN];
        for c in n.chunks_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            c.copy_from_slice(&x.to_le_bytes());
        }
        n
    })
}

struct Side {
    me: &'static [u8],
    s: Sessions,
    /// What this side produced for its peer in the current session.
    produced: Vec<u8>,
    /// Stream offset of `produced[0]`.
    base: u64,
    /// Bytes received from the peer in the current session.
    got: Vec<u8>,
    /// How much of `got` has been checked against the stream (each byte
    /// is checked once: checking all of `got` after every step made a run
    /// quadratic in its length).
    checked: usize,
    peer: Option<PeerId>,
}

fn side(me: &'static [u8], other: &[u8], epoch: u64, keyed: bool) -> Side {
    let cfg = SessionConfig {
        epoch,
        my_addr: me.to_vec(),
        key: keyed
            .then(|| AuthKey::new(b"fuzz-key").ok().flatten())
            .flatten(),
        max_datagram: 300,
        chan: ChanConfig {
            window: 2048,
            peer_timeout: Duration::from_secs(2),
            ..Default::default()
        },
        max_half_open: 4,
        idle_timeout: Duration::from_secs(3600),
        max_peers: 64,
    };
    let mut s = Sessions::new(cfg, nonces(epoch));
    let peer = Some(s.peer(other));
    Side {
        me,
        s,
        produced: Vec::new(),
        base: 0,
        got: Vec::new(),
        checked: 0,
        peer,
    }
}

/// What the stream of side `from` holds at offset `i` (in each session).
fn stream_byte(i: u64) -> u8 {
    (i.wrapping_mul(131) >> 3) as u8
}

/// Two session tables over an input-controlled network.
pub fn udp_sessions(data: &[u8]) {
    let _ = sessions_run(data);
}

/// What a run of [`udp_sessions`] reached (for the replay tests that
/// check the harness gets deep).
#[derive(Clone, Copy, Debug, Default)]
pub struct SessionsReached {
    /// Sessions that came up (both sides counted).
    pub ups: usize,
    /// Sessions that ended.
    pub downs: usize,
    /// Handshakes refused.
    pub refused: usize,
    /// Payload bytes consumed and checked.
    pub got: usize,
}

/// [`udp_sessions`], reporting what it reached.
pub fn sessions_run(data: &[u8]) -> SessionsReached {
    let mut reached = SessionsReached::default();
    let mut inp = Input(data);
    let Some(ctl) = inp.byte() else {
        return reached;
    };
    let keyed = ctl & 1 != 0;
    let mut sides = [side(A, B, 1, keyed), side(B, A, 2, keyed)];
    let mut epoch = 3;
    let mut now = Instant::now();
    // Datagrams in flight to each side: (source, bytes).
    let mut wire: [VecDeque<(Vec<u8>, Vec<u8>)>; 2] = [VecDeque::new(), VecDeque::new()];
    let mut forged = false;
    let mut hdr = [0u8; HDR_LEN];
    for _ in 0..4096 {
        let Some(op) = inp.byte() else {
            break;
        };
        let who = usize::from(op & 0x10 != 0);
        match op & 0x0f {
            // Connect (and produce bytes to send).
            0 | 1 => {
                let n = inp.byte().unwrap_or(0) as usize * 8;
                let s = &mut sides[who];
                if let Some(p) = s.peer {
                    s.s.connect(now, p);
                }
                let end = s.base + s.produced.len() as u64;
                s.produced.extend((end..end + n as u64).map(stream_byte));
            }
            // Deliver, drop, duplicate or damage the next datagram to `who`.
            2 | 3 => {
                let how = inp.byte().unwrap_or(0);
                let Some((src, mut bytes)) = wire[who].pop_front() else {
                    continue;
                };
                match how & 3 {
                    0 => continue,
                    1 => wire[who].push_back((src.clone(), bytes.clone())),
                    2 if !bytes.is_empty() => {
                        // A damaged datagram is dropped by the UDP checksum
                        // unless the input says it was forged to pass.
                        let i = usize::from(how >> 2) % bytes.len();
                        bytes[i] ^= inp.byte().unwrap_or(1) | 1;
                        if how & 0x80 == 0 {
                            continue;
                        }
                        forged = true;
                    }
                    _ => {}
                }
                receive(&mut sides[who], now, &src, &bytes, &mut reached);
            }
            // Inject forged bytes, from the peer's address or a stranger's.
            4 => {
                let len = inp.byte().unwrap_or(0) as usize;
                let mut b = inp.bytes(len).to_vec();
                if b.len() >= HDR_LEN && op & 0x20 != 0 {
                    // Aim at a live session: its name in the header.
                    if let Some(sid) = sides[who]
                        .peer
                        .and_then(|p| sides[who].s.channel(p).map(|c| c.session()))
                    {
                        b[8..16].copy_from_slice(&sid.to_le_bytes());
                    }
                }
                forged = true;
                let src = if op & 0x40 != 0 {
                    EVIL
                } else if who == 0 {
                    B
                } else {
                    A
                };
                receive(&mut sides[who], now, src, &b, &mut reached);
            }
            // Time passes; timers run.
            5 => {
                let t = inp.u16().unwrap_or(0);
                now += Duration::from_micros(u64::from(t) * 37);
                for s in sides.iter_mut() {
                    if s.s.poll_timeout().is_some_and(|d| d <= now) {
                        s.s.handle_timeout(now);
                    }
                }
            }
            // Both sides transmit what they have.
            6 => {
                for (i, s) in sides.iter_mut().enumerate() {
                    transmit(s, now, &mut hdr, &mut wire[1 - i]);
                }
            }
            // A consumer reads held bytes.
            7 => {
                let k = inp.byte().unwrap_or(0) as usize;
                let s = &mut sides[who];
                if let Some(c) = s.peer.and_then(|p| s.s.channel(p)) {
                    let h = c.held();
                    let n = k.min(h.len());
                    s.got.extend_from_slice(&h[..n]);
                    c.consume(n);
                }
            }
            // b restarts: a new table with a new epoch at the same address.
            8 if who == 1 => {
                reached.got += sides[1].got.len();
                sides[1] = side(B, A, epoch, keyed);
                epoch += 1;
            }
            // An ICMP port unreachable (true or forged) for the other side.
            9 => {
                let other = if who == 0 { B } else { A };
                sides[who].s.on_port_unreachable(other);
            }
            _ => {}
        }
        for s in sides.iter_mut() {
            events(s, &mut reached);
            check(s, forged);
        }
    }
    reached.got += sides.iter().map(|s| s.got.len()).sum::<usize>();
    reached
}

fn receive(s: &mut Side, now: Instant, src: &[u8], bytes: &[u8], r: &mut SessionsReached) {
    let inc = s.s.on_datagram(now, src, bytes);
    // A session that ended takes its stream along.
    events(s, r);
    if let Incoming::Data {
        peer,
        recv: Recv::Deliver,
    } = inc
    {
        assert!(bytes.len() > HDR_LEN, "Deliver without payload");
        let payload = &bytes[HDR_LEN..];
        // Take part of it, hold the rest.
        let k = payload.len() / 2;
        if s.peer == Some(peer) {
            s.got.extend_from_slice(&payload[..k]);
        }
        if let Some(c) = s.s.channel(peer) {
            c.hold(&payload[k..]);
        }
    }
}

fn events(s: &mut Side, r: &mut SessionsReached) {
    while let Some(e) = s.s.poll_event() {
        match e {
            SessionEvent::Up { .. } => r.ups += 1,
            SessionEvent::Refused { .. } => r.refused += 1,
            // A forged request to end an idle session: left unanswered
            // (the asker ends it at its dead bound).
            SessionEvent::CloseAsked { .. } => {}
            SessionEvent::Down { peer, .. } | SessionEvent::Expired { peer } => {
                r.downs += 1;
                if s.peer == Some(peer) {
                    r.got += s.got.len();
                    s.produced.clear();
                    s.base = 0;
                    s.got.clear();
                    s.checked = 0;
                }
            }
        }
    }
}

fn transmit(
    s: &mut Side,
    now: Instant,
    hdr: &mut [u8; HDR_LEN],
    out: &mut VecDeque<(Vec<u8>, Vec<u8>)>,
) {
    while let Some((to, bytes)) = s.s.poll_ctrl() {
        if out.len() < 256 {
            out.push_back((s.me.to_vec(), bytes));
        }
        let _ = to;
    }
    let Some(p) = s.peer else {
        return;
    };
    let end = s.base + s.produced.len() as u64;
    let Some(c) = s.s.channel(p) else {
        return;
    };
    c.set_stream_end(end);
    for _ in 0..32 {
        let Some(r) = c.poll_transmit(now, hdr) else {
            break;
        };
        assert!(
            r.start >= s.base && r.end <= end,
            "a range outside the stream: {r:?}"
        );
        let mut d = hdr.to_vec();
        let a = (r.start - s.base) as usize;
        let b = (r.end - s.base) as usize;
        d.extend_from_slice(&s.produced[a..b]);
        if out.len() < 256 {
            out.push_back((s.me.to_vec(), d));
        }
    }
    let acked = c.acked();
    assert!(acked <= end, "acknowledged beyond the stream");
    if acked > s.base {
        s.produced.drain(..(acked - s.base) as usize);
        s.base = acked;
    }
}

fn check(s: &mut Side, forged: bool) {
    let Some(p) = s.peer else {
        return;
    };
    if let Some(c) = s.s.channel(p) {
        let cap = c.config().window as usize + c.config().max_payload;
        assert!(c.held_len() <= cap, "held {} beyond {cap}", c.held_len());
    }
    if !forged {
        for (i, b) in s.got.iter().enumerate().skip(s.checked) {
            assert_eq!(*b, stream_byte(i as u64), "byte {i} delivered wrong");
        }
        s.checked = s.got.len();
    }
}
