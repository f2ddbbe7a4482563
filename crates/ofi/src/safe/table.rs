//! The operations in flight of one channel, shared by the safe and async
//! layers: a slot per operation (its context is the slot index + 1), the
//! completion recorded in place when the queue reports it, a waker for the
//! async layer, and the buffers of abandoned operations kept until the
//! provider is done with them.

use crate::consts::*;
use crate::{CqErrEntry, CqTaggedEntry, Error};
use std::any::Any;
use std::task::Waker;

/// What a completion entry says about an operation.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Outcome {
    pub len: usize,
    pub tag: u64,
    pub data: u64,
    pub flags: u64,
    pub src: u64,
    /// Positive FI_E* number; 0 on success.
    pub err: i32,
    /// Bytes that did not fit (truncation).
    pub olen: usize,
}

impl Outcome {
    pub(crate) fn failed(e: &CqErrEntry) -> Outcome {
        Outcome {
            len: e.len,
            tag: e.tag,
            data: e.data,
            flags: e.flags,
            src: FI_ADDR_NOTAVAIL,
            err: e.err.max(1),
            olen: e.olen,
        }
    }

    /// An operation the channel ended itself (closed before completion).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn ended(err: i32) -> Outcome {
        Outcome {
            src: FI_ADDR_NOTAVAIL,
            err,
            ..Outcome::default()
        }
    }
}

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
/// Posted; `waker` is the task to wake when it completes (async).
const PENDING: u32 = 1;
/// Completed (`out` says how), waiting for its handle.
const DONE: u32 = 2;
/// Its handle is gone; `orphan` holds the buffers until the completion.
const ORPHAN: u32 = 3;

/// One operation. The outcome is a plain field written in place from the
/// queue entry: building it in an enum and copying that into the slot
/// stalled on store forwarding (about 15 ns per completion).
pub(crate) struct Slot {
    /// The generation (high 30 bits) and the state (low 2 bits): a handle
    /// holds its generation, so "is my operation done" is one compare.
    key: u32,
    next: u32,
    pub out: Outcome,
    pub waker: Option<Waker>,
    orphan: Option<Box<dyn Any + Send>>,
}

const NONE: u32 = u32::MAX;

/// The slots, a free list through them, and remote-write events.
pub(crate) struct Table {
    slots: Vec<Slot>,
    free: u32,
    pending: usize,
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
            free: NONE,
            pending: 0,
            remote: Default::default(),
            dead: Vec::new(),
        }
    }
}

impl Table {
    /// A slot for a new operation: (index, generation).
    #[inline(always)]
    pub fn open(&mut self) -> (u32, u32) {
        self.pending += 1;
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
            out: Outcome::default(),
            waker: None,
            orphan: None,
        });
        ((self.slots.len() - 1) as u32, 0)
    }

    /// Returns a live slot to the free list under a new generation.
    #[inline(always)]
    fn free_slot(&mut self, i: u32) {
        let free = self.free;
        if let Some(s) = self.slots.get_mut(i as usize) {
            self.pending -= 1;
            s.key = (s.key & !STATE).wrapping_add(STATE + 1);
            // Usually empty already: skip the stores (and drop checks).
            if s.waker.is_some() {
                s.waker = None;
            }
            if s.orphan.is_some() {
                s.orphan = None;
            }
            s.next = free;
            self.free = i;
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
            self.free_slot(i);
        }
    }

    /// The slot of a live handle (index and generation agree).
    #[inline(always)]
    fn slot(&mut self, i: u32, gen: u32) -> Option<&mut Slot> {
        self.slots
            .get_mut(i as usize)
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
    /// write. Returns the waker to wake. Runs no code of the operation's
    /// owner (an orphan's buffers wait for [`bury`](Self::bury)), so it
    /// may run under the queue's lock.
    #[inline(always)]
    pub fn record(&mut self, e: &CqTaggedEntry, src: u64) -> Option<Waker> {
        const REMOTE: u64 = FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA;
        // The context is the slot index + 1 (0 wraps to a missing slot).
        let i = e.op_context.wrapping_sub(1);
        match self.slots.get_mut(i) {
            Some(s) if s.key & STATE == PENDING && e.flags & REMOTE != REMOTE => {
                s.out.len = e.len;
                s.out.tag = e.tag;
                s.out.data = e.data;
                s.out.flags = e.flags;
                s.out.src = src;
                // `olen` is read only when `err` says the operation failed.
                s.out.err = 0;
                s.key += DONE - PENDING;
                if s.waker.is_some() {
                    s.waker.take()
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
    fn record_other(&mut self, e: &CqTaggedEntry, src: u64) {
        const REMOTE: u64 = FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA;
        if e.flags & REMOTE == REMOTE {
            return self.record_remote(e, src);
        }
        let i = e.op_context.wrapping_sub(1);
        if let Some(s) = self.slots.get_mut(i) {
            if s.key & STATE == ORPHAN {
                // The provider is done with the orphan's buffers.
                if let Some(b) = s.orphan.take() {
                    self.dead.push(b);
                }
                self.free_slot(i as u32);
            }
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

    /// Records an error completion.
    pub fn record_err(&mut self, e: &CqErrEntry) -> Option<Waker> {
        let i = e.op_context.wrapping_sub(1);
        let s = self.slots.get_mut(i)?;
        match s.key & STATE {
            PENDING => {
                s.out = Outcome::failed(e);
                s.key += DONE - PENDING;
                s.waker.take()
            }
            ORPHAN => {
                self.free_slot(i as u32);
                None
            }
            _ => None,
        }
    }

    /// Gives up an operation's handle: a done one frees its slot (and
    /// `bufs`) now, a pending one keeps `bufs` until its completion.
    /// Returns true when the operation was still pending.
    pub fn orphan<B: Send + 'static>(&mut self, i: u32, gen: u32, bufs: B) -> bool {
        let Some(s) = self.slot(i, gen) else {
            return false;
        };
        if s.key & STATE == PENDING {
            s.key = gen | ORPHAN;
            s.waker = None;
            s.orphan = Some(Box::new(bufs));
            true
        } else {
            self.free_slot(i);
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
                PENDING => {
                    let s = &mut self.slots[i];
                    wake.extend(s.waker.take());
                    s.out = Outcome::ended(err);
                    s.key += DONE - PENDING;
                }
                ORPHAN => self.free_slot(i as u32),
                _ => {}
            }
        }
        wake
    }

    /// Frees the slot of the finished operation of handle `(i, gen)` and
    /// says how it went; `None` while it is in flight (or the handle is
    /// stale). The outcome is read field by field: copying it whole just
    /// after `record` wrote it field by field stalled on store forwarding.
    #[inline(always)]
    pub fn take_done(&mut self, i: u32, gen: u32) -> Option<Taken> {
        let free = self.free;
        let s = self.slots.get_mut(i as usize)?;
        if s.key != gen | DONE {
            return None;
        }
        let o = &s.out;
        let r = if o.err == 0 {
            Ok(Report {
                len: o.len,
                tag: o.tag,
                data: (o.flags & FI_REMOTE_CQ_DATA != 0).then_some(o.data),
                src: (o.src != FI_ADDR_NOTAVAIL).then_some(super::Addr(o.src)),
            })
        } else {
            Err(Failed {
                err: o.err,
                len: o.len,
                olen: o.olen,
            })
        };
        // A done slot holds no waker (taken when it completed) and no
        // orphan (its handle is live): only the key and the free list move.
        debug_assert!(s.waker.is_none() && s.orphan.is_none());
        s.key = gen.wrapping_add(STATE + 1);
        s.next = free;
        self.free = i;
        self.pending -= 1;
        Some(r)
    }

    /// Keeps `w` to wake when the pending operation in slot `i` completes.
    #[inline]
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub fn set_waker(&mut self, i: u32, gen: u32, w: &Waker) {
        if let Some(s) = self.slot(i, gen) {
            if s.key & STATE == PENDING && !s.waker.as_ref().is_some_and(|x| x.will_wake(w)) {
                s.waker = Some(w.clone());
            }
        }
    }

    /// A task waiting on some pending operation, to take over watching
    /// the queue's fd.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub fn any_waiter(&self) -> Option<Waker> {
        self.slots
            .iter()
            .filter(|s| s.key & STATE == PENDING)
            .find_map(|s| s.waker.clone())
    }

    /// True while handle `(i, gen)` names a live operation (a test hook).
    #[cfg(test)]
    fn live(&mut self, i: u32, gen: u32) -> bool {
        self.slot(i, gen).is_some()
    }

    /// Operations posted and not yet handed back (orphans included).
    pub fn in_flight(&self) -> usize {
        self.pending
    }
}

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
        assert!(t.record(&entry(i, 5), 3).is_none());
        let r = t.take_done(i, g).expect("done").expect("succeeded");
        assert_eq!((r.len, r.src), (5, Some(crate::safe::Addr(3))));
        assert!(t.take_done(i, g).is_none(), "taken");
        assert_eq!(t.in_flight(), 0);
        // The slot is reused under a new generation: the old handle is stale.
        let (j, h) = t.open();
        assert_eq!(j, i);
        assert_ne!(h, g);
        t.record(&entry(j, 1), 0);
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
        t.record(&entry(i, 0), 0);
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
        t.record(&entry(i, 0), 0);
        assert!(!t.orphan(i, g, Tracked(drops.clone())));
        assert_eq!(drops.load(Ordering::SeqCst), 1);
        // Entries naming no live operation change nothing.
        for ctx in [0usize, 1, 7, usize::MAX] {
            let e = CqTaggedEntry {
                op_context: ctx,
                ..CqTaggedEntry::default()
            };
            assert!(t.record(&e, 0).is_none());
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
        t.record(&e, FI_ADDR_NOTAVAIL);
        assert!(t.take_done(i, g).is_none());
        let w = t.remote.pop_front().expect("queued");
        assert_eq!((w.len, w.data, w.src), (8, 42, None));
    }
}
