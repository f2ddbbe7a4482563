//! The safe layer: buffers are moved into each operation and handed back
//! in its completion, so no borrowed memory can outlive a call and no
//! undefined behaviour is reachable from safe code.
//!
//! A [`Channel`] owns an endpoint, its completion queue and address vector,
//! and the buffers of every operation in flight. Dropping the channel shuts
//! the endpoint down before the buffers are freed.

// The one place the safe layer calls the raw layer: every buffer passed to
// a raw post is owned by `inflight` until its completion is reaped.
#![allow(unsafe_code)]

use crate::consts::*;
use crate::{
    errno, AddressVector, AvAttr, CompletionQueue, CqAttr, CqTaggedEntry, Domain, Endpoint, Error,
    Fabric, Info, RecvOp, Result, SendOp,
};
use ofi_core::util::iov::IoVec;
use std::cell::{RefCell, RefMut};
use std::time::Duration;

/// An address inserted into a channel's address vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Addr(pub u64);

/// Identifies an operation posted on a channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OpId(pub u64);

/// A finished operation, with its buffer handed back.
#[derive(Debug)]
pub enum Completion {
    /// A send finished; the buffer may be reused.
    Sent {
        /// The operation.
        id: OpId,
        /// The buffer that was sent.
        buf: Vec<u8>,
    },
    /// A message arrived.
    Received {
        /// The operation.
        id: OpId,
        /// The buffer; `len` bytes of it hold the message.
        buf: Vec<u8>,
        /// Bytes received.
        len: usize,
        /// The message's tag (tagged receives).
        tag: u64,
        /// Remote CQ data, if the sender attached some.
        data: Option<u64>,
        /// The sender, if it is in the address vector.
        src: Option<Addr>,
    },
    /// The operation failed (truncated, cancelled, peer gone …).
    Failed {
        /// The operation.
        id: OpId,
        /// The buffer, handed back.
        buf: Vec<u8>,
        /// What went wrong.
        error: Error,
        /// Bytes that did not fit (truncation).
        overflow: usize,
    },
}

enum Slot {
    Free(usize),
    Busy(Vec<u8>),
}

struct Inflight {
    slots: Vec<Slot>,
    free: usize,
}

impl Inflight {
    fn put(&mut self, buf: Vec<u8>) -> usize {
        if self.free < self.slots.len() {
            let i = self.free;
            let next = match self.slots[i] {
                Slot::Free(n) => n,
                Slot::Busy(_) => self.slots.len(),
            };
            self.slots[i] = Slot::Busy(buf);
            self.free = next;
            i
        } else {
            self.slots.push(Slot::Busy(buf));
            self.free = self.slots.len();
            self.slots.len() - 1
        }
    }
    fn take(&mut self, i: usize) -> Option<Vec<u8>> {
        let s = self.slots.get_mut(i)?;
        if let Slot::Busy(_) = s {
            let old = std::mem::replace(s, Slot::Free(self.free));
            self.free = i;
            if let Slot::Busy(b) = old {
                return Some(b);
            }
        }
        None
    }
}

/// An endpoint with its queue, address vector and in-flight buffers.
///
/// A channel is `Send` but not `Sync`: one thread drives it at a time (wrap
/// it in a `Mutex` to share it), which keeps its bookkeeping free of atomics.
pub struct Channel {
    // Field order is drop order: the endpoint shuts down (and stops touching
    // posted buffers) before the buffers it may reference are freed.
    ep: Endpoint,
    cq: CompletionQueue,
    av: AddressVector,
    inflight: RefCell<Inflight>,
    scratch: RefCell<([CqTaggedEntry; 16], [u64; 16])>,
    _domain: Domain,
    _fabric: Fabric,
}

impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channel").field("ep", &self.ep).finish()
    }
}

impl Channel {
    /// Opens a channel on an offer (from [`crate::getinfo`]).
    pub fn open(info: &Info) -> Result<Channel> {
        let fabric = Fabric::open(&info.fabric_attr)?;
        let domain = fabric.domain(info)?;
        let cq = domain.cq(&CqAttr {
            size: 0,
            format: cq_format::FI_CQ_FORMAT_TAGGED,
            wait_obj: wait_obj::FI_WAIT_FD,
        })?;
        let av = domain.av(&AvAttr::default())?;
        let ep = domain.endpoint(info)?;
        ep.bind_cq(&cq, FI_TRANSMIT | FI_RECV)?;
        ep.bind_av(&av)?;
        ep.enable()?;
        Ok(Channel {
            ep,
            cq,
            av,
            scratch: RefCell::new(([CqTaggedEntry::default(); 16], [FI_ADDR_NOTAVAIL; 16])),
            inflight: RefCell::new(Inflight {
                slots: Vec::new(),
                free: 0,
            }),
            _domain: domain,
            _fabric: fabric,
        })
    }

    /// This channel's address, to give to peers.
    pub fn address(&self) -> Result<Vec<u8>> {
        self.ep.getname()
    }

    /// Adds a peer's address.
    pub fn insert(&self, addr: &[u8]) -> Result<Addr> {
        self.av.insert_one(addr).map(Addr)
    }

    fn lock(&self) -> RefMut<'_, Inflight> {
        self.inflight.borrow_mut()
    }

    fn post(
        &self,
        buf: Vec<u8>,
        f: impl FnOnce(IoVec, usize) -> Result<()>,
    ) -> std::result::Result<OpId, (Vec<u8>, Error)> {
        let mut g = self.lock();
        let iov = IoVec {
            base: buf.as_ptr() as usize,
            len: buf.len(),
        };
        let i = g.put(buf);
        // The context is the slot index + 1, so 0 never names an operation.
        match f(iov, i + 1) {
            Ok(()) => Ok(OpId(i as u64 + 1)),
            Err(e) => {
                let b = g.take(i).unwrap_or_default();
                Err((b, e))
            }
        }
    }

    fn send_op(
        &self,
        buf: Vec<u8>,
        dest: Addr,
        tag: u64,
        data: Option<u64>,
        tagged: bool,
    ) -> std::result::Result<OpId, (Vec<u8>, Error)> {
        self.post(buf, |iov, ctx| {
            let v = [iov];
            let op = SendOp {
                iov: &v,
                desc: &[],
                dest: dest.0,
                tag,
                data: data.unwrap_or(0),
                context: ctx,
                flags: FI_COMPLETION | if data.is_some() { FI_REMOTE_CQ_DATA } else { 0 },
                tagged,
            };
            // SAFETY: the buffer is owned by `inflight` until this operation's
            // completion is reaped (or the endpoint is shut down first on drop);
            // moving the Vec never moves its heap memory.
            unsafe { self.ep.post_send(&op) }
        })
    }

    /// Sends a message; the buffer comes back in [`Completion::Sent`].
    pub fn send(&self, buf: Vec<u8>, dest: Addr) -> std::result::Result<OpId, (Vec<u8>, Error)> {
        self.send_op(buf, dest, 0, None, false)
    }

    /// Sends a message carrying remote CQ data.
    pub fn senddata(
        &self,
        buf: Vec<u8>,
        data: u64,
        dest: Addr,
    ) -> std::result::Result<OpId, (Vec<u8>, Error)> {
        self.send_op(buf, dest, 0, Some(data), false)
    }

    /// Sends a tagged message.
    pub fn tsend(
        &self,
        buf: Vec<u8>,
        dest: Addr,
        tag: u64,
    ) -> std::result::Result<OpId, (Vec<u8>, Error)> {
        self.send_op(buf, dest, tag, None, true)
    }

    /// Sends a small message by copy; no completion, nothing to hand back.
    pub fn inject(&self, buf: &[u8], dest: Addr) -> Result<()> {
        self.ep.inject(buf, dest.0)
    }

    fn recv_op(
        &self,
        buf: Vec<u8>,
        tag: u64,
        ignore: u64,
        tagged: bool,
    ) -> std::result::Result<OpId, (Vec<u8>, Error)> {
        self.post(buf, |iov, ctx| {
            let v = [iov];
            let op = RecvOp {
                iov: &v,
                desc: &[],
                src: FI_ADDR_UNSPEC,
                tag,
                ignore,
                context: ctx,
                flags: FI_COMPLETION,
                tagged,
            };
            // SAFETY: as in `send_op`: `inflight` owns the buffer until completion.
            unsafe { self.ep.post_recv(&op) }
        })
    }

    /// Posts a receive buffer; it comes back in [`Completion::Received`].
    pub fn recv(&self, buf: Vec<u8>) -> std::result::Result<OpId, (Vec<u8>, Error)> {
        self.recv_op(buf, 0, 0, false)
    }

    /// Posts a tagged receive.
    pub fn trecv(
        &self,
        buf: Vec<u8>,
        tag: u64,
        ignore: u64,
    ) -> std::result::Result<OpId, (Vec<u8>, Error)> {
        self.recv_op(buf, tag, ignore, true)
    }

    /// Cancels a posted receive; it completes as [`Completion::Failed`] with FI_ECANCELED.
    pub fn cancel(&self, id: OpId) -> Result<()> {
        self.ep.cancel(id.0 as usize)
    }

    fn reap(&self, e: &CqTaggedEntry, src: u64) -> Option<Completion> {
        let buf = self.lock().take(e.op_context.checked_sub(1)?)?;
        let id = OpId(e.op_context as u64);
        Some(if e.flags & FI_RECV != 0 {
            Completion::Received {
                id,
                buf,
                len: e.len,
                tag: e.tag,
                data: (e.flags & FI_REMOTE_CQ_DATA != 0).then_some(e.data),
                src: (src != FI_ADDR_NOTAVAIL).then_some(Addr(src)),
            }
        } else {
            Completion::Sent { id, buf }
        })
    }

    fn reap_err(&self) -> Result<Option<Completion>> {
        let e = self.cq.readerr()?;
        let Some(buf) = e
            .op_context
            .checked_sub(1)
            .and_then(|i| self.lock().take(i))
        else {
            return Ok(None);
        };
        Ok(Some(Completion::Failed {
            id: OpId(e.op_context as u64),
            buf,
            error: Error::new(
                e.err,
                format!("operation failed (len {}, overflow {})", e.len, e.olen),
            ),
            overflow: e.olen,
        }))
    }

    /// Collects finished operations without blocking (one progress pass and
    /// up to 16 completions); returns how many were added.
    pub fn poll(&self, out: &mut Vec<Completion>) -> Result<usize> {
        let mut scratch = self.scratch.borrow_mut();
        let (ents, src) = &mut *scratch;
        let before = out.len();
        match self.cq.readfrom(ents, src) {
            Ok(n) => {
                for i in 0..n {
                    out.extend(self.reap(&ents[i], src[i]));
                }
            }
            Err(e) if e.is_again() => {}
            Err(e) if e.code() == errno::FI_EAVAIL => out.extend(self.reap_err()?),
            Err(e) => return Err(e),
        }
        Ok(out.len() - before)
    }

    /// Waits up to `timeout` for the next finished operation (spinning
    /// briefly, then sleeping). `FI_EAGAIN` on timeout.
    pub fn wait(&self, timeout: Duration) -> Result<Completion> {
        let deadline = std::time::Instant::now() + timeout;
        let mut ents = [CqTaggedEntry::default(); 1];
        let mut src = [FI_ADDR_NOTAVAIL; 1];
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.cq.sreadfrom(&mut ents, &mut src, Some(left)) {
                Ok(_) => {
                    if let Some(c) = self.reap(&ents[0], src[0]) {
                        return Ok(c);
                    }
                }
                Err(e) if e.code() == errno::FI_EAVAIL => {
                    if let Some(c) = self.reap_err()? {
                        return Ok(c);
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Operations still in flight.
    pub fn in_flight(&self) -> usize {
        self.lock()
            .slots
            .iter()
            .filter(|s| matches!(s, Slot::Busy(_)))
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shm() -> Option<Info> {
        let mut h = Info::hints();
        h.caps = FI_MSG | FI_TAGGED;
        h.ep_attr.ep_type = ep_type::FI_EP_RDM;
        h.fabric_attr.prov_name = Some("shm".into());
        crate::getinfo(FI_VERSION_CURRENT, None, None, 0, Some(&h))
            .ok()
            .map(|mut v| v.remove(0))
    }

    #[test]
    fn buffers_come_back_with_their_data() {
        let info = shm().expect("shm offer");
        let a = Channel::open(&info).unwrap();
        let b = Channel::open(&info).unwrap();
        let to_b = a.insert(&b.address().unwrap()).unwrap();
        b.insert(&a.address().unwrap()).unwrap();
        let rid = b.trecv(vec![0; 100_000], 7, 0).unwrap();
        let sid = a.tsend(vec![5; 70_000], to_b, 7).unwrap();
        let mut sent = None;
        let mut got = None;
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while (sent.is_none() || got.is_none()) && std::time::Instant::now() < deadline {
            let mut out = Vec::new();
            a.poll(&mut out).unwrap();
            b.poll(&mut out).unwrap();
            for c in out {
                match c {
                    Completion::Sent { id, buf } => sent = Some((id, buf)),
                    Completion::Received {
                        id, buf, len, tag, ..
                    } => got = Some((id, buf, len, tag)),
                    Completion::Failed { error, .. } => panic!("{error}"),
                }
            }
        }
        let (id, buf) = sent.expect("send completion");
        assert_eq!((id, buf.len()), (sid, 70_000));
        let (id, buf, len, tag) = got.expect("receive completion");
        assert_eq!((id, len, tag), (rid, 70_000, 7));
        assert!(buf[..len].iter().all(|&x| x == 5));
        assert_eq!(a.in_flight() + b.in_flight(), 0);
    }

    #[test]
    fn cancelled_receive_hands_the_buffer_back() {
        let info = shm().expect("shm offer");
        let a = Channel::open(&info).unwrap();
        let id = a.recv(vec![1, 2, 3]).unwrap();
        a.cancel(id).unwrap();
        match a.wait(Duration::from_secs(5)).unwrap() {
            Completion::Failed {
                id: got,
                buf,
                error,
                ..
            } => {
                assert_eq!(got, id);
                assert_eq!(buf, vec![1, 2, 3]);
                assert_eq!(error.code(), errno::FI_ECANCELED);
            }
            c => panic!("unexpected {c:?}"),
        }
    }

    #[test]
    fn a_failed_post_hands_the_buffer_back() {
        let info = shm().expect("shm offer");
        let a = Channel::open(&info).unwrap();
        let (buf, e) = a.send(vec![9; 10], Addr(12345)).unwrap_err();
        assert_eq!(buf, vec![9; 10]);
        assert_eq!(e.code(), errno::FI_EINVAL);
    }
}
