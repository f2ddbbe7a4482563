//! A peer process killed with SIGKILL in the middle of a stream of large
//! RDM messages over loopback (127.0.0.1).
//!
//! - The receiver dies: the surviving sender (this process) gets an error
//!   completion for every send still pending within a bounded time, a new
//!   send to the dead address fails instead of hanging, and a new peer can
//!   then exchange messages with the survivor.
//! - The sender dies: the surviving receiver's receives bound to that
//!   connection complete with errors or stay posted (none may be stuck on
//!   the dead connection, none may complete with partial data), and a new
//!   peer's messages then fill every posted receive.
//!
//! The peers are children of this test binary (role in an environment
//! variable, addresses over stdin/stdout lines).
#![allow(unsafe_code)]

mod common;

use common::*;
use ofi_core::consts::*;
use std::time::{Duration, Instant};

/// Size of the streamed messages (rendezvous, several DATA chunks).
const BIG: usize = 8 << 20;
/// Operations in flight on each side.
const DEPTH: usize = 4;
/// Bound for the survivor to see the death of its peer.
const DEATH_BOUND: Duration = Duration::from_secs(10);
/// Bound for setup steps.
const STEP: Duration = Duration::from_secs(30);

const COUNT_ENV: &str = "OFI_TCP_TEST_COUNT";
const SEQ_ENV: &str = "OFI_TCP_TEST_SEQ0";

const RECEIVER_TEST: &str = "receiver_killed_mid_transfer";
const SENDER_TEST: &str = "sender_killed_mid_transfer";

fn loopback() -> Rdm {
    Rdm::open(&offer(ep_type::FI_EP_RDM, "127.0.0.1"))
}

/// Child: opens an endpoint, prints ADDR, learns PEER.
fn child_endpoint() -> (Rdm, u64) {
    let r = loopback();
    tell(&format!("ADDR {}", hex(&r.ep.getname().expect("getname"))));
    let peer =
        r.av.insert_one(&unhex(&listen("PEER ")))
            .expect("insert peer");
    (r, peer)
}

/// Child role "sink": keeps DEPTH receives of BIG bytes posted, checks
/// every message (stamped), prints `GOT seq len`. Runs until killed, or
/// until the parent says EXIT (then closes normally).
fn role_sink() {
    let (r, _peer) = child_endpoint();
    let mut bufs: Vec<Vec<u8>> = (0..DEPTH).map(|_| vec![0u8; BIG]).collect();
    for (i, b) in bufs.iter_mut().enumerate() {
        // SAFETY: bufs outlive the receives (the process exits or is killed
        // with them posted; they are never freed before).
        unsafe { r.ep.recv(b.as_mut_ptr(), BIG, FI_ADDR_UNSPEC, i) }.expect("recv");
    }
    tell("READY");
    // Stdin is watched by a thread: EXIT ends the role.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        linger();
        let _ = tx.send(());
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut done = Vec::new();
    while rx.try_recv().is_err() {
        assert!(Instant::now() < deadline, "sink: still running after 120 s");
        done.clear();
        if poll(&r.cq, &mut done) == 0 {
            std::thread::yield_now();
        }
        for d in &done {
            let e = ok(*d, "sink receive");
            let i = e.op_context;
            let seq = check_stamp(&bufs[i], e.len).unwrap_or_else(|m| panic!("sink: {m}"));
            tell(&format!("GOT {seq} {}", e.len));
            // SAFETY: bufs outlive the receives (never freed while the process runs);
            // buffer i is free again (its receive completed).
            unsafe { r.ep.recv(bufs[i].as_mut_ptr(), BIG, FI_ADDR_UNSPEC, i) }.expect("repost");
        }
    }
    std::mem::forget(bufs);
}

/// Child role "source": sends stamped BIG messages starting at seq SEQ0,
/// DEPTH in flight; COUNT messages (then prints `SENT ALL` and waits for
/// EXIT) or forever (COUNT=0) until killed.
fn role_source() {
    let count: u64 = std::env::var(COUNT_ENV).unwrap().parse().unwrap();
    let seq0: u64 = std::env::var(SEQ_ENV).unwrap().parse().unwrap();
    let (r, peer) = child_endpoint();
    tell("READY");
    listen("GO");
    let mut bufs: Vec<Vec<u8>> = (0..DEPTH).map(|_| vec![0u8; BIG]).collect();
    let mut busy = [false; DEPTH];
    let (mut posted, mut completed) = (0u64, 0u64);
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut done = Vec::new();
    while count == 0 || completed < count {
        assert!(
            Instant::now() < deadline,
            "source: still running after 120 s"
        );
        for i in 0..DEPTH {
            if busy[i] || (count != 0 && posted >= count) {
                continue;
            }
            stamp(&mut bufs[i], seq0 + posted);
            // SAFETY: bufs[i] is left alone until this send completes.
            unsafe { r.ep.send(bufs[i].as_ptr(), BIG, peer, i) }.expect("send");
            busy[i] = true;
            posted += 1;
        }
        done.clear();
        if poll(&r.cq, &mut done) == 0 {
            std::thread::yield_now();
        }
        for d in &done {
            let e = ok(*d, "source send");
            busy[e.op_context] = false;
            completed += 1;
        }
    }
    tell("SENT ALL");
    linger();
}

// ------------------------------------------------------------- parent helpers

fn spawn(test: &str, role: &str, env: &[(&str, &str)]) -> Kid {
    let mut c = self_cmd(test, role);
    for (k, v) in env {
        c.env(k, v);
    }
    Kid::spawn(role, c)
}

/// Introduces a child to `me`; the child's fi_addr in `me`'s AV.
fn introduce(me: &Rdm, kid: &mut Kid) -> u64 {
    let a = me
        .av
        .insert_one(&unhex(&kid.expect("ADDR ", STEP)))
        .expect("insert child");
    kid.say(&format!("PEER {}", hex(&me.ep.getname().unwrap())));
    kid.expect("READY", STEP);
    a
}

// ------------------------------------------------------------- the tests

/// The receiving child dies with four 8 MiB sends of ours in flight: each
/// pending send must finish (an error for at least one) within
/// DEATH_BOUND; a send to the dead address fails; a new peer works.
#[test]
fn receiver_killed_mid_transfer() {
    match role().as_deref() {
        Some("sink") => child_main(role_sink),
        Some(r) => panic!("unknown role {r}"),
        None => {}
    }
    // Declared before the endpoint: dropped after it, even on a panic.
    let mut bufs: Vec<Vec<u8>> = (0..DEPTH).map(|_| vec![0u8; BIG]).collect();
    let me = loopback();
    let mut kid = spawn(RECEIVER_TEST, "sink", &[]);
    let dead = introduce(&me, &mut kid);
    let mut busy = [false; DEPTH];
    let mut seq = 0u64;
    let mut got = 0;
    let mut done = Vec::new();
    let deadline = Instant::now() + STEP;
    // Stream until the child has checked three messages.
    while got < 3 {
        assert!(
            Instant::now() < deadline,
            "the sink checked only {got} messages in {STEP:?}"
        );
        for i in 0..DEPTH {
            if !busy[i] {
                stamp(&mut bufs[i], seq);
                // SAFETY: bufs[i] is left alone until this send completes;
                // bufs outlives the endpoint.
                unsafe { me.ep.send(bufs[i].as_ptr(), BIG, dead, i) }.expect("send");
                busy[i] = true;
                seq += 1;
            }
        }
        done.clear();
        poll(&me.cq, &mut done);
        for d in &done {
            busy[ok(*d, "send before the kill").op_context] = false;
        }
        while let Some(l) = kid.try_line() {
            if l.starts_with("GOT ") {
                got += 1;
            }
        }
    }
    let pending = busy.iter().filter(|b| **b).count();
    assert!(pending > 0, "no send pending when killing the receiver");
    kid.kill();
    let t0 = Instant::now();
    let (mut oks, mut errs) = (0, Vec::new());
    while busy.iter().any(|b| *b) {
        assert!(
            t0.elapsed() < DEATH_BOUND,
            "{} of {pending} sends still pending {DEATH_BOUND:?} after the receiver was killed (ok {oks}, errors {errs:?})",
            busy.iter().filter(|b| **b).count()
        );
        done.clear();
        poll(&me.cq, &mut done);
        for d in &done {
            busy[d.ctx()] = false;
            match d {
                Done::Ok(_) => oks += 1,
                Done::Err(e) => errs.push((errno_name(e.err), e.err, t0.elapsed())),
            }
        }
    }
    eprintln!(
        "receiver killed with {pending} sends pending: {oks} completed, errors {errs:?} (all within {:?})",
        t0.elapsed()
    );
    assert!(
        !errs.is_empty(),
        "the receiver died with {pending} 8 MiB sends pending and all completed successfully"
    );
    // A new send to the dead peer fails (refused) instead of hanging.
    let probe = pattern(5, 100);
    let t1 = Instant::now();
    // SAFETY: probe outlives the send, awaited below.
    match unsafe { me.ep.send(probe.as_ptr(), probe.len(), dead, 0x99) } {
        Err(e) => eprintln!("send to the dead peer refused at once: {e}"),
        Ok(()) => {
            let mut st = Vec::new();
            let d = wait_ctx(
                &me.cq,
                &mut st,
                0x99,
                DEATH_BOUND,
                &[],
                "send to the dead peer",
            );
            match d {
                Done::Err(e) => eprintln!(
                    "send to the dead peer failed after {:?}: {}",
                    t1.elapsed(),
                    errno_name(e.err)
                ),
                Done::Ok(_) => panic!("a send to a dead peer completed successfully"),
            }
        }
    }
    // A new peer can talk to the survivor.
    let mut kid2 = spawn(RECEIVER_TEST, "sink", &[]);
    let fresh = introduce(&me, &mut kid2);
    let sizes = [8usize, 4096, 16385, 100_000, BIG];
    let msgs: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let mut v = vec![0u8; n];
            stamp(&mut v, 1000 + i as u64);
            v
        })
        .collect();
    let mut st = Vec::new();
    for (i, m) in msgs.iter().enumerate() {
        // SAFETY: msgs outlive the sends, awaited below.
        unsafe { me.ep.send(m.as_ptr(), m.len(), fresh, 0x200 + i) }.expect("send to new peer");
    }
    for i in 0..msgs.len() {
        ok(
            wait_ctx(
                &me.cq,
                &mut st,
                0x200 + i,
                STEP,
                &[],
                "send to the new peer",
            ),
            "send to the new peer",
        );
    }
    for (i, &n) in sizes.iter().enumerate() {
        let l = kid2.expect("GOT ", STEP);
        assert_eq!(l, format!("{} {n}", 1000 + i), "the new peer's receive {i}");
    }
    kid2.say("EXIT");
    kid2.finish(STEP);
    drop(me);
    drop(bufs);
}

/// The sending child dies in the middle of a stream into our four posted
/// 8 MiB receives: receives complete with errors or stay posted, none
/// completes with partial data, and a new peer's four messages then fill
/// all four (a receive stuck on the dead connection would leave one short).
#[test]
fn sender_killed_mid_transfer() {
    match role().as_deref() {
        Some("source") => child_main(role_source),
        Some(r) => panic!("unknown role {r}"),
        None => {}
    }
    // Declared before the endpoint: dropped after it, even on a panic.
    let mut bufs: Vec<Vec<u8>> = (0..DEPTH).map(|_| vec![0u8; BIG]).collect();
    let me = loopback();
    let mut posted = [false; DEPTH];
    let post = |bufs: &mut Vec<Vec<u8>>, posted: &mut [bool; DEPTH], i: usize| {
        // SAFETY: the endpoint is dropped before `bufs` (declaration order,
        // and explicitly at the end); a posted buffer is not touched until
        // its receive completes.
        unsafe { me.ep.recv(bufs[i].as_mut_ptr(), BIG, FI_ADDR_UNSPEC, i) }.expect("recv");
        posted[i] = true;
    };
    for i in 0..DEPTH {
        post(&mut bufs, &mut posted, i);
    }
    let mut kid = spawn(SENDER_TEST, "source", &[(COUNT_ENV, "0"), (SEQ_ENV, "0")]);
    introduce(&me, &mut kid);
    kid.say("GO");
    let mut got = 0;
    let mut done = Vec::new();
    let deadline = Instant::now() + STEP;
    while got < 3 {
        assert!(
            Instant::now() < deadline,
            "received only {got} messages in {STEP:?}"
        );
        done.clear();
        poll(&me.cq, &mut done);
        for d in &done {
            let e = ok(*d, "receive before the kill");
            let i = e.op_context;
            posted[i] = false;
            check_stamp(&bufs[i], e.len).unwrap_or_else(|m| panic!("{m}"));
            assert_eq!(e.len, BIG);
            got += 1;
            post(&mut bufs, &mut posted, i);
        }
    }
    // Mid-transfer: we stopped reading, the sender's DATA fills the socket.
    kid.kill();
    let t0 = Instant::now();
    let mut errs = Vec::new();
    let mut late_ok = 0;
    // The kernel closes a killed process's sockets at once: give the
    // survivor a few seconds to see it.
    while t0.elapsed() < Duration::from_secs(3) {
        done.clear();
        if poll(&me.cq, &mut done) == 0 {
            std::thread::yield_now();
        }
        for d in &done {
            let i = d.ctx();
            posted[i] = false;
            match d {
                Done::Ok(e) => {
                    // Only a message that arrived whole may complete.
                    check_stamp(&bufs[i], e.len).unwrap_or_else(|m| {
                        panic!("a receive completed after the sender died with bad data: {m}")
                    });
                    assert_eq!(e.len, BIG, "receive completed after the sender died");
                    late_ok += 1;
                }
                Done::Err(e) => errs.push((i, errno_name(e.err), e.err, t0.elapsed())),
            }
        }
    }
    eprintln!(
        "sender killed: {late_ok} receive(s) completed whole, error completions {errs:?}, {} still posted",
        posted.iter().filter(|p| **p).count()
    );
    for i in 0..DEPTH {
        if !posted[i] {
            post(&mut bufs, &mut posted, i);
        }
    }
    // A new sender fills all four receives.
    let mut kid2 = spawn(
        SENDER_TEST,
        "source",
        &[(COUNT_ENV, "4"), (SEQ_ENV, "1000")],
    );
    introduce(&me, &mut kid2);
    kid2.say("GO");
    let mut seqs = Vec::new();
    let deadline = Instant::now() + STEP;
    while seqs.len() < DEPTH {
        assert!(
            Instant::now() < deadline,
            "after the sender's death only {} of {DEPTH} posted receives took the new peer's messages {seqs:?} within {STEP:?}: the others are stuck (posted {posted:?})",
            seqs.len()
        );
        done.clear();
        if poll(&me.cq, &mut done) == 0 {
            std::thread::yield_now();
        }
        for d in &done {
            let e = match d {
                Done::Ok(e) => e,
                Done::Err(e) => panic!(
                    "error completion {} ({}) ctx {} more than 3 s after the sender died, while a new peer sends",
                    e.err,
                    errno_name(e.err),
                    e.op_context
                ),
            };
            posted[e.op_context] = false;
            let s = check_stamp(&bufs[e.op_context], e.len).unwrap_or_else(|m| panic!("{m}"));
            assert!(
                s >= 1000,
                "message {s} of the dead sender arrived after its death"
            );
            seqs.push(s);
        }
    }
    seqs.sort_unstable();
    assert_eq!(seqs, [1000, 1001, 1002, 1003]);
    kid2.expect("SENT ALL", STEP);
    kid2.say("EXIT");
    kid2.finish(STEP);
    drop(me);
    drop(bufs);
}
