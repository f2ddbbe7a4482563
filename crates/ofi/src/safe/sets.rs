//! Watching many channels at once: a [`PollSet`] names the channels that
//! have completions to collect (`fi_poll`), a [`WaitSet`] blocks until one
//! of the channels opened into it has (`fi_wait`).

use super::Channel;
use crate::{Fabric, Info, Result};
use std::os::fd::RawFd;
use std::time::Duration;

/// A wait set for channels opened with [`Channel::open_in`].
#[derive(Debug)]
pub struct WaitSet {
    // Field order is drop order: the set before its fabric.
    set: crate::WaitSet,
    _fabric: Fabric,
}

impl WaitSet {
    /// Opens a wait set on the fabric of an offer (from [`crate::getinfo`]).
    pub fn open(info: &Info) -> Result<WaitSet> {
        let fabric = Fabric::open(&info.fabric_attr)?;
        let set = fabric.wait_set(crate::consts::wait_obj::FI_WAIT_FD)?;
        Ok(WaitSet {
            set,
            _fabric: fabric,
        })
    }

    /// Blocks until a member channel has a completion to collect (Ok) or
    /// `timeout` passes (`FI_ETIMEDOUT`), driving the channels' progress.
    pub fn wait(&self, timeout: Duration) -> Result<()> {
        self.set.wait(Some(timeout))
    }

    /// Ok when it is safe to sleep on the set's fd;
    /// `FI_EAGAIN` when a member has completions or work pending.
    pub fn trywait(&self) -> Result<()> {
        self.set.trywait()
    }

    /// The set's fd, for the application's epoll, mio or tokio: readable
    /// when a member channel has completions (call
    /// [`trywait`](Self::trywait) before sleeping on it). It lives as long
    /// as the set.
    pub fn wait_fd(&self) -> Option<RawFd> {
        self.set.wait_fd()
    }

    pub(crate) fn raw(&self) -> &crate::WaitSet {
        &self.set
    }
}

/// A poll set over channels: which have completions to collect.
#[derive(Debug)]
pub struct PollSet {
    set: crate::PollSet,
}

impl PollSet {
    /// Opens a poll set on `channel`'s domain; channels of other domains
    /// may join it too.
    pub fn new(channel: &Channel) -> Result<PollSet> {
        Ok(PollSet {
            set: channel.domain().poll_set()?,
        })
    }

    /// Watches `channel`, reported as `key`.
    pub fn add(&self, channel: &Channel, key: usize) {
        self.set.add_cq(channel.cq(), key)
    }

    /// Stops watching `channel`; `FI_EINVAL` if it was not watched.
    pub fn remove(&self, channel: &Channel) -> Result<()> {
        self.set.del_cq(channel.cq())
    }

    /// Drives every watched channel's progress once and appends the keys
    /// of those with completions to collect (at most 16 per call; the
    /// others stay for the next); returns how many.
    pub fn poll(&self, out: &mut Vec<usize>) -> usize {
        let mut keys = [0usize; 16];
        let n = self.set.poll(&mut keys);
        out.extend_from_slice(&keys[..n]);
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consts::*;

    fn offer(prov: &str) -> Info {
        let mut h = Info::hints();
        h.caps = FI_MSG;
        h.ep_attr.ep_type = ep_type::FI_EP_RDM;
        h.fabric_attr.prov_name = Some(prov.into());
        crate::getinfo(FI_VERSION_CURRENT, None, None, 0, Some(&h))
            .expect("offer")
            .remove(0)
    }

    /// One channel sends to another; the sets report the receiver.
    fn exchange(prov: &str) {
        let info = offer(prov);
        let set = WaitSet::open(&info).expect("wait set");
        let a = Channel::open_in(&info, &set).expect("a");
        let b = Channel::open_in(&info, &set).expect("b");
        let ps = PollSet::new(&a).expect("poll set");
        ps.add(&a, 1);
        ps.add(&b, 2);
        let mut keys = Vec::new();
        assert_eq!(ps.poll(&mut keys), 0);
        assert_eq!(
            set.wait(Duration::from_millis(1)).unwrap_err().code(),
            crate::errno::FI_ETIMEDOUT
        );
        set.trywait().expect("nothing to read");
        assert!(set.wait_fd().is_some());
        let to_b = a.insert(&b.address().unwrap()).unwrap();
        let mut rx = b.recv(vec![0; 8]).unwrap();
        let _tx = a.send(vec![3; 8], to_b).unwrap();
        // The wait set drives both channels until one has a completion.
        set.wait(Duration::from_secs(10)).expect("a completion");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let mut got = None;
        while got.is_none() && std::time::Instant::now() < deadline {
            keys.clear();
            ps.poll(&mut keys);
            if keys.contains(&2) {
                b.poll().unwrap();
                got = rx.check();
            }
        }
        let got = got.expect("no receive completion").expect("received");
        assert_eq!(got.bytes(), &[3; 8]);
        ps.remove(&b).expect("remove");
        assert!(ps.remove(&b).is_err());
    }

    #[test]
    fn poll_and_wait_sets_watch_channels_on_shm() {
        exchange("shm");
    }

    #[test]
    fn poll_and_wait_sets_watch_channels_on_tcp() {
        exchange("tcp");
    }
}
