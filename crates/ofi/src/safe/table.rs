//! The operations in flight of one channel, shared by the safe and async
//! layers: a slot per operation (its context is the slot index + 1), the
//! completion recorded in place when the queue reports it, a waker for the
//! async layer, and the buffers of abandoned operations kept until the
//! provider is done with them.

use crate::consts::*;
use crate::{CqErrEntry, CqTaggedEntry, Error};
use std::any::Any;
use std::cell::{Cell, OnceCell, RefCell};
use std::collections::VecDeque;
use std::task::Waker;

/// How a finished operation went, read out of its slot when its handle
/// takes it.
pub(crate) type Taken = std::result::Result<Report, Failed>;

/// A successful operation's report.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Report {
    pub len: usize,
    pub tag: u64,
    pub data: Option<u64>,
    pub src: Option<super::Addr>,
}

/// A failed operation: the error number and the lengths it reported.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Failed {
    /// Positive FI_E* number.
    pub err: i32,
    pub len: usize,
    /// Bytes that did not fit (truncation).
    pub olen: usize,
}

impl Failed {
    /// The error to hand the owner.
    #[cold]
    #[inline(never)]
    pub(crate) fn error(&self) -> Error {
        Error::new(
            self.err,
            format!(
                "operation failed (len {}, overflow {})",
                self.len, self.olen
            ),
        )
    }
}

/// A peer's write (or atomic) with remote CQ data that landed in one of
/// the channel's regions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteWrite {
    /// Bytes written.
    pub len: usize,
    /// The data the peer attached.
    pub data: u64,
    /// The peer, if it is in the address vector.
    pub src: Option<super::Addr>,
}

/// The state bits of a slot's key (its low two bits).
const STATE: u32 = 0b11;
/// On the free list.
const FREE: u32 = 0;
/// Posted; its waker (async) is the task to wake when it completes.
const PENDING: u32 = 1;
/// Completed (the outcome fields say how), waiting for its handle.
pub(crate) const DONE: u32 = 2;
/// Its handle is gone; its orphan holds the buffers until the completion.
const ORPHAN: u32 = 3;

/// One operation's hot state, one cache line: the key that says whether it
/// is done and the outcome written in place from its queue entry (field
/// by field: building an outcome and copying it whole stalled on store
/// forwarding, about 15 ns per completion).
/// The entry's fields sit in the entry's order, so `record` copies them in
/// wide moves. Cells: a safe-layer handle keeps a reference to its slot
/// (slots never move while the table lives), and the table changes slots
/// through shared references, so neither needs a borrow flag.
#[repr(C, align(64))]
pub(crate) struct Slot {
    /// The generation (high 30 bits) and the state (low 2 bits): a handle
    /// holds its generation, so "is my operation done" is one compare.
    key: Cell<u32>,
    next: Cell<u32>,
    /// Positive FI_E* number once a failure is recorded; 0 otherwise (set
    /// only by `fail`, cleared when the slot leaves DONE), so a success
    /// need not write it.
    err: Cell<i32>,
    flags: Cell<u64>,
    len: Cell<usize>,
    data: Cell<u64>,
    tag: Cell<u64>,
    src: Cell<u64>,
    /// Bytes that did not fit (truncation); read only when `err` is set.
    olen: Cell<usize>,
}

const _: () = assert!(std::mem::size_of::<Slot>() == 64);

impl Slot {
    fn new() -> Slot {
        Slot {
            key: Cell::new(FREE),
            next: Cell::new(NONE),
            err: Cell::new(0),
            flags: Cell::new(0),
            len: Cell::new(0),
            data: Cell::new(0),
            tag: Cell::new(0),
            src: Cell::new(FI_ADDR_NOTAVAIL),
            olen: Cell::new(0),
        }
    }

    /// True when the operation whose slot holds key `done` (generation |
    /// DONE) once done has completed.
    #[inline(always)]
    pub(crate) fn is_done(&self, done: u32) -> bool {
        self.key.get() == done
    }
}

/// What only the slower paths touch, kept beside the slots: the waker of
/// an async operation and the buffers of an abandoned one.
#[derive(Default)]
struct Extra {
    waker: Cell<Option<Waker>>,
    orphan: Cell<Option<Box<dyn Any + Send>>>,
}

const NONE: u32 = u32::MAX;

/// Slot ids: the chunk in the high bits, the slot within it in the low
/// ones. Chunk `k` holds `BASE << k` slots; the first is made with the
/// table (its ids are the ids below `BASE`: one compare to find a slot),
/// the others when the ones before are all in use. A made chunk stays
/// (and stays put) until the table drops.
const OFF_BITS: u32 = 26;
const OFF_MASK: u32 = (1 << OFF_BITS) - 1;
const BASE: usize = 64;
/// 2^26 slots in the last chunk: about 2^27 operations in flight at most.
const CHUNKS: usize = 21;

const _: () = assert!(BASE << (CHUNKS - 1) == 1 << OFF_BITS);

/// A slot and its extra (in the next cache line).
struct Entry {
    s: Slot,
    x: Extra,
}

impl Entry {
    fn new() -> Entry {
        Entry {
            s: Slot::new(),
            x: Extra::default(),
        }
    }
}

/// A run of slots.
type Chunk = Box<[Entry]>;

/// The slots, a free list through them, and remote-write events.
///
/// Every method takes `&self`: the table's state is in cells, so a safe
/// channel needs no borrow flag around it and a handle can keep its slot.
/// Methods run no code of an operation's owner while they change the
/// table (buffers to drop are dropped after, or kept for
/// [`bury`](Self::bury)), so nothing can re-enter it half-way.
pub(crate) struct Table {
    /// Chunk 0.
    first: Box<[Entry; BASE]>,
    /// Chunks 1 and on.
    more: [OnceCell<Chunk>; CHUNKS - 1],
    /// Head of the free list (`NONE`: empty).
    free: Cell<u32>,
    /// Slots made so far, counted over the chunks in order.
    made: Cell<u32>,
    remote: RefCell<VecDeque<RemoteWrite>>,
    /// Buffers of orphans whose completion was recorded, to drop once the
    /// queue's lock is released ([`bury`](Self::bury)): dropping a buffer
    /// runs its owner's code, which must not run under that lock.
    dead: RefCell<Vec<Box<dyn Any + Send>>>,
    /// True while `dead` holds something (a flag read on every poll).
    any_dead: Cell<bool>,
    /// Buffers of operations that failed with FI_ETIMEDOUT are kept for
    /// good: the provider lets a peer declared dead by silence (maybe
    /// alive) write into this process's memory (as shm, and hybrid through
    /// it, copy across processes). See [`late_writes`].
    pub keep_timed_out: Cell<bool>,
}

/// Whether the registered provider of this name lets peers write into this
/// process's memory themselves (cross-process copies), so that one
/// declared dead by silence may still write after its operations failed:
/// what the provider declares ([`Provider::late_writes`]).
///
/// [`Provider::late_writes`]: ofi_core::provider::Provider::late_writes
pub(crate) fn late_writes(provider: &str) -> bool {
    ofi_core::registry::provider(provider).is_some_and(|p| p.late_writes())
}

impl Default for Table {
    fn default() -> Table {
        Table {
            first: (0..BASE)
                .map(|_| Entry::new())
                .collect::<Box<[Entry]>>()
                .try_into()
                .unwrap_or_else(|_| unreachable!("BASE entries")),
            more: Default::default(),
            free: Cell::new(NONE),
            made: Cell::new(0),
            remote: Default::default(),
            dead: Default::default(),
            any_dead: Cell::new(false),
            keep_timed_out: Cell::new(false),
        }
    }
}

impl Table {
    /// The slot (and its extra) of id `i`, if it was made (ids past
    /// `u32::MAX` name no chunk).
    #[inline(always)]
    fn at(&self, i: usize) -> Option<(&Slot, &Extra)> {
        let e = match self.first.get(i) {
            Some(e) => e,
            None => self.at_more(i)?,
        };
        Some((&e.s, &e.x))
    }

    /// An entry past the first chunk.
    #[inline(never)]
    fn at_more(&self, i: usize) -> Option<&Entry> {
        let c = self.more.get((i >> OFF_BITS).checked_sub(1)?)?.get()?;
        c.get(i & OFF_MASK as usize)
    }

    /// The slot of id `i`, if it was made.
    #[inline(always)]
    fn slot(&self, i: usize) -> Option<&Slot> {
        self.at(i).map(|(s, _)| s)
    }

    /// As [`at`](Self::at), for the holder of the table itself.
    #[inline(always)]
    fn at_mut(&mut self, i: usize) -> Option<&mut Entry> {
        if i < BASE {
            return self.first.get_mut(i);
        }
        let c = self
            .more
            .get_mut((i >> OFF_BITS).checked_sub(1)?)?
            .get_mut()?;
        c.get_mut(i & OFF_MASK as usize)
    }

    /// A slot for a new operation: the slot, its id and its generation.
    #[inline(always)]
    pub fn open(&self) -> (&Slot, u32, u32) {
        let i = self.free.get();
        if let Some(s) = self.slot(i as usize) {
            self.free.set(s.next.get());
            let gen = s.key.get() & !STATE;
            s.key.set(gen | PENDING);
            return (s, i, gen);
        }
        self.open_new()
    }

    /// A slot never used before, in a new chunk when the last is full.
    #[cold]
    fn open_new(&self) -> (&Slot, u32, u32) {
        let n = self.made.get() as usize;
        // Chunk k starts at slot number BASE * (2^k - 1).
        let k = (n / BASE + 1).ilog2() as usize;
        let off = n - BASE * ((1 << k) - 1);
        let c: &[Entry] = match k.checked_sub(1) {
            None => &self.first[..],
            Some(m) => {
                let Some(cell) = self.more.get(m) else {
                    // 2^27 operations in flight: the process has run out of
                    // memory long before.
                    panic!("ofi: more than {n} operations in flight");
                };
                cell.get_or_init(|| (0..BASE << k).map(|_| Entry::new()).collect())
            }
        };
        self.made.set(n as u32 + 1);
        let i = (k as u32) << OFF_BITS | off as u32;
        let s = &c[off].s;
        s.key.set(PENDING);
        (s, i, 0)
    }

    /// Returns live slot `s` (id `i`) to the free list under a new
    /// generation; its waker and orphan (if any) come back to drop.
    #[must_use]
    fn free_slot(
        &self,
        s: &Slot,
        x: &Extra,
        i: u32,
    ) -> (Option<Waker>, Option<Box<dyn Any + Send>>) {
        s.key.set((s.key.get() & !STATE).wrapping_add(STATE + 1));
        s.err.set(0);
        s.next.set(self.free.get());
        self.free.set(i);
        (x.waker.take(), x.orphan.take())
    }

    /// Returns a slot to the free list (a new generation).
    #[inline(always)]
    pub fn close(&self, i: u32) {
        if let Some((s, x)) = self.at(i as usize) {
            if s.key.get() & STATE != FREE {
                drop(self.free_slot(s, x, i));
            }
        }
    }

    /// The slot of a live handle (index and generation agree).
    #[inline(always)]
    fn live_at(&self, i: u32, gen: u32) -> Option<(&Slot, &Extra)> {
        self.at(i as usize)
            .filter(|(s, _)| s.key.get() & !STATE == gen && s.key.get() & STATE != FREE)
    }

    /// Records a queue entry: an operation's completion, or a remote
    /// write. With `WAKERS` (the async layer) returns the waker to wake;
    /// the safe layer's operations hold none. Runs no code of the
    /// operation's owner (an orphan's buffers wait for
    /// [`bury`](Self::bury)), so it may run under the queue's lock.
    #[inline(always)]
    pub fn record<const WAKERS: bool>(&self, e: &CqTaggedEntry, src: u64) -> Option<Waker> {
        // The context is the slot id + 1 (0 wraps to a missing slot). A
        // peer's write with CQ data names no operation, whatever context
        // the provider left in it.
        let i = e.op_context.wrapping_sub(1);
        match self.at(i) {
            Some((s, x)) if s.key.get() & STATE == PENDING && e.flags & REMOTE != REMOTE => {
                s.flags.set(e.flags);
                s.len.set(e.len);
                s.data.set(e.data);
                s.tag.set(e.tag);
                s.src.set(src);
                s.key.set(s.key.get() + (DONE - PENDING));
                if WAKERS {
                    x.waker.take()
                } else {
                    None
                }
            }
            _ => {
                self.record_other(e, src);
                None
            }
        }
    }

    /// A remote write, an orphan's completion, or an entry naming no
    /// operation in flight (ignored).
    #[cold]
    fn record_other(&self, e: &CqTaggedEntry, src: u64) {
        if e.flags & REMOTE == REMOTE {
            return self.record_remote(e, src);
        }
        let i = e.op_context.wrapping_sub(1);
        if let Some((s, x)) = self.at(i).filter(|(s, _)| s.key.get() & STATE == ORPHAN) {
            // The provider is done with the orphan's buffers.
            let (_, orphan) = self.free_slot(s, x, i as u32);
            if let Some(o) = orphan {
                self.dead.borrow_mut().push(o);
                self.any_dead.set(true);
            }
        }
    }

    /// Drops the buffers of orphans recorded since the last call.
    #[inline(always)]
    pub fn bury(&self) {
        if self.any_dead.get() {
            self.bury_dead();
        }
    }

    #[cold]
    fn bury_dead(&self) {
        drop(self.take_dead());
    }

    /// True while buffers of finished orphans wait to be dropped.
    #[inline(always)]
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub fn has_dead(&self) -> bool {
        self.any_dead.get()
    }

    /// The buffers of finished orphans, out of the table (a buffer's drop
    /// may come back to it), for the caller to drop once it released the
    /// queue's lock.
    #[cold]
    pub fn take_dead(&self) -> Vec<Box<dyn Any + Send>> {
        self.any_dead.set(false);
        std::mem::take(&mut *self.dead.borrow_mut())
    }

    #[cold]
    fn record_remote(&self, e: &CqTaggedEntry, src: u64) {
        self.remote.borrow_mut().push_back(RemoteWrite {
            len: e.len,
            data: e.data,
            src: (src != FI_ADDR_NOTAVAIL).then_some(super::Addr(src)),
        });
    }

    /// The next remote write recorded.
    pub fn pop_remote(&self) -> Option<RemoteWrite> {
        self.remote.borrow_mut().pop_front()
    }

    /// Ends pending operation `s` with an error (its outcome fields say
    /// how); returns its waker.
    fn fail(s: &Slot, x: &Extra, err: i32, len: usize, tag: u64, olen: usize) -> Option<Waker> {
        s.err.set(err.max(1));
        s.len.set(len);
        s.tag.set(tag);
        s.olen.set(olen);
        s.key.set(s.key.get() + (DONE - PENDING));
        x.waker.take()
    }

    /// Records an error completion.
    pub fn record_err(&self, e: &CqErrEntry) -> Option<Waker> {
        let i = e.op_context.wrapping_sub(1);
        let (s, x) = self.at(i)?;
        match s.key.get() & STATE {
            PENDING => Self::fail(s, x, e.err, e.len, e.tag, e.olen),
            ORPHAN => {
                let (waker, orphan) = self.free_slot(s, x, i as u32);
                drop(waker);
                if e.err == crate::errno::FI_ETIMEDOUT && self.keep_timed_out.get() {
                    // The silent peer may still write into the buffers.
                    std::mem::forget(orphan);
                } else if let Some(o) = orphan {
                    // Dropped by `bury`, after the queue's lock.
                    self.dead.borrow_mut().push(o);
                    self.any_dead.set(true);
                }
                None
            }
            _ => None,
        }
    }

    /// Gives up an operation's handle: a pending one keeps `bufs` until
    /// its completion (`None`); a done one frees its slot and hands `bufs`
    /// back, for the caller to drop once it released the queue's lock
    /// (dropping a buffer runs its owner's code).
    #[must_use]
    pub fn orphan<B: Send + 'static>(&self, i: u32, gen: u32, bufs: B) -> Option<B> {
        let Some((s, x)) = self.live_at(i, gen) else {
            return Some(bufs);
        };
        if s.key.get() & STATE == PENDING {
            s.key.set(gen | ORPHAN);
            let waker = x.waker.take();
            x.orphan.set(Some(Box::new(bufs)));
            drop(waker);
            None
        } else {
            // A done slot holds no waker and no orphan: its handle is live.
            drop(self.free_slot(s, x, i));
            Some(bufs)
        }
    }

    /// Every made slot with its extra and id.
    fn all(&self) -> impl Iterator<Item = (&Slot, &Extra, u32)> {
        let more = self.more.iter().filter_map(OnceCell::get);
        std::iter::once(&self.first[..])
            .chain(more.map(|c| &c[..]))
            .enumerate()
            .flat_map(|(k, c)| {
                c.iter()
                    .enumerate()
                    .map(move |(off, e)| (&e.s, &e.x, (k as u32) << OFF_BITS | off as u32))
            })
    }

    /// Ends every pending operation with `err` (the endpoint is gone);
    /// orphans are freed (their buffers wait for [`bury`](Self::bury) or
    /// [`take_dead`](Self::take_dead)). Returns the wakers to wake.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub fn end_all(&self, err: i32) -> Vec<Waker> {
        let mut wake = Vec::new();
        for (s, x, i) in self.all() {
            match s.key.get() & STATE {
                PENDING => wake.extend(Self::fail(s, x, err, 0, 0, 0)),
                ORPHAN => {
                    let (waker, orphan) = self.free_slot(s, x, i);
                    wake.extend(waker);
                    if let Some(o) = orphan {
                        self.dead.borrow_mut().push(o);
                        self.any_dead.set(true);
                    }
                }
                _ => {}
            }
        }
        wake
    }

    /// Frees slot `s` (id `i`) of the finished operation of a handle
    /// whose slot holds key `done` (its generation | DONE) once done, and
    /// says how it went; `None` while it is in flight (or the handle is
    /// stale). A done slot holds no waker (taken when it completed) and no
    /// orphan (its handle is live): only the key and the free list move.
    #[inline(always)]
    pub fn take(&self, s: &Slot, i: u32, done: u32) -> Option<Taken> {
        if s.key.get() != done {
            return None;
        }
        let r = if s.err.get() == 0 {
            Ok(Report {
                len: s.len.get(),
                tag: s.tag.get(),
                data: (s.flags.get() & FI_REMOTE_CQ_DATA != 0).then_some(s.data.get()),
                src: (s.src.get() != FI_ADDR_NOTAVAIL).then_some(super::Addr(s.src.get())),
            })
        } else {
            let f = Failed {
                err: s.err.get(),
                len: s.len.get(),
                olen: s.olen.get(),
            };
            s.err.set(0);
            Err(f)
        };
        // The next generation, free.
        s.key.set(done.wrapping_add(STATE + 1 - DONE));
        s.next.set(self.free.get());
        self.free.set(i);
        Some(r)
    }

    /// [`take`](Self::take) by the handle's id and generation.
    #[inline(always)]
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub fn take_done(&self, i: u32, gen: u32) -> Option<Taken> {
        self.take(self.slot(i as usize)?, i, gen | DONE)
    }

    /// Keeps `w` to wake when the pending operation in slot `i` completes.
    #[inline]
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub fn set_waker(&mut self, i: u32, gen: u32, w: &Waker) {
        if let Some(e) = self.at_mut(i as usize) {
            if *e.s.key.get_mut() == gen | PENDING {
                let old = e.x.waker.get_mut();
                if !old.as_ref().is_some_and(|o| o.will_wake(w)) {
                    *old = Some(w.clone());
                }
            }
        }
    }

    /// A task waiting on some pending operation, to take over watching
    /// the queue's fd.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub fn any_waiter(&self) -> Option<Waker> {
        self.all()
            .filter(|(s, _, _)| s.key.get() & STATE == PENDING)
            .find_map(|(_, x, _)| {
                let w = x.waker.take();
                let c = w.clone();
                x.waker.set(w);
                c
            })
    }

    /// Gives free slot `i` generation `gen` (a test hook: stands for the
    /// 2^30 reuses after which a slot's generation wraps).
    #[cfg(all(test, not(miri)))]
    pub(crate) fn force_generation(&self, i: u32, gen: u32) {
        if let Some(s) = self.slot(i as usize) {
            s.key.set((gen & !STATE) | (s.key.get() & STATE));
        }
    }

    /// True while handle `(i, gen)` names a live operation (a test hook).
    #[cfg(test)]
    fn live(&self, i: u32, gen: u32) -> bool {
        self.live_at(i, gen).is_some()
    }

    /// Operations posted and not yet handed back (orphans included).
    pub fn in_flight(&self) -> usize {
        self.all()
            .filter(|(s, _, _)| s.key.get() & STATE != FREE)
            .count()
    }
}

/// The flags of a peer's write with remote CQ data.
const REMOTE: u64 = FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA;

#[cfg(test)]
mod tests {
    //! The table alone, no provider: these run under Miri
    //! (`cargo +nightly miri test -p ofi --lib`).
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// Counts its drops: shows when the table releases a buffer.
    struct Tracked(Arc<AtomicUsize>);
    impl Drop for Tracked {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn entry(slot: u32, len: usize) -> CqTaggedEntry {
        CqTaggedEntry {
            op_context: slot as usize + 1,
            len,
            ..CqTaggedEntry::default()
        }
    }

    #[test]
    fn a_completion_is_taken_once_and_frees_its_slot() {
        let t = Table::default();
        let (_, i, g) = t.open();
        assert!(t.take_done(i, g).is_none(), "in flight");
        assert!(t.record::<true>(&entry(i, 5), 3).is_none());
        let r = t.take_done(i, g).expect("done").expect("succeeded");
        assert_eq!((r.len, r.src), (5, Some(crate::safe::Addr(3))));
        assert!(t.take_done(i, g).is_none(), "taken");
        assert_eq!(t.in_flight(), 0);
        // The slot is reused under a new generation: the old handle is stale.
        let (_, j, h) = t.open();
        assert_eq!(j, i);
        assert_ne!(h, g);
        t.record::<true>(&entry(j, 1), 0);
        assert!(t.take_done(i, g).is_none(), "stale");
        assert_eq!(t.take_done(j, h).expect("done").expect("ok").len, 1);
    }

    #[test]
    fn slots_past_the_first_chunk_are_made_found_and_reused() {
        let t = Table::default();
        // Chunks of 64, 128 and part of 256 slots.
        let n = 300;
        // Handles keep their slots while the table grows (as a safe-layer
        // Op does).
        let held: Vec<(&Slot, u32, u32)> = (0..n).map(|_| t.open()).collect();
        let ops: Vec<(u32, u32)> = held.iter().map(|&(_, i, g)| (i, g)).collect();
        let mut ids: Vec<u32> = ops.iter().map(|&(i, _)| i).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), n, "distinct ids");
        assert_eq!(t.in_flight(), n);
        for (k, &(i, _)) in ops.iter().enumerate() {
            t.record::<false>(&entry(i, k), 0);
        }
        for (k, &(s, i, g)) in held.iter().enumerate().rev() {
            assert!(s.is_done(g | DONE));
            let r = t.take(s, i, g | DONE).expect("done").expect("succeeded");
            assert_eq!(r.len, k, "each slot kept its own completion");
            assert!(t.take(s, i, g | DONE).is_none(), "taken once");
        }
        assert_eq!(t.in_flight(), 0);
        // Reused from the free list: no new slots, new generations.
        let again: Vec<(u32, u32)> = (0..n).map(|_| t.open()).map(|(_, i, g)| (i, g)).collect();
        let mut reused: Vec<u32> = again.iter().map(|&(i, _)| i).collect();
        reused.sort_unstable();
        assert_eq!(reused, ids);
        assert!(again.iter().all(|&(i, g)| !ops.contains(&(i, g))));
        // Contexts naming no made slot are ignored.
        for ctx in [n + 1, 1 << 26, (1 << 27) + 1, (3 << 26) + 5] {
            let e = CqTaggedEntry {
                op_context: ctx,
                ..CqTaggedEntry::default()
            };
            assert!(t.record::<false>(&e, 0).is_none());
        }
        assert_eq!(t.in_flight(), n);
    }

    #[test]
    fn an_orphan_keeps_its_buffer_until_the_completion() {
        let drops = Arc::new(AtomicUsize::new(0));
        let t = Table::default();
        let (_, i, g) = t.open();
        assert!(
            t.orphan(i, g, Tracked(drops.clone())).is_none(),
            "was pending"
        );
        assert_eq!(drops.load(Ordering::SeqCst), 0, "provider not done yet");
        assert_eq!(t.in_flight(), 1);
        // A reused context cannot be handed out while the orphan holds it.
        let (_, j, _) = t.open();
        assert_ne!(i, j);
        t.record::<true>(&entry(i, 0), 0);
        assert_eq!(
            drops.load(Ordering::SeqCst),
            0,
            "not under the queue's lock"
        );
        t.bury();
        assert_eq!(drops.load(Ordering::SeqCst), 1, "released at completion");
        assert_eq!(t.in_flight(), 1, "only the second operation");
    }

    #[test]
    fn a_done_orphan_is_released_at_once_and_stray_entries_are_ignored() {
        let drops = Arc::new(AtomicUsize::new(0));
        let t = Table::default();
        let (_, i, g) = t.open();
        t.record::<true>(&entry(i, 0), 0);
        let back = t
            .orphan(i, g, Tracked(drops.clone()))
            .expect("done: handed back");
        assert_eq!(drops.load(Ordering::SeqCst), 0, "the caller drops it");
        drop(back);
        assert_eq!(drops.load(Ordering::SeqCst), 1);
        // Entries naming no live operation change nothing.
        for ctx in [0usize, 1, 7, usize::MAX] {
            let e = CqTaggedEntry {
                op_context: ctx,
                ..CqTaggedEntry::default()
            };
            assert!(t.record::<true>(&e, 0).is_none());
        }
        assert_eq!(t.in_flight(), 0);
        // A stale handle cannot orphan (and so free) a new operation's slot.
        let (_, j, h) = t.open();
        assert_eq!(j, i);
        drop(
            t.orphan(i, g, Tracked(drops.clone()))
                .expect("stale: handed back"),
        );
        assert_eq!(drops.load(Ordering::SeqCst), 2, "the stale buffer only");
        assert!(t.live(j, h));
    }

    #[test]
    fn a_reused_slot_does_not_inherit_a_failure() {
        let t = Table::default();
        let failure = |i: u32| CqErrEntry {
            op_context: i as usize + 1,
            err: crate::errno::FI_ETRUNC,
            len: 4,
            olen: 6,
            ..CqErrEntry::default()
        };
        // Taken as a failure, then reused.
        let (_, i, g) = t.open();
        t.record_err(&failure(i));
        let f = t.take_done(i, g).expect("done").expect_err("failed");
        assert_eq!((f.err, f.len, f.olen), (crate::errno::FI_ETRUNC, 4, 6));
        let (_, j, h) = t.open();
        assert_eq!(j, i);
        t.record::<false>(&entry(j, 3), 0);
        assert_eq!(t.take_done(j, h).expect("done").expect("succeeded").len, 3);
        // Failed, then abandoned by its handle, then reused.
        let (_, k, gk) = t.open();
        t.record_err(&failure(k));
        assert!(t.orphan(k, gk, ()).is_some(), "already done");
        let (_, l, gl) = t.open();
        assert_eq!(l, k);
        t.record::<false>(&entry(l, 5), 0);
        assert_eq!(t.take_done(l, gl).expect("done").expect("succeeded").len, 5);
        assert_eq!(t.in_flight(), 0);
    }

    #[test]
    fn end_all_finishes_pending_operations_and_frees_orphans() {
        let drops = Arc::new(AtomicUsize::new(0));
        let t = Table::default();
        let (_, a, ga) = t.open();
        let (_, b, gb) = t.open();
        assert!(t.orphan(b, gb, Tracked(drops.clone())).is_none());
        let _ = t.end_all(crate::errno::FI_ECANCELED);
        assert_eq!(
            drops.load(Ordering::SeqCst),
            0,
            "not under the queue's lock"
        );
        assert!(t.has_dead());
        drop(t.take_dead());
        assert_eq!(drops.load(Ordering::SeqCst), 1);
        let failed = t.take_done(a, ga).expect("ended").expect_err("failed");
        assert_eq!(failed.err, crate::errno::FI_ECANCELED);
        assert_eq!(t.in_flight(), 0);
    }

    #[test]
    fn remote_writes_with_data_are_queued_not_matched() {
        let t = Table::default();
        let (_, i, g) = t.open();
        let e = CqTaggedEntry {
            op_context: i as usize + 1,
            flags: FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA,
            len: 8,
            data: 42,
            ..CqTaggedEntry::default()
        };
        t.record::<true>(&e, FI_ADDR_NOTAVAIL);
        assert!(t.take_done(i, g).is_none());
        let w = t.pop_remote().expect("queued");
        assert_eq!((w.len, w.data, w.src), (8, 42, None));
    }
}

#[cfg(all(test, not(miri), feature = "udp", feature = "hybrid"))]
mod provider_tests {
    //! What the registered providers declare.

    #[test]
    fn timed_out_buffers_are_kept_on_the_providers_that_copy_across_processes() {
        crate::init();
        let kept: Vec<(&str, bool)> = ["hybrid", "shm", "tcp", "udp"]
            .into_iter()
            .map(|p| (p, super::late_writes(p)))
            .collect();
        assert_eq!(
            kept,
            [
                ("hybrid", true),
                ("shm", true),
                ("tcp", false),
                ("udp", false)
            ]
        );
        assert!(!super::late_writes("no_such_provider"));
    }
}
