//! Loom models of the slot ring: every interleaving of producers and
//! consumers delivers each value exactly once, in per-producer order.
//! Run with `RUSTFLAGS="--cfg loom" cargo test -p ofi-shmem --test loom_ring --release`.
#![cfg(loom)]
#![allow(unsafe_code)]

use loom::cell::UnsafeCell;
use loom::sync::atomic::AtomicU64;
use loom::sync::Arc;
use ofi_shmem::ring::{self, Slots};

struct Heap {
    tail: AtomicU64,
    head: AtomicU64,
    seq: Vec<AtomicU64>,
    cells: Vec<UnsafeCell<u64>>,
}

impl Heap {
    fn new(cap: usize) -> Self {
        let h = Heap {
            tail: AtomicU64::new(0),
            head: AtomicU64::new(0),
            seq: (0..cap).map(|_| AtomicU64::new(0)).collect(),
            cells: (0..cap).map(|_| UnsafeCell::new(0)).collect(),
        };
        // SAFETY: nobody else has the ring yet.
        unsafe { ring::init(&h) };
        h
    }
}

// SAFETY: the capacity is a power of two (the tests use 2); `seq` and
// `with_payload` index their own vectors (a bad index panics, never reads
// out of bounds), one cell per slot.
unsafe impl Slots for Heap {
    fn capacity(&self) -> u64 {
        self.seq.len() as u64
    }
    fn tail(&self) -> &AtomicU64 {
        &self.tail
    }
    fn head(&self) -> &AtomicU64 {
        &self.head
    }
    fn seq(&self, idx: u64) -> &AtomicU64 {
        &self.seq[(idx % self.seq.len() as u64) as usize]
    }
    unsafe fn with_payload<R>(&self, idx: u64, f: impl FnOnce(*mut u8, usize) -> R) -> R {
        self.cells[idx as usize].with_mut(|p| f(p.cast(), 8))
    }
}

fn put(h: &Heap, v: u64) -> bool {
    // SAFETY: the payload is one u64.
    ring::push(h, |p, _| unsafe { (p as *mut u64).write(v) }).is_ok()
}

fn take(h: &Heap) -> Option<u64> {
    // SAFETY: the payload is one u64 written by `put`.
    ring::pop(h, |p, _| unsafe { (p as *const u64).read() })
}

#[test]
fn two_producers_one_consumer() {
    loom::model(|| {
        let h = Arc::new(Heap::new(2));
        let ps: Vec<_> = (0..2u64)
            .map(|t| {
                let h = h.clone();
                loom::thread::spawn(move || {
                    let mut sent = 0;
                    if put(&h, t * 10) {
                        sent += 1;
                    }
                    sent
                })
            })
            .collect();
        let mut got = Vec::new();
        if let Some(v) = take(&h) {
            got.push(v);
        }
        let sent: u64 = ps.into_iter().map(|p| p.join().unwrap()).sum();
        while let Some(v) = take(&h) {
            got.push(v);
        }
        assert_eq!(
            got.len() as u64,
            sent,
            "every published value is taken exactly once"
        );
        for t in 0..2u64 {
            let mine: Vec<u64> = got.iter().copied().filter(|v| v / 10 == t).collect();
            let mut sorted = mine.clone();
            sorted.sort();
            assert_eq!(mine, sorted, "per-producer order holds");
        }
    });
}

#[test]
fn full_ring_refuses_and_recovers() {
    loom::model(|| {
        let h = Arc::new(Heap::new(2));
        assert!(put(&h, 1));
        assert!(put(&h, 2));
        assert!(!put(&h, 3), "a full ring refuses");
        let h2 = h.clone();
        let c = loom::thread::spawn(move || take(&h2));
        let p = put(&h, 4);
        let first = c.join().unwrap();
        assert_eq!(first, Some(1));
        let mut rest = Vec::new();
        while let Some(v) = take(&h) {
            rest.push(v);
        }
        if p {
            assert_eq!(rest, vec![2, 4]);
        } else {
            assert_eq!(rest, vec![2]);
        }
    });
}

#[test]
fn two_consumers_never_share_a_slot() {
    loom::model(|| {
        let h = Arc::new(Heap::new(2));
        assert!(put(&h, 7));
        assert!(put(&h, 8));
        let cs: Vec<_> = (0..2)
            .map(|_| {
                let h = h.clone();
                loom::thread::spawn(move || take(&h))
            })
            .collect();
        let mut got: Vec<u64> = cs.into_iter().filter_map(|c| c.join().unwrap()).collect();
        got.sort();
        assert_eq!(got, vec![7, 8]);
    });
}

#[test]
fn mpsc_message_ring_two_producers_flow_control() {
    use loom::sync::atomic::Ordering;
    loom::model(|| {
        let h = Arc::new(Heap::new(2));
        let ps: Vec<_> = (0..2u64)
            .map(|t| {
                let h = h.clone();
                loom::thread::spawn(move || {
                    let cached = AtomicU64::new(0);
                    let mut sent = Vec::new();
                    for i in 0..2u64 {
                        let v = t * 10 + i + 1;
                        // SAFETY: the payload is one u64.
                        if ring::push_mpsc(&*h, &cached, |p, _| unsafe { (p as *mut u64).write(v) })
                            .is_ok()
                        {
                            sent.push(v);
                        }
                    }
                    sent
                })
            })
            .collect();
        // SAFETY: this thread is the ring's only consumer.
        let mut rx = unsafe { ring::Consumer::new() };
        let mut got = Vec::new();
        // SAFETY (both pops): the payload is one u64 written by the producer.
        for _ in 0..2 {
            if let Some(v) = rx.pop(&*h, |p, _| unsafe { (p as *const u64).read() }) {
                got.push(v);
                rx.publish(&*h);
            }
        }
        let sent: Vec<Vec<u64>> = ps.into_iter().map(|p| p.join().unwrap()).collect();
        while let Some(v) = rx.pop(&*h, |p, _| unsafe { (p as *const u64).read() }) {
            got.push(v);
            rx.publish(&*h);
        }
        let total: usize = sent.iter().map(Vec::len).sum();
        assert_eq!(got.len(), total, "every stamped entry is taken once");
        for s in &sent {
            let mine: Vec<u64> = got.iter().copied().filter(|v| s.contains(v)).collect();
            assert_eq!(&mine, s, "per-producer order holds");
        }
        assert!(
            h.tail.load(Ordering::Relaxed) - rx.position() <= 2,
            "never more than capacity outstanding"
        );
    });
}
