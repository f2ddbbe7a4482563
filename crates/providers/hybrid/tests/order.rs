//! Arrival order on the shm path when small messages (which shm offers to
//! hybrid's receive hook as they leave its ring) follow larger ones that
//! take the bounce receives, with few bounce receives (FI_HYBRID_BOUNCE_BUFS
//! = 2), so that some of the larger ones wait in shm itself: the receives,
//! posted only once everything arrived, must take the messages in the order
//! they were sent, whatever way each came.
#![allow(unsafe_code)]

use ofi::consts::*;
use ofi::Info;
use std::time::{Duration, Instant};

mod common;

use common::{open, post, read};

#[test]
fn small_messages_do_not_overtake_larger_ones_waiting_in_shm() {
    // Read when the fabric opens; nothing else in this binary reads them.
    std::env::set_var("FI_HYBRID_NODE", "order-host");
    std::env::set_var("FI_HYBRID_BOUNCE_BUFS", "2");
    let mut h = Info::hints();
    h.caps = FI_MSG | FI_TAGGED | FI_LOCAL_COMM | FI_REMOTE_COMM;
    h.ep_attr.ep_type = ep_type::FI_EP_RDM;
    h.fabric_attr.prov_name = Some("hybrid".into());
    let info =
        ofi::getinfo(FI_VERSION_CURRENT, None, None, 0, Some(&h)).expect("hybrid")[0].clone();
    let (a, b) = (open(&info), open(&info));
    std::env::remove_var("FI_HYBRID_NODE");
    std::env::remove_var("FI_HYBRID_BOUNCE_BUFS");
    let to_b = a.av.insert_one(&b.ep.getname().unwrap()).unwrap();
    b.av.insert_one(&a.ep.getname().unwrap()).unwrap();
    // 6000 bytes: above shm's inject size, below hybrid's eager size (a
    // header and the payload through a bounce receive); 8 bytes: bare,
    // offered to the hook. Interleaved, on both queues.
    let sizes = [6000usize, 6000, 6000, 8, 6000, 6000, 8, 8, 6000, 8];
    let msgs: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| vec![i as u8 + 1; n])
        .collect();
    for tagged in [false, true] {
        for (i, m) in msgs.iter().enumerate() {
            let ctx = 0x100 + i;
            // FI_EAGAIN (a full ring, FI_SHM_RING_SLOTS) is flow control:
            // both sides progress and the send is posted again.
            post(&[&a.ep, &b.ep], || {
                // SAFETY: `msgs` outlives the sends, which complete below.
                unsafe {
                    if tagged {
                        a.ep.tsend(m.as_ptr(), m.len(), to_b, 7, ctx)
                    } else {
                        a.ep.send(m.as_ptr(), m.len(), to_b, ctx)
                    }
                }
            })
            .unwrap_or_else(|e| panic!("send {i}: {e}"));
        }
        // Everything reaches b before any receive is posted: some in b's
        // bounce receives, some held by shm, some through the hook.
        let end = Instant::now() + Duration::from_millis(100);
        while Instant::now() < end {
            b.ep.progress();
            a.ep.progress();
        }
        let mut bufs: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0u8; n.max(6000)]).collect();
        for (i, buf) in bufs.iter_mut().enumerate() {
            // SAFETY: the buffers outlive the receives, which complete below.
            let r = unsafe {
                if tagged {
                    b.ep.trecv(buf.as_mut_ptr(), buf.len(), FI_ADDR_UNSPEC, 7, 0, 0x200 + i)
                } else {
                    b.ep.recv(buf.as_mut_ptr(), buf.len(), FI_ADDR_UNSPEC, 0x200 + i)
                }
            };
            r.unwrap();
        }
        let got = read([&a, &b], &b.cq, sizes.len(), "receives");
        for (i, e) in got.iter().enumerate() {
            assert_eq!(e.op_context, 0x200 + i, "tagged {tagged}: completion order");
            assert_eq!(
                e.len, sizes[i],
                "tagged {tagged}: receive {i} took another message"
            );
            assert!(
                bufs[i][..sizes[i]] == msgs[i][..],
                "tagged {tagged}: receive {i} holds another message's bytes"
            );
        }
        let sent = read([&a, &b], &a.cq, sizes.len(), "sends");
        assert_eq!(sent.len(), sizes.len());
    }
}
