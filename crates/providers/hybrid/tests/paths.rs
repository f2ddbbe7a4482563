//! Hybrid endpoints in one process on two "nodes" (FI_HYBRID_NODE set
//! before each fabric opens): peers on the same node talk through shm, the
//! others through tcp (seen as sockets the process opens), and one
//! endpoint's receives, CQ and counters serve both.
#![allow(unsafe_code)]

mod common;

use ofi::consts::*;
use ofi::{
    AddressVector, AvAttr, CntrAttr, CompletionQueue, Counter, CqTaggedEntry, Domain, Endpoint,
    Fabric, Info, MrAttr,
};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(20);
/// FI_HYBRID_NODE is read when a fabric opens: one opener at a time.
static ENV: Mutex<()> = Mutex::new(());

struct Node {
    ep: Endpoint,
    cq: CompletionQueue,
    av: AddressVector,
    wcntr: Counter,
    rcntr: Counter,
    dom: Domain,
    _fab: Fabric,
}

fn hybrid_info() -> Info {
    let mut h = Info::hints();
    h.caps = FI_MSG
        | FI_TAGGED
        | FI_RMA
        | FI_ATOMIC
        | FI_DIRECTED_RECV
        | FI_SOURCE
        | FI_LOCAL_COMM
        | FI_REMOTE_COMM;
    h.ep_attr.ep_type = ep_type::FI_EP_RDM;
    h.fabric_attr.prov_name = Some("hybrid".into());
    let v = ofi::getinfo(FI_VERSION_CURRENT, None, None, 0, Some(&h)).expect("hybrid offer");
    assert_eq!(v[0].provider(), "hybrid");
    v[0].clone()
}

fn open(node: &str) -> Node {
    let _g = ENV.lock().unwrap_or_else(|e| e.into_inner());
    std::env::set_var("FI_HYBRID_NODE", node);
    let info = hybrid_info();
    let fab = Fabric::open(&info.fabric_attr).expect("fabric");
    std::env::remove_var("FI_HYBRID_NODE");
    let dom = fab.domain(&info).expect("domain");
    let cq = common::cq(&dom);
    let av = dom.av(&AvAttr::default()).expect("av");
    let wcntr = dom.cntr(&CntrAttr::default()).expect("cntr");
    let rcntr = dom.cntr(&CntrAttr::default()).expect("cntr");
    let ep = dom.endpoint(&info).expect("endpoint");
    ep.bind_cq(&cq, FI_TRANSMIT | FI_RECV).expect("bind cq");
    ep.bind_av(&av).expect("bind av");
    ep.bind_cntr(&wcntr, FI_WRITE).expect("bind write cntr");
    ep.bind_cntr(&rcntr, FI_READ).expect("bind read cntr");
    ep.enable().expect("enable");
    Node {
        ep,
        cq,
        av,
        wcntr,
        rcntr,
        dom,
        _fab: fab,
    }
}

fn connect(from: &Node, to: &Node) -> u64 {
    from.av
        .insert_one(&to.ep.getname().unwrap())
        .expect("av insert")
}

/// Sockets this process holds (tcp traffic opens some, shm none).
/// The tests of this binary run one at a time: `sockets` counts the
/// process's sockets, which another test opening or closing endpoints
/// meanwhile would change.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn sockets() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| {
                    std::fs::read_link(e.path())
                        .is_ok_and(|p| p.to_string_lossy().starts_with("socket:"))
                })
                .count()
        })
        .unwrap_or(0)
}

/// Drives every node's progress until `n` entries came out of `who`'s CQ.
fn wait(nodes: &[&Node], who: &Node, n: usize) -> Vec<(CqTaggedEntry, u64)> {
    let eps: Vec<&Endpoint> = nodes.iter().map(|x| &x.ep).collect();
    common::read_from(&eps, &who.cq, n, "timed out")
}

/// Waits until a tagged message from `src` with `tag` is held by `who`
/// (FI_PEEK finds it), driving every node.
fn arrived(nodes: &[&Node], who: &Node, src: u64, tag: u64) {
    let end = Instant::now() + TIMEOUT;
    loop {
        assert!(Instant::now() < end, "message from {src} never arrived");
        for x in nodes {
            x.ep.progress();
        }
        let op = ofi::RecvOp {
            iov: &[],
            desc: &[],
            src,
            tag,
            ignore: 0,
            context: 0x9ee,
            flags: FI_PEEK | FI_COMPLETION,
            tagged: true,
        };
        // SAFETY: a peek names no memory.
        unsafe { who.ep.post_recv(&op) }.expect("peek");
        let mut e = [CqTaggedEntry::default(); 1];
        match who.cq.read(&mut e) {
            Ok(_) => return,
            Err(err) if err.code() == ofi::errno::FI_EAVAIL => {
                let x = who.cq.readerr().expect("peek error");
                assert_eq!(x.err, ofi::errno::FI_ENOMSG);
            }
            Err(e) => panic!("cq: {e}"),
        }
    }
}

#[test]
fn unspec_receives_take_both_paths_in_arrival_order() {
    let _s = serial();
    let a = open("test-host-a");
    let b = open("test-host-a");
    let c = open("test-host-b");
    let all = [&a, &b, &c];
    let (fb, fc) = (connect(&a, &b), connect(&a, &c));
    let ba = connect(&b, &a);
    let ca = connect(&c, &a);
    let before = sockets();
    let msgs: [(&Node, u64, u64, &[u8; 8]); 3] = [
        (&b, ba, fb, b"b-first!"),
        (&c, ca, fc, b"c-second"),
        (&b, ba, fb, b"b-third!"),
    ];
    for (i, (from, dest, src, m)) in msgs.iter().enumerate() {
        // SAFETY: the static message outlives the send.
        unsafe { from.ep.tsend(m.as_ptr(), 8, *dest, 7, 0x100 + i) }.unwrap();
        arrived(&all, &a, *src, 7);
        wait(&all, from, 1);
        if i == 0 {
            assert_eq!(
                sockets(),
                before,
                "a same-node message opened a socket: not shm"
            );
        }
        if i == 1 {
            assert!(
                sockets() > before,
                "an other-node message opened no socket: not tcp"
            );
        }
    }
    let mut bufs = [[0u8; 8]; 3];
    for (i, buf) in bufs.iter_mut().enumerate() {
        // SAFETY: the buffers outlive the receives, which complete below.
        unsafe {
            a.ep.trecv(buf.as_mut_ptr(), 8, FI_ADDR_UNSPEC, 7, 0, 0x200 + i)
        }
        .unwrap();
    }
    let got = wait(&all, &a, 3);
    for (i, (e, src)) in got.iter().enumerate() {
        assert_eq!(e.op_context, 0x200 + i);
        assert_eq!(&bufs[i], msgs[i].3, "receive {i} took another message");
        assert_eq!(*src, msgs[i].2, "receive {i}: wrong source");
        assert_eq!(e.flags & (FI_RECV | FI_TAGGED), FI_RECV | FI_TAGGED);
    }
    // Large messages (rendezvous) take both paths too, data checked.
    let big: Vec<u8> = (0..300_000u32).map(|i| (i * 7) as u8).collect();
    let mut rx = [vec![0u8; big.len()], vec![0u8; big.len()]];
    for (i, buf) in rx.iter_mut().enumerate() {
        // SAFETY: the buffers outlive the receives, which complete below.
        unsafe {
            a.ep.trecv(buf.as_mut_ptr(), buf.len(), [fb, fc][i], 9, 0, 0x300 + i)
        }
        .unwrap();
    }
    // SAFETY: `big` outlives the sends, which complete below.
    unsafe {
        c.ep.tsend(big.as_ptr(), big.len(), ca, 9, 1).unwrap();
        b.ep.tsend(big.as_ptr(), big.len(), ba, 9, 1).unwrap();
    }
    let got = wait(&all, &a, 2);
    assert!(got.iter().all(|(e, _)| e.len == big.len()));
    assert!(rx.iter().all(|r| *r == big), "rendezvous data corrupted");
    wait(&all, &b, 1);
    wait(&all, &c, 1);
}

#[test]
fn rma_and_atomics_follow_locality() {
    let _s = serial();
    let a = open("rma-host-a");
    let b = open("rma-host-a");
    let c = open("rma-host-b");
    let all = [&a, &b, &c];
    let targets = [(&b, connect(&a, &b)), (&c, connect(&a, &c))];
    let mut mem = [[0u8; 16], [0u8; 16]];
    let mut mrs = Vec::new();
    for (i, m) in mem.iter_mut().enumerate() {
        let attr = MrAttr {
            iov: vec![(m.as_mut_ptr() as usize, m.len())],
            access: FI_REMOTE_READ | FI_REMOTE_WRITE,
            ..Default::default()
        };
        // SAFETY: `mem` outlives the regions (dropped at the end).
        mrs.push(unsafe { targets[i].0.dom.mr_reg(&attr) }.expect("mr_reg"));
    }
    let src = *b"write-me";
    for (i, (_, fa)) in targets.iter().enumerate() {
        let base = mem[i].as_ptr() as u64;
        // SAFETY: `src` outlives the write, which completes below.
        unsafe {
            a.ep.write(src.as_ptr(), 8, *fa, base, mrs[i].key(), 0x10 + i)
        }
        .unwrap();
        wait(&all, &a, 1);
        let one = 5u64.to_ne_bytes();
        let mut old = [0u8; 8];
        // SAFETY: the operand and result outlive the atomic, which completes below.
        unsafe {
            a.ep.fetch_atomic(
                one.as_ptr(),
                1,
                old.as_mut_ptr(),
                *fa,
                base + 8,
                mrs[i].key(),
                datatype::FI_UINT64,
                atomic_op::FI_SUM,
                0x20 + i,
            )
        }
        .unwrap();
        wait(&all, &a, 1);
        assert_eq!(u64::from_ne_bytes(old), 0);
        let mut back = [0u8; 8];
        // SAFETY: `back` outlives the read, which completes below.
        unsafe {
            a.ep.read(back.as_mut_ptr(), 8, *fa, base, mrs[i].key(), 0x30 + i)
        }
        .unwrap();
        wait(&all, &a, 1);
        assert_eq!(&back, b"write-me");
    }
    assert_eq!(&mem[0][..8], b"write-me");
    assert_eq!(&mem[1][..8], b"write-me");
    assert_eq!(u64::from_ne_bytes(mem[0][8..].try_into().unwrap()), 5);
    assert_eq!(u64::from_ne_bytes(mem[1][8..].try_into().unwrap()), 5);
    // One counter set for both paths: a write per path; a read and a
    // fetching atomic per path.
    assert_eq!(a.wcntr.read(), 2);
    assert_eq!(a.rcntr.read(), 4);
    drop(mrs);
}

#[test]
fn a_wrong_shape_address_is_refused_with_a_log_line() {
    let _s = serial();
    let a = open("shape-host");
    let log = ofi_testkit::log::LogCapture::start();
    // A tcp-style sockaddr_in, and a hybrid address cut short.
    let good = a.ep.getname().unwrap();
    let sockaddr = [2u8, 0, 0x1f, 0x90, 127, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0];
    for bad in [&sockaddr[..], &good[..good.len() - 1]] {
        let mut out = [0u64];
        let n = a.av.insert(&[bad], &mut out);
        assert_eq!(n.unwrap(), 0);
        assert_eq!(out[0], FI_ADDR_NOTAVAIL);
    }
    let text = log.text();
    assert_eq!(
        text.matches("expected a hybrid address").count(),
        2,
        "{text}"
    );
    // The error itself is FI_EINVAL.
    let e = a.dom.av(&AvAttr::default()).unwrap();
    let err = ofi_prov_hybrid::addr::HybridAddr::decode(&sockaddr).unwrap_err();
    assert_eq!(err.code(), ofi::errno::FI_EINVAL);
    drop(e);
}

/// One tagged message from `from` (to `dest`) into a receive of `who`
/// directed at `src`; the source the completion names.
fn one_message(all: &[&Node], from: &Node, dest: u64, who: &Node, src: u64, ctx: usize) -> u64 {
    let m = *b"hybrid!!";
    let mut buf = [0u8; 8];
    // SAFETY: the buffers outlive the operations, which complete below.
    unsafe {
        who.ep.trecv(buf.as_mut_ptr(), 8, src, 5, 0, ctx).unwrap();
        from.ep.tsend(m.as_ptr(), 8, dest, 5, ctx).unwrap();
    }
    wait(all, from, 1);
    let got = wait(all, who, 1);
    assert_eq!((got[0].0.op_context, buf), (ctx, m));
    got[0].1
}

#[test]
fn a_removed_peers_index_names_only_the_peer_that_took_it() {
    let _s = serial();
    let a = open("test-host-a");
    let b = open("test-host-a");
    let c = open("test-host-b");
    let all = [&a, &b, &c];
    let fb = connect(&a, &b);
    let ba = connect(&b, &a);
    assert_eq!(one_message(&all, &b, ba, &a, FI_ADDR_UNSPEC, 0x10), fb);
    a.av.remove(&[fb]).expect("remove");
    let fc = connect(&a, &c);
    assert_eq!(fc, fb, "the AV reuses the freed index");
    // b speaks again: it is no longer in a's AV, and never c.
    let src = one_message(&all, &b, ba, &a, FI_ADDR_UNSPEC, 0x11);
    assert_ne!(
        src, fc,
        "a removed peer's message names the index's new owner"
    );
}

#[test]
fn a_receive_directed_at_any_entry_of_an_address_takes_its_messages() {
    let _s = serial();
    let a = open("test-host-a");
    let b = open("test-host-a");
    let all = [&a, &b];
    let first = connect(&a, &b);
    let second = connect(&a, &b);
    assert_ne!(first, second);
    let ba = connect(&b, &a);
    // Messages name the primary entry; a receive directed at either takes
    // them.
    assert_eq!(one_message(&all, &b, ba, &a, first, 0x20), first);
    assert_eq!(one_message(&all, &b, ba, &a, second, 0x21), first);
}
