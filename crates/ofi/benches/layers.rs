//! Raw layer against safe layer: the cost of owning buffers in flight.
//!
//! Two shm endpoints in one process, one thread, each in its own domain (as
//! two safe channels are); each round posts a receive, sends 8 bytes and
//! reaps both completions. Reports the median nanoseconds per round over
//! several batches for each layer.
//!
//! `cargo bench -p ofi --bench layers` (`LAYER=raw` or `LAYER=safe` runs
//! one layer alone, for a profiler)
#![allow(unsafe_code)]

use ofi::consts::*;
use ofi::safe::Channel;
use ofi::*;
use std::time::Instant;

const ROUNDS: usize = 200_000;
const BATCHES: usize = 7;

fn info() -> Info {
    let mut h = Info::hints();
    h.caps = FI_MSG;
    h.ep_attr.ep_type = ep_type::FI_EP_RDM;
    h.fabric_attr.prov_name = Some("shm".into());
    ofi::getinfo(FI_VERSION_CURRENT, None, None, 0, Some(&h))
        .expect("shm offer")
        .remove(0)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The raw layer shaped like a channel: one tagged-format CQ per endpoint,
/// read with `readfrom`, so the difference is the safe layer's bookkeeping.
fn raw(info: &Info) -> f64 {
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
    let fb = ava.insert_one(&b.getname().unwrap()).unwrap();
    let tx = [7u8; 8];
    let mut rx = [0u8; 8];
    let mut ents = [CqTaggedEntry::default(); 16];
    let mut src = [0u64; 16];
    let mut batches = Vec::new();
    for _ in 0..BATCHES {
        let t = Instant::now();
        for _ in 0..ROUNDS {
            // SAFETY: tx and rx outlive the operations; both complete before the next round.
            unsafe {
                b.recv(rx.as_mut_ptr(), rx.len(), FI_ADDR_UNSPEC, 1)
                    .unwrap();
                a.send(tx.as_ptr(), tx.len(), fb, 2).unwrap();
            }
            let mut left = 2;
            while left > 0 {
                for q in [&qa, &qb] {
                    if let Ok(n) = q.readfrom(&mut ents, &mut src) {
                        left -= n;
                    }
                }
            }
        }
        batches.push(t.elapsed().as_nanos() as f64 / ROUNDS as f64);
    }
    median(batches)
}

fn safe(info: &Info) -> f64 {
    let a = Channel::open(info).unwrap();
    let b = Channel::open(info).unwrap();
    let fb = a.insert(&b.address().unwrap()).unwrap();
    let mut tx = Some(vec![7u8; 8]);
    let mut rx = Some(vec![0u8; 8]);
    let mut batches = Vec::new();
    for _ in 0..BATCHES {
        let t = Instant::now();
        for _ in 0..ROUNDS {
            let mut r = b.recv(rx.take().unwrap()).unwrap();
            let mut s = a.send(tx.take().unwrap(), fb).unwrap();
            while tx.is_none() || rx.is_none() {
                a.poll().unwrap();
                b.poll().unwrap();
                if tx.is_none() {
                    tx = s.check().map(|d| d.unwrap().buf);
                }
                if rx.is_none() {
                    rx = r.check().map(|d| d.unwrap().buf);
                }
            }
        }
        batches.push(t.elapsed().as_nanos() as f64 / ROUNDS as f64);
    }
    median(batches)
}

fn main() {
    let info = info();
    let only = std::env::var("LAYER").unwrap_or_default();
    let r = if only == "safe" { 0.0 } else { raw(&info) };
    let s = if only == "raw" { 0.0 } else { safe(&info) };
    println!("layer  ns/round (median of {BATCHES} x {ROUNDS}: post recv + send 8 B + reap both)");
    println!("raw    {r:8.1}");
    println!("safe   {s:8.1}");
    println!("safe - raw = {:.1} ns per round ({} operations)", s - r, 2);
}
