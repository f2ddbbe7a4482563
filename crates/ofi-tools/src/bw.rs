//! `ofi bw`: bandwidth and message rate of one operation streamed from the
//! client to the server with a window of operations in flight, in
//! fi_pingpong's columns.
//!
//! The client leads and the server follows its plan over the control
//! channel: `Setup` (operation, largest size, window) is answered with the
//! server's region (address, key) for one-sided operations; each size is a
//! `Start` (size, count) answered when the server is ready, the stream, then
//! `Done`, answered with the server's verdict on the data; `End` closes.
//! For sends the server pre-posts a window of receives and reposts them;
//! for RMA and atomics it only drives progress until `Done` arrives.
#![allow(unsafe_code)]

use crate::args::Args;
use crate::control::{self, Oob};
use crate::data;
use crate::plot;
use crate::report::{self, Row};
use crate::setup::{self, Ctx, Want};
use crate::watch::Watch;
use ofi::consts::*;
use ofi::errno;
use ofi::{CqEntry, MemoryRegion, MrAttr};
use std::time::{Duration, Instant};

const USAGE: &str = "Usage:
  ofi bw [OPTIONS]             start server
  ofi bw [OPTIONS] <srv_addr>  connect to server
Options:
 -B <src_port>   source control port (server: 47592)
 -P <dst_port>   destination control port (client: 47592)
 -p <provider>   provider name (default: the best offer)
 -e <ep_type>    endpoint type: msg|rdm|dgram (rdm)
 -o <op>         operation: send|tagged|write|read|atomic (send; tagged with -m tagged)
 -I <number>     operations per size (1000)
 -S <size>       transfer size, a comma-separated list, or 'all'
                 (default: 64, 256, 1k, 4k, 64k, 1m; atomic: one element)
 -W <count>      operations kept in flight (64)
 -w <count>      warm-up operations per size (one window)
 -c              check data integrity
 -m <mode>       transmit mode for -o send: msg|tagged (msg)
 --atomic-op OP  atomic operation of -o atomic: sum|min|max|prod|bor|band|bxor|
                 lor|land|lxor|atomic_write|atomic_read (sum)
 --datatype DT   atomic datatype: int8..int64|uint8..uint64|float|double (uint64)
 --block         wait for completions with a blocking read (spin, then sleep)
 --csv FILE      write the results as CSV
 --svg FILE      plot time per transfer and bandwidth against size
 --local         run both sides here (server in a child process)
 -h              this text
Atomics are fetch atomics (fi_fetch_atomic): with -W 1 usec/xfer is the
round trip of one, and a line after the table gives the one-way figure.";

/// Sizes when `-S` is not given (fi_pingpong's).
const DEFAULT_SIZES: [usize; 6] = [64, 256, 1 << 10, 4 << 10, 64 << 10, 1 << 20];

/// Local buffers one size may use for in-flight operations; beyond this the
/// window shrinks for that size.
const SLOT_BYTES: usize = 256 << 20;

/// Contexts of operations: this base plus the slot.
const SLOT_CTX: usize = 0x100;
const TAG: u64 = 0xb0;
/// The key requested when the provider does not choose keys.
const KEY: u64 = 0xb0_0001;
/// How long the server waits for one-sided data to land after `Done`.
const LAND_WAIT: Duration = Duration::from_secs(5);

/// The operation streamed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Send,
    Tagged,
    Write,
    Read,
    Atomic,
}

impl Op {
    const ALL: [Op; 5] = [Op::Send, Op::Tagged, Op::Write, Op::Read, Op::Atomic];
    fn name(self) -> &'static str {
        match self {
            Op::Send => "send",
            Op::Tagged => "tagged",
            Op::Write => "write",
            Op::Read => "read",
            Op::Atomic => "atomic",
        }
    }
    fn from_name(s: &str) -> Option<Op> {
        Op::ALL.into_iter().find(|o| o.name() == s)
    }
    fn caps(self) -> u64 {
        match self {
            Op::Send => FI_MSG,
            Op::Tagged => FI_TAGGED,
            Op::Write | Op::Read => FI_RMA,
            Op::Atomic => FI_ATOMIC,
        }
    }
    fn one_sided(self) -> bool {
        matches!(self, Op::Write | Op::Read | Op::Atomic)
    }
}

/// The atomic of `-o atomic`: a fetch atomic of `op` on `datatype`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Atomic {
    op: u32,
    datatype: u32,
}

impl Atomic {
    const DEFAULT: Atomic = Atomic {
        op: atomic_op::FI_SUM,
        datatype: datatype::FI_UINT64,
    };
    fn parse(a: &Args) -> Result<Atomic, String> {
        let op = match a.get("atomic-op") {
            None => Self::DEFAULT.op,
            Some(s) => enum_value(ATOMIC_OP_NAMES, "FI_", s)
                .filter(|&o| o < atomic_op::FI_CSWAP)
                .ok_or_else(|| {
                    format!("--atomic-op '{s}': one of sum|min|max|prod|bor|band|bxor|lor|land|lxor|atomic_write|atomic_read")
                })?,
        };
        let datatype = match a.get("datatype") {
            None => Self::DEFAULT.datatype,
            Some(s) => enum_value(DATATYPE_NAMES, "FI_", s)
                .filter(|&d| elem_size(d).is_some())
                .ok_or_else(|| {
                    format!("--datatype '{s}': one of int8..int64, uint8..uint64, float, double")
                })?,
        };
        Ok(Atomic { op, datatype })
    }
    fn elem(self) -> usize {
        elem_size(self.datatype).unwrap_or(8)
    }
    fn names(self) -> String {
        format!(
            "{} {}",
            enum_name(DATATYPE_NAMES, self.datatype).unwrap_or("?"),
            enum_name(ATOMIC_OP_NAMES, self.op).unwrap_or("?")
        )
    }
    /// One element of value `v` in the datatype (native byte order).
    fn value(self, v: u64) -> Vec<u8> {
        match self.datatype {
            datatype::FI_INT8 | datatype::FI_UINT8 => vec![v as u8],
            datatype::FI_INT16 | datatype::FI_UINT16 => (v as u16).to_ne_bytes().to_vec(),
            datatype::FI_INT32 | datatype::FI_UINT32 => (v as u32).to_ne_bytes().to_vec(),
            datatype::FI_FLOAT => (v as f32).to_ne_bytes().to_vec(),
            datatype::FI_DOUBLE => (v as f64).to_ne_bytes().to_vec(),
            _ => v.to_ne_bytes().to_vec(),
        }
    }
}

/// Element size of the datatypes `ofi bw` can add ones to.
fn elem_size(dt: u32) -> Option<usize> {
    match dt {
        datatype::FI_INT8 | datatype::FI_UINT8 => Some(1),
        datatype::FI_INT16 | datatype::FI_UINT16 => Some(2),
        datatype::FI_INT32 | datatype::FI_UINT32 | datatype::FI_FLOAT => Some(4),
        datatype::FI_INT64 | datatype::FI_UINT64 | datatype::FI_DOUBLE => Some(8),
        _ => None,
    }
}

/// Buffers of `size` bytes for operations in flight, 8-byte aligned.
struct Slots {
    _mem: Vec<u64>,
    at: SlotPtr,
}

/// Where the slots are: every access, the provider's and the tool's, goes
/// through this one raw base, so that handing one slot to the provider
/// never overlaps a reference the tool holds to another.
#[derive(Clone, Copy)]
struct SlotPtr {
    base: *mut u8,
    stride: usize,
    size: usize,
}

impl Slots {
    /// `n` slots of `size` bytes, or a clear error when they cannot be had
    /// (`size` may come from the peer's setup message).
    fn new(n: usize, size: usize) -> Result<Slots, String> {
        let stride = size
            .checked_next_multiple_of(8)
            .ok_or_else(|| format!("size {size} is too large"))?
            .max(8);
        let words = n
            .max(1)
            .checked_mul(stride / 8)
            .ok_or_else(|| format!("{n} buffers of {size} bytes are too large"))?;
        let mut mem: Vec<u64> = data::zeroed(words, "the buffers")?;
        let base = mem.as_mut_ptr().cast::<u8>();
        Ok(Slots {
            _mem: mem,
            at: SlotPtr { base, stride, size },
        })
    }
}

impl SlotPtr {
    /// The address of slot `i` (for the provider).
    fn ptr(self, i: usize) -> *mut u8 {
        self.base.wrapping_add(i * self.stride)
    }
    /// Slot `i`'s bytes.
    ///
    /// # Safety
    /// `i` must be in range, the slots must outlive the slice, no operation
    /// on slot `i` may be in flight and no other reference to it may live.
    unsafe fn bytes<'a>(self, i: usize) -> &'a mut [u8] {
        // SAFETY: the slot lies inside the slots' memory, which outlives the
        // slice; nothing else reads or writes it meanwhile (caller contract).
        unsafe { std::slice::from_raw_parts_mut(self.ptr(i), self.size) }
    }
}

/// How many operations of `size` bytes stay in flight for a window.
fn slots_for(window: usize, size: usize) -> usize {
    window.min(SLOT_BYTES / size.max(1)).max(1)
}

// --- control messages ---------------------------------------------------------

const M_SETUP: u8 = b'S';
const M_START: u8 = b'G';
const M_DONE: u8 = b'D';
const M_END: u8 = b'E';
const R_OK: u8 = 0;
const R_ERR: u8 = 1;

fn put(v: &mut Vec<u8>, x: u64) {
    v.extend_from_slice(&x.to_le_bytes());
}

/// Reads the `i`-th u64 after the kind byte.
fn get(m: &[u8], i: usize) -> Result<u64, String> {
    let at = 1 + 8 * i;
    m.get(at..at + 8)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_le_bytes)
        .ok_or_else(|| "control channel: short message".to_string())
}

fn reply(oob: &mut Oob, r: &Result<Vec<u64>, String>) -> Result<(), String> {
    let mut m = Vec::new();
    match r {
        Ok(vals) => {
            m.push(R_OK);
            for &v in vals {
                put(&mut m, v);
            }
        }
        Err(e) => {
            m.push(R_ERR);
            m.extend_from_slice(e.as_bytes().get(..4000).unwrap_or(e.as_bytes()));
        }
    }
    oob.send(&m)
}

/// [`answer`], driving the endpoint while it waits: injected sends
/// complete at once, and under manual progress their bytes (and, over a
/// connection-on-first-use RDM endpoint, the connection itself) move only
/// when the application calls in, so the server's verdict on them can
/// come only if the client keeps progressing.
fn answer_progressing(c: &Ctx, oob: &mut Oob) -> Result<Vec<u8>, String> {
    let mut watch = Watch::new();
    loop {
        c.ep.progress();
        if oob.readable()? {
            return answer(oob);
        }
        watch.idle(c, oob)?;
        std::thread::yield_now();
    }
}

/// Waits for the server's answer; its error becomes this side's.
fn answer(oob: &mut Oob) -> Result<Vec<u8>, String> {
    let m = oob.recv()?;
    match m.first() {
        Some(&R_OK) => Ok(m),
        Some(&R_ERR) => Err(format!("server: {}", String::from_utf8_lossy(&m[1..]))),
        _ => Err("control channel: bad answer from the server".into()),
    }
}

// --- entry --------------------------------------------------------------------

/// Everything the flags ask for.
struct Plan {
    op: Op,
    atomic: Atomic,
    sizes: Vec<usize>,
    iters: usize,
    window: usize,
    warm: usize,
    verify: bool,
}

fn plan(a: &Args) -> Result<Plan, String> {
    let tagged = match a.get("m").unwrap_or("msg") {
        "msg" => false,
        "tagged" => true,
        m => return Err(format!("unknown transmit mode '{m}' (msg|tagged)")),
    };
    let op = match a.get("o") {
        None if tagged => Op::Tagged,
        None => Op::Send,
        Some(s) => Op::from_name(s)
            .ok_or_else(|| format!("unknown operation '{s}' (send|tagged|write|read|atomic)"))?,
    };
    let atomic = Atomic::parse(a)?;
    let window = data::count(a, "W", 64)?.max(1);
    let sizes = if op == Op::Atomic {
        let elem = atomic.elem();
        let sizes = data::sizes(a, &[elem])?;
        if let Some(s) = sizes.iter().find(|&&s| s == 0 || s % elem != 0) {
            return Err(format!(
                "atomic size {s}: sizes must be whole numbers of {elem}-byte {} elements",
                enum_name(DATATYPE_NAMES, atomic.datatype).unwrap_or("?")
            ));
        }
        sizes
    } else {
        data::sizes(a, &DEFAULT_SIZES)?
    };
    // Each side holds about two buffers of the largest size.
    data::check_memory(&sizes, 2)?;
    let verify = a.has("c");
    if verify && op == Op::Atomic && atomic.op != atomic_op::FI_SUM {
        return Err("-c checks atomics by their sum: use --atomic-op sum".into());
    }
    Ok(Plan {
        op,
        atomic,
        sizes,
        iters: data::iterations(a, "I", 1000)?,
        window,
        warm: data::count(a, "w", window)?,
        verify,
    })
}

/// Runs `ofi bw`; returns the exit code.
pub fn run(argv: &[String]) -> i32 {
    let a = match Args::parse(
        argv,
        "BPpeISmdWswo",
        &["csv", "svg", "atomic-op", "datatype"],
    ) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("ofi bw: {e}\n{USAGE}");
            return 2;
        }
    };
    if a.has("h") || a.has("help") {
        outln!("{USAGE}");
        return 0;
    }
    let p = match plan(&a) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("ofi bw: {e}");
            return 2;
        }
    };
    if a.has("local") {
        return control::run_local("bw", argv);
    }
    let r = control::connect(&a).and_then(|(mut oob, client)| {
        let local = oob.0.local_addr().ok().map(|a| a.ip());
        let want = Want {
            caps: p.op.caps(),
            // Addresses and keys are handled either way; registration of
            // local buffers (FI_MR_LOCAL) is not.
            mr_mode: if p.op.one_sided() {
                mr_mode::FI_MR_VIRT_ADDR | mr_mode::FI_MR_PROV_KEY | mr_mode::FI_MR_ALLOCATED
            } else {
                0
            },
        };
        let (info, ctx) = setup::open(&a, &want, local, &mut oob, client)?;
        data::check_max_msg(&p.sizes, &info)?;
        if client {
            client_session(&a, &p, &info, &ctx, &mut oob)
        } else {
            server_session(&p, &info, &ctx, &mut oob)
        }
    });
    match r {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("ofi bw: {e}");
            1
        }
    }
}

// --- client -------------------------------------------------------------------

/// Runs `n` operations with at most `slots` in flight: `post(slot)` starts
/// one (true if a completion will follow, false if it is already done),
/// `done(slot)` sees each completion.
fn stream(
    c: &Ctx,
    oob: &mut Oob,
    n: usize,
    slots: usize,
    mut post: impl FnMut(usize) -> ofi::Result<bool>,
    mut done: impl FnMut(usize) -> Result<(), String>,
) -> Result<(), String> {
    let mut free: Vec<usize> = (0..slots).rev().collect();
    let mut ents = [CqEntry::default(); 32];
    let (mut posted, mut finished) = (0usize, 0usize);
    let mut watch = Watch::new();
    let mut slept = Duration::ZERO;
    while finished < n {
        while posted < n {
            let Some(&slot) = free.last() else { break };
            match post(slot) {
                Ok(true) => {
                    free.pop();
                    posted += 1;
                }
                Ok(false) => {
                    posted += 1;
                    finished += 1;
                }
                Err(e) if e.is_again() => break,
                Err(e) => return Err(c.post_error("posting an operation", &e)),
            }
        }
        if finished == n {
            break;
        }
        let blocking = c.block && free.len() < slots;
        let r = if blocking {
            c.cq.sread(&mut ents, Some(BLOCK_SLICE))
        } else {
            c.cq.read(&mut ents)
        };
        match r {
            Ok(k) => {
                slept = Duration::ZERO;
                for e in &ents[..k] {
                    let slot = e.op_context.wrapping_sub(SLOT_CTX);
                    if slot >= slots {
                        return Err(format!(
                            "completion with unknown context {:#x}",
                            e.op_context
                        ));
                    }
                    done(slot)?;
                    free.push(slot);
                    finished += 1;
                }
            }
            Err(e) if e.is_again() && !blocking => watch.idle(c, oob)?,
            Err(e) if e.is_again() => {
                watch.look(c, oob)?;
                slept += BLOCK_SLICE;
                if slept >= NO_COMPLETION {
                    return Err(format!("no completion in 30 s (peer {})", c.peer_name));
                }
            }
            Err(e) if e.code() == errno::FI_EAVAIL => return Err(c.cq_error()),
            Err(e) => return Err(format!("fi_cq_read: {e}")),
        }
    }
    Ok(())
}

/// How long a blocking read sleeps before the peer is looked after.
const BLOCK_SLICE: Duration = Duration::from_millis(100);
/// How long a wait for a completion may take before it gives up.
const NO_COMPLETION: Duration = Duration::from_secs(30);

fn client_session(
    a: &Args,
    p: &Plan,
    info: &ofi::Info,
    c: &Ctx,
    oob: &mut Oob,
) -> Result<(), String> {
    let max = p.sizes.iter().copied().max().unwrap_or(0);
    let mut m = vec![M_SETUP, p.op as u8, u8::from(p.verify)];
    put(&mut m, max as u64);
    put(&mut m, p.window as u64);
    put(&mut m, u64::from(p.atomic.op));
    put(&mut m, u64::from(p.atomic.datatype));
    oob.send(&m)?;
    let r = answer(oob)?;
    let (raddr, rkey) = (get(&r, 0)?, get(&r, 1)?);
    if p.op == Op::Atomic {
        let count = p.atomic.elem().max(1);
        let most = p.sizes.iter().copied().max().unwrap_or(0) / count;
        let limit =
            c.ep.query_atomic(p.atomic.datatype, p.atomic.op, FI_FETCH_ATOMIC)
                .map_err(|e| format!("fi_query_atomic({}): {e}", p.atomic.names()))?;
        if most > limit {
            return Err(format!(
                "{most} {} elements exceed the provider's {limit} per atomic",
                p.atomic.names()
            ));
        }
    }

    // The write and send source: the pattern of the size, the same in
    // every operation (operations in flight share it).
    let src = Slots::new(1, max)?;
    // Atomic operands: ones, enough for the largest size.
    let operand: Vec<u8> = match p.op {
        Op::Atomic => (0..max / p.atomic.elem())
            .flat_map(|_| p.atomic.value(1))
            .collect(),
        _ => Vec::new(),
    };
    let mut rows = Vec::new();
    report::print_header(false);
    for &size in &p.sizes {
        let slots = slots_for(p.window, size);
        let total = p.warm + p.iters;
        // SAFETY: nothing is in flight between sizes.
        data::fill(&mut unsafe { src.at.bytes(0) }[..size], size);
        let dst = Slots::new(if p.op.one_sided() { slots } else { 1 }, size)?;
        let d = dst.at;
        let mut m = vec![M_START];
        put(&mut m, size as u64);
        put(&mut m, total as u64);
        oob.send(&m)?;
        answer(oob)?;

        let (ep, peer, txp) = (&c.ep, c.peer, src.at.ptr(0).cast_const());
        let count = size / p.atomic.elem().max(1);
        let inject = c.inject;
        let verify = p.verify;
        let op = p.op;
        let atomic = p.atomic;
        let post = |s: usize| -> ofi::Result<bool> {
            let ctx = SLOT_CTX + s;
            // SAFETY: the source (`src`, `operand`) is not written and the
            // slot not referenced until `stream` has seen every completion;
            // both outlive `stream`. The source holds `max >= size` bytes.
            unsafe {
                match op {
                    Op::Send if size <= inject => ep
                        .inject(std::slice::from_raw_parts(txp, size), peer)
                        .map(|_| false),
                    Op::Tagged if size <= inject => ep
                        .tinject(std::slice::from_raw_parts(txp, size), peer, TAG)
                        .map(|_| false),
                    Op::Send => ep.send(txp, size, peer, ctx).map(|_| true),
                    Op::Tagged => ep.tsend(txp, size, peer, TAG, ctx).map(|_| true),
                    Op::Write => ep.write(txp, size, peer, raddr, rkey, ctx).map(|_| true),
                    Op::Read => ep
                        .read(d.ptr(s), size, peer, raddr, rkey, ctx)
                        .map(|_| true),
                    Op::Atomic => ep
                        .fetch_atomic(
                            operand.as_ptr(),
                            count,
                            d.ptr(s),
                            peer,
                            raddr,
                            rkey,
                            atomic.datatype,
                            atomic.op,
                            ctx,
                        )
                        .map(|_| true),
                }
            }
        };
        let mut first_bad: Option<String> = None;
        let mut done = |s: usize| -> Result<(), String> {
            if verify && op == Op::Read {
                // SAFETY: the read into slot `s` has completed, the slot is
                // reposted only after this returns, and `dst` outlives it.
                let b = unsafe { d.bytes(s) };
                if let Err(e) = data::check(b, size) {
                    first_bad.get_or_insert(format!("read of {size} bytes: {e}"));
                }
                b.fill(0);
            }
            Ok(())
        };
        stream(c, oob, p.warm, slots, post, &mut done)?;
        let start = Instant::now();
        stream(c, oob, p.iters, slots, post, &mut done)?;
        let mut secs = start.elapsed().as_secs_f64();
        oob.send(&[M_DONE])?;
        let verdict = answer_progressing(c, oob);
        if !op.one_sided() {
            // Sends count when the receiver has them all.
            secs = start.elapsed().as_secs_f64();
        }
        verdict?;
        if let Some(e) = first_bad {
            return Err(e);
        }
        let row = Row {
            size,
            iters: p.iters,
            xfers: p.iters as f64,
            secs,
            lat: None,
        };
        report::print_row(&row);
        rows.push(row);
    }
    oob.send(&[M_END])?;
    if p.op == Op::Atomic && p.window == 1 {
        for r in &rows {
            outln!(
                "one-way latency (half the round trip of one {} B {} fetch atomic, -W 1): {:.3} usec",
                r.size,
                p.atomic.names(),
                r.usec() / 2.0
            );
        }
    }
    if let Some(f) = a.get("csv") {
        plot::write_csv(f, &rows).map_err(|e| format!("{f}: {e}"))?;
    }
    if let Some(f) = a.get("svg") {
        plot::write_svg(f, &rows, "bw", info.provider()).map_err(|e| format!("{f}: {e}"))?;
    }
    Ok(())
}

// --- server -------------------------------------------------------------------

/// The server's registered region and how the client addresses it.
struct Region {
    /// Declared first: the registration goes before the memory.
    mr: MemoryRegion,
    mem: Slots,
    len: usize,
    addr: u64,
}

fn register(info: &ofi::Info, c: &Ctx, len: usize) -> Result<Region, String> {
    let mem = Slots::new(1, len)?;
    let attr = MrAttr {
        iov: vec![(mem.at.ptr(0) as usize, len.max(1))],
        access: FI_REMOTE_READ | FI_REMOTE_WRITE,
        requested_key: KEY,
        offset: 0,
    };
    // SAFETY: the memory lives in the returned Region next to its
    // registration, which is dropped first, and is never reallocated.
    let mr = unsafe { c.domain.mr_reg(&attr) }.map_err(|e| format!("fi_mr_reg: {e}"))?;
    let virt = info.domain_attr.mr_mode & mr_mode::FI_MR_VIRT_ADDR != 0;
    let addr = if virt { mem.at.ptr(0) as u64 } else { 0 };
    Ok(Region { mr, mem, len, addr })
}

fn server_session(p: &Plan, info: &ofi::Info, c: &Ctx, oob: &mut Oob) -> Result<(), String> {
    let m = oob.recv()?;
    if m.first() != Some(&M_SETUP) || m.len() < 3 {
        return Err("control channel: expected the client's setup".into());
    }
    let op = Op::ALL
        .into_iter()
        .find(|o| *o as u8 == m[1])
        .ok_or("control channel: unknown operation")?;
    let verify = m[2] != 0;
    let sub = &m[2..];
    let (max, window) = (get(sub, 0)? as usize, get(sub, 1)? as usize);
    let atomic = Atomic {
        op: get(sub, 2)? as u32,
        datatype: get(sub, 3)? as u32,
    };
    if op != p.op {
        let e = format!(
            "the server runs -o {}, the client -o {}",
            p.op.name(),
            op.name()
        );
        reply(oob, &Err(e.clone()))?;
        return Err(e);
    }
    let mut region = None;
    if op.one_sided() {
        let r = register(info, c, max);
        reply(
            oob,
            &r.as_ref()
                .map(|r| vec![r.addr, r.mr.key()])
                .map_err(Clone::clone),
        )?;
        region = Some(r?);
    } else {
        reply(oob, &Ok(vec![0, 0]))?;
    }
    loop {
        let m = oob.recv()?;
        match m.first() {
            Some(&M_START) => {
                let (size, total) = (get(&m, 0)? as usize, get(&m, 1)? as usize);
                let r = match region.as_ref() {
                    Some(reg) => serve_one_sided(op, atomic, verify, c, reg, size, total, oob),
                    None => serve_sends(op, verify, c, window, size, total, oob),
                };
                r?;
            }
            Some(&M_END) => return Ok(()),
            _ => return Err("control channel: unexpected message".into()),
        }
    }
}

/// Receives `total` messages of `size` bytes into a window of reposted
/// receives; answers `Done` with the verdict on their contents.
fn serve_sends(
    op: Op,
    verify: bool,
    c: &Ctx,
    window: usize,
    size: usize,
    total: usize,
    oob: &mut Oob,
) -> Result<(), String> {
    let slots = slots_for(window, size).min(total.max(1));
    let rx = Slots::new(slots, size)?;
    let d = rx.at;
    let post = |s: usize| -> Result<(), String> {
        loop {
            // SAFETY: slot `s` is not referenced until its completion has
            // been read, and `rx` outlives every receive (all complete
            // before this function returns).
            let r = unsafe {
                if op == Op::Tagged {
                    c.ep.trecv(d.ptr(s), size, FI_ADDR_UNSPEC, TAG, 0, SLOT_CTX + s)
                } else {
                    c.ep.recv(d.ptr(s), size, FI_ADDR_UNSPEC, SLOT_CTX + s)
                }
            };
            match r {
                Err(e) if e.is_again() => c.ep.progress(),
                r => return r.map_err(|e| c.post_error("fi_recv", &e)),
            }
        }
    };
    let mut posted = 0;
    while posted < slots.min(total) {
        post(posted)?;
        posted += 1;
    }
    reply(oob, &Ok(vec![]))?;
    let mut ents = [CqEntry::default(); 32];
    let mut received = 0;
    let mut first_bad: Option<String> = None;
    let mut watch = Watch::new();
    let mut slept = Duration::ZERO;
    while received < total {
        let r = if c.block {
            c.cq.sread(&mut ents, Some(BLOCK_SLICE))
        } else {
            c.cq.read(&mut ents)
        };
        let k = match r {
            Ok(k) => {
                slept = Duration::ZERO;
                k
            }
            Err(e) if e.is_again() && !c.block => {
                watch.idle(c, oob)?;
                continue;
            }
            Err(e) if e.is_again() => {
                watch.look(c, oob)?;
                slept += BLOCK_SLICE;
                if slept >= NO_COMPLETION {
                    return Err(format!("no message in 30 s (peer {})", c.peer_name));
                }
                continue;
            }
            Err(e) if e.code() == errno::FI_EAVAIL => return Err(c.cq_error()),
            Err(e) => return Err(format!("fi_cq_read: {e}")),
        };
        for e in &ents[..k] {
            let s = e.op_context.wrapping_sub(SLOT_CTX);
            if s >= slots {
                return Err(format!(
                    "completion with unknown context {:#x}",
                    e.op_context
                ));
            }
            received += 1;
            if verify {
                // SAFETY: the receive into slot `s` has completed, is
                // reposted only below, and `rx` outlives the slice.
                let b = unsafe { d.bytes(s) };
                if let Err(e) = data::check(b, size) {
                    first_bad.get_or_insert(format!("message {received} of {size} bytes: {e}"));
                }
                b.fill(0);
            }
            if posted < total {
                post(s)?;
                posted += 1;
            }
        }
    }
    let m = oob.recv()?;
    if m.first() != Some(&M_DONE) {
        return Err("control channel: expected done".into());
    }
    let verdict = first_bad.map_or(Ok(vec![]), Err);
    reply(oob, &verdict)?;
    verdict.map(|_| ())
}

/// Drives progress while the client streams one-sided operations at the
/// region, until `Done`; then checks that the data landed (waiting up to
/// LAND_WAIT for it while still driving progress) and answers.
#[allow(clippy::too_many_arguments)]
fn serve_one_sided(
    op: Op,
    atomic: Atomic,
    verify: bool,
    c: &Ctx,
    reg: &Region,
    size: usize,
    total: usize,
    oob: &mut Oob,
) -> Result<(), String> {
    if size > reg.len {
        let e = format!("size {size} exceeds the {} bytes registered", reg.len);
        reply(oob, &Err(e.clone()))?;
        return Err(e);
    }
    {
        // SAFETY: nothing is in flight between sizes, and `reg` outlives
        // the slice.
        let b = unsafe { reg.mem.at.bytes(0) };
        match op {
            Op::Read => data::fill(&mut b[..size], size),
            _ => b[..size].fill(0),
        }
    }
    reply(oob, &Ok(vec![]))?;
    let mut ents = [CqEntry::default(); 8];
    let poll = |ents: &mut [CqEntry]| -> Result<(), String> {
        match c.cq.read(ents) {
            // The target sees no completions of its own for plain RMA and
            // atomics; anything else is ignored.
            Ok(_) => Ok(()),
            Err(e) if e.is_again() => Ok(()),
            Err(e) if e.code() == errno::FI_EAVAIL => Err(c.cq_error()),
            Err(e) => Err(format!("fi_cq_read: {e}")),
        }
    };
    loop {
        for _ in 0..1024 {
            poll(&mut ents)?;
        }
        c.check_peer()?;
        if oob
            .readable()
            .map_err(|e| format!("peer {}: {e}", c.peer_name))?
        {
            break;
        }
    }
    let m = oob.recv()?;
    if m.first() != Some(&M_DONE) {
        return Err("control channel: expected done".into());
    }
    let want: Option<Vec<u8>> = match op {
        _ if !verify => None,
        Op::Write => {
            let mut w = vec![0u8; size];
            data::fill(&mut w, size);
            Some(w)
        }
        Op::Atomic => Some(
            (0..size / atomic.elem().max(1))
                .flat_map(|_| atomic.value(total as u64))
                .collect(),
        ),
        _ => None,
    };
    let mut verdict = Ok(vec![]);
    if let Some(want) = want {
        let deadline = Instant::now() + LAND_WAIT;
        loop {
            // SAFETY: the client has seen every completion; a provider that
            // completes before the data lands only writes the same bytes;
            // `reg` outlives the slice.
            let b = unsafe { reg.mem.at.bytes(0) };
            if b[..size] == want[..] {
                break;
            }
            if Instant::now() >= deadline {
                verdict = Err(match op {
                    Op::Atomic => format!(
                        "after {total} {} of 1, the target holds {:?}, not {total}",
                        atomic.names(),
                        &b[..atomic.elem().min(size)]
                    ),
                    _ => match data::check(&b[..size], size) {
                        Err(e) => format!("written region: {e}"),
                        Ok(()) => "written region differs".into(),
                    },
                });
                break;
            }
            for _ in 0..64 {
                poll(&mut ents)?;
            }
        }
    }
    reply(oob, &verdict)?;
    verdict.map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Args {
        let v: Vec<String> = v.iter().map(|s| s.to_string()).collect();
        Args::parse(&v, "BPpeISmdWswo", &["atomic-op", "datatype"]).unwrap()
    }

    #[test]
    fn plans_follow_the_flags() {
        let p = plan(&args(&[])).unwrap();
        assert_eq!((p.op, p.window, p.warm, p.iters), (Op::Send, 64, 64, 1000));
        assert_eq!(p.sizes, DEFAULT_SIZES);
        assert_eq!(plan(&args(&["-m", "tagged"])).unwrap().op, Op::Tagged);
        let p = plan(&args(&["-o", "atomic", "-W", "1"])).unwrap();
        assert_eq!(
            (p.sizes.as_slice(), p.window, p.atomic),
            (&[8][..], 1, Atomic::DEFAULT)
        );
        let p = plan(&args(&[
            "-o",
            "atomic",
            "--datatype",
            "uint32",
            "--atomic-op",
            "FI_MAX",
        ]))
        .unwrap();
        assert_eq!(p.sizes, [4]);
        assert_eq!(p.atomic.op, atomic_op::FI_MAX);
        assert!(plan(&args(&["-o", "atomic", "-S", "12"])).is_err());
        assert!(plan(&args(&["-o", "atomic", "--atomic-op", "cswap"])).is_err());
        assert!(plan(&args(&["-o", "atomic", "--datatype", "int128"])).is_err());
        assert!(plan(&args(&["-o", "atomic", "--atomic-op", "max", "-c"])).is_err());
        assert!(plan(&args(&["-o", "put"])).is_err());
    }

    #[test]
    fn windows_shrink_only_for_huge_sizes() {
        assert_eq!(slots_for(64, 1 << 20), 64);
        assert_eq!(slots_for(64, 6 << 20), 42);
        assert_eq!(slots_for(0, 8), 1);
        assert_eq!(slots_for(64, 1 << 30), 1);
    }

    #[test]
    fn atomic_values_are_native_elements() {
        let a = Atomic {
            op: atomic_op::FI_SUM,
            datatype: datatype::FI_UINT16,
        };
        assert_eq!(a.value(0x1_0003), 3u16.to_ne_bytes());
        let d = Atomic {
            op: atomic_op::FI_SUM,
            datatype: datatype::FI_DOUBLE,
        };
        assert_eq!(d.value(5), 5f64.to_ne_bytes());
    }

    #[test]
    fn control_words_are_read_back() {
        let mut m = vec![M_START];
        put(&mut m, 7);
        put(&mut m, 9);
        assert_eq!((get(&m, 0), get(&m, 1)), (Ok(7), Ok(9)));
        assert!(get(&m, 2).is_err());
    }
}
