//! The udp provider's system calls: nonblocking datagram sockets, gathered
//! sends to an address and receives with the source address, multicast
//! membership, the interface MTU, an epoll set and a timer fd. The raw
//! layer's memory contract (iov ranges stay valid until their operation
//! completes) is what the unsafe blocks that touch user memory rely on.
#![allow(unsafe_code)]

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

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

/// A socket address in the kernel's form, ready for `sendmsg`.
#[derive(Clone, Copy)]
pub struct RawAddr {
    ss: libc::sockaddr_storage,
    len: libc::socklen_t,
}

impl std::fmt::Debug for RawAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RawAddr({} bytes)", self.len)
    }
}

impl RawAddr {
    /// The kernel form of `sa`.
    pub fn new(sa: &SocketAddr) -> RawAddr {
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
        RawAddr {
            ss,
            len: b.len() as libc::socklen_t,
        }
    }
    fn ptr(&self) -> *const libc::sockaddr {
        (&self.ss as *const libc::sockaddr_storage).cast()
    }
}

/// One range of a datagram to send: core bytes or user memory by address.
#[derive(Clone, Copy, Debug)]
pub struct Part {
    /// First byte.
    pub base: usize,
    /// Length.
    pub len: usize,
}

impl Part {
    /// A part over bytes the caller holds.
    pub fn bytes(b: &[u8]) -> Part {
        Part {
            base: b.as_ptr() as usize,
            len: b.len(),
        }
    }
}

/// What a receive got.
#[derive(Clone, Copy, Debug)]
pub struct Received {
    /// Bytes written into the buffer.
    pub len: usize,
    /// The datagram was longer than the buffer (the rest is lost).
    pub truncated: bool,
    /// Its source.
    pub from: SocketAddr,
}

/// A nonblocking UDP socket.
#[derive(Debug)]
pub struct UdpSocket(OwnedFd);

impl UdpSocket {
    /// A socket bound to `sa` (port 0: any). `reuse` lets other sockets
    /// bind the same address (multicast groups).
    pub fn bind(sa: &SocketAddr, reuse: bool) -> io::Result<UdpSocket> {
        let fam = if sa.is_ipv4() {
            libc::AF_INET
        } else {
            libc::AF_INET6
        };
        // SAFETY: plain syscall; the result is checked and owned.
        let fd = cvt(unsafe {
            libc::socket(
                fam,
                libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        })?;
        // SAFETY: fd is a fresh descriptor.
        let s = UdpSocket(unsafe { OwnedFd::from_raw_fd(fd) });
        if reuse {
            s.setopt(libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
        }
        if sa.is_ipv6() {
            s.setopt(libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, 1)?;
        }
        let a = RawAddr::new(sa);
        // SAFETY: a describes a valid sockaddr.
        cvt(unsafe { libc::bind(s.fd(), a.ptr(), a.len) })?;
        Ok(s)
    }

    fn setopt(&self, level: libc::c_int, name: libc::c_int, v: libc::c_int) -> io::Result<()> {
        self.setopt_bytes(level, name, &v.to_ne_bytes())
    }

    fn setopt_bytes(&self, level: libc::c_int, name: libc::c_int, v: &[u8]) -> io::Result<()> {
        // SAFETY: `v` is readable for its length, which is what the kernel reads.
        cvt(unsafe {
            libc::setsockopt(
                self.fd(),
                level,
                name,
                v.as_ptr().cast(),
                v.len() as libc::socklen_t,
            )
        })
        .map(|_| ())
    }

    fn getopt(&self, level: libc::c_int, name: libc::c_int) -> io::Result<libc::c_int> {
        let mut v: libc::c_int = 0;
        let mut len: libc::socklen_t = 4;
        // SAFETY: v/len are valid for an int option.
        cvt(unsafe {
            libc::getsockopt(
                self.fd(),
                level,
                name,
                (&mut v as *mut libc::c_int).cast(),
                &mut len,
            )
        })?;
        Ok(v)
    }

    /// Asks for `bytes` of receive and send buffer (past the system's
    /// limit when the process may: SO_RCVBUFFORCE); returns the receive
    /// buffer the kernel granted.
    pub fn set_buffers(&self, bytes: usize) -> usize {
        let v = bytes.min(i32::MAX as usize / 2) as libc::c_int;
        for (force, plain) in [
            (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
            (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
        ] {
            if self.setopt(libc::SOL_SOCKET, force, v).is_err() {
                let _ = self.setopt(libc::SOL_SOCKET, plain, v);
            }
        }
        self.getopt(libc::SOL_SOCKET, libc::SO_RCVBUF)
            .map_or(0, |n| n.max(0) as usize)
    }

    /// Makes sends refuse datagrams above the path MTU instead of
    /// fragmenting them.
    pub fn no_fragments(&self, v6: bool) -> io::Result<()> {
        if v6 {
            self.setopt(
                libc::IPPROTO_IPV6,
                libc::IPV6_MTU_DISCOVER,
                libc::IP_PMTUDISC_DO,
            )
        } else {
            self.setopt(
                libc::IPPROTO_IP,
                libc::IP_MTU_DISCOVER,
                libc::IP_PMTUDISC_DO,
            )
        }
    }

    /// Queues the ICMP errors of this socket's sends (IP_RECVERR /
    /// IPV6_RECVERR), with the destination each was for, for
    /// [`recv_err`](Self::recv_err).
    pub fn report_errors(&self, v6: bool) -> io::Result<()> {
        if v6 {
            self.setopt(libc::IPPROTO_IPV6, libc::IPV6_RECVERR, 1)
        } else {
            self.setopt(libc::IPPROTO_IP, libc::IP_RECVERR, 1)
        }
    }

    /// Takes the next error of the error queue: the destination of the
    /// datagram it reports and whether it says that nothing listens there
    /// (an ICMP or ICMPv6 port unreachable: `ECONNREFUSED`). `None` when
    /// the queue is empty.
    pub fn recv_err(&self) -> io::Result<Option<(SocketAddr, bool)>> {
        // SAFETY: sockaddr_storage is plain data.
        let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut quoted = [0u8; 64];
        let mut iov = libc::iovec {
            iov_base: quoted.as_mut_ptr().cast(),
            iov_len: quoted.len(),
        };
        // Room for one sock_extended_err and its offender address, aligned.
        let mut ctrl = [0u64; 32];
        let mut msg = libc::msghdr {
            msg_name: (&mut ss as *mut libc::sockaddr_storage).cast(),
            msg_namelen: std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t,
            msg_iov: &mut iov,
            msg_iovlen: 1,
            msg_control: ctrl.as_mut_ptr().cast(),
            msg_controllen: std::mem::size_of_val(&ctrl),
            msg_flags: 0,
        };
        // SAFETY: name, iov and control buffers are writable for the
        // lengths given.
        let r =
            unsafe { libc::recvmsg(self.fd(), &mut msg, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) };
        if r < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
                _ => Err(e),
            };
        }
        let mut refused = false;
        // SAFETY: the kernel filled `msg_controllen` bytes of `ctrl`; the
        // CMSG macros walk them within that length.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                let h = &*c;
                let ours = (h.cmsg_level == libc::IPPROTO_IP && h.cmsg_type == libc::IP_RECVERR)
                    || (h.cmsg_level == libc::IPPROTO_IPV6 && h.cmsg_type == libc::IPV6_RECVERR);
                if ours
                    && h.cmsg_len as usize
                        >= libc::CMSG_LEN(std::mem::size_of::<libc::sock_extended_err>() as u32)
                            as usize
                {
                    let ee = std::ptr::read_unaligned(
                        libc::CMSG_DATA(c).cast::<libc::sock_extended_err>(),
                    );
                    let icmp = ee.ee_origin == libc::SO_EE_ORIGIN_ICMP
                        || ee.ee_origin == libc::SO_EE_ORIGIN_ICMP6;
                    refused |= icmp && ee.ee_errno == libc::ECONNREFUSED as u32;
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        Ok(Some((decode_ss(&ss, msg.msg_namelen)?, refused)))
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        // SAFETY: sockaddr_storage is plain data.
        let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        // SAFETY: ss/len describe writable storage.
        cvt(unsafe {
            libc::getsockname(
                self.fd(),
                (&mut ss as *mut libc::sockaddr_storage).cast(),
                &mut len,
            )
        })?;
        decode_ss(&ss, len)
    }

    /// Sends one datagram made of `parts` to `to`.
    ///
    /// # Safety
    /// Every part is readable for its length.
    pub unsafe fn send_to(&self, to: &RawAddr, parts: &[Part]) -> io::Result<usize> {
        // A small datagram is gathered here and goes by sendto: the kernel
        // then takes no iovec array from user memory (a measurable share of
        // a small datagram's send on loopback).
        let total: usize = parts.iter().map(|p| p.len).sum();
        if parts.len() > 1 && total <= SMALL_SEND {
            let mut flat = [0u8; SMALL_SEND];
            let mut at = 0;
            for p in parts.iter().filter(|p| p.len > 0) {
                // SAFETY: the part is readable for its length (the caller's
                // promise); `flat` has room for the total.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        p.base as *const u8,
                        flat.as_mut_ptr().add(at),
                        p.len,
                    )
                };
                at += p.len;
            }
            // SAFETY: `flat` holds `at` bytes; the name is valid.
            return cvt_size(unsafe {
                libc::sendto(
                    self.fd(),
                    flat.as_ptr().cast(),
                    at,
                    libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                    to.ptr(),
                    to.len,
                )
            });
        }
        let mut v = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; MAX_PARTS];
        let n = parts.len().min(MAX_PARTS);
        for (o, p) in v.iter_mut().zip(&parts[..n]) {
            *o = libc::iovec {
                iov_base: p.base as *mut _,
                iov_len: p.len,
            };
        }
        let msg = libc::msghdr {
            msg_name: to.ptr() as *mut _,
            msg_namelen: to.len,
            msg_iov: v.as_mut_ptr(),
            msg_iovlen: n,
            msg_control: std::ptr::null_mut(),
            msg_controllen: 0,
            msg_flags: 0,
        };
        // SAFETY: the iovecs are readable (the caller's promise), the name valid.
        cvt_size(unsafe { libc::sendmsg(self.fd(), &msg, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) })
    }

    /// Receives one datagram into `buf`; `None` when none is waiting.
    /// `ECONNREFUSED` reports an ICMP error for an earlier send, not a
    /// failure of this call (with `report_errors`, `recv_err` says whose):
    /// the caller may call again.
    pub fn recv_from(&self, buf: &mut [u8]) -> io::Result<Option<Received>> {
        // SAFETY: sockaddr_storage is plain data.
        let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        // recvfrom, not recvmsg: no msghdr and iovec to take from user
        // memory at every busy-poll call. MSG_TRUNC makes it return the
        // datagram's whole length, so truncation still shows.
        // SAFETY: buf and ss are writable for the lengths given.
        let r = unsafe {
            libc::recvfrom(
                self.fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                (&mut ss as *mut libc::sockaddr_storage).cast(),
                &mut namelen,
            )
        };
        if r < 0 {
            // The number itself: a busy-polling caller gets EAGAIN at
            // almost every call.
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EAGAIN | libc::EINTR) => Ok(None),
                _ => Err(e),
            };
        }
        let whole = r as usize;
        Ok(Some(Received {
            len: whole.min(buf.len()),
            truncated: whole > buf.len(),
            from: decode_ss(&ss, namelen)?,
        }))
    }

    /// Joins multicast group `group` on the interface with address `iface`
    /// (IPv4) or index `ifindex` (IPv6).
    pub fn join(&self, group: IpAddr, iface: IpAddr, ifindex: u32) -> io::Result<()> {
        self.membership(group, iface, ifindex, true)
    }

    /// Leaves a group joined with [`join`](Self::join).
    pub fn leave(&self, group: IpAddr, iface: IpAddr, ifindex: u32) -> io::Result<()> {
        self.membership(group, iface, ifindex, false)
    }

    fn membership(&self, group: IpAddr, iface: IpAddr, ifindex: u32, add: bool) -> io::Result<()> {
        match group {
            IpAddr::V4(g) => {
                let i = match iface {
                    IpAddr::V4(i) => i,
                    IpAddr::V6(_) => Ipv4Addr::UNSPECIFIED,
                };
                let mut b = [0u8; 8];
                b[..4].copy_from_slice(&g.octets());
                b[4..].copy_from_slice(&i.octets());
                let name = if add {
                    libc::IP_ADD_MEMBERSHIP
                } else {
                    libc::IP_DROP_MEMBERSHIP
                };
                self.setopt_bytes(libc::IPPROTO_IP, name, &b)
            }
            IpAddr::V6(g) => {
                let mut b = [0u8; 20];
                b[..16].copy_from_slice(&g.octets());
                b[16..].copy_from_slice(&ifindex.to_ne_bytes());
                let name = if add {
                    libc::IPV6_ADD_MEMBERSHIP
                } else {
                    libc::IPV6_DROP_MEMBERSHIP
                };
                self.setopt_bytes(libc::IPPROTO_IPV6, name, &b)
            }
        }
    }

    /// Sends multicast datagrams out of the interface with address `iface`
    /// (IPv4) or index `ifindex` (IPv6), looping them back to local members.
    pub fn multicast_from(&self, iface: IpAddr, ifindex: u32) -> io::Result<()> {
        match iface {
            IpAddr::V4(i) => {
                self.setopt_bytes(libc::IPPROTO_IP, libc::IP_MULTICAST_IF, &i.octets())?;
                self.setopt(libc::IPPROTO_IP, libc::IP_MULTICAST_LOOP, 1)
            }
            IpAddr::V6(_) => {
                self.setopt(
                    libc::IPPROTO_IPV6,
                    libc::IPV6_MULTICAST_IF,
                    ifindex as libc::c_int,
                )?;
                self.setopt(libc::IPPROTO_IPV6, libc::IPV6_MULTICAST_LOOP, 1)
            }
        }
    }

    /// The descriptor.
    pub fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// Most parts one datagram is gathered from.
pub const MAX_PARTS: usize = 16;

/// Datagrams up to this size made of several parts are copied into one
/// buffer and sent with `sendto`.
const SMALL_SEND: usize = 256;

fn decode_ss(ss: &libc::sockaddr_storage, len: libc::socklen_t) -> io::Result<SocketAddr> {
    let len = (len as usize).min(std::mem::size_of::<libc::sockaddr_storage>());
    // SAFETY: ss is a live sockaddr_storage; `len` is clamped to its size.
    let bytes = unsafe {
        std::slice::from_raw_parts((ss as *const libc::sockaddr_storage).cast::<u8>(), len)
    };
    crate::addr::decode(bytes)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))
}

/// The MTU of interface `name`.
pub fn if_mtu(name: &str) -> io::Result<usize> {
    let n = name.as_bytes();
    if n.len() >= libc::IFNAMSIZ {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "interface name too long",
        ));
    }
    // SAFETY: ifreq is plain data; all-zero is valid.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(n) {
        *d = *s as libc::c_char;
    }
    // SAFETY: plain syscall; the result is checked and owned.
    let fd = cvt(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: fd is fresh.
    let s = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: req is a valid ifreq for SIOCGIFMTU, which fills ifru_mtu.
    cvt(unsafe { libc::ioctl(s.as_raw_fd(), libc::SIOCGIFMTU, &mut req) })?;
    // SAFETY: SIOCGIFMTU wrote the mtu arm of the union.
    let mtu = unsafe { req.ifr_ifru.ifru_mtu };
    Ok(mtu.max(0) as usize)
}

/// The index of interface `name` (0 when unknown).
pub fn if_index(name: &str) -> u32 {
    let Ok(c) = std::ffi::CString::new(name) else {
        return 0;
    };
    // SAFETY: c is a valid NUL-terminated string.
    unsafe { libc::if_nametoindex(c.as_ptr()) }
}

/// The largest UDP payload that leaves interface `mtu` unfragmented.
pub fn udp_payload_max(mtu: usize, v6: bool) -> usize {
    let ip = if v6 { 40 } else { 20 };
    mtu.saturating_sub(ip + 8).min(ofi_wire::udp::MAX_DATAGRAM)
}

/// An epoll set: readiness of a domain's sockets and timer, its wait fd.
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

    /// Watches `fd` for readability, tagged `key`.
    pub fn add(&self, fd: RawFd, key: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: key,
        };
        // SAFETY: valid epoll fd, fd and event.
        cvt(unsafe { libc::epoll_ctl(self.0.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) })
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

    /// True when a watched descriptor is ready now.
    pub fn any_ready(&self) -> bool {
        let mut ev = [libc::epoll_event { events: 0, u64: 0 }; 1];
        // SAFETY: ev is a valid buffer of one event.
        unsafe { libc::epoll_wait(self.0.as_raw_fd(), ev.as_mut_ptr(), 1, 0) != 0 }
    }

    /// Waits up to `ms` milliseconds for a watched descriptor.
    pub fn wait(&self, ms: i32) {
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 1];
        // SAFETY: evs is a valid buffer of one event; the result only says whether to poll.
        unsafe { libc::epoll_wait(self.0.as_raw_fd(), evs.as_mut_ptr(), 1, ms) };
    }

    /// The epoll descriptor.
    pub fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// A timer fd: readable once its deadline passes.
#[derive(Debug)]
pub struct Timer(OwnedFd);

impl Timer {
    /// A disarmed timer.
    pub fn new() -> io::Result<Timer> {
        // SAFETY: plain syscall; the result is checked and owned.
        let fd = cvt(unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        })?;
        // SAFETY: fd is fresh.
        Ok(Timer(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Fires `after` from now (`None`: disarms).
    pub fn set(&self, after: Option<Duration>) {
        let d = after.map(|d| d.max(Duration::from_nanos(1)));
        let ts = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: d.map_or(0, |d| d.as_secs().min(i32::MAX as u64) as libc::time_t),
                tv_nsec: d.map_or(0, |d| d.subsec_nanos() as libc::c_long),
            },
        };
        // SAFETY: valid timer fd and itimerspec; the old value is not asked for.
        unsafe { libc::timerfd_settime(self.0.as_raw_fd(), 0, &ts, std::ptr::null_mut()) };
    }

    /// Reads expirations away (the fd stops being readable).
    pub fn drain(&self) {
        let mut b = [0u8; 8];
        // SAFETY: b is writable for 8 bytes; nonblocking.
        unsafe { libc::read(self.0.as_raw_fd(), b.as_mut_ptr().cast(), 8) };
    }

    /// The descriptor.
    pub fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (UdpSocket, UdpSocket, SocketAddr) {
        let any: SocketAddr = "127.0.0.1:0".parse().expect("literal address");
        let a = UdpSocket::bind(&any, false).expect("bind a");
        let b = UdpSocket::bind(&any, false).expect("bind b");
        let to = b.local_addr().expect("b's address");
        (a, b, to)
    }

    /// Waits (bounded by a count, not a clock) for a datagram at `s`.
    fn recv(s: &UdpSocket, buf: &mut [u8]) -> Received {
        for _ in 0..1_000_000 {
            if let Some(r) = s.recv_from(buf).expect("recv_from") {
                return r;
            }
            std::thread::yield_now();
        }
        panic!("no datagram arrived over loopback");
    }

    #[test]
    fn parts_small_and_large_arrive_whole_and_in_order() {
        let (a, b, to) = pair();
        let dest = RawAddr::new(&to);
        let big: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
        for (head, body) in [(&b"head"[..], &b"small body"[..]), (&b"HEAD"[..], &big[..])] {
            let parts = [Part::bytes(head), Part::bytes(&[]), Part::bytes(body)];
            // SAFETY: the parts are live slices.
            let n = unsafe { a.send_to(&dest, &parts) }.expect("send_to");
            assert_eq!(n, head.len() + body.len());
            let mut buf = vec![0u8; 4096];
            let r = recv(&b, &mut buf);
            assert!(!r.truncated);
            assert_eq!(r.from, a.local_addr().expect("a's address"));
            assert_eq!(&buf[..head.len()], head);
            assert_eq!(&buf[head.len()..r.len], body);
        }
    }

    #[test]
    fn a_datagram_larger_than_the_buffer_reports_truncation() {
        let (a, b, to) = pair();
        let payload = [7u8; 100];
        // SAFETY: the part is a live slice.
        unsafe { a.send_to(&RawAddr::new(&to), &[Part::bytes(&payload)]) }.expect("send_to");
        let mut buf = [0u8; 10];
        let r = recv(&b, &mut buf);
        assert!(r.truncated);
        assert_eq!(r.len, 10);
        assert_eq!(buf, [7u8; 10]);
    }
}
