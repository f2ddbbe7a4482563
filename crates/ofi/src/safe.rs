//! The safe layer: buffers are moved into each operation and handed back
//! when it finishes, so no borrowed memory can outlive a call and no
//! undefined behaviour is reachable from safe code.
//!
//! A [`Channel`] owns an endpoint with its completion queue and address
//! vector. Each post (`send`, `trecv`, `write`, `atomic` …) takes an owned
//! buffer ([`IoBuf`](crate::IoBuf): `Vec<u8>`, `Box<[u8]>`,
//! `bytes::BytesMut`, a [`PoolBuf`]) and returns an [`Op`] that holds it
//! until the operation completes; [`Op::wait`] (or [`Channel::poll`] then
//! [`Op::check`]) turns it into a [`Done`] with the buffer back. A failed
//! post hands the buffer back in a [`PostError`]; a failed operation in an
//! [`OpError`]; both convert into [`Error`] for `?`.
//!
//! ```no_run
//! use ofi::safe::Channel;
//! use ofi::{Caps, EpType, Hints};
//! use std::time::Duration;
//! let info = Hints::new().caps(Caps::MSG).ep_type(EpType::Rdm).provider("shm").first()?;
//! let (a, b) = (Channel::open(&info)?, Channel::open(&info)?);
//! let to_b = a.insert(&b.address()?)?;
//! let mut rx = b.recv(vec![0u8; 16])?;
//! a.send(b"ping".to_vec(), to_b)?.wait(Duration::from_secs(5))?;
//! assert_eq!(rx.wait(Duration::from_secs(5))?.bytes(), b"ping");
//! # Ok::<(), ofi::Error>(())
//! ```
//!
//! One-sided operations follow the same rule: the initiator's buffers
//! (written, read into, atomic operands and results) are owned by the
//! operation; the target exposes a [`Region`] that owns its memory and
//! hands it back only once no peer can reach it (see [`region`]).
//!
//! Collectives too: an RDM channel opened from an offer with
//! FI_COLLECTIVE [`join`](Channel::join)s a [`Group`] of its peers, and
//! each operation over it (`barrier`, `broadcast`, `allreduce`,
//! `allgather`, `reduce_scatter`, `alltoall`, `reduce`, `scatter`,
//! `gather`) owns its [`Collective`] buffers until it completes.

// The one place the safe layer calls the raw layer (the posts themselves are
// in the `send_recv` and `one_sided` submodules): every buffer passed to a
// raw post is owned by the operation's handle (or, once the handle is
// dropped, by the channel's table) until its completion is reaped or the
// endpoint has shut down.
#![allow(unsafe_code)]

pub mod buf;
mod cm;
pub(crate) mod coll;
mod conn;
mod one_sided;
pub(crate) mod op;
pub mod region;
mod send_recv;
mod sets;
pub(crate) mod table;

use buf::Held;
pub use buf::{BufPool, PoolBuf};
pub use coll::{Collective, Group};
pub use conn::{CmEvent, ConnRequest};
pub use one_sided::Atomic;
pub use op::{Done, Op, OpError, OpId, PostError};
pub use region::Region;
pub use sets::{PollSet, WaitSet};
pub use table::RemoteWrite;

use crate::consts::*;
use crate::spi::HasCore;
use crate::{
    errno, AddressVector, AvAttr, CompletionQueue, CqAttr, Domain, Endpoint, EqAttr, Error,
    EventQueue, Fabric, Info, Result,
};
use conn::Conns;
use ofi_core::util::iov::IoVec;
use region::Parked;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};
use table::Table;

/// An address inserted into a channel's address vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Addr(pub u64);

/// The result of a post: the operation's handle, or the buffer back.
pub type Posted<'ch, B> = std::result::Result<Op<'ch, B>, PostError<B>>;

/// An endpoint with its queue, address vector and the operations in flight.
///
/// A channel is `Send` but not `Sync`: one thread drives it at a time (wrap
/// it in a `Mutex` to share it; the async layer shares one among tasks),
/// which keeps its bookkeeping free of atomics. Operation handles borrow it,
/// so it outlives them.
///
/// One-sided calls need an offer with FI_RMA (reads and writes) or
/// FI_ATOMIC; on other channels they fail with `FI_EOPNOTSUPP`.
///
/// On an MSG offer the channel holds connections instead of one endpoint:
/// it [`connect`](Self::connect)s to listening peers or
/// [`listen`](Self::listen)s and [`accept`](Self::accept)s them, every
/// connection sharing the channel's completion queue and domain. Each
/// connection is an [`Addr`] that sends and one-sided calls take as their
/// peer; receives are posted per connection ([`recv_on`](Self::recv_on)),
/// and [`cm_event`](Self::cm_event) reports requests, established
/// connections and shutdowns.
pub struct Channel {
    // Field order is drop order: the endpoints shut down (and stop touching
    // posted buffers and registered regions) before the buffers they may
    // reference are freed.
    ep: Eps,
    /// The event queue of an RDM channel opened for collectives (joins
    /// complete there).
    eq: Option<EventQueue>,
    /// Joins started (their contexts).
    joins: std::cell::Cell<usize>,
    cq: CompletionQueue,
    fd: OwnedFd,
    av: Option<AddressVector>,
    /// The operations in flight.
    table: Table,
    /// FI_MORE while a [`Batch`] is open, else 0: added to every post's flags.
    more: std::cell::Cell<u64>,
    parked: Arc<Parked>,
    domain: Domain,
    _fabric: Fabric,
}

// One thread drives a channel at a time, but it may move between threads
// (its table is in cells: `Send`, not `Sync`).
const _: fn() = || {
    fn send<T: Send>() {}
    send::<Channel>();
};

/// The endpoints a channel posts on.
// One per channel, and the RDM endpoint read on every post without an
// indirection: the size difference is the better trade.
#[allow(clippy::large_enum_variant)]
enum Eps {
    /// RDM and DGRAM: one endpoint reaching every peer of the AV.
    One(Endpoint),
    /// MSG: one endpoint per connection.
    Conns(Conns),
}

impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.ep {
            Eps::One(ep) => f.debug_struct("Channel").field("ep", ep).finish(),
            Eps::Conns(c) => f
                .debug_struct("Channel")
                .field("connections", &c.count())
                .finish(),
        }
    }
}

fn iov_of(b: &[u8]) -> IoVec {
    IoVec {
        base: b.as_ptr() as usize,
        len: b.len(),
    }
}

impl Channel {
    /// Opens a channel on an offer (from [`Hints::first`](crate::Hints::first)
    /// or [`crate::getinfo`]). The endpoint gets the offer's capabilities:
    /// ask for FI_RMA / FI_ATOMIC in the hints to use the one-sided calls.
    pub fn open(info: &Info) -> Result<Channel> {
        Self::open_with(info, |d, mut attr| {
            attr.wait_obj = wait_obj::FI_WAIT_FD;
            d.cq(&attr)
        })
    }

    /// Opens a batch: sends, RMA and atomics posted while the returned
    /// guard lives carry FI_MORE, which tells the provider that more
    /// operations follow at once. A provider may hold them back to leave
    /// together (tcp gathers them into one `sendmsg`) until the next post
    /// made without the flag, after the guard is dropped, or until the
    /// next poll or wait of this channel; others send them as usual.
    /// Batches do not nest: the first guard dropped ends the batch.
    pub fn batch(&self) -> Batch<'_> {
        self.more.set(FI_MORE);
        Batch { ch: self }
    }

    /// Opens a channel whose completions wake `set` (its completion queue
    /// is opened into the wait set): one [`WaitSet::wait`] for many channels.
    pub fn open_in(info: &Info, set: &WaitSet) -> Result<Channel> {
        Self::open_with(info, |d, mut attr| {
            attr.wait_obj = wait_obj::FI_WAIT_SET;
            d.cq_in(&attr, set.raw())
        })
    }

    fn open_with(
        info: &Info,
        cq: impl FnOnce(&Domain, CqAttr) -> Result<CompletionQueue>,
    ) -> Result<Channel> {
        let fabric = Fabric::open(&info.fabric_attr)?;
        let domain = fabric.domain(info)?;
        let cq = cq(
            &domain,
            CqAttr {
                size: 0,
                format: cq_format::FI_CQ_FORMAT_TAGGED,
                wait_obj: wait_obj::FI_WAIT_FD,
            },
        )?;
        // A copy of the queue's wait fd, made readable only once someone
        // asks for it (`as_fd`): an exposed fd costs a system call per
        // completion.
        let fd = cq
            .core()
            .driver()
            .waits()
            .ok_or_else(|| Error::nodata("channel: the completion queue has no wait fd"))?
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| Error::os(e, "channel: dup of the wait fd"))?;
        let (ep, av, eq) = if info.ep_attr.ep_type == ep_type::FI_EP_MSG {
            let eq = fabric.eq(&EqAttr {
                size: 0,
                wait_obj: wait_obj::FI_WAIT_FD,
            })?;
            (Eps::Conns(Conns::new(info.clone(), eq)), None, None)
        } else {
            let av = domain.av(&AvAttr::default())?;
            let ep = domain.endpoint(info)?;
            ep.bind_cq(&cq, FI_TRANSMIT | FI_RECV)?;
            ep.bind_av(&av)?;
            // Joins complete on an event queue.
            let eq = if info.caps & FI_COLLECTIVE != 0 {
                let eq = fabric.eq(&EqAttr {
                    size: 0,
                    wait_obj: wait_obj::FI_WAIT_FD,
                })?;
                ep.bind_eq(&eq)?;
                Some(eq)
            } else {
                None
            };
            ep.enable()?;
            (Eps::One(ep), Some(av), eq)
        };
        let table = Table::default();
        table
            .keep_timed_out
            .set(table::late_writes(info.provider()));
        Ok(Channel {
            ep,
            eq,
            joins: std::cell::Cell::new(0),
            cq,
            fd,
            av,
            table,
            more: std::cell::Cell::new(0),
            parked: Arc::default(),
            domain,
            _fabric: fabric,
        })
    }

    /// This channel's address, to give to peers (an MSG channel's is its
    /// passive endpoint's, once it [`listen`](Self::listen)s).
    pub fn address(&self) -> Result<Vec<u8>> {
        match &self.ep {
            Eps::One(ep) => ep.getname(),
            Eps::Conns(c) => c.with_pep(|p| p.getname()),
        }
    }

    /// Adds a peer's address (RDM and DGRAM channels; an MSG channel
    /// connects instead).
    pub fn insert(&self, addr: &[u8]) -> Result<Addr> {
        match &self.av {
            Some(av) => av.insert_one(addr).map(Addr),
            None => Err(Error::inval(
                "an MSG channel has no address vector: connect to the peer instead",
            )),
        }
    }

    /// The offer this channel's endpoint was opened with.
    pub fn info(&self) -> &Info {
        match &self.ep {
            Eps::One(ep) => ep.info(),
            Eps::Conns(c) => &c.info,
        }
    }

    /// Runs `f` on the endpoint that reaches `peer`.
    #[inline(always)]
    fn with_ep<R>(&self, peer: Addr, f: impl FnOnce(&Endpoint) -> Result<R>) -> Result<R> {
        match &self.ep {
            Eps::One(ep) => f(ep),
            Eps::Conns(c) => c.with(peer, f),
        }
    }

    /// Cancels the operation with context `ctx` (`fi_cancel`), posted on
    /// the endpoint that reaches `on`.
    pub(crate) fn cancel_ctx(&self, ctx: usize, on: Addr) -> Result<()> {
        self.with_ep(on, |ep| ep.cancel(ctx))
    }

    /// Takes a slot, posts with its context, and returns the handle (or
    /// the buffer back, with the slot freed, when the post fails).
    #[inline(always)]
    fn post<B: Send + 'static>(
        &self,
        buf: Held<B>,
        cancel_on_drop: bool,
        on: Addr,
        f: impl FnOnce(usize) -> Result<()>,
    ) -> Posted<'_, B> {
        let (slot, id, gen) = self.table.open();
        // The context is the slot id + 1, so 0 never names an operation.
        match f(id as usize + 1) {
            Ok(()) => Ok(Op {
                ch: self,
                slot,
                id,
                done: gen | table::DONE,
                buf: Some(buf),
                cancel_on_drop,
                on,
            }),
            Err(error) => {
                self.table.close(id);
                Err(PostError {
                    buf: buf.into_inner(),
                    error,
                })
            }
        }
    }

    /// Collects finished operations without blocking (one progress pass and
    /// up to 16 completions), recording each in its operation; returns how
    /// many were collected.
    #[inline]
    pub fn poll(&self) -> Result<usize> {
        self.parked.sweep();
        let t = &self.table;
        // Each entry goes from the queue straight to its operation's slot.
        // Safe-layer operations hold no wakers.
        let read = self
            .cq
            .core()
            .readfrom_with(16, |e, src| drop(t.record::<false>(e, src)));
        t.bury();
        match read {
            Ok(n) => Ok(n),
            Err(e) => self.poll_failed(e),
        }
    }

    /// An empty queue (0), an error completion to collect, or a queue error.
    #[cold]
    fn poll_failed(&self, e: Error) -> Result<usize> {
        match e {
            e if e.is_again() => Ok(0),
            e if e.code() == errno::FI_EAVAIL => self.reap_err(),
            e => Err(e),
        }
    }

    fn reap_err(&self) -> Result<usize> {
        let e = self.cq.readerr()?;
        let _ = self.table.record_err(&e);
        Ok(1)
    }

    /// Sleeps until the completion queue has an entry or `deadline`
    /// passes (spinning briefly first), and collects what arrived.
    fn block(&self, deadline: Instant) -> Result<()> {
        let left = deadline.saturating_duration_since(Instant::now());
        let t = &self.table;
        let read = self
            .cq
            .core()
            .sreadfrom_with(16, Some(left), |e, src| drop(t.record::<false>(e, src)));
        t.bury();
        match read {
            Ok(_) => Ok(()),
            Err(e) if e.is_again() => Ok(()),
            Err(e) if e.code() == errno::FI_EAVAIL => self.reap_err().map(drop),
            Err(e) => Err(e),
        }
    }

    /// Waits up to `timeout` for any completion (collected as
    /// [`poll`](Self::poll) does); returns how many arrived (0 on timeout).
    pub fn wait_any(&self, timeout: Duration) -> Result<usize> {
        let deadline = Instant::now() + timeout;
        loop {
            let n = self.poll()?;
            if n > 0 || Instant::now() >= deadline {
                return Ok(n);
            }
            self.block(deadline)?;
        }
    }

    /// The next peer write with remote CQ data into this channel's
    /// regions, once [`poll`](Self::poll) has collected it.
    pub fn remote_write(&self) -> Option<RemoteWrite> {
        self.table.pop_remote()
    }

    /// `fi_trywait` on the channel's queue: Ok when it is safe to sleep on
    /// its fd ([`AsFd`]), `FI_EAGAIN` when there is something to collect.
    pub fn trywait(&self) -> Result<()> {
        self.cq.trywait()
    }

    /// The fd to sleep on after a successful [`trywait`](Self::trywait),
    /// beside fds of the caller's own (`poll`, `epoll`): it becomes
    /// readable when the channel's providers have something for the next
    /// poll. Unlike [`as_fd`](AsFd::as_fd) it does not expose the queue's
    /// fd, which from then on is kept readable while completions wait and
    /// costs a system call each time the queue fills or empties. With
    /// manual progress that level is not needed by a caller that calls
    /// `trywait` before every sleep (`trywait` fails while completions wait,
    /// and only the caller's own calls produce them); under automatic
    /// progress a provider thread may queue completions during the sleep,
    /// so this is the exposed fd.
    pub fn sleep_fd(&self) -> BorrowedFd<'_> {
        let info = self.info();
        let manual = info.domain_attr.data_progress != progress::FI_PROGRESS_AUTO
            && info.domain_attr.control_progress != progress::FI_PROGRESS_AUTO;
        if manual {
            self.fd.as_fd()
        } else {
            self.as_fd()
        }
    }

    /// The channel's completion queue (for poll sets).
    pub(crate) fn cq(&self) -> &CompletionQueue {
        &self.cq
    }

    /// The channel's domain (a poll set opens on one).
    pub(crate) fn domain(&self) -> &Domain {
        &self.domain
    }

    /// Operations posted and not yet handed back, including those whose
    /// handles were dropped and whose buffers wait for the provider.
    pub fn in_flight(&self) -> usize {
        self.table.in_flight()
    }
}

/// An open batch of posts on a [`Channel`] ([`Channel::batch`]).
#[derive(Debug)]
#[must_use = "the batch ends when the guard is dropped"]
pub struct Batch<'a> {
    ch: &'a Channel,
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        self.ch.more.set(0);
    }
}

impl AsFd for Channel {
    /// The completion queue's wait fd (for epoll, mio, tokio): readable
    /// while completions wait to be collected; call
    /// [`trywait`](Channel::trywait) before sleeping on it.
    fn as_fd(&self) -> BorrowedFd<'_> {
        // Exposes the queue's fd (from now on readable while completions
        // are queued); the copy shares its epoll instance.
        let _ = self.cq.wait_fd();
        self.fd.as_fd()
    }
}

// These open shm channels (shared memory, level-triggered epoll), which
// Miri cannot run; the table and buffer tests cover the layer under Miri.
#[cfg(all(test, not(miri)))]
mod tests {
    use super::*;
    use crate::{Caps, EpType, ErrorKind, Hints};

    const T: Duration = Duration::from_secs(10);

    fn shm() -> Info {
        Hints::new()
            .caps(Caps::MSG | Caps::TAGGED)
            .ep_type(EpType::Rdm)
            .provider("shm")
            .first()
            .expect("shm offer")
    }

    #[test]
    fn buffers_come_back_with_their_data() {
        let info = shm();
        let a = Channel::open(&info).unwrap();
        let b = Channel::open(&info).unwrap();
        let to_b = a.insert(&b.address().unwrap()).unwrap();
        b.insert(&a.address().unwrap()).unwrap();
        let mut r = b.trecv(vec![0; 100_000], 7, 0).unwrap();
        let mut s = a.tsend(vec![5; 70_000], to_b, 7).unwrap();
        let (rid, sid) = (r.id(), s.id());
        assert_ne!(rid, OpId(0));
        let deadline = Instant::now() + T;
        let (mut sent, mut got) = (None, None);
        while (sent.is_none() || got.is_none()) && Instant::now() < deadline {
            a.poll().unwrap();
            b.poll().unwrap();
            sent = sent.or_else(|| s.check());
            got = got.or_else(|| r.check());
        }
        let sent = sent.expect("send completion").unwrap();
        assert_eq!((sid, sent.buf.len()), (s.id(), 70_000));
        let got = got.expect("receive completion").unwrap();
        assert_eq!((got.len, got.tag), (70_000, 7));
        assert!(got.bytes().iter().all(|&x| x == 5));
        // A handle gives its result once.
        let again = r.check().expect("answered").unwrap_err();
        assert_eq!(again.error.code(), errno::FI_EALREADY);
        assert_eq!(a.in_flight() + b.in_flight(), 0);
    }

    #[test]
    fn a_handle_that_gave_its_result_never_takes_another_operations() {
        let info = shm();
        let a = Channel::open(&info).unwrap();
        let b = Channel::open(&info).unwrap();
        let to_b = a.insert(&b.address().unwrap()).unwrap();
        let mut first = b.trecv(vec![0u8; 8], 1, 0).unwrap();
        a.tsend(b"first".to_vec(), to_b, 1)
            .unwrap()
            .wait(T)
            .unwrap();
        assert_eq!(first.wait(T).unwrap().bytes(), b"first");
        // The slot is free; after 2^30 reuses its generation comes round
        // to the old handle's again (forced here).
        b.table
            .force_generation(first.id, first.done & !table::DONE);
        let mut second = b.trecv(vec![0u8; 8], 2, 0).unwrap();
        assert_eq!(second.id, first.id, "the same slot, reused");
        assert_eq!(second.done, first.done, "under the same key");
        a.tsend(b"second".to_vec(), to_b, 2)
            .unwrap()
            .wait(T)
            .unwrap();
        let deadline = Instant::now() + T;
        while !second.is_done() && Instant::now() < deadline {
            b.poll().unwrap();
        }
        let stale = first.check().expect("answered").unwrap_err();
        assert_eq!(stale.error.code(), errno::FI_EALREADY);
        assert_eq!(second.check().expect("done").unwrap().bytes(), b"second");
    }

    #[test]
    fn operations_past_the_first_slot_chunk_complete_in_their_own_handles() {
        let info = shm();
        let a = Channel::open(&info).unwrap();
        let b = Channel::open(&info).unwrap();
        let to_b = a.insert(&b.address().unwrap()).unwrap();
        b.insert(&a.address().unwrap()).unwrap();
        // More receives in flight than the table's first chunk holds (its
        // later chunks are made while earlier handles keep their slots).
        let n = 150u64;
        let mut rx: Vec<_> = (0..n)
            .map(|t| b.trecv(vec![0u8; 8], t, 0).unwrap())
            .collect();
        assert_eq!(b.in_flight(), n as usize);
        for t in (0..n).rev() {
            let mut s = a.tsend(t.to_ne_bytes().to_vec(), to_b, t).unwrap();
            s.wait(T).unwrap();
        }
        let deadline = Instant::now() + T;
        let mut got: Vec<Option<Done<Vec<u8>>>> = (0..n).map(|_| None).collect();
        while got.iter().any(Option::is_none) && Instant::now() < deadline {
            b.poll().unwrap();
            for (t, op) in rx.iter_mut().enumerate() {
                if got[t].is_none() {
                    got[t] = op.check().map(|r| r.unwrap());
                }
            }
        }
        for (t, d) in got.into_iter().enumerate() {
            let d = d.expect("every receive completed");
            assert_eq!(
                (d.tag, d.bytes()),
                (t as u64, &(t as u64).to_ne_bytes()[..])
            );
        }
        assert_eq!(a.in_flight() + b.in_flight(), 0);
    }

    #[test]
    fn cancelled_receive_hands_the_buffer_back() {
        let a = Channel::open(&shm()).unwrap();
        let mut op = a.recv(vec![1, 2, 3]).unwrap();
        op.cancel().unwrap();
        let e = op.wait(T).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Canceled);
        assert_eq!(e.buf, Some(vec![1, 2, 3]));
        assert_eq!(a.in_flight(), 0);
    }

    #[test]
    fn a_wait_that_times_out_leaves_the_operation_in_flight() {
        let a = Channel::open(&shm()).unwrap();
        let mut op = a.recv(vec![0; 8]).unwrap();
        let e = op.wait(Duration::from_millis(5)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::TimedOut);
        assert!(e.buf.is_none());
        assert!(!op.is_done());
        assert_eq!(a.in_flight(), 1);
        // Dropping it cancels the receive; the buffer waits for the
        // provider's cancellation, then the slot is free.
        drop(op);
        assert_eq!(a.in_flight(), 1);
        let _ = a.wait_any(T).unwrap();
        assert_eq!(a.in_flight(), 0);
    }

    #[test]
    fn a_failed_post_hands_the_buffer_back_and_converts_for_question_mark() {
        let a = Channel::open(&shm()).unwrap();
        let e = a.send(vec![9; 10], Addr(12345)).unwrap_err();
        assert_eq!(e.buf, vec![9; 10]);
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        let f = || -> Result<()> {
            let _op = a.send(vec![1], Addr(12345))?;
            Ok(())
        };
        assert_eq!(f().unwrap_err().code(), errno::FI_EINVAL);
        assert_eq!(a.in_flight(), 0);
    }

    #[test]
    fn one_sided_calls_on_a_channel_without_rma_are_refused_with_the_buffer() {
        let a = Channel::open(&shm()).unwrap();
        let e = a.write(vec![1; 8], Addr(0), 0, 1).unwrap_err();
        assert_eq!((e.kind(), e.buf.len()), (ErrorKind::Unsupported, 8));
        let e = a.fetch_add_u64(Addr(0), 0, 1, 1).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unsupported);
    }
}
