//! Two hosts in network namespaces that the test creates and removes.
//!
//! The parent creates `ofi-a-<pid>-<kind>` and `ofi-b-<pid>-<kind>`, a veth
//! pair moved into them, addresses 10.99.x.1/24 and 10.99.x.2/24 inside the
//! namespaces only (x derived from the pid), links up; a drop guard deletes
//! both namespaces even on panic (children are killed first). It then runs
//! two children of this test binary, one per namespace (`ip netns exec NAME
//! <this binary> <test> --exact ...`, role in an environment variable), each
//! bound to its namespace address (getinfo node=address, FI_SOURCE). The
//! children exchange addresses through the parent (stdin/stdout lines),
//! check messages of several sizes both ways, then stream 1 MiB messages
//! both ways. The parent sets namespace A's veth down in the middle of the
//! stream (`ip netns exec A ip link set <veth> down`): both children must
//! report an error (error completion; for MSG also an EQ error entry or
//! FI_SHUTDOWN) within 30 s, every pending send must finish, nothing hangs.
//! Traffic flows only between the two namespace addresses.
//!
//! Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN for `ip netns`): without it
//! the test fails with a message saying so; it never passes silently.
#![allow(unsafe_code)]

mod common;

use common::*;
use ofi_core::consts::*;
use ofi_core::error::errno;
use ofi_core::object::*;
use ofi_core::util::eq::EqAttr;
use ofi_testkit::netns::{ip, netns_list};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The bound for noticing a dead link (from `ip link set down` to each
/// side's first error report).
const DEAD_LINK_BOUND: Duration = Duration::from_secs(30);
/// Bound for setup steps and the size checks.
const STEP: Duration = Duration::from_secs(60);
/// Stream message size and depth.
const STREAM_MSG: usize = 1 << 20;
const DEPTH: usize = 4;

/// The two tests share the machine's two cores; run them one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

const ADDR_ENV: &str = "OFI_TCP_TEST_NS_ADDR";
/// "both": both children stream to each other; "one-way": only A sends, so
/// B (receiving only) must notice the dead link by keepalive.
const MODE_ENV: &str = "OFI_TCP_TEST_NS_MODE";

// ------------------------------------------------------------- namespaces

/// Deletes namespaces this test left behind in a process that no longer
/// exists (only names of this test's own pattern `ofi-[ab]-<pid>-...`).
fn remove_stale() {
    for n in netns_list() {
        let Some(rest) = n
            .strip_prefix("ofi-a-")
            .or_else(|| n.strip_prefix("ofi-b-"))
        else {
            continue;
        };
        let Some((pid, kind)) = rest.split_once('-') else {
            continue;
        };
        if !KINDS.contains(&kind) || pid.parse::<u32>().is_err() {
            continue;
        }
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            eprintln!("removing stale namespace {n} (pid {pid} is gone)");
            let _ = ip(&["netns", "del", &n]);
        }
    }
}

/// The tests' namespace name suffixes (and veth / subnet indexes).
const KINDS: [&str; 4] = ["rdm", "msg", "rdm1", "msg1"];

/// Two namespaces joined by a veth pair; removed on drop.
struct Netns {
    a: String,
    b: String,
    va: String,
    vb: String,
    x: u32,
}

impl Netns {
    fn create(kind: &str, index: u32) -> Netns {
        let pid = std::process::id();
        let x = (pid.wrapping_mul(KINDS.len() as u32).wrapping_add(index)) % 200 + 20;
        let n = Netns {
            a: format!("ofi-a-{pid}-{kind}"),
            b: format!("ofi-b-{pid}-{kind}"),
            va: format!("ofa{pid}{index}"),
            vb: format!("ofb{pid}{index}"),
            x,
        };
        remove_stale();
        if let Err(e) = ip(&["netns", "add", &n.a]) {
            panic!(
                "cannot create a network namespace: {e}\n\
                 This test needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) and iproute2; \
                 it does not pass without running."
            );
        }
        let steps: Vec<Vec<&str>> = vec![
            vec!["netns", "add", &n.b],
            vec!["link", "add", &n.va, "type", "veth", "peer", "name", &n.vb],
            vec!["link", "set", &n.va, "netns", &n.a],
            vec!["link", "set", &n.vb, "netns", &n.b],
        ];
        for s in steps {
            ip(&s).unwrap_or_else(|e| panic!("setting up the namespaces: {e}"));
        }
        let (aa, ab) = (format!("{}/24", n.addr(1)), format!("{}/24", n.addr(2)));
        for s in [
            vec!["-n", &n.a, "addr", "add", &aa, "dev", &n.va],
            vec!["-n", &n.b, "addr", "add", &ab, "dev", &n.vb],
            vec!["-n", &n.a, "link", "set", &n.va, "up"],
            vec!["-n", &n.b, "link", "set", &n.vb, "up"],
        ] {
            ip(&s).unwrap_or_else(|e| panic!("setting up the namespaces: {e}"));
        }
        eprintln!(
            "namespaces {} ({} on {}) and {} ({} on {})",
            n.a,
            n.addr(1),
            n.va,
            n.b,
            n.addr(2),
            n.vb
        );
        n
    }

    /// 10.99.x.host
    fn addr(&self, host: u32) -> String {
        format!("10.99.{}.{host}", self.x)
    }

    /// This test binary's test `name` as `role` inside namespace `ns`.
    fn child(&self, ns: &str, name: &str, role: &str, addr: &str, mode: &str) -> Command {
        let exe = std::env::current_exe().expect("current_exe");
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns])
            .arg(exe)
            .args(self_args(name))
            .env(ROLE, role)
            .env(ADDR_ENV, addr)
            .env(MODE_ENV, mode);
        c
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for ns in [&self.a, &self.b] {
            let _ = ip(&["netns", "del", ns]);
        }
        // The veth, if setup stopped before moving it (deleting a namespace
        // deletes the veth inside it).
        let _ = Command::new("ip")
            .args(["link", "del", &self.va])
            .stderr(std::process::Stdio::null())
            .status();
        let left: Vec<String> = netns_list()
            .into_iter()
            .filter(|n| *n == self.a || *n == self.b)
            .collect();
        if !left.is_empty() {
            eprintln!("WARNING: namespaces {left:?} could not be removed");
        }
    }
}

// ------------------------------------------------------------- child side

/// What one child talks through.
struct Io<'a> {
    ep: &'a Endpoint,
    cq: &'a CompletionQueue,
    eq: Option<&'a EventQueue>,
    dest: u64,
}

const SIZES: [usize; 11] = [
    0,
    1,
    8,
    4095,
    4096,
    16384,
    16385,
    65536,
    1 << 20,
    (4 << 20) + 3,
    9_999_999,
];

/// Each size both ways with data checks: the initiator sends the pattern of
/// seed 2i+1 and expects the pattern of seed 2i+2 back.
fn check_sizes(io: &Io<'_>, initiator: bool) {
    let mut st = Vec::new();
    for (i, &size) in SIZES.iter().enumerate() {
        let (out_seed, in_seed) = if initiator {
            (2 * i as u64 + 1, 2 * i as u64 + 2)
        } else {
            (2 * i as u64 + 2, 2 * i as u64 + 1)
        };
        let out = pattern(out_seed, size);
        let mut inb = vec![0u8; size + 64];
        let (rc, sc) = (0x100 + i, 0x200 + i);
        // SAFETY: `inb` outlives the receive, awaited below.
        unsafe { io.ep.recv(inb.as_mut_ptr(), inb.len(), FI_ADDR_UNSPEC, rc) }
            .unwrap_or_else(|e| panic!("recv {size}: {e}"));
        if !initiator {
            let r = ok(
                wait_ctx(io.cq, &mut st, rc, STEP, &[], "size check recv"),
                "size check recv",
            );
            assert_eq!(r.len, size, "received length");
        }
        // SAFETY: `out` outlives the send, awaited below.
        unsafe { io.ep.send(out.as_ptr(), size, io.dest, sc) }
            .unwrap_or_else(|e| panic!("send {size}: {e}"));
        ok(
            wait_ctx(io.cq, &mut st, sc, STEP, &[], "size check send"),
            "size check send",
        );
        if initiator {
            let r = ok(
                wait_ctx(io.cq, &mut st, rc, STEP, &[], "size check recv"),
                "size check recv",
            );
            assert_eq!(r.len, size, "received length");
        }
        if let Some(at) = mismatch(&inb[..size], in_seed) {
            panic!("message of {size} bytes differs at byte {at}");
        }
    }
    assert!(st.is_empty(), "stray completions: {st:?}");
}

/// Streams 1 MiB messages (DEPTH sends in flight when `send`, DEPTH
/// receives posted when `recv`, every received message checked) until the
/// first error; reports FLOWING once data flows, ERROR at the first error,
/// DONE once every pending send finished.
fn stream(io: &Io<'_>, send: bool, recv: bool) {
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut sbuf: Vec<Vec<u8>> = (0..DEPTH).map(|_| vec![0u8; STREAM_MSG]).collect();
    let mut rbuf: Vec<Vec<u8>> = (0..DEPTH).map(|_| vec![0u8; STREAM_MSG]).collect();
    let mut s_busy = [false; DEPTH];
    let (sctx, rctx) = (0x1000usize, 0x2000usize);
    for (i, b) in rbuf.iter_mut().enumerate().filter(|_| recv) {
        // SAFETY: rbuf outlives the receives: this function waits for every
        // send; receives still posted at return stay valid because rbuf is
        // leaked below if any remain posted.
        unsafe {
            io.ep
                .recv(b.as_mut_ptr(), b.len(), FI_ADDR_UNSPEC, rctx + i)
        }
        .expect("post recv");
    }
    let mut r_busy = [recv; DEPTH];
    let mut seq = 0u64;
    let (mut sent_ok, mut sent_err, mut recv_ok, mut recv_err) = (0u64, 0u64, 0u64, 0u64);
    let mut seen = std::collections::HashSet::new();
    let mut flowing = false;
    let mut first_err: Option<String> = None;
    let mut reported = false;
    let mut drain_until: Option<Instant> = None;
    let mut events = Vec::new();
    let mut done = Vec::new();
    loop {
        assert!(
            Instant::now() < deadline,
            "stream: still running after 180 s (first error: {first_err:?}, sends pending: {})",
            s_busy.iter().filter(|b| **b).count()
        );
        if first_err.is_none() && send {
            for i in 0..DEPTH {
                if s_busy[i] {
                    continue;
                }
                stamp(&mut sbuf[i], seq);
                // SAFETY: sbuf[i] is not touched again until this send
                // completes; the loop ends only when no send is pending (a
                // panic ends the child process without further progress).
                match unsafe { io.ep.send(sbuf[i].as_ptr(), STREAM_MSG, io.dest, sctx + i) } {
                    Ok(()) => {
                        s_busy[i] = true;
                        seq += 1;
                    }
                    Err(e) if e.is_again() => break,
                    Err(e) => {
                        first_err = Some(format!("post_send {e}"));
                        break;
                    }
                }
            }
        }
        done.clear();
        poll(io.cq, &mut done);
        for d in &done {
            let c = d.ctx();
            let (is_send, i) = if c >= rctx {
                (false, c - rctx)
            } else {
                (true, c - sctx)
            };
            match (d, is_send) {
                (Done::Ok(_), true) => {
                    s_busy[i] = false;
                    sent_ok += 1;
                }
                (Done::Err(e), true) => {
                    s_busy[i] = false;
                    sent_err += 1;
                    first_err.get_or_insert(format!(
                        "send error {} ({})",
                        e.err,
                        errno_name(e.err)
                    ));
                }
                (Done::Ok(e), false) => {
                    r_busy[i] = false;
                    assert_eq!(e.len, STREAM_MSG, "stream message length");
                    let s = check_stamp(&rbuf[i], e.len).unwrap_or_else(|m| panic!("{m}"));
                    assert!(seen.insert(s), "stream message {s} delivered twice");
                    recv_ok += 1;
                    if first_err.is_none() {
                        // SAFETY: as for the first post.
                        unsafe {
                            io.ep
                                .recv(rbuf[i].as_mut_ptr(), STREAM_MSG, FI_ADDR_UNSPEC, rctx + i)
                        }
                        .expect("repost recv");
                        r_busy[i] = true;
                    }
                }
                (Done::Err(e), false) => {
                    r_busy[i] = false;
                    recv_err += 1;
                    first_err.get_or_insert(format!(
                        "recv error {} ({})",
                        e.err,
                        errno_name(e.err)
                    ));
                }
            }
        }
        if let Some(eq) = io.eq {
            match eq.read() {
                Ok(ev) => {
                    events.push(format!("event {}", ev.event));
                    if ev.event == eq_event::FI_SHUTDOWN {
                        first_err.get_or_insert("FI_SHUTDOWN event".into());
                    }
                }
                Err(e) if e.code() == errno::FI_EAVAIL => {
                    let er = eq.readerr().expect("eq readerr");
                    events.push(format!("error {}", er.err));
                    first_err.get_or_insert(format!(
                        "EQ error entry {} ({})",
                        er.err,
                        errno_name(er.err)
                    ));
                }
                Err(e) if e.is_again() => {}
                Err(e) => panic!("eq read: {e}"),
            }
        }
        if !flowing && (sent_ok >= 16 || !send) && (recv_ok >= 16 || !recv) && first_err.is_none() {
            flowing = true;
            tell(&format!("FLOWING sent={sent_ok} received={recv_ok}"));
        }
        if let Some(e) = &first_err {
            if !reported {
                reported = true;
                tell(&format!(
                    "ERROR {e} (sent {sent_ok} received {recv_ok} before)"
                ));
            }
            if s_busy.iter().all(|b| !b) && drain_until.is_none() {
                // Error entries are read one per call: collect what the
                // failure produced besides the sends before reporting.
                drain_until = Some(Instant::now() + Duration::from_secs(1));
            }
            if drain_until.is_some_and(|t| Instant::now() > t) {
                tell(&format!(
                    "DONE sent_ok={sent_ok} sent_err={sent_err} recv_ok={recv_ok} recv_err={recv_err} recvs_still_posted={} events={events:?}",
                    r_busy.iter().filter(|b| **b).count()
                ));
                break;
            }
        }
    }
    if r_busy.iter().any(|b| *b) {
        // Receives may stay posted on the endpoint until it closes (at
        // process exit): keep their memory valid until then.
        std::mem::forget(rbuf);
    }
}

fn my_addr() -> String {
    std::env::var(ADDR_ENV).expect("address env")
}

/// (send, receive) for this child in the stream.
fn directions(side: &str) -> (bool, bool) {
    match std::env::var(MODE_ENV).as_deref() {
        Ok("both") => (true, true),
        Ok("one-way") => (side == "a", side == "b"),
        m => panic!("bad {MODE_ENV}: {m:?}"),
    }
}

fn rdm_child(side: &str) {
    let node = my_addr();
    let r = Rdm::open(&offer(ep_type::FI_EP_RDM, &node));
    let name = r.ep.getname().expect("getname");
    tell(&format!("ADDR {}", hex(&name)));
    let peer =
        r.av.insert_one(&unhex(&listen("PEER ")))
            .expect("insert peer");
    tell("READY");
    listen("SIZES");
    let io = Io {
        ep: &r.ep,
        cq: &r.cq,
        eq: Some(&r.eq),
        dest: peer,
    };
    check_sizes(&io, side == "a");
    tell("SIZES OK");
    listen("STREAM");
    let (send, recv) = directions(side);
    stream(&io, send, recv);
    linger();
}

fn wait_event(eq: &EventQueue, ev: u32, what: &str) -> ofi_core::util::eq::EqEvent {
    let deadline = Instant::now() + STEP;
    loop {
        match eq.read() {
            Ok(e) if e.event == ev => return e,
            Ok(e) => panic!("{what}: unexpected event {}", e.event),
            Err(e) if e.code() == errno::FI_EAVAIL => {
                panic!("{what}: EQ error entry {:?}", eq.readerr())
            }
            Err(e) if e.is_again() => {
                assert!(
                    Instant::now() < deadline,
                    "{what}: no event within {STEP:?}"
                )
            }
            Err(e) => panic!("{what}: eq read {e}"),
        }
    }
}

fn msg_child(side: &str) {
    let node = my_addr();
    let info = offer(ep_type::FI_EP_MSG, &node);
    let fabric = Fabric::open(&info.fabric_attr).expect("fabric");
    let eq = fabric.eq(&EqAttr::default()).expect("eq");
    let domain = fabric.domain(&info).expect("domain");
    let cq = domain.cq(&tagged_cq()).expect("cq");
    let (ep, _pep) = if side == "b" {
        let pep = fabric.passive_ep(&info, 1).expect("pep");
        pep.bind_eq(&eq).expect("pep bind eq");
        pep.listen().expect("listen");
        tell(&format!(
            "ADDR {}",
            hex(&pep.getname().expect("pep getname"))
        ));
        let req = wait_event(&eq, eq_event::FI_CONNREQ, "connection request");
        assert_eq!(req.cm_data, b"from A", "private data of the request");
        let rinfo = req.info.expect("CONNREQ carries an info");
        let ep = domain.endpoint_with_context(&rinfo, 2).expect("endpoint");
        ep.bind_cq(&cq, FI_TRANSMIT | FI_RECV).expect("bind cq");
        ep.bind_eq(&eq).expect("bind eq");
        ep.enable().expect("enable");
        ep.accept(b"from B").expect("accept");
        wait_event(&eq, eq_event::FI_CONNECTED, "accepted connection");
        (ep, Some(pep))
    } else {
        let ep = domain.endpoint_with_context(&info, 3).expect("endpoint");
        ep.bind_cq(&cq, FI_TRANSMIT | FI_RECV).expect("bind cq");
        ep.bind_eq(&eq).expect("bind eq");
        ep.enable().expect("enable");
        tell(&format!("ADDR {}", hex(&ep.getname().expect("getname"))));
        let peer = unhex(&listen("PEER "));
        ep.connect(&peer, b"from A").expect("connect");
        let c = wait_event(&eq, eq_event::FI_CONNECTED, "connect");
        assert_eq!(c.cm_data, b"from B", "private data of the accept");
        (ep, None)
    };
    let peer = ofi_prov_tcp::addr::decode(&ep.getpeer().expect("getpeer")).expect("peer");
    let me = ofi_prov_tcp::addr::decode(&ep.getname().expect("getname")).expect("me");
    assert_eq!(me.ip().to_string(), node, "local address of the connection");
    tell(&format!("READY {me} <-> {peer}"));
    listen("SIZES");
    let io = Io {
        ep: &ep,
        cq: &cq,
        eq: Some(&eq),
        dest: 0,
    };
    check_sizes(&io, side == "a");
    tell("SIZES OK");
    listen("STREAM");
    let (send, recv) = directions(side);
    stream(&io, send, recv);
    linger();
}

// ------------------------------------------------------------- parent side

fn parent(kind: &str, test: &str, mode: &str) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let index = KINDS.iter().position(|k| *k == kind).expect("kind") as u32;
    let ns = Netns::create(kind, index);
    let (aa, ab) = (ns.addr(1), ns.addr(2));
    // Declared after `ns`: the children die before the namespaces go.
    let mut a = Kid::spawn(&format!("{kind}-a"), ns.child(&ns.a, test, "a", &aa, mode));
    let mut b = Kid::spawn(&format!("{kind}-b"), ns.child(&ns.b, test, "b", &ab, mode));
    let addr_a = a.expect("ADDR ", STEP);
    let addr_b = b.expect("ADDR ", STEP);
    for (who, hexa, want) in [("a", &addr_a, &aa), ("b", &addr_b, &ab)] {
        let sa = ofi_prov_tcp::addr::decode(&unhex(hexa)).expect("child address");
        assert_eq!(&sa.ip().to_string(), want, "child {who}'s endpoint address");
    }
    a.say(&format!("PEER {addr_b}"));
    b.say(&format!("PEER {addr_a}"));
    eprintln!("a: {}", a.expect("READY", STEP));
    eprintln!("b: {}", b.expect("READY", STEP));
    a.say("SIZES");
    b.say("SIZES");
    a.expect("SIZES OK", STEP);
    b.expect("SIZES OK", STEP);
    a.say("STREAM");
    b.say("STREAM");
    for k in [&mut a, &mut b] {
        let (i, rest, _) = k.expect_any(&["FLOWING", "ERROR", "DONE"], Instant::now() + STEP);
        assert_eq!(
            i, 0,
            "{}: reported '{rest}' before the link went down",
            k.name
        );
        eprintln!("{}: flowing {rest}", k.name);
    }
    // Let the stream fill the pipes, then cut the link in the middle of it.
    std::thread::sleep(Duration::from_millis(300));
    for k in [&mut a, &mut b] {
        if let Some(l) = k.try_line() {
            panic!("{}: reported '{l}' before the link went down", k.name);
        }
    }
    let t0 = Instant::now();
    let st = Command::new("ip")
        .args(["netns", "exec", &ns.a, "ip", "link", "set", &ns.va, "down"])
        .status()
        .expect("running ip link set down");
    assert!(st.success(), "ip link set {} down: {st}", ns.va);
    eprintln!("{} set down in {}", ns.va, ns.a);
    let mut report = Vec::new();
    for k in [&mut a, &mut b] {
        let (i, rest, at) = k.expect_any(
            &["ERROR", "DONE"],
            t0 + DEAD_LINK_BOUND + Duration::from_secs(5),
        );
        let took = at.saturating_duration_since(t0);
        assert_eq!(i, 0, "{}: DONE before ERROR: {rest}", k.name);
        eprintln!("{}: first error after {took:?}: {rest}", k.name);
        assert!(
            took < DEAD_LINK_BOUND,
            "{}: the dead link was noticed only after {took:?} (bound {DEAD_LINK_BOUND:?}): {rest}",
            k.name
        );
        report.push((k.name.clone(), took, rest));
    }
    for k in [&mut a, &mut b] {
        let (_, rest, at) = k.expect_any(&["DONE"], t0 + DEAD_LINK_BOUND + Duration::from_secs(15));
        eprintln!(
            "{}: all sends finished after {:?}: {rest}",
            k.name,
            at.saturating_duration_since(t0)
        );
    }
    for k in [&mut a, &mut b] {
        k.say("EXIT");
        k.finish(Duration::from_secs(20));
    }
    drop(a);
    drop(b);
    let (na, nb) = (ns.a.clone(), ns.b.clone());
    drop(ns);
    let left: Vec<String> = netns_list()
        .into_iter()
        .filter(|n| *n == na || *n == nb)
        .collect();
    assert!(left.is_empty(), "namespaces not removed: {left:?}");
    eprintln!("{kind}: {report:?}");
}

#[test]
fn rdm_link_down_between_namespaces() {
    if let Some(side) = role() {
        child_main(|| rdm_child(&side));
    }
    parent("rdm", "rdm_link_down_between_namespaces", "both");
}

#[test]
fn rdm_one_way_link_down_between_namespaces() {
    if let Some(side) = role() {
        child_main(|| rdm_child(&side));
    }
    parent(
        "rdm1",
        "rdm_one_way_link_down_between_namespaces",
        "one-way",
    );
}

#[test]
fn msg_link_down_between_namespaces() {
    if let Some(side) = role() {
        child_main(|| msg_child(&side));
    }
    parent("msg", "msg_link_down_between_namespaces", "both");
}

#[test]
fn msg_one_way_link_down_between_namespaces() {
    if let Some(side) = role() {
        child_main(|| msg_child(&side));
    }
    parent(
        "msg1",
        "msg_one_way_link_down_between_namespaces",
        "one-way",
    );
}
