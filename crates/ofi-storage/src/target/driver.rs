//! The target's event loop: one [`Driver`] per [`Target::run`], holding
//! every initiator's state (peers, sessions, posted capsule receives,
//! staging slots, RMAs in flight and the backlog of refused ones) and
//! turning the core's actions into fabric operations and file I/O.

use super::*;

pub(super) struct Driver<'a> {
    pub(super) ch: &'a Channel,
    /// The control listener (RDM), or None: the channel listens (MSG).
    pub(super) listener: Option<&'a TcpListener>,
    pub(super) backend: &'a Backend,
    pub(super) core: &'a mut TargetCore,
    pub(super) stop: &'a AtomicBool,
    pub(super) peers: HashMap<PeerId, Peer>,
    pub(super) by_addr: HashMap<u64, PeerId>,
    pub(super) tokens: HashMap<u64, PeerId>,
    pub(super) sessions: HashMap<u32, PeerId>,
    pub(super) next_peer: u64,
    pub(super) outbox: VecDeque<(Addr, [u8; CAPSULE_LEN])>,
    /// A poll outside the main pass collected completions.
    pub(super) collected: bool,
    /// The channel reports each capsule's source (FI_SOURCE, or MSG
    /// connections): capsules are routed by it alone.
    pub(super) sources: bool,
    /// Posted capsule receives, with the MSG connection each belongs to
    /// (None: RDM, any initiator).
    pub(super) recvs: Vec<(Option<Addr>, Op<'a, Vec<u8>>)>,
    /// MSG connections to close once no RMA of theirs runs any more.
    pub(super) closing: Vec<Addr>,
    /// Staging buffers (None while an RMA or the backlog holds one).
    pub(super) slots: Vec<Option<BytesMut>>,
    /// RMAs the provider pushed back, retried in order per initiator
    /// (each holds a staging slot: at most `slots` of them).
    pub(super) backlog: Backlog<PeerId, (PeerId, Rma)>,
    pub(super) limits: Limits,
    /// Connections refused for the cap on initiators (logged at each
    /// power of two).
    pub(super) refused: u64,
}

impl<'a> Driver<'a> {
    pub(super) fn run(mut self) -> Result<(), String> {
        let ch = self.ch;
        let cfg = *self.core.config();
        if self.listener.is_some() {
            for _ in 0..RECVS {
                self.recvs.push((
                    None,
                    ch.recv(vec![0u8; BATCH_BYTES])
                        .map_err(|e| format!("posting receives: {}", e.error))?,
                ));
            }
        }
        let mut rmas: Vec<Running<'a>> = Vec::new();
        let mut stopping_since: Option<Instant> = None;
        // The control sockets are read when a sleep saw them readable, and
        // at least every CONTROL_EVERY while busy: an accept or read that
        // finds nothing costs a system call (an accept also allocates a
        // socket), which the data path would pay on every pass.
        let mut control_due = true;
        let mut control_at = Instant::now();
        loop {
            let mut work = false;
            if self.stop.load(Ordering::Relaxed) && stopping_since.is_none() {
                info!("target: shutting down");
                self.core.shut_down();
                stopping_since = Some(Instant::now());
            }
            if control_due || control_at.elapsed() >= CONTROL_EVERY {
                work |= self.control();
                control_due = false;
                control_at = Instant::now();
            }
            // Operations finish only when a poll collects their
            // completions: without any, nothing is worth looking at.
            let collected = ch.poll().unwrap_or(0) > 0 || std::mem::take(&mut self.collected);
            let mut recvs = std::mem::take(&mut self.recvs);
            let mut lost = Vec::new();
            for (conn, r) in recvs.iter_mut().filter(|_| collected) {
                let conn = *conn;
                // An MSG connection names its initiator.
                let Some(again) = post::reap(ch, r, conn, |c, src| self.capsule(c, conn.or(src)))
                else {
                    continue;
                };
                work = true;
                match (again, conn) {
                    (Ok(()), _) => {}
                    // The connection is gone (its shutdown event follows).
                    (Err(_), Some(c)) => lost.push(c),
                    (Err(e), None) => return Err(format!("reposting a receive: {e}")),
                }
            }
            if !lost.is_empty() {
                recvs.retain(|(c, _)| c.is_none_or(|c| !lost.contains(&c)));
            }
            // Nothing posts receives while a capsule is taken in: put the
            // list back as it is (no copy, no allocation per pass).
            debug_assert!(self.recvs.is_empty());
            self.recvs = recvs;
            let mut i = 0;
            while collected && i < rmas.len() {
                let Some(res) = rmas[i].3.check() else {
                    i += 1;
                    continue;
                };
                work = true;
                let (op, slot, _, _) = rmas.swap_remove(i);
                let r = match res {
                    Ok(d) => {
                        self.slots[slot as usize] = Some(d.buf);
                        Ok(())
                    }
                    Err(e) => {
                        warn!("target: RMA failed: {}", e.error);
                        self.slots[slot as usize] =
                            Some(e.buf.unwrap_or_else(|| staging(cfg.max_io as usize)));
                        Err(e.error.code())
                    }
                };
                self.core.rma_done(op, r);
            }
            // The pass's RMA leaves in one system call with the completion
            // capsules that `flush` sends behind it (FI_MORE until then).
            let batch = ch.batch();
            // RMAs the provider pushed back go first, in order.
            if !self.backlog.is_empty() {
                work |= self.retry_rmas(&mut rmas);
            }
            while let Some(a) = self.core.poll_action() {
                work = true;
                match a {
                    Action::RmaRead {
                        op,
                        peer,
                        slot,
                        len,
                        addr,
                        key,
                    }
                    | Action::RmaWrite {
                        op,
                        peer,
                        slot,
                        len,
                        addr,
                        key,
                    } => {
                        let read = matches!(a, Action::RmaRead { .. });
                        let Some(mut buf) =
                            self.slots.get_mut(slot as usize).and_then(Option::take)
                        else {
                            self.core.rma_done(op, Err(ofi::errno::FI_EINVAL));
                            continue;
                        };
                        let Some(dest) = self.peers.get(&peer).and_then(|p| p.addr) else {
                            self.slots[slot as usize] = Some(buf);
                            self.core.rma_done(op, Err(ofi::errno::FI_ENOTCONN));
                            continue;
                        };
                        if read {
                            buf.resize(len as usize, 0);
                        } else {
                            buf.truncate(len as usize);
                        }
                        let r = Rma {
                            op,
                            slot,
                            read,
                            dest,
                            addr,
                            key,
                            buf,
                        };
                        // Behind what waits for the same initiator.
                        if self.backlog.holds(peer) {
                            self.defer(peer, r);
                            continue;
                        }
                        match post_rma(ch, r) {
                            Posting::Running(h) => rmas.push(h),
                            Posting::Again(r) => self.defer(peer, r),
                            Posting::Failed(r, e) => self.rma_failed(r, &e),
                        }
                    }
                    Action::Io { op, io } => {
                        let r = self.io(io);
                        self.core.io_done(op, r);
                    }
                    Action::Send { peer, capsule } => self.send(peer, capsule),
                    Action::Disconnect { peer, reason } => {
                        if let Some(r) = reason {
                            warn!("target: dropping initiator {}: {r}", peer.0);
                        }
                        self.forget(peer, false);
                    }
                    Action::Released { peer } => self.forget(peer, true),
                }
            }
            drop(batch);
            work |= self.flush();
            // A connection closes once its last RMA has ended.
            if !self.closing.is_empty() {
                let ch = self.ch;
                self.closing.retain(|c| {
                    let busy = rmas.iter().any(|r| r.2 == *c);
                    if !busy {
                        let _ = ch.disconnect(*c);
                    }
                    busy
                });
            }
            if !self.backlog.is_empty() {
                self.expire_rmas();
            }
            if let Some(t) = stopping_since {
                let quiet = self.core.running() == 0
                    && self.outbox.is_empty()
                    && rmas.is_empty()
                    && self.backlog.is_empty();
                if quiet || t.elapsed() > Duration::from_secs(10) {
                    break;
                }
            }
            // No spinning before the sleep: the process that would bring
            // the next piece of work (the initiator, the client) often
            // shares the core, and a spinning pass takes it from that
            // process (measured on 2 cores: fewer IOPS with 16 or 64
            // idle passes than with none).
            if work {
                continue;
            }
            let fds: Vec<(BorrowedFd<'_>, PollFlags)> = self
                .listener
                .map(|l| l.as_fd())
                .into_iter()
                .chain(
                    self.peers
                        .values()
                        .filter_map(|p| p.ctl.as_ref().map(|s| s.as_fd())),
                )
                .map(|fd| (fd, PollFlags::IN))
                .collect();
            let t = if rmas.is_empty() && self.outbox.is_empty() && self.backlog.is_empty() {
                Duration::from_millis(200)
            } else {
                Duration::from_millis(1)
            };
            control_due = crate::wait::sleep(ch, &fds, t) != crate::wait::Woken::Channel;
        }
        // Tell every initiator; their sessions end with ShuttingDown.
        let peers: Vec<PeerId> = self.peers.keys().copied().collect();
        for p in peers {
            if let Some(s) = self.peers.get(&p).and_then(|x| x.session) {
                self.send(p, Repr::Disconnect { session: s }.to_bytes());
            }
        }
        self.flush();
        // Pending RMAs and receives are cancelled by dropping their handles.
        drop(rmas);
        self.recvs.clear();
        let _ = ch.wait_any(Duration::from_millis(100));
        Ok(())
    }

    fn io(&mut self, io: Io) -> Result<(), Status> {
        let b = self.backend;
        let slots = &mut self.slots;
        match io {
            Io::Read { slot, offset, len } => {
                let buf = slots
                    .get_mut(slot as usize)
                    .and_then(Option::as_mut)
                    .ok_or(Status::Invalid)?;
                buf.resize(len as usize, 0);
                b.read(offset, buf)
            }
            Io::Write {
                slot,
                offset,
                len,
                fua,
            } => {
                let buf = slots
                    .get(slot as usize)
                    .and_then(Option::as_ref)
                    .ok_or(Status::Invalid)?;
                let data = buf.get(..len as usize).ok_or(Status::Invalid)?;
                b.write(offset, data, fua)
            }
            Io::Sync => b.sync(),
            Io::Trim { offset, len } => b.trim(offset, len),
            Io::Zero {
                offset,
                len,
                fua,
                may_trim,
            } => b.zero(offset, len, fua, may_trim),
        }
    }

    /// Keeps an RMA the provider pushed back for a later pass.
    fn defer(&mut self, peer: PeerId, r: Rma) {
        if let Err((_, r)) = self.backlog.push(peer, (peer, r), Instant::now()) {
            // Each entry holds a staging slot: the backlog cannot fill.
            let e = ofi::Error::new(ofi::errno::FI_EAGAIN, "the RMA backlog is full");
            self.rma_failed(r, &e);
        }
        debug_assert!(self.backlog.len() <= self.slots.len());
    }

    /// Posts the RMAs the provider pushed back, oldest first (an
    /// initiator's stay in order; one still refused holds up no other).
    /// True if any left the backlog.
    fn retry_rmas(&mut self, rmas: &mut Vec<Running<'a>>) -> bool {
        let ch = self.ch;
        let mut failed = Vec::new();
        let moved = self.backlog.retry(|_, (peer, r)| match post_rma(ch, r) {
            Posting::Running(h) => {
                rmas.push(h);
                None
            }
            Posting::Again(r) => Some((peer, r)),
            Posting::Failed(r, e) => {
                failed.push((r, e));
                None
            }
        });
        for (r, e) in failed {
            self.rma_failed(r, &e);
        }
        moved
    }

    /// An RMA that could not be posted: its slot comes back, its command
    /// fails.
    fn rma_failed(&mut self, r: Rma, e: &ofi::Error) {
        warn!("target: posting RMA: {e}");
        self.slots[r.slot as usize] = Some(r.buf);
        self.core.rma_done(r.op, Err(e.code()));
    }

    /// Fails the RMAs that have waited past [`RMA_PATIENCE`]: the provider
    /// refused them all that time, the path to the peer is stuck.
    fn expire_rmas(&mut self) {
        for (peer, (_, r)) in self.backlog.expired(Instant::now(), RMA_PATIENCE) {
            warn!(
                "target: initiator {}: the fabric took no RMA to it for {RMA_PATIENCE:?}",
                peer.0
            );
            self.slots[r.slot as usize] = Some(r.buf);
            self.core.rma_done(r.op, Err(ofi::errno::FI_EAGAIN));
        }
    }

    /// Accepts control connections and reads the open ones. True if
    /// anything happened.
    fn control(&mut self) -> bool {
        let Some(listener) = self.listener else {
            return self.connections();
        };
        let mut work = false;
        loop {
            match listener.accept() {
                Ok((s, from)) => {
                    work = true;
                    let _ = s.set_nodelay(true);
                    if s.set_nonblocking(true).is_err() {
                        continue;
                    }
                    if self.peers.len() >= self.limits.max_initiators.max(1) {
                        self.refuse_control(s, from);
                        continue;
                    }
                    if let Err(e) = control::keepalive(&s, self.limits.liveness) {
                        warn!("target: control connection from {from}: keepalive: {e}");
                    }
                    let id = PeerId(self.next_peer);
                    self.next_peer += 1;
                    info!("target: initiator {} connects from {from}", id.0);
                    self.peers.insert(
                        id,
                        Peer {
                            ctl: Some(s),
                            inbuf: Vec::new(),
                            addr: None,
                            token: 0,
                            session: None,
                            setup_by: Some(Instant::now() + self.limits.setup_timeout),
                        },
                    );
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => {
                    warn!("target: accept: {e}");
                    break;
                }
            }
        }
        let ids: Vec<PeerId> = self.peers.keys().copied().collect();
        for id in ids {
            let mut closed = None;
            let mut hello = None;
            if let Some(p) = self.peers.get_mut(&id) {
                let Some(s) = p.ctl.as_mut() else { continue };
                let mut b = [0u8; 1024];
                match s.read(&mut b) {
                    Ok(0) => closed = Some("control connection closed".to_string()),
                    Ok(n) => {
                        work = true;
                        if p.addr.is_some() {
                            closed = Some("unexpected bytes on the control connection".into());
                        } else {
                            p.inbuf.extend_from_slice(&b[..n]);
                            match control::parse_hello(&p.inbuf) {
                                Ok(Some((addr, _))) => hello = Some(addr),
                                Ok(None) => {}
                                Err(e) => closed = Some(format!("bad HELLO: {e}")),
                            }
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(e) => closed = Some(format!("control connection: {e}")),
                }
            }
            if let Some(addr) = hello {
                if let Err(e) = self.welcome(id, &addr) {
                    closed = Some(e);
                }
            }
            if closed.is_none() {
                closed = self.late(id);
            }
            if let Some(why) = closed {
                work = true;
                info!("target: initiator {}: {why}", id.0);
                self.core.close(id);
                self.forget(id, true);
            }
        }
        work
    }

    /// MSG: accepts connection requests and learns of connections that
    /// ended. True if anything happened.
    fn connections(&mut self) -> bool {
        let mut work = false;
        loop {
            let ev = match self.ch.cm_event() {
                Ok(Some(ev)) => ev,
                Ok(None) => break,
                Err(e) => {
                    warn!("target: connection events: {e}");
                    break;
                }
            };
            work = true;
            match ev {
                CmEvent::Request(req) => self.accept(req),
                CmEvent::Connected { conn, .. } => {
                    if let Some(id) = self.by_addr.get(&conn.0) {
                        info!("target: initiator {} connected", id.0);
                    }
                }
                CmEvent::Shutdown { conn }
                | CmEvent::Failed {
                    conn: Some(conn), ..
                } => {
                    if let Some(id) = self.by_addr.get(&conn.0).copied() {
                        info!("target: initiator {}: connection closed", id.0);
                        self.core.close(id);
                        self.forget(id, true);
                    } else if !self.closing.contains(&conn) {
                        let _ = self.ch.disconnect(conn);
                    }
                }
                CmEvent::Failed {
                    conn: None, error, ..
                } => {
                    warn!("target: listening: {error}");
                }
            }
        }
        let ids: Vec<PeerId> = self.peers.keys().copied().collect();
        for id in ids {
            if let Some(why) = self.late(id) {
                work = true;
                info!("target: initiator {}: {why}", id.0);
                self.core.close(id);
                self.forget(id, true);
            }
        }
        work
    }

    /// Why `id` is dropped for not having opened its session in time, if
    /// it is late.
    fn late(&self, id: PeerId) -> Option<String> {
        let p = self.peers.get(&id)?;
        if p.setup_by.is_none_or(|t| Instant::now() < t) {
            return None;
        }
        let what = if self.listener.is_some() && p.addr.is_none() {
            "HELLO"
        } else {
            "CONNECT"
        };
        Some(format!("no {what} within {:?}", self.limits.setup_timeout))
    }

    /// Turns away a control connection beyond the cap on initiators: a
    /// WELCOME saying `Busy`, then the close.
    fn refuse_control(&mut self, mut s: TcpStream, from: SocketAddr) {
        self.count_refusal(&from.to_string());
        let me = self.ch.address().unwrap_or_default();
        let _ = s.write_all(&control::welcome(Status::Busy, 0, &me));
        // What the initiator sent already is read, so that the close is a
        // FIN (it reads the WELCOME) rather than a reset.
        let mut b = [0u8; 1024];
        let _ = s.read(&mut b);
        let _ = s.shutdown(Shutdown::Both);
    }

    /// Counts a connection refused for the cap on initiators, and says so
    /// at each power of two.
    fn count_refusal(&mut self, whom: &str) {
        self.refused += 1;
        if self.refused.is_power_of_two() {
            warn!(
                "target: {} initiators connected (the most): refusing {whom} ({} refused so far)",
                self.peers.len(),
                self.refused
            );
        }
    }

    /// MSG: accepts an initiator's connection (refused while shutting
    /// down), handing it its token; its receives are posted at once.
    fn accept(&mut self, req: ofi::safe::ConnRequest) {
        if self.stop.load(Ordering::Relaxed) {
            let _ = self.ch.reject(req, &control::refusal(Status::ShuttingDown));
            return;
        }
        if self.peers.len() >= self.limits.max_initiators.max(1) {
            self.count_refusal("a connection");
            let _ = self.ch.reject(req, &control::refusal(Status::Busy));
            return;
        }
        let t = match token() {
            Ok(t) => t,
            Err(e) => {
                warn!("target: refusing a connection: {e}");
                let _ = self.ch.reject(req, &[]);
                return;
            }
        };
        let conn = match self.ch.accept(req, &t.to_be_bytes()) {
            Ok(c) => c,
            Err(e) => {
                warn!("target: accepting a connection: {e}");
                return;
            }
        };
        let mut recvs = Vec::with_capacity(RECVS_PER_CONN);
        for _ in 0..RECVS_PER_CONN {
            match self.ch.recv_on(vec![0u8; BATCH_BYTES], conn) {
                Ok(op) => recvs.push((Some(conn), op)),
                Err(e) => {
                    warn!("target: posting receives on a connection: {}", e.error);
                    drop(recvs);
                    let _ = self.ch.disconnect(conn);
                    return;
                }
            }
        }
        self.recvs.append(&mut recvs);
        let id = PeerId(self.next_peer);
        self.next_peer += 1;
        info!("target: initiator {} connects", id.0);
        self.peers.insert(
            id,
            Peer {
                ctl: None,
                inbuf: Vec::new(),
                addr: Some(conn),
                token: t,
                session: None,
                setup_by: Some(Instant::now() + self.limits.setup_timeout),
            },
        );
        self.by_addr.insert(conn.0, id);
        self.tokens.insert(t, id);
        self.core.expect(id, t);
    }

    fn welcome(&mut self, id: PeerId, addr: &[u8]) -> Result<(), String> {
        let fabric = self
            .ch
            .insert(addr)
            .map_err(|e| format!("initiator's fabric address: {e}"))?;
        let me = self
            .ch
            .address()
            .map_err(|e| format!("own fabric address: {e}"))?;
        let t = token()?;
        let p = self.peers.get_mut(&id).ok_or("gone")?;
        p.addr = Some(fabric);
        p.token = t;
        self.by_addr.insert(fabric.0, id);
        self.tokens.insert(t, id);
        self.core.expect(id, t);
        let status = if self.stop.load(Ordering::Relaxed) {
            Status::ShuttingDown
        } else {
            Status::Ok
        };
        let msg = control::welcome(status, t, &me);
        let s = p.ctl.as_mut().ok_or("gone")?;
        // A fresh socket takes a few hundred bytes without blocking; make
        // sure anyway.
        let _ = s.set_nonblocking(false);
        let _ = s.set_write_timeout(Some(Duration::from_secs(2)));
        let r = s.write_all(&msg);
        let _ = s.set_nonblocking(true);
        r.map_err(|e| format!("sending WELCOME: {e}"))
    }

    /// Routes a capsule to its peer: by source address when the provider
    /// reports sources (FI_SOURCE; an MSG connection names its initiator),
    /// a capsule from an unknown source being dropped; else by the token
    /// or session it names (a peer that knows another's session id can
    /// then act on it: what a channel without FI_SOURCE allows).
    fn capsule(&mut self, bytes: &[u8], src: Option<Addr>) {
        let by_src = src.and_then(|a| self.by_addr.get(&a.0).copied());
        if self.sources && by_src.is_none() {
            // A CONNECT proving its control connection's token is the
            // initiator's own, whatever source the provider names (the AV
            // may report an older entry of the same address, one a gone
            // initiator used): that source is this initiator's from now.
            if let Ok(Repr::Connect { token, .. }) = Repr::from_bytes(bytes) {
                if let Some(p) = self.tokens.get(&token).copied() {
                    if let Some(a) = src {
                        self.by_addr.insert(a.0, p);
                    }
                    return self.core.on_capsule(p, bytes);
                }
            }
            // A DISCONNECT racing its control connection's close is
            // expected; anything else is a stranger's.
            if !matches!(Repr::from_bytes(bytes), Ok(Repr::Disconnect { .. })) {
                warn!(
                    "target: dropping a capsule from an unknown source ({} bytes)",
                    bytes.len()
                );
            }
            return;
        }
        let by_content = match Repr::from_bytes(bytes) {
            Ok(Repr::Connect { token, .. }) => self.tokens.get(&token).copied(),
            Ok(Repr::Command(c)) => self.sessions.get(&c.session).copied(),
            Ok(Repr::Disconnect { session }) => self.sessions.get(&session).copied(),
            _ => None,
        };
        match by_src.or(by_content) {
            Some(p) => self.core.on_capsule(p, bytes),
            // A DISCONNECT racing its control connection's close.
            None if matches!(Repr::from_bytes(bytes), Ok(Repr::Disconnect { .. })) => {}
            None => warn!(
                "target: dropping a capsule from an unknown peer ({} bytes)",
                bytes.len()
            ),
        }
    }

    fn send(&mut self, peer: PeerId, capsule: [u8; CAPSULE_LEN]) {
        let Some(p) = self.peers.get_mut(&peer) else {
            return;
        };
        if let Ok(Repr::Accept(a)) = Repr::from_bytes(&capsule) {
            p.session = Some(a.session);
            p.setup_by = None;
            self.sessions.insert(a.session, peer);
        }
        if let Some(addr) = p.addr {
            self.outbox.push_back((addr, capsule));
        }
    }

    /// Sends queued capsules, those in a row for the same peer in one
    /// message; true if any went.
    fn flush(&mut self) -> bool {
        let f = post::flush(self.ch, &mut self.outbox, |e| {
            warn!("target: sending a capsule: {e}")
        });
        if f.again {
            self.collected |= self.ch.poll().unwrap_or(0) > 0;
        }
        f.sent
    }

    /// Drops what routes to `peer`; `all`: the peer itself too.
    fn forget(&mut self, peer: PeerId, all: bool) {
        // What is queued for the peer (a REFUSE, last completions) goes
        // before its control connection closes, if the provider takes it
        // now; what it does not take is dropped with the peer.
        self.flush();
        // Its RMAs still waiting for the provider end here (its commands
        // are orphans: nobody hears of them).
        for (_, r) in self.backlog.remove(peer) {
            self.slots[r.slot as usize] = Some(r.buf);
            self.core.rma_done(r.op, Err(ofi::errno::FI_ECONNABORTED));
        }
        // (Unless another initiator has the same address: one at an
        // address a gone one used.)
        if let Some(a) = self.peers.get(&peer).and_then(|p| p.addr) {
            if !self
                .peers
                .iter()
                .any(|(id, p)| *id != peer && p.addr == Some(a))
            {
                self.outbox.retain(|(to, _)| *to != a);
            }
        }
        if let Some(p) = self.peers.get_mut(&peer) {
            if let Some(s) = p.ctl.take() {
                let _ = s.shutdown(Shutdown::Both);
            }
            // MSG: the connection's receives go now, the connection once
            // its RMAs have ended (the initiator then sees it shut down).
            if let Some(c) = p.addr.filter(|_| self.listener.is_none()) {
                if !self.closing.contains(&c) {
                    self.recvs.retain(|(on, _)| *on != Some(c));
                    self.closing.push(c);
                }
            }
            p.setup_by = None;
            self.tokens.remove(&p.token);
            if let Some(s) = p.session.take() {
                self.sessions.remove(&s);
            }
            if all {
                // Its address and any other entry the provider named it by.
                self.by_addr.retain(|_, id| *id != peer);
                self.peers.remove(&peer);
            }
        }
    }
}
