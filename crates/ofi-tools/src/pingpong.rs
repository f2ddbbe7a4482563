//! `ofi pingpong`: fi_pingpong's flags, control channel and output columns,
//! plus latency percentiles, CSV and an SVG plot.
//!
//! It measures the raw layer (as fi_pingpong measures libfabric's C API), so
//! its two post calls are `unsafe`: the buffers outlive every operation.
#![allow(unsafe_code)]

use crate::args::Args;
use crate::control;
use crate::data;
use crate::plot;
use crate::report::{self, Latency, Row};
use crate::setup::{self, Ctx, Want};
use crate::watch::Watch;
use ofi::consts::*;
use ofi::errno;
use ofi::CqEntry;
use std::cell::Cell;
use std::time::{Duration, Instant};

const USAGE: &str = "Usage:
  ofi pingpong [OPTIONS]             start server
  ofi pingpong [OPTIONS] <srv_addr>  connect to server
Options:
 -B <src_port>   source control port (server: 47592)
 -P <dst_port>   destination control port (client: 47592)
 -p <provider>   provider name (default: the best offer)
 -e <ep_type>    endpoint type: msg|rdm|dgram (rdm)
 -I <number>     iterations (10)
 -S <size>       transfer size, a comma-separated list, or 'all'
                 (default: 64, 256, 1k, 4k, 64k, 1m)
 -c              check data integrity
 -m <mode>       transmit mode: msg|tagged (msg)
 -W <count>      warm-up iterations per size (10)
 --block         wait for completions with a blocking read (spin, then sleep)
 --csv FILE      write the results as CSV
 --svg FILE      plot latency and bandwidth against size
 --local         run both sides here (server in a child process)
 -h              this text";

/// fi_pingpong's sizes when `-S` is not given.
const DEFAULT_SIZES: [usize; 6] = [64, 256, 1 << 10, 4 << 10, 64 << 10, 1 << 20];

const RX_CTX: usize = 1;
const TX_CTX: usize = 2;
const TAG: u64 = 0x1234;

/// How long a blocking read sleeps before the peer is looked after.
const BLOCK_SLICE: Duration = Duration::from_millis(100);
/// How long a wait for a completion may take before it gives up.
const NO_COMPLETION: Duration = Duration::from_secs(30);

/// The endpoint, the transmit mode, completions read ahead of the wait
/// that wants them, and the control channel with the watch on the peer.
struct Pp {
    c: Ctx,
    tagged: bool,
    /// Completions read early: (rx, tx).
    banked: Cell<(usize, usize)>,
    oob: control::Oob,
    watch: Watch,
}

impl Pp {
    /// An operation was refused for now (FI_EAGAIN): drive progress, and
    /// give up with the peer's name when it is gone.
    fn again(&mut self) -> Result<(), String> {
        self.c.ep.progress();
        self.watch.idle(&self.c, &mut self.oob)
    }

    fn post_rx(&mut self, buf: &mut [u8], size: usize) -> Result<(), String> {
        loop {
            let ep = &self.c.ep;
            // SAFETY: `buf` outlives the receive: the caller waits for its
            // completion before touching or dropping the buffer.
            let r = unsafe {
                if self.tagged {
                    ep.trecv(buf.as_mut_ptr(), size, FI_ADDR_UNSPEC, TAG, 0, RX_CTX)
                } else {
                    ep.recv(buf.as_mut_ptr(), size, FI_ADDR_UNSPEC, RX_CTX)
                }
            };
            match r {
                Err(e) if e.is_again() => self.again()?,
                r => return r.map_err(|e| self.c.post_error("fi_recv", &e)),
            }
        }
    }
    /// Sends; returns true if a send completion will follow.
    fn tx(&mut self, buf: &[u8], size: usize) -> Result<bool, String> {
        loop {
            let (ep, peer) = (&self.c.ep, self.c.peer);
            let r = if size <= self.c.inject {
                let b = &buf[..size];
                if self.tagged {
                    ep.tinject(b, peer, TAG)
                } else {
                    ep.inject(b, peer)
                }
                .map(|_| false)
            } else {
                // SAFETY: `buf` outlives the send: the caller waits for its
                // completion before reusing the buffer.
                unsafe {
                    if self.tagged {
                        ep.tsend(buf.as_ptr(), size, peer, TAG, TX_CTX)
                    } else {
                        ep.send(buf.as_ptr(), size, peer, TX_CTX)
                    }
                }
                .map(|_| true)
            };
            match r {
                Err(e) if e.is_again() => self.again()?,
                r => return r.map_err(|e| self.c.post_error("fi_send", &e)),
            }
        }
    }
    /// Waits until the completions wanted have arrived; an error names the
    /// peer when it died meanwhile.
    fn wait(&mut self, mut rx: usize, mut tx: usize) -> Result<(), String> {
        let mut ents = [CqEntry::default(); 8];
        let (mut brx, mut btx) = self.banked.get();
        let take = brx.min(rx);
        (brx, rx) = (brx - take, rx - take);
        let take = btx.min(tx);
        (btx, tx) = (btx - take, tx - take);
        let mut slept = Duration::ZERO;
        while rx + tx > 0 {
            let r = if self.c.block {
                self.c.cq.sread(&mut ents, Some(BLOCK_SLICE))
            } else {
                self.c.cq.read(&mut ents)
            };
            match r {
                Ok(n) => {
                    for e in &ents[..n] {
                        match e.op_context {
                            RX_CTX if rx > 0 => rx -= 1,
                            RX_CTX => brx += 1,
                            TX_CTX if tx > 0 => tx -= 1,
                            TX_CTX => btx += 1,
                            _ => {}
                        }
                    }
                }
                Err(e) if e.is_again() && !self.c.block => {
                    self.watch.idle(&self.c, &mut self.oob)?;
                }
                Err(e) if e.is_again() => {
                    self.watch.look(&self.c, &mut self.oob)?;
                    slept += BLOCK_SLICE;
                    if slept >= NO_COMPLETION {
                        return Err(format!(
                            "no completion in {} s (peer {})",
                            NO_COMPLETION.as_secs(),
                            self.c.peer_name
                        ));
                    }
                }
                Err(e) if e.code() == errno::FI_EAVAIL => return Err(self.c.cq_error()),
                Err(e) => return Err(e.to_string()),
            }
        }
        self.banked.set((brx, btx));
        Ok(())
    }
}

/// Runs `ofi pingpong`; returns the exit code.
pub fn run(argv: &[String]) -> i32 {
    let a = match Args::parse(argv, "BPpeISmdWs", &["csv", "svg"]) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("ofi pingpong: {e}\n{USAGE}");
            return 2;
        }
    };
    if a.has("h") || a.has("help") {
        outln!("{USAGE}");
        return 0;
    }
    let plan = match plan(&a) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("ofi pingpong: {e}");
            return 2;
        }
    };
    if a.has("local") {
        return control::run_local("pingpong", argv);
    }
    match session(&a, &plan) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("ofi pingpong: {e}");
            1
        }
    }
}

/// What the flags ask for, checked before anything is allocated or
/// connected (and before `--local` starts its two processes).
struct Plan {
    tagged: bool,
    iters: usize,
    warm: usize,
    sizes: Vec<usize>,
}

fn plan(a: &Args) -> Result<Plan, String> {
    let tagged = match a.get("m").unwrap_or("msg") {
        "msg" => false,
        "tagged" => true,
        m => return Err(format!("unknown transmit mode '{m}' (msg|tagged)")),
    };
    let iters = data::iterations(a, "I", 10)?;
    let warm = data::count(a, "W", 10)?;
    if warm > data::MAX_ITERS {
        return Err(format!(
            "bad -W {warm}: at most {} warm-up iterations",
            data::MAX_ITERS
        ));
    }
    let sizes = data::sizes(a, &DEFAULT_SIZES)?;
    // A send and a receive buffer of the largest size.
    data::check_memory(&sizes, 2)?;
    Ok(Plan {
        tagged,
        iters,
        warm,
        sizes,
    })
}

fn session(a: &Args, plan: &Plan) -> Result<(), String> {
    let Plan {
        tagged,
        iters,
        warm,
        ref sizes,
    } = *plan;
    let max = *sizes.iter().max().unwrap_or(&1);
    let mut tx = data::zeroed(max.max(1), "the send buffer")?;
    let mut rx = data::zeroed(max.max(1), "the receive buffer")?;
    let mut lat = Vec::new();
    lat.try_reserve_exact(iters)
        .map_err(|_| format!("cannot keep {iters} latency samples"))?;
    let (mut oob, client) = control::connect(a)?;
    let local = oob.0.local_addr().ok().map(|a| a.ip());
    let want = Want {
        caps: if tagged { FI_TAGGED } else { FI_MSG },
        mr_mode: 0,
    };
    let (info, c) = setup::open(a, &want, local, &mut oob, client)?;
    data::check_max_msg(sizes, &info)?;
    let mut pp = Pp {
        c,
        tagged,
        banked: Cell::new((0, 0)),
        oob,
        watch: Watch::new(),
    };
    let verify = a.has("c");
    let mut rows = Vec::new();
    report::print_header(true);
    for &size in sizes {
        pp.oob.sync()?;
        data::fill(&mut tx[..size], 0);
        lat.clear();
        pp.post_rx(&mut rx, size)?;
        let mut start = Instant::now();
        // One clock read per iteration: each iteration ends where the next
        // begins, so the timing adds a single read to the measured path.
        let mut t0 = start;
        for i in 0..warm + iters {
            if i == warm {
                start = Instant::now();
                t0 = start;
            }
            if verify {
                data::fill(&mut tx[..size], i);
            }
            if client {
                let txc = pp.tx(&tx, size)?;
                pp.wait(1, usize::from(txc))?;
            } else {
                pp.wait(1, 0)?;
            }
            if verify {
                data::check(&rx[..size], i)?;
            }
            if i + 1 < warm + iters || !client {
                pp.post_rx(&mut rx, size)?;
            }
            if !client {
                let txc = pp.tx(&tx, size)?;
                if txc {
                    pp.wait(0, 1)?;
                }
            }
            if i >= warm {
                let t1 = Instant::now();
                lat.push((t1 - t0).as_secs_f64() * 1e6 / 2.0);
                t0 = t1;
            }
        }
        let secs = start.elapsed().as_secs_f64();
        if !client {
            // The last posted receive is left over: cancel it for the next size.
            let _ = pp.c.ep.cancel(RX_CTX);
            let mut e = [CqEntry::default(); 1];
            let _ = pp.c.cq.read(&mut e);
            let _ = pp.c.cq.readerr();
        }
        let row = Row {
            size,
            iters,
            xfers: 2.0 * iters as f64,
            secs,
            lat: Some(Latency::of(&mut lat)),
        };
        report::print_row(&row);
        rows.push(row);
    }
    pp.oob.sync()?;
    if let Some(f) = a.get("csv") {
        plot::write_csv(f, &rows).map_err(|e| format!("{f}: {e}"))?;
    }
    if let Some(f) = a.get("svg") {
        plot::write_svg(f, &rows, "pingpong", info.provider()).map_err(|e| format!("{f}: {e}"))?;
    }
    Ok(())
}
