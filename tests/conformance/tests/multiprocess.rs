//! Multi-process conformance: traffic between processes at every size class
//! (also with the fallback tunables in both processes), peers killed with
//! SIGKILL in the middle of large transfers, shared-memory segment hygiene,
//! a wait fd woken by another process, concurrent blocking ping-pongs, and
//! the FI_PROVIDER filter.
//!
//! This binary re-executes itself: with `OFI_CONF_ROLE` set it runs one
//! child role (talking to the parent over stdin/stdout lines); otherwise it
//! is a small test runner (`harness = false`) that accepts libtest's usual
//! filter argument, `--exact`, `--list` and `--test-threads`.
#![allow(unsafe_code)]

use ofi::consts::*;
use ofi::errno;
use ofi::{CqTaggedEntry, Info, IoVec};
use ofi_conformance::*;
use std::io::{BufRead, BufReader, Write};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const ROLE: &str = "OFI_CONF_ROLE";
const PROV: &str = "OFI_CONF_PROV";
const EPTYPE: &str = "OFI_CONF_EP";
/// The parent's offer, so the child opens a matching one: address format,
/// fabric and domain names.
const FMT: &str = "OFI_CONF_FMT";
const FABRIC: &str = "OFI_CONF_FABRIC";
const DOMAIN: &str = "OFI_CONF_DOMAIN";
const SIZES_ENV: &str = "OFI_CONF_SIZES";

/// Sizes exchanged between processes: every class, a multi-chunk large
/// message, and scatter-gather (`v` prefix: 4-entry iov on both sides).
const XP_SIZES: &str = "0,1,8,4096,4097,32768,32769,1048576,8388608,v100,v20000,v3145728";

// ---------------------------------------------------------------- helpers

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex address"))
        .collect()
}

fn parse_sizes(s: &str) -> Vec<(usize, bool)> {
    s.split(',')
        .filter(|x| !x.is_empty())
        .map(|x| match x.strip_prefix('v') {
            Some(n) => (n.parse().expect("size"), true),
            None => (x.parse().expect("size"), false),
        })
        .collect()
}

/// Four uneven iov lengths summing to `total`.
fn split(total: usize, fracs: [usize; 3]) -> Vec<usize> {
    let a = total / fracs[0];
    let b = total / fracs[1];
    let c = (total / fracs[2]).min(total - a - b);
    vec![a, b, c, total - a - b - c]
}

/// The iov entries over consecutive pieces of `buf`.
fn iovs(buf: &mut [u8], lens: &[usize]) -> Vec<IoVec> {
    let base = buf.as_mut_ptr() as usize;
    let mut at = 0;
    lens.iter()
        .map(|&l| {
            at += l;
            IoVec {
                base: base + at - l,
                len: l,
            }
        })
        .collect()
}

/// A child process running one role, spoken to by lines.
struct Kid {
    name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
}

impl Kid {
    fn spawn(role: &str, info: &Info, env: &[(&str, &str)]) -> Kid {
        let exe = std::env::current_exe().expect("current_exe");
        let mut cmd = Command::new(exe);
        cmd.env(ROLE, role)
            .env(PROV, info.provider())
            .env(EPTYPE, info.ep_attr.ep_type.to_string())
            .env(FMT, info.addr_format.to_string())
            .env(FABRIC, info.fabric_attr.name.clone().unwrap_or_default())
            .env(DOMAIN, info.domain_attr.name.clone().unwrap_or_default())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawning child {role}: {e}"));
        let out = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines() {
                let Ok(l) = l else { break };
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        Kid {
            name: format!("{role}[{}]", child.id()),
            child,
            stdin,
            lines: rx,
        }
    }

    fn say(&mut self, line: &str) {
        let name = self.name.clone();
        let w = self
            .stdin
            .as_mut()
            .unwrap_or_else(|| panic!("{name}: stdin closed"));
        writeln!(w, "{line}").unwrap_or_else(|e| panic!("{name}: writing '{line}': {e}"));
        let _ = w.flush();
    }

    /// Waits for a line starting with `prefix`; returns the rest. Panics on
    /// timeout, on the child's exit, or on a `FAIL` line.
    fn expect(&mut self, prefix: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) if l.starts_with(prefix) => return l[prefix.len()..].trim().to_string(),
                Ok(l) if l.starts_with("FAIL") => panic!("{}: {l}", self.name),
                Ok(l) => eprintln!("{}: {l}", self.name),
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    panic!("{}: no '{prefix}' line within {timeout:?}", self.name)
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let st = self.child.wait().map(|s| s.to_string()).unwrap_or_default();
                    panic!("{}: exited ({st}) before printing '{prefix}'", self.name)
                }
            }
        }
    }

    /// SIGKILL (this child only, by its pid).
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits for a clean exit.
    fn finish(&mut self, timeout: Duration) {
        self.stdin = None;
        let deadline = Instant::now() + timeout;
        loop {
            match self.child.try_wait() {
                Ok(Some(st)) => {
                    assert!(st.success(), "{} exited with {st}", self.name);
                    return;
                }
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                _ => {
                    self.kill();
                    panic!("{} did not exit within {timeout:?}", self.name);
                }
            }
        }
    }
}

impl Drop for Kid {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.kill();
        }
    }
}

/// This process's side of a conversation with another process: an
/// endpoint (RDM) or a listener (MSG) whose name goes to the other side.
fn one(info: &Info, wait: u32) -> Result<Peer, Skip> {
    Peer::open(info, FI_MSG, wait)
}

/// Gives a child this process's name, learns the child's, and joins it.
fn meet(me: Peer, kid: &mut Kid) -> Joined {
    let theirs = unhex(&kid.expect("ADDR ", TIMEOUT));
    kid.say(&format!("PEER {}", hex(me.name())));
    me.join(&theirs)
}

thread_local! {
    /// Completions read while waiting for another context, kept for later.
    static STASH: std::cell::RefCell<Completions> = std::cell::RefCell::new(Completions::default());
}

/// Waits for a completion of `ctx` on the endpoint's CQ (keeping others
/// read meanwhile for later calls); panics with `what` on an error entry or
/// timeout.
fn complete(g: &Joined, ctx: usize, what: &str) -> CqTaggedEntry {
    let deadline = Instant::now() + TIMEOUT;
    STASH.with(|st| {
        let mut c = st.borrow_mut();
        loop {
            if let Some(e) = c.err.first() {
                panic!(
                    "{what}: error entry err {} ({}) ctx {:#x}",
                    e.err,
                    errno_name(e.err),
                    e.op_context
                );
            }
            if let Some(i) = c.ok.iter().position(|e| e.op_context == ctx) {
                c.src.remove(i);
                return c.ok.remove(i);
            }
            if Instant::now() >= deadline {
                panic!("{what}: no completion within {TIMEOUT:?}");
            }
            if poll_cq(&g.cq, &mut c) == 0 {
                std::thread::yield_now();
            }
        }
    })
}

/// Sends `buf` (optionally as 4 uneven iov entries) and waits for it.
fn send_msg(g: &Joined, dest: u64, buf: &mut [u8], v: bool, ctx: usize) {
    let ep = &g.ep;
    let r = if v {
        let iov = iovs(buf, &split(buf.len(), [10, 3, 1000]));
        // SAFETY: buf outlives the send; we wait for its completion below.
        retry(&[ep], TIMEOUT, || unsafe { ep.sendv(&iov, dest, ctx) })
    } else {
        // SAFETY: buf is valid for buf.len() bytes and outlives the send;
        // we wait for its completion below.
        retry(&[ep], TIMEOUT, || unsafe {
            ep.send(buf.as_ptr(), buf.len(), dest, ctx)
        })
    };
    r.unwrap_or_else(|e| panic!("send {}: {e}", buf.len()));
    complete(g, ctx, &format!("send of {} bytes", buf.len()));
}

/// Posts a receive (optionally as 4 uneven iov entries).
fn post_recv(g: &Joined, buf: &mut [u8], v: bool, ctx: usize) {
    let ep = &g.ep;
    let r = if v {
        let iov = iovs(buf, &split(buf.len(), [2, 1000, 7]));
        // SAFETY: buf outlives the receive; the caller waits for it.
        unsafe { ep.recvv(&iov, FI_ADDR_UNSPEC, ctx) }
    } else {
        // SAFETY: buf is valid for buf.len() bytes and outlives the
        // receive; the caller waits for it.
        unsafe { ep.recv(buf.as_mut_ptr(), buf.len(), FI_ADDR_UNSPEC, ctx) }
    };
    r.unwrap_or_else(|e| panic!("recv {}: {e}", buf.len()));
}

// ---------------------------------------------------------------- children

fn child_offer() -> Info {
    let mut h = Info::hints();
    h.fabric_attr.prov_name = std::env::var(PROV).ok();
    h.ep_attr.ep_type = std::env::var(EPTYPE)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    h.addr_format = std::env::var(FMT)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    h.fabric_attr.name = std::env::var(FABRIC).ok().filter(|s| !s.is_empty());
    h.domain_attr.name = std::env::var(DOMAIN).ok().filter(|s| !s.is_empty());
    let v = ofi::getinfo(FI_VERSION_CURRENT, None, None, 0, Some(&h))
        .unwrap_or_else(|e| panic!("child getinfo: {e}"));
    v.into_iter()
        .find(ofi_conformance::is_local_offer)
        .expect("child getinfo: no loopback offer matching the parent's")
}

fn stdin_line() -> Option<String> {
    let mut s = String::new();
    match std::io::stdin().lock().read_line(&mut s) {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(s.trim().to_string()),
    }
}

fn expect_stdin(prefix: &str) -> String {
    loop {
        let l = stdin_line().unwrap_or_else(|| panic!("parent closed stdin before '{prefix}'"));
        if let Some(r) = l.strip_prefix(prefix) {
            return r.trim().to_string();
        }
    }
}

/// Opens one endpoint (or listener), prints its name, learns the peer's
/// and joins it.
fn child_endpoint(wait: u32) -> Joined {
    let info = child_offer();
    let g = one(&info, wait).unwrap_or_else(|s| panic!("child cannot open an endpoint: {s:?}"));
    println!("ADDR {}", hex(g.name()));
    let peer = unhex(&expect_stdin("PEER "));
    g.join(&peer)
}

/// Receives each size and sends it back.
fn role_echo() {
    let g = child_endpoint(wait_obj::FI_WAIT_UNSPEC);
    let peer = g.peer;
    let sizes = parse_sizes(&std::env::var(SIZES_ENV).expect("sizes"));
    for (i, &(size, v)) in sizes.iter().enumerate() {
        let mut buf = vec![0u8; size];
        post_recv(&g, &mut buf, v, 1);
        println!("POSTED {i}");
        let e = complete(&g, 1, &format!("echo receive of {size}"));
        assert_eq!(e.len, size, "echo: received length");
        assert_bytes_eq(
            &buf,
            &pattern(i as u64, size),
            &format!("echo: message {i} of {size} bytes"),
        );
        send_msg(&g, peer, &mut buf, v, 2);
    }
    println!("DONE");
    let _ = stdin_line();
}

/// Sends each size, waits for the echo, checks it.
fn client(g: &Joined, peer: u64, sizes: &[(usize, bool)], mut posted: impl FnMut(usize)) {
    for (i, &(size, v)) in sizes.iter().enumerate() {
        let mut tx = pattern(i as u64, size);
        let mut rx = vec![0u8; size];
        post_recv(g, &mut rx, v, 3);
        posted(i);
        send_msg(g, peer, &mut tx, v, 4);
        let e = complete(g, 3, &format!("client receive of the echo of {size}"));
        assert_eq!(e.len, size, "client: echo length");
        assert_bytes_eq(
            &rx,
            &tx,
            &format!(
                "client: echo of message {i} ({size} bytes{})",
                if v { ", iov" } else { "" }
            ),
        );
    }
}

fn role_client() {
    let g = child_endpoint(wait_obj::FI_WAIT_UNSPEC);
    let peer = g.peer;
    let sizes = parse_sizes(&std::env::var(SIZES_ENV).expect("sizes"));
    client(&g, peer, &sizes, |_| {});
    println!("OK");
    let _ = stdin_line();
}

/// Opens an endpoint and never progresses it: messages to it stay unread.
fn role_sink() {
    let _g = child_endpoint(wait_obj::FI_WAIT_UNSPEC);
    println!("READY");
    while stdin_line().is_some() {}
}

/// Posts one large receive and progresses it slowly (a transfer to it takes
/// a while); reports how the receive ended.
fn role_slow_receiver() {
    let g = child_endpoint(wait_obj::FI_WAIT_UNSPEC);
    let size: usize = std::env::var(SIZES_ENV)
        .expect("size")
        .parse()
        .expect("size");
    let mut buf = vec![0u8; size];
    post_recv(&g, &mut buf, false, 1);
    println!("READY");
    report_receive(&g, Duration::from_millis(50));
}

/// Polls the CQ (sleeping `pause` between polls) until the receive
/// completes or fails; prints `RESULT ...`.
fn report_receive(g: &Joined, pause: Duration) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut c = Completions::default();
    while Instant::now() < deadline {
        poll_cq(&g.cq, &mut c);
        if let Some(e) = c.err.first() {
            println!("RESULT err {}", e.err);
            return;
        }
        if !c.ok.is_empty() {
            println!("RESULT ok {}", c.ok[0].len);
            return;
        }
        std::thread::sleep(pause);
    }
    println!("RESULT timeout");
}

/// Posts one large receive and progresses it as fast as it can.
fn role_reporting_receiver() {
    let g = child_endpoint(wait_obj::FI_WAIT_UNSPEC);
    let size: usize = std::env::var(SIZES_ENV)
        .expect("size")
        .parse()
        .expect("size");
    let mut buf = vec![0u8; size];
    post_recv(&g, &mut buf, false, 1);
    println!("READY");
    report_receive(&g, Duration::ZERO);
}

/// Sends one large message, progresses a few times, then stops.
fn role_stalling_sender() {
    let g = child_endpoint(wait_obj::FI_WAIT_UNSPEC);
    let peer = g.peer;
    let size: usize = std::env::var(SIZES_ENV)
        .expect("size")
        .parse()
        .expect("size");
    let buf = pattern(1, size);
    expect_stdin("GO");
    let ep = &g.ep;
    // SAFETY: buf lives until this process is killed.
    retry(&[ep], TIMEOUT, || unsafe {
        ep.send(buf.as_ptr(), size, peer, 9)
    })
    .expect("send");
    let mut c = Completions::default();
    for _ in 0..5 {
        poll_cq(&g.cq, &mut c);
        std::thread::sleep(Duration::from_millis(20));
    }
    println!("STALLED {}", c.total());
    while stdin_line().is_some() {}
}

/// Opens an endpoint, never progresses it, closes it when told to and
/// stays alive.
fn role_close_unread() {
    let g = child_endpoint(wait_obj::FI_WAIT_UNSPEC);
    println!("READY");
    expect_stdin("CLOSE");
    drop(g);
    println!("CLOSED");
    while stdin_line().is_some() {}
}

/// Sends one message when told to.
fn role_send_once() {
    let g = child_endpoint(wait_obj::FI_WAIT_UNSPEC);
    let peer = g.peer;
    expect_stdin("GO");
    let mut m = *b"from another pid";
    send_msg(&g, peer, &mut m, false, 5);
    println!("SENT");
    let _ = stdin_line();
}

/// Reports which providers getinfo returns (FI_PROVIDER is in the env).
fn role_getinfo() {
    match ofi::getinfo(FI_VERSION_CURRENT, None, None, 0, None) {
        Ok(v) => {
            let mut names: Vec<&str> = v.iter().map(|i| i.provider()).collect();
            names.dedup();
            println!("PROVIDERS {}", names.join(","));
        }
        Err(e) => println!("ERROR {}", e.code()),
    }
}

/// Lists this process's segment files in /dev/shm.
fn my_segments() -> Vec<std::path::PathBuf> {
    // SAFETY: geteuid cannot fail.
    let uid = unsafe { libc::geteuid() };
    let prefix = format!("ofi-shm-{uid}-{}-", std::process::id());
    let Ok(dir) = std::fs::read_dir("/dev/shm") else {
        return Vec::new();
    };
    dir.flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect()
}

/// Opens an endpoint, checks its files in /dev/shm (mode 0600, ours),
/// closes it and checks they are gone.
fn role_segments() {
    use std::os::unix::fs::MetadataExt;
    let before = my_segments();
    if !before.is_empty() {
        println!("FAIL segment files before any endpoint: {before:?}");
        return;
    }
    let info = child_offer();
    let g = one(&info, wait_obj::FI_WAIT_UNSPEC).expect("endpoint");
    let files = my_segments();
    if files.is_empty() {
        println!("SKIP the provider created no /dev/shm segment files");
        return;
    }
    // SAFETY: geteuid cannot fail.
    let uid = unsafe { libc::geteuid() };
    for f in &files {
        let m = std::fs::symlink_metadata(f).expect("stat segment");
        if m.mode() & 0o777 != 0o600 {
            println!(
                "FAIL {} has mode {:o}, expected 600",
                f.display(),
                m.mode() & 0o777
            );
            return;
        }
        if m.uid() != uid {
            println!(
                "FAIL {} is owned by uid {}, expected {uid}",
                f.display(),
                m.uid()
            );
            return;
        }
    }
    println!("FILES {}", files.len());
    drop(g);
    let after = my_segments();
    if !after.is_empty() {
        println!("FAIL segment files left after close: {after:?}");
        return;
    }
    println!("OK");
}

/// Opens an endpoint and exits.
fn role_open_one() {
    let info = child_offer();
    let g = one(&info, wait_obj::FI_WAIT_UNSPEC).expect("endpoint");
    println!("OPENED");
    drop(g);
}

/// Ping-pong with blocking waits (FI_WAIT_FD + sread). `server` echoes.
fn role_pingpong(server: bool) {
    let g = child_endpoint(wait_obj::FI_WAIT_FD);
    let peer = g.peer;
    let iters: usize = std::env::var(SIZES_ENV)
        .expect("iters")
        .parse()
        .expect("iters");
    let ep = &g.ep;
    let cq = &g.cq;
    let mut rx = [0u8; 64];
    let mut tx = [0u8; 64];
    let (mut recvs, mut sends) = (0usize, 0usize);
    let mut e = [CqTaggedEntry::default(); 8];
    // Blocks until the number of receive completions reaches `want_r` and
    // of send completions reaches `want_s`.
    let mut wait = |want_r: usize,
                    want_s: usize,
                    recvs: &mut usize,
                    sends: &mut usize,
                    i: usize| {
        while *recvs < want_r || *sends < want_s {
            match cq.sread(&mut e, Some(Duration::from_secs(20))) {
                Ok(n) => {
                    for x in &e[..n] {
                        if x.flags & FI_RECV != 0 {
                            *recvs += 1;
                        } else {
                            *sends += 1;
                        }
                    }
                }
                Err(err) if err.is_again() => {
                    println!("FAIL round trip {i}: sread timed out after 20 s ({recvs} receives, {sends} sends)");
                    std::process::exit(1);
                }
                Err(err) => {
                    let ee = cq.readerr();
                    println!("FAIL round trip {i}: {err} {ee:?}");
                    std::process::exit(1);
                }
            }
        }
    };
    expect_stdin("GO");
    for i in 0..iters {
        // SAFETY: rx outlives the receive; we wait for it below.
        unsafe { ep.recv(rx.as_mut_ptr(), 64, FI_ADDR_UNSPEC, 1) }.expect("recv");
        if server {
            wait(i + 1, i, &mut recvs, &mut sends, i);
            tx.copy_from_slice(&rx);
            // SAFETY: tx outlives the send; we wait for it before reuse.
            retry(&[ep], TIMEOUT, || unsafe {
                ep.send(tx.as_ptr(), 64, peer, 2)
            })
            .expect("send");
            wait(i + 1, i + 1, &mut recvs, &mut sends, i);
        } else {
            tx[..8].copy_from_slice(&(i as u64).to_le_bytes());
            // SAFETY: tx (64 bytes) outlives the send; we wait for its
            // completion before the next round rewrites it.
            retry(&[ep], TIMEOUT, || unsafe {
                ep.send(tx.as_ptr(), 64, peer, 2)
            })
            .expect("send");
            wait(i + 1, i + 1, &mut recvs, &mut sends, i);
            let got = u64::from_le_bytes(rx[..8].try_into().expect("8 bytes"));
            if got != i as u64 {
                println!("FAIL round trip {i}: echo carried {got}");
                std::process::exit(1);
            }
        }
    }
    println!("DONE {iters}");
    let _ = stdin_line();
}

fn child_main(role: &str) -> i32 {
    match role {
        "echo" => role_echo(),
        "client" => role_client(),
        "sink" => role_sink(),
        "slow-receiver" => role_slow_receiver(),
        "reporting-receiver" => role_reporting_receiver(),
        "stalling-sender" => role_stalling_sender(),
        "send-once" => role_send_once(),
        "close-unread" => role_close_unread(),
        "getinfo" => role_getinfo(),
        "segments" => role_segments(),
        "open-one" => role_open_one(),
        "pp-server" => role_pingpong(true),
        "pp-client" => role_pingpong(false),
        other => {
            eprintln!("unknown child role {other}");
            return 2;
        }
    }
    0
}

// ---------------------------------------------------------------- tests

/// Connects two children: each learns the other's address.
fn introduce(x: &mut Kid, y: &mut Kid) {
    let ax = x.expect("ADDR ", TIMEOUT);
    let ay = y.expect("ADDR ", TIMEOUT);
    x.say(&format!("PEER {ay}"));
    y.say(&format!("PEER {ax}"));
}

/// This process (client) and a child (echo) exchange every size class.
fn cross_process_all_sizes() {
    run("cross_process_all_sizes", |info| {
        let me = one(info, wait_obj::FI_WAIT_UNSPEC)?;
        let mut kid = Kid::spawn("echo", info, &[(SIZES_ENV, XP_SIZES)]);
        let g = meet(me, &mut kid);
        client(&g, g.peer, &parse_sizes(XP_SIZES), |i| {
            // Let the child post first half the time: the other half arrives unexpected.
            if i % 2 == 0 {
                kid.expect(&format!("POSTED {i}"), TIMEOUT);
            }
        });
        kid.expect("DONE", TIMEOUT);
        kid.finish(TIMEOUT);
        Ok(())
    });
}

/// Two children exchange every size class with `env` set in both.
fn two_children(info: &Info, env: &[(&str, &str)]) {
    let mut all: Vec<(&str, &str)> = env.to_vec();
    all.push((SIZES_ENV, XP_SIZES));
    let mut echo = Kid::spawn("echo", info, &all);
    let mut cl = Kid::spawn("client", info, &all);
    introduce(&mut echo, &mut cl);
    cl.expect("OK", Duration::from_secs(60));
    echo.expect("DONE", TIMEOUT);
    cl.finish(TIMEOUT);
    echo.finish(TIMEOUT);
}

/// The fallback path (no cross-process copy) in both processes.
fn cross_process_fallback_path() {
    run("cross_process_fallback_path", |info| {
        require(info, FI_MSG)?;
        require_pairable(info)?;
        two_children(info, &[("FI_SHM_DISABLE_CMA", "1")]);
        Ok(())
    });
}

/// The fallback path with a tiny ring and two bounce buffers (flow control).
fn cross_process_fallback_small_ring() {
    run("cross_process_fallback_small_ring", |info| {
        require(info, FI_MSG)?;
        require_pairable(info)?;
        two_children(
            info,
            &[
                ("FI_SHM_DISABLE_CMA", "1"),
                ("FI_SHM_RING_SLOTS", "8"),
                ("FI_SHM_BOUNCE_BUFS", "2"),
            ],
        );
        Ok(())
    });
}

/// Polls `g`'s CQ until an entry for `ctx` arrives or `limit` passes.
fn outcome(g: &Joined, ctx: usize, limit: Duration) -> (Completions, Duration) {
    let t = Instant::now();
    let mut c = Completions::default();
    while t.elapsed() < limit {
        poll_cq(&g.cq, &mut c);
        if c.ok_ctx(ctx).is_some() || c.err_ctx(ctx).is_some() {
            break;
        }
        std::thread::yield_now();
    }
    (c, t.elapsed())
}

/// The receiver dies (SIGKILL) while this process's large send waits for
/// its ACK: the send fails with an error completion within 5 s.
fn peer_killed_while_sender_waits_for_ack() {
    run("peer_killed_while_sender_waits_for_ack", |info| {
        let me = one(info, wait_obj::FI_WAIT_UNSPEC)?;
        let mut kid = Kid::spawn("sink", info, &[]);
        let g = meet(me, &mut kid);
        let peer = g.peer;
        kid.expect("READY", TIMEOUT);
        let buf = pattern(3, 8 << 20);
        let ep = &g.ep;
        // SAFETY: buf outlives the send; its completion (an error) is awaited below.
        retry(&[ep], TIMEOUT, || unsafe {
            ep.send(buf.as_ptr(), buf.len(), peer, 0x77)
        })
        .expect("send");
        let (early, _) = outcome(&g, 0x77, Duration::from_millis(300));
        assert!(
            early.ok.is_empty(),
            "an 8 MiB send completed although the receiver never ran: {:?}",
            early.ok
        );
        assert!(
            early.err.is_empty(),
            "send failed before the receiver died: {}",
            errs(&early)
        );
        kid.kill();
        let (c, took) = outcome(&g, 0x77, Duration::from_secs(5));
        assert!(
            c.ok.is_empty(),
            "the send to a killed receiver completed successfully"
        );
        let e = c.err_ctx(0x77).unwrap_or_else(|| {
            panic!("no error completion within 5 s of the receiver's death (waited {took:?})")
        });
        assert_ne!(e.err, 0);
        assert!(
            took < Duration::from_secs(5),
            "death noticed after {took:?}"
        );
        eprintln!(
            "peer death noticed after {took:?}: err {} ({})",
            e.err,
            errno_name(e.err)
        );
        Ok(())
    });
}

/// The receiving process closes its endpoint (and keeps running) while this
/// process's large send waits for its acknowledgement: the send finishes
/// (error or success) within 5 s instead of waiting forever.
fn peer_endpoint_closed_while_sender_waits() {
    run("peer_endpoint_closed_while_sender_waits", |info| {
        let me = one(info, wait_obj::FI_WAIT_UNSPEC)?;
        let mut kid = Kid::spawn("close-unread", info, &[]);
        let g = meet(me, &mut kid);
        let peer = g.peer;
        kid.expect("READY", TIMEOUT);
        let buf = pattern(6, 8 << 20);
        let ep = &g.ep;
        // SAFETY: buf outlives the send; its completion is awaited below.
        retry(&[ep], TIMEOUT, || unsafe {
            ep.send(buf.as_ptr(), buf.len(), peer, 0x79)
        })
        .expect("send");
        let (early, _) = outcome(&g, 0x79, Duration::from_millis(100));
        assert_eq!(
            early.total(),
            0,
            "the send finished before the receiver closed: {:?} {}",
            early.ok,
            errs(&early)
        );
        kid.say("CLOSE");
        kid.expect("CLOSED", TIMEOUT);
        let (c, took) = outcome(&g, 0x79, Duration::from_secs(5));
        assert!(
            c.ok_ctx(0x79).is_some() || c.err_ctx(0x79).is_some(),
            "an 8 MiB send to an endpoint that closed without reading it is still pending after {took:?} (its process is alive)"
        );
        eprintln!(
            "send to a closed endpoint finished after {took:?}: ok {:?} err {}",
            c.ok,
            errs(&c)
        );
        kid.finish(TIMEOUT);
        Ok(())
    });
}

/// The receiver (fallback path, progressing slowly) dies mid-transfer:
/// this process's send fails within 5 s.
fn receiver_killed_mid_transfer() {
    run("receiver_killed_mid_transfer", |info| {
        let me = one(info, wait_obj::FI_WAIT_UNSPEC)?;
        let size = 16usize << 20;
        let mut kid = Kid::spawn(
            "slow-receiver",
            info,
            &[("FI_SHM_DISABLE_CMA", "1"), (SIZES_ENV, &size.to_string())],
        );
        let g = meet(me, &mut kid);
        let peer = g.peer;
        kid.expect("READY", TIMEOUT);
        let buf = pattern(4, size);
        let ep = &g.ep;
        // SAFETY: buf outlives the send; its completion is awaited below.
        retry(&[ep], TIMEOUT, || unsafe {
            ep.send(buf.as_ptr(), size, peer, 0x78)
        })
        .expect("send");
        let (early, _) = outcome(&g, 0x78, Duration::from_millis(300));
        if !early.ok.is_empty() {
            return Err(Skip::chance(
                "the transfer finished before the receiver could be killed mid-way",
            ));
        }
        assert!(
            early.err.is_empty(),
            "send failed before the receiver died: {}",
            errs(&early)
        );
        kid.kill();
        let (c, took) = outcome(&g, 0x78, Duration::from_secs(5));
        assert!(
            c.ok.is_empty(),
            "the send to a receiver killed mid-transfer completed successfully"
        );
        let e = c
            .err_ctx(0x78)
            .unwrap_or_else(|| panic!("no error completion within 5 s of the receiver's death"));
        eprintln!(
            "receiver death noticed after {took:?}: err {} ({})",
            e.err,
            errno_name(e.err)
        );
        Ok(())
    });
}

/// The sender dies mid-transfer (fallback path): the receiving process
/// gets an error completion within 5 s.
fn sender_killed_mid_transfer() {
    run("sender_killed_mid_transfer", |info| {
        require(info, FI_MSG)?;
        require_pairable(info)?;
        let size = (32usize << 20).to_string();
        let env = [
            ("FI_SHM_DISABLE_CMA", "1"),
            ("FI_SHM_RING_SLOTS", "16"),
            (SIZES_ENV, size.as_str()),
        ];
        let mut rx = Kid::spawn("reporting-receiver", info, &env);
        let mut tx = Kid::spawn("stalling-sender", info, &env);
        introduce(&mut rx, &mut tx);
        rx.expect("READY", TIMEOUT);
        tx.say("GO");
        let done = tx.expect("STALLED", TIMEOUT);
        if done != "0" {
            return Err(Skip::chance(format!(
                "the sender finished ({done} completions) before stalling"
            )));
        }
        tx.kill();
        let t = Instant::now();
        let r = rx.expect("RESULT ", Duration::from_secs(5));
        let took = t.elapsed();
        assert!(
            r.starts_with("err "),
            "receiver of a killed sender reported '{r}' (expected an error entry)"
        );
        assert!(
            took < Duration::from_secs(5),
            "sender death noticed after {took:?}"
        );
        eprintln!("sender death noticed after {took:?}: {r}");
        rx.finish(TIMEOUT);
        Ok(())
    });
}

/// Segment files are mode 0600, owned by the user, and removed on close.
fn segments_private_and_removed_on_close() {
    run("segments_private_and_removed_on_close", |info| {
        require(info, FI_MSG)?;
        require_pairable(info)?;
        let mut kid = Kid::spawn("segments", info, &[]);
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match kid.lines.recv_timeout(left) {
                Ok(l) if l == "OK" => break,
                Ok(l) if l.starts_with("SKIP ") => {
                    kid.finish(TIMEOUT);
                    return Err(Skip::limit(&l["SKIP ".len()..]));
                }
                Ok(l) if l.starts_with("FAIL") => panic!("{l}"),
                Ok(l) => eprintln!("segments: {l}"),
                Err(e) => panic!("segments child: {e:?}"),
            }
        }
        kid.finish(TIMEOUT);
        Ok(())
    });
}

/// A pid that names no process (searching down from pid_max).
fn dead_pid() -> u32 {
    let max: u32 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(32768);
    (2..max)
        .rev()
        .find(|&p| {
            // SAFETY: signal 0 only checks for existence.
            let r = unsafe { libc::kill(p as libc::pid_t, 0) };
            r < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
        })
        .expect("some pid is free")
}

/// A segment left by a dead process is removed when a fresh process opens
/// an endpoint.
fn stale_segment_reclaimed() {
    run("stale_segment_reclaimed", |info| {
        require(info, FI_MSG)?;
        require_pairable(info)?;
        // Only meaningful for providers that keep segments in /dev/shm.
        let mut probe = Kid::spawn("segments", info, &[]);
        let first = probe.expect("", TIMEOUT);
        if let Some(why) = first.strip_prefix("SKIP ") {
            return Err(Skip::limit(why));
        }
        assert!(first.starts_with("FILES"), "segments probe: {first}");
        probe.expect("OK", TIMEOUT);
        probe.finish(TIMEOUT);
        // SAFETY: geteuid cannot fail.
        let uid = unsafe { libc::geteuid() };
        let pid = dead_pid();
        let idx = std::process::id();
        let seg = format!("/dev/shm/ofi-shm-{uid}-{pid}-{idx}");
        let bell = format!("{seg}.bell");
        for f in [&seg, &bell] {
            std::fs::write(f, b"stale").unwrap_or_else(|e| panic!("creating {f}: {e}"));
        }
        assert!(std::path::Path::new(&seg).exists());
        let mut kid = Kid::spawn("open-one", info, &[]);
        kid.expect("OPENED", TIMEOUT);
        kid.finish(TIMEOUT);
        let left: Vec<&String> = [&seg, &bell]
            .into_iter()
            .filter(|f| std::path::Path::new(f).exists())
            .collect();
        for f in &left {
            let _ = std::fs::remove_file(f);
        }
        assert!(
            left.is_empty(),
            "stale files of dead pid {pid} survived a fresh process opening an endpoint: {left:?}"
        );
        Ok(())
    });
}

/// After trywait, the CQ's wait fd becomes readable when a message from
/// another process arrives.
fn wait_fd_readable_on_message_from_another_process() {
    run("wait_fd_readable_on_message_from_another_process", |info| {
        let me = one(info, wait_obj::FI_WAIT_FD)?;
        let mut kid = Kid::spawn("send-once", info, &[]);
        let g = meet(me, &mut kid);
        let fd = g.cq.wait_fd().expect("FI_WAIT_FD CQ has a wait fd");
        let mut rx = [0u8; 16];
        // SAFETY: rx outlives the receive, which completes below.
        unsafe { g.ep.recv(rx.as_mut_ptr(), 16, FI_ADDR_UNSPEC, 0x31) }.unwrap();
        g.cq.trywait()
            .unwrap_or_else(|e| panic!("trywait on an empty CQ: {e}"));
        assert!(
            !readable(fd, 0),
            "wait fd readable before anything happened"
        );
        kid.say("GO");
        let ok = readable(fd, 10_000);
        assert!(
            ok,
            "the wait fd did not become readable within 10 s of another process sending"
        );
        let c = wait_for(&g.cq, 1, TIMEOUT);
        assert_eq!(c.ok.len(), 1, "{}", errs(&c));
        assert_eq!(&rx, b"from another pid");
        kid.expect("SENT", TIMEOUT);
        kid.finish(TIMEOUT);
        Ok(())
    });
}

/// Four ping-pong pairs of processes at once, blocking in sread (FI_WAIT_FD),
/// each complete 2000 round trips.
fn four_pingpong_pairs_blocking() {
    run("four_pingpong_pairs_blocking", |info| {
        require(info, FI_MSG)?;
        require_pairable(info)?;
        const PAIRS: usize = 4;
        const ITERS: &str = "2000";
        let mut kids = Vec::new();
        for _ in 0..PAIRS {
            let mut s = Kid::spawn("pp-server", info, &[(SIZES_ENV, ITERS)]);
            let mut c = Kid::spawn("pp-client", info, &[(SIZES_ENV, ITERS)]);
            introduce(&mut s, &mut c);
            kids.push((s, c));
        }
        for (s, c) in &mut kids {
            s.say("GO");
            c.say("GO");
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        for (i, (s, c)) in kids.iter_mut().enumerate() {
            let left = deadline.saturating_duration_since(Instant::now());
            let n = c.expect("DONE ", left);
            assert_eq!(n, ITERS, "pair {i} client");
            let n = s.expect(
                "DONE ",
                deadline.saturating_duration_since(Instant::now()) + Duration::from_secs(1),
            );
            assert_eq!(n, ITERS, "pair {i} server");
        }
        for (s, c) in &mut kids {
            c.finish(TIMEOUT);
            s.finish(TIMEOUT);
        }
        Ok(())
    });
}

/// FI_PROVIDER (set in a fresh process) includes and excludes providers.
fn fi_provider_env_filters() {
    let mut provs: Vec<String> = offers().iter().map(|o| o.provider().to_string()).collect();
    provs.sort();
    provs.dedup();
    let info = &offers()[0];
    for p in &provs {
        let mut kid = Kid::spawn("getinfo", info, &[("FI_PROVIDER", p.as_str())]);
        let r = kid.expect("PROVIDERS ", TIMEOUT);
        assert!(r.split(',').all(|x| x == p), "FI_PROVIDER={p} gave {r}");
        kid.finish(TIMEOUT);
        let ex = format!("^{p}");
        let mut kid = Kid::spawn("getinfo", info, &[("FI_PROVIDER", ex.as_str())]);
        let deadline = Instant::now() + TIMEOUT;
        let line = loop {
            match kid
                .lines
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                Ok(l) if l.starts_with("PROVIDERS") || l.starts_with("ERROR") => break l,
                Ok(_) => {}
                Err(e) => panic!("getinfo child: {e:?}"),
            }
        };
        if let Some(list) = line.strip_prefix("PROVIDERS ") {
            assert!(
                list.split(',').all(|x| x != p),
                "FI_PROVIDER=^{p} still gave {p}"
            );
        } else {
            assert_eq!(
                line,
                format!("ERROR {}", errno::FI_ENODATA),
                "FI_PROVIDER=^{p}"
            );
            assert_eq!(
                provs.len(),
                1,
                "FI_PROVIDER=^{p} left nothing although other providers exist"
            );
        }
        kid.finish(TIMEOUT);
    }
}

// ---------------------------------------------------------------- runner

type Test = (&'static str, fn());

const TESTS: &[Test] = &[
    ("cross_process_all_sizes", cross_process_all_sizes),
    ("cross_process_fallback_path", cross_process_fallback_path),
    (
        "cross_process_fallback_small_ring",
        cross_process_fallback_small_ring,
    ),
    (
        "peer_killed_while_sender_waits_for_ack",
        peer_killed_while_sender_waits_for_ack,
    ),
    (
        "peer_endpoint_closed_while_sender_waits",
        peer_endpoint_closed_while_sender_waits,
    ),
    ("receiver_killed_mid_transfer", receiver_killed_mid_transfer),
    ("sender_killed_mid_transfer", sender_killed_mid_transfer),
    (
        "segments_private_and_removed_on_close",
        segments_private_and_removed_on_close,
    ),
    ("stale_segment_reclaimed", stale_segment_reclaimed),
    (
        "wait_fd_readable_on_message_from_another_process",
        wait_fd_readable_on_message_from_another_process,
    ),
    ("four_pingpong_pairs_blocking", four_pingpong_pairs_blocking),
    ("fi_provider_env_filters", fi_provider_env_filters),
];

fn main() {
    if let Ok(role) = std::env::var(ROLE) {
        std::process::exit(child_main(&role));
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut filters = Vec::new();
    let (mut exact, mut list, mut ignored, mut threads) = (false, false, false, 0usize);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--exact" => exact = true,
            "--list" => list = true,
            "--ignored" => ignored = true,
            "--test-threads" => threads = it.next().and_then(|v| v.parse().ok()).unwrap_or(0),
            s if s.starts_with("--test-threads=") => {
                threads = s["--test-threads=".len()..].parse().unwrap_or(0)
            }
            s if s.starts_with('-') => {}
            s => filters.push(s.to_string()),
        }
    }
    let selected: Vec<Test> = TESTS
        .iter()
        .copied()
        .filter(|(n, _)| {
            filters.is_empty()
                || filters.iter().any(|f| {
                    if exact {
                        n == f
                    } else {
                        n.contains(f.as_str())
                    }
                })
        })
        .filter(|_| !ignored)
        .collect();
    if list {
        for (n, _) in &selected {
            println!("{n}: test");
        }
        return;
    }
    let threads = if threads == 0 {
        std::thread::available_parallelism().map_or(2, |n| n.get())
    } else {
        threads
    };
    println!("\nrunning {} tests", selected.len());
    let queue = std::sync::Mutex::new(selected.clone().into_iter());
    let (tx, rx) = mpsc::channel::<(&'static str, Result<(), String>, Duration)>();
    std::thread::scope(|s| {
        for _ in 0..threads.min(selected.len()).max(1) {
            let tx = tx.clone();
            let queue = &queue;
            s.spawn(move || loop {
                let next = queue.lock().unwrap_or_else(|e| e.into_inner()).next();
                let Some((name, f)) = next else { break };
                let t = Instant::now();
                let r = catch_unwind(AssertUnwindSafe(f)).map_err(|p| {
                    p.downcast_ref::<String>()
                        .cloned()
                        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default()
                });
                let _ = tx.send((name, r, t.elapsed()));
            });
        }
        drop(tx);
        let mut failed = Vec::new();
        for (name, r, took) in rx {
            match r {
                Ok(()) => println!("test {name} ... ok ({:.1}s)", took.as_secs_f64()),
                Err(msg) => {
                    println!("test {name} ... FAILED ({:.1}s)", took.as_secs_f64());
                    failed.push((name, msg));
                }
            }
        }
        for (name, msg) in &failed {
            println!("\n---- {name} ----\n{msg}");
        }
        let passed = selected.len() - failed.len();
        println!(
            "\ntest result: {}. {passed} passed; {} failed; 0 ignored; 0 measured; {} filtered out\n",
            if failed.is_empty() { "ok" } else { "FAILED" },
            failed.len(),
            TESTS.len() - selected.len()
        );
        if !failed.is_empty() {
            std::process::exit(101);
        }
    });
}
