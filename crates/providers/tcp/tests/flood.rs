//! Per-peer fair flow control on an RDM endpoint over loopback: a peer
//! floods the endpoint with tagged messages no receive will match until
//! the endpoint stops reading it (its unexpected budget is full), while
//! another peer runs a ping-pong in which each round also leaves one
//! unexpected message behind, then a rendezvous ping the endpoint answers
//! with a rendezvous pong. The ping-pong completes with correct data (a
//! generous bound only catches a stall: with one budget for all, the
//! second round's ping stayed behind an unexpected message that found no
//! room), and the unexpected messages are delivered at the end.
#![allow(unsafe_code)]

mod common;

use common::*;
use ofi_core::consts::*;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const FLOOD: u64 = 1;
const LEFT: u64 = 2;
const PING: u64 = 3;
const PONG: u64 = 4;
/// Flood message size (eager).
const FLOOD_LEN: usize = 16 << 10;
/// The message each round leaves unexpected.
const LEFT_LEN: usize = 8 << 10;
/// Ping and pong size (rendezvous).
const BIG: usize = 64 << 10;
const ROUNDS: usize = 100;
/// Bound for the whole ping-pong (catches a stall only).
const BOUND: Duration = Duration::from_secs(60);

fn loopback() -> Rdm {
    Rdm::open(&offer(ep_type::FI_EP_RDM, "127.0.0.1"))
}

/// The flooder: its own endpoint in this thread, 64 sends in flight to
/// `to` until `stop`; counts completed sends.
fn flood(to: Vec<u8>, stop: Arc<AtomicBool>, sent: Arc<AtomicUsize>) {
    let f = loopback();
    let dest = f.av.insert_one(&to).expect("insert");
    let buf = vec![0xf1u8; FLOOD_LEN];
    let mut inflight = 0usize;
    let mut done = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
        while inflight < 64 {
            // SAFETY: `buf` is never written and outlives the endpoint
            // (dropped after `f` at the end of this function).
            match unsafe { f.ep.tsend(buf.as_ptr(), FLOOD_LEN, dest, FLOOD, 1) } {
                Ok(()) => inflight += 1,
                Err(_) => break,
            }
        }
        done.clear();
        poll(&f.cq, &mut done);
        for d in &done {
            ok(*d, "flood send");
            inflight -= 1;
            sent.fetch_add(1, Ordering::Relaxed);
        }
        if done.is_empty() {
            std::thread::yield_now();
        }
    }
    // Pending sends fail when the endpoint closes; `buf` outlives it.
    drop(f);
    drop(buf);
}

#[test]
fn a_flooding_peer_does_not_stall_another_peers_ping_pong() {
    let e = loopback();
    let b = loopback();
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicUsize::new(0));
    let flooder = {
        let (to, stop, sent) = (e.ep.getname().unwrap(), stop.clone(), sent.clone());
        std::thread::spawn(move || flood(to, stop, sent))
    };
    // Let the flood fill E's budget: E reads until it stops taking F's
    // messages (F's completions stop growing while E is driven).
    let mut st = Vec::new();
    let t0 = Instant::now();
    let (mut last, mut since) = (0, Instant::now());
    while since.elapsed() < Duration::from_millis(500) {
        assert!(t0.elapsed() < BOUND, "the flood never filled the budget");
        poll(&e.cq, &mut st);
        let now = sent.load(Ordering::Relaxed);
        if now != last || now == 0 {
            (last, since) = (now, Instant::now());
        }
    }
    assert!(st.is_empty(), "E completed something: {st:?}");
    eprintln!("flood: {last} messages of {FLOOD_LEN} B written before E stopped reading");
    let e_to_b = e.av.insert_one(&b.ep.getname().unwrap()).unwrap();
    let b_to_e = b.av.insert_one(&e.ep.getname().unwrap()).unwrap();
    let mut ping = vec![0u8; BIG];
    let mut pong = vec![0u8; BIG];
    let mut e_in = vec![0u8; BIG];
    let mut b_in = vec![0u8; BIG];
    let lefts: Vec<Vec<u8>> = (0..ROUNDS)
        .map(|i| pattern(1000 + i as u64, LEFT_LEN))
        .collect();
    let mut bs = Vec::new();
    let t0 = Instant::now();
    for (i, left_msg) in lefts.iter().enumerate() {
        fill(&mut ping, i as u64);
        fill(&mut pong, 5000 + i as u64);
        // SAFETY: every buffer outlives the endpoints (dropped after them
        // at the end of the test) and is not touched while in use: each
        // operation is awaited below before its buffer is reused.
        unsafe {
            e.ep.trecv(e_in.as_mut_ptr(), BIG, FI_ADDR_UNSPEC, PING, 0, 0x10)
                .unwrap();
            b.ep.trecv(b_in.as_mut_ptr(), BIG, FI_ADDR_UNSPEC, PONG, 0, 0x20)
                .unwrap();
            b.ep.tsend(left_msg.as_ptr(), LEFT_LEN, b_to_e, LEFT, 0x21)
                .unwrap();
            b.ep.tsend(ping.as_ptr(), BIG, b_to_e, PING, 0x22).unwrap();
        }
        let left = BOUND.saturating_sub(t0.elapsed());
        ok(
            wait_ctx(&e.cq, &mut st, 0x10, left, &[&b.ep], "E's ping"),
            "ping",
        );
        assert!(e_in == ping, "round {i}: ping data");
        // SAFETY: pong outlives the send, awaited below; it is not touched
        // until then.
        unsafe { e.ep.tsend(pong.as_ptr(), BIG, e_to_b, PONG, 0x11) }.unwrap();
        let left = BOUND.saturating_sub(t0.elapsed());
        ok(
            wait_ctx(&b.cq, &mut bs, 0x20, left, &[&e.ep], "B's pong"),
            "pong",
        );
        assert!(b_in == pong, "round {i}: pong data");
        let left = BOUND.saturating_sub(t0.elapsed());
        ok(
            wait_ctx(&e.cq, &mut st, 0x11, left, &[&b.ep], "E's send"),
            "send",
        );
        for ctx in [0x21, 0x22] {
            let left = BOUND.saturating_sub(t0.elapsed());
            ok(
                wait_ctx(&b.cq, &mut bs, ctx, left, &[&e.ep], "B's send"),
                "send",
            );
        }
    }
    eprintln!("{ROUNDS} rounds during the flood in {:?}", t0.elapsed());
    // B's unexpected messages arrive whole and in order.
    let mut got = vec![0u8; LEFT_LEN];
    for (i, want) in lefts.iter().enumerate() {
        // SAFETY: got outlives the receive, awaited below before it is read.
        unsafe {
            e.ep.trecv(got.as_mut_ptr(), LEFT_LEN, FI_ADDR_UNSPEC, LEFT, 0, 0x30)
        }
        .unwrap();
        let d = ok(
            wait_ctx(&e.cq, &mut st, 0x30, BOUND, &[&b.ep], "left"),
            "left",
        );
        assert_eq!(d.len, LEFT_LEN);
        assert!(&got == want, "unexpected message {i}");
    }
    stop.store(true, Ordering::Relaxed);
    flooder.join().expect("flooder");
    drop(e);
    drop(b);
}
