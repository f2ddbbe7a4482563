//! The endpoint's atomic calls (`man fi_atomic`), raw layer: the general
//! `post_atomic`, the basic, fetch and compare forms built on it, and
//! `query_atomic`. The core checks caps, iov limits, element counts and
//! that the op and datatype are defined for the call before the provider
//! sees it; keys, access rights and bounds are enforced at the target.
// The raw calls are unsafe fns: each hands its caller's memory promise on
// to the provider's `post_atomic`, whose contract it is.
#![allow(unsafe_code)]

use super::Endpoint;
use crate::consts::*;
use crate::error::{errno, Error, Result};
use crate::provider::AtomicOp;
use crate::util::atomic::{self, AtomicKind};
use crate::util::rma::{check_atomic_shape, Ioc, RmaIoc};

fn ioc_count(l: &[Ioc]) -> usize {
    l.iter().fold(0usize, |a, v| a.saturating_add(v.count))
}

impl Endpoint {
    pub(super) fn check_atomic(&self, op: &AtomicOp<'_>) -> Result<()> {
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
        // SAFETY: the caller keeps operand, compare and result memory valid until the
        // atomic completes, operands with FI_INJECT until this call returns (this
        // fn's contract), which is the provider's `post_atomic` contract; an
        // operand dropped above is not handed on.
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
        // SAFETY: `a`'s lists are the single ranges at `operand`, `compare` and `result`
        // of `count` elements each (those its kind uses), which the caller keeps
        // valid until completion, operands with FI_INJECT until this call returns
        // (this fn's contract): the contract of `Self::post_atomic`.
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
        // SAFETY: the caller keeps `count` operands at `buf` valid until the atomic
        // completes (this fn's contract); the basic form reads no compare or
        // result range: `atomic1`'s contract.
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
        // SAFETY: `buf` is borrowed for this call and holds `buf.len() / size` whole
        // elements (checked above); with FI_INJECT `atomic1` needs them only until
        // the call returns (the provider copies them), and the basic form reads no
        // compare or result range.
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
        // SAFETY: the caller keeps `count` operands at `buf` (none needed for
        // FI_ATOMIC_READ) and `count` results at `result` valid until completion
        // (this fn's contract); the fetch form reads no compare range: `atomic1`'s
        // contract.
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
        // SAFETY: the caller keeps `count` operands at `buf`, compare values at `compare`
        // and results at `result` valid until completion (this fn's contract):
        // `atomic1`'s contract.
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
}
