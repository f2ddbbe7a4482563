//! The endpoint's one-sided calls (`man fi_rma`, `man fi_atomic`) and
//! triggered operations (`man fi_trigger`), raw layer.
//!
//! Every call checks what the core can check cheaply before the provider
//! sees it: the endpoint's caps, iov limits, that local and remote lengths
//! agree, and that the atomic op and datatype are defined for the call.
//! Enforcement of keys, access rights and bounds happens at the target.

use super::{Counter, Endpoint};
use crate::consts::*;
use crate::error::{errno, Error, Result};
use crate::object::{AtomicOp, RecvOp, RmaOp, SendOp};
use crate::provider::EndpointOps;
use crate::util::atomic::{self, AtomicKind};
use crate::util::cq::{error_completion, CqCore};
use crate::util::iov::{copy_from_iov, iov_len, IoVec};
use crate::util::rma::{check_atomic_shape, Ioc, RmaIoc, RmaIov};
use std::sync::Arc;

fn one(buf: usize, len: usize) -> [IoVec; 1] {
    [IoVec { base: buf, len }]
}

fn ioc_count(l: &[Ioc]) -> usize {
    l.iter().fold(0usize, |a, v| a.saturating_add(v.count))
}

impl Endpoint {
    fn require_caps(&self, caps: u64, what: &str) -> Result<()> {
        if self.info.caps & caps != caps {
            return Err(Error::new(
                errno::FI_EOPNOTSUPP,
                format!(
                    "{what}: the endpoint was not opened with {}",
                    bits_to_string(CAP_NAMES, caps)
                ),
            ));
        }
        Ok(())
    }

    fn check_rma(&self, op: &RmaOp<'_>) -> Result<()> {
        let dir = if op.read { FI_READ } else { FI_WRITE };
        if self.info.caps & FI_RMA == 0
            || (self.info.caps & (FI_READ | FI_WRITE) != 0 && self.info.caps & dir == 0)
        {
            return self.require_caps(FI_RMA | dir, if op.read { "read" } else { "write" });
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
            if op.read {
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
    pub unsafe fn post_rma(&self, op: &RmaOp<'_>) -> Result<()> {
        self.check_rma(op)?;
        // SAFETY: forwarded caller contract.
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
        read: bool,
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
            read,
        };
        // SAFETY: forwarded caller contract.
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
        // SAFETY: forwarded caller contract.
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
                true,
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
            read: true,
        };
        // SAFETY: forwarded caller contract.
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
        // SAFETY: forwarded caller contract.
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
                false,
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
            read: false,
        };
        // SAFETY: forwarded caller contract.
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
        // SAFETY: forwarded caller contract.
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
                false,
            )
        }
    }

    /// `fi_inject_write`: the buffer is reusable on return; no completion.
    pub fn inject_write(&self, buf: &[u8], dest: u64, addr: u64, key: u64) -> Result<()> {
        // SAFETY: with FI_INJECT the provider copies the data before returning.
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
                false,
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
        // SAFETY: with FI_INJECT the provider copies the data before returning.
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
                false,
            )
        }
    }

    /// FI_COMMIT_COMPLETE (data durable at the target) is honoured by
    /// endpoints whose caps hold FI_RMA_PMEM (the application asked for it,
    /// or named no caps); the target still refuses regions whose memory it
    /// cannot make durable (an error completion, memory untouched).
    fn check_commit(&self, flags: u64) -> Result<()> {
        if flags & FI_COMMIT_COMPLETE != 0 && self.info.caps & FI_RMA_PMEM == 0 {
            return Err(Error::new(
                errno::FI_EOPNOTSUPP,
                "FI_COMMIT_COMPLETE: this endpoint has no FI_RMA_PMEM (not offered, or not asked for in the hints' caps)",
            ));
        }
        Ok(())
    }

    fn check_atomic(&self, op: &AtomicOp<'_>) -> Result<()> {
        self.require_caps(FI_ATOMIC, "atomic")?;
        self.check_commit(op.flags)?;
        let t = &self.info.tx_attr;
        for (l, what) in [
            (op.operand.len(), "operand"),
            (op.compare.len(), "compare"),
            (op.result.len(), "result"),
        ] {
            if l > t.iov_limit.max(1) {
                return Err(Error::inval(format!(
                    "atomic: {l} {what} ranges exceed iov_limit {}",
                    t.iov_limit
                )));
            }
        }
        if op.rma_ioc.is_empty() || op.rma_ioc.len() > t.rma_iov_limit.max(1) {
            return Err(Error::inval(format!(
                "atomic: {} remote ranges (rma_iov_limit {})",
                op.rma_ioc.len(),
                t.rma_iov_limit
            )));
        }
        let remote = op
            .rma_ioc
            .iter()
            .fold(0usize, |a, r| a.saturating_add(r.count));
        let n = check_atomic_shape(
            op.kind,
            op.op,
            op.datatype,
            ioc_count(op.operand),
            ioc_count(op.compare),
            ioc_count(op.result),
            remote,
        )?;
        let max = self.ops.query_atomic(op.kind, op.op, op.datatype)?;
        if n > max {
            return Err(Error::new(
                errno::FI_EMSGSIZE,
                format!("atomic: {n} elements exceed this provider's {max} per operation"),
            ));
        }
        Ok(())
    }

    /// `fi_atomicmsg` / `fi_fetch_atomicmsg` / `fi_compare_atomicmsg`.
    ///
    /// # Safety
    /// Operand, compare and result memory must stay valid until the atomic
    /// completes (operands: with FI_INJECT, until this call returns).
    pub unsafe fn post_atomic(&self, op: &AtomicOp<'_>) -> Result<()> {
        // FI_ATOMIC_READ has no operand (fi_atomic(3): result = target):
        // one the application passed anyway is ignored, never handed on.
        let read;
        let op = if op.kind == AtomicKind::Fetch
            && op.op == atomic_op::FI_ATOMIC_READ
            && !op.operand.is_empty()
        {
            read = AtomicOp {
                operand: &[],
                desc: &[],
                ..*op
            };
            &read
        } else {
            op
        };
        self.check_atomic(op)?;
        // SAFETY: forwarded caller contract.
        unsafe { self.ops.post_atomic(op) }
    }

    /// One atomic of `count` elements at the peer's `(addr, key)`, with
    /// single-range operand, compare and result buffers (0: none): the
    /// form behind `atomic`, `fetch_atomic` and `compare_atomic`.
    ///
    /// # Safety
    /// The operand and compare buffers must hold `count` elements of
    /// `datatype` and stay readable, and the result buffer writable and
    /// unaliased, until the operation completes (with FI_INJECT, the
    /// operands until this call returns), as for [`Self::post_atomic`].
    #[allow(clippy::too_many_arguments)]
    unsafe fn atomic1(
        &self,
        kind: AtomicKind,
        operand: usize,
        compare: usize,
        result: usize,
        count: usize,
        peer: u64,
        addr: u64,
        key: u64,
        datatype: u32,
        op: u32,
        context: usize,
        flags: u64,
    ) -> Result<()> {
        let o = [Ioc {
            addr: operand,
            count,
        }];
        let c = [Ioc {
            addr: compare,
            count,
        }];
        let r = [Ioc {
            addr: result,
            count,
        }];
        let no_operand =
            kind == AtomicKind::Fetch && op == atomic_op::FI_ATOMIC_READ && operand == 0;
        let rma = [RmaIoc { addr, count, key }];
        let a = AtomicOp {
            kind,
            op,
            datatype,
            operand: if no_operand { &[] } else { &o },
            compare: if kind == AtomicKind::Compare { &c } else { &[] },
            result: if kind == AtomicKind::Basic { &[] } else { &r },
            desc: &[],
            addr: peer,
            rma_ioc: &rma,
            data: 0,
            context,
            flags,
        };
        // SAFETY: forwarded caller contract.
        unsafe { self.post_atomic(&a) }
    }

    /// `fi_atomic`: applies `op` with `count` operands at `buf` to the
    /// peer's `(addr, key)`.
    ///
    /// # Safety
    /// The operands must stay valid until the atomic completes.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn atomic(
        &self,
        buf: *const u8,
        count: usize,
        dest: u64,
        addr: u64,
        key: u64,
        datatype: u32,
        op: u32,
        context: usize,
    ) -> Result<()> {
        // SAFETY: forwarded caller contract.
        unsafe {
            self.atomic1(
                AtomicKind::Basic,
                buf as usize,
                0,
                0,
                count,
                dest,
                addr,
                key,
                datatype,
                op,
                context,
                FI_COMPLETION,
            )
        }
    }

    /// `fi_inject_atomic`: operands copied before return; no completion.
    pub fn inject_atomic(
        &self,
        buf: &[u8],
        dest: u64,
        addr: u64,
        key: u64,
        datatype: u32,
        op: u32,
    ) -> Result<()> {
        let size = atomic::datatype_size(datatype).ok_or_else(|| {
            Error::new(
                errno::FI_EOPNOTSUPP,
                format!("atomic: unknown datatype {datatype}"),
            )
        })?;
        if !buf.len().is_multiple_of(size) {
            return Err(Error::inval(
                "inject_atomic: buffer is not a whole number of elements",
            ));
        }
        // SAFETY: with FI_INJECT the provider copies the operands before returning.
        unsafe {
            self.atomic1(
                AtomicKind::Basic,
                buf.as_ptr() as usize,
                0,
                0,
                buf.len() / size,
                dest,
                addr,
                key,
                datatype,
                op,
                0,
                FI_INJECT | OFI_INJECT_CALL,
            )
        }
    }

    /// `fi_fetch_atomic`: as [`atomic`](Self::atomic), and the original
    /// target values land in `result`. `buf` may be null for FI_ATOMIC_READ.
    ///
    /// # Safety
    /// Operands and `result` (count elements) must stay valid until completion.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn fetch_atomic(
        &self,
        buf: *const u8,
        count: usize,
        result: *mut u8,
        dest: u64,
        addr: u64,
        key: u64,
        datatype: u32,
        op: u32,
        context: usize,
    ) -> Result<()> {
        // SAFETY: forwarded caller contract.
        unsafe {
            self.atomic1(
                AtomicKind::Fetch,
                buf as usize,
                0,
                result as usize,
                count,
                dest,
                addr,
                key,
                datatype,
                op,
                context,
                FI_COMPLETION,
            )
        }
    }

    /// `fi_compare_atomic`: the cswap family and FI_MSWAP, with `compare`
    /// values (the mask for FI_MSWAP); original values land in `result`.
    ///
    /// # Safety
    /// Operands, `compare` and `result` must stay valid until completion.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn compare_atomic(
        &self,
        buf: *const u8,
        count: usize,
        compare: *const u8,
        result: *mut u8,
        dest: u64,
        addr: u64,
        key: u64,
        datatype: u32,
        op: u32,
        context: usize,
    ) -> Result<()> {
        // SAFETY: forwarded caller contract.
        unsafe {
            self.atomic1(
                AtomicKind::Compare,
                buf as usize,
                compare as usize,
                result as usize,
                count,
                dest,
                addr,
                key,
                datatype,
                op,
                context,
                FI_COMPLETION,
            )
        }
    }

    /// `fi_query_atomic` (flags 0, FI_FETCH_ATOMIC or FI_COMPARE_ATOMIC):
    /// the largest element count per operation, or `FI_EOPNOTSUPP`.
    pub fn query_atomic(&self, datatype: u32, op: u32, flags: u64) -> Result<usize> {
        let kind = match flags & (FI_FETCH_ATOMIC | FI_COMPARE_ATOMIC) {
            0 => AtomicKind::Basic,
            FI_FETCH_ATOMIC => AtomicKind::Fetch,
            FI_COMPARE_ATOMIC => AtomicKind::Compare,
            _ => {
                return Err(Error::inval(
                    "query_atomic: both FI_FETCH_ATOMIC and FI_COMPARE_ATOMIC",
                ))
            }
        };
        self.require_caps(FI_ATOMIC, "query_atomic")?;
        if !atomic::valid(kind, op, datatype) {
            return Err(Error::new(
                errno::FI_EOPNOTSUPP,
                format!(
                    "{} on {} is not defined for this call",
                    enum_name(ATOMIC_OP_NAMES, op).unwrap_or("unknown op"),
                    enum_name(DATATYPE_NAMES, datatype).unwrap_or("unknown datatype")
                ),
            ));
        }
        self.ops.query_atomic(kind, op, datatype)
    }

    /// Defers `op` until `cntr` reaches `threshold` (`FI_TRIGGER` with a
    /// `fi_triggered_context`). If posting fails when the threshold is
    /// reached, the error is reported as an error completion with the
    /// operation's context on the endpoint's CQ for that direction.
    ///
    /// # Safety
    /// The operation's memory must stay valid until it completes, which is
    /// after the counter reaches the threshold.
    pub unsafe fn trigger(&self, cntr: &Counter, threshold: u64, op: Deferred) -> Result<()> {
        if self.info.caps & FI_TRIGGER == 0 {
            return self.require_caps(FI_TRIGGER, "triggered operation");
        }
        self.enabled_for("triggered operation")?;
        let mut op = op;
        // FI_ATOMIC_READ has no operand (fi_atomic(3)): one passed anyway
        // (NULL included) is dropped here as `post_atomic` drops it.
        if let Deferred::Atomic {
            kind: AtomicKind::Fetch,
            op: atomic_op::FI_ATOMIC_READ,
            operand,
            ..
        } = &mut op
        {
            operand.clear();
        }
        match op.view() {
            View::Rma(r) => self.check_rma(&r)?,
            View::Atomic(a) => self.check_atomic(&a)?,
            View::Recv(r) if r.flags & FI_DISCARD != 0 && r.flags & (FI_PEEK | FI_CLAIM) == 0 => {
                return Err(Error::new(
                    errno::FI_EBADFLAGS,
                    "receive: FI_DISCARD goes with FI_PEEK or FI_CLAIM",
                ))
            }
            View::Send(_) | View::Recv(_) => {}
        }
        let (tx_cq, rx_cq) = {
            let s = self.state();
            (s.b.tx_cq.clone(), s.b.rx_cq.clone())
        };
        let cq = if matches!(op, Deferred::Recv { .. }) {
            rx_cq
        } else {
            tx_cq
        };
        // SAFETY: the caller's ranges are readable for this call.
        let held = unsafe { op.hold_injected() };
        let ops = self.ops.clone();
        let mut pending = Some(op);
        cntr.core.defer(
            threshold,
            Box::new(move || {
                // The copy an FI_INJECT operation points at lives as long as
                // the operation may still be posted.
                let _ = &held;
                let Some(op) = pending.as_ref() else {
                    return Ok(());
                };
                // SAFETY: the caller of `trigger` promised the memory stays
                // valid until the operation completes.
                let r = unsafe { op.post(ops.as_ref()) };
                match r {
                    Err(e) if e.is_again() => Err(e),
                    Err(e) => {
                        report(&cq, op, &e);
                        pending = None;
                        Ok(())
                    }
                    Ok(()) => {
                        pending = None;
                        Ok(())
                    }
                }
            }),
        );
        crate::util::trigger::run_ready();
        Ok(())
    }
}

fn report(cq: &Option<Arc<CqCore>>, op: &Deferred, e: &Error) {
    if let Some(cq) = cq {
        let (ctx, flags) = op.context_flags();
        cq.push_err(
            error_completion(ctx, flags, e.code(), 0, 0, 0),
            FI_ADDR_NOTAVAIL,
        );
    }
}

/// An operation held by a counter until its threshold (owned copies of
/// the caller's lists; the memory they point to stays the caller's).
#[derive(Clone, Debug)]
pub enum Deferred {
    /// A send (`fi_sendmsg` / `fi_tsendmsg`).
    Send {
        /// Source ranges.
        iov: Vec<IoVec>,
        /// Destination fi_addr.
        dest: u64,
        /// Tag (tagged).
        tag: u64,
        /// Remote CQ data.
        data: u64,
        /// Context.
        context: usize,
        /// Flags.
        flags: u64,
        /// Tagged queue.
        tagged: bool,
    },
    /// A receive (`fi_recvmsg` / `fi_trecvmsg`).
    Recv {
        /// Destination ranges.
        iov: Vec<IoVec>,
        /// Accepted source.
        src: u64,
        /// Tag.
        tag: u64,
        /// Ignore bits.
        ignore: u64,
        /// Context.
        context: usize,
        /// Flags.
        flags: u64,
        /// Tagged queue.
        tagged: bool,
    },
    /// An RMA read or write.
    Rma {
        /// Local ranges.
        iov: Vec<IoVec>,
        /// Target.
        addr: u64,
        /// Remote ranges.
        rma_iov: Vec<RmaIov>,
        /// Remote CQ data.
        data: u64,
        /// Context.
        context: usize,
        /// Flags.
        flags: u64,
        /// Read rather than write.
        read: bool,
    },
    /// An atomic.
    Atomic {
        /// Form.
        kind: AtomicKind,
        /// Operation.
        op: u32,
        /// Datatype.
        datatype: u32,
        /// Operands.
        operand: Vec<Ioc>,
        /// Compare values.
        compare: Vec<Ioc>,
        /// Results.
        result: Vec<Ioc>,
        /// Target.
        addr: u64,
        /// Remote ranges.
        rma_ioc: Vec<RmaIoc>,
        /// Context.
        context: usize,
        /// Flags.
        flags: u64,
    },
}

impl Deferred {
    /// FI_INJECT: the source bytes are the caller's only until the call
    /// returns, but a deferred operation reads them when its threshold is
    /// reached. Copies them now and points the operation at the copy, which
    /// the caller keeps with the operation. `None` when nothing needs it.
    ///
    /// # Safety
    /// The operation's source ranges are readable for this call.
    unsafe fn hold_injected(&mut self) -> Option<Vec<u8>> {
        let copy_of = |ranges: &[IoVec]| {
            let mut copy = vec![0u8; iov_len(ranges)];
            // SAFETY: forwarded from this function's contract; `copy` is ours.
            unsafe { copy_from_iov(ranges, 0, &mut copy) };
            copy
        };
        match self {
            Deferred::Atomic {
                operand,
                compare,
                datatype,
                flags,
                ..
            } if *flags & FI_INJECT != 0 => {
                // The inputs (operands, then compare values) in one copy.
                let size = atomic::datatype_size(*datatype)?;
                let ranges: Vec<IoVec> = operand
                    .iter()
                    .chain(compare.iter())
                    .map(|o| IoVec {
                        base: o.addr,
                        len: o.count.saturating_mul(size),
                    })
                    .collect();
                let copy = copy_of(&ranges);
                let base = copy.as_ptr() as usize;
                let n_op: usize = operand.iter().map(|o| o.count).sum();
                let n_cmp: usize = compare.iter().map(|o| o.count).sum();
                if !operand.is_empty() {
                    *operand = vec![Ioc {
                        addr: base,
                        count: n_op,
                    }];
                }
                if !compare.is_empty() {
                    *compare = vec![Ioc {
                        addr: base + n_op * size,
                        count: n_cmp,
                    }];
                }
                Some(copy)
            }
            Deferred::Send { iov, flags, .. }
            | Deferred::Rma {
                iov,
                flags,
                read: false,
                ..
            } if *flags & FI_INJECT != 0 => {
                let copy = copy_of(iov);
                *iov = vec![IoVec {
                    base: copy.as_ptr() as usize,
                    len: copy.len(),
                }];
                Some(copy)
            }
            _ => None,
        }
    }

    fn context_flags(&self) -> (usize, u64) {
        match self {
            Deferred::Send {
                context, tagged, ..
            } => (
                *context,
                if *tagged {
                    FI_TAGGED | FI_SEND
                } else {
                    FI_MSG | FI_SEND
                },
            ),
            Deferred::Recv {
                context, tagged, ..
            } => (
                *context,
                if *tagged {
                    FI_TAGGED | FI_RECV
                } else {
                    FI_MSG | FI_RECV
                },
            ),
            Deferred::Rma { context, read, .. } => {
                (*context, FI_RMA | if *read { FI_READ } else { FI_WRITE })
            }
            Deferred::Atomic { context, kind, .. } => (
                *context,
                FI_ATOMIC
                    | if *kind == AtomicKind::Basic {
                        FI_WRITE
                    } else {
                        FI_READ
                    },
            ),
        }
    }

    /// The operation as the provider-facing view its raw call would build
    /// (without FI_TRIGGER).
    fn view(&self) -> View<'_> {
        let strip = |f: u64| f & !FI_TRIGGER;
        match self {
            Deferred::Send {
                iov,
                dest,
                tag,
                data,
                context,
                flags,
                tagged,
            } => View::Send(SendOp {
                iov,
                desc: &[],
                dest: *dest,
                tag: *tag,
                data: *data,
                context: *context,
                flags: strip(*flags),
                tagged: *tagged,
            }),
            Deferred::Recv {
                iov,
                src,
                tag,
                ignore,
                context,
                flags,
                tagged,
            } => View::Recv(RecvOp {
                iov,
                desc: &[],
                src: *src,
                tag: *tag,
                ignore: *ignore,
                context: *context,
                flags: strip(*flags),
                tagged: *tagged,
            }),
            Deferred::Rma {
                iov,
                addr,
                rma_iov,
                data,
                context,
                flags,
                read,
            } => View::Rma(RmaOp {
                iov,
                desc: &[],
                addr: *addr,
                rma_iov,
                data: *data,
                context: *context,
                flags: strip(*flags),
                read: *read,
            }),
            Deferred::Atomic {
                kind,
                op,
                datatype,
                operand,
                compare,
                result,
                addr,
                rma_ioc,
                context,
                flags,
            } => View::Atomic(AtomicOp {
                kind: *kind,
                op: *op,
                datatype: *datatype,
                operand,
                compare,
                result,
                desc: &[],
                addr: *addr,
                rma_ioc,
                data: 0,
                context: *context,
                flags: strip(*flags),
            }),
        }
    }

    /// Posts the operation (without FI_TRIGGER) to a provider endpoint.
    ///
    /// # Safety
    /// As the corresponding raw call.
    unsafe fn post(&self, ops: &dyn EndpointOps) -> Result<()> {
        // SAFETY: every arm forwards `Endpoint::trigger`'s memory contract.
        unsafe {
            match self.view() {
                View::Send(o) => ops.post_send(&o),
                View::Recv(o) => ops.post_recv(&o),
                View::Rma(o) => ops.post_rma(&o),
                View::Atomic(o) => ops.post_atomic(&o),
            }
        }
    }
}

/// A deferred operation seen as the call that posts it.
enum View<'a> {
    Send(SendOp<'a>),
    Recv(RecvOp<'a>),
    Rma(RmaOp<'a>),
    Atomic(AtomicOp<'a>),
}
