//! Smoke test: a large message between two shm endpoints of one process.
#![allow(unsafe_code)]
use ofi::consts::*;
use ofi::*;

#[allow(clippy::type_complexity)]
fn pair(
    tagged: bool,
) -> (
    Fabric,
    Domain,
    CompletionQueue,
    AddressVector,
    Endpoint,
    Endpoint,
    u64,
    u64,
) {
    let mut h = Info::hints();
    h.caps = if tagged { FI_TAGGED } else { FI_MSG };
    h.ep_attr.ep_type = ep_type::FI_EP_RDM;
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
    let fa = av.insert_one(&a.getname().unwrap()).unwrap();
    let fb = av.insert_one(&b.getname().unwrap()).unwrap();
    (f, d, cq, av, a, b, fa, fb)
}

#[test]
fn large_msg() {
    let (_f, _d, cq, _av, a, b, _fa, fb) = pair(false);
    let tx = vec![7u8; 65536];
    let mut rx = vec![0u8; 65536];
    // SAFETY: rx and tx outlive both operations; we wait for their completions.
    unsafe {
        b.recv(rx.as_mut_ptr(), rx.len(), FI_ADDR_UNSPEC, 1)
            .unwrap()
    };
    // SAFETY: tx is valid for tx.len() bytes and outlives the send; we
    // wait for its completion below.
    unsafe { a.send(tx.as_ptr(), tx.len(), fb, 2).unwrap() };
    let mut got = vec![];
    let start = std::time::Instant::now();
    while got.len() < 2 && start.elapsed().as_secs() < 5 {
        let mut e = [CqTaggedEntry::default(); 4];
        match cq.read(&mut e) {
            Ok(n) => got.extend_from_slice(&e[..n]),
            Err(e) if e.is_again() => {}
            Err(e) => panic!("{e} {:?}", cq.readerr()),
        }
    }
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(rx, tx);
}
