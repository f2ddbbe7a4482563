//! The target's protocol core: capsules in, actions out (capsules to send,
//! RMA to start, backing-store I/O to run), completions of those actions
//! in. No fabric, no files, no clock: the driver does every I/O and feeds
//! the results back, so the core runs deterministically under tests and
//! the fuzzer.
//!
//! What it enforces: a session opens only with the token its control
//! channel handed out; a session never has more commands outstanding than
//! the credits it was granted; no READ or WRITE moves more than the
//! session's `max_io`; no byte outside `[0, size)` is ever read or written
//! (a range outside is answered with [`Status::OutOfRange`]); a read-only
//! volume refuses every change. A capsule that breaks the protocol makes
//! the core drop the session ([`Action::Disconnect`] with the reason).

use crate::wire::{feature, Accept, Command, Op, Repr, Status, CAPSULE_LEN};
use ofi_core::util::slab::Slab;
use std::collections::{HashMap, HashSet, VecDeque};

/// A peer as the driver names it (one per control session; never reused).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PeerId(pub u64);

/// A command in progress at the target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OpId(pub u32);

/// Work on the backing store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Io {
    /// Read `len` bytes at `offset` into staging slot `slot`.
    Read {
        /// Staging slot.
        slot: u32,
        /// Volume offset.
        offset: u64,
        /// Bytes.
        len: u32,
    },
    /// Write `len` bytes of staging slot `slot` at `offset`; durable
    /// before done when `fua`.
    Write {
        /// Staging slot.
        slot: u32,
        /// Volume offset.
        offset: u64,
        /// Bytes.
        len: u32,
        /// Force unit access.
        fua: bool,
    },
    /// Make every write done so far durable.
    Sync,
    /// Deallocate a range (advisory).
    Trim {
        /// Volume offset.
        offset: u64,
        /// Bytes.
        len: u32,
    },
    /// Zero a range; `may_trim`: it may be deallocated.
    Zero {
        /// Volume offset.
        offset: u64,
        /// Bytes.
        len: u32,
        /// Force unit access.
        fua: bool,
        /// Deallocating is allowed (no NO_HOLE).
        may_trim: bool,
    },
}

/// What the driver must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Send a capsule to the peer.
    Send {
        /// To whom.
        peer: PeerId,
        /// The capsule.
        capsule: [u8; CAPSULE_LEN],
    },
    /// Read the initiator's buffer into a staging slot (data of a WRITE).
    RmaRead {
        /// The command.
        op: OpId,
        /// The initiator.
        peer: PeerId,
        /// Staging slot.
        slot: u32,
        /// Bytes.
        len: u32,
        /// The initiator's buffer address.
        addr: u64,
        /// The initiator's buffer key.
        key: u64,
    },
    /// Write a staging slot into the initiator's buffer (data of a READ).
    RmaWrite {
        /// The command.
        op: OpId,
        /// The initiator.
        peer: PeerId,
        /// Staging slot.
        slot: u32,
        /// Bytes.
        len: u32,
        /// The initiator's buffer address.
        addr: u64,
        /// The initiator's buffer key.
        key: u64,
    },
    /// Run I/O on the backing store; report with [`TargetCore::io_done`].
    Io {
        /// The command.
        op: OpId,
        /// The work.
        io: Io,
    },
    /// End the session: orderly (`reason` None: the peer said
    /// DISCONNECT) or because the peer broke the protocol (log the reason).
    Disconnect {
        /// The peer.
        peer: PeerId,
        /// Why, when the peer misbehaved.
        reason: Option<String>,
    },
    /// Nothing of the closed session's runs any more: the driver may
    /// release what it holds for the peer (its address, its endpoint).
    Released {
        /// The peer.
        peer: PeerId,
    },
}

/// The volume and the target's limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TargetConfig {
    /// Volume size in bytes.
    pub size: u64,
    /// Logical block size announced (a power of two).
    pub block_size: u32,
    /// Refuse changes.
    pub read_only: bool,
    /// Bytes of one staging slot: the largest READ or WRITE.
    pub max_io: u32,
    /// Staging slots (data commands running at once).
    pub slots: u32,
    /// Credits shared by all sessions (capsule buffers the driver posts).
    pub credits: u32,
    /// Most credits one session gets.
    pub max_queue_depth: u32,
    /// Features announced besides READ_ONLY (FLUSH, FUA, TRIM, ZEROES).
    pub features: u32,
}

impl Default for TargetConfig {
    fn default() -> Self {
        TargetConfig {
            size: 0,
            block_size: 512,
            read_only: false,
            max_io: 1 << 20,
            slots: 32,
            credits: 1024,
            max_queue_depth: 128,
            features: feature::FLUSH | feature::FUA | feature::TRIM | feature::ZEROES,
        }
    }
}

#[derive(Debug)]
enum SessState {
    /// Announced by the control channel; waits for CONNECT.
    Expected { token: u64 },
    /// Open.
    Open,
    /// Closed; ops still running.
    Closed,
}

#[derive(Debug)]
struct Session {
    state: SessState,
    id: u32,
    qd: u32,
    max_io: u32,
    cids: HashSet<u32>,
    /// Ops of this session not yet finished (including orphans).
    running: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    WaitSlot,
    Pull,
    Store,
    Load,
    Push,
    Other,
}

#[derive(Debug)]
struct Running {
    peer: PeerId,
    cmd: Command,
    slot: Option<u32>,
    stage: Stage,
    orphan: bool,
}

/// The target's sans-IO state machine.
#[derive(Debug)]
pub struct TargetCore {
    cfg: TargetConfig,
    sessions: HashMap<PeerId, Session>,
    next_session: u32,
    credits_free: u32,
    free_slots: Vec<u32>,
    wait_slot: VecDeque<u32>,
    /// The commands running, under their [`OpId`].
    ops: Slab<Running>,
    actions: VecDeque<Action>,
    shutting_down: bool,
}

impl TargetCore {
    /// A core for the volume and limits of `cfg` (sizes are clamped to
    /// sane minimums: one slot, one credit).
    pub fn new(cfg: TargetConfig) -> Self {
        let mut cfg = cfg;
        cfg.slots = cfg.slots.max(1);
        cfg.credits = cfg.credits.max(1);
        cfg.max_queue_depth = cfg.max_queue_depth.max(1);
        cfg.max_io = cfg.max_io.max(cfg.block_size).max(512);
        if !cfg.block_size.is_power_of_two() {
            cfg.block_size = 512;
        }
        TargetCore {
            free_slots: (0..cfg.slots).rev().collect(),
            credits_free: cfg.credits,
            cfg,
            sessions: HashMap::new(),
            next_session: 1,
            wait_slot: VecDeque::new(),
            ops: Slab::new(),
            actions: VecDeque::new(),
            shutting_down: false,
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> &TargetConfig {
        &self.cfg
    }

    /// The next action for the driver.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// Credits not granted to any session.
    pub fn credits_free(&self) -> u32 {
        self.credits_free
    }

    /// Sessions known (expected, open or closing).
    pub fn sessions(&self) -> usize {
        self.sessions.len()
    }

    /// Commands running (including those of closed sessions).
    pub fn running(&self) -> usize {
        self.ops.len()
    }

    /// Staging slots in use.
    pub fn slots_busy(&self) -> u32 {
        self.cfg.slots - self.free_slots.len() as u32
    }

    /// The control channel announced `peer`; its CONNECT must carry `token`.
    pub fn expect(&mut self, peer: PeerId, token: u64) {
        self.sessions.entry(peer).or_insert(Session {
            state: SessState::Expected { token },
            id: 0,
            qd: 0,
            max_io: 0,
            cids: HashSet::new(),
            running: 0,
        });
    }

    /// Stop accepting sessions and commands (commands running finish).
    pub fn shut_down(&mut self) {
        self.shutting_down = true;
    }

    /// A capsule arrived from `peer`.
    pub fn on_capsule(&mut self, peer: PeerId, bytes: &[u8]) {
        let repr = match Repr::from_bytes(bytes) {
            Ok(r) => r,
            Err(e) => return self.violation(peer, format!("malformed capsule: {e}")),
        };
        let Some(s) = self.sessions.get_mut(&peer) else {
            // Not announced (or long gone): nothing to drop but the peer.
            self.actions.push_back(Action::Disconnect {
                peer,
                reason: Some("capsule from a peer without a session".into()),
            });
            return;
        };
        match (&s.state, repr) {
            (SessState::Closed, _) => {}
            (
                SessState::Expected { token },
                Repr::Connect {
                    token: t,
                    queue_depth,
                    max_io,
                },
            ) => {
                if *token != t {
                    return self.violation(peer, "CONNECT with a wrong token".into());
                }
                if self.shutting_down {
                    return self.refuse(peer, Status::ShuttingDown);
                }
                let qd = queue_depth
                    .min(self.cfg.max_queue_depth)
                    .min(self.credits_free);
                if qd == 0 {
                    return self.refuse(peer, Status::Busy);
                }
                self.credits_free -= qd;
                let id = self.next_session;
                self.next_session = self.next_session.wrapping_add(1).max(1);
                s.state = SessState::Open;
                s.id = id;
                s.qd = qd;
                s.max_io = max_io.min(self.cfg.max_io);
                let mut features = self.cfg.features & !feature::READ_ONLY;
                if self.cfg.read_only {
                    features = feature::READ_ONLY;
                }
                let acc = Accept {
                    session: id,
                    size: self.cfg.size,
                    queue_depth: qd,
                    max_io: s.max_io,
                    block_size: self.cfg.block_size.min(s.max_io),
                    features,
                };
                self.send(peer, Repr::Accept(acc));
            }
            (SessState::Expected { .. }, r) => {
                self.violation(peer, format!("{} before CONNECT", name(&r)))
            }
            (SessState::Open, Repr::Disconnect { session }) => {
                if session != s.id {
                    return self.violation(peer, "DISCONNECT of another session".into());
                }
                self.actions
                    .push_back(Action::Disconnect { peer, reason: None });
                self.close(peer);
            }
            (SessState::Open, Repr::Command(c)) => self.command(peer, c),
            (SessState::Open, r) => self.violation(peer, format!("unexpected {}", name(&r))),
        }
    }

    fn refuse(&mut self, peer: PeerId, st: Status) {
        self.send(peer, Repr::Refuse(st));
        self.close(peer);
    }

    fn send(&mut self, peer: PeerId, r: Repr) {
        self.actions.push_back(Action::Send {
            peer,
            capsule: r.to_bytes(),
        });
    }

    fn violation(&mut self, peer: PeerId, reason: String) {
        let known = self
            .sessions
            .get(&peer)
            .is_some_and(|s| !matches!(s.state, SessState::Closed));
        if known {
            self.actions.push_back(Action::Disconnect {
                peer,
                reason: Some(reason),
            });
            self.close(peer);
        }
    }

    fn command(&mut self, peer: PeerId, c: Command) {
        let Some(s) = self.sessions.get_mut(&peer) else {
            return;
        };
        let problem = if c.session != s.id {
            Some(format!(
                "command for session {} in session {}",
                c.session, s.id
            ))
        } else if s.cids.len() as u32 >= s.qd {
            Some(format!("more than the {} commands its credits allow", s.qd))
        } else if c.op.moves_data() && c.len > s.max_io {
            Some(format!(
                "{:?} of {} bytes exceeds max_io {}",
                c.op, c.len, s.max_io
            ))
        } else if !s.cids.insert(c.cid) {
            Some(format!("command id {} already in use", c.cid))
        } else {
            None
        };
        if let Some(p) = problem {
            return self.violation(peer, p);
        }
        let status = if self.shutting_down {
            Some(Status::ShuttingDown)
        } else if c.op != Op::Flush
            && c.offset
                .checked_add(c.len as u64)
                .is_none_or(|e| e > self.cfg.size)
        {
            Some(Status::OutOfRange)
        } else if c.op.modifies() && self.cfg.read_only {
            Some(Status::ReadOnly)
        } else if (c.op == Op::Flush && self.cfg.features & feature::FLUSH == 0)
            || (c.op == Op::Trim && self.cfg.features & feature::TRIM == 0)
        {
            Some(Status::Unsupported)
        } else if c.len == 0 && c.op != Op::Flush {
            Some(Status::Ok)
        } else {
            None
        };
        if let Some(st) = status {
            return self.complete(peer, c, st);
        }
        s.running += 1;
        let run = Running {
            peer,
            cmd: c,
            slot: None,
            stage: Stage::Other,
            orphan: false,
        };
        let id = self.insert(run);
        match c.op {
            Op::Read | Op::Write => {
                self.set_stage(id, Stage::WaitSlot);
                self.wait_slot.push_back(id);
                self.assign_slots();
            }
            Op::Flush => self.io(id, Io::Sync),
            Op::Trim => self.io(
                id,
                Io::Trim {
                    offset: c.offset,
                    len: c.len,
                },
            ),
            Op::WriteZeroes => self.io(
                id,
                Io::Zero {
                    offset: c.offset,
                    len: c.len,
                    fua: c.fua(),
                    may_trim: c.flags & crate::wire::flag::NO_HOLE == 0,
                },
            ),
        }
    }

    fn insert(&mut self, r: Running) -> u32 {
        self.ops.insert(r) as u32
    }

    fn set_stage(&mut self, id: u32, st: Stage) {
        if let Some(r) = self.ops.get_mut(id as usize) {
            r.stage = st;
        }
    }

    fn io(&mut self, id: u32, io: Io) {
        self.set_stage(id, Stage::Other);
        self.actions.push_back(Action::Io { op: OpId(id), io });
    }

    fn assign_slots(&mut self) {
        while !self.free_slots.is_empty() {
            let Some(id) = self.wait_slot.pop_front() else {
                return;
            };
            let Some(r) = self.ops.get_mut(id as usize) else {
                continue;
            };
            if r.stage != Stage::WaitSlot {
                continue;
            }
            let Some(slot) = self.free_slots.pop() else {
                return;
            };
            r.slot = Some(slot);
            let c = r.cmd;
            let peer = r.peer;
            if c.op == Op::Write {
                r.stage = Stage::Pull;
                self.actions.push_back(Action::RmaRead {
                    op: OpId(id),
                    peer,
                    slot,
                    len: c.len,
                    addr: c.addr,
                    key: c.key,
                });
            } else {
                r.stage = Stage::Load;
                self.actions.push_back(Action::Io {
                    op: OpId(id),
                    io: Io::Read {
                        slot,
                        offset: c.offset,
                        len: c.len,
                    },
                });
            }
        }
    }

    /// An RMA started by [`Action::RmaRead`] / [`Action::RmaWrite`] ended
    /// (`Err`: the fabric's error number).
    pub fn rma_done(&mut self, op: OpId, res: Result<(), i32>) {
        let Some(r) = self.ops.get_mut(op.0 as usize) else {
            return;
        };
        let (stage, c, slot, orphan) = (r.stage, r.cmd, r.slot, r.orphan);
        match (stage, res) {
            _ if orphan => self.finish(op.0, None),
            (Stage::Pull, Ok(())) => {
                let Some(slot) = slot else { return };
                r.stage = Stage::Store;
                self.actions.push_back(Action::Io {
                    op,
                    io: Io::Write {
                        slot,
                        offset: c.offset,
                        len: c.len,
                        fua: c.fua(),
                    },
                });
            }
            // A READ is answered only once its data is in the initiator's
            // buffer: the write's completion (delivery complete) says so.
            (Stage::Push, Ok(())) => self.finish(op.0, Some(Status::Ok)),
            (Stage::Pull | Stage::Push, Err(_)) => self.finish(op.0, Some(Status::Transfer)),
            _ => {}
        }
    }

    /// Backing-store work started by [`Action::Io`] ended.
    pub fn io_done(&mut self, op: OpId, res: Result<(), Status>) {
        let Some(r) = self.ops.get_mut(op.0 as usize) else {
            return;
        };
        if r.orphan {
            return self.finish(op.0, None);
        }
        match (r.stage, res) {
            (Stage::Load, Ok(())) => {
                let (c, peer) = (r.cmd, r.peer);
                let Some(slot) = r.slot else { return };
                r.stage = Stage::Push;
                self.actions.push_back(Action::RmaWrite {
                    op,
                    peer,
                    slot,
                    len: c.len,
                    addr: c.addr,
                    key: c.key,
                });
            }
            (Stage::Load | Stage::Store | Stage::Other, res) => {
                self.finish(op.0, Some(res.err().unwrap_or(Status::Ok)))
            }
            _ => {}
        }
    }

    /// Ends a running op: frees its slot, answers (`Some`) unless orphaned.
    fn finish(&mut self, id: u32, status: Option<Status>) {
        let Some(r) = self.ops.remove(id as usize) else {
            return;
        };
        if let Some(slot) = r.slot {
            self.free_slots.push(slot);
        }
        if let Some(s) = self.sessions.get_mut(&r.peer) {
            s.running = s.running.saturating_sub(1);
            if r.orphan || matches!(s.state, SessState::Closed) {
                if s.running == 0 && matches!(s.state, SessState::Closed) {
                    self.sessions.remove(&r.peer);
                    self.actions.push_back(Action::Released { peer: r.peer });
                }
            } else if let Some(st) = status {
                self.complete(r.peer, r.cmd, st);
            }
        }
        self.assign_slots();
    }

    fn complete(&mut self, peer: PeerId, c: Command, status: Status) {
        if let Some(s) = self.sessions.get_mut(&peer) {
            s.cids.remove(&c.cid);
        }
        self.send(
            peer,
            Repr::Completion {
                cid: c.cid,
                session: c.session,
                status,
            },
        );
    }

    /// The peer is gone (its control channel closed, the fabric declared
    /// it dead, or the driver dropped it): its credits return at once;
    /// its running commands finish without an answer, and
    /// [`Action::Released`] follows when the last has.
    pub fn close(&mut self, peer: PeerId) {
        let Some(s) = self.sessions.get_mut(&peer) else {
            return;
        };
        if matches!(s.state, SessState::Closed) {
            return;
        }
        if matches!(s.state, SessState::Open) {
            self.credits_free += s.qd;
        }
        s.state = SessState::Closed;
        s.cids.clear();
        let mut dropped = 0;
        self.ops.retain(|_, r| {
            if r.peer != peer {
                return true;
            }
            if r.stage == Stage::WaitSlot {
                // No action of the driver refers to it.
                dropped += 1;
                return false;
            }
            r.orphan = true;
            true
        });
        if let Some(s) = self.sessions.get_mut(&peer) {
            s.running = s.running.saturating_sub(dropped);
            if s.running == 0 {
                self.sessions.remove(&peer);
                self.actions.push_back(Action::Released { peer });
            }
        }
    }
}

fn name(r: &Repr) -> &'static str {
    match r {
        Repr::Connect { .. } => "CONNECT",
        Repr::Accept(_) => "ACCEPT",
        Repr::Refuse(_) => "REFUSE",
        Repr::Disconnect { .. } => "DISCONNECT",
        Repr::Command(_) => "command",
        Repr::Completion { .. } => "COMPLETION",
    }
}
