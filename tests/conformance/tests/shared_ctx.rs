//! Shared receive contexts (`fi_srx_context`, fi_endpoint(3) "SHARED
//! CONTEXTS") on every RDM offer whose domain advertises them
//! (`max_ep_srx_ctx`): two endpoints bound to one context and one AV take
//! its receives for messages of every size class, posted before the
//! messages arrive or after; each completion goes to the CQ of the
//! endpoint that received the message, with that message's bytes, and one
//! endpoint's messages take receives in posting order. Offers without them
//! refuse the context (FI_ENOSYS) and are not returned for hints asking
//! for FI_SHARED_CONTEXT.
#![allow(unsafe_code)]

use ofi::consts::*;
use ofi::errno;
use ofi::{CompletionQueue, Endpoint, Info};
use ofi_conformance::*;
use std::time::Instant;

/// Skips unless the offer is RDM and its domain offers shared receive
/// contexts.
fn require_srx(info: &Info) -> Outcome {
    require(info, FI_MSG)?;
    require_rdm(info, "endpoints sharing a receive context and an AV")?;
    if info.domain_attr.max_ep_srx_ctx == 0 {
        return Err(Skip::limit(
            "the domain offers no shared receive context (max_ep_srx_ctx 0)",
        ));
    }
    Ok(())
}

/// The seed of the `k`-th message of `size` bytes to endpoint `to`.
fn seed(to: usize, size: usize, k: usize) -> u64 {
    (to as u64) << 40 | (size as u64) << 8 | k as u64
}

/// Reads both members' CQs (driving the sender too) until `n` entries are
/// in hand or the bound passes.
fn collect(cqs: [&CompletionQueue; 2], sender: &Endpoint, n: usize) -> [Completions; 2] {
    let mut out = [Completions::default(), Completions::default()];
    let end = Instant::now() + TIMEOUT;
    while out[0].total() + out[1].total() < n && Instant::now() < end {
        let mut read = 0;
        for (cq, o) in cqs.iter().zip(out.iter_mut()) {
            read += poll_cq(cq, o);
        }
        if read == 0 {
            sender.progress();
        }
    }
    out
}

/// One run: per size, `per` messages to each member; receives posted to
/// the context before the sends (`late` false) or after them.
fn exchange(info: &Info, late: bool) {
    let (_fabric, domain, av) = open_domain(info);
    let av = av.expect("an RDM domain has an AV");
    let srx = domain
        .srx_context(None)
        .unwrap_or_else(|e| panic!("srx_context: {e}"));
    let cqs = [
        tagged_cq(&domain, wait_obj::FI_WAIT_UNSPEC),
        tagged_cq(&domain, wait_obj::FI_WAIT_UNSPEC),
    ];
    let members: Vec<Endpoint> = cqs
        .iter()
        .map(|cq| {
            let ep = domain
                .endpoint(info)
                .unwrap_or_else(|e| panic!("endpoint: {e}"));
            ep.bind_cq(cq, FI_TRANSMIT | FI_RECV)
                .unwrap_or_else(|e| panic!("bind cq: {e}"));
            ep.bind_av(&av).unwrap_or_else(|e| panic!("bind av: {e}"));
            ep.bind_srx(&srx)
                .unwrap_or_else(|e| panic!("bind srx: {e}"));
            ep.enable().unwrap_or_else(|e| panic!("enable: {e}"));
            ep
        })
        .collect();
    let scq = tagged_cq(&domain, wait_obj::FI_WAIT_UNSPEC);
    let sender = open_endpoint(&domain, info, &scq, &av);
    let dest: Vec<u64> = members.iter().map(|m| insert(&av, m)).collect();
    let sizes = sizes_for(info, &CLASS_SIZES);
    let per = 2;
    // Messages (member, size, k), sent in this order; as many buffers,
    // each large enough for any of them (untagged receives take messages
    // whatever their size).
    let msgs: Vec<(usize, usize, usize, Vec<u8>)> = sizes
        .iter()
        .flat_map(|&s| {
            (0..per).flat_map(move |k| (0..2).map(move |to| (to, s, k, pattern(seed(to, s, k), s))))
        })
        .collect();
    let max = sizes.iter().copied().max().unwrap_or(0);
    let mut bufs: Vec<(usize, Vec<u8>)> = msgs.iter().map(|_| (max, vec![0u8; max])).collect();
    let post = |bufs: &mut Vec<(usize, Vec<u8>)>| {
        for (i, (s, b)) in bufs.iter_mut().enumerate() {
            // SAFETY: the buffers outlive the receives: every one completes
            // (asserted below) before `bufs` drops.
            let r = retry(&members.iter().collect::<Vec<_>>(), TIMEOUT, || unsafe {
                srx.recv(b.as_mut_ptr(), *s, FI_ADDR_UNSPEC, 0x1000 + i)
            });
            r.unwrap_or_else(|e| panic!("recv on the shared context: {e}"));
        }
    };
    if !late {
        post(&mut bufs);
    }
    // A refused send waits for room: the members' progress reads their
    // rings (a small ring fills before a large message is through).
    let everyone: Vec<&Endpoint> = std::iter::once(&sender).chain(members.iter()).collect();
    for (j, (to, s, _, m)) in msgs.iter().enumerate() {
        // SAFETY: the messages outlive the sends, whose completions are
        // read below.
        let r = retry(&everyone, TIMEOUT, || unsafe {
            sender.send(m.as_ptr(), *s, dest[*to], 0x2000 + j)
        });
        r.unwrap_or_else(|e| panic!("send {s} to member {to}: {e}"));
    }
    if late {
        // Let the messages (or their rendezvous requests) arrive first;
        // none may complete without a receive.
        for _ in 0..100 {
            sender.progress();
            for cq in &cqs {
                let mut c = Completions::default();
                poll_cq(cq, &mut c);
                assert_eq!(c.total(), 0, "a receive completed with no buffer: {c:?}");
            }
        }
        post(&mut bufs);
    }
    let got = collect([&cqs[0], &cqs[1]], &sender, msgs.len());
    let sent = wait_for(&scq, msgs.len(), TIMEOUT);
    assert_eq!(sent.ok.len(), msgs.len(), "send completions: {sent:?}");
    for (to, c) in got.iter().enumerate() {
        assert!(c.err.is_empty(), "member {to}: error entries {:?}", c.err);
        assert_eq!(
            c.ok.len(),
            msgs.len() / 2,
            "member {to} completes its own messages on its CQ: {:?}",
            c.ok
        );
        // Its buffers in posting order hold its messages in send order.
        let mut idx: Vec<usize> = c.ok.iter().map(|e| e.op_context - 0x1000).collect();
        idx.sort_unstable();
        let mine: Vec<_> = msgs.iter().filter(|m| m.0 == to).collect();
        for (&i, (_, size, k, m)) in idx.iter().zip(mine) {
            let e = c.ok_ctx(0x1000 + i).expect("listed above");
            assert_eq!(e.len, *size, "member {to}: the length of buffer {i}");
            assert_bytes_eq(
                &bufs[i].1[..*size],
                m,
                &format!("member {to}: message {k} of {size} bytes in buffer {i}"),
            );
        }
    }
    drop(sender);
    drop(members);
    srx.close()
        .unwrap_or_else(|e| panic!("close the shared context: {}", e.1));
}

conformance!(fn a_shared_receive_context_serves_every_bound_endpoint(info) {
    require_srx(info)?;
    exchange(info, false);
    Ok(())
});

conformance!(fn messages_wait_in_their_endpoint_for_shared_receives(info) {
    require_srx(info)?;
    exchange(info, true);
    Ok(())
});

conformance!(fn offers_without_shared_contexts_refuse_them(info) {
    require_pairable(info)?;
    let (_fabric, domain, _av) = open_domain(info);
    let srx = domain.srx_context(None);
    let stx = domain.stx_context(None);
    if info.domain_attr.max_ep_srx_ctx == 0 {
        let e = srx.err().map(|e| e.code());
        assert_eq!(e, Some(errno::FI_ENOSYS), "srx_context where none is offered");
    } else {
        srx.unwrap_or_else(|e| panic!("srx_context where offered: {e}"));
    }
    if info.domain_attr.max_ep_stx_ctx == 0 {
        let e = stx.err().map(|e| e.code());
        assert_eq!(e, Some(errno::FI_ENOSYS), "stx_context where none is offered");
    } else {
        stx.unwrap_or_else(|e| panic!("stx_context where offered: {e}"));
    }
    // Hints asking for a shared receive context get only offers with one.
    let mut h = Info::hints();
    h.ep_attr.ep_type = info.ep_attr.ep_type;
    h.fabric_attr.prov_name = Some(info.provider().to_string());
    h.ep_attr.rx_ctx_cnt = FI_SHARED_CONTEXT;
    match ofi::getinfo(FI_VERSION_CURRENT, None, None, 0, Some(&h)) {
        Ok(v) => {
            for o in &v {
                assert!(o.domain_attr.max_ep_srx_ctx > 0, "{}", describe(o));
                assert_eq!(o.ep_attr.rx_ctx_cnt, FI_SHARED_CONTEXT, "{}", describe(o));
            }
            assert!(
                info.domain_attr.max_ep_srx_ctx > 0 || v.iter().all(|o| describe(o) != describe(info)),
                "an offer without shared receive contexts answered FI_SHARED_CONTEXT hints"
            );
        }
        Err(e) => assert_eq!(e.code(), errno::FI_ENODATA, "getinfo: {e}"),
    }
    Ok(())
});
