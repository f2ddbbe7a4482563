//! Receive matching shared by providers: posted receives against incoming
//! messages, and unexpected messages against new receives, for both the
//! message and the tagged queue, with directed receive and tag ignore bits.

use super::fifo::Fifo;
use super::iov::IoVec;
use crate::consts::FI_ADDR_UNSPEC;
use std::collections::VecDeque;

/// Most iov entries a posted receive can carry.
pub const MAX_IOV: usize = 4;

/// A posted receive.
#[derive(Clone, Copy, Debug, Default)]
pub struct PostedRecv {
    /// Destination ranges.
    pub iov: [IoVec; MAX_IOV],
    /// Ranges in use.
    pub iov_cnt: usize,
    /// Total bytes.
    pub len: usize,
    /// Accepted source (`FI_ADDR_UNSPEC`: any).
    pub src: u64,
    /// Tag (tagged queue).
    pub tag: u64,
    /// Ignore bits (tagged queue).
    pub ignore: u64,
    /// The caller's context.
    pub context: usize,
    /// Operation flags.
    pub flags: u64,
    /// Bytes already consumed (multi-receive).
    pub consumed: usize,
}

impl PostedRecv {
    /// The iov ranges.
    #[inline]
    pub fn iov(&self) -> &[IoVec] {
        &self.iov[..self.iov_cnt]
    }
    /// True if this receive accepts a message from `src` with `tag`.
    #[inline]
    pub fn matches(&self, src: u64, tag: u64) -> bool {
        (self.src == FI_ADDR_UNSPEC || self.src == src)
            && (tag | self.ignore) == (self.tag | self.ignore)
    }
}

/// A message that arrived before a matching receive.
#[derive(Debug)]
pub struct Unexpected<P> {
    /// Source fi_addr (`FI_ADDR_NOTAVAIL` if unknown).
    pub src: u64,
    /// Tag.
    pub tag: u64,
    /// Remote CQ data.
    pub data: u64,
    /// Message flags (FI_REMOTE_CQ_DATA …).
    pub flags: u64,
    /// Message length.
    pub len: usize,
    /// Context of the FI_CLAIM peek that reserved it, if any.
    pub claimed: Option<usize>,
    /// Provider's handle to the payload.
    pub payload: P,
}

impl<P> Unexpected<P> {
    /// True if a receive for (src, tag, ignore) would take this message.
    #[inline]
    pub fn matches(&self, src: u64, tag: u64, ignore: u64) -> bool {
        self.claimed.is_none()
            && (src == FI_ADDR_UNSPEC || src == self.src)
            && (tag | ignore) == (self.tag | ignore)
    }
}

/// Receives posted to a shared receive context (`fi_srx_context`), which
/// serve every endpoint bound to it. An endpoint consults it when none of
/// its own receives takes a message; one that holds messages no receive
/// took yet asks again when a receive is posted (see `generation`).
pub trait SharedRecvQueue: Send + Sync + std::fmt::Debug {
    /// Takes the oldest receive of the message (`tagged` false) or tagged
    /// queue that accepts a message from `src` with `tag`. On a miss,
    /// `member` (the asking endpoint's number with this context) is
    /// remembered, to be told when a receive is posted.
    fn take(&self, member: usize, tagged: bool, src: u64, tag: u64) -> Option<PostedRecv>;
    /// A count that moves whenever a receive is posted.
    fn generation(&self) -> u64;
}

/// Posted and unexpected queues for one endpoint: index 0 is the message
/// queue, index 1 the tagged queue.
#[derive(Debug)]
pub struct MatchQueues<P> {
    posted: [Fifo<PostedRecv>; 2],
    unexpected: [VecDeque<Unexpected<P>>; 2],
}

impl<P> MatchQueues<P> {
    /// Queues with room for `depth` entries each.
    pub fn new(depth: usize) -> Self {
        MatchQueues {
            posted: [Fifo::with_capacity(depth), Fifo::with_capacity(depth)],
            unexpected: [
                VecDeque::with_capacity(depth),
                VecDeque::with_capacity(depth),
            ],
        }
    }
    /// Number of posted receives in a queue.
    pub fn posted_len(&self, tagged: bool) -> usize {
        self.posted[usize::from(tagged)].len()
    }
    /// Posts a receive at the back of its queue.
    #[inline]
    pub fn post(&mut self, tagged: bool, r: PostedRecv) {
        self.posted[usize::from(tagged)].push_back(r);
    }
    /// Index of the first posted receive accepting (src, tag).
    #[inline(always)]
    pub fn find_posted(&self, tagged: bool, src: u64, tag: u64) -> Option<usize> {
        let q = &self.posted[usize::from(tagged)];
        let takes = |r: &PostedRecv| {
            if tagged {
                r.matches(src, tag)
            } else {
                r.src == FI_ADDR_UNSPEC || r.src == src
            }
        };
        // The oldest receive takes most messages: it is tried before the
        // walk over the rest.
        if takes(q.front()?) {
            return Some(0);
        }
        Self::find_posted_after(q, takes)
    }

    /// The walk of [`find_posted`](Self::find_posted) past the oldest receive.
    #[inline(never)]
    fn find_posted_after(
        q: &Fifo<PostedRecv>,
        takes: impl Fn(&PostedRecv) -> bool,
    ) -> Option<usize> {
        q.iter().skip(1).position(takes).map(|i| i + 1)
    }
    /// A posted receive by index.
    #[inline]
    pub fn posted_mut(&mut self, tagged: bool, idx: usize) -> Option<&mut PostedRecv> {
        self.posted[usize::from(tagged)].get_mut(idx)
    }
    /// Removes a posted receive.
    #[inline]
    pub fn take_posted(&mut self, tagged: bool, idx: usize) -> Option<PostedRecv> {
        self.posted[usize::from(tagged)].remove(idx)
    }
    /// Drops posted receive `idx` (its fields read through
    /// [`posted_mut`](Self::posted_mut)), without a copy when it is the oldest.
    #[inline]
    pub fn drop_posted(&mut self, tagged: bool, idx: usize) {
        let q = &mut self.posted[usize::from(tagged)];
        if idx == 0 {
            q.skip_front();
        } else {
            q.remove(idx);
        }
    }
    /// Removes the posted receive with this context (cancel).
    pub fn cancel(&mut self, context: usize) -> Option<(bool, PostedRecv)> {
        for tagged in [false, true] {
            let q = &mut self.posted[usize::from(tagged)];
            if let Some(i) = q.position(|r| r.context == context) {
                return q.remove(i).map(|r| (tagged, r));
            }
        }
        None
    }
    /// Removes the first posted receive directed at `src` (its source is
    /// exactly `src`, not `FI_ADDR_UNSPEC`): a provider fails each one this
    /// returns when it declares that peer dead (see
    /// [`peer`](super::peer)).
    pub fn take_posted_from(&mut self, tagged: bool, src: u64) -> Option<PostedRecv> {
        if src == FI_ADDR_UNSPEC {
            return None;
        }
        let q = &mut self.posted[usize::from(tagged)];
        let i = q.position(|r| r.src == src)?;
        q.remove(i)
    }
    /// Queues an unexpected message.
    pub fn push_unexpected(&mut self, tagged: bool, u: Unexpected<P>) {
        self.unexpected[usize::from(tagged)].push_back(u);
    }
    /// Index of the first unexpected message a receive would take.
    #[inline]
    pub fn find_unexpected(&self, tagged: bool, src: u64, tag: u64, ignore: u64) -> Option<usize> {
        let q = &self.unexpected[usize::from(tagged)];
        if q.is_empty() {
            return None;
        }
        if !tagged {
            return q
                .iter()
                .position(|u| u.claimed.is_none() && (src == FI_ADDR_UNSPEC || src == u.src));
        }
        q.iter().position(|u| u.matches(src, tag, ignore))
    }
    /// Index of the unexpected message claimed with this context.
    pub fn find_claimed(&self, tagged: bool, context: usize) -> Option<usize> {
        self.unexpected[usize::from(tagged)]
            .iter()
            .position(|u| u.claimed == Some(context))
    }
    /// An unexpected message by index.
    pub fn unexpected_mut(&mut self, tagged: bool, idx: usize) -> Option<&mut Unexpected<P>> {
        self.unexpected[usize::from(tagged)].get_mut(idx)
    }
    /// Removes an unexpected message.
    #[inline]
    pub fn take_unexpected(&mut self, tagged: bool, idx: usize) -> Option<Unexpected<P>> {
        let q = &mut self.unexpected[usize::from(tagged)];
        if idx == 0 {
            q.pop_front()
        } else {
            q.remove(idx)
        }
    }
    /// The unexpected messages of a queue, oldest first, to update in place
    /// (a composing provider names a sender once its AV learns it).
    pub fn unexpected_iter_mut(
        &mut self,
        tagged: bool,
    ) -> impl Iterator<Item = &mut Unexpected<P>> + '_ {
        self.unexpected[usize::from(tagged)].iter_mut()
    }
    /// Number of unexpected messages in a queue.
    #[inline]
    pub fn unexpected_len(&self, tagged: bool) -> usize {
        self.unexpected[usize::from(tagged)].len()
    }
    /// Drains everything (endpoint close).
    pub fn drain_all(&mut self) -> (Vec<PostedRecv>, Vec<Unexpected<P>>) {
        let mut p = Vec::new();
        let mut u = Vec::new();
        for i in 0..2 {
            p.extend(self.posted[i].drain());
            u.extend(self.unexpected[i].drain(..));
        }
        (p, u)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn tag_ignore_and_directed_receive() {
        let mut q: MatchQueues<()> = MatchQueues::new(4);
        q.post(
            true,
            PostedRecv {
                src: 7,
                tag: 0x10,
                ignore: 0x0f,
                context: 1,
                ..Default::default()
            },
        );
        q.post(
            true,
            PostedRecv {
                src: FI_ADDR_UNSPEC,
                tag: 0x20,
                ignore: 0,
                context: 2,
                ..Default::default()
            },
        );
        assert_eq!(q.find_posted(true, 7, 0x1f), Some(0));
        assert_eq!(
            q.find_posted(true, 8, 0x1f),
            None,
            "directed receive must reject another source"
        );
        assert_eq!(q.find_posted(true, 8, 0x20), Some(1));
        assert_eq!(q.find_posted(true, 8, 0x21), None);
        assert!(q.cancel(1).is_some());
        assert_eq!(q.find_posted(true, 7, 0x1f), None);
    }
    #[test]
    fn receives_directed_at_a_peer_are_taken_and_no_others() {
        let mut q: MatchQueues<()> = MatchQueues::new(4);
        for (src, context) in [(7, 1), (FI_ADDR_UNSPEC, 2), (8, 3), (7, 4)] {
            q.post(
                true,
                PostedRecv {
                    src,
                    context,
                    ..Default::default()
                },
            );
        }
        let taken: Vec<usize> = std::iter::from_fn(|| q.take_posted_from(true, 7))
            .map(|r| r.context)
            .collect();
        assert_eq!(taken, [1, 4]);
        assert!(q.take_posted_from(true, FI_ADDR_UNSPEC).is_none());
        assert!(q.take_posted_from(false, 8).is_none());
        assert_eq!(q.posted_len(true), 2);
    }
    #[test]
    fn claimed_messages_are_invisible_to_plain_receives() {
        let mut q: MatchQueues<u8> = MatchQueues::new(4);
        q.push_unexpected(
            true,
            Unexpected {
                src: 1,
                tag: 5,
                data: 0,
                flags: 0,
                len: 1,
                claimed: None,
                payload: 9,
            },
        );
        assert_eq!(q.find_unexpected(true, FI_ADDR_UNSPEC, 5, 0), Some(0));
        q.unexpected_mut(true, 0).unwrap().claimed = Some(77);
        assert_eq!(q.find_unexpected(true, FI_ADDR_UNSPEC, 5, 0), None);
        assert_eq!(q.find_claimed(true, 77), Some(0));
    }
}
