//! Target and initiator over real providers: data written through a
//! volume lands in the backing file and reads back (also as a stream of
//! 128 KiB requests at queue depth 16), several initiators share a target,
//! bad requests get errors, and the target's death fails what is in
//! flight.

mod support;

use ofi_storage::target::{Target, TargetOptions};
use ofi_storage::{EpKind, Status, Volume, VolumeOptions};
use std::time::Duration;
use support::*;

#[test]
fn round_trip_over_shm() {
    round_trip("shm");
}

#[test]
fn round_trip_over_tcp() {
    round_trip("tcp");
}

#[test]
fn round_trip_over_udp() {
    round_trip("udp");
}

#[test]
fn streaming_large_io_over_shm() {
    streaming_large_io("shm");
}

#[test]
fn streaming_large_io_over_tcp() {
    streaming_large_io("tcp");
}

#[test]
fn streaming_large_io_over_udp() {
    streaming_large_io("udp");
}

#[test]
fn round_trip_over_tcp_msg_connections() {
    round_trip_on("tcp", EpKind::Msg);
}

#[test]
fn several_msg_initiators_share_a_target_each_on_its_own_connection() {
    let path = tmpfile("msg-many", 4 << 20);
    let served = start_ep(&path, net_ep("tcp", EpKind::Msg), false);
    let addr = served.addr.clone();
    let opts = VolumeOptions {
        net: net_ep("tcp", EpKind::Msg),
        queue_depth: 4,
        ..VolumeOptions::default()
    };
    // Four initiators at once, each writing and checking its own quarter.
    let workers: Vec<_> = (0..4u8)
        .map(|k| {
            let (addr, opts) = (addr.clone(), opts.clone());
            std::thread::spawn(move || {
                let v = Volume::open(&addr, &opts).unwrap();
                let base = u64::from(k) << 20;
                for i in 0..16u64 {
                    v.submit_write(base + i * 65536, pattern(k * 16 + i as u8, 65536), false, i);
                }
                for _ in 0..16 {
                    let c = v.next(Duration::from_secs(10)).expect("a write completes");
                    assert_eq!(c.result.map(|b| b.len()), Ok(65536), "write {}", c.user);
                }
                v.flush().unwrap();
                for i in 0..16u64 {
                    let got = v.read(base + i * 65536, 65536).unwrap();
                    assert!(
                        got == pattern(k * 16 + i as u8, 65536),
                        "initiator {k} chunk {i}"
                    );
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let file = std::fs::read(&path).unwrap();
    for j in 0..64usize {
        assert!(
            file[j * 65536..(j + 1) * 65536] == pattern(j as u8, 65536)[..],
            "chunk {j} in the file"
        );
    }
}

#[test]
fn msg_without_an_msg_offer_or_a_listener_fails_clearly() {
    let path = tmpfile("msg-errors", 1 << 20);
    // shm has no MSG endpoints: the error names the provider and the way out.
    let e = Target::bind(
        &path,
        &TargetOptions {
            net: net_ep("shm", EpKind::Msg),
            ..TargetOptions::default()
        },
    )
    .unwrap_err();
    assert!(
        e.contains("shm") && e.contains("MSG") && e.contains("-e rdm"),
        "{e}"
    );
    // Nobody listens on this port: the connect is refused, quickly.
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = free.local_addr().unwrap().port();
    drop(free);
    let opts = VolumeOptions {
        net: net_ep("tcp", EpKind::Msg),
        ..VolumeOptions::default()
    };
    let t0 = std::time::Instant::now();
    let e = Volume::open(&format!("127.0.0.1:{port}"), &opts).unwrap_err();
    assert!(e.contains("refused"), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(6), "{:?}", t0.elapsed());
}

#[test]
fn a_dead_msg_initiator_gives_its_credits_and_connection_back() {
    use ofi::safe::{Channel, CmEvent};
    use ofi_storage::wire::Repr;
    let path = tmpfile("dead-msg", 1 << 20);
    let t = four_credits(&path, net_ep("tcp", EpKind::Msg));
    let addr = t.local_addr();
    let _served = serve(t);
    // A raw initiator connects, takes every credit, and dies without
    // DISCONNECT (its connection closes).
    let n = net_ep("tcp", EpKind::Msg);
    let info = n
        .msg_offer(Some("127.0.0.1"), Some(&addr.port().to_string()), false)
        .unwrap();
    let ch = Channel::open(&info).unwrap();
    let conn = ch.connect(info.dest_addr.as_ref().unwrap(), &[]).unwrap();
    let token = match ch.cm_wait(Duration::from_secs(10)).unwrap() {
        Some(CmEvent::Connected { data, .. }) => u64::from_be_bytes(data.try_into().unwrap()),
        e => panic!("expected the connection, got {e:?}"),
    };
    let mut rx = ch.recv_on(vec![0u8; 64], conn).unwrap();
    let connect = Repr::Connect {
        token,
        queue_depth: 4,
        max_io: 4096,
    };
    ch.inject(&connect.to_bytes(), conn).unwrap();
    let d = rx.wait(Duration::from_secs(10)).unwrap();
    assert!(matches!(Repr::from_bytes(d.bytes()), Ok(Repr::Accept(a)) if a.queue_depth == 4));
    let opts = VolumeOptions {
        net: net_ep("tcp", EpKind::Msg),
        queue_depth: 4,
        ..VolumeOptions::default()
    };
    let target = addr.to_string();
    let busy = Volume::open(&target, &opts).unwrap_err();
    assert!(busy.contains("busy"), "{busy}");
    drop(rx);
    drop(ch);
    // Its credits come back: a new initiator gets all four.
    let v = open_with_credits_back(&target, &opts);
    assert_eq!(v.queue_depth(), 4);
    assert_eq!(v.write(0, vec![5u8; 4096], true).map(|b| b.len()), Ok(4096));
    drop(v);
}

#[test]
fn read_only_target_refuses_writes() {
    let path = tmpfile("ro", 1 << 20);
    let served = start(&path, "shm", true);
    let addr = served.addr.clone();
    let v = open_volume(&addr, "shm");
    assert!(v.read_only());
    assert_eq!(v.write(0, vec![1; 512], false), Err(Status::ReadOnly));
    assert_eq!(v.read(0, 512).unwrap(), vec![0; 512]);
    drop(v);
}

#[test]
fn a_hostile_fabric_peer_is_dropped_and_never_reaches_outside_the_volume() {
    use ofi_storage::wire::{Command, Op, Repr};
    let size = 1u64 << 20;
    let path = tmpfile("hostile", size);
    std::fs::write(&path, vec![0x11u8; size as usize]).unwrap();
    let served = start(&path, "shm", false);
    let addr = served.addr.clone();
    // A CONNECT with another token: dropped.
    let mut a = Hostile::connect(&addr);
    a.send(
        &Repr::Connect {
            token: a.token ^ 1,
            queue_depth: 4,
            max_io: 4096,
        }
        .to_bytes(),
    );
    assert!(a.dropped(), "a wrong token must end the session");
    // An honest CONNECT, then commands outside the volume and a bad key:
    // answered with errors; then a malformed capsule: dropped.
    let mut b = Hostile::connect(&addr);
    b.send(
        &Repr::Connect {
            token: b.token,
            queue_depth: 4,
            max_io: 4096,
        }
        .to_bytes(),
    );
    let Repr::Accept(acc) = b.recv() else {
        panic!("no ACCEPT")
    };
    let region =
        b.ch.register(vec![0x99u8; 4096], ofi::MrAccess::REMOTE_READ)
            .unwrap();
    let cmd = |cid, offset, key| {
        Repr::Command(Command {
            cid,
            session: acc.session,
            op: Op::Write,
            flags: 0,
            offset,
            len: 4096,
            addr: region.remote_addr(0),
            key,
        })
        .to_bytes()
    };
    for (cid, offset, key, want) in [
        (1, size - 100, region.key(), Status::OutOfRange),
        (2, u64::MAX - 10, region.key(), Status::OutOfRange),
        (3, 0, region.key() ^ 0x5555, Status::Transfer),
    ] {
        b.send(&cmd(cid, offset, key));
        // The target reads the region with this channel's help (manual
        // progress): drive it while waiting.
        let got = b.recv();
        assert_eq!(
            got,
            Repr::Completion {
                cid,
                session: acc.session,
                status: want
            }
        );
    }
    let mut bad = cmd(4, 0, region.key());
    bad[3] = 1; // reserved byte
    b.send(&bad);
    assert!(b.dropped(), "a malformed capsule must end the session");
    let file = std::fs::read(&path).unwrap();
    assert_eq!(file.len() as u64, size, "the file kept its size");
    assert!(file.iter().all(|&x| x == 0x11), "the volume was written");
    // The target still serves honest initiators.
    let v = open_volume(&addr, "shm");
    assert_eq!(v.read(0, 16).unwrap(), vec![0x11; 16]);
    drop((v, region, a, b));
}

#[test]
fn threads_sharing_a_volume_each_get_their_own_results() {
    let path = tmpfile("shared", 1 << 20);
    let served = start(&path, "shm", false);
    let v = open_volume(&served.addr, "shm");
    for t in 0..4u8 {
        v.write(u64::from(t) << 16, vec![t + 1; 4096], false)
            .unwrap();
    }
    // Blocking calls from four threads at once: each read returns its own
    // region (they shared one tag and could take each other's data).
    std::thread::scope(|s| {
        for t in 0..4u8 {
            let v = &v;
            s.spawn(move || {
                for i in 0..300 {
                    let got = v.read(u64::from(t) << 16, 4096).unwrap();
                    assert!(
                        got.iter().all(|&x| x == t + 1),
                        "thread {t}, read {i}: another thread's data"
                    );
                }
            });
        }
    });
}

#[test]
fn an_initiator_on_an_address_used_before_is_served() {
    use ofi_storage::wire::Repr;
    let path = tmpfile("reused", 1 << 20);
    let served = start(&path, "tcp", false);
    // One fabric address for two initiators in turn: the target's AV keeps
    // the first one's entry, which the provider names as the second one's
    // source.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut info = net("tcp").offer().unwrap();
    let mut sa = vec![0u8; 16];
    sa[0..2].copy_from_slice(&2u16.to_ne_bytes());
    sa[2..4].copy_from_slice(&port.to_be_bytes());
    sa[4..8].copy_from_slice(&[127, 0, 0, 1]);
    info.src_addr = Some(sa);
    for round in 0..2 {
        let h = Hostile::connect_with(&served.addr, &info);
        h.send(
            &Repr::Connect {
                token: h.token,
                queue_depth: 4,
                max_io: 4096,
            }
            .to_bytes(),
        );
        assert!(
            matches!(h.recv(), Repr::Accept(_)),
            "round {round}: no ACCEPT"
        );
        // The control connection closes: the target forgets the initiator.
        drop(h);
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_fabric_stranger_cannot_act_on_anothers_session() {
    use ofi_storage::wire::Repr;
    let path = tmpfile("stranger", 1 << 20);
    let served = start(&path, "shm", false);
    let addr = served.addr.clone();
    let v = open_volume(&addr, "shm");
    v.write(0, vec![0x5a; 512], false).unwrap();
    // A process that learnt the target's fabric address (here from a
    // WELCOME of its own) sends from a channel the target never met,
    // naming every likely session id (they are counted from 1).
    let h = Hostile::connect(&addr);
    let stranger = ofi::safe::Channel::open(&net("shm").offer().unwrap()).unwrap();
    let to_target = stranger.insert(&h.target_addr).unwrap();
    for session in 0..64 {
        inject(
            &stranger,
            &Repr::Disconnect { session }.to_bytes(),
            to_target,
        );
    }
    // The target has read them once it answers the next request; the
    // victim's session is intact.
    assert_eq!(v.read(0, 512).unwrap(), vec![0x5a; 512]);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        v.read(0, 512).unwrap(),
        vec![0x5a; 512],
        "a stranger's DISCONNECT closed the session"
    );
    drop((v, h, stranger));
}

#[test]
fn a_dead_initiator_gives_its_credits_back() {
    use ofi_storage::wire::Repr;
    let path = tmpfile("dead-init", 1 << 20);
    let t = four_credits(&path, net("shm"));
    let served = serve(t);
    let addr = served.addr.clone();
    // A raw initiator takes every credit, then dies without DISCONNECT
    // (its control connection closes).
    let a = Hostile::connect(&addr);
    a.send(
        &Repr::Connect {
            token: a.token,
            queue_depth: 4,
            max_io: 4096,
        }
        .to_bytes(),
    );
    assert!(matches!(a.recv(), Repr::Accept(acc) if acc.queue_depth == 4));
    let opts = VolumeOptions {
        net: net("shm"),
        queue_depth: 4,
        ..VolumeOptions::default()
    };
    let busy = Volume::open(&addr, &opts).unwrap_err();
    assert!(busy.contains("busy"), "{busy}");
    drop(a);
    // Its credits come back: a new initiator gets all four.
    let v = open_with_credits_back(&addr, &opts);
    assert_eq!(v.queue_depth(), 4);
    drop(v);
}
