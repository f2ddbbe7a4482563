//! Peer death on one path leaves the other alone: a parent on node A talks
//! to two local children (node A: shm) and one remote child (node B: tcp,
//! over this machine's interfaces). Killing a local child fails only the
//! operation pending toward it; the remote and the other local child still
//! answer. Then the reverse: killing the remote child fails only its
//! operations (a pending send, a directed receive; the EQ names it), and
//! the local child still answers.
#![allow(unsafe_code)]

use ofi::consts::*;
use ofi::{
    AddressVector, AvAttr, CompletionQueue, CqAttr, CqTaggedEntry, Endpoint, EqAttr, EventQueue,
    Fabric, Info,
};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(30);
const HELLO: u64 = 1;
const TO_CHILD: u64 = 2;
const TO_PARENT: u64 = 3;
const BIG: u64 = 9;

struct Ep {
    ep: Endpoint,
    cq: CompletionQueue,
    av: AddressVector,
    eq: EventQueue,
    _keep: (ofi::Domain, Fabric),
}

fn open() -> Ep {
    let mut h = Info::hints();
    h.caps = FI_TAGGED | FI_DIRECTED_RECV | FI_SOURCE | FI_LOCAL_COMM | FI_REMOTE_COMM;
    h.ep_attr.ep_type = ep_type::FI_EP_RDM;
    h.fabric_attr.prov_name = Some("hybrid".into());
    let info = ofi::getinfo(FI_VERSION_CURRENT, None, None, 0, Some(&h)).unwrap()[0].clone();
    let fab = Fabric::open(&info.fabric_attr).unwrap();
    let dom = fab.domain(&info).unwrap();
    let cq = dom
        .cq(&CqAttr {
            format: cq_format::FI_CQ_FORMAT_TAGGED,
            wait_obj: wait_obj::FI_WAIT_NONE,
            ..Default::default()
        })
        .unwrap();
    let av = dom.av(&AvAttr::default()).unwrap();
    let eq = fab.eq(&EqAttr::default()).unwrap();
    let ep = dom.endpoint(&info).unwrap();
    ep.bind_cq(&cq, FI_TRANSMIT | FI_RECV).unwrap();
    ep.bind_av(&av).unwrap();
    ep.bind_eq(&eq).unwrap();
    ep.enable().unwrap();
    Ep {
        ep,
        cq,
        av,
        eq,
        _keep: (dom, fab),
    }
}

/// Ok or error completions, as (context, err) with err 0 for success.
fn next(e: &Ep, deadline: Instant) -> (usize, i32) {
    loop {
        assert!(Instant::now() < deadline, "no completion in time");
        let mut c = [CqTaggedEntry::default(); 1];
        match e.cq.read(&mut c) {
            Ok(_) => return (c[0].op_context, 0),
            Err(x) if x.code() == ofi::errno::FI_EAVAIL => {
                let r = e.cq.readerr().unwrap();
                return (r.op_context, r.err);
            }
            Err(_) => std::thread::yield_now(),
        }
    }
}

fn wait_file(p: &Path) -> Vec<u8> {
    let end = Instant::now() + TIMEOUT;
    loop {
        if let Ok(b) = std::fs::read(p) {
            return b;
        }
        assert!(Instant::now() < end, "{} never appeared", p.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn put(p: &Path, b: &[u8]) {
    let tmp = p.with_extension("tmp");
    std::fs::write(&tmp, b).unwrap();
    std::fs::rename(&tmp, p).unwrap();
}

/// A child: says hello, answers "ping" with "pong", leaves on "bye".
#[test]
fn child() {
    let Ok(me) = std::env::var("HYB_FAULT_CHILD") else {
        return;
    };
    let dir = PathBuf::from(std::env::var("HYB_DIR").unwrap());
    let e = open();
    let parent =
        e.av.insert_one(&wait_file(&dir.join("parent.addr")))
            .unwrap();
    put(&dir.join(format!("{me}.addr")), &e.ep.getname().unwrap());
    // SAFETY: static bytes outlive the send.
    unsafe { e.ep.tsend(b"hello".as_ptr(), 5, parent, HELLO, 1) }.unwrap();
    let end = Instant::now() + TIMEOUT;
    loop {
        let mut buf = [0u8; 8];
        // SAFETY: `buf` outlives the receive, which completes below.
        unsafe { e.ep.trecv(buf.as_mut_ptr(), 8, parent, TO_CHILD, 0, 2) }.unwrap();
        loop {
            let (ctx, err) = next(&e, end);
            assert_eq!(err, 0, "child {me}: error completion");
            if ctx == 2 {
                break;
            }
        }
        if buf.starts_with(b"bye") {
            return;
        }
        // SAFETY: static bytes outlive the send.
        unsafe { e.ep.tsend(b"pong".as_ptr(), 4, parent, TO_PARENT, 3) }.unwrap();
    }
}

struct Kids(Vec<Child>);

impl Drop for Kids {
    fn drop(&mut self) {
        for k in &mut self.0 {
            let _ = k.kill();
            let _ = k.wait();
        }
    }
}

/// Parent side: ping a child and wait for its pong (directed receive).
fn ping(e: &Ep, who: u64, ctx: usize) {
    let mut buf = [0u8; 4];
    // SAFETY: `buf` outlives the receive, which completes below; static send bytes.
    unsafe {
        e.ep.trecv(buf.as_mut_ptr(), 4, who, TO_PARENT, 0, ctx)
            .unwrap();
        e.ep.tsend(b"ping".as_ptr(), 4, who, TO_CHILD, ctx + 1)
            .unwrap();
    }
    let end = Instant::now() + TIMEOUT;
    let mut seen = 0;
    while seen < 2 {
        let (c, err) = next(e, end);
        assert_eq!(err, 0, "ping {who}: error completion on {c:#x}");
        if c == ctx || c == ctx + 1 {
            seen += 1;
        }
    }
    assert_eq!(&buf, b"pong");
}

/// Kills `kid`, with a pending large send to it and a directed receive
/// from it: the send fails. When the inner provider declares the peer dead
/// (tcp and shm both do, with an EQ entry), the directed receive fails too
/// and the EQ names the peer by its fi_addr, and a receive directed at it
/// afterwards fails at once; otherwise the receive stays posted until
/// canceled.
fn kill_and_check(e: &Ep, kid: &mut Child, who: u64, big: &[u8], base: usize, declared: bool) {
    let mut never = [0u8; 8];
    // SAFETY: `big` and `never` outlive the operations, which end below.
    unsafe {
        e.ep.trecv(never.as_mut_ptr(), 8, who, 0x77, 0, base)
            .unwrap();
        e.ep.tsend(big.as_ptr(), big.len(), who, BIG, base + 1)
            .unwrap();
    }
    kid.kill().unwrap();
    let _ = kid.wait();
    let end = Instant::now() + TIMEOUT;
    let want = if declared { 2 } else { 1 };
    let mut failed = Vec::new();
    while failed.len() < want {
        let (c, err) = next(e, end);
        assert_ne!(err, 0, "operation {c:#x} toward a dead peer succeeded");
        assert!(
            c == base || c == base + 1,
            "another operation failed: {c:#x} err {err}"
        );
        failed.push(c);
    }
    assert!(
        failed.contains(&(base + 1)),
        "the send to the dead peer did not fail"
    );
    if !declared {
        e.ep.cancel(base).unwrap();
        assert_eq!(next(e, end), (base, ofi::errno::FI_ECANCELED));
        return;
    }
    loop {
        assert!(Instant::now() < end, "the EQ never named the dead peer");
        e.ep.progress();
        if let Ok(x) = e.eq.readerr() {
            assert_eq!(x.data, who, "EQ names fi_addr {} instead of {who}", x.data);
            break;
        }
        std::thread::yield_now();
    }
    // A receive directed at the peer after its death fails at once (it
    // used to stay posted for ever).
    let mut late = [0u8; 8];
    // SAFETY: `late` outlives the receive, which ends below.
    unsafe { e.ep.trecv(late.as_mut_ptr(), 8, who, 0x78, 0, base + 2) }.unwrap();
    let (c, err) = next(e, Instant::now() + Duration::from_secs(2));
    assert_eq!(c, base + 2);
    assert_ne!(err, 0, "a receive directed at a dead peer succeeded");
}

#[test]
fn a_dead_peer_fails_only_its_own_operations() {
    if std::env::var("HYB_FAULT_CHILD").is_ok() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("ofi-hybrid-faults-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::env::set_var("FI_HYBRID_NODE", "fault-node-a");
    let e = open();
    put(&dir.join("parent.addr"), &e.ep.getname().unwrap());
    let exe = std::env::current_exe().unwrap();
    let roles = [
        ("local1", "fault-node-a"),
        ("local2", "fault-node-a"),
        ("remote", "fault-node-b"),
    ];
    let mut kids = Kids(Vec::new());
    for (name, node) in roles {
        let c = Command::new(&exe)
            .args(["--exact", "child", "--nocapture", "--test-threads=1"])
            .env("HYB_FAULT_CHILD", name)
            .env("HYB_DIR", &dir)
            .env("FI_HYBRID_NODE", node)
            .env("FI_TCP_PEER_TIMEOUT_MS", "2000")
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn child");
        kids.0.push(c);
    }
    let fi: Vec<u64> = roles
        .iter()
        .map(|(n, _)| {
            e.av.insert_one(&wait_file(&dir.join(format!("{n}.addr"))))
                .unwrap()
        })
        .collect();
    // Every child said hello, from its own address.
    let mut hello = [[0u8; 8]; 3];
    for (i, h) in hello.iter_mut().enumerate() {
        // SAFETY: `hello` outlives the receives, which complete below.
        unsafe { e.ep.trecv(h.as_mut_ptr(), 8, fi[i], HELLO, 0, 0x10 + i) }.unwrap();
    }
    let end = Instant::now() + TIMEOUT;
    for _ in 0..3 {
        assert_eq!(next(&e, end).1, 0);
    }
    assert!(hello.iter().all(|h| h.starts_with(b"hello")));
    let big = vec![0x5au8; 1 << 20];
    // A local peer dies: its operations fail, the others answer.
    kill_and_check(&e, &mut kids.0[0], fi[0], &big, 0x100, true);
    ping(&e, fi[1], 0x200);
    ping(&e, fi[2], 0x300);
    // A remote peer dies: its operations fail, the local one answers.
    kill_and_check(&e, &mut kids.0[2], fi[2], &big, 0x400, true);
    ping(&e, fi[1], 0x500);
    // SAFETY: static bytes outlive the send.
    unsafe { e.ep.tsend(b"bye".as_ptr(), 3, fi[1], TO_CHILD, 0x600) }.unwrap();
    assert_eq!(next(&e, Instant::now() + TIMEOUT), (0x600, 0));
    let status = kids.0[1].wait().unwrap();
    assert!(status.success(), "local child 2 failed");
    let _ = std::fs::remove_dir_all(&dir);
}
