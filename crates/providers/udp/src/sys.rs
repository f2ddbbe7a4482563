//! The udp provider's system calls: nonblocking datagram sockets, gathered
//! sends to an address and receives with the source address, multicast
//! membership, the interface MTU, a timer fd, and the watching of a
//! domain's descriptors in its epoll set (`ofi_inet::poller`).
//!
//! Socket set-up (creation, options, bind, multicast, addresses) goes
//! through socket2 and rustix's socket options; the data path (`sendto`,
//! `sendmsg`, `recvfrom`) and the timer fd through rustix, whose raw
//! system calls skip libc and its `errno`. Three calls stay on libc, none
//! on the data path, because neither crate has them: setting IP_RECVERR,
//! reading the error queue (its `sock_extended_err` control messages:
//! rustix's ancillary buffer skips message types it does not know), and
//! SIOCGIFMTU. The other `unsafe` turns the raw layer's send ranges (iov
//! addresses the caller vouches for: they stay valid until their operation
//! completes) into slices, and borrows the raw fds a domain watches.
#![allow(unsafe_code)]

use ofi_inet::poller::Poller;
use rustix::io::Errno;
use rustix::net::sockopt;
use rustix::net::{RecvFlags, SendAncillaryBuffer, SendFlags, SocketAddrAny};
use rustix::time::{Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags, Timespec};
use socket2::{Domain, Type};
use std::io::{self, IoSlice};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::time::Duration;

/// Flags of every send: never block, never raise SIGPIPE.
const SEND: SendFlags = SendFlags::DONTWAIT.union(SendFlags::NOSIGNAL);

/// Flags of every receive: never block, and report a datagram's whole
/// length (so truncation shows).
const RECV: RecvFlags = RecvFlags::DONTWAIT.union(RecvFlags::TRUNC);

/// A socket address in the kernel's form, made once per destination and
/// handed to every send as it is.
#[derive(Clone)]
pub struct RawAddr(SocketAddrAny);

impl std::fmt::Debug for RawAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RawAddr({} bytes)", self.0.addr_len())
    }
}

impl RawAddr {
    /// The kernel form of `sa`.
    pub fn new(sa: &SocketAddr) -> RawAddr {
        RawAddr(SocketAddrAny::from(*sa))
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

    /// The range as a slice (none for an empty range, whatever its
    /// address).
    ///
    /// # Safety
    /// `base..base + len` must be readable and unchanged for `'a`.
    unsafe fn slice<'a>(&self) -> &'a [u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: the caller's promise.
        unsafe { std::slice::from_raw_parts(self.base as *const u8, self.len) }
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

/// An address the kernel filled in, as a std address.
fn std_addr(a: Option<SocketAddrAny>) -> io::Result<SocketAddr> {
    a.and_then(|a| SocketAddr::try_from(a).ok()).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "udp: the kernel gave an address that is not IPv4 or IPv6",
        )
    })
}

/// A nonblocking UDP socket.
#[derive(Debug)]
pub struct UdpSocket(socket2::Socket);

impl AsFd for UdpSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

impl UdpSocket {
    /// A socket bound to `sa` (port 0: any). `reuse` lets other sockets
    /// bind the same address (multicast groups).
    pub fn bind(sa: &SocketAddr, reuse: bool) -> io::Result<UdpSocket> {
        let ty = Type::DGRAM.nonblocking().cloexec();
        let s = socket2::Socket::new(Domain::for_address(*sa), ty, None)?;
        if reuse {
            s.set_reuse_address(true)?;
        }
        if sa.is_ipv6() {
            s.set_only_v6(true)?;
        }
        s.bind(&(*sa).into())?;
        Ok(UdpSocket(s))
    }

    /// Asks for `bytes` of receive and send buffer (past the system's
    /// limit when the process may: SO_RCVBUFFORCE); returns the receive
    /// buffer the kernel granted.
    pub fn set_buffers(&self, bytes: usize) -> usize {
        let v = bytes.min(i32::MAX as usize / 2);
        if sockopt::set_socket_recv_buffer_size_force(self, v).is_err() {
            let _ = self.0.set_recv_buffer_size(v);
        }
        if sockopt::set_socket_send_buffer_size_force(self, v).is_err() {
            let _ = self.0.set_send_buffer_size(v);
        }
        self.0.recv_buffer_size().unwrap_or(0)
    }

    /// Makes sends refuse datagrams above the path MTU instead of
    /// fragmenting them.
    pub fn no_fragments(&self, v6: bool) -> io::Result<()> {
        if v6 {
            sockopt::set_ipv6_mtu_discover(self, sockopt::Ipv6PathMtuDiscovery::DO)?;
        } else {
            sockopt::set_ip_mtu_discover(self, sockopt::Ipv4PathMtuDiscovery::DO)?;
        }
        Ok(())
    }

    /// Queues the ICMP errors of this socket's sends (IP_RECVERR /
    /// IPV6_RECVERR), with the destination each was for, for
    /// [`recv_err`](Self::recv_err).
    pub fn report_errors(&self, v6: bool) -> io::Result<()> {
        let (level, name) = if v6 {
            (libc::IPPROTO_IPV6, libc::IPV6_RECVERR)
        } else {
            (libc::IPPROTO_IP, libc::IP_RECVERR)
        };
        let on: libc::c_int = 1;
        // Neither socket2 nor rustix sets IP_RECVERR: libc's setsockopt.
        // SAFETY: `on` is a readable int, the length given; the descriptor
        // is owned by `self` and open.
        let r = unsafe {
            libc::setsockopt(
                self.fd(),
                level,
                name,
                (&on as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Takes the next error of the error queue: the destination of the
    /// datagram it reports and whether it says that nothing listens there
    /// (an ICMP or ICMPv6 port unreachable: `ECONNREFUSED`). `None` when
    /// the queue is empty.
    ///
    /// libc's `recvmsg`, not rustix's: rustix hands out only the control
    /// messages it knows, and IP_RECVERR's `sock_extended_err` is not one.
    /// Called only after a receive reported `ECONNREFUSED`, never per
    /// datagram.
    pub fn recv_err(&self) -> io::Result<Option<(SocketAddr, bool)>> {
        let mut name = NameBuf([0; NAME_LEN]);
        let mut quoted = [0u8; 64];
        let mut iov = libc::iovec {
            iov_base: quoted.as_mut_ptr().cast(),
            iov_len: quoted.len(),
        };
        // Room for one sock_extended_err and its offender address, aligned.
        let mut ctrl = [0u64; 32];
        let mut msg = libc::msghdr {
            msg_name: name.0.as_mut_ptr().cast(),
            msg_namelen: NAME_LEN as libc::socklen_t,
            msg_iov: &mut iov,
            msg_iovlen: 1,
            msg_control: ctrl.as_mut_ptr().cast(),
            msg_controllen: std::mem::size_of_val(&ctrl),
            msg_flags: 0,
        };
        // SAFETY: name, iov and control buffers are writable for the
        // lengths given; the descriptor is owned by `self` and open.
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
        // CMSG macros walk them within that length, and a payload is read
        // (unaligned) only when its header says it holds a whole
        // sock_extended_err.
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
        let len = (msg.msg_namelen as usize).min(NAME_LEN);
        let to = crate::addr::decode(&name.0[..len])
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
        Ok(Some((to, refused)))
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        let a = self.0.local_addr()?;
        a.as_socket().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("udp: address family {} is not IPv4 or IPv6", a.family()),
            )
        })
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
            for p in parts {
                // SAFETY: the part is readable for its length (the caller's
                // promise) for this call.
                let b = unsafe { p.slice() };
                flat[at..at + b.len()].copy_from_slice(b);
                at += b.len();
            }
            return Ok(rustix::net::sendto(self, &flat[..at], SEND, &to.0)?);
        }
        let mut v = [IoSlice::new(&[]); MAX_PARTS];
        let n = parts.len().min(MAX_PARTS);
        for (o, p) in v.iter_mut().zip(&parts[..n]) {
            // SAFETY: the part is readable for its length (the caller's
            // promise) for this call.
            *o = IoSlice::new(unsafe { p.slice() });
        }
        let mut control = SendAncillaryBuffer::default();
        Ok(rustix::net::sendmsg_addr(
            self,
            &to.0,
            &v[..n],
            &mut control,
            SEND,
        )?)
    }

    /// Receives one datagram into `buf`; `None` when none is waiting.
    /// `ECONNREFUSED` reports an ICMP error for an earlier send, not a
    /// failure of this call (with `report_errors`, `recv_err` says whose):
    /// the caller may call again.
    pub fn recv_from(&self, buf: &mut [u8]) -> io::Result<Option<Received>> {
        // recvfrom, not recvmsg: no msghdr and iovec to take from user
        // memory at every busy-poll call. MSG_TRUNC makes it return the
        // datagram's whole length, so truncation still shows.
        let (len, whole, from) = match rustix::net::recvfrom(self, &mut *buf, RECV) {
            Ok(r) => r,
            // A busy-polling caller gets EAGAIN at almost every call.
            Err(Errno::AGAIN | Errno::INTR) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        Ok(Some(Received {
            len,
            truncated: whole > len,
            from: std_addr(from)?,
        }))
    }

    /// Joins multicast group `group` on the interface with address `iface`
    /// (IPv4) or index `ifindex` (IPv6).
    pub fn join(&self, group: IpAddr, iface: IpAddr, ifindex: u32) -> io::Result<()> {
        match group {
            IpAddr::V4(g) => self.0.join_multicast_v4(&g, &v4_iface(iface)),
            IpAddr::V6(g) => self.0.join_multicast_v6(&g, ifindex),
        }
    }

    /// Leaves a group joined with [`join`](Self::join).
    pub fn leave(&self, group: IpAddr, iface: IpAddr, ifindex: u32) -> io::Result<()> {
        match group {
            IpAddr::V4(g) => self.0.leave_multicast_v4(&g, &v4_iface(iface)),
            IpAddr::V6(g) => self.0.leave_multicast_v6(&g, ifindex),
        }
    }

    /// Sends multicast datagrams out of the interface with address `iface`
    /// (IPv4) or index `ifindex` (IPv6), looping them back to local members.
    pub fn multicast_from(&self, iface: IpAddr, ifindex: u32) -> io::Result<()> {
        match iface {
            IpAddr::V4(i) => {
                self.0.set_multicast_if_v4(&i)?;
                self.0.set_multicast_loop_v4(true)
            }
            IpAddr::V6(_) => {
                self.0.set_multicast_if_v6(ifindex)?;
                self.0.set_multicast_loop_v6(true)
            }
        }
    }

    /// The descriptor.
    pub fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// The IPv4 interface address of a membership (any, for an IPv6 one).
fn v4_iface(iface: IpAddr) -> Ipv4Addr {
    match iface {
        IpAddr::V4(i) => i,
        IpAddr::V6(_) => Ipv4Addr::UNSPECIFIED,
    }
}

/// Most parts one datagram is gathered from.
pub const MAX_PARTS: usize = 16;

/// Datagrams up to this size made of several parts are copied into one
/// buffer and sent with `sendto`.
const SMALL_SEND: usize = 256;

/// The size of `sockaddr_storage`: room for any socket address.
const NAME_LEN: usize = std::mem::size_of::<libc::sockaddr_storage>();

/// Room for a socket address the kernel writes, with `sockaddr_storage`'s
/// alignment, readable as bytes.
#[repr(C, align(8))]
struct NameBuf([u8; NAME_LEN]);

const _: () =
    assert!(std::mem::align_of::<NameBuf>() >= std::mem::align_of::<libc::sockaddr_storage>());

/// The MTU of interface `name`.
///
/// libc's `ioctl(SIOCGIFMTU)`: neither socket2 nor rustix asks for an
/// interface's MTU (rustix's `ioctl` module would need its own `unsafe`).
/// Called when offers are built and endpoints opened, never per datagram.
pub fn if_mtu(name: &str) -> io::Result<usize> {
    let n = name.as_bytes();
    if n.len() >= libc::IFNAMSIZ {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "interface name too long",
        ));
    }
    // SAFETY: ifreq is plain data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(n) {
        *d = *s as libc::c_char;
    }
    let s = socket2::Socket::new(Domain::IPV4, Type::DGRAM.cloexec(), None)?;
    // SAFETY: `req` is a valid ifreq naming the interface (NUL-terminated:
    // the name is shorter than IFNAMSIZ); SIOCGIFMTU writes only its mtu
    // arm, which is read after a success. The descriptor is open.
    let mtu = unsafe {
        if libc::ioctl(s.as_raw_fd(), libc::SIOCGIFMTU, &mut req) < 0 {
            return Err(io::Error::last_os_error());
        }
        req.ifr_ifru.ifru_mtu
    };
    Ok(mtu.max(0) as usize)
}

/// The index of interface `name` (0 when unknown).
pub fn if_index(name: &str) -> u32 {
    socket2::Socket::new(Domain::IPV4, Type::DGRAM.cloexec(), None)
        .and_then(|s| Ok(rustix::net::netdevice::name_to_index(&s, name)?))
        .unwrap_or(0)
}

/// The largest UDP payload that leaves interface `mtu` unfragmented.
pub fn udp_payload_max(mtu: usize, v6: bool) -> usize {
    let ip = if v6 { 40 } else { 20 };
    mtu.saturating_sub(ip + 8).min(ofi_wire::udp::MAX_DATAGRAM)
}

/// Watches socket `fd` of a domain in the domain's `poller` for
/// readability, tagged `key`. A domain watches only its endpoints'
/// sockets, and unwatches each before it closes.
pub fn watch(poller: &Poller, fd: RawFd, key: u64) -> io::Result<()> {
    // SAFETY: `fd` is a socket of the domain's endpoints, open: an
    // endpoint unwatches its socket before closing it. The borrow lasts for
    // this call only.
    let fd = unsafe { BorrowedFd::borrow_raw(fd) };
    poller.add(fd, key, false)
}

/// Stops watching socket `fd` of a domain (one not watched is no error);
/// called before the socket closes.
pub fn unwatch(poller: &Poller, fd: RawFd) {
    // SAFETY: `fd` is a socket of the domain's endpoints, still open: the
    // endpoint unwatches it before closing it. The borrow lasts for this
    // call only.
    let fd = unsafe { BorrowedFd::borrow_raw(fd) };
    poller.remove(fd)
}

/// A timer fd: readable once its deadline passes.
#[derive(Debug)]
pub struct Timer(OwnedFd);

impl AsFd for Timer {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

impl Timer {
    /// A disarmed timer.
    pub fn new() -> io::Result<Timer> {
        let flags = TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC;
        Ok(Timer(rustix::time::timerfd_create(
            TimerfdClockId::Monotonic,
            flags,
        )?))
    }

    /// Fires `after` from now (`None`: disarms).
    pub fn set(&self, after: Option<Duration>) {
        let d = after.map(|d| d.max(Duration::from_nanos(1)));
        let zero = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        let ts = Itimerspec {
            it_interval: zero,
            it_value: d.map_or(zero, |d| Timespec {
                tv_sec: d.as_secs().min(i32::MAX as u64) as i64,
                tv_nsec: i64::from(d.subsec_nanos()),
            }),
        };
        // Fails only for a bad descriptor or value, neither of which this
        // can pass.
        let _ = rustix::time::timerfd_settime(&self.0, TimerfdTimerFlags::empty(), &ts);
    }

    /// Reads expirations away (the fd stops being readable).
    pub fn drain(&self) {
        let mut b = [0u8; 8];
        // Nonblocking: nothing to read (EAGAIN) leaves it as wanted.
        let _ = rustix::io::read(&self.0, &mut b);
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

    #[test]
    fn a_send_to_a_closed_port_is_refused_and_the_error_queue_names_it() {
        let (a, b, to) = pair();
        drop(b);
        a.report_errors(false).expect("IP_RECVERR");
        let payload = [1u8; 8];
        // SAFETY: the part is a live slice.
        unsafe { a.send_to(&RawAddr::new(&to), &[Part::bytes(&payload)]) }.expect("send_to");
        let mut buf = [0u8; 16];
        let mut refused = false;
        for _ in 0..1_000_000 {
            match a.recv_from(&mut buf) {
                Ok(None) => std::thread::yield_now(),
                Ok(Some(r)) => panic!("a datagram from {} on a socket nobody sends to", r.from),
                Err(e) => {
                    assert_eq!(Errno::from_io_error(&e), Some(Errno::CONNREFUSED));
                    refused = true;
                    break;
                }
            }
        }
        assert!(refused, "no ICMP port unreachable came back over loopback");
        assert_eq!(a.recv_err().expect("recv_err"), Some((to, true)));
        assert_eq!(a.recv_err().expect("recv_err"), None);
    }

    #[test]
    fn the_poller_sees_a_waiting_datagram_and_a_fired_timer() {
        let (a, b, to) = pair();
        let p = Poller::new().expect("epoll");
        let t = Timer::new().expect("timerfd");
        watch(&p, b.fd(), 1).expect("add socket");
        p.add(&t, 2, false).expect("add timer");
        assert!(!p.any_ready());
        // SAFETY: the part is a live slice.
        unsafe { a.send_to(&RawAddr::new(&to), &[Part::bytes(b"x")]) }.expect("send_to");
        p.wait(10_000);
        assert!(p.any_ready());
        recv(&b, &mut [0u8; 4]);
        assert!(!p.any_ready());
        t.set(Some(Duration::from_millis(1)));
        p.wait(10_000);
        assert!(p.any_ready());
        t.drain();
        assert!(!p.any_ready());
        t.set(Some(Duration::from_millis(1)));
        t.set(None);
        unwatch(&p, b.fd());
        // SAFETY: the part is a live slice.
        unsafe { a.send_to(&RawAddr::new(&to), &[Part::bytes(b"y")]) }.expect("send_to");
        assert!(!p.any_ready(), "a disarmed timer and an unwatched socket");
        // Removing a descriptor twice is no error, and the datagram was there.
        unwatch(&p, b.fd());
        recv(&b, &mut [0u8; 4]);
    }

    #[test]
    fn loopback_has_an_index_and_an_mtu_and_unknown_names_have_neither() {
        assert!(if_index("lo") > 0);
        assert!(if_mtu("lo").expect("lo's MTU") >= 1280);
        assert_eq!(if_index("no-such-if0"), 0);
        assert!(if_mtu("no-such-if0").is_err());
        assert!(if_mtu("a-name-longer-than-ifnamsiz").is_err());
    }

    #[test]
    fn ipv6_sockets_send_and_receive_over_loopback() {
        let any: SocketAddr = "[::1]:0".parse().expect("literal address");
        // A host without IPv6 on loopback has nothing to test here.
        let Ok(a) = UdpSocket::bind(&any, false) else {
            return;
        };
        let b = UdpSocket::bind(&any, false).expect("bind b");
        b.no_fragments(true).expect("IPV6_MTU_DISCOVER");
        b.report_errors(true).expect("IPV6_RECVERR");
        let to = b.local_addr().expect("b's address");
        let parts = [Part::bytes(b"v6 "), Part::bytes(b"datagram")];
        // SAFETY: the parts are live slices.
        unsafe { a.send_to(&RawAddr::new(&to), &parts) }.expect("send_to");
        let mut buf = [0u8; 32];
        let r = recv(&b, &mut buf);
        assert_eq!(&buf[..r.len], b"v6 datagram");
        assert_eq!(r.from, a.local_addr().expect("a's address"));
    }
}
