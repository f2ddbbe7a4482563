//! The epoll set of an endpoint or domain: readiness of its sockets (and
//! timers), tagged with keys the provider picks; its descriptor is the wait
//! fd the provider reports. Through rustix, whose raw system calls skip
//! libc and its `errno`.

use rustix::event::epoll;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};

/// An epoll set: readiness of a provider's sockets, also its wait fd.
#[derive(Debug)]
pub struct Poller(OwnedFd);

/// What every watched descriptor is watched for (readability, and the
/// peer's shutdown of a stream), and writability on request.
fn interest(out: bool) -> epoll::EventFlags {
    let base = epoll::EventFlags::IN | epoll::EventFlags::RDHUP;
    if out {
        base | epoll::EventFlags::OUT
    } else {
        base
    }
}

/// An empty event (a buffer slot for `epoll_wait`).
const NO_EVENT: epoll::Event = epoll::Event {
    flags: epoll::EventFlags::empty(),
    data: epoll::EventData::new_u64(0),
};

/// A timeout of `ms` milliseconds (0: return at once).
fn millis(ms: i32) -> rustix::event::Timespec {
    let ms = i64::from(ms.max(0));
    rustix::event::Timespec {
        tv_sec: ms / 1000,
        tv_nsec: (ms % 1000) * 1_000_000,
    }
}

impl Poller {
    /// A new epoll set.
    pub fn new() -> io::Result<Poller> {
        Ok(Poller(epoll::create(epoll::CreateFlags::CLOEXEC)?))
    }

    /// Watches `fd` for readability (and writability with `out`), tagged `key`.
    pub fn add(&self, fd: impl AsFd, key: u64, out: bool) -> io::Result<()> {
        Ok(epoll::add(
            &self.0,
            fd,
            epoll::EventData::new_u64(key),
            interest(out),
        )?)
    }

    /// Changes the interest of `fd`.
    pub fn modify(&self, fd: impl AsFd, key: u64, out: bool) -> io::Result<()> {
        Ok(epoll::modify(
            &self.0,
            fd,
            epoll::EventData::new_u64(key),
            interest(out),
        )?)
    }

    /// Stops watching `fd` (one not watched is no error).
    pub fn remove(&self, fd: impl AsFd) {
        let _ = epoll::delete(&self.0, fd);
    }

    /// Keys of ready descriptors, without waiting.
    pub fn ready(&self, out: &mut Vec<u64>) -> io::Result<()> {
        let mut evs = [NO_EVENT; 64];
        let n = epoll::wait(&self.0, &mut evs[..], Some(&millis(0)))?;
        out.extend(evs[..n].iter().map(|e| e.data.u64()));
        Ok(())
    }

    /// True when a watched descriptor is ready now (errors count as ready,
    /// so the caller drives and finds out).
    pub fn any_ready(&self) -> bool {
        let mut ev = [NO_EVENT; 1];
        epoll::wait(&self.0, &mut ev[..], Some(&millis(0))) != Ok(0)
    }

    /// Waits up to `ms` milliseconds for a watched descriptor to become ready.
    pub fn wait(&self, ms: i32) {
        let mut ev = [NO_EVENT; 1];
        // The result only says whether to poll: the caller polls anyway.
        let _ = epoll::wait(&self.0, &mut ev[..], Some(&millis(ms)));
    }

    /// The epoll descriptor (readable when a watched descriptor is ready).
    pub fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    #[test]
    fn keys_of_ready_sockets_come_back_and_interest_changes() {
        let a = UdpSocket::bind("127.0.0.1:0").expect("bind a");
        let b = UdpSocket::bind("127.0.0.1:0").expect("bind b");
        b.set_nonblocking(true).expect("nonblocking");
        let p = Poller::new().expect("epoll");
        p.add(&b, 7, false).expect("add");
        assert!(!p.any_ready());
        let mut keys = Vec::new();
        p.ready(&mut keys).expect("epoll_wait");
        assert!(keys.is_empty());
        a.send_to(b"x", b.local_addr().expect("b's address"))
            .expect("send_to");
        p.wait(10_000);
        p.ready(&mut keys).expect("epoll_wait");
        assert_eq!(keys, [7]);
        // A socket is always writable: watched for it, it is ready under
        // its new key even once drained.
        b.recv(&mut [0u8; 4]).expect("the datagram");
        assert!(!p.any_ready());
        p.modify(&b, 9, true).expect("modify");
        keys.clear();
        p.ready(&mut keys).expect("epoll_wait");
        assert_eq!(keys, [9]);
        p.remove(&b);
        assert!(!p.any_ready());
        // Removing a descriptor twice is no error.
        p.remove(&b);
        assert!(p.fd() >= 0);
    }
}
