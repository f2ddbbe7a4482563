//! A lone endpoint polling its one connection with `recv` keeps that socket
//! out of the domain's epoll set while it busy-polls (Link::keep_watched),
//! and puts it back before anyone sleeps: a blocking read (sread) or a
//! sleep on the CQ's wait fd after trywait still wakes when a message
//! arrives, round after round of switching between busy polling and
//! sleeping.
#![allow(unsafe_code)]

mod common;

use common::{offer, readable, Rdm};
use ofi_core::consts::*;
use ofi_core::util::cq::{CqAttr, CqEntry};
use std::time::{Duration, Instant};

/// Two RDM endpoints over loopback, each alone in its own domain (so each
/// polls its one connection with recv), with wait-fd CQs; `a` knows `b`.
fn pair() -> (Rdm, Rdm, u64) {
    let info = offer(ep_type::FI_EP_RDM, "127.0.0.1");
    let cq = CqAttr {
        wait_obj: wait_obj::FI_WAIT_FD,
        ..Default::default()
    };
    let a = Rdm::open_with(&info, &cq);
    let b = Rdm::open_with(&info, &cq);
    let fb = a.av.insert_one(&b.ep.getname().unwrap()).unwrap();
    (a, b, fb)
}

/// One busy-polled round trip a -> b: the connection is up and b's socket
/// has left the epoll set.
fn busy_round(a: &Rdm, b: &Rdm, fb: u64, r: &mut [u8; 8], msg: &[u8; 8]) {
    // SAFETY: r and msg outlive the operations, which complete below.
    unsafe {
        b.ep.recv(r.as_mut_ptr(), 8, FI_ADDR_UNSPEC, 1).unwrap();
        a.ep.send(msg.as_ptr(), 8, fb, 2).unwrap();
    }
    spin_for(b, Some(a), 1);
    spin_for(a, Some(b), 2);
}

/// Busy-polls `s`'s CQ for `ctx`, driving `other` too (manual progress:
/// a connection being made needs both ends' calls).
fn spin_for(s: &Rdm, other: Option<&Rdm>, ctx: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut e = [CqEntry::default(); 4];
    loop {
        assert!(Instant::now() < deadline, "no completion {ctx}");
        match s.cq.read(&mut e) {
            Ok(n) if e[..n].iter().any(|x| x.op_context == ctx) => return,
            Ok(_) => {}
            Err(err) => assert!(err.is_again(), "cq read: {err}"),
        }
        if let Some(o) = other {
            o.ep.progress();
        }
    }
}

#[test]
fn sleeping_after_busy_polling_still_wakes_on_arrival() {
    let (a, b, fb) = pair();
    let msg = *b"wake up!";
    let mut r = [0u8; 8];
    for round in 0..12usize {
        busy_round(&a, &b, fb, &mut r, &msg);
        // Sleeping phase: b blocks, a sends a little later.
        // SAFETY: r and msg outlive the operations, which complete below.
        unsafe { b.ep.recv(r.as_mut_ptr(), 8, FI_ADDR_UNSPEC, 3).unwrap() };
        let by_fd = round % 2 == 1;
        std::thread::scope(|s| {
            let sleeper = s.spawn(|| {
                let t = Instant::now();
                let mut e = [CqEntry::default(); 4];
                if by_fd {
                    // The application's own sleep: trywait, then poll(2).
                    let fd = b.cq.wait_fd().expect("FI_WAIT_FD gives a wait fd");
                    loop {
                        if b.cq.trywait().is_ok() && !readable(fd, 10_000) {
                            panic!("round {round}: the wait fd stayed quiet");
                        }
                        match b.cq.read(&mut e) {
                            Ok(n) if e[..n].iter().any(|x| x.op_context == 3) => break,
                            Ok(_) => {}
                            Err(err) => assert!(err.is_again(), "cq read: {err}"),
                        }
                        assert!(t.elapsed() < Duration::from_secs(10), "round {round}");
                    }
                } else {
                    let n = b
                        .cq
                        .sread(&mut e, Some(Duration::from_secs(10)))
                        .unwrap_or_else(|err| panic!("round {round}: sread did not wake: {err}"));
                    assert_eq!((n, e[0].op_context), (1, 3), "round {round}");
                }
                t.elapsed()
            });
            std::thread::sleep(Duration::from_millis(40));
            // SAFETY: msg outlives the send, awaited by spin_for below.
            unsafe { a.ep.send(msg.as_ptr(), 8, fb, 4).unwrap() };
            spin_for(&a, None, 4);
            let took = sleeper.join().expect("sleeper panicked");
            assert!(
                took < Duration::from_secs(5),
                "round {round}: woke after {took:?}"
            );
        });
        assert_eq!(r, msg);
    }
}

/// One thread sleeps on the CQ's wait fd after trywait while another keeps
/// reading the same CQ for a while and then stops: the reader's progress
/// calls must not take the socket out of epoll under the sleeper (the
/// trywait stays armed until the fd is readable), so the sleeper wakes when
/// the message arrives.
#[test]
fn a_reader_does_not_disarm_a_sleeper_on_the_wait_fd() {
    let (a, b, fb) = pair();
    let msg = *b"sleeper!";
    let mut r = [0u8; 8];
    for round in 0..6usize {
        busy_round(&a, &b, fb, &mut r, &msg);
        // SAFETY: r and msg outlive the operations, which complete below.
        unsafe { b.ep.recv(r.as_mut_ptr(), 8, FI_ADDR_UNSPEC, 3).unwrap() };
        let fd = b.cq.wait_fd().expect("FI_WAIT_FD gives a wait fd");
        let (armed_tx, armed_rx) = std::sync::mpsc::channel();
        let cq_b = &b.cq;
        std::thread::scope(|s| {
            let sleeper = s.spawn(move || {
                cq_b.trywait().expect("nothing pending: trywait succeeds");
                armed_tx.send(()).unwrap();
                readable(fd, 10_000)
            });
            armed_rx.recv().unwrap();
            // Another thread reads the CQ (driving b's domain), then stops.
            let mut e = [CqEntry::default(); 4];
            for _ in 0..50 {
                match b.cq.read(&mut e) {
                    Ok(n) => panic!("round {round}: {n} completions before any send"),
                    Err(err) => assert!(err.is_again(), "cq read: {err}"),
                }
            }
            std::thread::sleep(Duration::from_millis(30));
            // SAFETY: msg outlives the send, awaited by spin_for below.
            unsafe { a.ep.send(msg.as_ptr(), 8, fb, 4).unwrap() };
            spin_for(&a, None, 4);
            assert!(
                sleeper.join().expect("sleeper panicked"),
                "round {round}: the wait fd stayed quiet after the message arrived"
            );
        });
        spin_for(&b, None, 3);
        assert_eq!(r, msg);
    }
}
