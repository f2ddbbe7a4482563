//! A sender that stops calling into the library while a message it pushes
//! (FI_SHM_DISABLE_CMA: no cross-process copy) is half way is alive, not
//! dead: with no FI_SHM_PEER_TIMEOUT_MS set, its receiver waits as long as
//! it takes (as libfabric's shm does, and as an application computing
//! between progress calls under FI_PROGRESS_MANUAL needs), and the message
//! arrives whole once the sender progresses again. Only the sender's exit
//! or its endpoint's close ends the wait (tests/survivors.rs); a bound on
//! silence is the user's choice (tests/silent_pusher.rs). Its own process:
//! the environment is process-wide.
#![allow(unsafe_code)]

mod common;
use common::ofi;

use ofi::consts::*;
use ofi::{AvAttr, CqAttr, Info};
use std::time::{Duration, Instant};

/// Longer than the 5 s silence bound shm used to apply by default.
const PAUSE: Duration = Duration::from_millis(5600);

struct Side {
    _f: ofi::Fabric,
    _d: ofi::Domain,
    cq: ofi::CompletionQueue,
    av: ofi::AddressVector,
    ep: ofi::Endpoint,
}

/// An endpoint with a fabric, domain and CQ of its own, so progressing
/// one side never progresses the other.
fn side(info: &Info) -> Side {
    let f = ofi::Fabric::open(&info.fabric_attr).unwrap();
    let d = f.domain(info).unwrap();
    let cq = d.cq(&CqAttr::default()).unwrap();
    let av = d.av(&AvAttr::default()).unwrap();
    let ep = d.endpoint(info).unwrap();
    ep.bind_cq(&cq, FI_TRANSMIT | FI_RECV).unwrap();
    ep.bind_av(&av).unwrap();
    ep.enable().unwrap();
    Side {
        _f: f,
        _d: d,
        cq,
        av,
        ep,
    }
}

fn read_one(s: &Side) -> Option<Result<ofi::CqTaggedEntry, i32>> {
    s.ep.progress();
    let mut e = [ofi::CqTaggedEntry::default(); 1];
    match s.cq.read(&mut e) {
        Ok(_) => Some(Ok(e[0])),
        Err(err) if err.is_again() => None,
        Err(_) => Some(Err(s.cq.readerr().unwrap().err)),
    }
}

#[test]
fn a_sender_that_pauses_mid_message_is_waited_for() {
    std::env::set_var("FI_SHM_DISABLE_CMA", "1");
    std::env::remove_var("FI_SHM_PEER_TIMEOUT_MS");
    // A small ring: the message needs many of the sender's passes.
    std::env::set_var("FI_SHM_RING_SLOTS", "8");
    let mut h = Info::hints();
    h.caps = FI_MSG | FI_TAGGED;
    h.fabric_attr.prov_name = Some("shm".into());
    let info = ofi::getinfo(FI_VERSION_CURRENT, None, None, 0, Some(&h))
        .unwrap()
        .remove(0);
    let (rx_side, tx_side) = (side(&info), side(&info));
    let to_rx = tx_side
        .av
        .insert_one(&rx_side.ep.getname().unwrap())
        .unwrap();
    rx_side
        .av
        .insert_one(&tx_side.ep.getname().unwrap())
        .unwrap();
    // Many rings' worth: the sender pushes it over many passes.
    let total = 1 << 20;
    let msg: Vec<u8> = (0..total).map(|i| (i % 251) as u8).collect();
    let mut rx = vec![0u8; total];
    // SAFETY: rx outlives the receive; we wait for its completion below.
    unsafe { rx_side.ep.recv(rx.as_mut_ptr(), total, FI_ADDR_UNSPEC, 7) }.unwrap();
    // SAFETY: msg outlives the send; we wait for its completion below.
    unsafe { tx_side.ep.send(msg.as_ptr(), total, to_rx, 8) }.unwrap();
    // Both progress until the receive is under way, then the sender stops.
    for _ in 0..4 {
        assert!(read_one(&tx_side).is_none(), "sent before it was read");
        assert!(
            read_one(&rx_side).is_none(),
            "received before it was pushed"
        );
    }
    let t0 = Instant::now();
    while t0.elapsed() < PAUSE {
        if let Some(r) = read_one(&rx_side) {
            panic!("the receive ended while its sender paused: {r:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    // The sender comes back: the message arrives whole.
    let deadline = Instant::now() + Duration::from_secs(20);
    let (mut sent, mut got) = (None, None);
    while (sent.is_none() || got.is_none()) && Instant::now() < deadline {
        sent = sent.or_else(|| read_one(&tx_side));
        got = got.or_else(|| read_one(&rx_side));
    }
    let got = got.expect("the receive completed").expect("without error");
    assert_eq!((got.op_context, got.len), (7, total));
    assert_eq!(sent.expect("the send completed").expect("ok").op_context, 8);
    assert!(rx == msg, "the message arrived whole");
}
