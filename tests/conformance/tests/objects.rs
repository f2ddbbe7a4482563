//! Object lifetimes and misuse: close refusals while dependents are open,
//! operations in the wrong state, bad destinations and malformed addresses.
#![allow(unsafe_code)]

use ofi::consts::*;
use ofi::errno;
use ofi::{CntrAttr, CqAttr, CqTaggedEntry};
use ofi_conformance::*;
use std::time::{Duration, Instant};

/// Asserts a close was refused with FI_EBUSY and hands the object back.
#[track_caller]
fn refused<T>(r: Result<(), Box<(T, ofi::Error)>>, what: &str) -> T {
    match r {
        Ok(()) => panic!("closing the {what} with dependents open succeeded"),
        Err(b) => {
            let (obj, e) = *b;
            assert_eq!(e.code(), errno::FI_EBUSY, "closing the {what}: {e}");
            assert!(!e.message().is_empty(), "EBUSY without a message");
            obj
        }
    }
}

conformance!(
    /// CQ, AV (RDM) or EQ (MSG), counter, domain and fabric refuse to close
    /// (FI_EBUSY, object handed back and still usable) while something
    /// depends on them, and close once the dependents are gone.
    fn close_refused_while_dependents_open(info) {
        let p = Pair::open(info, FI_MSG)?;
        let Pair { a, b, cq_a, cq_b, fb, cm, av, domain, fabric, .. } = p;
        let cntr = domain.cntr(&CntrAttr::default()).expect("cntr");
        let c = domain.endpoint(info).expect("endpoint");
        c.bind_cntr(&cntr, FI_SEND).expect("bind cntr (not enabled)");
        let cq_a = refused(cq_a.close(), "CQ bound to an endpoint");
        let av = av.map(|av| refused(av.close(), "AV bound to endpoints"));
        let cm = cm.map(|Cm { pep, eq }| Cm { pep, eq: refused(eq.close(), "EQ bound to endpoints") });
        let cntr = refused(cntr.close(), "counter bound to an endpoint");
        let domain = refused(domain.close(), "domain with open children");
        let fabric = refused(fabric.close(), "fabric with an open domain");
        // The handed-back objects still work.
        let mut e = [CqTaggedEntry::default(); 1];
        assert!(cq_a.read(&mut e).is_err_and(|e| e.is_again()), "handed-back CQ");
        let mut rx = [0u8; 4];
        // SAFETY: rx outlives the receive, which completes below.
        unsafe { b.recv(rx.as_mut_ptr(), 4, FI_ADDR_UNSPEC, 1) }.unwrap();
        // SAFETY: static message.
        unsafe { a.send(b"live".as_ptr(), 4, fb, 2) }.unwrap();
        let got = wait_for(&cq_b, 1, TIMEOUT);
        assert_eq!(got.ok.len(), 1, "traffic after refused closes: {}", errs(&got));
        assert_eq!(&rx, b"live");
        // Release dependents one by one.
        drop(c);
        cntr.close().map_err(|b| b.1).expect("counter close after its endpoint closed");
        a.close().map_err(|b| b.1).expect("endpoint close");
        cq_a.close().map_err(|b| b.1).expect("CQ close after its endpoint closed");
        match (av, cm) {
            (Some(av), _) => {
                let av = refused(av.close(), "AV still bound to the other endpoint");
                drop(b);
                av.close().map_err(|b| b.1).expect("AV close after its endpoints closed");
            }
            (None, Some(Cm { pep, eq })) => {
                let eq = refused(eq.close(), "EQ still bound to the other endpoint");
                drop(b);
                let eq = refused(eq.close(), "EQ still bound to the listener");
                drop(pep);
                eq.close().map_err(|b| b.1).expect("EQ close after its endpoints and listener closed");
            }
            (None, None) => unreachable!("a pair has an AV or a connection"),
        }
        let domain = refused(domain.close(), "domain with a CQ still open");
        cq_b.close().map_err(|b| b.1).expect("CQ close");
        domain.close().map_err(|b| b.1).expect("domain close with nothing open");
        fabric.close().map_err(|b| b.1).expect("fabric close with nothing open");
        Ok(())
    }
);

conformance!(
    /// Data operations on an endpoint that is not enabled fail with
    /// FI_EOPBADSTATE (258); binding after enable does too; enable without
    /// an AV (RDM) or without a CQ/counter fails with FI_ENOAV / FI_ENOCQ;
    /// an enabled MSG endpoint that never connected refuses sends.
    fn wrong_state_operations(info) {
        require(info, FI_MSG)?;
        require_pairable(info)?;
        let (_f, d, av) = open_domain(info);
        let cq = tagged_cq(&d, wait_obj::FI_WAIT_UNSPEC);
        let ep = d.endpoint(info).expect("endpoint");
        let e = ep.enable().expect_err("enable with nothing bound");
        assert!(e.code() == errno::FI_ENOAV || e.code() == errno::FI_ENOCQ, "enable with nothing bound: {e}");
        ep.bind_cq(&cq, FI_TRANSMIT | FI_RECV).unwrap();
        let peer = match &av {
            Some(av) => {
                let e = ep.enable().expect_err("enable of an RDM endpoint without an AV");
                assert_eq!(e.code(), errno::FI_ENOAV, "{e}");
                ep.bind_av(av).unwrap();
                insert(av, &ep)
            }
            None => FI_ADDR_UNSPEC,
        };
        let buf = [0u8; 8];
        let mut rbuf = [0u8; 8];
        // SAFETY: the calls must fail; the buffers outlive them anyway.
        let r = unsafe { ep.send(buf.as_ptr(), 8, peer, 1) };
        assert_eq!(r.err().map(|e| e.code()), Some(errno::FI_EOPBADSTATE), "send before enable");
        assert_eq!(errno::FI_EOPBADSTATE, 258);
        // SAFETY: the call must fail (the endpoint is not enabled);
        // rbuf, 8 bytes, outlives it anyway.
        let r = unsafe { ep.recv(rbuf.as_mut_ptr(), 8, FI_ADDR_UNSPEC, 2) };
        assert_eq!(r.err().map(|e| e.code()), Some(errno::FI_EOPBADSTATE), "recv before enable");
        let r = ep.inject(&buf, peer);
        assert_eq!(r.err().map(|e| e.code()), Some(errno::FI_EOPBADSTATE), "inject before enable");
        if info.caps & FI_TAGGED != 0 {
            // SAFETY: the call must fail (the endpoint is not enabled);
            // buf, 8 bytes, outlives it anyway.
            let r = unsafe { ep.tsend(buf.as_ptr(), 8, peer, 1, 3) };
            assert_eq!(r.err().map(|e| e.code()), Some(errno::FI_EOPBADSTATE), "tsend before enable");
            // SAFETY: the call must fail (the endpoint is not enabled);
            // rbuf, 8 bytes, outlives it anyway.
            let r = unsafe { ep.trecv(rbuf.as_mut_ptr(), 8, FI_ADDR_UNSPEC, 1, 0, 4) };
            assert_eq!(r.err().map(|e| e.code()), Some(errno::FI_EOPBADSTATE), "trecv before enable");
        }
        ep.enable().unwrap_or_else(|e| panic!("enable: {e}"));
        let e = ep.enable().expect_err("second enable");
        assert_eq!(e.code(), errno::FI_EOPBADSTATE, "second enable: {e}");
        let cq2 = tagged_cq(&d, wait_obj::FI_WAIT_UNSPEC);
        let e = ep.bind_cq(&cq2, FI_RECV).expect_err("bind after enable");
        assert_eq!(e.code(), errno::FI_EOPBADSTATE, "bind cq after enable: {e}");
        if is_msg(info) {
            // SAFETY: the call must fail; buf outlives it anyway.
            let r = unsafe { ep.send(buf.as_ptr(), 8, peer, 5) };
            let e = r.expect_err("send on an MSG endpoint that never connected");
            assert!(!e.is_again(), "send before connecting must fail, not ask to retry: {e}");
        }
        // Nothing the refused calls did is visible.
        let got = wait_for(&cq, 1, Duration::from_millis(50));
        assert_eq!(got.total(), 0, "refused calls produced completions: {:?} {}", got.ok, errs(&got));
        Ok(())
    }
);

conformance!(
    /// A send to an fi_addr that is not in the AV fails: at once, or with an
    /// error completion; nothing is delivered anywhere.
    fn send_to_unknown_fi_addr_fails(info) {
        require_rdm(info, "destinations resolved through an AV; connected FI_EP_MSG endpoints ignore them")?;
        let p = Pair::open(info, FI_MSG)?;
        let mut rx = [0u8; 8];
        // SAFETY: rx outlives the receive; the pair drops it at the end.
        unsafe { p.b.recv(rx.as_mut_ptr(), 8, FI_ADDR_UNSPEC, 1) }.unwrap();
        for bogus in [12_345u64, p.fb + 1000, FI_ADDR_NOTAVAIL - 1] {
            // SAFETY: static message; we wait for any completion below.
            match unsafe { p.a.send(b"nowhere!".as_ptr(), 8, bogus, 0xbad) } {
                Err(e) => assert!(!e.is_again(), "send to fi_addr {bogus}: {e}"),
                Ok(()) => {
                    let c = wait_for(&p.cq_a, 1, TIMEOUT);
                    assert!(c.ok.is_empty(), "send to fi_addr {bogus} not in the AV completed successfully");
                    assert_eq!(c.err.len(), 1, "send to fi_addr {bogus}: no error completion");
                    assert_eq!(c.err[0].op_context, 0xbad);
                }
            }
        }
        let (_, cb) = p.settle(Duration::from_millis(30));
        assert_eq!(cb.total(), 0, "a message to a bogus fi_addr was delivered: {:?}", cb.ok);
        // The endpoint still works.
        // SAFETY: static message.
        unsafe { p.a.send(b"somewhr!".as_ptr(), 8, p.fb, 2) }.unwrap();
        let (_, cb) = p.wait(1, 1, TIMEOUT);
        assert_eq!(cb.ok.len(), 1, "{}", errs(&cb));
        assert_eq!(&rx, b"somewhr!");
        Ok(())
    }
);

conformance!(
    /// AV insert of a malformed address: that slot gets FI_ADDR_NOTAVAIL and
    /// the count of inserted addresses leaves it out; good ones still insert.
    fn av_insert_malformed_address(info) {
        require_rdm(info, "an AV the endpoints send through; connected FI_EP_MSG endpoints use none")?;
        let p = Pair::open(info, FI_MSG)?;
        let av = p.av.as_ref().expect("an RDM pair has an AV");
        let good = p.b.getname().unwrap();
        let garbage: &[u8] = b"\xff\x00not an address at all";
        let empty: &[u8] = b"";
        let mut out = [0u64; 4];
        let n = av.insert(&[garbage, &good, empty, &good], &mut out).unwrap_or_else(|e| panic!("av insert with some bad addresses: {e}"));
        assert_eq!(n, 2, "insert must count only the good addresses: {out:?}");
        assert_eq!(out[0], FI_ADDR_NOTAVAIL, "malformed address slot");
        assert_eq!(out[2], FI_ADDR_NOTAVAIL, "empty address slot");
        assert_ne!(out[1], FI_ADDR_NOTAVAIL);
        assert_ne!(out[3], FI_ADDR_NOTAVAIL);
        let e = av.insert_one(garbage).expect_err("insert_one of a malformed address");
        assert!(!e.message().is_empty());
        // The good fi_addr from the mixed insert works.
        let mut rx = [0u8; 4];
        // SAFETY: rx outlives the receive, which completes below.
        unsafe { p.b.recv(rx.as_mut_ptr(), 4, FI_ADDR_UNSPEC, 1) }.unwrap();
        // SAFETY: static message.
        unsafe { p.a.send(b"good".as_ptr(), 4, out[3], 2) }.unwrap();
        let (_, cb) = p.wait(1, 1, TIMEOUT);
        assert_eq!(cb.ok.len(), 1, "{}", errs(&cb));
        assert_eq!(&rx, b"good");
        let mut short = [0u64; 1];
        let r = av.insert(&[&good, &good], &mut short);
        assert_eq!(r.err().map(|e| e.code()), Some(errno::FI_EINVAL), "output array shorter than the address list");
        Ok(())
    }
);

conformance!(
    /// A send to an endpoint that was closed before any traffic fails (at
    /// once or with an error completion) instead of hanging or succeeding.
    /// RDM: the closed endpoint's address stays in the AV; MSG: the
    /// connection's end is reported (FI_SHUTDOWN) before the send.
    fn send_to_closed_endpoint_fails(info) {
        let p = Pair::open(info, FI_MSG)?;
        let Pair { a, b, cq_a, fb, cm, .. } = p;
        let deadline = Instant::now() + TIMEOUT;
        drop(b);
        if let Some(cm) = &cm {
            let ev = eq_wait(&cm.eq, deadline, "waiting for FI_SHUTDOWN after the peer closed");
            assert_eq!((ev.event, ev.fid), (eq_event::FI_SHUTDOWN, A_CTX), "event after the peer closed");
        }
        // SAFETY: static message; completion awaited below.
        match unsafe { a.send(b"to-a-ghost".as_ptr(), 10, fb, 0x9) } {
            Err(e) => assert!(!e.is_again(), "send to a closed endpoint: {e}"),
            Ok(()) => {
                let c = wait_for(&cq_a, 1, deadline - Instant::now());
                assert!(c.ok.is_empty(), "send to a closed endpoint completed successfully");
                assert_eq!(c.err.len(), 1, "no error completion for a send to a closed endpoint");
            }
        }
        Ok(())
    }
);

conformance!(
    /// Malformed CQ and counter attributes are FI_EINVAL.
    fn bad_cq_and_counter_attributes(info) {
        let (_f, d, _av) = open_domain(info);
        let e = d.cq(&CqAttr { size: 0, format: 99, wait_obj: wait_obj::FI_WAIT_NONE }).expect_err("cq format 99");
        assert_eq!(e.code(), errno::FI_EINVAL, "{e}");
        assert!(e.message().contains("format"), "error should name the field: {e}");
        let e = d.cq(&CqAttr { size: 0, format: cq_format::FI_CQ_FORMAT_TAGGED, wait_obj: 77 }).expect_err("cq wait_obj 77");
        assert_eq!(e.code(), errno::FI_EINVAL, "{e}");
        let e = d.cntr(&CntrAttr { events: 5, wait_obj: wait_obj::FI_WAIT_NONE }).expect_err("cntr events 5");
        assert_eq!(e.code(), errno::FI_EINVAL, "{e}");
        let e = d.av(&ofi::AvAttr { av_type: 9, count: 0 }).expect_err("av type 9");
        assert_eq!(e.code(), errno::FI_EINVAL, "{e}");
        Ok(())
    }
);

conformance!(
    /// After av.remove, sends to the removed fi_addr fail (the endpoint's
    /// cached peer is not used); re-inserting the address works again.
    fn send_to_removed_fi_addr_fails(info) {
        require_rdm(info, "destinations resolved through an AV; connected FI_EP_MSG endpoints ignore them")?;
        let p = Pair::open(info, FI_MSG)?;
        let av = p.av.as_ref().expect("an RDM pair has an AV");
        let mut rx = [0u8; 8];
        // SAFETY: rx outlives the receive, which completes below.
        unsafe { p.b.recv(rx.as_mut_ptr(), 8, FI_ADDR_UNSPEC, 1) }.unwrap();
        // SAFETY: static message.
        unsafe { p.a.send(b"cached!!".as_ptr(), 8, p.fb, 2) }.unwrap();
        let (_, cb) = p.wait(1, 1, TIMEOUT);
        assert_eq!(cb.ok.len(), 1, "{}", errs(&cb));
        av.remove(&[p.fb]).unwrap_or_else(|e| panic!("av remove: {e}"));
        assert!(av.lookup(p.fb).is_err(), "lookup of a removed fi_addr succeeded");
        // SAFETY: static message; any completion is awaited below.
        match unsafe { p.a.send(b"removed!".as_ptr(), 8, p.fb, 3) } {
            Err(e) => assert!(!e.is_again(), "send to a removed fi_addr: {e}"),
            Ok(()) => {
                let c = wait_for(&p.cq_a, 1, TIMEOUT);
                assert!(c.ok.is_empty(), "send to a removed fi_addr completed successfully");
                assert_eq!(c.err.len(), 1, "send to a removed fi_addr: no error completion");
            }
        }
        let (_, cb) = p.settle(Duration::from_millis(30));
        assert_eq!(cb.total(), 0, "a send to a removed fi_addr was delivered");
        let again = insert(av, &p.b);
        // SAFETY: rx outlives the receive, which completes below.
        unsafe { p.b.recv(rx.as_mut_ptr(), 8, FI_ADDR_UNSPEC, 4) }.unwrap();
        // SAFETY: static message.
        unsafe { p.a.send(b"reinsert".as_ptr(), 8, again, 5) }.unwrap();
        let (_, cb) = p.wait(1, 1, TIMEOUT);
        assert_eq!(cb.ok.len(), 1, "after re-insert: {}", errs(&cb));
        assert_eq!(&rx, b"reinsert");
        Ok(())
    }
);

/// A large send whose receiver endpoint closes before taking it: the send
/// must finish (with an error or success) within 5 s, never hang.
fn large_send_to_closing_endpoint(info: &ofi::Info, receiver_saw_it: bool) -> Outcome {
    let g = Group::open(info, FI_MSG, 2)?;
    let Group {
        mut eps,
        cqs,
        addrs,
        ..
    } = g;
    let buf = pattern(5, 1 << 20);
    // SAFETY: buf outlives the send; its completion is awaited below.
    unsafe { eps[0].send(buf.as_ptr(), buf.len(), addrs[1], 0x44) }.unwrap();
    if receiver_saw_it {
        for _ in 0..10 {
            eps[1].progress();
        }
    }
    drop(eps.pop()); // the receiver closes with the message unreceived
    let t = Instant::now();
    let c = wait_for(&cqs[0], 1, Duration::from_secs(5));
    assert_eq!(
        c.total(),
        1,
        "a 1 MiB send to an endpoint that closed ({}) did not finish within 5 s",
        if receiver_saw_it {
            "after seeing the message"
        } else {
            "without ever progressing"
        }
    );
    eprintln!(
        "send to a closed endpoint finished after {:?}: ok {:?} err {}",
        t.elapsed(),
        c.ok,
        errs(&c)
    );
    Ok(())
}

conformance!(
    /// A large send to an endpoint that closes before receiving it finishes
    /// (error or success) instead of waiting forever for an acknowledgement
    /// (receiver saw the message first, or never ran at all).
    fn large_send_to_closed_receiver_finishes(info) {
        large_send_to_closing_endpoint(info, true)?;
        large_send_to_closing_endpoint(info, false)
    }
);
