//! The tcp provider's system calls: nonblocking sockets, scatter-gather
//! reads into receive buffers and writes from send buffers, and an epoll set
//! per endpoint. The raw layer's memory contract (iov ranges stay valid until
//! their operation completes) is what the unsafe blocks rely on.
#![allow(unsafe_code)]

use ofi_core::util::iov::IoVec;
use ofi_proto::tcp::TxSlice;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn cvt_size(r: libc::ssize_t) -> io::Result<usize> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

fn sockaddr(sa: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain data; all-zero is a valid value.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let b = crate::addr::encode(sa);
    // SAFETY: `b` (16 or 28 bytes) fits in sockaddr_storage (128 bytes).
    unsafe {
        std::ptr::copy_nonoverlapping(
            b.as_ptr(),
            (&mut ss as *mut libc::sockaddr_storage).cast::<u8>(),
            b.len(),
        )
    };
    (ss, b.len() as libc::socklen_t)
}

/// A nonblocking TCP socket (or listener).
#[derive(Debug)]
pub struct Socket(OwnedFd);

impl Socket {
    fn new(sa: &SocketAddr) -> io::Result<Socket> {
        let fam = if sa.is_ipv4() {
            libc::AF_INET
        } else {
            libc::AF_INET6
        };
        // SAFETY: plain syscall; the result is checked and owned.
        let fd = cvt(unsafe {
            libc::socket(
                fam,
                libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        })?;
        // SAFETY: fd is a fresh descriptor.
        Ok(Socket(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    fn setopt(&self, level: libc::c_int, name: libc::c_int, v: libc::c_int) -> io::Result<()> {
        // SAFETY: passes a valid int of the right size.
        cvt(unsafe {
            libc::setsockopt(self.fd(), level, name, (&v as *const libc::c_int).cast(), 4)
        })
        .map(|_| ())
    }

    /// A listening socket bound to `sa` (port 0: any).
    pub fn listen(sa: &SocketAddr) -> io::Result<Socket> {
        let s = Socket::new(sa)?;
        s.setopt(libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
        let (ss, len) = sockaddr(sa);
        // SAFETY: ss/len describe a valid sockaddr.
        cvt(unsafe { libc::bind(s.fd(), (&ss as *const libc::sockaddr_storage).cast(), len) })?;
        // SAFETY: plain syscall on our socket.
        cvt(unsafe { libc::listen(s.fd(), 1024) })?;
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
                Err(e) if e.raw_os_error() == Some(libc::EADDRINUSE) => continue,
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
    pub fn set_liveness(&self, bound: std::time::Duration) -> io::Result<()> {
        let secs = bound.as_secs().clamp(1, i32::MAX as u64 / 2) as libc::c_int;
        let ms = bound.as_millis().clamp(1, i32::MAX as u128) as libc::c_int;
        self.setopt(libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1)?;
        self.setopt(libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, (secs / 2).max(1))?;
        self.setopt(libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, (secs / 6).max(1))?;
        self.setopt(libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 3)?;
        self.setopt(libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT, ms)
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
        s.setopt(libc::IPPROTO_TCP, libc::TCP_NODELAY, 1)?;
        if let Some(f) = from {
            if !f.ip().is_unspecified() || f.port() != 0 {
                let (ss, len) = sockaddr(f);
                // SAFETY: ss/len describe a valid sockaddr.
                cvt(unsafe {
                    libc::bind(s.fd(), (&ss as *const libc::sockaddr_storage).cast(), len)
                })?;
            }
        }
        let (ss, len) = sockaddr(to);
        // SAFETY: ss/len describe a valid sockaddr.
        let r =
            unsafe { libc::connect(s.fd(), (&ss as *const libc::sockaddr_storage).cast(), len) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINPROGRESS) {
                return Err(e);
            }
        }
        Ok(s)
    }

    /// `Ok(true)` once a nonblocking connect finished, `Ok(false)` while it
    /// is in progress, the connect's error otherwise.
    pub fn connect_result(&self) -> io::Result<bool> {
        let mut p = libc::pollfd {
            fd: self.fd(),
            events: libc::POLLOUT,
            revents: 0,
        };
        // SAFETY: one valid pollfd, no waiting.
        let n = cvt(unsafe { libc::poll(&mut p, 1, 0) })?;
        if n == 0 {
            return Ok(false);
        }
        let mut err: libc::c_int = 0;
        let mut len: libc::socklen_t = 4;
        // SAFETY: err/len are valid for SO_ERROR.
        cvt(unsafe {
            libc::getsockopt(
                self.fd(),
                libc::SOL_SOCKET,
                libc::SO_ERROR,
                (&mut err as *mut libc::c_int).cast(),
                &mut len,
            )
        })?;
        if err != 0 {
            return Err(io::Error::from_raw_os_error(err));
        }
        Ok(true)
    }

    /// Accepts one pending connection, if any.
    pub fn accept(&self) -> io::Result<Option<(Socket, SocketAddr)>> {
        // SAFETY: sockaddr_storage is plain data.
        let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        // SAFETY: ss/len describe writable storage for the peer address.
        let r = unsafe {
            libc::accept4(
                self.fd(),
                (&mut ss as *mut libc::sockaddr_storage).cast(),
                &mut len,
                libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EAGAIN) | Some(libc::EINTR) | Some(libc::ECONNABORTED) => Ok(None),
                _ => Err(e),
            };
        }
        // SAFETY: r is a fresh descriptor.
        let s = Socket(unsafe { OwnedFd::from_raw_fd(r) });
        s.setopt(libc::IPPROTO_TCP, libc::TCP_NODELAY, 1)?;
        // SAFETY: the kernel wrote `len` bytes of address into ss.
        let bytes = unsafe {
            std::slice::from_raw_parts(
                (&ss as *const libc::sockaddr_storage).cast::<u8>(),
                len as usize,
            )
        };
        let peer = crate::addr::decode(bytes)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
        Ok(Some((s, peer)))
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.name(false)
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.name(true)
    }

    fn name(&self, peer: bool) -> io::Result<SocketAddr> {
        // SAFETY: sockaddr_storage is plain data.
        let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        let p = (&mut ss as *mut libc::sockaddr_storage).cast();
        // SAFETY: ss/len describe writable storage.
        cvt(unsafe {
            if peer {
                libc::getpeername(self.fd(), p, &mut len)
            } else {
                libc::getsockname(self.fd(), p, &mut len)
            }
        })?;
        // SAFETY: the kernel wrote `len` bytes.
        let bytes = unsafe {
            std::slice::from_raw_parts(
                (&ss as *const libc::sockaddr_storage).cast::<u8>(),
                len as usize,
            )
        };
        crate::addr::decode(bytes)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))
    }

    /// Writes one buffer, without blocking or raising SIGPIPE.
    pub fn send(&self, buf: &[u8]) -> io::Result<usize> {
        // SAFETY: buf is a valid readable slice.
        cvt_size(unsafe {
            libc::send(
                self.fd(),
                buf.as_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        })
    }

    /// Reads into one buffer. `Ok(0)` is end of stream.
    pub fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: buf is a valid writable slice.
        cvt_size(unsafe {
            libc::recv(
                self.fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
            )
        })
    }

    /// Reads into a receive's ranges.
    ///
    /// # Safety
    /// The ranges must be valid for writes (the posted receive's promise).
    pub unsafe fn readv(&self, iov: &[IoVec]) -> io::Result<usize> {
        // SAFETY: IoVec has libc::iovec's layout; the caller vouches for the memory.
        cvt_size(unsafe {
            libc::readv(
                self.fd(),
                iov.as_ptr().cast(),
                iov.len().min(1024) as libc::c_int,
            )
        })
    }

    /// Writes the ranges in order (up to 64 at a time).
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
        let mut v = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; 64];
        let mut n = 0;
        for s in slices.take(64) {
            v[n] = match s {
                TxSlice::Bytes(b) => libc::iovec {
                    iov_base: b.as_ptr() as *mut _,
                    iov_len: b.len(),
                },
                TxSlice::Iov(i) => libc::iovec {
                    iov_base: i.base as *mut _,
                    iov_len: i.len,
                },
            };
            n += 1;
        }
        let flags = libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL;
        // One range, or a few small ones gathered on the stack, go out
        // with `send`: the kernel then skips copying in a msghdr and an
        // iovec array, which costs a small message more than the copy.
        let total: usize = v[..n].iter().map(|i| i.iov_len).sum();
        if n == 1 || total <= SMALL_SEND {
            let mut stage = [0u8; SMALL_SEND];
            let (ptr, len) = if n == 1 {
                (v[0].iov_base as *const u8, v[0].iov_len)
            } else {
                let mut at = 0;
                for i in &v[..n] {
                    // SAFETY: each iovec is readable for iov_len bytes (see
                    // above) and `stage` holds `total` bytes.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            i.iov_base as *const u8,
                            stage.as_mut_ptr().add(at),
                            i.iov_len,
                        )
                    };
                    at += i.iov_len;
                }
                (stage.as_ptr(), total)
            };
            // SAFETY: `ptr` is readable for `len` bytes: one caller range or `stage`.
            return cvt_size(unsafe { libc::send(self.fd(), ptr.cast(), len, flags) });
        }
        let msg = libc::msghdr {
            msg_name: std::ptr::null_mut(),
            msg_namelen: 0,
            msg_iov: v.as_mut_ptr(),
            msg_iovlen: n,
            msg_control: std::ptr::null_mut(),
            msg_controllen: 0,
            msg_flags: 0,
        };
        // SAFETY: the iovecs describe core-owned bytes and caller-vouched ranges.
        cvt_size(unsafe { libc::sendmsg(self.fd(), &msg, flags) })
    }

    /// The descriptor.
    pub fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// Gathered writes up to this size are copied into one buffer and sent
/// with `send` rather than `sendmsg`.
pub const SMALL_SEND: usize = 256;

/// An epoll set: readiness of an endpoint's sockets, also its wait fd.
#[derive(Debug)]
pub struct Poller(OwnedFd);

impl Poller {
    /// A new epoll set.
    pub fn new() -> io::Result<Poller> {
        // SAFETY: plain syscall; the result is checked and owned.
        let fd = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: fd is fresh.
        Ok(Poller(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Watches `fd` for readability (and writability with `out`), tagged `key`.
    pub fn add(&self, fd: RawFd, key: u64, out: bool) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLRDHUP) as u32
                | if out { libc::EPOLLOUT as u32 } else { 0 },
            u64: key,
        };
        // SAFETY: valid epoll fd, socket fd and event.
        cvt(unsafe { libc::epoll_ctl(self.0.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) })
            .map(|_| ())
    }

    /// Changes the interest of `fd`.
    pub fn modify(&self, fd: RawFd, key: u64, out: bool) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLRDHUP) as u32
                | if out { libc::EPOLLOUT as u32 } else { 0 },
            u64: key,
        };
        // SAFETY: valid epoll fd, socket fd and event.
        cvt(unsafe { libc::epoll_ctl(self.0.as_raw_fd(), libc::EPOLL_CTL_MOD, fd, &mut ev) })
            .map(|_| ())
    }

    /// Stops watching `fd`.
    pub fn remove(&self, fd: RawFd) {
        // SAFETY: removing an fd that may not be there only fails.
        unsafe {
            libc::epoll_ctl(
                self.0.as_raw_fd(),
                libc::EPOLL_CTL_DEL,
                fd,
                std::ptr::null_mut(),
            )
        };
    }

    /// Keys of ready descriptors, without waiting.
    pub fn ready(&self, out: &mut Vec<u64>) -> io::Result<()> {
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 64];
        // SAFETY: evs is a valid buffer of 64 events.
        let n = cvt(unsafe { libc::epoll_wait(self.0.as_raw_fd(), evs.as_mut_ptr(), 64, 0) })?;
        out.extend(evs[..n as usize].iter().map(|e| e.u64));
        Ok(())
    }

    /// True when a watched socket is ready now (errors count as ready, so
    /// the caller drives and finds out).
    pub fn any_ready(&self) -> bool {
        let mut ev = [libc::epoll_event { events: 0, u64: 0 }; 1];
        // SAFETY: ev is a valid buffer of one event.
        unsafe { libc::epoll_wait(self.0.as_raw_fd(), ev.as_mut_ptr(), 1, 0) != 0 }
    }

    /// Waits up to `ms` milliseconds for a watched socket to become ready.
    pub fn wait(&self, ms: i32) {
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 1];
        // SAFETY: evs is a valid buffer of one event; the result only says whether to poll.
        unsafe { libc::epoll_wait(self.0.as_raw_fd(), evs.as_mut_ptr(), 1, ms) };
    }

    /// The epoll descriptor (readable when a watched socket is ready).
    pub fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}
