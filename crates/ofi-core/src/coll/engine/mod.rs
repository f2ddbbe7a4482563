//! The collective layer of one endpoint (see the [module](super) docs): the
//! frames' receive buffers and sends in flight, the groups the endpoint
//! joined with their sans-IO cores, and the application's operations
//! until they complete.
// The operations' result memory is the application's, named by address:
// writing a result into it is the one unsafe act here.
#![allow(unsafe_code)]

use super::board::{BoardLane, BoardPeer, CollBoard};
use super::guard::{COLL_IGNORE, COLL_TAG};
use super::{GROUP_ADDR_TAG, MAX_MEMBERS, MESSAGE_MAX};
use crate::consts::coll_op::*;
use crate::consts::*;
use crate::error::{errno, Error, Result};
use crate::object::CollOp;
use crate::provider::{EndpointOps, Progress, RecvOp, SendOp};
use crate::util::atomic::{self, AtomicKind};
use crate::util::av::AvCore;
use crate::util::cq::CqCore;
use crate::util::cq::{CqErrEntry, CqTaggedEntry};
use crate::util::eq::{EqCore, EqError, EqEvent};
use crate::util::hash::IdMap;
use crate::util::iov::IoVec;
use crate::util::peer::PeerDown;
use crate::util::tap::{CqTap, EqWatch};
use ofi_proto::coll::board::{self as pboard, Lanes};
use ofi_proto::coll::{BoardCore, CollError, Event, Fed, GroupCore, Limits, Op};
use ofi_wire::coll::{Frame, Repr, HDR_LEN};
use std::collections::{HashMap, VecDeque};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

mod on_board;
mod provider_side;

/// Receive buffers kept posted for frames.
const RX_BUFS: usize = 16;
/// Receive buffers at most: while every posted one holds a frame that
/// cannot be taken yet (frames of operations far ahead, of a group not
/// joined yet), one more is posted, so the frame that unblocks them (of
/// the running operation, the join's, from another member) still comes
/// in; past this many, frames wait with the provider.
const RX_MAX: usize = 256;
/// Contexts of the layer's own operations: `RX_MAX` receives, then sends.
const CONTEXTS: usize = 4096;
/// Contexts of injected frames after those, one per destination: they
/// complete silently, and a failure names the member it was sent to.
const INJECT_DESTS: usize = 1 << 16;
/// Bytes of frames of groups not joined yet an endpoint holds, at most
/// (and at most a quarter of what a group holds, `FI_COLL_HELD_BYTES`).
const ORPHAN_BYTES: usize = 16 << 20;

/// Groups joined in this process (numbers for their addresses).
static GROUPS: AtomicU64 = AtomicU64::new(1);

/// What a completion the taps took says.
#[derive(Clone, Copy, Debug)]
struct Done {
    /// Index of the context in the block.
    slot: usize,
    /// Bytes received.
    len: usize,
    /// The source the provider reported.
    src: u64,
    /// 0, or the positive error number.
    err: i32,
}

/// What the taps recorded for the next progress.
#[derive(Default)]
struct Inbox {
    done: Vec<Done>,
    /// Peers the provider declared dead: (fi_addr, error number).
    deaths: Vec<(u64, i32)>,
}

/// A frame posted and not yet completed.
struct TxSlot {
    group: u64,
    to: u32,
    /// The frame, until the provider is done with it (None: injected).
    _frame: Option<Vec<u8>>,
}

/// A frame waiting for a context or for the provider (`FI_EAGAIN`).
struct Pending {
    group: u64,
    to: u32,
    dest: u64,
    frame: Vec<u8>,
}

/// Frames of a group not joined yet.
struct Orphans {
    /// When the first came: past [`ORPHAN_TTL`] they are dropped.
    since: Instant,
    frames: Vec<(u64, Vec<u8>)>,
}

/// How long frames of a group this endpoint has not joined are kept: a
/// member that joins later than this after the others does not complete
/// its join (as a member that never joins keeps theirs waiting).
const ORPHAN_TTL: Duration = Duration::from_secs(60);

/// A group the endpoint joined.
struct Group {
    core: GroupCore,
    /// Members' fi_addrs, by rank.
    members: Vec<u64>,
    /// Their primary fi_addrs (how the AV names each peer).
    primaries: Vec<u64>,
    /// The `FI_*_SET` flags of the collectives it runs.
    allowed: u64,
    /// The provider's board may carry it: the join agrees on it after its
    /// exchange ([`on_board`]).
    board_candidate: bool,
    /// What this member offers the agreement: its lane, the members'
    /// boards.
    prep: Option<on_board::Prep>,
    /// Its board side, once every member agreed.
    board: Option<on_board::OnBoard>,
}

/// Who waits for an operation.
enum Waiter {
    /// The application: its context, and where the result goes.
    App {
        context: usize,
        result: Option<(usize, usize)>,
    },
    /// A join: FI_JOIN_COMPLETE naming `fid`, with `context`.
    Join { fid: usize, context: usize },
    /// The join's agreement on the board, then FI_JOIN_COMPLETE.
    Agree { fid: usize, context: usize },
}

/// A frame the layer could not hand in yet (its group's frames of
/// operations not started reached their bound, or too many frames of
/// groups not joined are held): handed in again after the next start or
/// join. While a receive buffer holds one it is not posted again, so
/// frames stay with the provider and their senders wait.
enum Held {
    /// In receive buffer `slot`.
    Slot { slot: usize, len: usize, src: u64 },
    /// A copy (a frame of a group not joined when it came).
    Owned { src: u64, frame: Vec<u8> },
}

/// The layer's state.
#[derive(Default)]
struct State {
    /// Receive buffers, and whether each is posted or holds a frame.
    rx: Vec<Vec<u8>>,
    rx_posted: Vec<bool>,
    rx_held: Vec<bool>,
    /// Frames not handed in yet, oldest first.
    held: VecDeque<Held>,
    /// Sends in flight by context index (from `RX_MAX`).
    tx: IdMap<usize, TxSlot>,
    tx_free: Vec<usize>,
    waiting: VecDeque<Pending>,
    groups: IdMap<u64, Group>,
    /// Group address by the name frames carry.
    by_name: IdMap<u64, u64>,
    /// Frames of groups not joined yet (with their sources), by name.
    orphans: IdMap<u64, Orphans>,
    orphan_bytes: usize,
    /// Names of groups left: their late frames are dropped.
    left: Vec<u64>,
    ops: IdMap<u64, (u64, Waiter)>,
    next_token: u64,
    /// Groups of the same members joined so far, by the members' hash.
    joins: HashMap<u64, u32>,
    /// Injected frames' contexts: the index of each destination, and the
    /// destination of each index.
    inject_ids: IdMap<u64, usize>,
    inject_dests: Vec<u64>,
    /// `pump`'s scratch (kept to reuse its memory).
    out_frames: Vec<Pending>,
    out_events: Vec<Event>,
    /// Groups whose board operations run.
    board_active: Vec<u64>,
    /// The board's scratch for outcomes.
    board_events: Vec<Event>,
    shut: bool,
}

/// The collective layer of one endpoint.
pub(crate) struct CollEp {
    ops: Arc<dyn EndpointOps>,
    av: Arc<AvCore>,
    tx_cq: Arc<CqCore>,
    eq: Arc<EqCore>,
    /// The endpoint's context in its EQ events (0: none given).
    ep_fid: usize,
    inject_size: usize,
    limits: Limits,
    /// The block whose addresses are the layer's contexts.
    contexts: Box<[u8]>,
    inbox: Mutex<Inbox>,
    /// Progress has work: the inbox holds something, or frames wait.
    work: AtomicBool,
    /// The provider's board (shared memory among members of one node).
    board: Option<Arc<dyn CollBoard>>,
    /// `FI_COLL_BOARD`: this member offers its board at joins.
    board_on: bool,
    /// Groups whose board operations run (`State::board_active`'s length):
    /// progress polls their lanes.
    board_live: AtomicUsize,
    st: Mutex<State>,
}

impl std::fmt::Debug for CollEp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CollEp").finish_non_exhaustive()
    }
}

/// Everything the layer needs from an enabled endpoint.
pub(crate) struct Bound {
    pub(crate) ops: Arc<dyn EndpointOps>,
    pub(crate) av: Arc<AvCore>,
    pub(crate) tx_cq: Arc<CqCore>,
    pub(crate) eq: Arc<EqCore>,
    pub(crate) ep_fid: usize,
    pub(crate) inject_size: usize,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// An error of the collectives' core as the application sees it.
fn app_error(e: &CollError) -> Error {
    Error::new(e.errno(), e.to_string())
}

impl CollEp {
    /// The layer of an enabled endpoint, not yet started
    /// ([`begin`](Self::begin)). The endpoint's relays ([`super::relay`])
    /// hand it its completions and drive it.
    pub(crate) fn start(b: Bound) -> Result<Arc<CollEp>> {
        let held = crate::config::core_tunable("coll_held_bytes").get_size()?;
        let limits = Limits {
            message_max: MESSAGE_MAX,
            early_bytes: held.max(HDR_LEN + Limits::default().frame_max),
            ..Limits::default()
        };
        let frame_len = HDR_LEN + limits.frame_max;
        let st = State {
            rx: (0..RX_BUFS).map(|_| vec![0u8; frame_len]).collect(),
            rx_posted: vec![false; RX_BUFS],
            rx_held: vec![false; RX_BUFS],
            tx_free: (RX_MAX..CONTEXTS).rev().collect(),
            next_token: 1,
            ..Default::default()
        };
        let board_on = crate::config::core_tunable("coll_board").get_bool()?;
        let c = Arc::new(CollEp {
            board: b.ops.coll_board(),
            board_on,
            board_live: AtomicUsize::new(0),
            ops: b.ops,
            av: b.av,
            tx_cq: b.tx_cq,
            eq: b.eq,
            ep_fid: b.ep_fid,
            inject_size: b.inject_size,
            limits,
            contexts: vec![0u8; CONTEXTS + INJECT_DESTS].into_boxed_slice(),
            inbox: Mutex::new(Inbox::default()),
            work: AtomicBool::new(false),
            st: Mutex::new(st),
        });
        Ok(c)
    }

    /// Starts the layer made by [`start`](Self::start) once the relays see
    /// it (its receives may complete at once): watches the event queue and
    /// posts the frame buffers.
    pub(crate) fn begin(self: &Arc<Self>) {
        let watch: Arc<dyn EqWatch> = self.clone();
        self.eq.watchers().add(watch);
        let mut st = lock(&self.st);
        for i in 0..st.rx.len() {
            self.post_rx(&mut st, i);
        }
    }

    /// Takes the layer off the endpoint (it is closing): it stops watching
    /// the event queue and its receives are canceled. Running operations
    /// fail with `FI_ECANCELED`.
    pub(crate) fn shutdown(self: &Arc<Self>) {
        let mut st = lock(&self.st);
        if st.shut {
            return;
        }
        st.shut = true;
        let addrs: Vec<u64> = st.groups.keys().copied().collect();
        for a in addrs {
            if let Some(g) = st.groups.get_mut(&a) {
                g.core.fail(CollError::Closed);
            }
            self.pump(&mut st, a);
            self.close_board(&mut st, a);
        }
        for i in 0..st.rx.len() {
            if st.rx_posted[i] {
                let _ = self.ops.cancel(self.context(i));
            }
        }
        drop(st);
        let watch: Arc<dyn EqWatch> = self.clone();
        self.eq.watchers().remove(&watch);
    }

    /// The endpoint's address vector.
    pub(crate) fn av(&self) -> &Arc<AvCore> {
        &self.av
    }

    /// The context of slot `i`: an address inside the layer's block.
    fn context(&self, i: usize) -> usize {
        self.contexts.as_ptr() as usize + i
    }

    /// The slot a context names, if it is the layer's.
    #[inline]
    fn slot(&self, context: usize) -> Option<usize> {
        let i = context.wrapping_sub(self.contexts.as_ptr() as usize);
        (i < CONTEXTS + INJECT_DESTS).then_some(i)
    }

    fn note(&self, d: Done) {
        lock(&self.inbox).done.push(d);
        self.work.store(true, Ordering::Release);
    }

    // ---- joining and leaving ---------------------------------------------

    /// Joins the group of `members` (fi_addrs of the AV, in rank order),
    /// this endpoint being `rank`; FI_JOIN_COMPLETE naming `fid` with
    /// `context` goes to the event queue once every member joined (at
    /// once when the application manages the membership). Returns the
    /// group's address.
    pub(crate) fn join(
        &self,
        members: &[u64],
        rank: usize,
        app_managed: bool,
        allowed: u64,
        fid: usize,
        context: usize,
    ) -> Result<u64> {
        if members.len() > MAX_MEMBERS {
            return Err(Error::inval(format!(
                "fi_join_collective: {} members, more than the {MAX_MEMBERS} a group may have",
                members.len()
            )));
        }
        let mut primaries = Vec::with_capacity(members.len());
        let mut raws = Vec::with_capacity(members.len());
        let mut hash = Fnv::default();
        for &m in members {
            let raw = self.av.lookup(m).map_err(|_| {
                Error::inval(format!(
                    "fi_join_collective: member fi_addr {m} is no longer in the address vector"
                ))
            })?;
            let p = self.av.primary(m).unwrap_or(m);
            if primaries.contains(&p) {
                return Err(Error::inval(format!(
                    "fi_join_collective: fi_addr {m} names a peer that is a member already"
                )));
            }
            primaries.push(p);
            hash.write(&(raw.len() as u32).to_le_bytes());
            hash.write(&raw);
            raws.push(raw);
        }
        let mut st = lock(&self.st);
        if st.shut {
            return Err(Error::new(errno::FI_EOPBADSTATE, "the endpoint is closing"));
        }
        let members_hash = hash.0;
        let nth = st.joins.entry(members_hash).or_insert(0);
        let mut h = Fnv(members_hash);
        h.write(&nth.to_le_bytes());
        *nth += 1;
        let name = h.0;
        let core = GroupCore::new(name, rank as u32, members.len() as u32, self.limits)
            .map_err(|e| app_error(&e))?;
        let board_candidate = !app_managed
            && members.len() > 1
            && members.len() <= pboard::MAX_MEMBERS as usize
            && self.board.as_ref().is_some_and(|b| b.candidate(&raws));
        let addr = GROUP_ADDR_TAG | (GROUPS.fetch_add(1, Ordering::Relaxed) & ((1 << 48) - 1));
        st.groups.insert(
            addr,
            Group {
                core,
                members: members.to_vec(),
                primaries,
                allowed,
                board_candidate,
                prep: None,
                board: None,
            },
        );
        st.by_name.insert(name, addr);
        if app_managed {
            self.eq.push(EqEvent {
                event: eq_event::FI_JOIN_COMPLETE,
                fid,
                context,
                ..Default::default()
            });
        } else {
            let token = st.next_token;
            st.next_token += 1;
            let g = st.groups.get_mut(&addr).expect("just inserted");
            if let Err(e) = g.core.start(Op::Join, token) {
                st.groups.remove(&addr);
                st.by_name.remove(&name);
                return Err(app_error(&e));
            }
            st.ops.insert(token, (addr, Waiter::Join { fid, context }));
        }
        // Frames members sent before this join.
        if let Some(held) = st.orphans.remove(&name) {
            for (src, f) in held.frames {
                st.orphan_bytes -= f.len();
                if !self.on_frame(&mut st, &f, src) {
                    st.held.push_back(Held::Owned { src, frame: f });
                }
            }
        }
        self.pump(&mut st, addr);
        self.retry_held(&mut st);
        drop(st);
        self.run();
        Ok(addr)
    }

    /// Leaves a group (its `fid_mc` closed): running operations fail with
    /// `FI_ECANCELED`; its late frames are dropped.
    pub(crate) fn leave(&self, addr: u64) {
        let mut st = lock(&self.st);
        let Some(g) = st.groups.get_mut(&addr) else {
            return;
        };
        g.core.fail(CollError::Closed);
        let name = g.core.id();
        self.pump(&mut st, addr);
        self.close_board(&mut st, addr);
        st.groups.remove(&addr);
        st.by_name.remove(&name);
        st.left.push(name);
        if st.left.len() > 1024 {
            st.left.remove(0);
        }
    }

    /// The members of a joined group (fi_addrs) and their primaries.
    pub(crate) fn members(&self, addr: u64) -> Option<(Vec<u64>, Vec<u64>)> {
        let st = lock(&self.st);
        st.groups
            .get(&addr)
            .map(|g| (g.members.clone(), g.primaries.clone()))
    }

    // ---- operations ------------------------------------------------------

    /// Starts an application's operation (see [`CollOp`]).
    ///
    /// # Safety
    /// `op.buf` is readable for the operation's input bytes now, and
    /// `op.result` writable for its output bytes until it completes.
    pub(crate) unsafe fn post(&self, op: &CollOp) -> Result<()> {
        let mut st = lock(&self.st);
        if st.shut {
            return Err(Error::new(errno::FI_EOPBADSTATE, "the endpoint is closing"));
        }
        let Some(g) = st.groups.get(&op.coll_addr) else {
            return Err(Error::inval(format!(
                "coll_addr {:#x} names no collective group this endpoint joined",
                op.coll_addr
            )));
        };
        let n = g.members.len();
        let (what, set_flag) = describe(op.coll)?;
        if g.allowed & set_flag == 0 {
            return Err(Error::new(
                errno::FI_EOPNOTSUPP,
                format!("{what}: the group's AV set was not made for it"),
            ));
        }
        let root = match op.coll {
            FI_BROADCAST | FI_REDUCE | FI_SCATTER | FI_GATHER => {
                let p = self.av.primary(op.root_addr).ok_or_else(|| {
                    Error::inval(format!(
                        "{what}: root_addr {} is not in the address vector",
                        op.root_addr
                    ))
                })?;
                let r = g.primaries.iter().position(|x| *x == p).ok_or_else(|| {
                    Error::inval(format!(
                        "{what}: root_addr {} is not a member of the group",
                        op.root_addr
                    ))
                })?;
                r as u32
            }
            _ => 0,
        };
        let rank = g.core.rank() as usize;
        let es = element_size(what, op)?;
        let bytes = |k: usize| -> Result<usize> {
            op.count
                .checked_mul(es)
                .and_then(|b| b.checked_mul(k))
                .filter(|b| *b <= MESSAGE_MAX)
                .ok_or_else(|| {
                    Error::new(
                        errno::FI_EMSGSIZE,
                        format!(
                            "{what}: {} elements of {es} bytes for {k} member(s) exceed the {MESSAGE_MAX} bytes a collective carries",
                            op.count
                        ),
                    )
                })
        };
        // (input bytes, output bytes) by operation.
        let (ilen, olen) = match op.coll {
            FI_BARRIER => (0, 0),
            FI_BROADCAST => (bytes(1)?, bytes(1)?),
            FI_ALLREDUCE => (bytes(1)?, bytes(1)?),
            FI_ALLGATHER => (bytes(1)?, bytes(n)?),
            FI_REDUCE_SCATTER => (bytes(n)?, bytes(1)?),
            FI_ALLTOALL => (bytes(n)?, bytes(n)?),
            FI_REDUCE => (bytes(1)?, if rank == root as usize { bytes(1)? } else { 0 }),
            FI_SCATTER => (if rank == root as usize { bytes(n)? } else { 0 }, bytes(1)?),
            FI_GATHER => (bytes(1)?, if rank == root as usize { bytes(n)? } else { 0 }),
            _ => unreachable!("describe() refused it"),
        };
        if op.coll == FI_BROADCAST && op.buf == 0 && ilen > 0 {
            return Err(Error::inval(format!("{what}: buf is NULL")));
        }
        if ilen > 0 && op.buf == 0 {
            return Err(Error::inval(format!("{what}: buf is NULL")));
        }
        if olen > 0 && op.result == 0 && op.coll != FI_BROADCAST {
            return Err(Error::inval(format!("{what}: result is NULL")));
        }
        let input = if ilen == 0 {
            Vec::new()
        } else {
            let mut v = vec![0u8; ilen];
            let iov = [IoVec {
                base: op.buf,
                len: ilen,
            }];
            // SAFETY: `op.buf` is readable for the input bytes now (this
            // fn's contract), which is `copy_from_iov`'s.
            unsafe { crate::util::iov::copy_from_iov(&iov, 0, &mut v) };
            v
        };
        let core_op = match op.coll {
            FI_BARRIER => Op::Barrier,
            FI_BROADCAST => Op::Broadcast { root, data: input },
            FI_ALLREDUCE => Op::Allreduce {
                op: op.op,
                datatype: op.datatype,
                data: input,
            },
            FI_ALLGATHER => Op::Allgather { data: input },
            FI_REDUCE_SCATTER => Op::ReduceScatter {
                op: op.op,
                datatype: op.datatype,
                data: input,
            },
            FI_ALLTOALL => Op::Alltoall { data: input },
            FI_REDUCE => Op::Reduce {
                root,
                op: op.op,
                datatype: op.datatype,
                data: input,
            },
            FI_SCATTER => Op::Scatter {
                root,
                block: bytes(1)?,
                data: input,
            },
            _ => Op::Gather { root, data: input },
        };
        let result_at = if op.coll == FI_BROADCAST {
            op.buf
        } else {
            op.result
        };
        let token = st.next_token;
        st.next_token += 1;
        let waiter = Waiter::App {
            context: op.context,
            result: (olen > 0).then_some((result_at, olen)),
        };
        // The largest input any member publishes: the same at every member.
        let input_max = match op.coll {
            FI_BARRIER => 0,
            FI_SCATTER | FI_ALLTOALL | FI_REDUCE_SCATTER => bytes(n)?,
            _ => bytes(1)?,
        };
        if pboard::carries(n as u32, input_max) {
            if let Some(ob) = st
                .groups
                .get_mut(&op.coll_addr)
                .and_then(|g| g.board.as_mut())
            {
                ob.core
                    .start(core_op, token, &ob.lanes)
                    .map_err(|e| app_error(&e))?;
                st.ops.insert(token, (op.coll_addr, waiter));
                self.board_outcomes(&mut st, op.coll_addr);
                return Ok(());
            }
        }
        let g = st.groups.get_mut(&op.coll_addr).expect("checked above");
        g.core.start(core_op, token).map_err(|e| app_error(&e))?;
        st.ops.insert(token, (op.coll_addr, waiter));
        self.pump(&mut st, op.coll_addr);
        self.retry_held(&mut st);
        drop(st);
        self.run();
        Ok(())
    }

    /// Hands in again the frames held back, in order; a receive buffer
    /// whose frame is taken is posted again.
    fn retry_held(&self, st: &mut State) {
        if st.held.is_empty() {
            return;
        }
        for h in std::mem::take(&mut st.held) {
            match h {
                Held::Slot { slot, len, src } => {
                    let buf = std::mem::take(&mut st.rx[slot]);
                    let taken = self.on_frame(st, &buf[..len], src);
                    st.rx[slot] = buf;
                    if taken {
                        st.rx_held[slot] = false;
                        if !st.shut {
                            self.post_rx(st, slot);
                        }
                    } else {
                        st.held.push_back(Held::Slot { slot, len, src });
                    }
                }
                Held::Owned { src, frame } => {
                    if !self.on_frame(st, &frame, src) {
                        st.held.push_back(Held::Owned { src, frame });
                    }
                }
            }
        }
    }
}

/// The call's name and its `FI_*_SET` flag; an unknown collective is
/// `FI_EINVAL`.
fn describe(coll: u32) -> Result<(&'static str, u64)> {
    Ok(match coll {
        FI_BARRIER => ("fi_barrier", FI_BARRIER_SET),
        FI_BROADCAST => ("fi_broadcast", FI_BROADCAST_SET),
        FI_ALLTOALL => ("fi_alltoall", FI_ALLTOALL_SET),
        FI_ALLREDUCE => ("fi_allreduce", FI_ALLREDUCE_SET),
        FI_ALLGATHER => ("fi_allgather", FI_ALLGATHER_SET),
        FI_REDUCE_SCATTER => ("fi_reduce_scatter", FI_REDUCE_SCATTER_SET),
        FI_REDUCE => ("fi_reduce", FI_REDUCE_SET),
        FI_SCATTER => ("fi_scatter", FI_SCATTER_SET),
        FI_GATHER => ("fi_gather", FI_GATHER_SET),
        c => {
            return Err(Error::inval(format!(
                "collective operation {c} is not an enum fi_collective_op"
            )))
        }
    })
}

/// Bytes per element of an operation's datatype: reductions need an
/// operation and datatype the atomic engine combines (`FI_EOPNOTSUPP`),
/// the others a datatype of the atomic engine (`FI_EINVAL`); a barrier has
/// none.
fn element_size(what: &str, op: &CollOp) -> Result<usize> {
    match op.coll {
        FI_BARRIER => Ok(0),
        FI_ALLREDUCE | FI_REDUCE_SCATTER | FI_REDUCE => {
            if !atomic::valid(AtomicKind::Basic, op.op, op.datatype) {
                let op_name = enum_name(ATOMIC_OP_NAMES, op.op)
                    .map(str::to_owned)
                    .unwrap_or_else(|| format!("operation {}", op.op));
                let dt_name = enum_name(DATATYPE_NAMES, op.datatype)
                    .map(str::to_owned)
                    .unwrap_or_else(|| format!("datatype {}", op.datatype));
                return Err(Error::new(
                    errno::FI_EOPNOTSUPP,
                    format!("{what} does not support {op_name} on {dt_name}"),
                ));
            }
            Ok(atomic::datatype_size(op.datatype).unwrap_or(1))
        }
        _ => atomic::datatype_size(op.datatype).ok_or_else(|| {
            Error::inval(format!(
                "{what}: datatype {} is not one a collective moves",
                op.datatype
            ))
        }),
    }
}

/// FNV-1a over bytes: the members' hash that names a group (the same at
/// every member, so not randomized).
#[derive(Clone, Copy, Debug)]
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    fn write(&mut self, b: &[u8]) {
        for &x in b {
            self.0 ^= u64::from(x);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

impl CqTap for CollEp {
    #[inline]
    fn completed(&self, e: &CqTaggedEntry, src: u64) -> bool {
        let Some(slot) = self.slot(e.op_context) else {
            return false;
        };
        self.note(Done {
            slot,
            len: e.len,
            src,
            err: 0,
        });
        true
    }

    #[inline]
    fn failed(&self, e: &CqErrEntry) -> bool {
        let Some(slot) = self.slot(e.op_context) else {
            return false;
        };
        self.note(Done {
            slot,
            len: 0,
            src: FI_ADDR_NOTAVAIL,
            err: e.err.max(1),
        });
        true
    }
}

impl EqWatch for CollEp {
    fn error(&self, e: &EqError) {
        if self.ep_fid != 0 && e.fid != self.ep_fid {
            return;
        }
        if let Some(d) = PeerDown::from_eq_error(e) {
            if d.fi_addr != FI_ADDR_NOTAVAIL {
                lock(&self.inbox).deaths.push((d.fi_addr, d.cause.errno()));
                self.work.store(true, Ordering::Release);
            }
        }
    }
}

impl Progress for CollEp {
    #[inline]
    fn progress(&self) {
        if self.work.load(Ordering::Acquire) || self.board_live.load(Ordering::Relaxed) != 0 {
            self.run();
        }
    }
    fn arm(&self) -> bool {
        !self.work.load(Ordering::Acquire) && !self.board_ready()
    }
    fn disarm(&self) {}
    fn wait_fd(&self) -> Option<RawFd> {
        None
    }
}
