//! Hostile peers against an RDM endpoint over loopback. A plain
//! `std::net::TcpStream` connects to the endpoint's address and sends
//! garbage, a frame with a bad magic, a header claiming an impossible
//! payload length, a DATA frame for a rendezvous that does not exist, an
//! unknown opcode, a CTS nobody asked for, or an impossible one-sided frame
//! (too many ranges, lengths that overflow, an unknown atomic operation,
//! an answer to a request never made). Each time the endpoint must
//! close that connection (the stream sees EOF, or a reset when the endpoint
//! closed with the rest of the hostile bytes unread) within a bounded time
//! and log the reason (captured here with a tracing subscriber and checked),
//! while a well-behaved peer endpoint keeps exchanging messages correctly
//! before, during (a large transfer spans the attack) and after. No error
//! completion may reach either good endpoint.
#![allow(unsafe_code)]

mod common;

use common::*;
use ofi_core::consts::*;
use ofi_wire::tcp::{kind, op, DescRepr, Range, Repr, HDR_LEN, MAGIC};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};

/// How long the endpoint may take to drop a hostile connection.
const CLOSE_BOUND: Duration = Duration::from_secs(10);
/// Bound for any one good exchange.
const OP_BOUND: Duration = Duration::from_secs(20);

// ------------------------------------------------------------- log capture

static LOG: Mutex<Vec<String>> = Mutex::new(Vec::new());

struct Fields(String);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
        use std::fmt::Write as _;
        let _ = write!(self.0, " {}={:?}", f.name(), v);
    }
}

/// A subscriber that keeps WARN and ERROR events (and echoes them).
struct Capture;

impl tracing::Subscriber for Capture {
    fn enabled(&self, m: &tracing::Metadata<'_>) -> bool {
        *m.level() <= tracing::Level::WARN
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, e: &tracing::Event<'_>) {
        let mut f = Fields(String::new());
        e.record(&mut f);
        let line = format!("{} {}:{}", e.metadata().level(), e.metadata().target(), f.0);
        eprintln!("[log] {line}");
        LOG.lock().unwrap_or_else(|p| p.into_inner()).push(line);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Installs the capturing subscriber before anything logs (ofi-core keeps
/// an application's subscriber rather than installing its own).
fn capture_logs() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        tracing::subscriber::set_global_default(Capture)
            .expect("no other subscriber is installed in this test binary");
    });
}

/// Captured log lines that mention `who`.
fn logged_about(who: &SocketAddr) -> Vec<String> {
    let needle = who.to_string();
    LOG.lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .filter(|l| l.contains(&needle))
        .cloned()
        .collect()
}

// ------------------------------------------------------------- the good pair

/// The endpoint under attack (`e`) and its well-behaved peer (`w`), each
/// in its own fabric and domain (so each needs its own progress calls).
struct Pair {
    e: Rdm,
    w: Rdm,
    /// `w` in `e`'s AV.
    e_to_w: u64,
    /// `e` in `w`'s AV.
    w_to_e: u64,
    e_stash: Vec<Done>,
    w_stash: Vec<Done>,
    next_ctx: usize,
    seed: u64,
}

impl Pair {
    fn open() -> Pair {
        capture_logs();
        let info = offer(ep_type::FI_EP_RDM, "127.0.0.1");
        let e = Rdm::open(&info);
        let w = Rdm::open(&info);
        let e_to_w =
            e.av.insert_one(&w.ep.getname().unwrap())
                .expect("av insert");
        let w_to_e =
            w.av.insert_one(&e.ep.getname().unwrap())
                .expect("av insert");
        Pair {
            e,
            w,
            e_to_w,
            w_to_e,
            e_stash: Vec::new(),
            w_stash: Vec::new(),
            next_ctx: 0x1000,
            seed: 1,
        }
    }

    fn ctx(&mut self) -> usize {
        self.next_ctx += 1;
        self.next_ctx
    }

    /// Drives both endpoints once, keeping their completions.
    fn drive(&mut self) {
        poll(&self.e.cq, &mut self.e_stash);
        poll(&self.w.cq, &mut self.w_stash);
    }

    /// No error entry may have reached either good endpoint.
    fn assert_no_errors(&self, when: &str) {
        for (who, st) in [("victim", &self.e_stash), ("good peer", &self.w_stash)] {
            for d in st {
                if let Done::Err(e) = d {
                    panic!(
                        "{when}: error completion on the {who}: err {} ({}) ctx {:#x}",
                        e.err,
                        errno_name(e.err),
                        e.op_context
                    );
                }
            }
        }
    }

    /// Starts a message each way; returns the handles to finish it.
    fn start(&mut self, size: usize) -> Flight {
        let s1 = self.seed;
        let s2 = self.seed + 1;
        self.seed += 2;
        let mut f = Flight {
            size,
            w_out: pattern(s1, size),
            e_in: vec![0u8; size],
            e_out: pattern(s2, size),
            w_in: vec![0u8; size],
            seeds: (s1, s2),
            ctx: [self.ctx(), self.ctx(), self.ctx(), self.ctx()],
        };
        // SAFETY: the four buffers live in `f`, which the caller keeps
        // (heap storage does not move) until `finish` saw all four complete.
        unsafe {
            self.e
                .ep
                .recv(f.e_in.as_mut_ptr(), size, FI_ADDR_UNSPEC, f.ctx[0])
                .expect("victim recv");
            self.w
                .ep
                .send(f.w_out.as_ptr(), size, self.w_to_e, f.ctx[1])
                .expect("good peer send");
            self.w
                .ep
                .recv(f.w_in.as_mut_ptr(), size, FI_ADDR_UNSPEC, f.ctx[2])
                .expect("good peer recv");
            self.e
                .ep
                .send(f.e_out.as_ptr(), size, self.e_to_w, f.ctx[3])
                .expect("victim send");
        }
        f
    }

    /// True once all four operations of `f` completed (checks the data).
    fn landed(&mut self, f: &Flight) -> bool {
        let have = |st: &Vec<Done>, c: usize| st.iter().any(|d| d.ctx() == c);
        if !(have(&self.e_stash, f.ctx[0])
            && have(&self.w_stash, f.ctx[1])
            && have(&self.w_stash, f.ctx[2])
            && have(&self.e_stash, f.ctx[3]))
        {
            return false;
        }
        let take = |st: &mut Vec<Done>, c: usize| {
            let i = st.iter().position(|d| d.ctx() == c).expect("present");
            st.remove(i)
        };
        let what = format!("exchange of {} bytes", f.size);
        let r1 = ok(take(&mut self.e_stash, f.ctx[0]), &what);
        ok(take(&mut self.w_stash, f.ctx[1]), &what);
        let r2 = ok(take(&mut self.w_stash, f.ctx[2]), &what);
        ok(take(&mut self.e_stash, f.ctx[3]), &what);
        assert_eq!(r1.len, f.size, "victim received length");
        assert_eq!(r2.len, f.size, "good peer received length");
        if let Some(at) = mismatch(&f.e_in, f.seeds.0) {
            panic!(
                "victim received corrupt data ({} bytes) at byte {at}",
                f.size
            );
        }
        if let Some(at) = mismatch(&f.w_in, f.seeds.1) {
            panic!(
                "good peer received corrupt data ({} bytes) at byte {at}",
                f.size
            );
        }
        true
    }

    /// True once all four operations of `f` completed (well or not).
    fn settled(&mut self, f: &Flight) -> bool {
        let st = [&self.e_stash, &self.w_stash, &self.w_stash, &self.e_stash];
        (0..4).all(|k| st[k].iter().any(|d| d.ctx() == f.ctx[k]))
    }

    /// What became of each operation of `f`, with data checks.
    fn outcome(&mut self, f: &Flight) -> String {
        let st = [&self.e_stash, &self.w_stash, &self.w_stash, &self.e_stash];
        let one = |k: usize| match st[k].iter().find(|d| d.ctx() == f.ctx[k]) {
            None => "pending".to_string(),
            Some(Done::Err(e)) => format!("err {}", errno_name(e.err)),
            Some(Done::Ok(_)) if k == 0 && mismatch(&f.e_in, f.seeds.0).is_some() => {
                "ok but corrupt".into()
            }
            Some(Done::Ok(_)) if k == 2 && mismatch(&f.w_in, f.seeds.1).is_some() => {
                "ok but corrupt".into()
            }
            Some(Done::Ok(_)) => "ok".into(),
        };
        format!("{} bytes: {:?}", f.size, [one(0), one(1), one(2), one(3)])
    }

    fn finish(&mut self, f: Flight) {
        let deadline = Instant::now() + OP_BOUND;
        while !self.landed(&f) {
            self.assert_no_errors("exchange");
            assert!(
                Instant::now() < deadline,
                "exchange of {} bytes did not finish within {OP_BOUND:?}",
                f.size
            );
            self.drive();
        }
    }

    /// Messages of several sizes both ways (eager and rendezvous).
    fn exchange(&mut self, when: &str) {
        for size in [0usize, 1, 8, 4096, 16385, 70_000, 1 << 20] {
            let f = self.start(size);
            self.finish(f);
        }
        self.assert_no_errors(when);
    }
}

/// One message each way in flight, with its buffers.
struct Flight {
    size: usize,
    w_out: Vec<u8>,
    e_in: Vec<u8>,
    e_out: Vec<u8>,
    w_in: Vec<u8>,
    seeds: (u64, u64),
    ctx: [usize; 4],
}

// ------------------------------------------------------------- the hostile peer

/// What the hostile peer sends.
#[derive(Clone, Copy, Debug)]
enum Bad {
    /// 256 random bytes (the first is not the magic), no handshake.
    Garbage,
    /// A HELLO whose header claims a 1 TiB payload, as the first frame.
    HugeHello,
    /// Handshake, then a MSG header with a bad magic.
    WrongMagic,
    /// Handshake, then a MSG header claiming a 1 TiB payload.
    HugeLen,
    /// Handshake, then DATA for a rendezvous id never announced.
    UnknownRendezvousData,
    /// Handshake, then a header with an unknown opcode.
    UnknownOp,
    /// Handshake, then a CTS for a rendezvous this side never started.
    UnknownCts,
    /// Handshake, then a WRITE naming five remote ranges.
    RmaTooManyRanges,
    /// Handshake, then a READ whose ranges add up beyond any message.
    RmaLengthOverflow,
    /// Handshake, then an ATOMIC with an operation that does not exist.
    AtomicUnknownOp,
    /// Handshake, then an answer to a request this side never made.
    AnswerUnknownRequest,
}

/// A one-sided request frame: header, descriptor, `after` bytes.
fn one_sided(o: u8, d: &DescRepr, after: &[u8]) -> Vec<u8> {
    let mut p = Vec::new();
    d.append_to(&mut p);
    p.extend_from_slice(after);
    let mut v = Repr {
        op: o,
        len: p.len() as u64,
        tag: after.len() as u64,
        id: 5,
        ..Default::default()
    }
    .to_bytes()
    .to_vec();
    v.extend_from_slice(&p);
    v
}

fn desc(kind: u8, o: u8, dt: u8, ranges: &[Range]) -> DescRepr {
    let mut d = DescRepr {
        kind,
        op: o,
        datatype: dt,
        count: ranges.len(),
        ..Default::default()
    };
    d.ranges[..ranges.len()].copy_from_slice(ranges);
    d
}

impl Bad {
    fn after_handshake(self) -> bool {
        !matches!(self, Bad::Garbage | Bad::HugeHello)
    }

    /// Substrings one of which the logged reason must contain.
    fn reasons(self) -> &'static [&'static str] {
        match self {
            Bad::Garbage | Bad::WrongMagic => &["magic"],
            Bad::HugeHello | Bad::HugeLen => &["longer than the maximum"],
            Bad::UnknownRendezvousData => &["DATA for an unknown rendezvous"],
            Bad::UnknownOp => &["unknown opcode"],
            Bad::UnknownCts => &["CTS for an unknown rendezvous"],
            Bad::RmaTooManyRanges => &["range descriptor"],
            Bad::RmaLengthOverflow => &["longer than the maximum", "overflows"],
            Bad::AtomicUnknownOp => &["unknown atomic operation"],
            Bad::AnswerUnknownRequest => &["an answer to an unknown request"],
        }
    }

    fn bytes(self) -> Vec<u8> {
        match self {
            Bad::Garbage => {
                let mut g = pattern(0xbad, 256);
                g[0] = MAGIC ^ 0xff;
                g
            }
            Bad::HugeHello => Repr {
                op: op::HELLO,
                len: 1 << 40,
                data: 16,
                ..Default::default()
            }
            .to_bytes()
            .to_vec(),
            Bad::WrongMagic => {
                let mut v = Repr {
                    op: op::MSG,
                    len: 16,
                    id: 16,
                    ..Default::default()
                }
                .to_bytes()
                .to_vec();
                v[0] = MAGIC ^ 0x55;
                v.extend_from_slice(&[0x11; 16]);
                v
            }
            Bad::HugeLen => {
                let mut v = Repr {
                    op: op::MSG,
                    len: 1 << 40,
                    id: 1 << 40,
                    ..Default::default()
                }
                .to_bytes()
                .to_vec();
                v.extend_from_slice(&[0x22; 4096]);
                v
            }
            Bad::UnknownRendezvousData => {
                let mut v = Repr {
                    op: op::DATA,
                    len: 64,
                    id: 0xdead_beef,
                    ..Default::default()
                }
                .to_bytes()
                .to_vec();
                v.extend_from_slice(&[0x33; 64]);
                v
            }
            Bad::UnknownOp => {
                let mut v = Repr {
                    op: op::MSG,
                    ..Default::default()
                }
                .to_bytes()
                .to_vec();
                v[2] = 0x42;
                v
            }
            Bad::UnknownCts => Repr {
                op: op::CTS,
                data: 4096,
                id: 77,
                ..Default::default()
            }
            .to_bytes()
            .to_vec(),
            Bad::RmaTooManyRanges => {
                let r = Range {
                    addr: 0,
                    len: 8,
                    key: 1,
                };
                let mut v = one_sided(op::WRITE, &desc(kind::RMA, 0, 0, &[r; 4]), &[0x44; 32]);
                // Count five ranges and add a fifth: the descriptor no
                // longer has a possible length.
                v[HDR_LEN] = 5;
                let len = v.len() - HDR_LEN + 24;
                v[8..16].copy_from_slice(&(len as u64).to_le_bytes());
                v.extend_from_slice(&[0x55; 24]);
                v
            }
            Bad::RmaLengthOverflow => {
                let r = Range {
                    addr: 0,
                    len: u64::MAX / 2,
                    key: 1,
                };
                one_sided(op::READ, &desc(kind::RMA, 0, 0, &[r, r]), &[])
            }
            Bad::AtomicUnknownOp => {
                let r = Range {
                    addr: 0,
                    len: 1,
                    key: 1,
                };
                one_sided(op::ATOMIC, &desc(kind::ATOMIC, 99, 10, &[r]), &[0x66; 8])
            }
            Bad::AnswerUnknownRequest => Repr {
                op: op::RESP,
                id: 4242,
                ..Default::default()
            }
            .to_bytes()
            .to_vec(),
        }
    }
}

/// A hostile connection to the victim.
struct Hostile {
    s: TcpStream,
    me: SocketAddr,
}

impl Hostile {
    fn connect(to: SocketAddr) -> Hostile {
        Hostile::wrap(TcpStream::connect(to).expect("hostile connect"))
    }

    fn wrap(s: TcpStream) -> Hostile {
        s.set_nodelay(true).expect("nodelay");
        let me = s.local_addr().expect("local addr");
        Hostile { s, me }
    }

    /// Connects from another loopback address (`from`, port chosen by the
    /// kernel): std cannot bind before connecting, so through libc.
    fn connect_from(from: std::net::Ipv4Addr, to: SocketAddr) -> Hostile {
        use std::os::fd::FromRawFd;
        let SocketAddr::V4(to) = to else {
            panic!("IPv4 only")
        };
        let sin = |ip: std::net::Ipv4Addr, port: u16| libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from_ne_bytes(ip.octets()),
            },
            sin_zero: [0; 8],
        };
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        // SAFETY: plain syscall; the result is checked.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
        assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
        // SAFETY: fd is a fresh descriptor that nothing else owns.
        let s = unsafe { TcpStream::from_raw_fd(fd) };
        let a = sin(from, 0);
        // SAFETY: `a` is a valid sockaddr_in of `len` bytes.
        let r = unsafe { libc::bind(fd, (&a as *const libc::sockaddr_in).cast(), len) };
        assert_eq!(r, 0, "bind {from}: {}", std::io::Error::last_os_error());
        let b = sin(*to.ip(), to.port());
        // SAFETY: `b` is a valid sockaddr_in of `len` bytes.
        let r = unsafe { libc::connect(fd, (&b as *const libc::sockaddr_in).cast(), len) };
        assert_eq!(r, 0, "connect {to}: {}", std::io::Error::last_os_error());
        Hostile::wrap(s)
    }

    fn send(&mut self, b: &[u8]) {
        self.s.set_nonblocking(false).expect("blocking");
        self.s
            .set_write_timeout(Some(Duration::from_secs(5)))
            .expect("write timeout");
        self.s.write_all(b).expect("hostile write");
        self.s.set_nonblocking(true).expect("nonblocking");
    }

    /// A well-formed HELLO carrying this socket's own address.
    fn hello(&mut self) {
        self.hello_as(self.me);
    }

    /// A well-formed HELLO claiming to come from the endpoint at `who`.
    fn hello_as(&mut self, who: SocketAddr) {
        let a = ofi_prov_tcp::addr::encode(&who);
        let mut v = Repr {
            op: op::HELLO,
            len: a.len() as u64,
            data: a.len() as u64,
            ..Default::default()
        }
        .to_bytes()
        .to_vec();
        v.extend_from_slice(&a);
        self.send(&v);
    }

    /// Reads without blocking: `Some("EOF")` / `Some("reset")` once the
    /// endpoint closed; bytes read are appended to `got`.
    fn closed(&mut self, got: &mut Vec<u8>) -> Option<&'static str> {
        let mut b = [0u8; 4096];
        loop {
            match self.s.read(&mut b) {
                Ok(0) => return Some("EOF"),
                Ok(n) => got.extend_from_slice(&b[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => return None,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::ConnectionReset => return Some("reset"),
                Err(e) => panic!("hostile read: {e}"),
            }
        }
    }
}

/// Performs the handshake as a hostile peer: HELLO, then the ACCEPT frame.
fn handshake(p: &mut Pair, h: &mut Hostile) {
    h.hello();
    await_accept(p, h);
}

/// Waits for the victim's ACCEPT frame on `h`.
fn await_accept(p: &mut Pair, h: &mut Hostile) {
    let deadline = Instant::now() + CLOSE_BOUND;
    let mut got = Vec::new();
    while got.len() < HDR_LEN {
        if let Some(how) = h.closed(&mut got) {
            panic!(
                "the victim closed ({how}) a well-formed HELLO from {}",
                h.me
            );
        }
        assert!(
            Instant::now() < deadline,
            "no answer to a well-formed HELLO within {CLOSE_BOUND:?}"
        );
        p.drive();
    }
    let hdr = ofi_wire::tcp::Header::new_checked(&got[..HDR_LEN]).expect("header");
    let r = Repr::parse(&hdr, 1 << 20).expect("the victim's answer parses");
    assert_eq!(r.op, op::ACCEPT, "answer to a well-formed HELLO: {r:?}");
}

/// One attack while the good pair is busy: returns how the stream ended
/// and how long it took.
fn attack(p: &mut Pair, bad: Bad) -> (&'static str, Duration) {
    let to = p.e.sockaddr();
    let mut h = Hostile::connect(to);
    if bad.after_handshake() {
        handshake(p, &mut h);
    }
    // A large transfer each way spans the attack.
    let big = p.start(6 << 20);
    let small = p.start(100);
    let t0 = Instant::now();
    h.send(&bad.bytes());
    let mut got = Vec::new();
    let how = loop {
        if let Some(how) = h.closed(&mut got) {
            break how;
        }
        assert!(
            t0.elapsed() < CLOSE_BOUND,
            "{bad:?}: the victim kept the hostile connection from {} open for {CLOSE_BOUND:?} (bytes it sent back: {})",
            h.me,
            got.len()
        );
        p.drive();
        p.assert_no_errors(&format!("during {bad:?}"));
    };
    let took = t0.elapsed();
    p.finish(small);
    p.finish(big);
    p.assert_no_errors(&format!("during {bad:?}"));
    // The reason is logged, naming the peer.
    let deadline = Instant::now() + Duration::from_secs(2);
    let lines = loop {
        let l = logged_about(&h.me);
        if !l.is_empty() || Instant::now() > deadline {
            break l;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(
        !lines.is_empty(),
        "{bad:?}: nothing was logged about the hostile peer {} (captured: {:?})",
        h.me,
        LOG.lock().unwrap_or_else(|e| e.into_inner())
    );
    assert!(
        lines
            .iter()
            .any(|l| bad.reasons().iter().any(|r| l.contains(r))),
        "{bad:?}: the log about {} does not give the reason {:?}: {lines:?}",
        h.me,
        bad.reasons()
    );
    eprintln!(
        "{bad:?}: closed ({how}) after {took:?}; logged: {}",
        lines[0]
    );
    (how, took)
}

fn run(bad: Bad) {
    let mut p = Pair::open();
    p.exchange("before the attack");
    attack(&mut p, bad);
    p.exchange("after the attack");
    // The listener still takes well-behaved newcomers: a second good peer.
    let info = offer(ep_type::FI_EP_RDM, "127.0.0.1");
    let n = Rdm::open(&info);
    let to_e = n.av.insert_one(&p.e.ep.getname().unwrap()).unwrap();
    let msg = pattern(99, 30_000);
    let mut st = Vec::new();
    let mut buf = vec![0u8; 30_000];
    // SAFETY: msg and buf outlive both operations, awaited below.
    unsafe {
        p.e.ep
            .recv(buf.as_mut_ptr(), buf.len(), FI_ADDR_UNSPEC, 0x77)
            .unwrap();
        n.ep.send(msg.as_ptr(), msg.len(), to_e, 0x78).unwrap();
    }
    ok(
        wait_ctx(&n.cq, &mut st, 0x78, OP_BOUND, &[&p.e.ep], "newcomer send"),
        "newcomer send",
    );
    ok(
        wait_ctx(
            &p.e.cq,
            &mut p.e_stash,
            0x77,
            OP_BOUND,
            &[&n.ep],
            "newcomer recv",
        ),
        "newcomer recv",
    );
    assert!(buf == msg, "message from a newcomer after the attack");
    p.assert_no_errors("at the end");
}

#[test]
fn garbage_bytes_close_the_connection() {
    run(Bad::Garbage);
}

#[test]
fn huge_hello_closes_the_connection() {
    run(Bad::HugeHello);
}

#[test]
fn bad_magic_after_hello_closes_the_connection() {
    run(Bad::WrongMagic);
}

#[test]
fn payload_length_above_the_maximum_closes_the_connection() {
    run(Bad::HugeLen);
}

#[test]
fn data_for_an_unknown_rendezvous_closes_the_connection() {
    run(Bad::UnknownRendezvousData);
}

#[test]
fn unknown_opcode_closes_the_connection() {
    run(Bad::UnknownOp);
}

#[test]
fn cts_for_an_unknown_rendezvous_closes_the_connection() {
    run(Bad::UnknownCts);
}

#[test]
fn rma_request_with_too_many_ranges_closes_the_connection() {
    run(Bad::RmaTooManyRanges);
}

#[test]
fn rma_request_whose_length_overflows_closes_the_connection() {
    run(Bad::RmaLengthOverflow);
}

#[test]
fn atomic_with_an_unknown_operation_closes_the_connection() {
    run(Bad::AtomicUnknownOp);
}

#[test]
fn answer_to_an_unknown_request_closes_the_connection() {
    run(Bad::AnswerUnknownRequest);
}

/// Every attack at once, on one endpoint: with more connections than the
/// provider polls directly it switches to epoll readiness; each hostile
/// connection still closes, the good peer is unaffected.
#[test]
fn many_hostile_peers_at_once() {
    let mut p = Pair::open();
    p.exchange("before the attacks");
    let all = [
        Bad::Garbage,
        Bad::HugeHello,
        Bad::WrongMagic,
        Bad::HugeLen,
        Bad::UnknownRendezvousData,
        Bad::UnknownOp,
        Bad::UnknownCts,
        Bad::RmaTooManyRanges,
        Bad::RmaLengthOverflow,
        Bad::AtomicUnknownOp,
        Bad::AnswerUnknownRequest,
    ];
    let to = p.e.sockaddr();
    let mut hs: Vec<(Bad, Hostile)> = all.iter().map(|b| (*b, Hostile::connect(to))).collect();
    for (b, h) in hs.iter_mut() {
        if b.after_handshake() {
            handshake(&mut p, h);
        }
    }
    let big = p.start(6 << 20);
    let t0 = Instant::now();
    for (b, h) in hs.iter_mut() {
        h.send(&b.bytes());
    }
    let mut open: Vec<usize> = (0..hs.len()).collect();
    let mut got = Vec::new();
    while !open.is_empty() {
        open.retain(|&i| hs[i].1.closed(&mut got).is_none());
        assert!(
            t0.elapsed() < CLOSE_BOUND,
            "hostile connections {:?} still open after {CLOSE_BOUND:?}",
            open.iter().map(|&i| hs[i].0).collect::<Vec<_>>()
        );
        p.drive();
        p.assert_no_errors("during the attacks");
    }
    eprintln!(
        "all {} hostile connections closed after {:?}",
        hs.len(),
        t0.elapsed()
    );
    p.finish(big);
    for (b, h) in &hs {
        let l = logged_about(&h.me);
        assert!(
            l.iter().any(|l| b.reasons().iter().any(|r| l.contains(r))),
            "{b:?}: no logged reason naming {}: {l:?}",
            h.me
        );
    }
    p.exchange("after the attacks");
}

/// A well-formed HELLO from another address (127.0.0.2) claiming to be the
/// good peer (whose connections come from 127.0.0.1) must not take over the
/// good peer's traffic: messages the victim sends to the good peer reach
/// the good peer, never the impostor, and the good peer's transfers in
/// flight are not failed. The good peer connects first, so the victim's
/// route to it is the good peer's (incoming) connection. (The provider can
/// tell the impostor apart: its connections are bound to the sender's own
/// address, so a HELLO whose claimed IP differs from the connection's
/// source IP does not come from that endpoint.)
#[test]
fn hello_claiming_another_peers_address_does_not_hijack_it() {
    let mut p = Pair::open();
    // The good peer's connection first: one message W -> E alone.
    let m = pattern(7, 64);
    let mut b = vec![0u8; 64];
    // SAFETY: m and b outlive both operations, awaited below.
    unsafe {
        p.w.ep.send(m.as_ptr(), 64, p.w_to_e, 0x51).unwrap();
    }
    ok(
        wait_ctx(
            &p.w.cq,
            &mut p.w_stash,
            0x51,
            OP_BOUND,
            &[&p.e.ep],
            "first send",
        ),
        "first send",
    );
    // SAFETY: b outlives the receive, awaited below.
    unsafe {
        p.e.ep
            .recv(b.as_mut_ptr(), 64, FI_ADDR_UNSPEC, 0x52)
            .unwrap();
    }
    ok(
        wait_ctx(
            &p.e.cq,
            &mut p.e_stash,
            0x52,
            OP_BOUND,
            &[&p.w.ep],
            "first recv",
        ),
        "first recv",
    );
    assert!(b == m);
    p.exchange("before the impostor");
    let w_addr = p.w.sockaddr();
    let mut h = Hostile::connect_from(std::net::Ipv4Addr::new(127, 0, 0, 2), p.e.sockaddr());
    let big = p.start(6 << 20);
    let small = [p.start(100), p.start(5000)];
    h.hello_as(w_addr);
    let mut got = Vec::new();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(1) {
        p.drive();
        if h.closed(&mut got).is_some() {
            break;
        }
    }
    let more = p.start(70_000);
    // Whatever the victim answered the impostor (ACCEPT, REJECT, closing),
    // the good peer's traffic must keep flowing between the good peers.
    let mut flights = vec![big];
    flights.extend(small);
    flights.push(more);
    let t1 = Instant::now();
    while t1.elapsed() < Duration::from_secs(5) && !flights.iter().all(|f| p.settled(f)) {
        p.drive();
        let _ = h.closed(&mut got);
    }
    let outcomes: Vec<String> = flights.iter().map(|f| p.outcome(f)).collect();
    let _ = h.closed(&mut got);
    let mut at = 0;
    let mut ops = Vec::new();
    while got.len() >= at + HDR_LEN {
        let hdr = ofi_wire::tcp::Header::new_checked(&got[at..at + HDR_LEN]).expect("hdr");
        let r = Repr::parse(&hdr, u64::MAX).expect("the victim's frames parse");
        ops.push(r.op);
        at += HDR_LEN + r.len as usize;
    }
    eprintln!("impostor from {} received ops {ops:?}", h.me);
    let hijacked = !ops.iter().all(|o| *o == op::ACCEPT || *o == op::REJECT);
    let hurt = outcomes
        .iter()
        .any(|o| o.contains("err") || o.contains("pending"));
    assert!(
        !hijacked && !hurt,
        "an impostor at {} claiming the good peer's address {w_addr} disturbed the good peer: \
         frames the victim sent the impostor (ops) {ops:?}; the good pair's operations in flight \
         [victim recv, peer send, peer recv, victim send]: {outcomes:?}",
        h.me
    );
    p.exchange("after the impostor");
}
