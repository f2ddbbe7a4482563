//! The operations in flight of one channel, shared by the safe and async
//! layers: a slot per operation (its context is the slot index + 1), the
//! completion recorded in place when the queue reports it, a waker for the
//! async layer, and the buffers of abandoned operations kept until the
//! provider is done with them.

use crate::consts::*;
use crate::{CqErrEntry, CqTaggedEntry, Error};
use std::any::Any;
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
const DONE: u32 = 2;
/// Its handle is gone; its orphan holds the buffers until the completion.
const ORPHAN: u32 = 3;

/// One operation's hot state, one cache line: the key that says whether it
/// is done and the outcome written in place from its queue entry (field
/// by field: building an outcome and copying it whole stalled on store
/// forwarding, about 15 ns per completion).
/// The entry's fields sit in the entry's order, so `record` copies them in
/// wide moves.
#[repr(C, align(64))]
struct Slot {
    /// The generation (high 30 bits) and the state (low 2 bits): a handle
    /// holds its generation, so "is my operation done" is one compare.
    key: u32,
    next: u32,
    /// Positive FI_E* number once a failure is recorded; 0 otherwise (set
    /// only by `fail`, cleared when the slot leaves DONE), so a success
    /// need not write it.
    err: i32,
    flags: u64,
    len: usize,
    data: u64,
    tag: u64,
    src: u64,
    /// Bytes that did not fit (truncation); read only when `err` is set.
    olen: usize,
}

const _: () = assert!(std::mem::size_of::<Slot>() == 64);

/// What only the slower paths touch, kept beside the slots: the waker of
/// an async operation and the buffers of an abandoned one.
#[derive(Default)]
struct Extra {
    waker: Option<Waker>,
    orphan: Option<Box<dyn Any + Send>>,
}

const NONE: u32 = u32::MAX;

/// The slots, a free list through them, and remote-write events.
pub(crate) struct Table {
    slots: Vec<Slot>,
    /// One per slot.
    extra: Vec<Extra>,
    free: u32,
    pub remote: std::collections::VecDeque<RemoteWrite>,
    /// Buffers of orphans whose completion was recorded, to drop once the
    /// queue's lock is released ([`bury`](Self::bury)): dropping a buffer
    /// runs its owner's code, which must not run under that lock.
    dead: Vec<Box<dyn Any + Send>>,
}

impl Default for Table {
    fn default() -> Table {
        Table {
            slots: Vec::new(),
            extra: Vec::new(),
            free: NONE,
            remote: Default::default(),
            dead: Vec::new(),
        }
    }
}

impl Table {
    /// A slot for a new operation: (index, generation).
    #[inline(always)]
    pub fn open(&mut self) -> (u32, u32) {
        let i = self.free;
        if let Some(s) = self.slots.get_mut(i as usize) {
            self.free = s.next;
            let gen = s.key & !STATE;
            s.key = gen | PENDING;
            return (i, gen);
        }
        self.open_new()
    }

    #[cold]
    fn open_new(&mut self) -> (u32, u32) {
        self.slots.push(Slot {
            key: PENDING,
            next: NONE,
            err: 0,
            flags: 0,
            len: 0,
            data: 0,
            tag: 0,
            src: FI_ADDR_NOTAVAIL,
            olen: 0,
        });
        self.extra.push(Extra::default());
        ((self.slots.len() - 1) as u32, 0)
    }

    /// Returns a live slot to the free list under a new generation; its
    /// waker and orphan (if any) come back to drop.
    #[must_use]
    fn free_slot(&mut self, i: u32) -> Extra {
        let free = self.free;
        match (
            self.slots.get_mut(i as usize),
            self.extra.get_mut(i as usize),
        ) {
            (Some(s), Some(x)) => {
                s.key = (s.key & !STATE).wrapping_add(STATE + 1);
                s.err = 0;
                s.next = free;
                self.free = i;
                std::mem::take(x)
            }
            _ => Extra::default(),
        }
    }

    /// Returns a slot to the free list (a new generation).
    #[inline(always)]
    pub fn close(&mut self, i: u32) {
        if self
            .slots
            .get(i as usize)
            .is_some_and(|s| s.key & STATE != FREE)
        {
            drop(self.free_slot(i));
        }
    }

    /// The slot of a live handle (index and generation agree).
    #[inline(always)]
    fn live_slot(&self, i: u32, gen: u32) -> Option<&Slot> {
        self.slots
            .get(i as usize)
            .filter(|s| s.key & !STATE == gen && s.key & STATE != FREE)
    }

    /// True when the operation of handle `(i, gen)` has completed.
    #[inline(always)]
    pub fn is_done(&self, i: u32, gen: u32) -> bool {
        self.slots
            .get(i as usize)
            .is_some_and(|s| s.key == gen | DONE)
    }

    /// Records a queue entry: an operation's completion, or a remote
    /// write. With `WAKERS` (the async layer) returns the waker to wake;
    /// the safe layer's operations hold none. Runs no code of the
    /// operation's owner (an orphan's buffers wait for
    /// [`bury`](Self::bury)), so it may run under the queue's lock.
    #[inline(always)]
    pub fn record<const WAKERS: bool>(&mut self, e: &CqTaggedEntry, src: u64) -> Option<Waker> {
        // The context is the slot index + 1 (0 wraps to a missing slot). A
        // peer's write with CQ data names no operation, whatever context
        // the provider left in it.
        let i = e.op_context.wrapping_sub(1);
        match self.slots.get_mut(i) {
            Some(s) if s.key & STATE == PENDING && e.flags & REMOTE != REMOTE => {
                s.flags = e.flags;
                s.len = e.len;
                s.data = e.data;
                s.tag = e.tag;
                s.src = src;
                s.key += DONE - PENDING;
                match self.extra.get_mut(i) {
                    Some(x) if WAKERS && x.waker.is_some() => x.waker.take(),
                    _ => None,
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
    fn record_other(&mut self, e: &CqTaggedEntry, src: u64) {
        if e.flags & REMOTE == REMOTE {
            return self.record_remote(e, src);
        }
        let i = e.op_context.wrapping_sub(1);
        if self.slots.get(i).is_some_and(|s| s.key & STATE == ORPHAN) {
            // The provider is done with the orphan's buffers.
            let x = self.free_slot(i as u32);
            self.dead.extend(x.orphan);
        }
    }

    /// Drops the buffers of orphans recorded since the last call.
    #[inline(always)]
    pub fn bury(&mut self) {
        if !self.dead.is_empty() {
            self.dead.clear();
        }
    }

    #[cold]
    fn record_remote(&mut self, e: &CqTaggedEntry, src: u64) {
        self.remote.push_back(RemoteWrite {
            len: e.len,
            data: e.data,
            src: (src != FI_ADDR_NOTAVAIL).then_some(super::Addr(src)),
        });
    }

    /// Ends pending operation `i` with an error (its outcome fields say
    /// how); returns its waker.
    fn fail(&mut self, i: usize, err: i32, len: usize, tag: u64, olen: usize) -> Option<Waker> {
        let s = &mut self.slots[i];
        s.err = err.max(1);
        s.len = len;
        s.tag = tag;
        s.olen = olen;
        s.key += DONE - PENDING;
        self.extra[i].waker.take()
    }

    /// Records an error completion.
    pub fn record_err(&mut self, e: &CqErrEntry) -> Option<Waker> {
        let i = e.op_context.wrapping_sub(1);
        match self.slots.get(i)?.key & STATE {
            PENDING => self.fail(i, e.err, e.len, e.tag, e.olen),
            ORPHAN => {
                drop(self.free_slot(i as u32));
                None
            }
            _ => None,
        }
    }

    /// Gives up an operation's handle: a done one frees its slot (and
    /// `bufs`) now, a pending one keeps `bufs` until its completion.
    /// Returns true when the operation was still pending.
    pub fn orphan<B: Send + 'static>(&mut self, i: u32, gen: u32, bufs: B) -> bool {
        let Some(s) = self.live_slot(i, gen) else {
            return false;
        };
        if s.key & STATE == PENDING {
            let boxed: Box<dyn Any + Send> = Box::new(bufs);
            if let (Some(s), Some(x)) = (
                self.slots.get_mut(i as usize),
                self.extra.get_mut(i as usize),
            ) {
                s.key = gen | ORPHAN;
                x.waker = None;
                x.orphan = Some(boxed);
            }
            true
        } else {
            drop(self.free_slot(i));
            false
        }
    }

    /// Ends every pending operation with `err` (the endpoint is gone);
    /// orphans are freed. Returns the wakers to wake.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub fn end_all(&mut self, err: i32) -> Vec<Waker> {
        let mut wake = Vec::new();
        for i in 0..self.slots.len() {
            match self.slots[i].key & STATE {
                PENDING => wake.extend(self.fail(i, err, 0, 0, 0)),
                ORPHAN => drop(self.free_slot(i as u32)),
                _ => {}
            }
        }
        wake
    }

    /// Frees the slot of the finished operation of handle `(i, gen)` and
    /// says how it went; `None` while it is in flight (or the handle is
    /// stale). A done slot holds no waker (taken when it completed) and no
    /// orphan (its handle is live): only the key and the free list move.
    #[inline(always)]
    pub fn take_done(&mut self, i: u32, gen: u32) -> Option<Taken> {
        let free = self.free;
        let s = self.slots.get_mut(i as usize)?;
        if s.key != gen | DONE {
            return None;
        }
        let r = if s.err == 0 {
            Ok(Report {
                len: s.len,
                tag: s.tag,
                data: (s.flags & FI_REMOTE_CQ_DATA != 0).then_some(s.data),
                src: (s.src != FI_ADDR_NOTAVAIL).then_some(super::Addr(s.src)),
            })
        } else {
            let f = Failed {
                err: s.err,
                len: s.len,
                olen: s.olen,
            };
            s.err = 0;
            Err(f)
        };
        s.key = gen.wrapping_add(STATE + 1);
        s.next = free;
        self.free = i;
        Some(r)
    }

    /// Keeps `w` to wake when the pending operation in slot `i` completes.
    #[inline]
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub fn set_waker(&mut self, i: u32, gen: u32, w: &Waker) {
        if self
            .live_slot(i, gen)
            .is_some_and(|s| s.key & STATE == PENDING)
        {
            if let Some(x) = self.extra.get_mut(i as usize) {
                if !x.waker.as_ref().is_some_and(|x| x.will_wake(w)) {
                    x.waker = Some(w.clone());
                }
            }
        }
    }

    /// A task waiting on some pending operation, to take over watching
    /// the queue's fd.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub fn any_waiter(&self) -> Option<Waker> {
        self.slots
            .iter()
            .zip(&self.extra)
            .filter(|(s, _)| s.key & STATE == PENDING)
            .find_map(|(_, x)| x.waker.clone())
    }

    /// True while handle `(i, gen)` names a live operation (a test hook).
    #[cfg(test)]
    fn live(&self, i: u32, gen: u32) -> bool {
        self.live_slot(i, gen).is_some()
    }

    /// Operations posted and not yet handed back (orphans included).
    pub fn in_flight(&self) -> usize {
        self.slots.iter().filter(|s| s.key & STATE != FREE).count()
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
        let mut t = Table::default();
        let (i, g) = t.open();
        assert!(t.take_done(i, g).is_none(), "in flight");
        assert!(t.record::<true>(&entry(i, 5), 3).is_none());
        let r = t.take_done(i, g).expect("done").expect("succeeded");
        assert_eq!((r.len, r.src), (5, Some(crate::safe::Addr(3))));
        assert!(t.take_done(i, g).is_none(), "taken");
        assert_eq!(t.in_flight(), 0);
        // The slot is reused under a new generation: the old handle is stale.
        let (j, h) = t.open();
        assert_eq!(j, i);
        assert_ne!(h, g);
        t.record::<true>(&entry(j, 1), 0);
        assert!(t.take_done(i, g).is_none(), "stale");
        assert_eq!(t.take_done(j, h).expect("done").expect("ok").len, 1);
    }

    #[test]
    fn an_orphan_keeps_its_buffer_until_the_completion() {
        let drops = Arc::new(AtomicUsize::new(0));
        let mut t = Table::default();
        let (i, g) = t.open();
        assert!(t.orphan(i, g, Tracked(drops.clone())), "was pending");
        assert_eq!(drops.load(Ordering::SeqCst), 0, "provider not done yet");
        assert_eq!(t.in_flight(), 1);
        // A reused context cannot be handed out while the orphan holds it.
        let (j, _) = t.open();
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
        let mut t = Table::default();
        let (i, g) = t.open();
        t.record::<true>(&entry(i, 0), 0);
        assert!(!t.orphan(i, g, Tracked(drops.clone())));
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
        let (j, h) = t.open();
        assert_eq!(j, i);
        assert!(!t.orphan(i, g, Tracked(drops.clone())));
        assert_eq!(drops.load(Ordering::SeqCst), 2, "the stale buffer only");
        assert!(t.live(j, h));
    }

    #[test]
    fn a_reused_slot_does_not_inherit_a_failure() {
        let mut t = Table::default();
        let failure = |i: u32| CqErrEntry {
            op_context: i as usize + 1,
            err: crate::errno::FI_ETRUNC,
            len: 4,
            olen: 6,
            ..CqErrEntry::default()
        };
        // Taken as a failure, then reused.
        let (i, g) = t.open();
        t.record_err(&failure(i));
        let f = t.take_done(i, g).expect("done").expect_err("failed");
        assert_eq!((f.err, f.len, f.olen), (crate::errno::FI_ETRUNC, 4, 6));
        let (j, h) = t.open();
        assert_eq!(j, i);
        t.record::<false>(&entry(j, 3), 0);
        assert_eq!(t.take_done(j, h).expect("done").expect("succeeded").len, 3);
        // Failed, then abandoned by its handle, then reused.
        let (k, gk) = t.open();
        t.record_err(&failure(k));
        assert!(!t.orphan(k, gk, ()), "already done");
        let (l, gl) = t.open();
        assert_eq!(l, k);
        t.record::<false>(&entry(l, 5), 0);
        assert_eq!(t.take_done(l, gl).expect("done").expect("succeeded").len, 5);
        assert_eq!(t.in_flight(), 0);
    }

    #[test]
    fn end_all_finishes_pending_operations_and_frees_orphans() {
        let drops = Arc::new(AtomicUsize::new(0));
        let mut t = Table::default();
        let (a, ga) = t.open();
        let (b, gb) = t.open();
        t.orphan(b, gb, Tracked(drops.clone()));
        let _ = t.end_all(crate::errno::FI_ECANCELED);
        assert_eq!(drops.load(Ordering::SeqCst), 1);
        let failed = t.take_done(a, ga).expect("ended").expect_err("failed");
        assert_eq!(failed.err, crate::errno::FI_ECANCELED);
        assert_eq!(t.in_flight(), 0);
    }

    #[test]
    fn remote_writes_with_data_are_queued_not_matched() {
        let mut t = Table::default();
        let (i, g) = t.open();
        let e = CqTaggedEntry {
            op_context: i as usize + 1,
            flags: FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA,
            len: 8,
            data: 42,
            ..CqTaggedEntry::default()
        };
        t.record::<true>(&e, FI_ADDR_NOTAVAIL);
        assert!(t.take_done(i, g).is_none());
        let w = t.remote.pop_front().expect("queued");
        assert_eq!((w.len, w.data, w.src), (8, 42, None));
    }
}
