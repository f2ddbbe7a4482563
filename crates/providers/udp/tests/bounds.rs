//! What a peer can make an RDM endpoint hold is bounded, over loopback:
//! sends to a peer that posts no receive stay within tx_size and the copy
//! budgets and further posts answer FI_EAGAIN (never an error completion),
//! everything accepted arriving once the peer posts; a peer that stops
//! answering is declared dead though every send to it completed when
//! copied. Every test of this
//! file sets the same small tunables (one process: they are read when a
//! domain opens).
#![allow(unsafe_code)]

mod common;

use common::*;
use ofi_core::consts::*;
use ofi_core::error::errno;
use ofi_core::util::peer::{Cause, PeerDown};
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
    let mut accepted = 0usize;
    let mut eagain = 0;
    let deadline = Instant::now() + T;
    for (k, buf) in bufs.iter().enumerate() {
        // SAFETY: buf outlives the send (bufs lives to the end).
        match unsafe { a.ep.send(buf.as_ptr(), LEN, to_b, 100 + k) } {
            Ok(()) => accepted += 1,
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
    for (k, d) in dsts.iter().enumerate() {
        assert!(*d == bufs[k], "message {k} out of order or damaged");
    }
    // Each accepted send completes successfully (the ones refused never
    // were posted).
    for k in 0..accepted {
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
