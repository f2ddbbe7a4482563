//! Completion semantics: FI_DELIVERY_COMPLETE sends complete only once the
//! data is in the receiver's buffer, FI_FENCE holds an operation until
//! everything before it has completed, and the ordering bits an offer
//! advertises hold (a read issued right after a write sees the write).
#![allow(unsafe_code)]

use ofi_conformance::ofi::consts::*;
use ofi_conformance::ofi::{errno, IoVec, MrAttr, RmaIov, RmaOp, SendOp};
use ofi_conformance::*;
use std::time::{Duration, Instant};

conformance!(fn delivery_complete_send_waits_for_the_receiver(info) {
    require(info, FI_MSG)?;
    let p = Pair::open(info, FI_MSG)?;
    for len in sizes_for(info, &[8, 4096, 70_000]) {
        let src = pattern(len as u64, len);
        let iov = [IoVec::from_slice(&src)];
        let op = SendOp {
            iov: &iov,
            desc: &[],
            dest: p.fb,
            tag: 0,
            data: 0,
            context: 1,
            flags: FI_COMPLETION | FI_DELIVERY_COMPLETE,
            tagged: false,
        };
        // SAFETY: src outlives the completion.
        retry(&[&p.a, &p.b], TIMEOUT, || unsafe { p.a.post_send(&op) }).unwrap();
        // No receive is posted yet: the send must not complete.
        let (ca, _) = p.settle(Duration::from_millis(100));
        assert_eq!(ca.total(), 0, "{len} B: completed before any receive was posted: {}", errs(&ca));
        let mut dst = vec![0u8; len];
        // SAFETY: dst outlives the completion.
        unsafe { p.b.recv(dst.as_mut_ptr(), len, p.fa, 2) }.unwrap();
        let (ca, cb) = p.wait(1, 1, TIMEOUT);
        assert!(ca.ok_ctx(1).is_some(), "{len} B: send: {}", errs(&ca));
        assert_recv(cb.ok_ctx(2).expect("receive completion"), 2, len, false);
        assert_bytes_eq(&dst, &src, "delivered");
    }
    Ok(())
});

conformance!(fn fenced_operation_waits_for_earlier_ones(info) {
    require(info, FI_MSG | FI_FENCE)?;
    let p = Pair::open(info, FI_MSG | FI_FENCE)?;
    // A large send whose receive is not posted stays outstanding.
    let big = pattern(1, 1 << 20);
    let iov = [IoVec::from_slice(&big)];
    let first = SendOp {
        iov: &iov,
        desc: &[],
        dest: p.fb,
        tag: 0,
        data: 0,
        context: 10,
        flags: FI_COMPLETION | FI_DELIVERY_COMPLETE,
        tagged: false,
    };
    // SAFETY: big outlives the completion.
    retry(&[&p.a, &p.b], TIMEOUT, || unsafe { p.a.post_send(&first) }).unwrap();
    let small = [7u8; 8];
    let siov = [IoVec::from_slice(&small)];
    let fenced = SendOp { iov: &siov, context: 11, flags: FI_COMPLETION | FI_FENCE, ..first };
    // The fenced send may be refused with FI_EAGAIN (retry after progress)
    // or accepted, but it must not complete before the first send has.
    let mut posted = false;
    let mut order: Vec<usize> = Vec::new();
    let step = |posted: &mut bool, order: &mut Vec<usize>| {
        if !*posted {
            // SAFETY: small outlives the completion.
            match unsafe { p.a.post_send(&fenced) } {
                Ok(()) => *posted = true,
                Err(e) if e.is_again() => {}
                Err(e) => panic!("fenced send: {e}"),
            }
        }
        let mut got = Completions::default();
        poll_cq(&p.cq_a, &mut got);
        assert!(got.err.is_empty(), "{}", errs(&got));
        order.extend(got.ok.iter().map(|e| e.op_context));
        p.b.progress();
    };
    let until = Instant::now() + Duration::from_millis(100);
    while Instant::now() < until {
        step(&mut posted, &mut order);
    }
    assert!(order.is_empty(), "completed while the first send was undelivered: {order:?}");
    let mut dst = vec![0u8; 1 << 20];
    let mut dst2 = [0u8; 8];
    // SAFETY: the buffers outlive the receives' completions (waited below).
    unsafe { p.b.recv(dst.as_mut_ptr(), dst.len(), p.fa, 20) }.unwrap();
    // SAFETY: as above.
    unsafe { p.b.recv(dst2.as_mut_ptr(), 8, p.fa, 21) }.unwrap();
    let deadline = Instant::now() + TIMEOUT;
    while order.len() < 2 {
        assert!(Instant::now() < deadline, "sends never completed: {order:?}");
        step(&mut posted, &mut order);
    }
    assert_eq!(order, vec![10, 11], "the fenced send completed before the first");
    let (_, cb) = p.wait(0, 2, TIMEOUT);
    assert_eq!(cb.ok.len(), 2, "{}", errs(&cb));
    assert_eq!(dst, big);
    assert_eq!(dst2, small);
    Ok(())
});

conformance!(fn read_right_after_write_sees_it_when_raw_ordered(info) {
    require(info, FI_RMA)?;
    if info.tx_attr.msg_order & order::FI_ORDER_RAW == 0 {
        return Err(Skip::limit("offer does not advertise FI_ORDER_RAW"));
    }
    let p = Pair::open(info, FI_RMA)?;
    let mut target = vec![0u8; 4096];
    // SAFETY: target outlives the registration.
    let mr = unsafe {
        p.domain.mr_reg(&MrAttr {
            iov: vec![(target.as_mut_ptr() as usize, target.len())],
            access: FI_REMOTE_READ | FI_REMOTE_WRITE,
            requested_key: 0x0dd,
            offset: 0,
        })
    }
    .unwrap();
    let virt = info.domain_attr.mr_mode & mr_mode::FI_MR_VIRT_ADDR != 0;
    let raddr = if virt { target.as_ptr() as u64 } else { 0 };
    for round in 0..20u64 {
        let src = pattern(round, 4096);
        let mut back = vec![0u8; 4096];
        let siov = [IoVec::from_slice(&src)];
        let biov = [IoVec::from_mut(&mut back)];
        let rma = [RmaIov { addr: raddr, len: 4096, key: mr.key() }];
        let w = RmaOp { iov: &siov, desc: &[], addr: p.fb, rma_iov: &rma, data: 0, context: 1, flags: FI_COMPLETION, read: false };
        let r = RmaOp { iov: &biov, context: 2, read: true, ..w };
        // SAFETY: src and back outlive the completions.
        retry(&[&p.a, &p.b], TIMEOUT, || unsafe { p.a.post_rma(&w) }).unwrap();
        // SAFETY: as above.
        retry(&[&p.a, &p.b], TIMEOUT, || unsafe { p.a.post_rma(&r) }).unwrap();
        let (ca, _) = p.wait(2, 0, TIMEOUT);
        assert_eq!(ca.ok.len(), 2, "round {round}: {}", errs(&ca));
        assert_bytes_eq(&back, &src, "read after write");
    }
    drop(mr);
    Ok(())
});

conformance!(fn commit_complete_is_refused_unless_advertised(info) {
    require(info, FI_RMA)?;
    if info.tx_attr.op_flags & FI_COMMIT_COMPLETE != 0 {
        return Err(Skip::limit("offer advertises FI_COMMIT_COMPLETE"));
    }
    let p = Pair::open(info, FI_RMA)?;
    let src = [1u8; 8];
    let iov = [IoVec::from_slice(&src)];
    let rma = [RmaIov { addr: 0, len: 8, key: 1 }];
    let w = RmaOp { iov: &iov, desc: &[], addr: p.fb, rma_iov: &rma, data: 0, context: 1, flags: FI_COMMIT_COMPLETE, read: false };
    // SAFETY: refused before anything is posted.
    let e = unsafe { p.a.post_rma(&w) }.unwrap_err();
    assert_eq!(e.code(), errno::FI_EOPNOTSUPP);
    Ok(())
});
