//! Auth keys on tcp endpoints over loopback: endpoints whose keys differ
//! (or where only one has a key) cannot exchange a byte and the sender
//! gets FI_EKEYREJECTED; equal keys (from getinfo's hints, from the domain,
//! or from the endpoint's own `ep_attr.auth_key`) work; a raw socket from
//! the same host that claims another endpoint's address without the key
//! (no nonce, or a made-up proof) is refused with REJECT and closed, and
//! nothing it sends arrives; MSG connects with different keys fail with an
//! FI_EKEYREJECTED EQ error.
#![allow(unsafe_code)]

mod common;

use common::*;
use ofi_core::consts::*;
use ofi_core::error::errno;
use ofi_core::object::*;
use ofi_core::util::cq::CqAttr;
use ofi_core::util::eq::EqAttr;
use ofi_core::Info;
use ofi_wire::tcp::{op, reject, Header, Repr, CHALLENGE_LEN, HDR_LEN, NONCE_LEN, PROOF_LEN};
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Bound for one operation or refusal.
const BOUND: Duration = Duration::from_secs(10);

/// The tcp RDM offer on loopback with `key` as the domain's auth key,
/// asked for through getinfo's hints.
fn keyed(ep_type: u32, key: Option<&[u8]>) -> Info {
    ofi_prov_tcp::register().expect("registering tcp");
    let mut h = Info::hints();
    h.caps = FI_MSG;
    h.ep_attr.ep_type = ep_type;
    h.fabric_attr.prov_name = Some("tcp".into());
    h.addr_format = addr_format::FI_SOCKADDR_IN;
    h.domain_attr.auth_key = key.map(<[u8]>::to_vec);
    let v = ofi_core::getinfo(
        FI_VERSION_CURRENT,
        Some("127.0.0.1"),
        Some("0"),
        FI_SOURCE,
        Some(&h),
    )
    .expect("getinfo");
    let o = v.into_iter().next().expect("an offer");
    assert_eq!(
        o.domain_attr.auth_key.as_deref(),
        key,
        "the offer carries the hints' auth key"
    );
    o
}

/// Sends 64 bytes from `a` to `b` (a receive posted on `b`): the outcome
/// of the send, and whether `b` received anything while both were driven
/// for a while after.
fn try_send(a: &Rdm, b: &Rdm) -> (Done, bool) {
    let to_b = fi_addr(a, b);
    let _ = fi_addr(b, a);
    let m = pattern(3, 64);
    let mut r = vec![0u8; 64];
    // SAFETY: m and r outlive both endpoints' use of them: the receive is
    // cancelled (or completed) below before r is dropped.
    unsafe {
        b.ep.recv(r.as_mut_ptr(), 64, FI_ADDR_UNSPEC, 0x2)
            .expect("recv");
        a.ep.send(m.as_ptr(), 64, to_b, 0x1).expect("send");
    }
    let mut st = Vec::new();
    let d = wait_ctx(&a.cq, &mut st, 0x1, BOUND, &[&b.ep], "send");
    let mut got = Vec::new();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(300) {
        poll(&b.cq, &mut got);
        a.ep.progress();
    }
    let received = got
        .iter()
        .any(|d| matches!(d, Done::Ok(e) if e.op_context == 0x2));
    if !received {
        b.ep.cancel(0x2).expect("cancel the receive");
        let mut st = Vec::new();
        let _ = wait_ctx(&b.cq, &mut st, 0x2, BOUND, &[], "cancel");
    } else {
        assert_eq!(r, m, "data");
    }
    (d, received)
}

/// `b`'s fi_addr in `a`'s AV, inserted once.
fn fi_addr(a: &Rdm, b: &Rdm) -> u64 {
    let name = b.ep.getname().unwrap();
    match a.av.core().reverse(&name) {
        Some(x) => x,
        None => a.av.insert_one(&name).expect("insert"),
    }
}

fn rejected(d: Done, what: &str) {
    match d {
        Done::Err(e) => assert_eq!(
            e.err,
            errno::FI_EKEYREJECTED,
            "{what}: error {} ({})",
            e.err,
            errno_name(e.err)
        ),
        Done::Ok(_) => panic!("{what}: the send succeeded"),
    }
}

#[test]
fn endpoints_with_different_keys_cannot_exchange_a_byte() {
    let a = Rdm::open(&keyed(ep_type::FI_EP_RDM, Some(b"job-a")));
    let b = Rdm::open(&keyed(ep_type::FI_EP_RDM, Some(b"job-b")));
    let none = Rdm::open(&keyed(ep_type::FI_EP_RDM, None));
    for (x, y, what) in [
        (&a, &b, "key a to key b"),
        (&b, &a, "key b to key a"),
        (&a, &none, "key a to no key"),
        (&none, &b, "no key to key b"),
    ] {
        let (d, received) = try_send(x, y);
        rejected(d, what);
        assert!(!received, "{what}: the receiver got the message");
    }
}

#[test]
fn equal_keys_exchange_data_from_domain_or_endpoint_attributes() {
    let a = Rdm::open(&keyed(ep_type::FI_EP_RDM, Some(b"job-a")));
    let b = Rdm::open(&keyed(ep_type::FI_EP_RDM, Some(b"job-a")));
    for (x, y) in [(&a, &b), (&b, &a)] {
        let (d, received) = try_send(x, y);
        ok(d, "equal domain keys");
        assert!(received, "equal domain keys: nothing received");
    }
    // The endpoint's key wins over its domain's.
    let mut info = keyed(ep_type::FI_EP_RDM, Some(b"job-x"));
    info.ep_attr.auth_key = Some(b"job-a".to_vec());
    let c = Rdm::open(&info);
    let (d, received) = try_send(&c, &a);
    ok(d, "endpoint key equal to the peer's domain key");
    assert!(received);
    let d2 = Rdm::open(&keyed(ep_type::FI_EP_RDM, Some(b"job-x")));
    let (d, received) = try_send(&c, &d2);
    rejected(d, "endpoint key against its own domain's key");
    assert!(!received);
}

// ------------------------------------------------------------- forged HELLO

/// A raw socket speaking the wire format.
struct Raw(TcpStream);

impl Raw {
    fn connect(to: std::net::SocketAddr) -> Raw {
        let s = TcpStream::connect(to).expect("connect");
        s.set_nonblocking(true).expect("nonblocking");
        Raw(s)
    }
    fn send(&mut self, b: &[u8]) {
        self.0.set_nonblocking(false).expect("blocking");
        let _ = self.0.write_all(b);
        self.0.set_nonblocking(true).expect("nonblocking");
    }
    /// Reads what is there; true once the peer closed.
    fn read(&mut self, got: &mut Vec<u8>) -> bool {
        let mut b = [0u8; 4096];
        loop {
            match self.0.read(&mut b) {
                Ok(0) => return true,
                Ok(n) => got.extend_from_slice(&b[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => return false,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return true,
            }
        }
    }
}

fn frame(r: Repr, payload: &[u8]) -> Vec<u8> {
    let mut b = r.to_bytes().to_vec();
    b.extend_from_slice(payload);
    b
}

fn frames(mut b: &[u8]) -> Vec<Repr> {
    let mut v = Vec::new();
    while b.len() >= HDR_LEN {
        let r = Repr::parse(&Header::new_unchecked(b), 1 << 20).expect("the victim's frame");
        if b.len() < HDR_LEN + r.len as usize {
            break;
        }
        b = &b[HDR_LEN + r.len as usize..];
        v.push(r);
    }
    v
}

/// Drives `victim` until the raw socket has `n` frames or is closed; the
/// frames and whether it was closed.
fn answer(victim: &Rdm, raw: &mut Raw, n: usize, got: &mut Vec<u8>) -> (Vec<Repr>, bool) {
    let t0 = Instant::now();
    loop {
        victim.ep.progress();
        let closed = raw.read(got);
        let f = frames(got);
        if f.len() >= n || closed || t0.elapsed() > BOUND {
            return (f, closed);
        }
    }
}

#[test]
fn a_forged_hello_claiming_another_endpoint_is_refused() {
    let key = b"job-secret".as_slice();
    let victim = Rdm::open(&keyed(ep_type::FI_EP_RDM, Some(key)));
    let good = Rdm::open(&keyed(ep_type::FI_EP_RDM, Some(key)));
    let (d, received) = try_send(&good, &victim);
    ok(d, "the good peer's first message");
    assert!(received);
    let good_name = good.ep.getname().unwrap();
    let mut buf = vec![0u8; 64];
    // SAFETY: buf outlives the victim's use of it (checked and cancelled
    // before the end of the test).
    unsafe { victim.ep.recv(buf.as_mut_ptr(), 64, FI_ADDR_UNSPEC, 0x77) }.expect("recv");
    let hello = |nonce: bool| {
        let mut p = good_name.clone();
        if nonce {
            p.extend_from_slice(&[9; NONCE_LEN]);
        }
        frame(
            Repr {
                op: op::HELLO,
                len: p.len() as u64,
                data: good_name.len() as u64,
                id: if nonce { NONCE_LEN as u64 } else { 0 },
                ..Default::default()
            },
            &p,
        )
    };
    let msg = frame(
        Repr {
            op: op::MSG,
            len: 5,
            id: 5,
            ..Default::default()
        },
        b"forge",
    );
    // 1. A HELLO without a nonce (no key): REJECT(AUTH), closed.
    let mut raw = Raw::connect(victim.sockaddr());
    raw.send(&hello(false));
    let mut got = Vec::new();
    let (f, _) = answer(&victim, &mut raw, 1, &mut got);
    assert_eq!(
        f.first().map(|r| (r.op, r.data)),
        Some((op::REJECT, reject::AUTH)),
        "answer to a key-less HELLO: {f:?}"
    );
    raw.send(&msg);
    let (_, closed) = answer(&victim, &mut raw, 2, &mut got);
    assert!(
        closed,
        "the victim kept a connection that failed authentication"
    );
    // 2. With a nonce: a CHALLENGE, then a made-up proof: REJECT(AUTH).
    let mut raw = Raw::connect(victim.sockaddr());
    raw.send(&hello(true));
    let mut got = Vec::new();
    let (f, _) = answer(&victim, &mut raw, 1, &mut got);
    assert_eq!(
        f.first().map(|r| (r.op, r.len)),
        Some((op::CHALLENGE, CHALLENGE_LEN as u64))
    );
    let proof = frame(
        Repr {
            op: op::PROOF,
            len: PROOF_LEN as u64,
            ..Default::default()
        },
        &[0x5a; PROOF_LEN],
    );
    let mut both = proof.clone();
    both.extend_from_slice(&msg);
    raw.send(&both);
    let (f, closed) = answer(&victim, &mut raw, 2, &mut got);
    assert_eq!(
        f.get(1).map(|r| (r.op, r.data)),
        Some((op::REJECT, reject::AUTH)),
        "answer to a wrong proof: {f:?}"
    );
    let closed = closed || answer(&victim, &mut raw, 3, &mut got).1;
    assert!(
        closed,
        "the victim kept a connection that failed authentication"
    );
    // Nothing the impostor sent arrived; the good peer still gets through.
    let mut st = Vec::new();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(200) {
        poll(&victim.cq, &mut st);
    }
    assert!(
        st.is_empty(),
        "the victim completed something for the impostor: {st:?}"
    );
    let to_victim = fi_addr(&good, &victim);
    let m = pattern(11, 64);
    // SAFETY: m outlives the send, awaited below.
    unsafe { good.ep.send(m.as_ptr(), 64, to_victim, 0x9) }.expect("send");
    let mut gs = Vec::new();
    ok(
        wait_ctx(&good.cq, &mut gs, 0x9, BOUND, &[&victim.ep], "good send"),
        "good send",
    );
    let e = ok(
        wait_ctx(&victim.cq, &mut st, 0x77, BOUND, &[&good.ep], "victim recv"),
        "recv",
    );
    assert_eq!(e.len, 64);
    assert_eq!(buf, m, "the victim's receive holds the good peer's message");
}

// ------------------------------------------------------------- MSG

fn msg_connect(server_key: Option<&[u8]>, client_key: Option<&[u8]>) -> Result<(), i32> {
    let sinfo = keyed(ep_type::FI_EP_MSG, server_key);
    let fabric = Fabric::open(&sinfo.fabric_attr).unwrap();
    let eq_s = fabric.eq(&EqAttr::default()).unwrap();
    let pep = fabric.passive_ep(&sinfo, 1).unwrap();
    pep.bind_eq(&eq_s).unwrap();
    pep.listen().unwrap();
    let addr = pep.getname().unwrap();
    let cinfo = keyed(ep_type::FI_EP_MSG, client_key);
    let cfab = Fabric::open(&cinfo.fabric_attr).unwrap();
    let dom = cfab.domain(&cinfo).unwrap();
    let cq = dom.cq(&CqAttr::default()).unwrap();
    let eq_c = cfab.eq(&EqAttr::default()).unwrap();
    let ep = dom.endpoint(&cinfo).unwrap();
    ep.bind_cq(&cq, FI_TRANSMIT | FI_RECV).unwrap();
    ep.bind_eq(&eq_c).unwrap();
    ep.enable().unwrap();
    ep.connect(&addr, b"hi").unwrap();
    let t0 = Instant::now();
    let mut server_ep = None;
    let mut sdom = None;
    while t0.elapsed() < BOUND {
        match eq_s.read() {
            Ok(ev) if ev.event == eq_event::FI_CONNREQ => {
                let i = ev.info.expect("info");
                let d = fabric.domain(&i).unwrap();
                let scq = d.cq(&CqAttr::default()).unwrap();
                let e = d.endpoint(&i).unwrap();
                e.bind_cq(&scq, FI_TRANSMIT | FI_RECV).unwrap();
                e.bind_eq(&eq_s).unwrap();
                e.enable().unwrap();
                e.accept(&[]).unwrap();
                server_ep = Some((e, scq));
                sdom = Some(d);
            }
            _ => {}
        }
        match eq_c.read() {
            Ok(ev) if ev.event == eq_event::FI_CONNECTED => {
                drop(server_ep);
                drop(sdom);
                return Ok(());
            }
            Ok(ev) => panic!("client event {}", ev.event),
            Err(e) if e.code() == errno::FI_EAVAIL => {
                return Err(eq_c.readerr().expect("readerr").err);
            }
            Err(_) => {}
        }
    }
    panic!("no outcome of the connect within {BOUND:?}");
}

#[test]
fn msg_connects_only_with_equal_keys() {
    assert_eq!(msg_connect(Some(b"k1"), Some(b"k1")), Ok(()));
    assert_eq!(
        msg_connect(Some(b"k1"), Some(b"k2")),
        Err(errno::FI_EKEYREJECTED)
    );
    assert_eq!(msg_connect(None, Some(b"k2")), Err(errno::FI_EKEYREJECTED));
    assert_eq!(msg_connect(Some(b"k1"), None), Err(errno::FI_EKEYREJECTED));
    assert_eq!(msg_connect(None, None), Ok(()));
}
