//! An active MSG endpoint acquires a passive endpoint's address
//! (`PassiveEndpoint::release`, what `fi_endpoint` does with a passive
//! endpoint in `info->handle`): the passive endpoint stops listening and
//! refuses further use; an endpoint opened with that address as its source
//! reports it before and after it connects.

mod common;

use ofi_core::consts::*;
use ofi_core::error::errno;
use ofi_core::object::*;
use ofi_core::util::cq::CqAttr;
use ofi_core::util::eq::{EqAttr, EqEvent};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

fn wait_eq(eq: &EventQueue, other: &EventQueue) -> EqEvent {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        match eq.read() {
            Ok(e) => return e,
            Err(e) if e.is_again() => {
                let _ = other.peek();
            }
            Err(e) => panic!("EQ error: {e} {:?}", eq.readerr()),
        }
    }
    panic!("no EQ event");
}

fn port(name: &[u8]) -> u16 {
    ofi_inet::addr::decode(name)
        .expect("a socket address")
        .port()
}

#[test]
fn an_endpoint_takes_a_listening_passive_endpoints_address() {
    let info = common::offer(ep_type::FI_EP_MSG, "127.0.0.1");
    let fabric = Fabric::open(&info.fabric_attr).unwrap();
    let eq_s = fabric.eq(&EqAttr::default()).unwrap();
    let eq_c = fabric.eq(&EqAttr::default()).unwrap();
    let server = fabric.passive_ep(&info, 1).unwrap();
    server.bind_eq(&eq_s).unwrap();
    server.listen().unwrap();
    let to = server.getname().unwrap();

    // The reserving side listens too: its port is taken until release.
    let reserve = fabric.passive_ep(&info, 2).unwrap();
    reserve.bind_eq(&eq_c).unwrap();
    reserve.listen().unwrap();
    let name = reserve.getname().unwrap();
    assert_ne!(port(&name), 0);
    assert_eq!(reserve.release().unwrap(), name);
    for r in [
        reserve.getname().map(|_| ()),
        reserve.listen(),
        reserve.setname(&name),
    ] {
        assert_eq!(r.unwrap_err().code(), errno::FI_EOPBADSTATE);
    }
    assert_eq!(
        reserve.release().unwrap_err().code(),
        errno::FI_EOPBADSTATE,
        "released once"
    );

    let mut ainfo = info.clone();
    ainfo.src_addr = Some(name.clone());
    let domain = fabric.domain(&ainfo).unwrap();
    let cq = domain.cq(&CqAttr::default()).unwrap();
    let ep = domain.endpoint_with_context(&ainfo, 5).unwrap();
    ep.bind_cq(&cq, FI_TRANSMIT | FI_RECV).unwrap();
    ep.bind_eq(&eq_c).unwrap();
    ep.enable().unwrap();
    assert_eq!(ep.getname().unwrap(), name, "before connect");
    // It binds the released port (the listener is gone) and connects.
    ep.connect(&to, b"").unwrap();
    let req = wait_eq(&eq_s, &eq_c);
    assert_eq!(req.event, eq_event::FI_CONNREQ);
    let sinfo = req.info.expect("CONNREQ carries an info");
    let from: SocketAddr = ofi_inet::addr::decode(sinfo.dest_addr.as_ref().unwrap()).unwrap();
    assert_eq!(
        from.port(),
        port(&name),
        "the server sees the reserved port"
    );
    let accepted = domain.endpoint_with_context(&sinfo, 6).unwrap();
    accepted.bind_cq(&cq, FI_TRANSMIT | FI_RECV).unwrap();
    accepted.bind_eq(&eq_s).unwrap();
    accepted.enable().unwrap();
    accepted.accept(b"").unwrap();
    assert_eq!(wait_eq(&eq_c, &eq_s).event, eq_event::FI_CONNECTED);
    assert_eq!(wait_eq(&eq_s, &eq_c).event, eq_event::FI_CONNECTED);
    assert_eq!(ep.getname().unwrap(), name, "after connect");
    assert_eq!(accepted.getname().unwrap(), to, "the accepting side");
}
