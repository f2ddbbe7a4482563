//! A sender that is faster than its receiver's AV: `a` sends to `b` before
//! `b` has inserted `a`'s address (in an MPI job, a rank that finished its
//! start-up first). The messages arrive from a sender `b`'s AV does not
//! name; once `b` inserts `a`, receives directed at `a` must take them, in
//! the order they were sent, eager and rendezvous alike, on the shm path
//! and on the network path (tcp, and udp with FI_HYBRID_NET=udp). (Before the inner AVs learned such senders, the
//! messages were held with an unknown source and a directed receive never
//! matched them: Open MPI with 4 ranks on 2 hosts hung in its first
//! collective about one run in two.)
#![allow(unsafe_code)]

use ofi::consts::*;
use ofi::Info;
use std::time::{Duration, Instant};

mod common;

use common::{open, post, read};

/// `a` sends to `b` before `b` knows `a`; `b` then inserts `a` and posts
/// receives directed at it.
fn early_sender(node: &str, net: &str, what: &str) {
    // Read when the fabric opens; nothing else in this binary reads them.
    std::env::set_var("FI_HYBRID_NODE", node);
    std::env::set_var("FI_HYBRID_NET", net);
    let mut h = Info::hints();
    h.caps = FI_MSG | FI_TAGGED | FI_DIRECTED_RECV | FI_LOCAL_COMM | FI_REMOTE_COMM;
    h.ep_attr.ep_type = ep_type::FI_EP_RDM;
    h.fabric_attr.prov_name = Some("hybrid".into());
    let info =
        ofi::getinfo(FI_VERSION_CURRENT, None, None, 0, Some(&h)).expect("hybrid")[0].clone();
    // A fresh pair per queue: b has not inserted a when a sends.
    let pairs = [(open(&info), open(&info)), (open(&info), open(&info))];
    std::env::remove_var("FI_HYBRID_NODE");
    std::env::remove_var("FI_HYBRID_NET");
    assert_ne!(
        info.caps & FI_DIRECTED_RECV,
        0,
        "{what}: the offer has FI_DIRECTED_RECV"
    );
    // 8 B and 6000 B: eager; 200 KiB: rendezvous. Both queues.
    let sizes = [8usize, 6000, 200 << 10, 8];
    let msgs: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| (0..n).map(|k| (k * 7 + i * 31 + 1) as u8).collect())
        .collect();
    for ((a, b), tagged) in pairs.iter().zip([false, true]) {
        let what = format!("{what}, tagged {tagged}");
        let to_b = a.av.insert_one(&b.ep.getname().unwrap()).unwrap();
        for (i, m) in msgs.iter().enumerate() {
            // FI_EAGAIN (a full ring, FI_SHM_RING_SLOTS) is flow control:
            // both sides progress and the send is posted again.
            post(&[&a.ep, &b.ep], || {
                // SAFETY: `msgs` outlives the sends, which complete below.
                unsafe {
                    if tagged {
                        a.ep.tsend(m.as_ptr(), m.len(), to_b, 9, 0x100 + i)
                    } else {
                        a.ep.send(m.as_ptr(), m.len(), to_b, 0x100 + i)
                    }
                }
            })
            .unwrap_or_else(|e| panic!("{what}: send {i}: {e}"));
        }
        // The messages reach b, whose AV does not name a.
        let end = Instant::now() + Duration::from_millis(200);
        while Instant::now() < end {
            b.ep.progress();
            a.ep.progress();
        }
        // b learns a and takes the messages with receives directed at it.
        let from_a = b.av.insert_one(&a.ep.getname().unwrap()).unwrap();
        let mut bufs: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0u8; n]).collect();
        for (i, buf) in bufs.iter_mut().enumerate() {
            // SAFETY: the buffers outlive the receives, which complete below.
            let r = unsafe {
                if tagged {
                    b.ep.trecv(buf.as_mut_ptr(), buf.len(), from_a, 9, 0, 0x200 + i)
                } else {
                    b.ep.recv(buf.as_mut_ptr(), buf.len(), from_a, 0x200 + i)
                }
            };
            r.unwrap();
        }
        // A rendezvous receive may complete after later eager ones: what
        // each receive took is what counts.
        let mut got = read([a, b], &b.cq, sizes.len(), &what);
        got.sort_by_key(|e| e.op_context);
        for (i, e) in got.iter().enumerate() {
            assert_eq!(
                e.op_context,
                0x200 + i,
                "{what}: one completion per receive"
            );
            assert_eq!(e.len, sizes[i], "{what}: receive {i} took another message");
            assert!(bufs[i] == msgs[i], "{what}: receive {i} holds other bytes");
        }
        let sent = read([a, b], &a.cq, sizes.len(), &what);
        assert_eq!(sent.len(), sizes.len());
    }
}

#[test]
fn receives_directed_at_a_sender_inserted_late_take_its_early_messages() {
    // One test: FI_HYBRID_NODE and FI_HYBRID_NET are process-wide.
    early_sender("early-host", "tcp", "shm path");
    early_sender("@endpoint", "tcp", "tcp path");
    early_sender("@endpoint", "udp", "udp path");
}
