//! The endpoint's message and tagged calls (`man fi_msg`, `man fi_tagged`),
//! raw layer: the general `post_send` / `post_recv` and the short forms
//! built on them.
// The raw calls are unsafe fns: each hands its caller's memory promise on
// to the provider's `post_send` / `post_recv`, whose contract it is.
#![allow(unsafe_code)]

use super::Endpoint;
use crate::consts::*;
use crate::error::{errno, Error, Result};
use crate::provider::{RecvOp, SendOp};
use crate::util::iov::IoVec;

/// The one-range list of `buf..buf+len`.
fn single(buf: *const u8, len: usize) -> [IoVec; 1] {
    [IoVec {
        base: buf as usize,
        len,
    }]
}

/// FI_DISCARD without FI_PEEK or FI_CLAIM.
#[cold]
fn discard_alone() -> Error {
    Error::new(
        errno::FI_EBADFLAGS,
        "receive: FI_DISCARD goes with FI_PEEK or FI_CLAIM",
    )
}

impl Endpoint {
    /// `fi_sendmsg` / `fi_tsendmsg`: the general send.
    ///
    /// # Safety
    /// The iov memory must stay valid until the send completes (with
    /// FI_INJECT: until this call returns).
    #[inline]
    pub unsafe fn post_send(&self, op: &SendOp<'_>) -> Result<()> {
        // SAFETY: the caller keeps `op.iov` valid until the send completes (with
        // FI_INJECT, until this call returns): this fn's contract, which is the
        // provider's `post_send` contract.
        unsafe { self.ops.post_send(op) }
    }

    /// `fi_recvmsg` / `fi_trecvmsg`: the general receive. FI_DISCARD
    /// goes with FI_PEEK or FI_CLAIM (fi_tagged(3)); alone it is
    /// `FI_EBADFLAGS`, whatever the provider.
    ///
    /// # Safety
    /// The iov memory must stay valid and unaliased until the receive completes.
    #[inline]
    pub unsafe fn post_recv(&self, op: &RecvOp<'_>) -> Result<()> {
        if op.flags & FI_DISCARD != 0 && op.flags & (FI_PEEK | FI_CLAIM) == 0 {
            return Err(discard_alone());
        }
        // SAFETY: the caller keeps `op.iov` valid and unaliased until the receive
        // completes (this fn's contract), which is the provider's `post_recv`
        // contract.
        unsafe { self.ops.post_recv(op) }
    }

    /// `fi_send`.
    ///
    /// # Safety
    /// `buf..buf+len` must stay valid until the send completes.
    #[inline]
    pub unsafe fn send(&self, buf: *const u8, len: usize, dest: u64, context: usize) -> Result<()> {
        let iov = single(buf, len);
        let op = SendOp {
            iov: &iov,
            desc: &[],
            dest,
            tag: 0,
            data: 0,
            context,
            flags: FI_COMPLETION,
            tagged: false,
        };
        // SAFETY: `iov` is the one range `buf..buf+len`, which the caller keeps valid
        // until the send completes (this fn's contract): `post_send`'s contract.
        unsafe { self.ops.post_send(&op) }
    }

    /// `fi_senddata`: a send carrying remote CQ data.
    ///
    /// # Safety
    /// As [`send`](Self::send).
    pub unsafe fn senddata(
        &self,
        buf: *const u8,
        len: usize,
        data: u64,
        dest: u64,
        context: usize,
    ) -> Result<()> {
        let iov = single(buf, len);
        let op = SendOp {
            iov: &iov,
            desc: &[],
            dest,
            tag: 0,
            data,
            context,
            flags: FI_COMPLETION | FI_REMOTE_CQ_DATA,
            tagged: false,
        };
        // SAFETY: `iov` is the one range `buf..buf+len`, which the caller keeps valid
        // until the send completes (this fn's contract): `post_send`'s contract.
        unsafe { self.ops.post_send(&op) }
    }

    /// `fi_sendv`.
    ///
    /// # Safety
    /// Every iov range must stay valid until the send completes.
    pub unsafe fn sendv(&self, iov: &[IoVec], dest: u64, context: usize) -> Result<()> {
        let op = SendOp {
            iov,
            desc: &[],
            dest,
            tag: 0,
            data: 0,
            context,
            flags: FI_COMPLETION,
            tagged: false,
        };
        // SAFETY: the caller keeps every `iov` range valid until the send completes
        // (this fn's contract), which is `post_send`'s contract.
        unsafe { self.ops.post_send(&op) }
    }

    /// `fi_inject`: the buffer may be reused on return; no completion.
    pub fn inject(&self, buf: &[u8], dest: u64) -> Result<()> {
        let iov = [IoVec::from_slice(buf)];
        let op = SendOp {
            iov: &iov,
            desc: &[],
            dest,
            tag: 0,
            data: 0,
            context: 0,
            flags: FI_INJECT | OFI_INJECT_CALL,
            tagged: false,
        };
        // SAFETY: FI_INJECT copies before returning; buf is live for the call.
        unsafe { self.ops.post_send(&op) }
    }

    /// `fi_injectdata`.
    pub fn injectdata(&self, buf: &[u8], data: u64, dest: u64) -> Result<()> {
        let iov = [IoVec::from_slice(buf)];
        let op = SendOp {
            iov: &iov,
            desc: &[],
            dest,
            tag: 0,
            data,
            context: 0,
            flags: FI_INJECT | OFI_INJECT_CALL | FI_REMOTE_CQ_DATA,
            tagged: false,
        };
        // SAFETY: FI_INJECT copies before returning; buf is live for the call.
        unsafe { self.ops.post_send(&op) }
    }

    /// `fi_recv`.
    ///
    /// # Safety
    /// `buf..buf+len` must stay valid and unaliased until the receive completes.
    #[inline]
    pub unsafe fn recv(&self, buf: *mut u8, len: usize, src: u64, context: usize) -> Result<()> {
        let iov = single(buf, len);
        let op = RecvOp {
            iov: &iov,
            desc: &[],
            src,
            tag: 0,
            ignore: 0,
            context,
            flags: FI_COMPLETION,
            tagged: false,
        };
        // SAFETY: `iov` is the one range `buf..buf+len`, which the caller keeps valid
        // and unaliased until the receive completes (this fn's contract):
        // `post_recv`'s contract.
        unsafe { self.ops.post_recv(&op) }
    }

    /// `fi_recvv`.
    ///
    /// # Safety
    /// Every iov range must stay valid and unaliased until the receive completes.
    pub unsafe fn recvv(&self, iov: &[IoVec], src: u64, context: usize) -> Result<()> {
        let op = RecvOp {
            iov,
            desc: &[],
            src,
            tag: 0,
            ignore: 0,
            context,
            flags: FI_COMPLETION,
            tagged: false,
        };
        // SAFETY: the caller keeps every `iov` range valid and unaliased until the
        // receive completes (this fn's contract), which is `post_recv`'s contract.
        unsafe { self.ops.post_recv(&op) }
    }

    /// `fi_tsend`.
    ///
    /// # Safety
    /// As [`send`](Self::send).
    #[inline]
    pub unsafe fn tsend(
        &self,
        buf: *const u8,
        len: usize,
        dest: u64,
        tag: u64,
        context: usize,
    ) -> Result<()> {
        let iov = single(buf, len);
        let op = SendOp {
            iov: &iov,
            desc: &[],
            dest,
            tag,
            data: 0,
            context,
            flags: FI_COMPLETION,
            tagged: true,
        };
        // SAFETY: `iov` is the one range `buf..buf+len`, which the caller keeps valid
        // until the send completes (this fn's contract): `post_send`'s contract.
        unsafe { self.ops.post_send(&op) }
    }

    /// `fi_tsenddata`.
    ///
    /// # Safety
    /// As [`send`](Self::send).
    pub unsafe fn tsenddata(
        &self,
        buf: *const u8,
        len: usize,
        data: u64,
        dest: u64,
        tag: u64,
        context: usize,
    ) -> Result<()> {
        let iov = single(buf, len);
        let op = SendOp {
            iov: &iov,
            desc: &[],
            dest,
            tag,
            data,
            context,
            flags: FI_COMPLETION | FI_REMOTE_CQ_DATA,
            tagged: true,
        };
        // SAFETY: `iov` is the one range `buf..buf+len`, which the caller keeps valid
        // until the send completes (this fn's contract): `post_send`'s contract.
        unsafe { self.ops.post_send(&op) }
    }

    /// `fi_tinject`.
    pub fn tinject(&self, buf: &[u8], dest: u64, tag: u64) -> Result<()> {
        let iov = [IoVec::from_slice(buf)];
        let op = SendOp {
            iov: &iov,
            desc: &[],
            dest,
            tag,
            data: 0,
            context: 0,
            flags: FI_INJECT | OFI_INJECT_CALL,
            tagged: true,
        };
        // SAFETY: FI_INJECT copies before returning; buf is live for the call.
        unsafe { self.ops.post_send(&op) }
    }

    /// `fi_trecv`.
    ///
    /// # Safety
    /// As [`recv`](Self::recv).
    #[inline]
    pub unsafe fn trecv(
        &self,
        buf: *mut u8,
        len: usize,
        src: u64,
        tag: u64,
        ignore: u64,
        context: usize,
    ) -> Result<()> {
        let iov = single(buf, len);
        let op = RecvOp {
            iov: &iov,
            desc: &[],
            src,
            tag,
            ignore,
            context,
            flags: FI_COMPLETION,
            tagged: true,
        };
        // SAFETY: `iov` is the one range `buf..buf+len`, which the caller keeps valid
        // and unaliased until the receive completes (this fn's contract):
        // `post_recv`'s contract.
        unsafe { self.ops.post_recv(&op) }
    }
}
