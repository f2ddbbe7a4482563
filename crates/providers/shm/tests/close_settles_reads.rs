//! Closing an endpoint with a read still unanswered by a live target: the
//! target writes the read's bytes straight into this process's buffer, so
//! the close must not return (and let the buffer be freed) before the
//! answer came or the target is known dead. The target is stopped
//! (SIGSTOP) before it sees the read and resumed only after longer than
//! the five seconds the close used to wait before giving up: the close
//! returns after the resume, and the buffer holds the target's bytes.
#![allow(unsafe_code)]

mod common;

use common::child::*;
use common::rdm::*;
use ofi_core::consts::*;
use ofi_core::util::mr::MrAttr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const LEN: usize = 64 << 10;
const STEP: Duration = Duration::from_secs(30);
/// Longer than the bound the close had (5 s).
const STOPPED: Duration = Duration::from_secs(6);

fn pattern(i: usize) -> u8 {
    (i * 7 + 3) as u8
}

/// Child role "target": a registered region holding the pattern, served
/// until the parent closes stdin's line QUIT (or 120 s).
fn role_target() {
    let info = shm_offer(FI_RMA, None);
    let r = Rdm::open(&info, 0);
    let region: Vec<u8> = (0..LEN).map(pattern).collect();
    let attr = MrAttr {
        iov: vec![(region.as_ptr() as usize, LEN)],
        access: FI_REMOTE_READ,
        ..Default::default()
    };
    // SAFETY: the region outlives its registration (dropped after mr).
    let mr = unsafe { r.domain.mr_reg(&attr) }.expect("mr_reg");
    let addr = if virt_addr(&info) {
        region.as_ptr() as u64
    } else {
        0
    };
    tell(&format!(
        "ADDR {} {} {}",
        hex(&r.ep.getname().expect("getname")),
        addr,
        mr.key()
    ));
    let quit = Arc::new(AtomicBool::new(false));
    let q = quit.clone();
    std::thread::spawn(move || {
        listen("QUIT");
        q.store(true, Ordering::Release);
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut done = Vec::new();
    while !quit.load(Ordering::Acquire) && Instant::now() < deadline {
        done.clear();
        poll(&r.cq, &mut done);
    }
    drop(mr);
    drop(r);
}

#[test]
fn close_waits_for_a_live_targets_read_answer() {
    if role().as_deref() == Some("target") {
        child_main(role_target);
    }
    let mut t = Kid::spawn(
        "target",
        self_cmd("close_waits_for_a_live_targets_read_answer", "target"),
    );
    let line = t.expect("ADDR ", STEP);
    let mut f = line.split(' ');
    let name = unhex(f.next().expect("name"));
    let raddr: u64 = f.next().expect("addr").parse().expect("addr");
    let key: u64 = f.next().expect("key").parse().expect("key");

    let r = Rdm::open(&shm_offer(FI_RMA, None), 0);
    let peer = r.av.insert_one(&name).expect("insert target");
    let mut buf = vec![0u8; LEN];
    // The target stops (every thread of it) before it can see the read.
    t.stop();
    // SAFETY: buf outlives the endpoint: the endpoint is closed (below)
    // before buf is read or dropped, and the close returns only once the
    // read is answered (what this test checks).
    unsafe { r.ep.read(buf.as_mut_ptr(), LEN, peer, raddr, key, 7) }.expect("read");
    let Rdm {
        ep,
        av,
        cq,
        eq,
        domain,
        fabric,
    } = r;
    let resumed = Arc::new(AtomicBool::new(false));
    let closed_after_resume = Arc::new(AtomicBool::new(false));
    let closed = Arc::new(AtomicBool::new(false));
    let closer = {
        let (resumed, after, closed) =
            (resumed.clone(), closed_after_resume.clone(), closed.clone());
        std::thread::spawn(move || {
            drop(ep);
            after.store(resumed.load(Ordering::Acquire), Ordering::Release);
            closed.store(true, Ordering::Release);
        })
    };
    std::thread::sleep(STOPPED);
    let early = closed.load(Ordering::Acquire);
    resumed.store(true, Ordering::Release);
    t.signal(libc::SIGCONT);
    let deadline = Instant::now() + STEP;
    while !closed.load(Ordering::Acquire) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        !early && closed_after_resume.load(Ordering::Acquire),
        "the close returned while a live target had not answered the read"
    );
    closer.join().expect("closer thread");
    assert!(
        buf.iter().enumerate().all(|(i, &b)| b == pattern(i)),
        "the read's buffer does not hold the target's bytes"
    );
    t.say("QUIT");
    drop((av, cq, eq, domain, fabric));
}
