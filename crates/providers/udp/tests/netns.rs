//! RDM endpoints between two network namespaces the test creates (a veth
//! pair, 10.98.x.1 and 10.98.x.2 inside them only), one child process of
//! this test binary in each.
//!
//! Loss on the real path: `tc netem` is not available on these machines, so
//! each veth gets a token-bucket shaper with a small queue (`tc qdisc add
//! dev V root tbf rate 40mbit burst 8kb limit 16kb`) that drops what a
//! burst brings beyond it. A stream of messages from 1 B to 1 MiB then
//! arrives intact, exactly once and in order, and the shaper's own counter
//! shows datagrams were dropped (the test fails if none were: it would
//! prove nothing). Then the link goes down mid-transfer: pending sends
//! complete with FI_ETIMEDOUT (the peer timeout is 2 s; the wait is bounded
//! at 30 s) and nothing hangs; the link comes back up and new traffic flows
//! to the same peer.
//!
//! Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN): without it the test fails
//! saying so; it never passes without running.
#![allow(unsafe_code)]

mod common;

use common::netns::{child_in, Netns};
use common::*;
use ofi_core::consts::*;
use ofi_core::error::errno;
use std::process::Command;
use std::time::{Duration, Instant};

const NAME: &str = "rdm_is_exact_under_real_loss_and_survives_a_dead_link";
/// Bound for each step a child waits for.
const STEP: Duration = Duration::from_secs(60);
/// Message sizes of the lossy stream (each sent `ROUNDS` times).
const SIZES: [usize; 7] = [8, 100, 4000, 20_000, 65_536, 300_000, 1 << 20];
const ROUNDS: usize = 3;
/// The largest message.
const MAX: usize = 1 << 20;

fn tc(ns: &str, args: &[&str]) -> String {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "tc"])
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running tc in {ns}: {e}"));
    assert!(
        out.status.success(),
        "tc {} in {ns}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Datagrams the shaper on `dev` in `ns` dropped.
fn dropped(ns: &str, dev: &str) -> u64 {
    let s = tc(ns, &["-s", "qdisc", "show", "dev", dev]);
    s.split("dropped ")
        .nth(1)
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no drop counter in: {s}"))
}

fn open(node: &str) -> Ep {
    let mut info = offer(ep_type::FI_EP_RDM, node);
    info.caps |= FI_MSG;
    Ep::open(&info)
}

/// The receiving side: checks every message of the stream, then one more.
fn receiver(node: &str) {
    let b = open(node);
    tell(&format!("ADDR {}", hex(&b.ep.getname().expect("getname"))));
    let mut buf = vec![0u8; MAX + 64];
    let mut stash = Vec::new();
    let mut seq = 0u64;
    let total = SIZES.len() * ROUNDS + 1;
    for i in 0..total {
        // SAFETY: buf outlives the receive (its completion is waited for).
        unsafe { b.ep.recv(buf.as_mut_ptr(), buf.len(), FI_ADDR_UNSPEC, 0x10) }.expect("recv");
        let d = ok(wait_ctx(&b.cq, &mut stash, 0x10, STEP, &[], "recv"), "recv");
        let got = check_stamp(&buf, d.len).unwrap_or_else(|e| panic!("message {i}: {e}"));
        if i + 1 < total {
            assert_eq!(
                got, seq,
                "message {i}: sequence (lost, duplicated or reordered)"
            );
            let want = SIZES[i % SIZES.len()];
            assert_eq!(d.len, want, "message {i}: length");
            seq += 1;
            if i + 2 == total {
                tell("STREAM_OK");
            }
        } else {
            // The message sent after the link came back.
            assert_eq!(got, 1000, "the message after the link came back");
            tell("AFTER_OK");
        }
    }
    linger();
}

/// The sending side: the stream, then sends into a dead link, then one more.
fn sender(node: &str) {
    let a = open(node);
    let peer = unhex(&listen("PEER"));
    let to = a.av.insert_one(&peer).expect("av insert");
    let mut stash = Vec::new();
    let mut seq = 0u64;
    let mut msgs: Vec<Vec<u8>> = Vec::new();
    for _ in 0..ROUNDS {
        for &len in &SIZES {
            let mut m = vec![0u8; len];
            stamp(&mut m, seq);
            seq += 1;
            msgs.push(m);
        }
    }
    // Four in flight at a time.
    let mut next = 0;
    let mut done = 0;
    while done < msgs.len() {
        while next < msgs.len() && next - done < 4 {
            // SAFETY: msgs outlives the sends (all are waited for).
            unsafe {
                a.ep.send(msgs[next].as_ptr(), msgs[next].len(), to, 0x100 + next)
            }
            .expect("send");
            next += 1;
        }
        ok(
            wait_ctx(&a.cq, &mut stash, 0x100 + done, STEP, &[], "stream send"),
            "stream send",
        );
        done += 1;
    }
    tell("SENT");
    listen("DOWN");
    let big = vec![7u8; MAX];
    let t0 = Instant::now();
    for k in 0..3 {
        // SAFETY: big outlives the sends (their completions are waited for).
        unsafe { a.ep.send(big.as_ptr(), big.len(), to, 0x900 + k) }.expect("send");
    }
    for k in 0..3 {
        match wait_ctx(
            &a.cq,
            &mut stash,
            0x900 + k,
            Duration::from_secs(30),
            &[],
            "dead",
        ) {
            Done::Err(e) => assert_eq!(
                e.err,
                errno::FI_ETIMEDOUT,
                "a send into a dead link fails with FI_ETIMEDOUT, got {}",
                errno_name(e.err)
            ),
            Done::Ok(_) => panic!("a send into a dead link succeeded"),
        }
    }
    tell(&format!("FAILED_IN_MS {}", t0.elapsed().as_millis()));
    listen("UP");
    let mut m = vec![0u8; 5000];
    stamp(&mut m, 1000);
    // SAFETY: m outlives the send (waited for).
    unsafe { a.ep.send(m.as_ptr(), m.len(), to, 0xa00) }.expect("send after up");
    ok(
        wait_ctx(&a.cq, &mut stash, 0xa00, STEP, &[], "send after up"),
        "send after up",
    );
    tell("AFTER_SENT");
    linger();
}

#[test]
fn rdm_is_exact_under_real_loss_and_survives_a_dead_link() {
    if let Some(r) = role() {
        child_main(|| {
            let (what, node) = r.split_once(' ').expect("role: what node");
            match what {
                "send" => sender(node),
                _ => receiver(node),
            }
        });
    }
    let n = Netns::pair("rdm", 1);
    for i in 0..2 {
        tc(
            &n.names[i],
            &[
                "qdisc",
                "add",
                "dev",
                &n.veths[i],
                "root",
                "tbf",
                "rate",
                "40mbit",
                "burst",
                "8kb",
                "limit",
                "16kb",
            ],
        );
    }
    let mut kb = Kid::spawn(
        "receiver",
        with_timeout(child_in(&n, 1, NAME, &format!("recv {}", n.addrs[1]))),
    );
    let mut ka = Kid::spawn(
        "sender",
        with_timeout(child_in(&n, 0, NAME, &format!("send {}", n.addrs[0]))),
    );
    let addr = kb.expect("ADDR", STEP);
    ka.say(&format!("PEER {addr}"));
    ka.expect("SENT", STEP);
    kb.expect("STREAM_OK", STEP);
    let drops = dropped(&n.names[0], &n.veths[0]) + dropped(&n.names[1], &n.veths[1]);
    eprintln!("the shapers dropped {drops} datagrams during the stream");
    assert!(
        drops > 0,
        "no datagram was lost: the stream proved nothing about loss"
    );
    n.link(0, false);
    ka.say("DOWN");
    let ms = ka.expect("FAILED_IN_MS", Duration::from_secs(40));
    eprintln!("sends into the dead link failed after {ms} ms");
    n.link(0, true);
    ka.say("UP");
    ka.expect("AFTER_SENT", STEP);
    kb.expect("AFTER_OK", STEP);
    ka.say("EXIT");
    kb.say("EXIT");
    ka.finish(STEP);
    kb.finish(STEP);
}

/// The child's peer timeout: 2 s (the dead-link phase waits for it).
fn with_timeout(mut c: Command) -> Command {
    c.env("FI_UDP_PEER_TIMEOUT_MS", "2000");
    c
}
