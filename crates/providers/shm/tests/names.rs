//! shm addressing as fi_shm(7) describes it (issue 16 items 1 and 2):
//! getinfo derives `fi_ns://node:service` / `fi_shm://node` from node and
//! service (the source under FI_SOURCE, else the destination) and fills a
//! source address on every offer; an endpoint opened with such a source
//! address holds that name, and a peer that inserts the name (the client's
//! `dest_addr`) reaches it — the flow of clients that exchange no address
//! out of band. Names held by live endpoints are refused to others.
//! `fi_setname` on a disabled endpoint names it the same way (issue 16
//! item 8).
#![allow(unsafe_code)]

mod common;

use common::ofi::getinfo;
use common::rdm::*;
use ofi_core::consts::*;
use ofi_core::error::errno;
use ofi_core::Info;
use std::time::{Duration, Instant};

const STEP: Duration = Duration::from_secs(20);

fn hints() -> Info {
    let mut h = Info::hints();
    h.caps = FI_TAGGED;
    h.ep_attr.ep_type = ep_type::FI_EP_RDM;
    h.fabric_attr.prov_name = Some("shm".into());
    h
}

/// The first shm offer for node / service / flags.
fn offer(node: Option<&str>, service: Option<&str>, flags: u64) -> Info {
    getinfo(FI_VERSION_CURRENT, node, service, flags, Some(&hints()))
        .unwrap_or_else(|e| panic!("getinfo {node:?} {service:?} {flags:#x}: {e}"))
        .remove(0)
}

fn text(a: &Option<Vec<u8>>) -> Option<String> {
    a.as_ref().map(|b| {
        assert_eq!(b.last(), Some(&0), "{b:?} is not NUL-terminated");
        String::from_utf8(b[..b.len() - 1].to_vec()).unwrap()
    })
}

#[test]
fn every_offer_has_a_source_address_derived_as_fi_shm_says() {
    let me = format!("fi_shm://{}", std::process::id());
    let both = |node, service, flags| {
        let o = offer(node, service, flags);
        (text(&o.src_addr), text(&o.dest_addr))
    };
    assert_eq!(both(None, None, 0), (Some(me.clone()), Some(me.clone())));
    assert_eq!(both(None, None, FI_SOURCE), (Some(me.clone()), None));
    let ns = Some("fi_ns://127.0.0.1:9228".to_string());
    assert_eq!(
        both(Some("127.0.0.1"), Some("9228"), FI_SOURCE),
        (ns.clone(), None)
    );
    assert_eq!(
        both(Some("127.0.0.1"), Some("9228"), 0),
        (Some(me.clone()), ns)
    );
    assert_eq!(
        both(Some("127.0.0.1"), None, FI_SOURCE),
        (Some("fi_shm://127.0.0.1".into()), None)
    );
    assert_eq!(
        both(None, Some("77"), 0),
        (Some(me.clone()), Some("fi_ns://77".into()))
    );
    assert_eq!(
        both(Some("fi_shm://box"), None, 0),
        (Some(me.clone()), Some("fi_shm://box".into()))
    );
    // Without hints too.
    for o in getinfo(FI_VERSION_CURRENT, None, None, 0, None).unwrap() {
        if o.fabric_attr.prov_name.as_deref() == Some("shm") {
            assert_eq!(text(&o.src_addr), Some(me.clone()));
        }
    }
}

/// Posts a receive of up to 64 bytes on `r` and waits for it, progressing
/// `other` too; the bytes.
fn recv_one(r: &Rdm, other: &Rdm, tag: u64) -> Vec<u8> {
    let mut buf = [0u8; 64];
    // SAFETY: buf outlives the receive, awaited below.
    unsafe {
        r.ep.trecv(buf.as_mut_ptr(), 64, FI_ADDR_UNSPEC, tag, 0, 0x10)
    }
    .unwrap();
    let deadline = Instant::now() + STEP;
    let mut got = Vec::new();
    loop {
        if let Some(i) = got.iter().position(|d: &Done| d.ctx() == 0x10) {
            let e = ok(got.remove(i), "receive");
            return buf[..e.len].to_vec();
        }
        assert!(Instant::now() < deadline, "nothing arrived");
        poll(&r.cq, &mut got);
        other.ep.progress();
    }
}

/// Sends `msg` from `r` to `to` (injected, retried while FI_EAGAIN).
fn send(r: &Rdm, other: &Rdm, to: u64, msg: &[u8], tag: u64) {
    let deadline = Instant::now() + STEP;
    loop {
        match r.ep.tinject(msg, to, tag) {
            Err(e) if e.is_again() => {
                assert!(Instant::now() < deadline, "FI_EAGAIN for {STEP:?}");
                r.ep.progress();
                other.ep.progress();
            }
            r => return r.unwrap(),
        }
    }
}

#[test]
fn a_server_named_by_node_and_service_is_reached_by_its_dest_addr() {
    let service = format!("{}", 40_000 + std::process::id() % 20_000);
    // The server: named from its source address.
    let si = offer(Some("127.0.0.1"), Some(&service), FI_SOURCE);
    let server = Rdm::open(&si, 1);
    assert_eq!(server.ep.getname().unwrap(), si.src_addr.clone().unwrap());
    // The client: the server's address is its offer's destination.
    let ci = offer(Some("127.0.0.1"), Some(&service), 0);
    let client = Rdm::open(&ci, 2);
    let to_server = client
        .av
        .insert_one(ci.dest_addr.as_ref().unwrap())
        .unwrap();
    // It sends its own name first; the server answers to it.
    let name = client.ep.getname().unwrap();
    send(&client, &server, to_server, &name, 1);
    let got = recv_one(&server, &client, 1);
    assert_eq!(got, name);
    let to_client = server.av.insert_one(&got).unwrap();
    send(&server, &client, to_client, b"pong", 2);
    assert_eq!(recv_one(&client, &server, 2), b"pong");

    // A second endpoint cannot take the name while the server holds it...
    let e = match server.domain.endpoint_with_context(&si, 3) {
        Ok(_) => panic!("a second endpoint took the server's name"),
        Err(e) => e,
    };
    assert_eq!(e.code(), errno::FI_EADDRINUSE, "{e}");
    // ...and the name is free again once the server closed.
    drop(server);
    let again = Rdm::open(&si, 4);
    assert_eq!(again.ep.getname().unwrap(), si.src_addr.clone().unwrap());
    let fresh = Rdm::open(&ci, 5);
    let to_again = fresh.av.insert_one(ci.dest_addr.as_ref().unwrap()).unwrap();
    send(&fresh, &again, to_again, b"again", 3);
    assert_eq!(recv_one(&again, &fresh, 3), b"again");
}

#[test]
fn fi_shm_node_names_are_not_unique_and_bad_names_are_refused() {
    let node = format!("box-{}", std::process::id());
    // A node that is no host name needs FI_ADDR_STR in the hints (else
    // getinfo takes it for a host that does not resolve).
    let mut h = hints();
    h.addr_format = addr_format::FI_ADDR_STR;
    let si = getinfo(FI_VERSION_CURRENT, Some(&node), None, FI_SOURCE, Some(&h))
        .unwrap()
        .remove(0);
    assert_eq!(text(&si.src_addr), Some(format!("fi_shm://{node}")));
    let first = Rdm::open(&si, 1);
    assert_eq!(first.ep.getname().unwrap(), si.src_addr.clone().unwrap());
    // fi_shm://node is not unique: a second endpoint opens, unnamed.
    let second = Rdm::open(&si, 2);
    let n2 = text(&Some(second.ep.getname().unwrap())).unwrap();
    assert!(
        n2.starts_with(&format!("fi_shm://{}.", std::process::id())),
        "{n2}"
    );
    // A plain name and the fi_shm:// form reach the holder.
    let c = Rdm::open(&offer(None, None, 0), 3);
    for a in [format!("fi_shm://{node}"), node.clone()] {
        let mut b = a.into_bytes();
        b.push(0);
        let to = c.av.insert_one(&b).unwrap();
        send(&c, &first, to, b"hi", 4);
        assert_eq!(recv_one(&first, &c, 4), b"hi");
    }
    // Names nobody holds, and malformed ones, are refused.
    for bad in [
        &b"fi_ns://nobody-holds-this:1\0"[..],
        b"fi_ns://\0",
        b"\0",
        b"\xff\xfe\0",
    ] {
        let e = c.av.insert_one(bad).unwrap_err();
        assert_eq!(e.code(), errno::FI_EINVAL, "{bad:?}: {e}");
    }
}

/// `s` as address bytes (NUL-terminated).
fn nul(s: &str) -> Vec<u8> {
    let mut b = s.as_bytes().to_vec();
    b.push(0);
    b
}

#[test]
fn setname_names_a_disabled_endpoint_and_peers_reach_it_there() {
    let pid = std::process::id();
    let name = nul(&format!("fi_ns://setname-{pid}:1"));
    let first = nul(&format!("fi_ns://setname-{pid}:0"));
    let info = offer(None, None, 0);
    let server = Rdm::open_with(&info, 1, |ep| {
        let native = ep.getname().unwrap();
        // Malformed addresses are refused and leave the name as it was.
        for bad in [&b"\xff\xfe\0"[..], b"fi_ns://\0", b"\0"] {
            let e = ep.setname(bad).unwrap_err();
            assert_eq!(e.code(), errno::FI_EINVAL, "{bad:?}: {e}");
        }
        assert_eq!(ep.getname().unwrap(), native);
        // A rename releases the name held before; the same name twice is
        // no conflict with itself.
        ep.setname(&first).unwrap();
        assert_eq!(ep.getname().unwrap(), first);
        ep.setname(&name).unwrap();
        ep.setname(&name).unwrap();
        assert_eq!(ep.getname().unwrap(), name);
    });
    assert_eq!(server.ep.getname().unwrap(), name);
    // Enabled: no more renaming.
    let e = server.ep.setname(&first).unwrap_err();
    assert_eq!(e.code(), errno::FI_EOPBADSTATE, "{e}");
    assert_eq!(server.ep.getname().unwrap(), name);
    // Another endpoint cannot take the name the server holds.
    let other = server.domain.endpoint_with_context(&info, 2).unwrap();
    let e = other.setname(&name).unwrap_err();
    assert_eq!(e.code(), errno::FI_EADDRINUSE, "{e}");
    assert_ne!(other.getname().unwrap(), name);
    drop(other);

    // A peer that knows only the name reaches the server.
    let client = Rdm::open(&info, 3);
    let e = client.av.insert_one(&first).unwrap_err();
    assert_eq!(
        e.code(),
        errno::FI_EINVAL,
        "the old name still resolves: {e}"
    );
    let to = client.av.insert_one(&name).unwrap();
    send(&client, &server, to, b"named by setname", 5);
    assert_eq!(recv_one(&server, &client, 5), b"named by setname");
}
