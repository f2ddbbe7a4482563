//! What a peer can make an RDM endpoint hold is bounded, over loopback:
//! sends to a peer that posts no receive stay within tx_size and the copy
//! budgets and further posts answer FI_EAGAIN (never an error completion),
//! everything accepted arriving once the peer posts; a peer that stops
//! answering is declared dead though every send to it completed when
//! copied; idle sessions end and come back with nothing lost, and a new
//! peer beyond the bound on live peers waits (FI_EAGAIN) for a session to
//! end. Every test of this
//! file sets the same small tunables (one process: they are read when a
//! domain opens).
#![allow(unsafe_code)]

mod common;

use common::*;
use ofi_core::consts::*;
use ofi_core::error::errno;
use ofi_core::util::peer::{Cause, PeerDown};
use ofi_testkit::log::LogCapture;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(20);

/// The tunables of this file, set once (the same for every test).
fn env() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        for (k, v) in [
            ("FI_UDP_WINDOW", "65536"),
            ("FI_UDP_MAX_UNEXPECTED_BYTES", "65536"),
            ("FI_UDP_COPY_BUDGET", "131072"),
            ("FI_UDP_PEER_TIMEOUT_MS", "1000"),
            ("FI_UDP_IDLE_TIMEOUT_MS", "300"),
            ("FI_UDP_MAX_PEERS", "3"),
        ] {
            std::env::set_var(k, v);
        }
    });
}

fn rdm(tx_size: usize) -> ofi_core::Info {
    env();
    let mut info = offer(ep_type::FI_EP_RDM, "127.0.0.1");
    info.tx_attr.size = tx_size;
    info
}

/// Drains `cq` into `out` and progresses `also` once.
fn pump(cq: &ofi_core::object::CompletionQueue, out: &mut Vec<Done>, also: &[&Ep]) {
    poll(cq, out);
    for e in also {
        e.ep.progress();
    }
}

#[test]
fn sends_to_a_peer_that_posts_no_receive_answer_eagain_within_bounds() {
    const TX: usize = 32;
    let info = rdm(TX);
    let a = Ep::open(&info);
    let b = Ep::open(&info);
    let to_b = a.insert(&b);
    // The session comes up with one message b takes.
    let first = pattern(1, 8);
    let mut got = [0u8; 8];
    // SAFETY: the buffers outlive the operations (waited for below).
    unsafe {
        b.ep.recv(got.as_mut_ptr(), 8, FI_ADDR_UNSPEC, 1)
            .expect("recv");
        a.ep.send(first.as_ptr(), 8, to_b, 1).expect("send");
    }
    let (mut sa, mut sb) = (Vec::new(), Vec::new());
    ok(wait_ctx(&a.cq, &mut sa, 1, T, &[&b.ep], "send"), "send");
    ok(wait_ctx(&b.cq, &mut sb, 1, T, &[&a.ep], "recv"), "recv");
    // b posts nothing more but keeps making progress. a posts 1000-byte
    // sends until one is refused; every buffer stays alive (and
    // unchanged) until the end, completed or not.
    const LEN: usize = 1000;
    let bufs: Vec<Vec<u8>> = (0..20_000u64).map(|k| pattern(100 + k, LEN)).collect();
    // The buffers accepted, in posting order (a refused one is skipped:
    // the next post may be accepted again once progress made room).
    let mut sent: Vec<usize> = Vec::new();
    let mut eagain = 0;
    let deadline = Instant::now() + T;
    for (k, buf) in bufs.iter().enumerate() {
        // SAFETY: buf outlives the send (bufs lives to the end).
        match unsafe { a.ep.send(buf.as_ptr(), LEN, to_b, 100 + k) } {
            Ok(()) => sent.push(k),
            Err(e) => {
                assert_eq!(
                    e.code(),
                    errno::FI_EAGAIN,
                    "refused for another reason: {e}"
                );
                eagain += 1;
                if eagain > 50 {
                    break;
                }
                // Flow control: progress, then post the next one.
                for _ in 0..20 {
                    pump(&a.cq, &mut sa, &[&b]);
                }
            }
        }
        pump(&a.cq, &mut sa, &[&b]);
        assert!(Instant::now() < deadline, "posting took too long");
    }
    let accepted = sent.len();
    assert!(
        eagain > 0,
        "{accepted} sends accepted for a peer that posts no receive, none refused"
    );
    // b's window (64 KiB), its unexpected budget (64 KiB) and a's copies
    // for it (64 KiB, its window), about 1 KiB a send, and TX waiting.
    assert!(accepted < 400, "{accepted} sends accepted");
    // The refusals were flow control: no error completion came.
    for _ in 0..200 {
        pump(&a.cq, &mut sa, &[&b]);
    }
    assert!(
        sa.iter().all(|d| matches!(d, Done::Ok(_))),
        "an error completion: {:?}",
        sa.iter().find(|d| matches!(d, Done::Err(_)))
    );
    // b posts a receive for each: all of them arrive, in order, intact,
    // and every send completes.
    let mut dsts = vec![vec![0u8; LEN]; accepted];
    for (k, d) in dsts.iter_mut().enumerate() {
        // SAFETY: dsts outlives the receives (waited for below).
        unsafe { b.ep.recv(d.as_mut_ptr(), LEN, FI_ADDR_UNSPEC, 100 + k) }.expect("recv");
    }
    let posted: Vec<usize> = (0..accepted).collect();
    for &k in &posted {
        let r = ok(
            wait_ctx(&b.cq, &mut sb, 100 + k, T, &[&a.ep], "recv"),
            "recv",
        );
        assert_eq!(r.len, LEN);
    }
    for (i, d) in dsts.iter().enumerate() {
        let k = sent[i];
        assert!(
            *d == bufs[k],
            "message {i} (buffer {k}) out of order or damaged"
        );
    }
    // Each accepted send completes successfully (the ones refused never
    // were posted).
    for &k in &sent {
        ok(
            wait_ctx(&a.cq, &mut sa, 100 + k, T, &[&b.ep], "send"),
            "send",
        );
    }
}

/// The first error entry of `e`'s EQ within `bound` (progressing it).
fn eq_error(e: &Ep, bound: Duration, stash: &mut Vec<Done>) -> Option<ofi_core::util::eq::EqError> {
    let t0 = Instant::now();
    while t0.elapsed() < bound {
        match e.eq.read() {
            Err(x) if x.code() == errno::FI_EAVAIL => {
                return Some(e.eq.readerr().expect("readerr"))
            }
            Err(x) if x.is_again() => {}
            Ok(ev) => panic!("unexpected EQ event {}", ev.event),
            Err(x) => panic!("eq read: {x}"),
        }
        poll(&e.cq, stash);
    }
    None
}

#[test]
fn a_peer_that_stops_answering_is_dead_though_every_send_completed() {
    let info = rdm(1024);
    let a = Ep::open(&info);
    let b = Ep::open(&info);
    let to_b = a.insert(&b);
    let first = pattern(1, 8);
    let mut got = [0u8; 8];
    // SAFETY: the buffers outlive the operations (waited for below).
    unsafe {
        b.ep.recv(got.as_mut_ptr(), 8, FI_ADDR_UNSPEC, 1)
            .expect("recv");
        a.ep.send(first.as_ptr(), 8, to_b, 1).expect("send");
    }
    let (mut sa, mut sb) = (Vec::new(), Vec::new());
    ok(wait_ctx(&a.cq, &mut sa, 1, T, &[&b.ep], "send"), "send");
    ok(wait_ctx(&b.cq, &mut sb, 1, T, &[&a.ep], "recv"), "recv");
    // Both sides settle (acknowledgements exchanged), then b stops
    // calling into the library: its socket takes a's datagrams, nobody
    // answers them.
    let settle = Instant::now() + Duration::from_millis(100);
    while Instant::now() < settle {
        pump(&a.cq, &mut sa, &[&b]);
    }
    let bufs: Vec<Vec<u8>> = (0..10u64).map(|k| pattern(10 + k, 500)).collect();
    let t0 = Instant::now();
    for (k, buf) in bufs.iter().enumerate() {
        // SAFETY: bufs outlives the endpoints.
        unsafe { a.ep.send(buf.as_ptr(), 500, to_b, 10 + k) }.expect("send");
    }
    // The copies complete at once.
    for k in 0..10 {
        ok(
            wait_ctx(&a.cq, &mut sa, 10 + k, T, &[], "send"),
            "a copied send",
        );
    }
    let report = eq_error(&a, Duration::from_secs(10), &mut sa)
        .expect("a peer that acknowledges nothing was never declared dead");
    let took = t0.elapsed();
    let down = PeerDown::from_eq_error(&report).expect("a death report");
    assert_eq!(down.fi_addr, to_b);
    assert_eq!(down.cause, Cause::TimedOut);
    assert!(
        took >= Duration::from_millis(900),
        "declared dead after {took:?}"
    );
    // A later send to it fails the usual way (its handshake is not
    // answered): an error completion, not a wait without end.
    let late = pattern(99, 100);
    // SAFETY: late outlives the send (its completion is waited for).
    unsafe { a.ep.send(late.as_ptr(), 100, to_b, 99) }.expect("send");
    match wait_ctx(&a.cq, &mut sa, 99, T, &[], "a send after the death") {
        Done::Err(e) => assert_eq!(e.err, errno::FI_ETIMEDOUT),
        Done::Ok(e) => panic!("a send to a dead peer completed: {e:?}"),
    }
    drop(b);
}

/// Sends `len` bytes from `a` to `b` (`ctx` on both) and checks them, the
/// post retried while it answers FI_EAGAIN; the number of those.
fn exchange(a: &Ep, b: &Ep, to_b: u64, len: usize, seed: u64, ctx: usize) -> usize {
    let src = pattern(seed, len);
    let mut dst = vec![0u8; len];
    let (mut sa, mut sb) = (Vec::new(), Vec::new());
    let mut eagain = 0;
    let deadline = Instant::now() + T;
    // SAFETY: the buffers outlive the operations (waited for below).
    unsafe {
        b.ep.recv(dst.as_mut_ptr(), len, FI_ADDR_UNSPEC, ctx)
            .expect("recv");
        loop {
            match a.ep.send(src.as_ptr(), len, to_b, ctx) {
                Ok(()) => break,
                Err(e) if e.code() == errno::FI_EAGAIN => {
                    eagain += 1;
                    pump(&a.cq, &mut sa, &[b]);
                    assert!(Instant::now() < deadline, "never taken");
                }
                Err(e) => panic!("send: {e}"),
            }
        }
    }
    ok(wait_ctx(&a.cq, &mut sa, ctx, T, &[&b.ep], "send"), "send");
    ok(wait_ctx(&b.cq, &mut sb, ctx, T, &[&a.ep], "recv"), "recv");
    assert!(dst == src, "{len} bytes arrived damaged");
    assert!(
        sa.is_empty() && sb.is_empty(),
        "stray completions {sa:?} {sb:?}"
    );
    eagain
}

/// No EQ entry waits on `e` (no peer was declared dead).
fn no_death(e: &Ep) {
    match e.eq.read() {
        Err(x) if x.is_again() => {}
        Err(x) if x.code() == errno::FI_EAVAIL => {
            panic!("a peer reported: {:?}", e.eq.readerr())
        }
        r => panic!("eq: {r:?}"),
    }
}

#[test]
fn idle_sessions_end_and_come_back_with_nothing_lost() {
    let info = rdm(1024);
    let a = Ep::open(&info);
    let b = Ep::open(&info);
    let to_b = a.insert(&b);
    let to_a = b.insert(&a);
    let log = LogCapture::start();
    for round in 0..3u64 {
        // Both ways, copied and in-place and rendezvous sizes.
        for (i, len) in [8usize, 5000, 40_000].into_iter().enumerate() {
            let ctx = (round * 10 + i as u64) as usize;
            exchange(&a, &b, to_b, len, 10 * round + i as u64, 0x100 + ctx);
            exchange(&b, &a, to_a, len, 100 + 10 * round + i as u64, 0x200 + ctx);
        }
        // Quiet well past the idle bound (both keep making progress):
        // the session ends on both sides.
        let ends = log.text().matches("an idle session ended").count();
        let t0 = Instant::now();
        while log.text().matches("an idle session ended").count() < ends + 2 {
            a.ep.progress();
            b.ep.progress();
            std::thread::sleep(Duration::from_millis(1));
            assert!(t0.elapsed() < T, "the idle session never ended");
        }
    }
    no_death(&a);
    no_death(&b);
}

#[test]
fn a_new_peer_beyond_the_bound_waits_for_a_session_to_end() {
    // The hub keeps at most three live peers (FI_UDP_MAX_PEERS). Three
    // leaves hold a session busy (a large message each, rendezvous, whose
    // receive they have not posted); a post to a fourth answers FI_EAGAIN
    // until one of them is done, then goes.
    let info = rdm(1024);
    let hub = Ep::open(&info);
    let leaves: Vec<Ep> = (0..4).map(|_| Ep::open(&info)).collect();
    let to: Vec<u64> = leaves.iter().map(|l| hub.insert(l)).collect();
    const BIG: usize = 100_000;
    let bigs: Vec<Vec<u8>> = (0..3u64).map(|k| pattern(k, BIG)).collect();
    let mut sh = Vec::new();
    for k in 0..3 {
        // SAFETY: bigs outlives the sends (waited for below).
        unsafe { hub.ep.send(bigs[k].as_ptr(), BIG, to[k], 0x10 + k) }.expect("send");
    }
    let also: Vec<&Ep> = leaves.iter().collect();
    for _ in 0..200 {
        pump(&hub.cq, &mut sh, &also);
    }
    let small = pattern(9, 64);
    let mut refused = 0;
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(200) {
        // SAFETY: small outlives the send (not taken: nothing to wait for).
        match unsafe { hub.ep.send(small.as_ptr(), 64, to[3], 0x20) } {
            Err(e) if e.code() == errno::FI_EAGAIN => refused += 1,
            r => panic!("a fourth live peer while three are busy: {r:?}"),
        }
        pump(&hub.cq, &mut sh, &also);
    }
    assert!(refused > 0);
    assert!(sh.is_empty(), "{sh:?}");
    // Leaf 0 takes its message: its session goes idle and may end.
    let mut got = vec![0u8; BIG];
    let mut s0 = Vec::new();
    // SAFETY: got outlives the receive (waited for below).
    unsafe {
        leaves[0]
            .ep
            .recv(got.as_mut_ptr(), BIG, FI_ADDR_UNSPEC, 0x30)
    }
    .expect("recv");
    ok(
        wait_ctx(&leaves[0].cq, &mut s0, 0x30, T, &[&hub.ep], "recv"),
        "recv",
    );
    assert!(got == bigs[0]);
    let all: Vec<&ofi_core::object::Endpoint> = leaves.iter().map(|l| &l.ep).collect();
    ok(wait_ctx(&hub.cq, &mut sh, 0x10, T, &all, "send"), "send");
    // The fourth peer is taken now (once the idle session ended); every
    // leaf keeps making progress meanwhile.
    let mut dst = vec![0u8; 64];
    let mut s3 = Vec::new();
    // SAFETY: dst outlives the receive (waited for below).
    unsafe {
        leaves[3]
            .ep
            .recv(dst.as_mut_ptr(), 64, FI_ADDR_UNSPEC, 0x21)
    }
    .expect("recv");
    let t0 = Instant::now();
    loop {
        // SAFETY: small outlives the send (waited for below).
        match unsafe { hub.ep.send(small.as_ptr(), 64, to[3], 0x21) } {
            Ok(()) => break,
            Err(e) if e.code() == errno::FI_EAGAIN => refused += 1,
            Err(e) => panic!("send: {e}"),
        }
        pump(&hub.cq, &mut sh, &also);
        assert!(t0.elapsed() < T, "the fourth peer never got a session");
    }
    ok(wait_ctx(&hub.cq, &mut sh, 0x21, T, &all, "send"), "send");
    ok(
        wait_ctx(&leaves[3].cq, &mut s3, 0x21, T, &[&hub.ep], "recv"),
        "recv",
    );
    assert!(dst == small);
    eprintln!("the fourth peer waited through {refused} FI_EAGAIN");
    // The two still busy finish too.
    let mut gots = vec![vec![0u8; BIG]; 3];
    for k in 1..3 {
        // SAFETY: gots outlives the receives (waited for below).
        unsafe {
            leaves[k]
                .ep
                .recv(gots[k].as_mut_ptr(), BIG, FI_ADDR_UNSPEC, 0x40)
        }
        .expect("recv");
    }
    let everyone: Vec<&ofi_core::object::Endpoint> =
        leaves.iter().map(|l| &l.ep).chain([&hub.ep]).collect();
    for k in 1..3 {
        let mut sl = Vec::new();
        ok(
            wait_ctx(&leaves[k].cq, &mut sl, 0x40, T, &everyone, "recv"),
            "recv",
        );
        assert!(gots[k] == bigs[k]);
        ok(
            wait_ctx(&hub.cq, &mut sh, 0x10 + k, T, &all, "send"),
            "send",
        );
    }
    no_death(&hub);
}
