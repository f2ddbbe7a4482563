//! RDM endpoints over loopback: messages of every size class both ways
//! with their data checked, a stream of large messages, and sends to an
//! endpoint that does not exist failing: within the peer timeout when
//! nothing answers, at once (refused) when the kernel says the port is
//! closed; and a closing peer's last acknowledgement honoured even when
//! the kernel reports its closed port first.
#![allow(unsafe_code)]

mod common;

use common::*;
use ofi_core::consts::*;
use ofi_core::error::errno;
use std::time::Duration;

const T: Duration = Duration::from_secs(20);

fn rdm() -> ofi_core::Info {
    offer(ep_type::FI_EP_RDM, "127.0.0.1")
}

/// Sends `len` bytes from `a` to `b` (`ctx` on both) and checks them.
fn exchange(a: &Ep, b: &Ep, to_b: u64, len: usize, seed: u64, ctx: usize) {
    let src = pattern(seed, len);
    let mut dst = vec![0u8; len + 16];
    // SAFETY: the buffers outlive the operations (waited for below).
    unsafe {
        b.ep.recv(dst.as_mut_ptr(), dst.len(), FI_ADDR_UNSPEC, ctx)
            .expect("recv");
        a.ep.send(src.as_ptr(), len, to_b, ctx).expect("send");
    }
    let mut sa = Vec::new();
    let mut sb = Vec::new();
    let s = ok(wait_ctx(&a.cq, &mut sa, ctx, T, &[&b.ep], "send"), "send");
    assert!(s.flags & FI_SEND != 0);
    let r = ok(wait_ctx(&b.cq, &mut sb, ctx, T, &[&a.ep], "recv"), "recv");
    assert_eq!(r.len, len, "received length");
    assert!(dst[..len] == src[..], "{len} bytes arrived damaged");
}

#[test]
fn messages_of_every_size_class_arrive_intact_both_ways() {
    let info = rdm();
    let a = Ep::open(&info);
    let b = Ep::open(&info);
    let to_b = a.insert(&b);
    let to_a = b.insert(&a);
    for (i, len) in [
        0usize,
        1,
        8,
        4096,
        4097,
        16384,
        16385,
        65536,
        200_000,
        1 << 20,
        (4 << 20) + 3,
    ]
    .into_iter()
    .enumerate()
    {
        exchange(&a, &b, to_b, len, i as u64, 0x100 + i);
        exchange(&b, &a, to_a, len, 100 + i as u64, 0x200 + i);
    }
}

#[test]
fn sends_to_a_silent_peer_fail_within_the_peer_timeout() {
    std::env::set_var("FI_UDP_PEER_TIMEOUT_MS", "1000");
    let info = rdm();
    let a = Ep::open(&info);
    // A socket that is bound but never answers: datagrams vanish, no ICMP.
    let ghost = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let gaddr = ghost.local_addr().unwrap();
    let to =
        a.av.insert_one(&ofi_prov_udp::addr::encode(&gaddr))
            .expect("insert");
    let m = pattern(1, 100);
    let t0 = std::time::Instant::now();
    // SAFETY: m outlives the send (its error completion is waited for).
    unsafe { a.ep.send(m.as_ptr(), m.len(), to, 7) }.expect("send");
    let mut st = Vec::new();
    match wait_ctx(&a.cq, &mut st, 7, T, &[], "send to a silent peer") {
        Done::Err(e) => assert_eq!(e.err, errno::FI_ETIMEDOUT),
        Done::Ok(e) => panic!("a send to a silent peer completed: {e:?}"),
    }
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    drop(ghost);
}

#[test]
fn sends_to_a_closed_port_fail_refused_before_the_peer_timeout() {
    // The port unreachable the kernel answers with ends the handshake:
    // the send fails with FI_ECONNREFUSED, not at the peer timeout (which
    // would say FI_ETIMEDOUT).
    std::env::set_var("FI_UDP_PEER_TIMEOUT_MS", "1000");
    let info = rdm();
    let a = Ep::open(&info);
    let ghost = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let gaddr = ghost.local_addr().unwrap();
    drop(ghost);
    let to =
        a.av.insert_one(&ofi_prov_udp::addr::encode(&gaddr))
            .expect("insert");
    let m = pattern(1, 100);
    // SAFETY: m outlives the send (its error completion is waited for).
    unsafe { a.ep.send(m.as_ptr(), m.len(), to, 8) }.expect("send");
    let mut st = Vec::new();
    match wait_ctx(&a.cq, &mut st, 8, T, &[], "send to a closed port") {
        Done::Err(e) => assert_eq!(
            e.err,
            errno::FI_ECONNREFUSED,
            "a closed port must be reported by its ICMP port unreachable"
        ),
        Done::Ok(e) => panic!("a send to a closed port completed: {e:?}"),
    }
}

#[test]
fn a_closing_peers_last_acknowledgement_counts_before_its_port_unreachable() {
    // b takes a's message and closes its endpoint before acknowledging it
    // on its own: its shutdown datagrams (a final ACK, a RESET flagged
    // CLOSED) wait in a's socket. a then sends to b's closed port, and
    // the kernel's port unreachable is reported by a's next receive ahead
    // of the datagrams already queued. The message b took must still
    // complete successfully at a (as fi_pingpong's last "fin" must).
    let info = rdm();
    let a = Ep::open(&info);
    let b = Ep::open(&info);
    let to_b = a.insert(&b);
    let to_a = b.insert(&a);
    exchange(&a, &b, to_b, 64, 1, 0x10);
    exchange(&b, &a, to_a, 64, 2, 0x11);
    let m1 = pattern(3, 64);
    let mut dst = vec![0u8; 128];
    let iov = [ofi_core::util::iov::IoVec {
        base: m1.as_ptr() as usize,
        len: m1.len(),
    }];
    // FI_TRANSMIT_COMPLETE: a's completion waits for b's acknowledgement.
    let op = ofi_core::object::SendOp {
        iov: &iov,
        desc: &[],
        dest: to_b,
        tag: 0,
        data: 0,
        context: 0x21,
        flags: FI_COMPLETION | FI_TRANSMIT_COMPLETE,
        tagged: false,
    };
    // SAFETY: dst and m1 outlive the operations (waited for below; b's
    // receive completes before b is closed).
    unsafe {
        b.ep.recv(dst.as_mut_ptr(), dst.len(), FI_ADDR_UNSPEC, 0x20)
            .expect("recv");
        a.ep.post_send(&op).expect("send");
    }
    let mut sb = Vec::new();
    ok(
        wait_ctx(&b.cq, &mut sb, 0x20, T, &[], "b's receive"),
        "b's receive",
    );
    assert!(dst[..64] == m1[..]);
    drop(b);
    // A datagram to the closed port (a's send leaves as it is posted): the
    // kernel answers with ICMP.
    let m2 = pattern(4, 64);
    // SAFETY: m2 outlives the send (its completion is waited for below).
    unsafe { a.ep.send(m2.as_ptr(), m2.len(), to_b, 0x22) }.expect("send");
    std::thread::sleep(Duration::from_millis(50));
    let mut sa = Vec::new();
    ok(
        wait_ctx(&a.cq, &mut sa, 0x21, T, &[], "a's send that b took"),
        "a's send that b took before closing",
    );
    // The second send (completed when buffered, or failed because b
    // closed) is accounted for either way.
    wait_ctx(&a.cq, &mut sa, 0x22, T, &[], "a's send after b closed");
}

#[test]
fn an_av_index_reused_after_a_removal_names_the_new_peer_only() {
    let mut info = rdm();
    info.caps |= FI_SOURCE;
    let a = Ep::open(&info);
    let b = Ep::open(&info);
    let c = Ep::open(&info);
    let to_b = a.insert(&b);
    let to_a = b.insert(&a);
    // b's session with a is up, a knowing b as `to_b`.
    exchange(&b, &a, to_a, 8, 1, 0x10);
    a.av.remove(&[to_b]).expect("remove");
    let to_c = a.insert(&c);
    assert_eq!(to_c, to_b, "the AV reuses the freed index");
    // b speaks again: a must not report it as c.
    let msg = [7u8; 8];
    let mut dst = [0u8; 8];
    // SAFETY: the buffers outlive the operations (waited for below).
    unsafe {
        a.ep.recv(dst.as_mut_ptr(), dst.len(), FI_ADDR_UNSPEC, 0x20)
            .expect("recv");
        b.ep.send(msg.as_ptr(), msg.len(), to_a, 0x20)
            .expect("send");
    }
    let deadline = std::time::Instant::now() + T;
    let mut e = [ofi_core::util::cq::CqTaggedEntry::default(); 1];
    let mut src = [0u64; 1];
    let mut sb = Vec::new();
    loop {
        poll(&b.cq, &mut sb);
        if a.cq.readfrom(&mut e, &mut src) == Ok(1) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the message never came"
        );
    }
    assert_eq!(e[0].op_context, 0x20);
    assert_ne!(
        src[0], to_c,
        "a removed peer's message carries the index of the peer that took it"
    );
}
