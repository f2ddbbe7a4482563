//! The line between an application's tags and the collectives' on an
//! endpoint opened with FI_COLLECTIVE (see the [module](super) docs):
//! bit 63 is the collectives'. `Guarded` draws it: the core puts it
//! between such an endpoint's calls and its provider, so endpoints opened
//! without FI_COLLECTIVE run no check at all.
// Guarded forwards the provider's unsafe post calls under their contracts.
#![allow(unsafe_code)]

use crate::error::{Error, Result};
use crate::provider::{AtomicOp, EndpointOps, EpBindings, McOps, Progress, RecvOp, RmaOp, SendOp};
use crate::util::atomic::AtomicKind;
use std::os::fd::RawFd;
use std::sync::Arc;

/// The tag of every collective frame: bit 63 (the rest is 0).
pub const COLL_TAG: u64 = 1 << 63;

/// The ignore mask of the collectives' receives: every bit but 63, so
/// they take every tag with bit 63 set and no other.
pub const COLL_IGNORE: u64 = !COLL_TAG;

/// An application's tagged send: refused when its tag sets bit 63.
#[inline]
pub fn send(tag: u64) -> Result<()> {
    if tag & COLL_TAG != 0 {
        return Err(reserved(tag));
    }
    Ok(())
}

/// An application's tagged receive: the `(tag, ignore)` it posts with.
/// An ignore mask covering bit 63 loses it (and the tag's bit 63 goes
/// too): the receive matches the application's tags only. A tag with bit
/// 63 set that is not ignored is refused.
#[inline]
pub fn recv(tag: u64, ignore: u64) -> Result<(u64, u64)> {
    if ignore & COLL_TAG != 0 {
        return Ok((tag & !COLL_TAG, ignore & !COLL_TAG));
    }
    if tag & COLL_TAG != 0 {
        return Err(reserved(tag));
    }
    Ok((tag, ignore))
}

#[cold]
fn reserved(tag: u64) -> Error {
    Error::inval(format!(
        "tag {tag:#x}: bit 63 is reserved for collectives on an endpoint opened with FI_COLLECTIVE"
    ))
}

/// A provider's endpoint with the application's tagged sends and receives
/// kept off bit 63 ([`send`], [`recv`]); everything else passes through.
/// The collective layer posts its own frames on the provider's endpoint
/// itself, past the guard.
pub(crate) struct Guarded {
    inner: Arc<dyn EndpointOps>,
}

impl Guarded {
    /// Guards `inner`.
    pub(crate) fn new(inner: Arc<dyn EndpointOps>) -> Guarded {
        Guarded { inner }
    }
}

impl Progress for Guarded {
    fn progress(&self) {
        self.inner.progress()
    }
    fn arm(&self) -> bool {
        self.inner.arm()
    }
    fn disarm(&self) {
        self.inner.disarm()
    }
    fn wait_fd(&self) -> Option<RawFd> {
        self.inner.wait_fd()
    }
}

impl EndpointOps for Guarded {
    fn enable(&self, bindings: EpBindings) -> Result<()> {
        self.inner.enable(bindings)
    }
    fn getname(&self) -> Result<Vec<u8>> {
        self.inner.getname()
    }
    fn setname(&self, addr: &[u8]) -> Result<()> {
        self.inner.setname(addr)
    }
    unsafe fn post_send(&self, op: &SendOp<'_>) -> Result<()> {
        if op.tagged {
            send(op.tag)?;
        }
        // SAFETY: this fn's contract is the provider's `post_send` contract.
        unsafe { self.inner.post_send(op) }
    }
    unsafe fn post_recv(&self, op: &RecvOp<'_>) -> Result<()> {
        if !op.tagged {
            // SAFETY: this fn's contract is the provider's `post_recv` contract.
            return unsafe { self.inner.post_recv(op) };
        }
        let (tag, ignore) = recv(op.tag, op.ignore)?;
        let op = RecvOp { tag, ignore, ..*op };
        // SAFETY: the same memory as the caller's operation, under this
        // fn's contract, which is the provider's `post_recv` contract.
        unsafe { self.inner.post_recv(&op) }
    }
    unsafe fn post_rma(&self, op: &RmaOp<'_>) -> Result<()> {
        // SAFETY: this fn's contract is the provider's `post_rma` contract.
        unsafe { self.inner.post_rma(op) }
    }
    unsafe fn post_atomic(&self, op: &AtomicOp<'_>) -> Result<()> {
        // SAFETY: this fn's contract is the provider's `post_atomic` contract.
        unsafe { self.inner.post_atomic(op) }
    }
    fn query_atomic(&self, kind: AtomicKind, op: u32, datatype: u32) -> Result<usize> {
        self.inner.query_atomic(kind, op, datatype)
    }
    fn cancel(&self, context: usize) -> Result<()> {
        self.inner.cancel(context)
    }
    fn setopt(&self, name: i32, value: usize) -> Result<()> {
        self.inner.setopt(name, value)
    }
    fn getopt(&self, name: i32) -> Result<usize> {
        self.inner.getopt(name)
    }
    fn close(&self) {
        self.inner.close()
    }
    fn connect(&self, addr: &[u8], param: &[u8]) -> Result<()> {
        self.inner.connect(addr, param)
    }
    fn accept(&self, param: &[u8]) -> Result<()> {
        self.inner.accept(param)
    }
    fn shutdown(&self, flags: u64) -> Result<()> {
        self.inner.shutdown(flags)
    }
    fn getpeer(&self) -> Result<Vec<u8>> {
        self.inner.getpeer()
    }
    fn join(&self, addr: &[u8], flags: u64) -> Result<Box<dyn McOps>> {
        self.inner.join(addr, flags)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether a posted receive (tag, ignore) takes a message with `tag`.
    fn takes((t, i): (u64, u64), msg: u64) -> bool {
        (msg | i) == (t | i)
    }

    #[test]
    fn wildcards_keep_to_the_application_side() {
        let all = recv(0, u64::MAX).unwrap();
        assert!(takes(all, 0x1234) && takes(all, COLL_TAG - 1));
        assert!(!takes(all, COLL_TAG) && !takes(all, COLL_TAG | 7));
        let all = recv(u64::MAX, u64::MAX).unwrap();
        assert!(takes(all, 0) && !takes(all, COLL_TAG));
        // A collective receive takes frames only.
        let coll = (COLL_TAG, COLL_IGNORE);
        assert!(takes(coll, COLL_TAG) && !takes(coll, 0) && !takes(coll, 0x1234));
        assert_eq!(recv(5, 1).unwrap(), (5, 1));
        assert!(recv(COLL_TAG | 5, 0).is_err());
        assert!(send(COLL_TAG).is_err() && send(!COLL_TAG).is_ok());
    }
}
