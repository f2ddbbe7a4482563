//! The tcp provider's decoders under arbitrary input: frame headers
//! (`tcp_header`), a connection fed a hostile byte stream (`conn_stream`),
//! and, in `auth`, the handshake with an auth key (`auth_stream`).

use ofi_core::consts::{FI_CLAIM, FI_MULTI_RECV, FI_PEEK};
use ofi_core::util::iov::IoVec;
use ofi_proto::tcp::{
    Config, Conn, Event, RecvDone, RecvReq, Rx, RxConfig, SendReq, State, Target, TxSlice,
};
use ofi_wire::tcp;

mod auth;

pub use auth::{auth_stream, AuthReached, AUTH_ADDR, AUTH_KEY};

// ---- tcp frame headers ----------------------------------------------------

/// `tcp::Repr::parse` over arbitrary bytes, with a frame limit taken from the
/// input; an accepted header must re-emit to exactly the bytes it came from
/// (every header byte is a field, and reserved must be zero).
pub fn tcp_header(data: &[u8]) {
    let max = match data.first().map(|b| b & 3) {
        Some(0) => 1 << 20,
        Some(1) => 0,
        Some(2) => 64,
        _ => u64::MAX,
    };
    let Ok(h) = tcp::Header::new_checked(data) else {
        assert!(
            data.len() < tcp::HDR_LEN,
            "new_checked refused a whole header"
        );
        return;
    };
    let _ = (h.magic(), h.version(), h.op(), h.flags(), h.reserved());
    let _ = (
        h.len(),
        h.is_empty(),
        h.tag(),
        h.data(),
        h.id(),
        h.payload(),
    );
    let Ok(r) = tcp::Repr::parse(&h, max) else {
        return;
    };
    assert!(r.len <= max);
    assert!(r.op >= 1 && r.op <= tcp::op::MAX);
    assert_eq!(
        &r.to_bytes()[..],
        &data[..tcp::HDR_LEN],
        "an accepted header does not re-emit to the same bytes"
    );
    assert_eq!(
        tcp::Repr::parse(&tcp::Header::new_checked(&r.to_bytes()[..]).unwrap(), max),
        Ok(r)
    );
    if r.op == tcp::op::RTS {
        let p = h.payload();
        let want = p.len() >= tcp::RTS_PAYLOAD_LEN;
        let got = tcp::parse_rts_payload(&p[..p.len().min(tcp::RTS_PAYLOAD_LEN)]);
        assert_eq!(got.is_some(), want);
    }
}

// ---- a tcp connection fed a hostile byte stream --------------------------

/// xorshift64*, for the read and write split sizes.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// How many bytes one read or write moves: 1, a few, some, or all.
    fn split(&mut self) -> usize {
        match self.next() % 4 {
            0 => 1,
            1 => 1 + (self.next() % 16) as usize,
            2 => 1 + (self.next() % 512) as usize,
            _ => usize::MAX,
        }
    }
}

/// Memory the harness lends the core by address: a Vec that lives as long
/// as the connection, and the ranges handed out from it. Every address the
/// core gives back must map into one of those ranges.
struct Arena {
    bytes: Vec<u8>,
    lent: Vec<(usize, usize)>,
    next: usize,
}

impl Arena {
    fn new(len: usize, fill: u8) -> Self {
        Arena {
            bytes: vec![fill; len],
            lent: Vec::new(),
            next: 0,
        }
    }
    fn base(&self) -> usize {
        self.bytes.as_ptr() as usize
    }
    fn lend(&mut self, len: usize) -> IoVec {
        let off = self.next.min(self.bytes.len());
        let len = len.min(self.bytes.len() - off);
        self.next = off + len + 8; // a gap: ranges never touch
        self.lent.push((off, len));
        IoVec {
            base: self.base() + off,
            len,
        }
    }
    /// The arena offset of `v`, checked to lie inside one lent range.
    fn offset(&self, v: IoVec, what: &str) -> usize {
        let off = v.base.wrapping_sub(self.base());
        let inside = self
            .lent
            .iter()
            .any(|&(o, l)| off >= o && off <= o + l && v.len <= o + l - off);
        assert!(
            inside,
            "{what}: range {v:?} (arena offset {off:#x}) is outside every range lent to the core"
        );
        off
    }
    fn put(&mut self, v: IoVec, src: &[u8], what: &str) {
        let off = self.offset(v, what);
        assert!(src.len() <= v.len);
        self.bytes[off..off + src.len()].copy_from_slice(src);
    }
}

/// A small frame encoder for the structured mode: the fuzzer picks the
/// fields, the encoder gets magic, version and lengths right (unless told
/// to lie), so inputs reach the states behind the header checks.
fn frames(mut p: &[u8], hello: bool, out: &mut Vec<u8>) {
    fn take<'a>(p: &mut &'a [u8], n: usize) -> &'a [u8] {
        let n = n.min(p.len());
        let (a, b) = p.split_at(n);
        *p = b;
        a
    }
    fn byte(p: &mut &[u8]) -> u8 {
        take(p, 1).first().copied().unwrap_or(0)
    }
    if hello {
        let addr = b"fuzzer:1";
        let r = tcp::Repr {
            op: tcp::op::HELLO,
            len: addr.len() as u64 + 3,
            data: addr.len() as u64,
            ..Default::default()
        };
        out.extend_from_slice(&r.to_bytes());
        out.extend_from_slice(addr);
        out.extend_from_slice(b"pd!");
    }
    while !p.is_empty() {
        let kind = byte(&mut p);
        let op = kind % 10;
        if op == 0 || op == 9 {
            // Raw bytes: anything at all.
            let n = byte(&mut p) as usize;
            out.extend_from_slice(take(&mut p, n));
            continue;
        }
        let flags = byte(&mut p) & tcp::flag::ALL;
        let lie = kind & 0x80 != 0;
        let len = u16::from_le_bytes([byte(&mut p), byte(&mut p)]) as usize
            % if kind & 0x40 != 0 { 40_000 } else { 300 };
        let tag = u64::from(byte(&mut p) & 3);
        let a = u64::from(u16::from_le_bytes([byte(&mut p), byte(&mut p)]));
        let b = u64::from(byte(&mut p) & 7);
        let mut r = tcp::Repr {
            op,
            flags: if matches!(op, tcp::op::MSG | tcp::op::RTS) {
                flags
            } else {
                0
            },
            len: len as u64,
            tag,
            data: a,
            id: b,
        };
        let mut payload = Vec::new();
        match op {
            tcp::op::MSG => r.id = r.len,
            tcp::op::RTS => {
                r.len = tcp::RTS_PAYLOAD_LEN as u64;
                payload.extend_from_slice(&tcp::rts_payload(len as u64 * 7 + a));
            }
            tcp::op::CTS => {
                r.len = 0;
                r.data = len as u64;
            }
            tcp::op::SHUTDOWN => r.len = 0,
            tcp::op::HELLO => r.data = r.data.min(r.len),
            tcp::op::DATA => r.len = r.len.max(1),
            _ => {}
        }
        if lie {
            r.len = r.len.wrapping_add(a & 0xff);
            r.id ^= a >> 8;
        }
        out.extend_from_slice(&r.to_bytes());
        if payload.is_empty() {
            // Payload bytes come from the input, zero-padded when it runs out
            // (a large declared length then simply leaves the stream short).
            let want = (r.len as usize).min(len);
            let got = take(&mut p, want);
            out.extend_from_slice(got);
            if kind & 0x20 == 0 {
                out.resize(out.len() + (want - got.len()), 0);
            }
        } else {
            out.extend_from_slice(&payload);
        }
    }
}

/// The receives the harness posts, in this order: three before the stream,
/// one halfway through it, one each time the connection blocks, the rest at
/// the end. Lengths in bytes; tagged: (tag, ignore, length).
#[derive(Clone, Copy)]
enum Post {
    Msg(usize),
    Msg2(usize, usize),
    Tagged(u64, u64, usize),
    Multi(usize),
    Peek(u64),
    PeekClaim(u64),
    Claim(usize, u64),
}

const POSTS: [Post; 10] = [
    Post::Msg(16),
    Post::Tagged(1, 0, 64),
    Post::Multi(300),
    Post::Msg2(5, 3000),
    Post::Tagged(0, u64::MAX, 40_000),
    Post::PeekClaim(2),
    Post::Claim(5, 2),
    Post::Msg(0),
    Post::Peek(3),
    Post::Tagged(2, 1, 1),
];

struct Harness {
    conn: Conn,
    rx: Rx,
    mem: Arena,
    src: Arena,
    rng: Rng,
    reject: bool,
    posts: usize,
    events: usize,
    seen: Reached,
}

impl Harness {
    fn post(&mut self) -> bool {
        let Some(&p) = POSTS.get(self.posts) else {
            return false;
        };
        let ctx = 1000 + self.posts;
        self.posts += 1;
        let req = match p {
            Post::Msg(n) => RecvReq::msg(&[self.mem.lend(n)], ctx),
            Post::Msg2(a, b) => RecvReq::msg(&[self.mem.lend(a), self.mem.lend(b)], ctx),
            Post::Tagged(t, ign, n) => RecvReq::tagged(&[self.mem.lend(n)], t, ign, ctx),
            Post::Multi(n) => RecvReq::msg(&[self.mem.lend(n)], ctx).with_flags(FI_MULTI_RECV),
            Post::Peek(t) => RecvReq::tagged(&[], t, 0, ctx).with_flags(FI_PEEK),
            Post::PeekClaim(t) => {
                RecvReq::tagged(&[], t, 0, 1000 + 5).with_flags(FI_PEEK | FI_CLAIM)
            }
            Post::Claim(n, t) => {
                RecvReq::tagged(&[self.mem.lend(n)], t, 0, 1000 + 5).with_flags(FI_CLAIM)
            }
        };
        // Invalid combinations are refused with an error number: fine.
        let _ = self.rx.post_recv(&req);
        self.drain();
        true
    }

    /// Collects events (answering the connection request, copying
    /// CopyOut bytes into the receive's memory) and writes what the
    /// connection wants written.
    fn drain(&mut self) {
        loop {
            let mut any = false;
            while let Some(e) = self.conn.poll_event() {
                any = true;
                self.events += 1;
                match &e {
                    Event::Connected { .. } => self.seen.connected += 1,
                    Event::ProtocolError(_) => self.seen.protocol_error += 1,
                    Event::SendComplete { .. } => self.seen.send_complete += 1,
                    Event::SendError { .. } => self.seen.send_error += 1,
                    Event::ConnRequest { .. } => self.seen.conn_requests += 1,
                    _ => {}
                }
                if let Event::ConnRequest { .. } = e {
                    let r = if self.reject {
                        self.conn.reject(b"no")
                    } else {
                        self.conn.accept(b"yes")
                    };
                    assert_eq!(r, Ok(()), "answering a ConnRequest failed");
                }
            }
            while let Some(mut e) = self.rx.poll_event() {
                any = true;
                self.events += 1;
                match &e {
                    Event::RecvComplete(_) => self.seen.recv_complete += 1,
                    Event::RecvError { .. } => self.seen.recv_error += 1,
                    _ => {}
                }
                if let Event::RecvComplete(RecvDone { copy, .. }) = &mut e {
                    if let Some(c) = copy.take() {
                        self.seen.copy_out += 1;
                        let mut off = c.offset;
                        let mut done = 0;
                        for &v in c.iov() {
                            if done == c.bytes.len() {
                                break;
                            }
                            if off >= v.len {
                                off -= v.len;
                                continue;
                            }
                            let n = (v.len - off).min(c.bytes.len() - done);
                            let dst = IoVec {
                                base: v.base + off,
                                len: n,
                            };
                            self.mem.put(dst, &c.bytes[done..done + n], "CopyOut");
                            done += n;
                            off = 0;
                        }
                        assert_eq!(done, c.bytes.len(), "CopyOut larger than its receive");
                        self.rx.recycle(c.bytes);
                    }
                }
            }
            while self.rx.next_wakeup().is_some() {
                any = true;
            }
            // Write: the peer (this harness) takes what the split allows.
            let limit = self.rng.split();
            let mut n = 0usize;
            {
                let t = self.conn.poll_transmit(&mut self.rx);
                for s in t.iter() {
                    assert!(!s.is_empty(), "empty transmit slice");
                    if n >= limit {
                        break;
                    }
                    if let TxSlice::Iov(v) = s {
                        self.src.offset(v, "transmit");
                    }
                    n += s.len().min(limit - n);
                }
            }
            if n > 0 {
                any = true;
                self.seen.written += n;
                self.conn.on_written(n);
            }
            if !any {
                break;
            }
            assert!(self.events < 1_000_000, "event storm");
        }
    }
}

/// Feeds arbitrary bytes to a server-side connection as its incoming
/// stream, reading into whatever [`Conn::recv_target`] names, with receives
/// posted (more when the connection blocks) and sends queued in the other
/// direction so CTS and rendezvous state is reachable. Must never panic.
///
/// Input: `[ctl, seed, body...]`. `ctl` bits: 0 prepend a valid HELLO;
/// 1 reject instead of accept; 2 small frame limits; 3 tiny unexpected
/// budget; 4 queue sends; 5-6 how the stream ends (EOF, error, shutdown,
/// nothing); 7 `body` is frame descriptors ([`frames`]) instead of raw bytes.
pub fn tcp_conn_stream(data: &[u8]) {
    conn_stream(data);
    auth_stream(data);
}

/// What one [`tcp_conn_stream`] run reached (for tests of the harness).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reached {
    /// Stream bytes read into each kind of target.
    pub header: usize,
    /// Into core buffers.
    pub buffer: usize,
    /// Straight into posted receives.
    pub payload: usize,
    /// Dropped.
    pub discard: usize,
    /// Stream bytes never read (blocked or closed first).
    pub unread: usize,
    /// Events seen, by kind.
    pub conn_requests: usize,
    /// Connected events.
    pub connected: usize,
    /// Receive completions.
    pub recv_complete: usize,
    /// Receive completions that carried CopyOut bytes.
    pub copy_out: usize,
    /// Receive errors (connection lost, peek misses, …).
    pub recv_error: usize,
    /// Send completions.
    pub send_complete: usize,
    /// Send errors.
    pub send_error: usize,
    /// Protocol errors (the connection closes).
    pub protocol_error: usize,
    /// Transmitted bytes.
    pub written: usize,
}

/// [`tcp_conn_stream`], reporting what it reached.
pub fn conn_stream(data: &[u8]) -> Reached {
    let [ctl, seed, body @ ..] = data else {
        return Reached::default();
    };
    let (ctl, seed) = (*ctl, *seed);
    let cfg = if ctl & 4 != 0 {
        Config {
            eager_max: 64,
            data_chunk: 48,
            max_frame: 4096,
            max_cm_data: 16,
            max_addr_len: 16,
            max_msg_size: 1 << 16,
            ..Config::default()
        }
    } else {
        Config {
            eager_max: 1024,
            data_chunk: 700,
            ..Config::default()
        }
    };
    let rx_cfg = RxConfig {
        max_unexpected_bytes: if ctl & 8 != 0 { 100 } else { 64 << 10 },
        min_multi_recv: 32,
        depth: 4,
    };
    let mut stream = Vec::new();
    if ctl & 0x80 != 0 {
        frames(body, ctl & 1 != 0, &mut stream);
    } else {
        if ctl & 1 != 0 {
            frames(&[], true, &mut stream);
        }
        stream.extend_from_slice(body);
    }

    let mut h = Harness {
        conn: Conn::incoming(7, 3, cfg),
        rx: Rx::new(rx_cfg),
        mem: Arena::new(64 << 10, 0xaa),
        src: Arena::new(8 << 10, 0x55),
        rng: Rng::new(u64::from(seed)),
        reject: ctl & 2 != 0,
        posts: 0,
        events: 0,
        seen: Reached::default(),
    };
    assert_eq!(h.conn.state(), State::AwaitingHello);
    for _ in 0..3 {
        h.post();
    }
    if ctl & 0x10 != 0 {
        let small = h.src.lend(40);
        let big = h.src.lend(cfg.eager_max * 3 + 5);
        let _ = h.conn.queue_send(SendReq::msg(&[small], 1));
        let _ = h
            .conn
            .queue_send(SendReq::tagged(&[big, small], 2, 2).with_data(9));
    }
    h.drain();

    let mut at = 0usize;
    let mut steps = 0usize;
    let half = stream.len() / 2;
    let mut posted_half = false;
    while at < stream.len() {
        steps += 1;
        assert!(
            steps < 4 * stream.len() + 100,
            "no progress reading the stream"
        );
        if !posted_half && at >= half {
            posted_half = true;
            h.post();
        }
        let avail = (stream.len() - at).min(h.rng.split());
        let n = match h.conn.recv_target(&mut h.rx) {
            Target::Header(b) => {
                // A zero-length read target looks like EOF to a real driver.
                assert!(!b.is_empty(), "zero-length header target");
                let n = avail.min(b.len());
                b[..n].copy_from_slice(&stream[at..at + n]);
                h.seen.header += n;
                n
            }
            Target::Buffer(b) => {
                assert!(!b.is_empty(), "zero-length buffer target");
                let n = avail.min(b.len());
                b[..n].copy_from_slice(&stream[at..at + n]);
                h.seen.buffer += n;
                n
            }
            Target::Payload(iov) => {
                assert!(!iov.is_empty(), "empty payload target");
                let iov = iov.to_vec();
                let mut n = 0;
                for v in iov {
                    assert!(v.len > 0, "zero-length payload range");
                    h.mem.offset(v, "payload target");
                    if n == avail {
                        break;
                    }
                    let k = (avail - n).min(v.len);
                    h.mem.put(
                        IoVec {
                            base: v.base,
                            len: k,
                        },
                        &stream[at + n..at + n + k],
                        "payload target",
                    );
                    n += k;
                }
                h.seen.payload += n;
                n
            }
            Target::Discard(left) => {
                assert!(left > 0, "empty discard target");
                let n = avail.min(left);
                h.seen.discard += n;
                n
            }
            Target::Blocked => {
                // Backpressure: a new receive may unblock it.
                if h.post() {
                    continue;
                }
                break;
            }
            Target::Closed => break,
        };
        assert!(n > 0);
        at += n;
        h.conn.on_read(n, &mut h.rx);
        h.drain();
    }
    match (ctl >> 5) & 3 {
        0 => h.conn.on_eof(&mut h.rx),
        1 => h
            .conn
            .on_error(ofi_core::error::errno::FI_ECONNRESET, &mut h.rx),
        2 => h.conn.shutdown(&mut h.rx),
        _ => {}
    }
    h.drain();
    // Whatever is left: post the rest, close the endpoint's receive side.
    while h.post() {}
    h.rx.close(ofi_core::error::errno::FI_ECANCELED);
    h.drain();
    h.seen.unread = stream.len() - at;
    h.seen
}
