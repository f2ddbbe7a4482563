//! Survivors of a peer killed with SIGKILL (a child process of this test
//! binary) at several points, over loopback: the peer-death mechanism of
//! `ofi_core::util::peer` as the tcp provider implements it.
//!
//! RDM: whether the peer dies while the connection is idle between
//! messages or in the middle of a ping-pong, the survivor's event queue
//! reports it once, naming it (fid = endpoint context, data = its fi_addr,
//! err_data = its address, err = FI_ECONNRESET), the receive directed at it
//! fails with the same number, a receive from any source stays posted, a
//! directed receive posted afterwards fails at once and a send to it fails
//! (connection refused) without a second report; all within the bound.
//! MSG: a peer killed mid-stream turns every pending send and the posted
//! receive into errors and the EQ reports FI_SHUTDOWN within the bound.
#![allow(unsafe_code)]

mod common;

use common::*;
use ofi_core::consts::*;
use ofi_core::error::errno;
use ofi_core::object::*;
use ofi_core::util::cq::CqAttr;
use ofi_core::util::eq::{EqAttr, EqError};
use ofi_core::util::peer::{Cause, PeerDown};
use std::time::{Duration, Instant};

/// Bound for the survivor to see its peer's death (the kernel closes a
/// killed process's sockets at once: this only catches a hang).
const DEATH_BOUND: Duration = Duration::from_secs(10);
/// Bound for setup steps.
const STEP: Duration = Duration::from_secs(30);
/// The endpoint context the survivor's EQ reports as fid.
const EP_CTX: usize = 0x5eed;

const PING: u64 = 1;
const NEVER_DIRECTED: u64 = 2;
const NEVER_ANY: u64 = 3;

fn loopback() -> Rdm {
    Rdm::open(&offer(ep_type::FI_EP_RDM, "127.0.0.1"))
}

/// Child role "echo": sends back every 8-byte PING it receives, until
/// killed (or 120 s).
fn role_echo() {
    let r = loopback();
    tell(&format!("ADDR {}", hex(&r.ep.getname().expect("getname"))));
    let peer =
        r.av.insert_one(&unhex(&listen("PEER ")))
            .expect("insert peer");
    let mut buf = [0u8; 8];
    // SAFETY: buf lives until the process ends (killed or exit below).
    unsafe { r.ep.trecv(buf.as_mut_ptr(), 8, FI_ADDR_UNSPEC, PING, 0, 1) }.expect("trecv");
    tell("READY");
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut done = Vec::new();
    while Instant::now() < deadline {
        done.clear();
        poll(&r.cq, &mut done);
        for d in &done {
            if d.ctx() == 1 {
                ok(*d, "echo receive");
                let out = buf;
                // SAFETY: 8 bytes copied to the stack of this loop, sent as
                // an inject (copied at the call).
                r.ep.tinject(&out, peer, PING).expect("echo");
                // SAFETY: as for the first post.
                unsafe { r.ep.trecv(buf.as_mut_ptr(), 8, FI_ADDR_UNSPEC, PING, 0, 1) }
                    .expect("trecv");
            }
        }
    }
    std::process::exit(0);
}

/// The next EQ error entry, waiting (and driving progress through the CQ)
/// up to `bound`; `None` if none came.
fn eq_error(r: &Rdm, bound: Duration, stash: &mut Vec<Done>) -> Option<(EqError, Duration)> {
    let t0 = Instant::now();
    while t0.elapsed() < bound {
        match r.eq.read() {
            Err(e) if e.code() == errno::FI_EAVAIL => {
                return Some((r.eq.readerr().expect("eq readerr"), t0.elapsed()))
            }
            Err(e) if e.is_again() => {}
            Ok(ev) => panic!("unexpected EQ event {}", ev.event),
            Err(e) => panic!("eq read: {e}"),
        }
        poll(&r.cq, stash);
    }
    None
}

/// Ping-pongs 8 bytes with the echo child; `kill_after`: None kills it
/// while the connection is idle (after a few round trips), Some(d) from
/// another thread `d` into a ping-pong that runs until the death shows.
/// The reported cause must be one of `causes`.
fn survive(kill_after: Option<Duration>, causes: &[Cause]) {
    let me = Rdm::open_ctx(&offer(ep_type::FI_EP_RDM, "127.0.0.1"), EP_CTX);
    let mut kid = Kid::spawn("echo", self_cmd("rdm_survivor_of_a_killed_peer", "echo"));
    let name = unhex(&kid.expect("ADDR ", STEP));
    let peer = me.av.insert_one(&name).expect("insert child");
    kid.say(&format!("PEER {}", hex(&me.ep.getname().unwrap())));
    kid.expect("READY", STEP);
    let mut directed = [0u8; 8];
    let mut any = [0u8; 8];
    // SAFETY: both buffers outlive the endpoint (`me` is dropped first
    // below); neither is touched while posted.
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
    let killer = kill_after.map(|d| {
        std::thread::spawn(move || {
            std::thread::sleep(d);
            // SAFETY: signals our own child by pid; it is reaped by `kid`.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        })
    });
    let mut t0 = None;
    let report = loop {
        // One round trip: receive posted, ping sent, pong awaited.
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
            if t0.is_none() {
                t0 = Some(Instant::now());
            }
            let (e, _) = eq_error(&me, DEATH_BOUND, &mut stash)
                .expect("no EQ report within the bound after the peer's death");
            break e;
        }
        rounds += 1;
        if kill_after.is_none() && rounds == 5 {
            // Idle: nothing in flight but the posted receives.
            kid.kill();
            t0 = Some(Instant::now());
            let (e, _) = eq_error(&me, DEATH_BOUND, &mut stash)
                .expect("no EQ report within the bound after the idle peer's death");
            break e;
        }
        assert!(rounds < 10_000_000, "the peer was never killed");
    };
    let took = t0.map(|t| t.elapsed()).unwrap_or_default();
    if let Some(k) = killer {
        k.join().expect("killer thread");
    }
    kid.kill();
    eprintln!("after {rounds} round trips: {report:?} within {took:?}");
    let down = PeerDown::from_eq_error(&report).expect("the EQ entry is a death report");
    assert_eq!(
        report.fid, EP_CTX,
        "the report's fid is the endpoint's context"
    );
    assert_eq!(down.fi_addr, peer, "the report names the peer's fi_addr");
    assert_eq!(down.addr, name, "the report carries the peer's address");
    assert!(
        causes.contains(&down.cause),
        "cause {:?}, expected one of {causes:?}",
        down.cause
    );
    let err = down.cause.errno();
    // The directed receive failed with the same number; the other stays.
    let d = wait_ctx(
        &me.cq,
        &mut stash,
        0xd1,
        DEATH_BOUND,
        &[],
        "directed receive",
    );
    match d {
        Done::Err(e) => assert_eq!(e.err, err, "directed receive's error"),
        Done::Ok(_) => panic!("a receive directed at a dead peer completed"),
    }
    // A directed receive posted now fails at once.
    let mut late = [0u8; 8];
    // SAFETY: late outlives the endpoint.
    unsafe {
        me.ep
            .trecv(late.as_mut_ptr(), 8, peer, NEVER_DIRECTED, 0, 0xd2)
    }
    .expect("late directed trecv");
    match wait_ctx(&me.cq, &mut stash, 0xd2, STEP, &[], "late directed receive") {
        Done::Err(e) => assert_eq!(e.err, err, "late directed receive's error"),
        Done::Ok(_) => panic!("a receive directed at a dead peer completed"),
    }
    // A send to it fails (nothing listens there now): no second report.
    match me.ep.tinject(b"ghost", peer, PING) {
        Err(e) => eprintln!("send to the dead peer refused at once: {e}"),
        Ok(()) => {
            // SAFETY: static bytes.
            unsafe { me.ep.tsend(b"ghost!".as_ptr(), 6, peer, PING, 0x5e) }.expect("tsend");
            match wait_ctx(
                &me.cq,
                &mut stash,
                0x5e,
                DEATH_BOUND,
                &[],
                "send to the dead",
            ) {
                Done::Err(e) => eprintln!("send to the dead peer: {}", errno_name(e.err)),
                Done::Ok(_) => panic!("a send to a dead peer completed successfully"),
            }
        }
    }
    assert!(
        eq_error(&me, Duration::from_millis(300), &mut stash).is_none(),
        "a second report of one death"
    );
    assert!(
        stash.iter().all(|d| d.ctx() != 0xa1),
        "a receive from any source completed after the death: {stash:?}"
    );
    drop(me);
}

/// See the module documentation (RDM).
#[test]
fn rdm_survivor_of_a_killed_peer() {
    match role().as_deref() {
        Some("echo") => child_main(role_echo),
        Some(r) => panic!("unknown role {r}"),
        None => {}
    }
    // Killed while idle, and at three moments of a running ping-pong (at
    // once: maybe before its connection is up, so it may be refused).
    survive(None, &[Cause::Reset]);
    survive(Some(Duration::ZERO), &[Cause::Reset, Cause::Refused]);
    for ms in [30, 200] {
        survive(Some(Duration::from_millis(ms)), &[Cause::Reset]);
    }
}

// ------------------------------------------------------------- MSG

const BIG: usize = 1 << 20;
const DEPTH: usize = 4;

fn tagged_attr() -> CqAttr {
    CqAttr {
        format: cq_format::FI_CQ_FORMAT_TAGGED,
        ..Default::default()
    }
}

fn wait_event(eq: &EventQueue, want: u32, bound: Duration) -> Result<(), String> {
    let deadline = Instant::now() + bound;
    while Instant::now() < deadline {
        match eq.read() {
            Ok(ev) if ev.event == want => return Ok(()),
            Ok(ev) => return Err(format!("event {} instead of {want}", ev.event)),
            Err(e) if e.code() == errno::FI_EAVAIL => {
                return Err(format!("EQ error {:?}", eq.readerr()))
            }
            Err(e) if e.is_again() => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    Err(format!("no event {want} within {bound:?}"))
}

/// Child role "msg-sink": listens, accepts one connection and receives
/// 1 MiB messages forever (prints GOT for each), until killed.
fn role_msg_sink() {
    let info = offer(ep_type::FI_EP_MSG, "127.0.0.1");
    let fabric = Fabric::open(&info.fabric_attr).expect("fabric");
    let eq = fabric.eq(&EqAttr::default()).expect("eq");
    let pep = fabric.passive_ep(&info, 1).expect("pep");
    pep.bind_eq(&eq).expect("bind");
    pep.listen().expect("listen");
    tell(&format!("ADDR {}", hex(&pep.getname().expect("getname"))));
    let deadline = Instant::now() + STEP;
    let req = loop {
        assert!(Instant::now() < deadline, "no connection request");
        match eq.read() {
            Ok(ev) if ev.event == eq_event::FI_CONNREQ => break ev,
            Ok(ev) => panic!("event {}", ev.event),
            Err(e) if e.is_again() => {}
            Err(e) => panic!("{e}"),
        }
    };
    let sinfo = req.info.expect("CONNREQ info");
    let domain = fabric.domain(&sinfo).expect("domain");
    let cq = domain.cq(&tagged_attr()).expect("cq");
    let ep = domain.endpoint(&sinfo).expect("endpoint");
    ep.bind_cq(&cq, FI_TRANSMIT | FI_RECV).expect("bind cq");
    ep.bind_eq(&eq).expect("bind eq");
    ep.enable().expect("enable");
    let mut bufs: Vec<Vec<u8>> = (0..DEPTH).map(|_| vec![0u8; BIG]).collect();
    for (i, b) in bufs.iter_mut().enumerate() {
        // SAFETY: bufs live until the process ends.
        unsafe { ep.recv(b.as_mut_ptr(), BIG, FI_ADDR_UNSPEC, i) }.expect("recv");
    }
    ep.accept(&[]).expect("accept");
    wait_event(&eq, eq_event::FI_CONNECTED, STEP).expect("connected");
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut done = Vec::new();
    while Instant::now() < deadline {
        done.clear();
        poll(&cq, &mut done);
        for d in &done {
            let i = ok(*d, "sink receive").op_context;
            tell("GOT");
            // SAFETY: bufs live until the process ends; buffer i is free again (its receive
            // completed).
            unsafe { ep.recv(bufs[i].as_mut_ptr(), BIG, FI_ADDR_UNSPEC, i) }.expect("repost");
        }
    }
    std::process::exit(0);
}

/// See the module documentation (MSG).
#[test]
fn msg_survivor_of_a_killed_peer() {
    match role().as_deref() {
        Some("msg-sink") => child_main(role_msg_sink),
        Some(r) => panic!("unknown role {r}"),
        None => {}
    }
    let bufs: Vec<Vec<u8>> = (0..DEPTH).map(|_| vec![7u8; BIG]).collect();
    let mut rbuf = vec![0u8; 64];
    let info = offer(ep_type::FI_EP_MSG, "127.0.0.1");
    let fabric = Fabric::open(&info.fabric_attr).expect("fabric");
    let domain = fabric.domain(&info).expect("domain");
    let cq = domain.cq(&tagged_attr()).expect("cq");
    let eq = fabric.eq(&EqAttr::default()).expect("eq");
    let ep = domain.endpoint(&info).expect("endpoint");
    ep.bind_cq(&cq, FI_TRANSMIT | FI_RECV).expect("bind cq");
    ep.bind_eq(&eq).expect("bind eq");
    ep.enable().expect("enable");
    let mut kid = Kid::spawn(
        "msg-sink",
        self_cmd("msg_survivor_of_a_killed_peer", "msg-sink"),
    );
    let server = unhex(&kid.expect("ADDR ", STEP));
    ep.connect(&server, &[]).expect("connect");
    wait_event(&eq, eq_event::FI_CONNECTED, STEP).expect("connected");
    // SAFETY: rbuf outlives the endpoint (dropped at the end of the test,
    // after `ep`... see the explicit drops).
    unsafe { ep.recv(rbuf.as_mut_ptr(), rbuf.len(), FI_ADDR_UNSPEC, 0x77) }.expect("recv");
    let mut busy = [false; DEPTH];
    let mut got = 0;
    let mut done = Vec::new();
    let deadline = Instant::now() + STEP;
    while got < 3 {
        assert!(Instant::now() < deadline, "the sink got {got} messages");
        for (i, b) in busy.iter_mut().enumerate() {
            if !*b {
                // SAFETY: bufs outlive the endpoint; not written while sent.
                unsafe { ep.send(bufs[i].as_ptr(), BIG, 0, i) }.expect("send");
                *b = true;
            }
        }
        done.clear();
        poll(&cq, &mut done);
        for d in &done {
            busy[ok(*d, "send before the kill").op_context] = false;
        }
        while let Some(l) = kid.try_line() {
            got += usize::from(l.starts_with("GOT"));
        }
    }
    kid.kill();
    let t0 = Instant::now();
    let mut errs = Vec::new();
    let mut recv_failed = false;
    while busy.iter().any(|b| *b) || !recv_failed {
        assert!(
            t0.elapsed() < DEATH_BOUND,
            "pending after {DEATH_BOUND:?}: sends {busy:?}, receive failed {recv_failed}"
        );
        done.clear();
        poll(&cq, &mut done);
        for d in &done {
            match d {
                Done::Err(e) if e.op_context == 0x77 => {
                    assert_eq!(e.err, errno::FI_ECONNRESET, "the receive's error");
                    recv_failed = true;
                }
                Done::Ok(e) if e.op_context == 0x77 => panic!("the receive completed: {e:?}"),
                Done::Err(e) => {
                    busy[e.op_context] = false;
                    errs.push(e.err);
                }
                Done::Ok(e) => busy[e.op_context] = false,
            }
        }
    }
    // Sends the kernel had already taken into the socket buffers before the
    // kill may have completed successfully (that is a race with the kill,
    // not a fault); whatever failed must have failed as a reset.
    for e in &errs {
        assert_eq!(
            Cause::of_errno(*e),
            Some(Cause::Reset),
            "send error {e} ({}) is not a reset",
            errno_name(*e)
        );
    }
    wait_event(
        &eq,
        eq_event::FI_SHUTDOWN,
        DEATH_BOUND - t0.elapsed().min(DEATH_BOUND),
    )
    .expect("FI_SHUTDOWN after the peer's death");
    // After the shutdown nothing more can be sent: a send is either refused
    // at once or completes in error, never succeeds or stays pending.
    // SAFETY: bufs outlive the endpoint; not written while sent.
    match unsafe { ep.send(bufs[0].as_ptr(), BIG, 0, 0) } {
        Err(_) => {}
        Ok(()) => {
            let t1 = Instant::now();
            loop {
                assert!(
                    t1.elapsed() < DEATH_BOUND,
                    "a send after FI_SHUTDOWN stays pending"
                );
                done.clear();
                poll(&cq, &mut done);
                if let Some(d) = done.first() {
                    assert!(
                        matches!(d, Done::Err(_)),
                        "a send after FI_SHUTDOWN succeeded: {d:?}"
                    );
                    break;
                }
            }
        }
    }
    eprintln!(
        "MSG peer killed: errors {errs:?}, all within {:?}",
        t0.elapsed()
    );
    drop(ep);
    drop(rbuf);
    drop(bufs);
}

/// A peer that closes its endpoint (as an MPI rank does in MPI_Finalize)
/// ends its connections with SHUTDOWN: the survivor reports it on its EQ
/// once, as gone (FI_ECONNRESET, naming it), and a receive directed at it
/// fails, as for a death; only the log differs (info, not a warning).
#[test]
fn a_peer_that_closes_its_endpoint_is_reported_once() {
    let a = Rdm::open_ctx(&offer(ep_type::FI_EP_RDM, "127.0.0.1"), EP_CTX);
    let b = loopback();
    let to_b = a.av.insert_one(&b.ep.getname().unwrap()).unwrap();
    let to_a = b.av.insert_one(&a.ep.getname().unwrap()).unwrap();
    let mut stash = Vec::new();
    // One message each way: connections in both directions are up.
    let (mut ra, mut rb, mut rd) = ([0u8; 8], [0u8; 8], [0u8; 8]);
    let (sa, sb) = (*b"from a!!", *b"from b!!");
    // SAFETY: the buffers outlive the operations, which complete below.
    unsafe {
        a.ep.trecv(ra.as_mut_ptr(), 8, FI_ADDR_UNSPEC, PING, 0, 1)
            .unwrap();
        b.ep.trecv(rb.as_mut_ptr(), 8, FI_ADDR_UNSPEC, PING, 0, 2)
            .unwrap();
        a.ep.tsend(sa.as_ptr(), 8, to_b, PING, 3).unwrap();
        b.ep.tsend(sb.as_ptr(), 8, to_a, PING, 4).unwrap();
    }
    let t0 = Instant::now();
    let (mut da, mut db) = (Vec::new(), Vec::new());
    while da.len() < 2 || db.len() < 2 {
        assert!(t0.elapsed() < STEP, "exchange: {da:?} {db:?}");
        poll(&a.cq, &mut da);
        poll(&b.cq, &mut db);
    }
    assert_eq!((&ra, &rb), (&sb, &sa));
    // SAFETY: rd outlives the receive, which fails below.
    unsafe { a.ep.trecv(rd.as_mut_ptr(), 8, to_b, NEVER_DIRECTED, 0, 5) }.unwrap();
    drop(b);
    let (e, _) = eq_error(&a, DEATH_BOUND, &mut stash).expect("the closed peer is reported");
    let down = PeerDown::from_eq_error(&e).expect("a peer report");
    assert_eq!(
        (e.fid, down.fi_addr, down.cause),
        (EP_CTX, to_b, Cause::Reset)
    );
    assert!(
        eq_error(&a, Duration::from_millis(300), &mut stash).is_none(),
        "reported twice"
    );
    let t0 = Instant::now();
    while !stash
        .iter()
        .any(|d| matches!(d, Done::Err(e) if e.op_context == 5))
    {
        assert!(
            t0.elapsed() < DEATH_BOUND,
            "the directed receive still waits: {stash:?}"
        );
        poll(&a.cq, &mut stash);
    }
}
