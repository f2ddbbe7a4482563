//! Shared receive contexts on tcp RDM endpoints (`fi_srx_context`, see
//! `ofi_core::util::srx`): two endpoints of one domain share one context
//! and one AV; two peers send to them. Receives posted to the context take
//! messages of either endpoint, tagged and untagged, eager and rendezvous,
//! whether posted before the messages arrive or after; each completes on
//! the CQ of the endpoint that received it, with the sender's data, and a
//! connection's messages take receives in posting order. A cancel is
//! reported on a member's CQ; the context cannot close while endpoints are
//! bound; a member with another AV is refused. A shared transmit context
//! (`fi_stx_context`, `ofi_core::util::stx`) takes endpoints whose
//! transmit attributes are within its own, whose sends complete on their
//! own CQs.
#![allow(unsafe_code)]

mod common;

use common::*;
use ofi_core::consts::*;
use ofi_core::error::errno;
use ofi_core::object::*;
use ofi_core::util::av::AvAttr;
use std::time::{Duration, Instant};

const BOUND: Duration = Duration::from_secs(10);
/// Above the eager limit (16 KiB): sent by rendezvous.
const BIG: usize = 256 << 10;

/// Two RDM endpoints sharing a receive context and an AV, each with its
/// own CQ. Fields drop in order: endpoints before the context.
struct Shared {
    a: Endpoint,
    b: Endpoint,
    srx: Endpoint,
    cq_a: CompletionQueue,
    cq_b: CompletionQueue,
    av: AddressVector,
    domain: Domain,
    _fabric: Fabric,
}

fn member(d: &Domain, av: &AddressVector, cq: &CompletionQueue, srx: &Endpoint) -> Endpoint {
    let info = offer(ep_type::FI_EP_RDM, "127.0.0.1");
    let ep = d.endpoint(&info).expect("endpoint");
    ep.bind_cq(cq, FI_TRANSMIT | FI_RECV).expect("bind cq");
    ep.bind_av(av).expect("bind av");
    ep.bind_srx(srx).expect("bind srx");
    ep.enable().expect("enable");
    ep
}

fn shared() -> Shared {
    let info = offer(ep_type::FI_EP_RDM, "127.0.0.1");
    assert!(
        info.domain_attr.max_ep_srx_ctx > 0,
        "tcp offers shared receive contexts"
    );
    let fabric = Fabric::open(&info.fabric_attr).expect("fabric");
    let domain = fabric.domain(&info).expect("domain");
    let av = domain.av(&AvAttr::default()).expect("av");
    let cq_a = domain.cq(&tagged_cq()).expect("cq");
    let cq_b = domain.cq(&tagged_cq()).expect("cq");
    let srx = domain.srx_context(None).expect("srx_context");
    let a = member(&domain, &av, &cq_a, &srx);
    let b = member(&domain, &av, &cq_b, &srx);
    Shared {
        a,
        b,
        srx,
        cq_a,
        cq_b,
        av,
        domain,
        _fabric: fabric,
    }
}

/// A sender with `to`'s address in its AV.
fn sender(to: &Endpoint) -> (Rdm, u64) {
    let s = Rdm::open(&offer(ep_type::FI_EP_RDM, "127.0.0.1"));
    let dest =
        s.av.insert_one(&to.getname().expect("getname"))
            .expect("insert");
    (s, dest)
}

/// Reads both members' CQs (and drives the senders, whose completions
/// stay in their CQs) until `n` receive
/// completions came or the bound passed: (endpoint index, completion).
fn collect(sh: &Shared, senders: &[&Rdm], n: usize) -> Vec<(usize, Done)> {
    let mut got = Vec::new();
    let end = Instant::now() + BOUND;
    while got.len() < n && Instant::now() < end {
        for (i, cq) in [&sh.cq_a, &sh.cq_b].into_iter().enumerate() {
            let mut v = Vec::new();
            poll(cq, &mut v);
            got.extend(v.into_iter().map(|d| (i, d)));
        }
        for s in senders {
            s.ep.progress();
        }
    }
    got
}

/// Waits for every send context in `ctxs` of `s` to complete.
fn sent(s: &Rdm, ctxs: &[usize], sh: &Shared) {
    let mut st = Vec::new();
    for &c in ctxs {
        ok(
            wait_ctx(&s.cq, &mut st, c, BOUND, &[&sh.a, &sh.b], "send"),
            "send",
        );
    }
}

#[test]
fn messages_of_both_endpoints_land_in_the_shared_receives() {
    let sh = shared();
    let (s1, to_a) = sender(&sh.a);
    let (s2, to_b) = sender(&sh.b);

    // Posted first: a tagged receive for a rendezvous message (tag 2), a
    // small tagged one (tag 1), two untagged ones.
    let mut big = vec![0u8; BIG];
    let mut small = vec![0u8; 64];
    let mut m0 = vec![0u8; 64];
    let mut m1 = vec![0u8; 64];
    // SAFETY: the buffers outlive the receives, which complete below
    // before they are read or dropped.
    unsafe {
        sh.srx
            .trecv(big.as_mut_ptr(), BIG, FI_ADDR_UNSPEC, 2, 0, 0x10)
            .expect("trecv");
        sh.srx
            .trecv(small.as_mut_ptr(), 64, FI_ADDR_UNSPEC, 1, 0, 0x11)
            .expect("trecv");
        sh.srx
            .recv(m0.as_mut_ptr(), 64, FI_ADDR_UNSPEC, 0x12)
            .expect("recv");
        sh.srx
            .recv(m1.as_mut_ptr(), 64, FI_ADDR_UNSPEC, 0x13)
            .expect("recv");
    }
    let p_big = pattern(1, BIG);
    let p_small = pattern(2, 48);
    let p0 = pattern(3, 40);
    let p1 = pattern(4, 40);
    // SAFETY: the source buffers outlive the sends (waited for below).
    unsafe {
        s1.ep
            .tsend(p_big.as_ptr(), BIG, to_a, 2, 0x1)
            .expect("tsend");
        s2.ep
            .tsend(p_small.as_ptr(), 48, to_b, 1, 0x2)
            .expect("tsend");
        s1.ep.send(p0.as_ptr(), 40, to_a, 0x3).expect("send");
        s1.ep.send(p1.as_ptr(), 40, to_a, 0x4).expect("send");
    }
    let got = collect(&sh, &[&s1, &s2], 4);
    sent(&s1, &[0x1, 0x3, 0x4], &sh);
    sent(&s2, &[0x2], &sh);
    let on = |ctx: usize| {
        let (i, d) = got
            .iter()
            .find(|(_, d)| d.ctx() == ctx)
            .unwrap_or_else(|| panic!("no completion for {ctx:#x}: {got:?}"));
        (*i, ok(*d, "shared receive"))
    };
    let (i, e) = on(0x10);
    assert_eq!((i, e.len, e.tag), (0, BIG, 2), "the rendezvous on a's CQ");
    assert_eq!(mismatch(&big, 1), None, "the rendezvous data");
    let (i, e) = on(0x11);
    assert_eq!(
        (i, e.len, e.tag),
        (1, 48, 1),
        "the tagged message on b's CQ"
    );
    assert_eq!(&small[..48], &p_small[..]);
    // One connection's messages take receives in posting order.
    let (i, e) = on(0x12);
    assert_eq!((i, e.len), (0, 40));
    assert_eq!(&m0[..40], &p0[..], "the first message in the first receive");
    let (i, _) = on(0x13);
    assert_eq!(i, 0);
    assert_eq!(&m1[..40], &p1[..]);
    assert_eq!(got.len(), 4, "nothing else completed: {got:?}");
    assert!(sh.srx.close().is_err(), "refused while endpoints are bound");
}

#[test]
fn messages_that_came_first_take_receives_posted_later() {
    let sh = shared();
    let (s1, to_a) = sender(&sh.a);
    let (s2, to_b) = sender(&sh.b);
    let msgs: Vec<Vec<u8>> = (0..5).map(|i| pattern(10 + i, 32)).collect();
    let p_big = pattern(20, BIG);
    // SAFETY: the source buffers outlive the sends (waited for below).
    unsafe {
        for (i, m) in msgs.iter().enumerate() {
            let (s, d) = if i < 3 { (&s1, to_a) } else { (&s2, to_b) };
            s.ep.send(m.as_ptr(), 32, d, 0x100 + i).expect("send");
        }
        s2.ep
            .tsend(p_big.as_ptr(), BIG, to_b, 7, 0x200)
            .expect("tsend");
    }
    sent(&s1, &[0x100, 0x101, 0x102], &sh);
    sent(&s2, &[0x103, 0x104], &sh);
    // Nothing completes without a receive (the sends are done: the
    // messages, or the rendezvous request, are at the receivers).
    for _ in 0..200 {
        for cq in [&sh.cq_a, &sh.cq_b] {
            let mut v = Vec::new();
            poll(cq, &mut v);
            assert!(v.is_empty(), "a receive completed with no buffer: {v:?}");
        }
        s2.ep.progress();
    }
    let mut bufs = vec![vec![0u8; 32]; 5];
    let mut big = vec![0u8; BIG];
    // SAFETY: the buffers outlive the receives, which complete below.
    unsafe {
        sh.srx
            .trecv(big.as_mut_ptr(), BIG, FI_ADDR_UNSPEC, 7, 0, 0x20)
            .expect("trecv");
        for (i, b) in bufs.iter_mut().enumerate() {
            sh.srx
                .recv(b.as_mut_ptr(), 32, FI_ADDR_UNSPEC, 0x10 + i)
                .expect("recv");
        }
    }
    let got = collect(&sh, &[&s1, &s2], 6);
    sent(&s2, &[0x200], &sh);
    assert_eq!(
        got.len(),
        6,
        "every waiting message took a receive: {got:?}"
    );
    let mut a_bufs = Vec::new();
    let mut b_bufs = Vec::new();
    for (i, d) in &got {
        let e = ok(*d, "late receive");
        if e.op_context == 0x20 {
            assert_eq!((*i, e.len, e.tag), (1, BIG, 7), "the rendezvous on b's CQ");
            continue;
        }
        let k = e.op_context - 0x10;
        assert_eq!(e.len, 32);
        if *i == 0 {
            a_bufs.push(k);
        } else {
            b_bufs.push(k);
        }
    }
    assert_eq!(mismatch(&big, 20), None, "the rendezvous data");
    a_bufs.sort_unstable();
    b_bufs.sort_unstable();
    assert_eq!((a_bufs.len(), b_bufs.len()), (3, 2), "{got:?}");
    // Per connection, in order: a's three messages in a's buffers by
    // posting order, b's two likewise.
    for (j, &k) in a_bufs.iter().enumerate() {
        assert_eq!(bufs[k], msgs[j], "a's message {j} in buffer {k}");
    }
    for (j, &k) in b_bufs.iter().enumerate() {
        assert_eq!(bufs[k], msgs[3 + j], "b's message {j} in buffer {k}");
    }
}

#[test]
fn cancel_close_and_address_vectors() {
    let sh = shared();
    let mut r = vec![0u8; 8];
    // SAFETY: the receive is cancelled below before `r` is dropped.
    unsafe {
        sh.srx
            .trecv(r.as_mut_ptr(), 8, FI_ADDR_UNSPEC, 99, 0, 0x99)
            .expect("trecv");
    }
    sh.srx.cancel(0x99).expect("cancel");
    assert_eq!(
        sh.srx.cancel(0x99).expect_err("gone").code(),
        errno::FI_ENOENT
    );
    let got = collect(&sh, &[], 1);
    match got.as_slice() {
        [(0, Done::Err(e))] => {
            assert_eq!((e.op_context, e.err), (0x99, errno::FI_ECANCELED));
            assert_eq!(e.flags & (FI_RECV | FI_TAGGED), FI_RECV | FI_TAGGED);
        }
        g => panic!("the cancel is reported on the first member's CQ: {g:?}"),
    }
    // A member with another AV is refused.
    let other_av = sh.domain.av(&AvAttr::default()).expect("av");
    let cq = sh.domain.cq(&tagged_cq()).expect("cq");
    let info = offer(ep_type::FI_EP_RDM, "127.0.0.1");
    let ep = sh.domain.endpoint(&info).expect("endpoint");
    ep.bind_cq(&cq, FI_TRANSMIT | FI_RECV).expect("bind cq");
    ep.bind_av(&other_av).expect("bind av");
    ep.bind_srx(&sh.srx).expect("bind srx");
    assert_eq!(
        ep.enable().expect_err("another AV").code(),
        errno::FI_EINVAL
    );
    assert_eq!(
        ep.bind_srx(&sh.srx).expect_err("twice").code(),
        errno::FI_EINVAL
    );
    assert_eq!(
        sh.a.bind_srx(&sh.b).expect_err("not a context").code(),
        errno::FI_EINVAL
    );
    drop(ep);
    drop(other_av);
    drop(cq);
    let Shared { a, b, srx, av, .. } = sh;
    let srx = match srx.close() {
        Err(e) => e.0,
        Ok(()) => panic!("closed with endpoints bound"),
    };
    drop(a);
    drop(b);
    srx.close().expect("closes once no endpoint is bound");
    drop(av);
}

#[test]
fn a_shared_transmit_context_takes_endpoints_within_its_attributes() {
    let info = offer(ep_type::FI_EP_RDM, "127.0.0.1");
    assert!(info.domain_attr.max_ep_stx_ctx > 0, "tcp offers them");
    let fabric = Fabric::open(&info.fabric_attr).expect("fabric");
    let domain = fabric.domain(&info).expect("domain");
    let av = domain.av(&AvAttr::default()).expect("av");
    let small = ofi_core::info::TxAttr {
        size: 16,
        ..info.tx_attr.clone()
    };
    let narrow = domain.stx_context(Some(&small)).expect("stx_context");
    let stx = domain.stx_context(None).expect("stx_context");
    let peer = Rdm::open(&offer(ep_type::FI_EP_RDM, "127.0.0.1"));
    let mut eps = Vec::new();
    for _ in 0..2 {
        let cq = domain.cq(&tagged_cq()).expect("cq");
        let ep = domain.endpoint(&info).expect("endpoint");
        assert_eq!(
            ep.bind_stx(&narrow)
                .expect_err("a deeper queue than the context's")
                .code(),
            errno::FI_EINVAL
        );
        ep.bind_stx(&stx).expect("bind stx");
        assert_eq!(
            ep.bind_stx(&stx).expect_err("twice").code(),
            errno::FI_EINVAL
        );
        ep.bind_cq(&cq, FI_TRANSMIT | FI_RECV).expect("bind cq");
        ep.bind_av(&av).expect("bind av");
        ep.enable().expect("enable");
        eps.push((ep, cq));
    }
    let to_peer = av
        .insert_one(&peer.ep.getname().expect("getname"))
        .expect("insert");
    let m = pattern(5, 100);
    let mut r = [vec![0u8; 100], vec![0u8; 100]];
    // SAFETY: the buffers outlive the operations, which complete below.
    unsafe {
        for (i, b) in r.iter_mut().enumerate() {
            peer.ep
                .recv(b.as_mut_ptr(), 100, FI_ADDR_UNSPEC, 0x50 + i)
                .expect("recv");
        }
        for (i, (ep, _)) in eps.iter().enumerate() {
            ep.send(m.as_ptr(), 100, to_peer, 0x60 + i).expect("send");
        }
    }
    let mut st = Vec::new();
    for (i, (_, cq)) in eps.iter().enumerate() {
        let mut own = Vec::new();
        ok(
            wait_ctx(cq, &mut own, 0x60 + i, BOUND, &[&peer.ep], "send"),
            "a send completes on its endpoint's CQ",
        );
        ok(
            wait_ctx(
                &peer.cq,
                &mut st,
                0x50 + i,
                BOUND,
                &[&eps[0].0, &eps[1].0],
                "recv",
            ),
            "recv",
        );
    }
    assert!(r.iter().all(|b| b[..] == m[..]));
    let stx = match stx.close() {
        Err(e) => e.0,
        Ok(()) => panic!("closed with endpoints bound"),
    };
    drop(eps);
    stx.close().expect("closes once no endpoint is bound");
    narrow.close().expect("close");
}
