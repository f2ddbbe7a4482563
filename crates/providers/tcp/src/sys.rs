//! The tcp provider's system calls: nonblocking sockets, and scatter-gather
//! reads into receive buffers and writes from send buffers (the epoll set
//! is `ofi_inet::poller`'s).
//!
//! Socket set-up (creation, options, bind, listen, connect, accept,
//! addresses) goes through socket2; the data path (send, recv, sendmsg)
//! and the connect check (poll, SO_ERROR) through rustix, whose raw
//! system calls skip libc and its `errno`. The `unsafe` left turns the raw
//! layer's send ranges (iov addresses the caller vouches for: they stay
//! valid until their operation completes) into slices, and hands receive
//! ranges to libc's `readv` as raw iovecs (they may overlap, so they never
//! become `&mut` slices).
#![allow(unsafe_code)]

use ofi_core::util::iov::IoVec;
use ofi_proto::tcp::TxSlice;
use rustix::io::Errno;
use rustix::net::{RecvFlags, SendAncillaryBuffer, SendFlags};
use socket2::{Domain, SockAddr, TcpKeepalive, Type};
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::time::Duration;

/// Flags of every send: never block, never raise SIGPIPE.
const SEND: SendFlags = SendFlags::DONTWAIT.union(SendFlags::NOSIGNAL);

/// The socket address the kernel filled in, as a std address (the
/// families a tcp socket can have).
fn std_addr(a: SockAddr) -> io::Result<SocketAddr> {
    a.as_socket().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("tcp: address family {} is not IPv4 or IPv6", a.family()),
        )
    })
}

/// A nonblocking TCP socket (or listener).
#[derive(Debug)]
pub struct Socket(socket2::Socket);

impl AsFd for Socket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

impl Socket {
    fn new(sa: &SocketAddr) -> io::Result<Socket> {
        let ty = Type::STREAM.nonblocking().cloexec();
        socket2::Socket::new(Domain::for_address(*sa), ty, None).map(Socket)
    }

    /// A listening socket bound to `sa` (port 0: any).
    pub fn listen(sa: &SocketAddr) -> io::Result<Socket> {
        let s = Socket::new(sa)?;
        s.0.set_reuse_address(true)?;
        s.0.bind(&(*sa).into())?;
        s.0.listen(1024)?;
        Ok(s)
    }

    /// [`listen`](Self::listen), with a port from `range` when `sa` names
    /// port 0 (the first free one, in order); `FI_EADDRINUSE` naming the
    /// range when every port of it is taken.
    pub fn listen_in(
        sa: &SocketAddr,
        range: Option<(u16, u16)>,
    ) -> ofi_core::error::Result<Socket> {
        use ofi_core::error::{errno, Error};
        let Some((low, high)) = range.filter(|_| sa.port() == 0) else {
            return Socket::listen(sa)
                .map_err(|e| Error::os(e, &format!("tcp: listening on {sa}")));
        };
        for port in low..=high {
            let at = SocketAddr::new(sa.ip(), port);
            match Socket::listen(&at) {
                Err(e) if Errno::from_io_error(&e) == Some(Errno::ADDRINUSE) => continue,
                r => return r.map_err(|e| Error::os(e, &format!("tcp: listening on {at}"))),
            }
        }
        Err(Error::new(
            errno::FI_EADDRINUSE,
            format!(
                "tcp: listening on {}: every port of FI_TCP_PORT_LOW_RANGE..FI_TCP_PORT_HIGH_RANGE ({low}-{high}) is in use",
                sa.ip()
            ),
        ))
    }

    /// Liveness settings for a connected socket, from the peer timeout
    /// `bound`: data unacknowledged for `bound` ends the connection
    /// (TCP_USER_TIMEOUT), and a silent connection is probed (keepalive)
    /// after half the bound, then every sixth of it (at least 1 s each),
    /// three unanswered probes ending it; so a dead link or host turns
    /// into errors within about the bound instead of minutes.
    pub fn set_liveness(&self, bound: Duration) -> io::Result<()> {
        let secs = bound.as_secs().clamp(1, i32::MAX as u64 / 2);
        let keepalive = TcpKeepalive::new()
            .with_time(Duration::from_secs((secs / 2).max(1)))
            .with_interval(Duration::from_secs((secs / 6).max(1)))
            .with_retries(3);
        self.0.set_tcp_keepalive(&keepalive)?;
        let ms = bound.as_millis().clamp(1, i32::MAX as u128) as u64;
        self.0.set_tcp_user_timeout(Some(Duration::from_millis(ms)))
    }

    /// Starts a nonblocking connect from `from` (its IP, and its port
    /// unless 0); completion shows as writability
    /// ([`connect_result`](Self::connect_result)).
    pub fn connect(to: &SocketAddr, from: Option<&SocketAddr>) -> io::Result<Socket> {
        if from.is_some_and(|f| f.is_ipv4() != to.is_ipv4()) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the endpoint and the destination have different address families",
            ));
        }
        let s = Socket::new(to)?;
        s.0.set_tcp_nodelay(true)?;
        if let Some(f) = from {
            if !f.ip().is_unspecified() || f.port() != 0 {
                s.0.bind(&(*f).into())?;
            }
        }
        match s.0.connect(&(*to).into()) {
            Err(e) if Errno::from_io_error(&e) != Some(Errno::INPROGRESS) => Err(e),
            _ => Ok(s),
        }
    }

    /// `Ok(true)` once a nonblocking connect finished, `Ok(false)` while it
    /// is in progress, the connect's error otherwise.
    pub fn connect_result(&self) -> io::Result<bool> {
        use rustix::event::{poll, PollFd, PollFlags};
        let mut p = [PollFd::new(self, PollFlags::OUT)];
        let zero = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        if poll(&mut p, Some(&zero))? == 0 {
            return Ok(false);
        }
        rustix::net::sockopt::socket_error(self)??;
        Ok(true)
    }

    /// True when a listener has a connection to accept (or an error to
    /// report): one `poll`, which allocates nothing, where an `accept4` that
    /// finds nothing allocates and frees a socket, an inode and a file.
    pub fn acceptable(&self) -> bool {
        use rustix::event::{poll, PollFd, PollFlags};
        let mut p = [PollFd::new(self, PollFlags::IN)];
        let zero = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // A failed poll says nothing: look with accept, as before.
        poll(&mut p, Some(&zero)).map_or(true, |n| n > 0)
    }

    /// Accepts one pending connection, if any.
    pub fn accept(&self) -> io::Result<Option<(Socket, SocketAddr)>> {
        let (s, peer) = match self.0.accept4(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC) {
            Ok(r) => r,
            Err(e) => {
                return match Errno::from_io_error(&e) {
                    Some(Errno::AGAIN | Errno::INTR | Errno::CONNABORTED) => Ok(None),
                    _ => Err(e),
                }
            }
        };
        s.set_tcp_nodelay(true)?;
        Ok(Some((Socket(s), std_addr(peer)?)))
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        std_addr(self.0.local_addr()?)
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        std_addr(self.0.peer_addr()?)
    }

    /// Writes one buffer, without blocking or raising SIGPIPE.
    #[inline]
    pub fn send(&self, buf: &[u8]) -> io::Result<usize> {
        Ok(rustix::net::send(self, buf, SEND)?)
    }

    /// Reads into one buffer. `Ok(0)` is end of stream.
    #[inline]
    pub fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        Ok(rustix::net::recv(self, buf, RecvFlags::DONTWAIT)?.0)
    }

    /// Reads into a receive's ranges (the first [`MAX_IOV`] of them).
    ///
    /// The ranges go to the kernel as raw `iovec`s, never as Rust slices:
    /// a C caller may post a receive whose ranges overlap, and two `&mut`
    /// slices over the same bytes would be undefined behaviour even though
    /// the kernel's writes through raw addresses are not.
    ///
    /// # Safety
    /// The ranges must be valid for writes for the call's duration (the
    /// posted receive's promise); overlapping ranges are allowed (which
    /// bytes land where is then the kernel's order).
    pub unsafe fn readv(&self, iov: &[IoVec]) -> io::Result<usize> {
        let mut v = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; MAX_IOV];
        // Empty ranges are skipped: a call over nothing but empty ones
        // would read 0 bytes, which reads as end of stream.
        let mut n = 0;
        for (d, s) in v.iter_mut().zip(iov.iter().filter(|s| s.len > 0)) {
            n += 1;
            *d = libc::iovec {
                iov_base: s.base as *mut libc::c_void,
                iov_len: s.len,
            };
        }
        // MAX_IOV is far below IOV_MAX (1024), so `n` fits a c_int.
        // SAFETY: `v[..n]` are initialised iovecs over ranges the caller
        // vouches are writable for this call; the descriptor is owned by
        // `self` and open.
        let r = unsafe { libc::readv(self.0.as_raw_fd(), v.as_ptr(), n as libc::c_int) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(r as usize)
    }

    /// Writes the ranges in order (up to [`MAX_IOV`] at a time).
    ///
    /// Small writes (one range, or all ranges within [`SMALL_SEND`] bytes)
    /// use `send`.
    ///
    /// # Safety
    /// `Iov` ranges must be valid for reads (the posted send's promise).
    pub unsafe fn writev<'a>(
        &self,
        slices: impl Iterator<Item = TxSlice<'a>>,
    ) -> io::Result<usize> {
        let mut v = [IoSlice::new(&[]); MAX_IOV];
        let mut n = 0;
        for s in slices.take(MAX_IOV) {
            v[n] = IoSlice::new(match s {
                TxSlice::Bytes(b) => b,
                // SAFETY: the caller vouches for `i.len` readable bytes at `i.base`.
                TxSlice::Iov(i) => unsafe { raw(i.base, i.len) },
            });
            n += 1;
        }
        // One range, or a few small ones gathered on the stack, go out
        // with `send`: the kernel then skips copying in a msghdr and an
        // iovec array, which costs a small message more than the copy.
        let total: usize = v[..n].iter().map(|i| i.len()).sum();
        if n == 1 {
            return self.send(&v[0]);
        }
        if total <= SMALL_SEND {
            let mut stage = [0u8; SMALL_SEND];
            let mut at = 0;
            for i in &v[..n] {
                stage[at..at + i.len()].copy_from_slice(i);
                at += i.len();
            }
            return self.send(&stage[..total]);
        }
        let mut control = SendAncillaryBuffer::default();
        Ok(rustix::net::sendmsg(self, &v[..n], &mut control, SEND)?)
    }

    /// The descriptor.
    pub fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// `len` bytes at address `base` as a slice (none for an empty range,
/// whatever its address).
///
/// # Safety
/// `base..base + len` must be readable and unchanged for `'a`.
unsafe fn raw<'a>(base: usize, len: usize) -> &'a [u8] {
    if len == 0 {
        return &[];
    }
    // SAFETY: the caller's promise.
    unsafe { std::slice::from_raw_parts(base as *const u8, len) }
}

/// Gathered writes up to this size are copied into one buffer and sent
/// with `send` rather than `sendmsg`.
pub const SMALL_SEND: usize = 256;

/// Most ranges one `readv` or `sendmsg` passes (the rest go in the next).
pub const MAX_IOV: usize = 64;
