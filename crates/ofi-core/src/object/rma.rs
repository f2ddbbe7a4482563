//! The endpoint's RMA calls (`man fi_rma`), raw layer: the general
//! `post_rma` and the read / write forms built on it. The core checks caps,
//! iov limits and that local and remote lengths agree before the provider
//! sees a call; keys, access rights and bounds are enforced at the target.
// The raw calls are unsafe fns: each hands its caller's memory promise on
// to the provider's `post_rma`, whose contract it is.
#![allow(unsafe_code)]

use super::Endpoint;
use crate::consts::*;
use crate::error::{errno, Error, Result};
use crate::provider::{RmaDir, RmaOp};
use crate::util::iov::{iov_len, IoVec};
use crate::util::rma::RmaIov;

fn one(buf: usize, len: usize) -> [IoVec; 1] {
    [IoVec { base: buf, len }]
}

impl Endpoint {
    /// The common call, admitted at a glance: the capability, one range on
    /// each side (within any limit) of equal lengths, an inject that is a
    /// write within the inject size, no FI_COMMIT_COMPLETE. False sends
    /// the call through [`check_rma`](Self::check_rma), which decides it
    /// and says why it is refused.
    #[inline]
    fn rma_plain(&self, op: &RmaOp<'_>) -> bool {
        let caps = self.info.caps;
        let len = match (op.iov, op.rma_iov) {
            ([l], [r]) if l.len == r.len => l.len,
            _ => return false,
        };
        caps & FI_RMA != 0
            && (caps & (FI_READ | FI_WRITE) == 0 || caps & op.dir.flag() != 0)
            && op.flags & FI_COMMIT_COMPLETE == 0
            && (op.flags & FI_INJECT == 0
                || (!op.dir.is_read() && len <= self.info.tx_attr.inject_size))
    }

    /// Every check of an RMA call, with the reason of a refusal.
    #[cold]
    #[inline(never)]
    pub(super) fn check_rma(&self, op: &RmaOp<'_>) -> Result<()> {
        let dir = op.dir.flag();
        if self.info.caps & FI_RMA == 0
            || (self.info.caps & (FI_READ | FI_WRITE) != 0 && self.info.caps & dir == 0)
        {
            return self.require_caps(FI_RMA | dir, op.dir.name());
        }
        let t = &self.info.tx_attr;
        self.check_commit(op.flags)?;
        if op.iov.len() > t.iov_limit.max(1) {
            return Err(Error::inval(format!(
                "rma: {} local ranges exceed iov_limit {}",
                op.iov.len(),
                t.iov_limit
            )));
        }
        if op.rma_iov.is_empty() || op.rma_iov.len() > t.rma_iov_limit.max(1) {
            return Err(Error::inval(format!(
                "rma: {} remote ranges (rma_iov_limit {})",
                op.rma_iov.len(),
                t.rma_iov_limit
            )));
        }
        let remote = op
            .rma_iov
            .iter()
            .fold(0usize, |a, r| a.saturating_add(r.len));
        let local = iov_len(op.iov);
        if local != remote {
            return Err(Error::inval(format!(
                "rma: local length {local} differs from remote length {remote}"
            )));
        }
        if op.flags & FI_INJECT != 0 {
            if op.dir.is_read() {
                return Err(Error::inval("rma: FI_INJECT on a read"));
            }
            if local > t.inject_size {
                return Err(Error::new(
                    errno::FI_EMSGSIZE,
                    format!("rma: {local} bytes exceed inject_size {}", t.inject_size),
                ));
            }
        }
        Ok(())
    }

    /// `fi_readmsg` / `fi_writemsg`: the general RMA call.
    ///
    /// # Safety
    /// The local ranges must stay valid (and, for a read, unaliased) until
    /// the operation completes; with FI_INJECT, until this call returns.
    #[inline]
    pub unsafe fn post_rma(&self, op: &RmaOp<'_>) -> Result<()> {
        if !self.rma_plain(op) {
            self.check_rma(op)?;
        }
        // SAFETY: the caller keeps `op.iov` valid (for a read, unaliased) until the
        // operation completes, with FI_INJECT until this call returns (this fn's
        // contract), which is the provider's `post_rma` contract.
        unsafe { self.ops.post_rma(op) }
    }

    /// One read or write of `len` bytes between local `buf` and the peer's
    /// `(addr, key)`: the single-range form behind `read`, `write` and
    /// their variants.
    ///
    /// # Safety
    /// `buf..buf+len` must stay valid until the operation completes (for a
    /// read, writable and unaliased; with FI_INJECT, until this call
    /// returns), as for [`Self::post_rma`].
    #[allow(clippy::too_many_arguments)]
    unsafe fn rma1(
        &self,
        buf: usize,
        len: usize,
        peer: u64,
        addr: u64,
        key: u64,
        data: u64,
        context: usize,
        flags: u64,
        dir: RmaDir,
    ) -> Result<()> {
        let iov = one(buf, len);
        let rma = [RmaIov { addr, len, key }];
        let op = RmaOp {
            iov: &iov,
            desc: &[],
            addr: peer,
            rma_iov: &rma,
            data,
            context,
            flags,
            dir,
        };
        // SAFETY: `iov` is the one range `buf..buf+len`, which the caller keeps valid
        // (for a read, writable and unaliased) until the operation completes,
        // with FI_INJECT until this call returns (this fn's contract): the
        // contract of `Self::post_rma`.
        unsafe { self.post_rma(&op) }
    }

    /// `fi_read`: reads `len` bytes at the peer's `(addr, key)` into `buf`.
    ///
    /// # Safety
    /// `buf..buf+len` must stay valid and unaliased until the read completes.
    pub unsafe fn read(
        &self,
        buf: *mut u8,
        len: usize,
        src: u64,
        addr: u64,
        key: u64,
        context: usize,
    ) -> Result<()> {
        // SAFETY: the caller keeps `buf..buf+len` valid and unaliased until the read
        // completes (this fn's contract): `rma1`'s contract for a read.
        unsafe {
            self.rma1(
                buf as usize,
                len,
                src,
                addr,
                key,
                0,
                context,
                FI_COMPLETION,
                RmaDir::Read,
            )
        }
    }

    /// `fi_readv`: reads into several local ranges from one remote range.
    ///
    /// # Safety
    /// As [`read`](Self::read), for every range.
    pub unsafe fn readv(
        &self,
        iov: &[IoVec],
        src: u64,
        addr: u64,
        key: u64,
        context: usize,
    ) -> Result<()> {
        let rma = [RmaIov {
            addr,
            len: iov_len(iov),
            key,
        }];
        let op = RmaOp {
            iov,
            desc: &[],
            addr: src,
            rma_iov: &rma,
            data: 0,
            context,
            flags: FI_COMPLETION,
            dir: RmaDir::Read,
        };
        // SAFETY: the caller keeps every `iov` range valid and unaliased until the read
        // completes (this fn's contract): `post_rma`'s contract for a read.
        unsafe { self.post_rma(&op) }
    }

    /// `fi_write`: writes `len` bytes from `buf` to the peer's `(addr, key)`.
    ///
    /// # Safety
    /// `buf..buf+len` must stay valid until the write completes.
    pub unsafe fn write(
        &self,
        buf: *const u8,
        len: usize,
        dest: u64,
        addr: u64,
        key: u64,
        context: usize,
    ) -> Result<()> {
        // SAFETY: the caller keeps `buf..buf+len` valid until the write completes
        // (this fn's contract): `rma1`'s contract for a write.
        unsafe {
            self.rma1(
                buf as usize,
                len,
                dest,
                addr,
                key,
                0,
                context,
                FI_COMPLETION,
                RmaDir::Write,
            )
        }
    }

    /// `fi_writev`: writes several local ranges to one remote range.
    ///
    /// # Safety
    /// As [`write`](Self::write), for every range.
    pub unsafe fn writev(
        &self,
        iov: &[IoVec],
        dest: u64,
        addr: u64,
        key: u64,
        context: usize,
    ) -> Result<()> {
        let rma = [RmaIov {
            addr,
            len: iov_len(iov),
            key,
        }];
        let op = RmaOp {
            iov,
            desc: &[],
            addr: dest,
            rma_iov: &rma,
            data: 0,
            context,
            flags: FI_COMPLETION,
            dir: RmaDir::Write,
        };
        // SAFETY: the caller keeps every `iov` range valid until the write completes
        // (this fn's contract): `post_rma`'s contract for a write.
        unsafe { self.post_rma(&op) }
    }

    /// `fi_writedata`: a write that also delivers `data` to the target's
    /// receive CQ (flags FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA).
    ///
    /// # Safety
    /// As [`write`](Self::write).
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn writedata(
        &self,
        buf: *const u8,
        len: usize,
        data: u64,
        dest: u64,
        addr: u64,
        key: u64,
        context: usize,
    ) -> Result<()> {
        // SAFETY: the caller keeps `buf..buf+len` valid until the write completes
        // (this fn's contract): `rma1`'s contract for a write.
        unsafe {
            self.rma1(
                buf as usize,
                len,
                dest,
                addr,
                key,
                data,
                context,
                FI_COMPLETION | FI_REMOTE_CQ_DATA,
                RmaDir::Write,
            )
        }
    }

    /// `fi_inject_write`: the buffer is reusable on return; no completion.
    pub fn inject_write(&self, buf: &[u8], dest: u64, addr: u64, key: u64) -> Result<()> {
        // SAFETY: `buf` is borrowed for this call, and with FI_INJECT `rma1` needs
        // its range only until the call returns (the provider copies the data).
        unsafe {
            self.rma1(
                buf.as_ptr() as usize,
                buf.len(),
                dest,
                addr,
                key,
                0,
                0,
                FI_INJECT | OFI_INJECT_CALL,
                RmaDir::Write,
            )
        }
    }

    /// `fi_inject_writedata`.
    pub fn inject_writedata(
        &self,
        buf: &[u8],
        data: u64,
        dest: u64,
        addr: u64,
        key: u64,
    ) -> Result<()> {
        // SAFETY: `buf` is borrowed for this call, and with FI_INJECT `rma1` needs
        // its range only until the call returns (the provider copies the data).
        unsafe {
            self.rma1(
                buf.as_ptr() as usize,
                buf.len(),
                dest,
                addr,
                key,
                data,
                0,
                FI_INJECT | OFI_INJECT_CALL | FI_REMOTE_CQ_DATA,
                RmaDir::Write,
            )
        }
    }
}
