//! The completion queue every provider fills: libfabric's entry layouts,
//! error entries in order, read / readfrom / readerr / sread, and a wait fd.

use super::driver::Driver;
use super::lock::{SpinGuard, SpinLock};
use super::waitset::{join_once, Membership, WaitSetCore, Waitable};
use crate::consts::{cq_format, wait_obj, FI_ADDR_NOTAVAIL};
use crate::error::{errno, Error, Result};
use crate::provider::Progress;
use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// `struct fi_cq_entry`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CqEntry {
    /// The operation's context.
    pub op_context: usize,
}

/// `struct fi_cq_msg_entry`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CqMsgEntry {
    /// The operation's context.
    pub op_context: usize,
    /// Completion flags (FI_SEND, FI_RECV, FI_TAGGED, FI_REMOTE_CQ_DATA, FI_MULTI_RECV …).
    pub flags: u64,
    /// Bytes received.
    pub len: usize,
}

/// `struct fi_cq_data_entry`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CqDataEntry {
    /// The operation's context.
    pub op_context: usize,
    /// Completion flags.
    pub flags: u64,
    /// Bytes received.
    pub len: usize,
    /// Where the data landed (multi-receive).
    pub buf: usize,
    /// Remote CQ data.
    pub data: u64,
}

/// `struct fi_cq_tagged_entry`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CqTaggedEntry {
    /// The operation's context.
    pub op_context: usize,
    /// Completion flags.
    pub flags: u64,
    /// Bytes received.
    pub len: usize,
    /// Where the data landed (multi-receive).
    pub buf: usize,
    /// Remote CQ data.
    pub data: u64,
    /// The message's tag.
    pub tag: u64,
}

/// `struct fi_cq_err_entry` (1.5 layout).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CqErrEntry {
    /// The operation's context.
    pub op_context: usize,
    /// Completion flags.
    pub flags: u64,
    /// Bytes transferred.
    pub len: usize,
    /// Buffer.
    pub buf: usize,
    /// Remote CQ data.
    pub data: u64,
    /// Tag.
    pub tag: u64,
    /// Bytes that did not fit (truncation).
    pub olen: usize,
    /// Positive `FI_E*` error number.
    pub err: i32,
    /// Provider error number.
    pub prov_errno: i32,
    /// Provider error data (unused: always null).
    pub err_data: usize,
    /// Provider error data size.
    pub err_data_size: usize,
}

const _: () = assert!(std::mem::size_of::<CqTaggedEntry>() == 48);
const _: () = assert!(std::mem::size_of::<CqErrEntry>() == 80);

/// An entry format a CQ can be read in.
pub trait CqFormat: Copy + Default {
    /// The libfabric format number.
    const FORMAT: u32;
    /// Builds the entry from a full completion.
    fn from_tagged(e: &CqTaggedEntry) -> Self;
}

impl CqFormat for CqEntry {
    const FORMAT: u32 = cq_format::FI_CQ_FORMAT_CONTEXT;
    #[inline]
    fn from_tagged(e: &CqTaggedEntry) -> Self {
        CqEntry {
            op_context: e.op_context,
        }
    }
}
impl CqFormat for CqMsgEntry {
    const FORMAT: u32 = cq_format::FI_CQ_FORMAT_MSG;
    #[inline]
    fn from_tagged(e: &CqTaggedEntry) -> Self {
        CqMsgEntry {
            op_context: e.op_context,
            flags: e.flags,
            len: e.len,
        }
    }
}
impl CqFormat for CqDataEntry {
    const FORMAT: u32 = cq_format::FI_CQ_FORMAT_DATA;
    #[inline]
    fn from_tagged(e: &CqTaggedEntry) -> Self {
        CqDataEntry {
            op_context: e.op_context,
            flags: e.flags,
            len: e.len,
            buf: e.buf,
            data: e.data,
        }
    }
}
impl CqFormat for CqTaggedEntry {
    const FORMAT: u32 = cq_format::FI_CQ_FORMAT_TAGGED;
    #[inline]
    fn from_tagged(e: &CqTaggedEntry) -> Self {
        *e
    }
}

/// Completion queue attributes (`struct fi_cq_attr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqAttr {
    /// Queue depth (0: provider default).
    pub size: usize,
    /// Entry format (`cq_format::*`).
    pub format: u32,
    /// Wait object (`wait_obj::*`).
    pub wait_obj: u32,
}

impl Default for CqAttr {
    fn default() -> Self {
        CqAttr {
            size: 0,
            format: cq_format::FI_CQ_FORMAT_CONTEXT,
            wait_obj: wait_obj::FI_WAIT_UNSPEC,
        }
    }
}

/// The queued completions: successes in a ring, errors beside it, each
/// error marked with its place in the stream (the number of successes
/// queued before it), so entries are read in the order they were written.
struct Queue {
    /// Successful entries with their source addresses; the capacity is a
    /// power of two and grows when full (nothing is ever dropped).
    ring: Vec<(CqTaggedEntry, u64)>,
    /// Index of the oldest success in `ring`.
    head: usize,
    /// Successes queued.
    len: usize,
    /// Successes ever taken: the stream position of `ring[head]`.
    taken: u64,
    /// Error entries, oldest first, each with the stream position of the
    /// success it precedes.
    errs: VecDeque<(u64, CqErrEntry)>,
    /// The stream position of the oldest error (`u64::MAX`: none).
    next_err: u64,
}

impl Queue {
    fn with_capacity(n: usize) -> Queue {
        Queue {
            ring: vec![Default::default(); n.next_power_of_two().max(1)],
            head: 0,
            len: 0,
            taken: 0,
            errs: VecDeque::new(),
            next_err: u64::MAX,
        }
    }

    /// Entries queued, successes and errors.
    #[inline]
    fn total(&self) -> usize {
        self.len + self.errs.len()
    }

    #[inline(always)]
    fn push(&mut self, e: CqTaggedEntry, src: u64) {
        if self.len == self.ring.len() {
            self.grow();
        }
        let mask = self.ring.len() - 1;
        let at = (self.head + self.len) & mask;
        self.ring[at] = (e, src);
        self.len += 1;
    }

    #[cold]
    fn grow(&mut self) {
        let n = self.ring.len();
        let mut ring = vec![Default::default(); n * 2];
        for (i, slot) in ring.iter_mut().take(self.len).enumerate() {
            *slot = self.ring[(self.head + i) & (n - 1)];
        }
        self.ring = ring;
        self.head = 0;
    }

    fn push_err(&mut self, e: CqErrEntry) {
        let at = self.taken + self.len as u64;
        if self.errs.is_empty() {
            self.next_err = at;
        }
        self.errs.push_back((at, e));
    }

    fn pop_err(&mut self) -> Option<CqErrEntry> {
        let (_, e) = self.errs.pop_front()?;
        self.next_err = self.errs.front().map_or(u64::MAX, |(at, _)| *at);
        Some(e)
    }

    /// True when the next entry in the stream is an error.
    #[inline]
    fn error_next(&self) -> bool {
        self.next_err == self.taken
    }

    /// The oldest success, if it comes before any error.
    #[inline]
    fn front(&self) -> Option<&(CqTaggedEntry, u64)> {
        if self.len == 0 || self.error_next() {
            return None;
        }
        self.ring.get(self.head)
    }

    #[inline]
    fn pop(&mut self) {
        self.head = (self.head + 1) & (self.ring.len() - 1);
        self.len -= 1;
        self.taken += 1;
    }
}

/// An entry [`CqCore::drain`] took.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Drained {
    /// A success, with its source address.
    Ok(CqTaggedEntry, u64),
    /// An error entry.
    Err(CqErrEntry),
}

/// The completion queue shared by the core and providers.
pub struct CqCore {
    /// The wait set this object belongs to (FI_WAIT_SET). Declared first:
    /// it leaves the set before its wait fd closes.
    in_set: OnceLock<Membership>,
    attr: CqAttr,
    queue: SpinLock<Queue>,
    driver: Driver,
    /// Entries queued, as last seen under the lock: lets an empty poll skip it.
    queued: AtomicUsize,
    /// Endpoints bound to this queue (a busy queue cannot close).
    pub(crate) bound: AtomicUsize,
}

impl std::fmt::Debug for CqCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CqCore").field("attr", &self.attr).finish()
    }
}

/// Default queue depth.
pub const DEFAULT_CQ_SIZE: usize = 1024;

impl CqCore {
    /// Creates a queue; an unknown format or wait object is `FI_EINVAL`.
    pub fn new(attr: &CqAttr) -> Result<Arc<Self>> {
        let mut attr = *attr;
        if attr.format == cq_format::FI_CQ_FORMAT_UNSPEC {
            attr.format = cq_format::FI_CQ_FORMAT_CONTEXT;
        }
        if attr.format > cq_format::FI_CQ_FORMAT_TAGGED {
            return Err(Error::inval(format!(
                "cq_attr.format = {} is not a CQ format",
                attr.format
            )));
        }
        let waitable = match attr.wait_obj {
            wait_obj::FI_WAIT_NONE => false,
            wait_obj::FI_WAIT_UNSPEC
            | wait_obj::FI_WAIT_FD
            | wait_obj::FI_WAIT_YIELD
            | wait_obj::FI_WAIT_POLLFD
            | wait_obj::FI_WAIT_SET => true,
            wait_obj::FI_WAIT_MUTEX_COND => {
                return Err(Error::nosys(format!(
                    "cq_attr.wait_obj = {} is not supported",
                    attr.wait_obj
                )));
            }
            v => {
                return Err(Error::inval(format!(
                    "cq_attr.wait_obj = {v} is not a wait object"
                )))
            }
        };
        if attr.size == 0 {
            attr.size = DEFAULT_CQ_SIZE;
        }
        if attr.size > 1 << 24 {
            return Err(Error::inval(format!(
                "cq_attr.size = {} is larger than 16M entries",
                attr.size
            )));
        }
        Ok(Arc::new(CqCore {
            in_set: OnceLock::new(),
            attr,
            queue: SpinLock::new(Queue::with_capacity(attr.size.min(4096))),
            driver: Driver::new(waitable)?,
            queued: AtomicUsize::new(0),
            bound: AtomicUsize::new(0),
        }))
    }

    /// The attributes in force.
    pub fn attr(&self) -> &CqAttr {
        &self.attr
    }

    /// The driver (bound endpoints, waiting).
    pub fn driver(&self) -> &Driver {
        &self.driver
    }

    /// Joins a wait set (the object was opened with FI_WAIT_SET).
    pub fn join(self: &Arc<Self>, set: &Arc<WaitSetCore>) -> Result<()> {
        let me: Arc<dyn Waitable> = self.clone();
        join_once(&self.in_set, set, me)
    }

    /// The wait set this object belongs to, if any.
    pub fn wait_set(&self) -> Option<&Arc<WaitSetCore>> {
        self.in_set.get().map(Membership::set)
    }

    #[inline]
    fn lock(&self) -> SpinGuard<'_, Queue> {
        self.queue.lock()
    }

    /// Provider side: writes a successful completion with its source address.
    #[inline(always)]
    pub fn push(&self, e: CqTaggedEntry, src: u64) {
        let mut q = self.lock();
        q.push(e, src);
        let n = q.total();
        self.queued.store(n, Ordering::Release);
        drop(q);
        if n == 1 {
            self.changed();
        }
        self.driver.wake();
    }

    /// Provider side: writes an error completion.
    pub fn push_err(&self, e: CqErrEntry, src: u64) {
        let _ = src;
        let mut q = self.lock();
        q.push_err(e);
        self.queued.store(q.total(), Ordering::Release);
        drop(q);
        self.changed();
        self.driver.wake();
    }

    /// After entries came or went: an exposed wait fd is readable while
    /// entries are queued.
    #[inline]
    fn changed(&self) {
        self.driver
            .set_ready(|| self.queued.load(Ordering::Acquire) != 0);
    }

    /// True when entries (successes or errors) are queued: what a poll set
    /// or wait set reports. Runs no progress.
    #[inline]
    pub fn has_events(&self) -> bool {
        self.queued.load(Ordering::Acquire) != 0
    }

    /// Number of queued entries (successes and errors).
    pub fn len(&self) -> usize {
        self.lock().total()
    }

    /// True when nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Takes every queued entry, successes and errors, in the order they
    /// were written (appended to `out`): the consumer side of a queue that
    /// relays a provider's completions ([`crate::coll`]'s relay).
    pub(crate) fn drain(&self, out: &mut Vec<Drained>) {
        if self.queued.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut q = self.lock();
        loop {
            if q.error_next() {
                if let Some(e) = q.pop_err() {
                    out.push(Drained::Err(e));
                    continue;
                }
            }
            let Some(&(e, src)) = q.front() else {
                break;
            };
            q.pop();
            out.push(Drained::Ok(e, src));
        }
        self.queued.store(q.total(), Ordering::Release);
        drop(q);
        self.changed();
    }

    /// Copies up to `out.len()` successful entries (and their source
    /// addresses, into `src` when given) in order; the errors as
    /// [`take_with`](Self::take_with) gives them.
    #[inline]
    fn take<E: CqFormat>(&self, out: &mut [E], src: Option<&mut [u64]>) -> Result<usize> {
        if self.queued.load(Ordering::Acquire) == 0 {
            return Err(Error::again());
        }
        if out.is_empty() {
            return Ok(0);
        }
        let mut q = self.lock();
        // Successes before the next error, at most what fits.
        let ready = if q.next_err == u64::MAX {
            q.len
        } else {
            (q.next_err - q.taken).min(q.len as u64) as usize
        };
        let n = ready.min(out.len());
        if n == 0 {
            let next_is_err = q.error_next();
            drop(q);
            return Err(if next_is_err {
                Error::new(
                    errno::FI_EAVAIL,
                    "an error completion is available: call readerr",
                )
            } else {
                Error::again()
            });
        }
        let mask = q.ring.len() - 1;
        let head = q.head;
        for (i, o) in out[..n].iter_mut().enumerate() {
            *o = E::from_tagged(&q.ring[(head + i) & mask].0);
        }
        if let Some(sv) = src {
            for (i, s) in sv.iter_mut().take(n).enumerate() {
                *s = q.ring[(head + i) & mask].1;
            }
        }
        q.head = (head + n) & mask;
        q.len -= n;
        q.taken += n as u64;
        let left = q.total();
        self.queued.store(left, Ordering::Release);
        drop(q);
        if left == 0 {
            self.changed();
        }
        Ok(n)
    }

    /// Takes up to `max` successful entries in order, handing each, with
    /// its source address, to `f` (which runs under the queue's lock and
    /// must not call back into this queue). `FI_EAGAIN` when none is
    /// queued, `FI_EAVAIL` when an error entry is next; `max` 0 only
    /// answers whether entries wait (0 when they do).
    #[inline]
    fn take_with(&self, max: usize, mut f: impl FnMut(&CqTaggedEntry, u64)) -> Result<usize> {
        if self.queued.load(Ordering::Acquire) == 0 {
            return Err(Error::again());
        }
        // Room for none (`fi_cq_read(cq, NULL, 0)`, a progress call): 0
        // when entries wait, as libfabric answers.
        if max == 0 {
            return Ok(0);
        }
        let mut q = self.lock();
        let mut n = 0;
        while n < max {
            let Some((e, s)) = q.front() else {
                break;
            };
            f(e, *s);
            q.pop();
            n += 1;
        }
        if n == 0 {
            return Err(if q.error_next() {
                Error::new(
                    errno::FI_EAVAIL,
                    "an error completion is available: call readerr",
                )
            } else {
                Error::again()
            });
        }
        let left = q.total();
        self.queued.store(left, Ordering::Release);
        drop(q);
        if left == 0 {
            self.changed();
        }
        Ok(n)
    }

    /// `fi_cq_read`: drives progress, then returns up to `out.len()` entries.
    /// `FI_EAGAIN` when empty; `FI_EAVAIL` when an error entry is next. An
    /// empty `out` only drives progress: 0 when entries are queued, else
    /// `FI_EAGAIN`.
    #[inline]
    pub fn read<E: CqFormat>(&self, out: &mut [E]) -> Result<usize> {
        self.driver.progress();
        self.take(out, None)
    }

    /// `fi_cq_readfrom`: as `read`, also giving each entry's source address
    /// (`FI_ADDR_NOTAVAIL` when unknown).
    pub fn readfrom<E: CqFormat>(&self, out: &mut [E], src: &mut [u64]) -> Result<usize> {
        self.driver.progress();
        self.take(out, Some(src))
    }

    /// `readfrom` without the copy into an array: drives progress, then
    /// hands up to `max` entries, each with its source address, to `f` in
    /// queue order (under the queue's lock: `f` must not call back into
    /// this queue). For layers that file each completion where it belongs.
    #[inline]
    pub fn readfrom_with(&self, max: usize, f: impl FnMut(&CqTaggedEntry, u64)) -> Result<usize> {
        self.driver.progress();
        self.take_with(max, f)
    }

    /// `sreadfrom` as [`readfrom_with`](Self::readfrom_with) reads: blocks
    /// up to `timeout` (None: forever) for entries, then hands them to `f`.
    pub fn sreadfrom_with(
        &self,
        max: usize,
        timeout: Option<Duration>,
        f: impl FnMut(&CqTaggedEntry, u64),
    ) -> Result<usize> {
        self.sblock(timeout)?;
        self.take_with(max, f)
    }

    /// `fi_cq_readerr`: takes the next error entry.
    pub fn readerr(&self) -> Result<CqErrEntry> {
        self.driver.progress();
        let mut q = self.lock();
        match q.pop_err() {
            Some(e) => {
                self.queued.store(q.total(), Ordering::Release);
                drop(q);
                self.changed();
                Ok(e)
            }
            None => Err(Error::again()),
        }
    }

    /// `fi_cq_sread`: blocks up to `timeout` (None: forever) for entries.
    pub fn sread<E: CqFormat>(&self, out: &mut [E], timeout: Option<Duration>) -> Result<usize> {
        self.sreadfrom_inner(out, None, timeout)
    }

    /// `fi_cq_sreadfrom`.
    pub fn sreadfrom<E: CqFormat>(
        &self,
        out: &mut [E],
        src: &mut [u64],
        timeout: Option<Duration>,
    ) -> Result<usize> {
        self.sreadfrom_inner(out, Some(src), timeout)
    }

    fn sreadfrom_inner<E: CqFormat>(
        &self,
        out: &mut [E],
        src: Option<&mut [u64]>,
        timeout: Option<Duration>,
    ) -> Result<usize> {
        self.sblock(timeout)?;
        self.take(out, src)
    }

    /// Blocks until entries are queued (Ok) or `timeout` passes.
    fn sblock(&self, timeout: Option<Duration>) -> Result<()> {
        if self.driver.waits().is_none() {
            return Err(Error::new(
                errno::FI_ENOSYS,
                "sread on a CQ opened with FI_WAIT_NONE",
            ));
        }
        self.driver.block(timeout, || self.has_events())
    }

    /// `fi_cq_signal`: wakes a blocked `sread`.
    pub fn signal(&self) {
        self.driver.signal();
    }

    /// The wait fd for epoll (`FI_GETWAIT`); none for `FI_WAIT_NONE`. It
    /// is readable while entries are queued (no `trywait` needed for
    /// those) and when a bound endpoint's wake-up fd is (`trywait` first).
    pub fn wait_fd(&self) -> Option<RawFd> {
        let fd = self.driver.expose();
        self.changed();
        fd
    }

    /// `fi_trywait`: arms bound endpoints and returns Ok when it is safe to
    /// block on the wait fd, `FI_EAGAIN` when entries are ready.
    pub fn trywait(&self) -> Result<()> {
        self.driver.progress();
        if self.lock().total() != 0 || !self.driver.trywait() {
            return Err(Error::again());
        }
        if self.lock().total() != 0 {
            return Err(Error::again());
        }
        Ok(())
    }

    /// Attaches an endpoint's progress.
    pub fn attach(&self, p: Arc<dyn Progress>) -> Result<()> {
        self.driver.attach(p)
    }

    /// Detaches an endpoint.
    pub fn detach(&self, p: &Arc<dyn Progress>) {
        self.driver.detach(p)
    }
}

/// A convenience for providers: a successful completion.
pub fn completion(
    op_context: usize,
    flags: u64,
    len: usize,
    buf: usize,
    data: u64,
    tag: u64,
) -> CqTaggedEntry {
    CqTaggedEntry {
        op_context,
        flags,
        len,
        buf,
        data,
        tag,
    }
}

/// A convenience for providers: an error completion.
pub fn error_completion(
    op_context: usize,
    flags: u64,
    err: i32,
    len: usize,
    olen: usize,
    tag: u64,
) -> CqErrEntry {
    CqErrEntry {
        op_context,
        flags,
        len,
        olen,
        err,
        tag,
        ..Default::default()
    }
}

/// Source address value when the sender is not in the AV.
pub const SRC_UNKNOWN: u64 = FI_ADDR_NOTAVAIL;
