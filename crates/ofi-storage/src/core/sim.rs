//! Both cores run against each other in memory: a volume in a `Vec`, the
//! initiators' registered buffers as `Vec`s behind keys, RMA as bounds- and
//! key-checked copies, and capsules queued per direction. Actions can be
//! held back and run in any order, peers can be killed and can inject raw
//! capsules, so tests and the fuzzer reach the interleavings a real fabric
//! produces. Every I/O the target core asks for is checked to lie inside
//! the volume and its staging slot (a violation panics: the fuzzer's
//! oracle).

use super::initiator::{Event, InitiatorCore, Request, SubmitError};
use super::target::{Action, Io, OpId, PeerId, TargetConfig, TargetCore};
use crate::wire::{Op, Status, CAPSULE_LEN};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// An initiator of the simulation.
#[derive(Debug)]
pub struct SimInitiator {
    /// Its core.
    pub core: InitiatorCore,
    /// Its registered buffer memory.
    pub mem: Vec<u8>,
    /// The key of `mem`.
    pub key: u64,
    /// Capsules from the target, not yet delivered.
    pub inbox: VecDeque<[u8; CAPSULE_LEN]>,
    /// Completed requests (user tag, status).
    pub done: Vec<(u64, Status)>,
    /// The session's failure, if it ended.
    pub failed: Option<String>,
    /// The target dropped or released it.
    pub gone: bool,
    token: u64,
}

/// Target, volume and initiators in one deterministic world.
#[derive(Debug)]
pub struct Sim {
    /// The target core.
    pub target: TargetCore,
    /// The volume's bytes.
    pub volume: Vec<u8>,
    /// Staging slots.
    pub slots: Vec<Vec<u8>>,
    /// Initiators, indexed by their peer id.
    pub inits: Vec<SimInitiator>,
    /// Capsules to the target, not yet delivered: (peer, bytes).
    pub to_target: VecDeque<(PeerId, Vec<u8>)>,
    /// Actions of the target not yet executed.
    pub held: VecDeque<Action>,
    /// Reasons the target gave for dropping peers.
    pub drops: Vec<(PeerId, String)>,
    /// Peers the target released.
    pub released: Vec<PeerId>,
    /// Syncs executed.
    pub syncs: u32,
    /// Simulated clock.
    pub now: Instant,
}

/// FI_EACCES as the simulated fabric reports a bad key or range.
const EACCES: i32 = 13;

impl Sim {
    /// A target over a zero-filled volume of `cfg.size` bytes.
    pub fn new(cfg: TargetConfig) -> Sim {
        let target = TargetCore::new(cfg);
        let c = *target.config();
        Sim {
            volume: vec![0; c.size as usize],
            slots: vec![vec![0; c.max_io as usize]; c.slots as usize],
            target,
            inits: Vec::new(),
            to_target: VecDeque::new(),
            held: VecDeque::new(),
            drops: Vec::new(),
            released: Vec::new(),
            syncs: 0,
            now: Instant::now(),
        }
    }

    /// Adds an initiator with `mem` bytes of buffer; it sends CONNECT
    /// asking for `qd` credits. Returns its index (its peer id).
    pub fn add_initiator(&mut self, mem: usize, qd: u32, max_io: u32) -> usize {
        let i = self.inits.len();
        let token = 0x1000 + i as u64;
        let peer = PeerId(i as u64);
        self.target.expect(peer, token);
        let mut core = InitiatorCore::new(Duration::from_secs(30));
        let c = core.connect(token, qd, max_io, self.now);
        self.to_target.push_back((peer, c.to_vec()));
        self.inits.push(SimInitiator {
            core,
            mem: vec![0; mem],
            key: 0x5eed_0000 + i as u64,
            inbox: VecDeque::new(),
            done: Vec::new(),
            failed: None,
            gone: false,
            token,
        });
        i
    }

    /// The CONNECT token of initiator `i`.
    pub fn token(&self, i: usize) -> u64 {
        self.inits[i].token
    }

    /// Submits a request from initiator `i` (its buffer is `mem[addr..]`).
    pub fn submit(&mut self, i: usize, r: Request, user: u64) -> Result<(), SubmitError> {
        let now = self.now;
        let init = &mut self.inits[i];
        let r = Request { key: init.key, ..r };
        let c = init.core.submit(&r, user, now)?;
        self.to_target.push_back((PeerId(i as u64), c.to_vec()));
        Ok(())
    }

    /// Injects raw bytes as a capsule from peer `i`.
    pub fn inject(&mut self, i: usize, bytes: &[u8]) {
        self.to_target.push_back((PeerId(i as u64), bytes.to_vec()));
    }

    /// Kills initiator `i` (its control channel closes at the target).
    pub fn kill(&mut self, i: usize) {
        self.target.close(PeerId(i as u64));
        let init = &mut self.inits[i];
        init.core.fail("killed".into(), Status::Disconnected);
        init.gone = true;
        self.collect();
    }

    fn collect(&mut self) {
        while let Some(a) = self.target.poll_action() {
            self.held.push_back(a);
        }
        for init in &mut self.inits {
            while let Some(e) = init.core.poll_event() {
                match e {
                    Event::Done { user, status } => init.done.push((user, status)),
                    Event::Failed { reason } => init.failed = Some(reason),
                    Event::Connected(_) | Event::Refused(_) => {}
                }
            }
        }
    }

    /// Delivers the first capsule queued to the target. False if none.
    pub fn deliver_to_target(&mut self) -> bool {
        let Some((p, b)) = self.to_target.pop_front() else {
            return false;
        };
        self.target.on_capsule(p, &b);
        self.collect();
        true
    }

    /// Delivers the first capsule queued to initiator `i`. False if none.
    pub fn deliver_to_initiator(&mut self, i: usize) -> bool {
        let Some(b) = self.inits[i].inbox.pop_front() else {
            return false;
        };
        self.inits[i].core.on_capsule(&b);
        self.collect();
        true
    }

    /// Executes the held action at `pick` (modulo their number). False if none.
    pub fn run_action(&mut self, pick: usize) -> bool {
        if self.held.is_empty() {
            return false;
        }
        let i = pick % self.held.len();
        let Some(a) = self.held.remove(i) else {
            return false;
        };
        self.execute(a);
        self.collect();
        true
    }

    fn rma(
        &mut self,
        peer: PeerId,
        slot: u32,
        len: u32,
        addr: u64,
        key: u64,
        read: bool,
    ) -> Result<(), i32> {
        let s = &mut self.slots[slot as usize];
        assert!(
            len as usize <= s.len(),
            "RMA of {len} bytes beyond a staging slot"
        );
        let Some(init) = self.inits.get_mut(peer.0 as usize) else {
            return Err(EACCES);
        };
        if init.gone {
            return Err(104);
        }
        let (a, l) = (addr as usize, len as usize);
        if key != init.key || addr > init.mem.len() as u64 || a + l > init.mem.len() {
            return Err(EACCES);
        }
        if read {
            s[..l].copy_from_slice(&init.mem[a..a + l]);
        } else {
            init.mem[a..a + l].copy_from_slice(&s[..l]);
        }
        Ok(())
    }

    fn range(&self, offset: u64, len: u32) -> std::ops::Range<usize> {
        let end = offset
            .checked_add(len as u64)
            .expect("offset + len overflows");
        assert!(
            end <= self.volume.len() as u64,
            "I/O [{offset}, +{len}) outside the volume"
        );
        offset as usize..end as usize
    }

    fn execute(&mut self, a: Action) {
        match a {
            Action::Send { peer, capsule } => {
                if let Some(init) = self.inits.get_mut(peer.0 as usize) {
                    if !init.gone {
                        init.inbox.push_back(capsule);
                    }
                }
            }
            Action::RmaRead {
                op,
                peer,
                slot,
                len,
                addr,
                key,
            } => {
                let r = self.rma(peer, slot, len, addr, key, true);
                self.target.rma_done(op, r);
            }
            Action::RmaWrite {
                op,
                peer,
                slot,
                len,
                addr,
                key,
            } => {
                let r = self.rma(peer, slot, len, addr, key, false);
                self.target.rma_done(op, r);
            }
            Action::Io { op, io } => self.io(op, io),
            Action::Disconnect { peer, reason } => {
                if let Some(r) = reason {
                    self.drops.push((peer, r));
                }
                if let Some(init) = self.inits.get_mut(peer.0 as usize) {
                    init.core
                        .fail("dropped by the target".into(), Status::Disconnected);
                    init.gone = true;
                }
            }
            Action::Released { peer } => self.released.push(peer),
        }
    }

    fn io(&mut self, op: OpId, io: Io) {
        match io {
            Io::Read { slot, offset, len } => {
                let r = self.range(offset, len);
                let s = &mut self.slots[slot as usize];
                assert!(len as usize <= s.len());
                s[..len as usize].copy_from_slice(&self.volume[r]);
            }
            Io::Write {
                slot, offset, len, ..
            } => {
                let r = self.range(offset, len);
                let s = &self.slots[slot as usize];
                assert!(len as usize <= s.len());
                self.volume[r].copy_from_slice(&s[..len as usize]);
            }
            Io::Sync => self.syncs += 1,
            Io::Trim { offset, len } => {
                let _ = self.range(offset, len);
            }
            Io::Zero { offset, len, .. } => {
                let r = self.range(offset, len);
                self.volume[r].fill(0);
            }
        }
        self.target.io_done(op, Ok(()));
    }

    /// Runs everything queued, in order, until nothing moves.
    pub fn settle(&mut self) {
        for _ in 0..1_000_000 {
            let mut moved = self.deliver_to_target();
            moved |= self.run_action(0);
            for i in 0..self.inits.len() {
                moved |= self.deliver_to_initiator(i);
            }
            if !moved {
                return;
            }
        }
        panic!("the simulation does not settle");
    }

    /// Interprets fuzz bytes as a schedule: submissions of every kind,
    /// raw capsules, deliveries in any order, kills and new initiators.
    /// Checks at the end that every credit and slot came back once every
    /// session is gone.
    pub fn fuzz(data: &[u8]) {
        let cfg = TargetConfig {
            size: 64 << 10,
            max_io: 8 << 10,
            slots: 3,
            credits: 8,
            max_queue_depth: 4,
            ..TargetConfig::default()
        };
        let mut sim = Sim::new(cfg);
        sim.add_initiator(16 << 10, 4, 8 << 10);
        sim.add_initiator(16 << 10, 8, 4 << 10);
        let mut it = data.iter().copied();
        let mut user = 0u64;
        while let Some(b) = it.next() {
            let mut arg = || it.next().unwrap_or(0) as u64;
            let n = sim.inits.len();
            match b % 10 {
                0 | 1 => {
                    let i = arg() as usize % n;
                    let op = [Op::Read, Op::Write, Op::Flush, Op::Trim, Op::WriteZeroes]
                        [arg() as usize % 5];
                    let offset = arg() * 512 + arg();
                    let len = (arg() * 256 + arg()) as u32;
                    let addr = arg() * 64;
                    let r = Request {
                        op,
                        fua: arg() & 1 == 1,
                        no_hole: false,
                        offset,
                        len,
                        addr,
                        key: 0,
                    };
                    user += 1;
                    let _ = sim.submit(i, r, user);
                }
                2 => {
                    let i = arg() as usize % (n + 1);
                    let mut c = [0u8; CAPSULE_LEN];
                    for x in c.iter_mut() {
                        *x = arg() as u8;
                    }
                    // Mostly valid headers, so the fields get exercised.
                    if arg() & 1 == 0 {
                        c[0] = crate::wire::VERSION;
                        c[3] = 0;
                    }
                    sim.inject(i, &c);
                }
                3 => {
                    sim.deliver_to_target();
                }
                4 => {
                    let p = arg() as usize;
                    sim.run_action(p);
                }
                5 => {
                    let i = arg() as usize % n;
                    sim.deliver_to_initiator(i);
                }
                6 => {
                    let i = arg() as usize % n;
                    sim.kill(i);
                }
                7 if n < 6 => {
                    sim.add_initiator(8 << 10, (arg() % 6) as u32 + 1, (arg() as u32 + 1) * 512);
                }
                8 => {
                    // A CONNECT with the right token but again, or the wrong one.
                    let i = arg() as usize % n;
                    let t = sim.token(i) ^ (arg() & 1);
                    let c = crate::wire::Repr::Connect {
                        token: t,
                        queue_depth: 2,
                        max_io: 4096,
                    };
                    sim.inject(i, &c.to_bytes());
                }
                _ => {
                    let mut k = 0;
                    while k < 8 && sim.run_action(arg() as usize) {
                        k += 1;
                    }
                }
            }
        }
        sim.settle();
        for i in 0..sim.inits.len() {
            sim.kill(i);
        }
        sim.settle();
        assert_eq!(
            sim.target.sessions(),
            0,
            "sessions left after every peer is gone"
        );
        assert_eq!(
            sim.target.running(),
            0,
            "commands left after every peer is gone"
        );
        assert_eq!(sim.target.slots_busy(), 0, "staging slots leaked");
        assert_eq!(sim.target.credits_free(), cfg.credits, "credits leaked");
    }
}
