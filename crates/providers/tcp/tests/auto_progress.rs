//! FI_PROGRESS_AUTO: with a domain opened for auto progress, messages move
//! and completions appear without the application making progress calls.
#![allow(unsafe_code)]

use ofi_core::consts::*;
use ofi_core::object::*;
use ofi_core::util::av::AvAttr;
use ofi_core::util::cq::CqAttr;
use ofi_core::Info;
use std::time::{Duration, Instant};

#[test]
fn completions_arrive_without_progress_calls() {
    ofi_prov_tcp::register().unwrap();
    let mut h = Info::hints();
    h.caps = FI_MSG;
    h.ep_attr.ep_type = ep_type::FI_EP_RDM;
    h.fabric_attr.prov_name = Some("tcp".into());
    h.domain_attr.data_progress = progress::FI_PROGRESS_AUTO;
    let info = ofi_core::getinfo(
        FI_VERSION_CURRENT,
        Some("127.0.0.1"),
        None,
        FI_SOURCE,
        Some(&h),
    )
    .unwrap()
    .remove(0);
    assert_eq!(info.domain_attr.data_progress, progress::FI_PROGRESS_AUTO);
    let fabric = Fabric::open(&info.fabric_attr).unwrap();
    let domain = fabric.domain(&info).unwrap();
    let cq = domain.cq(&CqAttr::default()).unwrap();
    let av = domain.av(&AvAttr::default()).unwrap();
    let a = domain.endpoint(&info).unwrap();
    let b = domain.endpoint(&info).unwrap();
    for e in [&a, &b] {
        e.bind_cq(&cq, FI_TRANSMIT | FI_RECV).unwrap();
        e.bind_av(&av).unwrap();
        e.enable().unwrap();
    }
    let fb = av.insert_one(&b.getname().unwrap()).unwrap();
    let tx = vec![9u8; 200_000];
    let mut rx = vec![0u8; 200_000];
    // SAFETY: both buffers outlive the operations, which complete below.
    unsafe {
        b.recv(rx.as_mut_ptr(), rx.len(), FI_ADDR_UNSPEC, 1)
            .unwrap();
        a.send(tx.as_ptr(), tx.len(), fb, 2).unwrap();
    }
    // No CQ reads: only the provider's thread moves the data.
    let deadline = Instant::now() + Duration::from_secs(10);
    while cq.core().len() < 2 {
        assert!(
            Instant::now() < deadline,
            "auto progress did not complete the transfer ({} completions)",
            cq.core().len()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(rx == tx);
}
