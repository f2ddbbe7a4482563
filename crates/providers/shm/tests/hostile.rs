//! A hostile peer writes malformed entries straight into an shm endpoint's
//! ring: each is dropped with a logged reason, nothing panics, and the next
//! well-formed message arrives intact.
#![allow(unsafe_code)]

mod common;
use common::ofi;

use ofi::consts::*;
use ofi::*;
use ofi_shm::segment::{segment_path, Segment};
use ofi_wire::shm::{op, Entry, Repr};
use std::time::{Duration, Instant};

fn parse_addr(a: &[u8]) -> (u32, u32) {
    let s = std::str::from_utf8(a).unwrap().trim_end_matches('\0');
    let (p, i) = s
        .strip_prefix("fi_shm://")
        .unwrap()
        .split_once('.')
        .unwrap();
    (p.parse().unwrap(), i.parse().unwrap())
}

#[test]
fn malformed_ring_entries_are_dropped_and_the_endpoint_survives() {
    let mut h = Info::hints();
    h.caps = FI_MSG | FI_TAGGED;
    h.fabric_attr.prov_name = Some("shm".into());
    let info = ofi::getinfo(FI_VERSION_CURRENT, None, None, 0, Some(&h))
        .unwrap()
        .remove(0);
    let f = Fabric::open(&info.fabric_attr).unwrap();
    let d = f.domain(&info).unwrap();
    let cq = d
        .cq(&CqAttr {
            format: cq_format::FI_CQ_FORMAT_TAGGED,
            ..Default::default()
        })
        .unwrap();
    let av = d.av(&AvAttr::default()).unwrap();
    let a = d.endpoint(&info).unwrap();
    let b = d.endpoint(&info).unwrap();
    for e in [&a, &b] {
        e.bind_cq(&cq, FI_TRANSMIT | FI_RECV).unwrap();
        e.bind_av(&av).unwrap();
        e.enable().unwrap();
    }
    let baddr = b.getname().unwrap();
    let fb = av.insert_one(&baddr).unwrap();
    let (pid, idx) = parse_addr(&baddr);
    // The hostile side maps b's segment like any peer would.
    let seg = Segment::open(&segment_path(ofi_shm::proc::uid(), pid, idx), pid).unwrap();
    let hostile = [
        Repr {
            op: 99,
            ..Default::default()
        },
        Repr {
            op: op::INLINE,
            len: 60_000,
            total: 60_000,
            ..Default::default()
        },
        Repr {
            op: op::INLINE,
            len: 4,
            total: 9,
            ..Default::default()
        },
        Repr {
            op: op::BOUNCE,
            total: 100,
            cookie: 1 << 40,
            ..Default::default()
        },
        Repr {
            op: op::BOUNCE,
            total: 1 << 30,
            cookie: 0,
            ..Default::default()
        },
        Repr {
            op: op::RTS,
            iov_cnt: 0,
            total: 1 << 20,
            ..Default::default()
        },
        Repr {
            op: op::RTS,
            iov_cnt: 200,
            total: 1 << 20,
            ..Default::default()
        },
        Repr {
            op: op::ACK,
            cookie: 0xdead_beef,
            ..Default::default()
        },
        Repr {
            op: op::NACK,
            cookie: 0x1234_5678_9abc,
            ..Default::default()
        },
        Repr {
            op: op::DATA,
            len: 16,
            total: 0,
            cookie: 77,
            ..Default::default()
        },
        Repr {
            op: op::CTS,
            tag: 1 << 33,
            data: 5,
            cookie: 3,
            ..Default::default()
        },
        Repr {
            op: op::INLINE,
            flags: 0x80,
            len: 1,
            total: 1,
            ..Default::default()
        },
    ];
    let cached = std::sync::atomic::AtomicU64::new(0);
    for r in hostile {
        seg.msg_ring()
            .push_with(&cached, |buf| r.emit(&mut Entry::new_unchecked(buf)))
            .unwrap();
    }
    // Let b chew through them with nothing posted.
    for _ in 0..10 {
        b.progress();
    }
    let mut rx = vec![0u8; 64];
    let msg = b"still alive";
    // SAFETY: rx and msg outlive the operations; we wait for both completions.
    unsafe {
        b.recv(rx.as_mut_ptr(), rx.len(), FI_ADDR_UNSPEC, 1)
            .unwrap();
        a.send(msg.as_ptr(), msg.len(), fb, 2).unwrap();
    }
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while got.len() < 2 && Instant::now() < deadline {
        let mut e = [CqTaggedEntry::default(); 4];
        match cq.read(&mut e) {
            Ok(n) => got.extend_from_slice(&e[..n]),
            Err(e) if e.is_again() => {}
            Err(e) => panic!("unexpected error: {e}: {:?}", cq.readerr()),
        }
    }
    let r = got
        .iter()
        .find(|e| e.op_context == 1)
        .expect("the good message arrives");
    assert_eq!(r.len, msg.len());
    assert_eq!(&rx[..msg.len()], msg);
}
