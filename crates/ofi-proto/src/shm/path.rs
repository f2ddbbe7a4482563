//! The shm protocol's decisions: how each operation travels and what a
//! failed cross-process copy turns into. Pure functions of sizes, flags
//! and configuration, so every branch is tested here.

use ofi_base::error::errno;

/// How a two-sided send travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendPath {
    /// In one ring entry; complete once pushed.
    Inline,
    /// In a bounce buffer of the receiver's segment named by the entry;
    /// complete once pushed. Without a free buffer: [`SendPath::Rendezvous`].
    Bounce,
    /// The entry names the sender's memory (RTS); complete on the
    /// receiver's ACK.
    Rendezvous,
}

/// Sizes that pick a send's path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendLimits {
    /// Bytes one entry carries inline.
    pub inline_max: usize,
    /// Bytes per bounce buffer.
    pub bounce_size: usize,
}

/// The path of a send of `len` bytes. FI_DELIVERY_COMPLETE (unless
/// FI_INJECT) always takes the rendezvous: only the receiver's ACK, sent
/// once the data is in the matched buffer, may complete it.
#[inline]
pub fn send_path(len: usize, inject: bool, delivery_complete: bool, lim: &SendLimits) -> SendPath {
    let deliver = delivery_complete && !inject;
    if deliver {
        SendPath::Rendezvous
    } else if len <= lim.inline_max {
        SendPath::Inline
    } else if len <= lim.bounce_size {
        SendPath::Bounce
    } else {
        SendPath::Rendezvous
    }
}

/// Cross-process copy settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CopyConfig {
    /// Never copy across processes (push through the ring instead).
    pub disable_cma: bool,
    /// Copies of at least this many bytes are shared with the peer (0: never).
    pub coop_threshold: usize,
    /// Largest chunk of a shared copy.
    pub coop_chunk: usize,
}

/// How the receiver of an RTS (or the target of a pulled write) copies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RtsCopy {
    /// Both processes copy chunks at once (the receiver reads, the sender
    /// writes, after a CTS).
    Coop,
    /// One process_vm_readv by the receiver.
    Single,
    /// No cross-process copy: answer NACK (or PUSH) and take the data
    /// through the ring.
    Push,
}

/// The copy of `want` bytes; `peer_refused` when the kernel already
/// refused a copy with this peer.
#[inline]
pub fn rts_copy(want: usize, peer_refused: bool, cfg: &CopyConfig) -> RtsCopy {
    if cfg.disable_cma || peer_refused {
        RtsCopy::Push
    } else if cfg.coop_threshold > 0 && want >= cfg.coop_threshold {
        RtsCopy::Coop
    } else {
        RtsCopy::Single
    }
}

/// Chunk size and count of a shared copy of `want` bytes: about eight
/// chunks, each 32 KiB to `coop_chunk`, page multiples.
pub fn coop_chunks(want: usize, coop_chunk: usize) -> (usize, u64) {
    let chunk = (want / 8)
        .clamp(32 << 10, coop_chunk.max(32 << 10))
        .next_multiple_of(4096);
    (chunk, want.div_ceil(chunk) as u64)
}

/// What a failed cross-process copy means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyError {
    /// The kernel does not allow it (EPERM, ENOSYS): fall back to pushing
    /// the data through the ring, and stop trying with this peer.
    Refused,
    /// The copy failed (a range not mapped: FI_EFAULT; else FI_EIO): the
    /// operation fails with this FI_E* number.
    Failed(i32),
}

const EPERM: i32 = 1;
const EFAULT: i32 = 14;
const ENOSYS: i32 = 38;

/// Classifies the OS error number of a failed copy.
pub fn copy_error(os: Option<i32>) -> CopyError {
    match os {
        Some(EPERM) | Some(ENOSYS) => CopyError::Refused,
        Some(EFAULT) => CopyError::Failed(errno::FI_EFAULT),
        _ => CopyError::Failed(errno::FI_EIO),
    }
}

impl CopyError {
    /// The FI_E* number an operation fails with when no fallback remains
    /// (a refusal met in the middle of a shared copy is FI_EIO).
    pub fn code(self) -> i32 {
        match self {
            CopyError::Refused => errno::FI_EIO,
            CopyError::Failed(c) => c,
        }
    }
}

/// What a cross-process copy meant to move `expected` bytes came to:
/// `copied` is the bytes it moved, or the OS error number of its failure
/// (`None`: no number). A copy that moved any other count than `expected`
/// (a range ended early: the peer named less memory than it announced)
/// failed with FI_EIO; it never counts as done.
pub fn copy_result(expected: usize, copied: Result<usize, Option<i32>>) -> Result<(), CopyError> {
    match copied {
        Ok(n) if n == expected => Ok(()),
        Ok(_) => Err(CopyError::Failed(errno::FI_EIO)),
        Err(os) => Err(copy_error(os)),
    }
}

/// Offset and length of chunk `c` of a shared copy of `total` bytes in
/// chunks of `chunk` (length 0 past the end).
pub fn coop_span(c: u64, chunk: usize, total: usize) -> (usize, usize) {
    let off = usize::try_from(c)
        .ok()
        .and_then(|c| c.checked_mul(chunk))
        .unwrap_or(usize::MAX);
    (off, chunk.min(total.saturating_sub(off)))
}

/// Whether the transfer a receiver published for a shared copy is one the
/// sender may help with: `nchunks` chunks of `chunk` bytes that tile
/// `total` bytes, no more than the `len` bytes of the operation the CTS
/// names. The descriptor lies in the receiver's segment, where a hostile
/// receiver writes anything.
pub fn coop_layout_ok(nchunks: u64, chunk: usize, total: usize, len: usize) -> bool {
    chunk > 0 && total <= len && u64::try_from(total.div_ceil(chunk)) == Ok(nchunks)
}

/// The outcome of a shared copy from the first error number a copier met
/// (0: none).
pub fn coop_outcome(failed: u64) -> Result<(), i32> {
    match failed {
        0 => Ok(()),
        14 => Err(errno::FI_EFAULT),
        _ => Err(errno::FI_EIO),
    }
}

/// How a one-sided write travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WritePath {
    /// The data inline in the request.
    Inline,
    /// The target pulls it with one cross-process copy (RMA_PULL).
    Pull,
    /// Pushed in ring-sized chunks (RMA_WRITE entries).
    Chunked,
}

/// The path of a write of `len` bytes when `room` bytes fit inline.
/// `cma_usable`: copies across processes are allowed and not refused by
/// this peer. An FI_INJECT write larger than `room` is chunked from a copy
/// (its buffer may be reused as soon as the call returns).
#[inline]
pub fn write_path(len: usize, room: usize, cma_usable: bool, inject: bool) -> WritePath {
    if len <= room {
        WritePath::Inline
    } else if !cma_usable || inject {
        WritePath::Chunked
    } else {
        WritePath::Pull
    }
}

/// How a target answers a read of `len` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadAnswer {
    /// The bytes inline in the answer.
    Inline,
    /// One process_vm_writev into the initiator's buffer.
    Write,
    /// Answer entries carrying ring-sized chunks.
    Chunked,
}

/// The answer to a read of `len` bytes when `inline_max` fit one entry.
#[inline]
pub fn read_answer(len: usize, inline_max: usize, cma_usable: bool) -> ReadAnswer {
    if len <= inline_max {
        ReadAnswer::Inline
    } else if cma_usable {
        ReadAnswer::Write
    } else {
        ReadAnswer::Chunked
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIM: SendLimits = SendLimits {
        inline_max: 4104,
        bounce_size: 32768,
    };

    #[test]
    fn sends_take_the_path_their_size_and_flags_say() {
        assert_eq!(send_path(0, false, false, &LIM), SendPath::Inline);
        assert_eq!(send_path(4104, false, false, &LIM), SendPath::Inline);
        assert_eq!(send_path(4105, false, false, &LIM), SendPath::Bounce);
        assert_eq!(send_path(32768, false, false, &LIM), SendPath::Bounce);
        assert_eq!(send_path(32769, false, false, &LIM), SendPath::Rendezvous);
        assert_eq!(send_path(8, false, true, &LIM), SendPath::Rendezvous);
        assert_eq!(
            send_path(8, true, true, &LIM),
            SendPath::Inline,
            "inject ignores delivery"
        );
    }

    #[test]
    fn rendezvous_copies_follow_the_configuration_and_the_peer() {
        let cfg = CopyConfig {
            disable_cma: false,
            coop_threshold: 65536,
            coop_chunk: 131072,
        };
        assert_eq!(rts_copy(65535, false, &cfg), RtsCopy::Single);
        assert_eq!(rts_copy(65536, false, &cfg), RtsCopy::Coop);
        assert_eq!(rts_copy(65536, true, &cfg), RtsCopy::Push, "CMA refused");
        let off = CopyConfig {
            disable_cma: true,
            ..cfg
        };
        assert_eq!(rts_copy(1 << 20, false, &off), RtsCopy::Push);
        let never = CopyConfig {
            coop_threshold: 0,
            ..cfg
        };
        assert_eq!(rts_copy(1 << 30, false, &never), RtsCopy::Single);
    }

    #[test]
    fn copy_errors_fall_back_or_fail() {
        assert_eq!(copy_error(Some(1)), CopyError::Refused);
        assert_eq!(copy_error(Some(38)), CopyError::Refused);
        assert_eq!(copy_error(Some(14)), CopyError::Failed(errno::FI_EFAULT));
        assert_eq!(copy_error(Some(3)), CopyError::Failed(errno::FI_EIO));
        assert_eq!(copy_error(None), CopyError::Failed(errno::FI_EIO));
        assert_eq!(coop_outcome(0), Ok(()));
        assert_eq!(coop_outcome(14), Err(errno::FI_EFAULT));
        assert_eq!(coop_outcome(5), Err(errno::FI_EIO));
    }

    #[test]
    fn a_short_copy_is_a_failure_not_a_success() {
        assert_eq!(copy_result(4096, Ok(4096)), Ok(()));
        assert_eq!(copy_result(0, Ok(0)), Ok(()));
        assert_eq!(
            copy_result(4096, Ok(100)),
            Err(CopyError::Failed(errno::FI_EIO)),
            "a partial copy"
        );
        assert_eq!(
            copy_result(4096, Ok(0)),
            Err(CopyError::Failed(errno::FI_EIO))
        );
        assert_eq!(
            copy_result(10, Ok(11)),
            Err(CopyError::Failed(errno::FI_EIO))
        );
        assert_eq!(copy_result(10, Err(Some(1))), Err(CopyError::Refused));
        assert_eq!(
            copy_result(10, Err(Some(14))),
            Err(CopyError::Failed(errno::FI_EFAULT))
        );
        assert_eq!(CopyError::Refused.code(), errno::FI_EIO);
        assert_eq!(CopyError::Failed(errno::FI_EFAULT).code(), errno::FI_EFAULT);
    }

    #[test]
    fn a_cts_layout_must_tile_at_most_the_operation() {
        assert!(coop_layout_ok(8, 131072, 1 << 20, 1 << 20));
        assert!(coop_layout_ok(3, 4096, 9000, 10_000));
        assert!(!coop_layout_ok(0, 0, 0, 10), "no chunk size");
        assert!(
            !coop_layout_ok(1, 4096, 10_001, 10_000),
            "more than the send"
        );
        assert!(!coop_layout_ok(2, 4096, 9000, 10_000), "too few chunks");
        assert!(!coop_layout_ok(4, 4096, 9000, 10_000), "too many chunks");
    }

    #[test]
    fn coop_spans_tile_the_copy() {
        assert_eq!(coop_span(0, 4096, 10_000), (0, 4096));
        assert_eq!(coop_span(2, 4096, 10_000), (8192, 1808));
        assert_eq!(coop_span(3, 4096, 10_000), (12288, 0));
        assert_eq!(coop_span(u64::MAX, 4096, 10_000).1, 0);
    }

    #[test]
    fn writes_and_read_answers_pick_their_path() {
        assert_eq!(write_path(100, 4000, true, false), WritePath::Inline);
        assert_eq!(write_path(5000, 4000, true, false), WritePath::Pull);
        assert_eq!(write_path(5000, 4000, false, false), WritePath::Chunked);
        assert_eq!(write_path(5000, 4000, true, true), WritePath::Chunked);
        assert_eq!(read_answer(10, 4104, false), ReadAnswer::Inline);
        assert_eq!(read_answer(5000, 4104, true), ReadAnswer::Write);
        assert_eq!(read_answer(5000, 4104, false), ReadAnswer::Chunked);
    }

    proptest::proptest! {
        #[test]
        fn coop_chunks_cover_the_copy(want in 1usize..(1 << 30), chunk in 4096usize..(1 << 22)) {
            let (c, n) = coop_chunks(want, chunk);
            proptest::prop_assert!(c >= 32 << 10 && c % 4096 == 0);
            proptest::prop_assert!(c <= chunk.max(32 << 10).next_multiple_of(4096));
            proptest::prop_assert!(n as usize * c >= want && (n as usize - 1) * c < want);
        }
    }
}
