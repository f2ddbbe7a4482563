//! Half-open and unauthenticated connections against an RDM endpoint and a
//! passive endpoint (in a child process, with the limits set through
//! FI_TCP_MAX_HALF_OPEN and FI_TCP_HANDSHAKE_TIMEOUT_MS): raw sockets that
//! send half a header and stop are dropped at the handshake deadline; of
//! many idle connections at most the cap are kept, the oldest dropped
//! first, each drop logged once; the endpoint keeps serving a good peer.
//! Out of descriptors (RLIMIT_NOFILE lowered in the child), both endpoints
//! pause `accept` and log one line each instead of one per progress call,
//! keep serving their existing connection, and accept again once
//! descriptors are back.
#![allow(unsafe_code)]

mod common;

use common::*;
use ofi_core::consts::*;
use ofi_core::util::eq::EqAttr;
use ofi_wire::tcp::{op, Repr};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const STEP: Duration = Duration::from_secs(30);
const TEST: &str = "half_open_connections_are_bounded_and_dropped_with_a_log_line";
const PING: u64 = 1;

// ------------------------------------------------------------- the child

static DROPS: AtomicUsize = AtomicUsize::new(0);
static ACCEPT_LINES: AtomicUsize = AtomicUsize::new(0);

struct Msg(String);

impl tracing::field::Visit for Msg {
    fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
        use std::fmt::Write as _;
        let _ = write!(self.0, " {}={:?}", f.name(), v);
    }
}

/// Counts the drop lines (and echoes every warning to stderr).
struct Count;

impl tracing::Subscriber for Count {
    fn enabled(&self, m: &tracing::Metadata<'_>) -> bool {
        *m.level() <= tracing::Level::WARN
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, e: &tracing::Event<'_>) {
        let mut m = Msg(String::new());
        e.record(&mut m);
        if m.0.contains("dropping an incoming connection") {
            DROPS.fetch_add(1, Ordering::SeqCst);
        }
        if m.0.contains("accept") {
            ACCEPT_LINES.fetch_add(1, Ordering::SeqCst);
        }
        eprintln!("[child log]{}", m.0);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Lowers RLIMIT_NOFILE to the descriptors open now and fills every free
/// number below it, so the next descriptor fails with EMFILE; returns the
/// fillers and the old limit.
fn exhaust_fds() -> (Vec<std::fs::File>, libc::rlimit) {
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
    (fill, old)
}

/// Child role "victim": an RDM endpoint that echoes PINGs and a passive
/// endpoint, driven until EXIT; COUNT prints `DROPS n`, ACCEPTLOG the
/// number of accept warnings, LIMIT runs out of descriptors, RESTORE gives
/// them back.
fn role_victim() {
    tracing::subscriber::set_global_default(Count).expect("subscriber");
    let r = Rdm::open(&offer(ep_type::FI_EP_RDM, "127.0.0.1"));
    let info = offer(ep_type::FI_EP_MSG, "127.0.0.1");
    let eq = r.fabric.eq(&EqAttr::default()).expect("eq");
    let pep = r.fabric.passive_ep(&info, 1).expect("pep");
    pep.bind_eq(&eq).expect("bind");
    pep.listen().expect("listen");
    tell(&format!(
        "ADDR {} {}",
        hex(&r.ep.getname().unwrap()),
        hex(&pep.getname().unwrap())
    ));
    let peer = r.av.insert_one(&unhex(&listen("PEER "))).expect("peer");
    let mut buf = [0u8; 8];
    // SAFETY: buf lives until the process exits.
    unsafe { r.ep.trecv(buf.as_mut_ptr(), 8, FI_ADDR_UNSPEC, PING, 0, 1) }.expect("trecv");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || loop {
        let mut s = String::new();
        match std::io::stdin().read_line(&mut s) {
            Ok(0) | Err(_) => {
                let _ = tx.send("EXIT".to_string());
                return;
            }
            Ok(_) => {
                if tx.send(s.trim().to_string()).is_err() {
                    return;
                }
            }
        }
    });
    tell("READY");
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut done = Vec::new();
    let mut exhausted = None;
    while Instant::now() < deadline {
        match rx.try_recv().as_deref() {
            Ok("EXIT") => break,
            Ok("COUNT") => tell(&format!("DROPS {}", DROPS.load(Ordering::SeqCst))),
            Ok("ACCEPTLOG") => tell(&format!("LINES {}", ACCEPT_LINES.load(Ordering::SeqCst))),
            Ok("LIMIT") => {
                exhausted = Some(exhaust_fds());
                tell("LIMITED");
            }
            Ok("RESTORE") => {
                if let Some((fill, old)) = exhausted.take() {
                    drop(fill);
                    // SAFETY: `old` is the limit read before.
                    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &old) }, 0);
                }
                tell("RESTORED");
            }
            _ => {}
        }
        let _ = eq.read();
        done.clear();
        poll(&r.cq, &mut done);
        for d in &done {
            ok(*d, "echo receive");
            let out = buf;
            r.ep.tinject(&out, peer, PING).expect("echo");
            // SAFETY: buf lives until the process exits; its previous receive completed.
            unsafe { r.ep.trecv(buf.as_mut_ptr(), 8, FI_ADDR_UNSPEC, PING, 0, 1) }.expect("trecv");
        }
    }
    std::process::exit(0);
}

// ------------------------------------------------------------- the parent

fn connect(to: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(to).expect("connect");
    s.set_nonblocking(true).expect("nonblocking");
    s
}

/// True once the endpoint closed `s`.
fn closed(s: &mut TcpStream) -> bool {
    let mut b = [0u8; 256];
    loop {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return true,
        }
    }
}

/// Waits until `pred` holds over `socks`, up to `bound`.
fn until(socks: &mut [TcpStream], bound: Duration, pred: impl Fn(&[bool]) -> bool) -> Vec<bool> {
    let t0 = Instant::now();
    let mut gone = vec![false; socks.len()];
    loop {
        for (s, g) in socks.iter_mut().zip(gone.iter_mut()) {
            *g = *g || closed(s);
        }
        if pred(&gone) || t0.elapsed() > bound {
            return gone;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn drops(kid: &mut Kid) -> usize {
    kid.say("COUNT");
    kid.expect("DROPS ", STEP).parse().expect("a count")
}

/// One ping-pong through the victim's RDM endpoint.
fn ping(me: &Rdm, to: u64) {
    let mut b = [0u8; 8];
    let mut st = Vec::new();
    // SAFETY: b outlives the receive, awaited below.
    unsafe {
        me.ep
            .trecv(b.as_mut_ptr(), 8, FI_ADDR_UNSPEC, PING, 0, 0x10)
    }
    .expect("trecv");
    me.ep.tinject(b"8 bytes!", to, PING).expect("tinject");
    ok(wait_ctx(&me.cq, &mut st, 0x10, STEP, &[], "pong"), "pong");
    assert_eq!(&b, b"8 bytes!");
}

fn victim(max: &str, ms: &str) -> (Kid, Rdm, u64, [SocketAddr; 2]) {
    let mut c = self_cmd(TEST, "victim");
    c.env("FI_TCP_MAX_HALF_OPEN", max)
        .env("FI_TCP_HANDSHAKE_TIMEOUT_MS", ms);
    let mut kid = Kid::spawn("victim", c);
    let a = kid.expect("ADDR ", STEP);
    let (rdm, pep) = a.split_once(' ').expect("two addresses");
    let me = Rdm::open(&offer(ep_type::FI_EP_RDM, "127.0.0.1"));
    let to = me.av.insert_one(&unhex(rdm)).expect("insert");
    kid.say(&format!("PEER {}", hex(&me.ep.getname().unwrap())));
    kid.expect("READY", STEP);
    let addrs = [rdm, pep].map(|h| ofi_prov_tcp::addr::decode(&unhex(h)).expect("address"));
    (kid, me, to, addrs)
}

#[test]
fn half_open_connections_are_bounded_and_dropped_with_a_log_line() {
    match role().as_deref() {
        Some("victim") => child_main(role_victim),
        Some(r) => panic!("unknown role {r}"),
        None => {}
    }
    // The cap: a long deadline, at most 8 in their handshake.
    let (mut kid, me, to, addrs) = victim("8", "60000");
    ping(&me, to);
    for (i, at) in addrs.iter().enumerate() {
        let mut socks: Vec<TcpStream> = (0..40).map(|_| connect(*at)).collect();
        // Idle connections: all but the newest 8 are dropped, oldest first.
        let gone = until(&mut socks, STEP, |g| g.iter().filter(|x| **x).count() >= 32);
        let n = gone.iter().filter(|x| **x).count();
        assert_eq!(
            n, 32,
            "endpoint {i}: {n} of 40 idle connections dropped (cap 8)"
        );
        assert!(
            gone[..32].iter().all(|x| *x) && gone[32..].iter().all(|x| !*x),
            "endpoint {i}: not the oldest dropped first: {gone:?}"
        );
        ping(&me, to);
    }
    assert_eq!(drops(&mut kid), 64, "one log line per drop");
    kid.say("EXIT");
    kid.finish(STEP);

    // The deadline: half a header, then nothing.
    let (mut kid, me, to, addrs) = victim("256", "300");
    for at in addrs {
        let hello = Repr {
            op: op::HELLO,
            len: 8,
            data: 8,
            ..Default::default()
        }
        .to_bytes();
        let mut s = connect(at);
        s.set_nonblocking(false).unwrap();
        s.write_all(&hello[..20]).unwrap();
        s.set_nonblocking(true).unwrap();
        let t0 = Instant::now();
        let gone = until(std::slice::from_mut(&mut s), STEP, |g| g[0]);
        assert!(gone[0], "a half-sent header kept its connection {STEP:?}");
        eprintln!("half header dropped after {:?}", t0.elapsed());
        ping(&me, to);
    }
    assert_eq!(drops(&mut kid), 2, "one log line per drop");
    kid.say("EXIT");
    kid.finish(STEP);
    drop(me);
}

#[test]
fn accept_under_fd_exhaustion_backs_off_and_logs_once() {
    match role().as_deref() {
        Some("victim") => child_main(role_victim),
        Some(r) => panic!("unknown role {r}"),
        None => {}
    }
    let mut c = self_cmd(
        "accept_under_fd_exhaustion_backs_off_and_logs_once",
        "victim",
    );
    c.env("FI_TCP_MAX_HALF_OPEN", "256");
    let mut kid = Kid::spawn("victim", c);
    let a = kid.expect("ADDR ", STEP);
    let (rdm, pep) = a.split_once(' ').expect("two addresses");
    let me = Rdm::open(&offer(ep_type::FI_EP_RDM, "127.0.0.1"));
    let to = me.av.insert_one(&unhex(rdm)).expect("insert");
    kid.say(&format!("PEER {}", hex(&me.ep.getname().unwrap())));
    kid.expect("READY", STEP);
    // The connection that must keep working, made before the limit.
    ping(&me, to);
    kid.say("LIMIT");
    kid.expect("LIMITED", STEP);
    // Connections the victim cannot accept (EMFILE), on both listeners,
    // while its existing connection keeps carrying a ping-pong.
    let addrs = [rdm, pep].map(|h| ofi_prov_tcp::addr::decode(&unhex(h)).expect("address"));
    let _socks: Vec<TcpStream> = addrs
        .iter()
        .flat_map(|a| (0..10).map(move |_| connect(*a)))
        .collect();
    // (Each ping is bounded by STEP: a stalled connection fails it.)
    for _ in 0..300 {
        ping(&me, to);
    }
    kid.say("ACCEPTLOG");
    let lines: usize = kid.expect("LINES ", STEP).parse().expect("a count");
    eprintln!("300 round trips while out of descriptors; {lines} accept log lines");
    assert_eq!(lines, 2, "one warning per listener, not one per attempt");
    // Descriptors back: both listeners accept the waiting connections
    // again and each says so in one line (the count of failures it did not
    // log one by one).
    kid.say("RESTORE");
    kid.expect("RESTORED", STEP);
    let t1 = Instant::now();
    loop {
        kid.say("ACCEPTLOG");
        let n: usize = kid.expect("LINES ", STEP).parse().expect("a count");
        if n == 4 {
            break;
        }
        assert!(
            n < 4 && t1.elapsed() < STEP,
            "accept lines after the restore: {n}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    ping(&me, to);
    kid.say("EXIT");
    kid.finish(STEP);
}
