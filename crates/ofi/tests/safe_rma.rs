//! The safe layer's one-sided operations on every provider whose offer has
//! FI_RMA and FI_ATOMIC: buffers owned by operations, regions owned by safe
//! code, violations reported with the buffer, and shutdown with operations
//! in flight.
// The only unsafe code here is the counting allocator.
#![allow(unsafe_code)]

use ofi::consts::*;
use ofi::errno;
use ofi::safe::{Addr, Atomic, Channel, Completion, OpId, Region};
use ofi::Info;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::{Duration, Instant};

/// Counts this thread's live heap bytes, to check that shutdown frees
/// the buffers of operations in flight.
struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; the counter is a const-initialised
// thread local (no allocation while counting).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let _ = LIVE.try_with(|c| c.set(c.get() + l.size() as isize));
        // SAFETY: forwarded caller contract.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        let _ = LIVE.try_with(|c| c.set(c.get() - l.size() as isize));
        // SAFETY: forwarded caller contract.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn live() -> isize {
    LIVE.with(|c| c.get())
}

fn offer(prov: &str, caps: u64) -> Option<Info> {
    let mut h = Info::hints();
    h.caps = caps;
    h.ep_attr.ep_type = ep_type::FI_EP_RDM;
    h.fabric_attr.prov_name = Some(prov.into());
    let (node, service, flags) = if prov == "tcp" {
        h.addr_format = addr_format::FI_SOCKADDR_IN;
        (Some("127.0.0.1"), Some("0"), FI_SOURCE)
    } else {
        (None, None, 0)
    };
    let v = ofi::getinfo(FI_VERSION_CURRENT, node, service, flags, Some(&h)).ok()?;
    v.into_iter().next()
}

/// The offers with one-sided operations: shm, and tcp if it has FI_RMA.
fn offers() -> Vec<Info> {
    let caps = FI_MSG | FI_RMA | FI_ATOMIC;
    let v: Vec<Info> = ["shm", "tcp"]
        .into_iter()
        .filter_map(|p| offer(p, caps))
        .filter(|i| i.caps & (FI_RMA | FI_ATOMIC) == FI_RMA | FI_ATOMIC)
        .collect();
    assert!(
        v.iter().any(|i| i.provider() == "shm"),
        "shm offers FI_RMA | FI_ATOMIC"
    );
    v
}

/// An initiator and a target that know each other.
struct Pair {
    init: Channel,
    target: Channel,
    to_target: Addr,
    to_init: Addr,
}

fn pair(info: &Info) -> Pair {
    let init = Channel::open(info).expect("initiator");
    let target = Channel::open(info).expect("target");
    let to_target = init.insert(&target.address().unwrap()).unwrap();
    let to_init = target.insert(&init.address().unwrap()).unwrap();
    Pair {
        init,
        target,
        to_target,
        to_init,
    }
}

impl Pair {
    /// Drives both channels until the initiator completes `id`; the target's
    /// completions are collected into `at_target`.
    fn finish(&self, id: OpId, at_target: &mut Vec<Completion>) -> Completion {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut mine = Vec::new();
        loop {
            self.target.poll(at_target).unwrap();
            self.init.poll(&mut mine).unwrap();
            if let Some(i) = mine.iter().position(|c| op_id(c) == Some(id)) {
                return mine.swap_remove(i);
            }
            assert!(Instant::now() < deadline, "operation {id:?} did not finish");
        }
    }

    fn done(&self, id: OpId) -> Completion {
        self.finish(id, &mut Vec::new())
    }

    /// Unregisters `r` (driving the target until no access runs) and
    /// returns its bytes.
    fn bytes(&self, mut r: Region) -> Vec<u8> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match r.into_vec() {
                Ok(v) => return v,
                Err(back) => r = back,
            }
            self.target.poll(&mut Vec::new()).unwrap();
            assert!(Instant::now() < deadline, "region stays busy");
        }
    }
}

fn op_id(c: &Completion) -> Option<OpId> {
    match c {
        Completion::Sent { id, .. }
        | Completion::Received { id, .. }
        | Completion::Written { id, .. }
        | Completion::Read { id, .. }
        | Completion::Atomic { id, .. }
        | Completion::Failed { id, .. } => Some(*id),
        _ => None,
    }
}

#[test]
fn write_then_read_back() {
    for info in offers() {
        let p = pair(&info);
        let r = p
            .target
            .register(vec![0; 300_000], FI_REMOTE_READ | FI_REMOTE_WRITE)
            .map_err(|(_, e)| e)
            .unwrap();
        // A small write and a large one (the providers' other path).
        for (off, len, fill) in [(100usize, 1000usize, 7u8), (4096, 250_000, 9)] {
            let id = p
                .init
                .write(vec![fill; len], p.to_target, r.remote_addr(off), r.key())
                .unwrap();
            match p.done(id) {
                Completion::Written { buf, .. } => assert_eq!(buf, vec![fill; len]),
                c => panic!("{}: unexpected {c:?}", info.provider()),
            }
            let id = p
                .init
                .read(vec![0; len], p.to_target, r.remote_addr(off), r.key())
                .unwrap();
            match p.done(id) {
                Completion::Read { buf, .. } => {
                    assert!(buf.iter().all(|&b| b == fill), "{}", info.provider())
                }
                c => panic!("{}: unexpected {c:?}", info.provider()),
            }
        }
        let bytes = p.bytes(r);
        assert_eq!(bytes.len(), 300_000);
        assert!(bytes[..100].iter().all(|&b| b == 0));
        assert!(bytes[100..1100].iter().all(|&b| b == 7));
        assert!(bytes[4096..254_096].iter().all(|&b| b == 9));
        assert_eq!(p.init.in_flight() + p.target.in_flight(), 0);
    }
}

#[test]
fn writedata_is_seen_at_the_target() {
    for info in offers() {
        let p = pair(&info);
        let r = p
            .target
            .register(vec![0; 64], FI_REMOTE_WRITE)
            .map_err(|(_, e)| e)
            .unwrap();
        let id = p
            .init
            .writedata(vec![3; 16], 0xfeed, p.to_target, r.remote_addr(8), r.key())
            .unwrap();
        let mut at_target = Vec::new();
        assert!(matches!(
            p.finish(id, &mut at_target),
            Completion::Written { .. }
        ));
        let deadline = Instant::now() + Duration::from_secs(20);
        while at_target.is_empty() && Instant::now() < deadline {
            p.target.poll(&mut at_target).unwrap();
        }
        match at_target.as_slice() {
            [Completion::RemoteWrite { len, data, src }] => {
                assert_eq!((*len, *data), (16, 0xfeed), "{}", info.provider());
                // The source is known only to offers with FI_SOURCE.
                if info.caps & FI_SOURCE != 0 {
                    assert_eq!(*src, Some(p.to_init), "{}", info.provider());
                }
            }
            c => panic!("{}: unexpected {c:?}", info.provider()),
        }
        let bytes = p.bytes(r);
        assert_eq!(&bytes[8..24], &[3; 16]);
    }
}

#[test]
fn fetch_add_sequence_and_compare_swap() {
    for info in offers() {
        let p = pair(&info);
        let r = p
            .target
            .register(vec![0; 16], FI_REMOTE_READ | FI_REMOTE_WRITE)
            .map_err(|(_, e)| e)
            .unwrap();
        for i in 0..5u64 {
            let id = p
                .init
                .fetch_add_u64(p.to_target, r.remote_addr(8), r.key(), 3)
                .unwrap();
            assert_eq!(p.done(id).fetched_u64(), Some(3 * i), "{}", info.provider());
        }
        let id = p
            .init
            .compare_swap_u64(p.to_target, r.remote_addr(8), r.key(), 15, 100)
            .unwrap();
        assert_eq!(p.done(id).fetched_u64(), Some(15));
        // A plain atomic hands its operands back and fetches nothing.
        let a = Atomic {
            op: atomic_op::FI_SUM,
            datatype: datatype::FI_UINT64,
            operand: 1u64.to_ne_bytes().to_vec(),
            compare: None,
            fetch: false,
        };
        let id = p
            .init
            .atomic(a, p.to_target, r.remote_addr(8), r.key())
            .unwrap();
        match p.done(id) {
            Completion::Atomic {
                operand, result, ..
            } => {
                assert_eq!(operand, 1u64.to_ne_bytes());
                assert!(result.is_empty());
            }
            c => panic!("unexpected {c:?}"),
        }
        let bytes = p.bytes(r);
        assert_eq!(u64::from_ne_bytes(bytes[8..16].try_into().unwrap()), 101);
        assert_eq!(&bytes[..8], &[0; 8]);
    }
}

#[test]
fn a_write_to_a_read_only_region_fails_with_the_buffer() {
    for info in offers() {
        let p = pair(&info);
        let r = p
            .target
            .register(vec![0xee; 64], FI_REMOTE_READ)
            .map_err(|(_, e)| e)
            .unwrap();
        let id = p
            .init
            .write(vec![1; 32], p.to_target, r.remote_addr(0), r.key())
            .unwrap();
        match p.done(id) {
            Completion::Failed { buf, error, .. } => {
                assert_eq!(buf, vec![1; 32]);
                assert_eq!(error.code(), errno::FI_EACCES, "{}", info.provider());
            }
            c => panic!("{}: unexpected {c:?}", info.provider()),
        }
        // An atomic fails the same way and hands its operands back.
        let id = p
            .init
            .fetch_add_u64(p.to_target, r.remote_addr(0), r.key(), 1)
            .unwrap();
        match p.done(id) {
            Completion::Failed { buf, error, .. } => {
                assert_eq!(buf, 1u64.to_ne_bytes());
                assert_eq!(error.code(), errno::FI_EACCES);
            }
            c => panic!("unexpected {c:?}"),
        }
        assert_eq!(p.bytes(r), vec![0xee; 64]);
    }
}

#[test]
fn an_unregistered_region_is_out_of_reach() {
    for info in offers() {
        let p = pair(&info);
        let r = p
            .target
            .register(vec![5; 64], FI_REMOTE_READ | FI_REMOTE_WRITE)
            .map_err(|(_, e)| e)
            .unwrap();
        let (key, at) = (r.key(), r.remote_addr(0));
        assert_eq!(p.bytes(r), vec![5; 64]);
        let id = p.init.write(vec![1; 8], p.to_target, at, key).unwrap();
        match p.done(id) {
            Completion::Failed { buf, error, .. } => {
                assert_eq!(buf, vec![1; 8]);
                assert_eq!(error.code(), errno::FI_EKEYREJECTED, "{}", info.provider());
            }
            c => panic!("unexpected {c:?}"),
        }
    }
}

#[test]
fn channels_without_rma_refuse_one_sided_calls() {
    let info = offer("shm", FI_MSG).expect("shm offer");
    let ch = Channel::open(&info).unwrap();
    let (buf, e) = ch.register(vec![1; 8], FI_REMOTE_WRITE).unwrap_err();
    assert_eq!((buf, e.code()), (vec![1; 8], errno::FI_EOPNOTSUPP));
    let me = ch.insert(&ch.address().unwrap()).unwrap();
    let (buf, e) = ch.write(vec![2; 8], me, 0, 1).unwrap_err();
    assert_eq!((buf, e.code()), (vec![2; 8], errno::FI_EOPNOTSUPP));
    let (buf, e) = ch.read(vec![3; 8], me, 0, 1).unwrap_err();
    assert_eq!((buf, e.code()), (vec![3; 8], errno::FI_EOPNOTSUPP));
    let e = ch.fetch_add_u64(me, 0, 1, 1).unwrap_err();
    assert_eq!(e.code(), errno::FI_EOPNOTSUPP);
    assert_eq!(ch.in_flight(), 0);
}

/// Posts one-sided operations the target never serves, then drops
/// everything; returns the heap bytes this thread still holds.
fn abandon(info: &Info) -> isize {
    let before = live();
    {
        let p = pair(info);
        let r = p
            .target
            .register(vec![0; 1 << 20], FI_REMOTE_READ | FI_REMOTE_WRITE)
            .map_err(|(_, e)| e)
            .unwrap();
        for i in 0..4 {
            let at = r.remote_addr(i << 18);
            p.init
                .write(vec![1; 1 << 18], p.to_target, at, r.key())
                .unwrap();
            p.init
                .read(vec![0; 1 << 18], p.to_target, at, r.key())
                .unwrap();
            p.init.fetch_add_u64(p.to_target, at, r.key(), 1).unwrap();
        }
        // Let the target start some of them, then tear down mid-flight.
        p.target.poll(&mut Vec::new()).unwrap();
        p.init.poll(&mut Vec::new()).unwrap();
        drop(p.init);
        drop(r);
        drop(p.target);
    }
    live() - before
}

#[test]
fn dropping_channels_with_one_sided_operations_in_flight_frees_their_buffers() {
    for info in offers() {
        // The first round pays for lazily created process-wide state.
        abandon(&info);
        let kept = abandon(&info);
        eprintln!("{}: {kept} bytes kept", info.provider());
        // 3 MiB of buffers were in flight; what stays is bookkeeping noise.
        assert!(
            kept < 64 << 10,
            "{}: {kept} bytes still held after shutdown",
            info.provider()
        );
    }
}
