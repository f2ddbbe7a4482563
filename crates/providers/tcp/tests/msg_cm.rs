//! MSG endpoints over loopback: connect with private data, accept, reject,
//! messages both ways at eager and rendezvous sizes, shutdown.
#![allow(unsafe_code)]

mod common;

use ofi_core::consts::*;
use ofi_core::error::errno;
use ofi_core::object::*;
use ofi_core::util::cq::{CqAttr, CqTaggedEntry};
use ofi_core::util::eq::EqAttr;
use ofi_core::Info;
use std::time::{Duration, Instant};

fn info() -> Info {
    common::offer(ep_type::FI_EP_MSG, "127.0.0.1")
}

/// Waits for an event on `eq` while also driving `other` (manual progress:
/// both sides of a one-thread test need their calls).
fn wait_eq(eq: &EventQueue, other: &EventQueue) -> ofi_core::util::eq::EqEvent {
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

fn wait_cq(cq: &CompletionQueue, other: &CompletionQueue, ctx: usize) -> CqTaggedEntry {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut e = [CqTaggedEntry::default(); 1];
    while Instant::now() < deadline {
        match cq.read(&mut e) {
            Ok(_) if e[0].op_context == ctx => return e[0],
            Ok(_) => panic!("unexpected completion {:?}", e[0]),
            Err(er) if er.is_again() => other.core().driver().progress(),
            Err(er) => panic!("{er}: {:?}", cq.readerr()),
        }
    }
    panic!("no completion for context {ctx}");
}

#[test]
fn connect_accept_transfer_shutdown() {
    let info = info();
    let fabric = Fabric::open(&info.fabric_attr).unwrap();
    let eq_s = fabric.eq(&EqAttr::default()).unwrap();
    let eq_c = fabric.eq(&EqAttr::default()).unwrap();
    let pep = fabric.passive_ep(&info, 77).unwrap();
    pep.bind_eq(&eq_s).unwrap();
    pep.listen().unwrap();
    let addr = pep.getname().unwrap();

    let domain = fabric.domain(&info).unwrap();
    let cq_c = domain
        .cq(&CqAttr {
            format: cq_format::FI_CQ_FORMAT_TAGGED,
            ..Default::default()
        })
        .unwrap();
    let client = domain.endpoint_with_context(&info, 5).unwrap();
    client.bind_cq(&cq_c, FI_TRANSMIT | FI_RECV).unwrap();
    client.bind_eq(&eq_c).unwrap();
    client.enable().unwrap();
    client.connect(&addr, b"hello").unwrap();

    let req = wait_eq(&eq_s, &eq_c);
    assert_eq!(
        (req.event, req.fid, req.cm_data.as_slice()),
        (eq_event::FI_CONNREQ, 77, &b"hello"[..])
    );
    let sinfo = req.info.expect("CONNREQ carries an info");
    assert!(sinfo.handle.is_some());
    let cq_s = domain
        .cq(&CqAttr {
            format: cq_format::FI_CQ_FORMAT_TAGGED,
            ..Default::default()
        })
        .unwrap();
    let server = domain.endpoint_with_context(&sinfo, 6).unwrap();
    server.bind_cq(&cq_s, FI_TRANSMIT | FI_RECV).unwrap();
    server.bind_eq(&eq_s).unwrap();
    server.enable().unwrap();
    server.accept(b"welcome").unwrap();
    let c = wait_eq(&eq_c, &eq_s);
    assert_eq!(
        (c.event, c.fid, c.cm_data.as_slice()),
        (eq_event::FI_CONNECTED, 5, &b"welcome"[..])
    );
    let s = wait_eq(&eq_s, &eq_c);
    assert_eq!((s.event, s.fid), (eq_event::FI_CONNECTED, 6));
    assert_eq!(client.getpeer().unwrap(), server.getname().unwrap());

    for (i, size) in [0usize, 8, 4096, 100_000, 3 << 20].into_iter().enumerate() {
        let tx: Vec<u8> = (0..size).map(|k| (k * 7 + i) as u8).collect();
        let mut rx = vec![0u8; size];
        // SAFETY: rx and tx outlive both operations, which complete below.
        unsafe {
            server
                .recv(rx.as_mut_ptr(), rx.len(), FI_ADDR_UNSPEC, 100 + i)
                .unwrap();
            client.send(tx.as_ptr(), tx.len(), 0, 200 + i).unwrap();
        }
        let r = wait_cq(&cq_s, &cq_c, 100 + i);
        assert_eq!(r.len, size);
        wait_cq(&cq_c, &cq_s, 200 + i);
        assert!(rx == tx, "data of size {size}");
        // And back, unexpected this time (send first).
        let mut back = vec![0u8; size];
        // SAFETY: tx outlives the send, awaited below.
        unsafe {
            server.send(tx.as_ptr(), tx.len(), 0, 300 + i).unwrap();
        }
        std::thread::sleep(Duration::from_millis(5));
        // SAFETY: back outlives the receive, awaited below.
        unsafe {
            client
                .recv(back.as_mut_ptr(), back.len(), FI_ADDR_UNSPEC, 400 + i)
                .unwrap()
        };
        wait_cq(&cq_c, &cq_s, 400 + i);
        wait_cq(&cq_s, &cq_c, 300 + i);
        assert!(back == tx, "unexpected data of size {size}");
    }

    // A last message, delivery-complete, with no receive posted: the peer
    // buffers it and the send completes; then the client shuts down.
    let bye = *b"bye, server";
    let iov = [ofi_core::util::iov::IoVec::from_slice(&bye)];
    let op = SendOp {
        iov: &iov,
        desc: &[],
        dest: 0,
        tag: 0,
        data: 0,
        context: 500,
        flags: FI_COMPLETION | FI_DELIVERY_COMPLETE,
        tagged: false,
    };
    // SAFETY: bye outlives the send, which completes below.
    unsafe { client.post_send(&op) }.unwrap();
    wait_cq(&cq_c, &cq_s, 500);
    client.shutdown(0).unwrap();
    let s = wait_eq(&eq_s, &eq_c);
    assert_eq!((s.event, s.fid), (eq_event::FI_SHUTDOWN, 6));
    // The side that shut down reports its end too, once (it reported
    // nothing, so a waiter for FI_SHUTDOWN after fi_shutdown hung).
    let own = wait_eq(&eq_c, &eq_s);
    assert_eq!((own.event, own.fid), (eq_event::FI_SHUTDOWN, 5));
    assert!(eq_c.read().unwrap_err().is_again(), "one FI_SHUTDOWN");
    // It stays deliverable after the shutdown (it was dropped, and the
    // receive waited for ever); a receive past it fails at once.
    let mut last = [0u8; 16];
    let mut more = [0u8; 16];
    // SAFETY: last and more outlive the receives, which complete below.
    unsafe {
        server
            .recv(last.as_mut_ptr(), last.len(), FI_ADDR_UNSPEC, 501)
            .unwrap();
        server
            .recv(more.as_mut_ptr(), more.len(), FI_ADDR_UNSPEC, 502)
            .unwrap();
    }
    let r = wait_cq(&cq_s, &cq_c, 501);
    assert_eq!((r.len, &last[..bye.len()]), (bye.len(), &bye[..]));
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut e = [CqTaggedEntry::default(); 1];
    loop {
        assert!(
            Instant::now() < deadline,
            "the receive past the end waits for ever"
        );
        match cq_s.read(&mut e) {
            Err(er) if er.code() == errno::FI_EAVAIL => {
                let err = cq_s.readerr().unwrap();
                assert_eq!((err.op_context, err.err), (502, errno::FI_ECONNRESET));
                break;
            }
            Err(er) if er.is_again() => {}
            other => panic!("{other:?} {:?}", e[0]),
        }
    }
}

#[test]
fn reject_reaches_the_connector_with_private_data() {
    let info = info();
    let fabric = Fabric::open(&info.fabric_attr).unwrap();
    let eq_s = fabric.eq(&EqAttr::default()).unwrap();
    let eq_c = fabric.eq(&EqAttr::default()).unwrap();
    let pep = fabric.passive_ep(&info, 1).unwrap();
    pep.bind_eq(&eq_s).unwrap();
    pep.listen().unwrap();
    let domain = fabric.domain(&info).unwrap();
    let cq = domain.cq(&CqAttr::default()).unwrap();
    let client = domain.endpoint(&info).unwrap();
    client.bind_cq(&cq, FI_TRANSMIT | FI_RECV).unwrap();
    client.bind_eq(&eq_c).unwrap();
    client.enable().unwrap();
    client
        .connect(&pep.getname().unwrap(), b"let me in")
        .unwrap();
    let req = wait_eq(&eq_s, &eq_c);
    pep.reject(
        req.info.as_ref().unwrap().handle.as_ref().unwrap(),
        b"go away",
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let err = loop {
        match eq_c.read() {
            Err(e) if e.code() == errno::FI_EAVAIL => break eq_c.readerr().unwrap(),
            Err(e) if e.is_again() && Instant::now() < deadline => {
                let _ = eq_s.peek();
                continue;
            }
            other => panic!("expected an error entry, got {other:?}"),
        }
    };
    assert_eq!(err.err, errno::FI_ECONNREFUSED);
    assert_eq!(err.err_data, b"go away");
}

#[test]
fn connecting_to_a_closed_port_is_refused() {
    let info = info();
    let fabric = Fabric::open(&info.fabric_attr).unwrap();
    let eq = fabric.eq(&EqAttr::default()).unwrap();
    let domain = fabric.domain(&info).unwrap();
    let cq = domain.cq(&CqAttr::default()).unwrap();
    let ep = domain.endpoint(&info).unwrap();
    ep.bind_cq(&cq, FI_TRANSMIT | FI_RECV).unwrap();
    ep.bind_eq(&eq).unwrap();
    ep.enable().unwrap();
    // A port nobody listens on: bind one, note it, close it.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    drop(l);
    let mut a = vec![2u8, 0];
    a.extend_from_slice(&port.to_be_bytes());
    a.extend_from_slice(&[127, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0]);
    ep.connect(&a, &[]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let err = loop {
        match eq.read() {
            Err(e) if e.code() == errno::FI_EAVAIL => break eq.readerr().unwrap(),
            Err(e) if e.is_again() && Instant::now() < deadline => continue,
            other => panic!("expected an error entry, got {other:?}"),
        }
    };
    assert_eq!(err.err, errno::FI_ECONNREFUSED);
}

/// Both ends send with FI_TRANSMIT_COMPLETE at once, each driven by its
/// own thread and domain, as fi_pingpong's finalize does. A pass that reads
/// the peer's message queues an acknowledgement and drives the connection
/// again; the peer's acknowledgement of our own send, read in that second
/// pass, must complete the send then, not in a later progress call that no
/// socket readiness would ever trigger (it hung here).
#[test]
fn transmit_complete_sends_crossing_both_complete() {
    let info = info();
    let fabric = Fabric::open(&info.fabric_attr).unwrap();
    let eq_s = fabric.eq(&EqAttr::default()).unwrap();
    let eq_c = fabric.eq(&EqAttr::default()).unwrap();
    let pep = fabric.passive_ep(&info, 1).unwrap();
    pep.bind_eq(&eq_s).unwrap();
    pep.listen().unwrap();
    let attr = CqAttr {
        format: cq_format::FI_CQ_FORMAT_TAGGED,
        ..Default::default()
    };
    let dom_c = fabric.domain(&info).unwrap();
    let cq_c = dom_c.cq(&attr).unwrap();
    let client = dom_c.endpoint(&info).unwrap();
    client.bind_cq(&cq_c, FI_TRANSMIT | FI_RECV).unwrap();
    client.bind_eq(&eq_c).unwrap();
    client.enable().unwrap();
    client.connect(&pep.getname().unwrap(), &[]).unwrap();
    let req = wait_eq(&eq_s, &eq_c);
    let sinfo = req.info.expect("CONNREQ carries an info");
    let dom_s = fabric.domain(&sinfo).unwrap();
    let cq_s = dom_s.cq(&attr).unwrap();
    let server = dom_s.endpoint(&sinfo).unwrap();
    server.bind_cq(&cq_s, FI_TRANSMIT | FI_RECV).unwrap();
    server.bind_eq(&eq_s).unwrap();
    server.enable().unwrap();
    server.accept(&[]).unwrap();
    assert_eq!(wait_eq(&eq_c, &eq_s).event, eq_event::FI_CONNECTED);
    assert_eq!(wait_eq(&eq_s, &eq_c).event, eq_event::FI_CONNECTED);

    const ROUNDS: usize = 300;
    // One side's rounds: post a receive, send 4 bytes with
    // FI_TRANSMIT_COMPLETE, wait (driving only its own domain) for both.
    fn side(ep: &Endpoint, cq: &CompletionQueue, me: u8) -> Result<(), String> {
        let tx = [me; 4];
        let mut rx = [0u8; 4];
        for round in 0..ROUNDS {
            let iov = [ofi_core::util::iov::IoVec {
                base: tx.as_ptr() as usize,
                len: tx.len(),
            }];
            // SAFETY: tx and rx outlive both operations, which complete
            // before the next round (or the test fails).
            unsafe {
                ep.recv(rx.as_mut_ptr(), rx.len(), FI_ADDR_UNSPEC, 1)
                    .map_err(|e| e.to_string())?;
                ep.post_send(&SendOp {
                    iov: &iov,
                    desc: &[],
                    dest: 0,
                    tag: 0,
                    data: 0,
                    context: 2,
                    flags: FI_TRANSMIT_COMPLETE,
                    tagged: false,
                })
                .map_err(|e| e.to_string())?;
            }
            let deadline = Instant::now() + Duration::from_secs(10);
            let mut seen = [false; 2];
            let mut e = [CqTaggedEntry::default(); 1];
            while seen != [true; 2] {
                if Instant::now() > deadline {
                    return Err(format!(
                        "side {me} round {round}: completions seen (recv, send) {seen:?}"
                    ));
                }
                match cq.read(&mut e) {
                    Ok(_) => seen[e[0].op_context - 1] = true,
                    Err(er) if er.is_again() => {}
                    Err(er) => return Err(format!("{er}: {:?}", cq.readerr())),
                }
            }
            if rx != [me ^ 1; 4] {
                return Err(format!("side {me} round {round}: received {rx:?}"));
            }
        }
        Ok(())
    }
    let t = std::thread::spawn(move || side(&server, &cq_s, 1));
    let c = side(&client, &cq_c, 0);
    let s = t.join().unwrap();
    c.unwrap();
    s.unwrap();
}

/// A loopback address with a port free right now.
fn free_loopback() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
}

fn sockaddr_in(a: std::net::SocketAddr) -> Vec<u8> {
    let mut b = vec![0u8; 16];
    b[0..2].copy_from_slice(&2u16.to_ne_bytes());
    b[2..4].copy_from_slice(&a.port().to_be_bytes());
    b[4..8].copy_from_slice(&[127, 0, 0, 1]);
    b
}

#[test]
fn setname_names_passive_and_active_endpoints_before_listen_and_enable() {
    let info = info();
    let fabric = Fabric::open(&info.fabric_attr).unwrap();
    let eq_s = fabric.eq(&EqAttr::default()).unwrap();
    let eq_c = fabric.eq(&EqAttr::default()).unwrap();
    let pep = fabric.passive_ep(&info, 1).unwrap();
    // FI_OPT_CM_DATA_SIZE on the passive endpoint: the connect limit.
    let limit = pep.getopt(opt::FI_OPT_CM_DATA_SIZE).unwrap();
    assert!(limit >= 1);
    let at = sockaddr_in(free_loopback());
    assert_eq!(pep.setname(&at[..3]).unwrap_err().code(), errno::FI_EINVAL);
    pep.setname(&at).unwrap();
    assert_eq!(pep.getname().unwrap(), at);
    pep.bind_eq(&eq_s).unwrap();
    pep.listen().unwrap();
    assert_eq!(pep.getname().unwrap(), at, "listening where setname said");
    let e = pep.setname(&sockaddr_in(free_loopback())).unwrap_err();
    assert_eq!(e.code(), errno::FI_EOPBADSTATE);

    let domain = fabric.domain(&info).unwrap();
    let cq = domain.cq(&CqAttr::default()).unwrap();
    let client = domain.endpoint(&info).unwrap();
    let from = sockaddr_in(free_loopback());
    let mut v6 = vec![0u8; 28];
    v6[0..2].copy_from_slice(&10u16.to_ne_bytes());
    assert_eq!(client.setname(&v6).unwrap_err().code(), errno::FI_EINVAL);
    client.setname(&from).unwrap();
    assert_eq!(client.getname().unwrap(), from);
    client.bind_cq(&cq, FI_TRANSMIT | FI_RECV).unwrap();
    client.bind_eq(&eq_c).unwrap();
    client.enable().unwrap();
    assert_eq!(
        client.setname(&from).unwrap_err().code(),
        errno::FI_EOPBADSTATE
    );
    let too_long = vec![7u8; limit + 1];
    assert!(client.connect(&at, &too_long).is_err());
    client.connect(&at, &vec![7u8; limit]).unwrap();
    let req = wait_eq(&eq_s, &eq_c);
    assert_eq!(req.cm_data, vec![7u8; limit]);
    let ri = req.info.as_ref().unwrap();
    assert_eq!(
        ri.dest_addr.as_deref(),
        Some(&from[..]),
        "the request comes from the name set"
    );
    pep.reject(ri.handle.as_ref().unwrap(), b"").unwrap();
}
