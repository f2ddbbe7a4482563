//! Capsules over a fabric channel, as both drivers (the target's and the
//! initiator's session) move them: receives kept posted that take capsules
//! in, and queued capsules sent out in batches.

use crate::wire::{capsules, Batch, BATCH_BYTES, CAPSULE_LEN};
use ofi::safe::{Addr, Channel, Op};
use ofi::Error;
use std::collections::VecDeque;

/// Takes in a posted capsule receive once it has finished: hands each
/// capsule of its message to `take` (with the sender, when the provider
/// names it), then posts the buffer again, on connection `conn` (MSG) or
/// for any peer (`None`). `None` while the receive runs; `Some(Err)` when
/// the buffer could not be posted again.
pub(crate) fn reap<'ch>(
    ch: &'ch Channel,
    r: &mut Op<'ch, Vec<u8>>,
    conn: Option<Addr>,
    mut take: impl FnMut(&[u8], Option<Addr>),
) -> Option<Result<(), Error>> {
    let buf = match r.check()? {
        Ok(d) => {
            for c in capsules(d.bytes()) {
                take(c, d.src);
            }
            d.buf
        }
        Err(e) => e.buf.unwrap_or_else(|| vec![0u8; BATCH_BYTES]),
    };
    let again = match conn {
        Some(c) => ch.recv_on(buf, c),
        None => ch.recv(buf),
    };
    Some(match again {
        Ok(op) => {
            *r = op;
            Ok(())
        }
        Err(e) => Err(e.error),
    })
}

/// What a [`flush`] did.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Flushed {
    /// At least one message went.
    pub sent: bool,
    /// At least one message was refused (its capsules are dropped).
    pub dropped: bool,
    /// The provider pushed back (FI_EAGAIN): what it did not take stays
    /// queued.
    pub again: bool,
}

/// Sends the queued capsules, those in a row for the same peer in one
/// message. A peer the provider pushes back for (FI_EAGAIN) keeps its
/// capsules queued, in order, and holds up no other peer's. A message the
/// provider refuses otherwise goes to `refused` with the error, and its
/// capsules leave the queue.
pub(crate) fn flush(
    ch: &Channel,
    outbox: &mut VecDeque<(Addr, [u8; CAPSULE_LEN])>,
    mut refused: impl FnMut(Error),
) -> Flushed {
    let mut f = Flushed::default();
    let mut b = Batch::default();
    // Peers pushed back for in this call, and their capsules (in order).
    let mut blocked: Vec<Addr> = Vec::new();
    let mut kept: VecDeque<(Addr, [u8; CAPSULE_LEN])> = VecDeque::new();
    while let Some(&(addr, _)) = outbox.front() {
        if blocked.contains(&addr) {
            kept.extend(outbox.pop_front());
            continue;
        }
        b.clear();
        for (a, c) in outbox.iter() {
            if *a != addr || !b.push(c) {
                break;
            }
        }
        match ch.inject(b.bytes(), addr) {
            Ok(()) => f.sent = true,
            Err(e) if e.is_again() => {
                f.again = true;
                blocked.push(addr);
                kept.extend(outbox.drain(..b.count()));
                continue;
            }
            Err(e) => {
                f.dropped = true;
                refused(e);
            }
        }
        outbox.drain(..b.count());
    }
    if !kept.is_empty() {
        *outbox = kept;
    }
    f
}
