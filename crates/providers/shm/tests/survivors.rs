//! Survivors of a dead shm peer (a child process of this test binary):
//! the peer-death mechanism of `ofi_core::util::peer` as the shm provider
//! implements it, without any other channel telling the survivor.
//!
//! - Killed (SIGKILL) while the survivor idles between messages, and at
//!   three moments of a running ping-pong: the survivor's event queue
//!   reports it once, naming it (fid = endpoint context, data = its
//!   fi_addr, err_data = its address, err = FI_ECONNRESET); the receive
//!   directed at it fails with the same number, a receive from any source
//!   stays posted, a directed receive posted afterwards fails at once and a
//!   send to it is refused, without a second report.
//! - Its endpoint closed while its process lives on: the same report, but
//!   logged as an orderly close (info), not as a death (warn).
//! - Stopped (SIGSTOP) while the survivor waits on it (a rendezvous send
//!   sits unread in its ring): declared dead by silence after
//!   FI_SHM_PEER_TIMEOUT_MS, FI_ETIMEDOUT for the send, the directed
//!   receive and the report.
#![allow(unsafe_code)]

mod common;

use common::child::*;
use common::rdm::*;
use ofi_core::consts::*;
use ofi_core::error::errno;
use ofi_core::util::eq::EqError;
use ofi_core::util::peer::{Cause, PeerDown};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bound for the survivor to see its peer's death (the liveness check
/// runs every 20 ms: this only catches a hang).
const DEATH_BOUND: Duration = Duration::from_secs(10);
/// Bound for setup steps.
const STEP: Duration = Duration::from_secs(30);
/// The endpoint context the survivor's EQ reports as fid.
const EP_CTX: usize = 0x5eed;
/// The peer timeout of the survivor of a stopped peer.
const SHORT_TIMEOUT_MS: &str = "300";

const PING: u64 = 1;
const NEVER_DIRECTED: u64 = 2;
const NEVER_ANY: u64 = 3;
const BIG: usize = 1 << 20;

/// Child role "echo": sends back every 8-byte PING it receives until
/// killed (or 120 s); on the line CLOSE it closes its endpoint, says
/// CLOSED and lives on.
fn role_echo() {
    let r = Rdm::open(&shm_offer(FI_TAGGED, None), 0);
    tell(&format!("ADDR {}", hex(&r.ep.getname().expect("getname"))));
    let peer =
        r.av.insert_one(&unhex(&listen("PEER ")))
            .expect("insert peer");
    let close = Arc::new(AtomicBool::new(false));
    let c = close.clone();
    std::thread::spawn(move || {
        listen("CLOSE");
        c.store(true, Ordering::Release);
    });
    let mut buf = [0u8; 8];
    // SAFETY: buf outlives the endpoint (dropped below, before buf).
    unsafe { r.ep.trecv(buf.as_mut_ptr(), 8, FI_ADDR_UNSPEC, PING, 0, 1) }.expect("trecv");
    tell("READY");
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut done = Vec::new();
    while Instant::now() < deadline && !close.load(Ordering::Acquire) {
        done.clear();
        poll(&r.cq, &mut done);
        for d in &done {
            if d.ctx() == 1 {
                ok(*d, "echo receive");
                let out = buf;
                r.ep.tinject(&out, peer, PING).expect("echo");
                // SAFETY: buf outlives the endpoint (r is dropped below,
                // before buf), and the receive that filled it has completed,
                // so this is again the only operation writing it.
                unsafe { r.ep.trecv(buf.as_mut_ptr(), 8, FI_ADDR_UNSPEC, PING, 0, 1) }
                    .expect("trecv");
            }
        }
    }
    drop(r);
    tell("CLOSED");
    std::thread::sleep(Duration::from_secs(120));
}

/// The next EQ error entry, waiting (and driving progress through the
/// CQ) up to `bound`.
fn eq_error(r: &Rdm, bound: Duration, stash: &mut Vec<Done>) -> Option<EqError> {
    let t0 = Instant::now();
    while t0.elapsed() < bound {
        match r.eq.read() {
            Err(e) if e.code() == errno::FI_EAVAIL => {
                return Some(r.eq.readerr().expect("eq readerr"))
            }
            Err(e) if e.is_again() => {}
            Ok(ev) => panic!("unexpected EQ event {}", ev.event),
            Err(e) => panic!("eq read: {e}"),
        }
        poll(&r.cq, stash);
    }
    None
}

/// How the echo child goes.
#[derive(Clone, Copy, Debug)]
enum Death {
    /// SIGKILL after a few round trips, while the survivor idles.
    KillIdle,
    /// SIGKILL this long into a ping-pong that runs until the death shows.
    KillAfter(Duration),
    /// SIGKILL (and reaped) before the survivor first reaches it: the
    /// first send finds nothing alive to map.
    KillFirst,
    /// Its endpoint closes (the process lives on).
    Close,
}

/// Ping-pongs 8 bytes with the echo child until it dies as `how` says,
/// then checks what the survivor sees.
fn survive(how: Death) {
    // This thread drives the survivor's progress: its log is what the
    // survivor says of the death.
    let log = ofi_testkit::log::LogCapture::start();
    let me = Rdm::open(&shm_offer(FI_TAGGED | FI_DIRECTED_RECV, None), EP_CTX);
    let mut kid = Kid::spawn("echo", self_cmd("survivors_of_a_dead_peer", "echo"));
    let name = unhex(&kid.expect("ADDR ", STEP));
    let peer = me.av.insert_one(&name).expect("insert child");
    kid.say(&format!("PEER {}", hex(&me.ep.getname().expect("getname"))));
    kid.expect("READY", STEP);
    let mut directed = [0u8; 8];
    let mut any = [0u8; 8];
    // SAFETY: both buffers outlive the endpoint (`me` is dropped first).
    unsafe {
        me.ep
            .trecv(directed.as_mut_ptr(), 8, peer, NEVER_DIRECTED, 0, 0xd1)
            .expect("directed trecv");
        me.ep
            .trecv(any.as_mut_ptr(), 8, FI_ADDR_UNSPEC, NEVER_ANY, 0, 0xa1)
            .expect("undirected trecv");
    }
    let mut buf = [0u8; 8];
    let mut stash = Vec::new();
    let mut rounds = 0u64;
    let pid = kid.pid() as i32;
    let killer = match how {
        Death::KillAfter(d) => Some(std::thread::spawn(move || {
            std::thread::sleep(d);
            // SAFETY: SIGKILL to our own child by its pid; `kid` reaps it.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        })),
        _ => None,
    };
    let mut t0 = None;
    if matches!(how, Death::KillFirst) {
        kid.kill();
        t0 = Some(Instant::now());
    }
    let report = loop {
        // SAFETY: buf outlives the endpoint; awaited or left posted.
        unsafe {
            me.ep
                .trecv(buf.as_mut_ptr(), 8, FI_ADDR_UNSPEC, PING, 0, 0x10)
        }
        .expect("ping trecv");
        // After the death the inject may be refused at once: the EQ tells.
        let _ = me.ep.tinject(&rounds.to_le_bytes(), peer, PING);
        let deadline = Instant::now() + STEP;
        let mut back = false;
        while !back && Instant::now() < deadline {
            if let Some(i) = stash.iter().position(|d: &Done| d.ctx() == 0x10) {
                ok(stash.remove(i), "pong");
                back = true;
                break;
            }
            match me.eq.read() {
                Err(e) if e.code() == errno::FI_EAVAIL => break,
                Err(e) if e.is_again() => {}
                r => panic!("eq read: {r:?}"),
            }
            poll(&me.cq, &mut stash);
        }
        if !back {
            t0.get_or_insert_with(Instant::now);
            break eq_error(&me, DEATH_BOUND, &mut stash)
                .expect("no EQ report within the bound after the peer's death");
        }
        rounds += 1;
        if rounds == 5 && matches!(how, Death::KillIdle | Death::Close) {
            match how {
                Death::Close => {
                    kid.say("CLOSE");
                    kid.expect("CLOSED", STEP);
                }
                _ => kid.kill(),
            }
            t0 = Some(Instant::now());
            break eq_error(&me, DEATH_BOUND, &mut stash)
                .expect("no EQ report within the bound after the idle peer's death");
        }
        assert!(rounds < 100_000_000, "the peer never died");
    };
    let took = t0.map(|t| t.elapsed()).unwrap_or_default();
    if let Some(k) = killer {
        k.join().expect("killer thread");
    }
    eprintln!("{how:?} after {rounds} round trips: {report:?} within {took:?}");
    let down = PeerDown::from_eq_error(&report).expect("the EQ entry is a death report");
    assert_eq!(
        report.fid, EP_CTX,
        "the report's fid is the endpoint context"
    );
    assert_eq!(down.fi_addr, peer, "the report names the peer's fi_addr");
    assert_eq!(down.addr, name, "the report carries the peer's address");
    assert_eq!(down.cause, Cause::Reset, "cause");
    // A closed endpoint is an orderly end, logged at info level; a killed
    // process is a fault, logged as a death.
    let text = log.text();
    let (said, not) = match how {
        Death::Close => ("peer closed its endpoint", "peer declared dead"),
        _ => ("peer declared dead", "peer closed its endpoint"),
    };
    assert!(
        text.contains(said) && !text.contains(not),
        "{how:?}: the survivor's log should say \"{said}\" only:\n{text}"
    );
    let err = down.cause.errno();
    match wait_ctx(&me.cq, &mut stash, 0xd1, DEATH_BOUND, "directed receive") {
        Done::Err(e) => assert_eq!(e.err, err, "directed receive's error"),
        Done::Ok(_) => panic!("a receive directed at a dead peer completed"),
    }
    let mut late = [0u8; 8];
    // SAFETY: late outlives the endpoint.
    unsafe {
        me.ep
            .trecv(late.as_mut_ptr(), 8, peer, NEVER_DIRECTED, 0, 0xd2)
    }
    .expect("late directed trecv");
    match wait_ctx(&me.cq, &mut stash, 0xd2, STEP, "late directed receive") {
        Done::Err(e) => assert_eq!(e.err, err, "late directed receive's error"),
        Done::Ok(_) => panic!("a receive directed at a dead peer completed"),
    }
    // Nothing lives at its address now: a send is refused at once.
    let e = me
        .ep
        .tinject(b"ghost", peer, PING)
        .expect_err("a send to a dead peer");
    assert_eq!(e.code(), errno::FI_ECONNREFUSED, "{e}");
    assert!(
        eq_error(&me, Duration::from_millis(300), &mut stash).is_none(),
        "a second report of one death"
    );
    assert!(
        stash.iter().all(|d| d.ctx() != 0xa1),
        "a receive from any source completed after the death: {stash:?}"
    );
    drop(me);
    kid.kill();
}

/// See the module documentation (killed, closed).
#[test]
fn survivors_of_a_dead_peer() {
    match role().as_deref() {
        Some("echo") => child_main(role_echo),
        Some(r) => panic!("unknown role {r}"),
        None => {}
    }
    survive(Death::KillIdle);
    survive(Death::KillFirst);
    for ms in [0, 30, 200] {
        survive(Death::KillAfter(Duration::from_millis(ms)));
    }
    survive(Death::Close);
}

/// Child role "waiter" (run with a short FI_SHM_PEER_TIMEOUT_MS): sends a
/// rendezvous message to the peer the parent names (and stops), with a
/// receive directed at it, and reports what it sees: `REPORT <cause
/// errno> <send errno> <directed receive errno>`.
fn role_waiter() {
    let me = Rdm::open(&shm_offer(FI_TAGGED | FI_DIRECTED_RECV, None), EP_CTX);
    let peer = me
        .av
        .insert_one(&unhex(&listen("PEER ")))
        .expect("insert peer");
    let mut directed = [0u8; 8];
    // SAFETY: the buffers outlive the endpoint (dropped at exit).
    unsafe {
        me.ep
            .trecv(directed.as_mut_ptr(), 8, peer, NEVER_DIRECTED, 0, 0xd1)
            .expect("directed trecv");
    }
    let big = vec![7u8; BIG];
    tell("READY");
    listen("GO");
    // SAFETY: big outlives the endpoint.
    unsafe { me.ep.tsend(big.as_ptr(), BIG, peer, PING, 0x5e) }.expect("tsend");
    let mut stash = Vec::new();
    let report = eq_error(&me, DEATH_BOUND, &mut stash).expect("no report of the silent peer");
    let down = PeerDown::from_eq_error(&report).expect("a death report");
    assert_eq!(down.fi_addr, peer, "the report names the peer");
    let code = |d: Done| match d {
        Done::Err(e) => e.err,
        Done::Ok(_) => 0,
    };
    let send = code(wait_ctx(&me.cq, &mut stash, 0x5e, STEP, "send"));
    let dir = code(wait_ctx(&me.cq, &mut stash, 0xd1, STEP, "directed receive"));
    tell(&format!("REPORT {} {send} {dir}", report.err));
    listen("EXIT");
}

/// See the module documentation (stopped).
#[test]
fn survivor_of_a_stopped_peer_times_out() {
    match role().as_deref() {
        Some("echo") => child_main(role_echo),
        Some("waiter") => child_main(role_waiter),
        Some(r) => panic!("unknown role {r}"),
        None => {}
    }
    let name = "survivor_of_a_stopped_peer_times_out";
    let mut stopped = Kid::spawn("echo", self_cmd(name, "echo"));
    let addr = stopped.expect("ADDR ", STEP);
    let mut waiter_cmd = self_cmd(name, "waiter");
    waiter_cmd.env("FI_SHM_PEER_TIMEOUT_MS", SHORT_TIMEOUT_MS);
    let mut waiter = Kid::spawn("waiter", waiter_cmd);
    waiter.say(&format!("PEER {addr}"));
    waiter.expect("READY", STEP);
    stopped.stop();
    let t0 = Instant::now();
    waiter.say("GO");
    let report = waiter.expect("REPORT ", STEP);
    let took = t0.elapsed();
    stopped.signal(libc::SIGCONT);
    stopped.kill();
    waiter.say("EXIT");
    eprintln!("stopped peer: {report} after {took:?}");
    let te = errno::FI_ETIMEDOUT.to_string();
    assert_eq!(
        report.split(' ').collect::<Vec<_>>(),
        vec![te.as_str(); 3],
        "report, send and directed receive all FI_ETIMEDOUT"
    );
    assert!(
        took >= Duration::from_millis(300),
        "declared dead before its timeout"
    );
}
