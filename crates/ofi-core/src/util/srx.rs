//! Shared receive contexts (`fi_srx_context`, fi_endpoint(3) "SHARED
//! CONTEXTS"): receive buffers posted once that serve every endpoint bound
//! to the context, the usual way to bound receive memory across many
//! connections.
//!
//! The context holds the posted receives, in posting order, per queue
//! (message and tagged); it matches nothing itself. An endpoint bound to
//! it matches a message against its own receives first, then takes the
//! context's oldest receive that accepts it ([`SharedRecvQueue::take`]),
//! places the message there and completes it on its own CQ and counter,
//! as the man page says ("Completed receive operations are posted to the
//! CQs bound to the endpoint"). A message no receive accepts waits as the
//! endpoint's unexpected message (within its usual budget); the endpoint
//! is remembered, and when a receive is posted to the context it is told
//! ([`EndpointOps::srx_posted`]) and offers its unexpected messages again,
//! oldest first. Messages of one endpoint keep their order; receives are
//! taken in posting order.
//!
//! A provider supports shared receive contexts by binding its receive
//! matching to the context at enable ([`EpBindings::srx`]) and answering
//! `srx_posted`; its offers then advertise `max_ep_srx_ctx`.
//!
//! [`EpBindings::srx`]: crate::provider::EpBindings::srx

use super::av::AvCore;
use super::cq::{CqCore, CqErrEntry};
use super::lock::SpinLock;
use crate::consts::*;
use crate::error::{errno, Error, Result};
use crate::provider::{EndpointOps, Progress, RecvOp, SendOp};
use ofi_base::iov::iov_len;
use ofi_base::matching::{MatchQueues, PostedRecv, SharedRecvQueue, MAX_IOV};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

/// An endpoint bound to a context.
struct Member {
    id: usize,
    ep: Weak<dyn EndpointOps>,
    rx_cq: Option<Arc<CqCore>>,
}

/// A shared receive context.
pub struct SrxCore {
    posted: SpinLock<MatchQueues<()>>,
    /// Receives it holds at most (`rx_attr.size`): past it a post is
    /// `FI_EAGAIN` until messages take some.
    size: usize,
    gen: AtomicU64,
    members: SpinLock<Vec<Member>>,
    /// Members that hold messages no receive accepted when they asked.
    waiting: SpinLock<Vec<usize>>,
    next: AtomicUsize,
    /// The address vector of its connectionless members (they must share
    /// one): the AV's address, 0 while none is known.
    av: AtomicUsize,
    /// Endpoints bound to it (it cannot close while any is).
    pub bound: AtomicUsize,
}

impl std::fmt::Debug for SrxCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SrxCore")
            .field("size", &self.size)
            .field("bound", &self.bound.load(Ordering::Relaxed))
            .finish()
    }
}

/// A member's binding, handed to its provider at enable.
#[derive(Clone, Debug)]
pub struct SrxBinding {
    /// The context.
    pub srx: Arc<SrxCore>,
    /// The endpoint's number with it (what [`SharedRecvQueue::take`] asks).
    pub member: usize,
    /// For the provider: the context's generation when the endpoint last
    /// offered it its waiting messages.
    pub seen: u64,
    /// For the provider: how many messages waited after that offer.
    pub held: usize,
}

impl SrxCore {
    /// A context holding at most `size` receives (0: 1024).
    pub fn new(size: usize) -> Arc<Self> {
        let size = if size == 0 { 1024 } else { size };
        Arc::new(SrxCore {
            posted: SpinLock::new(MatchQueues::new(size.min(1024))),
            size,
            gen: AtomicU64::new(0),
            members: SpinLock::new(Vec::new()),
            waiting: SpinLock::new(Vec::new()),
            next: AtomicUsize::new(1),
            av: AtomicUsize::new(0),
            bound: AtomicUsize::new(0),
        })
    }

    /// Posts a receive. `FI_EAGAIN` when the context is full;
    /// `FI_EOPNOTSUPP` for `FI_MULTI_RECV` and peeks (a shared buffer that
    /// several endpoints fill, and a peek across endpoints, are not
    /// offered); `FI_EINVAL` for more than [`MAX_IOV`] ranges. Members
    /// holding messages that waited for a receive are told.
    pub fn post(&self, op: &RecvOp<'_>) -> Result<()> {
        if op.flags & (FI_MULTI_RECV | FI_PEEK | FI_CLAIM) != 0 {
            return Err(Error::new(
                errno::FI_EOPNOTSUPP,
                "shared receive context: FI_MULTI_RECV, FI_PEEK and FI_CLAIM are not supported",
            ));
        }
        if op.iov.len() > MAX_IOV {
            return Err(Error::inval(format!(
                "shared receive context: {} ranges, at most {MAX_IOV}",
                op.iov.len()
            )));
        }
        let mut iov = [Default::default(); MAX_IOV];
        iov[..op.iov.len()].copy_from_slice(op.iov);
        let r = PostedRecv {
            iov,
            iov_cnt: op.iov.len(),
            len: iov_len(op.iov),
            src: op.src,
            tag: if op.tagged { op.tag } else { 0 },
            ignore: if op.tagged { op.ignore } else { 0 },
            context: op.context,
            flags: op.flags,
            consumed: 0,
        };
        {
            let mut q = self.posted.lock();
            if q.posted_len(false) + q.posted_len(true) >= self.size {
                return Err(Error::again());
            }
            q.post(op.tagged, r);
            self.gen.fetch_add(1, Ordering::AcqRel);
        }
        let waiting = std::mem::take(&mut *self.waiting.lock());
        for id in waiting {
            let ep = self
                .members
                .lock()
                .iter()
                .find(|m| m.id == id)
                .and_then(|m| m.ep.upgrade());
            if let Some(ep) = ep {
                ep.srx_posted();
            }
        }
        Ok(())
    }

    /// Receives posted and not yet taken.
    pub fn len(&self) -> usize {
        let q = self.posted.lock();
        q.posted_len(false) + q.posted_len(true)
    }

    /// True when no receive waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `fi_cancel`: the receive with `context` leaves the context and
    /// completes with `FI_ECANCELED` on the receive CQ of the first member
    /// that has one (the context itself has no CQ). `FI_ENOENT` when no
    /// such receive waits; `FI_EOPBADSTATE` (receive kept) while no member
    /// has a receive CQ to report it on.
    pub fn cancel(&self, context: usize) -> Result<()> {
        let cq = self
            .members
            .lock()
            .iter()
            .find_map(|m| m.rx_cq.clone().filter(|_| m.ep.strong_count() > 0));
        let Some(cq) = cq else {
            return Err(Error::new(
                errno::FI_EOPBADSTATE,
                "shared receive context: no bound endpoint has a receive CQ to report a cancel on",
            ));
        };
        let (tagged, r) =
            self.posted.lock().cancel(context).ok_or_else(|| {
                Error::new(errno::FI_ENOENT, "no posted receive has this context")
            })?;
        cq.push_err(
            CqErrEntry {
                op_context: context,
                flags: FI_RECV | if tagged { FI_TAGGED } else { FI_MSG },
                tag: r.tag,
                err: errno::FI_ECANCELED,
                prov_errno: errno::FI_ECANCELED,
                ..Default::default()
            },
            FI_ADDR_NOTAVAIL,
        );
        Ok(())
    }

    /// Makes `ep` a member: its receive completions go to `rx_cq`, and a
    /// cancel is reported there while it is the first member with one.
    /// Returns its number.
    pub fn join(&self, ep: Weak<dyn EndpointOps>, rx_cq: Option<Arc<CqCore>>) -> usize {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.members.lock().push(Member { id, ep, rx_cq });
        id
    }

    /// Member `id` left (its endpoint closed).
    pub fn leave(&self, id: usize) {
        let mut m = self.members.lock();
        m.retain(|x| x.id != id);
        if m.is_empty() {
            self.av.store(0, Ordering::Release);
        }
        drop(m);
        self.waiting.lock().retain(|&x| x != id);
    }

    /// A connectionless member's address vector: all of them share one
    /// (fi_endpoint(3)); `FI_EINVAL` for another.
    pub fn check_av(&self, av: &Arc<AvCore>) -> Result<()> {
        let p = Arc::as_ptr(av) as usize;
        match self
            .av
            .compare_exchange(0, p, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => Ok(()),
            Err(q) if q == p => Ok(()),
            Err(_) => Err(Error::inval(
                "shared receive context: its connectionless endpoints must share one address vector",
            )),
        }
    }
}

impl SharedRecvQueue for SrxCore {
    fn take(&self, member: usize, tagged: bool, src: u64, tag: u64) -> Option<PostedRecv> {
        let mut q = self.posted.lock();
        if let Some(i) = q.find_posted(tagged, src, tag) {
            return q.take_posted(tagged, i);
        }
        drop(q);
        let mut w = self.waiting.lock();
        if !w.contains(&member) {
            w.push(member);
        }
        None
    }

    fn generation(&self) -> u64 {
        self.gen.load(Ordering::Acquire)
    }
}

/// The provider side of a shared receive context's handle: the raw
/// layer's `Endpoint` for it posts receives here and cancels them; it
/// sends nothing and has no address.
#[derive(Debug)]
pub struct SrxEp {
    /// The context.
    pub core: Arc<SrxCore>,
}

impl Progress for SrxEp {
    fn progress(&self) {}
    fn arm(&self) -> bool {
        true
    }
    fn disarm(&self) {}
    fn wait_fd(&self) -> Option<RawFd> {
        None
    }
}

impl EndpointOps for SrxEp {
    fn enable(&self, _: crate::provider::EpBindings) -> Result<()> {
        Ok(())
    }
    fn getname(&self) -> Result<Vec<u8>> {
        Err(Error::nosys("a shared receive context has no address"))
    }
    // The trait's signature is unsafe (the caller keeps the ranges valid);
    // nothing here touches memory through them.
    #[allow(unsafe_code)]
    unsafe fn post_send(&self, _: &SendOp<'_>) -> Result<()> {
        Err(Error::nosys("a shared receive context does not send"))
    }
    // The ranges are recorded for the member endpoint that fills them,
    // under the same contract (valid until the receive completes).
    #[allow(unsafe_code)]
    unsafe fn post_recv(&self, op: &RecvOp<'_>) -> Result<()> {
        self.core.post(op)
    }
    fn cancel(&self, context: usize) -> Result<()> {
        self.core.cancel(context)
    }
    fn setopt(&self, name: i32, _: usize) -> Result<()> {
        Err(Error::new(
            errno::FI_ENOPROTOOPT,
            format!("shared receive context: option {name} is not supported"),
        ))
    }
    fn getopt(&self, name: i32) -> Result<usize> {
        Err(Error::new(
            errno::FI_ENOPROTOOPT,
            format!("shared receive context: option {name} is not supported"),
        ))
    }
    fn close(&self) {}
    fn as_srx(&self) -> Option<&Arc<SrxCore>> {
        Some(&self.core)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ofi_base::iov::IoVec;

    fn recv<'a>(iov: &'a [IoVec], context: usize, tagged: bool, tag: u64) -> RecvOp<'a> {
        RecvOp {
            iov,
            desc: &[],
            src: FI_ADDR_UNSPEC,
            tag,
            ignore: 0,
            context,
            flags: 0,
            tagged,
        }
    }

    #[test]
    fn receives_are_taken_in_posting_order_and_misses_wait_for_a_post() {
        let s = SrxCore::new(3);
        let v = [IoVec { base: 64, len: 8 }];
        assert!(s.take(7, false, 1, 0).is_none(), "nothing posted yet");
        assert_eq!(*s.waiting.lock(), [7]);
        let g = s.generation();
        s.post(&recv(&v, 1, false, 0)).expect("post");
        s.post(&recv(&v, 2, true, 5)).expect("post");
        s.post(&recv(&v, 3, false, 0)).expect("post");
        assert!(s.generation() > g);
        assert!(s.waiting.lock().is_empty(), "told once, forgotten");
        let e = s.post(&recv(&v, 4, false, 0)).expect_err("full");
        assert_eq!(e.code(), errno::FI_EAGAIN);
        assert!(s.take(7, true, 1, 6).is_none(), "tag 6 is not 5");
        assert_eq!(s.take(7, true, 1, 5).map(|r| r.context), Some(2));
        assert_eq!(s.take(8, false, 9, 0).map(|r| r.context), Some(1));
        assert_eq!(s.take(8, false, 9, 0).map(|r| r.context), Some(3));
        assert!(s.is_empty());
        let multi = RecvOp {
            flags: FI_MULTI_RECV,
            ..recv(&v, 5, false, 0)
        };
        assert_eq!(
            s.post(&multi).expect_err("multi").code(),
            errno::FI_EOPNOTSUPP
        );
    }

    #[test]
    fn a_cancel_needs_a_member_with_a_receive_cq() {
        let s = SrxCore::new(0);
        let v = [IoVec { base: 64, len: 8 }];
        s.post(&recv(&v, 1, false, 0)).expect("post");
        assert_eq!(
            s.cancel(1).expect_err("no member").code(),
            errno::FI_EOPBADSTATE
        );
        assert_eq!(s.len(), 1, "kept");
    }
}
