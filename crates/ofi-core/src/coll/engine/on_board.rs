//! Groups on the provider's board ([`crate::coll::board`]): the join's
//! agreement, the board operations' progress, and what a dead member does
//! to them.
//!
//! **Agreement.** A group whose members the provider's board may carry
//! (`CollBoard::candidate`, a function of the members' addresses, so every
//! member decides the same) runs one more exchange after the join's: an
//! allgather of what each member offers, its lane's index once it claimed
//! a lane and mapped every other member's board (0: nothing), and the
//! lane's count the group starts from (a lane's count only grows, so
//! members still looking at a lane's previous group never see it go
//! back). The group
//! runs on boards only when every member offered one; otherwise each gives
//! its lane back and the group sends frames, as at every member. Only then
//! does FI_JOIN_COMPLETE come.
//!
//! **Progress.** While board operations run, progress looks at the
//! group's lanes ([`BoardCore::poll`]); the publisher wakes members that
//! sleep (their providers' doorbells), and `arm` refuses to sleep while an
//! operation can complete. Waiting for a member, progress looks whether it
//! is still there now and then ([`LOOK_EVERY`]): a member whose endpoint
//! closed or whose process exited fails the group's operations, as the
//! provider's report of its death does.

use super::*;

/// Bytes of a member's offer: its lane's index + 1 (u32 LE; 0: no board),
/// 4 bytes of 0, the lane's starting count (u64 LE).
const OFFER: usize = 16;

/// How often a board operation that waits looks whether the members it
/// waits for are still there.
const LOOK_EVERY: Duration = Duration::from_millis(20);

/// What this member brings to the agreement.
pub(super) struct Prep {
    /// Its lane (index, starting count, lane).
    lane: Option<(u32, u64, Arc<dyn BoardLane>)>,
    /// The members' boards, by rank (None: this member, or not mapped).
    peers: Vec<Option<Arc<dyn BoardPeer>>>,
    /// Every other member's board mapped and a lane claimed.
    ok: bool,
}

/// A group's board side.
pub(super) struct OnBoard {
    pub(super) core: BoardCore,
    pub(super) lanes: GroupLanes,
    /// Polls since the last look at the members' liveness.
    idle: u32,
    looked: Instant,
}

/// The lanes of a group's members by rank (this member's own at its
/// rank), with the counts the group started from (the core's operation `k`
/// is `base + k` in a lane).
pub(super) struct GroupLanes {
    rank: usize,
    lanes: Vec<Arc<dyn BoardLane>>,
    bases: Vec<u64>,
    peers: Vec<Option<Arc<dyn BoardPeer>>>,
}

impl GroupLanes {
    /// This member's own lane.
    fn own(&self) -> &Arc<dyn BoardLane> {
        &self.lanes[self.rank]
    }
}

impl Lanes for GroupLanes {
    #[inline]
    fn seq(&self, rank: u32) -> u64 {
        let r = rank as usize;
        self.lanes[r].seq().wrapping_sub(self.bases[r])
    }
    fn read(&self, rank: u32, seq: u64, offset: usize, out: &mut [u8]) -> bool {
        let r = rank as usize;
        self.lanes[r].read(self.bases[r].wrapping_add(seq), offset, out)
    }
    fn publish(&self, seq: u64, data: &[u8]) {
        self.own()
            .publish(self.bases[self.rank].wrapping_add(seq), data);
        for p in self.peers.iter().flatten() {
            p.wake();
        }
    }
}

impl Group {
    /// Gives the group's lane back (at leave, at close, after a failed
    /// agreement).
    pub(super) fn drop_board(&mut self) {
        if let Some(p) = self.prep.take() {
            if let Some((_, _, l)) = p.lane {
                l.release();
            }
        }
        if let Some(b) = self.board.take() {
            b.lanes.own().release();
        }
    }
}

impl CollEp {
    /// The join's exchange completed: the agreement on the board starts
    /// (FI_JOIN_COMPLETE comes after it), or the join completes now.
    pub(super) fn joined(&self, st: &mut State, addr: u64, fid: usize, context: usize) {
        let Some(g) = st.groups.get_mut(&addr) else {
            return;
        };
        if !g.board_candidate {
            self.eq.push(EqEvent {
                event: eq_event::FI_JOIN_COMPLETE,
                fid,
                context,
                ..Default::default()
            });
            return;
        }
        let prep = self.prepare(g);
        let mut offer = [0u8; OFFER];
        if let (true, Some((idx, base, _))) = (prep.ok, &prep.lane) {
            offer[..4].copy_from_slice(&(idx + 1).to_le_bytes());
            offer[8..].copy_from_slice(&base.to_le_bytes());
        }
        g.prep = Some(prep);
        let token = st.next_token;
        st.next_token += 1;
        let g = st.groups.get_mut(&addr).expect("looked up above");
        match g.core.start(
            Op::Allgather {
                data: offer.to_vec(),
            },
            token,
        ) {
            Ok(_) => {
                st.ops.insert(token, (addr, Waiter::Agree { fid, context }));
            }
            Err(e) => {
                g.drop_board();
                self.eq.push_err(EqError {
                    fid,
                    context,
                    err: e.errno(),
                    prov_errno: e.errno(),
                    ..Default::default()
                });
            }
        }
    }

    /// This member's offer: a lane claimed, every other member's board
    /// mapped.
    fn prepare(&self, g: &Group) -> Prep {
        let n = g.members.len();
        let rank = g.core.rank() as usize;
        let mut p = Prep {
            lane: None,
            peers: (0..n).map(|_| None).collect(),
            ok: false,
        };
        let Some(board) = self.board.as_ref().filter(|_| self.board_on) else {
            return p;
        };
        p.lane = board.claim(g.core.id().max(1));
        let mut ok = p.lane.is_some();
        for (r, &m) in g.members.iter().enumerate() {
            if r == rank || !ok {
                continue;
            }
            match self.av.lookup(m).and_then(|raw| board.peer(&raw)) {
                Ok(b) => p.peers[r] = Some(b),
                Err(e) => {
                    tracing::debug!(error = %e, member = r, "collectives: a member's board is not reachable: the group sends messages");
                    ok = false;
                }
            }
        }
        p.ok = ok;
        p
    }

    /// The agreement's outcome (every member's offer, in rank order): the
    /// group runs on boards when every member offered one.
    pub(super) fn agreed(&self, st: &mut State, addr: u64, offers: &[u8]) {
        let Some(g) = st.groups.get_mut(&addr) else {
            return;
        };
        let Some(prep) = g.prep.take() else {
            return;
        };
        let n = g.members.len();
        let rank = g.core.rank();
        let idx = |r: usize| {
            offers
                .get(r * OFFER..r * OFFER + 4)
                .map_or(0, |b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
        };
        let base = |r: usize| {
            offers
                .get(r * OFFER + 8..(r + 1) * OFFER)
                .map_or(0, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
        };
        let all = offers.len() == n * OFFER && (0..n).all(|r| idx(r) != 0);
        let me = rank as usize;
        let lanes: Option<Vec<Arc<dyn BoardLane>>> = match (&prep.lane, all) {
            (Some((_, _, own)), true) => (0..n)
                .map(|r| {
                    if r == me {
                        Some(own.clone())
                    } else {
                        prep.peers[r].as_ref()?.lane(idx(r) - 1)
                    }
                })
                .collect(),
            _ => None,
        };
        match (lanes, prep.lane) {
            (Some(lanes), Some(_)) => {
                let core = BoardCore::new(rank, n as u32).expect("a candidate's size fits");
                tracing::debug!(
                    members = n,
                    "collectives: the group runs on the members' boards"
                );
                g.board = Some(OnBoard {
                    core,
                    lanes: GroupLanes {
                        rank: me,
                        lanes,
                        bases: (0..n).map(base).collect(),
                        peers: prep.peers,
                    },
                    idle: 0,
                    looked: Instant::now(),
                });
            }
            (_, lane) => {
                if all {
                    tracing::warn!("collectives: a member offered a board lane that does not exist: the group sends messages");
                }
                if let Some((_, _, l)) = lane {
                    l.release();
                }
            }
        }
    }

    /// Reports a board group's outcomes; tracks whether it still runs.
    pub(super) fn board_outcomes(&self, st: &mut State, addr: u64) {
        let mut events = std::mem::take(&mut st.board_events);
        let busy = match st.groups.get_mut(&addr).and_then(|g| g.board.as_mut()) {
            Some(ob) => {
                while let Some(e) = ob.core.poll_event() {
                    events.push(e);
                }
                ob.core.busy()
            }
            None => false,
        };
        for e in events.drain(..) {
            self.report(st, e);
        }
        st.board_events = events;
        let at = st.board_active.iter().position(|a| *a == addr);
        match (busy, at) {
            (true, None) => {
                st.board_active.push(addr);
                self.board_live.fetch_add(1, Ordering::Relaxed);
            }
            (false, Some(i)) => {
                st.board_active.swap_remove(i);
                self.board_live.fetch_sub(1, Ordering::Relaxed);
            }
            _ => {}
        }
    }

    /// Looks at the lanes of every group whose board operations run.
    pub(super) fn poll_boards(&self, st: &mut State) {
        let mut i = st.board_active.len();
        while i > 0 {
            i -= 1;
            let Some(&addr) = st.board_active.get(i) else {
                continue;
            };
            let Some(g) = st.groups.get_mut(&addr) else {
                continue;
            };
            let Some(ob) = g.board.as_mut() else {
                continue;
            };
            if !ob.core.poll(&ob.lanes) {
                ob.idle = ob.idle.wrapping_add(1);
                if ob.idle % 256 != 0 || ob.looked.elapsed() < LOOK_EVERY {
                    continue;
                }
                ob.looked = Instant::now();
                let gone = ob
                    .lanes
                    .peers
                    .iter()
                    .enumerate()
                    .find_map(|(r, p)| p.as_ref()?.gone().map(|e| (r as u32, e)));
                if let Some((r, errno)) = gone {
                    g.core.lost(r, errno);
                    self.pump(st, addr);
                    self.board_fail(st, addr, CollError::Lost { rank: r, errno });
                }
                continue;
            }
            ob.idle = 0;
            self.board_outcomes(st, addr);
        }
    }

    /// Fails a board group's running operations (a member is gone, the
    /// group or the endpoint closes).
    pub(super) fn board_fail(&self, st: &mut State, addr: u64, e: CollError) {
        let Some(ob) = st.groups.get_mut(&addr).and_then(|g| g.board.as_mut()) else {
            return;
        };
        ob.core.fail(e);
        self.board_outcomes(st, addr);
    }

    /// The group or the endpoint closes: its board operations fail with
    /// `FI_ECANCELED` and its lane is given back.
    pub(super) fn close_board(&self, st: &mut State, addr: u64) {
        self.board_fail(st, addr, CollError::Closed);
        if let Some(g) = st.groups.get_mut(&addr) {
            g.drop_board();
        }
    }

    /// True when a board operation can complete now (so a wait must not
    /// sleep).
    pub(super) fn board_ready(&self) -> bool {
        if self.board_live.load(Ordering::Relaxed) == 0 {
            return false;
        }
        let st = lock(&self.st);
        st.board_active.iter().any(|a| {
            st.groups
                .get(a)
                .and_then(|g| g.board.as_ref())
                .is_some_and(|ob| ob.core.ready(&ob.lanes))
        })
    }
}
