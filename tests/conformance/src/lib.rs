//! The conformance harness: one suite, written once and run against every
//! provider offer that `ofi::getinfo` returns, skipping by capability (never
//! by provider name).
//!
//! A test is declared with [`conformance!`]; its body receives one offer and
//! returns [`Outcome`]: `Ok(())` when it ran, `Err(Skip)` (usually from
//! [`require`] or [`Pair::open`]) when the offer lacks what the test needs.
//! A skip prints its reason; a failure names the offer it failed on.
//!
//! Fixtures: [`Pair`] (two enabled endpoints of one domain, each with its own
//! tagged-format CQ; RDM endpoints share an AV that holds both addresses, MSG
//! endpoints are connected to each other over loopback) and [`Group`] (the
//! same with `n` endpoints; MSG offers only come in pairs). [`Peer`] is one
//! endpoint that talks to an endpoint in another process. Helpers collect
//! completions and error entries with a deadline ([`wait_for`],
//! [`Pair::wait`]); nothing here loops without a bound.

pub use ofi;

use ofi::consts::*;
use ofi::errno;
use ofi::{CompletionQueue, CqErrEntry, CqTaggedEntry, Endpoint, Info};
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

mod fixtures;
mod peer;

pub use fixtures::{
    connect_msg, eq_wait, insert, open_domain, open_endpoint, open_two, tagged_cq, Cm, Group, Pair,
    Two, A_CTX, B_CTX, PEP_CTX,
};
pub use peer::{Joined, Peer};

/// Default bound for anything a test waits for. Generous: the suite runs in
/// parallel on small machines; a healthy run takes milliseconds.
pub const TIMEOUT: Duration = Duration::from_secs(20);

/// Message sizes that cover the usual data paths of a provider: empty, tiny,
/// around one page, around a 32 KiB bounce buffer, and a large message.
pub const SIZES: [usize; 8] = [0, 1, 8, 4096, 4097, 32768, 32769, 1 << 20];

/// One size from each of the three size classes (inline, medium, large).
pub const CLASS_SIZES: [usize; 3] = [4000, 20_000, 1 << 20];

/// Why a test did not run on an offer, and what justifies it. The runner
/// checks capability and endpoint-type skips against what the offer
/// advertises: an offer that advertises what the test needs and skips
/// fails the test.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skip {
    why: String,
    kind: SkipKind,
}

/// The justification of a [`Skip`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SkipKind {
    /// The offer lacks these capabilities (checked).
    Lacks(u64),
    /// The offer's endpoint type is outside this set of `1 << type` bits
    /// (checked).
    EpType(u64),
    /// An advertised attribute other than a capability bit (a size, an
    /// order, a limit) rules the test out, or the test does not apply to
    /// the provider's mechanism.
    Limit,
    /// The scenario could not be staged this time (a race the test needs
    /// was lost).
    Chance,
}

impl Skip {
    /// The offer lacks `caps` (the runner checks that it does).
    pub fn lacks(caps: u64, why: impl Into<String>) -> Skip {
        Skip {
            why: why.into(),
            kind: SkipKind::Lacks(caps),
        }
    }
    /// The offer's endpoint type is not one of `types` (`FI_EP_*` values;
    /// the runner checks that it is not).
    pub fn ep_type(types: &[u32], why: impl Into<String>) -> Skip {
        Skip {
            why: why.into(),
            kind: SkipKind::EpType(types.iter().fold(0, |m, t| m | 1u64 << t)),
        }
    }
    /// An advertised attribute (not a capability bit) rules the test out.
    pub fn limit(why: impl Into<String>) -> Skip {
        Skip {
            why: why.into(),
            kind: SkipKind::Limit,
        }
    }
    /// The scenario the test needs could not be staged this time.
    pub fn chance(why: impl Into<String>) -> Skip {
        Skip {
            why: why.into(),
            kind: SkipKind::Chance,
        }
    }
    /// The reason, for messages.
    pub fn why(&self) -> &str {
        &self.why
    }
    /// Why this skip is not justified by what `info` advertises, if so.
    fn unjustified(&self, info: &Info) -> Option<String> {
        match self.kind {
            SkipKind::Lacks(caps) if caps != 0 && info.caps & caps == caps => Some(format!(
                "skipped for lacking {}, which the offer advertises",
                bits_to_string(CAP_NAMES, caps)
            )),
            SkipKind::EpType(types) if types & (1u64 << info.ep_attr.ep_type.min(63)) != 0 => {
                Some(format!(
                    "skipped for its endpoint type {}, which the test accepts",
                    ep_name(info)
                ))
            }
            _ => None,
        }
    }
}

/// What a conformance test body returns.
pub type Outcome = Result<(), Skip>;

/// Declares a `#[test]` that runs its body once for every provider offer.
///
/// ```no_run
/// use ofi_conformance::ofi::consts::*;
/// use ofi_conformance::*;
///
/// conformance!(fn sends_arrive(info) {
///     let p = Pair::open(info, FI_MSG)?;
///     let _ = p.wait(0, 0, TIMEOUT);
///     Ok(())
/// });
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! conformance {
    ($(#[$m:meta])* fn $name:ident($info:ident) $body:block) => {
        $(#[$m])*
        #[test]
        fn $name() {
            $crate::run(stringify!($name), |$info: &$crate::ofi::Info| -> $crate::Outcome { $body });
        }
    };
}

/// True for offers the suite may use: tests only ever talk over loopback,
/// so socket-address offers must be bound to a loopback address.
pub fn is_local_offer(info: &Info) -> bool {
    let Some(a) = info.src_addr.as_deref() else {
        return true;
    };
    match info.addr_format {
        addr_format::FI_SOCKADDR_IN if a.len() >= 8 => a[4] == 127,
        addr_format::FI_SOCKADDR_IN6 if a.len() >= 24 => {
            a[8..23].iter().all(|&b| b == 0) && a[23] == 1
        }
        addr_format::FI_SOCKADDR_IN | addr_format::FI_SOCKADDR_IN6 => false,
        _ => true,
    }
}

/// Every offer of every registered provider (no hints), best first, that
/// stays on this machine's loopback.
pub fn offers() -> Vec<Info> {
    match ofi::getinfo(FI_VERSION_CURRENT, None, None, 0, None) {
        Ok(v) => v.into_iter().filter(is_local_offer).collect(),
        Err(e) => panic!("getinfo without hints failed: {e}"),
    }
}

/// The offers of one endpoint type (`getinfo` with hints on `ep_attr.type`).
pub fn offers_of_type(ep: u32) -> Vec<Info> {
    let mut h = Info::hints();
    h.ep_attr.ep_type = ep;
    match ofi::getinfo(FI_VERSION_CURRENT, None, None, 0, Some(&h)) {
        Ok(v) => v.into_iter().filter(is_local_offer).collect(),
        Err(e) if e.code() == errno::FI_ENODATA => Vec::new(),
        Err(e) => panic!("getinfo with ep_type {ep} failed: {e}"),
    }
}

/// A short label for an offer: `provider/endpoint type/address format`.
pub fn describe(info: &Info) -> String {
    let fmt = enum_name(ADDR_FORMAT_NAMES, info.addr_format).unwrap_or("?");
    format!("{}/{}/{}", info.provider(), ep_name(info), fmt)
}

/// The name of an offer's endpoint type, for skip messages.
fn ep_name(info: &Info) -> &'static str {
    enum_name(EP_TYPE_NAMES, info.ep_attr.ep_type).unwrap_or("?")
}

/// Runs `body` against every offer; prints the offers it ran on and the
/// skips, names the offers a failure happened on (every offer runs even
/// after one fails). Fails if there is no offer at all, if an offer skips
/// for lacking what it advertises ([`Skip`]), and if the test ran on no
/// offer (a suite that passes with nothing tested hides a lost feature).
pub fn run(test: &str, body: impl Fn(&Info) -> Outcome) {
    let all = offers();
    assert!(!all.is_empty(), "{test}: getinfo returned no offers");
    let mut ran = Vec::new();
    let mut failures = Vec::new();
    for info in &all {
        let label = describe(info);
        match catch_unwind(AssertUnwindSafe(|| body(info))) {
            Ok(Ok(())) => ran.push(label),
            Ok(Err(skip)) => match skip.unjustified(info) {
                None => eprintln!("SKIP {test} [{label}]: {}", skip.why),
                Some(bad) => {
                    eprintln!("FAILED {test} [{label}]: {bad} ({})", skip.why);
                    let msg = format!("{test} [{label}]: {bad} ({})", skip.why);
                    failures.push((label, Box::new(msg) as Box<dyn std::any::Any + Send>));
                }
            },
            Err(p) => {
                eprintln!("FAILED {test} [{label}]");
                failures.push((label, p));
            }
        }
    }
    if failures.len() > 1 {
        let labels: Vec<&str> = failures.iter().map(|(l, _)| l.as_str()).collect();
        eprintln!(
            "{test} failed on {} offers: {}",
            failures.len(),
            labels.join(", ")
        );
    }
    if let Some((_, p)) = failures.into_iter().next() {
        resume_unwind(p);
    }
    assert!(
        !ran.is_empty(),
        "{test}: skipped on every offer ({} offers): nothing was tested",
        all.len()
    );
    eprintln!("RAN {test} on {}", ran.join(", "));
}

/// Skips unless the offer has every capability in `caps`.
pub fn require(info: &Info, caps: u64) -> Outcome {
    let missing = caps & !info.caps;
    if missing != 0 {
        return Err(Skip::lacks(
            missing,
            format!("offer lacks {}", bits_to_string(CAP_NAMES, missing)),
        ));
    }
    Ok(())
}

/// Skips unless the offer's endpoints are reliable and connectionless;
/// `why` names the RDM feature the test needs (it goes in the skip message).
pub fn require_rdm(info: &Info, why: &str) -> Outcome {
    if info.ep_attr.ep_type != ep_type::FI_EP_RDM {
        return Err(Skip::ep_type(
            &[ep_type::FI_EP_RDM],
            format!("needs FI_EP_RDM ({why}), offer is {}", ep_name(info)),
        ));
    }
    Ok(())
}

/// True for connection-oriented (FI_EP_MSG) offers.
pub fn is_msg(info: &Info) -> bool {
    info.ep_attr.ep_type == ep_type::FI_EP_MSG
}

/// Skips unless the fixtures can open endpoints of the offer's type that
/// talk to each other: FI_EP_RDM (through an AV) or FI_EP_MSG (connected).
pub fn require_pairable(info: &Info) -> Outcome {
    match info.ep_attr.ep_type {
        ep_type::FI_EP_RDM | ep_type::FI_EP_MSG => Ok(()),
        _ => Err(Skip::ep_type(
            &[ep_type::FI_EP_RDM, ep_type::FI_EP_MSG],
            format!(
                "the fixtures open FI_EP_RDM or FI_EP_MSG endpoints, offer is {}",
                ep_name(info)
            ),
        )),
    }
}

/// Sizes from `sizes` that the offer's `max_msg_size` allows.
pub fn sizes_for(info: &Info, sizes: &[usize]) -> Vec<usize> {
    let max = if info.ep_attr.max_msg_size == 0 {
        usize::MAX
    } else {
        info.ep_attr.max_msg_size
    };
    sizes.iter().copied().filter(|&s| s <= max).collect()
}

/// Deterministic bytes for a message (`seed` tells messages apart).
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Asserts two byte strings are equal, reporting the first difference
/// instead of printing megabytes.
#[track_caller]
pub fn assert_bytes_eq(got: &[u8], want: &[u8], what: &str) {
    if got.len() != want.len() {
        panic!("{what}: length {} != expected {}", got.len(), want.len());
    }
    if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
        panic!(
            "{what}: first difference at byte {i} of {} (got {:#04x}, expected {:#04x})",
            got.len(),
            got[i],
            want[i]
        );
    }
}

/// Completions and error entries read from one CQ.
#[derive(Debug, Default, Clone)]
pub struct Completions {
    /// Successful completions, in the order read.
    pub ok: Vec<CqTaggedEntry>,
    /// Source address of each successful completion (`readfrom`).
    pub src: Vec<u64>,
    /// Error entries, in the order read.
    pub err: Vec<CqErrEntry>,
}

impl Completions {
    /// Successes plus errors.
    pub fn total(&self) -> usize {
        self.ok.len() + self.err.len()
    }
    /// The successful completion with this context.
    pub fn ok_ctx(&self, ctx: usize) -> Option<&CqTaggedEntry> {
        self.ok.iter().find(|e| e.op_context == ctx)
    }
    /// The error entry with this context.
    pub fn err_ctx(&self, ctx: usize) -> Option<&CqErrEntry> {
        self.err.iter().find(|e| e.op_context == ctx)
    }
    /// Appends another batch.
    pub fn extend(&mut self, o: Completions) {
        self.ok.extend(o.ok);
        self.src.extend(o.src);
        self.err.extend(o.err);
    }
}

/// Reads everything a CQ has now (successes with sources, then error
/// entries); returns how many entries were read. Panics on errors other
/// than `FI_EAGAIN` / `FI_EAVAIL`.
pub fn poll_cq(cq: &CompletionQueue, out: &mut Completions) -> usize {
    let mut n = 0;
    let mut buf = [CqTaggedEntry::default(); 16];
    let mut src = [0u64; 16];
    for _ in 0..1024 {
        match cq.readfrom(&mut buf, &mut src) {
            Ok(k) => {
                out.ok.extend_from_slice(&buf[..k]);
                out.src.extend_from_slice(&src[..k]);
                n += k;
            }
            Err(e) if e.is_again() => break,
            Err(e) if e.code() == errno::FI_EAVAIL => match cq.readerr() {
                Ok(ee) => {
                    out.err.push(ee);
                    n += 1;
                }
                Err(e2) => panic!("cq read said FI_EAVAIL but readerr failed: {e2}"),
            },
            Err(e) => panic!("cq read failed: {e}"),
        }
    }
    n
}

/// Collects completions and error entries from `cq` until `n` are in hand
/// or `timeout` passes; returns what it got (the caller asserts).
pub fn wait_for(cq: &CompletionQueue, n: usize, timeout: Duration) -> Completions {
    let mut out = Completions::default();
    let deadline = Instant::now() + timeout;
    while out.total() < n && Instant::now() < deadline {
        if poll_cq(cq, &mut out) == 0 {
            std::thread::yield_now();
        }
    }
    out
}

/// Waits until `cntr` reaches `threshold`, driving progress on every
/// endpoint of `eps` meanwhile (manual progress: a message moves only
/// while both its ends progress, e.g. a large one pushed through the ring
/// when shm has no cross-process copy); fails when the counter's error
/// count rises or `timeout` passes.
pub fn wait_cntr(
    eps: &[&Endpoint],
    cntr: &ofi::Counter,
    threshold: u64,
    timeout: Duration,
) -> Result<(), String> {
    let errs = cntr.readerr();
    let deadline = Instant::now() + timeout;
    loop {
        for ep in eps {
            ep.progress();
        }
        let v = cntr.read();
        if v >= threshold {
            return Ok(());
        }
        let e = cntr.readerr();
        if e != errs {
            return Err(format!("the error count rose to {e} (value {v})"));
        }
        if Instant::now() >= deadline {
            return Err(format!("timed out at {v} of {threshold}"));
        }
        std::thread::yield_now();
    }
}

/// Retries an operation that returns `FI_EAGAIN` (a full queue), driving
/// progress on `eps` between tries, until it succeeds, fails otherwise, or
/// `timeout` passes (then the last `FI_EAGAIN` is returned).
pub fn retry(
    eps: &[&Endpoint],
    timeout: Duration,
    mut op: impl FnMut() -> ofi::Result<()>,
) -> ofi::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        match op() {
            Err(e) if e.is_again() && Instant::now() < deadline => {
                for ep in eps {
                    ep.progress();
                }
                std::thread::yield_now();
            }
            r => return r,
        }
    }
}

/// Asserts a receive completion describes a message of `len` bytes with the
/// expected context and flags.
#[track_caller]
pub fn assert_recv(e: &CqTaggedEntry, ctx: usize, len: usize, tagged: bool) {
    assert_eq!(e.op_context, ctx, "receive completion context");
    assert_eq!(e.len, len, "receive completion len (ctx {ctx:#x})");
    assert!(
        e.flags & FI_RECV != 0,
        "receive completion lacks FI_RECV: {:#x}",
        e.flags
    );
    let class = if tagged { FI_TAGGED } else { FI_MSG };
    assert!(
        e.flags & class != 0,
        "receive completion lacks {}: {:#x}",
        if tagged { "FI_TAGGED" } else { "FI_MSG" },
        e.flags
    );
}

/// Asserts a send completion with the expected context.
#[track_caller]
pub fn assert_send(e: &CqTaggedEntry, ctx: usize) {
    assert_eq!(e.op_context, ctx, "send completion context");
    assert!(
        e.flags & FI_SEND != 0,
        "send completion lacks FI_SEND: {:#x}",
        e.flags
    );
}

/// Formats error entries for failure messages.
pub fn errs(c: &Completions) -> String {
    c.err
        .iter()
        .map(|e| {
            format!(
                "[ctx {:#x} err {} ({}) len {} olen {}]",
                e.op_context,
                e.err,
                errno_name(e.err),
                e.len,
                e.olen
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `fi_strerror` text of an error number.
pub fn errno_name(code: i32) -> &'static str {
    ofi::error::strerror(code)
}

/// True if `fd` becomes readable within `timeout_ms` (`poll(2)`; 0 checks
/// without waiting).
#[allow(unsafe_code)]
pub fn readable(fd: std::os::fd::RawFd, timeout_ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd on the stack; poll only reads fd and writes revents.
    let n = unsafe { libc::poll(&mut p, 1, timeout_ms) };
    n > 0 && p.revents & libc::POLLIN != 0
}
