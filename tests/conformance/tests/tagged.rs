//! Tagged messages and receive-side features: tag and ignore bits, directed
//! receive, FI_SOURCE, FI_PEEK / FI_CLAIM / FI_DISCARD, FI_MULTI_RECV and
//! cancel.
#![allow(unsafe_code)]

use ofi::consts::*;
use ofi::errno;
use ofi::{IoVec, RecvOp};
use ofi_conformance::*;
use std::time::{Duration, Instant};

conformance!(
    /// Tag and ignore bits select the receive; completions carry the
    /// message's own tag; a message matching nothing waits for a receive.
    fn tag_and_ignore_bits_select_receive(info) {
        let p = Pair::open(info, FI_TAGGED)?;
        let mut ra = [0u8; 8];
        let mut rb = [0u8; 8];
        let mut rc = [0u8; 8];
        // SAFETY: the buffers outlive the receives, which complete below.
        unsafe {
            p.b.trecv(ra.as_mut_ptr(), 8, FI_ADDR_UNSPEC, 0x1200, 0xff, 0xa).unwrap();
            p.b.trecv(rb.as_mut_ptr(), 8, FI_ADDR_UNSPEC, 0x5555, 0, 0xb).unwrap();
        }
        let msgs: [(&[u8; 8], u64); 3] = [(b"exact-55", 0x5555), (b"nomatch!", 0x1334), (b"ignored1", 0x12ab)];
        for (i, (m, tag)) in msgs.iter().enumerate() {
            // SAFETY: the static messages outlive the sends.
            retry(&[&p.a, &p.b], TIMEOUT, || unsafe { p.a.tsend(m.as_ptr(), 8, p.fb, *tag, 0x100 + i) }).unwrap();
        }
        let (mut sa, cb) = p.wait(0, 2, TIMEOUT);
        assert!(cb.err.is_empty(), "errors: {}", errs(&cb));
        assert_eq!(cb.ok.len(), 2, "completions: {:?}", cb.ok);
        let a = cb.ok_ctx(0xa).expect("receive with ignore bits did not complete");
        assert_recv(a, 0xa, 8, true);
        assert_eq!(a.tag, 0x12ab, "completion must carry the message's tag, not the receive's");
        assert_eq!(&ra, b"ignored1");
        let b = cb.ok_ctx(0xb).expect("exact-tag receive did not complete");
        assert_eq!(b.tag, 0x5555);
        assert_eq!(&rb, b"exact-55");
        // 0x1334 matched neither (0x1334 | 0xff != 0x1200 | 0xff); it is waiting.
        // SAFETY: rc outlives the receive, which completes below.
        unsafe { p.b.trecv(rc.as_mut_ptr(), 8, FI_ADDR_UNSPEC, 0x1334, 0, 0xc) }.unwrap();
        let mut cb = Completions::default();
        p.wait_into(&mut sa, &mut cb, 3, 1, TIMEOUT);
        let ca = sa;
        assert_eq!(cb.ok.len(), 1, "late receive: {}", errs(&cb));
        assert_eq!((cb.ok[0].op_context, cb.ok[0].tag), (0xc, 0x1334));
        assert_eq!(&rc, b"nomatch!");
        assert_eq!(ca.ok.len(), 3, "send completions: {}", errs(&ca));
        assert!(ca.ok.iter().all(|e| e.flags & FI_TAGGED != 0 && e.flags & FI_SEND != 0), "send flags: {:?}", ca.ok);
        Ok(())
    }
);

conformance!(
    /// Tagged and untagged messages travel in separate queues: a plain
    /// receive never takes a tagged message and vice versa.
    fn tagged_and_untagged_queues_are_separate(info) {
        let p = Pair::open(info, FI_TAGGED | FI_MSG)?;
        let mut plain = [0u8; 8];
        let mut tagged = [0u8; 8];
        // SAFETY: the buffer outlives the receive, which completes below.
        unsafe { p.b.recv(plain.as_mut_ptr(), 8, FI_ADDR_UNSPEC, 1) }.unwrap();
        // SAFETY: static message.
        unsafe { p.a.tsend(b"tagged-0".as_ptr(), 8, p.fb, 0, 2) }.unwrap();
        let (_, cb) = p.settle(Duration::from_millis(50));
        assert_eq!(cb.total(), 0, "a plain receive took a tagged message: {:?}", cb.ok);
        // SAFETY: static message.
        unsafe { p.a.send(b"plain-00".as_ptr(), 8, p.fb, 3) }.unwrap();
        // SAFETY: the buffer outlives the receive, which completes below.
        unsafe { p.b.trecv(tagged.as_mut_ptr(), 8, FI_ADDR_UNSPEC, 0, 0, 4) }.unwrap();
        let (_, cb) = p.wait(0, 2, TIMEOUT);
        assert_eq!(cb.ok.len(), 2, "{}", errs(&cb));
        assert_eq!(&plain, b"plain-00");
        assert_eq!(&tagged, b"tagged-0");
        assert!(cb.ok_ctx(1).is_some_and(|e| e.flags & FI_MSG != 0));
        assert!(cb.ok_ctx(4).is_some_and(|e| e.flags & FI_TAGGED != 0));
        Ok(())
    }
);

/// Receiver 0, senders 1 and 2; `tagged` picks the queue. Checks that a
/// receive directed at sender 2 skips sender 1's earlier message, posted or
/// unexpected.
fn directed(info: &ofi::Info, tagged: bool, posted_first: bool) -> Outcome {
    let class = if tagged { FI_TAGGED } else { FI_MSG };
    let g = Group::open(info, class | FI_DIRECTED_RECV, 3)?;
    let (r, s1, s2) = (&g.eps[0], &g.eps[1], &g.eps[2]);
    let mut want2 = [0u8; 8];
    let mut any = [0u8; 8];
    let what = format!(
        "{} {}",
        if tagged { "tagged" } else { "msg" },
        if posted_first { "posted" } else { "unexpected" }
    );
    let post = |buf: &mut [u8; 8], src: u64, ctx: usize| {
        // SAFETY: the buffers outlive the receives, which complete below.
        unsafe {
            if tagged {
                r.trecv(buf.as_mut_ptr(), 8, src, 0x77, 0, ctx)
            } else {
                r.recv(buf.as_mut_ptr(), 8, src, ctx)
            }
        }
        .unwrap_or_else(|e| panic!("{what}: directed receive: {e}"));
    };
    let send = |ep: &ofi::Endpoint, m: &'static [u8; 8], ctx: usize| {
        // SAFETY: static messages.
        unsafe {
            if tagged {
                ep.tsend(m.as_ptr(), 8, g.addrs[0], 0x77, ctx)
            } else {
                ep.send(m.as_ptr(), 8, g.addrs[0], ctx)
            }
        }
        .unwrap_or_else(|e| panic!("{what}: send: {e}"));
    };
    let mut rc = Completions::default();
    if posted_first {
        post(&mut want2, g.addrs[2], 0xd2);
    }
    send(s1, b"from-s1!", 0x11);
    let early = g.wait(&[0, 1, 0], Duration::from_millis(30));
    rc.extend(early[0].clone());
    assert_eq!(
        rc.total(),
        0,
        "{what}: a receive directed at sender 2 completed with sender 1's message: {:?}",
        rc.ok
    );
    send(s2, b"from-s2!", 0x22);
    if !posted_first {
        let early = g.wait(&[usize::MAX, 1, 1], Duration::from_millis(50));
        assert_eq!(early[0].total(), 0, "{what}: completion without a receive");
        post(&mut want2, g.addrs[2], 0xd2);
    }
    let c = g.wait(&[1, 0, 0], TIMEOUT);
    rc.extend(c[0].clone());
    assert!(rc.err.is_empty(), "{what}: errors {}", errs(&rc));
    assert_eq!(
        rc.ok.len(),
        1,
        "{what}: directed receive completions {:?}",
        rc.ok
    );
    assert_eq!(rc.ok[0].op_context, 0xd2);
    assert_eq!(
        &want2, b"from-s2!",
        "{what}: a receive directed at sender 2 took another sender's message"
    );
    post(&mut any, FI_ADDR_UNSPEC, 0xd0);
    let c = g.wait(&[1, 0, 0], TIMEOUT);
    assert_eq!(
        c[0].ok.len(),
        1,
        "{what}: undirected receive {}",
        errs(&c[0])
    );
    assert_eq!(
        &any, b"from-s1!",
        "{what}: sender 1's message was lost or damaged"
    );
    Ok(())
}

conformance!(
    /// FI_DIRECTED_RECV: a receive naming one source only takes that
    /// source's message (three endpoints; tagged and untagged; receive
    /// posted before or after the messages arrive).
    fn directed_receive_takes_only_named_source(info) {
        let mut ran = false;
        let mut last = None;
        for tagged in [true, false] {
            for posted_first in [true, false] {
                match directed(info, tagged, posted_first) {
                    Ok(()) => ran = true,
                    Err(s) => {
                        eprintln!("SKIP directed ({}) [{}]: {}", if tagged { "tagged" } else { "msg" }, describe(info), s.why());
                        last = Some(s);
                    }
                }
            }
        }
        // No queue ran: the last skip says why (the runner checks it).
        match (ran, last) {
            (false, Some(s)) => Err(s),
            _ => Ok(()),
        }
    }
);

conformance!(
    /// FI_SOURCE: readfrom gives the sender's fi_addr; a sender that is not
    /// in the receiver's AV gives FI_ADDR_NOTAVAIL.
    fn source_address_from_readfrom(info) {
        let g = Group::open(info, FI_MSG | FI_SOURCE, 3)?;
        let mut bufs = [[0u8; 8]; 3];
        for (i, b) in bufs.iter_mut().enumerate() {
            // SAFETY: bufs outlives the receives, which complete below.
            unsafe { g.eps[0].recv(b.as_mut_ptr(), 8, FI_ADDR_UNSPEC, i) }.unwrap();
        }
        // SAFETY: static messages.
        unsafe {
            g.eps[2].send(b"sender-2".as_ptr(), 8, g.addrs[0], 0).unwrap();
        }
        let c = g.wait(&[1, 0, 1], TIMEOUT);
        // SAFETY: static message.
        unsafe { g.eps[1].send(b"sender-1".as_ptr(), 8, g.addrs[0], 0) }.unwrap();
        let c2 = g.wait(&[1, 1, 0], TIMEOUT);
        let mut got = c[0].clone();
        got.extend(c2[0].clone());
        assert!(got.err.is_empty(), "errors {}", errs(&got));
        assert_eq!(got.ok.len(), 2);
        assert_eq!(&bufs[0], b"sender-2");
        assert_eq!(got.src[0], g.addrs[2], "readfrom source of sender 2's message");
        assert_eq!(&bufs[1], b"sender-1");
        assert_eq!(got.src[1], g.addrs[1], "readfrom source of sender 1's message");
        // An outsider: its own domain and AV; the receiver's AV lacks it.
        let od = g.fabric.domain(info).expect("second domain");
        let oav = od.av(&ofi::AvAttr::default()).expect("av");
        let ocq = tagged_cq(&od, wait_obj::FI_WAIT_UNSPEC);
        let out = open_endpoint(&od, info, &ocq, &oav);
        let to = oav.insert_one(&g.eps[0].getname().unwrap()).unwrap();
        // SAFETY: static message.
        unsafe { out.send(b"outsider".as_ptr(), 8, to, 0) }.unwrap();
        let mut c = Completions::default();
        let deadline = Instant::now() + TIMEOUT;
        while c.total() < 1 && Instant::now() < deadline {
            poll_cq(&g.cqs[0], &mut c);
            let _ = wait_for(&ocq, 1, Duration::from_millis(1));
        }
        assert_eq!(c.ok.len(), 1, "outsider's message: {}", errs(&c));
        assert_eq!(&bufs[2], b"outsider");
        assert_eq!(c.src[0], FI_ADDR_NOTAVAIL, "source of a sender missing from the AV must be FI_ADDR_NOTAVAIL");
        Ok(())
    }
);

/// Posts a tagged receive with flags (peek, claim, discard).
///
/// # Safety
/// `buf` must stay valid until the operation completes.
unsafe fn trecv_flags(
    ep: &ofi::Endpoint,
    buf: &mut [u8],
    tag: u64,
    ctx: usize,
    flags: u64,
) -> ofi::Result<()> {
    let iov = [IoVec::from_mut(buf)];
    let iov: &[IoVec] = if buf.is_empty() { &[] } else { &iov };
    let op = RecvOp {
        iov,
        desc: &[],
        src: FI_ADDR_UNSPEC,
        tag,
        ignore: 0,
        context: ctx,
        flags: flags | FI_COMPLETION,
        tagged: true,
    };
    // SAFETY: the iov (empty or all of `buf`) spans memory our caller keeps
    // valid until the operation completes (this function's contract).
    unsafe { ep.post_recv(&op) }
}

/// Peeks until the message is found (it may still be on its way) or the
/// deadline; returns the last completion or error entry.
fn peek_until_found(
    p: &Pair,
    tag: u64,
    ctx: usize,
    flags: u64,
) -> Result<ofi::CqTaggedEntry, ofi::CqErrEntry> {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        // SAFETY: a peek places no data; the empty buffer is never written.
        unsafe { trecv_flags(&p.b, &mut [], tag, ctx, FI_PEEK | flags) }
            .unwrap_or_else(|e| panic!("peek: {e}"));
        let c = p.wait_b(1, TIMEOUT);
        if let Some(e) = c.ok.first() {
            return Ok(*e);
        }
        let e = *c
            .err
            .first()
            .expect("peek produced neither a completion nor an error entry");
        if e.err != errno::FI_ENOMSG || Instant::now() >= deadline {
            return Err(e);
        }
        p.progress();
    }
}

fn send_tagged(p: &Pair, tx: &[u8], tag: u64, ctx: usize) {
    // SAFETY: the callers keep tx alive until the send completes.
    retry(&[&p.a, &p.b], TIMEOUT, || unsafe {
        p.a.tsend(tx.as_ptr(), tx.len(), p.fb, tag, ctx)
    })
    .unwrap_or_else(|e| panic!("tsend: {e}"));
}

/// Waits for the sender's completion of `ctx` (`sa`: what `a`'s CQ gave
/// so far), driving both sides; clears the tally.
fn sender_completes(p: &Pair, sa: &mut Completions, ctx: usize, what: &str) {
    p.wait_into(sa, &mut Completions::default(), 1, 0, TIMEOUT);
    assert!(sa.err.is_empty(), "{what}: sender error {}", errs(sa));
    assert_eq!(
        sa.ok.len(),
        1,
        "{what}: the sender never completed (or completed twice)"
    );
    assert_send(&sa.ok[0], ctx);
    *sa = Completions::default();
}

conformance!(
    /// FI_PEEK: with no message, an FI_ENOMSG error entry; with one, a
    /// completion with its length and tag that leaves it in place.
    fn peek_reports_enomsg_or_length_and_tag(info) {
        let p = Pair::open(info, FI_TAGGED)?;
        // SAFETY: a peek places no data.
        unsafe { trecv_flags(&p.b, &mut [], 0x99, 0x51, FI_PEEK) }.unwrap();
        let c = wait_for(&p.cq_b, 1, TIMEOUT);
        assert!(c.ok.is_empty(), "peek with no message completed: {:?}", c.ok);
        assert_eq!(c.err.len(), 1, "peek with no message: no error entry");
        assert_eq!((c.err[0].err, c.err[0].op_context), (errno::FI_ENOMSG, 0x51), "peek miss: {}", errs(&c));
        for (i, size) in sizes_for(info, &CLASS_SIZES).into_iter().enumerate() {
            let tag = 0x4000 + i as u64;
            let tx = pattern(i as u64 + 7, size);
            send_tagged(&p, &tx, tag, 0x60);
            let e = peek_until_found(&p, tag, 0x52, 0).unwrap_or_else(|e| panic!("{size}: peek did not find the message: err {}", e.err));
            assert_eq!(e.op_context, 0x52);
            assert_eq!(e.len, size, "peek length");
            assert_eq!(e.tag, tag, "peek tag");
            assert!(e.flags & FI_RECV != 0 && e.flags & FI_TAGGED != 0, "peek flags {:#x}", e.flags);
            // Still there: a second peek finds it, and a receive takes it.
            let again = peek_until_found(&p, tag, 0x53, 0).unwrap_or_else(|e| panic!("second peek lost the message: {}", e.err));
            assert_eq!(again.len, size);
            let mut rx = vec![0u8; size];
            // SAFETY: rx outlives the receive, which completes below.
            unsafe { p.b.trecv(rx.as_mut_ptr(), size, FI_ADDR_UNSPEC, tag, 0, 0x54) }.unwrap();
            let (ca, cb) = p.wait(1, 1, TIMEOUT);
            assert_eq!(cb.ok.len(), 1, "{size}: receive after peek: {}", errs(&cb));
            assert_recv(&cb.ok[0], 0x54, size, true);
            assert_bytes_eq(&rx, &tx, "data received after peek");
            assert_eq!(ca.ok.len(), 1, "{size}: sender: {}", errs(&ca));
        }
        Ok(())
    }
);

conformance!(
    /// FI_PEEK|FI_CLAIM reserves the message: plain receives skip it, and a
    /// later FI_CLAIM receive with the same context delivers it.
    fn peek_claim_then_claim_delivers(info) {
        let p = Pair::open(info, FI_TAGGED)?;
        for (i, size) in sizes_for(info, &CLASS_SIZES).into_iter().enumerate() {
            let tag = 0x5000 + i as u64;
            let tx = pattern(i as u64 + 17, size);
            send_tagged(&p, &tx, tag, 0x61);
            let e = peek_until_found(&p, tag, 0x62, FI_CLAIM).unwrap_or_else(|e| panic!("{size}: peek|claim: err {}", e.err));
            assert_eq!((e.len, e.tag), (size, tag));
            // A plain receive for the same tag must not take the claimed message.
            let mut other = vec![0u8; size];
            // SAFETY: other outlives the receive; it is cancelled below.
            unsafe { p.b.trecv(other.as_mut_ptr(), size, FI_ADDR_UNSPEC, tag, 0, 0x63) }.unwrap();
            let (mut sa, cb) = p.settle(Duration::from_millis(30));
            assert_eq!(cb.total(), 0, "{size}: a plain receive took a claimed message: {:?}", cb.ok);
            let mut rx = vec![0u8; size];
            // SAFETY: rx outlives the claim, which completes below.
            unsafe { trecv_flags(&p.b, &mut rx, tag, 0x62, FI_CLAIM) }.unwrap_or_else(|e| panic!("{size}: claim: {e}"));
            let cb = p.wait_b(1, TIMEOUT);
            assert_eq!(cb.ok.len(), 1, "{size}: claim receive: {}", errs(&cb));
            assert_recv(&cb.ok[0], 0x62, size, true);
            assert_bytes_eq(&rx, &tx, "claimed data");
            sender_completes(&p, &mut sa, 0x61, "claim");
            p.b.cancel(0x63).unwrap_or_else(|e| panic!("cancel of the unmatched receive: {e}"));
            let cb = p.wait_b(1, TIMEOUT);
            assert_eq!(cb.err.len(), 1, "cancelled receive: {:?}", cb.ok);
        }
        Ok(())
    }
);

/// After a discard, the message is gone: a peek misses and a receive gets
/// nothing.
fn assert_gone(p: &Pair, tag: u64, what: &str) {
    // SAFETY: a peek places no data.
    unsafe { trecv_flags(&p.b, &mut [], tag, 0x7f, FI_PEEK) }.unwrap();
    let c = p.wait_b(1, TIMEOUT);
    assert!(
        c.ok.is_empty(),
        "{what}: discarded message still visible to peek: {:?}",
        c.ok
    );
    assert_eq!(
        c.err.first().map(|e| e.err),
        Some(errno::FI_ENOMSG),
        "{what}: peek after discard"
    );
}

conformance!(
    /// FI_PEEK|FI_DISCARD drops the message (with a completion); FI_CLAIM|
    /// FI_DISCARD drops a claimed one. The senders still complete.
    fn discard_drops_message(info) {
        let p = Pair::open(info, FI_TAGGED)?;
        for (i, size) in sizes_for(info, &CLASS_SIZES).into_iter().enumerate() {
            let tag = 0x6000 + i as u64;
            let tx = pattern(i as u64, size);
            send_tagged(&p, &tx, tag, 0x71);
            let e = peek_until_found(&p, tag, 0x72, FI_DISCARD).unwrap_or_else(|e| panic!("{size}: peek|discard: err {}", e.err));
            assert_eq!(e.op_context, 0x72);
            assert_gone(&p, tag, &format!("peek|discard {size}"));
            sender_completes(&p, &mut Completions::default(), 0x71, "peek|discard");

            send_tagged(&p, &tx, tag, 0x73);
            peek_until_found(&p, tag, 0x74, FI_CLAIM).unwrap_or_else(|e| panic!("{size}: peek|claim: err {}", e.err));
            // SAFETY: a discard places no data.
            unsafe { trecv_flags(&p.b, &mut [], tag, 0x74, FI_CLAIM | FI_DISCARD) }.unwrap_or_else(|e| panic!("claim|discard: {e}"));
            let c = p.wait_b(1, TIMEOUT);
            assert_eq!(c.ok.len(), 1, "{size}: claim|discard: {}", errs(&c));
            assert_eq!(c.ok[0].op_context, 0x74);
            assert_gone(&p, tag, &format!("claim|discard {size}"));
            sender_completes(&p, &mut Completions::default(), 0x73, "claim|discard");
        }
        // A later message with the same tag is delivered normally.
        let mut rx = [0u8; 8];
        // SAFETY: rx outlives the receive, which completes below.
        unsafe { p.b.trecv(rx.as_mut_ptr(), 8, FI_ADDR_UNSPEC, 0x6000, 0, 0x75) }.unwrap();
        send_tagged(&p, b"after-dc", 0x6000, 0x76);
        let (_, cb) = p.wait(1, 1, TIMEOUT);
        assert_eq!(cb.ok.len(), 1, "{}", errs(&cb));
        assert_eq!(&rx, b"after-dc");
        Ok(())
    }
);

fn multi_recv(info: &ofi::Info, posted_first: bool) -> Outcome {
    let p = Pair::open(info, FI_MSG | FI_MULTI_RECV)?;
    const BUF: usize = 10_000;
    const MIN: usize = 2000;
    const MSG: usize = 1000;
    const N: usize = 10; // 9 fit before less than MIN remains; the 10th goes elsewhere
    let what = if posted_first { "posted" } else { "unexpected" };
    p.b.setopt(opt::FI_OPT_MIN_MULTI_RECV, MIN)
        .unwrap_or_else(|e| panic!("setopt FI_OPT_MIN_MULTI_RECV: {e}"));
    assert_eq!(
        p.b.getopt(opt::FI_OPT_MIN_MULTI_RECV).ok(),
        Some(MIN),
        "getopt FI_OPT_MIN_MULTI_RECV"
    );
    let mut buf = vec![0u8; BUF];
    let base = buf.as_ptr() as usize;
    let mut last = [0u8; MSG];
    let txs: Vec<Vec<u8>> = (0..N).map(|i| pattern(300 + i as u64, MSG)).collect();
    let post = |buf: &mut Vec<u8>, last: &mut [u8; MSG]| {
        let iov = [IoVec::from_mut(buf)];
        let op = RecvOp {
            iov: &iov,
            desc: &[],
            src: FI_ADDR_UNSPEC,
            tag: 0,
            ignore: 0,
            context: 0xaa,
            flags: FI_MULTI_RECV | FI_COMPLETION,
            tagged: false,
        };
        // SAFETY: buf outlives the multi-receive, which is released below.
        unsafe { p.b.post_recv(&op) }.unwrap_or_else(|e| panic!("multi-recv post: {e}"));
        // SAFETY: last outlives the receive, which completes below.
        unsafe { p.b.recv(last.as_mut_ptr(), MSG, FI_ADDR_UNSPEC, 0xbb) }.unwrap();
    };
    if posted_first {
        post(&mut buf, &mut last);
    }
    for (i, tx) in txs.iter().enumerate() {
        // SAFETY: txs outlives every send.
        retry(&[&p.a, &p.b], TIMEOUT, || unsafe {
            p.a.send(tx.as_ptr(), MSG, p.fb, i)
        })
        .unwrap();
    }
    let mut cb = Completions::default();
    let mut ca = Completions::default();
    if !posted_first {
        let (early_a, early_b) = p.settle(Duration::from_millis(30));
        assert_eq!(early_b.total(), 0, "{what}: completion without a receive");
        ca.extend(early_a);
        post(&mut buf, &mut last);
    }
    // Wait until the regular receive completed and the buffer was released.
    let deadline = Instant::now() + TIMEOUT;
    while Instant::now() < deadline {
        poll_cq(&p.cq_a, &mut ca);
        poll_cq(&p.cq_b, &mut cb);
        let released = cb
            .ok
            .iter()
            .any(|e| e.op_context == 0xaa && e.flags & FI_MULTI_RECV != 0);
        if released && cb.ok_ctx(0xbb).is_some() {
            break;
        }
        std::thread::yield_now();
    }
    let (more_a, more_b) = p.settle(Duration::from_millis(10));
    ca.extend(more_a);
    cb.extend(more_b);
    assert!(ca.err.is_empty(), "{what}: sender errors {}", errs(&ca));
    assert_eq!(ca.ok.len(), N, "{what}: send completions");
    assert!(cb.err.is_empty(), "{what}: errors {}", errs(&cb));
    let mine: Vec<_> = cb.ok.iter().filter(|e| e.op_context == 0xaa).collect();
    let data: Vec<_> = mine.iter().filter(|e| e.len > 0).collect();
    assert_eq!(
        data.len(),
        N - 1,
        "{what}: messages placed in the multi-receive buffer: {mine:?}"
    );
    for (k, e) in data.iter().enumerate() {
        assert!(e.flags & FI_RECV != 0, "{what}: flags {:#x}", e.flags);
        assert_eq!(e.len, MSG, "{what}: message {k} length");
        assert_eq!(
            e.buf,
            base + k * MSG,
            "{what}: message {k} must be placed right after the previous one"
        );
        assert_bytes_eq(
            &buf[k * MSG..(k + 1) * MSG],
            &txs[k],
            &format!("{what}: message {k} in the multi-receive buffer"),
        );
    }
    let with_flag: Vec<usize> = mine
        .iter()
        .enumerate()
        .filter(|(_, e)| e.flags & FI_MULTI_RECV != 0)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(
        with_flag,
        vec![mine.len() - 1],
        "{what}: FI_MULTI_RECV must mark exactly the last completion of the buffer: {mine:?}"
    );
    let r = cb.ok_ctx(0xbb).unwrap_or_else(|| {
        panic!("{what}: the message after the buffer was released did not reach the next receive")
    });
    assert_eq!(r.len, MSG);
    assert_bytes_eq(
        &last,
        &txs[N - 1],
        &format!("{what}: message after release"),
    );
    Ok(())
}

conformance!(
    /// FI_MULTI_RECV: one buffer takes several messages back to back;
    /// completions point inside it; the last carries FI_MULTI_RECV once less
    /// than FI_OPT_MIN_MULTI_RECV remains (posted and unexpected messages).
    fn multi_recv_fills_buffer_and_releases(info) {
        multi_recv(info, true)?;
        multi_recv(info, false)
    }
);

conformance!(
    /// cancel: a posted receive completes with FI_ECANCELED and takes no
    /// message afterwards; unknown or already cancelled contexts are errors.
    fn cancel_posted_receive(info) {
        let p = Pair::open(info, FI_MSG)?;
        let mut dead = [0u8; 8];
        let mut live = [0u8; 8];
        // SAFETY: dead outlives the receive, which is cancelled below.
        unsafe { p.b.recv(dead.as_mut_ptr(), 8, FI_ADDR_UNSPEC, 0xc1) }.unwrap();
        p.b.cancel(0xc1).unwrap_or_else(|e| panic!("cancel of a posted receive: {e}"));
        let mut got = [ofi::CqTaggedEntry::default()];
        let r = p.cq_b.read(&mut got);
        assert_eq!(r.err().map(|e| e.code()), Some(errno::FI_EAVAIL), "read after cancel must report FI_EAVAIL");
        let c = wait_for(&p.cq_b, 1, TIMEOUT);
        assert_eq!(c.err.len(), 1, "cancelled receive: {:?}", c.ok);
        let e = &c.err[0];
        assert_eq!((e.err, e.op_context), (errno::FI_ECANCELED, 0xc1), "cancel entry: {}", errs(&c));
        assert!(e.flags & FI_RECV != 0, "cancel entry flags {:#x}", e.flags);
        // The cancelled buffer takes nothing.
        // SAFETY: static message.
        unsafe { p.a.send(b"after-cx".as_ptr(), 8, p.fb, 1) }.unwrap();
        let (_, cb) = p.settle(Duration::from_millis(30));
        assert_eq!(cb.total(), 0, "a message completed into a cancelled receive: {:?}", cb.ok);
        assert_eq!(dead, [0u8; 8], "a cancelled receive buffer was written");
        // SAFETY: live outlives the receive, which completes below.
        unsafe { p.b.recv(live.as_mut_ptr(), 8, FI_ADDR_UNSPEC, 0xc2) }.unwrap();
        let (_, cb) = p.wait(0, 1, TIMEOUT);
        assert_eq!(cb.ok.len(), 1, "{}", errs(&cb));
        assert_eq!(&live, b"after-cx");
        let e = p.b.cancel(0xc1).expect_err("second cancel of the same context must fail");
        assert_eq!(e.code(), errno::FI_ENOENT, "second cancel: {e}");
        let e = p.b.cancel(0xdead_beef).expect_err("cancel of an unknown context must fail");
        assert_eq!(e.code(), errno::FI_ENOENT, "unknown cancel: {e}");
        if info.caps & FI_TAGGED != 0 {
            // SAFETY: dead outlives the receive, which is cancelled below.
            unsafe { p.b.trecv(dead.as_mut_ptr(), 8, FI_ADDR_UNSPEC, 5, 0, 0xc3) }.unwrap();
            p.b.cancel(0xc3).unwrap();
            let c = wait_for(&p.cq_b, 1, TIMEOUT);
            assert_eq!(c.err.first().map(|e| (e.err, e.op_context)), Some((errno::FI_ECANCELED, 0xc3)));
            assert!(c.err[0].flags & FI_TAGGED != 0, "tagged cancel entry flags {:#x}", c.err[0].flags);
        }
        let (_, cb) = p.settle(Duration::from_millis(20));
        assert_eq!(cb.total(), 0, "cancel of unknown contexts produced entries: {}", errs(&cb));
        Ok(())
    }
);
