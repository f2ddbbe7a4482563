//! An RDM endpoint keeps one connection per peer *address*, whichever
//! fi_addr names it, and no send waits forever for a connection:
//!
//! - one peer's address inserted twice into an address vector: two
//!   fi_addrs name the same peer (libfabric leaves duplicates to the
//!   provider; ofi keeps both, each usable). Every send to either fi_addr
//!   arrives and directed receives from either match the peer's messages,
//!   also when the first connections cross (each side sends before it has
//!   seen the other's connection), whichever side keeps its connection;
//! - a peer that connected before its address was inserted gets its reply
//!   (and directed receives) over that connection once it is inserted;
//! - a peer that refuses our connection as a crossing one and never
//!   identifies its own: the parked send goes out on a new connection
//!   after the peer timeout instead of waiting forever.
#![allow(unsafe_code)]

mod common;

use common::*;
use ofi_core::consts::*;
use ofi_wire::tcp::{op, reject, Repr, HDR_LEN};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::Duration;

/// Bound for each exchange on loopback (a parked send would exceed it).
const BOUND: Duration = Duration::from_secs(10);
/// The peer timeout these tests run with (FI_TCP_PEER_TIMEOUT_MS).
const PEER_TIMEOUT_MS: &str = "500";

fn loopback() -> Rdm {
    // Before the provider reads its tunables (once, at registration).
    std::env::set_var("FI_TCP_PEER_TIMEOUT_MS", PEER_TIMEOUT_MS);
    Rdm::open(&offer(ep_type::FI_EP_RDM, "127.0.0.1"))
}

/// One endpoint and the completions read but not yet awaited.
struct Side<'a> {
    r: &'a Rdm,
    stash: Vec<Done>,
}

/// Waits for `ctx` to complete successfully on `side` (progressing `other`).
fn done(side: &mut Side<'_>, other: &Rdm, ctx: usize, what: &str) {
    let d = wait_ctx(&side.r.cq, &mut side.stash, ctx, BOUND, &[&other.ep], what);
    ok(d, what);
}

/// Runs the check with the duplicate on the side whose connection the
/// crossing rule retires (`dup_on_loser`) or keeps.
fn crossing(dup_on_loser: bool) {
    let (p, q) = (loopback(), loopback());
    // The higher address's outgoing connection is the one refused when
    // connections cross (ofi_proto::tcp::decide_hello).
    let p_higher = p.ep.getname().unwrap() > q.ep.getname().unwrap();
    let (dup, single) = if p_higher == dup_on_loser {
        (&p, &q)
    } else {
        (&q, &p)
    };
    let name = single.ep.getname().unwrap();
    let a1 = dup.av.insert_one(&name).unwrap();
    let a2 = dup.av.insert_one(&name).unwrap();
    assert_ne!(a1, a2, "a duplicate insert gets its own fi_addr");
    assert_eq!(dup.av.lookup(a2).unwrap(), name);
    let back = single.av.insert_one(&dup.ep.getname().unwrap()).unwrap();

    let mut d = Side {
        r: dup,
        stash: Vec::new(),
    };
    let mut s = Side {
        r: single,
        stash: Vec::new(),
    };
    let mut in_d = [[0u8; 8]; 4];
    let mut in_s = [[0u8; 8]; 4];
    let out: Vec<[u8; 8]> = (0..4u64).map(|i| (0x1000 + i).to_le_bytes()).collect();
    // SAFETY: every buffer outlives its operation (each is awaited below
    // before the vectors drop).
    unsafe {
        // Crossing: both sides connect before either accepts; the
        // duplicate side sends to its second fi_addr.
        s.r.ep
            .recv(in_s[0].as_mut_ptr(), 8, FI_ADDR_UNSPEC, 0x10)
            .unwrap();
        d.r.ep
            .recv(in_d[0].as_mut_ptr(), 8, FI_ADDR_UNSPEC, 0x20)
            .unwrap();
        d.r.ep.send(out[0].as_ptr(), 8, a2, 0x30).unwrap();
        s.r.ep.send(out[1].as_ptr(), 8, back, 0x40).unwrap();
    }
    done(&mut d, single, 0x30, "send to the second fi_addr, crossing");
    done(&mut s, dup, 0x40, "send back, crossing");
    done(&mut s, dup, 0x10, "receive from the duplicate side");
    done(&mut d, single, 0x20, "receive on the duplicate side");
    assert_eq!(in_s[0], out[0]);
    assert_eq!(in_d[0], out[1]);

    // Both fi_addrs send, and directed receives from either match.
    for (i, (from, to)) in [(a1, a2), (a2, a1)].into_iter().enumerate() {
        let k = 0x100 * (i + 1);
        // SAFETY: in_d, in_s and out outlive these operations (each is awaited below,
        // before the next round).
        unsafe {
            d.r.ep
                .recv(in_d[1 + i].as_mut_ptr(), 8, from, k + 1)
                .unwrap();
            s.r.ep
                .recv(in_s[1 + i].as_mut_ptr(), 8, FI_ADDR_UNSPEC, k + 2)
                .unwrap();
            d.r.ep.send(out[2 + i].as_ptr(), 8, to, k + 3).unwrap();
            s.r.ep.send(out[i].as_ptr(), 8, back, k + 4).unwrap();
        }
        done(&mut d, single, k + 3, "send to one of the duplicates");
        done(&mut s, dup, k + 4, "send to the duplicate side");
        done(&mut s, dup, k + 2, "receive from the duplicate side");
        done(
            &mut d,
            single,
            k + 1,
            "directed receive from one of the duplicates",
        );
        assert_eq!(in_s[1 + i], out[2 + i]);
        assert_eq!(in_d[1 + i], out[i]);
    }
}

#[test]
fn crossing_sends_to_a_duplicate_on_the_side_that_retires_its_connection() {
    crossing(true);
}

#[test]
fn crossing_sends_to_a_duplicate_on_the_side_that_keeps_its_connection() {
    crossing(false);
}

/// `server` learns of `client` from its first message (not in its AV),
/// then inserts it and replies: the reply uses the client's connection
/// (a new one would cross it and, on one address order, be refused while
/// the client's connection never identifies itself again), and a receive
/// directed at the new fi_addr matches the client's next message.
fn reply_to_an_unknown_peer(client_lower: bool) {
    let (p, q) = (loopback(), loopback());
    let p_lower = p.ep.getname().unwrap() < q.ep.getname().unwrap();
    let (client, server) = if p_lower == client_lower {
        (&p, &q)
    } else {
        (&q, &p)
    };
    let to_server = client.av.insert_one(&server.ep.getname().unwrap()).unwrap();
    let mut c = Side {
        r: client,
        stash: Vec::new(),
    };
    let mut s = Side {
        r: server,
        stash: Vec::new(),
    };
    let out: Vec<[u8; 8]> = (0..3u64).map(|i| (0x2000 + i).to_le_bytes()).collect();
    let mut got = vec![[0u8; 8]; 3];
    // SAFETY: every buffer outlives its operation (awaited below).
    unsafe {
        s.r.ep
            .recv(got[0].as_mut_ptr(), 8, FI_ADDR_UNSPEC, 1)
            .unwrap();
        c.r.ep.send(out[0].as_ptr(), 8, to_server, 2).unwrap();
    }
    done(&mut s, client, 1, "first message from a peer not in the AV");
    done(&mut c, server, 2, "first send");
    let to_client = server.av.insert_one(&client.ep.getname().unwrap()).unwrap();
    // SAFETY: got and out outlive these operations (each is awaited below).
    unsafe {
        c.r.ep
            .recv(got[1].as_mut_ptr(), 8, FI_ADDR_UNSPEC, 3)
            .unwrap();
        s.r.ep.recv(got[2].as_mut_ptr(), 8, to_client, 4).unwrap();
        s.r.ep.send(out[1].as_ptr(), 8, to_client, 5).unwrap();
        c.r.ep.send(out[2].as_ptr(), 8, to_server, 6).unwrap();
    }
    done(&mut s, client, 5, "reply to the peer just inserted");
    done(&mut c, server, 3, "the reply's receive");
    done(&mut c, server, 6, "second send");
    done(
        &mut s,
        client,
        4,
        "directed receive from the peer just inserted",
    );
    assert_eq!(got, out);
}

#[test]
fn a_reply_to_a_peer_met_before_its_insert_uses_its_connection_lower_client() {
    reply_to_an_unknown_peer(true);
}

#[test]
fn a_reply_to_a_peer_met_before_its_insert_uses_its_connection_higher_client() {
    reply_to_an_unknown_peer(false);
}

/// Reads one frame (header and payload) from a blocking stream.
fn frame(s: &mut std::net::TcpStream) -> (Repr, Vec<u8>) {
    let mut h = [0u8; HDR_LEN];
    s.read_exact(&mut h).expect("frame header");
    let r = Repr::parse(
        &ofi_wire::tcp::Header::new_checked(&h[..]).unwrap(),
        1 << 20,
    )
    .expect("a frame from ofi parses");
    let mut p = vec![0u8; r.len as usize];
    s.read_exact(&mut p).expect("frame payload");
    (r, p)
}

#[test]
fn a_send_parked_for_a_crossing_connection_that_never_comes_goes_out_anew() {
    let r = loopback();
    // A scripted peer: refuses the first connection as a crossing one
    // (it claims a connection of its own, which never comes), accepts
    // the next and reads the message.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let peer =
        r.av.insert_one(&ofi_prov_tcp::addr::encode(&l.local_addr().unwrap()))
            .unwrap();
    let script = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.set_read_timeout(Some(BOUND)).unwrap();
        let (hello, _) = frame(&mut s);
        assert_eq!(hello.op, op::HELLO);
        let no = Repr {
            op: op::REJECT,
            data: reject::SIMULTANEOUS,
            ..Default::default()
        };
        s.write_all(&no.to_bytes()).unwrap();
        let (mut s2, _) = l.accept().unwrap();
        s2.set_read_timeout(Some(BOUND)).unwrap();
        let (hello, _) = frame(&mut s2);
        assert_eq!(hello.op, op::HELLO);
        let yes = Repr {
            op: op::ACCEPT,
            ..Default::default()
        };
        s2.write_all(&yes.to_bytes()).unwrap();
        let (msg, payload) = frame(&mut s2);
        assert_eq!(msg.op, op::MSG);
        drop(s);
        payload
    });
    let out = 0x5eed_u64.to_le_bytes();
    // SAFETY: `out` outlives the send (awaited below).
    unsafe { r.ep.send(out.as_ptr(), 8, peer, 7) }.unwrap();
    let mut stash = Vec::new();
    let d = wait_ctx(&r.cq, &mut stash, 7, BOUND, &[], "parked send");
    ok(d, "parked send");
    assert_eq!(
        script.join().unwrap(),
        out,
        "the message on the new connection"
    );
}
