//! The udp RDM core (the tcp protocol core over udp sessions) under a
//! simulated network with loss, duplication, reordering and corruption:
//! eager and rendezvous messages, tagged and not, posted before and after
//! they arrive, land intact in their receive buffers; RMA writes and reads
//! against a simulated target; large sends complete only once acknowledged
//! while small ones complete when staged; a silent peer fails the pending
//! operations with FI_ETIMEDOUT and is reported once.

#[path = "common/mod.rs"]
mod tcp_common;
mod udp_common;

use ofi_base::auth::{Nonce, NONCE_LEN};
use ofi_base::consts::{FI_ADDR_NOTAVAIL, FI_REMOTE_READ, FI_REMOTE_WRITE};
use ofi_base::error::errno;
use ofi_base::iov::IoVec;
use ofi_base::peer::Cause;
use ofi_proto::tcp::{self, Event, RecvReq, Remote, Req, RmaReq, SendReq};
use ofi_proto::udp::{ChanConfig, Part, Rdm, RdmConfig, RdmEvent, SessionConfig, UserMem};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tcp_common::{Mem, SimTarget, RMA_BASE};
use udp_common::{Faults, Net, Rng};

/// A node's memory: user buffers and, at RMA_BASE, registered regions.
#[derive(Clone)]
struct Host {
    mem: Rc<RefCell<Mem>>,
    target: Option<Arc<Mutex<SimTarget>>>,
}

impl UserMem for Host {
    fn write(&mut self, iov: &[IoVec], src: &[u8]) -> usize {
        let mut done = 0;
        for v in iov {
            if done == src.len() {
                break;
            }
            let n = v.len.min(src.len() - done);
            let part = IoVec {
                base: v.base,
                len: n,
            };
            if v.base >= RMA_BASE {
                let t = self.target.as_ref().expect("a target");
                let mut t = t.lock().unwrap();
                assert!(t.inside(part), "a write outside every region: {part:?}");
                t.mem.put(v.base, &src[done..done + n]);
            } else {
                let mut m = self.mem.borrow_mut();
                assert!(m.holds(part), "a write outside user memory: {part:?}");
                m.put(v.base, &src[done..done + n]);
            }
            done += n;
        }
        done
    }
    fn read(&mut self, from: IoVec, into: &mut [u8]) {
        let v = IoVec {
            base: from.base,
            len: into.len(),
        };
        if v.base >= RMA_BASE {
            let t = self.target.as_ref().expect("a target");
            into.copy_from_slice(t.lock().unwrap().mem.get(v));
        } else {
            into.copy_from_slice(self.mem.borrow().get(v));
        }
    }
}

struct Node {
    addr: Vec<u8>,
    rdm: Rdm,
    host: Host,
    events: Vec<RdmEvent>,
    rx_events: Vec<Event>,
}

fn nonces(seed: u64) -> Box<dyn FnMut() -> Nonce + Send> {
    let mut r = Rng::new(seed);
    Box::new(move || {
        let mut n = [0u8; NONCE_LEN];
        for c in n.chunks_mut(8) {
            c.copy_from_slice(&r.next_u64().to_le_bytes());
        }
        n
    })
}

fn node(addr: &str, epoch: u64, timeout: Duration) -> Node {
    node_with(addr, epoch, timeout, |_| {})
}

/// A node whose configuration `tweak` changes.
fn node_with(
    addr: &str,
    epoch: u64,
    timeout: Duration,
    tweak: impl FnOnce(&mut RdmConfig),
) -> Node {
    let mut cfg = RdmConfig {
        proto: tcp::Config::default(),
        rx: tcp::RxConfig::default(),
        session: SessionConfig {
            epoch,
            my_addr: addr.as_bytes().to_vec(),
            key: None,
            max_datagram: 1500,
            chan: ChanConfig {
                window: 256 << 10,
                peer_timeout: timeout,
                ..Default::default()
            },
            max_half_open: 16,
            idle_timeout: Duration::from_secs(3600),
            max_peers: 1024,
        },
        copy_max: 4096,
        tx_size: 1024,
        copy_budget: 4 << 20,
        copy_total: 64 << 20,
    };
    tweak(&mut cfg);
    let base = 0x10_0000 * epoch as usize;
    Node {
        addr: addr.as_bytes().to_vec(),
        rdm: Rdm::new(cfg, nonces(epoch)),
        host: Host {
            mem: Rc::new(RefCell::new(Mem::at(base))),
            target: None,
        },
        events: Vec::new(),
        rx_events: Vec::new(),
    }
}

struct World {
    net: Net,
    nodes: Vec<Node>,
}

impl World {
    fn new(seed: u64, f: Faults, timeout: Duration) -> World {
        World::of(seed, f, vec![node("a", 1, timeout), node("b", 2, timeout)])
    }

    fn of(seed: u64, f: Faults, nodes: Vec<Node>) -> World {
        World {
            net: Net::new(seed, f),
            nodes,
        }
    }

    /// Node i's fi_addr for node j: j itself.
    fn queue(&mut self, i: usize, j: usize, req: Req) {
        self.try_queue(i, j, req).expect("queue");
    }

    /// [`queue`](Self::queue), its refusal as it comes.
    fn try_queue(&mut self, i: usize, j: usize, req: Req) -> Result<(), i32> {
        let to = self.nodes[j].addr.clone();
        let now = self.net.now;
        self.nodes[i].rdm.queue(now, j as u64, &to, req)
    }

    /// A send from node i to node j as a driver posts it: the fast path
    /// first, the queue when it declines. Ok(true): complete at once.
    fn post(&mut self, i: usize, j: usize, req: SendReq) -> Result<bool, i32> {
        if self.send_now(i, j, &req) {
            return Ok(true);
        }
        self.try_queue(i, j, Req::Send(req))?;
        Ok(false)
    }

    /// Runs for `d` of virtual time.
    fn run_for(&mut self, d: Duration) {
        self.run_for_with(d, |_| {});
    }

    /// [`run_for`](Self::run_for), calling `check` after every step.
    fn run_for_with(&mut self, d: Duration, check: impl Fn(&World)) {
        let end = self.net.now + d;
        for _ in 0..20_000_000 {
            let moved = self.step();
            check(self);
            if moved {
                continue;
            }
            if self.net.now >= end {
                return;
            }
            let next = self
                .nodes
                .iter()
                .filter_map(|n| n.rdm.poll_timeout())
                .chain(self.net.next_at())
                .min()
                .unwrap_or(end)
                .min(end);
            self.net.now = next.max(self.net.now);
        }
        panic!("too many steps");
    }

    /// Node i's peer-down events.
    fn downs(&self, i: usize) -> Vec<&RdmEvent> {
        self.nodes[i]
            .events
            .iter()
            .filter(|e| matches!(e, RdmEvent::PeerDown { .. }))
            .collect()
    }

    /// Node i's fast path of a small send to node j (`Rdm::send_now`):
    /// true when it took the send (complete, with no event to follow).
    fn send_now(&mut self, i: usize, j: usize, req: &SendReq) -> bool {
        let to = self.nodes[j].addr.clone();
        let now = self.net.now;
        let net = &mut self.net;
        let n = &mut self.nodes[i];
        let peer = n.rdm.peer(&to);
        let from = n.addr.clone();
        let reader = n.host.clone();
        let mut host = n.host.clone();
        n.rdm
            .send_now(
                now,
                j as u64,
                peer,
                req,
                &mut host,
                &mut |to: &[u8], parts: &[Part<'_>]| {
                    let mut d = Vec::new();
                    for p in parts {
                        match p {
                            Part::Bytes(b) => d.extend_from_slice(b),
                            Part::Iov(v) => {
                                let mut b = vec![0u8; v.len];
                                reader.clone().read(*v, &mut b);
                                d.extend_from_slice(&b);
                            }
                        }
                    }
                    net.send(&from, to, &d);
                },
            )
            .is_some()
    }

    fn step(&mut self) -> bool {
        let now = self.net.now;
        let mut moved = false;
        let names: Vec<Vec<u8>> = self.nodes.iter().map(|n| n.addr.clone()).collect();
        let resolve = |a: &[u8]| {
            names
                .iter()
                .position(|n| n == a)
                .map_or(FI_ADDR_NOTAVAIL, |i| i as u64)
        };
        for n in self.nodes.iter_mut() {
            let net = &mut self.net;
            let from = n.addr.clone();
            let reader = n.host.clone();
            let mut host = n.host.clone();
            n.rdm
                .poll_transmit(now, &mut host, &mut |to: &[u8], parts: &[Part<'_>]| {
                    let mut d = Vec::new();
                    for p in parts {
                        match p {
                            Part::Bytes(b) => d.extend_from_slice(b),
                            Part::Iov(v) => {
                                let mut b = vec![0u8; v.len];
                                reader.clone().read(*v, &mut b);
                                d.extend_from_slice(&b);
                            }
                        }
                    }
                    net.send(&from, to, &d);
                    moved = true;
                });
        }
        while let Some((from, to, bytes)) = self.net.deliver() {
            moved = true;
            let Some(n) = self.nodes.iter_mut().find(|n| n.addr == to) else {
                continue;
            };
            let mut host = n.host.clone();
            n.rdm
                .on_datagram(now, &from, &bytes, &mut host, &mut |a: &[u8]| resolve(a));
        }
        for n in self.nodes.iter_mut() {
            if n.rdm.poll_timeout().is_some_and(|t| t <= now) {
                n.rdm.handle_timeout(now, &mut |a: &[u8]| resolve(a));
                moved = true;
            }
            let mut host = n.host.clone();
            n.rdm.wakeups(&mut host);
            while let Some(e) = n.rdm.poll_event() {
                n.events.push(e);
            }
            while let Some(mut e) = n.rdm.rx().poll_event() {
                if let Event::RecvComplete(d) = &mut e {
                    if let Some(c) = d.copy.take() {
                        n.host.mem.borrow_mut().scatter(c.iov(), c.offset, &c.bytes);
                    }
                }
                n.rx_events.push(e);
            }
        }
        moved
    }

    fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&World) -> bool) {
        let end = self.net.now + limit;
        for _ in 0..20_000_000 {
            if done(self) {
                return;
            }
            if self.step() || done(self) {
                continue;
            }
            let next = self
                .nodes
                .iter()
                .filter_map(|n| n.rdm.poll_timeout())
                .chain(self.net.next_at())
                .min();
            match next {
                Some(t) if t > self.net.now => self.net.now = t,
                Some(_) => {}
                None => self.net.now += Duration::from_millis(1),
            }
            assert!(
                self.net.now <= end,
                "not done within {limit:?} of virtual time"
            );
        }
        panic!("too many steps");
    }

    fn recv_done(&self, i: usize, ctx: usize) -> Option<&Event> {
        self.nodes[i].rx_events.iter().find(|e| match e {
            Event::RecvComplete(d) => d.context == ctx,
            Event::RecvError { context, .. } => *context == ctx,
            _ => false,
        })
    }

    fn op_done(&self, i: usize, ctx: usize) -> Option<Result<(), i32>> {
        self.nodes[i].events.iter().find_map(|e| match e {
            RdmEvent::Op(Event::SendComplete { context } | Event::RmaComplete { context })
                if *context == ctx =>
            {
                Some(Ok(()))
            }
            RdmEvent::Op(Event::SendError { context, err } | Event::RmaError { context, err })
                if *context == ctx =>
            {
                Some(Err(*err))
            }
            _ => None,
        })
    }
}

const SIZES: [usize; 9] = [0, 1, 64, 4096, 4097, 16384, 16385, 70_000, 1 << 20];

#[test]
fn messages_of_every_path_land_intact_under_faults() {
    for (seed, f) in [
        (1, Faults::default()),
        (2, Faults::all(100)),
        (3, Faults::all(200)),
    ] {
        let mut w = World::new(seed, f, Duration::from_secs(600));
        let mut sent = Vec::new();
        let mut bufs = Vec::new();
        for (i, &len) in SIZES.iter().enumerate() {
            for (from, to) in [(0usize, 1usize), (1, 0)] {
                let seedv = (seed * 100 + i as u64) * 2 + from as u64;
                let src = w.nodes[from]
                    .host
                    .mem
                    .borrow_mut()
                    .alloc_pattern(len, seedv);
                let dst = w.nodes[to].host.mem.borrow_mut().alloc(len + 8);
                let ctx = 1000 * (from + 1) + i;
                let tag = 7 + i as u64;
                // Half the receives go first, half after the send.
                let recv = RecvReq::tagged(&[dst], tag, 0, ctx);
                if i % 2 == 0 {
                    w.nodes[to].rdm.rx().post_recv(&recv).unwrap();
                }
                w.queue(from, to, Req::Send(SendReq::tagged(&[src], tag, ctx)));
                if i % 2 == 1 {
                    w.run_until(Duration::from_secs(60), |_| true);
                    w.nodes[to].rdm.rx().post_recv(&recv).unwrap();
                }
                sent.push((from, to, ctx, len, seedv));
                bufs.push(dst);
            }
        }
        w.run_until(Duration::from_secs(600), |w| {
            sent.iter().all(|&(from, to, ctx, _, _)| {
                w.recv_done(to, ctx).is_some() && w.op_done(from, ctx).is_some()
            })
        });
        for (&(from, to, ctx, len, seedv), dst) in sent.iter().zip(&bufs) {
            match w.recv_done(to, ctx) {
                Some(Event::RecvComplete(d)) => assert_eq!(d.len, len, "seed {seed} ctx {ctx}"),
                e => panic!("seed {seed} ctx {ctx}: {e:?}"),
            }
            assert_eq!(w.op_done(from, ctx), Some(Ok(())), "seed {seed} send {ctx}");
            let got = w.nodes[to]
                .host
                .mem
                .borrow()
                .get(IoVec {
                    base: dst.base,
                    len,
                })
                .to_vec();
            assert!(
                got == tcp_common::pattern(seedv, len),
                "seed {seed}: message {ctx} of {len} bytes damaged"
            );
            assert!(
                w.nodes[to].host.mem.borrow().guards_intact(*dst),
                "seed {seed}: {ctx} overran"
            );
        }
        assert!(
            !w.nodes[0]
                .events
                .iter()
                .any(|e| matches!(e, RdmEvent::PeerDown { .. })),
            "seed {seed}: a live peer declared dead"
        );
    }
}

#[test]
fn rma_writes_and_reads_under_faults() {
    let mut w = World::new(4, Faults::all(100), Duration::from_secs(600));
    let t = SimTarget::new(true);
    w.nodes[1]
        .rdm
        .rx()
        .set_memory(Some(Box::new(tcp_common::SimMemory(t.clone()))));
    w.nodes[1].host.target = Some(t.clone());
    let region = t
        .lock()
        .unwrap()
        .register(5, 300_000, 77, FI_REMOTE_READ | FI_REMOTE_WRITE);
    let len = 250_000;
    let src = w.nodes[0].host.mem.borrow_mut().alloc_pattern(len, 9);
    let back = w.nodes[0].host.mem.borrow_mut().alloc(len);
    let remote = [Remote {
        addr: (region.buf.base + 1000) as u64,
        len: len as u64,
        key: 5,
    }];
    w.queue(0, 1, Req::Rma(RmaReq::write(&[src], &remote, 1)));
    w.queue(0, 1, Req::Rma(RmaReq::read(&[back], &remote, 2)));
    w.run_until(Duration::from_secs(600), |w| w.op_done(0, 2).is_some());
    assert_eq!(w.op_done(0, 1), Some(Ok(())));
    assert_eq!(w.op_done(0, 2), Some(Ok(())));
    let written = t
        .lock()
        .unwrap()
        .mem
        .get(IoVec {
            base: region.buf.base + 1000,
            len,
        })
        .to_vec();
    assert!(
        written == tcp_common::pattern(9, len),
        "the write landed damaged"
    );
    let read = w.nodes[0].host.mem.borrow().get(back).to_vec();
    assert!(read == written, "the read came back damaged");
    // A bad key fails at the initiator and writes nothing.
    let bad = [Remote {
        key: 99,
        ..remote[0]
    }];
    w.queue(0, 1, Req::Rma(RmaReq::write(&[src], &bad, 3)));
    w.run_until(Duration::from_secs(60), |w| w.op_done(0, 3).is_some());
    assert_eq!(w.op_done(0, 3), Some(Err(errno::FI_EKEYREJECTED)));
}

#[test]
fn large_sends_complete_on_acknowledgement_and_small_ones_when_staged() {
    let mut w = World::new(5, Faults::default(), Duration::from_secs(600));
    // Bring the session up first.
    let s0 = w.nodes[0].host.mem.borrow_mut().alloc_pattern(8, 1);
    w.queue(0, 1, Req::Send(SendReq::msg(&[s0], 1)));
    w.run_until(Duration::from_secs(10), |w| w.op_done(0, 1).is_some());
    // b stops taking anything: its receive side has no receive and a
    // large message's rendezvous waits unexpected; a small send still
    // completes at once.
    let small = w.nodes[0].host.mem.borrow_mut().alloc_pattern(100, 2);
    w.queue(0, 1, Req::Send(SendReq::msg(&[small], 2)));
    let mut host = w.nodes[0].host.clone();
    let now = w.net.now;
    w.nodes[0]
        .rdm
        .poll_transmit(now, &mut host, &mut |_: &[u8], _: &[Part<'_>]| {});
    while let Some(e) = w.nodes[0].rdm.poll_event() {
        w.nodes[0].events.push(e);
    }
    assert_eq!(
        w.op_done(0, 2),
        Some(Ok(())),
        "a small send completes when staged"
    );
    // An eager message above copy_max is sent from the user's buffer: it
    // completes only once b acknowledges it.
    let mid = w.nodes[0].host.mem.borrow_mut().alloc_pattern(10_000, 3);
    w.queue(0, 1, Req::Send(SendReq::msg(&[mid], 3)));
    w.net.cut = true;
    for _ in 0..50 {
        w.step();
        w.net.now += Duration::from_millis(1);
    }
    assert_eq!(w.op_done(0, 3), None, "completed before the peer had it");
    w.net.cut = false;
    w.run_until(Duration::from_secs(60), |w| w.op_done(0, 3).is_some());
    assert_eq!(w.op_done(0, 3), Some(Ok(())));
}

#[test]
fn a_silent_peer_fails_pending_operations_once() {
    let timeout = Duration::from_secs(2);
    let mut w = World::new(6, Faults::default(), timeout);
    let s = w.nodes[0].host.mem.borrow_mut().alloc_pattern(1 << 20, 1);
    let s2 = w.nodes[0].host.mem.borrow_mut().alloc_pattern(100, 2);
    let r = w.nodes[1].host.mem.borrow_mut().alloc(1 << 20);
    w.nodes[1]
        .rdm
        .rx()
        .post_recv(&RecvReq::msg(&[r], 9))
        .unwrap();
    w.queue(0, 1, Req::Send(SendReq::msg(&[s2], 1)));
    w.run_until(Duration::from_secs(10), |w| w.op_done(0, 1).is_some());
    w.queue(0, 1, Req::Send(SendReq::msg(&[s], 2)));
    w.net.cut = true;
    let cut = w.net.now;
    w.run_until(Duration::from_secs(30), |w| w.op_done(0, 2).is_some());
    assert_eq!(w.op_done(0, 2), Some(Err(errno::FI_ETIMEDOUT)));
    assert!(
        w.net.now <= cut + timeout + Duration::from_millis(50),
        "beyond the bound"
    );
    let downs: Vec<&RdmEvent> = w.nodes[0]
        .events
        .iter()
        .filter(|e| matches!(e, RdmEvent::PeerDown { .. }))
        .collect();
    assert_eq!(downs.len(), 1, "{downs:?}");
    assert!(matches!(
        downs[0],
        RdmEvent::PeerDown {
            fi_addr: 1,
            cause: Cause::TimedOut,
            ..
        }
    ));
}

#[test]
fn small_sends_on_the_fast_path_keep_their_order_under_faults() {
    for (seed, f) in [(7, Faults::default()), (8, Faults::all(100))] {
        let mut w = World::new(seed, f, Duration::from_secs(600));
        // No session yet: the fast path declines and the queue makes one.
        let s0 = w.nodes[0].host.mem.borrow_mut().alloc_pattern(8, 1);
        assert!(!w.send_now(0, 1, &SendReq::msg(&[s0], 1)));
        w.queue(0, 1, Req::Send(SendReq::msg(&[s0], 1)));
        let r0 = w.nodes[1].host.mem.borrow_mut().alloc(8);
        w.nodes[1]
            .rdm
            .rx()
            .post_recv(&RecvReq::msg(&[r0], 1))
            .unwrap();
        w.run_until(Duration::from_secs(60), |w| w.op_done(0, 1).is_some());
        // Small sends both ways, some taken by the fast path, some too big
        // for it (queued, and the fast path declines while they are ahead
        // in the stream): each lands in the receive posted for it, in order.
        let mut sent = Vec::new();
        let mut fast = 0;
        for k in 0..200usize {
            let (from, to) = if k % 3 == 2 { (1, 0) } else { (0, 1) };
            let len = match k % 7 {
                0 => 0,
                3 => 2000,
                5 => 256,
                _ => 1 + (k * 13) % 200,
            };
            let seedv = seed * 1000 + k as u64;
            let src = w.nodes[from]
                .host
                .mem
                .borrow_mut()
                .alloc_pattern(len, seedv);
            let dst = w.nodes[to].host.mem.borrow_mut().alloc(len + 8);
            let ctx = 10 + k;
            w.nodes[to]
                .rdm
                .rx()
                .post_recv(&RecvReq::msg(&[dst], ctx))
                .unwrap();
            let req = SendReq::msg(&[src], ctx);
            let taken = w.send_now(from, to, &req);
            if taken {
                fast += 1;
            } else {
                // As a driver does: what was queued is sent at once.
                w.queue(from, to, Req::Send(req));
                w.step();
            }
            sent.push((from, to, ctx, len, seedv, dst, taken));
            if k % 5 == 4 {
                for _ in 0..3 {
                    w.step();
                }
            }
        }
        assert!(
            fast > 50,
            "seed {seed}: the fast path took only {fast} sends"
        );
        w.run_until(Duration::from_secs(600), |w| {
            sent.iter().all(|&(from, to, ctx, _, _, _, taken)| {
                w.recv_done(to, ctx).is_some() && (taken || w.op_done(from, ctx).is_some())
            })
        });
        for &(from, to, ctx, len, seedv, dst, taken) in &sent {
            match w.recv_done(to, ctx) {
                Some(Event::RecvComplete(d)) => assert_eq!(d.len, len, "seed {seed} ctx {ctx}"),
                e => panic!("seed {seed} ctx {ctx}: {e:?}"),
            }
            if taken {
                assert_eq!(w.op_done(from, ctx), None, "a fast send has no event");
            } else {
                assert_eq!(w.op_done(from, ctx), Some(Ok(())), "seed {seed} send {ctx}");
            }
            let got = w.nodes[to]
                .host
                .mem
                .borrow()
                .get(IoVec {
                    base: dst.base,
                    len,
                })
                .to_vec();
            assert!(
                got == tcp_common::pattern(seedv, len),
                "seed {seed}: message {ctx} of {len} bytes damaged or out of order"
            );
        }
    }
}

/// Node `i`'s completed sends and their results, by context.
fn sends_done(w: &World, i: usize) -> Vec<(usize, Result<(), i32>)> {
    w.nodes[i]
        .events
        .iter()
        .filter_map(|e| match e {
            RdmEvent::Op(Event::SendComplete { context }) => Some((*context, Ok(()))),
            RdmEvent::Op(Event::SendError { context, err }) => Some((*context, Err(*err))),
            _ => None,
        })
        .collect()
}

#[test]
fn sends_to_peers_that_take_nothing_stay_bounded_and_posts_answer_eagain() {
    // b and c are alive but post no receive: their unexpected budgets
    // fill, their windows close. a's small sends complete when copied,
    // within a copy budget per peer and one for the endpoint; beyond
    // them sends wait for acknowledgements, and once tx_size of them
    // wait a post answers FI_EAGAIN (flow control: no completion error).
    // When the receivers post, everything accepted arrives in order.
    const TX: usize = 48;
    const PEER: usize = 24 << 10;
    const TOTAL: usize = 40 << 10;
    let tweak = |c: &mut RdmConfig| {
        c.tx_size = TX;
        c.copy_budget = PEER;
        c.copy_total = TOTAL;
        c.rx.max_unexpected_bytes = 32 << 10;
        c.session.chan.window = 64 << 10;
    };
    let t = Duration::from_secs(600);
    let mut w = World::of(
        11,
        Faults::default(),
        vec![
            node_with("a", 1, t, tweak),
            node_with("b", 2, t, tweak),
            node_with("c", 3, t, tweak),
        ],
    );
    // Sessions up.
    for j in [1, 2] {
        let s = w.nodes[0].host.mem.borrow_mut().alloc_pattern(8, j as u64);
        let r = w.nodes[j].host.mem.borrow_mut().alloc(8);
        w.nodes[j]
            .rdm
            .rx()
            .post_recv(&RecvReq::msg(&[r], 1))
            .unwrap();
        w.queue(0, j, Req::Send(SendReq::msg(&[s], j)));
        w.run_until(Duration::from_secs(10), |w| w.recv_done(j, 1).is_some());
    }
    // Fast-path sizes and queued ones, to b and c in turn, until refused.
    let mut accepted: Vec<(usize, usize, usize, u64)> = Vec::new();
    let mut queued = Vec::new();
    let mut refused = 0;
    let slack = 4096 + 256;
    for k in 0..20_000usize {
        let to = 1 + k % 2;
        let len = if k % 3 == 0 { 200 } else { 1000 };
        let seedv = 1000 + k as u64;
        let src = w.nodes[0].host.mem.borrow_mut().alloc_pattern(len, seedv);
        let ctx = 100 + k;
        match w.post(0, to, SendReq::msg(&[src], ctx)) {
            Ok(fast) => {
                accepted.push((to, ctx, len, seedv));
                if !fast {
                    queued.push(ctx);
                }
            }
            Err(e) => {
                assert_eq!(e, errno::FI_EAGAIN, "a post refused for another reason");
                refused += 1;
                if refused == 20 {
                    break;
                }
            }
        }
        w.run_for(Duration::from_micros(300));
        let copied = w.nodes[0].rdm.copied();
        assert!(
            copied <= TOTAL + slack,
            "after {} sends a holds {copied} bytes of copies",
            accepted.len()
        );
    }
    assert!(
        refused > 0,
        "{} sends accepted for peers that take nothing, none refused",
        accepted.len()
    );
    assert!(
        accepted.len() < 2000,
        "{} sends accepted for peers that take nothing",
        accepted.len()
    );
    // A while later nothing changed: no error completion, a stays bounded.
    w.run_for(Duration::from_secs(5));
    assert!(
        sends_done(&w, 0).iter().all(|(_, r)| r.is_ok()),
        "{:?}",
        sends_done(&w, 0)
    );
    assert!(w.downs(0).is_empty(), "live peers declared dead");
    // The receivers post: every accepted send arrives, in order, intact.
    let mut dsts = Vec::new();
    for &(to, ctx, len, _) in &accepted {
        let d = w.nodes[to].host.mem.borrow_mut().alloc(len);
        w.nodes[to]
            .rdm
            .rx()
            .post_recv(&RecvReq::msg(&[d], ctx))
            .unwrap();
        dsts.push(d);
    }
    w.run_until(Duration::from_secs(60), |w| {
        accepted
            .iter()
            .all(|&(to, ctx, _, _)| w.recv_done(to, ctx).is_some())
            && queued.iter().all(|&ctx| w.op_done(0, ctx).is_some())
    });
    assert_eq!(w.nodes[0].rdm.pending(), 0);
    for (&(to, ctx, len, seedv), d) in accepted.iter().zip(&dsts) {
        match w.recv_done(to, ctx) {
            Some(Event::RecvComplete(r)) => assert_eq!(r.len, len),
            e => panic!("{ctx}: {e:?}"),
        }
        let got = w.nodes[to].host.mem.borrow().get(*d).to_vec();
        assert!(
            got == tcp_common::pattern(seedv, len),
            "{ctx} out of order or damaged"
        );
    }
    let done = sends_done(&w, 0);
    // (And the two that brought the sessions up.)
    assert_eq!(
        done.len(),
        queued.len() + 2,
        "one completion per queued send"
    );
    assert!(done.iter().all(|(_, r)| r.is_ok()), "{done:?}");
    // Flow control lifted: a post is taken again.
    let src = w.nodes[0].host.mem.borrow_mut().alloc_pattern(1000, 7);
    assert!(w.post(0, 1, SendReq::msg(&[src], 99_999)).is_ok());
}

#[test]
fn a_peer_that_acknowledges_nothing_is_dead_though_every_send_completed() {
    let timeout = Duration::from_secs(2);
    let mut w = World::new(12, Faults::default(), timeout);
    let s0 = w.nodes[0].host.mem.borrow_mut().alloc_pattern(8, 1);
    let r0 = w.nodes[1].host.mem.borrow_mut().alloc(8);
    w.nodes[1]
        .rdm
        .rx()
        .post_recv(&RecvReq::msg(&[r0], 1))
        .unwrap();
    w.queue(0, 1, Req::Send(SendReq::msg(&[s0], 1)));
    w.run_until(Duration::from_secs(10), |w| w.recv_done(1, 1).is_some());
    // Well after the handshake: b's acknowledgements confirmed the session.
    w.run_for(Duration::from_millis(100));
    // b goes silent (its host is cut off); a's small sends complete at
    // once all the same: only the peer's silence can tell a.
    w.net.cut = true;
    let cut = w.net.now;
    for k in 0..5usize {
        let s = w.nodes[0]
            .host
            .mem
            .borrow_mut()
            .alloc_pattern(500, 10 + k as u64);
        assert!(w.post(0, 1, SendReq::msg(&[s], 10 + k)).is_ok());
        w.step();
    }
    w.run_until(Duration::from_secs(1), |w| {
        (10..15).all(|c| w.op_done(0, c).is_some())
    });
    assert!((10..15).all(|c| w.op_done(0, c) == Some(Ok(()))));
    w.run_until(Duration::from_secs(30), |w| !w.downs(0).is_empty());
    let downs = w.downs(0);
    assert_eq!(downs.len(), 1, "{downs:?}");
    assert!(matches!(
        downs[0],
        RdmEvent::PeerDown {
            fi_addr: 1,
            cause: Cause::TimedOut,
            ..
        }
    ));
    assert!(
        w.net.now <= cut + timeout + Duration::from_millis(50),
        "declared dead {:?} after the silence began",
        w.net.now - cut
    );
    assert_eq!(w.nodes[0].rdm.copied(), 0, "copies kept for a dead peer");
    // A later send to the dead peer fails the usual way (its handshake is
    // not answered), it does not wait forever.
    let s = w.nodes[0].host.mem.borrow_mut().alloc_pattern(100, 3);
    w.queue(0, 1, Req::Send(SendReq::msg(&[s], 20)));
    w.run_until(Duration::from_secs(30), |w| w.op_done(0, 20).is_some());
    assert_eq!(w.op_done(0, 20), Some(Err(errno::FI_ETIMEDOUT)));
}

/// True when node `i` keeps nothing of its peers: no live session, no
/// link.
fn forgot_everyone(w: &World, i: usize) -> bool {
    w.nodes[i].rdm.sessions().live() == 0 && w.nodes[i].rdm.links() == 0
}

#[test]
fn idle_sessions_expire_on_both_sides_and_come_back_without_loss() {
    let idle = Duration::from_secs(10);
    let timeout = Duration::from_secs(3);
    for (seed, f) in [
        (13, Faults::default()),
        (14, Faults::all(100)),
        (15, Faults::all(200)),
    ]
    .into_iter()
    .chain((100..110).map(|s| (s, Faults::all((s % 4) as u32 * 40))))
    {
        let tweak = |c: &mut RdmConfig| c.session.idle_timeout = idle;
        let mut w = World::of(
            seed,
            f,
            vec![
                node_with("a", 1, timeout, tweak),
                node_with("b", 2, timeout, tweak),
            ],
        );
        let mut rng = Rng::new(seed);
        let mut ctx = 1usize;
        let mut expired = 0;
        for round in 0..40 {
            // One or two messages (both ways at once, sometimes), of a
            // size that is copied, sent in place or by rendezvous.
            let dirs: &[(usize, usize)] = match rng.below(3) {
                0 => &[(0, 1)],
                1 => &[(1, 0)],
                _ => &[(0, 1), (1, 0)],
            };
            let mut this = Vec::new();
            for &(from, to) in dirs {
                let len = [0usize, 100, 3000, 9000, 40_000][rng.below(5) as usize];
                let seedv = seed * 10_000 + ctx as u64;
                let src = w.nodes[from]
                    .host
                    .mem
                    .borrow_mut()
                    .alloc_pattern(len, seedv);
                let dst = w.nodes[to].host.mem.borrow_mut().alloc(len);
                w.nodes[to]
                    .rdm
                    .rx()
                    .post_recv(&RecvReq::msg(&[dst], ctx))
                    .unwrap();
                let fast = w.post(from, to, SendReq::msg(&[src], ctx)).expect("post");
                this.push((from, to, ctx, len, seedv, dst, fast));
                ctx += 1;
            }
            w.run_until(Duration::from_secs(60), |w| {
                this.iter().all(|&(from, to, c, _, _, _, fast)| {
                    w.recv_done(to, c).is_some() && (fast || w.op_done(from, c).is_some())
                })
            });
            for &(from, to, c, len, seedv, dst, fast) in &this {
                match w.recv_done(to, c) {
                    Some(Event::RecvComplete(r)) => assert_eq!(r.len, len),
                    e => panic!("seed {seed} round {round}: {c}: {e:?}"),
                }
                if !fast {
                    assert_eq!(
                        w.op_done(from, c),
                        Some(Ok(())),
                        "seed {seed} round {round}"
                    );
                }
                let got = w.nodes[to].host.mem.borrow().get(dst).to_vec();
                assert!(
                    got == tcp_common::pattern(seedv, len),
                    "seed {seed}: {c} damaged"
                );
            }
            // Quiet for a while: around the idle bound, either side of it.
            let quiet = idle.mul_f64(rng.below(3000) as f64 / 1000.0);
            w.run_for(quiet);
            // Idle from about now: asked to end at the bound, and ended
            // within the dead bound after that whatever the network does.
            if quiet > idle + timeout + Duration::from_secs(1) {
                assert!(
                    forgot_everyone(&w, 0) && forgot_everyone(&w, 1),
                    "seed {seed} round {round}: idle {quiet:?} and still kept: a {} / {} b {} / {}",
                    w.nodes[0].rdm.sessions().live(),
                    w.nodes[0].rdm.links(),
                    w.nodes[1].rdm.sessions().live(),
                    w.nodes[1].rdm.links(),
                );
                expired += 1;
            }
        }
        assert!(expired > 5, "seed {seed}: only {expired} rounds expired");
        for i in 0..2 {
            assert!(w.downs(i).is_empty(), "seed {seed}: {:?}", w.downs(i));
            assert!(
                w.nodes[i].events.iter().all(|e| !matches!(
                    e,
                    RdmEvent::Op(Event::SendError { .. } | Event::RmaError { .. })
                )),
                "seed {seed}: an operation failed"
            );
        }
    }
}

#[test]
fn live_peers_are_bounded_and_idle_ones_make_room() {
    for seed in 16..24 {
        bounded_hub(seed);
    }
}

fn bounded_hub(seed: u64) {
    // A hub that keeps at most three live peers; eight leaves speak to it
    // one after the other and stay quiet afterwards (their sessions idle,
    // far from the idle bound). The hub ends the least recently active
    // idle session to make room for each newcomer; every message arrives.
    const MAX: usize = 3;
    let timeout = Duration::from_secs(2);
    let mut nodes = vec![node_with("hub", 1, timeout, |c| c.session.max_peers = MAX)];
    for i in 0..8u64 {
        nodes.push(node(&format!("leaf{i}"), 10 + i, timeout));
    }
    let mut w = World::of(seed, Faults::all(50), nodes);
    let check = |w: &World| {
        let hub = &w.nodes[0].rdm;
        assert!(
            hub.sessions().live() <= MAX && hub.links() <= MAX,
            "the hub keeps {} live sessions and {} links",
            hub.sessions().live(),
            hub.links()
        );
    };
    for i in 1..9usize {
        let len = 300 * i;
        let src = w.nodes[i]
            .host
            .mem
            .borrow_mut()
            .alloc_pattern(len, i as u64);
        let dst = w.nodes[0].host.mem.borrow_mut().alloc(len);
        w.nodes[0]
            .rdm
            .rx()
            .post_recv(&RecvReq::msg(&[dst], i))
            .unwrap();
        w.queue(i, 0, Req::Send(SendReq::msg(&[src], i)));
        w.run_until(Duration::from_secs(30), |w| {
            check(w);
            w.recv_done(0, i).is_some()
        });
        let got = w.nodes[0].host.mem.borrow().get(dst).to_vec();
        assert!(
            got == tcp_common::pattern(i as u64, len),
            "leaf {i}'s message damaged"
        );
        w.run_for_with(Duration::from_millis(200), check);
    }
    // The hub speaks to every leaf in turn: a post to a new peer while
    // every slot is taken answers FI_EAGAIN until one is free.
    let mut eagain = 0;
    for i in 1..9usize {
        let src = w.nodes[0]
            .host
            .mem
            .borrow_mut()
            .alloc_pattern(64, 100 + i as u64);
        let dst = w.nodes[i].host.mem.borrow_mut().alloc(64);
        w.nodes[i]
            .rdm
            .rx()
            .post_recv(&RecvReq::msg(&[dst], 100 + i))
            .unwrap();
        loop {
            match w.try_queue(0, i, Req::Send(SendReq::msg(&[src], 100 + i))) {
                Ok(()) => break,
                Err(e) => {
                    assert_eq!(e, errno::FI_EAGAIN);
                    eagain += 1;
                    assert!(eagain < 100_000, "never a free slot");
                    w.step();
                    check(&w);
                    w.net.now += Duration::from_micros(100);
                }
            }
        }
        w.run_until(Duration::from_secs(30), |w| {
            check(w);
            w.recv_done(i, 100 + i).is_some()
        });
    }
    for i in 0..9 {
        assert!(w.downs(i).is_empty(), "node {i}: {:?}", w.downs(i));
        assert!(
            sends_done(&w, i).iter().all(|(_, r)| r.is_ok()),
            "node {i}: {:?}",
            sends_done(&w, i)
        );
    }
}
