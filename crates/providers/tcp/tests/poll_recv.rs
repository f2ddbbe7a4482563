//! FI_TCP_POLL_RECV=0: an endpoint alone in its domain with one connection
//! asks epoll before reading its socket, instead of polling it with `recv`
//! (the default, which every other test exercises). Messages of every
//! protocol path (eager, rendezvous) still arrive intact both ways.
#![allow(unsafe_code)]

use ofi_core::consts::*;
use ofi_core::object::*;
use ofi_core::util::av::AvAttr;
use ofi_core::util::cq::{CqAttr, CqEntry};
use ofi_core::Info;
use std::time::{Duration, Instant};

struct Side {
    _domain: Domain,
    cq: CompletionQueue,
    _av: AddressVector,
    ep: Endpoint,
}

fn side(fabric: &Fabric, info: &Info) -> Side {
    let domain = fabric.domain(info).unwrap();
    let cq = domain.cq(&CqAttr::default()).unwrap();
    let av = domain.av(&AvAttr::default()).unwrap();
    let ep = domain.endpoint(info).unwrap();
    ep.bind_cq(&cq, FI_TRANSMIT | FI_RECV).unwrap();
    ep.bind_av(&av).unwrap();
    ep.enable().unwrap();
    Side {
        _domain: domain,
        cq,
        _av: av,
        ep,
    }
}

/// Reads completions from both CQs (each read drives its own domain) until
/// `want` contexts have been seen on `on`.
fn wait(on: &Side, other: &Side, want: &[usize]) {
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut e = [CqEntry::default(); 4];
    while want.iter().any(|c| !seen.contains(c)) {
        assert!(
            Instant::now() < deadline,
            "completions {want:?} missing, got {seen:?}"
        );
        match on.cq.read(&mut e) {
            Ok(n) => seen.extend(e[..n].iter().map(|x| x.op_context)),
            Err(err) => assert!(err.is_again(), "cq read: {err}"),
        }
        other.ep.progress();
    }
}

#[test]
fn epoll_polling_moves_every_size_both_ways() {
    // Set before the provider reads its tunables (once, at registration).
    std::env::set_var("FI_TCP_POLL_RECV", "0");
    assert!(!ofi_prov_tcp::TcpConfig::from_env().unwrap().poll_recv);
    ofi_prov_tcp::register().unwrap();
    {
        let mut h = Info::hints();
        h.caps = FI_MSG;
        h.ep_attr.ep_type = ep_type::FI_EP_RDM;
        h.fabric_attr.prov_name = Some("tcp".into());
        let info = ofi_core::getinfo(
            FI_VERSION_CURRENT,
            Some("127.0.0.1"),
            None,
            FI_SOURCE,
            Some(&h),
        )
        .unwrap()
        .remove(0);
        let fabric = Fabric::open(&info.fabric_attr).unwrap();
        // Two domains: each endpoint is its domain's only member.
        let a = side(&fabric, &info);
        let b = side(&fabric, &info);
        let fb = a._av.insert_one(&b.ep.getname().unwrap()).unwrap();
        let fa = b._av.insert_one(&a.ep.getname().unwrap()).unwrap();
        for (round, size) in [8usize, 4096, 100_000, 1 << 20].into_iter().enumerate() {
            let tx: Vec<u8> = (0..size).map(|i| (i * 7 + round) as u8).collect();
            let mut rx = vec![0u8; size];
            let mut back = vec![0u8; size];
            // SAFETY: the buffers outlive the operations, which complete
            // before the next round.
            unsafe {
                b.ep.recv(rx.as_mut_ptr(), size, FI_ADDR_UNSPEC, 10)
                    .unwrap();
                a.ep.send(tx.as_ptr(), size, fb, 11).unwrap();
            }
            wait(&b, &a, &[10]);
            wait(&a, &b, &[11]);
            assert!(rx == tx, "a→b {size} B arrived changed");
            // SAFETY: back and rx outlive the operations, which complete before the next
            // round.
            unsafe {
                a.ep.recv(back.as_mut_ptr(), size, FI_ADDR_UNSPEC, 20)
                    .unwrap();
                b.ep.send(rx.as_ptr(), size, fa, 21).unwrap();
            }
            wait(&a, &b, &[20]);
            wait(&b, &a, &[21]);
            assert!(back == tx, "b→a {size} B arrived changed");
        }
    }
}
