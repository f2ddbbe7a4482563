//! Auth keys on shm (`domain_attr.auth_key`): endpoints of one key talk
//! (messages of every path, RMA); endpoints of different keys, or a keyed
//! and an unkeyed one, cannot exchange a byte and each side's sends fail
//! with FI_EKEYREJECTED; a process that maps a keyed endpoint's segment
//! and writes entries without proving the key is refused (its HELLO gets
//! a CHALLENGE, its bad PROOF a REJECT, its messages never reach a
//! receive); segments and doorbells are mode 0600 and the key is never
//! written into them.
#![allow(unsafe_code)]

mod common;

use common::rdm::*;
use ofi_core::consts::*;
use ofi_core::error::{errno, Error};
use ofi_core::util::mr::MrAttr;
use ofi_shmem::segment::{bell_path, segment_path, Geometry, MsgConsumer, Segment};
use ofi_wire::shm::{op, put_ranges, Entry, Repr, WireRange, HDR_LEN, PROOF_LEN, RANGE_LEN};
use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

const KEY: &[u8] = b"shm-auth-test-key:0123456789abcdef";
const OTHER: &[u8] = b"shm-auth-test-key:another-job-key!";
const STEP: Duration = Duration::from_secs(20);

/// A tagged RDM endpoint with FI_RMA, keyed with `key`.
fn ep(key: Option<&[u8]>, ctx: usize) -> Rdm {
    let info = shm_offer(FI_TAGGED | FI_RMA, key);
    assert!(virt_addr(&info), "the offer must keep FI_MR_VIRT_ADDR");
    Rdm::open(&info, ctx)
}

/// Retries `post` while it says FI_EAGAIN, progressing both endpoints;
/// its final outcome.
fn retry(
    a: &Rdm,
    b: &Rdm,
    mut post: impl FnMut() -> ofi_core::error::Result<()>,
) -> ofi_core::error::Result<()> {
    let deadline = Instant::now() + STEP;
    loop {
        match post() {
            Err(e) if e.is_again() => {
                assert!(Instant::now() < deadline, "FI_EAGAIN for {STEP:?}");
                a.ep.progress();
                b.ep.progress();
            }
            r => return r,
        }
    }
}

/// Sends `len` bytes from `a` to `b` (tagged), with retries; checks they
/// arrive intact.
fn send_and_check(a: &Rdm, b: &Rdm, len: usize, seed: u8) {
    let fb = a.av.insert_one(&b.ep.getname().unwrap()).unwrap();
    let tx: Vec<u8> = (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect();
    let mut rx = vec![0u8; len];
    // SAFETY: rx and tx outlive both completions, awaited below.
    unsafe { b.ep.trecv(rx.as_mut_ptr(), len, FI_ADDR_UNSPEC, 7, 0, 0x71) }.unwrap();
    retry(a, b, || {
        // SAFETY: tx (len bytes) outlives the send, whose completion is
        // awaited below.
        unsafe { a.ep.tsend(tx.as_ptr(), len, fb, 7, 0x72) }
    })
    .unwrap_or_else(|e| panic!("send of {len} bytes with the same key: {e}"));
    let (mut sa, mut sb) = (Vec::new(), Vec::new());
    let deadline = Instant::now() + STEP;
    while !(sa.iter().any(|d: &Done| d.ctx() == 0x72) && sb.iter().any(|d: &Done| d.ctx() == 0x71))
    {
        assert!(Instant::now() < deadline, "{len} bytes did not arrive");
        poll(&a.cq, &mut sa);
        poll(&b.cq, &mut sb);
    }
    ok(
        sa.remove(sa.iter().position(|d| d.ctx() == 0x72).unwrap()),
        "send",
    );
    ok(
        sb.remove(sb.iter().position(|d| d.ctx() == 0x71).unwrap()),
        "receive",
    );
    assert!(rx == tx, "{len} bytes arrived changed");
}

#[test]
fn endpoints_of_one_key_exchange_messages_and_rma() {
    let a = ep(Some(KEY), 1);
    let b = ep(Some(KEY), 2);
    for (len, seed) in [(8, 1), (20 << 10, 2), (1 << 20, 3)] {
        send_and_check(&a, &b, len, seed);
        send_and_check(&b, &a, len, seed + 10);
    }
    // An RMA write into a region of b.
    let mut region = vec![0u8; 4096];
    // SAFETY: region outlives the registration (dropped first, below).
    let mr = unsafe {
        b.domain.mr_reg(&MrAttr {
            iov: vec![(region.as_mut_ptr() as usize, region.len())],
            access: FI_REMOTE_WRITE,
            ..Default::default()
        })
    }
    .unwrap();
    let fb = a.av.insert_one(&b.ep.getname().unwrap()).unwrap();
    let data = [0x5au8; 64];
    // SAFETY: data outlives the write, awaited below.
    retry(&a, &b, || unsafe {
        a.ep.write(
            data.as_ptr(),
            64,
            fb,
            region.as_ptr() as u64,
            mr.key(),
            0x73,
        )
    })
    .unwrap();
    let mut sa = Vec::new();
    ok(
        wait_ctx_both(&a, &b, &mut sa, 0x73),
        "RMA write with the same key",
    );
    assert_eq!(&region[..64], &data[..]);
    drop(mr);
}

/// Waits for `ctx` on `a`'s CQ, progressing `b` too.
fn wait_ctx_both(a: &Rdm, b: &Rdm, stash: &mut Vec<Done>, ctx: usize) -> Done {
    let deadline = Instant::now() + STEP;
    loop {
        if let Some(i) = stash.iter().position(|d| d.ctx() == ctx) {
            return stash.remove(i);
        }
        assert!(Instant::now() < deadline, "no completion {ctx:#x}");
        poll(&a.cq, stash);
        b.ep.progress();
    }
}

/// `a`'s send to `b` fails with FI_EKEYREJECTED, naming the auth key, and
/// `b`'s posted receive gets nothing.
fn refused(a: &Rdm, b: &Rdm, what: &str) {
    let fb = a.av.insert_one(&b.ep.getname().unwrap()).unwrap();
    let mut rx = [0u8; 16];
    // SAFETY: rx outlives the endpoint's receive (cancelled below).
    unsafe { b.ep.trecv(rx.as_mut_ptr(), 16, FI_ADDR_UNSPEC, 9, 0, 0x91) }.unwrap();
    let e: Error = retry(a, b, || a.ep.tinject(b"secret!!", fb, 9))
        .expect_err(&format!("{what}: a send across keys"));
    assert_eq!(e.code(), errno::FI_EKEYREJECTED, "{what}: {e}");
    assert!(e.to_string().contains("auth key"), "{what}: {e}");
    eprintln!("{what}: {e}");
    // The other side got nothing (and its refusal is settled too).
    let mut got = Vec::new();
    for _ in 0..200 {
        poll(&b.cq, &mut got);
        a.ep.progress();
    }
    assert!(got.is_empty(), "{what}: the receiver got {got:?}");
    b.ep.cancel(0x91).unwrap();
    match wait_ctx(&b.cq, &mut got, 0x91, STEP, "cancel") {
        Done::Err(e) => assert_eq!(e.err, errno::FI_ECANCELED),
        Done::Ok(e) => panic!("{what}: the receive completed: {e:?}"),
    }
}

#[test]
fn endpoints_of_different_keys_are_refused_both_ways() {
    let a = ep(Some(KEY), 1);
    let b = ep(Some(OTHER), 2);
    refused(&a, &b, "key -> other key");
    refused(&b, &a, "other key -> key");
    let c = ep(None, 3);
    refused(&a, &c, "key -> no key");
    refused(&c, &a, "no key -> key");
    // RMA is refused the same way.
    let fb = a.av.insert_one(&b.ep.getname().unwrap()).unwrap();
    let data = [1u8; 8];
    let e = retry(&a, &b, || {
        // SAFETY: refused before anything is read.
        unsafe { a.ep.write(data.as_ptr(), 8, fb, 0, 0, 0x33) }
    })
    .expect_err("an RMA write across keys");
    assert_eq!(e.code(), errno::FI_EKEYREJECTED, "{e}");
}

/// A process that maps `b`'s segment and speaks the protocol without the
/// key, as endpoint (this pid, `idx`) with a segment of its own.
struct Forger {
    id: u64,
    own: Segment,
    inbox: MsgConsumer,
    target: Segment,
    cached: AtomicU64,
}

impl Forger {
    fn new(b: &Rdm, idx: u32) -> Forger {
        let uid = ofi_shmem::proc::uid();
        let pid = std::process::id();
        let geo = Geometry {
            ring_slots: 16,
            slot_size: 4160,
            pool_bufs: 1,
            pool_buf_size: 4096,
        };
        let (own, inbox) = Segment::create(&segment_path(uid, pid, idx), geo, true).unwrap();
        let (bp, bi) = common::forge::parse_addr(&b.ep.getname().unwrap());
        let target = Segment::open(&segment_path(uid, bp, bi), bp).unwrap();
        Forger {
            id: (u64::from(pid) << 32) | u64::from(idx),
            own,
            inbox,
            target,
            cached: AtomicU64::new(0),
        }
    }
    /// Pushes into b's ring; while it is full (FI_SHM_RING_SLOTS may be as
    /// small as 2), b progresses, for at most STEP.
    fn push(&self, b: &Rdm, r: Repr, payload: &[u8]) {
        let r = Repr { src: self.id, ..r };
        let deadline = Instant::now() + STEP;
        while self
            .target
            .msg_ring()
            .push_with(&self.cached, |buf| {
                buf[HDR_LEN..HDR_LEN + payload.len()].copy_from_slice(payload);
                r.emit(&mut Entry::new_unchecked(buf));
            })
            .is_err()
        {
            assert!(Instant::now() < deadline, "b never made room in its ring");
            b.ep.progress();
        }
    }
    /// The next entry b put in our ring (driving b meanwhile).
    fn next(&mut self, b: &Rdm) -> (Repr, Vec<u8>) {
        let deadline = Instant::now() + STEP;
        loop {
            if let Some(x) = self.inbox.pop_with(&self.own, |e| {
                let r = Repr::parse(&Entry::new_unchecked(&*e)).unwrap();
                (r, e[HDR_LEN..HDR_LEN + r.len as usize].to_vec())
            }) {
                self.inbox.publish(&self.own);
                return x;
            }
            assert!(Instant::now() < deadline, "b never answered the forger");
            b.ep.progress();
        }
    }
    /// An RMA_WRITE of `data` at `addr` under `key` (no answer expected).
    fn rma_write(&self, b: &Rdm, addr: u64, key: u64, data: &[u8]) {
        let range = WireRange {
            addr,
            len: data.len() as u64,
            key,
        };
        let mut pl = vec![0u8; RANGE_LEN + data.len()];
        let at = put_ranges(&mut pl, &[range], &[]);
        pl[at..].copy_from_slice(data);
        self.push(
            b,
            Repr {
                op: op::RMA_WRITE,
                flags: ofi_wire::shm::flag::LAST,
                iov_cnt: 1,
                len: data.len() as u32,
                tag: data.len() as u64,
                cookie: 0x5eed,
                ..Default::default()
            },
            &pl,
        );
    }
    fn inline(&self, b: &Rdm, msg: &[u8], tag: u64) {
        self.push(
            b,
            Repr {
                op: op::INLINE,
                flags: ofi_wire::shm::flag::TAGGED,
                len: msg.len() as u32,
                total: msg.len() as u64,
                tag,
                ..Default::default()
            },
            msg,
        );
    }
}

#[test]
fn a_peer_that_cannot_prove_the_key_is_refused() {
    let b = ep(Some(KEY), 2);
    let mut rx = [0u8; 32];
    // SAFETY: rx outlives b's receive.
    unsafe { b.ep.trecv(rx.as_mut_ptr(), 32, FI_ADDR_UNSPEC, 5, 0, 0x51) }.unwrap();
    // A region of b open to remote writes, whose key the forger knows.
    let mut region = vec![0u8; 64];
    // SAFETY: region outlives the registration (dropped at the end).
    let mr = unsafe {
        b.domain.mr_reg(&MrAttr {
            iov: vec![(region.as_mut_ptr() as usize, region.len())],
            access: FI_REMOTE_WRITE,
            ..Default::default()
        })
    }
    .unwrap();
    // 1. A forged message and a forged RMA write (right key, right
    // address) from a sender that never proved anything.
    let mut f = Forger::new(&b, 0x7fff_0001);
    f.inline(&b, b"forged, no exchange", 5);
    f.rma_write(&b, region.as_ptr() as u64, mr.key(), &[0xeeu8; 16]);
    // 2. The forger tries the exchange: HELLO, then a PROOF it cannot make.
    f.push(
        &b,
        Repr {
            op: op::HELLO,
            len: 32,
            ..Default::default()
        },
        &[7u8; 32],
    );
    let (ch, p) = loop {
        let (r, p) = f.next(&b);
        if r.op == op::CHALLENGE {
            break (r, p);
        }
        assert_eq!(r.op, op::REJECT, "b answers the forged message with REJECT");
    };
    assert_eq!(ch.len, 96, "a CHALLENGE: our nonce, b's nonce, b's proof");
    assert_eq!(&p[..32], &[7u8; 32], "it echoes our nonce");
    let mut proof = [0u8; PROOF_LEN];
    proof[..32].copy_from_slice(&p[32..64]); // b's nonce, echoed
    proof[32..].copy_from_slice(&p[64..96]); // its own proof, replayed
    f.push(
        &b,
        Repr {
            op: op::PROOF,
            len: PROOF_LEN as u32,
            ..Default::default()
        },
        &proof,
    );
    let (r, _) = f.next(&b);
    assert_eq!(r.op, op::REJECT, "a bad PROOF is answered REJECT");
    // 3. Its messages after the failed exchange are dropped too.
    f.inline(&b, b"forged after a bad proof", 5);
    let mut got = Vec::new();
    for _ in 0..500 {
        poll(&b.cq, &mut got);
    }
    assert!(
        got.is_empty(),
        "a forged message reached a receive: {got:?}"
    );
    f.rma_write(&b, region.as_ptr() as u64, mr.key(), &[0xddu8; 16]);
    for _ in 0..500 {
        b.ep.progress();
    }
    assert_eq!(region, vec![0u8; 64], "a forged RMA write reached memory");
    // 4. A peer with the key gets through, into the same receive.
    let a = ep(Some(KEY), 1);
    let fb = a.av.insert_one(&b.ep.getname().unwrap()).unwrap();
    retry(&a, &b, || a.ep.tinject(b"from a keyed peer", fb, 5)).unwrap();
    let d = wait_ctx_both(&b, &a, &mut got, 0x51);
    assert_eq!(ok(d, "keyed message").len, 17);
    assert_eq!(&rx[..17], b"from a keyed peer");
    drop(mr);
}

#[test]
fn segments_are_private_and_never_hold_the_key() {
    let a = ep(Some(KEY), 1);
    let b = ep(Some(KEY), 2);
    send_and_check(&a, &b, 64, 1);
    send_and_check(&b, &a, 64 << 10, 2);
    let uid = ofi_shmem::proc::uid();
    for r in [&a, &b] {
        let (pid, idx) = common::forge::parse_addr(&r.ep.getname().unwrap());
        for path in [segment_path(uid, pid, idx), bell_path(uid, pid, idx)] {
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "{} is mode {:o}", path.display(), mode);
        }
        let bytes = std::fs::read(segment_path(uid, pid, idx)).unwrap();
        assert!(
            !bytes.windows(KEY.len()).any(|w| w == KEY),
            "the key is in the segment of {pid}.{idx}"
        );
        assert!(
            !bytes.windows(8).any(|w| w == &KEY[..8]),
            "a piece of the key is in the segment of {pid}.{idx}"
        );
    }
}
