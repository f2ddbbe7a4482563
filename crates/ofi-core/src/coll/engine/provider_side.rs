//! The provider side of the collectives' engine: frames arriving from the
//! endpoint's tagged receives and fed to each group's sans-IO core, the
//! frames a core emits posted as tagged sends (FI_EAGAIN queued, never a
//! failure), completions relayed back to the application's queues, and
//! members declared dead failing their groups' operations.

use super::*;

impl CollEp {
    /// Posts receive buffer `i` for the next frame.
    pub(super) fn post_rx(&self, st: &mut State, i: usize) {
        let iov = [IoVec {
            base: st.rx[i].as_mut_ptr() as usize,
            len: st.rx[i].len(),
        }];
        let op = RecvOp {
            iov: &iov,
            desc: &[],
            src: FI_ADDR_UNSPEC,
            tag: COLL_TAG,
            ignore: COLL_IGNORE,
            context: self.context(i),
            flags: FI_COMPLETION,
            tagged: true,
        };
        // SAFETY: the buffer is the layer's, kept (never moved, never
        // touched) while posted: until its completion, or its cancel at
        // shutdown before the endpoint closes.
        match unsafe { self.ops.post_recv(&op) } {
            Ok(()) => st.rx_posted[i] = true,
            Err(e) => {
                if !e.is_again() {
                    tracing::warn!(error = %e, "collectives: a frame buffer could not be posted");
                }
                // Tried again at the next progress.
                self.work.store(true, Ordering::Release);
            }
        }
    }

    /// Every receive buffer holds a frame that waits: one more is posted
    /// (up to [`RX_MAX`]).
    fn grow_rx(&self, st: &mut State) {
        let n = st.rx.len();
        if st.shut || n >= RX_MAX || st.rx_held.iter().any(|h| !h) {
            return;
        }
        let len = st.rx[0].len();
        st.rx.push(vec![0u8; len]);
        st.rx_posted.push(false);
        st.rx_held.push(false);
        self.post_rx(st, n);
    }

    /// Posts a frame, or gives it back when it must wait.
    pub(super) fn post_frame(
        &self,
        st: &mut State,
        p: Pending,
    ) -> std::result::Result<(), Pending> {
        if p.frame.len() <= self.inject_size {
            if let Some(i) = self.inject_id(st, p.dest) {
                return self.inject_frame(st, p, i);
            }
        }
        let Some(slot) = st.tx_free.pop() else {
            return Err(p);
        };
        let inject = p.frame.len() <= self.inject_size;
        let iov = [IoVec {
            base: p.frame.as_ptr() as usize,
            len: p.frame.len(),
        }];
        let op = SendOp {
            iov: &iov,
            desc: &[],
            dest: p.dest,
            tag: COLL_TAG,
            data: 0,
            context: self.context(slot),
            flags: FI_COMPLETION | if inject { FI_INJECT } else { 0 },
            tagged: true,
        };
        // SAFETY: the frame stays in its slot (a Vec moved keeps its heap
        // buffer) until the send completes; injected, it is copied before
        // this returns.
        match unsafe { self.ops.post_send(&op) } {
            Ok(()) => {
                st.tx.insert(
                    slot,
                    TxSlot {
                        group: p.group,
                        to: p.to,
                        _frame: (!inject).then_some(p.frame),
                    },
                );
                Ok(())
            }
            Err(e) if e.is_again() => {
                st.tx_free.push(slot);
                Err(p)
            }
            Err(e) => {
                st.tx_free.push(slot);
                tracing::debug!(error = %e, to = p.to, "collectives: a frame could not be sent");
                if let Some(g) = st.groups.get_mut(&p.group) {
                    g.core.lost(p.to, e.code());
                }
                Ok(())
            }
        }
    }

    /// The index of `dest` among the injected frames' contexts (None when
    /// every one is taken: the frame goes with a completion).
    pub(super) fn inject_id(&self, st: &mut State, dest: u64) -> Option<usize> {
        if let Some(&i) = st.inject_ids.get(&dest) {
            return Some(i);
        }
        let i = st.inject_dests.len();
        if i == INJECT_DESTS {
            return None;
        }
        st.inject_dests.push(dest);
        st.inject_ids.insert(dest, i);
        Some(i)
    }

    /// Injects a frame (copied before the call returns, no completion: a
    /// failure comes as an error entry naming its destination).
    pub(super) fn inject_frame(
        &self,
        st: &mut State,
        p: Pending,
        id: usize,
    ) -> std::result::Result<(), Pending> {
        let iov = [IoVec {
            base: p.frame.as_ptr() as usize,
            len: p.frame.len(),
        }];
        let op = SendOp {
            iov: &iov,
            desc: &[],
            dest: p.dest,
            tag: COLL_TAG,
            data: 0,
            context: self.context(CONTEXTS + id),
            flags: FI_INJECT | OFI_INJECT_CALL,
            tagged: true,
        };
        // SAFETY: an injected frame is copied before this returns.
        match unsafe { self.ops.post_send(&op) } {
            Ok(()) => Ok(()),
            Err(e) if e.is_again() => Err(p),
            Err(e) => {
                tracing::debug!(error = %e, to = p.to, "collectives: a frame could not be sent");
                if let Some(g) = st.groups.get_mut(&p.group) {
                    g.core.lost(p.to, e.code());
                }
                Ok(())
            }
        }
    }

    /// The peer at `fi_addr` is gone: every group it is a member of fails.
    pub(super) fn lost_peer(&self, st: &mut State, fi_addr: u64, err: i32) {
        let p = self.av.primary(fi_addr).unwrap_or(fi_addr);
        let hit: Vec<(u64, u32)> = st
            .groups
            .iter()
            .filter_map(|(a, g)| {
                g.primaries
                    .iter()
                    .position(|x| *x == p)
                    .map(|r| (*a, r as u32))
            })
            .collect();
        for (a, r) in hit {
            if let Some(g) = st.groups.get_mut(&a) {
                g.core.lost(r, err);
            }
            self.pump(st, a);
            self.board_fail(
                st,
                a,
                CollError::Lost {
                    rank: r,
                    errno: err,
                },
            );
        }
    }

    /// Moves a group's frames to the provider and its outcomes to the
    /// application.
    pub(super) fn pump(&self, st: &mut State, addr: u64) {
        loop {
            let Some(g) = st.groups.get_mut(&addr) else {
                return;
            };
            let mut frames = std::mem::take(&mut st.out_frames);
            while let Some(t) = g.core.poll_transmit() {
                frames.push(Pending {
                    group: addr,
                    to: t.to,
                    dest: g.members[t.to as usize],
                    frame: t.frame,
                });
            }
            let mut events = std::mem::take(&mut st.out_events);
            while let Some(e) = g.core.poll_event() {
                events.push(e);
            }
            if frames.is_empty() && events.is_empty() {
                st.out_frames = frames;
                st.out_events = events;
                return;
            }
            for f in frames.drain(..) {
                if !st.waiting.is_empty() {
                    st.waiting.push_back(f);
                } else if let Err(f) = self.post_frame(st, f) {
                    st.waiting.push_back(f);
                    self.work.store(true, Ordering::Release);
                }
            }
            for e in events.drain(..) {
                self.report(st, e);
            }
            st.out_frames = frames;
            st.out_events = events;
        }
    }

    /// Hands an outcome to whoever waits for it.
    pub(super) fn report(&self, st: &mut State, e: Event) {
        let (token, outcome) = match e {
            Event::Done { token, result } => (token, Ok(result)),
            Event::Failed { token, error } => (token, Err(error)),
        };
        let Some((addr, waiter)) = st.ops.remove(&token) else {
            return;
        };
        match (waiter, outcome) {
            (Waiter::App { context, result }, Ok(bytes)) => {
                if let Some((at, len)) = result {
                    let n = len.min(bytes.len());
                    // SAFETY: `at` is writable for `len` bytes until the
                    // operation completes (the contract of `post`, whose
                    // caller named it), and it completes now.
                    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), at as *mut u8, n) };
                }
                self.tx_cq.push(
                    CqTaggedEntry {
                        op_context: context,
                        flags: FI_COLLECTIVE,
                        ..Default::default()
                    },
                    FI_ADDR_NOTAVAIL,
                );
            }
            (Waiter::App { context, .. }, Err(err)) => {
                tracing::debug!(error = %err, "collective operation failed");
                self.tx_cq.push_err(
                    CqErrEntry {
                        op_context: context,
                        flags: FI_COLLECTIVE,
                        err: err.errno(),
                        prov_errno: err.errno(),
                        ..Default::default()
                    },
                    FI_ADDR_NOTAVAIL,
                );
            }
            (Waiter::Join { fid, context }, Ok(_)) => self.joined(st, addr, fid, context),
            (Waiter::Agree { fid, context }, Ok(bytes)) => {
                self.agreed(st, addr, &bytes);
                self.eq.push(EqEvent {
                    event: eq_event::FI_JOIN_COMPLETE,
                    fid,
                    context,
                    ..Default::default()
                })
            }
            (Waiter::Join { fid, context } | Waiter::Agree { fid, context }, Err(err)) => {
                if let Some(g) = st.groups.get_mut(&addr) {
                    g.drop_board();
                }
                tracing::debug!(error = %err, "collective join failed");
                self.eq.push_err(EqError {
                    fid,
                    context,
                    err: err.errno(),
                    prov_errno: err.errno(),
                    ..Default::default()
                });
            }
        }
    }

    /// A frame that arrived, from `src` if the provider knows it: false
    /// when it cannot be taken yet (see [`Held`]).
    pub(super) fn on_frame(&self, st: &mut State, f: &[u8], src: u64) -> bool {
        let r = match Frame::new_checked(f).and_then(|v| Repr::parse(&v)) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "collectives: a malformed frame dropped");
                return true;
            }
        };
        let Some(&addr) = st.by_name.get(&r.group) else {
            if st.left.contains(&r.group) {
                return true;
            }
            if st.orphan_bytes + f.len() > ORPHAN_BYTES.min(self.limits.early_bytes / 4) {
                return false;
            }
            st.orphan_bytes += f.len();
            st.orphans
                .entry(r.group)
                .or_insert_with(|| Orphans {
                    since: Instant::now(),
                    frames: Vec::new(),
                })
                .frames
                .push((src, f.to_vec()));
            return true;
        };
        let Some(g) = st.groups.get_mut(&addr) else {
            return true;
        };
        if src != FI_ADDR_NOTAVAIL {
            let p = self.av.primary(src).unwrap_or(src);
            if g.primaries.get(r.from as usize) != Some(&p) {
                tracing::warn!(
                    from = r.from,
                    src,
                    "collectives: a frame whose sender is not the member it names dropped"
                );
                return true;
            }
        }
        let taken = match g.core.on_frame(&r, &f[HDR_LEN..]) {
            Ok(Fed::Taken) => true,
            Ok(Fed::Later) => false,
            Err(e) => {
                tracing::warn!(error = %e, "collectives: a frame that does not fit: the group fails");
                true
            }
        };
        self.pump(st, addr);
        taken
    }

    /// Handles what the taps recorded, posts what waits.
    pub(super) fn run(&self) {
        if !self.work.swap(false, Ordering::AcqRel) {
            if self.board_live.load(Ordering::Relaxed) != 0 {
                let mut st = lock(&self.st);
                self.poll_boards(&mut st);
            }
            return;
        }
        let mut st = lock(&self.st);
        if self.board_live.load(Ordering::Relaxed) != 0 {
            self.poll_boards(&mut st);
        }
        let mut rounds = 0;
        loop {
            let inbox = std::mem::take(&mut *lock(&self.inbox));
            for d in inbox.done {
                self.completed(&mut st, d);
            }
            for (fi_addr, err) in inbox.deaths {
                self.lost_peer(&mut st, fi_addr, err);
            }
            if !st.shut {
                for i in 0..st.rx.len() {
                    if !st.rx_posted[i] && !st.rx_held[i] {
                        self.post_rx(&mut st, i);
                    }
                }
            }
            while let Some(p) = st.waiting.pop_front() {
                if let Err(p) = self.post_frame(&mut st, p) {
                    st.waiting.push_front(p);
                    break;
                }
            }
            if st.orphan_bytes > 0 {
                self.expire_orphans(&mut st);
            }
            rounds += 1;
            // More arrived while handling (a repost that matched at once),
            // or frames still wait: another round, within reason.
            let again = self.work.swap(false, Ordering::AcqRel);
            if !again || rounds >= 64 {
                if again || !st.waiting.is_empty() {
                    self.work.store(true, Ordering::Release);
                }
                return;
            }
        }
    }

    /// Drops the frames of groups not joined within [`ORPHAN_TTL`] of the
    /// first: what peers can make an endpoint hold has an expiry as well
    /// as a bound.
    pub(super) fn expire_orphans(&self, st: &mut State) {
        let now = Instant::now();
        let old: Vec<u64> = st
            .orphans
            .iter()
            .filter(|(_, o)| now.duration_since(o.since) >= ORPHAN_TTL)
            .map(|(n, _)| *n)
            .collect();
        for name in old {
            if let Some(o) = st.orphans.remove(&name) {
                let bytes: usize = o.frames.iter().map(|(_, f)| f.len()).sum();
                st.orphan_bytes -= bytes;
                tracing::warn!(
                    group = name,
                    frames = o.frames.len(),
                    "collectives: frames of a group this endpoint has not joined dropped after {}s",
                    ORPHAN_TTL.as_secs()
                );
            }
        }
    }

    /// One of the layer's operations completed.
    pub(super) fn completed(&self, st: &mut State, d: Done) {
        if d.slot >= CONTEXTS {
            // An injected frame failed (they complete silently).
            if d.err != 0 && d.err != errno::FI_ECANCELED {
                if let Some(&dest) = st.inject_dests.get(d.slot - CONTEXTS) {
                    self.lost_peer(st, dest, d.err);
                }
            }
            return;
        }
        if d.slot < RX_MAX {
            st.rx_posted[d.slot] = false;
            if d.err == 0 {
                let buf = std::mem::take(&mut st.rx[d.slot]);
                let len = d.len.min(buf.len());
                let taken = self.on_frame(st, &buf[..len], d.src);
                st.rx[d.slot] = buf;
                if !taken {
                    st.rx_held[d.slot] = true;
                    st.held.push_back(Held::Slot {
                        slot: d.slot,
                        len,
                        src: d.src,
                    });
                    self.grow_rx(st);
                    return;
                }
            } else if d.err != errno::FI_ECANCELED {
                tracing::warn!(err = d.err, "collectives: a frame receive failed");
            }
            if !st.shut {
                self.post_rx(st, d.slot);
            }
            return;
        }
        let Some(t) = st.tx.remove(&d.slot) else {
            return;
        };
        st.tx_free.push(d.slot);
        if d.err != 0 && d.err != errno::FI_ECANCELED {
            if let Some(g) = st.groups.get_mut(&t.group) {
                g.core.lost(t.to, d.err);
            }
            self.pump(st, t.group);
        }
    }
}
