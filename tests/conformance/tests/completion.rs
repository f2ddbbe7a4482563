//! Completion semantics: FI_MATCH_COMPLETE sends complete only once the
//! data is in the receiver's buffer; FI_DELIVERY_COMPLETE sends once the
//! receiver has the message (tcp and udp: an eager one buffered with no
//! receive posted; shm and hybrid complete it only once matched, which is
//! stronger); FI_FENCE holds an operation until everything before it has
//! completed, and the ordering bits an offer advertises hold (a read
//! issued right after a write sees the write).
#![allow(unsafe_code)]

use ofi_conformance::ofi::consts::*;
use ofi_conformance::ofi::{
    errno, AtomicKind, AtomicOp, IoVec, Ioc, MrAttr, RmaDir, RmaIoc, RmaIov, RmaOp, SendOp,
};
use ofi_conformance::*;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

conformance!(fn match_complete_send_waits_for_the_receiver(info) {
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
            flags: FI_COMPLETION | FI_MATCH_COMPLETE,
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

conformance!(fn delivery_complete_send_completes_once_the_peer_has_it(info) {
    require(info, FI_MSG)?;
    let p = Pair::open(info, FI_MSG)?;
    // Where the receiver buffers an unexpected eager message and says so.
    let buffered = matches!(info.provider(), "tcp" | "udp");
    for len in sizes_for(info, &[8, 4096]) {
        let src = pattern(len as u64 + 3, len);
        let iov = [IoVec::from_slice(&src)];
        let op = SendOp {
            iov: &iov,
            desc: &[],
            dest: p.fb,
            tag: 0,
            data: 0,
            context: 3,
            flags: FI_COMPLETION | FI_DELIVERY_COMPLETE,
            tagged: false,
        };
        // SAFETY: src outlives the completion.
        retry(&[&p.a, &p.b], TIMEOUT, || unsafe { p.a.post_send(&op) }).unwrap();
        let early = if buffered {
            // The peer progresses and buffers it: the send completes with
            // no receive posted (a peer that posts its receive only after
            // hearing back must not deadlock).
            let (ca, _) = p.wait(1, 0, TIMEOUT);
            assert!(ca.ok_ctx(3).is_some(), "{len} B: not complete once buffered: {}", errs(&ca));
            true
        } else {
            let (ca, _) = p.settle(Duration::from_millis(100));
            ca.ok_ctx(3).is_some()
        };
        let mut dst = vec![0u8; len];
        // SAFETY: dst outlives the completion.
        unsafe { p.b.recv(dst.as_mut_ptr(), len, p.fa, 4) }.unwrap();
        let (ca, cb) = p.wait(usize::from(!early), 1, TIMEOUT);
        assert!(early || ca.ok_ctx(3).is_some(), "{len} B: send: {}", errs(&ca));
        assert_recv(cb.ok_ctx(4).expect("receive completion"), 4, len, false);
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
    // SAFETY: dst2 (8 bytes) outlives the receive's completion (waited below).
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
        let w = RmaOp { iov: &siov, desc: &[], addr: p.fb, rma_iov: &rma, data: 0, context: 1, flags: FI_COMPLETION, dir: RmaDir::Write };
        let r = RmaOp { iov: &biov, context: 2, dir: RmaDir::Read, ..w };
        // SAFETY: src and back outlive the completions.
        retry(&[&p.a, &p.b], TIMEOUT, || unsafe { p.a.post_rma(&w) }).unwrap();
        // SAFETY: back (4096 bytes, the read's iov) outlives the completion
        // (p.wait below); target stays registered for the whole loop.
        retry(&[&p.a, &p.b], TIMEOUT, || unsafe { p.a.post_rma(&r) }).unwrap();
        let (ca, _) = p.wait(2, 0, TIMEOUT);
        assert_eq!(ca.ok.len(), 2, "round {round}: {}", errs(&ca));
        assert_bytes_eq(&back, &src, "read after write");
    }
    drop(mr);
    Ok(())
});

conformance!(fn commit_complete_is_refused_without_rma_pmem(info) {
    // An endpoint whose caps lack FI_RMA_PMEM (the offer has none, or the
    // application did not ask for it) refuses FI_COMMIT_COMPLETE at the
    // call: it promised no durability.
    require(info, FI_RMA)?;
    let mut plain = info.clone();
    plain.caps &= !FI_RMA_PMEM;
    let p = Pair::open(&plain, FI_RMA)?;
    let src = [1u8; 8];
    let iov = [IoVec::from_slice(&src)];
    let rma = [RmaIov { addr: 0, len: 8, key: 1 }];
    let w = RmaOp { iov: &iov, desc: &[], addr: p.fb, rma_iov: &rma, data: 0, context: 1, flags: FI_COMMIT_COMPLETE, dir: RmaDir::Write };
    // SAFETY: refused before anything is posted.
    let e = unsafe { p.a.post_rma(&w) }.unwrap_err();
    assert_eq!(e.code(), errno::FI_EOPNOTSUPP);
    Ok(())
});

/// A shared mapping of a new `len`-byte file under the build's temporary
/// directory (on the checkout's disk), unmapped and removed on drop.
struct FileMapping {
    addr: usize,
    len: usize,
    path: std::path::PathBuf,
    _file: std::fs::File,
}

impl FileMapping {
    fn new(name: &str, len: usize) -> FileMapping {
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
        let path = dir.join(format!("{name}-{}", std::process::id()));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        file.set_len(len as u64).unwrap();
        // SAFETY: a new shared mapping of the whole file; unmapped in Drop.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED, "mmap {}", path.display());
        FileMapping {
            addr: p as usize,
            len,
            path,
            _file: file,
        }
    }
    fn bytes(&self) -> &[u8] {
        // SAFETY: the mapping is live and `len` bytes long.
        unsafe { std::slice::from_raw_parts(self.addr as *const u8, self.len) }
    }
}

impl Drop for FileMapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, no longer used.
        unsafe { libc::munmap(self.addr as *mut libc::c_void, self.len) };
        let _ = std::fs::remove_file(&self.path);
    }
}

conformance!(fn commit_complete_makes_writes_durable_in_a_file_mapping(info) {
    // FI_COMMIT_COMPLETE on an offer with FI_RMA_PMEM: a write (and an
    // atomic) into a region over a shared file mapping completes once the
    // bytes are written back to the file; one into ordinary memory is
    // refused with FI_EOPNOTSUPP and leaves it untouched.
    require(info, FI_RMA | FI_RMA_PMEM)?;
    let p = Pair::open(info, FI_RMA | FI_RMA_PMEM)?;
    let virt = info.domain_attr.mr_mode & mr_mode::FI_MR_VIRT_ADDR != 0;
    let file = FileMapping::new("ofi-commit", 64 << 10);
    let mut plain = vec![0u8; 4096];
    let reg = |base: usize, len: usize, key: u64| {
        // SAFETY: both buffers outlive their registrations (dropped first).
        unsafe {
            p.domain.mr_reg(&MrAttr {
                iov: vec![(base, len)],
                access: FI_REMOTE_READ | FI_REMOTE_WRITE,
                requested_key: key,
                offset: 0,
            })
        }
        .unwrap_or_else(|e| panic!("mr_reg: {e}"))
    };
    let mr_file = reg(file.addr, file.len, 0xc0_01);
    let mr_plain = reg(plain.as_mut_ptr() as usize, plain.len(), 0xc0_02);
    let at = |base: usize, off: usize| if virt { (base + off) as u64 } else { off as u64 };

    let data = pattern(9, 40_000);
    let iov = [IoVec::from_slice(&data)];
    let rma = [RmaIov { addr: at(file.addr, 1000), len: data.len(), key: mr_file.key() }];
    let w = RmaOp { iov: &iov, desc: &[], addr: p.fb, rma_iov: &rma, data: 0, context: 1, flags: FI_COMPLETION | FI_COMMIT_COMPLETE, dir: RmaDir::Write };
    // SAFETY: data outlives the completion.
    retry(&[&p.a, &p.b], TIMEOUT, || unsafe { p.a.post_rma(&w) }).unwrap();
    let (ca, _) = p.wait(1, 0, TIMEOUT);
    assert!(ca.ok_ctx(1).is_some(), "commit write into the file mapping: {}", errs(&ca));
    assert_bytes_eq(&file.bytes()[1000..41_000], &data, "mapped bytes");
    let on_disk = std::fs::read(&file.path).unwrap();
    assert_bytes_eq(&on_disk[1000..41_000], &data, "the file's bytes");

    let small = [0xabu8; 64];
    let siov = [IoVec::from_slice(&small)];
    let prma = [RmaIov { addr: at(plain.as_ptr() as usize, 0), len: 64, key: mr_plain.key() }];
    let w2 = RmaOp { iov: &siov, rma_iov: &prma, context: 2, ..w };
    // SAFETY: small outlives the completion.
    retry(&[&p.a, &p.b], TIMEOUT, || unsafe { p.a.post_rma(&w2) }).unwrap();
    let (ca, _) = p.wait(1, 0, TIMEOUT);
    let e = ca.err_ctx(2).unwrap_or_else(|| panic!("commit write into plain memory completed: {}", errs(&ca)));
    assert_eq!(e.err, errno::FI_EOPNOTSUPP);
    assert!(plain.iter().all(|&b| b == 0), "refused write changed the target");
    // The same write without FI_COMMIT_COMPLETE is taken.
    let w3 = RmaOp { context: 3, flags: FI_COMPLETION, ..w2 };
    // SAFETY: small (64 bytes, w3's iov) outlives the completion (p.wait
    // below); plain stays registered until after it.
    retry(&[&p.a, &p.b], TIMEOUT, || unsafe { p.a.post_rma(&w3) }).unwrap();
    let (ca, _) = p.wait(1, 0, TIMEOUT);
    assert!(ca.ok_ctx(3).is_some(), "plain write: {}", errs(&ca));
    assert_bytes_eq(&plain[..64], &small, "plain write");

    if info.caps & FI_ATOMIC != 0 {
        let one = 5u64.to_ne_bytes();
        let mut old = [0u8; 8];
        let op = AtomicOp {
            kind: AtomicKind::Fetch,
            op: atomic_op::FI_SUM,
            datatype: datatype::FI_UINT64,
            operand: &[Ioc { addr: one.as_ptr() as usize, count: 1 }],
            compare: &[],
            result: &[Ioc { addr: old.as_mut_ptr() as usize, count: 1 }],
            desc: &[],
            addr: p.fb,
            rma_ioc: &[RmaIoc { addr: at(file.addr, 8), count: 1, key: mr_file.key() }],
            data: 0,
            context: 4,
            flags: FI_COMPLETION | FI_COMMIT_COMPLETE,
        };
        // SAFETY: the operand and result outlive the completion.
        retry(&[&p.a, &p.b], TIMEOUT, || unsafe { p.a.post_atomic(&op) }).unwrap();
        let (ca, _) = p.wait(1, 0, TIMEOUT);
        assert!(ca.ok_ctx(4).is_some(), "commit atomic: {}", errs(&ca));
        assert_eq!(u64::from_ne_bytes(old), 0);
        let on_disk = std::fs::read(&file.path).unwrap();
        assert_eq!(u64::from_ne_bytes(on_disk[8..16].try_into().unwrap()), 5);
    }
    drop((mr_file, mr_plain));
    Ok(())
});
