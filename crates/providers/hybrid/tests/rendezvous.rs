//! Rendezvous sends (header, then the payload as an inner tagged message)
//! under pressure: an inner endpoint that refuses the payload for now
//! (FI_EAGAIN: shm's ring full) must not turn into an error completion or
//! a receive that waits for ever (the payload is posted once there is
//! room), and an inject that goes as a rendezvous (larger than
//! FI_HYBRID_EAGER_MAX) must not read the caller's buffer after the call.
#![allow(unsafe_code)]

mod common;

use ofi::consts::*;
use ofi::{CompletionQueue, CqTaggedEntry, Endpoint, Info, IoVec, SendOp};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(30);
/// The variables below are read when a fabric opens: one opener at a time.
static ENV: Mutex<()> = Mutex::new(());

/// Two endpoints: `a` sends to `b` at `fb`; `b` sees `a` as `fa`.
struct Two {
    a: common::Side,
    b: common::Side,
    fa: u64,
    fb: u64,
}

fn info() -> Info {
    let mut h = Info::hints();
    h.caps = FI_MSG | FI_TAGGED | FI_DIRECTED_RECV | FI_SOURCE;
    h.ep_attr.ep_type = ep_type::FI_EP_RDM;
    h.fabric_attr.prov_name = Some("hybrid".into());
    let v = ofi::getinfo(FI_VERSION_CURRENT, None, None, 0, Some(&h)).expect("hybrid offer");
    v[0].clone()
}

/// `a` on node `na` and `b` on node `nb` (the same name: the shm path,
/// different ones: the network path), each opened with `env` set.
fn two(na: &str, nb: &str, env: &[(&str, &str)]) -> Two {
    let _g = ENV.lock().unwrap_or_else(|e| e.into_inner());
    let info = info();
    let side = |node: &str| {
        std::env::set_var("FI_HYBRID_NODE", node);
        for (k, v) in env {
            std::env::set_var(k, v);
        }
        // The endpoint reads nothing after its fabric opened.
        let s = common::open(&info);
        std::env::remove_var("FI_HYBRID_NODE");
        for (k, _) in env {
            std::env::remove_var(k);
        }
        s
    };
    let a = side(na);
    let b = side(nb);
    let fb = a.av.insert_one(&b.ep.getname().unwrap()).expect("insert b");
    let fa = b.av.insert_one(&a.ep.getname().unwrap()).expect("insert a");
    Two { a, b, fa, fb }
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed))
        .collect()
}

/// Reads what `cq` holds (driving its endpoint); an error completion
/// fails the test (naming `what`).
fn read(cq: &CompletionQueue, what: &str) -> usize {
    let mut e = [CqTaggedEntry::default(); 8];
    match cq.read(&mut e) {
        Ok(k) => k,
        Err(err) if err.code() == ofi::errno::FI_EAVAIL => {
            panic!("{what}: error completion: {:?}", cq.readerr())
        }
        Err(_) => 0,
    }
}

/// Drives both endpoints and reads what `cq` holds; an error completion
/// fails the test (naming `what`).
fn poll(eps: [&Endpoint; 2], cq: &CompletionQueue, what: &str) -> Vec<CqTaggedEntry> {
    for ep in eps {
        ep.progress();
    }
    let mut e = [CqTaggedEntry::default(); 8];
    match cq.read(&mut e) {
        Ok(k) => e[..k].to_vec(),
        Err(err) if err.code() == ofi::errno::FI_EAVAIL => {
            panic!("{what}: error completion: {:?}", cq.readerr())
        }
        Err(_) => Vec::new(),
    }
}

#[test]
fn rendezvous_sends_wait_for_room_in_a_full_ring() {
    // A ring of two entries and no cross-process copies: an 8-byte send
    // takes one entry, the next rendezvous header the other, and its
    // payload is refused with FI_EAGAIN until the receiver reads.
    let t = two(
        "rdv-node",
        "rdv-node",
        &[("FI_SHM_RING_SLOTS", "2"), ("FI_SHM_DISABLE_CMA", "1")],
    );
    const WINDOW: usize = 8;
    let small = pattern(0xA5, 8);
    for len in [32_768usize, 65_536, 1 << 20] {
        // Sends alternate: 8 bytes (tag 0x71), then `len` bytes (0x70).
        let data: Vec<Vec<u8>> = (0..2 * WINDOW)
            .map(|k| {
                if k % 2 == 0 {
                    small.clone()
                } else {
                    pattern(k as u8, len)
                }
            })
            .collect();
        let mut bufs: Vec<Vec<u8>> = data.iter().map(|d| vec![0u8; d.len()]).collect();
        for (k, b) in bufs.iter_mut().enumerate() {
            let tag = if k % 2 == 0 { 0x71 } else { 0x70 };
            // SAFETY: `bufs` outlives the receives, which complete below.
            unsafe {
                t.b.ep
                    .trecv(b.as_mut_ptr(), b.len(), t.fa, tag, 0, 0x200 + k)
                    .expect("trecv")
            };
        }
        let iovs: Vec<[IoVec; 1]> = data.iter().map(|d| [IoVec::from_slice(d)]).collect();
        let n = data.len();
        let (mut posted, mut sent, mut got) = (0, 0, 0);
        let end = Instant::now() + TIMEOUT;
        while sent < n || got < n {
            assert!(
                Instant::now() < end,
                "{len} B: {posted} posted, {sent} sends and {got} receives of {n} completed"
            );
            // Posted in order until refused.
            while posted < n {
                let op = SendOp {
                    iov: &iovs[posted],
                    desc: &[],
                    dest: t.fb,
                    tag: if posted % 2 == 0 { 0x71 } else { 0x70 },
                    data: 0,
                    context: 0x100 + posted,
                    flags: FI_COMPLETION,
                    tagged: true,
                };
                // SAFETY: `data` outlives the send, which completes below.
                match unsafe { t.a.ep.post_send(&op) } {
                    Ok(()) => posted += 1,
                    Err(e) if e.code() == ofi::errno::FI_EAGAIN => break,
                    Err(e) => panic!("{len} B: send {posted}: {e}"),
                }
            }
            sent += read(&t.a.cq, &format!("{len} B, sender"));
            got += read(&t.b.cq, &format!("{len} B, receiver"));
        }
        for (k, b) in bufs.iter().enumerate() {
            assert!(*b == data[k], "{len} B: message {k} corrupted");
        }
    }
}

/// An FI_INJECT send of `len` bytes, larger than FI_HYBRID_EAGER_MAX: the
/// caller's buffer is overwritten as soon as the call returns, before the
/// receiver posts its receive; the receiver must get what was injected.
fn inject_then_overwrite(t: &Two, name: &str, len: usize) {
    let eps = [&t.a.ep, &t.b.ep];
    let want = pattern(7, len);
    let mut buf = want.clone();
    t.a.ep.tinject(&buf, t.fb, 0x33).expect("tinject");
    buf.fill(0xEE);
    let mut got = vec![0u8; len];
    // SAFETY: `got` outlives the receive, which completes below.
    unsafe {
        t.b.ep
            .trecv(got.as_mut_ptr(), len, t.fa, 0x33, 0, 0x400)
            .expect("trecv")
    };
    let end = Instant::now() + TIMEOUT;
    loop {
        assert!(Instant::now() < end, "{name}: the receive never completed");
        // Injects complete silently; the sender's CQ must stay clean.
        assert!(
            poll(eps, &t.a.cq, name).is_empty(),
            "{name}: inject completed"
        );
        let e = poll(eps, &t.b.cq, name);
        if let Some(e) = e.first() {
            assert_eq!((e.op_context, e.len), (0x400, len), "{name}");
            break;
        }
    }
    assert!(
        got == want,
        "{name}: the receiver got bytes written after the call"
    );
}

#[test]
fn an_inject_above_the_eager_size_never_reads_the_buffer_after_the_call() {
    let env = [("FI_HYBRID_EAGER_MAX", "64")];
    // The network path first: the peer is not connected yet, so the
    // inner send waits in its queue.
    let t = two("inj-a", "inj-b", &env);
    inject_then_overwrite(&t, "network", 1000);
    inject_then_overwrite(&t, "network, connected", 1000);
    let t = two("inj-a", "inj-a", &env);
    inject_then_overwrite(&t, "shm", 1000);
}
