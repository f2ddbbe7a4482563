//! The target's control plane has bounds and expiries: a connection that
//! never says HELLO, or never opens its session after WELCOME (or after
//! the accept of an MSG connection), is dropped after the setup timeout;
//! initiators beyond the cap are refused with `Busy` and served once one
//! goes; a session that is idle but alive outlives the liveness bound.
//! (That a connected initiator whose host goes silent loses its session
//! and credits is shown with network namespaces in ofi-tools'
//! tests/storage.rs: loopback cannot be cut.)
//!
//! The setup timeout here is 500 ms; each wait for the target to act is
//! bounded by 10 s (a read timeout), so a target without the bound fails
//! the test rather than hanging it.

mod support;

use ofi_storage::control;
use ofi_storage::core::target::TargetConfig;
use ofi_storage::target::{Limits, Target, TargetOptions};
use ofi_storage::{EpKind, NetOptions, Status, Volume, VolumeOptions};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use support::*;

/// The longest any step waits for the target.
const WAIT: Duration = Duration::from_secs(10);

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

/// Reads until the peer closes (true) or [`WAIT`] passes (false).
fn closed_by_peer(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(WAIT)).unwrap();
    let mut b = [0u8; 256];
    loop {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) => return e.kind() == std::io::ErrorKind::ConnectionReset,
        }
    }
}

/// Reads a WELCOME (or whatever the target sends) until it is whole or
/// the connection ends.
fn read_welcome(s: &mut TcpStream) -> Result<control::Welcome, String> {
    s.set_read_timeout(Some(WAIT)).unwrap();
    let mut got = Vec::new();
    let mut b = [0u8; 256];
    loop {
        match s.read(&mut b) {
            Ok(0) => return Err(format!("closed after {} bytes", got.len())),
            Ok(n) => got.extend_from_slice(&b[..n]),
            Err(e) => return Err(format!("{e} after {} bytes", got.len())),
        }
        if let Some((w, _)) = control::parse_welcome(&got).map_err(|e| e.to_string())? {
            return Ok(w);
        }
    }
}

#[test]
fn a_control_connection_without_hello_is_closed_after_the_setup_timeout() {
    let path = tmpfile("no-hello", 1 << 20);
    let served = limited(&path, net("shm"), quick_setup(256));
    let mut s = TcpStream::connect(&served.addr).unwrap();
    assert!(closed_by_peer(&mut s), "still open after {WAIT:?}");
    // Half a HELLO is no better.
    let mut s = TcpStream::connect(&served.addr).unwrap();
    s.write_all(b"OFIST").unwrap();
    assert!(closed_by_peer(&mut s), "still open after {WAIT:?}");
}

#[test]
fn a_welcomed_initiator_that_never_connects_is_dropped() {
    let path = tmpfile("no-connect", 1 << 20);
    let served = limited(&path, net("shm"), quick_setup(256));
    let mut h = Hostile::connect(&served.addr);
    h.ctl.set_read_timeout(Some(WAIT)).unwrap();
    assert!(h.dropped(), "a WELCOME without CONNECT is kept");
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
    let deadline = Instant::now() + WAIT;
    let mut connected = false;
    let closed = loop {
        assert!(
            Instant::now() < deadline,
            "still connected after {WAIT:?} (connected: {connected})"
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

/// Opens a volume once the target has a place again.
fn open_when_served(addr: &str, opts: &VolumeOptions) -> Volume {
    let deadline = Instant::now() + WAIT;
    loop {
        match Volume::open(addr, opts) {
            Ok(v) => return v,
            Err(e) => assert!(
                Instant::now() < deadline,
                "no place came back in {WAIT:?}: {e}"
            ),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
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
    let mut silent = TcpStream::connect(&served.addr).unwrap();
    // ...so a third connection is told the target is busy (once the
    // target has taken the silent one: it answers the next WELCOME with
    // Busy)...
    let deadline = Instant::now() + WAIT;
    loop {
        let mut third = TcpStream::connect(&served.addr).unwrap();
        third.write_all(&control::hello(b"x")).unwrap();
        match read_welcome(&mut third) {
            Ok(w) if w.status == Status::Busy => {
                assert!(closed_by_peer(&mut third), "a refused connection stays");
                break;
            }
            // The silent one is not taken yet: this one took its place
            // and is dropped (its address is no fabric address).
            r => assert!(Instant::now() < deadline, "never refused: {r:?}"),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // ...and a third initiator hears why.
    let e = Volume::open(&served.addr, &opts).unwrap_err();
    assert!(e.contains("busy"), "{e}");
    // The silent one expires: its place is free again.
    assert!(closed_by_peer(&mut silent), "the silent connection stays");
    let b = open_when_served(&served.addr, &opts);
    // And when an initiator goes, its place is free.
    assert!(Volume::open(&served.addr, &opts).is_err(), "over the cap");
    drop(a);
    let c = open_when_served(&served.addr, &opts);
    assert_eq!(c.write(0, vec![2; 512], false).map(|x| x.len()), Ok(512));
    assert_eq!(b.read(0, 512).unwrap(), vec![2; 512]);
    drop((b, c));
}

#[test]
fn msg_initiators_beyond_the_cap_are_refused_until_one_goes() {
    let path = tmpfile("msg-cap", 1 << 20);
    let n = NetOptions {
        ep: EpKind::Msg,
        ..net("tcp")
    };
    let t = Target::bind(
        &path,
        &TargetOptions {
            net: n.clone(),
            listen: "127.0.0.1:0".parse().unwrap(),
            limits: quick_setup(1),
            ..TargetOptions::default()
        },
    )
    .unwrap();
    let addr = format!("127.0.0.1:{}", t.local_addr().port());
    let _served = serve(t);
    let opts = VolumeOptions {
        net: n,
        queue_depth: 4,
        ..VolumeOptions::default()
    };
    let a = Volume::open(&addr, &opts).unwrap();
    let e = Volume::open(&addr, &opts).unwrap_err();
    assert!(e.contains("busy"), "{e}");
    drop(a);
    let b = open_when_served(&addr, &opts);
    assert_eq!(b.write(0, vec![3; 512], true).map(|x| x.len()), Ok(512));
}

/// Liveness asks the peer's host, not the session: a session that sends
/// nothing for several times the bound, its host answering, keeps its
/// credits, on both sides.
#[test]
fn an_idle_session_outlives_the_liveness_bound() {
    let path = tmpfile("idle", 1 << 20);
    let live = Duration::from_secs(2);
    let t = Target::bind(
        &path,
        &TargetOptions {
            net: net("shm"),
            config: TargetConfig {
                credits: 4,
                max_queue_depth: 4,
                ..TargetConfig::default()
            },
            limits: Limits {
                liveness: live,
                ..quick_setup(256)
            },
            ..TargetOptions::default()
        },
    )
    .unwrap();
    let served = serve(t);
    let opts = VolumeOptions {
        net: net("shm"),
        queue_depth: 4,
        liveness: live,
        ..VolumeOptions::default()
    };
    let v = Volume::open(&served.addr, &opts).unwrap();
    std::thread::sleep(live * 2 + Duration::from_secs(1));
    // Its credits are still its own...
    let e = Volume::open(&served.addr, &opts).unwrap_err();
    assert!(e.contains("busy"), "{e}");
    // ...and its session works.
    assert_eq!(v.write(0, vec![4; 512], true).map(|x| x.len()), Ok(512));
    assert_eq!(v.read(0, 512).unwrap(), vec![4; 512]);
}
