//! fi_tcp(7)'s runtime parameters beyond FI_TCP_IFACE: FI_TCP_TX_SIZE and
//! FI_TCP_RX_SIZE set the context sizes the offers advertise;
//! FI_TCP_PORT_LOW_RANGE / FI_TCP_PORT_HIGH_RANGE bound the ports listening
//! sockets take (RDM endpoints, passive endpoints); malformed values are
//! refused with errors naming the variables. One test (one process): the
//! environment is process-wide.
#![allow(unsafe_code)]

mod common;

use common::{offer, request, tagged_cq};
use ofi_core::consts::*;
use ofi_core::error::errno;
use ofi_core::object::*;
use ofi_core::util::av::AvAttr;
use ofi_core::util::cq::CqTaggedEntry;
use std::net::TcpListener;
use std::time::{Duration, Instant};

fn port_of(name: &[u8]) -> u16 {
    ofi_prov_tcp::addr::decode(name)
        .expect("a socket address")
        .port()
}

/// Two consecutive ports that are free right now (bound and released).
fn free_pair() -> u16 {
    for base in (21000..31000).step_by(7) {
        let a = TcpListener::bind(("127.0.0.1", base));
        let b = TcpListener::bind(("127.0.0.1", base + 1));
        if a.is_ok() && b.is_ok() {
            return base;
        }
    }
    panic!("no two consecutive free ports in 21000..31000");
}

#[test]
fn context_sizes_and_port_range_follow_the_environment() {
    ofi_prov_tcp::register().unwrap();

    // Context sizes.
    std::env::set_var("FI_TCP_TX_SIZE", "100");
    std::env::set_var("FI_TCP_RX_SIZE", "200");
    for ep in [ep_type::FI_EP_RDM, ep_type::FI_EP_MSG] {
        let v = request(ep, "127.0.0.1").unwrap();
        assert!(
            v.iter()
                .all(|i| i.tx_attr.size == 100 && i.rx_attr.size == 200),
            "ep type {ep}: sizes {:?}",
            v.iter()
                .map(|i| (i.tx_attr.size, i.rx_attr.size))
                .collect::<Vec<_>>()
        );
    }
    std::env::set_var("FI_TCP_TX_SIZE", "0");
    let e = request(ep_type::FI_EP_RDM, "127.0.0.1").unwrap_err();
    assert_eq!(e.code(), errno::FI_EINVAL);
    assert!(e.to_string().contains("FI_TCP_TX_SIZE"), "{e}");
    std::env::remove_var("FI_TCP_TX_SIZE");
    std::env::remove_var("FI_TCP_RX_SIZE");

    // A half-set or inverted range is refused, naming the variables.
    std::env::set_var("FI_TCP_PORT_LOW_RANGE", "30000");
    let e = request(ep_type::FI_EP_RDM, "127.0.0.1").unwrap_err();
    assert_eq!(e.code(), errno::FI_EINVAL);
    assert!(e.to_string().contains("FI_TCP_PORT_HIGH_RANGE"), "{e}");
    std::env::set_var("FI_TCP_PORT_HIGH_RANGE", "29999");
    assert_eq!(
        request(ep_type::FI_EP_RDM, "127.0.0.1").unwrap_err().code(),
        errno::FI_EINVAL
    );
    std::env::set_var("FI_TCP_PORT_HIGH_RANGE", "70000");
    let e = request(ep_type::FI_EP_RDM, "127.0.0.1").unwrap_err();
    assert!(e.to_string().contains("FI_TCP_PORT_HIGH_RANGE"), "{e}");

    // A range of two ports: two RDM endpoints take them, a third finds
    // none; messages flow between the two.
    let base = free_pair();
    std::env::set_var("FI_TCP_PORT_LOW_RANGE", base.to_string());
    std::env::set_var("FI_TCP_PORT_HIGH_RANGE", (base + 1).to_string());
    let rdm = offer(ep_type::FI_EP_RDM, "127.0.0.1");
    let fabric = Fabric::open(&rdm.fabric_attr).unwrap();
    let domain = fabric.domain(&rdm).unwrap();
    let cq = domain.cq(&tagged_cq()).unwrap();
    let av = domain.av(&AvAttr::default()).unwrap();
    let open = || {
        let ep = domain.endpoint(&rdm)?;
        ep.bind_cq(&cq, FI_TRANSMIT | FI_RECV)?;
        ep.bind_av(&av)?;
        ep.enable()?;
        Ok::<_, ofi_core::error::Error>(ep)
    };
    let a = open().unwrap();
    let b = open().unwrap();
    let mut ports = [
        port_of(&a.getname().unwrap()),
        port_of(&b.getname().unwrap()),
    ];
    ports.sort_unstable();
    assert_eq!(ports, [base, base + 1]);
    let Err(e) = open() else {
        panic!("a third endpoint found a port outside the range of two");
    };
    assert_eq!(e.code(), errno::FI_EADDRINUSE, "{e}");
    assert!(
        e.to_string().contains(&format!("{base}-{}", base + 1)),
        "{e}"
    );
    let fb = av.insert_one(&b.getname().unwrap()).unwrap();
    let mut r = [0u8; 5];
    // SAFETY: r outlives the receive, which completes below.
    unsafe {
        b.recv(r.as_mut_ptr(), 5, FI_ADDR_UNSPEC, 1).unwrap();
        a.send(b"range".as_ptr(), 5, fb, 2).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    let mut ents = [CqTaggedEntry::default(); 4];
    while seen.len() < 2 {
        assert!(Instant::now() < deadline, "completions {seen:?}");
        if let Ok(n) = cq.read(&mut ents) {
            seen.extend(ents[..n].iter().map(|x| x.op_context));
        }
    }
    assert_eq!(&r, b"range");

    // A passive endpoint takes its port from the range too: none is left
    // until an endpoint closes.
    let msg = offer(ep_type::FI_EP_MSG, "127.0.0.1");
    let pep = fabric.passive_ep(&msg, 7).unwrap();
    let eq = fabric.eq(&Default::default()).unwrap();
    pep.bind_eq(&eq).unwrap();
    assert_eq!(pep.listen().unwrap_err().code(), errno::FI_EADDRINUSE);
    let freed = port_of(&a.getname().unwrap());
    drop(a);
    let pep = fabric.passive_ep(&msg, 8).unwrap();
    pep.bind_eq(&eq).unwrap();
    pep.listen().unwrap();
    assert_eq!(port_of(&pep.getname().unwrap()), freed);
}
