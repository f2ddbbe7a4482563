//! Helpers shared by the udp provider's system tests: opening endpoints
//! with the ofi-core API, polling completion queues against deadlines, data
//! patterns that reveal misplaced or stale bytes, and child processes of the
//! test binary spoken to by lines over stdin/stdout.
//!
//! A child is the same test binary run with the libtest filter of one test
//! (`NAME --exact --nocapture --test-threads=1`) and [`ROLE`] set; that test
//! checks [`role`] first and, when it is set, plays the role instead of the
//! parent. Protocol lines carry the [`TAG`] prefix so libtest's own output
//! ("running 1 test" ...) is told apart.
#![allow(dead_code)]

pub mod netns;

use ofi_core::consts::*;
use ofi_core::error::errno;
use ofi_core::object::*;
use ofi_core::util::av::AvAttr;
use ofi_core::util::cq::{CqAttr, CqErrEntry, CqTaggedEntry};
use ofi_core::Info;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Environment variable naming the role a child process plays.
pub const ROLE: &str = "OFI_UDP_TEST_ROLE";
/// Prefix of every protocol line a child prints.
pub const TAG: &str = "@ofi ";

// ------------------------------------------------------------- opening

/// getinfo for udp offers of `ep_type` with FI_MSG bound to `node`
/// (FI_SOURCE, any port), its error as it comes.
pub fn request(ep_type: u32, node: &str) -> ofi_core::error::Result<Vec<Info>> {
    ofi_prov_udp::register().expect("registering udp");
    let mut h = Info::hints();
    h.caps = FI_MSG;
    h.ep_attr.ep_type = ep_type;
    h.fabric_attr.prov_name = Some("udp".into());
    h.addr_format = if node.contains(':') {
        addr_format::FI_SOCKADDR_IN6
    } else {
        addr_format::FI_SOCKADDR_IN
    };
    ofi_core::getinfo(
        FI_VERSION_CURRENT,
        Some(node),
        Some("0"),
        FI_SOURCE,
        Some(&h),
    )
}

/// The udp offer of `ep_type` bound to `node` (FI_SOURCE, any port).
pub fn offer(ep_type: u32, node: &str) -> Info {
    let v =
        request(ep_type, node).unwrap_or_else(|e| panic!("getinfo udp node={node} FI_SOURCE: {e}"));
    let o = v
        .into_iter()
        .find(|i| i.provider() == "udp")
        .unwrap_or_else(|| panic!("getinfo returned no udp offer for {node}"));
    let src = ofi_prov_udp::addr::decode(o.src_addr.as_deref().expect("offer has src_addr"))
        .expect("offer's src_addr decodes");
    assert_eq!(
        src.ip().to_string(),
        node,
        "offer for node {node} is bound to {src}"
    );
    o
}

/// One endpoint with its own fabric, domain, tagged-format CQ, AV and EQ.
/// Fields drop in declaration order: the endpoint first.
pub struct Ep {
    /// The endpoint.
    pub ep: Endpoint,
    /// Its address vector.
    pub av: AddressVector,
    /// Its completion queue (transmit and receive).
    pub cq: CompletionQueue,
    /// Its event queue (joins and peer deaths are reported there).
    pub eq: EventQueue,
    /// Its domain.
    pub domain: Domain,
    /// Its fabric.
    pub fabric: Fabric,
}

impl Ep {
    /// Opens and enables an endpoint on `info`.
    pub fn open(info: &Info) -> Ep {
        Ep::open_ctx(info, 0)
    }

    /// As [`open`](Self::open), the endpoint's context (its EQ reports'
    /// fid) being `ctx`.
    pub fn open_ctx(info: &Info, ctx: usize) -> Ep {
        let fabric = Fabric::open(&info.fabric_attr).expect("fabric");
        let domain = fabric.domain(info).expect("domain");
        let cq = domain.cq(&tagged_cq()).expect("cq");
        let av = domain.av(&AvAttr::default()).expect("av");
        let eq = fabric.eq(&Default::default()).expect("eq");
        let ep = domain.endpoint_with_context(info, ctx).expect("endpoint");
        ep.bind_cq(&cq, FI_TRANSMIT | FI_RECV).expect("bind cq");
        ep.bind_av(&av).expect("bind av");
        ep.bind_eq(&eq).expect("bind eq");
        ep.enable().expect("enable");
        Ep {
            ep,
            av,
            cq,
            eq,
            domain,
            fabric,
        }
    }

    /// The endpoint's address as a socket address (for messages).
    pub fn sockaddr(&self) -> std::net::SocketAddr {
        ofi_prov_udp::addr::decode(&self.ep.getname().expect("getname")).expect("decode")
    }

    /// Inserts `other`'s address into this endpoint's AV.
    pub fn insert(&self, other: &Ep) -> u64 {
        self.av
            .insert_one(&other.ep.getname().expect("getname"))
            .expect("av insert")
    }
}

/// CQ attributes with the tagged entry format.
pub fn tagged_cq() -> CqAttr {
    CqAttr {
        format: cq_format::FI_CQ_FORMAT_TAGGED,
        ..Default::default()
    }
}

// ------------------------------------------------------------- completions

/// A completion: success or error entry.
#[derive(Clone, Copy, Debug)]
pub enum Done {
    /// A successful completion.
    Ok(CqTaggedEntry),
    /// An error completion.
    Err(CqErrEntry),
}

impl Done {
    /// The operation's context.
    pub fn ctx(&self) -> usize {
        match self {
            Done::Ok(e) => e.op_context,
            Done::Err(e) => e.op_context,
        }
    }
}

/// Reads what the CQ holds now (driving progress) into `out`; the number read.
pub fn poll(cq: &CompletionQueue, out: &mut Vec<Done>) -> usize {
    let mut e = [CqTaggedEntry::default(); 16];
    match cq.read(&mut e) {
        Ok(n) => {
            out.extend(e[..n].iter().map(|x| Done::Ok(*x)));
            n
        }
        Err(er) if er.code() == errno::FI_EAVAIL => match cq.readerr() {
            Ok(x) => {
                out.push(Done::Err(x));
                1
            }
            Err(e2) => panic!("cq readerr after FI_EAVAIL: {e2}"),
        },
        Err(er) if er.is_again() => 0,
        Err(er) => panic!("cq read: {er}"),
    }
}

/// Polls `cq` (and progresses `also`) until `ctx` completes or `timeout`
/// passes; other completions stay in `stash`. Panics on timeout.
pub fn wait_ctx(
    cq: &CompletionQueue,
    stash: &mut Vec<Done>,
    ctx: usize,
    timeout: Duration,
    also: &[&Endpoint],
    what: &str,
) -> Done {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(i) = stash.iter().position(|d| d.ctx() == ctx) {
            return stash.remove(i);
        }
        assert!(
            Instant::now() < deadline,
            "{what}: no completion for context {ctx:#x} within {timeout:?}"
        );
        if poll(cq, stash) == 0 {
            for ep in also {
                ep.progress();
            }
        }
    }
}

/// Unwraps a successful completion, panicking with the error otherwise.
pub fn ok(d: Done, what: &str) -> CqTaggedEntry {
    match d {
        Done::Ok(e) => e,
        Done::Err(e) => panic!(
            "{what}: error completion err {} ({}) ctx {:#x}",
            e.err,
            errno_name(e.err),
            e.op_context
        ),
    }
}

/// A short name for an FI_E* number.
pub fn errno_name(e: i32) -> &'static str {
    match e {
        errno::FI_EIO => "FI_EIO",
        errno::FI_ECONNRESET => "FI_ECONNRESET",
        errno::FI_ECONNREFUSED => "FI_ECONNREFUSED",
        errno::FI_ECONNABORTED => "FI_ECONNABORTED",
        errno::FI_ETIMEDOUT => "FI_ETIMEDOUT",
        errno::FI_EHOSTUNREACH => "FI_EHOSTUNREACH",
        errno::FI_ECANCELED => "FI_ECANCELED",
        errno::FI_ETRUNC => "FI_ETRUNC",
        errno::FI_ENOTCONN => "FI_ENOTCONN",
        errno::FI_ENETUNREACH => "FI_ENETUNREACH",
        errno::FI_ENETDOWN => "FI_ENETDOWN",
        32 => "EPIPE",
        _ => "?",
    }
}

// ------------------------------------------------------------- data

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Fills `buf` with the pattern of `seed`: every 8-byte word depends on the
/// seed and its position, so shifted, stale or foreign bytes show.
pub fn fill(buf: &mut [u8], seed: u64) {
    let s = mix(seed ^ 0x5eed);
    for (j, c) in buf.chunks_mut(8).enumerate() {
        let w = mix(s ^ j as u64).to_le_bytes();
        c.copy_from_slice(&w[..c.len()]);
    }
}

/// The first offset where `buf` differs from the pattern of `seed`.
pub fn mismatch(buf: &[u8], seed: u64) -> Option<usize> {
    let s = mix(seed ^ 0x5eed);
    for (j, c) in buf.chunks(8).enumerate() {
        let w = mix(s ^ j as u64).to_le_bytes();
        if c != &w[..c.len()] {
            let k = c
                .iter()
                .zip(w.iter())
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            return Some(j * 8 + k);
        }
    }
    None
}

/// `len` bytes of the pattern of `seed`.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    fill(&mut v, seed);
    v
}

/// Writes a stamped message: `seq` in the first 8 bytes, then the pattern
/// of `seq` (`buf` holds at least 8 bytes).
pub fn stamp(buf: &mut [u8], seq: u64) {
    buf[..8].copy_from_slice(&seq.to_le_bytes());
    fill(&mut buf[8..], seq);
}

/// Checks a stamped message of `len` bytes; its sequence number.
pub fn check_stamp(buf: &[u8], len: usize) -> Result<u64, String> {
    if len < 8 || len > buf.len() {
        return Err(format!("length {len} (buffer {})", buf.len()));
    }
    let seq = u64::from_le_bytes(buf[..8].try_into().expect("8 bytes"));
    match mismatch(&buf[8..len], seq) {
        None => Ok(seq),
        Some(at) => Err(format!(
            "message seq {seq} of {len} bytes differs from its pattern at byte {}",
            at + 8
        )),
    }
}

/// Hex encoding (addresses over stdin/stdout).
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Hex decoding.
pub fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex"))
        .collect()
}

// ------------------------------------------------------------- children

/// The libtest arguments that run exactly the test `name` in a child.
pub fn self_args(name: &str) -> Vec<String> {
    vec![
        name.to_string(),
        "--exact".into(),
        "--nocapture".into(),
        "--test-threads=1".into(),
    ]
}

/// A command running this test binary's test `name` in `role`.
pub fn self_cmd(name: &str, role: &str) -> Command {
    let exe = std::env::current_exe().expect("current_exe");
    let mut c = Command::new(exe);
    c.args(self_args(name)).env(ROLE, role);
    c
}

/// A child process, spoken to by lines.
pub struct Kid {
    /// Name for messages.
    pub name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<(Instant, String)>,
}

impl Kid {
    /// Spawns `cmd` with piped stdin/stdout (stderr inherited).
    pub fn spawn(name: &str, mut cmd: Command) -> Kid {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawning child {name} ({cmd:?}): {e}"));
        let out = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        let tname = format!("{name}[{}]", child.id());
        let echo = tname.clone();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines() {
                let Ok(l) = l else { break };
                // libtest's "test NAME ... " has no newline: the tag may
                // follow it on the same line.
                match l.find(TAG).map(|i| &l[i + TAG.len()..]) {
                    Some(p) => {
                        if tx.send((Instant::now(), p.to_string())).is_err() {
                            break;
                        }
                    }
                    None => eprintln!("{echo} stdout: {l}"),
                }
            }
        });
        let stdin = child.stdin.take();
        Kid {
            name: tname,
            child,
            stdin,
            lines: rx,
        }
    }

    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends one line.
    pub fn say(&mut self, line: &str) {
        let name = self.name.clone();
        let w = self
            .stdin
            .as_mut()
            .unwrap_or_else(|| panic!("{name}: stdin closed"));
        writeln!(w, "{line}").unwrap_or_else(|e| panic!("{name}: writing '{line}': {e}"));
        let _ = w.flush();
    }

    fn status(&mut self) -> String {
        match self.child.try_wait() {
            Ok(Some(s)) => s.to_string(),
            Ok(None) => "still running".into(),
            Err(e) => e.to_string(),
        }
    }

    /// Waits until `deadline` for a line starting with one of `prefixes`;
    /// returns (which prefix, the rest, when it arrived). Panics on a
    /// `FAIL` line, the child's exit or the deadline.
    pub fn expect_any(&mut self, prefixes: &[&str], deadline: Instant) -> (usize, String, Instant) {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok((t, l)) => {
                    if let Some(i) = prefixes.iter().position(|p| l.starts_with(p)) {
                        return (i, l[prefixes[i].len()..].trim().to_string(), t);
                    }
                    if l.starts_with("FAIL") {
                        panic!("{}: {l}", self.name);
                    }
                    eprintln!("{}: {l}", self.name);
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    panic!("{}: no {prefixes:?} line in time", self.name)
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    std::thread::sleep(Duration::from_millis(50));
                    let st = self.status();
                    panic!(
                        "{}: stdout closed ({st}) before a {prefixes:?} line",
                        self.name
                    )
                }
            }
        }
    }

    /// Waits up to `timeout` for a line starting with `prefix`; the rest.
    pub fn expect(&mut self, prefix: &str, timeout: Duration) -> String {
        self.expect_any(&[prefix], Instant::now() + timeout).1
    }

    /// A line already received, if any (never blocks). Panics on `FAIL`
    /// or if the child's stdout closed.
    pub fn try_line(&mut self) -> Option<String> {
        match self.lines.try_recv() {
            Ok((_, l)) if l.starts_with("FAIL") => panic!("{}: {l}", self.name),
            Ok((_, l)) => Some(l),
            Err(mpsc::TryRecvError::Empty) => None,
            Err(mpsc::TryRecvError::Disconnected) => {
                std::thread::sleep(Duration::from_millis(50));
                let st = self.status();
                panic!("{}: stdout closed ({st})", self.name)
            }
        }
    }

    /// SIGKILL (this child only, by its pid), and reap it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Closes stdin and waits for a successful exit.
    pub fn finish(&mut self, timeout: Duration) {
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

/// This process's role, when it is a child.
pub fn role() -> Option<String> {
    std::env::var(ROLE).ok()
}

/// Prints a protocol line to the parent.
pub fn tell(line: &str) {
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{TAG}{line}");
    let _ = o.flush();
}

/// Reads stdin lines until one starts with `prefix`; the rest. Panics if
/// the parent closes stdin first.
pub fn listen(prefix: &str) -> String {
    loop {
        let mut s = String::new();
        match std::io::stdin().lock().read_line(&mut s) {
            Ok(0) | Err(_) => panic!("parent closed stdin before '{prefix}'"),
            Ok(_) => {
                if let Some(r) = s.trim().strip_prefix(prefix) {
                    return r.trim().to_string();
                }
            }
        }
    }
}

/// Blocks until the parent says EXIT or closes stdin.
pub fn linger() {
    loop {
        let mut s = String::new();
        match std::io::stdin().lock().read_line(&mut s) {
            Ok(0) | Err(_) => return,
            Ok(_) if s.trim() == "EXIT" => return,
            Ok(_) => {}
        }
    }
}

/// Runs a child role, turning a panic into a `FAIL` line for the parent
/// (the panic message also goes to stderr), then exits the process.
pub fn child_main(f: impl FnOnce()) -> ! {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    match r {
        Ok(()) => std::process::exit(0),
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".into());
            tell(&format!("FAIL {}", msg.replace('\n', " | ")));
            std::process::exit(3)
        }
    }
}
