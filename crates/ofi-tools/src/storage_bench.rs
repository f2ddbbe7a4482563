//! `ofi storage bench`: fio-like load on a volume served by `ofi storage
//! target`, through the initiator's Rust API with no NBD in the way: a
//! [`Volume`] and its driver thread, or with `--inline` a session stepped
//! on the bench's own thread ([`Volume::inline`]); `--iodepth`
//! requests kept in flight, completion latencies in a log-linear
//! histogram, and with `--verify` every block written carrying its offset
//! and a seed, checked when read back.
//!
//! The verify pattern, per 512-byte sector at volume offset `off`: the 8
//! bytes `ofibench`, `off` and the seed (little-endian u64s), then 61
//! words of splitmix64 seeded with `off ^ seed.rotate_left(32)`. It
//! depends on the offset alone, so a block rewritten holds the same bytes
//! and any aligned read can be checked, whatever its size.

use crate::args::Args;
use crate::storage::{net, port, secs, size, target_addr};
use ofi_storage::{Completion, Inline, Volume, VolumeOptions};
use std::fmt::Write as _;
use std::io::{IsTerminal, Write as _};
use std::time::{Duration, Instant};

pub const USAGE: &str =
    "  ofi storage bench [-p PROVIDER] [-e rdm|msg] [-P PORT] [--rw MODE] [--bs N]
                    [--iodepth N] [--runtime SECS] [--size N] [--rwmixread PCT]
                    [--verify] [--seed N] [--inline] [--json] [--progress]
                    TARGET_ADDR
      fio-like load on the target's volume through the initiator API (no
      NBD): MODE read, write, randread, randwrite, rw or randrw (default
      randread; mixed modes read PCT% of the time, default 50), blocks of N
      bytes (default 4K, a multiple of 512), N requests in flight (default
      16), over the first N bytes of the volume (default all of it). With
      --runtime it runs that long, else it does one pass over the span
      (each block once, in random order for rand modes). --verify writes
      a pattern holding each sector's offset and the seed (default 1) and
      reads every block written back at the end; reads check it (a
      mismatch is an error naming the offset). Requests go through a
      Volume and its driver thread (--inline: the session is stepped on
      the bench's own thread). Prints bandwidth, IOPS and
      completion latency percentiles, or one JSON record with --json; a
      progress line on stderr when it is a terminal (or with --progress).";

/// Sector of the verify pattern.
const SECTOR: usize = 512;
const MAGIC: &[u8; 8] = b"ofibench";

/// The workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Read,
    Write,
    RandRead,
    RandWrite,
    Rw,
    RandRw,
}

impl Mode {
    fn parse(s: &str) -> Result<Mode, String> {
        Ok(match s {
            "read" => Mode::Read,
            "write" => Mode::Write,
            "randread" => Mode::RandRead,
            "randwrite" => Mode::RandWrite,
            "rw" | "readwrite" => Mode::Rw,
            "randrw" => Mode::RandRw,
            _ => {
                return Err(format!(
                    "bad --rw '{s}' (read, write, randread, randwrite, rw or randrw)"
                ))
            }
        })
    }
    fn name(self) -> &'static str {
        match self {
            Mode::Read => "read",
            Mode::Write => "write",
            Mode::RandRead => "randread",
            Mode::RandWrite => "randwrite",
            Mode::Rw => "rw",
            Mode::RandRw => "randrw",
        }
    }
    fn random(self) -> bool {
        matches!(self, Mode::RandRead | Mode::RandWrite | Mode::RandRw)
    }
    /// Percentage of reads (`mix` for the mixed modes).
    fn read_pct(self, mix: u32) -> u32 {
        match self {
            Mode::Read | Mode::RandRead => 100,
            Mode::Write | Mode::RandWrite => 0,
            Mode::Rw | Mode::RandRw => mix,
        }
    }
}

/// What the command line asks for.
#[derive(Debug)]
struct Opts {
    target: String,
    vol: VolumeOptions,
    provider: String,
    ep: String,
    mode: Mode,
    bs: u64,
    iodepth: u32,
    runtime: Option<Duration>,
    size: Option<u64>,
    mix: u32,
    verify: bool,
    seed: u64,
    inline: bool,
    json: bool,
    progress: bool,
}

const SHORT_VAL: &str = "peP";
const LONG_VAL: &[&str] = &[
    "rw",
    "bs",
    "iodepth",
    "runtime",
    "size",
    "rwmixread",
    "seed",
];
const FLAGS: &[&str] = &["verify", "inline", "json", "progress", "h", "help"];

fn parse(argv: &[String]) -> Result<Option<Opts>, String> {
    let a = Args::parse(argv, SHORT_VAL, LONG_VAL)?;
    if a.has("h") || a.has("help") {
        return Ok(None);
    }
    for k in a.opts.keys() {
        let known = SHORT_VAL.contains(k.as_str()) && k.len() == 1
            || LONG_VAL.contains(&k.as_str())
            || FLAGS.contains(&k.as_str());
        if !known {
            let dash = if k.len() == 1 { "-" } else { "--" };
            return Err(format!("bench: unknown option {dash}{k}"));
        }
    }
    let [target] = a.pos.as_slice() else {
        return Err("bench: one TARGET_ADDR expected".into());
    };
    let target = target_addr(target, port(&a, "P")?);
    let mode = Mode::parse(a.get("rw").unwrap_or("randread"))?;
    let bs = a.get("bs").map(size).unwrap_or(Ok(4096))?;
    if !bs.is_multiple_of(SECTOR as u64) || bs > u32::MAX as u64 {
        return Err(format!(
            "bad --bs '{}' (a multiple of 512 below 4G)",
            a.get("bs").unwrap_or("")
        ));
    }
    let iodepth = match a.get("iodepth") {
        None => 16,
        Some(s) => s
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=4096).contains(n))
            .ok_or_else(|| format!("bad --iodepth '{s}' (1 to 4096)"))?,
    };
    let mix = match a.get("rwmixread") {
        None => 50,
        Some(s) => s
            .parse::<u32>()
            .ok()
            .filter(|n| *n <= 100)
            .ok_or_else(|| format!("bad --rwmixread '{s}' (a percentage, 0 to 100)"))?,
    };
    let seed = match a.get("seed") {
        None => 1,
        Some(s) => s
            .parse::<u64>()
            .map_err(|_| format!("bad --seed '{s}' (a number)"))?,
    };
    let runtime = a
        .get("runtime")
        .map(|s| secs(s).map_err(|e| format!("--runtime: {e}")))
        .transpose()?;
    let size = a
        .get("size")
        .map(|s| size(s).map_err(|e| format!("--size: {e}")))
        .transpose()?;
    if let Some(s) = size {
        if s < bs {
            return Err(format!("--size {s} is smaller than one block (--bs {bs})"));
        }
    }
    let net = net(&a)?;
    let vol = VolumeOptions {
        queue_depth: iodepth,
        max_io: (bs as u32).max(VolumeOptions::default().max_io),
        net: net.clone(),
        ..VolumeOptions::default()
    };
    Ok(Some(Opts {
        target,
        provider: net.provider.clone().unwrap_or_else(|| "default".into()),
        ep: a.get("e").unwrap_or("rdm").to_string(),
        vol,
        mode,
        bs,
        iodepth,
        runtime,
        size,
        mix,
        verify: a.has("verify"),
        seed,
        inline: a.has("inline"),
        json: a.has("json"),
        progress: a.has("progress") || std::io::stderr().is_terminal(),
    }))
}

/// Entry point of `ofi storage bench`.
pub fn bench(argv: &[String]) -> Result<(), String> {
    let Some(o) = parse(argv)? else {
        outln!("Usage:\n{USAGE}");
        return Ok(());
    };
    let at = |e: String| format!("{}: {e}", o.target);
    if !o.inline {
        let vol = Volume::open(&o.target, &o.vol).map_err(at)?;
        let info = Info {
            size: vol.size(),
            block_size: vol.block_size(),
            max_io: vol.max_io(),
            queue_depth: vol.queue_depth(),
            read_only: vol.read_only(),
        };
        let mut dev = &vol;
        body(&o, &info, &mut dev)
    } else {
        Volume::inline(&o.target, &o.vol, |v| {
            let info = Info {
                size: v.size(),
                block_size: v.block_size(),
                max_io: v.max_io(),
                queue_depth: v.queue_depth(),
                read_only: v.read_only(),
            };
            body(&o, &info, v)
        })
        .map_err(at)?
    }
}

/// What the target granted.
struct Info {
    size: u64,
    block_size: u32,
    max_io: u32,
    queue_depth: u32,
    read_only: bool,
}

/// Where requests go: a [`Volume`] (driver thread) or an [`Inline`]
/// session.
trait Dev {
    fn read_into(&mut self, off: u64, buf: Vec<u8>, user: u64);
    fn write(&mut self, off: u64, buf: Vec<u8>, user: u64);
    /// Adds completions to `out`, waiting up to `timeout` for the first.
    fn wait(&mut self, timeout: Duration, out: &mut Vec<Completion>);
}

impl Dev for &Volume {
    fn read_into(&mut self, off: u64, buf: Vec<u8>, user: u64) {
        self.submit_read_into(off, buf, user);
    }
    fn write(&mut self, off: u64, buf: Vec<u8>, user: u64) {
        self.submit_write(off, buf, false, user);
    }
    fn wait(&mut self, timeout: Duration, out: &mut Vec<Completion>) {
        if let Some(c) = self.next(timeout) {
            out.push(c);
            while let Some(c) = self.next(Duration::ZERO) {
                out.push(c);
            }
        }
    }
}

impl Dev for Inline<'_> {
    fn read_into(&mut self, off: u64, buf: Vec<u8>, user: u64) {
        self.submit_read_into(off, buf, user);
    }
    fn write(&mut self, off: u64, buf: Vec<u8>, user: u64) {
        self.submit_write(off, buf, false, user);
    }
    fn wait(&mut self, timeout: Duration, out: &mut Vec<Completion>) {
        self.poll(timeout, out);
    }
}

/// The run on an open volume.
fn body(o: &Opts, vol: &Info, dev: &mut dyn Dev) -> Result<(), String> {
    let span = o.size.unwrap_or(vol.size);
    if span > vol.size {
        return Err(format!(
            "--size {span} is larger than the volume ({} bytes)",
            vol.size
        ));
    }
    if !o.bs.is_multiple_of(vol.block_size as u64) || o.bs > vol.max_io as u64 {
        return Err(format!(
            "--bs {} does not fit the volume (a multiple of its block size {}, at most {})",
            o.bs, vol.block_size, vol.max_io
        ));
    }
    let blocks = span / o.bs;
    if blocks == 0 {
        return Err(format!(
            "--bs {} is larger than the span ({span} bytes)",
            o.bs
        ));
    }
    let writes = o.mode.read_pct(o.mix) < 100;
    if writes && vol.read_only {
        return Err(format!("--rw {}: the volume is read-only", o.mode.name()));
    }
    if o.verify && writes && blocks > 1 << 32 {
        return Err(format!(
            "--verify keeps a bit per block written: {blocks} blocks is too many (a larger --bs or smaller --size)"
        ));
    }
    crate::signals::install();
    let mut r = Runner::new(o, blocks);
    let mut gen = Gen::new(o, blocks);
    let started = Instant::now();
    r.run(dev, &mut gen, started)?;
    let elapsed = r.last.duration_since(started).max(Duration::from_micros(1));
    // Every block written comes back and is checked.
    let mut checked_after = 0;
    if o.verify && writes && !crate::signals::stopped() {
        let mut back = Gen::readback(r.written.clone(), blocks);
        let mut v = Runner::new(o, blocks);
        v.quiet = true;
        v.check_all = true;
        v.written = Vec::new();
        v.run(dev, &mut back, Instant::now())?;
        checked_after = v.checked;
    }
    let verified = r.checked + checked_after;
    let stopped = crate::signals::stopped();
    if o.json {
        outln!(
            "{}",
            json(o, vol, span, elapsed, &r.stats, o.verify, verified)
        );
    } else {
        human(o, vol, span, elapsed, &r.stats, o.verify, verified);
    }
    if stopped {
        return Err("stopped by a signal".into());
    }
    Ok(())
}

/// Read or write, as index into per-direction statistics.
const READ: usize = 0;
const WRITE: usize = 1;

/// What the workload asks next.
struct Gen {
    blocks: u64,
    random: bool,
    read_pct: u32,
    one_pass: bool,
    issued: u64,
    seq: u64,
    rng: u64,
    /// One pass in random order: a full-period LCG over `mask + 1`.
    lcg: u64,
    lcg_c: u64,
    mask: u64,
    /// Read back the set bits of this bitmap, in order.
    readback: Option<Vec<u64>>,
}

impl Gen {
    fn new(o: &Opts, blocks: u64) -> Gen {
        let mask = blocks.next_power_of_two() - 1;
        Gen {
            blocks,
            random: o.mode.random(),
            read_pct: o.mode.read_pct(o.mix),
            one_pass: o.runtime.is_none(),
            issued: 0,
            seq: 0,
            rng: splitmix(o.seed ^ 0x6f66_6962_656e_6368) | 1,
            lcg: splitmix(o.seed) & mask,
            lcg_c: splitmix(o.seed.wrapping_add(1)) | 1,
            mask,
            readback: None,
        }
    }
    fn readback(bits: Vec<u64>, blocks: u64) -> Gen {
        Gen {
            blocks,
            random: false,
            read_pct: 100,
            one_pass: true,
            issued: 0,
            seq: 0,
            rng: 1,
            lcg: 0,
            lcg_c: 1,
            mask: 0,
            readback: Some(bits),
        }
    }
    fn rand(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        x
    }
    /// The next request's direction and block, None when done.
    fn next(&mut self) -> Option<(usize, u64)> {
        if let Some(bits) = &self.readback {
            while self.seq < self.blocks {
                let b = self.seq;
                self.seq += 1;
                if bits[(b / 64) as usize] & (1 << (b % 64)) != 0 {
                    return Some((READ, b));
                }
            }
            return None;
        }
        if self.one_pass && self.issued >= self.blocks {
            return None;
        }
        let block = if !self.random {
            let b = self.seq;
            self.seq = (self.seq + 1) % self.blocks;
            b
        } else if self.one_pass {
            // Each value below mask + 1 once per period; those past the
            // span are skipped (fewer than half).
            loop {
                let b = self.lcg;
                self.lcg = self
                    .lcg
                    .wrapping_mul(0x5851_f42d_4c95_7f2d)
                    .wrapping_add(self.lcg_c)
                    & self.mask;
                if b < self.blocks {
                    break b;
                }
            }
        } else {
            self.rand() % self.blocks
        };
        self.issued += 1;
        let dir = match self.read_pct {
            100 => READ,
            0 => WRITE,
            p => {
                if (self.rand() % 100) < p as u64 {
                    READ
                } else {
                    WRITE
                }
            }
        };
        Some((dir, block))
    }
}

/// Per-direction results.
#[derive(Clone, Default)]
struct Stats {
    ios: u64,
    bytes: u64,
    hist: Hist,
}

/// A request in flight.
struct Slot {
    dir: usize,
    block: u64,
    start: Instant,
    /// Check the data read against the pattern.
    check: bool,
}

struct Runner {
    bs: u64,
    iodepth: usize,
    runtime: Option<Duration>,
    verify: bool,
    seed: u64,
    /// Reads only: every block read holds the pattern.
    check_all: bool,
    slots: Vec<Option<Slot>>,
    free: Vec<u64>,
    bufs: Vec<Vec<u8>>,
    stats: [Stats; 2],
    /// Blocks written (verify on writes).
    written: Vec<u64>,
    checked: u64,
    last: Instant,
    progress: bool,
    quiet: bool,
}

impl Runner {
    fn new(o: &Opts, blocks: u64) -> Runner {
        let writes = o.mode.read_pct(o.mix) < 100;
        let n = o.iodepth as usize;
        // Buffers of any content (random bytes when not verifying: no
        // store or link below can shrink them).
        let bufs = (0..n)
            .map(|i| {
                let mut b = vec![0u8; o.bs as usize];
                let mut x = splitmix(o.seed ^ i as u64) | 1;
                for w in b.chunks_exact_mut(8) {
                    x = splitmix(x);
                    w.copy_from_slice(&x.to_le_bytes());
                }
                b
            })
            .collect();
        Runner {
            bs: o.bs,
            iodepth: n,
            runtime: o.runtime,
            verify: o.verify,
            seed: o.seed,
            check_all: o.verify && !writes,
            slots: (0..n).map(|_| None).collect(),
            free: (0..n as u64).rev().collect(),
            bufs,
            stats: Default::default(),
            written: if o.verify && writes {
                vec![0; blocks.div_ceil(64) as usize]
            } else {
                Vec::new()
            },
            checked: 0,
            last: Instant::now(),
            progress: o.progress,
            quiet: false,
        }
    }

    fn was_written(&self, block: u64) -> bool {
        self.written
            .get((block / 64) as usize)
            .is_some_and(|w| w & (1 << (block % 64)) != 0)
    }

    /// Submits until `iodepth` requests are in flight or the workload is
    /// over.
    fn fill(&mut self, dev: &mut dyn Dev, gen: &mut Gen, open: bool) {
        if !open {
            return;
        }
        loop {
            let Some(&tag) = self.free.last() else {
                return;
            };
            let Some((dir, block)) = gen.next() else {
                return;
            };
            self.free.pop();
            let off = block * self.bs;
            let mut buf = self.bufs.pop().unwrap_or_default();
            buf.resize(self.bs as usize, 0);
            let check = self.check_all || (self.verify && dir == READ && self.was_written(block));
            if dir == WRITE && self.verify {
                fill(&mut buf, off, self.seed);
            }
            self.slots[tag as usize] = Some(Slot {
                dir,
                block,
                start: Instant::now(),
                check,
            });
            if dir == READ {
                dev.read_into(off, buf, tag);
            } else {
                dev.write(off, buf, tag);
            }
        }
    }

    fn complete(&mut self, c: Completion, now: Instant) -> Result<(), String> {
        let slot = self
            .slots
            .get_mut(c.user as usize)
            .and_then(Option::take)
            .ok_or_else(|| format!("a completion for an unknown request ({})", c.user))?;
        self.free.push(c.user);
        let off = slot.block * self.bs;
        let what = if slot.dir == READ { "read" } else { "write" };
        let buf = c
            .result
            .map_err(|s| format!("{what} of {} bytes at offset {off} failed: {s}", self.bs))?;
        if slot.check {
            check(&buf, off, self.seed)?;
            self.checked += 1;
        }
        if slot.dir == WRITE && !self.written.is_empty() {
            self.written[(slot.block / 64) as usize] |= 1 << (slot.block % 64);
        }
        let st = &mut self.stats[slot.dir];
        st.ios += 1;
        st.bytes += self.bs;
        st.hist
            .record(now.duration_since(slot.start).as_nanos() as u64);
        self.bufs.push(buf);
        Ok(())
    }

    /// Runs the workload from `gen` to its end (or the runtime's).
    fn run(&mut self, dev: &mut dyn Dev, gen: &mut Gen, started: Instant) -> Result<(), String> {
        let deadline = self.runtime.map(|r| started + r);
        let wait = self.vol_timeout();
        let show = self.progress && !self.quiet;
        let mut tick = (started, [0u64; 2], started + Duration::from_secs(1));
        let mut shown = false;
        let mut open = true;
        let mut done = Vec::with_capacity(self.iodepth);
        self.fill(dev, gen, open);
        while self.free.len() < self.iodepth {
            dev.wait(wait, &mut done);
            if done.is_empty() {
                return Err(format!("no completion within {} s", wait.as_secs()));
            }
            let now = Instant::now();
            for c in done.drain(..) {
                self.complete(c, now)?;
            }
            self.last = now;
            if deadline.is_some_and(|d| now >= d) || crate::signals::stopped() {
                open = false;
            }
            self.fill(dev, gen, open);
            if show && now >= tick.2 {
                let ios = [self.stats[0].ios, self.stats[1].ios];
                let dt = now.duration_since(tick.0).as_secs_f64();
                progress_line(self, started, now, deadline, &ios, &tick.1, dt);
                shown = true;
                tick = (now, ios, now + Duration::from_secs(1));
            }
        }
        if shown && std::io::stderr().is_terminal() {
            eprintln!();
        }
        Ok(())
    }

    fn vol_timeout(&self) -> Duration {
        VolumeOptions::default().timeout + Duration::from_secs(5)
    }
}

fn progress_line(
    r: &Runner,
    started: Instant,
    now: Instant,
    deadline: Option<Instant>,
    ios: &[u64; 2],
    before: &[u64; 2],
    dt: f64,
) {
    let mut s = String::new();
    let el = now.duration_since(started).as_secs_f64();
    match deadline {
        Some(d) => {
            let total = d.duration_since(started).as_secs_f64();
            let _ = write!(s, "[{:>3.0}%]", (el / total * 100.0).min(100.0));
        }
        None => {
            let _ = write!(s, "[{el:.0}s]");
        }
    }
    for (d, name) in [(READ, "r"), (WRITE, "w")] {
        let n = (ios[d] - before[d]) as f64 / dt;
        let _ = write!(
            s,
            "[{name}={:.1}MiB/s {} IOPS]",
            n * r.bs as f64 / (1 << 20) as f64,
            count(n)
        );
    }
    let end = if std::io::stderr().is_terminal() {
        "\r"
    } else {
        "\n"
    };
    let mut e = std::io::stderr().lock();
    let _ = write!(e, "bench: {s}    {end}");
    let _ = e.flush();
}

/// 1234 -> "1234", 61532 -> "61.5k", 1.2e6 -> "1.20M" (as fio does).
fn count(n: f64) -> String {
    if n >= 1e6 {
        format!("{:.2}M", n / 1e6)
    } else if n >= 1e4 {
        format!("{:.1}k", n / 1e3)
    } else {
        format!("{n:.0}")
    }
}

fn human(
    o: &Opts,
    vol: &Info,
    span: u64,
    elapsed: Duration,
    stats: &[Stats; 2],
    verify: bool,
    verified: u64,
) {
    outln!(
        "ofi storage bench: rw={} bs={} iodepth={} (granted {}) span={} provider={} ep={} target={} api={}",
        o.mode.name(),
        o.bs,
        o.iodepth,
        vol.queue_depth,
        span,
        o.provider,
        o.ep,
        o.target,
        api(o)
    );
    let secs = elapsed.as_secs_f64();
    for (d, name) in [(READ, "read"), (WRITE, "write")] {
        let st = &stats[d];
        if st.ios == 0 {
            continue;
        }
        let bw = st.bytes as f64 / secs;
        outln!(
            "  {name}: IOPS={}, BW={:.1}MiB/s ({:.1}MB/s)({:.1}MiB/{}msec)",
            count(st.ios as f64 / secs),
            bw / (1 << 20) as f64,
            bw / 1e6,
            st.bytes as f64 / (1 << 20) as f64,
            elapsed.as_millis()
        );
        let h = &st.hist;
        let us = |ns: u64| ns as f64 / 1e3;
        outln!(
            "    clat (usec): min={:.1}, avg={:.1}, max={:.1}, p50={:.1}, p99={:.1}, p99.9={:.1}",
            us(h.min()),
            h.mean() / 1e3,
            us(h.max),
            us(h.pct(50.0)),
            us(h.pct(99.0)),
            us(h.pct(99.9))
        );
    }
    if verify {
        outln!("  verify: {verified} blocks checked, all hold their pattern");
    }
}

fn json(
    o: &Opts,
    vol: &Info,
    span: u64,
    elapsed: Duration,
    stats: &[Stats; 2],
    verify: bool,
    verified: u64,
) -> String {
    let secs = elapsed.as_secs_f64();
    let mut s = String::new();
    let _ = write!(
        s,
        "{{\"rw\":\"{}\",\"bs\":{},\"iodepth\":{},\"queue_depth\":{},\"size\":{},\"provider\":\"{}\",\"ep\":\"{}\",\"target\":\"{}\",\"api\":\"{}\",\"runtime_ms\":{:.3}",
        o.mode.name(),
        o.bs,
        o.iodepth,
        vol.queue_depth,
        span,
        esc(&o.provider),
        esc(&o.ep),
        esc(&o.target),
        api(o),
        secs * 1e3
    );
    for (d, name) in [(READ, "read"), (WRITE, "write")] {
        let st = &stats[d];
        let h = &st.hist;
        let bw = st.bytes as f64 / secs;
        let _ = write!(
            s,
            ",\"{name}\":{{\"ios\":{},\"bytes\":{},\"iops\":{:.1},\"bw_bytes\":{:.0},\"bw_mib\":{:.3},\"bw_mb\":{:.3},\"clat_ns\":{{\"min\":{},\"mean\":{:.0},\"p50\":{},\"p99\":{},\"p99_9\":{},\"max\":{}}}}}",
            st.ios,
            st.bytes,
            st.ios as f64 / secs,
            bw,
            bw / (1 << 20) as f64,
            bw / 1e6,
            h.min(),
            h.mean(),
            h.pct(50.0),
            h.pct(99.0),
            h.pct(99.9),
            h.max
        );
    }
    let _ = write!(
        s,
        ",\"verify\":{{\"enabled\":{verify},\"blocks_checked\":{verified}}}}}"
    );
    s
}

/// Which initiator API ran.
fn api(o: &Opts) -> &'static str {
    if o.inline {
        "inline"
    } else {
        "volume"
    }
}

/// A JSON string's body.
fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o
}

fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The pattern of the sector at volume offset `off`.
fn sector(s: &mut [u8], off: u64, seed: u64) {
    s[..8].copy_from_slice(MAGIC);
    s[8..16].copy_from_slice(&off.to_le_bytes());
    s[16..24].copy_from_slice(&seed.to_le_bytes());
    let mut x = off ^ seed.rotate_left(32);
    for w in s[24..].chunks_exact_mut(8) {
        x = splitmix(x);
        w.copy_from_slice(&x.to_le_bytes());
    }
}

/// Fills `buf` (whole sectors) with the pattern of volume offset `off`.
fn fill(buf: &mut [u8], off: u64, seed: u64) {
    for (i, s) in buf.chunks_exact_mut(SECTOR).enumerate() {
        sector(s, off + (i * SECTOR) as u64, seed);
    }
}

/// Checks that `buf`, read at volume offset `off`, holds the pattern.
fn check(buf: &[u8], off: u64, seed: u64) -> Result<(), String> {
    let mut want = [0u8; SECTOR];
    for (i, s) in buf.chunks_exact(SECTOR).enumerate() {
        let at = off + (i * SECTOR) as u64;
        sector(&mut want, at, seed);
        if s == want {
            continue;
        }
        let word = |r: std::ops::Range<usize>| {
            u64::from_le_bytes(<[u8; 8]>::try_from(&s[r]).unwrap_or_default())
        };
        let why = if &s[..8] != MAGIC {
            "no pattern (never written by a --verify run?)".to_string()
        } else if word(8..16) != at {
            format!("the pattern of offset {}", word(8..16))
        } else if word(16..24) != seed {
            format!("the pattern of seed {} (expected {seed})", word(16..24))
        } else {
            let b = s
                .iter()
                .zip(want.iter())
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            format!("a corrupt pattern (first bad byte at {})", at + b as u64)
        };
        return Err(format!(
            "verify: mismatch at offset {at}: the sector holds {why}"
        ));
    }
    Ok(())
}

/// Sub-buckets per power of two (precision about 1.5 %).
const SUB_BITS: u32 = 6;
const SUB: u64 = 1 << SUB_BITS;

/// A log-linear histogram of nanoseconds.
#[derive(Clone)]
struct Hist {
    counts: Vec<u64>,
    n: u64,
    sum: u128,
    min: u64,
    max: u64,
}

impl Default for Hist {
    fn default() -> Self {
        Hist {
            counts: vec![0; ((64 - SUB_BITS as u64 + 1) * SUB) as usize],
            n: 0,
            sum: 0,
            min: u64::MAX,
            max: 0,
        }
    }
}

impl Hist {
    fn index(v: u64) -> usize {
        if v < SUB {
            return v as usize;
        }
        let e = 63 - v.leading_zeros() as u64;
        let m = v >> (e - SUB_BITS as u64);
        ((e - SUB_BITS as u64 + 1) * SUB + (m - SUB)) as usize
    }
    /// The middle of bucket `i`'s range.
    fn value(i: usize) -> u64 {
        let i = i as u64;
        if i < SUB {
            return i;
        }
        let e = i / SUB + SUB_BITS as u64 - 1;
        let m = i % SUB + SUB;
        let lo = m << (e - SUB_BITS as u64);
        lo + ((1u64 << (e - SUB_BITS as u64)) >> 1)
    }
    fn record(&mut self, v: u64) {
        self.counts[Self::index(v)] += 1;
        self.n += 1;
        self.sum += v as u128;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }
    fn min(&self) -> u64 {
        if self.n == 0 {
            0
        } else {
            self.min
        }
    }
    fn mean(&self) -> f64 {
        if self.n == 0 {
            0.0
        } else {
            self.sum as f64 / self.n as f64
        }
    }
    /// The value at percentile `p` (the rank's bucket, within min..max).
    fn pct(&self, p: f64) -> u64 {
        if self.n == 0 {
            return 0;
        }
        let rank = ((p / 100.0 * self.n as f64).ceil() as u64).clamp(1, self.n);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Self::value(i).clamp(self.min, self.max);
            }
        }
        self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn histogram_percentiles_within_a_bucket() {
        let mut h = Hist::default();
        for v in 1..=10_000u64 {
            h.record(v * 1000);
        }
        for (p, want) in [
            (50.0, 5_000_000.0),
            (99.0, 9_900_000.0),
            (99.9, 9_990_000.0),
        ] {
            let got = h.pct(p) as f64;
            assert!((got - want).abs() / want < 0.02, "p{p}: {got} vs {want}");
        }
        assert_eq!((h.min(), h.max), (1000, 10_000_000));
        assert_eq!(Hist::default().pct(99.0), 0);
        for v in [0, 1, 63, 64, 65, 127, 128, 1 << 40, u64::MAX] {
            let i = Hist::index(v);
            let mid = Hist::value(i) as f64;
            assert!(
                v < 64 && mid == v as f64 || (mid - v as f64).abs() / (v as f64) < 0.02,
                "{v}: {mid}"
            );
        }
    }

    #[test]
    fn the_pattern_names_offset_and_seed_and_catches_a_flipped_bit() {
        let mut b = vec![0u8; 4096];
        fill(&mut b, 8192, 7);
        assert_eq!(&b[512..520], MAGIC);
        assert_eq!(u64::from_le_bytes(b[520..528].try_into().unwrap()), 8704);
        assert_eq!(u64::from_le_bytes(b[528..536].try_into().unwrap()), 7);
        assert!(check(&b, 8192, 7).is_ok());
        // Read back at another offset, with another seed, or corrupt.
        let e = check(&b, 0, 7).unwrap_err();
        assert!(
            e.contains("offset 0") && e.contains("pattern of offset 8192"),
            "{e}"
        );
        assert!(check(&b, 8192, 8).unwrap_err().contains("seed 7"));
        b[3000] ^= 1;
        let e = check(&b, 8192, 7).unwrap_err();
        assert!(e.contains("offset 10752") && e.contains("11192"), "{e}");
        let e = check(&[0u8; 512], 4096, 7).unwrap_err();
        assert!(e.contains("no pattern"), "{e}");
    }

    #[test]
    fn one_pass_visits_every_block_once() {
        for (rw, blocks) in [
            ("randread", 1000u64),
            ("randwrite", 1),
            ("read", 77),
            ("randrw", 4096),
        ] {
            let o = parse(&v(&["--rw", rw, "--seed", "3", "127.0.0.1"]))
                .unwrap()
                .unwrap();
            let mut g = Gen::new(&o, blocks);
            let mut seen = vec![false; blocks as usize];
            while let Some((_, b)) = g.next() {
                assert!(!seen[b as usize], "{rw}: block {b} twice");
                seen[b as usize] = true;
            }
            assert!(seen.iter().all(|s| *s), "{rw}: a block missed");
        }
    }

    /// A volume in memory that corrupts what is written at `bad`.
    struct Mem {
        data: Vec<u8>,
        bad: Option<u64>,
        done: Vec<Completion>,
    }

    impl Dev for Mem {
        fn read_into(&mut self, off: u64, mut buf: Vec<u8>, user: u64) {
            let (o, n) = (off as usize, buf.len());
            buf.copy_from_slice(&self.data[o..o + n]);
            self.done.push(Completion {
                user,
                result: Ok(buf),
            });
        }
        fn write(&mut self, off: u64, buf: Vec<u8>, user: u64) {
            let o = off as usize;
            self.data[o..o + buf.len()].copy_from_slice(&buf);
            if let Some(b) = self
                .bad
                .filter(|b| (off..off + buf.len() as u64).contains(b))
            {
                self.data[b as usize] ^= 0x40;
            }
            self.done.push(Completion {
                user,
                result: Ok(buf),
            });
        }
        fn wait(&mut self, _: Duration, out: &mut Vec<Completion>) {
            out.append(&mut self.done);
        }
    }

    fn mem_run(args: &[&str], m: &mut Mem) -> Result<(), String> {
        let mut a = v(args);
        a.extend(v(&["--json", "h"]));
        let o = parse(&a).unwrap().unwrap();
        let info = Info {
            size: m.data.len() as u64,
            block_size: 512,
            max_io: 1 << 20,
            queue_depth: 16,
            read_only: false,
        };
        body(&o, &info, m)
    }

    #[test]
    fn verify_reads_back_what_it_wrote_and_names_a_corrupt_offset() {
        let mut m = Mem {
            data: vec![0; 1 << 20],
            bad: None,
            done: Vec::new(),
        };
        for rw in ["randwrite", "write", "randrw"] {
            mem_run(&["--rw", rw, "--bs", "8k", "--verify"], &mut m).unwrap();
        }
        assert!(check(&m.data, 0, 1).is_ok());
        mem_run(&["--rw", "randread", "--verify"], &mut m).unwrap();
        // A store that flips a bit on the way: the write pass's read-back
        // catches it, with the byte's sector.
        m.bad = Some(300_000);
        let e = mem_run(&["--rw", "randwrite", "--bs", "64k", "--verify"], &mut m).unwrap_err();
        assert!(e.contains("mismatch at offset 299520"), "{e}");
        assert!(e.contains("first bad byte at 300000"), "{e}");
        // Reads alone see it too; another seed is not this pattern.
        let e = mem_run(&["--rw", "read", "--verify"], &mut m).unwrap_err();
        assert!(e.contains("mismatch at offset 299520"), "{e}");
        m.bad = None;
        mem_run(&["--rw", "write", "--verify", "--seed", "9"], &mut m).unwrap();
        let e = mem_run(&["--rw", "read", "--bs", "512", "--verify"], &mut m).unwrap_err();
        assert!(
            e.contains("mismatch at offset 0") && e.contains("seed 9"),
            "{e}"
        );
    }

    #[test]
    fn bad_flags_get_clear_errors() {
        for (args, want) in [
            (&["--rw", "sideways", "h"][..], "bad --rw 'sideways'"),
            (&["--bs", "1000", "h"], "bad --bs '1000'"),
            (&["--bs", "0", "h"], "bad size '0'"),
            (&["--iodepth", "0", "h"], "bad --iodepth '0'"),
            (&["--iodepth", "x", "h"], "bad --iodepth 'x'"),
            (
                &["--runtime", "-1", "h"],
                "--runtime: bad number of seconds",
            ),
            (
                &["--size", "1k", "--bs", "4k", "h"],
                "smaller than one block",
            ),
            (&["--rwmixread", "101", "h"], "bad --rwmixread"),
            (&["--frobnicate", "h"], "unknown option --frobnicate"),
            (&["-x", "h"], "unknown option -x"),
            (&["-e", "dgram", "h"], "dgram"),
            (&[], "one TARGET_ADDR expected"),
            (&["a", "b"], "one TARGET_ADDR expected"),
            (&["-P", "99999", "h"], "bad port"),
        ] {
            let e = parse(&v(args)).unwrap_err();
            assert!(e.contains(want), "{args:?}: {e}");
        }
        let o = parse(&v(&[
            "-p",
            "shm",
            "-P",
            "5000",
            "--rw=write",
            "--bs",
            "128k",
            "host",
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(
            (o.mode, o.bs, o.iodepth, o.target.as_str()),
            (Mode::Write, 131072, 16, "host:5000")
        );
        assert!(parse(&v(&["-h"])).unwrap().is_none());
    }
}
