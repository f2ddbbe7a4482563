//! Sends in flight: the caller's context and completion flags behind the
//! small id the protocol core carries, and copies of injected payloads.
#![allow(unsafe_code)]

use super::IOV_LIMIT;
use ofi_core::consts::*;
use ofi_core::error::{errno, Error, Result};
use ofi_core::object::{EpBindings, SendOp};
use ofi_core::util::iov::{copy_from_iov, iov_len, IoVec};
use ofi_core::util::slab::Slab;
use ofi_proto::tcp::SendReq;

/// What a send's completion reports.
#[derive(Debug)]
pub struct SendMeta {
    /// The caller's context.
    pub context: usize,
    /// CQ flags.
    pub flags: u64,
    /// Whether a CQ entry is written.
    pub completion: bool,
    /// The copied payload of an inject (kept until written).
    pub inject: Option<Vec<u8>>,
}

/// The table of sends in flight.
#[derive(Debug)]
pub struct Sends {
    /// The provider's name, prefixing errors.
    prov: &'static str,
    /// The records, under their id less one.
    slots: Slab<SendMeta>,
    pool: Vec<Vec<u8>>,
}

impl Sends {
    /// An empty table for an endpoint of provider `prov`.
    pub fn new(prov: &'static str) -> Sends {
        Sends {
            prov,
            slots: Slab::new(),
            pool: Vec::new(),
        }
    }

    /// Registers a send; returns the request for the protocol core.
    ///
    /// # Safety
    /// Unless FI_INJECT is set, the iov ranges stay readable until the send
    /// completes; with FI_INJECT they are read (copied) here.
    pub unsafe fn start(
        &mut self,
        op: &SendOp<'_>,
        selective: bool,
        inject_size: usize,
    ) -> Result<SendReq> {
        if op.iov.len() > IOV_LIMIT {
            return Err(Error::inval(format!(
                "{}: {} iov entries exceed the limit of {IOV_LIMIT}",
                self.prov,
                op.iov.len()
            )));
        }
        let inject = op.flags & FI_INJECT != 0;
        let len = iov_len(op.iov);
        if inject && len > inject_size {
            return Err(Error::new(
                errno::FI_EMSGSIZE,
                format!(
                    "{}: inject of {len} bytes exceeds inject_size {inject_size}",
                    self.prov
                ),
            ));
        }
        let mut req = SendReq::default();
        let copy = if inject {
            let mut v = self.pool.pop().unwrap_or_default();
            v.clear();
            v.resize(len, 0);
            // SAFETY: the caller's iov is readable for this call.
            unsafe { copy_from_iov(op.iov, 0, &mut v) };
            req.iov[0] = IoVec {
                base: v.as_ptr() as usize,
                len,
            };
            req.iov_cnt = 1;
            Some(v)
        } else {
            req.iov[..op.iov.len()].copy_from_slice(op.iov);
            req.iov_cnt = op.iov.len();
            None
        };
        req.tagged = op.tagged;
        req.tag = op.tag;
        if op.flags & FI_REMOTE_CQ_DATA != 0 {
            req.cq_data = true;
            req.data = op.data;
        }
        let meta = SendMeta {
            context: op.context,
            flags: FI_SEND | if op.tagged { FI_TAGGED } else { FI_MSG },
            completion: ofi_core::object::tx_completion(op.flags, selective),
            inject: copy,
        };
        req.context = self.slots.insert(meta) + 1;
        Ok(req)
    }

    /// The send as the protocol core takes it, registering nothing: for a
    /// fast path, which reads the ranges before the call returns. `None`
    /// when the iov list is too long (the registering
    /// [`start`](Self::start) reports that error).
    #[inline]
    pub fn bare(op: &SendOp<'_>) -> Option<SendReq> {
        if op.iov.len() > IOV_LIMIT {
            return None;
        }
        let mut req = SendReq::default();
        req.iov[..op.iov.len()].copy_from_slice(op.iov);
        req.iov_cnt = op.iov.len();
        req.tagged = op.tagged;
        req.tag = op.tag;
        if op.flags & FI_REMOTE_CQ_DATA != 0 {
            req.cq_data = true;
            req.data = op.data;
        }
        Some(req)
    }

    /// Completes a send a fast path wrote whole (nothing was registered).
    #[inline]
    pub fn complete_now(b: &EpBindings, op: &SendOp<'_>) {
        let flags = FI_SEND | if op.tagged { FI_TAGGED } else { FI_MSG };
        b.tx_done(
            op.context,
            flags,
            ofi_core::object::tx_completion(op.flags, b.tx_selective),
            None,
        );
    }

    /// Takes a finished send's record.
    #[inline]
    pub fn finish(&mut self, id: usize) -> Option<SendMeta> {
        self.slots.remove(id.checked_sub(1)?)
    }

    /// Completes send `id` (the core's SendComplete / SendError) into the
    /// bindings' transmit CQ and counter, and recycles its inject copy.
    #[inline]
    pub fn complete(&mut self, b: &EpBindings, id: usize, err: Option<i32>) {
        if let Some(m) = self.finish(id) {
            b.tx_done(m.context, m.flags, m.completion, err);
            if let Some(v) = m.inject {
                self.recycle(v);
            }
        }
    }

    /// Returns an inject copy for reuse.
    #[inline]
    pub fn recycle(&mut self, v: Vec<u8>) {
        if self.pool.len() < 64 {
            self.pool.push(v);
        }
    }

    /// Forgets a request the core refused.
    pub fn abandon(&mut self, req: &SendReq) {
        if let Some(m) = self.finish(req.context) {
            if let Some(v) = m.inject {
                self.recycle(v);
            }
        }
    }
}
