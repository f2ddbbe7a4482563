//! One member's core of one collective group: operation numbers, frames
//! cut and reassembled, frames of operations not started yet held within
//! bounds, and failure of the whole group when a member is lost or sends
//! what does not fit.

use super::algo::{Algo, Ctx};
use super::{CollError, Event, Fed, Limits, Op, Transmit};
use crate::udp::{FastMap, FastState};
use ofi_wire::coll::{kind, Abort, Repr, HDR_LEN};
use std::collections::{BTreeMap, VecDeque};

/// A message of one step from one member: `(step, from)`.
pub(super) type Key = (u32, u32);

/// A message being reassembled from its frames.
struct Partial {
    total: u32,
    got: u32,
    buf: Vec<u8>,
}

/// An operation under way.
struct Running {
    token: u64,
    kind: u8,
    algo: Algo,
    /// Longest message the operation can take (its input or output).
    max_message: usize,
    /// Whole messages not yet taken by the algorithm.
    inbox: FastMap<Key, Vec<u8>>,
    partial: FastMap<Key, Partial>,
}

/// One member's side of a collective group: see the [module](super) docs.
pub struct GroupCore {
    id: u64,
    rank: u32,
    size: u32,
    limits: Limits,
    next_seq: u32,
    running: BTreeMap<u32, Running>,
    /// Frames of operations not started yet, by operation number.
    early: FastMap<u32, Vec<(Repr, Vec<u8>)>>,
    /// The maps' hasher (seeded once per group: the keys are peers').
    hasher: FastState,
    early_bytes: usize,
    out: VecDeque<Transmit>,
    events: VecDeque<Event>,
    broken: Option<CollError>,
}

impl std::fmt::Debug for GroupCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupCore")
            .field("id", &self.id)
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("next_seq", &self.next_seq)
            .field("running", &self.running.len())
            .field("broken", &self.broken)
            .finish()
    }
}

impl GroupCore {
    /// The core of the member of rank `rank` in a group of `size` members
    /// named `id` (the same name at every member).
    pub fn new(id: u64, rank: u32, size: u32, limits: Limits) -> Result<GroupCore, CollError> {
        if size == 0 || rank >= size {
            return Err(CollError::Invalid(format!(
                "rank {rank} is not in a group of {size}"
            )));
        }
        if limits.frame_max == 0 {
            return Err(CollError::Invalid("a frame must carry a byte".into()));
        }
        Ok(GroupCore {
            id,
            rank,
            size,
            limits,
            next_seq: 0,
            running: BTreeMap::new(),
            early: FastMap::default(),
            hasher: FastState::default(),
            early_bytes: 0,
            out: VecDeque::new(),
            events: VecDeque::new(),
            broken: None,
        })
    }

    /// The group's name.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// This member's rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// The number of members.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// Operations started and not yet complete.
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// Why the group is unusable, once it is.
    pub fn broken(&self) -> Option<&CollError> {
        self.broken.as_ref()
    }

    /// Starts the next operation (number [`next_seq`](Self::next_seq));
    /// its outcome comes from [`poll_event`](Self::poll_event) with
    /// `token`. Refused, with nothing started, when the arguments are
    /// wrong or the group is unusable.
    pub fn start(&mut self, op: Op, token: u64) -> Result<u32, CollError> {
        if let Some(e) = &self.broken {
            return Err(e.clone());
        }
        let kind = op.kind();
        let (algo, max_message) = Algo::new(op, self.rank, self.size, &self.limits)?;
        let seq = self.next_seq;
        self.next_seq = seq.wrapping_add(1);
        self.running.insert(
            seq,
            Running {
                token,
                kind,
                algo,
                max_message,
                inbox: FastMap::with_hasher(self.hasher),
                partial: FastMap::with_hasher(self.hasher),
            },
        );
        if let Some(held) = self.early.remove(&seq) {
            for (r, payload) in held {
                self.early_bytes -= HDR_LEN + payload.len();
                if let Err(e) = self.deliver(seq, &r, &payload) {
                    self.fail(e);
                    return Ok(seq);
                }
            }
        }
        self.advance(seq);
        Ok(seq)
    }

    /// The number the next started operation gets.
    pub fn next_seq(&self) -> u32 {
        self.next_seq
    }

    /// A frame another member sent (its header parsed by the driver,
    /// which dispatches on `r.group`). A frame that does not fit (not this
    /// group's, from no other member, of an operation that ended, of
    /// another operation, too long, of a step the operation never takes)
    /// makes the group unusable (every running operation fails) and is
    /// returned as the error. A frame of an operation this member has not
    /// started yet is held, within [`Limits::early_bytes`]; past the bound
    /// it is not taken ([`Fed::Later`]): the driver hands it in again once
    /// this member has started another operation, and meanwhile takes no
    /// more frames from the network, so the senders wait (flow control: a
    /// broadcast's root may run ahead of the others by any number of
    /// operations).
    pub fn on_frame(&mut self, r: &Repr, payload: &[u8]) -> Result<Fed, CollError> {
        if self.broken.is_some() {
            return Ok(Fed::Taken);
        }
        match self.check_frame(r, payload) {
            Ok(f) => Ok(f),
            Err(e) => {
                self.fail(e.clone());
                Err(e)
            }
        }
    }

    fn check_frame(&mut self, r: &Repr, payload: &[u8]) -> Result<Fed, CollError> {
        let peer = |why: &str| CollError::Peer {
            rank: r.from,
            why: why.to_string(),
        };
        if r.group != self.id {
            return Err(peer("a frame of another group"));
        }
        if r.from >= self.size || r.from == self.rank {
            return Err(CollError::Peer {
                rank: r.from,
                why: format!("a frame from rank {} in a group of {}", r.from, self.size),
            });
        }
        if r.kind == kind::ABORT {
            let a = match Abort::parse(payload) {
                Ok(a) if r.total as usize == Abort::LEN => a,
                _ => return Err(peer("a malformed abort")),
            };
            let error = if a.rank == self.rank || a.rank >= self.size {
                CollError::Peer {
                    rank: r.from,
                    why: format!("it aborted the group naming rank {}", a.rank),
                }
            } else {
                CollError::Lost {
                    rank: a.rank,
                    errno: a.errno as i32,
                }
            };
            self.fail_here(error);
            return Ok(Fed::Taken);
        }
        let ahead = r.seq.wrapping_sub(self.next_seq);
        if self.running.contains_key(&r.seq) {
            self.deliver(r.seq, r, payload)?;
            self.advance(r.seq);
            return Ok(Fed::Taken);
        }
        if ahead >= self.limits.early_ops {
            return Err(peer(
                "a frame of an operation that ended or is too far ahead",
            ));
        }
        // A frame held costs its header too, so empty frames are bounded.
        let cost = HDR_LEN + payload.len();
        if cost > self.limits.early_bytes {
            return Err(peer("a frame larger than the frames held may be"));
        }
        if self.early_bytes + cost > self.limits.early_bytes {
            return Ok(Fed::Later);
        }
        self.early_bytes += cost;
        self.early
            .entry(r.seq)
            .or_default()
            .push((*r, payload.to_vec()));
        Ok(Fed::Taken)
    }

    /// Adds a frame to its running operation's messages.
    fn deliver(&mut self, seq: u32, r: &Repr, payload: &[u8]) -> Result<(), CollError> {
        let Some(op) = self.running.get_mut(&seq) else {
            return Ok(());
        };
        let peer = |why: String| CollError::Peer { rank: r.from, why };
        if r.kind != op.kind {
            return Err(peer(format!(
                "runs collective kind {} as operation {seq}, this member kind {}",
                r.kind, op.kind
            )));
        }
        if r.total as usize > op.max_message {
            return Err(peer(format!(
                "a message of {} bytes in an operation of at most {} (do the members pass the same count?)",
                r.total, op.max_message
            )));
        }
        if !op.algo.accepts(
            self.rank as usize,
            self.size as usize,
            r.step,
            r.from as usize,
        ) {
            return Err(peer(format!(
                "a message of step {} this member never takes from it",
                r.step
            )));
        }
        let key = (r.step, r.from);
        if op.inbox.contains_key(&key) {
            return Err(peer(format!("step {} sent twice", r.step)));
        }
        if r.total == 0 {
            // A message of no bytes is one frame (a barrier's).
            op.inbox.insert(key, Vec::new());
            return Ok(());
        }
        let p = op.partial.entry(key).or_insert_with(|| Partial {
            total: r.total,
            got: 0,
            buf: vec![0; r.total as usize],
        });
        if p.total != r.total {
            return Err(peer(format!(
                "frames of step {} disagree on its length",
                r.step
            )));
        }
        let len = payload.len() as u32;
        if len > p.total - p.got {
            return Err(peer(format!("step {} longer than its length", r.step)));
        }
        let at = r.offset as usize;
        p.buf[at..at + payload.len()].copy_from_slice(payload);
        p.got += len;
        if p.got == p.total {
            if let Some(p) = op.partial.remove(&key) {
                op.inbox.insert(key, p.buf);
            }
        }
        Ok(())
    }

    /// Runs an operation as far as its messages allow; reports it when done.
    fn advance(&mut self, seq: u32) {
        let Some(op) = self.running.get_mut(&seq) else {
            return;
        };
        let mut cx = Ctx {
            rank: self.rank as usize,
            size: self.size as usize,
            hdr: Repr {
                kind: op.kind,
                from: self.rank,
                group: self.id,
                seq,
                ..Default::default()
            },
            frame_max: self.limits.frame_max,
            out: &mut self.out,
            inbox: &mut op.inbox,
        };
        match op.algo.advance(&mut cx) {
            Ok(None) => {}
            Ok(Some(result)) => {
                let token = op.token;
                self.running.remove(&seq);
                self.events.push_back(Event::Done { token, result });
            }
            Err(e) => self.fail(e),
        }
    }

    /// Makes the group unusable: every running operation fails with
    /// `error`, and so does every later start. When a member is lost or
    /// misbehaved, the others are told (an abort frame to each, but the
    /// one at fault), so that a member waiting for another whose group
    /// failed fails too instead of waiting for ever.
    pub fn fail(&mut self, error: CollError) {
        if self.broken.is_some() {
            return;
        }
        let culprit = match &error {
            CollError::Lost { rank, .. } | CollError::Peer { rank, .. } => Some(*rank),
            _ => None,
        };
        if let Some(c) = culprit {
            let a = Abort {
                rank: c,
                errno: error.errno() as u32,
            };
            let r = Repr {
                kind: kind::ABORT,
                from: self.rank,
                group: self.id,
                seq: 0,
                step: 0,
                total: Abort::LEN as u32,
                offset: 0,
            };
            for to in (0..self.size).filter(|t| *t != self.rank && *t != c) {
                self.out.push_back(Transmit {
                    to,
                    frame: r.frame(&a.to_bytes()),
                });
            }
        }
        self.fail_here(error);
    }

    /// [`fail`](Self::fail) without telling the others.
    fn fail_here(&mut self, error: CollError) {
        if self.broken.is_some() {
            return;
        }
        for (_, op) in std::mem::take(&mut self.running) {
            self.events.push_back(Event::Failed {
                token: op.token,
                error: error.clone(),
            });
        }
        self.early.clear();
        self.early_bytes = 0;
        self.broken = Some(error);
    }

    /// The member of rank `rank` is gone (its provider declared it dead,
    /// or a frame to it failed): the group fails with `errno`.
    pub fn lost(&mut self, rank: u32, errno: i32) {
        self.fail(CollError::Lost { rank, errno });
    }

    /// The next frame to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.out.pop_front()
    }

    /// The next outcome.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }
}
