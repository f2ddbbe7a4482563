//! Two-sided posts on a [`Channel`]: sends (plain, with remote CQ data,
//! tagged), injects, and receives (untagged, per connection, tagged), each
//! owning its buffer until it completes.

use super::buf::Held;
use super::{iov_of, Addr, Channel, Eps, Posted};
use crate::consts::*;
use crate::{IoBuf, IoBufMut, RecvOp, Result, SendOp};
use ofi_core::util::iov::IoVec;

impl Channel {
    #[inline(always)]
    fn send_op<B: IoBuf>(
        &self,
        buf: B,
        dest: Addr,
        tag: u64,
        data: Option<u64>,
        tagged: bool,
    ) -> Posted<'_, B> {
        let buf = Held::new(buf);
        let iov = [iov_of(buf.as_ref())];
        let desc = buf.desc();
        self.post(buf, false, dest, |ctx| {
            let d = desc.map(|d| [d]);
            let op = SendOp {
                iov: &iov,
                desc: d.as_ref().map_or(&[], |d| d.as_slice()),
                dest: dest.0,
                tag,
                data: data.unwrap_or(0),
                context: ctx,
                flags: FI_COMPLETION
                    | self.more.get()
                    | if data.is_some() { FI_REMOTE_CQ_DATA } else { 0 },
                tagged,
            };
            self.with_ep(dest, |ep| {
                // SAFETY: the buffer's bytes (which do not move with it: IoBuf's
                // contract) are owned by the returned handle, or by the table
                // once the handle is dropped, until this operation's completion
                // is reaped or the endpoint has shut down (field order).
                unsafe { ep.post_send(&op) }
            })
        })
    }

    /// Sends a message; the buffer comes back from the handle.
    #[inline(always)]
    pub fn send<B: IoBuf>(&self, buf: B, dest: Addr) -> Posted<'_, B> {
        self.send_op(buf, dest, 0, None, false)
    }

    /// Sends a message carrying remote CQ data.
    pub fn senddata<B: IoBuf>(&self, buf: B, data: u64, dest: Addr) -> Posted<'_, B> {
        self.send_op(buf, dest, 0, Some(data), false)
    }

    /// Sends a tagged message.
    #[inline(always)]
    pub fn tsend<B: IoBuf>(&self, buf: B, dest: Addr, tag: u64) -> Posted<'_, B> {
        self.send_op(buf, dest, tag, None, true)
    }

    /// Sends a tagged message carrying remote CQ data.
    pub fn tsenddata<B: IoBuf>(&self, buf: B, data: u64, dest: Addr, tag: u64) -> Posted<'_, B> {
        self.send_op(buf, dest, tag, Some(data), true)
    }

    /// Sends a small message by copy; no completion, nothing to hand back.
    pub fn inject(&self, buf: &[u8], dest: Addr) -> Result<()> {
        self.with_ep(dest, |ep| ep.inject(buf, dest.0))
    }

    /// Sends a small tagged message by copy.
    pub fn tinject(&self, buf: &[u8], dest: Addr, tag: u64) -> Result<()> {
        self.with_ep(dest, |ep| ep.tinject(buf, dest.0, tag))
    }

    #[inline(always)]
    fn recv_op<B: IoBufMut>(
        &self,
        buf: B,
        on: Addr,
        tag: u64,
        ignore: u64,
        tagged: bool,
    ) -> Posted<'_, B> {
        let mut buf = Held::new(buf);
        let m = buf.as_mut();
        let iov = [IoVec {
            base: m.as_mut_ptr() as usize,
            len: m.len(),
        }];
        let desc = buf.desc();
        self.post(buf, true, on, |ctx| {
            let d = desc.map(|d| [d]);
            let op = RecvOp {
                iov: &iov,
                desc: d.as_ref().map_or(&[], |d| d.as_slice()),
                src: FI_ADDR_UNSPEC,
                tag,
                ignore,
                context: ctx,
                flags: FI_COMPLETION,
                tagged,
            };
            self.with_ep(on, |ep| {
                // SAFETY: the buffer's bytes (which do not move with it:
                // IoBufMut's contract) are owned by the returned handle, or by
                // the table once the handle is dropped, until this operation's
                // completion is reaped or the endpoint has shut down (field
                // order); the range came from `as_mut`, and nothing reads or
                // writes the buffer until the handle returns it.
                unsafe { ep.post_recv(&op) }
            })
        })
    }

    /// Posts a receive buffer (its whole length); it comes back, with the
    /// message in its first `len` bytes, from the handle.
    #[inline(always)]
    pub fn recv<B: IoBufMut>(&self, buf: B) -> Posted<'_, B> {
        self.recv_op(buf, Addr(FI_ADDR_UNSPEC), 0, 0, false)
    }

    /// MSG: posts a receive buffer on connection `conn` (an MSG channel's
    /// receives belong to one connection); on other channels the same as
    /// [`recv`](Self::recv).
    pub fn recv_on<B: IoBufMut>(&self, buf: B, conn: Addr) -> Posted<'_, B> {
        let on = match self.ep {
            Eps::One(_) => Addr(FI_ADDR_UNSPEC),
            Eps::Conns(_) => conn,
        };
        self.recv_op(buf, on, 0, 0, false)
    }

    /// Posts a tagged receive for tags equal to `tag` outside the `ignore` bits.
    #[inline(always)]
    pub fn trecv<B: IoBufMut>(&self, buf: B, tag: u64, ignore: u64) -> Posted<'_, B> {
        self.recv_op(buf, Addr(FI_ADDR_UNSPEC), tag, ignore, true)
    }
}
