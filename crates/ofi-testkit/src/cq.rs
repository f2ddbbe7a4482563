//! Completions as tests read them: success or error entries, polled with a
//! deadline while other endpoints are progressed.

use ofi_core::consts::*;
use ofi_core::error::errno;
use ofi_core::object::*;
use ofi_core::util::cq::{CqAttr, CqErrEntry, CqTaggedEntry};
use std::time::{Duration, Instant};

/// CQ attributes with the tagged entry format.
pub fn tagged_cq() -> CqAttr {
    CqAttr {
        format: cq_format::FI_CQ_FORMAT_TAGGED,
        ..Default::default()
    }
}

/// A completion: success or error entry.
#[derive(Clone, Copy, Debug)]
pub enum Done {
    /// A successful completion.
    Ok(CqTaggedEntry),
    /// An error completion.
    Err(CqErrEntry),
}

impl Done {
    /// The operation's context.
    pub fn ctx(&self) -> usize {
        match self {
            Done::Ok(e) => e.op_context,
            Done::Err(e) => e.op_context,
        }
    }
}

/// Reads what the CQ holds now (driving progress) into `out`; the number read.
pub fn poll(cq: &CompletionQueue, out: &mut Vec<Done>) -> usize {
    let mut e = [CqTaggedEntry::default(); 16];
    match cq.read(&mut e) {
        Ok(n) => {
            out.extend(e[..n].iter().map(|x| Done::Ok(*x)));
            n
        }
        Err(er) if er.code() == errno::FI_EAVAIL => match cq.readerr() {
            Ok(x) => {
                out.push(Done::Err(x));
                1
            }
            Err(e2) => panic!("cq readerr after FI_EAVAIL: {e2}"),
        },
        Err(er) if er.is_again() => 0,
        Err(er) => panic!("cq read: {er}"),
    }
}

/// Polls `cq` (and progresses `also`) until `ctx` completes or `timeout`
/// passes; other completions stay in `stash`. Panics on timeout.
pub fn wait_ctx(
    cq: &CompletionQueue,
    stash: &mut Vec<Done>,
    ctx: usize,
    timeout: Duration,
    also: &[&Endpoint],
    what: &str,
) -> Done {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(i) = stash.iter().position(|d| d.ctx() == ctx) {
            return stash.remove(i);
        }
        assert!(
            Instant::now() < deadline,
            "{what}: no completion for context {ctx:#x} within {timeout:?}"
        );
        if poll(cq, stash) == 0 {
            for ep in also {
                ep.progress();
            }
        }
    }
}

/// Unwraps a successful completion, panicking with the error otherwise.
pub fn ok(d: Done, what: &str) -> CqTaggedEntry {
    match d {
        Done::Ok(e) => e,
        Done::Err(e) => panic!(
            "{what}: error completion err {} ({}) ctx {:#x}",
            e.err,
            errno_name(e.err),
            e.op_context
        ),
    }
}

/// A short name for an FI_E* number.
pub fn errno_name(e: i32) -> &'static str {
    match e {
        errno::FI_EIO => "FI_EIO",
        errno::FI_ECONNRESET => "FI_ECONNRESET",
        errno::FI_ECONNREFUSED => "FI_ECONNREFUSED",
        errno::FI_ECONNABORTED => "FI_ECONNABORTED",
        errno::FI_ETIMEDOUT => "FI_ETIMEDOUT",
        errno::FI_EHOSTUNREACH => "FI_EHOSTUNREACH",
        errno::FI_ECANCELED => "FI_ECANCELED",
        errno::FI_ETRUNC => "FI_ETRUNC",
        errno::FI_ENOTCONN => "FI_ENOTCONN",
        errno::FI_ENETUNREACH => "FI_ENETUNREACH",
        errno::FI_ENETDOWN => "FI_ENETDOWN",
        32 => "EPIPE",
        _ => "?",
    }
}
