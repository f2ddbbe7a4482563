//! One connection's I/O: a nonblocking socket driven through its sans-IO
//! [`Conn`], and the fast path of a send written straight to it.
//! Its unsafe blocks move bytes between sockets and the memory of posted
//! operations, which the raw layer's callers keep valid until completion.
#![allow(unsafe_code)]

use crate::sys::Socket;
use crate::INJECT_SIZE;
use ofi_core::consts::*;
use ofi_core::error::errno;
use ofi_core::object::{EpBindings, SendOp};
use ofi_core::util::iov::{copy_from_iov, copy_to_iov};
use ofi_core::util::peer::Cause;
use ofi_inet::poller::Poller;
use ofi_inet::tcp_core::sends::Sends;
use ofi_proto::tcp::{Ack, Conn, Rx, SendReq, State, Target, FAST_MAX};
use ofi_wire::tcp::HDR_LEN;
use std::io;
use std::time::{Duration, Instant};

/// Maps a socket error to an FI_E* number: errors that say the peer is
/// gone fold into the number of their [`Cause`] (a broken pipe is
/// `FI_ECONNRESET`, a down network `FI_EHOSTUNREACH`), so operations fail
/// with the number the endpoint's death report carries.
pub fn fi_errno(e: &io::Error) -> i32 {
    match e.raw_os_error() {
        Some(c) if c > 0 && c < 256 => Cause::of_errno(c).map_or(c, Cause::errno),
        _ => errno::FI_EIO,
    }
}

/// What [`Link::send_now`] did with a send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fast {
    /// Written whole: the send is complete.
    Sent,
    /// Partly written; the rest is staged and completes later.
    Staged,
    /// Not taken: queue the send as usual.
    Queue,
}

/// Bytes read ahead at a time: a 4 KiB message with its header (an RMA
/// write of a 4 KiB block, 4168 bytes) and what follows it arrive in one
/// `recv`; with 4096 bytes the last 72 bytes took a second system call.
/// A large payload is copied from here only for the part read ahead.
const STAGE: usize = 16 << 10;

/// A connection: socket, protocol state, and a scratch buffer for discards.
pub struct Link {
    /// The socket.
    pub sock: Socket,
    /// The protocol state.
    pub conn: Conn,
    /// True while a nonblocking connect is in progress.
    pub connecting: bool,
    /// When the connection attempt started: the connect and the handshake
    /// must finish within `timeout` of it.
    pub started: Instant,
    /// The peer timeout (FI_TCP_PEER_TIMEOUT_MS).
    timeout: Duration,
    /// Whether the poller currently watches this socket for writability.
    pub watching_out: bool,
    /// Whether the socket is in the poller at all: a socket polled with
    /// `recv` leaves it while no one may sleep on the poller (see
    /// [`Link::keep_watched`]).
    watched: bool,
    /// Bytes read ahead of the protocol's request, and the staged range.
    stage: Box<[u8; STAGE]>,
    staged: (usize, usize),
    scratch: Box<[u8; 4096]>,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("fd", &self.sock.fd())
            .field("state", &self.conn.state())
            .finish()
    }
}

impl Link {
    /// A link over `sock`, with keepalive and the user timeout derived from
    /// the peer timeout `timeout` applied.
    pub fn new(sock: Socket, conn: Conn, connecting: bool, timeout: Duration) -> Link {
        if let Err(e) = sock.set_liveness(timeout) {
            tracing::warn!(error = %e, "tcp: could not set keepalive / user timeout");
        }
        Link {
            sock,
            conn,
            connecting,
            started: Instant::now(),
            timeout,
            watching_out: true,
            watched: true,
            stage: Box::new([0; STAGE]),
            staged: (0, 0),
            scratch: Box::new([0; 4096]),
        }
    }

    fn write(&mut self, rx: &mut Rx) -> bool {
        // Nothing staged or queued and nothing owed for the receive side:
        // skip asking the protocol (most passes of a polling loop).
        if !self.conn.wants_transmit() && !rx.owes_frames() {
            return true;
        }
        loop {
            let t = self.conn.poll_transmit(rx);
            if t.is_empty() {
                return true;
            }
            // SAFETY: `Iov` slices are pending sends' buffers, which their
            // posters keep readable until the sends complete.
            match unsafe { self.sock.writev(t.iter()) } {
                Ok(n) => self.conn.on_written(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.conn.on_error(fi_errno(&e), rx);
                    return false;
                }
            }
        }
    }

    /// The fast path of a send ([`send_now`](Self::send_now)), for one that
    /// asks for neither an acknowledgement (`ack`) nor a fence: written
    /// whole, it is completed here (`Fast::Sent`); partly written, it is
    /// registered in `sends` and completes later (`Fast::Staged`: drive the
    /// link); `Fast::Queue`: not taken, queue it as usual.
    ///
    /// # Safety
    /// `post_send`'s contract: the ranges are readable for this call (and
    /// until completion without FI_INJECT).
    pub unsafe fn send_fast(
        &mut self,
        sends: &mut Sends,
        b: &EpBindings,
        op: &SendOp<'_>,
        ack: Ack,
    ) -> Fast {
        if ack != Ack::None || op.flags & FI_FENCE != 0 {
            return Fast::Queue;
        }
        let Some(bare) = Sends::bare(op) else {
            return Fast::Queue;
        };
        let selective = b.tx_selective;
        let register = || {
            // SAFETY: our caller keeps `op`'s ranges readable for this call,
            // and until the send completes unless FI_INJECT (which start
            // copies here): start's contract.
            unsafe { sends.start(op, selective, INJECT_SIZE) }.map_or(0, |r| r.context)
        };
        // SAFETY: `bare` holds `op`'s ranges, which our caller keeps
        // readable for this call: send_now's contract.
        let fast = unsafe { self.send_now(&bare, register) };
        if fast == Fast::Sent {
            Sends::complete_now(b, op);
        }
        fast
    }

    /// Writes a small eager send at once when the connection allows it
    /// ([`Conn::frame_now`]): header and payload gathered on the stack and
    /// handed to one `send`, with no copy kept and nothing queued.
    /// `register` names the send for a later completion; it is called only
    /// when the socket took part of the frame (the rest then waits in the
    /// connection, ahead of anything queued later).
    ///
    /// # Safety
    /// `req`'s ranges are readable for this call.
    pub unsafe fn send_now(&mut self, req: &SendReq, register: impl FnOnce() -> usize) -> Fast {
        if self.connecting {
            return Fast::Queue;
        }
        let mut frame = [0u8; HDR_LEN + FAST_MAX];
        let (hdr, body) = frame.split_at_mut(HDR_LEN);
        let hdr: &mut [u8; HDR_LEN] = hdr.try_into().expect("HDR_LEN bytes");
        let Some(total) = self.conn.frame_now(req, hdr) else {
            return Fast::Queue;
        };
        // SAFETY: the caller vouches for the ranges; frame_now checked that
        // they hold total - HDR_LEN <= FAST_MAX bytes.
        unsafe { copy_from_iov(req.iov(), 0, &mut body[..total - HDR_LEN]) };
        let frame = &frame[..total];
        let n = loop {
            match self.sock.send(frame) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break 0,
                // The queue's own write meets the error and fails the
                // connection's operations with it, this one among them.
                Err(_) => return Fast::Queue,
            }
        };
        if n == total {
            return Fast::Sent;
        }
        let ctx = register();
        self.conn.frame_written(frame, n, ctx);
        Fast::Staged
    }

    /// Reads as far as the socket and the protocol allow. Headers are read
    /// ahead into a small staging buffer, so a small message (header and
    /// payload) costs one system call; staged bytes are handed to whatever
    /// the protocol asks for next (a payload is copied from the stage only
    /// for the part that was read ahead; the rest lands in place).
    fn read(&mut self, rx: &mut Rx) -> bool {
        let Link {
            sock,
            conn,
            scratch,
            stage,
            staged,
            ..
        } = self;
        // A read-ahead that came back short emptied the socket: asking
        // again would only return EAGAIN (one wasted system call per
        // message); the poller reports the socket when more arrives.
        let mut drained = false;
        loop {
            let avail = staged.1 - staged.0;
            let target = conn.recv_target(rx);
            let r = if avail > 0 {
                let from = &stage[staged.0..staged.1];
                let n = match target {
                    Target::Header(b) | Target::Buffer(b) => {
                        let n = b.len().min(avail);
                        b[..n].copy_from_slice(&from[..n]);
                        n
                    }
                    Target::Payload(iov) => {
                        let want: usize = iov.iter().map(|v| v.len).sum();
                        let n = want.min(avail);
                        // SAFETY: payload ranges are a matched receive's buffer,
                        // which its poster keeps writable until it completes.
                        unsafe { copy_to_iov(iov, 0, &from[..n]) }
                    }
                    Target::Discard(n) => n.min(avail),
                    Target::Blocked | Target::Closed => return true,
                };
                staged.0 += n;
                if staged.0 == staged.1 {
                    *staged = (0, 0);
                }
                Ok(n)
            } else {
                match target {
                    Target::Header(_) if drained => return true,
                    Target::Header(_) => match sock.read(&mut stage[..]) {
                        Ok(0) => Ok(0),
                        Ok(n) => {
                            drained = n < stage.len();
                            *staged = (0, n);
                            continue;
                        }
                        Err(e) => Err(e),
                    },
                    Target::Buffer(b) => sock.read(b),
                    // SAFETY: payload ranges are a matched receive's buffer, which
                    // its poster keeps writable until the receive completes.
                    Target::Payload(iov) => unsafe { sock.readv(iov) },
                    Target::Discard(n) => {
                        let m = n.min(scratch.len());
                        sock.read(&mut scratch[..m])
                    }
                    Target::Blocked | Target::Closed => return true,
                }
            };
            match r {
                Ok(0) if avail == 0 => {
                    conn.on_eof(rx);
                    return false;
                }
                // The protocol asked for nothing: stop rather than spin.
                Ok(0) => return true,
                Ok(n) => conn.on_read(n, rx),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    conn.on_error(fi_errno(&e), rx);
                    return false;
                }
            }
        }
    }

    /// Moves bytes both ways as far as the socket allows.
    pub fn drive(&mut self, rx: &mut Rx) {
        self.drive_with(rx, true);
    }

    /// True while an incoming connection has not finished its handshake
    /// (no HELLO yet, or not yet authenticated): what `gate` bounds.
    pub fn half_open(&self) -> bool {
        matches!(
            self.conn.state(),
            State::AwaitingHello | State::Authenticating
        )
    }

    /// Fails the connection with `FI_ETIMEDOUT` when its TCP connect has
    /// taken longer than the peer timeout. True if it did.
    fn check_deadline(&mut self, rx: &mut Rx, now: Instant) -> bool {
        if !self.connecting || now.saturating_duration_since(self.started) <= self.timeout {
            return false;
        }
        self.connecting = false;
        self.conn.on_error(errno::FI_ETIMEDOUT, rx);
        true
    }

    /// Sends what is queued, reading only when `read` (a post needs no read:
    /// the next progress call reads, and skipping it saves a system call per
    /// operation).
    pub fn drive_with(&mut self, rx: &mut Rx, read: bool) {
        if self.connecting {
            match self.sock.connect_result() {
                Ok(false) => {
                    self.check_deadline(rx, Instant::now());
                    return;
                }
                Ok(true) => self.connecting = false,
                Err(e) => {
                    self.connecting = false;
                    use rustix::io::Errno;
                    let code = match Errno::from_io_error(&e) {
                        Some(Errno::CONNREFUSED) => errno::FI_ECONNREFUSED,
                        Some(Errno::TIMEDOUT) => errno::FI_ETIMEDOUT,
                        Some(Errno::HOSTUNREACH | Errno::NETUNREACH) => errno::FI_EHOSTUNREACH,
                        _ => fi_errno(&e),
                    };
                    self.conn.on_error(code, rx);
                    return;
                }
            }
        }
        if self.conn.is_closed() {
            return;
        }
        if self.write(rx) && read && self.read(rx) {
            // A read may have queued control frames (CTS): send them now.
            self.write(rx);
        }
    }

    /// True when driving the link may do work that no socket readiness
    /// announces: a connect in progress, bytes waiting to be written, or
    /// bytes read ahead and not yet handed to the protocol.
    pub fn needs_drive(&self) -> bool {
        self.wants_write() || self.staged.1 > self.staged.0
    }

    /// True when bytes were read ahead and not yet handed to the protocol
    /// (no socket readiness announces them).
    pub fn has_read_ahead(&self) -> bool {
        self.staged.1 > self.staged.0
    }

    /// True while the link has bytes waiting for a writable socket.
    pub fn wants_write(&self) -> bool {
        self.connecting || self.conn.wants_transmit()
    }

    /// Puts the socket in the poller (`watched`) or takes it out. A socket
    /// in an epoll set costs every message that arrives on it a callback
    /// in the sender's system call (about 6 % of a loopback round trip
    /// here), which is wasted while the socket is polled with `recv` and
    /// nobody sleeps on the poller; whoever is about to sleep puts it back
    /// first (the domain's `arm`), and epoll then reports what arrived
    /// meanwhile. A system call only when the state changes.
    pub fn keep_watched(&mut self, poller: &Poller, key: u64, watched: bool) {
        if watched == self.watched {
            return;
        }
        if watched {
            let out = self.wants_write();
            if poller.add(&self.sock, key, out).is_ok() {
                self.watched = true;
                self.watching_out = out;
            }
        } else {
            poller.remove(&self.sock);
            self.watched = false;
        }
    }

    /// True while the socket is in the poller.
    pub fn watched(&self) -> bool {
        self.watched
    }

    /// Keeps the poller's interest in writability in step with the link:
    /// a syscall only when it changes (links are added watching both ways).
    pub fn sync_interest(&mut self, poller: &Poller, key: u64) {
        if !self.watched {
            return;
        }
        let want = self.wants_write();
        if want != self.watching_out {
            self.watching_out = want;
            let _ = poller.modify(&self.sock, key, want);
        }
    }
}
