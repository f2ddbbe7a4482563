//! Bodies of ofi's fuzz targets, one function per decoder. The files in
//! `fuzz_targets/` are one-line libFuzzer wrappers around these, so the same
//! code also runs without libFuzzer (`tests/replay.rs` replays the seeds and
//! any saved crash artifacts through them).
//!
//! Each target must never panic, hang or touch memory outside what it was
//! given, whatever the bytes. Where the decoders make promises beyond "no
//! panic" (a parsed header re-emits to the same bytes, the connection core
//! only names memory the harness lent it), the targets assert them.

mod capi;
mod hybrid;
mod storage;
mod udp;
pub use capi::{capi_args, panicked};
pub use hybrid::hybrid_wire;
pub use storage::{storage_capsule, storage_cores, storage_nbd};
pub use udp::{sessions_run, udp_packet, udp_sessions, SessionsReached};

use ofi_core::consts::{FI_CLAIM, FI_MULTI_RECV, FI_PEEK};
use ofi_core::util::iov::IoVec;
use ofi_proto::tcp::{
    Config, Conn, Event, RecvDone, RecvReq, Rx, RxConfig, SendReq, State, Target, TxSlice,
};
use ofi_wire::{shm, tcp};

// ---- shm ring entries -----------------------------------------------------

/// `shm::Repr::parse` over an entry made of arbitrary bytes; on success also
/// `rts_iov`, and the parsed header must survive emit + parse unchanged.
pub fn shm_entry(data: &[u8]) {
    let Ok(e) = shm::Entry::new_checked(data) else {
        assert!(
            data.len() < shm::HDR_LEN,
            "new_checked refused a whole header"
        );
        return;
    };
    // Every accessor on a checked entry must be in bounds.
    let _ = (e.op(), e.flags(), e.iov_cnt(), e.len(), e.is_empty());
    let _ = (e.src(), e.tag(), e.data(), e.total(), e.cookie());
    let _ = e.payload();
    let Ok(r) = shm::Repr::parse(&e) else {
        return;
    };
    let iov = r.rts_iov(&e);
    if r.op == shm::op::RTS {
        let n = r.iov_cnt as usize;
        assert!(
            (1..=shm::MAX_RTS_IOV).contains(&n),
            "RTS accepted with {n} iovs"
        );
        // Entries past iov_cnt stay zero.
        assert!(iov[n..].iter().all(|&p| p == (0, 0)));
    }
    if matches!(r.op, shm::op::INLINE | shm::op::DATA | shm::op::RMA_RESP) {
        assert!(
            r.len as usize <= e.payload().len(),
            "inline length past the entry"
        );
    }
    if matches!(
        r.op,
        shm::op::RMA_WRITE | shm::op::RMA_PULL | shm::op::RMA_READ | shm::op::ATOMIC
    ) {
        // A parsed one-sided request's range lists and inline data lie
        // inside the entry, and the lengths add up as parse promised.
        let rg = r.ranges(&e).expect("parse accepted the ranges");
        assert!((1..=shm::MAX_RANGES).contains(&rg.n_remote));
        assert!(rg.n_local <= shm::MAX_RANGES);
        let data = match r.op {
            shm::op::RMA_WRITE | shm::op::ATOMIC => r.len as usize,
            _ => 0,
        };
        assert!(
            rg.data_at + data <= e.payload().len(),
            "request past the entry"
        );
        if r.op != shm::op::ATOMIC {
            assert_eq!(
                rg.remote_len(),
                r.tag,
                "remote ranges differ from the length"
            );
        }
    }
    // Round trip through a fresh entry of the same size.
    let mut buf = vec![0u8; data.len()];
    buf[shm::HDR_LEN..].copy_from_slice(e.payload());
    let mut out = shm::Entry::new_unchecked(&mut buf[..]);
    r.emit(&mut out);
    let again = shm::Repr::parse(&shm::Entry::new_checked(&buf[..]).expect("same length"));
    assert_eq!(again, Ok(r), "emit + parse changed the header");
}

// ---- the shm protocol core's entry handler -------------------------------

/// The shm core driven as the provider drives it, over entries made of
/// arbitrary bytes: the first byte picks the receiver's limits, then each
/// entry is a length byte and that many bytes (a ring slot). Every entry is
/// decoded (`ofi_proto::shm::decode`) and dispatched against the core's
/// state: four pending rendezvous sends (the sender machine,
/// `ofi_proto::shm::rndv`: ACKs end them, NACKs start DATA pushes into a
/// ring full every third chunk) and two pending one-sided operations to
/// peers 9 and 10 (answers count only from the operation's peer:
/// `OpTable::answered`), the receiver's reassembly of DATA chunks for each
/// RTS of at most 64 KiB (`rndv::Reassembly`, held to a model of which
/// bytes arrived), ATOMIC requests decoded and checked
/// (`AtomicReq::decode`), the layout a CTS's descriptor could hold
/// (`path::coop_layout_ok`, from the CTS's fields), posted receives and
/// the unexpected budget, and the control queue (a push that finds the
/// ring full every third time). Whatever the bytes: no panic; what the
/// decoder names lies inside the entry and the limits; an operation
/// completes at most once, a one-sided one only on its peer's answer; a
/// reassembly takes each byte once and completes exactly when all came; an
/// accepted atomic's operands are exactly its bytes; an accepted layout
/// tiles at most the operation; the unexpected budget holds.
pub fn shm_handler(data: &[u8]) {
    use ofi_core::util::matching::{PostedRecv, Unexpected};
    use ofi_proto::shm::{self as core, Body, Incoming, Limits};
    let Some((&sel, mut rest)) = data.split_first() else {
        return;
    };
    let lim = Limits {
        bounce_bufs: u64::from(sel & 0xf) + 1,
        bounce_size: 4096 * (usize::from(sel >> 4) + 1),
    };
    // Four rendezvous sends (the sender machine), to peers 9 and 10, of
    // 10 000 bytes each.
    let mut sends = core::rndv::Sends::default();
    let send_cookies: Vec<u64> = (0..4u32)
        .map(|i| sends.start(9 + u64::from(i % 2), 10_000, i))
        .collect();
    let mut pushed_to = std::collections::HashMap::<u64, usize>::new();
    let mut rmas = core::OpTable::new(1);
    let rma_cookies: Vec<u64> = (0..2u32).map(|i| rmas.insert(i)).collect();
    let rma_peer = |i: &u32| 9 + u64::from(i % 2);
    // The receiver's reassemblies, and which bytes of each arrived.
    let mut reasm = core::rndv::Reassembly::<()>::default();
    let mut have = std::collections::HashMap::<(u64, u64), Vec<bool>>::new();
    let mut reassembled = std::collections::HashSet::new();
    let mut rx = core::RxState::<usize>::new(8, 3);
    rx.mq.post(
        true,
        PostedRecv {
            iov_cnt: 1,
            len: 64,
            src: ofi_core::consts::FI_ADDR_UNSPEC,
            tag: 7,
            ..Default::default()
        },
    );
    let mut ctrl = core::CtrlQueue::new();
    // The auth exchange with a key the input cannot know: whatever it
    // writes, no sender becomes trusted.
    let key = ofi_core::util::auth::AuthKey::new(b"fuzz: a key no input holds")
        .ok()
        .flatten()
        .expect("a key");
    let mut auth = core::auth::Auth::new(key, 1);
    let mut pushes = 0u32;
    let mut done = std::collections::HashSet::new();
    let mut rng_full = |_: u64, _: &ofi_wire::shm::Repr, _: &[u8]| {
        pushes += 1;
        if pushes.is_multiple_of(3) {
            core::Push::Full
        } else {
            core::Push::Done
        }
    };
    while let Some((&n, tail)) = rest.split_first() {
        let n = usize::from(n).min(tail.len());
        let (slot, next) = tail.split_at(n);
        rest = next;
        let Ok(inc) = core::decode(slot, &lim) else {
            continue;
        };
        let room = slot.len().saturating_sub(shm::HDR_LEN);
        match inc {
            Incoming::Msg { meta, body } => {
                match body {
                    Body::Inline(b) => assert!(b.len() <= room, "inline bytes past the entry"),
                    Body::Bounce(i) => {
                        assert!(i < lim.bounce_bufs && meta.total <= lim.bounce_size)
                    }
                    Body::Rts { cnt, cookie, .. } => {
                        assert!((1..=shm::MAX_RTS_IOV as u8).contains(&cnt));
                        if meta.total <= 1 << 16 {
                            use core::rndv::Started;
                            let key = (meta.from, cookie);
                            match reasm.start(meta.from, cookie, meta.total, ()) {
                                Started::Waiting => {
                                    assert!(have.insert(key, vec![false; meta.total]).is_none());
                                    // A sender may use a cookie again once
                                    // its transfer ended: a new one starts.
                                    reassembled.remove(&key);
                                }
                                Started::Complete(()) => assert_eq!(meta.total, 0),
                                Started::Duplicate(()) => assert!(have.contains_key(&key)),
                            }
                        }
                    }
                }
                if let Some(i) = rx.mq.find_posted(meta.tagged, 0, meta.tag) {
                    let c = rx.claim_posted(meta.tagged, i, meta.total);
                    assert!(c.offset + c.room <= 64);
                } else if rx.may_read() {
                    rx.hold(
                        meta.tagged,
                        Unexpected {
                            src: 0,
                            tag: meta.tag,
                            data: meta.data,
                            flags: 0,
                            len: meta.total,
                            claimed: None,
                            payload: meta.total,
                        },
                    );
                }
                assert!(rx.unexpected() <= 3, "the unexpected budget was overrun");
            }
            Incoming::Ack { cookie, status } => {
                if let Err(code) = status {
                    assert!(
                        code > 0 && code < 1024,
                        "status {code} is not an FI_E* number"
                    );
                }
                let from = core::sender(slot).unwrap_or(0);
                if let Some((i, _)) = sends.on_ack(cookie, from, status) {
                    assert_eq!(from, 9 + u64::from(i % 2), "an ACK from another peer");
                    assert!(done.insert(cookie), "a send completed twice");
                    assert!(send_cookies.contains(&cookie));
                }
                let me = 1;
                ctrl.send(9, core::ack(me, cookie, 0), &[], &mut rng_full);
            }
            Incoming::Nack { cookie } => {
                let from = core::sender(slot).unwrap_or(0);
                if sends.on_nack(cookie, from) {
                    assert!(send_cookies.contains(&cookie));
                    assert!(
                        pushed_to.insert(cookie, 0).is_none(),
                        "pushed from the start twice"
                    );
                }
                let mut n = 0u32;
                sends.run_pushes(4096, |_, peer, c| {
                    n += 1;
                    assert!(peer == 9 || peer == 10);
                    let at = pushed_to
                        .get_mut(&c.cookie)
                        .expect("a push nobody asked for");
                    assert_eq!(c.offset, *at, "chunks out of order");
                    assert!(c.len > 0 && c.len <= 4096 && c.offset + c.len <= 10_000);
                    if n.is_multiple_of(3) {
                        return false;
                    }
                    *at += c.len;
                    true
                });
            }
            Incoming::Data {
                from,
                cookie,
                offset,
                bytes,
            } => {
                use core::rndv::{BadChunk, MAX_RUNS};
                assert!(bytes.len() <= room);
                let len = bytes.len();
                let key = (from, cookie);
                // What the model says of this chunk.
                let want = match have.get(&key) {
                    None => Err(BadChunk::Unknown),
                    Some(h) if len == 0 || offset.checked_add(len).is_none_or(|e| e > h.len()) => {
                        Err(BadChunk::OutOfRange)
                    }
                    Some(h) if h[offset..offset + len].contains(&true) => Err(BadChunk::Overlap),
                    Some(h) => {
                        let mut next = h.clone();
                        next[offset..offset + len].fill(true);
                        let runs = next
                            .iter()
                            .enumerate()
                            .filter(|&(i, &b)| b && (i == 0 || !next[i - 1]))
                            .count();
                        if runs > MAX_RUNS {
                            Err(BadChunk::Fragmented)
                        } else {
                            Ok(next)
                        }
                    }
                };
                let mut placed = false;
                let got = reasm.on_data(from, cookie, offset, len, |_| placed = true);
                match (got, want) {
                    (Ok(done), Ok(next)) => {
                        assert!(placed, "an accepted chunk was not placed");
                        let all = next.iter().all(|&b| b);
                        assert_eq!(done.is_some(), all, "completion without every byte");
                        if all {
                            have.remove(&key);
                            assert!(reassembled.insert(key), "a receive completed twice");
                        } else {
                            have.insert(key, next);
                        }
                    }
                    (Err(why), Err(model)) => {
                        assert!(!placed, "a refused chunk was placed");
                        assert_eq!(why, model);
                    }
                    (got, want) => {
                        panic!("DATA ({offset}, {len}): {got:?}, the model says {want:?}")
                    }
                }
            }
            Incoming::Cts { cookie, desc, gen } => {
                let len = if sends.get(cookie).is_some() || rmas.get(cookie).is_some() {
                    10_000
                } else {
                    4096
                };
                // A descriptor holding anything: here, what the CTS says.
                let (chunk, total) = ((desc & 0xffff_ffff) as usize, (desc >> 32) as usize);
                if core::path::coop_layout_ok(gen, chunk, total, len) {
                    assert!(chunk > 0 && total <= len);
                    let mut at = 0;
                    for c in 0..gen {
                        let (off, n) = core::path::coop_span(c, chunk, total);
                        assert_eq!(off, at, "chunks leave a gap");
                        assert!(n > 0, "an empty chunk");
                        at += n;
                    }
                    assert_eq!(at, total, "chunks do not tile the transfer");
                }
            }
            Incoming::Request(req) => {
                let repr = req.repr;
                let payload = req.payload();
                let ranges = req.ranges().expect("decode checked the request's ranges");
                assert!(core::is_request(repr.op));
                assert!(ranges.data_at <= payload.len(), "ranges past the entry");
                if repr.op == shm::op::ATOMIC {
                    if let Ok(q) = core::AtomicReq::decode(&repr, &ranges, payload, 1024) {
                        assert!(ofi_core::util::atomic::valid(q.kind, q.op, q.datatype));
                        assert!(q.bytes <= 1024 && q.bytes == q.count * q.size);
                        assert_eq!(ranges.remote_len(), q.count as u64);
                        for v in [q.operand, q.compare].into_iter().flatten() {
                            assert_eq!(v.len(), q.bytes, "operands of another length");
                        }
                        assert!(q.operand.is_some() || q.read_only());
                    }
                }
                ctrl.send(
                    repr.src,
                    core::rma_answer(1, repr.cookie, 0),
                    &[],
                    &mut rng_full,
                );
            }
            Incoming::Answer {
                from,
                cookie,
                last,
                bytes,
                ..
            } => {
                assert!(bytes.len() <= room);
                if let Ok(i) = rmas.answered(cookie, from, rma_peer) {
                    assert_eq!(rma_peer(i), from, "an answer from another peer");
                    if last {
                        assert!(rmas.take(cookie).is_some());
                        assert!(done.insert(cookie), "an operation completed twice");
                        assert!(rma_cookies.contains(&cookie));
                    }
                }
            }
            Incoming::Hello { from, nonce } => {
                let ch = auth.on_hello(from, &nonce, [from as u8; 32]);
                assert_eq!(ch.repr.len as usize, shm::CHALLENGE_LEN);
                ctrl.send(from, ch.repr, ch.payload(), &mut rng_full);
            }
            Incoming::Challenge {
                from,
                echo,
                nonce,
                tag,
            } => {
                let _ = auth.on_challenge(from, &echo, &nonce, &tag);
                auth.proved(from);
                assert!(!auth.trusted(from), "trusted without a HELLO of ours");
            }
            Incoming::Proof { from, echo, tag } => {
                assert!(
                    auth.on_proof(from, &echo, &tag).is_err(),
                    "a proof made without the key"
                );
                assert!(!auth.trusted(from), "trusted without the key");
            }
            Incoming::Reject { from } => {
                assert!(!auth.on_reject(from), "a REJECT of something never asked");
            }
        }
        ctrl.flush(&mut rng_full);
    }
    assert_eq!(
        sends.len() + rmas.len() + done.len(),
        6,
        "operations lost or invented"
    );
}

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

// ---- tcp handshake with an auth key ---------------------------------------

/// What one [`auth_stream`] run reached (for tests of the harness).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AuthReached {
    /// Connection requests reported (acceptor).
    pub conn_requests: usize,
    /// Connected events.
    pub connected: usize,
    /// Authentication failures.
    pub auth_failed: usize,
    /// Protocol errors.
    pub protocol_error: usize,
    /// Frames written, by opcode (index = op).
    pub written_ops: [usize; 16],
}

/// The key every [`auth_stream`] connection holds.
pub const AUTH_KEY: &[u8] = b"fuzz-job-key";
/// The address the connector claims.
pub const AUTH_ADDR: &[u8] = b"fuzzer:9";

fn handshake_frame(op: u8, data: u64, id: u64, payload: &[u8]) -> Vec<u8> {
    let r = tcp::Repr {
        op,
        len: payload.len() as u64,
        data,
        id,
        ..Default::default()
    };
    let mut v = r.to_bytes().to_vec();
    v.extend_from_slice(payload);
    v
}

/// Feeds arbitrary bytes to a connection that holds an auth key, on either
/// side of the handshake (HELLO with a nonce, CHALLENGE, PROOF; see
/// `ofi_wire::tcp`). Must never panic; a connector must never report
/// Connected, nor an acceptor a connection request, unless the peer proved
/// the key (only the harness's own valid handshake can: the fuzzer cannot
/// forge an HMAC it never sees).
///
/// Input: `[ctl, seed, body...]`. `ctl` bit 0: acceptor (else connector);
/// bit 1: the harness first plays its half of a valid handshake, so
/// `body` then reaches the connected states; bit 2: the harness's side of
/// that handshake uses another key (a refused handshake).
pub fn auth_stream(data: &[u8]) -> AuthReached {
    use ofi_core::util::auth::AuthKey;
    let [ctl, seed, body @ ..] = data else {
        return AuthReached::default();
    };
    let (acceptor, valid, other_key) = (ctl & 1 != 0, ctl & 2 != 0, ctl & 4 != 0);
    let cfg = Config {
        eager_max: 64,
        data_chunk: 48,
        max_frame: 4096,
        max_cm_data: 16,
        max_addr_len: 16,
        max_msg_size: 1 << 16,
        ..Config::default()
    };
    let key = AuthKey::new(AUTH_KEY).unwrap().unwrap();
    let peer_key = if other_key {
        AuthKey::new(b"another-key").unwrap().unwrap()
    } else {
        key.clone()
    };
    let mine = [*seed; tcp::NONCE_LEN];
    let theirs = [seed.wrapping_add(1); tcp::NONCE_LEN];
    let mut conn = if acceptor {
        Conn::incoming(7, 3, cfg).with_auth(key, mine)
    } else {
        Conn::connect(7, 3, cfg, AUTH_ADDR, b"pd")
            .expect("connect")
            .with_auth(key, mine)
    };
    let mut rx = Rx::new(RxConfig {
        max_unexpected_bytes: 4096,
        min_multi_recv: 0,
        depth: 4,
    });
    // The harness's half of a valid handshake, built from the transcript
    // the wire module documents (an independent check of the core's MACs).
    let mut stream = Vec::new();
    let acceptor_label: &[u8] = b"ofi-tcp-v1 acceptor";
    let connector_label: &[u8] = b"ofi-tcp-v1 connector";
    if valid && acceptor {
        let mut p = AUTH_ADDR.to_vec();
        p.extend_from_slice(&theirs);
        p.extend_from_slice(b"pd");
        stream.extend(handshake_frame(
            tcp::op::HELLO,
            AUTH_ADDR.len() as u64,
            tcp::NONCE_LEN as u64,
            &p,
        ));
        let proof = peer_key.mac(&[connector_label, AUTH_ADDR, &theirs, &mine]);
        stream.extend(handshake_frame(tcp::op::PROOF, 0, 0, &proof));
    } else if valid {
        let proof = peer_key.mac(&[acceptor_label, AUTH_ADDR, &mine, &theirs]);
        stream.extend(handshake_frame(
            tcp::op::CHALLENGE,
            0,
            0,
            &tcp::challenge_payload(&theirs, &proof),
        ));
        stream.extend(handshake_frame(tcp::op::ACCEPT, 0, 0, b""));
    }
    stream.extend_from_slice(body);
    let mut seen = AuthReached::default();
    let mut written = Vec::new();
    let mut rng = Rng::new(u64::from(*seed));
    let mut at = 0;
    let mut steps = 0;
    loop {
        while let Some(e) = conn.poll_event() {
            match e {
                Event::ConnRequest { ref peer_addr, .. } => {
                    seen.conn_requests += 1;
                    assert_eq!(peer_addr, AUTH_ADDR, "a request for an unproven address");
                    let _ = conn.accept(b"");
                }
                Event::Connected { .. } => seen.connected += 1,
                Event::AuthFailed { .. } => seen.auth_failed += 1,
                Event::ProtocolError(_) => seen.protocol_error += 1,
                _ => {}
            }
        }
        while rx.poll_event().is_some() {}
        while rx.next_wakeup().is_some() {}
        let limit = rng.split();
        let mut n = 0;
        {
            let t = conn.poll_transmit(&mut rx);
            for s in t.iter() {
                if n >= limit {
                    break;
                }
                let k = s.len().min(limit - n);
                if let TxSlice::Bytes(b) = s {
                    written.extend_from_slice(&b[..k]);
                }
                n += k;
            }
        }
        if n > 0 {
            conn.on_written(n);
            continue;
        }
        if at >= stream.len() {
            break;
        }
        steps += 1;
        assert!(steps < 8 * stream.len() + 1000, "no progress");
        let avail = (stream.len() - at).min(rng.split());
        let got = match conn.recv_target(&mut rx) {
            Target::Header(b) | Target::Buffer(b) => {
                let k = avail.min(b.len());
                b[..k].copy_from_slice(&stream[at..at + k]);
                k
            }
            // No receive is ever posted: payloads go to core buffers or
            // are discarded; a payload target would be a bug.
            Target::Payload(_) => panic!("a payload target without a posted receive"),
            Target::Discard(left) => avail.min(left),
            Target::Blocked | Target::Closed => break,
        };
        at += got;
        conn.on_read(got, &mut rx);
    }
    // The ops written (headers are whole in `written`: user ranges never
    // appear, nothing is sent but control frames).
    let mut w = &written[..];
    while w.len() >= tcp::HDR_LEN {
        let Ok(r) = tcp::Repr::parse(&tcp::Header::new_unchecked(w), 1 << 20) else {
            break;
        };
        seen.written_ops[usize::from(r.op).min(15)] += 1;
        let end = (tcp::HDR_LEN + r.len as usize).min(w.len());
        w = &w[end..];
    }
    if !valid || other_key {
        assert_eq!(
            seen.conn_requests, 0,
            "an acceptor authenticated a peer without the key"
        );
        assert_eq!(
            seen.connected, 0,
            "a connector connected to a peer without the key"
        );
    }
    conn.on_eof(&mut rx);
    while conn.poll_event().is_some() {}
    rx.close(ofi_core::error::errno::FI_ECANCELED);
    seen
}
