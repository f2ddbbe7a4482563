//! Multicast on DGRAM endpoints, in a network namespace the test creates
//! (its loopback carries 224.0.0.0/4): two receivers joined to one group
//! both get every datagram a sender sends to the group's fi_addr; each join
//! is reported with FI_JOIN_COMPLETE on the receiver's EQ; after one
//! receiver closes its group (leaves), nothing more arrives there while
//! the other still gets everything; a third receiver whose own port is the
//! group's gets everything too. Also, outside any namespace, joins that
//! must fail do (not a group address, an endpoint not enabled).
#![allow(unsafe_code)]

mod common;

use common::netns::{child_in, Netns};
use common::*;
use ofi_core::consts::*;
use ofi_core::error::errno;
use ofi_core::object::RecvOp;
use ofi_core::util::iov::IoVec;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(10);
/// Datagrams per phase.
const N: usize = 20;

fn group_addr() -> std::net::SocketAddr {
    let port = 40000 + (std::process::id() % 20000) as u16;
    std::net::SocketAddr::new("239.255.7.9".parse().unwrap(), port)
}

fn post(ep: &Ep, bufs: &mut [Vec<u8>], base: usize) {
    for (i, b) in bufs.iter_mut().enumerate() {
        let iov = [IoVec {
            base: b.as_mut_ptr() as usize,
            len: b.len(),
        }];
        let op = RecvOp {
            iov: &iov,
            desc: &[],
            src: FI_ADDR_UNSPEC,
            tag: 0,
            ignore: 0,
            context: base + i,
            flags: FI_COMPLETION,
            tagged: false,
        };
        // SAFETY: the buffers live until the endpoint closes.
        unsafe { ep.ep.post_recv(&op) }.expect("post_recv");
    }
}

/// Reads every receive completion that arrives within `settle` after the
/// last one (or `first` for the first): their lengths and first bytes.
fn drain(ep: &Ep, first: Duration, settle: Duration) -> Vec<(usize, u8)> {
    let mut got = Vec::new();
    let mut deadline = Instant::now() + first;
    let mut e = [ofi_core::util::cq::CqTaggedEntry::default(); 8];
    while Instant::now() < deadline {
        match ep.cq.read(&mut e) {
            Ok(n) => {
                for x in &e[..n] {
                    if x.flags & FI_RECV != 0 {
                        // SAFETY: the completion's buf is one of the posted buffers.
                        let b0 = unsafe { *(x.buf as *const u8) };
                        got.push((x.len, b0));
                    }
                }
                deadline = Instant::now() + settle;
            }
            Err(er) if er.is_again() => std::thread::yield_now(),
            Err(er) => panic!("cq read: {er}"),
        }
    }
    got
}

fn join_event(ep: &Ep, fid: usize, context: usize) {
    let deadline = Instant::now() + T;
    loop {
        match ep.eq.read() {
            Ok(ev) => {
                assert_eq!(
                    (ev.event, ev.fid, ev.context),
                    (eq_event::FI_JOIN_COMPLETE, fid, context),
                    "the join's EQ event"
                );
                return;
            }
            Err(e) if e.is_again() && Instant::now() < deadline => std::thread::yield_now(),
            Err(e) => panic!("no FI_JOIN_COMPLETE: {e}"),
        }
    }
}

fn child() {
    let mut info = offer(ep_type::FI_EP_DGRAM, "127.0.0.1");
    info.caps |= FI_MULTICAST;
    let sender = Ep::open(&info);
    let r1 = Ep::open(&info);
    let r2 = Ep::open(&info);
    // A receiver whose own port is the group's: its join takes a socket of
    // its own too (the endpoint's, bound to the interface's address, is
    // not given group datagrams).
    let mut own = info.clone();
    own.src_addr = Some(ofi_prov_udp::addr::encode(&std::net::SocketAddr::new(
        "127.0.0.1".parse().unwrap(),
        group_addr().port(),
    )));
    let r3 = Ep::open(&own);
    let group = ofi_prov_udp::addr::encode(&group_addr());
    let m1 = r1.ep.join(&group, 0, 0x111, 0x1c).expect("join r1");
    join_event(&r1, 0x111, 0x1c);
    let m2 = r2.ep.join(&group, 0, 0x222, 0x2c).expect("join r2");
    join_event(&r2, 0x222, 0x2c);
    let m3 = r3.ep.join(&group, 0, 0x333, 0x3c).expect("join r3");
    join_event(&r3, 0x333, 0x3c);
    // The sender sends to the group without joining: its AV holds the group.
    let to_group = sender
        .av
        .insert_one(&group)
        .expect("av insert of the group");
    let mut b1: Vec<Vec<u8>> = (0..2 * N).map(|_| vec![0u8; 64]).collect();
    let mut b2: Vec<Vec<u8>> = (0..2 * N).map(|_| vec![0u8; 64]).collect();
    let mut b3: Vec<Vec<u8>> = (0..N).map(|_| vec![0u8; 64]).collect();
    post(&r1, &mut b1, 0x1000);
    post(&r2, &mut b2, 0x2000);
    post(&r3, &mut b3, 0x3000);
    // Each join also gave its group an fi_addr on its own AV.
    assert_ne!(m1.fi_addr(), FI_ADDR_NOTAVAIL);
    for i in 0..N {
        let m = [i as u8; 33];
        sender.ep.inject(&m, to_group).expect("send to the group");
        std::thread::sleep(Duration::from_millis(1));
    }
    let g1 = drain(&r1, T, Duration::from_millis(300));
    let g2 = drain(&r2, T, Duration::from_millis(300));
    let g3 = drain(&r3, T, Duration::from_millis(300));
    let want: Vec<(usize, u8)> = (0..N).map(|i| (33, i as u8)).collect();
    assert_eq!(g1, want, "receiver 1: every datagram once, in order");
    assert_eq!(g2, want, "receiver 2: every datagram once, in order");
    assert_eq!(g3, want, "receiver 3, on the group's port: every datagram");
    drop(m3);
    // r1 leaves; r2 stays.
    drop(m1);
    for i in 0..N {
        let m = [(100 + i) as u8; 34];
        sender.ep.inject(&m, to_group).expect("send to the group");
        std::thread::sleep(Duration::from_millis(1));
    }
    let g2 = drain(&r2, T, Duration::from_millis(300));
    let want: Vec<(usize, u8)> = (0..N).map(|i| (34, (100 + i) as u8)).collect();
    assert_eq!(g2, want, "receiver 2 after receiver 1 left");
    let g1 = drain(&r1, Duration::from_millis(500), Duration::from_millis(100));
    assert!(
        g1.is_empty(),
        "receiver 1 got {} datagrams after leaving",
        g1.len()
    );
    drop(m2);
    tell("DONE");
}

#[test]
fn two_receivers_get_every_datagram_and_one_that_left_nothing() {
    if role().is_some() {
        child_main(child);
    }
    let ns = Netns::multicast("mc");
    let mut kid = Kid::spawn(
        "multicast",
        child_in(
            &ns,
            0,
            "two_receivers_get_every_datagram_and_one_that_left_nothing",
            "mc",
        ),
    );
    kid.expect("DONE", Duration::from_secs(60));
    kid.finish(Duration::from_secs(10));
}

#[test]
fn joins_that_cannot_work_are_refused() {
    let info = offer(ep_type::FI_EP_DGRAM, "127.0.0.1");
    let ep = Ep::open(&info);
    let unicast = ofi_prov_udp::addr::encode(&"127.0.0.1:5000".parse().unwrap());
    assert_eq!(
        ep.ep.join(&unicast, 0, 1, 1).unwrap_err().code(),
        errno::FI_EINVAL
    );
    let v6 = ofi_prov_udp::addr::encode(&"[ff02::1]:5000".parse().unwrap());
    assert_eq!(
        ep.ep.join(&v6, 0, 1, 1).unwrap_err().code(),
        errno::FI_EINVAL
    );
    assert_eq!(
        ep.ep.join(b"junk", 0, 1, 1).unwrap_err().code(),
        errno::FI_EINVAL
    );
    // Not enabled yet.
    let fabric = ofi_core::object::Fabric::open(&info.fabric_attr).unwrap();
    let domain = fabric.domain(&info).unwrap();
    let e = domain.endpoint(&info).unwrap();
    let g = ofi_prov_udp::addr::encode(&group_addr());
    assert_eq!(
        e.join(&g, 0, 1, 1).unwrap_err().code(),
        errno::FI_EOPBADSTATE
    );
}
