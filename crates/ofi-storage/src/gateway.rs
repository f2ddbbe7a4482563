//! The NBD gateway: an NBD server (fixed newstyle, NBD_OPT_GO/INFO,
//! structured replies) whose every request goes to a target over the
//! fabric. Each client connection opens its own session, once the client
//! asks for the export (a client idling in the handshake holds none, and
//! is dropped after [`GatewayOptions::handshake_timeout`]), and runs on one
//! thread: the same loop reads the client's requests, steps the session
//! (many requests in flight) and writes the replies as completions arrive,
//! in any order, several per system call; it sleeps on the client's socket
//! and the fabric channel together. Buffers are reused from one request to
//! the next. A READ or WRITE larger than the session's largest transfer
//! (the maximum block size the handshake advertises), up to
//! [`MAX_REQUEST`](crate::nbd::split::MAX_REQUEST), goes to the target in
//! pieces and is answered once every piece has ended.

use crate::core::initiator::Request;
use crate::initiator::VolumeOptions;
use crate::nbd::request::{self, Decoded, Forward};
use crate::nbd::split::{self, Gather};
use crate::nbd::wire::{self, chunk, err, REQUEST_LEN};
use crate::nbd::{Export, Handshake, Outcome};
use crate::session::{Link, Session, Submit};
use crate::wait::Woken;
use crate::wire::{feature, Accept, Op, Status};
use rustix::event::PollFlags;
use std::collections::{HashMap, VecDeque};
use std::io::{ErrorKind, IoSlice, IoSliceMut, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{info, warn};

/// Where the gateway listens.
#[derive(Debug)]
pub enum Listener {
    /// A TCP port.
    Tcp(TcpListener),
    /// A Unix socket.
    Unix(UnixListener),
}

/// What every connection forwards to.
#[derive(Clone, Debug)]
pub struct GatewayOptions {
    /// The target's control address (`host:port`).
    pub target: String,
    /// The session's settings.
    pub volume: VolumeOptions,
    /// Longest a client may take over the handshake ([`HANDSHAKE_TIMEOUT`]
    /// by default).
    pub handshake_timeout: Duration,
}

/// A client's connection.
enum Client {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Client {
    fn set_nonblocking(&self, on: bool) -> std::io::Result<()> {
        match self {
            Client::Tcp(s) => s.set_nonblocking(on),
            Client::Unix(s) => s.set_nonblocking(on),
        }
    }
    fn set_timeouts(&self, t: Option<Duration>) -> std::io::Result<()> {
        match self {
            Client::Tcp(s) => s.set_read_timeout(t).and(s.set_write_timeout(t)),
            Client::Unix(s) => s.set_read_timeout(t).and(s.set_write_timeout(t)),
        }
    }
    /// Writes all of `b` (blocking socket) before `deadline`.
    fn write_all_by(&mut self, b: &[u8], deadline: Instant) -> std::io::Result<()> {
        if b.is_empty() {
            return Ok(());
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ErrorKind::TimedOut.into());
        }
        self.set_timeouts(Some(left))?;
        self.write_all(b)
    }
}

/// Longest a client may take over the whole handshake by default
/// ([`GatewayOptions::handshake_timeout`]): a client that connects and
/// says nothing, trickles its options or reads nothing is dropped after
/// it. (The time the gateway waits for the target to open the session
/// once the client selected the export is not counted.)
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Most client connections served at once (a thread and a target session
/// each); more are closed at once, with a warning now and then.
pub const MAX_CLIENTS: usize = 256;

impl Read for Client {
    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Client::Tcp(s) => s.read(b),
            Client::Unix(s) => s.read(b),
        }
    }
    fn read_vectored(&mut self, b: &mut [IoSliceMut<'_>]) -> std::io::Result<usize> {
        match self {
            Client::Tcp(s) => s.read_vectored(b),
            Client::Unix(s) => s.read_vectored(b),
        }
    }
}

impl Write for Client {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        match self {
            Client::Tcp(s) => s.write(b),
            Client::Unix(s) => s.write(b),
        }
    }
    fn write_vectored(&mut self, b: &[IoSlice<'_>]) -> std::io::Result<usize> {
        match self {
            Client::Tcp(s) => s.write_vectored(b),
            Client::Unix(s) => s.write_vectored(b),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl AsFd for Client {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Client::Tcp(s) => s.as_fd(),
            Client::Unix(s) => s.as_fd(),
        }
    }
}

/// Serves NBD clients until `stop` is set; each connection runs on its
/// own thread and ends with its client (at most [`MAX_CLIENTS`] at once).
pub fn serve(l: Listener, opts: GatewayOptions, stop: Arc<AtomicBool>) -> std::io::Result<()> {
    let clients = Arc::new(AtomicUsize::new(0));
    let mut refused = 0u64;
    match &l {
        Listener::Tcp(t) => t.set_nonblocking(true)?,
        Listener::Unix(u) => u.set_nonblocking(true)?,
    }
    while !stop.load(Ordering::Relaxed) {
        let accepted = match &l {
            Listener::Tcp(t) => t.accept().map(|(s, _)| {
                let _ = s.set_nodelay(true);
                Client::Tcp(s)
            }),
            Listener::Unix(u) => u.accept().map(|(s, _)| Client::Unix(s)),
        };
        match accepted {
            Ok(s) => {
                if clients.load(Ordering::Acquire) >= MAX_CLIENTS {
                    refused += 1;
                    if refused.is_power_of_two() {
                        warn!("nbd: {refused} connections refused so far: {MAX_CLIENTS} clients are connected");
                    }
                    continue;
                }
                let _ = s.set_nonblocking(false);
                let o = opts.clone();
                let slot = Slot::take(&clients);
                let spawned = std::thread::Builder::new()
                    .name("ofi-nbd-conn".into())
                    .spawn(move || {
                        let _slot = slot;
                        connection(s, &o);
                    });
                if let Err(e) = spawned {
                    warn!("nbd: no thread for a connection: {e}");
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                let fd = match &l {
                    Listener::Tcp(t) => rustix::event::PollFd::new(t, rustix::event::PollFlags::IN),
                    Listener::Unix(u) => {
                        rustix::event::PollFd::new(u, rustix::event::PollFlags::IN)
                    }
                };
                let t = rustix::event::Timespec {
                    tv_sec: 0,
                    tv_nsec: 200_000_000,
                };
                let _ = rustix::event::poll(&mut [fd], Some(&t));
            }
            Err(e) => {
                warn!("nbd: accept: {e}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
    Ok(())
}

/// A client's place among the [`MAX_CLIENTS`]: given back when dropped,
/// however its thread ends (a panic included), or with the closure a
/// failed spawn drops.
struct Slot(Arc<AtomicUsize>);

impl Slot {
    fn take(count: &Arc<AtomicUsize>) -> Slot {
        count.fetch_add(1, Ordering::AcqRel);
        Slot(count.clone())
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

fn export_of(a: &Accept) -> Export {
    let read_only = a.features & feature::READ_ONLY != 0;
    Export {
        size: a.size,
        read_only,
        flush: a.features & feature::FLUSH != 0,
        trim: a.features & feature::TRIM != 0,
        zeroes: !read_only,
        min_block: 1,
        preferred_block: a.block_size.max(4096).min(a.max_io),
        max_payload: a.max_io,
    }
}

fn connection(mut s: Client, o: &GatewayOptions) {
    // The whole handshake is bounded: a client that connects and says
    // nothing, or trickles bytes, is dropped at the deadline. It holds no
    // session with the target until it selects the export.
    let mut deadline = Instant::now() + o.handshake_timeout;
    if s.write_all_by(&Handshake::greeting(), deadline).is_err() {
        return;
    }
    let mut h = Handshake::deferred();
    let mut buf = Vec::new();
    match negotiate(&mut s, &mut h, &mut buf, deadline) {
        Some(Outcome::NeedExport) => {}
        _ => return,
    }
    let opening = Instant::now();
    let link = Link::connect(&o.target, &o.volume);
    let Ok(link) = link.inspect_err(|e| warn!("nbd: target {} unavailable: {e}", o.target)) else {
        // The handshake tells the client why, until it gives up.
        h.provide(Err("target unavailable".into()));
        deadline += opening.elapsed();
        let _ = negotiate(&mut s, &mut h, &mut buf, deadline);
        return;
    };
    let Link {
        ch,
        peer,
        ctl,
        token,
    } = link;
    let session = Session::new(&ch, peer, ctl, token, &o.volume).and_then(|mut ses| {
        let a = ses.wait_open(o.volume.timeout + Duration::from_secs(1))?;
        Ok((ses, a))
    });
    if let Err(e) = &session {
        warn!("nbd: target {} unavailable: {e}", o.target);
    }
    let export = session
        .as_ref()
        .map(|(_, a)| export_of(a))
        .map_err(|e| format!("target unavailable: {e}"));
    h.provide(export.clone());
    // The time the target took is not the client's.
    deadline += opening.elapsed();
    let outcome = negotiate(&mut s, &mut h, &mut buf, deadline);
    let (Ok((mut ses, _)), Ok(export)) = (session, export) else {
        return;
    };
    let Some(Outcome::Transmission(n)) = outcome else {
        ses.close(&mut |_| {});
        return;
    };
    if s.set_timeouts(None).is_err() || s.set_nonblocking(true).is_err() {
        ses.close(&mut |_| {});
        return;
    }
    Transmission::new(ses, export, n.structured, buf).run(&mut s);
}

/// Runs the handshake on the (blocking) client socket until it needs the
/// export, moves to transmission (`buf` then holds the bytes read past
/// its end) or ends (None: closed, broken, or past `deadline`).
fn negotiate(
    s: &mut Client,
    h: &mut Handshake,
    buf: &mut Vec<u8>,
    deadline: Instant,
) -> Option<Outcome> {
    let mut out = Vec::new();
    loop {
        // What was read already first (the option that needed the export).
        let (used, outcome) = h.input(buf, &mut out);
        buf.drain(..used);
        s.write_all_by(&out, deadline).ok()?;
        out.clear();
        match outcome {
            Outcome::Continue => {}
            Outcome::Close(why) => {
                info!("nbd: handshake ended: {why}");
                return None;
            }
            o => return Some(o),
        }
        let mut b = [0u8; 4096];
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || s.set_timeouts(Some(left)).is_err() {
            info!("nbd: handshake: the client did not finish it within the bound");
            return None;
        }
        let n = match s.read(&mut b) {
            Ok(0) => return None,
            Err(e) => {
                if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) {
                    info!("nbd: handshake: the client did not finish it within the bound");
                }
                return None;
            }
            Ok(n) => n,
        };
        buf.extend_from_slice(&b[..n]);
    }
}

/// What a reply needs of its request, and the pieces it was forwarded
/// in (one, unless it was larger than the session's largest transfer).
#[derive(Debug)]
struct Pending {
    cookie: u64,
    read_at: Option<u64>,
    /// Bytes of buffer the request holds (its READ data or WRITE payload).
    len: u32,
    /// Its pieces' outcomes (their buffers: a READ's data, in order).
    gather: Gather<Vec<u8>>,
}

/// Bits of a session tag that name a piece of a request (the rest name
/// the request): room for [`split::MAX_REQUEST`] in pieces of 512 bytes, the
/// smallest transfer a target grants.
const PIECE_BITS: u32 = 20;

/// The session tag of piece `i` of request `id`.
fn piece_tag(id: u64, i: usize) -> u64 {
    id << PIECE_BITS | i as u64
}

/// A reply being written: its header, then its data (a READ's, in the
/// buffers of its pieces, in order).
struct Reply {
    head: [u8; 32],
    head_len: usize,
    data: Vec<Vec<u8>>,
    data_len: usize,
    /// Bytes of head and data written so far.
    sent: usize,
    /// Bytes of the connection's budget it holds until written (a READ's
    /// data).
    held: usize,
}

impl Reply {
    fn new(head: &[u8], data: Vec<Vec<u8>>) -> Reply {
        let mut h = [0u8; 32];
        h[..head.len()].copy_from_slice(head);
        Reply {
            head: h,
            head_len: head.len(),
            data_len: data.iter().map(Vec::len).sum(),
            data,
            sent: 0,
            held: 0,
        }
    }
    fn len(&self) -> usize {
        self.head_len + self.data_len
    }
    /// Appends what is left to send to `v`, up to `room` slices in all.
    fn unsent<'a>(&'a self, v: &mut Vec<IoSlice<'a>>, room: usize) {
        let mut skip = self.sent;
        if skip < self.head_len {
            v.push(IoSlice::new(&self.head[skip..self.head_len]));
            skip = 0;
        } else {
            skip -= self.head_len;
        }
        for d in &self.data {
            if v.len() >= room {
                return;
            }
            if skip >= d.len() {
                skip -= d.len();
                continue;
            }
            v.push(IoSlice::new(&d[skip..]));
            skip = 0;
        }
    }
}

/// Where the client's byte stream stands.
enum Input {
    /// Between requests.
    Header,
    /// A WRITE's payload arriving into the buffers of its pieces:
    /// `bufs[idx][got..]` next.
    Payload {
        id: u64,
        cookie: u64,
        offset: u64,
        fua: bool,
        bufs: Vec<Vec<u8>>,
        idx: usize,
        got: usize,
    },
    /// Payload to drop before answering a refused request.
    Skip { left: u32, reply: Reply },
}

/// Requests waiting for a credit beyond which the client is not read.
const BACKLOG: usize = 256;
/// Bytes of READ data and WRITE payload a connection may hold (in flight
/// or queued for a client that does not read its replies) beyond which
/// no new request is started: a client pipelining reads it never collects
/// would otherwise grow the gateway without bound. A request starts while
/// under it (so one may take the connection past it), and a started
/// WRITE's payload is always read (its buffer is held already).
const MAX_HELD: usize = 64 << 20;
/// Replies queued for the client beyond which it is not read (error and
/// data-less replies hold no budget bytes but are not free).
const MAX_QUEUED: usize = 4096;
/// Most replies handed to one `writev`.
const BATCH: usize = 32;
/// Most slices handed to one `readv` or `writev` (the system takes 1024).
const MAX_IOV: usize = 256;
/// Bytes read from the client at a time between payloads: room for
/// many request headers, and little of a WRITE's payload (what comes with
/// its header is copied; the rest is read straight into its buffer).
const INBUF: usize = 4 << 10;
/// A WRITE this large makes the next reads between payloads take one
/// request header at a time (until a smaller WRITE comes), so that the
/// payload that follows is read straight into its buffers rather than
/// partly into `inbuf` and copied: as many system calls (a header, then
/// its payload), one copy fewer.
const BIG_WRITE: u32 = (INBUF / 2) as u32;

/// The transmission phase of one connection.
struct Transmission<'c> {
    ses: Session<'c>,
    export: Export,
    structured: bool,
    /// Bytes read from the client: `inbuf[at..end]` are not parsed yet.
    inbuf: Vec<u8>,
    at: usize,
    end: usize,
    input: Input,
    /// The last WRITE was at least [`BIG_WRITE`]: headers are read one at
    /// a time.
    headers_only: bool,
    /// Reading the client (false after DISC, end of stream or an error).
    reading: bool,
    /// Requests forwarded, by id (their pieces' session tags carry it).
    table: HashMap<u64, Pending>,
    next_id: u64,
    out: VecDeque<Reply>,
    free: Vec<Vec<u8>>,
    /// Buffers kept for reuse.
    keep: usize,
    /// Bytes of buffers held by requests and unwritten replies.
    held: usize,
}

impl<'c> Transmission<'c> {
    fn new(ses: Session<'c>, export: Export, structured: bool, early: Vec<u8>) -> Self {
        let end = early.len();
        let mut inbuf = early;
        inbuf.resize(end.max(INBUF), 0);
        Transmission {
            ses,
            export,
            structured,
            inbuf,
            at: 0,
            end,
            input: Input::Header,
            headers_only: false,
            reading: true,
            table: HashMap::new(),
            next_id: 1,
            out: VecDeque::new(),
            free: Vec::new(),
            keep: 64,
            held: 0,
        }
    }

    /// Room to take another request: the provider's backlog, the bytes
    /// held and the replies queued are all under their bounds.
    fn room(&self) -> bool {
        self.ses.backlog() < BACKLOG && self.held < MAX_HELD && self.out.len() < MAX_QUEUED
    }

    /// Whether to read the client: always in the middle of a request (a
    /// WRITE's payload already has its buffer; a refused one's is
    /// dropped), else while there is room for the next request.
    fn wants_input(&self) -> bool {
        self.reading && (!matches!(self.input, Input::Header) || self.room())
    }

    fn run(mut self, s: &mut Client) {
        // The bytes read with the handshake's last message count first.
        let mut readable = true;
        let mut broken = false;
        loop {
            let mut work = false;
            // Requests read while there was no room for them start now.
            if self.reading && self.at < self.end && self.room() {
                let at = self.at;
                self.parse();
                work |= self.at != at;
            }
            if readable && self.wants_input() {
                match self.read(s) {
                    Ok(n) => {
                        work |= n > 0;
                        // Read again next pass only if this read found
                        // something (a sleep says when there is more).
                        readable = n > 0;
                    }
                    Err(e) => {
                        if e.kind() != ErrorKind::UnexpectedEof {
                            info!("nbd: reading the client: {e}");
                        }
                        // A WRITE cut short is dropped with its payload.
                        if let Input::Payload { bufs, .. } =
                            std::mem::replace(&mut self.input, Input::Header)
                        {
                            let len: usize = bufs.iter().map(Vec::len).sum();
                            self.held = self.held.saturating_sub(len);
                        }
                        self.reading = false;
                    }
                }
            }
            let (table, out, free, keep, structured, held) = (
                &mut self.table,
                &mut self.out,
                &mut self.free,
                self.keep,
                self.structured,
                &mut self.held,
            );
            work |= self.ses.step(&mut |c| {
                // A request is answered once its last piece has ended.
                let id = c.user >> PIECE_BITS;
                let piece = (c.user & ((1 << PIECE_BITS) - 1)) as usize;
                let Some(p) = table.get_mut(&id) else { return };
                if !p.gather.done(piece, c.result) {
                    return;
                }
                if let Some(p) = table.remove(&id) {
                    let len = p.len as usize;
                    let r = reply(p, structured, free, keep);
                    // A READ's data stays held until written; anything
                    // else gave its buffers back.
                    *held = held.saturating_sub(len - r.held);
                    out.push_back(r);
                }
            });
            if !self.out.is_empty() {
                match self.write(s) {
                    Ok(n) => work |= n > 0,
                    Err(e) => {
                        info!("nbd: writing to the client: {e}");
                        broken = true;
                    }
                }
            }
            if broken || (!self.reading && self.table.is_empty() && self.out.is_empty()) {
                break;
            }
            let mut ev = PollFlags::empty();
            if self.wants_input() {
                ev |= PollFlags::IN;
            }
            if !self.out.is_empty() {
                ev |= PollFlags::OUT;
            }
            let fds = [(s.as_fd(), ev)];
            let fds = if ev.is_empty() { &fds[..0] } else { &fds[..] };
            if let Some(w) = self.ses.park(work, fds) {
                readable |= w != Woken::Channel;
            }
        }
        self.ses.close(&mut |_| {});
    }

    /// Reads what the client sent and hands on every whole request.
    /// The bytes read (0: nothing there); an error ends the reading.
    fn read(&mut self, s: &mut Client) -> std::io::Result<usize> {
        let mut total = 0;
        // A payload goes straight into its pieces' buffers.
        if let Input::Payload { bufs, idx, got, .. } = &mut self.input {
            let read = {
                let mut v: Vec<IoSliceMut<'_>> = Vec::with_capacity(MAX_IOV);
                let mut first = *got;
                for b in bufs[*idx..].iter_mut().take(MAX_IOV) {
                    v.push(IoSliceMut::new(&mut b[first..]));
                    first = 0;
                }
                s.read_vectored(&mut v)
            };
            match read {
                Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    advance(bufs, idx, got, n);
                    total += n;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(0),
                Err(e) => return Err(e),
            }
            self.parse();
            if matches!(self.input, Input::Payload { .. }) || !self.room() {
                return Ok(total);
            }
        }
        // `inbuf[at..end]` holds unparsed bytes; move them to the front
        // when the free space is short.
        if self.at == self.end {
            self.at = 0;
            self.end = 0;
        } else if self.inbuf.len() - self.end < REQUEST_LEN.max(self.inbuf.len() / 2) {
            self.inbuf.copy_within(self.at..self.end, 0);
            self.end -= self.at;
            self.at = 0;
        }
        if self.end == self.inbuf.len() {
            self.inbuf.resize(2 * self.inbuf.len(), 0);
        }
        // After a large WRITE, the rest of one header only (a payload
        // read with it would be copied).
        let upto = if self.headers_only {
            let partial = (self.end - self.at).min(REQUEST_LEN - 1);
            (self.end + REQUEST_LEN - partial).min(self.inbuf.len())
        } else {
            self.inbuf.len()
        };
        let n = match s.read(&mut self.inbuf[self.end..upto]) {
            Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                // Bytes that came with the handshake's last message.
                self.parse();
                return Ok(total);
            }
            Err(e) => return Err(e),
        };
        self.end += n;
        self.parse();
        Ok(total + n)
    }

    /// A buffer of `len` bytes (its contents are overwritten), counted as
    /// held until its request's reply gives it back.
    fn buffer(&mut self, len: usize) -> Vec<u8> {
        self.held += len;
        let mut b = self.free.pop().unwrap_or_default();
        b.resize(len, 0);
        b
    }

    /// Consumes whole requests (and payload bytes) from `inbuf`.
    fn parse(&mut self) {
        loop {
            let avail = &self.inbuf[self.at..self.end];
            match &mut self.input {
                Input::Payload { bufs, idx, got, .. } => {
                    // What came with the header (at most INBUF bytes).
                    let mut avail = avail;
                    while *idx < bufs.len() && !avail.is_empty() {
                        let b = &mut bufs[*idx];
                        let n = avail.len().min(b.len() - *got);
                        b[*got..*got + n].copy_from_slice(&avail[..n]);
                        self.at += n;
                        avail = &avail[n..];
                        advance(bufs, idx, got, n);
                    }
                    if *idx < bufs.len() {
                        return;
                    }
                    let Input::Payload {
                        id,
                        cookie,
                        offset,
                        fua,
                        bufs,
                        ..
                    } = std::mem::replace(&mut self.input, Input::Header)
                    else {
                        return;
                    };
                    let len: usize = bufs.iter().map(Vec::len).sum();
                    // Only a whole WRITE is answered (one cut short by the
                    // client's end is dropped with its payload).
                    self.table.insert(
                        id,
                        Pending {
                            cookie,
                            read_at: None,
                            len: len as u32,
                            gather: Gather::new(bufs.len()),
                        },
                    );
                    let mut at = offset;
                    for (i, b) in bufs.into_iter().enumerate() {
                        let n = b.len() as u32;
                        self.ses.submit(Submit {
                            req: Request::new(Op::Write, at, n, fua, false),
                            user: piece_tag(id, i),
                            buf: Some(b),
                        });
                        at += n as u64;
                    }
                }
                Input::Skip { left, .. } => {
                    let n = avail.len().min(*left as usize);
                    *left -= n as u32;
                    self.at += n;
                    if *left > 0 {
                        return;
                    }
                    if let Input::Skip { reply, .. } =
                        std::mem::replace(&mut self.input, Input::Header)
                    {
                        self.out.push_back(reply);
                    }
                }
                Input::Header => {
                    // Without room, the request waits in `inbuf` (the run
                    // loop parses it once room comes back).
                    if !self.reading || avail.len() < REQUEST_LEN || !self.room() {
                        return;
                    }
                    let d = request::decode(&avail[..REQUEST_LEN], &self.export);
                    self.at += REQUEST_LEN;
                    match d {
                        Ok(d) => self.request(d),
                        Err(e) => {
                            warn!("nbd: {e}: closing the connection");
                            self.reading = false;
                        }
                    }
                }
            }
        }
    }

    /// Starts a decoded request: a READ or WRITE larger than the
    /// session's largest transfer goes in pieces.
    fn request(&mut self, d: Decoded) {
        let id = self.next_id;
        self.next_id += 1;
        let structured = self.structured;
        let max = self.export.max_payload;
        match d {
            Decoded::Disconnect => self.reading = false,
            Decoded::Ok { cookie, skip } => {
                let r = done_reply(cookie, structured);
                self.answer(skip, r);
            }
            Decoded::Error {
                cookie,
                error,
                skip,
            } => {
                let r = error_reply(cookie, error, structured);
                self.answer(skip, r);
            }
            Decoded::Forward { cookie, fwd } => {
                let r = match fwd {
                    Forward::Read { offset, len } => {
                        let n = split::pieces(offset, len, max).count();
                        self.table.insert(
                            id,
                            Pending {
                                cookie,
                                read_at: Some(offset),
                                len,
                                gather: Gather::new(n),
                            },
                        );
                        for (i, (at, l)) in split::pieces(offset, len, max).enumerate() {
                            let buf = self.buffer(l as usize);
                            self.ses.submit(Submit {
                                req: Request::new(Op::Read, at, l, false, false),
                                user: piece_tag(id, i),
                                buf: Some(buf),
                            });
                        }
                        return;
                    }
                    Forward::Write { offset, len, fua } => {
                        self.headers_only = len >= BIG_WRITE;
                        let bufs = split::pieces(offset, len, max)
                            .map(|(_, l)| self.buffer(l as usize))
                            .collect();
                        self.input = Input::Payload {
                            id,
                            cookie,
                            offset,
                            fua,
                            bufs,
                            idx: 0,
                            got: 0,
                        };
                        return;
                    }
                    Forward::Flush => Request::new(Op::Flush, 0, 0, false, false),
                    Forward::Trim { offset, len, fua } => {
                        Request::new(Op::Trim, offset, len, fua, false)
                    }
                    Forward::Zero {
                        offset,
                        len,
                        fua,
                        no_hole,
                    } => Request::new(Op::WriteZeroes, offset, len, fua, no_hole),
                };
                self.table.insert(
                    id,
                    Pending {
                        cookie,
                        read_at: None,
                        len: 0,
                        gather: Gather::new(1),
                    },
                );
                self.ses.submit(Submit {
                    req: r,
                    user: piece_tag(id, 0),
                    buf: None,
                });
            }
        }
    }

    /// Answers at once, after dropping `skip` payload bytes.
    fn answer(&mut self, skip: u32, r: Reply) {
        if skip > 0 {
            self.input = Input::Skip {
                left: skip,
                reply: r,
            };
        } else {
            self.out.push_back(r);
        }
    }

    /// Writes queued replies, several per system call; the bytes written.
    fn write(&mut self, s: &mut Client) -> std::io::Result<usize> {
        let mut total = 0;
        while !self.out.is_empty() {
            let mut v: Vec<IoSlice<'_>> = Vec::with_capacity(MAX_IOV);
            for r in self.out.iter().take(BATCH) {
                if v.len() >= MAX_IOV {
                    break;
                }
                r.unsent(&mut v, MAX_IOV);
            }
            let mut n = match s.write_vectored(&v) {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(total),
                Err(e) => return Err(e),
            };
            total += n;
            while n > 0 {
                let Some(r) = self.out.front_mut() else { break };
                let left = r.len() - r.sent;
                if n < left {
                    r.sent += n;
                    break;
                }
                n -= left;
                if let Some(r) = self.out.pop_front() {
                    self.held = self.held.saturating_sub(r.held);
                    for b in r.data {
                        recycle(&mut self.free, b, self.keep);
                    }
                }
            }
        }
        Ok(total)
    }
}

/// Moves a payload's position (`bufs[idx][got..]` next) `n` bytes on.
fn advance(bufs: &[Vec<u8>], idx: &mut usize, got: &mut usize, mut n: usize) {
    while n > 0 && *idx < bufs.len() {
        let room = bufs[*idx].len() - *got;
        if n < room {
            *got += n;
            return;
        }
        n -= room;
        *idx += 1;
        *got = 0;
    }
}

/// Keeps a buffer for the next request (up to `keep` of them).
fn recycle(free: &mut Vec<Vec<u8>>, b: Vec<u8>, keep: usize) {
    if b.capacity() > 0 && free.len() < keep {
        free.push(b);
    }
}

/// The success reply of a request without data.
fn done_reply(cookie: u64, structured: bool) -> Reply {
    if structured {
        Reply::new(
            &wire::chunk_header(chunk::FLAG_DONE, chunk::NONE, cookie, 0),
            Vec::new(),
        )
    } else {
        Reply::new(&wire::simple_reply(0, cookie), Vec::new())
    }
}

/// The reply carrying NBD error `e`.
fn error_reply(cookie: u64, e: u32, structured: bool) -> Reply {
    if structured {
        Reply::new(&wire::error_chunk(cookie, e), Vec::new())
    } else {
        Reply::new(&wire::simple_reply(e, cookie), Vec::new())
    }
}

/// The reply to a forwarded request whose pieces have all ended; buffers
/// other than a READ's data go back to `free`.
fn reply(p: Pending, structured: bool, free: &mut Vec<Vec<u8>>, keep: usize) -> Reply {
    let (status, bufs) = p.gather.finish().unwrap_or((Err(Status::Io), Vec::new()));
    match (status, p.read_at) {
        (Ok(()), Some(offset)) => {
            let mut r = if structured {
                Reply::new(&wire::read_chunk(p.cookie, offset, p.len), bufs)
            } else {
                Reply::new(&wire::simple_reply(0, p.cookie), bufs)
            };
            r.held = p.len as usize;
            r
        }
        (status, _) => {
            for b in bufs {
                recycle(free, b, keep);
            }
            match status {
                Ok(()) => done_reply(p.cookie, structured),
                Err(st) => error_reply(p.cookie, nbd_error(st), structured),
            }
        }
    }
}

/// The NBD error for a failed request: NBD defines EPERM, EIO, ENOMEM,
/// EINVAL, ENOSPC, EOVERFLOW, ENOTSUP and ESHUTDOWN only, so a target
/// that timed out or is busy is an I/O error to the client (which would
/// read ETIMEDOUT or EBUSY as "invalid request").
fn nbd_error(st: Status) -> u32 {
    match st {
        Status::OutOfRange | Status::Invalid => err::EINVAL,
        Status::ReadOnly => err::EPERM,
        Status::NoSpace => err::ENOSPC,
        Status::Unsupported => err::ENOTSUP,
        Status::ShuttingDown | Status::Disconnected => err::ESHUTDOWN,
        Status::Ok | Status::Io | Status::Transfer | Status::Busy | Status::TimedOut => err::EIO,
    }
}
