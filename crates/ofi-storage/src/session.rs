//! The initiator's driver: one session with a target over a fabric
//! channel, stepped by the thread that owns it (a [`Volume`]'s driver
//! thread, or an NBD gateway connection that also serves its client from
//! the same loop, so that no request crosses a thread).
//!
//! Each request's buffer is registered as a region the target reaches by
//! RMA (it reads it for a WRITE, writes into it for a READ), the command
//! capsule goes out, and the buffer comes back in the [`Completion`] once
//! the target has answered. Requests beyond the credits wait here. The
//! target's death (its control connection closes) fails every pending
//! request at once.
//!
//! Over RDM a TCP control connection carries the address exchange and
//! tells of either side's death; over MSG the fabric connection itself
//! does both: the target's token comes with the accept, and FI_SHUTDOWN
//! (or an error) ends the session.
//!
//! [`Volume`]: crate::Volume

use crate::control;
use crate::core::initiator::{Event, InitiatorCore, Request, SubmitError};
use crate::initiator::{Completion, VolumeOptions};
use crate::net::EpKind;
use crate::post;
use crate::wait::{self, Woken};
use crate::wire::{Accept, Op, Status, BATCH_BYTES, CAPSULE_LEN};
use ofi::consts::ep_type;
use ofi::safe::{Addr, Channel, CmEvent, Op as ChOp, Region};
use ofi::MrAccess;
use rustix::event::PollFlags;
use std::collections::{HashMap, VecDeque};
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};
use tracing::warn;

/// Longest time between two looks at the control connection while busy.
const CONTROL_EVERY: Duration = Duration::from_millis(5);

/// A request handed to a session.
pub(crate) struct Submit {
    /// What to do (its buffer's address and key are filled in here).
    pub req: Request,
    /// The owner's tag, handed back in the completion.
    pub user: u64,
    /// The data of a WRITE; for a READ, a buffer to read into (resized to
    /// the request's length), else one is allocated.
    pub buf: Option<Vec<u8>>,
}

impl std::fmt::Debug for Submit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Submit").field("req", &self.req).finish()
    }
}

/// How long an MSG connection to the target may take to come up.
const CONNECT_WITHIN: Duration = Duration::from_secs(5);

/// The control connection and fabric channel of a session about to open:
/// the target has welcomed this initiator and knows its fabric address
/// (RDM), or has accepted its connection (MSG).
#[derive(Debug)]
pub(crate) struct Link {
    /// The fabric channel.
    pub ch: Channel,
    /// The target's fabric address, or the connection to it (MSG).
    pub peer: Addr,
    /// The control connection (nonblocking; RDM only).
    pub ctl: Option<TcpStream>,
    /// The token naming this initiator in its CONNECT.
    pub token: u64,
}

impl Link {
    /// Connects to the target whose control listener is at `target`
    /// (`host:port`), opens the channel and exchanges HELLO and WELCOME.
    pub fn connect(target: &str, opts: &VolumeOptions) -> Result<Link, String> {
        if opts.net.ep == EpKind::Msg {
            return Link::connect_msg(target, opts);
        }
        let to = target
            .to_socket_addrs()
            .map_err(|e| format!("target address {target}: {e}"))?
            .next()
            .ok_or_else(|| format!("target address {target}: no address"))?;
        let mut ctl = TcpStream::connect_timeout(&to, Duration::from_secs(5))
            .map_err(|e| format!("control connection to {to}: {e}"))?;
        let _ = ctl.set_nodelay(true);
        if let Err(e) = control::keepalive(&ctl, opts.liveness) {
            warn!("initiator: control connection: keepalive: {e}");
        }
        let mut net = opts.net.clone();
        if net.node.is_none() {
            // The data path takes the control connection's interface.
            net.node = ctl.local_addr().ok().map(|a| a.ip().to_string());
        }
        let info = net
            .offer()
            .or_else(|_| opts.net.offer())
            .map_err(|e| format!("fabric offer: {e}"))?;
        let ch = Channel::open(&info).map_err(|e| format!("fabric channel: {e}"))?;
        let me = ch.address().map_err(|e| format!("fabric address: {e}"))?;
        ctl.write_all(&control::hello(&me))
            .map_err(|e| format!("sending HELLO: {e}"))?;
        let _ = ctl.set_read_timeout(Some(Duration::from_secs(10)));
        let mut inbuf = Vec::new();
        let welcome = loop {
            let mut b = [0u8; 1024];
            let n = ctl
                .read(&mut b)
                .map_err(|e| format!("waiting for WELCOME: {e}"))?;
            if n == 0 {
                return Err("the target closed the control connection".into());
            }
            inbuf.extend_from_slice(&b[..n]);
            match control::parse_welcome(&inbuf) {
                Ok(Some((w, _))) => break w,
                Ok(None) => {}
                Err(e) => return Err(format!("bad WELCOME: {e}")),
            }
        };
        if welcome.status != Status::Ok {
            return Err(format!("the target refused: {}", welcome.status));
        }
        let peer = ch
            .insert(&welcome.addr)
            .map_err(|e| format!("target's fabric address: {e}"))?;
        ctl.set_nonblocking(true)
            .map_err(|e| format!("control connection: {e}"))?;
        Ok(Link {
            ch,
            peer,
            ctl: Some(ctl),
            token: welcome.token,
        })
    }

    /// Connects an MSG channel to the target's passive endpoint at
    /// `target` (`host:port`); the accept carries the session's token.
    fn connect_msg(target: &str, opts: &VolumeOptions) -> Result<Link, String> {
        let (host, port) = target
            .rsplit_once(':')
            .ok_or_else(|| format!("target address {target}: host:port expected"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let info = opts
            .net
            .msg_offer(Some(host), Some(port), false)
            .map_err(|e| format!("fabric offer for {target}: {e}"))?;
        let dest = info
            .dest_addr
            .clone()
            .ok_or_else(|| format!("fabric offer for {target}: no destination address"))?;
        let ch = Channel::open(&info).map_err(|e| format!("fabric channel: {e}"))?;
        let conn = ch
            .connect(&dest, &[])
            .map_err(|e| format!("connecting to {target}: {e}"))?;
        let deadline = Instant::now() + CONNECT_WITHIN;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let ev = ch
                .cm_wait(left.min(Duration::from_millis(100)))
                .map_err(|e| format!("connecting to {target}: {e}"))?;
            let _ = ch.poll();
            match ev {
                Some(CmEvent::Connected { conn: c, data }) if c == conn => {
                    let token = <[u8; 8]>::try_from(data.as_slice()).map_err(|_| {
                        format!("the target at {target} accepted without a session token (not an ofi storage target?)")
                    })?;
                    return Ok(Link {
                        ch,
                        peer: conn,
                        ctl: None,
                        token: u64::from_be_bytes(token),
                    });
                }
                Some(CmEvent::Failed { error, data, .. }) => {
                    return Err(match control::parse_refusal(&data) {
                        Some(why) => format!("the target at {target} refused: {why}"),
                        None => format!("the target at {target} refused the connection: {error}"),
                    })
                }
                Some(CmEvent::Shutdown { .. }) => {
                    return Err(format!("the target at {target} closed the connection"))
                }
                _ => {}
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "no answer from the target at {target} within {CONNECT_WITHIN:?}"
                ));
            }
        }
    }
}

struct Inflight {
    user: u64,
    region: Option<Region>,
    /// A TRIM with FUA: a FLUSH follows it, and answers for both (the
    /// capsule protocol has no FUA on TRIM; the flush makes it durable).
    then_flush: bool,
}

/// One session: the protocol core, the receives kept posted, the requests
/// waiting for credits, in flight, or waiting for their buffers.
pub(crate) struct Session<'c> {
    ch: &'c Channel,
    peer: Addr,
    /// The session runs over an MSG connection (`peer`).
    msg: bool,
    ctl: Option<TcpStream>,
    core: InitiatorCore,
    recvs: Vec<ChOp<'c, Vec<u8>>>,
    /// Capsules to send, each to `peer`.
    outbox: VecDeque<(Addr, [u8; CAPSULE_LEN])>,
    pending: VecDeque<Submit>,
    inflight: HashMap<u64, Inflight>,
    retiring: Vec<(u64, Status, Region)>,
    next_tag: u64,
    open: bool,
    accepted: Option<Result<Accept, String>>,
    reported: bool,
    ctl_gone: Option<(Instant, String)>,
    ctl_due: bool,
    ctl_at: Instant,
}

impl<'c> Session<'c> {
    /// Posts the receives and queues the CONNECT of a session with the
    /// target at `peer` on `ch` (the parts of a [`Link`]).
    pub fn new(
        ch: &'c Channel,
        peer: Addr,
        ctl: Option<TcpStream>,
        token: u64,
        opts: &VolumeOptions,
    ) -> Result<Session<'c>, String> {
        let mut core = InitiatorCore::new(opts.timeout);
        let qd = opts.queue_depth.max(1);
        let mut outbox = VecDeque::new();
        outbox.push_back((peer, core.connect(token, qd, opts.max_io, Instant::now())));
        let mut recvs = Vec::with_capacity(qd as usize + 8);
        for _ in 0..(qd as usize + 8) {
            match ch.recv_on(vec![0u8; BATCH_BYTES], peer) {
                Ok(op) => recvs.push(op),
                Err(e) => return Err(format!("posting receives: {}", e.error)),
            }
        }
        Ok(Session {
            ch,
            peer,
            msg: ch.info().ep_attr.ep_type == ep_type::FI_EP_MSG,
            ctl,
            core,
            recvs,
            outbox,
            pending: VecDeque::new(),
            inflight: HashMap::new(),
            retiring: Vec::new(),
            next_tag: 1,
            open: true,
            accepted: None,
            reported: false,
            ctl_gone: None,
            ctl_due: true,
            ctl_at: Instant::now(),
        })
    }

    /// Steps until the target accepts or refuses the session, or `limit`
    /// passes.
    pub fn wait_open(&mut self, limit: Duration) -> Result<Accept, String> {
        let deadline = Instant::now() + limit;
        loop {
            let work = self.step(&mut |_| {});
            if let Some(a) = self.take_accepted() {
                return a;
            }
            if Instant::now() >= deadline {
                return Err("no answer to CONNECT".into());
            }
            self.park(work, &[]);
        }
    }

    /// How the CONNECT ended, once (None before, and after the first call).
    pub fn take_accepted(&mut self) -> Option<Result<Accept, String>> {
        if self.reported {
            return None;
        }
        let a = self.accepted.take()?;
        self.reported = true;
        Some(a)
    }

    /// Queues a request (it starts when a credit is free).
    pub fn submit(&mut self, s: Submit) {
        self.pending.push_back(s);
    }

    /// Requests waiting for a credit.
    pub fn backlog(&self) -> usize {
        self.pending.len()
    }

    /// Ends the session: DISCONNECT to the target; requests not started
    /// fail with `Disconnected`.
    pub fn close(&mut self, done: &mut impl FnMut(Completion)) {
        if let Some(c) = self.core.disconnect() {
            let _ = self.ch.inject(&c, self.peer);
        }
        for s in self.pending.drain(..) {
            done(Completion {
                user: s.user,
                result: Err(Status::Disconnected),
            });
        }
    }

    /// One pass: reads the control connection when due, starts what the
    /// credits allow, sends capsules, collects completions and hands each
    /// finished request to `done`. True if anything happened.
    pub fn step(&mut self, done: &mut impl FnMut(Completion)) -> bool {
        let mut work = false;
        let now = Instant::now();
        work |= self.control(now);
        work |= self.start(now, done);
        // Capsules queued together leave in one message.
        let core = &mut self.core;
        let f = post::flush(self.ch, &mut self.outbox, |e| {
            core.fail(format!("sending a capsule: {e}"), Status::Disconnected)
        });
        work |= f.sent || f.dropped;
        // Operations finish only when a poll collects their completions:
        // without any, no receive is worth looking at.
        let collected = self.ch.poll().unwrap_or(0) > 0;
        for r in self.recvs.iter_mut().filter(|_| collected) {
            let core = &mut self.core;
            let Some(again) = post::reap(self.ch, r, Some(self.peer), |c, _| core.on_capsule(c))
            else {
                continue;
            };
            work = true;
            if let Err(e) = again {
                self.core
                    .fail(format!("reposting a receive: {e}"), Status::Disconnected);
            }
        }
        self.core.handle_timeout(now);
        work |= self.events(done);
        work |= self.retire(done);
        work
    }

    /// Reads the control connection when a sleep saw it readable, and at
    /// least every CONTROL_EVERY while busy (a read that finds nothing is
    /// a system call the data path would pay on every pass).
    fn control(&mut self, now: Instant) -> bool {
        let mut work = false;
        let look = self.ctl_due || now.duration_since(self.ctl_at) >= CONTROL_EVERY;
        if let Some(s) = self.ctl.as_ref().filter(|_| look) {
            self.ctl_due = false;
            self.ctl_at = now;
            let mut b = [0u8; 16];
            match (&*s).read(&mut b) {
                Ok(_) => {
                    // Closed (or junk): what the target sent before closing
                    // (a REFUSE, the last completions) is collected for a
                    // short grace time first.
                    self.ctl = None;
                    self.ctl_gone = Some((now, "the target closed the control connection".into()));
                    work = true;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => {
                    self.ctl = None;
                    self.ctl_gone = Some((now, format!("control connection: {e}")));
                    work = true;
                }
            }
        }
        if self.msg && look && self.ctl_gone.is_none() && self.open {
            self.ctl_due = false;
            self.ctl_at = now;
            while let Ok(Some(ev)) = self.ch.cm_event() {
                let why = match ev {
                    CmEvent::Shutdown { conn } if conn == self.peer => {
                        "the target closed the connection".to_string()
                    }
                    CmEvent::Failed {
                        conn: Some(c),
                        error,
                        ..
                    } if c == self.peer => format!("the connection to the target failed: {error}"),
                    _ => continue,
                };
                self.ctl_gone = Some((now, why));
                work = true;
            }
        }
        if let Some((at, why)) = &self.ctl_gone {
            if now.duration_since(*at) > Duration::from_millis(50) {
                self.core.fail(why.clone(), Status::Disconnected);
                self.ctl_gone = None;
            }
        }
        work
    }

    /// Starts what the credits allow.
    fn start(&mut self, now: Instant, done: &mut impl FnMut(Completion)) -> bool {
        let mut work = false;
        while self.core.credits() > 0 || (!self.open && !self.pending.is_empty()) {
            let Some(s) = self.pending.pop_front() else {
                break;
            };
            work = true;
            if !self.open {
                done(Completion {
                    user: s.user,
                    result: Err(Status::Disconnected),
                });
                continue;
            }
            if let Err(e) = self.core.check(&s.req) {
                done(Completion {
                    user: s.user,
                    result: Err(rejected(e)),
                });
                continue;
            }
            let mut req = s.req;
            let region = match (req.op, s.buf) {
                (Op::Read, b) => {
                    let mut b = b.unwrap_or_default();
                    b.resize(req.len as usize, 0);
                    Some(self.ch.register(b, MrAccess::REMOTE_WRITE))
                }
                (Op::Write, Some(b)) => Some(self.ch.register(b, MrAccess::REMOTE_READ)),
                _ => None,
            };
            let region = match region {
                Some(Ok(r)) => {
                    req.addr = r.remote_addr(0);
                    req.key = r.key();
                    Some(r)
                }
                Some(Err(e)) => {
                    warn!("initiator: registering a buffer: {}", e.error);
                    done(Completion {
                        user: s.user,
                        result: Err(Status::Io),
                    });
                    continue;
                }
                None => None,
            };
            let tag = self.next_tag;
            self.next_tag += 1;
            let then_flush = req.op == Op::Trim && req.fua;
            match self.core.submit(&req, tag, now) {
                Ok(c) => {
                    self.outbox.push_back((self.peer, c));
                    self.inflight.insert(
                        tag,
                        Inflight {
                            user: s.user,
                            region,
                            then_flush,
                        },
                    );
                }
                Err(e) => done(Completion {
                    user: s.user,
                    result: Err(rejected(e)),
                }),
            }
        }
        work
    }

    /// What the core learnt.
    fn events(&mut self, done: &mut impl FnMut(Completion)) -> bool {
        let mut work = false;
        while let Some(ev) = self.core.poll_event() {
            work = true;
            match ev {
                Event::Connected(a) => {
                    self.accepted.get_or_insert(Ok(a));
                }
                Event::Refused(s) => {
                    self.open = false;
                    self.accepted
                        .get_or_insert(Err(format!("the target refused the session: {s}")));
                }
                Event::Done { user: tag, status } => {
                    let Some(f) = self.inflight.remove(&tag) else {
                        continue;
                    };
                    if f.then_flush && status == Status::Ok {
                        // Next to start: the TRIM's answer is the FLUSH's.
                        self.pending.push_front(Submit {
                            req: Request::new(Op::Flush, 0, 0, false, false),
                            user: f.user,
                            buf: None,
                        });
                        continue;
                    }
                    match f.region {
                        Some(r) => self.retiring.push((f.user, status, r)),
                        None => done(Completion {
                            user: f.user,
                            result: if status == Status::Ok {
                                Ok(Vec::new())
                            } else {
                                Err(status)
                            },
                        }),
                    }
                }
                Event::Failed { reason } => {
                    self.open = false;
                    warn!("initiator: session over: {reason}");
                    self.accepted.get_or_insert(Err(reason));
                }
            }
        }
        work
    }

    /// Buffers come back once no access of the target runs any more.
    fn retire(&mut self, done: &mut impl FnMut(Completion)) -> bool {
        if self.retiring.is_empty() {
            return false;
        }
        let mut work = false;
        let mut keep = Vec::new();
        for (user, status, r) in self.retiring.drain(..) {
            match r.into_vec() {
                Ok(v) => {
                    work = true;
                    let result = if status == Status::Ok {
                        Ok(v)
                    } else {
                        Err(status)
                    };
                    done(Completion { user, result });
                }
                Err(r) => keep.push((user, status, r)),
            }
        }
        self.retiring = keep;
        work
    }

    /// After a pass without work, sleeps until the channel, the control
    /// connection or one of `extra` needs attention (briefly while
    /// requests are in flight, long when idle); returns what woke it, or
    /// None when the pass did work. It does not spin first: the process
    /// that would bring the next piece of work (the target, the client)
    /// often shares the core, and a spinning pass takes it from that
    /// process (measured on 2 cores: fewer IOPS with 16 or 64 idle passes
    /// than with none).
    pub fn park(&mut self, work: bool, extra: &[(BorrowedFd<'_>, PollFlags)]) -> Option<Woken> {
        if work {
            return None;
        }
        let mut fds: Vec<(BorrowedFd<'_>, PollFlags)> = extra.to_vec();
        if let Some(s) = &self.ctl {
            fds.push((s.as_fd(), PollFlags::IN));
        }
        let t = if self.inflight.is_empty()
            && self.retiring.is_empty()
            && self.outbox.is_empty()
            && self.ctl_gone.is_none()
        {
            Duration::from_millis(500)
        } else {
            Duration::from_millis(1)
        };
        let w = wait::sleep(self.ch, &fds, t);
        if w != Woken::Channel {
            self.ctl_due = true;
        }
        Some(w)
    }
}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        // Pending receives are cancelled by dropping their handles.
        self.recvs.clear();
        let _ = self.ch.wait_any(Duration::from_millis(50));
    }
}

fn rejected(e: SubmitError) -> Status {
    match e {
        SubmitError::Rejected(st) => st,
        _ => Status::Disconnected,
    }
}
