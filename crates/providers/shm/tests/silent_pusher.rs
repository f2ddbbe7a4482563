//! A receive filled by DATA pushes (FI_SHM_DISABLE_CMA: no cross-process
//! copy) whose sender stops progressing half way, its process alive and
//! its ring empty (it has read the NACK), fails with FI_ETIMEDOUT once
//! FI_SHM_PEER_TIMEOUT_MS has passed, instead of waiting for ever: the
//! sender owes the rest of the message whatever its ring holds. Its own
//! process: the environment is process-wide.
#![allow(unsafe_code)]

mod common;
use common::forge::{parse_addr, Pair};
use common::ofi;

use ofi::consts::*;
use ofi::errno;
use ofi::{AvAttr, CqAttr, Info};
use ofi_wire::shm::{op, Repr};
use std::time::{Duration, Instant};

const TIMEOUT_MS: u64 = 300;

#[test]
fn a_pusher_that_stops_half_way_times_out_the_receive() {
    std::env::set_var("FI_SHM_DISABLE_CMA", "1");
    std::env::set_var("FI_SHM_PEER_TIMEOUT_MS", TIMEOUT_MS.to_string());
    let p = Pair::new();
    // The pusher: an endpoint of its own fabric, domain and CQ, so nothing
    // the test does to b progresses it (Pair's a shares b's CQ).
    let mut h = Info::hints();
    h.caps = FI_MSG | FI_TAGGED;
    h.fabric_attr.prov_name = Some("shm".into());
    let info = ofi::getinfo(FI_VERSION_CURRENT, None, None, 0, Some(&h))
        .unwrap()
        .remove(0);
    let f = ofi::Fabric::open(&info.fabric_attr).unwrap();
    let d = f.domain(&info).unwrap();
    let cq = d.cq(&CqAttr::default()).unwrap();
    let av = d.av(&AvAttr::default()).unwrap();
    let c = d.endpoint(&info).unwrap();
    c.bind_cq(&cq, FI_TRANSMIT | FI_RECV).unwrap();
    c.bind_av(&av).unwrap();
    c.enable().unwrap();
    let (cpid, cidx) = parse_addr(&c.getname().unwrap());
    let c_id = (u64::from(cpid) << 32) | u64::from(cidx);
    let total = 8000usize;
    let msg: Vec<u8> = (0..total).map(|i| (i % 251) as u8).collect();
    let mut rx = vec![0u8; total];
    // SAFETY: rx outlives the receive; we wait for its completion below.
    unsafe { p.b.recv(rx.as_mut_ptr(), rx.len(), FI_ADDR_UNSPEC, 7) }.unwrap();
    // An RTS from c: b cannot copy, so it answers NACK and waits for DATA.
    let cookie = 0x51;
    let mut range = [0u8; 16];
    range[8..].copy_from_slice(&(total as u64).to_le_bytes());
    p.inject(
        &Repr {
            op: op::RTS,
            iov_cnt: 1,
            src: c_id,
            total: total as u64,
            cookie,
            ..Default::default()
        },
        &range,
    );
    for _ in 0..4 {
        p.b.progress();
    }
    // c reads its ring (the NACK, whose cookie it does not know) and
    // beats; from here on its process lives but it never progresses again.
    for _ in 0..4 {
        c.progress();
    }
    // The first half arrives, the rest never does.
    p.inject(
        &Repr {
            op: op::DATA,
            len: (total / 2) as u32,
            src: c_id,
            total: 0,
            cookie,
            ..Default::default()
        },
        &msg[..total / 2],
    );
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_millis(TIMEOUT_MS * 20);
    let failed = loop {
        assert!(
            Instant::now() < deadline,
            "the receive still waits on its silent pusher after {:?}",
            t0.elapsed()
        );
        p.b.progress();
        let mut e = [ofi::CqTaggedEntry::default(); 1];
        match p.cq.read(&mut e) {
            Ok(n) => panic!("{n} completion(s) on half a message: {:?}", e[0]),
            Err(err) if err.is_again() => std::thread::sleep(Duration::from_millis(2)),
            Err(_) => break p.cq.readerr().unwrap(),
        }
    };
    let took = t0.elapsed();
    assert_eq!(failed.op_context, 7);
    assert_eq!(failed.err, errno::FI_ETIMEDOUT, "the receive's error");
    // Not before the bound (a beat it missed, not a guess).
    assert!(
        took >= Duration::from_millis(TIMEOUT_MS / 2),
        "declared dead after {took:?}, bound {TIMEOUT_MS} ms"
    );
}
