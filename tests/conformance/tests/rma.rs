//! RMA, atomics, remote-event counters and triggered operations on every
//! offer with FI_RMA / FI_ATOMIC: data lands where it should, every
//! violation of key, access or bounds comes back as an error completion at
//! the initiator with the target's memory untouched, and the endpoint keeps
//! working afterwards.
#![allow(unsafe_code)]

use ofi_conformance::ofi::consts::*;
use ofi_conformance::ofi::{
    errno, AtomicKind, CntrAttr, Counter, Deferred, Domain, Info, IoVec, Ioc, MemoryRegion, MrAttr,
    RmaDir, RmaIoc, RmaIov,
};
use ofi_conformance::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

static NEXT_KEY: AtomicU64 = AtomicU64::new(0x5eed_0000);

/// A registered buffer and how a peer addresses it.
struct Region {
    buf: Vec<u8>,
    mr: MemoryRegion,
    virt: bool,
}

impl Region {
    fn new(domain: &Domain, info: &Info, len: usize, access: u64) -> Region {
        let mut buf = vec![0u8; len.max(1)];
        let attr = MrAttr {
            iov: vec![(buf.as_mut_ptr() as usize, buf.len())],
            access,
            requested_key: NEXT_KEY.fetch_add(1, Ordering::Relaxed),
            offset: 0,
        };
        // SAFETY: `buf` lives in the returned Region next to its registration
        // and is never reallocated.
        let mr = unsafe { domain.mr_reg(&attr) }.unwrap_or_else(|e| panic!("mr_reg: {e}"));
        Region {
            buf,
            mr,
            virt: info.domain_attr.mr_mode & mr_mode::FI_MR_VIRT_ADDR != 0,
        }
    }
    /// The remote address of byte `off`.
    fn addr(&self, off: usize) -> u64 {
        if self.virt {
            self.buf.as_ptr() as u64 + off as u64
        } else {
            off as u64
        }
    }
    fn key(&self) -> u64 {
        self.mr.key()
    }
}

fn one_ok(p: &Pair, ctx: usize, what: &str) {
    let (ca, _) = p.wait(1, 0, TIMEOUT);
    assert!(ca.err.is_empty(), "{what}: {}", errs(&ca));
    let e = ca
        .ok_ctx(ctx)
        .unwrap_or_else(|| panic!("{what}: no completion"));
    assert_ne!(
        e.flags & (FI_RMA | FI_ATOMIC),
        0,
        "{what}: flags {:#x}",
        e.flags
    );
}

fn one_err(p: &Pair, ctx: usize, what: &str) -> i32 {
    let (ca, _) = p.wait(1, 0, TIMEOUT);
    let e = ca.err_ctx(ctx).unwrap_or_else(|| {
        panic!(
            "{what}: no error completion (got {} successes)",
            ca.ok.len()
        )
    });
    e.err
}

conformance!(fn rma_write_then_read_back_every_size(info) {
    require(info, FI_RMA)?;
    let p = Pair::open(info, FI_RMA)?;
    for len in sizes_for(info, &SIZES) {
        let target = Region::new(&p.domain, info, len, FI_REMOTE_READ | FI_REMOTE_WRITE);
        let src = pattern(len as u64 + 7, len);
        // SAFETY: src outlives the wait below.
        unsafe { p.a.write(src.as_ptr(), len, p.fb, target.addr(0), target.key(), 11) }
            .unwrap_or_else(|e| panic!("write {len}: {e}"));
        one_ok(&p, 11, "write");
        assert_bytes_eq(&target.buf[..len], &src, "written region");
        let mut back = vec![0u8; len];
        // SAFETY: back outlives the wait below.
        unsafe { p.a.read(back.as_mut_ptr(), len, p.fb, target.addr(0), target.key(), 12) }
            .unwrap_or_else(|e| panic!("read {len}: {e}"));
        one_ok(&p, 12, "read");
        assert_bytes_eq(&back, &src, "read-back");
    }
    Ok(())
});

conformance!(fn rma_iov_lists_scatter_and_gather(info) {
    require(info, FI_RMA)?;
    if info.tx_attr.rma_iov_limit < 2 || info.tx_attr.iov_limit < 3 {
        return Err(Skip::limit("offer's iov limits are below 3 local / 2 remote"));
    }
    let p = Pair::open(info, FI_RMA)?;
    let target = Region::new(&p.domain, info, 9000, FI_REMOTE_READ | FI_REMOTE_WRITE);
    let parts = [pattern(1, 100), pattern(2, 5000), pattern(3, 1)];
    let iov: Vec<IoVec> = parts.iter().map(|x| IoVec::from_slice(x)).collect();
    let rma = [
        RmaIov { addr: target.addr(0), len: 3000, key: target.key() },
        RmaIov { addr: target.addr(4000), len: 2101, key: target.key() },
    ];
    let op = ofi_conformance::ofi::RmaOp {
        iov: &iov,
        desc: &[],
        addr: p.fb,
        rma_iov: &rma,
        data: 0,
        context: 21,
        flags: FI_COMPLETION,
        dir: RmaDir::Write,
    };
    // SAFETY: parts outlive the wait.
    unsafe { p.a.post_rma(&op) }.unwrap_or_else(|e| panic!("writemsg: {e}"));
    one_ok(&p, 21, "writemsg");
    let flat: Vec<u8> = parts.concat();
    assert_bytes_eq(&target.buf[..3000], &flat[..3000], "first remote range");
    assert_bytes_eq(&target.buf[4000..6101], &flat[3000..], "second remote range");
    assert!(target.buf[3000..4000].iter().all(|&b| b == 0), "gap untouched");
    Ok(())
});

conformance!(fn rma_writedata_reaches_the_target_cq(info) {
    require(info, FI_RMA)?;
    let p = Pair::open(info, FI_RMA)?;
    let target = Region::new(&p.domain, info, 64, FI_REMOTE_WRITE);
    let src = pattern(5, 64);
    // SAFETY: src outlives the wait.
    unsafe { p.a.writedata(src.as_ptr(), 64, 0xfeed, p.fb, target.addr(0), target.key(), 31) }
        .unwrap_or_else(|e| panic!("writedata: {e}"));
    let (ca, cb) = p.wait(1, 1, TIMEOUT);
    assert!(ca.ok_ctx(31).is_some(), "initiator: {}", errs(&ca));
    let e = cb.ok.first().unwrap_or_else(|| panic!("no target completion: {}", errs(&cb)));
    assert_eq!(e.flags & (FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA), FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA);
    assert_eq!(e.data, 0xfeed);
    assert_eq!(e.len, 64);
    assert_bytes_eq(&target.buf, &src, "region");
    Ok(())
});

conformance!(fn rma_violations_fail_at_the_initiator_and_leave_memory_alone(info) {
    require(info, FI_RMA)?;
    let p = Pair::open(info, FI_RMA)?;
    let wr = Region::new(&p.domain, info, 256, FI_REMOTE_WRITE);
    let rd = Region::new(&p.domain, info, 256, FI_REMOTE_READ);
    let src = pattern(9, 256);
    let mut sink = vec![0u8; 256];
    let cases: [(&str, &Region, u64, usize, u64, bool, i32); 7] = [
        ("unknown key", &wr, wr.addr(0), 16, wr.key() ^ 0x8000_0000_0000_0001, false, errno::FI_EKEYREJECTED),
        ("write without FI_REMOTE_WRITE", &rd, rd.addr(0), 16, rd.key(), false, errno::FI_EACCES),
        ("read without FI_REMOTE_READ", &wr, wr.addr(0), 16, wr.key(), true, errno::FI_EACCES),
        ("one byte past the end", &wr, wr.addr(1), 256, wr.key(), false, errno::FI_EACCES),
        ("one byte before the start", &wr, wr.addr(0).wrapping_sub(1), 16, wr.key(), false, errno::FI_EACCES),
        ("read past the end", &rd, rd.addr(250), 16, rd.key(), true, errno::FI_EACCES),
        ("address overflow", &wr, u64::MAX - 3, 16, wr.key(), false, errno::FI_EACCES),
    ];
    for (i, (what, region, addr, len, key, read, code)) in cases.into_iter().enumerate() {
        let before = region.buf.clone();
        let ctx = 100 + i;
        // SAFETY: src and sink outlive the waits.
        let posted = unsafe {
            if read {
                p.a.read(sink.as_mut_ptr(), len, p.fb, addr, key, ctx)
            } else {
                p.a.write(src.as_ptr(), len, p.fb, addr, key, ctx)
            }
        };
        posted.unwrap_or_else(|e| panic!("{what}: post refused locally: {e}"));
        let err = one_err(&p, ctx, what);
        assert_eq!(err, code, "{what}: error code");
        assert_eq!(region.buf, before, "{what}: target memory changed");
        assert!(sink.iter().all(|&b| b == 0), "{what}: bytes came back");
    }
    // The endpoint still works.
    // SAFETY: src outlives the wait.
    unsafe { p.a.write(src.as_ptr(), 256, p.fb, wr.addr(0), wr.key(), 200) }.unwrap();
    one_ok(&p, 200, "write after violations");
    assert_bytes_eq(&wr.buf, &src, "region after violations");
    Ok(())
});

conformance!(fn rma_a_closed_region_refuses_the_writes_it_served(info) {
    require(info, FI_RMA)?;
    let p = Pair::open(info, FI_RMA)?;
    let src = pattern(11, 64);
    let first = Region::new(&p.domain, info, 64, FI_REMOTE_WRITE);
    let (key, addr) = (first.key(), first.addr(0));
    // A stream of writes into one region: the target knows it by now.
    for ctx in [300, 301] {
        // SAFETY: src outlives the wait.
        unsafe { p.a.write(src.as_ptr(), 16, p.fb, addr, key, ctx) }.unwrap();
        one_ok(&p, ctx, "write before the close");
    }
    let Region { buf: old, mr, .. } = first;
    mr.close().map_err(|b| b.1).expect("close the region");
    let before = old.clone();
    // SAFETY: src outlives the wait.
    unsafe { p.a.write(src.as_ptr(), 16, p.fb, addr, key, 302) }.unwrap();
    assert_eq!(one_err(&p, 302, "write after the close"), errno::FI_EKEYREJECTED);
    assert_eq!(old, before, "the closed region's memory changed");
    // The key registered again (where the application chooses keys): the
    // new region takes the write, the old memory stays as it was.
    let mut buf = vec![0u8; 64];
    let attr = MrAttr {
        iov: vec![(buf.as_mut_ptr() as usize, buf.len())],
        access: FI_REMOTE_WRITE,
        requested_key: key,
        offset: 0,
    };
    // SAFETY: `buf` outlives the registration (dropped after `again`).
    let again = unsafe { p.domain.mr_reg(&attr) }.expect("register again");
    let raddr = if info.domain_attr.mr_mode & mr_mode::FI_MR_VIRT_ADDR != 0 {
        buf.as_ptr() as u64
    } else {
        0
    };
    // SAFETY: src outlives the wait.
    unsafe { p.a.write(src.as_ptr(), 16, p.fb, raddr, again.key(), 303) }.unwrap();
    one_ok(&p, 303, "write into the new region");
    assert_bytes_eq(&buf[..16], &src[..16], "new region");
    assert_eq!(old, before, "the closed region's memory changed");
    drop(again);
    Ok(())
});

conformance!(fn rma_inject_write_needs_no_completion(info) {
    require(info, FI_RMA)?;
    let p = Pair::open(info, FI_RMA)?;
    let target = Region::new(&p.domain, info, 128, FI_REMOTE_WRITE | FI_REMOTE_READ);
    let src = pattern(4, 128);
    retry(&[&p.a, &p.b], TIMEOUT, || p.a.inject_write(&src, p.fb, target.addr(0), target.key()))
        .unwrap_or_else(|e| panic!("inject_write: {e}"));
    // A read after the write sees it (FI_ORDER_RAW when advertised; else wait).
    let deadline = Instant::now() + TIMEOUT;
    while target.buf != src && Instant::now() < deadline {
        p.progress();
        std::thread::sleep(Duration::from_micros(50));
    }
    assert_bytes_eq(&target.buf, &src, "injected region");
    let (ca, _) = p.settle(Duration::from_millis(50));
    assert_eq!(ca.total(), 0, "inject produced a completion: {}", errs(&ca));
    Ok(())
});

conformance!(fn atomics_fetch_add_cswap_and_read_on_u64(info) {
    require(info, FI_ATOMIC)?;
    let p = Pair::open(info, FI_ATOMIC)?;
    let mut target = Region::new(&p.domain, info, 16, FI_REMOTE_READ | FI_REMOTE_WRITE);
    target.buf[..8].copy_from_slice(&40u64.to_ne_bytes());
    let (a, k) = (target.addr(0), target.key());
    let dt = datatype::FI_UINT64;
    assert!(p.a.query_atomic(dt, atomic_op::FI_SUM, FI_FETCH_ATOMIC).unwrap() >= 1);
    let two = 2u64.to_ne_bytes();
    let mut old = [0u8; 8];
    // SAFETY: operands and results outlive each wait.
    unsafe { p.a.fetch_atomic(two.as_ptr(), 1, old.as_mut_ptr(), p.fb, a, k, dt, atomic_op::FI_SUM, 1) }.unwrap();
    one_ok(&p, 1, "fetch-add");
    assert_eq!(u64::from_ne_bytes(old), 40);
    let (cmp, swap) = (42u64.to_ne_bytes(), 7u64.to_ne_bytes());
    // SAFETY: swap, cmp and old are 8-byte locals (one FI_UINT64 each) that
    // outlive the completion one_ok waits for.
    unsafe {
        p.a.compare_atomic(swap.as_ptr(), 1, cmp.as_ptr(), old.as_mut_ptr(), p.fb, a, k, dt, atomic_op::FI_CSWAP, 2)
    }
    .unwrap();
    one_ok(&p, 2, "cswap");
    assert_eq!(u64::from_ne_bytes(old), 42);
    // SAFETY: FI_ATOMIC_READ reads no operand (null is allowed); old, 8
    // bytes, outlives the completion one_ok waits for.
    unsafe { p.a.fetch_atomic(std::ptr::null(), 1, old.as_mut_ptr(), p.fb, a, k, dt, atomic_op::FI_ATOMIC_READ, 3) }
        .unwrap();
    one_ok(&p, 3, "atomic read");
    assert_eq!(u64::from_ne_bytes(old), 7);
    // An operand given to FI_ATOMIC_READ anyway is ignored.
    old = [0u8; 8];
    // SAFETY: two and old are 8-byte locals (one FI_UINT64 each) that
    // outlive the completion one_ok waits for.
    unsafe { p.a.fetch_atomic(two.as_ptr(), 1, old.as_mut_ptr(), p.fb, a, k, dt, atomic_op::FI_ATOMIC_READ, 5) }
        .unwrap();
    one_ok(&p, 5, "atomic read with an operand buffer");
    assert_eq!(u64::from_ne_bytes(old), 7);
    // A basic atomic, then a violation: no FI_REMOTE_WRITE on a read-only region.
    let ro = Region::new(&p.domain, info, 8, FI_REMOTE_READ);
    // SAFETY: two, the 8-byte operand (one FI_UINT64), outlives the error
    // completion one_err waits for.
    unsafe { p.a.atomic(two.as_ptr(), 1, p.fb, ro.addr(0), ro.key(), dt, atomic_op::FI_SUM, 4) }.unwrap();
    assert_eq!(one_err(&p, 4, "atomic on read-only region"), errno::FI_EACCES);
    assert_eq!(ro.buf, vec![0u8; 8]);
    // Unsupported combination refused locally.
    let e = p.a.query_atomic(datatype::FI_DOUBLE, atomic_op::FI_BOR, 0).unwrap_err();
    assert_eq!(e.code(), errno::FI_EOPNOTSUPP);
    Ok(())
});

conformance!(fn counters_count_rma_and_remote_events(info) {
    require(info, FI_RMA | FI_RMA_EVENT)?;
    require_rdm(info, "separate counters per endpoint")?;
    let (fabric, domain, av) = open_domain(info);
    let av = av.expect("an RDM offer has an AV");
    let cq_a = tagged_cq(&domain, wait_obj::FI_WAIT_NONE);
    let cq_b = tagged_cq(&domain, wait_obj::FI_WAIT_NONE);
    let wc = domain.cntr(&CntrAttr::default()).unwrap();
    let rc = domain.cntr(&CntrAttr::default()).unwrap();
    let remote = domain.cntr(&CntrAttr::default()).unwrap();
    let mr_cntr = domain.cntr(&CntrAttr::default()).unwrap();
    let a = domain.endpoint(info).unwrap();
    a.bind_cq(&cq_a, FI_TRANSMIT | FI_RECV).unwrap();
    a.bind_cntr(&wc, FI_WRITE).unwrap();
    a.bind_cntr(&rc, FI_READ).unwrap();
    a.bind_av(&av).unwrap();
    a.enable().unwrap();
    let b = domain.endpoint(info).unwrap();
    b.bind_cq(&cq_b, FI_TRANSMIT | FI_RECV).unwrap();
    b.bind_cntr(&remote, FI_REMOTE_WRITE).unwrap();
    b.bind_av(&av).unwrap();
    b.enable().unwrap();
    let fb = insert(&av, &b);
    let _fa = insert(&av, &a);
    let target = Region::new(&domain, info, 64, FI_REMOTE_WRITE | FI_REMOTE_READ);
    target.mr.bind_cntr(&mr_cntr, FI_REMOTE_WRITE).unwrap();
    let src = pattern(3, 64);
    let mut back = vec![0u8; 64];
    for i in 0..3usize {
        // SAFETY: src outlives the counter wait.
        retry(&[&a, &b], TIMEOUT, || unsafe { a.write(src.as_ptr(), 64, fb, target.addr(0), target.key(), i) }).unwrap();
    }
    // SAFETY: back outlives the counter wait.
    retry(&[&a, &b], TIMEOUT, || unsafe { a.read(back.as_mut_ptr(), 64, fb, target.addr(0), target.key(), 9) }).unwrap();
    wait_cntr(&[&wc, &rc], &[3, 1], &b);
    wait_cntr(&[&remote, &mr_cntr], &[3, 3], &a);
    assert_eq!(wc.readerr(), 0);
    assert_bytes_eq(&back, &src, "read-back");
    // A violation counts as an error on the write counter.
    // SAFETY: src outlives the wait.
    unsafe { a.write(src.as_ptr(), 8, fb, target.addr(0), target.key() ^ 1, 10) }.unwrap();
    let deadline = Instant::now() + TIMEOUT;
    while wc.readerr() == 0 && Instant::now() < deadline {
        b.progress();
    }
    assert_eq!(wc.readerr(), 1);
    drop((a, b, cq_a, cq_b, fabric));
    Ok(())
});

fn wait_cntr(c: &[&Counter], want: &[u64], other: &ofi_conformance::ofi::Endpoint) {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        other.progress();
        let got: Vec<u64> = c.iter().map(|c| c.read()).collect();
        if got.iter().zip(want).all(|(g, w)| g >= w) {
            assert_eq!(got, want, "counters overshot");
            return;
        }
        assert!(Instant::now() < deadline, "counters {got:?}, want {want:?}");
    }
}

conformance!(fn triggered_write_fires_when_the_counter_reaches_its_threshold(info) {
    require(info, FI_RMA | FI_TRIGGER)?;
    let p = Pair::open(info, FI_RMA | FI_TRIGGER)?;
    let trig = p.domain.cntr(&CntrAttr::default()).unwrap();
    let target = Region::new(&p.domain, info, 32, FI_REMOTE_WRITE);
    let src = pattern(8, 32);
    let op = Deferred::Rma {
        iov: vec![IoVec::from_slice(&src)],
        addr: p.fb,
        rma_iov: vec![RmaIov { addr: target.addr(0), len: 32, key: target.key() }],
        data: 0,
        context: 77,
        flags: FI_COMPLETION,
        dir: RmaDir::Write,
    };
    // SAFETY: src outlives the completion waited for below.
    unsafe { p.a.trigger(&trig, 2, op) }.unwrap();
    trig.add(1);
    let (ca, _) = p.settle(Duration::from_millis(100));
    assert_eq!(ca.total(), 0, "fired below the threshold");
    assert!(target.buf.iter().all(|&b| b == 0), "written below the threshold");
    trig.add(1);
    one_ok(&p, 77, "triggered write");
    assert_bytes_eq(&target.buf, &src, "triggered region");
    Ok(())
});

conformance!(fn concurrent_fetch_adds_from_several_endpoints_are_atomic(info) {
    require(info, FI_ATOMIC)?;
    require_rdm(info, "several initiators on one AV")?;
    const N: usize = 4;
    const EACH: u64 = 250;
    let g = Group::open(info, FI_ATOMIC, N + 1)?;
    let target = Region::new(&g.domain, info, 8, FI_REMOTE_READ | FI_REMOTE_WRITE);
    let (addr, key) = (target.addr(0), target.key());
    let t = g.addrs[N];
    std::thread::scope(|s| {
        for i in 0..N {
            let ep = &g.eps[i];
            let cq = &g.cqs[i];
            s.spawn(move || {
                let one = 1u64.to_ne_bytes();
                let mut old = [0u8; 8];
                for n in 0..EACH {
                    // SAFETY: operands outlive the completion read below.
                    retry(&[ep], TIMEOUT, || unsafe {
                        ep.fetch_atomic(one.as_ptr(), 1, old.as_mut_ptr(), t, addr, key, datatype::FI_UINT64, atomic_op::FI_SUM, n as usize)
                    })
                    .unwrap();
                    let c = wait_for(cq, 1, TIMEOUT);
                    assert_eq!(c.ok.len(), 1, "initiator {i}: {}", errs(&c));
                }
            });
        }
        // The target's own progress (manual progress providers need it).
        let stop = Instant::now() + TIMEOUT;
        while u64::from_ne_bytes(target.buf[..8].try_into().unwrap()) < N as u64 * EACH && Instant::now() < stop {
            g.eps[N].progress();
            std::thread::yield_now();
        }
    });
    assert_eq!(u64::from_ne_bytes(target.buf[..8].try_into().unwrap()), N as u64 * EACH);
    Ok(())
});

conformance!(fn triggered_send_and_receive_wait_for_their_counters(info) {
    require(info, FI_MSG | FI_TRIGGER)?;
    let p = Pair::open(info, FI_MSG | FI_TRIGGER)?;
    let tc = p.domain.cntr(&CntrAttr::default()).unwrap();
    let rc = p.domain.cntr(&CntrAttr::default()).unwrap();
    let src = pattern(6, 100);
    let mut dst = vec![0u8; 100];
    let recv = Deferred::Recv {
        iov: vec![IoVec::from_mut(&mut dst)],
        src: p.fa,
        tag: 0,
        ignore: 0,
        context: 2,
        flags: FI_COMPLETION,
        tagged: false,
    };
    let send = Deferred::Send {
        iov: vec![IoVec::from_slice(&src)],
        dest: p.fb,
        tag: 0,
        data: 0,
        context: 1,
        flags: FI_COMPLETION,
        tagged: false,
    };
    // SAFETY: src and dst outlive the completions waited for below.
    unsafe { p.b.trigger(&rc, 1, recv) }.unwrap();
    // SAFETY: src (100 bytes, the send's iov) outlives the completion
    // waited for below.
    unsafe { p.a.trigger(&tc, 3, send) }.unwrap();
    tc.add(2);
    let (ca, cb) = p.settle(Duration::from_millis(100));
    assert_eq!(ca.total() + cb.total(), 0, "fired early: {} / {}", errs(&ca), errs(&cb));
    rc.set(5);
    tc.add(1);
    let (ca, cb) = p.wait(1, 1, TIMEOUT);
    assert!(ca.ok_ctx(1).is_some(), "{}", errs(&ca));
    assert_recv(cb.ok_ctx(2).expect("triggered receive"), 2, 100, false);
    assert_bytes_eq(&dst, &src, "triggered message");
    Ok(())
});

conformance!(fn triggered_inject_operations_send_the_bytes_of_the_call(info) {
    // FI_INJECT: the buffer is the caller's again when the call returns,
    // even though the operation waits for its counter; what goes out is
    // what the buffer held at the call.
    require(info, FI_MSG | FI_RMA | FI_TRIGGER)?;
    let p = Pair::open(info, FI_MSG | FI_RMA | FI_TRIGGER)?;
    let trig = p.domain.cntr(&CntrAttr::default()).unwrap();
    let target = Region::new(&p.domain, info, 16, FI_REMOTE_WRITE);
    let mut msg = pattern(3, 16);
    let mut data = pattern(4, 16);
    let (want_msg, want_data) = (msg.clone(), data.clone());
    let mut dst = vec![0u8; 16];
    // SAFETY: dst outlives the receive, which completes below.
    unsafe { p.b.recv(dst.as_mut_ptr(), 16, FI_ADDR_UNSPEC, 9) }.unwrap();
    let send = Deferred::Send {
        iov: vec![IoVec::from_slice(&msg)],
        dest: p.fb,
        tag: 0,
        data: 0,
        context: 7,
        flags: FI_INJECT | FI_COMPLETION,
        tagged: false,
    };
    let write = Deferred::Rma {
        iov: vec![IoVec::from_slice(&data)],
        addr: p.fb,
        rma_iov: vec![RmaIov { addr: target.addr(0), len: 16, key: target.key() }],
        data: 0,
        context: 8,
        flags: FI_INJECT | FI_COMPLETION,
        dir: RmaDir::Write,
    };
    // SAFETY: FI_INJECT: the sources are read before the calls return.
    unsafe { p.a.trigger(&trig, 1, send) }.unwrap();
    // SAFETY: FI_INJECT: data, the write's source, is read before the call
    // returns, and is alive during it.
    unsafe { p.a.trigger(&trig, 1, write) }.unwrap();
    msg.fill(0xee);
    data.fill(0xdd);
    trig.add(1);
    let (ca, cb) = p.wait(2, 1, TIMEOUT);
    assert!(ca.ok_ctx(7).is_some() && ca.ok_ctx(8).is_some(), "{}", errs(&ca));
    assert_recv(cb.ok_ctx(9).expect("receive"), 9, 16, false);
    assert_bytes_eq(&dst, &want_msg, "triggered FI_INJECT send");
    assert_bytes_eq(&target.buf, &want_data, "triggered FI_INJECT write");
    Ok(())
});

conformance!(fn triggered_inject_atomic_applies_the_operands_of_the_call(info) {
    // As above for an atomic: the operands are copied at the call.
    require(info, FI_ATOMIC | FI_TRIGGER)?;
    let p = Pair::open(info, FI_ATOMIC | FI_TRIGGER)?;
    let trig = p.domain.cntr(&CntrAttr::default()).unwrap();
    let mut target = Region::new(&p.domain, info, 16, FI_REMOTE_WRITE);
    target.buf[..8].copy_from_slice(&40u64.to_ne_bytes());
    target.buf[8..].copy_from_slice(&100u64.to_ne_bytes());
    let mut operand = [0u8; 16];
    operand[..8].copy_from_slice(&3u64.to_ne_bytes());
    operand[8..].copy_from_slice(&4u64.to_ne_bytes());
    let sum = Deferred::Atomic {
        kind: AtomicKind::Basic,
        op: atomic_op::FI_SUM,
        datatype: datatype::FI_UINT64,
        operand: vec![Ioc { addr: operand.as_ptr() as usize, count: 2 }],
        compare: Vec::new(),
        result: Vec::new(),
        addr: p.fb,
        rma_ioc: vec![RmaIoc { addr: target.addr(0), count: 2, key: target.key() }],
        context: 11,
        flags: FI_INJECT | FI_COMPLETION,
    };
    // SAFETY: FI_INJECT: the operands are read before the call returns.
    unsafe { p.a.trigger(&trig, 1, sum) }.unwrap();
    operand.fill(0x77);
    trig.add(1);
    one_ok(&p, 11, "triggered FI_INJECT atomic");
    let deadline = Instant::now() + TIMEOUT;
    let read = |b: &[u8]| u64::from_ne_bytes(b.try_into().unwrap());
    while read(&target.buf[..8]) == 40 && Instant::now() < deadline {
        p.progress();
        std::thread::sleep(Duration::from_micros(50));
    }
    assert_eq!((read(&target.buf[..8]), read(&target.buf[8..])), (43, 104));
    Ok(())
});

conformance!(fn atomic_violations_leave_the_target_alone(info) {
    require(info, FI_ATOMIC)?;
    let p = Pair::open(info, FI_ATOMIC)?;
    let mut target = Region::new(&p.domain, info, 16, FI_REMOTE_READ | FI_REMOTE_WRITE);
    target.buf.copy_from_slice(&[0x5a; 16]);
    let dt = datatype::FI_UINT64;
    let two = 2u64.to_ne_bytes();
    let mut old = [0u8; 8];
    let cases: [(&str, u64, u64, i32); 3] = [
        ("unknown key", target.addr(0), target.key() ^ 0x4000_0000_0000_0001, errno::FI_EKEYREJECTED),
        ("past the end", target.addr(9), target.key(), errno::FI_EACCES),
        ("before the start", target.addr(0).wrapping_sub(8), target.key(), errno::FI_EACCES),
    ];
    for (i, (what, addr, key, code)) in cases.into_iter().enumerate() {
        // SAFETY: operand and result outlive the completion.
        unsafe { p.a.fetch_atomic(two.as_ptr(), 1, old.as_mut_ptr(), p.fb, addr, key, dt, atomic_op::FI_SUM, 50 + i) }.unwrap();
        assert_eq!(one_err(&p, 50 + i, what), code, "{what}");
        assert_eq!(target.buf, vec![0x5a; 16], "{what}: target changed");
        assert_eq!(old, [0u8; 8], "{what}: a result came back");
    }
    // SAFETY: two and old are 8-byte locals (one FI_UINT64 each) that
    // outlive the completion one_ok waits for.
    unsafe { p.a.fetch_atomic(two.as_ptr(), 1, old.as_mut_ptr(), p.fb, target.addr(8), target.key(), dt, atomic_op::FI_SUM, 60) }.unwrap();
    one_ok(&p, 60, "atomic after violations");
    assert_eq!(old, [0x5a; 8]);
    Ok(())
});
