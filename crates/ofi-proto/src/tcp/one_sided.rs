//! One-sided operations in the tcp core: what an initiator queues (RMA
//! reads and writes, atomics), and what a target lends the core to execute
//! peers' requests against its registered memory ([`Memory`]).
//!
//! The core never touches memory itself: it names ranges, and the driver's
//! [`Memory`] resolves keys, copies bytes out of registered memory and
//! applies atomics. A target executes the requests of one connection in
//! stream order: a WRITE's data lands (straight from the socket into the
//! resolved memory) before the next request is read, an atomic is applied
//! before the next frame, and READ data still waiting to be written is
//! copied out (`Memory::read`) before any later frame of that connection
//! may change memory, so every request sees the effects of the ones before.
//!
//! A grant is held for as long as the core may touch its memory: a WRITE's
//! until its last byte landed (each chunk checks [`Memory::live`] first, so
//! closing a region stops a WRITE midway), a READ's until its answer's
//! bytes were written to the socket or captured.

use super::conn::SendReq;
use ofi_base::atomic::AtomicKind;
use ofi_base::iov::IoVec;
use ofi_base::matching::MAX_IOV;
use ofi_base::rma::RmaIov;
pub use ofi_wire::tcp::MAX_RANGES;

/// A resolved remote access, as the driver's [`Memory`] names it until
/// [`Memory::release`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Grant(pub u64);

/// A bit of the `access` passed to [`Memory::resolve`] (no libfabric flag
/// uses it): the endpoint counts the access on its remote read counter
/// whatever it needs (a fetching or comparing atomic needs FI_REMOTE_WRITE
/// and counts as FI_REMOTE_READ, fi_endpoint(3)); regions count it by the
/// rest, the permission (it modifies them: a write, fi_mr(3)).
pub const COUNT_AS_READ: u64 = 1 << 62;

/// The registered memory of an endpoint, as the target of its peers'
/// one-sided requests. Installed with [`Rx::set_memory`](super::Rx::set_memory);
/// without it every request is answered with `FI_EOPNOTSUPP`.
pub trait Memory: Send {
    /// Resolves every range (`len` in bytes) for `access` (`FI_REMOTE_READ`
    /// or `FI_REMOTE_WRITE`, possibly with [`COUNT_AS_READ`], which an
    /// implementation strips before checking the permission and keeps for
    /// counting the endpoint's access at release), all or nothing: the local ranges go to `out`
    /// (in order, one per range). An `Err(FI_E*)` (unknown key, access not
    /// granted, out of bounds) is answered to the initiator.
    fn resolve(&mut self, ranges: &[RmaIov], access: u64, out: &mut [IoVec]) -> Result<Grant, i32>;
    /// The access is over; `done` if it completed (the driver counts it:
    /// remote-access counters of the endpoint and the regions).
    fn release(&mut self, grant: Grant, done: bool);
    /// Copies resolved memory out (READ data that must be captured before
    /// a later request changes it). `into.len() == from.len`.
    fn read(&mut self, from: IoVec, into: &mut [u8]);
    /// False once a region of `grant` is being closed: the core lands no
    /// more of a WRITE's data in it (the rest is discarded), releases the
    /// grant and answers `FI_EKEYREJECTED`.
    fn live(&mut self, _grant: Grant) -> bool {
        true
    }
    /// FI_COMMIT_COMPLETE, before anything is written: `Ok` when every
    /// range of `grant` can be made durable, else the FI_E* number the
    /// request is refused with (memory stays untouched). Memory that cannot
    /// be made durable refuses with `FI_EOPNOTSUPP`, the default.
    fn check_durable(&mut self, _grant: Grant) -> Result<(), i32> {
        Err(ofi_base::error::errno::FI_EOPNOTSUPP)
    }
    /// [`check_durable`](Self::check_durable) when the request asks for
    /// FI_COMMIT_COMPLETE (`commit`), else `Ok`.
    fn check_durable_if(&mut self, commit: bool, grant: Grant) -> Result<(), i32> {
        if commit {
            self.check_durable(grant)
        } else {
            Ok(())
        }
    }
    /// FI_COMMIT_COMPLETE, once the data landed and before the answer:
    /// every range of `grant` is on stable storage when this returns `Ok`.
    fn persist(&mut self, _grant: Grant) -> Result<(), i32> {
        Err(ofi_base::error::errno::FI_EOPNOTSUPP)
    }
    /// Applies an atomic to range `index` of `grant`, atomically with
    /// respect to the domain's other atomics. `operand`, `compare` and
    /// `result` are that range's elements (empty when the form has none).
    fn atomic(
        &mut self,
        grant: Grant,
        index: usize,
        args: &AtomicArgs,
        operand: &[u8],
        compare: &[u8],
        result: &mut [u8],
    ) -> Result<(), i32>;
}

/// The atomic of a request: call form, `enum fi_op`, `enum fi_datatype`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AtomicArgs {
    /// Basic, fetch or compare.
    pub kind: AtomicKind,
    /// Operation.
    pub op: u32,
    /// Datatype.
    pub datatype: u32,
}

/// What a one-sided request does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RmaKind {
    /// Local ranges to remote ranges.
    Write,
    /// Remote ranges to local ranges.
    Read,
    /// An atomic on remote elements.
    Atomic(AtomicArgs),
}

/// A remote range as an initiator names it: `len` in bytes (RMA) or in
/// elements (atomics).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Remote {
    /// Virtual address or offset, per the target's registration mode.
    pub addr: u64,
    /// Bytes or elements.
    pub len: u64,
    /// The region's key.
    pub key: u64,
}

/// A one-sided request as the driver queues it. Its ranges stay valid
/// until it completes (the raw layer's promise); the core only passes them
/// to the driver's writes and reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RmaReq {
    /// What it does.
    pub kind: RmaKind,
    /// Write source, read destination, or atomic operands.
    pub local: [IoVec; MAX_IOV],
    /// Entries of `local` in use.
    pub local_cnt: usize,
    /// Compare values (compare atomics).
    pub compare: [IoVec; MAX_IOV],
    /// Entries of `compare` in use.
    pub compare_cnt: usize,
    /// Where original values land (fetch and compare atomics).
    pub result: [IoVec; MAX_IOV],
    /// Entries of `result` in use.
    pub result_cnt: usize,
    /// Remote ranges.
    pub remote: [Remote; MAX_RANGES],
    /// Entries of `remote` in use.
    pub remote_cnt: usize,
    /// Remote CQ data (with `cq_data`).
    pub data: u64,
    /// Deliver `data` to the target's receive CQ (writes and atomics).
    pub cq_data: bool,
    /// The caller's context.
    pub context: usize,
    /// FI_FENCE: start only once every earlier operation of this connection
    /// has completed.
    pub fence: bool,
    /// FI_COMMIT_COMPLETE (writes and atomics): the target answers once
    /// the bytes are durable ([`Memory::persist`]), and refuses regions it
    /// cannot make durable.
    pub commit_complete: bool,
}

fn fill<T: Copy + Default, const N: usize>(from: &[T]) -> ([T; N], usize) {
    let mut a = [T::default(); N];
    let n = from.len().min(N);
    a[..n].copy_from_slice(&from[..n]);
    (a, from.len())
}

impl RmaReq {
    fn new(kind: RmaKind, local: &[IoVec], remote: &[Remote], context: usize) -> Self {
        let (local, local_cnt) = fill(local);
        let (remote, remote_cnt) = fill(remote);
        RmaReq {
            kind,
            local,
            local_cnt,
            compare: [IoVec::default(); MAX_IOV],
            compare_cnt: 0,
            result: [IoVec::default(); MAX_IOV],
            result_cnt: 0,
            remote,
            remote_cnt,
            data: 0,
            cq_data: false,
            context,
            fence: false,
            commit_complete: false,
        }
    }
    /// Writes `local` to `remote` (byte ranges of equal total length).
    pub fn write(local: &[IoVec], remote: &[Remote], context: usize) -> Self {
        Self::new(RmaKind::Write, local, remote, context)
    }
    /// Reads `remote` into `local`.
    pub fn read(local: &[IoVec], remote: &[Remote], context: usize) -> Self {
        Self::new(RmaKind::Read, local, remote, context)
    }
    /// An atomic on `remote` (element ranges) with `operand`, `compare` and
    /// `result` byte ranges as the form needs them.
    pub fn atomic(
        args: AtomicArgs,
        operand: &[IoVec],
        compare: &[IoVec],
        result: &[IoVec],
        remote: &[Remote],
        context: usize,
    ) -> Self {
        let mut r = Self::new(RmaKind::Atomic(args), operand, remote, context);
        (r.compare, r.compare_cnt) = fill(compare);
        (r.result, r.result_cnt) = fill(result);
        r
    }
    /// Adds remote CQ data.
    pub fn with_data(mut self, data: u64) -> Self {
        self.data = data;
        self.cq_data = true;
        self
    }
    /// Sets FI_FENCE.
    pub fn fenced(mut self) -> Self {
        self.fence = true;
        self
    }
    /// Sets FI_COMMIT_COMPLETE (no effect on reads).
    pub fn commit_complete(mut self) -> Self {
        self.commit_complete = true;
        self
    }
    /// The local ranges.
    pub fn local(&self) -> &[IoVec] {
        &self.local[..self.local_cnt.min(MAX_IOV)]
    }
    /// The compare ranges.
    pub fn compare(&self) -> &[IoVec] {
        &self.compare[..self.compare_cnt.min(MAX_IOV)]
    }
    /// The result ranges.
    pub fn result(&self) -> &[IoVec] {
        &self.result[..self.result_cnt.min(MAX_IOV)]
    }
    /// The remote ranges.
    pub fn remote(&self) -> &[Remote] {
        &self.remote[..self.remote_cnt.min(MAX_RANGES)]
    }
}

/// When an acknowledged send completes (`FI_TRANSMIT_COMPLETE`,
/// `FI_DELIVERY_COMPLETE`); without one it completes once written to the
/// stream (`FI_INJECT_COMPLETE`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Ack {
    /// Complete when the last byte is written.
    #[default]
    None,
    /// Complete when the peer has received the whole message.
    Received,
    /// Complete when the message is in the peer's receive buffer.
    Placed,
}

/// Anything a connection sends on the caller's behalf, in posting order.
// Held inline in the connection's queue: no allocation per operation.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Req {
    /// A message.
    Send(SendReq),
    /// A one-sided request.
    Rma(RmaReq),
}

impl Req {
    /// The caller's context.
    pub fn context(&self) -> usize {
        match self {
            Req::Send(s) => s.context,
            Req::Rma(r) => r.context,
        }
    }
    /// FI_FENCE set.
    pub fn fence(&self) -> bool {
        match self {
            Req::Send(s) => s.fence,
            Req::Rma(r) => r.fence,
        }
    }
    /// True for a message.
    pub fn is_send(&self) -> bool {
        matches!(self, Req::Send(_))
    }
}
