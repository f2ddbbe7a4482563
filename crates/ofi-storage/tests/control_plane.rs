//! The target's control plane has bounds and expiries: a connection that
//! never says HELLO, or never opens its session after WELCOME (or after
//! the accept of an MSG connection), is dropped after the setup timeout;
//! initiators beyond the cap are refused with `Busy` and served once one
//! goes. (Liveness of a connected initiator whose host goes silent is
//! shown with a network namespace in ofi-tools' tests/storage.rs.)

mod support;

use ofi_storage::target::{Limits, Target, TargetOptions};
use ofi_storage::{EpKind, NetOptions, Volume, VolumeOptions};
use std::io::Read;
use std::time::{Duration, Instant};
use support::*;

fn limited(path: &std::path::Path, net: NetOptions, limits: Limits) -> Served {
    serve(
        Target::bind(
            path,
            &TargetOptions {
                net,
                limits,
                ..TargetOptions::default()
            },
        )
        .unwrap(),
    )
}

fn quick_setup(max_initiators: usize) -> Limits {
    Limits {
        max_initiators,
        setup_timeout: Duration::from_millis(500),
        ..Limits::default()
    }
}

/// Reads until the peer closes (true) or 10 s pass (false).
fn closed_by_peer(s: &mut std::net::TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut b = [0u8; 256];
    loop {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) => return e.kind() == std::io::ErrorKind::ConnectionReset,
        }
    }
}

#[test]
fn a_control_connection_without_hello_is_closed_after_the_setup_timeout() {
    let path = tmpfile("no-hello", 1 << 20);
    let served = limited(&path, net("shm"), quick_setup(256));
    let mut s = std::net::TcpStream::connect(&served.addr).unwrap();
    let t0 = Instant::now();
    assert!(closed_by_peer(&mut s), "still open after 10 s");
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    // Half a HELLO is no better.
    let mut s = std::net::TcpStream::connect(&served.addr).unwrap();
    std::io::Write::write_all(&mut s, b"OFIST").unwrap();
    assert!(closed_by_peer(&mut s), "still open after 10 s");
}

#[test]
fn a_welcomed_initiator_that_never_connects_is_dropped() {
    let path = tmpfile("no-connect", 1 << 20);
    let served = limited(&path, net("shm"), quick_setup(256));
    let mut h = Hostile::connect(&served.addr);
    let t0 = Instant::now();
    assert!(h.dropped(), "a WELCOME without CONNECT is kept");
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    // A session that opens in time stays, past the setup timeout.
    let v = open_volume(&served.addr, "shm");
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(v.write(0, vec![1; 512], true).map(|b| b.len()), Ok(512));
    drop(v);
}

#[test]
fn an_msg_connection_that_never_connects_is_closed() {
    use ofi::safe::{Channel, CmEvent};
    let path = tmpfile("msg-no-connect", 1 << 20);
    let n = NetOptions {
        ep: EpKind::Msg,
        ..net("tcp")
    };
    let t = Target::bind(
        &path,
        &TargetOptions {
            net: n.clone(),
            limits: quick_setup(256),
            ..TargetOptions::default()
        },
    )
    .unwrap();
    let port = t.local_addr().port().to_string();
    let _served = serve(t);
    let info = n.msg_offer(Some("127.0.0.1"), Some(&port), false).unwrap();
    let ch = Channel::open(&info).unwrap();
    let conn = ch.connect(info.dest_addr.as_ref().unwrap(), &[]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut connected = false;
    let closed = loop {
        assert!(
            Instant::now() < deadline,
            "still connected after 10 s (connected: {connected})"
        );
        let _ = ch.poll();
        match ch.cm_wait(Duration::from_millis(100)).unwrap() {
            Some(CmEvent::Connected { conn: c, .. }) if c == conn => connected = true,
            Some(CmEvent::Shutdown { conn: c }) if c == conn => break true,
            Some(CmEvent::Failed { conn: Some(c), .. }) if c == conn => break true,
            _ => {}
        }
    };
    assert!(connected && closed);
}

#[test]
fn initiators_beyond_the_cap_are_refused_until_one_goes() {
    let path = tmpfile("cap", 1 << 20);
    let served = limited(&path, net("shm"), quick_setup(2));
    let opts = VolumeOptions {
        net: net("shm"),
        queue_depth: 4,
        ..VolumeOptions::default()
    };
    let a = Volume::open(&served.addr, &opts).unwrap();
    // A connection that says nothing holds the second place...
    let mut silent = std::net::TcpStream::connect(&served.addr).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    // ...so a third initiator is told the target is busy, and a third
    // connection is closed at once.
    let e = Volume::open(&served.addr, &opts).unwrap_err();
    assert!(e.contains("busy"), "{e}");
    let mut third = std::net::TcpStream::connect(&served.addr).unwrap();
    let t0 = Instant::now();
    assert!(closed_by_peer(&mut third));
    assert!(
        t0.elapsed() < Duration::from_millis(400),
        "{:?}",
        t0.elapsed()
    );
    // The silent one expires: its place is free again.
    assert!(closed_by_peer(&mut silent));
    let b = Volume::open(&served.addr, &opts).unwrap();
    // And when an initiator goes, its place is free.
    drop(a);
    let mut c = None;
    for _ in 0..100 {
        if let Ok(v) = Volume::open(&served.addr, &opts) {
            c = Some(v);
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let c = c.expect("the place of a gone initiator never came back");
    assert_eq!(c.write(0, vec![2; 512], false).map(|x| x.len()), Ok(512));
    assert_eq!(b.read(0, 512).unwrap(), vec![2; 512]);
    drop((b, c));
}
