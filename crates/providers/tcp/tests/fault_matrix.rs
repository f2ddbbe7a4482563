//! The fault matrix of the tcp provider, the points not covered by
//! `survivors.rs` (SIGKILL while idle and inside a ping-pong),
//! `peer_death.rs` (SIGKILL inside a rendezvous transfer) and
//! `half_open.rs` (accept under descriptor exhaustion):
//!
//! - a peer frozen (SIGSTOP) while the survivor's sends fill its window,
//!   then SIGKILLed: every pending send completes (none stays pending), the
//!   failures are resets, the EQ reports the death once;
//! - descriptor exhaustion on the connecting side (RLIMIT_NOFILE lowered in
//!   a child): opening objects and sending to a new peer fail with
//!   FI_EMFILE, nothing panics or hangs, and the same endpoint reaches the
//!   peer once descriptors are back;
//! - 256 peers on one RDM endpoint: every message arrives, every reply goes
//!   back over the connection its peer opened (no second connection);
//! - a soak (SOAK_SECS, default 3, at most 60) of ping-pongs and peers that
//!   come and go: descriptor count and RSS stay flat.
#![allow(unsafe_code)]

mod common;

use common::*;
use ofi_core::consts::*;
use ofi_core::error::errno;
use ofi_core::object::*;
use ofi_core::util::av::AvAttr;
use ofi_core::util::peer::{Cause, PeerDown};
use std::time::{Duration, Instant};

const STEP: Duration = Duration::from_secs(30);
const TAG: u64 = 7;
const REPLY: u64 = 8;

fn loopback() -> Rdm {
    Rdm::open(&offer(ep_type::FI_EP_RDM, "127.0.0.1"))
}

/// Descriptors this process has open.
fn fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .count()
}

/// Resident set size in bytes.
fn rss() -> usize {
    let s = std::fs::read_to_string("/proc/self/statm").expect("statm");
    let pages: usize = s
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("statm resident");
    pages * 4096
}

/// Reads `cq` until `n` completions (successes or errors) arrived, also
/// driving `also`; panics past `bound`.
fn collect(
    cq: &CompletionQueue,
    also: &[&CompletionQueue],
    n: usize,
    bound: Duration,
    what: &str,
) -> Vec<Done> {
    let t0 = Instant::now();
    let mut out = Vec::new();
    while out.len() < n {
        assert!(
            t0.elapsed() < bound,
            "{what}: {} of {n} completions within {bound:?}",
            out.len()
        );
        if poll(cq, &mut out) == 0 {
            for c in also {
                poll(c, &mut Vec::new());
            }
        }
    }
    out
}

// ------------------------------------------------------------- frozen, then killed

/// Child role "sink": an endpoint that reads nothing, until killed.
fn role_sink() {
    let r = loopback();
    tell(&format!("ADDR {}", hex(&r.ep.getname().expect("getname"))));
    tell("READY");
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(120) {
        poll(&r.cq, &mut Vec::new());
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn peer_frozen_with_a_full_window_then_killed() {
    match role().as_deref() {
        Some("sink") => child_main(role_sink),
        Some(r) => panic!("unknown role {r}"),
        None => {}
    }
    let me = Rdm::open_ctx(&offer(ep_type::FI_EP_RDM, "127.0.0.1"), 0x77);
    let mut kid = Kid::spawn(
        "sink",
        self_cmd("peer_frozen_with_a_full_window_then_killed", "sink"),
    );
    let peer = me
        .av
        .insert_one(&unhex(&kid.expect("ADDR ", STEP)))
        .expect("insert");
    kid.expect("READY", STEP);
    // SAFETY: SIGSTOP to our own child, by pid.
    assert_eq!(unsafe { libc::kill(kid.pid() as i32, libc::SIGSTOP) }, 0);
    // Far more than socket buffers hold: the window fills, sends stay
    // pending while the peer is frozen.
    const N: usize = 64;
    const LEN: usize = 256 * 1024;
    let bufs: Vec<Vec<u8>> = (0..N).map(|i| pattern(i as u64, LEN)).collect();
    for (i, b) in bufs.iter().enumerate() {
        // SAFETY: `bufs` outlives the endpoint's use of it (every send
        // completes below before it is dropped).
        unsafe { me.ep.tsend(b.as_ptr(), LEN, peer, TAG, 0x1000 + i) }.expect("tsend");
    }
    let mut early = Vec::new();
    for _ in 0..200 {
        poll(&me.cq, &mut early);
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(
        early.len() < N,
        "all {N} sends of {LEN} bytes completed to a frozen peer"
    );
    kid.kill();
    let rest = collect(&me.cq, &[], N - early.len(), STEP, "sends after the kill");
    let mut failed = 0;
    for d in early.iter().chain(&rest) {
        if let Done::Err(e) = d {
            assert!(
                [errno::FI_ECONNRESET, errno::FI_EIO, errno::FI_ECANCELED].contains(&e.err),
                "send {:#x} failed with {} ({})",
                e.op_context,
                e.err,
                errno_name(e.err)
            );
            failed += 1;
        }
    }
    assert!(
        failed > 0,
        "no send failed though the peer died with them pending"
    );
    // One report of the death, naming the peer.
    let t0 = Instant::now();
    let report = loop {
        match me.eq.read() {
            Err(e) if e.code() == errno::FI_EAVAIL => break me.eq.readerr().expect("readerr"),
            Err(e) if e.is_again() => {}
            r => panic!("EQ: {r:?}"),
        }
        assert!(t0.elapsed() < STEP, "no EQ report of the death");
        poll(&me.cq, &mut Vec::new());
    };
    let down = PeerDown::from_eq_error(&report).expect("a peer-death report");
    assert_eq!(down.fi_addr, peer);
    assert_eq!(down.cause, Cause::Reset);
    for _ in 0..100 {
        poll(&me.cq, &mut Vec::new());
    }
    assert!(me.eq.read().is_err_and(|e| e.is_again()), "a second report");
}

// ------------------------------------------------------------- descriptor exhaustion

/// Lowers RLIMIT_NOFILE to the descriptors open now and fills every free
/// number below it; the fillers (drop them to give descriptors back).
fn exhaust_fds() -> Vec<std::fs::File> {
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `old` is a valid out-parameter.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut old) }, 0);
    let top = std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u64>().ok())
        .max()
        .unwrap_or(2);
    let low = libc::rlimit {
        rlim_cur: top + 1,
        rlim_max: old.rlim_max,
    };
    // SAFETY: `low` is a valid rlimit.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &low) }, 0);
    let mut fill = Vec::new();
    while let Ok(f) = std::fs::File::open("/dev/null") {
        fill.push(f);
        assert!(fill.len() < 100_000, "RLIMIT_NOFILE not in force");
    }
    fill
}

/// Child role "starved": an endpoint that runs out of descriptors, then
/// sends to the parent (it has never connected to it), then gets its
/// descriptors back and sends again.
fn role_starved() {
    let info = offer(ep_type::FI_EP_RDM, "127.0.0.1");
    let r = Rdm::open(&info);
    let peer = r.av.insert_one(&unhex(&listen("PEER "))).expect("insert");
    let fill = exhaust_fds();
    // New objects: a clear error, no panic.
    match r.domain.endpoint(&info) {
        Err(e) => assert_eq!(e.code(), errno::FI_EMFILE, "endpoint open: {e}"),
        Ok(_) => panic!("an endpoint opened without a free descriptor"),
    }
    // A send that needs a new connection: an error now or an error
    // completion, never a hang.
    let msg = 1u64.to_le_bytes();
    let failed = match r.ep.tinject(&msg, peer, TAG) {
        Err(e) => e.code(),
        Ok(()) => match collect(&r.cq, &[], 1, STEP, "send while starved")[0] {
            Done::Err(e) => e.err,
            Done::Ok(_) => panic!("a send succeeded without a descriptor for its connection"),
        },
    };
    assert_eq!(failed, errno::FI_EMFILE, "send while starved");
    tell("STARVED");
    drop(fill);
    listen("RETRY");
    let msg = 2u64.to_le_bytes();
    r.ep.tinject(&msg, peer, TAG)
        .expect("send after the restore");
    tell("SENT");
    // Keep the connection served until the parent has the message.
    let exit = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = exit.clone();
    std::thread::spawn(move || {
        linger();
        flag.store(true, std::sync::atomic::Ordering::SeqCst);
    });
    let t0 = Instant::now();
    while !exit.load(std::sync::atomic::Ordering::SeqCst) && t0.elapsed() < STEP {
        poll(&r.cq, &mut Vec::new());
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn descriptor_exhaustion_on_the_connecting_side() {
    match role().as_deref() {
        Some("starved") => child_main(role_starved),
        Some(r) => panic!("unknown role {r}"),
        None => {}
    }
    let me = loopback();
    let mut kid = Kid::spawn(
        "starved",
        self_cmd("descriptor_exhaustion_on_the_connecting_side", "starved"),
    );
    kid.say(&format!("PEER {}", hex(&me.ep.getname().unwrap())));
    let mut buf = [0u8; 8];
    // SAFETY: `buf` outlives the receive (waited for below).
    unsafe { me.ep.trecv(buf.as_mut_ptr(), 8, FI_ADDR_UNSPEC, TAG, 0, 1) }.expect("trecv");
    // Drive our endpoint while the child is starved (nothing may arrive).
    let t0 = Instant::now();
    let mut got = Vec::new();
    loop {
        poll(&me.cq, &mut got);
        if let Some(l) = kid.try_line() {
            assert_eq!(l, "STARVED");
            break;
        }
        assert!(t0.elapsed() < STEP, "the starved child never reported");
    }
    assert!(got.is_empty(), "a message arrived from a starved sender");
    kid.say("RETRY");
    let d = collect(&me.cq, &[], 1, STEP, "message after the restore");
    ok(d[0], "receive");
    assert_eq!(
        u64::from_le_bytes(buf),
        2,
        "the message sent after the restore"
    );
    kid.expect("SENT", STEP);
    kid.say("EXIT");
    kid.finish(STEP);
}

// ------------------------------------------------------------- many peers

/// Runs test `name`'s `body` in a child process of its own: descriptor
/// counts and RSS are per process, and the other tests of this binary run
/// in parallel threads.
fn alone(name: &str, body: fn()) {
    match role().as_deref() {
        Some("alone") => child_main(body),
        Some(r) => panic!("unknown role {r}"),
        None => Kid::spawn(name, self_cmd(name, "alone")).finish(Duration::from_secs(120)),
    }
}

/// Clients: endpoints sharing one domain, CQ and AV (fields drop in
/// order: endpoints first).
struct Crowd {
    eps: Vec<Endpoint>,
    av: AddressVector,
    cq: CompletionQueue,
    _domain: Domain,
    _fabric: Fabric,
}

impl Crowd {
    fn open(n: usize) -> Crowd {
        let info = offer(ep_type::FI_EP_RDM, "127.0.0.1");
        let fabric = Fabric::open(&info.fabric_attr).expect("fabric");
        let domain = fabric.domain(&info).expect("domain");
        let cq = domain.cq(&tagged_cq()).expect("cq");
        let av = domain.av(&AvAttr::default()).expect("av");
        let eps = (0..n)
            .map(|i| {
                let ep = domain
                    .endpoint(&info)
                    .unwrap_or_else(|e| panic!("client endpoint {i}: {e}"));
                ep.bind_cq(&cq, FI_TRANSMIT | FI_RECV).expect("bind cq");
                ep.bind_av(&av).expect("bind av");
                ep.enable().expect("enable");
                ep
            })
            .collect();
        Crowd {
            eps,
            av,
            cq,
            _domain: domain,
            _fabric: fabric,
        }
    }
}

#[test]
fn two_hundred_fifty_six_peers_on_one_rdm_endpoint() {
    alone(
        "two_hundred_fifty_six_peers_on_one_rdm_endpoint",
        many_peers,
    );
}

fn many_peers() {
    const N: usize = 256;
    let server = loopback();
    let crowd = Crowd::open(N);
    let to = crowd
        .av
        .insert_one(&server.ep.getname().unwrap())
        .expect("insert server");
    let mut inbox = vec![[0u8; 8]; N];
    for (i, b) in inbox.iter_mut().enumerate() {
        // SAFETY: `inbox` outlives the receives (all complete below).
        unsafe {
            server
                .ep
                .trecv(b.as_mut_ptr(), 8, FI_ADDR_UNSPEC, TAG, 0, i)
        }
        .expect("trecv");
    }
    for (i, ep) in crowd.eps.iter().enumerate() {
        ep.tinject(&(i as u64).to_le_bytes(), to, TAG)
            .expect("client send");
    }
    let fds_before = fds();
    for d in collect(&server.cq, &[&crowd.cq], N, STEP, "server receives") {
        ok(d, "server receive");
    }
    let mut seen: Vec<u64> = inbox.iter().map(|b| u64::from_le_bytes(*b)).collect();
    seen.sort_unstable();
    assert_eq!(
        seen,
        (0..N as u64).collect::<Vec<_>>(),
        "every client's message once"
    );
    let fds_connected = fds();
    assert!(
        fds_connected >= fds_before + N,
        "{} descriptors for {N} incoming connections",
        fds_connected as isize - fds_before as isize
    );
    // Replies, to addresses the server inserts now: over the connections
    // the clients opened.
    let names: Vec<Vec<u8>> = crowd.eps.iter().map(|e| e.getname().unwrap()).collect();
    let refs: Vec<&[u8]> = names.iter().map(|n| n.as_slice()).collect();
    let mut back = vec![0u64; N];
    assert_eq!(
        server.av.insert(&refs, &mut back).expect("insert clients"),
        N
    );
    let mut replies = vec![[0u8; 8]; N];
    for (i, (ep, b)) in crowd.eps.iter().zip(replies.iter_mut()).enumerate() {
        // SAFETY: `replies` outlives the receives (all complete below).
        unsafe { ep.trecv(b.as_mut_ptr(), 8, FI_ADDR_UNSPEC, REPLY, 0, i) }.expect("client trecv");
    }
    for (i, a) in back.iter().enumerate() {
        server
            .ep
            .tinject(&(i as u64 ^ 0xabcd).to_le_bytes(), *a, REPLY)
            .expect("reply");
    }
    for d in collect(&crowd.cq, &[&server.cq], N, STEP, "client receives") {
        ok(d, "client receive");
    }
    for (i, b) in replies.iter().enumerate() {
        assert_eq!(
            u64::from_le_bytes(*b),
            i as u64 ^ 0xabcd,
            "reply to client {i}"
        );
    }
    assert_eq!(
        fds(),
        fds_connected,
        "replies opened connections of their own"
    );
}

// ------------------------------------------------------------- soak

#[test]
fn soak_keeps_descriptors_and_memory_flat() {
    alone("soak_keeps_descriptors_and_memory_flat", soak);
}

fn soak() {
    let secs: u64 = std::env::var("SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3)
        .min(60);
    let server = loopback();
    let steady = loopback();
    let to_server = steady
        .av
        .insert_one(&server.ep.getname().unwrap())
        .expect("insert");
    let to_steady = server
        .av
        .insert_one(&steady.ep.getname().unwrap())
        .expect("insert");
    let round = |n: u64, churn: bool| {
        // A ping-pong on the steady pair.
        let mut a = [0u8; 4096];
        let mut b = [0u8; 4096];
        // SAFETY: both buffers outlive their receives (completed below).
        unsafe {
            server
                .ep
                .trecv(a.as_mut_ptr(), a.len(), to_steady, TAG, 0, 1)
                .expect("trecv");
            steady
                .ep
                .trecv(b.as_mut_ptr(), b.len(), to_server, REPLY, 0, 2)
                .expect("trecv");
        }
        let p = pattern(n, 4096);
        steady.ep.tinject(&p[..64], to_server, TAG).expect("ping");
        ok(
            collect(&server.cq, &[&steady.cq], 1, STEP, "ping")[0],
            "ping",
        );
        server.ep.tinject(&p[..64], to_steady, REPLY).expect("pong");
        ok(
            collect(&steady.cq, &[&server.cq], 1, STEP, "pong")[0],
            "pong",
        );
        assert_eq!(&a[..64], &p[..64]);
        assert_eq!(&b[..64], &p[..64]);
        if churn {
            // A peer that comes, sends, is answered, and goes.
            let guest = loopback();
            let g = guest
                .av
                .insert_one(&server.ep.getname().unwrap())
                .expect("insert");
            let back = server
                .av
                .insert_one(&guest.ep.getname().unwrap())
                .expect("insert");
            let mut c = [0u8; 8];
            // SAFETY: `c` outlives the receive (completed below).
            unsafe { server.ep.trecv(c.as_mut_ptr(), 8, back, TAG, 0, 3) }.expect("trecv");
            guest
                .ep
                .tinject(&n.to_le_bytes(), g, TAG)
                .expect("guest send");
            ok(
                collect(&server.cq, &[&guest.cq], 1, STEP, "guest")[0],
                "guest",
            );
            assert_eq!(u64::from_le_bytes(c), n);
            drop(guest);
            server.av.remove(&[back]).expect("av remove");
        }
    };
    // Warm up (buffers, pools, the AV's table) before the baseline.
    for n in 0..200 {
        round(n, n % 10 == 0);
    }
    for _ in 0..50 {
        poll(&server.cq, &mut Vec::new());
    }
    let (fd0, rss0) = (fds(), rss());
    let t0 = Instant::now();
    let mut n = 200;
    while t0.elapsed() < Duration::from_secs(secs) {
        round(n, n % 10 == 0);
        n += 1;
    }
    // Let the last guests' connections close on the server's side.
    let t1 = Instant::now();
    while fds() > fd0 && t1.elapsed() < STEP {
        poll(&server.cq, &mut Vec::new());
        std::thread::sleep(Duration::from_millis(1));
    }
    let (fd1, rss1) = (fds(), rss());
    eprintln!(
        "soak: {secs} s, {} rounds ({} guests): fds {fd0} -> {fd1}, RSS {} -> {} KiB",
        n - 200,
        (n - 200) / 10,
        rss0 / 1024,
        rss1 / 1024
    );
    assert_eq!(fd1, fd0, "descriptors leaked over {} rounds", n - 200);
    // Under AddressSanitizer (scripts/sanitize.sh sets ASAN_OPTIONS) freed
    // memory sits in its quarantine (up to 256 MiB): RSS says nothing there.
    if std::env::var_os("ASAN_OPTIONS").is_none() {
        assert!(
            rss1 <= rss0 + 8 * 1024 * 1024,
            "RSS grew from {} to {} KiB",
            rss0 / 1024,
            rss1 / 1024
        );
    }
}
