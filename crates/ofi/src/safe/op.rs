//! What posting returns: an [`Op`] handle that owns the operation's buffer
//! until it completes, the [`Done`] it turns into, and the errors that hand
//! the buffer back ([`PostError`], [`OpError`]), each usable with `?`.

use super::buf::Held;
use super::table::{Failed, Report, Slot, Taken, DONE};
use super::{Addr, Channel};
use crate::{Error, ErrorKind, IoBuf};
use std::fmt;
use std::time::{Duration, Instant};

/// Identifies an operation posted on a channel (its context).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OpId(pub u64);

/// A finished operation with its buffer handed back.
#[derive(Debug)]
pub struct Done<B> {
    /// The buffer (for a receive or read, `len` bytes of it were written).
    pub buf: B,
    /// Bytes received (receives and reads; 0 for sends and writes).
    pub len: usize,
    /// The message's tag (tagged receives).
    pub tag: u64,
    /// Remote CQ data, if the sender attached some.
    pub data: Option<u64>,
    /// The sender, if it is in the address vector (receives).
    pub src: Option<Addr>,
}

impl<B: IoBuf> Done<B> {
    /// The bytes received: the first `len` bytes of the buffer.
    pub fn bytes(&self) -> &[u8] {
        let b = self.buf.as_ref();
        &b[..self.len.min(b.len())]
    }
}

impl Done<super::Atomic> {
    /// The fetched value of a one-element 64-bit fetch or compare atomic
    /// (as from [`Channel::fetch_add_u64`]).
    pub fn fetched_u64(&self) -> Option<u64> {
        Some(u64::from_ne_bytes(
            self.buf.result.as_slice().try_into().ok()?,
        ))
    }
}

impl<B> Done<B> {
    #[inline(always)]
    fn new(buf: B, r: Report) -> Done<B> {
        Done {
            buf,
            len: r.len,
            tag: r.tag,
            data: r.data,
            src: r.src,
        }
    }
}

/// A post that the provider refused, with the buffer handed back.
/// Converts into [`Error`] (dropping the buffer), so `?` works.
pub struct PostError<B> {
    /// The buffer, untouched.
    pub buf: B,
    /// Why the post failed (`FI_EAGAIN`: the queue is full, try later).
    pub error: Error,
}

/// An operation that did not finish successfully.
pub struct OpError<B> {
    /// What went wrong: the provider's error (truncated, cancelled, peer
    /// gone, access refused at the target …), a wait that timed out
    /// ([`ErrorKind::TimedOut`]: the operation is still in flight), or a
    /// handle already taken.
    pub error: Error,
    /// The buffer, when the operation ended (none on a wait's timeout: it
    /// stays with the operation, and `error` says "still in flight"; none
    /// when the operation failed with `FI_ETIMEDOUT` on shm or hybrid: its
    /// peer, silent but maybe alive, may still copy into it across
    /// processes, so it is kept for good rather than handed back).
    pub buf: Option<B>,
    /// Bytes that did not fit (truncation).
    pub overflow: usize,
}

macro_rules! buf_error {
    ($t:ident) => {
        impl<B> $t<B> {
            /// The kind of failure.
            pub fn kind(&self) -> ErrorKind {
                self.error.kind()
            }
        }
        impl<B> fmt::Debug for $t<B> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($t), self.error)
            }
        }
        impl<B> fmt::Display for $t<B> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.error, f)
            }
        }
        impl<B> std::error::Error for $t<B> {}
        impl<B> From<$t<B>> for Error {
            fn from(e: $t<B>) -> Error {
                e.error
            }
        }
    };
}

buf_error!(PostError);
buf_error!(OpError);

impl<B> From<Error> for OpError<B> {
    /// A failure that is not the operation's own (a queue error while
    /// driving the channel): no buffer comes with it.
    fn from(error: Error) -> OpError<B> {
        OpError {
            error,
            buf: None,
            overflow: 0,
        }
    }
}

impl<B> PostError<B> {
    /// The buffer and the error.
    pub fn into_parts(self) -> (B, Error) {
        (self.buf, self.error)
    }
}

/// A posted operation: owns its buffer until it completes.
///
/// Collect it with [`check`](Self::check) after [`Channel::poll`], or block
/// with [`wait`](Self::wait). Dropping it before it completes cancels a
/// receive and hands the buffer to the channel, which frees it once the
/// provider is done with it; forgetting it (`mem::forget`) leaks the buffer.
#[must_use = "an operation's buffer comes back through its handle"]
pub struct Op<'ch, B: Send + 'static> {
    pub(super) ch: &'ch Channel,
    /// The operation's slot in the channel's table (slots stay put while
    /// the channel lives), its id there, and the key the slot holds once
    /// the operation is done (its generation | DONE: one compare).
    pub(super) slot: &'ch Slot,
    pub(super) id: u32,
    pub(super) done: u32,
    pub(super) buf: Option<Held<B>>,
    pub(super) cancel_on_drop: bool,
    /// Whom it was posted to (on an MSG channel, its connection).
    pub(super) on: Addr,
}

impl<B: Send + 'static> fmt::Debug for Op<'_, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Op")
            .field("id", &self.id())
            .field("taken", &self.buf.is_none())
            .finish()
    }
}

impl<'ch, B: Send + 'static> Op<'ch, B> {
    /// The operation's id (its context on the endpoint).
    pub fn id(&self) -> OpId {
        OpId(u64::from(self.id) + 1)
    }

    /// True once its completion has been collected by [`Channel::poll`].
    pub fn is_done(&self) -> bool {
        self.buf.is_some() && self.slot.is_done(self.done)
    }

    /// The result if the operation has finished (no progress: call
    /// [`Channel::poll`] to collect completions); `None` while in flight.
    /// After it returned the result once, an error (`FI_EALREADY`).
    #[inline(always)]
    pub fn check(&mut self) -> Option<Result<Done<B>, OpError<B>>> {
        // Once the result was taken the slot is free and may be reused,
        // and after 2^30 reuses its key repeats this handle's: a handle
        // that gave its result never looks at the slot again.
        if self.buf.is_none() {
            return Some(Err(taken()));
        }
        let r = self.ch.table.take(self.slot, self.id, self.done)?;
        // The buffer moves once, straight into what is returned.
        Some(match self.buf.take() {
            Some(buf) => finish(r, buf, || self.ch.table.keep_timed_out.get()),
            None => Err(taken()),
        })
    }

    /// Drives the channel until the operation finishes or `timeout`
    /// passes (spinning briefly, then sleeping on the completion queue). On
    /// timeout the error is [`ErrorKind::TimedOut`] and the operation is
    /// still in flight: wait again, or drop it.
    pub fn wait(&mut self, timeout: Duration) -> Result<Done<B>, OpError<B>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(r) = self.check() {
                return r;
            }
            let step = match self.ch.poll() {
                Ok(0) => self.ch.block(deadline),
                Ok(_) => Ok(()),
                Err(e) => Err(e),
            };
            if let Err(error) = step {
                if let Some(r) = self.check() {
                    return r;
                }
                return Err(OpError {
                    error,
                    buf: None,
                    overflow: 0,
                });
            }
            if Instant::now() >= deadline {
                if let Some(r) = self.check() {
                    return r;
                }
                return Err(OpError {
                    error: Error::new(
                        crate::errno::FI_ETIMEDOUT,
                        format!("operation still in flight after {timeout:?}"),
                    ),
                    buf: None,
                    overflow: 0,
                });
            }
        }
    }

    /// Cancels the operation (`fi_cancel`): a posted receive completes with
    /// `FI_ECANCELED`; a send or one-sided operation already under way
    /// completes as it would have.
    pub fn cancel(&self) -> crate::Result<()> {
        self.ch.cancel_ctx(self.id().0 as usize, self.on)
    }
}

impl<B: Send + 'static> Op<'_, B> {
    /// Hands an unfinished operation's buffer to the channel.
    #[cold]
    #[inline(never)]
    fn abandon(&mut self) {
        let Some(buf) = self.buf.take() else {
            return;
        };
        // A done operation's buffer comes back: dropped here (the safe
        // layer holds no lock).
        let pending = self
            .ch
            .table
            .orphan(self.id, self.done & !DONE, buf)
            .is_none();
        if pending && self.cancel_on_drop {
            let _ = self.ch.cancel_ctx(self.id().0 as usize, self.on);
        }
    }
}

impl<B: Send + 'static> Drop for Op<'_, B> {
    #[inline(always)]
    fn drop(&mut self) {
        if self.buf.is_some() {
            self.abandon();
        }
    }
}

/// A handle asked again after it gave its result.
#[cold]
#[inline(never)]
fn taken<B>() -> OpError<B> {
    OpError {
        error: Error::new(
            crate::errno::FI_EALREADY,
            "operation: its result was already taken",
        ),
        buf: None,
        overflow: 0,
    }
}

/// What an operation's handle returns once its result `r` is collected:
/// the buffer comes back with it, except after an `FI_ETIMEDOUT` failure
/// when `keep_timed_out` (the provider lets peers write into this
/// process's memory, see `table::late_writes`): the silent peer may still
/// write into the buffer, which then stays in its wrapper for good (moving
/// it out would free or reuse the address the peer writes to). The safe
/// and async layers' one rule.
#[inline(always)]
pub(crate) fn finish<B>(
    r: Taken,
    buf: Held<B>,
    keep_timed_out: impl FnOnce() -> bool,
) -> Result<Done<B>, OpError<B>> {
    match r {
        Ok(r) => Ok(Done::new(buf.into_inner(), r)),
        Err(f) => Err(failed(f, buf, keep_timed_out())),
    }
}

/// An operation that ended in error (see [`finish`]).
#[cold]
#[inline(never)]
fn failed<B>(f: Failed, buf: Held<B>, keep_timed_out: bool) -> OpError<B> {
    let buf = if f.err == crate::errno::FI_ETIMEDOUT && keep_timed_out {
        std::mem::forget(buf);
        None
    } else {
        Some(buf.into_inner())
    };
    OpError {
        error: f.error(),
        buf,
        overflow: f.olen,
    }
}

/// A post refused before it reached the provider (async layer): its error
/// and the untouched buffer.
#[cfg(feature = "tokio")]
#[cold]
pub(crate) fn refused<B>(error: Error, buf: B) -> OpError<B> {
    OpError {
        error,
        buf: Some(buf),
        overflow: 0,
    }
}
