//! Completion semantics on every path of a hybrid endpoint: a send with
//! FI_DELIVERY_COMPLETE completes only once its data is in the matched
//! receive, a send with FI_FENCE only after the operations posted before it
//! to the same peer, and both do complete. Three set-ups: the shm path (two
//! domains on one node), the network path (two domains on two nodes: tcp,
//! or udp under FI_HYBRID_NET=udp) and the network path between two
//! endpoints of one domain (FI_HYBRID_NODE=@endpoint, as the conformance
//! suite runs it), whose inner network endpoints progress together (over
//! tcp, one endpoint's progress accepts the other's connections).
#![allow(unsafe_code)]

mod common;

use ofi::consts::*;
use ofi::{
    AddressVector, AvAttr, CompletionQueue, CqTaggedEntry, Domain, Endpoint, Fabric, Info, IoVec,
    SendOp,
};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(20);
/// How long a send that must not complete yet is watched.
const HOLD: Duration = Duration::from_millis(50);
/// FI_HYBRID_NODE is read when objects open: one opener at a time.
static ENV: Mutex<()> = Mutex::new(());

/// Two endpoints that talk: `a` sends to `b` at `fb`; `b` sees `a` as `fa`.
struct Two {
    a: Endpoint,
    b: Endpoint,
    cq_a: CompletionQueue,
    cq_b: CompletionQueue,
    fa: u64,
    fb: u64,
    _keep: Vec<(Vec<AddressVector>, Domain, Fabric)>,
}

fn info() -> Info {
    let mut h = Info::hints();
    h.caps = FI_MSG | FI_TAGGED | FI_DIRECTED_RECV | FI_SOURCE | FI_FENCE;
    h.ep_attr.ep_type = ep_type::FI_EP_RDM;
    h.fabric_attr.prov_name = Some("hybrid".into());
    let v = ofi::getinfo(FI_VERSION_CURRENT, None, None, 0, Some(&h)).expect("hybrid offer");
    v[0].clone()
}

/// `a` and `b` in domains of their own, on nodes `na` and `nb`.
fn two_domains(na: &str, nb: &str) -> Two {
    let _g = ENV.lock().unwrap_or_else(|e| e.into_inner());
    let info = info();
    let side = |node: &str| {
        std::env::set_var("FI_HYBRID_NODE", node);
        let fab = Fabric::open(&info.fabric_attr).expect("fabric");
        std::env::remove_var("FI_HYBRID_NODE");
        let dom = fab.domain(&info).expect("domain");
        let av = dom.av(&AvAttr::default()).expect("av");
        let (ep, cq) = common::endpoint_on(&dom, &info, &av);
        (ep, cq, av, dom, fab)
    };
    let (a, cq_a, av_a, dom_a, fab_a) = side(na);
    let (b, cq_b, av_b, dom_b, fab_b) = side(nb);
    let fb = av_a.insert_one(&b.getname().unwrap()).expect("insert b");
    let fa = av_b.insert_one(&a.getname().unwrap()).expect("insert a");
    Two {
        a,
        b,
        cq_a,
        cq_b,
        fa,
        fb,
        _keep: vec![(vec![av_a], dom_a, fab_a), (vec![av_b], dom_b, fab_b)],
    }
}

/// `a` and `b` in one domain sharing one AV, each endpoint its own node.
fn one_domain_two_nodes() -> Two {
    let _g = ENV.lock().unwrap_or_else(|e| e.into_inner());
    let info = info();
    std::env::set_var("FI_HYBRID_NODE", "@endpoint");
    let fab = Fabric::open(&info.fabric_attr).expect("fabric");
    std::env::remove_var("FI_HYBRID_NODE");
    let dom = fab.domain(&info).expect("domain");
    let av = dom.av(&AvAttr::default()).expect("av");
    let (a, cq_a) = common::endpoint_on(&dom, &info, &av);
    let (b, cq_b) = common::endpoint_on(&dom, &info, &av);
    let fa = av.insert_one(&a.getname().unwrap()).expect("insert a");
    let fb = av.insert_one(&b.getname().unwrap()).expect("insert b");
    Two {
        a,
        b,
        cq_a,
        cq_b,
        fa,
        fb,
        _keep: vec![(vec![av], dom, fab)],
    }
}

fn setups() -> Vec<(&'static str, Two)> {
    vec![
        ("shm", two_domains("cmpl-host-a", "cmpl-host-a")),
        ("network", two_domains("cmpl-host-a", "cmpl-host-b")),
        ("network, one domain", one_domain_two_nodes()),
    ]
}

/// Reads `cq` (driving both endpoints) until `n` entries came or `d`
/// passed; returns (context, source) of each. Error entries fail the test.
fn read(t: &Two, cq: &CompletionQueue, n: usize, d: Duration) -> Vec<(usize, u64)> {
    let mut got = Vec::new();
    let end = Instant::now() + d;
    while got.len() < n && Instant::now() < end {
        t.a.progress();
        t.b.progress();
        let mut e = [CqTaggedEntry::default(); 4];
        let mut s = [0u64; 4];
        match cq.readfrom(&mut e, &mut s) {
            Ok(k) => got.extend(e[..k].iter().map(|e| e.op_context).zip(s[..k].to_vec())),
            Err(err) if err.code() == ofi::errno::FI_EAVAIL => {
                panic!("error completion: {:?}", cq.readerr())
            }
            Err(_) => {}
        }
    }
    got
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn delivery_complete_sends_wait_for_the_receiver_on_every_path() {
    for (name, t) in setups() {
        for (k, len) in [0usize, 8, 4096, 70_000].into_iter().enumerate() {
            let data = pattern(k as u8, len);
            let iov = [IoVec::from_slice(&data)];
            let op = SendOp {
                iov: &iov,
                desc: &[],
                dest: t.fb,
                tag: 0x44,
                data: 0,
                context: 0x500 + k,
                flags: FI_COMPLETION | FI_DELIVERY_COMPLETE,
                tagged: k % 2 == 0,
            };
            // SAFETY: `data` outlives the send, which completes below.
            unsafe { t.a.post_send(&op) }.unwrap();
            let early = read(&t, &t.cq_a, 1, HOLD);
            assert!(
                early.is_empty(),
                "{name}, {len} B: completed before a receive was posted"
            );
            let mut buf = vec![0u8; len];
            // SAFETY: `buf` outlives the receive, which completes below.
            unsafe {
                if op.tagged {
                    t.b.trecv(buf.as_mut_ptr(), len, t.fa, 0x44, 0, 0x600 + k)
                } else {
                    t.b.recv(buf.as_mut_ptr(), len, t.fa, 0x600 + k)
                }
            }
            .unwrap();
            let sent = read(&t, &t.cq_a, 1, TIMEOUT);
            assert_eq!(sent.len(), 1, "{name}, {len} B: the send never completed");
            assert_eq!(sent[0].0, 0x500 + k, "{name}, {len} B");
            let got = read(&t, &t.cq_b, 1, TIMEOUT);
            assert_eq!(
                got,
                [(0x600 + k, t.fa)],
                "{name}, {len} B: receive (context, source)"
            );
            assert!(buf == data, "{name}, {len} B: data corrupted");
        }
    }
}

#[test]
fn fenced_sends_wait_for_earlier_operations_on_every_path() {
    for (name, t) in setups() {
        for first_len in [8usize, 300_000] {
            let first = pattern(1, first_len);
            let small = pattern(2, 8);
            let iov = [IoVec::from_slice(&first)];
            let siov = [IoVec::from_slice(&small)];
            let op = SendOp {
                iov: &iov,
                desc: &[],
                dest: t.fb,
                tag: 0,
                data: 0,
                context: 0x700,
                flags: FI_COMPLETION | FI_DELIVERY_COMPLETE,
                tagged: false,
            };
            let fenced = SendOp {
                iov: &siov,
                context: 0x701,
                flags: FI_COMPLETION | FI_FENCE,
                ..op
            };
            // SAFETY: `first` outlives the send, which completes below.
            unsafe { t.a.post_send(&op) }.unwrap();
            // The fenced send may be refused with FI_EAGAIN while the first
            // is outstanding, or accepted; it must not complete before it.
            let mut posted = false;
            let post_fenced = |posted: &mut bool| {
                if !*posted {
                    // SAFETY: `small` outlives the send, which completes below.
                    match unsafe { t.a.post_send(&fenced) } {
                        Ok(()) => *posted = true,
                        Err(e) if e.code() == ofi::errno::FI_EAGAIN => {}
                        Err(e) => panic!("{name}: fenced send: {e}"),
                    }
                }
            };
            let end = Instant::now() + HOLD;
            while Instant::now() < end {
                post_fenced(&mut posted);
                let early = read(&t, &t.cq_a, 1, Duration::from_millis(1));
                assert!(
                    early.is_empty(),
                    "{name}, {first_len} B: completed while the first send was undelivered: {early:?}"
                );
            }
            let mut r1 = vec![0u8; first_len];
            let mut r2 = [0u8; 8];
            // SAFETY: the buffers outlive the receives, which complete below.
            unsafe {
                t.b.recv(r1.as_mut_ptr(), first_len, t.fa, 0x800).unwrap();
                t.b.recv(r2.as_mut_ptr(), 8, t.fa, 0x801).unwrap();
            }
            let mut sent = Vec::new();
            let end = Instant::now() + TIMEOUT;
            while sent.len() < 2 {
                assert!(
                    Instant::now() < end,
                    "{name}, {first_len} B: sends never completed: {sent:?}"
                );
                post_fenced(&mut posted);
                sent.extend(read(&t, &t.cq_a, 2, Duration::from_millis(1)));
            }
            let order: Vec<usize> = sent.iter().map(|s| s.0).collect();
            assert_eq!(
                order,
                [0x700, 0x701],
                "{name}, {first_len} B: completion order"
            );
            let got = read(&t, &t.cq_b, 2, TIMEOUT);
            assert_eq!(
                got,
                [(0x800, t.fa), (0x801, t.fa)],
                "{name}, {first_len} B: receives (context, source)"
            );
            assert!(
                r1 == first,
                "{name}, {first_len} B: first message corrupted"
            );
            assert_eq!(
                r2,
                small[..],
                "{name}, {first_len} B: fenced message corrupted"
            );
        }
    }
}
