//! Registered memory and one-sided operations on a [`Channel`]: regions
//! peers may access, pools of registered buffers, and the initiator's RMA
//! writes and reads and atomics ([`Atomic`]), each owning its buffers
//! until it completes.

use super::buf::Held;
use super::{iov_of, Addr, BufPool, Channel, Op, PostError, Posted, Region};
use crate::consts::*;
use crate::{
    errno, AtomicKind, AtomicOp, Error, IoBuf, IoBufMut, Ioc, MrAccess, Result, RmaDir, RmaIoc,
    RmaIov, RmaOp,
};
use ofi_core::util::atomic::datatype_size;
use ofi_core::util::iov::IoVec;

/// An atomic operation: what to apply and the buffers it owns.
///
/// The form follows the buffers: with `compare` it is a compare atomic
/// (`fi_compare_atomic`: the cswap family, FI_MSWAP), else with `fetch` a
/// fetching one (`fi_fetch_atomic`), else a plain `fi_atomic`. Fetch and
/// compare forms write the target's original values into `result` (sized
/// by the call).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Atomic {
    /// The operation (`atomic_op::FI_SUM`, `FI_CSWAP` …).
    pub op: u32,
    /// The element type (`datatype::FI_UINT64` …).
    pub datatype: u32,
    /// Operand elements, native byte order; their number is the element
    /// count (for FI_ATOMIC_READ only the length matters).
    pub operand: Vec<u8>,
    /// Compare elements (the mask for FI_MSWAP), as many as the operands.
    pub compare: Option<Vec<u8>>,
    /// Hand back the target's original values.
    pub fetch: bool,
    /// The target's original values (fetch and compare forms).
    pub result: Vec<u8>,
}

impl Channel {
    /// Registers `buf` as a region peers may access with `access`
    /// (remote read and/or write; local rights are accepted too). The
    /// buffer comes back with the error on failure; `FI_EOPNOTSUPP` on
    /// channels without FI_RMA or FI_ATOMIC.
    ///
    /// A peer's accesses are carried out by this channel's endpoint: with
    /// manual progress, drive the channel (`poll` or an operation's `wait`)
    /// for them to happen.
    pub fn register(
        &self,
        buf: Vec<u8>,
        access: MrAccess,
    ) -> std::result::Result<Region, PostError<Vec<u8>>> {
        if self.info().caps & (FI_RMA | FI_ATOMIC) == 0 {
            return Err(PostError {
                buf,
                error: Error::new(
                    errno::FI_EOPNOTSUPP,
                    "register: the channel's offer has neither FI_RMA nor FI_ATOMIC",
                ),
            });
        }
        self.parked.sweep();
        Region::register(&self.domain, buf, access, self.parked.clone())
            .map_err(|(buf, error)| PostError { buf, error })
    }

    /// A pool of `count` buffers of `size` bytes registered with this
    /// channel's domain (see [`BufPool::registered`]).
    pub fn pool(&self, count: usize, size: usize) -> Result<BufPool> {
        BufPool::registered(&self.domain, count, size)
    }

    #[allow(clippy::too_many_arguments)]
    fn rma_op<B: Send + 'static>(
        &self,
        buf: Held<B>,
        range: IoVec,
        desc: Option<u64>,
        dir: RmaDir,
        peer: Addr,
        remote_addr: u64,
        key: u64,
        data: Option<u64>,
    ) -> Posted<'_, B> {
        if self.info().caps & FI_RMA == 0 {
            return Err(PostError {
                buf: buf.into_inner(),
                error: Error::new(
                    errno::FI_EOPNOTSUPP,
                    "rma: the channel's offer has no FI_RMA",
                ),
            });
        }
        self.post(buf, false, peer, |ctx| {
            let v = [range];
            let d = desc.map(|d| [d]);
            let rma = [RmaIov {
                addr: remote_addr,
                len: range.len,
                key,
            }];
            let op = RmaOp {
                iov: &v,
                desc: d.as_ref().map_or(&[], |d| d.as_slice()),
                addr: peer.0,
                rma_iov: &rma,
                data: data.unwrap_or(0),
                context: ctx,
                flags: FI_COMPLETION
                    | self.more.get()
                    | if data.is_some() { FI_REMOTE_CQ_DATA } else { 0 },
                dir,
            };
            self.with_ep(peer, |ep| {
                // SAFETY: the buffer's bytes (which do not move with it:
                // IoBuf's and IoBufMut's contract), read into or written from,
                // are owned by the returned handle, or by the table once the
                // handle is dropped, until the completion is reaped or the
                // endpoint has shut down (field order).
                unsafe { ep.post_rma(&op) }
            })
        })
    }

    /// Writes `buf` to the peer's region at `(remote_addr, key)`.
    pub fn write<B: IoBuf>(&self, buf: B, dest: Addr, remote_addr: u64, key: u64) -> Posted<'_, B> {
        let buf = Held::new(buf);
        let (range, desc) = (iov_of(buf.as_ref()), buf.desc());
        self.rma_op(
            buf,
            range,
            desc,
            RmaDir::Write,
            dest,
            remote_addr,
            key,
            None,
        )
    }

    /// Writes `buf` and delivers `data` to the target, where it shows up as
    /// a [`RemoteWrite`](super::RemoteWrite) ([`Channel::remote_write`]).
    pub fn writedata<B: IoBuf>(
        &self,
        buf: B,
        data: u64,
        dest: Addr,
        remote_addr: u64,
        key: u64,
    ) -> Posted<'_, B> {
        let buf = Held::new(buf);
        let (range, desc) = (iov_of(buf.as_ref()), buf.desc());
        self.rma_op(
            buf,
            range,
            desc,
            RmaDir::Write,
            dest,
            remote_addr,
            key,
            Some(data),
        )
    }

    /// Reads `buf`'s length of the peer's region at `(remote_addr, key)`
    /// into `buf`.
    pub fn read<B: IoBufMut>(
        &self,
        buf: B,
        src: Addr,
        remote_addr: u64,
        key: u64,
    ) -> Posted<'_, B> {
        let mut buf = Held::new(buf);
        let m = buf.as_mut();
        let range = IoVec {
            base: m.as_mut_ptr() as usize,
            len: m.len(),
        };
        let desc = buf.desc();
        self.rma_op(buf, range, desc, RmaDir::Read, src, remote_addr, key, None)
    }

    /// Applies an atomic to the peer's region at `(remote_addr, key)`; its
    /// buffers come back from the handle (or with the error).
    pub fn atomic(
        &self,
        mut a: Atomic,
        dest: Addr,
        remote_addr: u64,
        key: u64,
    ) -> Posted<'_, Atomic> {
        if self.info().caps & FI_ATOMIC == 0 {
            let e = Error::new(
                errno::FI_EOPNOTSUPP,
                "atomic: the channel's offer has no FI_ATOMIC",
            );
            return Err(PostError { buf: a, error: e });
        }
        let Some(size) = datatype_size(a.datatype) else {
            let e = Error::inval(format!("atomic: unknown datatype {}", a.datatype));
            return Err(PostError { buf: a, error: e });
        };
        if a.operand.is_empty() || !a.operand.len().is_multiple_of(size) {
            let e = Error::inval(format!(
                "atomic: {} operand bytes are not a whole, non-zero number of {size}-byte elements",
                a.operand.len()
            ));
            return Err(PostError { buf: a, error: e });
        }
        if a.compare
            .as_ref()
            .is_some_and(|c| c.len() != a.operand.len())
        {
            let e = Error::inval("atomic: compare values and operands differ in length");
            return Err(PostError { buf: a, error: e });
        }
        let count = a.operand.len() / size;
        let kind = match (&a.compare, a.fetch) {
            (Some(_), _) => AtomicKind::Compare,
            (None, true) => AtomicKind::Fetch,
            (None, false) => AtomicKind::Basic,
        };
        if kind == AtomicKind::Basic {
            a.result.clear();
        } else {
            a.result.clear();
            a.result.resize(a.operand.len(), 0);
        }
        let elems = |v: &mut Vec<u8>| {
            [Ioc {
                addr: v.as_mut_ptr() as usize,
                count: v.len() / size,
            }]
        };
        let operand = elems(&mut a.operand);
        let compare = a.compare.as_mut().map(elems);
        let result = elems(&mut a.result);
        let (op, datatype) = (a.op, a.datatype);
        self.post(Held::new(a), false, dest, |ctx| {
            let no_operand = kind == AtomicKind::Fetch && op == atomic_op::FI_ATOMIC_READ;
            let rma = [RmaIoc {
                addr: remote_addr,
                count,
                key,
            }];
            let op = AtomicOp {
                kind,
                op,
                datatype,
                operand: if no_operand { &[] } else { &operand },
                compare: compare.as_ref().map_or(&[], |c| c.as_slice()),
                result: if kind == AtomicKind::Basic {
                    &[]
                } else {
                    &result
                },
                desc: &[],
                addr: dest.0,
                rma_ioc: &rma,
                data: 0,
                context: ctx,
                flags: FI_COMPLETION | self.more.get(),
            };
            self.with_ep(dest, |ep| {
                // SAFETY: operands, compare values and results live in the
                // Atomic's vectors (heap memory that does not move with it),
                // owned by the handle or the table until the completion is
                // reaped or the endpoint has shut down; each list covers its
                // whole vector.
                unsafe { ep.post_atomic(&op) }
            })
        })
    }

    /// Adds `value` to the 64-bit word at `(remote_addr, key)`; the word's
    /// previous value comes back in [`Done::fetched_u64`](super::Done::fetched_u64).
    pub fn fetch_add_u64(
        &self,
        dest: Addr,
        remote_addr: u64,
        key: u64,
        value: u64,
    ) -> Result<Op<'_, Atomic>> {
        let a = Atomic {
            op: atomic_op::FI_SUM,
            datatype: datatype::FI_UINT64,
            operand: value.to_ne_bytes().to_vec(),
            fetch: true,
            ..Atomic::default()
        };
        Ok(self.atomic(a, dest, remote_addr, key)?)
    }

    /// Stores `swap` in the 64-bit word at `(remote_addr, key)` if it holds
    /// `compare`; the previous value comes back as in
    /// [`fetch_add_u64`](Self::fetch_add_u64).
    pub fn compare_swap_u64(
        &self,
        dest: Addr,
        remote_addr: u64,
        key: u64,
        compare: u64,
        swap: u64,
    ) -> Result<Op<'_, Atomic>> {
        let a = Atomic {
            op: atomic_op::FI_CSWAP,
            datatype: datatype::FI_UINT64,
            operand: swap.to_ne_bytes().to_vec(),
            compare: Some(compare.to_ne_bytes().to_vec()),
            fetch: true,
            ..Atomic::default()
        };
        Ok(self.atomic(a, dest, remote_addr, key)?)
    }
}
