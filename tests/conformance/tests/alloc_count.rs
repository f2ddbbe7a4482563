//! The raw send/receive hot path allocates nothing: after warm-up, 10,000
//! inline round trips through one pair (post receive, send, read both CQs)
//! perform zero heap allocations on the calling thread. When one happens,
//! the failure shows the backtraces of the first few.
#![allow(unsafe_code)]

use ofi::consts::*;
use ofi::CqTaggedEntry;
use ofi_conformance::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::{Cell, RefCell};
use std::time::Instant;

/// Counts allocations made by threads that armed counting.
struct Counting;

thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
    static COUNT: Cell<u64> = const { Cell::new(0) };
    static TRACES: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}
const MAX_TRACES: usize = 3;

/// Counts an allocation if this thread armed counting. Everything is
/// thread-local, so tests running in parallel do not see each other.
fn note(size: usize) {
    let armed = ARMED.try_with(|a| a.replace(false)).unwrap_or(false);
    if !armed {
        return;
    }
    // Disarmed while we record, so the recording's own allocations are not
    // counted and cannot recurse.
    let n = COUNT.with(|c| c.replace(c.get() + 1));
    if (n as usize) < MAX_TRACES {
        let bt = std::backtrace::Backtrace::force_capture();
        let _ = TRACES.try_with(|t| {
            t.borrow_mut()
                .push(format!("allocation #{n} of {size} bytes:\n{bt}"))
        });
    }
    let _ = ARMED.try_with(|a| a.set(true));
}

// SAFETY: forwards every call to the system allocator unchanged; counting
// touches only a thread-local flag, an atomic and (rarely) a mutex.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        note(l.size());
        // SAFETY: our caller upholds GlobalAlloc::alloc's contract for `l`
        // (non-zero size), which is all System.alloc asks.
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        note(l.size());
        // SAFETY: our caller upholds GlobalAlloc::alloc_zeroed's contract
        // for `l` (non-zero size), which is all System.alloc_zeroed asks.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        note(new);
        // SAFETY: our caller guarantees `p` is a live block of this
        // allocator with layout `l` and `new` a valid size for `l`'s
        // alignment; every block of ours is System's (each call forwards).
        unsafe { System.realloc(p, l, new) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: our caller guarantees `p` is a live block of this
        // allocator with layout `l`; every block of ours is System's.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Runs `f` with allocation counting on for this thread; returns the count.
fn counted(f: impl FnOnce()) -> u64 {
    TRACES.with(|t| t.borrow_mut().clear());
    COUNT.with(|c| c.set(0));
    ARMED.with(|a| a.set(true));
    f();
    ARMED.with(|a| a.set(false));
    COUNT.with(Cell::get)
}

/// The backtraces recorded by the last [`counted`] on this thread.
fn traces() -> Vec<String> {
    TRACES.with(|t| t.borrow().clone())
}

const SIZE: usize = 64;

/// One round trip: post the receive, send, read both CQs until both
/// completions are in. Returns false if the deadline passed or anything
/// failed (no panics inside the counted region: they allocate).
fn round(p: &Pair, tx: &[u8; SIZE], rx: &mut [u8; SIZE], mode: Mode, deadline: Instant) -> bool {
    let tagged = mode == Mode::Tagged;
    let post = |rx: &mut [u8; SIZE]| {
        // SAFETY: rx outlives the receive, which completes within this call
        // (or the test fails and the pair is dropped before rx).
        unsafe {
            if tagged {
                p.b.trecv(rx.as_mut_ptr(), SIZE, FI_ADDR_UNSPEC, 7, 0, 1)
            } else {
                p.b.recv(rx.as_mut_ptr(), SIZE, FI_ADDR_UNSPEC, 1)
            }
        }
    };
    let send = || {
        // SAFETY: tx outlives the send, which completes within this call.
        unsafe {
            if tagged {
                p.a.tsend(tx.as_ptr(), SIZE, p.fb, 7, 2)
            } else {
                p.a.send(tx.as_ptr(), SIZE, p.fb, 2)
            }
        }
    };
    let (posted, sent) = if mode == Mode::Unexpected {
        let s = send();
        p.b.progress(); // the message arrives before its receive
        (post(rx), s)
    } else {
        (post(rx), send())
    };
    if posted.is_err() || sent.is_err() {
        return false;
    }
    let (mut got_tx, mut got_rx) = (false, false);
    let mut e = [CqTaggedEntry::default(); 4];
    while !(got_tx && got_rx) {
        if let Ok(n) = p.cq_a.read(&mut e) {
            got_tx |= e[..n].iter().any(|x| x.op_context == 2);
        }
        if let Ok(n) = p.cq_b.read(&mut e) {
            got_rx |= e[..n].iter().any(|x| x.op_context == 1 && x.len == SIZE);
        }
        if Instant::now() > deadline {
            return false;
        }
    }
    true
}

/// Which hot path a round trip takes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    /// Untagged, receive posted first.
    Msg,
    /// Tagged, receive posted first.
    Tagged,
    /// Untagged, message arrives before its receive.
    Unexpected,
}

fn zero_alloc(info: &ofi::Info, mode: Mode) -> Outcome {
    let p = Pair::open(
        info,
        if mode == Mode::Tagged {
            FI_TAGGED
        } else {
            FI_MSG
        },
    )?;
    let tx = [0x5au8; SIZE];
    let mut rx = [0u8; SIZE];
    let deadline = Instant::now() + TIMEOUT;
    for i in 0..1000 {
        assert!(
            round(&p, &tx, &mut rx, mode, deadline),
            "warm-up round {i} failed or timed out"
        );
    }
    let deadline = Instant::now() + TIMEOUT * 3;
    let mut ok = 0usize;
    let n = counted(|| {
        for _ in 0..10_000 {
            if !round(&p, &tx, &mut rx, mode, deadline) {
                break;
            }
            ok += 1;
        }
    });
    assert_eq!(ok, 10_000, "only {ok} of 10000 round trips completed");
    assert_eq!(rx, tx);
    let traces = traces().join("\n----\n");
    assert_eq!(
        n,
        0,
        "{mode:?} hot path: {n} heap allocations in 10000 round trips ({:.2} per round trip); first ones:\n{traces}",
        n as f64 / 10_000.0
    );
    Ok(())
}

conformance!(
    /// Message send/recv round trips allocate nothing after warm-up.
    fn msg_hot_path_allocates_nothing(info) {
        zero_alloc(info, Mode::Msg)
    }
);

conformance!(
    /// Tagged send/recv round trips allocate nothing after warm-up.
    fn tagged_hot_path_allocates_nothing(info) {
        zero_alloc(info, Mode::Tagged)
    }
);

conformance!(
    /// Round trips whose message arrives before its receive is posted
    /// (the unexpected path) allocate nothing after warm-up.
    fn unexpected_hot_path_allocates_nothing(info) {
        zero_alloc(info, Mode::Unexpected)
    }
);

/// The counting allocator sees allocations (so a zero above means zero).
#[test]
fn counting_allocator_counts() {
    let n = counted(|| {
        let v = std::hint::black_box(vec![1u8; 100]);
        drop(v);
    });
    assert_eq!(n, 1, "the counting allocator missed an allocation");
    let t = traces();
    assert!(
        t.first().is_some_and(|s| s.contains("100 bytes")),
        "no backtrace recorded: {t:?}"
    );
}
