//! The initiator's protocol core: requests in, command capsules out;
//! capsules from the target in, completions out. Time comes in as an
//! argument (a command unanswered past its deadline fails the session). No
//! fabric and no memory: the driver names the registered buffer of each
//! request by address and key.

use crate::wire::{feature, Accept, Command, Op, Repr, Status, CAPSULE_LEN};
use ofi_core::util::slab::Slab;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// One I/O request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// What to do.
    pub op: Op,
    /// Force unit access (WRITE, WRITE_ZEROES; on a TRIM the capsule has
    /// no FUA, and the session driver follows it with a FLUSH instead).
    pub fua: bool,
    /// WRITE_ZEROES must not deallocate.
    pub no_hole: bool,
    /// Volume offset.
    pub offset: u64,
    /// Bytes.
    pub len: u32,
    /// The registered buffer as the target addresses it (READ, WRITE).
    pub addr: u64,
    /// Its key.
    pub key: u64,
}

impl Request {
    /// A request with no buffer named yet (`addr` and `key` 0: the driver
    /// fills them in for READ and WRITE once it registers the buffer).
    pub fn new(op: Op, offset: u64, len: u32, fua: bool, no_hole: bool) -> Request {
        Request {
            op,
            fua,
            no_hole,
            offset,
            len,
            addr: 0,
            key: 0,
        }
    }
}

/// What the initiator learns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// The session is open.
    Connected(Accept),
    /// The target refused the session.
    Refused(Status),
    /// A request finished.
    Done {
        /// The caller's tag of the request.
        user: u64,
        /// How it ended.
        status: Status,
    },
    /// The session ended (the target misbehaved, went away, or stopped
    /// answering); every request still pending got a `Done` before this.
    Failed {
        /// Why.
        reason: String,
    },
}

/// Why a request could not be submitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubmitError {
    /// The session is not open (yet or any more).
    NotOpen,
    /// Every credit is in use: wait for a completion.
    NoCredit,
    /// The request itself is wrong (the status says how).
    Rejected(Status),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Idle,
    Connecting,
    Open(Accept),
    Closed,
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    user: u64,
    deadline: Instant,
}

/// The initiator's sans-IO state machine.
#[derive(Debug)]
pub struct InitiatorCore {
    state: State,
    /// The commands sent and not answered, under the low 16 bits of their
    /// command id.
    slots: Slab<Pending>,
    /// Per slot key: the generation of its latest command (the id's high
    /// 16 bits), so that an answer to an older command of the key is not
    /// taken for the current one's.
    gens: Vec<u16>,
    outstanding: u32,
    timeout: Duration,
    connect_deadline: Option<Instant>,
    events: VecDeque<Event>,
    /// What CONNECT asked for (queue depth, largest transfer): an ACCEPT
    /// granting more is refused.
    asked: (u32, u32),
}

impl InitiatorCore {
    /// A core whose commands (and CONNECT) fail the session when
    /// unanswered for `timeout`.
    pub fn new(timeout: Duration) -> Self {
        InitiatorCore {
            state: State::Idle,
            slots: Slab::new(),
            gens: Vec::new(),
            outstanding: 0,
            timeout,
            connect_deadline: None,
            events: VecDeque::new(),
            asked: (0, 0),
        }
    }

    /// The CONNECT capsule: asks for `queue_depth` credits and transfers of
    /// up to `max_io` bytes, with the token of the control channel.
    pub fn connect(
        &mut self,
        token: u64,
        queue_depth: u32,
        max_io: u32,
        now: Instant,
    ) -> [u8; CAPSULE_LEN] {
        self.state = State::Connecting;
        self.connect_deadline = Some(now + self.timeout);
        self.asked = (queue_depth.max(1), max_io.max(1));
        Repr::Connect {
            token,
            queue_depth: self.asked.0,
            max_io: self.asked.1,
        }
        .to_bytes()
    }

    /// The session, once open.
    pub fn accepted(&self) -> Option<&Accept> {
        match &self.state {
            State::Open(a) => Some(a),
            _ => None,
        }
    }

    /// True once the session has ended.
    pub fn is_closed(&self) -> bool {
        self.state == State::Closed
    }

    /// Commands sent and not answered.
    pub fn outstanding(&self) -> u32 {
        self.outstanding
    }

    /// Credits left for new commands.
    pub fn credits(&self) -> u32 {
        match &self.state {
            State::Open(a) => a.queue_depth.saturating_sub(self.outstanding),
            _ => 0,
        }
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Checks a request against the volume; `Ok` when the target would
    /// accept it.
    pub fn check(&self, r: &Request) -> Result<(), SubmitError> {
        let State::Open(a) = &self.state else {
            return Err(SubmitError::NotOpen);
        };
        if r.op.modifies() && a.features & feature::READ_ONLY != 0 {
            return Err(SubmitError::Rejected(Status::ReadOnly));
        }
        if r.op != Op::Flush
            && r.offset
                .checked_add(r.len as u64)
                .is_none_or(|e| e > a.size)
        {
            return Err(SubmitError::Rejected(Status::OutOfRange));
        }
        if r.op.moves_data() && r.len > a.max_io {
            return Err(SubmitError::Rejected(Status::Invalid));
        }
        if (r.op == Op::Flush && a.features & feature::FLUSH == 0)
            || (r.op == Op::Trim && a.features & feature::TRIM == 0)
        {
            return Err(SubmitError::Rejected(Status::Unsupported));
        }
        Ok(())
    }

    /// A command capsule for `r`, tagged `user` (handed back in its
    /// [`Event::Done`]).
    pub fn submit(
        &mut self,
        r: &Request,
        user: u64,
        now: Instant,
    ) -> Result<[u8; CAPSULE_LEN], SubmitError> {
        self.check(r)?;
        let session = match &self.state {
            State::Open(a) if self.outstanding < a.queue_depth => a.session,
            State::Open(_) => return Err(SubmitError::NoCredit),
            _ => return Err(SubmitError::NotOpen),
        };
        // Keys below u16::MAX only: a key is the low half of a command id.
        let i = self.slots.vacant_key();
        if i >= u16::MAX as usize {
            return Err(SubmitError::NoCredit);
        }
        if i == self.gens.len() {
            self.gens.push(0);
        }
        self.gens[i] = self.gens[i].wrapping_add(1);
        self.slots.insert(Pending {
            user,
            deadline: now + self.timeout,
        });
        self.outstanding += 1;
        let cid = (self.gens[i] as u32) << 16 | i as u32;
        let mut flags = 0;
        if r.fua && matches!(r.op, Op::Write | Op::WriteZeroes) {
            flags |= crate::wire::flag::FUA;
        }
        if r.no_hole && r.op == Op::WriteZeroes {
            flags |= crate::wire::flag::NO_HOLE;
        }
        let (offset, len, addr, key) = match r.op {
            Op::Flush => (0, 0, 0, 0),
            Op::Trim | Op::WriteZeroes => (r.offset, r.len, 0, 0),
            Op::Read | Op::Write => (r.offset, r.len, r.addr, r.key),
        };
        Ok(Repr::Command(Command {
            cid,
            session,
            op: r.op,
            flags,
            offset,
            len,
            addr,
            key,
        })
        .to_bytes())
    }

    /// The DISCONNECT capsule (orderly end); the core is closed after it.
    pub fn disconnect(&mut self) -> Option<[u8; CAPSULE_LEN]> {
        let s = match &self.state {
            State::Open(a) => a.session,
            _ => return None,
        };
        self.fail("disconnected by the initiator".into(), Status::Disconnected);
        Some(Repr::Disconnect { session: s }.to_bytes())
    }

    /// A capsule arrived from the target.
    pub fn on_capsule(&mut self, bytes: &[u8]) {
        let r = match Repr::from_bytes(bytes) {
            Ok(r) => r,
            Err(e) => {
                return self.fail(
                    format!("malformed capsule from the target: {e}"),
                    Status::Disconnected,
                )
            }
        };
        match (&self.state, r) {
            (State::Closed, _) => {}
            (State::Connecting, Repr::Accept(a))
                if a.queue_depth == 0
                    || a.queue_depth > self.asked.0
                    || a.max_io == 0
                    || a.max_io > self.asked.1 =>
            {
                // Buffers are sized by what the target grants: a grant
                // past what was asked would let it make this side
                // allocate without bound.
                self.fail(
                    format!(
                        "the target granted {} credits and {}-byte transfers, asked {} and {}",
                        a.queue_depth, a.max_io, self.asked.0, self.asked.1
                    ),
                    Status::Disconnected,
                )
            }
            (State::Connecting, Repr::Accept(a)) => {
                self.connect_deadline = None;
                self.state = State::Open(a);
                self.events.push_back(Event::Connected(a));
            }
            (State::Connecting, Repr::Refuse(s)) => {
                self.state = State::Closed;
                self.connect_deadline = None;
                self.events.push_back(Event::Refused(s));
            }
            (
                State::Open(a),
                Repr::Completion {
                    cid,
                    session,
                    status,
                },
            ) => {
                if session != a.session {
                    return self.fail(
                        format!("completion for session {session}"),
                        Status::Disconnected,
                    );
                }
                let idx = (cid & 0xffff) as usize;
                let gen = (cid >> 16) as u16;
                let ok = self.slots.contains(idx) && self.gens[idx] == gen;
                if !ok {
                    return self.fail(
                        format!("completion of unknown command {cid:#x}"),
                        Status::Disconnected,
                    );
                }
                if let Some(p) = self.slots.remove(idx) {
                    self.outstanding -= 1;
                    self.events.push_back(Event::Done {
                        user: p.user,
                        status,
                    });
                }
            }
            (State::Open(_), Repr::Disconnect { .. }) => {
                self.fail("the target ended the session".into(), Status::ShuttingDown)
            }
            (_, r) => self.fail(
                format!("unexpected capsule from the target: {r:?}"),
                Status::Disconnected,
            ),
        }
    }

    /// The session is over (the peer died, the control channel closed, or
    /// the target misbehaved): every pending request ends with `status`,
    /// then [`Event::Failed`].
    pub fn fail(&mut self, reason: String, status: Status) {
        if self.state == State::Closed {
            return;
        }
        if self.state == State::Connecting {
            self.events.push_back(Event::Refused(Status::Disconnected));
        }
        self.state = State::Closed;
        self.connect_deadline = None;
        self.slots.retain(|_, p| {
            self.events.push_back(Event::Done {
                user: p.user,
                status,
            });
            false
        });
        self.outstanding = 0;
        self.events.push_back(Event::Failed { reason });
    }

    /// The earliest deadline, if anything is pending.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let cmds = self.slots.iter().map(|(_, p)| p.deadline).min();
        match (cmds, self.connect_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Time has passed: a command (or CONNECT) past its deadline fails the
    /// session (its answer may still come, but nothing could tell it from a
    /// later command's).
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.poll_timeout().is_some_and(|d| d <= now) {
            self.fail(
                format!("the target did not answer within {:?}", self.timeout),
                Status::TimedOut,
            );
        }
    }
}
