//! What the core tells its driver: completions, connection events and
//! protocol errors.

use ofi_base::iov::IoVec;
use ofi_base::matching::MAX_IOV;
use ofi_wire::WireError;

/// Bytes the driver must copy into a receive's buffer before it reports the
/// completion that carries them (the core never writes user memory).
///
/// Only messages that arrived before their receive was posted (unexpected
/// eager messages) need a copy; everything else was read in place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CopyOut {
    /// The receive's buffer.
    pub iov: [IoVec; MAX_IOV],
    /// Entries of `iov` in use.
    pub iov_cnt: usize,
    /// Where in the buffer the bytes go (multi-receive offset).
    pub offset: usize,
    /// The bytes. Hand the vector back with [`Rx::recycle`](super::Rx::recycle)
    /// once copied to spare an allocation.
    pub bytes: Vec<u8>,
}

impl CopyOut {
    /// The destination ranges.
    pub fn iov(&self) -> &[IoVec] {
        &self.iov[..self.iov_cnt.min(MAX_IOV)]
    }
}

/// A finished receive (or peek): the fields of a tagged CQ entry plus what
/// the driver needs to finish it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecvDone {
    /// The receive's context.
    pub context: usize,
    /// CQ flags: `FI_RECV`, `FI_MSG`/`FI_TAGGED`, `FI_REMOTE_CQ_DATA`,
    /// `FI_MULTI_RECV` (the last completion of a multi-receive buffer).
    pub flags: u64,
    /// Bytes placed in the buffer (for a peek: the message length).
    pub len: usize,
    /// Address of the first byte placed (0 for peeks and discards).
    pub buf: usize,
    /// Message tag (0 for untagged messages).
    pub tag: u64,
    /// Remote CQ data (meaningful with `FI_REMOTE_CQ_DATA`).
    pub data: u64,
    /// Source fi_addr of the connection the message came on.
    pub src: u64,
    /// Bytes of the message that did not fit (`olen`). Nonzero means the
    /// driver reports an `FI_ETRUNC` error completion with this `olen`.
    pub truncated_by: usize,
    /// The flags the receive was posted with (`FI_COMPLETION` …), for
    /// selective completion.
    pub posted_flags: u64,
    /// Bytes to copy into the buffer first (unexpected eager messages).
    pub copy: Option<CopyOut>,
}

/// Why the core gave up on a connection's byte stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProtoError {
    /// A frame header did not parse.
    Wire(WireError),
    /// A well-formed frame that is impossible here (wrong state, unknown
    /// rendezvous id, lengths beyond what was agreed …).
    Violation(&'static str),
}

impl std::fmt::Display for ProtoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProtoError::Wire(e) => write!(f, "{e}"),
            ProtoError::Violation(m) => write!(f, "protocol violation: {m}"),
        }
    }
}

impl std::error::Error for ProtoError {}

/// An event for the driver. Connection events, send and one-sided
/// completions come from [`Conn::poll_event`](super::Conn::poll_event);
/// receive completions and remote CQ data from
/// [`Rx::poll_event`](super::Rx::poll_event).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// Server side: a HELLO arrived; answer with `accept` or `reject`.
    ConnRequest {
        /// The connector's address (its listening/source address for RDM).
        peer_addr: Vec<u8>,
        /// CM private data.
        private_data: Vec<u8>,
        /// The connector's protocol flags.
        proto_flags: u64,
    },
    /// The connection is up (client: ACCEPT read; server: ACCEPT written).
    Connected {
        /// The acceptor's private data (empty on the server side).
        private_data: Vec<u8>,
    },
    /// Client side: the peer rejected the connection.
    Rejected {
        /// The rejecter's private data.
        private_data: Vec<u8>,
        /// `ofi_wire::tcp::reject::*`. With `SIMULTANEOUS` the queued sends
        /// are kept for [`Conn::take_queued_sends`](super::Conn::take_queued_sends).
        reason: u64,
    },
    /// The peer ended the connection with SHUTDOWN.
    PeerShutdown,
    /// The stream ended without SHUTDOWN (EOF or a socket error).
    ConnectionLost {
        /// The error the pending operations completed with.
        err: i32,
    },
    /// The peer sent something impossible; close the connection.
    ProtocolError(ProtoError),
    /// The auth-key handshake failed (a wrong or missing proof, or only one
    /// side has a key): the connection closes (an acceptor first writes
    /// REJECT `reject::AUTH`), and a connector's operations fail with
    /// `FI_EKEYREJECTED`. Not a dead peer: a refused one.
    AuthFailed {
        /// What went wrong, for the log.
        why: &'static str,
    },
    /// A send's last byte was written.
    SendComplete {
        /// The send's context.
        context: usize,
    },
    /// A send failed.
    SendError {
        /// The send's context.
        context: usize,
        /// FI_E* error number.
        err: i32,
    },
    /// A receive (or peek) finished.
    RecvComplete(RecvDone),
    /// A receive failed (connection lost, peek found nothing …).
    RecvError {
        /// The receive's context.
        context: usize,
        /// FI_E* error number.
        err: i32,
        /// CQ flags.
        flags: u64,
        /// Tag of the message or of the receive.
        tag: u64,
    },
    /// A one-sided request completed: the target executed it and answered
    /// (read data and fetched values have landed).
    RmaComplete {
        /// The request's context.
        context: usize,
    },
    /// A one-sided request failed: the target's answer (`FI_EKEYREJECTED`,
    /// `FI_EACCES` …) or a lost connection. Nothing was written at the
    /// target when it refused the request.
    RmaError {
        /// The request's context.
        context: usize,
        /// FI_E* error number.
        err: i32,
    },
    /// A peer's write or atomic carrying remote CQ data was executed here:
    /// a receive-CQ entry that consumes no posted receive.
    RemoteCqData {
        /// CQ flags: `FI_RMA` or `FI_ATOMIC`, `FI_REMOTE_WRITE`, `FI_REMOTE_CQ_DATA`.
        flags: u64,
        /// Bytes written.
        len: usize,
        /// The remote CQ data.
        data: u64,
        /// Source fi_addr of the connection the request came on.
        src: u64,
    },
    /// A posted receive was cancelled.
    RecvCanceled {
        /// The receive's context.
        context: usize,
        /// CQ flags (`FI_MULTI_RECV` if this ends a multi-receive buffer).
        flags: u64,
        /// The receive's tag.
        tag: u64,
    },
}
