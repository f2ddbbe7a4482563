//! Hybrid's shm path against plain shm: an 8-byte ping-pong between two
//! endpoints of one process, one thread, each in its own domain. Each round:
//! both sides post a receive, A sends, B collects the ping and answers, A
//! collects the pong, and both send completions are reaped.
//!
//! `cargo bench -p ofi-prov-hybrid --bench rounds` prints nanoseconds per
//! round for both providers in alternating batches (thread CPU time:
//! comparable on a loaded machine). `PROV=hybrid` or `PROV=shm` runs one
//! alone for a profiler; `ROUNDS=n`, `BATCHES=n` change the run's length.
//! On a shared machine compare instructions per round: two
//! `valgrind --tool=callgrind` runs of one provider at two `ROUNDS`, the
//! difference divided by the difference of rounds (cancels the setup).
#![allow(unsafe_code)]

use ofi::consts::*;
use ofi::*;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn info(prov: &str) -> Info {
    Hints::new()
        .caps(Caps::MSG)
        .ep_type(EpType::Rdm)
        .provider(prov)
        .first()
        .unwrap_or_else(|e| panic!("{prov} offer: {e}"))
}

/// The thread's CPU time in nanoseconds.
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

struct Pair {
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
    ents: [CqTaggedEntry; 16],
    src: [u64; 16],
}

impl Pair {
    fn open(info: &Info) -> Pair {
        let f = Fabric::open(&info.fabric_attr).unwrap();
        let (da, db) = (f.domain(info).unwrap(), f.domain(info).unwrap());
        let attr = CqAttr {
            format: cq_format::FI_CQ_FORMAT_TAGGED,
            wait_obj: wait_obj::FI_WAIT_NONE,
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
        Pair {
            a,
            b,
            qa,
            qb,
            _av: (ava, avb),
            _d: (da, db),
            _f: f,
            to_a,
            to_b,
            ents: [CqTaggedEntry::default(); 16],
            src: [0; 16],
        }
    }

    /// Reads `q` until the completion `ctx` arrived; counts the others.
    fn reap(&mut self, on_a: bool, ctx: usize, others: &mut usize) {
        loop {
            let q = if on_a { &self.qa } else { &self.qb };
            if let Ok(n) = q.readfrom(&mut self.ents, &mut self.src) {
                let mut found = false;
                for e in &self.ents[..n] {
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
            self.reap(false, 1, &mut sends);
            // SAFETY: `pong` lives until `rounds` returns, and this send's
            // completion is reaped (`sends < 2` below) before the round ends.
            unsafe { self.b.send(pong.as_ptr(), 8, self.to_a, 4).unwrap() };
            self.reap(true, 2, &mut sends);
            let e = &mut self.ents;
            while sends < 2 {
                sends += self.qa.read(e).unwrap_or(0) + self.qb.read(e).unwrap_or(0);
            }
        }
    }
}

fn main() {
    let rounds = env("ROUNDS", 20_000);
    if let Ok(p) = std::env::var("PROV") {
        let mut x = Pair::open(&info(&p));
        x.rounds(rounds);
        return;
    }
    let batches = env("BATCHES", 15);
    let names = ["shm", "hybrid"];
    let mut pairs: Vec<Pair> = names.iter().map(|p| Pair::open(&info(p))).collect();
    for p in pairs.iter_mut() {
        p.rounds(rounds / 10);
    }
    let mut ns: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    for _ in 0..batches {
        for (i, p) in pairs.iter_mut().enumerate() {
            let t = cpu_ns();
            p.rounds(rounds);
            ns[i].push((cpu_ns() - t) as f64 / rounds as f64);
        }
    }
    let ratios: Vec<f64> = (0..batches).map(|k| ns[1][k] / ns[0][k]).collect();
    for (i, n) in names.iter().enumerate() {
        println!(
            "{n:>7}: {:7.1} ns/round (median of {batches} batches, thread CPU time)",
            median(&ns[i])
        );
    }
    println!(
        "hybrid/shm: {:.3} (median of per-batch ratios)",
        median(&ratios)
    );
}
