//! Completion queues and counters: counting, waits with timeouts, blocking
//! reads woken by traffic and by signal, and the pollable wait fd.
#![allow(unsafe_code)]

use ofi::consts::*;
use ofi::errno;
use ofi::spi::HasCore;
use ofi::{CntrAttr, CqAttr, CqTaggedEntry};
use ofi_conformance::*;
use std::time::{Duration, Instant};

/// Two endpoints where `a` counts sends and `b` counts receives, with CQs
/// too unless `counters_only`.
struct Counted {
    a: ofi::Endpoint,
    b: ofi::Endpoint,
    fb: u64,
    _cm: Option<Cm>,
    tx: ofi::Counter,
    rx: ofi::Counter,
    cqs: Vec<ofi::CompletionQueue>,
    _av: Option<ofi::AddressVector>,
    _d: ofi::Domain,
    _f: ofi::Fabric,
}

fn counted(info: &ofi::Info, counters_only: bool) -> Result<Counted, Skip> {
    require(info, FI_MSG)?;
    require_pairable(info)?;
    let (f, d, av) = open_domain(info);
    let tx = d.cntr(&CntrAttr::default()).expect("cntr open");
    let rx = d.cntr(&CntrAttr::default()).expect("cntr open");
    let cqs: Vec<_> = if counters_only {
        Vec::new()
    } else {
        (0..2)
            .map(|_| tagged_cq(&d, wait_obj::FI_WAIT_UNSPEC))
            .collect()
    };
    let two = open_two(&f, &d, av.as_ref(), info, |i, ep| {
        if let Some(cq) = cqs.get(i) {
            ep.bind_cq(cq, FI_TRANSMIT | FI_RECV).expect("bind cq");
        }
        match i {
            0 => ep.bind_cntr(&tx, FI_SEND).expect("bind send counter"),
            _ => ep.bind_cntr(&rx, FI_RECV).expect("bind recv counter"),
        }
    })?;
    Ok(Counted {
        a: two.a,
        b: two.b,
        fb: two.fb,
        _cm: two.cm,
        tx,
        rx,
        cqs,
        _av: av,
        _d: d,
        _f: f,
    })
}

conformance!(
    /// Counters bound to endpoints count completed sends and receives;
    /// waits reach their thresholds; a truncated receive counts as an error.
    fn counters_count_sends_and_receives(info) {
        let c = counted(info, false)?;
        const N: usize = 10;
        let mut rx = vec![[0u8; 64]; N];
        for (i, r) in rx.iter_mut().enumerate() {
            // SAFETY: rx outlives the receives, which complete below.
            unsafe { c.b.recv(r.as_mut_ptr(), 64, FI_ADDR_UNSPEC, i) }.unwrap();
        }
        let tx = pattern(1, 64);
        for i in 0..N {
            // SAFETY: tx outlives the sends.
            retry(&[&c.a, &c.b], TIMEOUT, || unsafe { c.a.send(tx.as_ptr(), 64, c.fb, i) }).unwrap();
        }
        c.rx.wait(N as u64, Some(TIMEOUT)).unwrap_or_else(|e| panic!("receive counter wait: {e} (value {})", c.rx.read()));
        c.tx.wait(N as u64, Some(TIMEOUT)).unwrap_or_else(|e| panic!("send counter wait: {e} (value {})", c.tx.read()));
        assert_eq!(c.rx.read(), N as u64, "receive counter");
        assert_eq!(c.tx.read(), N as u64, "send counter");
        assert_eq!((c.rx.readerr(), c.tx.readerr()), (0, 0), "error counts");
        assert!(rx.iter().all(|r| r[..] == tx[..]));
        // inject counts on the send counter too.
        if info.tx_attr.inject_size >= 8 {
            let mut r = [0u8; 8];
            // SAFETY: r outlives the receive, which completes below.
            unsafe { c.b.recv(r.as_mut_ptr(), 8, FI_ADDR_UNSPEC, 99) }.unwrap();
            c.a.inject(b"injected", c.fb).unwrap();
            c.rx.wait(N as u64 + 1, Some(TIMEOUT)).unwrap();
            c.tx.wait(N as u64 + 1, Some(TIMEOUT)).unwrap_or_else(|e| panic!("inject not counted: {e}"));
        }
        let base = c.rx.read();
        // A truncated receive is an error event.
        let mut small = [0u8; 4];
        // SAFETY: small outlives the receive, which completes below.
        unsafe { c.b.recv(small.as_mut_ptr(), 4, FI_ADDR_UNSPEC, 100) }.unwrap();
        // SAFETY: tx outlives the send.
        unsafe { c.a.send(tx.as_ptr(), 64, c.fb, 101) }.unwrap();
        let deadline = Instant::now() + TIMEOUT;
        while c.rx.readerr() == 0 && Instant::now() < deadline {
            c.a.progress();
            std::thread::yield_now();
        }
        assert_eq!(c.rx.readerr(), 1, "a truncated receive must count as an error");
        assert_eq!(c.rx.read(), base, "a truncated receive must not count as a success");
        // add / set.
        c.tx.set(5);
        c.tx.add(3);
        assert_eq!(c.tx.read(), 8, "set then add");
        Ok(())
    }
);

conformance!(
    /// An endpoint bound to counters and no CQ still transfers and counts.
    fn counters_without_cq(info) {
        let c = counted(info, true)?;
        assert!(c.cqs.is_empty());
        let mut r = [0u8; 16];
        // SAFETY: r outlives the receive, which completes below.
        unsafe { c.b.recv(r.as_mut_ptr(), 16, FI_ADDR_UNSPEC, 1) }.unwrap();
        // SAFETY: static message.
        unsafe { c.a.send(b"counted, no cq!!".as_ptr(), 16, c.fb, 2) }.unwrap();
        c.rx.wait(1, Some(TIMEOUT)).unwrap_or_else(|e| panic!("receive counter: {e}"));
        c.tx.wait(1, Some(TIMEOUT)).unwrap_or_else(|e| panic!("send counter: {e}"));
        assert_eq!(&r, b"counted, no cq!!");
        Ok(())
    }
);

conformance!(
    /// A counter wait that is not reached returns FI_ETIMEDOUT (110) after
    /// the timeout, not before, and leaves the count alone.
    fn counter_wait_times_out(info) {
        let c = counted(info, false)?;
        let t = Instant::now();
        let e = c.rx.wait(1, Some(Duration::from_millis(200))).expect_err("wait for an event that never comes must fail");
        let took = t.elapsed();
        assert_eq!(e.code(), errno::FI_ETIMEDOUT, "counter wait timeout: {e}");
        assert_eq!(e.code(), 110);
        assert!(took >= Duration::from_millis(150), "counter wait returned after {took:?}, before its 200 ms timeout");
        assert!(took < TIMEOUT, "counter wait took {took:?}");
        assert_eq!(c.rx.read(), 0);
        Ok(())
    }
);

conformance!(
    /// A counter wait in one thread wakes when a message sent by another
    /// thread arrives.
    fn counter_wait_wakes_on_arrival(info) {
        let c = counted(info, false)?;
        let mut r = [0u8; 8];
        // SAFETY: r outlives the receive, which completes below.
        unsafe { c.b.recv(r.as_mut_ptr(), 8, FI_ADDR_UNSPEC, 1) }.unwrap();
        std::thread::scope(|s| {
            let waiter = s.spawn(|| c.rx.wait(1, Some(TIMEOUT)));
            std::thread::sleep(Duration::from_millis(100));
            // SAFETY: static message.
            unsafe { c.a.send(b"wake up!".as_ptr(), 8, c.fb, 2) }.unwrap();
            let r = waiter.join().expect("waiter panicked");
            r.unwrap_or_else(|e| panic!("counter wait did not wake on arrival: {e}"));
        });
        assert_eq!(&r, b"wake up!");
        Ok(())
    }
);

conformance!(
    /// sread on an empty CQ returns FI_EAGAIN after its timeout.
    fn sread_times_out_with_eagain(info) {
        let p = Pair::open(info, FI_MSG)?;
        let mut e = [CqTaggedEntry::default(); 4];
        let t = Instant::now();
        let r = p.cq_b.sread(&mut e, Some(Duration::from_millis(200)));
        let took = t.elapsed();
        assert_eq!(r.as_ref().err().map(|e| e.code()), Some(errno::FI_EAGAIN), "sread on an empty CQ: {r:?}");
        assert!(took >= Duration::from_millis(150), "sread returned after {took:?}, before its 200 ms timeout");
        assert!(took < TIMEOUT, "sread took {took:?}");
        Ok(())
    }
);

conformance!(
    /// sread blocked in one thread wakes when a message sent by another
    /// thread arrives, and returns its completion.
    fn sread_wakes_on_arrival(info) {
        for wait in [wait_obj::FI_WAIT_UNSPEC, wait_obj::FI_WAIT_FD] {
            let p = Pair::open_with(info, FI_MSG, wait)?;
            let mut r = [0u8; 8];
            // SAFETY: r outlives the receive, which completes below.
            unsafe { p.b.recv(r.as_mut_ptr(), 8, FI_ADDR_UNSPEC, 0x5) }.unwrap();
            std::thread::scope(|s| {
                let reader = s.spawn(|| {
                    let mut e = [CqTaggedEntry::default(); 4];
                    let got = p.cq_b.sread(&mut e, Some(TIMEOUT));
                    (got, e[0])
                });
                std::thread::sleep(Duration::from_millis(150));
                // SAFETY: static message.
                unsafe { p.a.send(b"sread!!!".as_ptr(), 8, p.fb, 0x6) }.unwrap();
                let (got, e) = reader.join().expect("reader panicked");
                assert_eq!(got.unwrap_or_else(|e| panic!("wait {wait}: sread did not wake: {e}")), 1);
                assert_recv(&e, 0x5, 8, false);
            });
            assert_eq!(&r, b"sread!!!");
            let ca = wait_for(&p.cq_a, 1, TIMEOUT);
            assert_eq!(ca.ok.len(), 1);
        }
        Ok(())
    }
);

conformance!(
    /// fi_cq_signal unblocks a thread waiting in sread on an empty CQ (it
    /// returns FI_EAGAIN well before its timeout).
    fn signal_unblocks_sread(info) {
        let p = Pair::open(info, FI_MSG)?;
        let long = Duration::from_secs(10);
        std::thread::scope(|s| {
            let reader = s.spawn(|| {
                let mut e = [CqTaggedEntry::default(); 1];
                let t = Instant::now();
                let r = p.cq_b.sread(&mut e, Some(long));
                (r, t.elapsed())
            });
            std::thread::sleep(Duration::from_millis(200));
            p.cq_b.signal();
            let (r, took) = reader.join().expect("reader panicked");
            assert!(took < Duration::from_secs(5), "sread was not woken by signal: it returned after {took:?} ({r:?})");
            assert_eq!(r.err().map(|e| e.code()), Some(errno::FI_EAGAIN), "sread woken by signal with nothing queued");
        });
        Ok(())
    }
);

conformance!(
    /// The CQ's wait fd: trywait says it is safe to sleep on an empty CQ;
    /// the fd is not readable then, becomes readable when a message arrives
    /// (from another endpoint of this process), and trywait then refuses.
    fn wait_fd_readable_after_trywait(info) {
        let p = Pair::open_with(info, FI_MSG, wait_obj::FI_WAIT_FD)?;
        let fd = p.cq_b.wait_fd().expect("a CQ opened with FI_WAIT_FD has a wait fd");
        let mut r = [0u8; 8];
        // SAFETY: r outlives the receive, which completes below.
        unsafe { p.b.recv(r.as_mut_ptr(), 8, FI_ADDR_UNSPEC, 0x7) }.unwrap();
        p.cq_b.trywait().unwrap_or_else(|e| panic!("trywait on an empty CQ: {e}"));
        assert!(!readable(fd, 0), "wait fd readable with nothing to read");
        // SAFETY: static message.
        unsafe { p.a.send(b"poll me!".as_ptr(), 8, p.fb, 0x8) }.unwrap();
        assert!(readable(fd, 5000), "wait fd did not become readable within 5 s of a message arriving");
        let e = p.cq_b.trywait().expect_err("trywait with a completion ready must refuse");
        assert!(e.is_again(), "trywait: {e}");
        let c = wait_for(&p.cq_b, 1, TIMEOUT);
        assert_eq!(c.ok.len(), 1, "{}", errs(&c));
        assert_eq!(&r, b"poll me!");
        Ok(())
    }
);

conformance!(
    /// A CQ with FI_WAIT_NONE has no wait fd and refuses to block.
    fn wait_none_cq_has_no_fd(info) {
        let (_f, d, _av) = open_domain(info);
        let cq = tagged_cq(&d, wait_obj::FI_WAIT_NONE);
        assert!(cq.wait_fd().is_none(), "FI_WAIT_NONE CQ exposes a wait fd");
        let mut e = [CqTaggedEntry::default(); 1];
        let r = cq.sread(&mut e, Some(Duration::from_millis(10)));
        assert!(r.as_ref().is_err_and(|e| !e.is_again()), "sread on FI_WAIT_NONE must fail (not time out): {r:?}");
        Ok(())
    }
);

conformance!(
    /// A wait set with both endpoints' CQs and a counter: fi_wait times out
    /// with nothing to read, then drives progress until a message has
    /// arrived; a poll set over the same CQs and the counter names the
    /// receiver's CQ while it holds the completion and the counter once it
    /// counted; the set's fd is readable while a member has something.
    fn poll_and_wait_sets_report_arrivals(info) {
        require(info, FI_MSG)?;
        require_pairable(info)?;
        let (f, d, av) = open_domain(info);
        let ws = f.wait_set(wait_obj::FI_WAIT_FD).expect("wait set");
        let in_set = CqAttr {
            size: 0,
            format: cq_format::FI_CQ_FORMAT_TAGGED,
            wait_obj: wait_obj::FI_WAIT_SET,
        };
        let cqs = [d.cq_in(&in_set, &ws).expect("cq"), d.cq_in(&in_set, &ws).expect("cq")];
        let rx = d
            .cntr_in(&CntrAttr { events: 0, wait_obj: wait_obj::FI_WAIT_SET }, &ws)
            .expect("counter");
        let two = open_two(&f, &d, av.as_ref(), info, |i, ep| {
            ep.bind_cq(&cqs[i], FI_TRANSMIT | FI_RECV).expect("bind cq");
            if i == 1 {
                ep.bind_cntr(&rx, FI_RECV).expect("bind counter");
            }
        })?;
        let ps = d.poll_set().expect("poll set");
        ps.add_cq(&cqs[0], 10);
        ps.add_cq(&cqs[1], 11);
        ps.add_cntr(&rx, 12);
        let fd = ws.wait_fd().expect("a wait set has an fd");
        // Connection setup may have left events behind: settle first.
        let _ = ws.wait(Some(Duration::from_millis(50)));
        ws.trywait().unwrap_or_else(|e| panic!("trywait with nothing to read: {e}"));
        assert!(!readable(fd, 0), "wait set fd readable with nothing to read");
        let e = ws.wait(Some(Duration::from_millis(20))).expect_err("nothing to wait for");
        assert_eq!(e.code(), errno::FI_ETIMEDOUT, "{e}");
        let mut keys = [0usize; 4];
        assert_eq!(ps.poll(&mut keys), 0, "poll set with nothing new: {keys:?}");
        let mut r = [0u8; 8];
        // SAFETY: r outlives the receive, which completes below.
        unsafe { two.b.recv(r.as_mut_ptr(), 8, FI_ADDR_UNSPEC, 0x31) }.unwrap();
        // SAFETY: static message.
        retry(&[&two.a, &two.b], TIMEOUT, || unsafe { two.a.send(b"wait set".as_ptr(), 8, two.fb, 0x32) }).unwrap();
        let deadline = Instant::now() + TIMEOUT;
        while rx.core().counts().0 == 0 && Instant::now() < deadline {
            ws.wait(Some(TIMEOUT)).unwrap_or_else(|e| panic!("fi_wait: {e}"));
            let _ = wait_for(&cqs[0], 1, Duration::ZERO);
        }
        assert_eq!(&r, b"wait set");
        assert!(readable(fd, 0), "wait set fd not readable with a completion queued");
        let n = ps.poll(&mut keys);
        assert!(keys[..n].contains(&11) && keys[..n].contains(&12), "poll set names {:?}", &keys[..n]);
        let c = wait_for(&cqs[1], 1, TIMEOUT);
        assert_eq!(c.ok.len(), 1, "{}", errs(&c));
        assert_eq!(rx.read(), 1);
        let n = ps.poll(&mut keys);
        assert!(!keys[..n].contains(&11) && !keys[..n].contains(&12), "poll set names {:?} once drained", &keys[..n]);
        ps.del_cq(&cqs[0]).expect("del");
        ps.del_cq(&cqs[1]).expect("del");
        ps.del_cntr(&rx).expect("del");
        drop(two);
        Ok(())
    }
);
