//! The safe layer's one-sided operations on every provider whose offer has
//! FI_RMA and FI_ATOMIC: buffers owned by operations, regions owned by safe
//! code, violations reported with the buffer, and shutdown with operations
//! in flight.
// The only unsafe code here is the counting allocator.
#![allow(unsafe_code)]

use ofi::consts::*;
use ofi::errno;
use ofi::safe::{Addr, Atomic, Channel, Done, Op, OpError, Region};
use ofi::Info;
use ofi::{ErrorKind, MrAccess};
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
        // SAFETY: our caller upholds GlobalAlloc::alloc's contract for `l`
        // (non-zero size), which is all System.alloc asks.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        let _ = LIVE.try_with(|c| c.set(c.get() - l.size() as isize));
        // SAFETY: our caller guarantees `p` came from this allocator with
        // layout `l`; every block of ours is System's (alloc forwards to it).
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
    /// Drives both channels until the initiator's operation finishes.
    fn done<B: Send + 'static>(&self, op: &mut Op<'_, B>) -> Result<Done<B>, OpError<B>> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            self.target.poll().unwrap();
            self.init.poll().unwrap();
            if let Some(r) = op.check() {
                return r;
            }
            assert!(
                Instant::now() < deadline,
                "operation {:?} did not finish",
                op.id()
            );
        }
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
            self.target.poll().unwrap();
            assert!(Instant::now() < deadline, "region stays busy");
        }
    }
}

#[test]
fn write_then_read_back() {
    for info in offers() {
        let p = pair(&info);
        let r = p
            .target
            .register(
                vec![0; 300_000],
                MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
            )
            .unwrap();
        // A small write and a large one (the providers' other path).
        for (off, len, fill) in [(100usize, 1000usize, 7u8), (4096, 250_000, 9)] {
            let mut op = p
                .init
                .write(vec![fill; len], p.to_target, r.remote_addr(off), r.key())
                .unwrap();
            let d = p.done(&mut op).unwrap();
            assert_eq!(d.buf, vec![fill; len]);
            let mut op = p
                .init
                .read(vec![0; len], p.to_target, r.remote_addr(off), r.key())
                .unwrap();
            let d = p.done(&mut op).unwrap();
            assert!(d.buf.iter().all(|&b| b == fill), "{}", info.provider());
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
            .register(vec![0; 64], MrAccess::REMOTE_WRITE)
            .unwrap();
        let mut op = p
            .init
            .writedata(vec![3; 16], 0xfeed, p.to_target, r.remote_addr(8), r.key())
            .unwrap();
        p.done(&mut op).unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut seen = None;
        while seen.is_none() && Instant::now() < deadline {
            p.target.poll().unwrap();
            seen = p.target.remote_write();
        }
        let w = seen.expect("remote write at the target");
        assert_eq!((w.len, w.data), (16, 0xfeed), "{}", info.provider());
        // The source is known only to offers with FI_SOURCE.
        if info.caps & FI_SOURCE != 0 {
            assert_eq!(w.src, Some(p.to_init), "{}", info.provider());
        }
        assert_eq!(p.target.remote_write(), None, "one event");
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
            .register(vec![0; 16], MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE)
            .unwrap();
        for i in 0..5u64 {
            let mut op = p
                .init
                .fetch_add_u64(p.to_target, r.remote_addr(8), r.key(), 3)
                .unwrap();
            let d = p.done(&mut op).unwrap();
            assert_eq!(d.fetched_u64(), Some(3 * i), "{}", info.provider());
        }
        let mut op = p
            .init
            .compare_swap_u64(p.to_target, r.remote_addr(8), r.key(), 15, 100)
            .unwrap();
        assert_eq!(p.done(&mut op).unwrap().fetched_u64(), Some(15));
        // A plain atomic hands its operands back and fetches nothing.
        let a = Atomic {
            op: atomic_op::FI_SUM,
            datatype: datatype::FI_UINT64,
            operand: 1u64.to_ne_bytes().to_vec(),
            ..Atomic::default()
        };
        let mut op = p
            .init
            .atomic(a, p.to_target, r.remote_addr(8), r.key())
            .unwrap();
        let d = p.done(&mut op).unwrap();
        assert_eq!(d.buf.operand, 1u64.to_ne_bytes());
        assert!(d.buf.result.is_empty());
        // An operand that is not whole elements is refused with the buffers.
        let bad = Atomic {
            op: atomic_op::FI_SUM,
            datatype: datatype::FI_UINT64,
            operand: vec![1; 3],
            ..Atomic::default()
        };
        let e = p
            .init
            .atomic(bad, p.to_target, r.remote_addr(8), r.key())
            .unwrap_err();
        assert_eq!(
            (e.kind(), e.buf.operand.len()),
            (ErrorKind::InvalidInput, 3)
        );
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
            .register(vec![0xee; 64], MrAccess::REMOTE_READ)
            .unwrap();
        let mut op = p
            .init
            .write(vec![1; 32], p.to_target, r.remote_addr(0), r.key())
            .unwrap();
        let e = p.done(&mut op).unwrap_err();
        assert_eq!(e.buf, Some(vec![1; 32]));
        assert_eq!(e.error.code(), errno::FI_EACCES, "{}", info.provider());
        assert_eq!(e.kind(), ErrorKind::PermissionDenied);
        // An atomic fails the same way and hands its operands back.
        let mut op = p
            .init
            .fetch_add_u64(p.to_target, r.remote_addr(0), r.key(), 1)
            .unwrap();
        let e = p.done(&mut op).unwrap_err();
        assert_eq!(e.buf.map(|a| a.operand), Some(1u64.to_ne_bytes().to_vec()));
        assert_eq!(e.error.code(), errno::FI_EACCES);
        // A read past the region's end (a local buffer larger than what is
        // registered) is refused at the target, with the buffer back.
        let mut op = p
            .init
            .read(vec![0; 65], p.to_target, r.remote_addr(0), r.key())
            .unwrap();
        let e = p.done(&mut op).unwrap_err();
        assert_eq!(
            e.buf.as_ref().map(Vec::len),
            Some(65),
            "{}",
            info.provider()
        );
        assert_eq!(
            e.kind(),
            ErrorKind::PermissionDenied,
            "{}: {}",
            info.provider(),
            e.error
        );
        assert_eq!(p.bytes(r), vec![0xee; 64]);
    }
}

#[test]
fn an_unregistered_region_is_out_of_reach() {
    for info in offers() {
        let p = pair(&info);
        let r = p
            .target
            .register(vec![5; 64], MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE)
            .unwrap();
        let (key, at) = (r.key(), r.remote_addr(0));
        assert_eq!(p.bytes(r), vec![5; 64]);
        let mut op = p.init.write(vec![1; 8], p.to_target, at, key).unwrap();
        let e = p.done(&mut op).unwrap_err();
        assert_eq!(e.buf, Some(vec![1; 8]));
        assert_eq!(
            e.error.code(),
            errno::FI_EKEYREJECTED,
            "{}",
            info.provider()
        );
    }
}

#[test]
fn channels_without_rma_refuse_one_sided_calls() {
    let info = offer("shm", FI_MSG).expect("shm offer");
    let ch = Channel::open(&info).unwrap();
    let (buf, e) = ch
        .register(vec![1; 8], MrAccess::REMOTE_WRITE)
        .unwrap_err()
        .into_parts();
    assert_eq!((buf, e.code()), (vec![1; 8], errno::FI_EOPNOTSUPP));
    let me = ch.insert(&ch.address().unwrap()).unwrap();
    let (buf, e) = ch.write(vec![2; 8], me, 0, 1).unwrap_err().into_parts();
    assert_eq!((buf, e.code()), (vec![2; 8], errno::FI_EOPNOTSUPP));
    let (buf, e) = ch.read(vec![3; 8], me, 0, 1).unwrap_err().into_parts();
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
            .register(
                vec![0; 1 << 20],
                MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
            )
            .unwrap();
        // Handles dropped at once hand their buffers to the channel.
        for i in 0..4 {
            let at = r.remote_addr(i << 18);
            drop(
                p.init
                    .write(vec![1; 1 << 18], p.to_target, at, r.key())
                    .unwrap(),
            );
            drop(
                p.init
                    .read(vec![0; 1 << 18], p.to_target, at, r.key())
                    .unwrap(),
            );
            drop(p.init.fetch_add_u64(p.to_target, at, r.key(), 1).unwrap());
        }
        // Let the target start some of them, then tear down mid-flight.
        p.target.poll().unwrap();
        p.init.poll().unwrap();
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

#[test]
fn writes_and_sends_in_a_batch_arrive_in_order_once_it_ends() {
    for info in offers() {
        let prov = info.provider().to_string();
        let p = pair(&info);
        let r = p
            .target
            .register(vec![0; 8 * 4096], MrAccess::REMOTE_WRITE)
            .unwrap();
        let mut first = p.target.recv(vec![0u8; 16]).unwrap();
        let mut second = p.target.recv(vec![0u8; 16]).unwrap();
        let batch = p.init.batch();
        let mut writes: Vec<_> = (0..8u8)
            .map(|i| {
                p.init
                    .write(
                        vec![i + 1; 4096],
                        p.to_target,
                        r.remote_addr(usize::from(i) * 4096),
                        r.key(),
                    )
                    .unwrap()
            })
            .collect();
        let mut held = p.init.send(b"held".to_vec(), p.to_target).unwrap();
        if prov == "tcp" {
            // tcp keeps a batch until it ends (or the initiator polls).
            let end = Instant::now() + Duration::from_millis(200);
            while Instant::now() < end {
                p.target.poll().unwrap();
                assert!(first.check().is_none(), "tcp sent a batch early");
            }
        }
        drop(batch);
        let mut plain = p.init.send(b"plain".to_vec(), p.to_target).unwrap();
        for w in &mut writes {
            p.done(w).unwrap();
        }
        p.done(&mut held).unwrap();
        p.done(&mut plain).unwrap();
        let a = p.done_at_target(&mut first);
        let b = p.done_at_target(&mut second);
        assert_eq!(&a.buf[..a.len], b"held", "{prov}");
        assert_eq!(&b.buf[..b.len], b"plain", "{prov}");
        let bytes = p.bytes(r);
        for (i, chunk) in bytes.chunks(4096).enumerate() {
            assert!(chunk.iter().all(|&x| x == i as u8 + 1), "{prov}: write {i}");
        }
    }
}

impl Pair {
    /// Drives both channels until the target's operation finishes.
    fn done_at_target<B: Send + 'static>(&self, op: &mut Op<'_, B>) -> Done<B> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            self.init.poll().unwrap();
            self.target.poll().unwrap();
            if let Some(r) = op.check() {
                return r.unwrap_or_else(|e| panic!("target operation failed: {}", e.error));
            }
            assert!(Instant::now() < deadline, "target operation did not finish");
        }
    }
}

/// True when `fd` becomes readable within `ms` milliseconds.
fn readable(fd: std::os::fd::BorrowedFd<'_>, ms: i32) -> bool {
    use std::os::fd::AsRawFd;
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the call's duration.
    unsafe { libc::poll(&mut p, 1, ms) == 1 }
}

#[test]
fn a_sleep_on_sleep_fd_after_trywait_wakes_when_a_message_arrives() {
    for info in offers() {
        let prov = info.provider().to_string();
        let mut init = Channel::open(&info).expect("initiator");
        let target = Channel::open(&info).expect("target");
        let to_target = init.insert(&target.address().unwrap()).unwrap();
        for round in 0..3u8 {
            let mut rx = target.recv(vec![0u8; 16]).unwrap();
            // The sender starts once the target is likely asleep (the first
            // round also makes the connection).
            let sender = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                let mut op = init.send(vec![round; 8], to_target).unwrap();
                let deadline = Instant::now() + Duration::from_secs(20);
                loop {
                    init.poll().unwrap();
                    if let Some(r) = op.check() {
                        r.unwrap();
                        break;
                    }
                    assert!(Instant::now() < deadline, "the send did not finish");
                }
                drop(op);
                init
            });
            let deadline = Instant::now() + Duration::from_secs(20);
            let got = loop {
                target.poll().unwrap();
                if let Some(r) = rx.check() {
                    break r.unwrap();
                }
                assert!(Instant::now() < deadline, "{prov}: nothing arrived");
                if target.trywait().is_ok() {
                    assert!(
                        readable(target.sleep_fd(), 10_000),
                        "{prov} round {round}: slept through an arrival"
                    );
                }
            };
            assert_eq!(&got.buf[..got.len], &[round; 8], "{prov}");
            init = sender.join().unwrap();
        }
        // Nothing exposed the queue's fd: with nothing to collect, it stays
        // quiet after a successful trywait.
        target.trywait().unwrap();
        assert!(
            !readable(target.sleep_fd(), 50),
            "{prov}: a quiet channel woke"
        );
    }
}
