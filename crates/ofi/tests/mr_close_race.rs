//! Closing a memory region while a peer streams RMA writes into it: once
//! `MemoryRegion::close` returns `Ok` (or a drop returns), no byte of any
//! write lands in the memory any more, and the writes after it fail with an
//! error completion. Over tcp with FI_PROGRESS_AUTO (its progress thread
//! copies the data in) and over shm (a target thread drives progress).
#![allow(unsafe_code)]

use ofi::consts::*;
use ofi::*;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

const LEN: usize = 1 << 20;
const CHUNK: usize = 256 << 10;
const LIMIT: Duration = Duration::from_secs(20);

struct Pair {
    a: Endpoint,
    b: Endpoint,
    cq_a: CompletionQueue,
    cq_b: CompletionQueue,
    dest: u64,
    virt: bool,
    _av: AddressVector,
    domain: Domain,
    _fabric: Fabric,
}

fn open(prov: &str) -> Pair {
    ofi::init();
    let mut h = Info::hints();
    h.caps = FI_MSG | FI_RMA;
    h.ep_attr.ep_type = ep_type::FI_EP_RDM;
    h.fabric_attr.prov_name = Some(prov.into());
    let (node, flags) = if prov == "tcp" {
        h.domain_attr.data_progress = progress::FI_PROGRESS_AUTO;
        (Some("127.0.0.1"), FI_SOURCE)
    } else {
        (None, 0)
    };
    let info = ofi::getinfo(FI_VERSION_CURRENT, node, None, flags, Some(&h))
        .expect("getinfo")
        .into_iter()
        .find(|i| i.provider() == prov)
        .expect("an offer");
    if prov == "tcp" {
        assert_eq!(
            info.domain_attr.data_progress,
            progress::FI_PROGRESS_AUTO,
            "tcp offers auto progress"
        );
    }
    let fabric = Fabric::open(&info.fabric_attr).expect("fabric");
    let domain = fabric.domain(&info).expect("domain");
    let av = domain.av(&AvAttr::default()).expect("av");
    let cq = || {
        domain
            .cq(&CqAttr {
                format: cq_format::FI_CQ_FORMAT_TAGGED,
                ..Default::default()
            })
            .expect("cq")
    };
    let (cq_a, cq_b) = (cq(), cq());
    let ep = |cq: &CompletionQueue| {
        let e = domain.endpoint(&info).expect("endpoint");
        e.bind_cq(cq, FI_TRANSMIT | FI_RECV).expect("bind cq");
        e.bind_av(&av).expect("bind av");
        e.enable().expect("enable");
        e
    };
    let (a, b) = (ep(&cq_a), ep(&cq_b));
    let dest = av.insert_one(&b.getname().expect("name")).expect("insert");
    Pair {
        a,
        b,
        cq_a,
        cq_b,
        dest,
        virt: info.domain_attr.mr_mode & mr_mode::FI_MR_VIRT_ADDR != 0,
        _av: av,
        domain,
        _fabric: fabric,
    }
}

/// How the test lets go of the region.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Let {
    Close,
    Drop,
}

fn race(prov: &str, how: Let) {
    let p = Arc::new(open(prov));
    let target = vec![0u8; LEN].into_boxed_slice();
    let base = Box::into_raw(target).cast::<u8>();
    let attr = MrAttr {
        iov: vec![(base as usize, LEN)],
        access: FI_REMOTE_WRITE | FI_REMOTE_READ,
        requested_key: 0x5eed,
        offset: 0,
    };
    // SAFETY: `base` stays allocated until the end of this test, after the
    // region is closed and every thread has stopped.
    let mr = unsafe { p.domain.mr_reg(&attr) }.expect("mr_reg");
    let key = mr.key();
    let raddr = if p.virt { base as u64 } else { 0 };

    let stop = Arc::new(AtomicBool::new(false));
    let (done, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    // The target side's progress (shm has no thread of its own).
    let target_thread = {
        let (p, stop) = (p.clone(), stop.clone());
        thread::spawn(move || {
            let mut e = [CqTaggedEntry::default(); 8];
            while !stop.load(Ordering::Relaxed) {
                let _ = p.cq_b.read(&mut e);
                p.b.progress();
            }
        })
    };
    // The initiator: writes of 0x5A bytes, four in flight, over and over.
    let writer = {
        let (p, stop, done, failed) = (p.clone(), stop.clone(), done.clone(), failed.clone());
        thread::spawn(move || {
            let src = vec![0x5Au8; CHUNK];
            let mut inflight = 0usize;
            let mut next = 0usize;
            let mut e = [CqTaggedEntry::default(); 8];
            while !stop.load(Ordering::Relaxed) {
                while inflight < 4 {
                    let off = (next % (LEN / CHUNK)) * CHUNK;
                    // SAFETY: `src` outlives every write: the thread drains
                    // its completions before it returns.
                    match unsafe {
                        p.a.write(src.as_ptr(), CHUNK, p.dest, raddr + off as u64, key, 1)
                    } {
                        Ok(()) => {
                            inflight += 1;
                            next += 1;
                        }
                        Err(e) if e.is_again() => break,
                        Err(e) => panic!("fi_write: {e}"),
                    }
                }
                match p.cq_a.read(&mut e) {
                    Ok(n) => {
                        inflight -= n;
                        done.fetch_add(n, Ordering::Relaxed);
                    }
                    Err(e) if e.is_again() => {}
                    Err(e) if e.code() == errno::FI_EAVAIL => {
                        let err = p.cq_a.readerr().expect("readerr");
                        assert_eq!(err.err, errno::FI_EKEYREJECTED, "error completion");
                        inflight -= 1;
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => panic!("fi_cq_read: {e}"),
                }
            }
            let deadline = Instant::now() + LIMIT;
            while inflight > 0 && Instant::now() < deadline {
                match p.cq_a.read(&mut e) {
                    Ok(n) => inflight -= n,
                    Err(e) if e.code() == errno::FI_EAVAIL => {
                        let _ = p.cq_a.readerr();
                        inflight -= 1;
                    }
                    Err(_) => {}
                }
            }
        })
    };

    // Let writes land first, so that the close meets them mid-stream.
    let deadline = Instant::now() + LIMIT;
    while done.load(Ordering::Relaxed) < 8 {
        assert!(Instant::now() < deadline, "no write completed");
        thread::sleep(Duration::from_millis(1));
    }
    match how {
        Let::Close => {
            let mut mr = mr;
            let mut tries = 0;
            while let Err(b) = mr.close() {
                let (back, e) = *b;
                assert_eq!(e.code(), errno::FI_EBUSY, "{e}");
                tries += 1;
                assert!(tries < 10, "the region stays busy: {e}");
                mr = back;
            }
        }
        Let::Drop => drop(mr),
    }
    // The memory is ours again: mark it, then let the stream go on.
    // SAFETY: after the close no provider writes it (what is tested).
    unsafe { std::ptr::write_bytes(base, 0xEE, LEN) };
    let (before_ok, before_failed) = (done.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    let deadline = Instant::now() + LIMIT;
    while failed.load(Ordering::Relaxed) < before_failed + 16 {
        assert!(
            Instant::now() < deadline,
            "writes after the close did not fail ({} completed since)",
            done.load(Ordering::Relaxed) - before_ok
        );
        thread::sleep(Duration::from_millis(1));
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().expect("writer");
    target_thread.join().expect("target progress");
    // SAFETY: every thread has stopped; base holds LEN bytes.
    let bytes = unsafe { std::slice::from_raw_parts(base, LEN) };
    let landed = bytes.iter().filter(|&&b| b != 0xEE).count();
    // SAFETY: allocated above as a boxed slice of LEN bytes.
    drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(base, LEN)) });
    assert_eq!(
        landed, 0,
        "{prov} ({how:?}): {landed} bytes were written into the region after it was closed"
    );
}

#[test]
fn tcp_auto_progress_close_waits_for_running_writes() {
    race("tcp", Let::Close);
}

#[test]
fn tcp_auto_progress_drop_waits_for_running_writes() {
    race("tcp", Let::Drop);
}

#[test]
fn shm_close_waits_for_running_writes() {
    race("shm", Let::Close);
}

#[test]
fn shm_drop_waits_for_running_writes() {
    race("shm", Let::Drop);
}
