//! Receive-side completions: the protocol core's receive events into CQ
//! entries and counts, the copies of unexpected eager payloads into their
//! receives.
#![allow(unsafe_code)]

use ofi_core::consts::*;
use ofi_core::error::errno;
use ofi_core::object::EpBindings;
use ofi_core::util::cq::{CqErrEntry, CqTaggedEntry};
use ofi_core::util::iov::copy_to_iov;
use ofi_proto::tcp::{Event, Rx};

/// Turns the receive side's events into completions. `src_ok` says whether
/// source addresses are reported (FI_SOURCE).
pub fn drain_rx(b: &EpBindings, rx: &mut Rx, src_ok: bool) {
    while let Some(ev) = rx.poll_event() {
        match ev {
            Event::RecvComplete(mut d) => {
                if let Some(c) = d.copy.take() {
                    // SAFETY: the copy's ranges are the receive's own buffer,
                    // which its poster keeps writable until completion.
                    unsafe { copy_to_iov(c.iov(), c.offset, &c.bytes) };
                    rx.recycle(c.bytes);
                }
                let src = if src_ok { d.src } else { FI_ADDR_NOTAVAIL };
                if d.truncated_by > 0 {
                    if let Some(cq) = &b.rx_cq {
                        cq.push_err(
                            CqErrEntry {
                                op_context: d.context,
                                flags: d.flags,
                                len: d.len,
                                buf: d.buf,
                                data: d.data,
                                tag: d.tag,
                                olen: d.truncated_by,
                                err: errno::FI_ETRUNC,
                                prov_errno: errno::FI_ETRUNC,
                                ..Default::default()
                            },
                            src,
                        );
                    }
                    if let Some(c) = &b.recv_cntr {
                        c.add_err(1);
                    }
                    continue;
                }
                let wanted = !b.rx_selective
                    || d.posted_flags & FI_COMPLETION != 0
                    || d.flags & FI_MULTI_RECV != 0;
                if wanted {
                    if let Some(cq) = &b.rx_cq {
                        cq.push(
                            CqTaggedEntry {
                                op_context: d.context,
                                flags: d.flags,
                                len: d.len,
                                buf: d.buf,
                                data: d.data,
                                tag: d.tag,
                            },
                            src,
                        );
                    }
                }
                if let Some(c) = &b.recv_cntr {
                    c.add(1);
                }
            }
            Event::RecvError {
                context,
                err,
                flags,
                tag,
            } => rx_error(b, context, flags, err, tag),
            Event::RecvCanceled {
                context,
                flags,
                tag,
            } => rx_error(b, context, flags, errno::FI_ECANCELED, tag),
            Event::RemoteCqData {
                flags,
                len,
                data,
                src,
            } => {
                // A peer's write or atomic with remote CQ data: an entry
                // that consumes no receive (counted by the remote counters).
                if let Some(cq) = &b.rx_cq {
                    cq.push(
                        CqTaggedEntry {
                            op_context: 0,
                            flags,
                            len,
                            data,
                            ..Default::default()
                        },
                        if src_ok { src } else { FI_ADDR_NOTAVAIL },
                    );
                }
            }
            _ => {}
        }
    }
}

/// Reports a receive that failed with `err` (error entry, error count).
pub fn rx_error(b: &EpBindings, context: usize, flags: u64, err: i32, tag: u64) {
    if let Some(cq) = &b.rx_cq {
        cq.push_err(
            CqErrEntry {
                op_context: context,
                flags,
                err,
                prov_errno: err,
                tag,
                ..Default::default()
            },
            FI_ADDR_NOTAVAIL,
        );
    }
    if let Some(c) = &b.recv_cntr {
        c.add_err(1);
    }
}
