//! Arrival order on the shm path when shm cannot copy across processes
//! (FI_SHM_DISABLE_CMA=1) and an eager hybrid message is larger than
//! shm's bounce buffers (FI_SHM_BOUNCE_SIZE=4096): shm sends it as a
//! rendezvous whose bytes the sender pushes through the ring in pieces,
//! after the messages behind it already arrived. Those (small ones offered
//! to hybrid's receive hook, or taking the next bounce receive, which
//! completes at once) must not overtake it (FI_ORDER_SAS).
#![allow(unsafe_code)]

use ofi::consts::*;
use ofi::Info;
use std::time::{Duration, Instant};

mod common;

use common::{open, read};

#[test]
fn messages_behind_one_pushed_in_pieces_wait_for_it() {
    // Read when the fabric opens; nothing else in this binary reads them.
    std::env::set_var("FI_HYBRID_NODE", "pushed-host");
    std::env::set_var("FI_SHM_DISABLE_CMA", "1");
    std::env::set_var("FI_SHM_BOUNCE_SIZE", "4096");
    let mut h = Info::hints();
    h.caps = FI_MSG | FI_TAGGED | FI_LOCAL_COMM | FI_REMOTE_COMM;
    h.ep_attr.ep_type = ep_type::FI_EP_RDM;
    h.fabric_attr.prov_name = Some("hybrid".into());
    let info =
        ofi::getinfo(FI_VERSION_CURRENT, None, None, 0, Some(&h)).expect("hybrid")[0].clone();
    let (a, b) = (open(&info), open(&info));
    for k in ["FI_HYBRID_NODE", "FI_SHM_DISABLE_CMA", "FI_SHM_BOUNCE_SIZE"] {
        std::env::remove_var(k);
    }
    let to_b = a.av.insert_one(&b.ep.getname().unwrap()).unwrap();
    b.av.insert_one(&a.ep.getname().unwrap()).unwrap();
    // 5000 bytes: eager for hybrid (header and payload in one shm message),
    // larger than shm's bounce buffers; 8 and 100 bytes: short messages
    // shm carries in its ring.
    let sizes = [5000usize, 8, 5000, 100, 8, 5000, 5000, 8];
    let msgs: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| vec![i as u8 + 1; n])
        .collect();
    for tagged in [false, true] {
        for early in [true, false] {
            let what = format!(
                "tagged {tagged}, receives posted {}",
                if early { "first" } else { "last" }
            );
            let mut bufs: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0u8; n]).collect();
            let post = |bufs: &mut Vec<Vec<u8>>| {
                for (i, buf) in bufs.iter_mut().enumerate() {
                    // SAFETY: the buffers outlive the receives, which complete below.
                    let r = unsafe {
                        if tagged {
                            b.ep.trecv(buf.as_mut_ptr(), buf.len(), FI_ADDR_UNSPEC, 7, 0, 0x200 + i)
                        } else {
                            b.ep.recv(buf.as_mut_ptr(), buf.len(), FI_ADDR_UNSPEC, 0x200 + i)
                        }
                    };
                    r.unwrap_or_else(|e| panic!("{what}: receive {i}: {e}"));
                }
            };
            if early {
                post(&mut bufs);
            }
            // The sends go into b's ring before b reads it (until the ring
            // is full: FI_SHM_RING_SLOTS): b reads the large one's
            // announcement and the small ones behind it in one pass, before
            // the large one's bytes come.
            let end = Instant::now() + Duration::from_secs(20);
            for (i, m) in msgs.iter().enumerate() {
                let ctx = 0x100 + i;
                loop {
                    // SAFETY: `msgs` outlives the sends, which complete below.
                    let r = unsafe {
                        if tagged {
                            a.ep.tsend(m.as_ptr(), m.len(), to_b, 7, ctx)
                        } else {
                            a.ep.send(m.as_ptr(), m.len(), to_b, ctx)
                        }
                    };
                    match r {
                        Ok(()) => break,
                        Err(e) if e.code() == ofi::errno::FI_EAGAIN => {
                            assert!(Instant::now() < end, "{what}: send {i} refused for 20 s");
                            b.ep.progress();
                            a.ep.progress();
                        }
                        Err(e) => panic!("{what}: send {i}: {e}"),
                    }
                }
            }
            if !early {
                // Everything arrives (drives both sides: the large ones'
                // bytes need the sender) before the receives are posted.
                let end = Instant::now() + Duration::from_millis(100);
                while Instant::now() < end {
                    b.ep.progress();
                    a.ep.progress();
                }
                post(&mut bufs);
            }
            let got = read([&a, &b], &b.cq, sizes.len(), &what);
            for (i, e) in got.iter().enumerate() {
                assert_eq!(e.op_context, 0x200 + i, "{what}: completion order");
                assert_eq!(e.len, sizes[i], "{what}: receive {i} took another message");
                assert!(
                    bufs[i] == msgs[i],
                    "{what}: receive {i} holds another message's bytes"
                );
            }
            let sent = read([&a, &b], &a.cq, sizes.len(), &format!("{what}: sends"));
            assert_eq!(sent.len(), sizes.len(), "{what}: send completions");
        }
    }
}
