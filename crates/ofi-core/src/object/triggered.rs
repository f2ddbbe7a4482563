//! Triggered operations (`man fi_trigger`), raw layer: an endpoint's
//! operation held by a counter ([`Deferred`]) and posted when the counter
//! reaches a threshold.
// `trigger` is an unsafe fn: the operation's memory promise is carried to
// the provider's post call made when the threshold is reached.
#![allow(unsafe_code)]

use super::{Counter, Endpoint};
use crate::consts::*;
use crate::error::{errno, Error, Result};
use crate::provider::{AtomicOp, EndpointOps, RecvOp, RmaDir, RmaOp, SendOp};
use crate::util::atomic::{self, AtomicKind};
use crate::util::cq::{error_completion, CqCore};
use crate::util::iov::{copy_from_iov, iov_len, IoVec};
use crate::util::rma::{Ioc, RmaIoc, RmaIov};
use std::sync::Arc;

impl Endpoint {
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
        if self.coll.is_some() {
            // Tag bit 63 is the collectives' (crate::coll::guard).
            match &mut op {
                Deferred::Send {
                    tag, tagged: true, ..
                } => crate::coll::guard::send(*tag)?,
                Deferred::Recv {
                    tag,
                    ignore,
                    tagged: true,
                    ..
                } => (*tag, *ignore) = crate::coll::guard::recv(*tag, *ignore)?,
                _ => {}
            }
        }
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
        // SAFETY: the operation's ranges stay valid until it completes (this
        // fn's contract), so they are readable now: `hold_injected`'s contract.
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
        /// Which way the data goes.
        dir: RmaDir,
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
            // SAFETY: `ranges` are the operation's source ranges, readable for this call
            // (this fn's contract), and `copy` is a fresh buffer of ours, so they do
            // not alias it: `copy_from_iov`'s contract.
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
                dir: RmaDir::Write,
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
            Deferred::Rma { context, dir, .. } => (*context, FI_RMA | dir.flag()),
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
                dir,
            } => View::Rma(RmaOp {
                iov,
                desc: &[],
                addr: *addr,
                rma_iov,
                data: *data,
                context: *context,
                flags: strip(*flags),
                dir: *dir,
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
    /// The memory the operation's lists point at stays valid until it
    /// completes, as the corresponding raw call requires.
    unsafe fn post(&self, ops: &dyn EndpointOps) -> Result<()> {
        // SAFETY: the memory the operation's lists point at stays valid until it
        // completes (this fn's contract, which `Endpoint::trigger`'s caller
        // promised): the contract of the provider call each arm makes.
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
