//! Message (untagged) send and receive: every size class, posted and
//! unexpected, scatter-gather, remote CQ data, inject, truncation and
//! ordering.
#![allow(unsafe_code)]

use ofi::consts::*;
use ofi::errno;
use ofi::IoVec;
use ofi_conformance::*;
use std::time::Duration;

/// Sends `pattern(seed, size)` from `a` to `b` with the receive posted first
/// into a buffer guarded on both sides; checks both completions and the data.
fn roundtrip(p: &Pair, size: usize, seed: u64) {
    const GUARD: usize = 64;
    let tx = pattern(seed, size);
    let mut rx = vec![0xeeu8; size + 2 * GUARD];
    let (rctx, sctx) = (0x1000 + seed as usize, 0x2000 + seed as usize);
    // SAFETY: rx outlives the receive, which completes (or the test fails) before rx drops.
    unsafe {
        p.b.recv(rx.as_mut_ptr().add(GUARD), size, FI_ADDR_UNSPEC, rctx)
    }
    .unwrap_or_else(|e| panic!("recv {size}: {e}"));
    // SAFETY: tx outlives the send; we wait for its completion below.
    unsafe { p.a.send(tx.as_ptr(), size, p.fb, sctx) }
        .unwrap_or_else(|e| panic!("send {size}: {e}"));
    let (ca, cb) = p.wait(1, 1, TIMEOUT);
    assert!(
        ca.err.is_empty() && cb.err.is_empty(),
        "size {size}: error entries: a {} b {}",
        errs(&ca),
        errs(&cb)
    );
    assert_eq!(
        ca.ok.len(),
        1,
        "size {size}: sender completions {:?}",
        ca.ok
    );
    assert_eq!(
        cb.ok.len(),
        1,
        "size {size}: receiver completions {:?}",
        cb.ok
    );
    assert_send(&ca.ok[0], sctx);
    assert_recv(&cb.ok[0], rctx, size, false);
    assert_bytes_eq(
        &rx[GUARD..GUARD + size],
        &tx,
        &format!("size {size}: received data"),
    );
    assert!(
        rx[..GUARD].iter().all(|&b| b == 0xee),
        "size {size}: bytes written before the receive buffer"
    );
    assert!(
        rx[GUARD + size..].iter().all(|&b| b == 0xee),
        "size {size}: bytes written past the receive buffer"
    );
}

conformance!(
    /// Every size from 0 to 1 MiB arrives intact, receive posted first.
    fn send_recv_all_sizes(info) {
        let p = Pair::open(info, FI_MSG)?;
        for (i, size) in sizes_for(info, &SIZES).into_iter().enumerate() {
            roundtrip(&p, size, i as u64 + 1);
        }
        // The same pair keeps working after the large path was used.
        roundtrip(&p, 8, 99);
        Ok(())
    }
);

conformance!(
    /// Messages sent before their receives are posted (three of each size
    /// class, interleaved) are held and delivered intact, in order.
    fn unexpected_messages_at_each_size_class(info) {
        let p = Pair::open(info, FI_MSG)?;
        let sizes: Vec<usize> = sizes_for(info, &CLASS_SIZES).into_iter().cycle().take(9).collect();
        let txs: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(i, &s)| pattern(100 + i as u64, s)).collect();
        for (i, tx) in txs.iter().enumerate() {
            // SAFETY: txs outlives every send; all complete before the test ends.
            retry(&[&p.a, &p.b], TIMEOUT, || unsafe { p.a.send(tx.as_ptr(), tx.len(), p.fb, 0x100 + i) })
                .unwrap_or_else(|e| panic!("send {i}: {e}"));
        }
        // Let the receiver see them all before any receive exists.
        let (early_a, early_b) = p.settle(Duration::from_millis(100));
        assert!(early_b.total() == 0, "receiver completed something with no receive posted: {:?} {}", early_b.ok, errs(&early_b));
        let mut rxs: Vec<Vec<u8>> = sizes.iter().map(|&s| vec![0u8; s]).collect();
        for (i, rx) in rxs.iter_mut().enumerate() {
            // SAFETY: rxs outlives the receives, which complete below.
            unsafe { p.b.recv(rx.as_mut_ptr(), rx.len(), FI_ADDR_UNSPEC, 0x200 + i) }.unwrap_or_else(|e| panic!("recv {i}: {e}"));
        }
        let (mut ca, cb) = p.wait(txs.len() - early_a.total(), txs.len(), TIMEOUT);
        ca.extend(early_a);
        assert!(ca.err.is_empty() && cb.err.is_empty(), "errors: a {} b {}", errs(&ca), errs(&cb));
        assert_eq!(cb.ok.len(), txs.len(), "receive completions");
        assert_eq!(ca.ok.len(), txs.len(), "send completions");
        for (i, rx) in rxs.iter().enumerate() {
            let e = cb.ok_ctx(0x200 + i).unwrap_or_else(|| panic!("no completion for receive {i}"));
            assert_recv(e, 0x200 + i, sizes[i], false);
            assert_bytes_eq(rx, &txs[i], &format!("unexpected message {i} ({} bytes)", sizes[i]));
            assert!(ca.ok_ctx(0x100 + i).is_some(), "no send completion for message {i}");
        }
        Ok(())
    }
);

/// Lengths of four iov entries summing to `total`, split unevenly.
fn split(total: usize, fracs: [usize; 3]) -> Vec<usize> {
    let a = total / fracs[0];
    let b = total / fracs[1];
    let c = (total / fracs[2]).min(total - a - b);
    vec![a, b, c, total - a - b - c]
}

/// Sends `whole` as iov pieces `slens` into receive pieces `rlens`.
fn vector_case(p: &Pair, whole: &[u8], slens: &[usize], rlens: &[usize], posted_first: bool) {
    let total = whole.len();
    let what = format!(
        "{total} bytes, iov {slens:?} -> {rlens:?}, {}",
        if posted_first { "posted" } else { "unexpected" }
    );
    let mut at = 0;
    let parts: Vec<Vec<u8>> = slens
        .iter()
        .map(|&l| {
            at += l;
            whole[at - l..at].to_vec()
        })
        .collect();
    let mut rparts: Vec<Vec<u8>> = rlens.iter().map(|&l| vec![0u8; l]).collect();
    let siov: Vec<IoVec> = parts.iter().map(|v| IoVec::from_slice(v)).collect();
    let riov: Vec<IoVec> = rparts.iter_mut().map(|v| IoVec::from_mut(v)).collect();
    let post = || {
        // SAFETY: rparts outlives the receive, which completes below.
        unsafe { p.b.recvv(&riov, FI_ADDR_UNSPEC, 0x31) }
            .unwrap_or_else(|e| panic!("{what}: recvv: {e}"));
    };
    if posted_first {
        post();
    }
    // SAFETY: parts outlives the send, which completes below.
    unsafe { p.a.sendv(&siov, p.fb, 0x32) }.unwrap_or_else(|e| panic!("{what}: sendv: {e}"));
    let (mut ca, mut cb) = (Completions::default(), Completions::default());
    if !posted_first {
        p.wait_into(&mut ca, &mut cb, 0, 0, std::time::Duration::from_millis(20));
        assert_eq!(
            cb.total(),
            0,
            "{what}: completion before the receive was posted"
        );
        post();
    }
    p.wait_into(&mut ca, &mut cb, 1, 1, TIMEOUT);
    assert!(
        ca.err.is_empty() && cb.err.is_empty(),
        "{what}: errors a {} b {}",
        errs(&ca),
        errs(&cb)
    );
    assert_eq!((ca.ok.len(), cb.ok.len()), (1, 1), "{what}: completions");
    assert_send(&ca.ok[0], 0x32);
    assert_recv(&cb.ok[0], 0x31, total, false);
    let got: Vec<u8> = rparts.concat();
    assert_bytes_eq(&got, whole, &what);
}

conformance!(
    /// sendv and recvv with four entries on both sides, split at different
    /// places (some entries empty), at each size class, with the receive
    /// posted before and after the message arrives.
    fn sendv_recvv_four_entries_uneven(info) {
        let p = Pair::open(info, FI_MSG)?;
        if info.tx_attr.iov_limit < 4 || info.rx_attr.iov_limit < 4 {
            return Err(Skip::limit(format!("iov_limit tx {} rx {} < 4", info.tx_attr.iov_limit, info.rx_attr.iov_limit)));
        }
        for (k, total) in sizes_for(info, &[100, 20_000, 300_001]).into_iter().enumerate() {
            let whole = pattern(500 + k as u64, total);
            let uneven_s = split(total, [10, 3, 1000]);
            let uneven_r = split(total, [2, 1000, 7]);
            assert_ne!(uneven_s, uneven_r);
            let empty_s = vec![0, total / 2, 0, total - total / 2];
            let empty_r = vec![total / 3, 0, total - total / 3, 0];
            for posted_first in [true, false] {
                vector_case(&p, &whole, &uneven_s, &uneven_r, posted_first);
                vector_case(&p, &whole, &empty_s, &empty_r, posted_first);
            }
        }
        Ok(())
    }
);

conformance!(
    /// One iov entry more than iov_limit is FI_EINVAL, for send and receive,
    /// and nothing is posted.
    fn iov_beyond_limit_is_einval(info) {
        let p = Pair::open(info, FI_MSG)?;
        let tx = [7u8; 64];
        let mut rx = [0u8; 64];
        let n_tx = info.tx_attr.iov_limit + 1;
        let n_rx = info.rx_attr.iov_limit + 1;
        let siov: Vec<IoVec> = (0..n_tx).map(|i| IoVec::from_slice(&tx[i % 64..i % 64 + 1])).collect();
        let base = rx.as_mut_ptr() as usize;
        let riov: Vec<IoVec> = (0..n_rx).map(|i| IoVec { base: base + i % 64, len: 1 }).collect();
        // SAFETY: the call must fail; tx outlives it anyway.
        let e = unsafe { p.a.sendv(&siov, p.fb, 1) }.expect_err("sendv with iov_limit+1 entries must fail");
        assert_eq!(e.code(), errno::FI_EINVAL, "sendv with {n_tx} entries: {e}");
        // SAFETY: the call must fail; rx outlives it anyway.
        let e = unsafe { p.b.recvv(&riov, FI_ADDR_UNSPEC, 2) }.expect_err("recvv with iov_limit+1 entries must fail");
        assert_eq!(e.code(), errno::FI_EINVAL, "recvv with {n_rx} entries: {e}");
        // Neither was posted: a fresh exchange uses fresh contexts only.
        roundtrip(&p, 16, 3);
        let (ca, cb) = p.settle(Duration::from_millis(50));
        assert_eq!((ca.total(), cb.total()), (0, 0), "stray completions after rejected calls: {:?} {:?}", ca.ok, cb.ok);
        Ok(())
    }
);

conformance!(
    /// A receive whose two entries name the same bytes (C callers may post
    /// overlapping ranges) completes with the whole length, and the bytes
    /// hold what was scattered into them last: the message's second half.
    fn recvv_overlapping_entries(info) {
        let p = Pair::open(info, FI_MSG)?;
        if info.rx_attr.iov_limit < 2 {
            return Err(Skip::limit(format!("rx iov_limit {} < 2", info.rx_attr.iov_limit)));
        }
        // Small (inline/eager) and large (read straight into the entries).
        for half in sizes_for(info, &[100, 100_000]) {
            let whole = pattern(77, 2 * half);
            let mut rx = vec![0u8; half];
            let base = rx.as_mut_ptr() as usize;
            let riov = [IoVec { base, len: half }, IoVec { base, len: half }];
            // SAFETY: rx outlives the receive, which completes below; the
            // two entries overlap on purpose.
            unsafe { p.b.recvv(&riov, FI_ADDR_UNSPEC, 0x41) }.expect("recvv over overlapping entries");
            let siov = [IoVec::from_slice(&whole)];
            // SAFETY: whole outlives the send, which completes below.
            unsafe { p.a.sendv(&siov, p.fb, 0x42) }.expect("sendv");
            let (mut ca, mut cb) = (Completions::default(), Completions::default());
            p.wait_into(&mut ca, &mut cb, 1, 1, TIMEOUT);
            assert!(ca.err.is_empty() && cb.err.is_empty(), "{half}: errors a {} b {}", errs(&ca), errs(&cb));
            assert_recv(&cb.ok[0], 0x41, 2 * half, false);
            assert_bytes_eq(&rx, &whole[half..], &format!("overlapping receive entries of {half} bytes"));
        }
        Ok(())
    }
);

fn require_cq_data(info: &ofi::Info) -> Outcome {
    if info.domain_attr.cq_data_size == 0 {
        return Err(Skip::limit(
            "domain_attr.cq_data_size is 0 (no remote CQ data)",
        ));
    }
    Ok(())
}

fn data_mask(info: &ofi::Info) -> u64 {
    match info.domain_attr.cq_data_size {
        n if n >= 8 => u64::MAX,
        n => (1u64 << (8 * n)) - 1,
    }
}

conformance!(
    /// senddata puts FI_REMOTE_CQ_DATA and the data in the receiver's
    /// completion (each size class); a plain send does not.
    fn senddata_delivers_remote_cq_data(info) {
        require_cq_data(info)?;
        let p = Pair::open(info, FI_MSG)?;
        for (i, size) in sizes_for(info, &[0, 4000, 20_000, 1 << 20]).into_iter().enumerate() {
            let data = 0xfeed_beef_0bad_c0de_u64.rotate_left(i as u32 * 8) & data_mask(info);
            let tx = pattern(40 + i as u64, size);
            let mut rx = vec![0u8; size];
            // SAFETY: rx outlives the receive, which completes below.
            unsafe { p.b.recv(rx.as_mut_ptr(), size, FI_ADDR_UNSPEC, 0x41) }.unwrap();
            // SAFETY: tx outlives the send, which completes below.
            unsafe { p.a.senddata(tx.as_ptr(), size, data, p.fb, 0x42) }.unwrap_or_else(|e| panic!("senddata {size}: {e}"));
            let (ca, cb) = p.wait(1, 1, TIMEOUT);
            assert!(ca.err.is_empty() && cb.err.is_empty(), "{size}: errors a {} b {}", errs(&ca), errs(&cb));
            assert_eq!((ca.ok.len(), cb.ok.len()), (1, 1), "{size}: completions");
            let e = &cb.ok[0];
            assert_recv(e, 0x41, size, false);
            assert!(e.flags & FI_REMOTE_CQ_DATA != 0, "{size}: receive completion lacks FI_REMOTE_CQ_DATA: {:#x}", e.flags);
            assert_eq!(e.data, data, "{size}: remote CQ data");
            assert_bytes_eq(&rx, &tx, "senddata payload");
        }
        // A plain send carries no remote CQ data.
        let mut rx = [0u8; 8];
        // SAFETY: rx outlives the receive, which completes below.
        unsafe { p.b.recv(rx.as_mut_ptr(), 8, FI_ADDR_UNSPEC, 0x43) }.unwrap();
        // SAFETY: the static buffer outlives the send.
        unsafe { p.a.send(b"12345678".as_ptr(), 8, p.fb, 0x44) }.unwrap();
        let (_, cb) = p.wait(1, 1, TIMEOUT);
        assert_eq!(cb.ok.len(), 1, "plain send: {}", errs(&cb));
        assert_eq!(cb.ok[0].flags & FI_REMOTE_CQ_DATA, 0, "plain send completion claims remote CQ data");
        Ok(())
    }
);

conformance!(
    /// injectdata: the receiver gets the data and FI_REMOTE_CQ_DATA; the
    /// sender gets no completion.
    fn injectdata_delivers_remote_cq_data(info) {
        require_cq_data(info)?;
        let p = Pair::open(info, FI_MSG)?;
        if info.tx_attr.inject_size == 0 {
            return Err(Skip::limit("tx_attr.inject_size is 0"));
        }
        let size = info.tx_attr.inject_size.min(64);
        let data = 0x0123_4567_89ab_cdef & data_mask(info);
        let mut tx = pattern(7, size);
        let want = tx.clone();
        let mut rx = vec![0u8; size];
        // SAFETY: rx outlives the receive, which completes below.
        unsafe { p.b.recv(rx.as_mut_ptr(), size, FI_ADDR_UNSPEC, 0x51) }.unwrap();
        p.a.injectdata(&tx, data, p.fb).unwrap_or_else(|e| panic!("injectdata: {e}"));
        tx.fill(0); // the buffer is free once inject returns
        let (_, cb) = p.wait(0, 1, TIMEOUT);
        assert_eq!(cb.ok.len(), 1, "receiver: {}", errs(&cb));
        assert_recv(&cb.ok[0], 0x51, size, false);
        assert!(cb.ok[0].flags & FI_REMOTE_CQ_DATA != 0, "lacks FI_REMOTE_CQ_DATA: {:#x}", cb.ok[0].flags);
        assert_eq!(cb.ok[0].data, data, "remote CQ data");
        assert_bytes_eq(&rx, &want, "injectdata payload");
        let (ca, _) = p.settle(Duration::from_millis(100));
        assert_eq!(ca.total(), 0, "injectdata generated a sender completion: {:?} {}", ca.ok, errs(&ca));
        Ok(())
    }
);

conformance!(
    /// fi_sendmsg with FI_INJECT (fi_msg(3)): the buffer is reusable on
    /// return, yet unlike fi_inject the send completes as any other does
    /// (the endpoint writes every completion), with its own context.
    fn sendmsg_inject_flag_still_completes(info) {
        let p = Pair::open(info, FI_MSG)?;
        if info.tx_attr.inject_size < 8 {
            return Err(Skip::limit("tx_attr.inject_size is under 8"));
        }
        let mut tx = pattern(77, 8);
        let want = tx.clone();
        let mut rx = [0u8; 8];
        // SAFETY: rx outlives the receive, which completes below.
        unsafe { p.b.recv(rx.as_mut_ptr(), 8, FI_ADDR_UNSPEC, 0x71) }.unwrap();
        let iov = [IoVec::from_slice(&tx)];
        let op = ofi::SendOp {
            iov: &iov,
            desc: &[],
            dest: p.fb,
            tag: 0,
            data: 0,
            context: 0x72,
            flags: FI_INJECT,
            tagged: false,
        };
        // SAFETY: FI_INJECT: tx is read before the call returns.
        unsafe { p.a.post_send(&op) }.unwrap();
        tx.fill(0xee);
        let (ca, cb) = p.wait(1, 1, TIMEOUT);
        assert!(ca.ok_ctx(0x72).is_some(), "sendmsg(FI_INJECT) wrote no completion: {}", errs(&ca));
        assert_recv(&cb.ok[0], 0x71, 8, false);
        assert_bytes_eq(&rx, &want, "sendmsg(FI_INJECT)");
        Ok(())
    }
);

conformance!(
    /// inject: the buffer is reusable on return, the data arrives, no send
    /// completion is written; above inject_size the call fails, naming inject.
    fn inject_semantics(info) {
        let p = Pair::open(info, FI_MSG)?;
        let limit = info.tx_attr.inject_size;
        if limit == 0 {
            return Err(Skip::limit("tx_attr.inject_size is 0"));
        }
        for (i, size) in [0usize, 1, limit].into_iter().enumerate() {
            let mut tx = pattern(60 + i as u64, size);
            let want = tx.clone();
            let mut rx = vec![0u8; size];
            // SAFETY: rx outlives the receive, which completes below.
            unsafe { p.b.recv(rx.as_mut_ptr(), size, FI_ADDR_UNSPEC, 0x61 + i) }.unwrap();
            p.a.inject(&tx, p.fb).unwrap_or_else(|e| panic!("inject {size}: {e}"));
            tx.fill(0xaa);
            let (_, cb) = p.wait(0, 1, TIMEOUT);
            assert_eq!(cb.ok.len(), 1, "inject {size}: receiver {}", errs(&cb));
            assert_recv(&cb.ok[0], 0x61 + i, size, false);
            assert_bytes_eq(&rx, &want, &format!("inject {size}"));
        }
        let (ca, _) = p.settle(Duration::from_millis(100));
        assert_eq!(ca.total(), 0, "inject generated sender completions: {:?} {}", ca.ok, errs(&ca));
        let big = vec![1u8; limit + 1];
        let e = p.a.inject(&big, p.fb).expect_err("inject above inject_size must fail");
        assert!(
            e.code() == errno::FI_EMSGSIZE || e.code() == errno::FI_EINVAL,
            "inject of inject_size+1 bytes: expected FI_EMSGSIZE or FI_EINVAL, got {e}"
        );
        assert!(e.message().contains("inject"), "error message does not say what was wrong: {e}");
        if info.caps & FI_TAGGED != 0 {
            let e = p.a.tinject(&big, p.fb, 5).expect_err("tinject above inject_size must fail");
            assert!(e.code() == errno::FI_EMSGSIZE || e.code() == errno::FI_EINVAL, "tinject: {e}");
        }
        // Nothing was sent by the failed calls.
        let (_, cb) = p.settle(Duration::from_millis(50));
        assert_eq!(cb.total(), 0);
        let mut rx = [0u8; 8];
        // SAFETY: rx outlives the receive; it is cancelled below if nothing arrives.
        unsafe { p.b.recv(rx.as_mut_ptr(), 8, FI_ADDR_UNSPEC, 0x6f) }.unwrap();
        let (_, cb) = p.settle(Duration::from_millis(50));
        assert_eq!(cb.total(), 0, "a failed inject delivered a message: {:?}", cb.ok);
        p.b.cancel(0x6f).unwrap();
        Ok(())
    }
);

/// Posts (or not) a too-small receive, sends, and checks truncation; then
/// checks the next message on the same pair is intact.
fn truncation_case(p: &Pair, size: usize, cap: usize, posted_first: bool, seed: u64) {
    let tx = pattern(seed, size);
    let mut rx = vec![0xeeu8; cap + 64];
    let post = |rx: &mut Vec<u8>| {
        // SAFETY: rx outlives the receive, which completes (with an error) below.
        unsafe { p.b.recv(rx.as_mut_ptr(), cap, FI_ADDR_UNSPEC, 0x71) }.unwrap();
    };
    if posted_first {
        post(&mut rx);
    }
    // SAFETY: tx outlives the send, which completes below.
    retry(&[&p.a, &p.b], TIMEOUT, || unsafe {
        p.a.send(tx.as_ptr(), size, p.fb, 0x72)
    })
    .unwrap();
    let (mut early, mut cb) = p.settle(Duration::from_millis(20));
    if !posted_first {
        assert_eq!(
            cb.total(),
            0,
            "receiver completed something with no receive posted"
        );
        post(&mut rx);
    }
    let (ca, cb2) = p.wait(
        1usize.saturating_sub(early.total()),
        1usize.saturating_sub(cb.total()),
        TIMEOUT,
    );
    early.extend(ca);
    cb.extend(cb2);
    let what = format!(
        "{size} bytes into {cap} ({})",
        if posted_first { "posted" } else { "unexpected" }
    );
    assert!(
        cb.ok.is_empty(),
        "{what}: truncated receive completed successfully: {:?}",
        cb.ok
    );
    assert_eq!(cb.err.len(), 1, "{what}: receiver error entries");
    let e = &cb.err[0];
    assert_eq!(
        e.err,
        errno::FI_ETRUNC,
        "{what}: error {} ({})",
        e.err,
        errno_name(e.err)
    );
    assert_eq!(e.op_context, 0x71, "{what}: error entry context");
    assert_eq!(e.len, cap, "{what}: err.len must be the bytes placed");
    assert_eq!(e.olen, size - cap, "{what}: err.olen must be the overflow");
    assert_bytes_eq(&rx[..cap], &tx[..cap], &format!("{what}: truncated prefix"));
    assert!(
        rx[cap..].iter().all(|&b| b == 0xee),
        "{what}: bytes written past the receive buffer"
    );
    assert!(
        early.err.is_empty(),
        "{what}: sender got an error: {}",
        errs(&early)
    );
    assert_eq!(early.ok.len(), 1, "{what}: sender completions");
    assert_send(&early.ok[0], 0x72);
    // The next message is intact.
    let tx2 = pattern(seed + 1000, size);
    let mut rx2 = vec![0u8; size];
    // SAFETY: rx2 outlives the receive, which completes below.
    unsafe { p.b.recv(rx2.as_mut_ptr(), size, FI_ADDR_UNSPEC, 0x73) }.unwrap();
    // SAFETY: tx2 outlives the send, which completes below.
    unsafe { p.a.send(tx2.as_ptr(), size, p.fb, 0x74) }.unwrap();
    let (ca, cb) = p.wait(1, 1, TIMEOUT);
    assert!(
        ca.err.is_empty() && cb.err.is_empty(),
        "{what}, next message: errors a {} b {}",
        errs(&ca),
        errs(&cb)
    );
    assert_eq!(
        (ca.ok.len(), cb.ok.len()),
        (1, 1),
        "{what}, next message: completions"
    );
    assert_recv(&cb.ok[0], 0x73, size, false);
    assert_bytes_eq(&rx2, &tx2, &format!("{what}: next message"));
}

conformance!(
    /// A receive smaller than the message: FI_ETRUNC with len = buffer size
    /// and olen = overflow; the sender completes normally; the next message
    /// is intact. Each size class, posted and unexpected.
    fn truncation_reports_etrunc_and_next_message_intact(info) {
        let p = Pair::open(info, FI_MSG)?;
        let cases = [(100usize, 60usize), (4000, 1), (20_000, 5000), (1 << 20, 100_000), (1 << 20, 4000)];
        for (i, &(size, cap)) in cases.iter().enumerate() {
            if sizes_for(info, &[size]).is_empty() {
                continue;
            }
            truncation_case(&p, size, cap, true, 80 + i as u64);
            truncation_case(&p, size, cap, false, 90 + i as u64);
        }
        Ok(())
    }
);

conformance!(
    /// 1000 messages of mixed sizes land in the receives in send order
    /// (FI_ORDER_SAS): 600 receives posted first, 400 posted afterwards.
    fn send_after_send_ordering_mixed_sizes(info) {
        let p = Pair::open(info, FI_MSG)?;
        if info.tx_attr.msg_order & order::FI_ORDER_SAS == 0 || info.rx_attr.msg_order & order::FI_ORDER_SAS == 0 {
            return Err(Skip::limit("offer does not promise FI_ORDER_SAS"));
        }
        const N: usize = 1000;
        const EARLY: usize = 600;
        let cycle = sizes_for(info, &[8, 100, 4104, 4105, 9000, 32768, 32769, 70_000]);
        let sizes: Vec<usize> = cycle.iter().copied().cycle().take(N).collect();
        let txs: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &s)| {
                let mut v = pattern(i as u64, s);
                v[..4].copy_from_slice(&(i as u32).to_le_bytes());
                v
            })
            .collect();
        let mut rxs: Vec<Vec<u8>> = sizes.iter().map(|&s| vec![0u8; s]).collect();
        let ptrs: Vec<(usize, usize)> = rxs.iter_mut().map(|v| (v.as_mut_ptr() as usize, v.len())).collect();
        let post = |i: usize| {
            // SAFETY: rxs outlives every receive; all complete before it drops.
            unsafe { p.b.recv(ptrs[i].0 as *mut u8, ptrs[i].1, FI_ADDR_UNSPEC, i) }.unwrap_or_else(|e| panic!("recv {i}: {e}"));
        };
        (0..EARLY).for_each(post);
        for (i, tx) in txs.iter().enumerate() {
            // SAFETY: txs outlives every send; all complete before it drops.
            retry(&[&p.a, &p.b], TIMEOUT, || unsafe { p.a.send(tx.as_ptr(), tx.len(), p.fb, 100_000 + i) })
                .unwrap_or_else(|e| panic!("send {i}: {e}"));
        }
        (EARLY..N).for_each(post);
        let (ca, cb) = p.wait(N, N, Duration::from_secs(60));
        assert!(ca.err.is_empty() && cb.err.is_empty(), "errors: a {} b {}", errs(&ca), errs(&cb));
        assert_eq!(cb.ok.len(), N, "receive completions");
        assert_eq!(ca.ok.len(), N, "send completions");
        let mut seen = vec![false; N];
        for e in &cb.ok {
            assert!(e.op_context < N && !seen[e.op_context], "bad or repeated receive context {:#x}", e.op_context);
            seen[e.op_context] = true;
            assert_eq!(e.len, sizes[e.op_context], "receive {} length", e.op_context);
        }
        for (i, rx) in rxs.iter().enumerate() {
            let got = u32::from_le_bytes([rx[0], rx[1], rx[2], rx[3]]);
            assert_eq!(got as usize, i, "receive {i} holds message {got}: messages were reordered");
            assert_bytes_eq(rx, &txs[i], &format!("message {i}"));
        }
        Ok(())
    }
);

conformance!(
    /// An endpoint can send to its own address (each size class).
    fn send_to_own_address(info) {
        require_rdm(info, "an endpoint addressing itself; a connected FI_EP_MSG endpoint sends only to its peer")?;
        let p = Pair::open(info, FI_MSG)?;
        for (i, size) in sizes_for(info, &CLASS_SIZES).into_iter().enumerate() {
            let tx = pattern(700 + i as u64, size);
            let mut rx = vec![0u8; size];
            // SAFETY: rx outlives the receive, which completes below.
            unsafe { p.a.recv(rx.as_mut_ptr(), size, FI_ADDR_UNSPEC, 0x81) }.unwrap();
            // SAFETY: tx outlives the send, which completes below.
            unsafe { p.a.send(tx.as_ptr(), size, p.fa, 0x82) }.unwrap_or_else(|e| panic!("send to self ({size}): {e}"));
            let c = wait_for(&p.cq_a, 2, TIMEOUT);
            assert!(c.err.is_empty(), "send to self ({size}): {}", errs(&c));
            assert_eq!(c.ok.len(), 2, "send to self ({size}): completions {:?}", c.ok);
            assert_recv(c.ok_ctx(0x81).expect("receive completion"), 0x81, size, false);
            assert_send(c.ok_ctx(0x82).expect("send completion"), 0x82);
            assert_bytes_eq(&rx, &tx, &format!("send to self ({size})"));
        }
        Ok(())
    }
);

conformance!(
    /// FI_SELECTIVE_COMPLETION: only operations with FI_COMPLETION write
    /// successful completions; counters still count every operation; an
    /// error (truncation) is reported even without FI_COMPLETION.
    fn selective_completion(info) {
        require(info, FI_MSG)?;
        let (f, d, av) = open_domain(info);
        let cqs = [tagged_cq(&d, wait_obj::FI_WAIT_UNSPEC), tagged_cq(&d, wait_obj::FI_WAIT_UNSPEC)];
        let cntrs = [d.cntr(&ofi::CntrAttr::default()).unwrap(), d.cntr(&ofi::CntrAttr::default()).unwrap()];
        let two = open_two(&f, &d, av.as_ref(), info, |i, ep| {
            ep.bind_cq(&cqs[i], FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION).unwrap();
            ep.bind_cntr(&cntrs[i], FI_SEND | FI_RECV).unwrap();
        })?;
        let (a, b, fb) = (&two.a, &two.b, two.fb);
        for (i, size) in sizes_for(info, &CLASS_SIZES).into_iter().enumerate() {
            let tx = pattern(800 + i as u64, size);
            let mut quiet = vec![0u8; size];
            let mut loud = vec![0u8; size];
            let base = (cntrs[0].read(), cntrs[1].read());
            let qi = [IoVec::from_mut(&mut quiet)];
            let op = ofi::RecvOp { iov: &qi, desc: &[], src: FI_ADDR_UNSPEC, tag: 0, ignore: 0, context: 0x91, flags: 0, tagged: false };
            // SAFETY: quiet outlives the receive; the counter tells when it completed.
            unsafe { b.post_recv(&op) }.unwrap();
            let si = [IoVec::from_slice(&tx)];
            let op = ofi::SendOp { iov: &si, desc: &[], dest: fb, tag: 0, data: 0, context: 0x92, flags: 0, tagged: false };
            // SAFETY: tx outlives the send; the counter tells when it completed.
            unsafe { a.post_send(&op) }.unwrap();
            // Both sides progress while each counter is awaited: a large
            // message may need its sender's progress to arrive.
            wait_cntr(&[a, b], &cntrs[1], base.1 + 1, TIMEOUT).unwrap_or_else(|e| panic!("{size}: quiet receive never counted: {e}"));
            wait_cntr(&[a, b], &cntrs[0], base.0 + 1, TIMEOUT).unwrap_or_else(|e| panic!("{size}: quiet send never counted: {e}"));
            assert_bytes_eq(&quiet, &tx, &format!("{size}: quiet receive"));
            // Operations with FI_COMPLETION (the plain calls) do complete.
            // SAFETY: loud outlives the receive, which completes below.
            unsafe { b.recv(loud.as_mut_ptr(), size, FI_ADDR_UNSPEC, 0x93) }.unwrap();
            // SAFETY: tx outlives the send, which completes below.
            unsafe { a.send(tx.as_ptr(), size, fb, 0x94) }.unwrap();
            let mut c = [Completions::default(), Completions::default()];
            let deadline = std::time::Instant::now() + TIMEOUT;
            while (c[0].total() < 1 || c[1].total() < 1) && std::time::Instant::now() < deadline {
                poll_cq(&cqs[0], &mut c[0]);
                poll_cq(&cqs[1], &mut c[1]);
            }
            assert!(c[0].err.is_empty() && c[1].err.is_empty(), "{size}: errors {} {}", errs(&c[0]), errs(&c[1]));
            assert_eq!(c[0].ok.iter().map(|e| e.op_context).collect::<Vec<_>>(), vec![0x94], "{size}: sender completions (the quiet send must not appear)");
            assert_eq!(c[1].ok.iter().map(|e| e.op_context).collect::<Vec<_>>(), vec![0x93], "{size}: receiver completions (the quiet receive must not appear)");
            assert_bytes_eq(&loud, &tx, &format!("{size}: completed receive"));
        }
        // A quiet receive that fails still reports its error.
        let mut small = [0u8; 4];
        let qi = [IoVec::from_mut(&mut small)];
        let op = ofi::RecvOp { iov: &qi, desc: &[], src: FI_ADDR_UNSPEC, tag: 0, ignore: 0, context: 0x95, flags: 0, tagged: false };
        // SAFETY: small outlives the receive, which fails below.
        unsafe { b.post_recv(&op) }.unwrap();
        // SAFETY: static message.
        unsafe { a.send(b"too long for it".as_ptr(), 15, fb, 0x96) }.unwrap();
        let c = wait_for(&cqs[1], 1, TIMEOUT);
        assert_eq!(c.err.first().map(|e| (e.err, e.op_context)), Some((errno::FI_ETRUNC, 0x95)), "quiet truncated receive: {:?} {}", c.ok, errs(&c));
        Ok(())
    }
);
