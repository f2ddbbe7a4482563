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

    pub(crate) fn error(&self) -> Option<Error> {
        (self.err != 0).then(|| {
            Error::new(
                self.err,
                format!(
                    "operation failed (len {}, overflow {})",
                    self.len, self.olen
                ),
            )
        })
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

/// Where an operation's slot stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
    /// On the free list.
    Free,
    /// Posted; `waker` is the task to wake when it completes (async).
    Pending,
    /// Completed (`out` says how), waiting for its handle.
    Done,
    /// Its handle is gone; `orphan` holds the buffers until the completion.
    Orphan,
}

/// One operation. The outcome is a plain field written in place from the
/// queue entry: building it in an enum and copying that into the slot
/// stalled on store forwarding (about 15 ns per completion).
pub(crate) struct Slot {
    pub gen: u32,
    next: u32,
    pub state: State,
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
}

impl Default for Table {
    fn default() -> Table {
        Table {
            slots: Vec::new(),
            free: NONE,
            pending: 0,
            remote: Default::default(),
        }
    }
}

impl Table {
    /// A slot for a new operation: (index, generation).
    #[inline(always)]
    pub fn open(&mut self) -> (u32, u32) {
        self.pending += 1;
        if let Some(s) = self.slots.get_mut(self.free as usize) {
            let i = self.free;
            self.free = s.next;
            s.state = State::Pending;
            return (i, s.gen);
        }
        self.slots.push(Slot {
            gen: 0,
            next: NONE,
            state: State::Pending,
            out: Outcome::default(),
            waker: None,
            orphan: None,
        });
        ((self.slots.len() - 1) as u32, 0)
    }

    /// Returns a slot to the free list (a new generation).
    #[inline(always)]
    pub fn close(&mut self, i: u32) {
        if let Some(s) = self.slots.get_mut(i as usize) {
            if s.state != State::Free {
                self.pending -= 1;
                s.gen = s.gen.wrapping_add(1);
                s.state = State::Free;
                // Usually empty already: skip the stores (and drop checks).
                if s.waker.is_some() {
                    s.waker = None;
                }
                if s.orphan.is_some() {
                    s.orphan = None;
                }
                s.next = self.free;
                self.free = i;
            }
        }
    }

    /// The slot of a live handle (index and generation agree).
    #[inline(always)]
    pub fn slot(&mut self, i: u32, gen: u32) -> Option<&mut Slot> {
        self.slots
            .get_mut(i as usize)
            .filter(|s| s.gen == gen && s.state != State::Free)
    }

    /// The pending slot for context `ctx`, if it is one; an orphan's
    /// completion frees it (the provider is done with its buffers).
    #[inline]
    fn pending(&mut self, ctx: usize) -> Option<&mut Slot> {
        let i = ctx.checked_sub(1)?;
        let state = self.slots.get(i)?.state;
        match state {
            State::Pending => self.slots.get_mut(i),
            State::Orphan => {
                self.close(i as u32);
                None
            }
            _ => None,
        }
    }

    /// Records a queue entry: an operation's completion, or a remote
    /// write. Returns the waker to wake.
    #[inline]
    pub fn record(&mut self, e: &CqTaggedEntry, src: u64) -> Option<Waker> {
        if e.flags & FI_REMOTE_WRITE != 0 && e.flags & FI_REMOTE_CQ_DATA != 0 {
            self.remote.push_back(RemoteWrite {
                len: e.len,
                data: e.data,
                src: (src != FI_ADDR_NOTAVAIL).then_some(super::Addr(src)),
            });
            return None;
        }
        let s = self.pending(e.op_context)?;
        s.out.len = e.len;
        s.out.tag = e.tag;
        s.out.data = e.data;
        s.out.flags = e.flags;
        s.out.src = src;
        s.out.err = 0;
        s.out.olen = 0;
        s.state = State::Done;
        s.waker.take()
    }

    /// Records an error completion.
    pub fn record_err(&mut self, e: &CqErrEntry) -> Option<Waker> {
        let s = self.pending(e.op_context)?;
        s.out = Outcome::failed(e);
        s.state = State::Done;
        s.waker.take()
    }

    /// Gives up an operation's handle: a done one frees its slot (and
    /// `bufs`) now, a pending one keeps `bufs` until its completion.
    /// Returns true when the operation was still pending.
    pub fn orphan<B: Send + 'static>(&mut self, i: u32, gen: u32, bufs: B) -> bool {
        let Some(s) = self.slot(i, gen) else {
            return false;
        };
        if s.state == State::Pending {
            s.state = State::Orphan;
            s.waker = None;
            s.orphan = Some(Box::new(bufs));
            true
        } else {
            self.close(i);
            false
        }
    }

    /// Ends every pending operation with `err` (the endpoint is gone);
    /// orphans are freed. Returns the wakers to wake.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub fn end_all(&mut self, err: i32) -> Vec<Waker> {
        let mut wake = Vec::new();
        for i in 0..self.slots.len() {
            match self.slots[i].state {
                State::Pending => {
                    let s = &mut self.slots[i];
                    wake.extend(s.waker.take());
                    s.out = Outcome::ended(err);
                    s.state = State::Done;
                }
                State::Orphan => self.close(i as u32),
                _ => {}
            }
        }
        wake
    }

    /// Applies `f` to the outcome of a finished operation and frees its
    /// slot; `None` while it is in flight (or the handle is stale). `f`
    /// reads the fields it needs in place: copying the whole outcome just
    /// after `record` wrote it field by field stalled on store forwarding.
    #[inline(always)]
    pub fn take_done_with<R>(
        &mut self,
        i: u32,
        gen: u32,
        f: impl FnOnce(&Outcome) -> R,
    ) -> Option<R> {
        let s = self.slot(i, gen)?;
        if s.state != State::Done {
            return None;
        }
        let r = f(&s.out);
        self.close(i);
        Some(r)
    }

    /// Keeps `w` to wake when the pending operation in slot `i` completes.
    #[inline]
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub fn set_waker(&mut self, i: u32, gen: u32, w: &Waker) {
        if let Some(s) = self.slot(i, gen) {
            if s.state == State::Pending && !s.waker.as_ref().is_some_and(|x| x.will_wake(w)) {
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
            .filter(|s| s.state == State::Pending)
            .find_map(|s| s.waker.clone())
    }

    /// Operations posted and not yet handed back (orphans included).
    pub fn in_flight(&self) -> usize {
        self.pending
    }
}
