//! `ofi storage target` and `ofi storage nbd` driven by the NBD clients
//! people run (Debian's qemu-img, qemu-io, nbdinfo, nbdcopy, fio, and nbdkit
//! as the reference server), over shm, tcp and tcp MSG: data written through the
//! gateway is checked against the target's backing file; a raw client's
//! bad requests get NBD errors on a connection that stays usable; FUA
//! (on WRITE, TRIM and WRITE_ZEROES) and FLUSH answer only after the
//! target's store synced (a store whose syncs fail makes them fail); a
//! target killed with `kill -9` restarts under the same gateway; the
//! target's death fails a client in seconds and the gateway serves again
//! once a target is back; SIGTERM stops both cleanly.
//!
//! The clients come from the packages scripts/test.sh installs
//! (qemu-utils, libnbd-bin, fio, nbdkit).

use ofi_testkit::netns::Netns;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long a step (start-up, one client run) may take before the test
/// calls it a hang.
const STEP: Duration = Duration::from_secs(60);

struct Proc {
    child: Child,
    out: PathBuf,
    err: PathBuf,
}

impl Proc {
    /// `ofi ARGS` with the variables `env`, inside network namespace
    /// `ns` of `net` when given.
    fn spawn(
        dir: &Path,
        tag: &str,
        args: &[&str],
        env: &[(&str, &str)],
        within: Option<(&Netns, usize)>,
    ) -> Proc {
        let mut c = match within {
            Some((net, ns)) => {
                let mut c = net.exec(ns);
                c.arg(env!("CARGO_BIN_EXE_ofi"));
                c
            }
            None => Command::new(env!("CARGO_BIN_EXE_ofi")),
        };
        c.args(args).envs(env.iter().copied());
        Proc::run(dir, tag, c)
    }
    fn run(dir: &Path, tag: &str, mut c: Command) -> Proc {
        let out = dir.join(format!("{tag}.out"));
        let err = dir.join(format!("{tag}.err"));
        let child = c
            .env_remove("FI_PROVIDER")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).expect("stdout file"))
            .stderr(std::fs::File::create(&err).expect("stderr file"))
            .spawn()
            .expect("spawning ofi");
        Proc { child, out, err }
    }
    fn stdout(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }
    /// Resident memory, in KiB.
    fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    }
    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
    }
    fn signal(&self, sig: &str) {
        let _ = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status();
    }
    /// Waits up to `bound` for the exit; the exit code (None: still
    /// running).
    fn exit_within(&mut self, bound: Duration) -> Option<i32> {
        let deadline = Instant::now() + bound;
        loop {
            if let Ok(Some(s)) = self.child.try_wait() {
                return Some(s.code().unwrap_or(-1));
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A scratch directory removed at the end.
struct Dir(PathBuf);
impl Dir {
    fn new(tag: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("ofi-storage-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("scratch dir");
        Dir(d)
    }
    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}
impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn need(tool: &str, package: &str) {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        found,
        "{tool} is missing: install Debian's {package} (scripts/test.sh does)"
    );
}

/// Runs a client to its end (bounded by `timeout(1)`).
fn run(cmd: &str, args: &[&str]) -> Output {
    let secs = STEP.as_secs().to_string();
    let mut a = vec!["-k", "5", secs.as_str(), cmd];
    a.extend_from_slice(args);
    Command::new("timeout")
        .args(&a)
        .stdin(Stdio::null())
        .output()
        .expect("running a client")
}

fn ok(cmd: &str, args: &[&str]) -> String {
    let o = run(cmd, args);
    assert!(
        o.status.success(),
        "{cmd} {args:?} failed ({:?}):\n{}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Deterministic pseudo-random bytes.
fn random(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut v = Vec::with_capacity(len);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    v
}

/// A target on `file` and a gateway on a Unix socket in `dir`.
struct Stack {
    target: Proc,
    gateway: Proc,
    port: u16,
    sock: PathBuf,
    uri: String,
}

/// The name of shm as a host with Yama's ptrace_scope=1 runs it: no
/// cross-process copies (RMA data through the rings in chunks), on rings
/// of two entries, so that the provider pushes back (FI_EAGAIN) on most
/// posts.
const SHM_CONSTRAINED: &str = "shm-constrained";

/// The fabric flags for `prov`: a provider name, `provider/ep` (as
/// `tcp/msg`) for another endpoint type than RDM, or [`SHM_CONSTRAINED`].
fn fabric(prov: &str) -> Vec<&str> {
    if prov == SHM_CONSTRAINED {
        return vec!["-p", "shm"];
    }
    match prov.split_once('/') {
        Some((p, ep)) => vec!["-p", p, "-e", ep],
        None => vec!["-p", prov],
    }
}

/// The variables `prov` runs with.
fn fabric_env(prov: &str) -> Vec<(&'static str, &'static str)> {
    if prov == SHM_CONSTRAINED {
        vec![("FI_SHM_DISABLE_CMA", "1"), ("FI_SHM_RING_SLOTS", "2")]
    } else {
        Vec::new()
    }
}

/// `prov` as a piece of a file name.
fn tag(prov: &str) -> String {
    prov.replace('/', "-")
}

fn start_target(dir: &Path, prov: &str, file: &Path, port: u16, extra: &[&str]) -> (Proc, u16) {
    start_target_on(dir, prov, None, "127.0.0.1", file, port, extra)
}

/// A target bound to `ip`, in a network namespace when `within` says so.
fn start_target_on(
    dir: &Path,
    prov: &str,
    within: Option<(&Netns, usize)>,
    ip: &str,
    file: &Path,
    port: u16,
    extra: &[&str],
) -> (Proc, u16) {
    let p = port.to_string();
    let mut args = vec!["storage", "target"];
    args.extend(fabric(prov));
    args.extend(["-s", ip, "-B", &p]);
    args.extend_from_slice(extra);
    let f = file.to_str().expect("utf-8 path");
    args.push(f);
    let tag = format!("target-{}-{port}", tag(prov));
    let mut t = Proc::spawn(dir, &tag, &args, &fabric_env(prov), within);
    let deadline = Instant::now() + STEP;
    loop {
        let out = t.stdout();
        if let Some(rest) = out.split("listening on ").nth(1) {
            let addr = rest.split_whitespace().next().unwrap_or("");
            let port = addr.rsplit(':').next().and_then(|p| p.parse().ok());
            return (t, port.expect("the target's port"));
        }
        if let Some(code) = t.exit_within(Duration::ZERO) {
            panic!("the target exited ({code}): {}", t.stderr());
        }
        assert!(Instant::now() < deadline, "the target did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn start_gateway(dir: &Path, prov: &str, port: u16) -> (Proc, PathBuf, String) {
    start_gateway_with(dir, prov, port, &[])
}

fn start_gateway_with(
    dir: &Path,
    prov: &str,
    port: u16,
    extra: &[&str],
) -> (Proc, PathBuf, String) {
    start_gateway_on(dir, prov, None, "127.0.0.1", port, extra)
}

/// A gateway to the target at `ip`, run in a network namespace when
/// `within` says so (its Unix socket is in `dir` all the same).
fn start_gateway_on(
    dir: &Path,
    prov: &str,
    within: Option<(&Netns, usize)>,
    ip: &str,
    port: u16,
    extra: &[&str],
) -> (Proc, PathBuf, String) {
    let name = match within {
        Some((_, ns)) => format!("{}-ns{ns}", tag(prov)),
        None => tag(prov),
    };
    let sock = dir.join(format!("nbd-{name}.sock"));
    let _ = std::fs::remove_file(&sock);
    let p = port.to_string();
    let s = sock.to_str().expect("utf-8 path");
    let mut args = vec!["storage", "nbd"];
    args.extend(fabric(prov));
    args.extend(["-P", &p, "--unix", s]);
    args.extend_from_slice(extra);
    args.push(ip);
    let tag = format!("gateway-{name}");
    let g = Proc::spawn(dir, &tag, &args, &fabric_env(prov), within);
    let deadline = Instant::now() + STEP;
    // The socket's file appears at its bind, a moment before it listens
    // (a connect then is refused): the gateway says when it listens.
    while !sock.exists() || !g.stdout().contains("nbd gateway on ") {
        assert!(
            Instant::now() < deadline,
            "the gateway did not start: {}",
            g.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let uri = format!("nbd+unix:///?socket={s}");
    (g, sock, uri)
}

fn stack(dir: &Dir, prov: &str, size: &str, extra: &[&str]) -> Stack {
    let file = dir.path("volume.img");
    let mut e = vec!["--size", size];
    e.extend_from_slice(extra);
    let (target, port) = start_target(&dir.0, prov, &file, 0, &e);
    let (gateway, sock, uri) = start_gateway(&dir.0, prov, port);
    Stack {
        target,
        gateway,
        port,
        sock,
        uri,
    }
}

#[test]
fn nbdinfo_shows_size_and_flags() {
    need("nbdinfo", "libnbd-bin");
    let d = Dir::new("info");
    let s = stack(&d, "tcp", "8M", &[]);
    let j = ok("nbdinfo", &["--json", &s.uri]);
    for want in [
        "\"export-size\": 8388608",
        "\"can_flush\": true",
        "\"can_fua\": true",
        "\"can_trim\": true",
        "\"can_zero\": true",
        "\"is_read_only\": false",
        "\"block_size_maximum\": 1048576",
    ] {
        assert!(j.contains(want), "{want} missing from nbdinfo --json:\n{j}");
    }
}

fn qemu_img_round_trip(prov: &str) {
    need("qemu-img", "qemu-utils");
    let d = Dir::new(&format!("qemu-{}", tag(prov)));
    let s = stack(&d, prov, "64M", &[]);
    let src = d.path("src.img");
    let data = random(64 << 20, 0x5eed + prov.len() as u64);
    std::fs::write(&src, &data).unwrap();
    let src = src.to_str().unwrap();
    ok(
        "qemu-img",
        &["convert", "-n", "-f", "raw", "-O", "raw", src, &s.uri],
    );
    let c = ok(
        "qemu-img",
        &["compare", "-f", "raw", "-F", "raw", src, &s.uri],
    );
    assert!(c.contains("identical"), "{c}");
    // The backing file holds exactly those bytes.
    let back = std::fs::read(d.path("volume.img")).unwrap();
    assert!(back == data, "the target's file differs from the image");
    drop(s);
}

#[test]
fn qemu_img_convert_and_compare_over_shm() {
    qemu_img_round_trip("shm");
}

#[test]
fn qemu_img_convert_and_compare_over_tcp() {
    qemu_img_round_trip("tcp");
}

#[test]
fn qemu_img_convert_and_compare_over_tcp_msg_connections() {
    qemu_img_round_trip("tcp/msg");
}

#[test]
fn msg_endpoints_on_a_provider_without_them_fail_with_a_clear_error() {
    let d = Dir::new("msg-shm");
    let f = d.path("v.img");
    let out = Command::new(env!("CARGO_BIN_EXE_ofi"))
        .args(["storage", "target", "-p", "shm", "-e", "msg", "-B", "0"])
        .args(["--size", "1M", f.to_str().expect("utf-8 path")])
        .env_remove("FI_PROVIDER")
        .output()
        .expect("running ofi");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("provider shm has no MSG") && err.contains("-e rdm"),
        "{err}"
    );
}

#[test]
fn nbdcopy_both_ways_and_nbdkit_serves_the_same_bytes() {
    need("nbdcopy", "libnbd-bin");
    need("nbdkit", "nbdkit");
    need("qemu-img", "qemu-utils");
    let d = Dir::new("nbdcopy");
    let s = stack(&d, "tcp", "16M", &[]);
    let src = d.path("in.img");
    let data = random(16 << 20, 77);
    std::fs::write(&src, &data).unwrap();
    ok("nbdcopy", &[src.to_str().unwrap(), &s.uri]);
    let back = d.path("back.img");
    ok("nbdcopy", &[&s.uri, back.to_str().unwrap()]);
    assert!(
        std::fs::read(&back).unwrap() == data,
        "nbdcopy back differs"
    );
    // nbdkit's file plugin on the backing file is the reference server:
    // it and the gateway serve identical volumes.
    let ksock = d.path("nbdkit.sock");
    let vol = d.path("volume.img");
    let mut kit = Command::new("nbdkit")
        .args(["-f", "-U", ksock.to_str().unwrap(), "file"])
        .arg(&vol)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nbdkit");
    let deadline = Instant::now() + STEP;
    while !ksock.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let kuri = format!("nbd+unix:///?socket={}", ksock.display());
    let c = run(
        "qemu-img",
        &["compare", "-f", "raw", "-F", "raw", &kuri, &s.uri],
    );
    let _ = kit.kill();
    let _ = kit.wait();
    assert!(
        c.status.success(),
        "nbdkit and the gateway differ: {}",
        String::from_utf8_lossy(&c.stdout)
    );
}

/// fio's nbd engine through the gateway over `prov`: `rw` of `bs`
/// blocks, `iodepth` in flight, over `size` bytes, every block verified
/// (crc32c) when read back.
fn fio_verifies(prov: &str, rw: &str, bs: &str, iodepth: u32, size: &str) {
    fio_verifies_on(prov, &[], rw, bs, iodepth, size)
}

/// As [`fio_verifies`], the target started with `target` flags too.
fn fio_verifies_on(prov: &str, target: &[&str], rw: &str, bs: &str, iodepth: u32, size: &str) {
    need("fio", "fio");
    let d = Dir::new(&format!("fio-{}-{rw}-{bs}", tag(prov)));
    let s = stack(&d, prov, "64M", target);
    let uri = format!("--uri={}", s.uri);
    let (rw, bs) = (format!("--rw={rw}"), format!("--bs={bs}"));
    let (qd, size) = (format!("--iodepth={iodepth}"), format!("--size={size}"));
    let out = ok(
        "fio",
        &[
            "--name=verify",
            "--ioengine=nbd",
            &uri,
            &rw,
            &bs,
            &size,
            &qd,
            "--verify=crc32c",
            "--do_verify=1",
            "--verify_fatal=1",
            "--verify_state_save=0",
        ],
    );
    assert!(out.contains("err= 0"), "fio reported errors:\n{out}");
}

#[test]
fn fio_nbd_engine_verifies_at_queue_depth_16() {
    fio_verifies("shm", "randwrite", "4k", 16, "16M");
}

/// A target with O_DIRECT (aligned requests bypass the page cache) under
/// fio's verified 128 KiB random writes at depth 16 (the gateway reads
/// each payload straight into its buffers after the first).
#[test]
fn fio_verifies_through_a_direct_io_target() {
    fio_verifies_on("tcp", &["--direct"], "randwrite", "128k", 16, "32M");
}

/// A minimal NBD client for what the real ones never send.
struct Raw(UnixStream);

impl Raw {
    /// Fixed newstyle handshake with NBD_OPT_GO (simple replies).
    fn connect(sock: &Path) -> Raw {
        Raw::try_connect(sock).unwrap()
    }
    /// The handshake; why it failed (GO refused, or the socket's error).
    fn try_connect(sock: &Path) -> Result<Raw, String> {
        Raw::try_connect_with(sock, false)
    }
    /// The handshake with structured replies negotiated first.
    fn connect_structured(sock: &Path) -> Raw {
        Raw::try_connect_with(sock, true).unwrap()
    }
    fn try_connect_with(sock: &Path, structured: bool) -> Result<Raw, String> {
        let e = |e: std::io::Error| e.to_string();
        let mut s = UnixStream::connect(sock).map_err(e)?;
        s.set_read_timeout(Some(STEP)).map_err(e)?;
        let mut greet = [0u8; 18];
        s.read_exact(&mut greet).map_err(e)?;
        assert_eq!(&greet[..16], b"NBDMAGICIHAVEOPT");
        s.write_all(&3u32.to_be_bytes()).map_err(e)?;
        if structured {
            let mut sr = b"IHAVEOPT".to_vec();
            sr.extend_from_slice(&8u32.to_be_bytes());
            sr.extend_from_slice(&0u32.to_be_bytes());
            s.write_all(&sr).map_err(e)?;
            let mut h = [0u8; 20];
            s.read_exact(&mut h).map_err(e)?;
            let kind = u32::from_be_bytes(h[12..16].try_into().unwrap());
            assert_eq!(kind, 1, "STRUCTURED_REPLY acknowledged");
        }
        let mut go = b"IHAVEOPT".to_vec();
        go.extend_from_slice(&7u32.to_be_bytes());
        go.extend_from_slice(&6u32.to_be_bytes());
        go.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
        s.write_all(&go).map_err(e)?;
        loop {
            let mut h = [0u8; 20];
            s.read_exact(&mut h).map_err(e)?;
            let kind = u32::from_be_bytes(h[12..16].try_into().unwrap());
            let len = u32::from_be_bytes(h[16..20].try_into().unwrap());
            let mut data = vec![0u8; len as usize];
            s.read_exact(&mut data).map_err(e)?;
            if kind >= 0x8000_0000 {
                return Err(format!("GO refused: {kind:#x}"));
            }
            if kind == 1 {
                return Ok(Raw(s));
            }
        }
    }
    fn request(
        &mut self,
        kind: u16,
        flags: u16,
        cookie: u64,
        offset: u64,
        len: u32,
        payload: &[u8],
    ) {
        let mut r = 0x2560_9513u32.to_be_bytes().to_vec();
        r.extend_from_slice(&flags.to_be_bytes());
        r.extend_from_slice(&kind.to_be_bytes());
        r.extend_from_slice(&cookie.to_be_bytes());
        r.extend_from_slice(&offset.to_be_bytes());
        r.extend_from_slice(&len.to_be_bytes());
        r.extend_from_slice(payload);
        self.0.write_all(&r).unwrap();
    }
    /// (error, cookie) of the next simple reply, reading `data` bytes
    /// after it on success.
    fn reply(&mut self, data: usize) -> (u32, u64, Vec<u8>) {
        let mut h = [0u8; 16];
        self.0.read_exact(&mut h).unwrap();
        assert_eq!(h[..4], 0x6744_6698u32.to_be_bytes());
        let e = u32::from_be_bytes(h[4..8].try_into().unwrap());
        let c = u64::from_be_bytes(h[8..16].try_into().unwrap());
        let mut d = vec![0u8; if e == 0 { data } else { 0 }];
        self.0.read_exact(&mut d).unwrap();
        (e, c, d)
    }
}

#[test]
fn bad_requests_get_nbd_errors_and_the_connection_stays_sound() {
    let d = Dir::new("raw");
    let s = stack(&d, "tcp", "1M", &[]);
    let mut c = Raw::connect(&s.sock);
    let size = 1u64 << 20;
    // Out of range (read, write with payload), an unknown command, a
    // write with FUA that is fine, then a read of it.
    c.request(0, 0, 1, size - 10, 20, &[]);
    assert_eq!(c.reply(0).0, 22, "out-of-range read: EINVAL");
    c.request(1, 0, 2, size, 8, &[9; 8]);
    assert_eq!(c.reply(0).0, 28, "write past the end: ENOSPC");
    c.request(99, 0, 3, 0, 0, &[]);
    assert_eq!(c.reply(0).0, 22, "unknown command: EINVAL");
    c.request(1, 1, 4, 4096, 8, &[7; 8]);
    assert_eq!(c.reply(0).0, 0, "FUA write");
    c.request(0, 0, 5, 4096, 8, &[]);
    assert_eq!(c.reply(8), (0, 5, vec![7; 8]));
    // A broken magic ends this connection only.
    c.0.write_all(&[0u8; 28]).unwrap();
    let mut b = [0u8; 1];
    assert_eq!(c.0.read(&mut b).unwrap_or(0), 0, "closed after a bad magic");
    let mut c2 = Raw::connect(&s.sock);
    c2.request(0, 0, 6, 4096, 8, &[]);
    assert_eq!(c2.reply(8), (0, 6, vec![7; 8]));
    let back = std::fs::read(d.path("volume.img")).unwrap();
    assert_eq!(back.len() as u64, size, "the volume kept its size");
    assert_eq!(&back[4096..4104], &[7; 8]);
    assert!(
        back[..4096].iter().all(|&x| x == 0),
        "nothing else was written"
    );
}

#[test]
fn a_client_gone_in_the_middle_of_a_write_gives_its_session_back() {
    let d = Dir::new("cut");
    let file = d.path("volume.img");
    let (_t, port) = start_target(&d.0, "tcp", &file, 0, &["--size", "1M"]);
    // Eight sessions of 128 credits take all the target's 1024: a ninth
    // client is served only once one of the first eight is gone.
    let (_g, sock, _) = start_gateway_with(&d.0, "tcp", port, &["-q", "128"]);
    for _ in 0..8 {
        let mut a = Raw::connect(&sock);
        // A WRITE's header and a tenth of its payload, then the client
        // dies.
        a.request(1, 0, 1, 0, 4096, &[5; 400]);
        drop(a);
    }
    let deadline = Instant::now() + STEP;
    let mut b = loop {
        match Raw::try_connect(&sock) {
            Ok(b) => break b,
            Err(e) => {
                assert!(
                    Instant::now() < deadline,
                    "the cut clients' sessions were never given back: {e}"
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    };
    b.request(0, 0, 2, 0, 8, &[]);
    assert_eq!(
        b.reply(8),
        (0, 2, vec![0; 8]),
        "the cut write was not applied"
    );
}

/// Clients that connect and idle in the handshake hold no session with
/// the target: eight of them (silent, or stopped after their flags)
/// beside a target that takes two initiators, and two real clients are
/// still served. They are dropped once the handshake's bound has passed,
/// and so is one that trickles its options a byte at a time.
#[test]
fn clients_idling_in_the_handshake_hold_no_session_and_are_dropped() {
    let d = Dir::new("idle");
    let file = d.path("volume.img");
    let (_t, port) = start_target(
        &d.0,
        "tcp",
        &file,
        0,
        &["--size", "1M", "--max-initiators", "2"],
    );
    let (_g, sock, _) = start_gateway_with(&d.0, "tcp", port, &["--handshake-timeout", "2"]);
    let mut idle = Vec::new();
    for i in 0..8 {
        let mut s = UnixStream::connect(&sock).unwrap();
        if i % 2 == 1 {
            let mut greet = [0u8; 18];
            s.read_exact(&mut greet).unwrap();
            s.write_all(&3u32.to_be_bytes()).unwrap();
        }
        idle.push(s);
    }
    let mut a = Raw::connect(&sock);
    let mut b = Raw::connect(&sock);
    a.request(1, 0, 1, 8192, 8, &[0x5a; 8]);
    assert_eq!(a.reply(0).0, 0, "write");
    b.request(0, 0, 2, 8192, 8, &[]);
    assert_eq!(b.reply(8), (0, 2, vec![0x5a; 8]));
    // Each idle client sees its connection end (after the greeting).
    for (i, mut s) in idle.into_iter().enumerate() {
        s.set_read_timeout(Some(STEP)).unwrap();
        let mut rest = Vec::new();
        s.read_to_end(&mut rest)
            .unwrap_or_else(|e| panic!("idle client {i} was not dropped: {e}"));
        assert!(rest.len() <= 18, "idle client {i} got {} bytes", rest.len());
    }
    // A client that sends a byte every 300 ms would take 18 s over its
    // handshake: it is cut off well before (its writes fail).
    let mut t = UnixStream::connect(&sock).unwrap();
    let mut greet = [0u8; 18];
    t.read_exact(&mut greet).unwrap();
    let mut bytes = 3u32.to_be_bytes().to_vec();
    bytes.extend_from_slice(b"IHAVEOPT");
    bytes.extend_from_slice(&7u32.to_be_bytes());
    bytes.extend_from_slice(&40u32.to_be_bytes());
    bytes.resize(60, 0);
    let sent = bytes
        .iter()
        .take_while(|x| {
            std::thread::sleep(Duration::from_millis(300));
            t.write_all(&[**x]).is_ok()
        })
        .count();
    assert!(
        sent < bytes.len(),
        "a client trickling its handshake was never dropped"
    );
}

#[test]
fn a_client_that_never_reads_its_replies_is_not_read_either() {
    let d = Dir::new("flood");
    let s = stack(&d, "tcp", "4M", &[]);
    let mut c = Raw::connect(&s.sock);
    // 600 reads of 1 MiB whose replies are not read for a while: a
    // gateway that took them all would hold 600 MiB of replies. It stops
    // reading the client at its bound instead, so the requests are sent
    // from a thread of their own (its writes block until replies are read).
    const N: u64 = 600;
    let mut w = Raw(c.0.try_clone().unwrap());
    let writer = std::thread::spawn(move || {
        for cookie in 0..N {
            w.request(0, 0, cookie, 0, 1 << 20, &[]);
        }
    });
    let until = Instant::now() + Duration::from_secs(3);
    let mut peak = 0;
    while Instant::now() < until {
        peak = peak.max(s.gateway.rss_kib());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        peak < 256 << 10,
        "the gateway grew to {peak} KiB for a client that reads nothing"
    );
    // Every reply comes once the client reads.
    let mut seen = vec![false; N as usize];
    for _ in 0..N {
        let (e, cookie, data) = c.reply(1 << 20);
        assert_eq!((e, data.len()), (0, 1 << 20));
        assert!(!std::mem::replace(&mut seen[cookie as usize], true));
    }
    writer.join().unwrap();
}

#[test]
fn a_write_payload_is_taken_even_past_the_reply_bound() {
    let d = Dir::new("payload");
    let s = stack(&d, "tcp", "4M", &[]);
    let mut c = Raw::connect(&s.sock);
    // A client that writes each request whole before it reads a reply:
    // 63 reads of 1 MiB, then a WRITE of 1 MiB whose header the gateway
    // takes just under its bound of held bytes and whose buffer brings it
    // to the bound. The payload must still be read (its buffer is already
    // held), or client and gateway wait for each other for ever. (A
    // request that starts past the bound waits until the client reads
    // replies, as with any NBD server: a client must read while it
    // writes.)
    for cookie in 0..63 {
        c.request(0, 0, cookie, 0, 1 << 20, &[]);
    }
    c.0.set_write_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let payload = vec![0x3c; 1 << 20];
    let mut r = 0x2560_9513u32.to_be_bytes().to_vec();
    r.extend_from_slice(&0u16.to_be_bytes());
    r.extend_from_slice(&1u16.to_be_bytes());
    r.extend_from_slice(&63u64.to_be_bytes());
    r.extend_from_slice(&(2u64 << 20).to_be_bytes());
    r.extend_from_slice(&(1u32 << 20).to_be_bytes());
    r.extend_from_slice(&payload);
    c.0.write_all(&r)
        .expect("the gateway stopped reading in the middle of a WRITE's payload");
    let mut seen = 0;
    for _ in 0..64 {
        let mut h = [0u8; 16];
        c.0.read_exact(&mut h).unwrap();
        let e = u32::from_be_bytes(h[4..8].try_into().unwrap());
        let cookie = u64::from_be_bytes(h[8..16].try_into().unwrap());
        assert_eq!(e, 0, "request {cookie} failed");
        if cookie < 63 {
            let mut data = vec![0u8; 1 << 20];
            c.0.read_exact(&mut data).unwrap();
        }
        seen += 1;
    }
    assert_eq!(seen, 64);
    let back = std::fs::read(d.path("volume.img")).unwrap();
    assert!(back[2 << 20..3 << 20].iter().all(|&x| x == 0x3c));
}

#[test]
fn read_only_volume_answers_eperm() {
    let d = Dir::new("ro");
    std::fs::write(d.path("volume.img"), vec![3u8; 1 << 20]).unwrap();
    let (_t, port) = start_target(&d.0, "shm", &d.path("volume.img"), 0, &["--read-only"]);
    let (_g, sock, _) = start_gateway(&d.0, "shm", port);
    let mut c = Raw::connect(&sock);
    c.request(1, 0, 1, 0, 4, &[1; 4]);
    assert_eq!(c.reply(0).0, 1, "write to a read-only volume: EPERM");
    c.request(0, 0, 2, 0, 4, &[]);
    assert_eq!(c.reply(4), (0, 2, vec![3; 4]));
}

/// A file whose syncs all fail (EIO): what needs a sync must fail.
#[derive(Debug)]
struct Unsyncable(std::fs::File, std::sync::Arc<std::sync::atomic::AtomicU32>);

impl ofi_storage::backend::Store for Unsyncable {
    fn pread(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        self.0.read_exact_at(buf, offset)
    }
    fn pwrite(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        self.0.write_all_at(buf, offset)
    }
    fn sync(&self) -> std::io::Result<()> {
        self.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Err(std::io::Error::from_raw_os_error(5))
    }
    fn punch(&self, offset: u64, len: u64) -> std::io::Result<()> {
        self.0.punch(offset, len)
    }
    fn zero_range(&self, offset: u64, len: u64) -> std::io::Result<()> {
        self.0.zero_range(offset, len)
    }
}

/// Durability through the gateway, checked so that it can fail (a
/// target killed with `kill -9` cannot show it: the page cache survives
/// that, so a target that never synced passes): the target (in this
/// process) stores on a file whose syncs all fail, so every request that
/// vouches for stable storage (WRITE, TRIM and WRITE_ZEROES with FUA,
/// FLUSH) must answer EIO, and only those: an answer that went without
/// the sync, or before it, would be Ok.
#[test]
fn fua_and_flush_through_the_gateway_answer_only_after_a_sync() {
    use ofi_storage::backend::Backend;
    use ofi_storage::target::{Target, TargetOptions};
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;
    let d = Dir::new("unsynced");
    let path = d.path("volume.img");
    let f = std::fs::File::create_new(&path).unwrap();
    f.set_len(1 << 20).unwrap();
    let syncs = Arc::new(AtomicU32::new(0));
    let store = Unsyncable(f, syncs.clone());
    let opts = TargetOptions {
        net: ofi_storage::NetOptions {
            provider: Some("tcp".into()),
            ..Default::default()
        },
        ..TargetOptions::default()
    };
    let t = Target::with_backend(Backend::new(Box::new(store), 1 << 20, false), &opts).unwrap();
    let port = t.local_addr().port();
    let stop = t.stop_flag();
    let served = std::thread::spawn(move || t.run());
    let (_g, sock, _) = start_gateway(&d.0, "tcp", port);
    let mut c = Raw::connect(&sock);
    const WRITE: u16 = 1;
    const FLUSH: u16 = 3;
    const TRIM: u16 = 4;
    const ZEROES: u16 = 6;
    const FUA: u16 = 1;
    const EIO: u32 = 5;
    for (what, kind, flags, payload, want) in [
        ("write", WRITE, 0, &[7u8; 512][..], 0),
        ("FUA write", WRITE, FUA, &[8; 512][..], EIO),
        ("trim", TRIM, 0, &[][..], 0),
        ("FUA trim", TRIM, FUA, &[][..], EIO),
        ("write zeroes", ZEROES, 0, &[][..], 0),
        ("FUA write zeroes", ZEROES, FUA, &[][..], EIO),
        ("flush", FLUSH, 0, &[][..], EIO),
    ] {
        // (After the first failed sync the backend fails every later one
        // itself, without asking the store again.)
        let len = if kind == FLUSH { 0 } else { 512 };
        c.request(kind, flags, 1, 4096, len, payload);
        assert_eq!(c.reply(0), (want, 1, Vec::new()), "{what}");
    }
    assert_eq!(syncs.load(Ordering::Relaxed), 1, "the store's syncs");
    drop(c);
    stop.store(true, Ordering::Relaxed);
    served.join().unwrap().unwrap();
}

/// A file whose reads and writes fail (EIO) at and past `.1`.
#[derive(Debug)]
struct FailsPast(std::fs::File, u64);

impl ofi_storage::backend::Store for FailsPast {
    fn pread(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        if offset + buf.len() as u64 > self.1 {
            return Err(std::io::Error::from_raw_os_error(5));
        }
        self.0.read_exact_at(buf, offset)
    }
    fn pwrite(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        if offset + buf.len() as u64 > self.1 {
            return Err(std::io::Error::from_raw_os_error(5));
        }
        self.0.write_all_at(buf, offset)
    }
    fn sync(&self) -> std::io::Result<()> {
        self.0.sync()
    }
    fn punch(&self, offset: u64, len: u64) -> std::io::Result<()> {
        self.0.punch(offset, len)
    }
    fn zero_range(&self, offset: u64, len: u64) -> std::io::Result<()> {
        self.0.zero_range(offset, len)
    }
}

/// One (error, cookie, data) reply to a READ of `len` bytes at `offset`
/// over structured replies: a final OFFSET_DATA chunk, or an ERROR chunk.
fn structured_read_reply(c: &mut Raw, offset: u64, len: usize) -> (u32, u64, Vec<u8>) {
    let mut h = [0u8; 20];
    c.0.read_exact(&mut h).unwrap();
    assert_eq!(h[..4], 0x668e_33efu32.to_be_bytes());
    let flags = u16::from_be_bytes([h[4], h[5]]);
    let kind = u16::from_be_bytes([h[6], h[7]]);
    let cookie = u64::from_be_bytes(h[8..16].try_into().unwrap());
    let n = u32::from_be_bytes(h[16..20].try_into().unwrap()) as usize;
    assert_eq!(flags, 1, "one final chunk");
    let mut payload = vec![0u8; n];
    c.0.read_exact(&mut payload).unwrap();
    match kind {
        1 => {
            assert_eq!(n, 8 + len);
            assert_eq!(payload[..8], offset.to_be_bytes());
            (0, cookie, payload.split_off(8))
        }
        0x8001 => (
            u32::from_be_bytes(payload[..4].try_into().unwrap()),
            cookie,
            Vec::new(),
        ),
        k => panic!("chunk type {k:#x}"),
    }
}

/// READ and WRITE above the advertised maximum block size (the target's
/// largest transfer, 1 MiB) are split by the gateway and answered once
/// every piece has landed: an unaligned pattern of 8 MiB and 1000 bytes
/// written in one request reads back the same in one request (simple and
/// structured replies), in 64 KiB requests and from the backing file; a
/// READ of 32 MiB (the bound) is served; above the bound, EOVERFLOW and
/// the connection stays usable.
#[test]
fn requests_above_the_maximum_block_size_are_split_and_verified() {
    let d = Dir::new("split");
    let s = stack(&d, "tcp", "40M", &[]);
    let mut c = Raw::connect(&s.sock);
    let len = (8 << 20) + 1000;
    let off = 3 * 4096 + 1;
    let data = random(len, 27);
    c.request(1, 0, 1, off, len as u32, &data);
    assert_eq!(c.reply(0), (0, 1, Vec::new()), "the large write");
    c.request(0, 0, 2, off, len as u32, &[]);
    let (e, cookie, back) = c.reply(len);
    assert_eq!((e, cookie), (0, 2));
    assert!(back == data, "the large read differs from what was written");
    let step = 64 << 10;
    for (i, at) in (0..len).step_by(step).enumerate() {
        let n = step.min(len - at);
        c.request(0, 0, 100 + i as u64, off + at as u64, n as u32, &[]);
        let (e, _, part) = c.reply(n);
        assert_eq!(e, 0);
        assert!(part == data[at..at + n], "64 KiB read at {at} differs");
    }
    let file = std::fs::read(d.path("volume.img")).unwrap();
    assert!(file[off as usize..off as usize + len] == data[..]);
    // The bound: 32 MiB read at once; one byte more is refused, and a
    // refused WRITE's payload is read and dropped.
    c.request(0, 0, 3, 0, 32 << 20, &[]);
    let (e, _, whole) = c.reply(32 << 20);
    assert_eq!(e, 0);
    assert!(whole[off as usize..off as usize + len] == data[..]);
    c.request(0, 0, 4, 0, (32 << 20) + 1, &[]);
    assert_eq!(c.reply(0).0, 75, "EOVERFLOW above 32 MiB");
    let over = vec![0xee; (32 << 20) + 1];
    c.request(1, 0, 5, 0, over.len() as u32, &over);
    assert_eq!(c.reply(0).0, 75, "EOVERFLOW above 32 MiB");
    c.request(0, 0, 6, off, 16, &[]);
    assert_eq!(c.reply(16), (0, 6, data[..16].to_vec()), "still in sync");

    // Structured replies: one OFFSET_DATA chunk with every piece.
    let mut st = Raw::connect_structured(&s.sock);
    st.request(0, 0, 7, off, len as u32, &[]);
    let (e, cookie, back) = structured_read_reply(&mut st, off, len);
    assert_eq!((e, cookie), (0, 7));
    assert!(back == data, "the structured large read differs");
}

/// Replies to the requests of `want` (cookie -> bytes of data a success
/// carries), in whatever order they come: cookie -> (error, data).
fn replies(c: &mut Raw, want: &[(u64, usize)]) -> std::collections::HashMap<u64, (u32, Vec<u8>)> {
    let mut got = std::collections::HashMap::new();
    for _ in want {
        let mut h = [0u8; 16];
        c.0.read_exact(&mut h).unwrap();
        assert_eq!(h[..4], 0x6744_6698u32.to_be_bytes());
        let e = u32::from_be_bytes(h[4..8].try_into().unwrap());
        let cookie = u64::from_be_bytes(h[8..16].try_into().unwrap());
        let len = want
            .iter()
            .find(|w| w.0 == cookie)
            .unwrap_or_else(|| panic!("a reply to unknown cookie {cookie}"))
            .1;
        let mut d = vec![0u8; if e == 0 { len } else { 0 }];
        c.0.read_exact(&mut d).unwrap();
        assert!(
            got.insert(cookie, (e, d)).is_none(),
            "two replies to {cookie}"
        );
    }
    got
}

/// Requests of every size pipelined in one stream (small and large
/// WRITEs, one split, READs among WRITEs to other ranges): the gateway
/// keeps the stream in sync whether it reads headers in batches or one
/// at a time (after a large WRITE), and every byte lands and reads back.
#[test]
fn pipelined_requests_of_every_size_keep_the_stream_in_sync() {
    let d = Dir::new("pipeline");
    let s = stack(&d, "tcp", "24M", &[]);
    let mut c = Raw::connect(&s.sock);
    // (offset, length) of each WRITE, at disjoint places.
    let writes: [(u64, usize); 8] = [
        (0, 128 << 10),
        (1 << 20, 100),
        (2 << 20, 3000),
        (3 << 20, (1 << 20) + 5),
        (5 << 20, 2048),
        (6 << 20, 7),
        (7 << 20, 128 << 10),
        (8 << 20, 4096),
    ];
    let data: Vec<Vec<u8>> = (0..writes.len())
        .map(|i| random(writes[i].1, 100 + i as u64))
        .collect();
    let mut stream = Vec::new();
    let mut want = Vec::new();
    let header = |kind: u16, cookie: u64, offset: u64, len: usize| {
        let mut r = 0x2560_9513u32.to_be_bytes().to_vec();
        r.extend_from_slice(&0u16.to_be_bytes());
        r.extend_from_slice(&kind.to_be_bytes());
        r.extend_from_slice(&cookie.to_be_bytes());
        r.extend_from_slice(&offset.to_be_bytes());
        r.extend_from_slice(&(len as u32).to_be_bytes());
        r
    };
    // The first four WRITEs, then READs of the far ranges (still zero)
    // among the last four WRITEs.
    for (i, (off, len)) in writes.iter().enumerate() {
        stream.extend(header(1, i as u64, *off, *len));
        stream.extend_from_slice(&data[i]);
        want.push((i as u64, 0));
        if i >= 4 {
            let cookie = 100 + i as u64;
            stream.extend(header(0, cookie, (10 << 20) + *off, *len));
            want.push((cookie, *len));
        }
    }
    let mut w = Raw(c.0.try_clone().unwrap());
    let writer = std::thread::spawn(move || w.0.write_all(&stream).unwrap());
    let got = replies(&mut c, &want);
    writer.join().unwrap();
    for (cookie, len) in &want {
        let (e, d) = &got[cookie];
        assert_eq!(*e, 0, "request {cookie}");
        if *len > 0 {
            assert!(d.iter().all(|&x| x == 0), "read {cookie}");
        }
    }
    // Every range back, all READs pipelined (after the large WRITEs the
    // gateway reads one header at a time until a small WRITE comes).
    let mut stream = Vec::new();
    let mut want = Vec::new();
    for (i, (off, len)) in writes.iter().enumerate() {
        stream.extend(header(0, 200 + i as u64, *off, *len));
        want.push((200 + i as u64, *len));
    }
    c.0.write_all(&stream).unwrap();
    let got = replies(&mut c, &want);
    for i in 0..writes.len() {
        let (e, d) = &got[&(200 + i as u64)];
        assert_eq!(*e, 0);
        assert!(*d == data[i], "range {i} read back differs");
    }
    let file = std::fs::read(d.path("volume.img")).unwrap();
    for (i, (off, len)) in writes.iter().enumerate() {
        let off = *off as usize;
        assert!(file[off..off + len] == data[i][..], "range {i} in the file");
    }
}

/// A piece that fails fails its whole request, with its error, and the
/// reply waits for every piece: on a store that fails past 3 MiB, an
/// 8 MiB WRITE and READ from 0 (pieces 0 to 2 succeed) get EIO, and no
/// data; the pieces that landed did.
#[test]
fn a_failed_piece_fails_the_whole_request() {
    use ofi_storage::backend::Backend;
    use ofi_storage::target::{Target, TargetOptions};
    use std::sync::atomic::Ordering;
    let d = Dir::new("pieces");
    let path = d.path("volume.img");
    let f = std::fs::File::create_new(&path).unwrap();
    f.set_len(16 << 20).unwrap();
    let opts = TargetOptions {
        net: ofi_storage::NetOptions {
            provider: Some("tcp".into()),
            ..Default::default()
        },
        ..TargetOptions::default()
    };
    let store = FailsPast(f, 3 << 20);
    let t = Target::with_backend(Backend::new(Box::new(store), 16 << 20, false), &opts).unwrap();
    let port = t.local_addr().port();
    let stop = t.stop_flag();
    let served = std::thread::spawn(move || t.run());
    let (_g, sock, _) = start_gateway(&d.0, "tcp", port);
    let mut c = Raw::connect(&sock);
    let data = random(8 << 20, 5);
    c.request(1, 0, 1, 0, 8 << 20, &data);
    assert_eq!(c.reply(0), (5, 1, Vec::new()), "the large write: EIO");
    c.request(0, 0, 2, 0, 8 << 20, &[]);
    assert_eq!(c.reply(8 << 20), (5, 2, Vec::new()), "the large read: EIO");
    // What succeeded is there, and the connection is in sync.
    c.request(0, 0, 3, 0, 3 << 20, &[]);
    let (e, _, head) = c.reply(3 << 20);
    assert_eq!(e, 0);
    assert!(head == data[..3 << 20]);
    drop(c);
    stop.store(true, Ordering::Relaxed);
    served.join().unwrap().unwrap();
}

/// A target killed with `kill -9` comes back under the same gateway, and
/// what it acknowledged (with FUA, or before a FLUSH) is in its file and
/// reads back through it. (This shows the restart, not durability: the
/// page cache survives `kill -9`; see the test above for that.)
#[test]
fn a_target_killed_with_kill_9_restarts_under_the_same_gateway() {
    need("qemu-io", "qemu-utils");
    let d = Dir::new("crash");
    let mut s = stack(&d, "tcp", "4M", &[]);
    // qemu-io's write -f uses FUA; the flush variant writes then flushes.
    ok(
        "qemu-io",
        &["-f", "raw", "-c", "write -f -P 0xa5 0 64k", &s.uri],
    );
    ok(
        "qemu-io",
        &[
            "-f",
            "raw",
            "-c",
            "write -P 0x5a 1M 64k",
            "-c",
            "flush",
            &s.uri,
        ],
    );
    s.target.signal("-KILL");
    assert!(s.target.exit_within(STEP).is_some());
    let (t2, _) = start_target(&d.0, "tcp", &d.path("volume.img"), s.port, &[]);
    s.target = t2;
    let back = std::fs::read(d.path("volume.img")).unwrap();
    assert!(
        back[..64 << 10].iter().all(|&x| x == 0xa5),
        "FUA write lost"
    );
    assert!(
        back[1 << 20..(1 << 20) + (64 << 10)]
            .iter()
            .all(|&x| x == 0x5a),
        "flushed write lost"
    );
    // And through the restarted target, with the same gateway.
    ok(
        "qemu-io",
        &[
            "-f",
            "raw",
            "-c",
            "read -P 0xa5 0 64k",
            "-c",
            "read -P 0x5a 1M 64k",
            &s.uri,
        ],
    );
}

#[test]
fn a_dead_target_fails_the_client_in_seconds_and_the_gateway_serves_again() {
    need("fio", "fio");
    need("nbdinfo", "libnbd-bin");
    let d = Dir::new("dead");
    let mut s = stack(&d, "tcp", "64M", &[]);
    // A client with 16 requests in flight for a minute when the target dies.
    let uri = format!("--uri={}", s.uri);
    let mut copy = Command::new("fio")
        .args([
            "--name=busy",
            "--ioengine=nbd",
            &uri,
            "--rw=randrw",
            "--bs=64k",
            "--iodepth=16",
            "--time_based",
            "--runtime=60",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("fio");
    std::thread::sleep(Duration::from_millis(300));
    s.target.signal("-KILL");
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Ok(Some(st)) = copy.try_wait() {
            break Some(st);
        }
        if Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = copy.kill();
    let _ = copy.wait();
    let status = status.expect("the client hung after the target died");
    assert!(!status.success(), "fio cannot have succeeded");
    // Connections fail cleanly while no target runs …
    assert!(!run("nbdinfo", &["--size", &s.uri]).status.success());
    // … and work again once it is back.
    let (t2, _) = start_target(&d.0, "tcp", &d.path("volume.img"), s.port, &[]);
    s.target = t2;
    let size = ok("nbdinfo", &["--size", &s.uri]);
    assert_eq!(size.trim(), (64u64 << 20).to_string());
}

#[test]
fn sigterm_stops_target_and_gateway_cleanly() {
    let d = Dir::new("term");
    let mut s = stack(&d, "shm", "1M", &[]);
    s.gateway.signal("-TERM");
    s.target.signal("-TERM");
    assert_eq!(
        s.gateway.exit_within(Duration::from_secs(10)),
        Some(0),
        "{}",
        s.gateway.stderr()
    );
    assert_eq!(
        s.target.exit_within(Duration::from_secs(15)),
        Some(0),
        "{}",
        s.target.stderr()
    );
    assert!(!s.sock.exists(), "the gateway removed its socket");
}

/// Whether this process may create network namespaces and links
/// (CAP_SYS_ADMIN and CAP_NET_ADMIN in its effective set).
fn may_make_namespaces() -> bool {
    const CAP_NET_ADMIN: u32 = 12;
    const CAP_SYS_ADMIN: u32 = 21;
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    [CAP_NET_ADMIN, CAP_SYS_ADMIN]
        .iter()
        .all(|c| eff & (1 << c) != 0)
}

/// Liveness: an initiator's host that goes silent (its link down, not its
/// process dead: no FIN, no RST) gives its sessions' credits back within
/// the target's liveness bound, while a host that is alive keeps them
/// however idle its sessions are. Two "hosts" (network namespaces joined
/// by a veth pair, 10.98.x.1 and .2): the target on host A; on host B a
/// gateway whose eight clients hold eight sessions of 128 credits, all
/// 1024 of the target's, so that a gateway on host A is refused. Idle for
/// twice the liveness bound, host B keeps them; then host B's link goes
/// down, and the gateway on host A is served once the target gave up on
/// host B (and host B's gateway gave up on the target: its clients hear
/// of it). Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN) and `ip`; without the
/// privilege it says SKIP and returns. The namespaces are removed at the
/// end, even on failure. About 10 s.
#[test]
fn a_partitioned_initiators_credits_come_back() {
    if !may_make_namespaces() {
        eprintln!(
            "SKIP a_partitioned_initiators_credits_come_back: creating network namespaces \
             needs CAP_SYS_ADMIN and CAP_NET_ADMIN, which this process lacks"
        );
        return;
    }
    need("ip", "iproute2");
    // The liveness bound, in seconds, on both sides (the least there is).
    const LIVE: u64 = 2;
    // How long a partitioned host's credits may take to come back: far
    // beyond LIVE, so that a slow machine does not fail the test, far
    // below what the target would take without the bound (forever).
    const BOUND: Duration = Duration::from_secs(30);
    let live = LIVE.to_string();
    let net = Netns::pair("stor", 0);
    let d = Dir::new("partition");
    let a_ip = net.addrs[0].clone();
    let (_t, port) = start_target_on(
        &d.0,
        "tcp",
        Some((&net, 0)),
        &a_ip,
        &d.path("volume.img"),
        0,
        &["--size", "8M", "--liveness", &live],
    );
    let (_gb, sock_b, _) = start_gateway_on(
        &d.0,
        "tcp",
        Some((&net, 1)),
        &a_ip,
        port,
        &["-q", "128", "--liveness", &live],
    );
    let (_ga, sock_a, _) = start_gateway_on(&d.0, "tcp", Some((&net, 0)), &a_ip, port, &[]);
    let mut held: Vec<Raw> = (0..8).map(|_| Raw::connect(&sock_b)).collect();
    // Host B's sessions work across the link.
    held[0].request(1, 0, 1, 0, 4, &[7; 4]);
    assert_eq!(held[0].reply(0), (0, 1, vec![]));
    assert!(
        Raw::try_connect(&sock_a).is_err(),
        "every credit is held: host A must be refused"
    );
    // Idle but alive: host B answers the target's probes and keeps its
    // credits past the bound.
    std::thread::sleep(Duration::from_secs(2 * LIVE + 1));
    assert!(
        Raw::try_connect(&sock_a).is_err(),
        "host B is alive: its idle sessions must keep their credits"
    );
    held[1].request(0, 0, 2, 0, 4, &[]);
    assert_eq!(held[1].reply(4), (0, 2, vec![7; 4]));
    // Host B goes silent.
    net.link(1, false);
    let t0 = Instant::now();
    let mut c = loop {
        if let Ok(c) = Raw::try_connect(&sock_a) {
            break c;
        }
        assert!(
            t0.elapsed() < BOUND,
            "host B's credits did not come back in {BOUND:?}"
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    eprintln!("host B's credits came back after {:?}", t0.elapsed());
    c.request(1, 0, 3, 0, 4, &[9; 4]);
    assert_eq!(c.reply(0), (0, 3, vec![]));
    c.request(0, 0, 4, 0, 4, &[]);
    assert_eq!(c.reply(4), (0, 4, vec![9; 4]));
    // Host B's gateway gave up on the target too: a request fails (an
    // error, or the client's connection ends) rather than waiting for
    // the command timeout (30 s) or forever.
    let h = &mut held[2];
    // (Well below the command timeout, 30 s.)
    let within = Duration::from_secs(15);
    h.0.set_read_timeout(Some(within)).unwrap();
    h.request(0, 0, 5, 0, 4, &[]);
    let mut head = [0u8; 16];
    match h.0.read_exact(&mut head) {
        Ok(()) => {
            let e = u32::from_be_bytes(head[4..8].try_into().unwrap());
            assert_ne!(e, 0, "a READ through a partitioned host succeeded");
        }
        Err(e) => assert!(
            !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
            "host B's gateway still waits after {within:?}"
        ),
    }
    drop((c, held));
}
