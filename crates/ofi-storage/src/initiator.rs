//! The initiator's Rust API: a [`Volume`] opened on a target, with reads,
//! writes, flushes, trims and write-zeroes on owned buffers, many in
//! flight up to the session's queue depth.
//!
//! A driver thread owns the fabric channel and steps the session
//! (`session.rs`); requests reach it through a queue and a wake-up
//! pipe, completions leave through another queue. [`Volume::inline`]
//! runs a session on the caller's thread instead.

use crate::core::initiator::Request;
use crate::net::NetOptions;
use crate::session::{Link, Session, Submit};
use crate::wait::Woken;
use crate::wire::{feature, Accept, Op, Status};
use rustix::event::PollFlags;
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

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
    /// The control connection (RDM) fails, and with it the session, when
    /// the target's host has answered nothing for this long, idle or not
    /// (whole seconds, 2 s to a day; see [`crate::control::keepalive`]).
    pub liveness: Duration,
}

impl Default for VolumeOptions {
    fn default() -> Self {
        VolumeOptions {
            net: NetOptions::default(),
            queue_depth: 32,
            max_io: 1 << 20,
            timeout: Duration::from_secs(30),
            liveness: crate::control::LIVENESS,
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
    /// The next blocking call's tag (with [`SYNC_TAG`] set): each call has
    /// its own, so calls from several threads each get their own result.
    sync_next: AtomicU64,
}

/// The bit of the blocking helpers' tags (the caller's tags stay below).
const SYNC_TAG: u64 = 1 << 63;

impl Volume {
    /// Connects to the target whose control listener is at `target`
    /// (`host:port`) and opens a session.
    pub fn open(target: &str, opts: &VolumeOptions) -> Result<Volume, String> {
        let link = Link::connect(target, opts)?;
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
            wake_rx,
            woken: woken.clone(),
            stop: stop.clone(),
            rx,
            done: done_tx.clone(),
            opts: opts.clone(),
        };
        let thread = std::thread::Builder::new()
            .name("ofi-storage-initiator".into())
            .spawn(move || d.run(link, acc_tx))
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
            sync_next: AtomicU64::new(0),
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

    /// Starts a read of `len` bytes at `offset`; the data comes back in the
    /// completion tagged `user`.
    pub fn submit_read(&self, offset: u64, len: u32, user: u64) {
        self.push(
            Request::new(Op::Read, offset, len, false, false),
            user,
            None,
        );
    }
    /// Starts a read of `buf.len()` bytes at `offset` into `buf` (a buffer
    /// handed back by an earlier completion, say: no allocation per read);
    /// the data comes back in the completion tagged `user`.
    pub fn submit_read_into(&self, offset: u64, buf: Vec<u8>, user: u64) {
        let len = buf.len().min(u32::MAX as usize) as u32;
        self.push(
            Request::new(Op::Read, offset, len, false, false),
            user,
            Some(buf),
        );
    }
    /// Starts a write of `buf` at `offset` (durable before completion with
    /// `fua`); the buffer comes back in the completion.
    pub fn submit_write(&self, offset: u64, buf: Vec<u8>, fua: bool, user: u64) {
        let len = buf.len().min(u32::MAX as usize) as u32;
        self.push(
            Request::new(Op::Write, offset, len, fua, false),
            user,
            Some(buf),
        );
    }
    /// Starts a flush: every write completed before is durable when it
    /// completes.
    pub fn submit_flush(&self, user: u64) {
        self.push(Request::new(Op::Flush, 0, 0, false, false), user, None);
    }
    /// Starts a trim (advisory deallocation).
    pub fn submit_trim(&self, offset: u64, len: u32, user: u64) {
        self.push(
            Request::new(Op::Trim, offset, len, false, false),
            user,
            None,
        );
    }
    /// Starts a write of zeroes (`no_hole`: keep the range allocated).
    pub fn submit_zeroes(&self, offset: u64, len: u32, fua: bool, no_hole: bool, user: u64) {
        self.push(
            Request::new(Op::WriteZeroes, offset, len, fua, no_hole),
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

    /// The next completion of a request submitted with a tag of the
    /// caller's (below `1 << 63`), waiting up to `timeout`; those of
    /// blocking calls are left to them.
    pub fn next(&self, timeout: Duration) -> Option<Completion> {
        {
            let mut s = self.stash.lock().ok()?;
            if let Some(i) = s.iter().position(|c| c.user & SYNC_TAG == 0) {
                return s.remove(i);
            }
        }
        let g = self.done_rx.lock().ok()?;
        let rx = g.as_ref()?;
        let deadline = Instant::now() + timeout;
        loop {
            let c = rx
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .ok()?;
            if c.user & SYNC_TAG == 0 {
                return Some(c);
            }
            // A blocking call's: it looks in the stash first.
            self.stash.lock().ok()?.push_back(c);
        }
    }

    /// A tag for one blocking call.
    fn sync_tag(&self) -> u64 {
        SYNC_TAG | (self.sync_next.fetch_add(1, Ordering::Relaxed) & !SYNC_TAG)
    }

    /// Waits for the completion tagged `tag`, setting others aside (one
    /// waiter reads the stream at a time; the next looks in what the
    /// others set aside first).
    fn wait_for(&self, tag: u64) -> Result<Vec<u8>, Status> {
        let g = self.done_rx.lock().map_err(|_| Status::Disconnected)?;
        if let Ok(mut s) = self.stash.lock() {
            if let Some(i) = s.iter().position(|c| c.user == tag) {
                if let Some(c) = s.remove(i) {
                    return c.result;
                }
            }
        }
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
        let tag = self.sync_tag();
        self.submit_read(offset, len, tag);
        self.wait_for(tag)
    }
    /// Writes `buf` at `offset`; hands the buffer back.
    pub fn write(&self, offset: u64, buf: Vec<u8>, fua: bool) -> Result<Vec<u8>, Status> {
        let tag = self.sync_tag();
        self.submit_write(offset, buf, fua, tag);
        self.wait_for(tag)
    }
    /// Makes every completed write durable.
    pub fn flush(&self) -> Result<(), Status> {
        let tag = self.sync_tag();
        self.submit_flush(tag);
        self.wait_for(tag).map(drop)
    }
    /// Deallocates a range (advisory).
    pub fn trim(&self, offset: u64, len: u32) -> Result<(), Status> {
        let tag = self.sync_tag();
        self.submit_trim(offset, len, tag);
        self.wait_for(tag).map(drop)
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

/// A volume stepped by the caller's own thread ([`Volume::inline`]): no
/// driver thread and no queues between threads, so a caller that submits
/// and collects in one loop (a storage service's I/O thread, a benchmark)
/// pays no thread hand-off per request.
pub struct Inline<'c> {
    s: Session<'c>,
    accept: Accept,
}

impl std::fmt::Debug for Inline<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inline")
            .field("accept", &self.accept)
            .finish()
    }
}

impl Volume {
    /// Connects to the target at `target` (`host:port`), opens a session
    /// and runs `f` with it on this thread; the session closes when `f`
    /// returns (requests still pending end with it).
    pub fn inline<R>(
        target: &str,
        opts: &VolumeOptions,
        f: impl FnOnce(&mut Inline<'_>) -> R,
    ) -> Result<R, String> {
        let Link {
            ch,
            peer,
            ctl,
            token,
        } = Link::connect(target, opts)?;
        let mut s = Session::new(&ch, peer, ctl, token, opts)?;
        let accept = s.wait_open(opts.timeout + Duration::from_secs(1))?;
        let mut v = Inline { s, accept };
        let r = f(&mut v);
        v.s.close(&mut |_| {});
        Ok(r)
    }
}

impl Inline<'_> {
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
    /// Queues a read of `buf.len()` bytes at `offset` into `buf` (it
    /// starts at the next [`poll`](Self::poll)).
    pub fn submit_read_into(&mut self, offset: u64, buf: Vec<u8>, user: u64) {
        let len = buf.len().min(u32::MAX as usize) as u32;
        self.s.submit(Submit {
            req: Request::new(Op::Read, offset, len, false, false),
            user,
            buf: Some(buf),
        });
    }
    /// Queues a write of `buf` at `offset` (durable before completion
    /// with `fua`); the buffer comes back in the completion.
    pub fn submit_write(&mut self, offset: u64, buf: Vec<u8>, fua: bool, user: u64) {
        let len = buf.len().min(u32::MAX as usize) as u32;
        self.s.submit(Submit {
            req: Request::new(Op::Write, offset, len, fua, false),
            user,
            buf: Some(buf),
        });
    }
    /// Starts what was queued and adds the requests finished to `out`,
    /// sleeping until at least one finished or `timeout` passed; the
    /// number added.
    pub fn poll(&mut self, timeout: Duration, out: &mut Vec<Completion>) -> usize {
        let before = out.len();
        let deadline = Instant::now() + timeout;
        loop {
            let work = self.s.step(&mut |c| out.push(c));
            if out.len() > before || Instant::now() >= deadline {
                return out.len() - before;
            }
            self.s.park(work, &[]);
        }
    }
}

struct Driver {
    wake_rx: UnixStream,
    woken: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    rx: Receiver<Submit>,
    done: Sender<Completion>,
    opts: VolumeOptions,
}

impl Driver {
    fn run(self, link: Link, acc: Sender<Result<Accept, String>>) {
        let Link {
            ch,
            peer,
            ctl,
            token,
        } = link;
        let mut s = match Session::new(&ch, peer, ctl, token, &self.opts) {
            Ok(s) => s,
            Err(e) => {
                let _ = acc.send(Err(e));
                return;
            }
        };
        let mut acc = Some(acc);
        let done = &mut |c: Completion| {
            let _ = self.done.send(c);
        };
        // A byte goes into the wake-up pipe when `woken` was clear; it is
        // read when the flag is up or a sleep saw a readable fd (a byte
        // written just after a drain, with the flag cleared).
        let mut drain = true;
        loop {
            if drain || self.woken.load(Ordering::Acquire) {
                let mut b = [0u8; 64];
                while matches!((&self.wake_rx).read(&mut b), Ok(n) if n > 0) {}
                self.woken.store(false, Ordering::Release);
            }
            while let Ok(sub) = self.rx.try_recv() {
                s.submit(sub);
            }
            if self.stop.load(Ordering::Acquire) {
                break;
            }
            let work = s.step(done);
            if let Some(a) = s.take_accepted() {
                if let Some(t) = acc.take() {
                    let _ = t.send(a);
                }
            }
            let fds = [(self.wake_rx.as_fd(), PollFlags::IN)];
            drain = matches!(s.park(work, &fds), Some(Woken::Fds | Woken::Timeout));
        }
        // Requests still pending end here.
        s.close(done);
        while let Ok(sub) = self.rx.try_recv() {
            done(Completion {
                user: sub.user,
                result: Err(Status::Disconnected),
            });
        }
    }
}
