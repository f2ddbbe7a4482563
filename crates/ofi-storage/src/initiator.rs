//! The initiator's Rust API: a [`Volume`] opened on a target, with reads,
//! writes, flushes, trims and write-zeroes on owned buffers, many in
//! flight up to the session's queue depth.
//!
//! A driver thread owns the fabric channel and runs the
//! [`InitiatorCore`]: each request's buffer is registered as a region the
//! target reaches by RMA (it reads it for a WRITE, writes into it for a
//! READ), the command capsule goes out, and the buffer comes back in the
//! [`Completion`] once the target has answered. Requests beyond the
//! credits wait in the driver. The target's death (its control connection
//! closes) fails every pending request at once.

use crate::control;
use crate::core::initiator::{Event, InitiatorCore, Request, SubmitError};
use crate::net::NetOptions;
use crate::wire::{feature, Accept, Op, Status, CAPSULE_LEN};
use ofi::safe::{Addr, Channel, Region};
use ofi::MrAccess;
use std::collections::{HashMap, VecDeque};
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tracing::warn;

/// How to open a volume.
#[derive(Clone, Debug)]
pub struct VolumeOptions {
    /// The fabric (must match the target's provider).
    pub net: NetOptions,
    /// Commands in flight asked for (the target may grant fewer).
    pub queue_depth: u32,
    /// Largest READ or WRITE asked for.
    pub max_io: u32,
    /// A command unanswered this long fails the session.
    pub timeout: Duration,
}

impl Default for VolumeOptions {
    fn default() -> Self {
        VolumeOptions {
            net: NetOptions::default(),
            queue_depth: 32,
            max_io: 1 << 20,
            timeout: Duration::from_secs(30),
        }
    }
}

/// A finished request.
#[derive(Debug)]
pub struct Completion {
    /// The caller's tag.
    pub user: u64,
    /// The data read (READ), the buffer back (WRITE), or an empty vector;
    /// the status on failure.
    pub result: Result<Vec<u8>, Status>,
}

struct Submit {
    req: Request,
    user: u64,
    buf: Option<Vec<u8>>,
}

/// An open volume on a target.
#[derive(Debug)]
pub struct Volume {
    accept: Accept,
    tx: Sender<Submit>,
    done_tx: Sender<Completion>,
    done_rx: Mutex<Option<Receiver<Completion>>>,
    stash: Mutex<VecDeque<Completion>>,
    wake: UnixStream,
    woken: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Submit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Submit").field("req", &self.req).finish()
    }
}

/// Tags of the blocking helpers (the caller's tags stay below).
const SYNC_TAG: u64 = 1 << 63;

/// Longest time between two looks at the control connection while busy.
const CONTROL_EVERY: Duration = Duration::from_millis(5);

impl Volume {
    /// Connects to the target whose control listener is at `target`
    /// (`host:port`) and opens a session.
    pub fn open(target: &str, opts: &VolumeOptions) -> Result<Volume, String> {
        let to = target
            .to_socket_addrs()
            .map_err(|e| format!("target address {target}: {e}"))?
            .next()
            .ok_or_else(|| format!("target address {target}: no address"))?;
        let mut ctl = TcpStream::connect_timeout(&to, Duration::from_secs(5))
            .map_err(|e| format!("control connection to {to}: {e}"))?;
        let _ = ctl.set_nodelay(true);
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
        let (wake, wake_rx) = UnixStream::pair().map_err(|e| format!("wake pipe: {e}"))?;
        wake_rx
            .set_nonblocking(true)
            .map_err(|e| format!("wake pipe: {e}"))?;
        wake.set_nonblocking(true)
            .map_err(|e| format!("wake pipe: {e}"))?;
        let (tx, rx) = mpsc::channel();
        let (done_tx, done_rx) = mpsc::channel();
        let (acc_tx, acc_rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let woken = Arc::new(AtomicBool::new(false));
        let d = Driver {
            peer,
            ctl,
            wake_rx,
            woken: woken.clone(),
            stop: stop.clone(),
            rx,
            done: done_tx.clone(),
            opts: opts.clone(),
            token: welcome.token,
        };
        let thread = std::thread::Builder::new()
            .name("ofi-storage-initiator".into())
            .spawn(move || d.run(ch, acc_tx))
            .map_err(|e| format!("driver thread: {e}"))?;
        let accept = match acc_rx.recv_timeout(opts.timeout + Duration::from_secs(1)) {
            Ok(Ok(a)) => a,
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err("no answer to CONNECT".into()),
        };
        Ok(Volume {
            accept,
            tx,
            done_tx,
            done_rx: Mutex::new(Some(done_rx)),
            stash: Mutex::new(VecDeque::new()),
            wake,
            woken,
            stop,
            thread: Some(thread),
        })
    }

    /// Volume size in bytes.
    pub fn size(&self) -> u64 {
        self.accept.size
    }
    /// Logical block size.
    pub fn block_size(&self) -> u32 {
        self.accept.block_size
    }
    /// Largest READ or WRITE.
    pub fn max_io(&self) -> u32 {
        self.accept.max_io
    }
    /// Commands the target lets this session have in flight.
    pub fn queue_depth(&self) -> u32 {
        self.accept.queue_depth
    }
    /// True for a read-only volume.
    pub fn read_only(&self) -> bool {
        self.accept.features & feature::READ_ONLY != 0
    }
    /// The target's feature bits ([`feature`]).
    pub fn features(&self) -> u32 {
        self.accept.features
    }

    fn push(&self, req: Request, user: u64, buf: Option<Vec<u8>>) {
        if self.tx.send(Submit { req, user, buf }).is_err() {
            let _ = self.done_tx.send(Completion {
                user,
                result: Err(Status::Disconnected),
            });
            return;
        }
        if !self.woken.swap(true, Ordering::AcqRel) {
            let _ = (&self.wake).write(&[1]);
        }
    }

    fn req(op: Op, offset: u64, len: u32, fua: bool, no_hole: bool) -> Request {
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

    /// Starts a read of `len` bytes at `offset`; the data comes back in the
    /// completion tagged `user`.
    pub fn submit_read(&self, offset: u64, len: u32, user: u64) {
        self.push(Self::req(Op::Read, offset, len, false, false), user, None);
    }
    /// Starts a write of `buf` at `offset` (durable before completion with
    /// `fua`); the buffer comes back in the completion.
    pub fn submit_write(&self, offset: u64, buf: Vec<u8>, fua: bool, user: u64) {
        let len = buf.len().min(u32::MAX as usize) as u32;
        self.push(
            Self::req(Op::Write, offset, len, fua, false),
            user,
            Some(buf),
        );
    }
    /// Starts a flush: every write completed before is durable when it
    /// completes.
    pub fn submit_flush(&self, user: u64) {
        self.push(Self::req(Op::Flush, 0, 0, false, false), user, None);
    }
    /// Starts a trim (advisory deallocation).
    pub fn submit_trim(&self, offset: u64, len: u32, user: u64) {
        self.push(Self::req(Op::Trim, offset, len, false, false), user, None);
    }
    /// Starts a write of zeroes (`no_hole`: keep the range allocated).
    pub fn submit_zeroes(&self, offset: u64, len: u32, fua: bool, no_hole: bool, user: u64) {
        self.push(
            Self::req(Op::WriteZeroes, offset, len, fua, no_hole),
            user,
            None,
        );
    }

    /// A sender into this volume's completion stream (a gateway adds its
    /// own answers to the same stream).
    pub fn completion_sender(&self) -> Sender<Completion> {
        self.done_tx.clone()
    }

    /// Takes the completion stream (to read it on another thread); the
    /// blocking helpers and [`next`](Self::next) stop working after.
    pub fn take_completions(&self) -> Option<Receiver<Completion>> {
        self.done_rx.lock().ok()?.take()
    }

    /// The next completion, waiting up to `timeout`.
    pub fn next(&self, timeout: Duration) -> Option<Completion> {
        if let Some(c) = self.stash.lock().ok()?.pop_front() {
            return Some(c);
        }
        let g = self.done_rx.lock().ok()?;
        g.as_ref()?.recv_timeout(timeout).ok()
    }

    fn wait_for(&self, tag: u64) -> Result<Vec<u8>, Status> {
        let g = self.done_rx.lock().map_err(|_| Status::Disconnected)?;
        let rx = g.as_ref().ok_or(Status::Invalid)?;
        let deadline = Instant::now() + Duration::from_secs(3600);
        loop {
            match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(c) if c.user == tag => return c.result,
                Ok(c) => {
                    if let Ok(mut s) = self.stash.lock() {
                        s.push_back(c)
                    }
                }
                Err(RecvTimeoutError::Timeout) => return Err(Status::TimedOut),
                Err(RecvTimeoutError::Disconnected) => return Err(Status::Disconnected),
            }
        }
    }

    /// Reads `len` bytes at `offset`.
    pub fn read(&self, offset: u64, len: u32) -> Result<Vec<u8>, Status> {
        self.submit_read(offset, len, SYNC_TAG);
        self.wait_for(SYNC_TAG)
    }
    /// Writes `buf` at `offset`; hands the buffer back.
    pub fn write(&self, offset: u64, buf: Vec<u8>, fua: bool) -> Result<Vec<u8>, Status> {
        self.submit_write(offset, buf, fua, SYNC_TAG);
        self.wait_for(SYNC_TAG)
    }
    /// Makes every completed write durable.
    pub fn flush(&self) -> Result<(), Status> {
        self.submit_flush(SYNC_TAG);
        self.wait_for(SYNC_TAG).map(drop)
    }
    /// Deallocates a range (advisory).
    pub fn trim(&self, offset: u64, len: u32) -> Result<(), Status> {
        self.submit_trim(offset, len, SYNC_TAG);
        self.wait_for(SYNC_TAG).map(drop)
    }
}

impl Drop for Volume {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        let _ = (&self.wake).write(&[1]);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

struct Driver {
    peer: Addr,
    ctl: TcpStream,
    wake_rx: UnixStream,
    woken: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    rx: Receiver<Submit>,
    done: Sender<Completion>,
    opts: VolumeOptions,
    token: u64,
}

struct Inflight {
    user: u64,
    region: Option<Region>,
}

impl Driver {
    fn run(self, ch: Channel, acc: Sender<Result<Accept, String>>) {
        let mut core = InitiatorCore::new(self.opts.timeout);
        let qd = self.opts.queue_depth.max(1);
        let mut outbox: VecDeque<[u8; CAPSULE_LEN]> = VecDeque::new();
        outbox.push_back(core.connect(self.token, qd, self.opts.max_io, Instant::now()));
        let mut recvs = Vec::new();
        for _ in 0..(qd as usize + 8) {
            match ch.recv(vec![0u8; 64]) {
                Ok(op) => recvs.push(op),
                Err(e) => {
                    let _ = acc.send(Err(format!("posting receives: {}", e.error)));
                    return;
                }
            }
        }
        let mut acc = Some(acc);
        let mut pending: VecDeque<Submit> = VecDeque::new();
        let mut inflight: HashMap<u64, Inflight> = HashMap::new();
        let mut retiring: Vec<(u64, Status, Region)> = Vec::new();
        let mut next_tag = 1u64;
        let mut open = true;
        let mut idle = 0u32;
        let mut ctl = Some(&self.ctl);
        let mut ctl_gone: Option<(Instant, String)> = None;
        // The control connection is read when a sleep saw it readable, and
        // at least every CONTROL_EVERY while busy (a read that finds
        // nothing is a system call the data path would pay on every pass).
        let mut ctl_due = true;
        let mut ctl_at = Instant::now();
        loop {
            let mut work = false;
            let now = Instant::now();
            // Wake-ups first, then the submissions they announce. A byte
            // goes into the pipe when `woken` was clear; it is read when
            // the flag is up or a sleep saw a readable fd (a byte written
            // just after a drain, with the flag cleared).
            if ctl_due || self.woken.load(Ordering::Acquire) {
                let mut b = [0u8; 64];
                while matches!((&self.wake_rx).read(&mut b), Ok(n) if n > 0) {}
                self.woken.store(false, Ordering::Release);
            }
            while let Ok(s) = self.rx.try_recv() {
                pending.push_back(s);
            }
            if self.stop.load(Ordering::Acquire) {
                if let Some(c) = core.disconnect() {
                    let _ = ch.inject(&c, self.peer);
                }
                break;
            }
            let look = ctl_due || now.duration_since(ctl_at) >= CONTROL_EVERY;
            if let Some(s) = ctl.filter(|_| look) {
                ctl_due = false;
                ctl_at = now;
                let mut b = [0u8; 16];
                match (&*s).read(&mut b) {
                    Ok(_) => {
                        // Closed (or junk): what the target sent before
                        // closing (a REFUSE, the last completions) is
                        // collected for a short grace time first.
                        ctl = None;
                        ctl_gone = Some((now, "the target closed the control connection".into()));
                        work = true;
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(e) => {
                        ctl = None;
                        ctl_gone = Some((now, format!("control connection: {e}")));
                        work = true;
                    }
                }
            }
            if let Some((at, why)) = &ctl_gone {
                if now.duration_since(*at) > Duration::from_millis(50) {
                    core.fail(why.clone(), Status::Disconnected);
                    ctl_gone = None;
                }
            }
            // Start what the credits allow.
            while core.credits() > 0 || (!open && !pending.is_empty()) {
                let Some(s) = pending.pop_front() else { break };
                work = true;
                if !open {
                    let _ = self.done.send(Completion {
                        user: s.user,
                        result: Err(Status::Disconnected),
                    });
                    continue;
                }
                if let Err(e) = core.check(&s.req) {
                    let st = match e {
                        SubmitError::Rejected(st) => st,
                        _ => Status::Disconnected,
                    };
                    let _ = self.done.send(Completion {
                        user: s.user,
                        result: Err(st),
                    });
                    continue;
                }
                let mut req = s.req;
                let region = match (req.op, s.buf) {
                    (Op::Read, _) => {
                        Some(ch.register(vec![0u8; req.len as usize], MrAccess::REMOTE_WRITE))
                    }
                    (Op::Write, Some(b)) => Some(ch.register(b, MrAccess::REMOTE_READ)),
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
                        let _ = self.done.send(Completion {
                            user: s.user,
                            result: Err(Status::Io),
                        });
                        continue;
                    }
                    None => None,
                };
                let tag = next_tag;
                next_tag += 1;
                match core.submit(&req, tag, now) {
                    Ok(c) => {
                        outbox.push_back(c);
                        inflight.insert(
                            tag,
                            Inflight {
                                user: s.user,
                                region,
                            },
                        );
                    }
                    Err(e) => {
                        let st = match e {
                            SubmitError::Rejected(st) => st,
                            _ => Status::Disconnected,
                        };
                        let _ = self.done.send(Completion {
                            user: s.user,
                            result: Err(st),
                        });
                    }
                }
            }
            while let Some(c) = outbox.front() {
                match ch.inject(c, self.peer) {
                    Ok(()) => {}
                    Err(e) if e.is_again() => break,
                    Err(e) => core.fail(format!("sending a capsule: {e}"), Status::Disconnected),
                }
                outbox.pop_front();
                work = true;
            }
            // Operations finish only when a poll collects their
            // completions: without any, no receive is worth looking at.
            let collected = ch.poll().unwrap_or(0) > 0;
            for r in recvs.iter_mut().filter(|_| collected) {
                let Some(res) = r.check() else { continue };
                work = true;
                let buf = match res {
                    Ok(d) => {
                        core.on_capsule(&d.buf[..d.len.min(d.buf.len())]);
                        d.buf
                    }
                    Err(e) => e.buf.unwrap_or_else(|| vec![0u8; 64]),
                };
                match ch.recv(buf) {
                    Ok(op) => *r = op,
                    Err(e) => core.fail(
                        format!("reposting a receive: {}", e.error),
                        Status::Disconnected,
                    ),
                }
            }
            core.handle_timeout(now);
            while let Some(ev) = core.poll_event() {
                work = true;
                match ev {
                    Event::Connected(a) => {
                        if let Some(t) = acc.take() {
                            let _ = t.send(Ok(a));
                        }
                    }
                    Event::Refused(s) => {
                        open = false;
                        if let Some(t) = acc.take() {
                            let _ = t.send(Err(format!("the target refused the session: {s}")));
                        }
                    }
                    Event::Done { user: tag, status } => {
                        let Some(f) = inflight.remove(&tag) else {
                            continue;
                        };
                        match f.region {
                            Some(r) => retiring.push((f.user, status, r)),
                            None => {
                                let result = if status == Status::Ok {
                                    Ok(Vec::new())
                                } else {
                                    Err(status)
                                };
                                let _ = self.done.send(Completion {
                                    user: f.user,
                                    result,
                                });
                            }
                        }
                    }
                    Event::Failed { reason } => {
                        open = false;
                        warn!("initiator: session over: {reason}");
                        if let Some(t) = acc.take() {
                            let _ = t.send(Err(reason));
                        }
                    }
                }
            }
            // Buffers come back once no access of the target runs any more.
            if !retiring.is_empty() {
                let mut keep = Vec::new();
                for (user, status, r) in retiring.drain(..) {
                    match r.into_vec() {
                        Ok(v) => {
                            work = true;
                            let result = if status == Status::Ok {
                                Ok(v)
                            } else {
                                Err(status)
                            };
                            let _ = self.done.send(Completion { user, result });
                        }
                        Err(r) => keep.push((user, status, r)),
                    }
                }
                retiring = keep;
            }
            if work {
                idle = 0;
                continue;
            }
            idle += 1;
            if idle < 64 {
                std::hint::spin_loop();
                continue;
            }
            let mut fds: Vec<BorrowedFd<'_>> = vec![self.wake_rx.as_fd()];
            if let Some(s) = ctl {
                fds.push(s.as_fd());
            }
            let t = if inflight.is_empty()
                && retiring.is_empty()
                && outbox.is_empty()
                && ctl_gone.is_none()
            {
                Duration::from_millis(500)
            } else {
                Duration::from_millis(1)
            };
            ctl_due = crate::wait::sleep(&ch, &fds, t) != crate::wait::Woken::Channel;
        }
        // Requests still pending end here.
        for s in pending {
            let _ = self.done.send(Completion {
                user: s.user,
                result: Err(Status::Disconnected),
            });
        }
        drop(recvs);
        let _ = ch.wait_any(Duration::from_millis(50));
    }
}
