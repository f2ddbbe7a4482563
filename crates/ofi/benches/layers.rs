//! Raw layer against safe and async layers: the cost of owning buffers in
//! flight, and of futures.
//!
//! Two shm endpoints in one process, one thread, each in its own domain (as
//! two channels are). Each round is an 8-byte ping-pong: both sides post a
//! receive, A sends, B collects the ping and answers, A collects the pong,
//! and both send completions are reaped (4 operations). The layers run in
//! alternating batches (the machine is shared: alternation spreads its
//! noise over all of them); the report gives each layer's median
//! nanoseconds per round and the median of the per-batch differences,
//! timed twice: by the thread's CPU clock (what the layer costs, without
//! the time other processes hold the core: the figure to compare on a
//! loaded machine) and by the wall clock.
//!
//! `cargo bench -p ofi --bench layers` (`LAYER=raw`, `safe`, `async` or
//! `async-busy` runs one layer alone, for a profiler; `ROUNDS=n`,
//! `BATCHES=n` change the run's length).
//!
//! Differences of a few tens of nanoseconds a round are within what code
//! layout alone moves (a change to the raw layer's loop has shifted the
//! safe layer's figure by 40 ns): compare such changes by instructions per
//! round, from two `valgrind --tool=callgrind` runs of one layer at two
//! `ROUNDS` (the difference cancels the setup).
#![allow(unsafe_code)]

use ofi::consts::*;
use ofi::safe::Channel;
use ofi::*;
use std::time::Instant;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn info() -> Info {
    Hints::new()
        .caps(Caps::MSG)
        .ep_type(EpType::Rdm)
        .provider("shm")
        .first()
        .expect("shm offer")
}

/// The calling thread's CPU time (user and system) in nanoseconds.
fn cpu_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec for the call to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// One layer's ping-pong, kept open across batches.
trait Layer {
    /// Runs `n` rounds.
    fn rounds(&mut self, n: usize);
}

/// The raw layer shaped like a channel: one tagged-format CQ per endpoint,
/// read with `readfrom` into entries kept across reads (as a channel keeps
/// its own), so the difference is the other layers' bookkeeping.
struct Raw {
    // Field order is drop order: endpoints before what they are bound to.
    a: Endpoint,
    b: Endpoint,
    qa: CompletionQueue,
    qb: CompletionQueue,
    _av: (AddressVector, AddressVector),
    _d: (Domain, Domain),
    _f: Fabric,
    to_a: u64,
    to_b: u64,
    scratch: Scratch,
}

/// Completion entries and their sources, reused by every read.
struct Scratch {
    ents: [CqTaggedEntry; 16],
    src: [u64; 16],
}

impl Raw {
    fn open(info: &Info) -> Raw {
        let f = Fabric::open(&info.fabric_attr).unwrap();
        let (da, db) = (f.domain(info).unwrap(), f.domain(info).unwrap());
        let attr = CqAttr {
            format: cq_format::FI_CQ_FORMAT_TAGGED,
            wait_obj: wait_obj::FI_WAIT_FD,
            size: 0,
        };
        let (qa, qb) = (da.cq(&attr).unwrap(), db.cq(&attr).unwrap());
        let (ava, avb) = (
            da.av(&AvAttr::default()).unwrap(),
            db.av(&AvAttr::default()).unwrap(),
        );
        let a = da.endpoint(info).unwrap();
        let b = db.endpoint(info).unwrap();
        for (e, q, av) in [(&a, &qa, &ava), (&b, &qb, &avb)] {
            e.bind_cq(q, FI_TRANSMIT | FI_RECV).unwrap();
            e.bind_av(av).unwrap();
            e.enable().unwrap();
        }
        let to_b = ava.insert_one(&b.getname().unwrap()).unwrap();
        let to_a = avb.insert_one(&a.getname().unwrap()).unwrap();
        Raw {
            a,
            b,
            qa,
            qb,
            _av: (ava, avb),
            _d: (da, db),
            _f: f,
            to_a,
            to_b,
            scratch: Scratch {
                ents: [CqTaggedEntry::default(); 16],
                src: [0; 16],
            },
        }
    }
}

/// Reads `q` until the completion with context `ctx` arrived; counts others.
fn reap(q: &CompletionQueue, s: &mut Scratch, ctx: usize, others: &mut usize) {
    loop {
        if let Ok(n) = q.readfrom(&mut s.ents, &mut s.src) {
            let mut found = false;
            for e in &s.ents[..n] {
                if e.op_context == ctx {
                    found = true;
                } else {
                    *others += 1;
                }
            }
            if found {
                return;
            }
        }
    }
}

impl Layer for Raw {
    fn rounds(&mut self, n: usize) {
        let (ping, pong) = ([7u8; 8], [8u8; 8]);
        let (mut rxa, mut rxb) = ([0u8; 8], [0u8; 8]);
        for _ in 0..n {
            let mut sends = 0;
            // SAFETY: the buffers outlive the operations; every completion
            // is reaped before the next round.
            unsafe {
                self.b.recv(rxb.as_mut_ptr(), 8, FI_ADDR_UNSPEC, 1).unwrap();
                self.a.recv(rxa.as_mut_ptr(), 8, FI_ADDR_UNSPEC, 2).unwrap();
                self.a.send(ping.as_ptr(), 8, self.to_b, 3).unwrap();
            }
            reap(&self.qb, &mut self.scratch, 1, &mut sends);
            // SAFETY: pong is an 8-byte local that outlives the send; its
            // completion is reaped before the round ends.
            unsafe { self.b.send(pong.as_ptr(), 8, self.to_a, 4).unwrap() };
            reap(&self.qa, &mut self.scratch, 2, &mut sends);
            let e = &mut self.scratch.ents;
            while sends < 2 {
                sends += self.qa.read(e).unwrap_or(0) + self.qb.read(e).unwrap_or(0);
            }
        }
    }
}

/// The safe layer: Vec buffers moved through operation handles.
struct Safe {
    a: Channel,
    b: Channel,
    to_a: safe::Addr,
    to_b: safe::Addr,
    bufs: Option<[Vec<u8>; 4]>,
}

impl Safe {
    fn open(info: &Info) -> Safe {
        let a = Channel::open(info).unwrap();
        let b = Channel::open(info).unwrap();
        let to_b = a.insert(&b.address().unwrap()).unwrap();
        let to_a = b.insert(&a.address().unwrap()).unwrap();
        Safe {
            a,
            b,
            to_a,
            to_b,
            bufs: Some([vec![7; 8], vec![8; 8], vec![0; 8], vec![0; 8]]),
        }
    }
}

/// Polls `ch` until `op` finishes; returns its buffer.
fn finish<B: Send + 'static>(ch: &Channel, op: &mut safe::Op<'_, B>) -> B {
    loop {
        if let Some(r) = op.check() {
            return r.unwrap().buf;
        }
        ch.poll().unwrap();
    }
}

impl Layer for Safe {
    fn rounds(&mut self, n: usize) {
        let [mut ping, mut pong, mut rxa, mut rxb] = self.bufs.take().unwrap();
        for _ in 0..n {
            let mut rb = self.b.recv(rxb).unwrap();
            let mut ra = self.a.recv(rxa).unwrap();
            let mut sa = self.a.send(ping, self.to_b).unwrap();
            rxb = finish(&self.b, &mut rb);
            let mut sb = self.b.send(pong, self.to_a).unwrap();
            rxa = finish(&self.a, &mut ra);
            ping = finish(&self.a, &mut sa);
            pong = finish(&self.b, &mut sb);
        }
        self.bufs = Some([ping, pong, rxa, rxb]);
    }
}

/// The async layer: the same round as futures, in one task.
struct Async {
    rt: tokio::runtime::Runtime,
    a: aio::Channel,
    b: aio::Channel,
    to_a: safe::Addr,
    to_b: safe::Addr,
    bufs: Option<[Vec<u8>; 4]>,
}

impl Async {
    fn open(info: &Info, busy: bool) -> Async {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .unwrap();
        let open = |i: &Info| {
            if busy {
                aio::Channel::open_busy(i)
            } else {
                aio::Channel::open(i)
            }
        };
        let (a, b) = rt.block_on(async { (open(info).unwrap(), open(info).unwrap()) });
        let to_b = a.insert(&b.address().unwrap()).unwrap();
        let to_a = b.insert(&a.address().unwrap()).unwrap();
        Async {
            rt,
            a,
            b,
            to_a,
            to_b,
            bufs: Some([vec![7; 8], vec![8; 8], vec![0; 8], vec![0; 8]]),
        }
    }
}

impl Layer for Async {
    fn rounds(&mut self, n: usize) {
        let [mut ping, mut pong, mut rxa, mut rxb] = self.bufs.take().unwrap();
        let (a, b, to_a, to_b) = (&self.a, &self.b, self.to_a, self.to_b);
        #[allow(clippy::needless_late_init)]
        let bufs = self.rt.block_on(async move {
            for _ in 0..n {
                let rb = b.recv(rxb);
                let ra = a.recv(rxa);
                let sa = a.send(ping, to_b);
                rxb = rb.await.unwrap().buf;
                let sb = b.send(pong, to_a);
                rxa = ra.await.unwrap().buf;
                ping = sa.await.unwrap().buf;
                pong = sb.await.unwrap().buf;
            }
            [ping, pong, rxa, rxb]
        });
        self.bufs = Some(bufs);
    }
}

fn main() {
    let info = info();
    let rounds = env("ROUNDS", 100_000);
    let batches = env("BATCHES", 11);
    let only = std::env::var("LAYER").unwrap_or_default();
    let mut layers: Vec<(&str, Box<dyn Layer>)> = vec![
        ("raw", Box::new(Raw::open(&info))),
        ("safe", Box::new(Safe::open(&info))),
        ("async", Box::new(Async::open(&info, false))),
        ("async-busy", Box::new(Async::open(&info, true))),
    ];
    layers.retain(|(name, _)| only.is_empty() || *name == only);
    // Warm up (page faults, lazily made state).
    for (_, l) in layers.iter_mut() {
        l.rounds(rounds / 10);
    }
    let mut wall: Vec<Vec<f64>> = vec![Vec::new(); layers.len()];
    let mut cpu: Vec<Vec<f64>> = vec![Vec::new(); layers.len()];
    for _ in 0..batches {
        for (i, (_, l)) in layers.iter_mut().enumerate() {
            let (t, c) = (Instant::now(), cpu_ns());
            l.rounds(rounds);
            let c = cpu_ns() - c;
            wall[i].push(t.elapsed().as_nanos() as f64 / rounds as f64);
            cpu[i].push(c as f64 / rounds as f64);
        }
    }
    let raw = layers.iter().position(|(n, _)| *n == "raw");
    for (clock, ns) in [("cpu", &cpu), ("wall", &wall)] {
        println!(
            "{clock:<4} layer   ns/round   vs raw   (median of {batches} alternating batches of \
             {rounds} rounds: 8 B ping-pong over shm, 4 operations a round)"
        );
        for (i, (name, _)) in layers.iter().enumerate() {
            let m = median(&ns[i]);
            match raw {
                Some(r) if r != i => {
                    let diff: Vec<f64> = ns[i].iter().zip(&ns[r]).map(|(x, y)| x - y).collect();
                    let ratio: Vec<f64> = ns[i].iter().zip(&ns[r]).map(|(x, y)| x / y).collect();
                    println!(
                        "{name:<12} {m:8.1}   {:+6.1} ns ({:+.1} ns/op, x{:.2})",
                        median(&diff),
                        median(&diff) / 4.0,
                        median(&ratio)
                    );
                }
                _ => println!("{name:<12} {m:8.1}"),
            }
        }
    }
}
