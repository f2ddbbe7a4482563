//! The initiator and target cores against each other in the in-memory
//! simulator: data lands where it should under any order of actions,
//! credits bound what a session has outstanding, hostile capsules end the
//! session that sent them and nothing else, and a dead initiator gives its
//! credits and staging slots back.

use ofi_storage::core::initiator::{Request, SubmitError};
use ofi_storage::core::sim::Sim;
use ofi_storage::core::target::{Action, PeerId, TargetConfig};
use ofi_storage::wire::{Command, Op, Repr, Status, CAPSULE_LEN};
use std::time::Duration;

fn cfg() -> TargetConfig {
    TargetConfig {
        size: 256 << 10,
        max_io: 16 << 10,
        slots: 4,
        credits: 32,
        max_queue_depth: 8,
        ..TargetConfig::default()
    }
}

fn rq(op: Op, offset: u64, len: u32, addr: u64) -> Request {
    Request {
        op,
        fua: false,
        no_hole: false,
        offset,
        len,
        addr,
        key: 0,
    }
}

/// A small deterministic generator (no external randomness in tests).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

fn open(sim: &mut Sim, mem: usize, qd: u32) -> usize {
    let i = sim.add_initiator(mem, qd, 16 << 10);
    sim.settle();
    assert!(sim.inits[i].core.accepted().is_some(), "session {i} open");
    i
}

#[test]
fn writes_land_and_read_back_under_any_action_order() {
    let mut sim = Sim::new(cfg());
    let a = open(&mut sim, 64 << 10, 8);
    let b = open(&mut sim, 64 << 10, 8);
    let mut model = vec![0u8; 256 << 10];
    let mut rng = Lcg(7);
    let mut user = 0;
    for round in 0..40 {
        // Each initiator writes four distinct 4 KiB blocks from its memory.
        for (who, init) in [a, b].into_iter().enumerate() {
            for k in 0..4 {
                let block = (round * 8 + who * 4 + k) % 64;
                let addr = (k * 4096) as u64;
                let fill = (rng.next() & 0xff) as u8;
                sim.inits[init].mem[k * 4096..(k + 1) * 4096].fill(fill);
                model[block * 4096..(block + 1) * 4096].fill(fill);
                user += 1;
                sim.submit(init, rq(Op::Write, (block * 4096) as u64, 4096, addr), user)
                    .expect("a credit per write");
            }
        }
        // Run the target's actions in a shuffled order.
        loop {
            let mut moved = sim.deliver_to_target();
            moved |= sim.run_action(rng.next() as usize);
            moved |= sim.deliver_to_initiator(a);
            moved |= sim.deliver_to_initiator(b);
            if !moved {
                break;
            }
        }
    }
    assert_eq!(sim.volume, model);
    for i in [a, b] {
        assert!(sim.inits[i].done.iter().all(|d| d.1 == Status::Ok));
        assert_eq!(sim.inits[i].done.len(), 160);
    }
    // Read it all back through initiator a, 16 KiB at a time.
    for chunk in 0..16u64 {
        sim.submit(
            a,
            rq(Op::Read, chunk * (16 << 10), 16 << 10, 0),
            1000 + chunk,
        )
        .unwrap();
        sim.settle();
        let got = &sim.inits[a].mem[..16 << 10];
        let want = &model[(chunk as usize) * (16 << 10)..(chunk as usize + 1) * (16 << 10)];
        assert!(got == want, "chunk {chunk} differs");
    }
    assert_eq!(sim.target.slots_busy(), 0);
}

#[test]
fn flush_trim_zeroes_and_status_of_bad_ranges() {
    let mut sim = Sim::new(cfg());
    let a = open(&mut sim, 64 << 10, 8);
    sim.volume.fill(0xaa);
    sim.submit(a, rq(Op::WriteZeroes, 4096, 8192, 0), 1)
        .unwrap();
    sim.submit(a, rq(Op::Trim, 0, 512, 0), 2).unwrap();
    sim.submit(a, rq(Op::Flush, 0, 0, 0), 3).unwrap();
    sim.settle();
    assert!(sim.volume[4096..12288].iter().all(|&x| x == 0));
    assert_eq!(sim.volume[4095], 0xaa);
    assert_eq!(sim.volume[12288], 0xaa);
    assert_eq!(sim.syncs, 1);
    // The initiator core refuses what it knows the target would.
    let end = 256 << 10;
    assert_eq!(
        sim.submit(a, rq(Op::Read, end - 512, 1024, 0), 4),
        Err(SubmitError::Rejected(Status::OutOfRange))
    );
    assert_eq!(
        sim.submit(a, rq(Op::Read, 0, 32 << 10, 0), 4),
        Err(SubmitError::Rejected(Status::Invalid))
    );
    // Sent anyway (a hostile or buggy initiator): the target answers
    // OutOfRange and touches nothing.
    let session = sim.inits[a].core.accepted().unwrap().session;
    let cmd = |cid, op, offset, len| {
        Repr::Command(Command {
            cid,
            session,
            op,
            flags: 0,
            offset,
            len,
            addr: 0,
            key: if op == Op::Write { 0x5eed_0000 } else { 0 },
        })
        .to_bytes()
    };
    sim.inits[a].mem.fill(0x55);
    let before = sim.volume.clone();
    sim.inject(a, &cmd(0xf000_0001, Op::Write, end - 512, 1024));
    sim.inject(a, &cmd(0xf000_0002, Op::Write, u64::MAX - 100, 1024));
    sim.inject(a, &cmd(0xf000_0003, Op::WriteZeroes, end, 1));
    sim.settle();
    assert_eq!(
        sim.volume, before,
        "an out-of-range command changed the volume"
    );
    assert!(sim.drops.is_empty(), "{:?}", sim.drops);
}

#[test]
fn a_wrong_key_fails_the_command_not_the_target() {
    let mut sim = Sim::new(cfg());
    let a = open(&mut sim, 8 << 10, 8);
    let session = sim.inits[a].core.accepted().unwrap().session;
    let bad = Repr::Command(Command {
        cid: 77,
        session,
        op: Op::Write,
        flags: 0,
        offset: 0,
        len: 4096,
        addr: 0,
        key: 0xbad,
    });
    sim.volume.fill(1);
    sim.inject(a, &bad.to_bytes());
    sim.settle();
    assert!(sim.volume.iter().all(|&x| x == 1));
    // The completion's cid is not one the initiator core issued: it ends
    // the session on its side (it cannot be matched).
    assert!(sim.inits[a].failed.is_some());
    assert_eq!(sim.target.slots_busy(), 0);
}

#[test]
fn a_read_is_answered_only_after_its_data_write_completed() {
    let mut sim = Sim::new(cfg());
    let a = open(&mut sim, 16 << 10, 8);
    sim.volume[4096..8192].fill(0x5a);
    sim.submit(a, rq(Op::Read, 4096, 4096, 0), 1).unwrap();
    sim.deliver_to_target();
    // The load runs first, then the write; no answer while it runs.
    assert!(matches!(sim.held.front(), Some(Action::Io { .. })));
    sim.run_action(0);
    let Some(Action::RmaWrite { op, .. }) = sim.held.pop_front() else {
        panic!("no write: {:?}", sim.held);
    };
    assert!(
        sim.held.is_empty(),
        "answered before the data: {:?}",
        sim.held
    );
    assert_eq!(sim.target.slots_busy(), 1, "the slot waits for the write");
    // Its completion brings the answer (the simulated RMA is not run: the
    // initiator's memory keeps its zeroes, which the answer does not see).
    sim.target.rma_done(op, Ok(()));
    while let Some(a) = sim.target.poll_action() {
        sim.held.push_back(a);
    }
    match sim.held.front() {
        Some(Action::Send { capsule, .. }) => assert!(matches!(
            Repr::from_bytes(capsule),
            Ok(Repr::Completion {
                status: Status::Ok,
                ..
            })
        )),
        other => panic!("no answer after the write: {other:?}"),
    }
    sim.settle();
    assert_eq!(sim.inits[a].done, vec![(1, Status::Ok)]);
    assert_eq!(sim.target.slots_busy(), 0);
    // A write that fails answers its READ with an error, nothing else: the
    // session goes on.
    sim.submit(a, rq(Op::Read, 0, 4096, 0), 2).unwrap();
    sim.deliver_to_target();
    sim.run_action(0);
    let Some(Action::RmaWrite { op, .. }) = sim.held.pop_front() else {
        panic!("no write: {:?}", sim.held);
    };
    assert!(
        sim.held.is_empty(),
        "answered before the data: {:?}",
        sim.held
    );
    sim.target.rma_done(op, Err(13));
    while let Some(a) = sim.target.poll_action() {
        sim.held.push_back(a);
    }
    sim.settle();
    assert_eq!(sim.inits[a].done[1], (2, Status::Transfer));
    assert!(sim.inits[a].failed.is_none());
    assert!(sim.drops.is_empty(), "{:?}", sim.drops);
    assert_eq!(sim.target.slots_busy(), 0);
    sim.submit(a, rq(Op::Read, 4096, 4096, 0), 3).unwrap();
    sim.settle();
    assert_eq!(sim.inits[a].done[2], (3, Status::Ok));
    assert!(sim.inits[a].mem[..4096].iter().all(|&x| x == 0x5a));
}

#[test]
fn credits_bound_outstanding_commands() {
    let mut sim = Sim::new(cfg());
    let a = open(&mut sim, 64 << 10, 3);
    assert_eq!(sim.inits[a].core.accepted().unwrap().queue_depth, 3);
    for u in 0..3 {
        sim.submit(a, rq(Op::Read, 0, 512, 0), u).unwrap();
    }
    assert_eq!(
        sim.submit(a, rq(Op::Read, 0, 512, 0), 9),
        Err(SubmitError::NoCredit)
    );
    sim.settle();
    sim.submit(a, rq(Op::Read, 0, 512, 0), 9)
        .expect("credits came back");
    sim.settle();

    // A peer that ignores its credits is dropped, with the reason.
    let session = sim.inits[a].core.accepted().unwrap().session;
    for cid in 0..4 {
        let c = Repr::Command(Command {
            cid: 0x100 + cid,
            session,
            op: Op::Flush,
            flags: 0,
            offset: 0,
            len: 0,
            addr: 0,
            key: 0,
        });
        sim.inject(a, &c.to_bytes());
    }
    // Deliver all four before any action runs.
    for _ in 0..4 {
        sim.deliver_to_target();
    }
    sim.settle();
    assert_eq!(sim.drops.len(), 1);
    assert!(sim.drops[0].1.contains("credits"), "{:?}", sim.drops);
    assert_eq!(sim.target.credits_free(), 32);
}

#[test]
fn the_target_grants_what_it_has_and_refuses_when_out_of_credits() {
    let mut sim = Sim::new(TargetConfig {
        credits: 10,
        ..cfg()
    });
    let a = open(&mut sim, 4096, 8);
    let b = sim.add_initiator(4096, 8, 4096);
    sim.settle();
    assert_eq!(sim.inits[b].core.accepted().unwrap().queue_depth, 2);
    let c = sim.add_initiator(4096, 8, 4096);
    sim.settle();
    assert!(sim.inits[c].core.accepted().is_none());
    assert!(sim.inits[c].core.is_closed());
    // a leaves: its 8 credits serve a newcomer.
    sim.kill(a);
    sim.settle();
    let d = open(&mut sim, 4096, 8);
    assert_eq!(sim.inits[d].core.accepted().unwrap().queue_depth, 8);
}

#[test]
fn hostile_capsules_drop_only_their_sender() {
    let mut sim = Sim::new(cfg());
    let good = open(&mut sim, 8 << 10, 4);
    let hostile: Vec<(&str, Vec<u8>)> = vec![
        ("short", vec![1, 0x11, 0, 0]),
        ("long", vec![1; CAPSULE_LEN + 1]),
        ("bad version", {
            let mut b = Repr::Disconnect { session: 1 }.to_bytes();
            b[0] = 9;
            b.to_vec()
        }),
        ("unknown op", {
            let mut b = [0u8; CAPSULE_LEN];
            b[0] = 1;
            b[1] = 0x7e;
            b.to_vec()
        }),
        (
            "a completion sent to the target",
            Repr::Completion {
                cid: 1,
                session: 1,
                status: Status::Ok,
            }
            .to_bytes()
            .to_vec(),
        ),
        ("oversized read", Vec::new()),
        ("wrong session", Vec::new()),
        ("wrong token", Vec::new()),
        ("command before connect", Vec::new()),
    ];
    for (what, bytes) in hostile {
        let before_drops = sim.drops.len();
        let h = sim.add_initiator(8 << 10, 4, 16 << 10);
        let session_cmd = |session, len| {
            Repr::Command(Command {
                cid: 1,
                session,
                op: Op::Read,
                flags: 0,
                offset: 0,
                len,
                addr: 0,
                key: 0,
            })
            .to_bytes()
            .to_vec()
        };
        if what == "wrong token" {
            // Replace the queued CONNECT with one whose token is off by one.
            sim.to_target.clear();
            let c = Repr::Connect {
                token: sim.token(h) + 1,
                queue_depth: 4,
                max_io: 4096,
            };
            sim.inject(h, &c.to_bytes());
            sim.settle();
        } else if what == "command before connect" {
            sim.to_target.clear();
            sim.inject(h, &session_cmd(1, 512));
            sim.settle();
        } else {
            sim.settle();
            let session = sim.inits[h].core.accepted().unwrap().session;
            let b = match what {
                "oversized read" => session_cmd(session, 32 << 10),
                "wrong session" => session_cmd(session + 1000, 512),
                _ => bytes,
            };
            sim.inject(h, &b);
            sim.settle();
        }
        assert_eq!(
            sim.drops.len(),
            before_drops + 1,
            "{what} did not drop its sender"
        );
        assert_eq!(sim.drops.last().unwrap().0, PeerId(h as u64));
        assert!(
            sim.released.contains(&PeerId(h as u64)),
            "{what}: peer not released"
        );
    }
    // The good session still works.
    sim.inits[good].mem[..512].fill(3);
    sim.submit(good, rq(Op::Write, 512, 512, 0), 1).unwrap();
    sim.settle();
    assert_eq!(sim.inits[good].done.last(), Some(&(1, Status::Ok)));
    assert!(sim.volume[512..1024].iter().all(|&x| x == 3));
    assert_eq!(sim.target.credits_free(), 32 - 4);
}

#[test]
fn a_dead_initiator_gives_back_credits_and_slots_mid_io() {
    let mut sim = Sim::new(cfg());
    let a = open(&mut sim, 128 << 10, 8);
    let b = open(&mut sim, 16 << 10, 8);
    for u in 0..8u64 {
        sim.submit(
            a,
            rq(Op::Write, u * (16 << 10), 16 << 10, u * (16 << 10)),
            u,
        )
        .unwrap();
    }
    // Some actions started (slots taken, RMA issued), none finished.
    for _ in 0..8 {
        sim.deliver_to_target();
    }
    assert_eq!(sim.target.slots_busy(), 4);
    sim.kill(a);
    assert_eq!(
        sim.target.credits_free(),
        32 - 8,
        "a's credits came back at once"
    );
    sim.settle();
    assert_eq!(sim.target.slots_busy(), 0);
    assert!(sim.released.contains(&PeerId(a as u64)));
    assert!(
        sim.volume.iter().all(|&x| x == 0),
        "a dead session's write landed"
    );
    // b is untouched.
    sim.submit(b, rq(Op::Read, 0, 4096, 0), 1).unwrap();
    sim.settle();
    assert_eq!(sim.inits[b].done, vec![(1, Status::Ok)]);
}

#[test]
fn read_only_volumes_refuse_changes() {
    let mut sim = Sim::new(TargetConfig {
        read_only: true,
        ..cfg()
    });
    let a = open(&mut sim, 8 << 10, 4);
    assert_eq!(
        sim.submit(a, rq(Op::Write, 0, 512, 0), 1),
        Err(SubmitError::Rejected(Status::ReadOnly))
    );
    let session = sim.inits[a].core.accepted().unwrap().session;
    let w = Repr::Command(Command {
        cid: 5,
        session,
        op: Op::Write,
        flags: 0,
        offset: 0,
        len: 512,
        addr: 0,
        key: 0x5eed_0000,
    });
    sim.inits[a].mem.fill(9);
    sim.inject(a, &w.to_bytes());
    sim.deliver_to_target();
    while sim.run_action(0) {}
    assert!(sim.volume.iter().all(|&x| x == 0));
    let answer = sim.inits[a].inbox.pop_back().expect("a completion");
    assert_eq!(
        Repr::from_bytes(&answer),
        Ok(Repr::Completion {
            cid: 5,
            session,
            status: Status::ReadOnly
        })
    );
    assert!(sim.drops.is_empty(), "{:?}", sim.drops);
    sim.submit(a, rq(Op::Read, 0, 512, 0), 2).unwrap();
    sim.settle();
    assert_eq!(sim.inits[a].done.last(), Some(&(2, Status::Ok)));
}

#[test]
fn an_unanswered_command_times_out_and_fails_the_session() {
    let mut sim = Sim::new(cfg());
    let a = open(&mut sim, 8 << 10, 4);
    sim.submit(a, rq(Op::Read, 0, 512, 0), 1).unwrap();
    let now = sim.now;
    let core = &mut sim.inits[a].core;
    let d = core.poll_timeout().expect("a deadline");
    assert_eq!(d, now + Duration::from_secs(30));
    core.handle_timeout(now + Duration::from_secs(29));
    assert!(!core.is_closed());
    core.handle_timeout(d);
    assert!(core.is_closed());
    let mut ev = Vec::new();
    while let Some(e) = core.poll_event() {
        ev.push(e);
    }
    assert!(matches!(
        ev[0],
        ofi_storage::core::initiator::Event::Done {
            user: 1,
            status: Status::TimedOut
        }
    ));
}

#[test]
fn fuzz_schedules_keep_the_invariants() {
    let mut rng = Lcg(99);
    for _ in 0..300 {
        let n = (rng.next() % 400) as usize;
        let data: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
        Sim::fuzz(&data);
    }
}

#[test]
fn an_accept_granting_more_than_asked_ends_the_session() {
    use ofi_storage::core::initiator::{Event, InitiatorCore};
    use ofi_storage::wire::Accept;
    let now = std::time::Instant::now();
    for (qd, max_io) in [(8, 4096), (4, 1 << 30), (0, 4096), (4, 0)] {
        let mut c = InitiatorCore::new(Duration::from_secs(5));
        let _ = c.connect(7, 4, 4096, now);
        c.on_capsule(
            &Repr::Accept(Accept {
                session: 1,
                size: 1 << 20,
                queue_depth: qd,
                max_io,
                block_size: 512,
                features: 0,
            })
            .to_bytes(),
        );
        assert!(c.accepted().is_none(), "granted ({qd}, {max_io}) was taken");
        assert!(c.is_closed());
        assert!(matches!(c.poll_event(), Some(Event::Refused(_))));
    }
    // What was asked, or less, is taken.
    let mut c = InitiatorCore::new(Duration::from_secs(5));
    let _ = c.connect(7, 4, 4096, now);
    let a = Accept {
        session: 1,
        size: 1 << 20,
        queue_depth: 2,
        max_io: 4096,
        block_size: 512,
        features: 0,
    };
    c.on_capsule(&Repr::Accept(a).to_bytes());
    assert_eq!(c.accepted(), Some(&a));
}
