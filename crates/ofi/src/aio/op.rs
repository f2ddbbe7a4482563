//! An async operation: a future that owns its buffer and resolves to
//! what the safe layer's handles return ([`Done`] with the buffer, or
//! [`OpError`]); dropped early, it hands the buffer to the channel.

use super::Inner;
use crate::safe::buf::Held;
use crate::safe::op::{finish, refused};
use crate::safe::{Done, OpError};
use crate::spi::HasCore;
use crate::Error;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// Bounds the progress / re-arm rounds of one poll before it yields.
const ROUNDS: usize = 32;

/// An operation in flight on an async [`Channel`](super::Channel).
///
/// Resolves to a [`Done`] holding the buffer, or an [`OpError`] that
/// holds it as the safe layer's does (none after `FI_ETIMEDOUT` on shm or
/// hybrid: the silent peer may still copy into it, so it is kept for good).
/// Dropping it before it resolves cancels it (a receive at the provider)
/// and the channel frees the buffer once the provider is done with it.
/// Polling it again after it resolved returns `Pending` forever (it has no
/// buffer left to give).
#[must_use = "an operation does nothing useful unless awaited; dropping it cancels it"]
pub struct Op<B: Send + 'static> {
    inner: Arc<Inner>,
    slot: u32,
    gen: u32,
    buf: Option<Held<B>>,
    /// A post that failed (or a closed channel): resolves at once.
    early: Option<Error>,
    cancel_on_drop: bool,
    /// Registered as a sleeper on the queue (see `Driver::add_sleeper`).
    sleeping: bool,
}

impl<B: Send + 'static> std::fmt::Debug for Op<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("aio::Op")
            .field("id", &(u64::from(self.slot) + 1))
            .field("resolved", &self.buf.is_none())
            .finish()
    }
}

impl<B: Send + 'static> Op<B> {
    pub(super) fn posted(
        inner: Arc<Inner>,
        slot: u32,
        gen: u32,
        buf: Held<B>,
        cancel_on_drop: bool,
    ) -> Op<B> {
        Op {
            inner,
            slot,
            gen,
            buf: Some(buf),
            early: None,
            cancel_on_drop,
            sleeping: false,
        }
    }

    pub(super) fn failed(inner: Arc<Inner>, buf: Held<B>, e: Error) -> Op<B> {
        Op {
            inner,
            slot: u32::MAX,
            gen: 0,
            buf: Some(buf),
            early: Some(e),
            cancel_on_drop: false,
            sleeping: false,
        }
    }

    /// A post that failed: its error and the buffer, at once.
    #[cold]
    fn resolve_early(&mut self) -> Poll<Result<Done<B>, OpError<B>>> {
        match (self.early.take(), self.buf.take()) {
            (Some(e), Some(b)) => Poll::Ready(Err(refused(e, b.into_inner()))),
            _ => Poll::Pending,
        }
    }

    /// Ends this operation's sleep on the queue's fd, if it slept.
    fn wake_up(&mut self) {
        if std::mem::take(&mut self.sleeping) {
            self.inner.cq().core().driver().remove_sleeper();
        }
    }
}

/// If the operation `(slot, gen)`'s task was the one watching the wait fd,
/// wakes another waiting task to take over (tokio wakes only the last task
/// that registered).
#[inline(always)]
fn hand_off(core: &mut super::Core, slot: u32, gen: u32) {
    if core.watcher == Some((slot, gen)) {
        hand_off_watch(core);
    }
}

#[cold]
fn hand_off_watch(core: &mut super::Core) {
    core.watcher = None;
    if let Some(w) = core.table.any_waiter() {
        w.wake();
    }
}

impl<B: Send + Unpin + 'static> Future for Op<B> {
    type Output = Result<Done<B>, OpError<B>>;

    /// The common case inline (the result is built where the caller keeps
    /// it: returned through memory, it is copied back in wider moves than
    /// it was written in, which stalls on store forwarding): collect while
    /// completions arrive until this operation is among them. Sleeping,
    /// busy re-polling and early errors are [`poll_slow`](Self::poll_slow).
    #[inline(always)]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if this.buf.is_some() && this.early.is_none() && !this.sleeping {
            // Field borrows (no clone of the Arc: two atomic operations).
            let inner = &*this.inner;
            let mut core = inner.lock();
            for _ in 0..ROUNDS {
                if let Some(r) = core.table.take_done(this.slot, this.gen) {
                    hand_off(&mut core, this.slot, this.gen);
                    let keep = r.is_err() && core.table.keep_timed_out.get();
                    drop(core);
                    return match this.buf.take() {
                        Some(b) => Poll::Ready(finish(r, b, || keep)),
                        None => Poll::Pending,
                    };
                }
                if inner.progress(&mut core) == 0 {
                    break;
                }
            }
        }
        this.poll_slow(cx)
    }
}

impl<B: Send + Unpin + 'static> Op<B> {
    /// An operation not done after a progress pass: registers its waker
    /// and sleeps on the queue's fd (or asks to be polled again at once,
    /// busy polling), re-collecting when the fd says something happened.
    #[inline(never)]
    fn poll_slow(&mut self, cx: &mut Context<'_>) -> Poll<Result<Done<B>, OpError<B>>> {
        let this = self;
        if this.buf.is_none() {
            return Poll::Pending;
        }
        if this.early.is_some() {
            return this.resolve_early();
        }
        if this.sleeping {
            this.wake_up();
        }
        let inner = &*this.inner;
        let mut passes = 0;
        while passes < ROUNDS {
            let mut core = inner.lock();
            // Collect under one lock while completions arrive and this one
            // is not among them.
            loop {
                if let Some(r) = core.table.take_done(this.slot, this.gen) {
                    hand_off(&mut core, this.slot, this.gen);
                    let keep = r.is_err() && core.table.keep_timed_out.get();
                    drop(core);
                    return match this.buf.take() {
                        Some(b) => Poll::Ready(finish(r, b, || keep)),
                        None => Poll::Pending,
                    };
                }
                passes += 1;
                if passes > ROUNDS || inner.progress(&mut core) == 0 {
                    break;
                }
            }
            if passes > ROUNDS {
                break;
            }
            core.table.set_waker(this.slot, this.gen, cx.waker());
            let Some(fd) = inner.fd() else {
                // Busy polling: come back at once.
                drop(core);
                cx.waker().wake_by_ref();
                return Poll::Pending;
            };
            core.watcher = Some((this.slot, this.gen));
            drop(core);
            match fd.poll_read_ready(cx) {
                Poll::Ready(Ok(mut g)) => {
                    // Something happened since the last look: collect it.
                    g.clear_ready();
                }
                Poll::Ready(Err(_)) => {
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                // Registered for the fd: sleep if nothing is pending. A
                // completion after `trywait` makes the fd readable, which
                // the reactor saw or will see after our registration.
                Poll::Pending => {
                    inner.cq().core().driver().add_sleeper();
                    this.sleeping = true;
                    if inner.cq().trywait().is_ok() {
                        return Poll::Pending;
                    }
                    if std::mem::take(&mut this.sleeping) {
                        inner.cq().core().driver().remove_sleeper();
                    }
                }
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

impl<B: Send + 'static> Drop for Op<B> {
    #[inline(always)]
    fn drop(&mut self) {
        if self.sleeping || self.buf.is_some() {
            self.abandon();
        }
    }
}

impl<B: Send + 'static> Op<B> {
    /// Ends a sleep and hands an unresolved operation's buffer to the
    /// channel (cancelling a receive).
    #[cold]
    #[inline(never)]
    fn abandon(&mut self) {
        self.wake_up();
        let Some(buf) = self.buf.take() else {
            return;
        };
        if self.early.is_some() {
            return;
        }
        let mut core = self.inner.lock();
        hand_off(&mut core, self.slot, self.gen);
        // A done operation's buffer comes back: dropped after the lock.
        let back = core.table.orphan(self.slot, self.gen, buf);
        if back.is_none() && self.cancel_on_drop {
            if let Some(ep) = &core.ep {
                let _ = ep.cancel(self.slot as usize + 1);
            }
        }
        drop(core);
        drop(back);
    }
}
