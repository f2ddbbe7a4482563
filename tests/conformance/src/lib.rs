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
use ofi::{
    AddressVector, CompletionQueue, CqAttr, CqErrEntry, CqTaggedEntry, Domain, Endpoint, EqAttr,
    EqEvent, EventQueue, Fabric, Info, PassiveEndpoint,
};
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

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

/// Opens a CQ in the tagged format with the given wait object.
pub fn tagged_cq(domain: &Domain, wait: u32) -> CompletionQueue {
    domain
        .cq(&CqAttr {
            size: 0,
            format: cq_format::FI_CQ_FORMAT_TAGGED,
            wait_obj: wait,
        })
        .unwrap_or_else(|e| panic!("cq open: {e}"))
}

/// The fid (context) the MSG fixtures' listener reports on its event queue.
pub const PEP_CTX: usize = 0xc0;
/// The fid (context) of the connecting endpoint (`a`) on the event queue.
pub const A_CTX: usize = 0xca;
/// The fid (context) of the accepting endpoint (`b`) on the event queue.
pub const B_CTX: usize = 0xcb;

/// Opens fabric and domain for an offer, and an AV for endpoint types that
/// address their peers (every type but FI_EP_MSG).
pub fn open_domain(info: &Info) -> (Fabric, Domain, Option<AddressVector>) {
    let fabric = Fabric::open(&info.fabric_attr)
        .unwrap_or_else(|e| panic!("fabric open [{}]: {e}", describe(info)));
    let domain = fabric
        .domain(info)
        .unwrap_or_else(|e| panic!("domain open: {e}"));
    let av = (!is_msg(info)).then(|| {
        domain
            .av(&ofi::AvAttr::default())
            .unwrap_or_else(|e| panic!("av open: {e}"))
    });
    (fabric, domain, av)
}

/// Opens an endpoint with fid `ctx`, lets `bind` bind its CQs and counters,
/// binds `av` and `eq` when given, and enables it.
fn enabled_endpoint(
    domain: &Domain,
    info: &Info,
    ctx: usize,
    av: Option<&AddressVector>,
    eq: Option<&EventQueue>,
    bind: impl FnOnce(&Endpoint),
) -> Endpoint {
    let ep = domain
        .endpoint_with_context(info, ctx)
        .unwrap_or_else(|e| panic!("endpoint open: {e}"));
    bind(&ep);
    if let Some(av) = av {
        ep.bind_av(av).unwrap_or_else(|e| panic!("bind av: {e}"));
    }
    if let Some(eq) = eq {
        ep.bind_eq(eq).unwrap_or_else(|e| panic!("bind eq: {e}"));
    }
    ep.enable().unwrap_or_else(|e| panic!("enable: {e}"));
    ep
}

/// Opens an endpoint bound to `cq` (transmit and receive) and `av`, enabled.
pub fn open_endpoint(
    domain: &Domain,
    info: &Info,
    cq: &CompletionQueue,
    av: &AddressVector,
) -> Endpoint {
    enabled_endpoint(domain, info, 0, Some(av), None, |ep| {
        ep.bind_cq(cq, FI_TRANSMIT | FI_RECV)
            .unwrap_or_else(|e| panic!("bind cq: {e}"));
    })
}

/// Inserts an endpoint's address into an AV.
pub fn insert(av: &AddressVector, ep: &Endpoint) -> u64 {
    let name = ep.getname().unwrap_or_else(|e| panic!("getname: {e}"));
    av.insert_one(&name)
        .unwrap_or_else(|e| panic!("av insert: {e}"))
}

/// Reads the next event of `eq` (driving progress) until `deadline`;
/// panics naming `what` on an error entry or when the deadline passes.
pub fn eq_wait(eq: &EventQueue, deadline: Instant, what: &str) -> EqEvent {
    loop {
        match eq.read() {
            Ok(ev) => return ev,
            Err(e) if e.is_again() && Instant::now() < deadline => std::thread::yield_now(),
            Err(e) if e.is_again() => panic!("{what}: no event before the deadline"),
            Err(e) if e.code() == errno::FI_EAVAIL => match eq.readerr() {
                Ok(ee) => panic!(
                    "{what}: EQ error entry for fid {:#x}: err {} ({})",
                    ee.fid,
                    ee.err,
                    errno_name(ee.err)
                ),
                Err(e2) => panic!("{what}: EQ read said FI_EAVAIL but readerr failed: {e2}"),
            },
            Err(e) => panic!("{what}: EQ read failed: {e}"),
        }
    }
}

/// What keeps a fixture's MSG endpoints connected: the listener the
/// connecting side reached and the event queue of the connection events.
pub struct Cm {
    /// The passive endpoint (fid [`PEP_CTX`]).
    pub pep: PassiveEndpoint,
    /// Connection events of the listener and of both endpoints.
    pub eq: EventQueue,
}

/// Opens a listener on the offer's (loopback) address with its own EQ.
fn listen(fabric: &Fabric, info: &Info) -> Cm {
    let eq = fabric
        .eq(&EqAttr::default())
        .unwrap_or_else(|e| panic!("eq open: {e}"));
    let pep = fabric
        .passive_ep(info, PEP_CTX)
        .unwrap_or_else(|e| panic!("passive endpoint open: {e}"));
    pep.bind_eq(&eq)
        .unwrap_or_else(|e| panic!("passive endpoint bind eq: {e}"));
    pep.listen().unwrap_or_else(|e| panic!("listen: {e}"));
    Cm { pep, eq }
}

/// Waits for the FI_CONNREQ on a listener's EQ; returns the info to open
/// the accepting endpoint with.
fn connreq(cm: &Cm, deadline: Instant) -> Info {
    let req = eq_wait(&cm.eq, deadline, "waiting for the connection request");
    assert_eq!(
        (req.event, req.fid),
        (eq_event::FI_CONNREQ, PEP_CTX),
        "expected FI_CONNREQ from the listener"
    );
    *req.info
        .unwrap_or_else(|| panic!("FI_CONNREQ without an info to accept with"))
}

/// Connects two MSG endpoints of `domain` over the offer's loopback
/// address: `a` (fid [`A_CTX`]) connects to a listener, `b` (fid
/// [`B_CTX`]) is opened from the connection request and accepts. Returns
/// once both reported FI_CONNECTED (bounded by [`TIMEOUT`]). `bind(i, ep)`
/// binds endpoint `i`'s (0: `a`, 1: `b`) CQs and counters before enable.
pub fn connect_msg(
    fabric: &Fabric,
    domain: &Domain,
    info: &Info,
    mut bind: impl FnMut(usize, &Endpoint),
) -> (Endpoint, Endpoint, Cm) {
    let deadline = Instant::now() + TIMEOUT;
    let cm = listen(fabric, info);
    let name = cm
        .pep
        .getname()
        .unwrap_or_else(|e| panic!("listener getname: {e}"));
    let a = enabled_endpoint(domain, info, A_CTX, None, Some(&cm.eq), |ep| bind(0, ep));
    a.connect(&name, &[])
        .unwrap_or_else(|e| panic!("connect: {e}"));
    let rinfo = connreq(&cm, deadline);
    let b = enabled_endpoint(domain, &rinfo, B_CTX, None, Some(&cm.eq), |ep| bind(1, ep));
    b.accept(&[]).unwrap_or_else(|e| panic!("accept: {e}"));
    let mut up = [false; 2];
    while !(up[0] && up[1]) {
        let ev = eq_wait(&cm.eq, deadline, "waiting for FI_CONNECTED on both sides");
        match (ev.event, ev.fid) {
            (eq_event::FI_CONNECTED, A_CTX) if !up[0] => up[0] = true,
            (eq_event::FI_CONNECTED, B_CTX) if !up[1] => up[1] = true,
            (e, fid) => panic!("unexpected event {e} for fid {fid:#x} while connecting"),
        }
    }
    (a, b, cm)
}

/// Two enabled endpoints that talk to each other, with the destination to
/// pass when sending to each.
pub struct Two {
    /// First endpoint (the connecting side for MSG).
    pub a: Endpoint,
    /// Second endpoint (the accepting side for MSG).
    pub b: Endpoint,
    /// Destination of sends to `a`: its fi_addr (RDM), or FI_ADDR_UNSPEC
    /// (connected MSG endpoints ignore destinations).
    pub fa: u64,
    /// Destination of sends to `b`.
    pub fb: u64,
    /// The connection's listener and event queue (MSG only).
    pub cm: Option<Cm>,
}

/// Opens two endpoints of `domain` that talk to each other: RDM endpoints
/// bound to `av` (which then holds both), MSG endpoints connected
/// ([`connect_msg`]; `av` is `None`). `bind(i, ep)` binds endpoint `i`'s
/// CQs and counters before enable.
pub fn open_two(
    fabric: &Fabric,
    domain: &Domain,
    av: Option<&AddressVector>,
    info: &Info,
    mut bind: impl FnMut(usize, &Endpoint),
) -> Result<Two, Skip> {
    require_pairable(info)?;
    if is_msg(info) {
        let (a, b, cm) = connect_msg(fabric, domain, info, bind);
        return Ok(Two {
            a,
            b,
            fa: FI_ADDR_UNSPEC,
            fb: FI_ADDR_UNSPEC,
            cm: Some(cm),
        });
    }
    let av = av.unwrap_or_else(|| panic!("{}: endpoints need an AV", describe(info)));
    let a = enabled_endpoint(domain, info, A_CTX, Some(av), None, |ep| bind(0, ep));
    let b = enabled_endpoint(domain, info, B_CTX, Some(av), None, |ep| bind(1, ep));
    let (fa, fb) = (insert(av, &a), insert(av, &b));
    Ok(Two {
        a,
        b,
        fa,
        fb,
        cm: None,
    })
}

/// `n` enabled endpoints of one domain, each bound to its own tagged CQ:
/// RDM endpoints share an AV that holds every endpoint's address; MSG
/// endpoints (`n` = 2 only) are connected to each other.
pub struct Group {
    /// The endpoints (declared first: dropped before what they are bound to).
    pub eps: Vec<Endpoint>,
    /// `cqs[i]` is bound to `eps[i]` for transmit and receive.
    pub cqs: Vec<CompletionQueue>,
    /// `addrs[i]` is the destination of sends to `eps[i]`: its fi_addr in
    /// `av` (RDM), FI_ADDR_UNSPEC (MSG).
    pub addrs: Vec<u64>,
    /// The connection's listener and event queue (MSG only).
    pub cm: Option<Cm>,
    /// The shared address vector (not for MSG).
    pub av: Option<AddressVector>,
    /// The domain.
    pub domain: Domain,
    /// The fabric.
    pub fabric: Fabric,
    /// The offer the group was opened with.
    pub info: Info,
}

impl Group {
    /// Opens `n` endpoints; skips unless the offer has `caps` and is RDM,
    /// or MSG with `n` = 2.
    pub fn open(info: &Info, caps: u64, n: usize) -> Result<Group, Skip> {
        Self::open_with(info, caps, n, wait_obj::FI_WAIT_UNSPEC)
    }

    /// As [`open`](Self::open), with the CQs' wait object.
    pub fn open_with(info: &Info, caps: u64, n: usize, wait: u32) -> Result<Group, Skip> {
        require(info, caps)?;
        require_pairable(info)?;
        if is_msg(info) && n != 2 {
            return Err(Skip::ep_type(
                &[ep_type::FI_EP_RDM],
                format!(
                    "a group of {n} endpoints needs FI_EP_RDM; FI_EP_MSG endpoints come in \
                     connected pairs"
                ),
            ));
        }
        let (fabric, domain, av) = open_domain(info);
        let cqs: Vec<_> = (0..n).map(|_| tagged_cq(&domain, wait)).collect();
        let (eps, addrs, cm) = match &av {
            Some(av) => {
                let eps: Vec<_> = cqs
                    .iter()
                    .map(|cq| open_endpoint(&domain, info, cq, av))
                    .collect();
                let addrs = eps.iter().map(|ep| insert(av, ep)).collect();
                (eps, addrs, None)
            }
            None => {
                let t = open_two(&fabric, &domain, None, info, |i, ep| {
                    ep.bind_cq(&cqs[i], FI_TRANSMIT | FI_RECV)
                        .unwrap_or_else(|e| panic!("bind cq: {e}"));
                })?;
                (vec![t.a, t.b], vec![t.fa, t.fb], t.cm)
            }
        };
        Ok(Group {
            eps,
            cqs,
            addrs,
            cm,
            av,
            domain,
            fabric,
            info: info.clone(),
        })
    }

    /// Drives progress on every endpoint once.
    pub fn progress(&self) {
        for ep in &self.eps {
            ep.progress();
        }
    }

    /// Reads every CQ until `want[i]` entries are in hand for each `i`, or
    /// the timeout passes.
    pub fn wait(&self, want: &[usize], timeout: Duration) -> Vec<Completions> {
        let mut out: Vec<Completions> = self.cqs.iter().map(|_| Completions::default()).collect();
        let deadline = Instant::now() + timeout;
        loop {
            let mut read = 0;
            for (cq, o) in self.cqs.iter().zip(out.iter_mut()) {
                read += poll_cq(cq, o);
            }
            let done = out.iter().zip(want).all(|(o, &w)| o.total() >= w);
            if done || Instant::now() >= deadline {
                return out;
            }
            if read == 0 {
                std::thread::yield_now();
            }
        }
    }
}

/// Two enabled endpoints `a` and `b` of one domain with their own tagged
/// CQs: RDM endpoints share an AV holding both (`fa`, `fb`); MSG endpoints
/// are connected (`a` connected, `b` accepted; `fa` = `fb` =
/// FI_ADDR_UNSPEC).
pub struct Pair {
    /// First endpoint.
    pub a: Endpoint,
    /// Second endpoint.
    pub b: Endpoint,
    /// `a`'s CQ (transmit and receive).
    pub cq_a: CompletionQueue,
    /// `b`'s CQ (transmit and receive).
    pub cq_b: CompletionQueue,
    /// Destination of sends to `a`.
    pub fa: u64,
    /// Destination of sends to `b`.
    pub fb: u64,
    /// The connection's listener and event queue (MSG only).
    pub cm: Option<Cm>,
    /// The shared AV (not for MSG).
    pub av: Option<AddressVector>,
    /// The domain.
    pub domain: Domain,
    /// The fabric.
    pub fabric: Fabric,
    /// The offer.
    pub info: Info,
}

impl Pair {
    /// Opens a pair; skips unless the offer is RDM or MSG with `caps`.
    pub fn open(info: &Info, caps: u64) -> Result<Pair, Skip> {
        Self::open_with(info, caps, wait_obj::FI_WAIT_UNSPEC)
    }

    /// As [`open`](Self::open), with the CQs' wait object.
    pub fn open_with(info: &Info, caps: u64, wait: u32) -> Result<Pair, Skip> {
        let g = Group::open_with(info, caps, 2, wait)?;
        let Group {
            mut eps,
            mut cqs,
            addrs,
            cm,
            av,
            domain,
            fabric,
            info,
        } = g;
        let (b, a) = (
            eps.pop().expect("2 endpoints"),
            eps.pop().expect("2 endpoints"),
        );
        let (cq_b, cq_a) = (cqs.pop().expect("2 cqs"), cqs.pop().expect("2 cqs"));
        Ok(Pair {
            a,
            b,
            cq_a,
            cq_b,
            fa: addrs[0],
            fb: addrs[1],
            cm,
            av,
            domain,
            fabric,
            info,
        })
    }

    /// Reads both CQs until `a` has `na` entries and `b` has `nb` (errors
    /// included), or the timeout passes. Returns `(a's, b's)`.
    pub fn wait(&self, na: usize, nb: usize, timeout: Duration) -> (Completions, Completions) {
        let mut ca = Completions::default();
        let mut cb = Completions::default();
        let deadline = Instant::now() + timeout;
        loop {
            let read = poll_cq(&self.cq_a, &mut ca) + poll_cq(&self.cq_b, &mut cb);
            if (ca.total() >= na && cb.total() >= nb) || Instant::now() >= deadline {
                return (ca, cb);
            }
            if read == 0 {
                std::thread::yield_now();
            }
        }
    }

    /// Reads both CQs into running tallies until `sa` holds `na` entries and
    /// `sb` holds `nb` (errors included), or the timeout passes. Use this
    /// when earlier reads may already have taken some of the entries.
    pub fn wait_into(
        &self,
        sa: &mut Completions,
        sb: &mut Completions,
        na: usize,
        nb: usize,
        timeout: Duration,
    ) {
        let (ca, cb) = self.wait(
            na.saturating_sub(sa.total()),
            nb.saturating_sub(sb.total()),
            timeout,
        );
        sa.extend(ca);
        sb.extend(cb);
    }

    /// Reads both CQs for `d` (progress on both sides); returns what came.
    pub fn settle(&self, d: Duration) -> (Completions, Completions) {
        self.wait(usize::MAX, usize::MAX, d)
    }

    /// Drives progress on both endpoints once.
    pub fn progress(&self) {
        self.a.progress();
        self.b.progress();
    }
}

/// One endpoint of this process that talks to one endpoint in another
/// process, before the two know each other: its [`name`](Self::name) goes
/// to the other side, and [`join`](Self::join) with the other side's name
/// makes a [`Joined`]. RDM: the name is the endpoint's address, joining
/// inserts the other's into the AV. MSG: the name is a listener's address;
/// on joining, the side whose name sorts first connects to the other's
/// listener and the other accepts.
pub struct Peer {
    ep: Option<Endpoint>,
    cq: CompletionQueue,
    cm: Option<Cm>,
    av: Option<AddressVector>,
    domain: Domain,
    fabric: Fabric,
    info: Info,
    name: Vec<u8>,
}

/// An endpoint joined with its peer in another process.
pub struct Joined {
    /// The endpoint.
    pub ep: Endpoint,
    /// Its CQ (transmit and receive).
    pub cq: CompletionQueue,
    /// Destination of sends to the peer: its fi_addr (RDM) or
    /// FI_ADDR_UNSPEC (MSG).
    pub peer: u64,
    /// The connection's listener and event queue (MSG only).
    pub cm: Option<Cm>,
    /// The AV holding the peer (not for MSG).
    pub av: Option<AddressVector>,
    /// The domain.
    pub domain: Domain,
    /// The fabric.
    pub fabric: Fabric,
}

impl Peer {
    /// Opens the endpoint (RDM) or the listener (MSG); skips unless the
    /// offer has `caps` and one of those endpoint types.
    pub fn open(info: &Info, caps: u64, wait: u32) -> Result<Peer, Skip> {
        require(info, caps)?;
        require_pairable(info)?;
        let (fabric, domain, av) = open_domain(info);
        let cq = tagged_cq(&domain, wait);
        let (ep, cm, name) = match &av {
            Some(av) => {
                let ep = open_endpoint(&domain, info, &cq, av);
                let name = ep.getname().unwrap_or_else(|e| panic!("getname: {e}"));
                (Some(ep), None, name)
            }
            None => {
                let cm = listen(&fabric, info);
                let name = cm
                    .pep
                    .getname()
                    .unwrap_or_else(|e| panic!("listener getname: {e}"));
                (None, Some(cm), name)
            }
        };
        Ok(Peer {
            ep,
            cq,
            cm,
            av,
            domain,
            fabric,
            info: info.clone(),
            name,
        })
    }

    /// The address to give the other side.
    pub fn name(&self) -> &[u8] {
        &self.name
    }

    /// Joins with the other side's name (for MSG both sides must be
    /// joining at the same time; bounded by [`TIMEOUT`]).
    pub fn join(self, theirs: &[u8]) -> Joined {
        let Peer {
            ep,
            cq,
            cm,
            av,
            domain,
            fabric,
            info,
            name,
        } = self;
        let bind = |ep: &Endpoint| {
            ep.bind_cq(&cq, FI_TRANSMIT | FI_RECV)
                .unwrap_or_else(|e| panic!("bind cq: {e}"));
        };
        let (ep, peer) = match (ep, &av, &cm) {
            (Some(ep), Some(av), _) => {
                let peer = av
                    .insert_one(theirs)
                    .unwrap_or_else(|e| panic!("av insert of the peer: {e}"));
                (ep, peer)
            }
            (None, None, Some(cm)) => {
                let deadline = Instant::now() + TIMEOUT;
                let (ep, ctx, what) = if name.as_slice() < theirs {
                    let ep = enabled_endpoint(&domain, &info, A_CTX, None, Some(&cm.eq), bind);
                    ep.connect(theirs, &[])
                        .unwrap_or_else(|e| panic!("connect to the peer: {e}"));
                    (ep, A_CTX, "connect")
                } else {
                    let rinfo = connreq(cm, deadline);
                    let ep = enabled_endpoint(&domain, &rinfo, B_CTX, None, Some(&cm.eq), bind);
                    ep.accept(&[])
                        .unwrap_or_else(|e| panic!("accept the peer: {e}"));
                    (ep, B_CTX, "accept")
                };
                let ev = eq_wait(
                    &cm.eq,
                    deadline,
                    &format!("{what}: waiting for FI_CONNECTED"),
                );
                assert_eq!(
                    (ev.event, ev.fid),
                    (eq_event::FI_CONNECTED, ctx),
                    "{what}: expected FI_CONNECTED"
                );
                (ep, FI_ADDR_UNSPEC)
            }
            _ => unreachable!("Peer::open makes an endpoint with an AV or a listener"),
        };
        Joined {
            ep,
            cq,
            peer,
            cm,
            av,
            domain,
            fabric,
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
