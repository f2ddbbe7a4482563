//! A message as the receive side sees it: its matching fields ([`Meta`]),
//! the receive taken for it ([`Bound`]) and where its bytes land ([`clip`]),
//! and a rendezvous matched for a connection to answer ([`MatchedRts`]).

use crate::tcp::ConnId;
use ofi_base::consts::{FI_MSG, FI_RECV, FI_REMOTE_CQ_DATA, FI_TAGGED};
use ofi_base::iov::IoVec;
use ofi_base::matching::{PostedRecv, Unexpected, MAX_IOV};

/// A message's matching fields, and whom to acknowledge it to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Meta {
    pub tagged: bool,
    pub tag: u64,
    pub data: u64,
    pub cq_data: bool,
    pub src: u64,
    /// The connection it came on.
    pub conn: ConnId,
    /// The sender's request id when it waits for an acknowledgement.
    pub ack: Option<u64>,
    /// The acknowledgement waits for placement (else for receipt).
    pub placed: bool,
}

impl Meta {
    pub(super) fn of<P>(u: &Unexpected<P>, tagged: bool) -> Meta {
        Meta {
            tagged,
            tag: u.tag,
            data: u.data,
            cq_data: u.flags & FI_REMOTE_CQ_DATA != 0,
            src: u.src,
            ..Default::default()
        }
    }
    pub(super) fn cq_flags(&self) -> u64 {
        FI_RECV
            | if self.tagged { FI_TAGGED } else { FI_MSG }
            | if self.cq_data { FI_REMOTE_CQ_DATA } else { 0 }
    }
}

/// A receive taken for one message: where its bytes land.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Bound {
    pub context: usize,
    pub(super) iov: [IoVec; MAX_IOV],
    pub(super) iov_cnt: usize,
    /// Offset of this message in the buffer (multi-receive).
    pub(super) off: usize,
    /// Bytes that land: the message length clipped to the room.
    pub want: usize,
    /// Message length.
    pub total: usize,
    /// Bytes landed so far.
    pub got: usize,
    pub meta: Meta,
    pub(super) posted_flags: u64,
    pub(super) multi: bool,
}

impl Bound {
    pub(super) fn new(
        r: &PostedRecv,
        off: usize,
        cap: usize,
        total: usize,
        meta: Meta,
        multi: bool,
    ) -> Self {
        Bound {
            context: r.context,
            iov: r.iov,
            iov_cnt: r.iov_cnt.min(MAX_IOV),
            off,
            want: total.min(cap),
            total,
            got: 0,
            meta,
            posted_flags: r.flags,
            multi,
        }
    }
    /// Bytes still to land.
    pub fn remaining(&self) -> usize {
        self.want - self.got
    }
    /// The ranges for the next `min(max, remaining)` bytes; returns how many
    /// entries of `out` it filled.
    pub fn clip(&self, max: usize, out: &mut [IoVec; MAX_IOV]) -> usize {
        clip(
            &self.iov[..self.iov_cnt],
            self.off + self.got,
            max.min(self.remaining()),
            out,
        )
    }
    pub(super) fn first_addr(&self) -> usize {
        let mut off = self.off;
        for v in &self.iov[..self.iov_cnt] {
            if off < v.len {
                return v.base.wrapping_add(off);
            }
            off -= v.len;
        }
        self.iov[..self.iov_cnt]
            .last()
            .map_or(0, |v| v.base.wrapping_add(v.len))
    }
}

/// The ranges of `iov` covering `want` bytes from `off`; returns the count.
pub(crate) fn clip(
    iov: &[IoVec],
    mut off: usize,
    mut want: usize,
    out: &mut [IoVec; MAX_IOV],
) -> usize {
    let mut n = 0;
    for v in iov {
        if want == 0 || n == MAX_IOV {
            break;
        }
        if off >= v.len {
            off -= v.len;
            continue;
        }
        let k = (v.len - off).min(want);
        out[n] = IoVec {
            base: v.base.wrapping_add(off),
            len: k,
        };
        n += 1;
        want -= k;
        off = 0;
    }
    n
}

/// A rendezvous matched by `post_recv` for a connection to pick up: it
/// sends CTS asking for `bound.want` bytes (none without a receive:
/// discarded, or a receive with no room that already completed).
#[derive(Debug)]
pub(crate) struct MatchedRts {
    pub conn: ConnId,
    pub id: u64,
    pub bound: Option<Bound>,
}
